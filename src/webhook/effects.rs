//! The execution of a decision's effects: snapshots made sure of or kept before the answer,
//! heads and collision Events written after it, and what the answer says when a write fails.

use std::collections::HashMap;

use tracing::Instrument;

use crate::admission::{review, Decision, Effect, Failure, Fresh, Response};
use crate::cluster::ApiError;
use crate::metrics::METRICS;
use crate::model::ids::{self, SourceId};
use crate::store;

use super::{secret_head, App};

/// Runs the effects and answers; or the source whose snapshot could not be written, and why.
/// `fresh`: what this admission read from the API server (effects may start from it).
pub(super) async fn execute(app: &App, req: &review::Request, decision: Decision, fresh: &Fresh) -> Result<Response, (SourceId, Failure)> {
    let mut names = HashMap::new();
    let secret_write = app.ctx.policy.acted_on().of(&req.kind.group, &req.kind.kind).is_some_and(|k| k.def().confidential);
    let mut warnings = Vec::new();
    for effect in &decision.effects {
        match effect {
            Effect::EnsureSnapshot { namespace, source, content, adopted, origin } => {
                let (name, collisions) =
                    store::ensure(app.ctx.cluster.as_ref(), namespace, source, content, adopted, origin, req.dry_run())
                        .await
                        .map_err(|e| (source.clone(), store_failure(e, source.kind)))?;
                if !collisions.is_empty() && !req.dry_run() {
                    record_collision(app, namespace, source, &name, &collisions);
                }
                warnings.extend(collisions.iter().map(store::Collision::warning));
                names.insert((source.clone(), content.hash()), name);
            }
            Effect::EnsureSecretSnapshot { namespace, source, content, key, frame, adopted, origin } => {
                // A decision makes this effect only with the keys loaded (admission::secret,
                // workload): without them no snapshot could be named, so nothing is pinned.
                let keys = app.ctx.policy.secrets.keys.get();
                let Some(keys) = keys.as_deref() else {
                    let message = "confighistory could not name a Secret snapshot: the cluster keys are not loaded; retrying is safe";
                    let failure = Failure {
                        what: "name a Secret snapshot".into(),
                        cause: message.into(),
                        denial: Response::deny(503, message),
                        forbidden: false,
                    };
                    return Err((source.clone(), failure));
                };
                let snap = store::Snap::Secret(content, keys, *key, *frame);
                let hash = snap.hash(namespace, &source.name);
                // A Secret write's answer never names the snapshot of its outgoing content: its
                // name holds the MAC, which pins in no template (docs/reliability.md, "Secrets").
                let unnamed = |f: Failure| if secret_write { unnamed_failure(f, &hash) } else { f };
                let (name, collisions) =
                    store::ensure_snap(app.ctx.cluster.as_ref(), namespace, source, snap, adopted, origin, req.dry_run())
                        .await
                        .map_err(|e| (source.clone(), unnamed(store_failure(e, source.kind))))?;
                if !collisions.is_empty() && !req.dry_run() {
                    record_collision(app, namespace, source, &name, &collisions);
                }
                if !secret_write {
                    warnings.extend(collisions.iter().map(store::Collision::warning));
                } else if !collisions.is_empty() {
                    warnings.push(format!("{source}: outgoing content kept under a later snapshot name (one was taken; see its Events)"));
                }
                names.insert((source.clone(), hash), name);
            }
            Effect::UseSnapshot { namespace, source, name } => {
                let snapshot = source.with_name(name.as_str());
                let read = fresh.get(&snapshot).and_then(Option::as_ref);
                store::keep(app.ctx.cluster.as_ref(), namespace, &snapshot, read, req.dry_run())
                    .await
                    .map_err(|e| (source.clone(), store_failure(e, source.kind)))?
            }
            Effect::RecordHead { namespace, source, hash } if !req.dry_run() => record_head(app, namespace, source, hash),
            Effect::RecordSecretHead { namespace, source, after } if !req.dry_run() => {
                secret_head::record(app, namespace, source, after.clone())
            }
            Effect::RecordHead { .. } | Effect::RecordSecretHead { .. } => {}
        }
    }
    let mut response = decision.finish(&names);
    for w in warnings {
        response.warn(w);
    }
    Ok(response)
}

/// Records the head a workload was just pinned to on a source that had none, in the background (a
/// no-op write the source's admission takes from confighistory alone, docs/behaviour.md §6.1); one
/// that cannot be written is logged, and the next write of the source records it.
fn record_head(app: &App, namespace: &str, source: &SourceId, hash: &str) {
    let patch = serde_json::json!({"metadata": {"annotations": {crate::model::names::HEAD: hash}}});
    let (cluster, namespace, source) = (app.ctx.cluster.clone(), namespace.to_owned(), source.clone());
    tokio::spawn(
        async move {
            if let Err(e) = cluster.patch_source(&namespace, &source, &patch).await {
                tracing::warn!(namespace = %namespace, source = %source, error = %e, "could not record the source's head");
            }
        }
        .instrument(tracing::Span::current()),
    );
}

/// Says on the source that its snapshot met collisions (docs/behaviour.md §5), in the background: the answer
/// does not wait for an Event, and one that cannot be written is logged, not retried.
fn record_collision(app: &App, namespace: &str, source: &SourceId, name: &str, collisions: &[store::Collision]) {
    let uid = crate::cache::admission_read(&app.ctx.state).source(namespace, source).map(|c| c.uid.clone()).unwrap_or_default();
    let event = store::collision_event(namespace, source, &uid, name, collisions);
    let cluster = app.ctx.cluster.clone();
    tokio::spawn(
        async move {
            if let Err(e) = cluster.publish(&event).await {
                tracing::warn!(error = %e, "could not record the collision Event");
            }
        }
        .instrument(tracing::Span::current()),
    );
}

/// `f` without the MAC `hash` (a Secret snapshot's name part) in what the answer says.
fn unnamed_failure(f: Failure, hash: &str) -> Failure {
    let hide = |t: &str| t.replace(hash, "<mac>");
    let mut denial = f.denial;
    denial.message = denial.message.as_deref().map(hide);
    Failure { what: hide(&f.what), cause: hide(&f.cause), denial, forbidden: f.forbidden }
}

/// The answer to a request whose snapshot could not be made sure of.
fn store_failure(e: store::Error, kind: ids::SourceKind) -> Failure {
    match e {
        store::Error::Api { what, source } => failure(&what, &source),
        store::Error::Race { namespace, name } => failure(&format!("create snapshot {namespace}/{name}"), &store::race_error(&name)),
        store::Error::Quota { name, source_name: source, source: e } => Failure {
            what: format!("create snapshot {name}"),
            cause: e.message.clone(),
            denial: Response::deny(
                403,
                format!(
                    "confighistory could not create snapshot {name} of {source}: {}. Raise the namespace's ResourceQuota for {resource} \
                         (count/{resource}) or delete unused snapshots; nothing was changed, retrying is safe",
                    e.message,
                    resource = kind.resource()
                ),
            ),
            forbidden: false,
        },
        store::Error::Exhausted { source_name: source, hash } => Failure {
            what: format!("find a free snapshot name for {source}"),
            cause: "every name is taken".into(),
            denial: Response::deny(
                409,
                format!("every snapshot name for {source} ({hash}) is taken; delete the {}s squatting on {source}-{hash}-*", kind.as_str()),
            ),
            forbidden: false,
        },
    }
}

/// The answer to a request whose API call `what` failed with `e` (logged and counted here).
pub(super) fn failure(what: &str, e: &ApiError) -> Failure {
    tracing::warn!(what, error = %e, "API server call failed during admission");
    METRICS.error("api");
    Failure {
        what: what.to_owned(),
        cause: e.message.clone(),
        denial: Response::deny(
            503,
            format!("confighistory could not {what}: API server said: {}. Nothing was changed; retrying is safe", e.message),
        ),
        // A quota's refusal is a 403 too, but comes back as store::Error::Quota, never here.
        forbidden: e.code == Some(403),
    }
}
