//! The propagation loop (docs/behaviour.md §7): every [`TICK`], the planner
//! ([`propagate::due_propagations`]) says which workloads to move to their sources' current
//! content and which changes are done; this is its I/O: the reads of sources of unknown
//! immutability, the triggers, the propagated heads, the Events and the SLI and gauges. What it
//! remembers between passes is a [`Ledger`].

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use super::context::{wait_synced, Ctx};
use super::propagate::{self, Plan, Propagation};
use super::shared::{event, learn_immutability, trigger_workload, workload_ref};
use super::{adopt, sli};
use crate::cache;
use crate::cluster::ObjectRef;
use crate::metrics::METRICS;
use crate::model::ids::SourceId;
use crate::model::names;

mod ledger;

pub(crate) use ledger::Ledger;

/// How often propagation looks at the cache.
const TICK: Duration = Duration::from_millis(250);

/// How often a propagation pass also computes the per-namespace gauges (workloads behind their
/// head, held pins), which walks every workload.
const METRICS_EVERY: Duration = Duration::from_secs(10);

/// Reads of sources whose immutability the cache does not know, per propagation pass.
const UNKNOWN_READS_PER_PASS: usize = 16;

/// What the loop keeps between passes.
pub(crate) struct PropagationState {
    /// The writes made and failed, the moves counted, the reads made.
    ledger: Ledger,
    /// When the per-namespace gauges were last computed.
    metrics_at: Option<Instant>,
    /// The changes the propagation SLI follows.
    pub(crate) sli: sli::Tracker,
}

impl PropagationState {
    pub(crate) fn new() -> PropagationState {
        PropagationState::with_backoff(Duration::from_secs(1), Duration::from_secs(300))
    }

    /// Failed writes are tried again after `base`, doubling up to `max`.
    pub(crate) fn with_backoff(base: Duration, max: Duration) -> PropagationState {
        PropagationState { ledger: Ledger::new(base, max), metrics_at: None, sli: Default::default() }
    }
}

pub(crate) async fn propagation_loop(ctx: Arc<Ctx>) {
    wait_synced(&ctx).await;
    let mut st = PropagationState::new();
    loop {
        tokio::time::sleep(TICK).await;
        if !ctx.leadership.is_leader() {
            st.ledger.lost_leadership();
            st.sli.clear();
            ctx.forget_seen();
            continue;
        }
        propagation_pass(&ctx, &mut st).await;
    }
}

pub(crate) async fn propagation_pass(ctx: &Ctx, st: &mut PropagationState) {
    // The API server's time, as `changed-at` is (a replica's skew would shorten the window).
    let now_ms = ctx.shared.clock.now_ms();
    // The per-namespace gauges take walking every workload: every METRICS_EVERY, not every tick.
    let metrics = st.metrics_at.is_none_or(|t| t.elapsed() >= METRICS_EVERY);
    // Passes over the whole cache run off the runtime (cache::pass): the webhook's admissions
    // share its one worker thread with this loop.
    let plan =
        cache::pass(&ctx.shared.state, |state| propagate::due_propagations(state, &ctx.shared.policy, &ctx.selector, now_ms, metrics));
    // Read as the change arrives (it is inside its settle window), so the read adds no delay;
    // a few per pass, the rest on the next ones.
    let reads = st.ledger.reads(&plan.unknown, UNKNOWN_READS_PER_PASS, Instant::now());
    learn_immutability(ctx, reads.iter(), None).await;
    note_seen(ctx);
    publish_metrics(ctx, st, &plan, now_ms, metrics);
    record_done(ctx, &mut st.ledger, &plan).await;
    trigger_plans(ctx, &mut st.ledger, &plan).await;
}

/// Templates admitted unpinned on purpose (another mode; Secrets off for the namespace):
/// adopted, not repaired, when that changes (a restart with --secrets starts a new leader,
/// which has seen every template).
fn note_seen(ctx: &Ctx) {
    cache::pass(&ctx.shared.state, |state| {
        if let Some(seen) = ctx.seen(state).as_mut() {
            let mut without_secrets = ctx.shared.policy.secrets.enabled.then(|| ctx.seen_without_secrets(state));
            adopt::note_seen(state, &ctx.shared.policy, &ctx.selector, seen, without_secrets.as_deref_mut());
        }
    });
}

/// The SLI's samples and the propagation gauges; the per-namespace ones when `metrics`.
fn publish_metrics(ctx: &Ctx, st: &mut PropagationState, plan: &Propagation, now_ms: i64, metrics: bool) {
    METRICS.propagations_waiting.store(plan.waiting as u64, Ordering::Relaxed);
    // A few lookups per change whose pods are waited for; none when nothing is.
    let sli = if plan.done.is_empty() && st.sli.rolling() == 0 {
        st.sli.pass(&plan.pending, &plan.done, now_ms, |_: &cache::SourceKey, _: &str| sli::Pods::Unseen)
    } else {
        cache::pass(&ctx.shared.state, |state| {
            st.sli.pass(&plan.pending, &plan.done, now_ms, |(ns, source): &cache::SourceKey, head: &str| {
                sli::pods_on(state, ns, source, head)
            })
        })
    };
    for d in &sli.samples {
        METRICS.propagated(*d);
    }
    for d in &sli.ready {
        METRICS.pods_ready(*d);
    }
    METRICS.propagations_pending.store(sli.pending as u64, Ordering::Relaxed);
    METRICS.propagation_oldest_pending.store(sli.oldest_pending.as_secs(), Ordering::Relaxed);
    if sli.untracked > 0 {
        tracing::debug!(untracked = sli.untracked, cap = sli::CAP, "propagation SLI: changes past the cap are not measured");
    }
    if metrics {
        st.metrics_at = Some(Instant::now());
        METRICS.clear_gauge("confighistory_workloads_behind_head");
        for (ns, n) in &plan.behind {
            METRICS.set_gauge("confighistory_workloads_behind_head", ns, *n as f64);
        }
        METRICS.clear_gauge("confighistory_held_pins");
        for (ns, n) in &plan.held {
            METRICS.set_gauge("confighistory_held_pins", ns, *n as f64);
        }
    }
}

/// Settled changes no workload is behind on: records them (the propagated head), once, with an
/// Event on the source naming how many workloads this replica moved.
async fn record_done(ctx: &Ctx, ledger: &mut Ledger, plan: &Propagation) {
    ledger.start_recording(&plan.done, Instant::now());
    for key in &plan.done {
        let now = Instant::now();
        if !ledger.should_record(key, now) {
            continue;
        }
        let (ns, source, head) = key;
        let patch = json!({"metadata": {"annotations": {names::PROPAGATED: head}}});
        match ctx.cluster.patch_source(ns, source, &patch).await {
            Ok(()) => {
                let moved = ledger.recorded(key, Instant::now());
                tracing::info!(namespace = %ns, source = %source, head = %head, "change propagated");
                if let Some(n) = moved {
                    let uid = cache::read(&ctx.shared.state).source(ns, source).map(|c| c.uid.clone());
                    let regarding = ObjectRef {
                        api_version: "v1".into(),
                        kind: source.kind_str().into(),
                        namespace: ns.clone(),
                        name: source.name.clone(),
                        uid: uid.map(|u| u.to_string()).unwrap_or_default(),
                    };
                    let note = format!("Propagated {head} to {n} workload{}", if n == 1 { "" } else { "s" });
                    event(ctx, regarding, false, "Propagated", "Propagate", note).await;
                }
            }
            Err(e) if e.code == Some(404) => ledger.record_gone(key),
            Err(e) => {
                let delay = ledger.record_failed(key, now);
                tracing::warn!(namespace = %ns, source = %source, error = %e, retry_in = ?delay, "could not record the propagated head");
            }
        }
    }
}

/// Sets the trigger on each planned workload not in flight or waiting out a failure, at the
/// write rate (a namespace at its rate waits for the next tick), with its Events.
async fn trigger_plans(ctx: &Ctx, ledger: &mut Ledger, plan: &Propagation) {
    ledger.start_triggering(&plan.plans, &plan.done, Instant::now());
    let mut changes = super::shared::Changes::new();
    for p in &plan.plans {
        let key = p.key();
        let trigger = p.trigger_value();
        if !ledger.should_trigger(&key, &trigger, Instant::now()) {
            continue;
        }
        if ctx.writes.lock().await.try_acquire(&p.namespace, Instant::now()).is_err() {
            continue; // this namespace (or the cluster) is at its rate: next tick
        }
        match trigger_workload(ctx, p, false, &mut changes).await {
            Ok(()) => {
                ledger.triggered(p, trigger.clone(), Instant::now());
                METRICS.propagation(if p.released.is_empty() { "rolled" } else { "released" });
                tracing::info!(kind = p.kind.as_str(), namespace = %p.namespace, name = %p.name, trigger = %trigger, "propagating");
                triggered_events(ctx, p).await;
            }
            Err(e) if e.code == Some(404) || e.code == Some(409) => {
                // Gone or replaced: the next pass decides from the cache again.
                METRICS.propagation("skipped");
                ledger.trigger_failed(&key, Instant::now());
            }
            Err(e) => {
                METRICS.propagation("failed");
                let (first, delay) = ledger.trigger_failed(&key, Instant::now());
                tracing::warn!(kind = p.kind.as_str(), namespace = %p.namespace, name = %p.name, error = %e, retry_in = ?delay, "propagation failed");
                if first {
                    let note = format!("Could not move to the current config: {}", e.message);
                    event(ctx, workload_ref(ctx, p), true, "ConfigPropagationFailed", "Propagate", note).await;
                }
            }
        }
    }
}

/// The Events on a workload given its trigger: what it moves to, and a hold it releases.
async fn triggered_events(ctx: &Ctx, p: &Plan) {
    let sources: Vec<String> = p.trigger.iter().map(|(s, h)| format!("{s} ({h})")).collect();
    let note = format!("Moving to the current content of {}", sources.join(", "));
    event(ctx, workload_ref(ctx, p), false, "ConfigPropagated", "Propagate", note).await;
    if !p.released.is_empty() {
        let released: Vec<String> = p.released.iter().map(SourceId::to_string).collect();
        let note = format!("{} changed after the hold an undo took: the pin moves to the new content", released.join(", "));
        event(ctx, workload_ref(ctx, p), false, "HoldReleased", "Propagate", note).await;
    }
}
