//! The I/O steps more than one loop takes: a workload's trigger (propagation and repair), an
//! Event, and the reads that tell the planners a source's immutability.

use serde_json::json;
use tokio::sync::Mutex;

use super::context::Ctx;
use super::propagate::{self, Plan};
use super::ratelimit::Limiter;
use crate::cache::{self, SourceKey, Watched, Writer};
use crate::cluster::watch::api_resource;
use crate::cluster::{ApiError, Event, ObjectRef};
use crate::model::names;

/// Sets the propagation trigger on a workload: one metadata merge patch, as confighistory's own
/// identity, with the uid as a precondition. The webhook re-pins while admitting it.
pub(crate) async fn trigger_workload(ctx: &Ctx, p: &Plan, repair: bool) -> Result<(), ApiError> {
    let cause = {
        let state = cache::read(&ctx.shared.state);
        trigger_change_cause(&state, p, repair)
    };
    let patch = trigger_patch(p, cause.as_deref());
    ctx.cluster.patch_workload(p.kind, &p.namespace, &p.name, &patch).await
}

/// The change-cause a plan's trigger sets (docs/behaviour.md §7.9), from the cache: the
/// workload's change-cause and confighistory's record of its own, each source's `changed-by`.
pub(crate) fn trigger_change_cause(state: &cache::State, p: &Plan, repair: bool) -> Option<String> {
    use crate::model::meta::Meta;
    let workload = state.workload(&p.key());
    let existing = workload.and_then(|w| w.annotation(names::CHANGE_CAUSE));
    let own = workload.and_then(|w| w.annotation(names::CHANGE_CAUSE_OWN));
    let sources: Vec<(String, Option<String>)> = p
        .trigger
        .keys()
        .map(|s| (s.to_string(), state.source(&p.namespace, s).and_then(|c| c.annotation(names::CHANGED_BY)).map(str::to_owned)))
        .collect();
    propagate::change_cause(existing, own, &sources, repair)
}

/// The trigger's one metadata merge patch: the trigger, the uid as a precondition, and the
/// change-cause with confighistory's record of it when one is set (in the same write, so the
/// ReplicaSet made from it copies it: what `kubectl rollout history` shows).
pub(crate) fn trigger_patch(p: &Plan, cause: Option<&str>) -> serde_json::Value {
    let mut patch = json!({"metadata": {"uid": p.uid, "annotations": {names::PROPAGATE: p.trigger_value()}}});
    if let Some(cause) = cause {
        patch["metadata"]["annotations"][names::CHANGE_CAUSE] = json!(cause);
        patch["metadata"]["annotations"][names::CHANGE_CAUSE_OWN] = json!(cause);
    }
    patch
}

/// The workload a plan moves, as an Event's subject.
pub(crate) fn workload_ref(ctx: &Ctx, p: &Plan) -> ObjectRef {
    ObjectRef {
        api_version: api_resource(Watched::Workload(p.kind), ctx.kinds).api_version,
        kind: p.kind.as_str().to_owned(),
        namespace: p.namespace.clone(),
        name: p.name.clone(),
        uid: p.uid.clone(),
    }
}

/// Records an Event (best effort: a failure is logged, never retried).
pub(crate) async fn event(ctx: &Ctx, regarding: ObjectRef, warning: bool, reason: &'static str, action: &'static str, note: String) {
    let ev = Event { regarding, warning, reason, action, note };
    if let Err(e) = ctx.cluster.publish(&ev).await {
        tracing::debug!(reason, error = %e, "could not record an Event");
    }
}

/// Reads sources the planners need to know immutability of (the cache's records are
/// metadata, docs/behaviour.md §10) and records what the reads say; `limiter` paces them.
pub(crate) async fn learn_immutability(ctx: &Ctx, sources: impl Iterator<Item = &SourceKey>, limiter: Option<&Mutex<Limiter>>) {
    for (ns, name) in sources {
        if !ctx.leadership.is_leader() {
            return;
        }
        if let Some(l) = limiter {
            Limiter::acquire(l, ns).await;
        }
        match ctx.cluster.get_source(ns, name).await {
            Ok(Some(obj)) => cache::write(&ctx.shared.state).learn_source(ns, name, &obj),
            Ok(None) => {}
            Err(e) => tracing::debug!(namespace = %ns, source = %name, error = %e, "could not read the source; retried"),
        }
    }
}
