//! The resync loop (docs/behaviour.md §7.8, §9): every resync interval, the re-hash of
//! referenced sources ([`super::rehash`]), the touches of sources whose versioning the admin's
//! selector changed, then adoption and repair as [`adopt::decide`] plans them; this is their I/O.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::adopt;
use super::context::{wait_synced, Ctx, Error, Result, IN_FLIGHT};
use super::propagate::{Plan, WorkloadKey};
use super::ratelimit::Limiter;
use super::rehash::{rehash, touch_versioning};
use super::shared::{event, learn_immutability, trigger_workload, workload_ref};
use crate::cache::{self, SourceKey};
use crate::metrics::METRICS;
use crate::model::ids::SourceId;
use crate::model::meta::Meta;
use crate::model::names;
use crate::store::SourceContent;

pub(crate) async fn resync_loop(ctx: Arc<Ctx>) {
    wait_synced(&ctx).await;
    let mut st = ResyncState::default();
    let interval = Duration::from_secs(ctx.args.resync_interval.max(1));
    loop {
        if !ctx.leadership.is_leader() {
            ctx.forget_seen();
            // Leading again later, it takes the checkpoint of the leaders between, and writes its
            // own even when it equals what this replica wrote before them.
            st.checkpoint = None;
            st.saved = None;
            tokio::time::sleep(Duration::from_millis(500)).await;
            continue;
        }
        let started = Instant::now();
        // What "seen before" means starts when this replica starts leading.
        let seen = cache::pass(&ctx.shared.state, |state| ctx.seen(state).get_or_insert_with(|| adopt::current_templates(state)).clone());
        let (adoptions, repairs) = resync_pass(&ctx, &seen, &mut st).await;
        // How long a pass takes at the cluster's scale, and what it wrote (docs/performance.md).
        tracing::info!(adoptions, repairs, elapsed = ?started.elapsed(), "resync pass done");
        METRICS.resync_pass(started.elapsed());
        let rest = interval.saturating_sub(started.elapsed());
        tokio::time::sleep(rest.max(Duration::from_millis(500))).await;
    }
}

/// What the resync loop remembers between passes.
#[derive(Default)]
pub(crate) struct ResyncState {
    /// (namespace, source, template) adoption records written.
    pub(crate) adopted: HashSet<(String, SourceId, String)>,
    /// Workloads given a repair trigger recently, with the trigger value and when.
    pub(crate) repaired: HashMap<WorkloadKey, (String, Instant)>,
    /// ConfigMap sources a re-hash read found named by their `head`, with the resourceVersion it
    /// read. Any write changes the resourceVersion, which the metadata watch delivers, so a source
    /// whose cached resourceVersion is still that one is not read again: at 10,000 sources every
    /// pass read every one at the resync rate, 17 minutes of GETs at 10/s, over and over
    /// (docs/performance.md, "Scale on a real cluster").
    pub(crate) verified: HashMap<SourceKey, String>,
    /// The last leader's checkpoint of `verified` ([`super::checkpoint`]), read when this replica
    /// starts leading and used by its first re-hash; `None` until read.
    pub(crate) checkpoint: Option<std::collections::BTreeMap<String, String>>,
    /// The checkpoint data this replica last wrote.
    pub(crate) saved: Option<String>,
}

/// How often a long re-hash writes the checkpoint while it runs (and once at its end), so that a
/// leader change half-way keeps what it confirmed.
pub(crate) const CHECKPOINT_EVERY: Duration = Duration::from_secs(60);

/// One resync pass: re-hash, adoption, repair; `seen` are the templates seen before. The number
/// of adoptions and repairs it decided on.
pub(crate) async fn resync_pass(ctx: &Ctx, seen: &adopt::Seen, st: &mut ResyncState) -> (usize, usize) {
    rehash(ctx, st).await;
    touch_versioning(ctx).await;
    if !ctx.leadership.is_leader() {
        return (0, 0);
    }
    // The templates this pass decides about: only these count as seen when it ends. A workload
    // that arrives while the pass runs (its writes are rate-limited, so that can take long) was
    // not looked at; marking it seen would adopt an outage's template instead of repairing it.
    let decide = || {
        cache::pass(&ctx.shared.state, |state| {
            let without_secrets = ctx.seen_without_secrets(state).clone();
            (adopt::decide(state, &ctx.shared.policy, &ctx.selector, seen, &without_secrets, &st.adopted), adopt::current_templates(state))
        })
    };
    let (mut decisions, mut present) = decide();
    if !decisions.unknown.is_empty() {
        learn_immutability(ctx, decisions.unknown.iter(), Some(&ctx.reads)).await;
        (decisions, present) = decide();
    }
    adopt_all(ctx, &decisions.adoptions, st).await;
    st.repaired.retain(|_, (_, at)| at.elapsed() < IN_FLIGHT);
    for p in &decisions.repairs {
        if !ctx.leadership.is_leader() {
            break;
        }
        repair_one(ctx, p, st).await;
    }
    mark_seen(ctx, &decisions, present);
    (decisions.adoptions.len(), decisions.repairs.len())
}

/// Records the adoptions the pass decided on, while this replica leads.
async fn adopt_all(ctx: &Ctx, adoptions: &[adopt::Adoption], st: &mut ResyncState) {
    for a in adoptions {
        if !ctx.leadership.is_leader() {
            break;
        }
        Limiter::acquire(&ctx.reads, &a.namespace).await;
        match adopt_one(ctx, a).await {
            Ok(name) => {
                tracing::info!(namespace = %a.namespace, source = %a.source, snapshot = %name, templates = a.templates.len(), "adopted");
                st.adopted.extend(a.templates.iter().map(|t| (a.namespace.clone(), a.source.clone(), t.clone())));
            }
            Err(e) => tracing::warn!(namespace = %a.namespace, source = %a.source, error = %e, "adoption failed; retried next resync"),
        }
    }
}

/// Repairs one workload admitted while the webhook was away (docs/behaviour.md §9.2): the
/// adoption records of the config it ran with, then its trigger, with their Events; not again
/// while the same trigger is in flight.
async fn repair_one(ctx: &Ctx, p: &Plan, st: &mut ResyncState) {
    let trigger = p.trigger_value();
    if st.repaired.get(&p.key()).is_some_and(|(t, _)| *t == trigger) {
        return;
    }
    // Before the trigger: the plain template the outage admitted ran with the source's
    // current content (repair skips sources with a pending change, and adopt_one refuses a
    // change the webhook missed). Recording it lets an undo to that revision bring its
    // config back (docs/behaviour.md §9); when it cannot be told, an Event says so.
    let template = cache::read(&ctx.shared.state).workload(&p.key()).map(|w| w.template_hash.to_string());
    // A source going back to an adopted snapshot (an undo) has its record already; one whose
    // revision's config is unknown gets none (the head's content is not what it ran with).
    for source in &p.unknown {
        let message = format!(
            "The config this revision ran with ({source}) is unknown: the revision predates confighistory and no adoption record lists it; it gets the current one ({})",
            p.trigger[source]
        );
        event(ctx, workload_ref(ctx, p), true, "ConfigUnknown", "Repair", message).await;
    }
    let recorded = |s: &&SourceId| template.is_some() && !p.undone.contains(*s) && !p.unknown.contains(*s);
    for source in p.trigger.keys().filter(recorded) {
        let a = adopt::Adoption {
            namespace: p.namespace.clone(),
            source: source.clone(),
            templates: template.iter().map(|t| t.to_string()).collect(),
        };
        if st.adopted.contains(&(a.namespace.clone(), a.source.clone(), a.templates[0].clone())) {
            continue;
        }
        Limiter::acquire(&ctx.reads, &p.namespace).await;
        match adopt_one(ctx, &a).await {
            Ok(_) => {
                st.adopted.insert((a.namespace.clone(), a.source.clone(), a.templates[0].clone()));
            }
            Err(e) => {
                let message = format!("The config this revision ran with ({source}) is unknown, an undo to it gets the current one: {e}");
                event(ctx, workload_ref(ctx, p), true, "ConfigUnknown", "Repair", message).await;
            }
        }
    }
    Limiter::acquire(&ctx.writes, &p.namespace).await;
    match trigger_workload(ctx, p, true, &mut Default::default()).await {
        Ok(()) => {
            tracing::info!(kind = p.kind.as_str(), namespace = %p.namespace, name = %p.name, trigger = %trigger, "repairing");
            st.repaired.insert(p.key(), (trigger, Instant::now()));
            event(ctx, workload_ref(ctx, p), false, "ConfigRepaired", "Repair", repair_note(ctx, p)).await;
        }
        Err(e) => {
            tracing::warn!(kind = p.kind.as_str(), namespace = %p.namespace, name = %p.name, error = %e, "repair failed; retried next resync")
        }
    }
}

/// Marks what the pass looked at as seen (`present`, the templates it decided about).
fn mark_seen(ctx: &Ctx, decisions: &adopt::Decisions, present: adopt::Seen) {
    // Everything present now has been seen, except the templates still waiting for repair
    // (they stay repair candidates until the webhook has pinned them) and those left undecided
    // because a source could not be read (under load): an outage's must not pass for seen.
    cache::pass(&ctx.shared.state, |state| {
        let waiting: adopt::Seen = decisions
            .repairs
            .iter()
            .filter_map(|p| Some((p.namespace.clone(), state.workload(&p.key())?.template_hash.to_string())))
            .chain(decisions.deferred.iter().cloned())
            .collect();
        // Kept while the template exists: one gone is never decided about again.
        ctx.seen_without_secrets(state).retain(|ns, t| present.contains(ns, t));
        if let Some(seen) = ctx.seen(state).as_mut() {
            seen.extend_except(present, &waiting);
        }
    });
}

/// What a repair's Event says: pinning, and for an undo, the config it goes back to and whether
/// that is held against the current one.
fn repair_note(ctx: &Ctx, p: &Plan) -> String {
    let mut note = "Admitted with mutable config references while confighistory was unreachable; pinning them".to_owned();
    let state = cache::read(&ctx.shared.state);
    for source in &p.undone {
        let hash = &p.trigger[source];
        let head = state.source(&p.namespace, source).and_then(|c| c.annotation(names::HEAD));
        note.push_str(&format!("; undone to a revision from before confighistory: {source} back to its config {hash}"));
        if head.is_some_and(|h| h != hash) {
            note.push_str(&format!(", held (the current config is {})", head.unwrap_or_default()));
        }
    }
    note
}

/// Records the templates in the adoption record of the snapshot of the source's current content.
async fn adopt_one(ctx: &Ctx, a: &adopt::Adoption) -> Result<String> {
    let (namespace, name) = (a.namespace.clone(), a.source.name.clone());
    let obj = match ctx.cluster.get_source(&a.namespace, &a.source).await {
        Ok(Some(obj)) => obj,
        Ok(None) => return Err(Error::SourceGone { namespace, name }),
        Err(source) => return Err(Error::Read { kind: a.source.kind_str(), namespace, name, source }),
    };
    let keys = ctx.shared.policy.secrets.keys.get();
    let keys = keys.as_deref();
    let content = SourceContent::from_object(a.source.kind, &obj).map_err(|e| Error::Content {
        namespace: namespace.clone(),
        id: a.source.clone(),
        why: e,
    })?;
    let snap = content
        .snap(&obj, &a.namespace, &a.source.name, keys)
        .ok_or_else(|| Error::NoKeys { namespace: namespace.clone(), id: a.source.clone() })?;
    if crate::admission::annotation(&obj, names::HEAD).is_some_and(|h| !content.is_named_by(&a.namespace, &a.source.name, h, keys)) {
        // Changed while the webhook was away: the workload did not run with this content.
        return Err(Error::ChangedWhileAway { namespace, name });
    }
    // Who wrote it, as the source recorded it for this content; content from before
    // confighistory tracked the source says so (docs/behaviour.md §5.2, §9).
    let origin = crate::model::snapshot::Origin::of_source(&obj, &snap.hash(&a.namespace, &a.source.name));
    match crate::store::ensure_snap(ctx.cluster.as_ref(), &a.namespace, &a.source, snap, &a.templates, &origin, false).await {
        Ok((name, collisions)) => {
            if !collisions.is_empty() {
                let uid = obj["metadata"]["uid"].as_str().unwrap_or_default();
                let ev = crate::store::collision_event(&a.namespace, &a.source, uid, &name, &collisions);
                if let Err(e) = ctx.cluster.publish(&ev).await {
                    tracing::debug!(reason = ev.reason, error = %e, "could not record an Event");
                }
            }
            Ok(name)
        }
        Err(e) => {
            if matches!(e, crate::store::Error::Api { .. } | crate::store::Error::Race { .. }) {
                METRICS.error("api");
            }
            Err(e.into())
        }
    }
}
