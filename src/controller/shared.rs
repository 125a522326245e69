//! The I/O steps more than one loop takes: a workload's trigger (propagation and repair), an
//! Event, and the reads that tell the planners a source's immutability.

use std::collections::{BTreeSet, HashMap};

use serde_json::json;
use tokio::sync::Mutex;

use super::context::Ctx;
use super::propagate::{self, Plan};
use super::ratelimit::Limiter;
use crate::cache::{self, SourceKey, Watched, Writer};
use crate::cluster::watch::api_resource;
use crate::cluster::{ApiError, Event, ObjectRef};
use crate::model::ids::{SourceId, SourceKind};
use crate::model::names;
use crate::model::snapshot::{self, ContentRef};

/// What changed in each ConfigMap source of a trigger (`admission::settings::summary`), by
/// (namespace, source, snapshot the workload ran, head): one pass reads each pair once, however
/// many workloads move with it.
pub(crate) type Changes = HashMap<(String, SourceId, String, String), Option<String>>;

/// Sources of one trigger whose change is summarised: the change-cause holds 200 characters, so
/// a summary of later sources would be cut away after reading them.
const MAX_SUMMARISED: usize = 3;

/// Sets the propagation trigger on a workload: one metadata merge patch, as confighistory's own
/// identity, with the uid as a precondition. The webhook re-pins while admitting it.
pub(crate) async fn trigger_workload(ctx: &Ctx, p: &Plan, repair: bool, changes: &mut Changes) -> Result<(), ApiError> {
    let wanted = if repair { Vec::new() } else { moves(&cache::read(&ctx.shared.state), p) };
    let mut what = HashMap::new();
    for (source, ran) in wanted {
        let head = &p.trigger[&source];
        let key = (p.namespace.clone(), source.clone(), ran.clone(), head.clone());
        if let std::collections::hash_map::Entry::Vacant(e) = changes.entry(key.clone()) {
            e.insert(what_changed(ctx, &p.namespace, &source, &ran, head).await);
        }
        what.insert(source, changes[&key].clone());
    }
    let cause = {
        let state = cache::read(&ctx.shared.state);
        trigger_change_cause(&state, p, repair, &what)
    };
    let patch = trigger_patch(p, cause.as_deref());
    ctx.cluster.patch_workload(p.kind, &p.namespace, &p.name, &patch).await
}

/// The first [`MAX_SUMMARISED`] ConfigMap sources of a plan's trigger with the one snapshot of
/// each the workload runs now (a source it reads by its plain name, or through two snapshots,
/// has no one content to compare with). Secrets are left out: their values are never
/// read for a summary.
fn moves(state: &cache::State, p: &Plan) -> Vec<(SourceId, String)> {
    let Some(w) = state.workload(&p.key()) else { return Vec::new() };
    p.trigger
        .keys()
        .filter(|s| s.kind == SourceKind::ConfigMap)
        .take(MAX_SUMMARISED)
        .filter_map(|s| {
            let ran: BTreeSet<&str> = w
                .refs
                .iter()
                .filter(|r| r.kind == s.kind && state.snapshot_of(&p.namespace, r).is_some_and(|(of, _)| of == *s))
                .map(|r| r.name.as_str())
                .collect();
            let mut ran = ran.into_iter();
            match (ran.next(), ran.next()) {
                (Some(name), None) => Some((s.clone(), name.to_owned())),
                _ => None,
            }
        })
        .collect()
}

/// What changed from snapshot `ran` to the source's content at `head`: both read fresh, each
/// checked to hold the content its name (or the trigger) promises, else nothing is said. The
/// name, which the workload references, is the promise: not the snapshot's labels.
async fn what_changed(ctx: &Ctx, ns: &str, source: &SourceId, ran: &str, head: &str) -> Option<String> {
    let old = ctx.cluster.get_source(ns, &source.with_name(ran)).await.ok()??;
    let old_content = ContentRef::from_object(&old);
    if snapshot::parse_name(ran).is_none_or(|(_, hash, _)| old_content.hash() != hash) {
        return None;
    }
    let new = ctx.cluster.get_source(ns, source).await.ok()??;
    let new_content = ContentRef::from_object(&new);
    if new_content.hash() != head {
        return None; // changed again since the plan: the webhook pins what it reads then
    }
    crate::admission::settings::summary(&old_content, &new_content, WHAT_ROOM)
}

/// Room for what changed in one source: the change-cause's whole line is
/// [`propagate::MAX_CHANGE_CAUSE`], and its sources and authors need some of it.
const WHAT_ROOM: usize = 120;

/// The change-cause a plan's trigger sets (docs/behaviour.md §7.9), from the cache: the
/// workload's change-cause and confighistory's record of its own, each source's `changed-by`;
/// and what changed in each source `what` names.
pub(crate) fn trigger_change_cause(
    state: &cache::State,
    p: &Plan,
    repair: bool,
    what: &HashMap<SourceId, Option<String>>,
) -> Option<String> {
    use crate::model::meta::Meta;
    let workload = state.workload(&p.key());
    let existing = workload.and_then(|w| w.annotation(names::CHANGE_CAUSE));
    let own = workload.and_then(|w| w.annotation(names::CHANGE_CAUSE_OWN));
    let sources: Vec<propagate::Changed> = p
        .trigger
        .keys()
        .map(|s| propagate::Changed {
            source: s.to_string(),
            by: state.source(&p.namespace, s).and_then(|c| c.annotation(names::CHANGED_BY)).map(str::to_owned),
            what: what.get(s).cloned().flatten(),
        })
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::json;

    use super::*;
    use crate::cache::{State, Writer};
    use crate::model::kinds::Kind;
    use crate::model::snapshot;

    fn h(c: char) -> String {
        std::iter::repeat_n(c, snapshot::HASH_LEN).collect()
    }

    /// docs/behaviour.md §7.9: what changed is read for ConfigMaps only (a Secret's values are
    /// never read for a summary), for a source the workload runs through one snapshot, and for the
    /// first sources only (the change-cause holds 200 characters).
    #[test]
    fn only_configmaps_run_through_one_snapshot_are_summarised_and_only_the_first() {
        let mut state = State::default();
        // Secrets on: the cache records a workload's Secret references too.
        state.set_source_kinds(crate::model::ids::SourceKinds::WITH_SECRETS);
        state.apply_namespace(&json!({"metadata": {"name": "ns"}}));
        let mut volumes = vec![
            json!({"name": "s", "secret": {"secretName": snapshot::name("db", &h('s'), 0)}}),
            json!({"name": "p", "configMap": {"name": "plain"}}),
            json!({"name": "t1", "configMap": {"name": snapshot::name("two", &h('a'), 0)}}),
            json!({"name": "t2", "configMap": {"name": snapshot::name("two", &h('b'), 0)}}),
        ];
        volumes.extend(
            (0..5).map(|i| json!({"name": format!("c{i}"), "configMap": {"name": snapshot::name(&format!("cfg{i}"), &h('c'), 0)}})),
        );
        let w = json!({"metadata": {"namespace": "ns", "name": "app", "uid": "u"},
            "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i"}], "volumes": volumes}}}});
        state.apply_workload(Kind::Deployment, &w);
        let plan = |trigger: BTreeMap<SourceId, String>| Plan {
            kind: Kind::Deployment,
            namespace: "ns".into(),
            name: "app".into(),
            uid: "u".into(),
            trigger,
            released: Vec::new(),
            undone: Vec::new(),
            unknown: Vec::new(),
        };
        let summarised = |p: &Plan| -> Vec<String> { moves(&state, p).into_iter().map(|(s, ran)| format!("{s} {ran}")).collect() };
        let ran = |s: &str| format!("{s} {}", snapshot::name(s, &h('c'), 0));
        // A Secret, a plain reference and a source run through two snapshots: none summarised.
        let mixed: BTreeMap<SourceId, String> = [
            (SourceId::new(SourceKind::Secret, "db"), h('t')),
            (SourceId::configmap("plain"), h('d')),
            (SourceId::configmap("two"), h('d')),
            (SourceId::configmap("cfg0"), h('d')),
        ]
        .into();
        assert_eq!(summarised(&plan(mixed)), [ran("cfg0")]);
        assert!(summarised(&plan([(SourceId::new(SourceKind::Secret, "db"), h('t'))].into())).is_empty(), "a Secret is never read");
        // Five ConfigMaps: the first three.
        let five: BTreeMap<SourceId, String> = (0..5).map(|i| (SourceId::configmap(format!("cfg{i}")), h('d'))).collect();
        assert_eq!(summarised(&plan(five)), [ran("cfg0"), ran("cfg1"), ran("cfg2")]);
    }
}
