//! Controller loops (docs/behaviour.md §7–9): propagation, adoption, repair and garbage collection.
//! One replica runs them at a time ([`leader`]); every write is idempotent, so a leader change
//! half-way loses and duplicates nothing.
//!
//! The loops read the watch cache ([`crate::cache::State`]) that the admission server keeps, and
//! decide with pure functions ([`propagate::due_propagations`], [`adopt::decide`], [`gc::plan`]);
//! this module is the thin I/O around them:
//! - every 250 ms (the cache is event-driven, so this is the reaction time): propagation;
//! - every resync interval: re-hash referenced sources (rate-limited GETs; a stale head gets a
//!   no-op touch that the webhook records as a change first seen now), adoption, repair;
//! - every GC interval: a sweep of every namespace holding snapshots, from fresh lists.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::sync::Mutex;

use crate::cache::Watched;
use crate::cache::{self, SourceKey};
use crate::cli::ControllerArgs;
use crate::cluster::watch::api_resource;
use crate::cluster::{ApiError, Cluster, Event, ObjectRef};
use crate::context::Context;
use crate::metrics::METRICS;
use crate::model::ids::{SourceId, SourceKind};
use crate::model::kinds::Registry;
use crate::model::meta::Meta;
use crate::model::names;
use crate::model::selector::Selector;
use crate::store::SourceContent;

pub mod adopt;
pub mod checkpoint;
pub mod gc;
pub mod leader;
pub mod propagate;
pub mod ratelimit;
pub mod sli;

use propagate::{Plan, WorkloadKey};
use ratelimit::{Backoff, Limiter};

/// How often propagation looks at the cache.
const TICK: Duration = Duration::from_millis(250);
/// How often a propagation pass also computes the per-namespace gauges (workloads behind their
/// head, held pins), which walks every workload.
const METRICS_EVERY: Duration = Duration::from_secs(10);
/// A workload patched with a trigger is not patched again for this long while the cache catches up.
const IN_FLIGHT: Duration = Duration::from_secs(20);

/// Why a controller step failed. Each message says what went wrong and what happens or what to do
/// next; the loops log them and retry, the `gc` command ends with them.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `--controller-namespace-selector` does not parse.
    #[error(
        "--controller-namespace-selector (CONFIGHISTORY_CONTROLLER_NAMESPACE_SELECTOR) {value:?}: {why}; give a label selector such as `a=b,c!=d`, or leave it empty for every namespace"
    )]
    Selector { value: String, why: String },
    /// A fresh read of a source failed.
    #[error("could not read {kind} {namespace}/{name}: {source}; retried next resync")]
    Read { kind: &'static str, namespace: String, name: String, source: ApiError },
    /// A source's content as read is not one (a Secret value that is no base64; the error names
    /// the key, never a value).
    #[error("{namespace}/{id}: {why}; not adopted")]
    Content { namespace: String, id: SourceId, why: crate::model::secret::Malformed },
    /// A Secret's snapshot is named under the cluster keys, which are not loaded.
    #[error("{namespace}/{id}: the cluster keys Secret snapshots are named under are not loaded; not adopted")]
    NoKeys { namespace: String, id: SourceId },
    /// The source to record an adoption on was deleted.
    #[error("{namespace}/{name} no longer exists: there is no content to record")]
    SourceGone { namespace: String, name: String },
    /// The source's content is not the one its head says: the workload did not run with it.
    #[error("{name} changed while confighistory was away; left to propagation")]
    ChangedWhileAway { namespace: String, name: String },
    /// The snapshot could not be made sure of.
    #[error(transparent)]
    Store(#[from] crate::store::Error),
    /// The cluster-wide list behind `gc` failed.
    #[error("could not list the namespaces holding snapshots: {0}; check that confighistory may list ConfigMaps (and Secrets, where they are on) in every namespace")]
    Namespaces(ApiError),
    /// A namespace's lists failed: nothing there was deleted.
    #[error("could not sweep namespace {namespace}: {source}; nothing was deleted there, run gc again")]
    Sweep { namespace: String, source: ApiError },
    /// Some deletions or last-use records failed (each printed above).
    #[error("{0} snapshot writes failed (listed above); run gc again, they are retried")]
    Unfinished(usize),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything the loops share.
pub struct Ctx {
    pub client: kube::Client,
    /// Policy, cache and Kubernetes port, shared with the webhook.
    pub shared: Arc<Context>,
    /// The Kubernetes port of the loops: `shared.cluster`, or in a process the one over the
    /// client that counts the controller's API calls ([`start`]).
    pub cluster: Arc<dyn Cluster>,
    pub args: ControllerArgs,
    pub selector: Selector,
    pub kinds: &'static Registry,
    pub leadership: leader::Leadership,
    /// Workload writes (propagation and repair): cluster-wide and per namespace.
    pub writes: Mutex<Limiter>,
    /// Reads and snapshot writes of resync (re-hash, adoption).
    pub reads: Mutex<Limiter>,
    pub identity: String,
    /// Templates seen before (repair vs adoption), from when this replica started leading.
    /// Taken through [`Ctx::seen`] only, which see.
    seen: std::sync::Mutex<Option<adopt::Seen>>,
    /// Templates seen where Secrets were off for their namespace, while this replica leads
    /// (`adopt::decide`: adopted, not repaired, when the admin turns Secrets on there).
    /// Taken through [`Ctx::seen_without_secrets`] only.
    seen_without_secrets: std::sync::Mutex<adopt::Seen>,
}

/// The lock order of the leader's passes: the cache, then `seen`, then `seen_without_secrets`.
/// The passes run on threads of their own (`cache::pass`) and overlap, and the cache's lock
/// queues a reader behind a waiting writer (a watch event). So a pass holding `seen` while it
/// waited for the cache, beside one holding the cache and wanting `seen`, with a watch event
/// waiting between them, stopped all three for good: the watches, the loops and the process's
/// exit. Taking `seen` needs the cache's guard (`_cache`), so it is always taken second.
impl Ctx {
    /// The namespace of the leader-election Lease (and of the resync checkpoint beside it).
    pub fn lease_namespace(&self) -> String {
        self.args.leader_election_namespace.clone().unwrap_or_else(|| "confighistory".into())
    }

    pub(crate) fn seen(&self, _cache: &crate::cache::State) -> std::sync::MutexGuard<'_, Option<adopt::Seen>> {
        self.seen.lock().expect("seen lock")
    }

    /// Taken after [`Ctx::seen`] when both are held.
    pub(crate) fn seen_without_secrets(&self, _cache: &crate::cache::State) -> std::sync::MutexGuard<'_, adopt::Seen> {
        self.seen_without_secrets.lock().expect("seen lock")
    }

    /// Forgets what was seen (leadership lost): takes nothing else while it holds them.
    fn forget_seen(&self) {
        *self.seen.lock().expect("seen lock") = None;
        self.seen_without_secrets.lock().expect("seen lock").clear();
    }

    /// The loops' context; `client` is used for the Lease and the checkpoint only, every other
    /// call goes through `shared.cluster` (or the `cluster` [`start`] sets).
    pub fn new(
        client: kube::Client,
        shared: Arc<Context>,
        args: ControllerArgs,
        kinds: &'static Registry,
        identity: String,
        leadership: leader::Leadership,
    ) -> Result<Ctx> {
        let selector: Selector = args
            .controller_namespace_selector
            .parse()
            .map_err(|why| Error::Selector { value: args.controller_namespace_selector.clone(), why })?;
        let now = Instant::now();
        Ok(Ctx {
            kinds,
            writes: Mutex::new(Limiter::new(
                args.propagation_qps,
                args.propagation_burst,
                args.propagation_namespace_qps,
                args.propagation_namespace_burst,
                now,
            )),
            reads: Mutex::new(Limiter::new(args.resync_qps, args.resync_qps.ceil().max(1.0) as u32, 0.0, 1, now)),
            leadership,
            identity,
            seen: std::sync::Mutex::new(None),
            seen_without_secrets: std::sync::Mutex::new(adopt::Seen::new()),
            selector,
            client,
            cluster: shared.cluster.clone(),
            shared,
            args,
        })
    }
}

/// The running loops, for a clean shutdown.
#[derive(Clone, Default)]
pub struct Handle(Arc<std::sync::OnceLock<Arc<Ctx>>>);

impl Handle {
    /// Gives the Lease up if this replica leads, so another one takes over at once.
    pub async fn shutdown(&self) {
        if let Some(ctx) = self.0.get() {
            release(ctx).await;
        }
    }
}

/// Starts the controller loops in the background; `kinds` is the registry the runtime resolved
/// once at start.
pub fn spawn(
    client: kube::Client,
    shared: Arc<Context>,
    cluster: Arc<dyn Cluster>,
    args: ControllerArgs,
    kinds: &'static Registry,
) -> Handle {
    let handle = Handle::default();
    let cell = handle.0.clone();
    tokio::spawn(async move {
        match start(client, shared, cluster, args, kinds).await {
            Ok(ctx) => {
                let _ = cell.set(ctx);
            }
            Err(e) => tracing::error!(error = %e, "controller loops did not start"),
        }
    });
    handle
}

/// Builds the shared context, starts the election and the loops; returns the context. `client`
/// and `cluster` are the loops' own (`cluster::calls::counted`: their calls are counted as the
/// controller's, docs/operations.md "Metrics"); the cache and policy are `shared`'s.
pub async fn start(
    client: kube::Client,
    shared: Arc<Context>,
    cluster: Arc<dyn Cluster>,
    args: ControllerArgs,
    kinds: &'static Registry,
) -> Result<Arc<Ctx>> {
    let identity = leader::identity();
    let lease_ns = args.leader_election_namespace.clone().unwrap_or_else(|| "confighistory".into());
    let mut ctx = Ctx::new(client.clone(), shared, args.clone(), kinds, identity.clone(), leader::Leadership::default())?;
    ctx.cluster = cluster;
    let ctx = Arc::new(ctx);
    let config = leader::Config::new(&lease_ns, &args.lease_name, identity);
    tracing::info!(identity = %config.identity, lease = %format!("{lease_ns}/{}", args.lease_name), "controller: running leader election");
    tokio::spawn(leader::run(client.clone(), config.clone(), ctx.leadership.clone()));
    tokio::spawn(propagation_loop(ctx.clone()));
    tokio::spawn(resync_loop(ctx.clone()));
    tokio::spawn(gc_loop(ctx.clone()));
    Ok(ctx)
}

/// Gives the Lease up (on shutdown), so another replica takes over without waiting for expiry.
pub async fn release(ctx: &Ctx) {
    if ctx.leadership.resign() {
        leader::release(ctx.client.clone(), &leader::Config::new(&ctx.lease_namespace(), &ctx.args.lease_name, ctx.identity.clone())).await;
    }
}

async fn wait_synced(ctx: &Ctx) {
    while !ctx.shared.synced.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// Propagation
// ---------------------------------------------------------------------------------------------

#[derive(Default)]
struct PropagationState {
    /// Workloads patched recently, with the trigger value and when.
    in_flight: HashMap<WorkloadKey, (String, Instant)>,
    /// Sources whose propagated head was just written, while the cache catches up.
    recorded: HashMap<(String, SourceId, String), Instant>,
    workload_backoff: Option<Backoff<WorkloadKey>>,
    source_backoff: Option<Backoff<(String, SourceId, String)>>,
    /// Workloads this replica moved to a change (namespace, source, head), for the source's Event.
    moved: HashMap<(String, SourceId, String), usize>,
    /// Sources read for their immutability, and when (one read a second per source at most,
    /// should the watch lag behind the reads).
    read_at: HashMap<SourceKey, Instant>,
    /// When the per-namespace gauges were last computed.
    metrics_at: Option<Instant>,
    /// The changes the propagation SLI follows.
    sli: sli::Tracker,
}

impl PropagationState {
    fn new() -> PropagationState {
        PropagationState {
            workload_backoff: Some(Backoff::new(Duration::from_secs(1), Duration::from_secs(300))),
            source_backoff: Some(Backoff::new(Duration::from_secs(1), Duration::from_secs(300))),
            ..Default::default()
        }
    }
}

async fn propagation_loop(ctx: Arc<Ctx>) {
    wait_synced(&ctx).await;
    let mut st = PropagationState::new();
    loop {
        tokio::time::sleep(TICK).await;
        if !ctx.leadership.is_leader() {
            st.in_flight.clear();
            st.sli.clear();
            ctx.forget_seen();
            continue;
        }
        propagation_pass(&ctx, &mut st).await;
    }
}

async fn propagation_pass(ctx: &Ctx, st: &mut PropagationState) {
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
    st.read_at.retain(|k, at| plan.unknown.contains(k) && at.elapsed() < Duration::from_secs(1));
    let reads: Vec<SourceKey> =
        plan.unknown.iter().filter(|k| !st.read_at.contains_key(*k)).take(UNKNOWN_READS_PER_PASS).cloned().collect();
    st.read_at.extend(reads.iter().map(|k| (k.clone(), Instant::now())));
    learn_immutability(ctx, reads.iter(), None).await;
    // Templates admitted unpinned on purpose (another mode; Secrets off for the namespace):
    // adopted, not repaired, when that changes (a restart with --secrets starts a new leader,
    // which has seen every template).
    cache::pass(&ctx.shared.state, |state| {
        if let Some(seen) = ctx.seen(state).as_mut() {
            let mut without_secrets = ctx.shared.policy.secrets.enabled.then(|| ctx.seen_without_secrets(state));
            adopt::note_seen(state, &ctx.shared.policy, &ctx.selector, seen, without_secrets.as_deref_mut());
        }
    });
    METRICS.propagations_waiting.store(plan.waiting as u64, Ordering::Relaxed);
    let sli = st.sli.pass(&plan.pending, &plan.done, now_ms);
    for d in &sli.samples {
        METRICS.propagated(*d);
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

    // Settled changes no workload is behind on: record them, once.
    let sb = st.source_backoff.as_mut().expect("set");
    st.recorded.retain(|k, at| plan.done.contains(k) && at.elapsed() < IN_FLIGHT);
    for key in &plan.done {
        let now = Instant::now();
        if !sb.ready(key, now) || st.recorded.contains_key(key) {
            continue;
        }
        let (ns, source, head) = key;
        let patch = json!({"metadata": {"annotations": {names::PROPAGATED: head}}});
        match ctx.cluster.patch_source(ns, source, &patch).await {
            Ok(()) => {
                sb.succeeded(key);
                st.recorded.insert(key.clone(), Instant::now());
                tracing::info!(namespace = %ns, source = %source, head = %head, "change propagated");
                if let Some(n) = st.moved.remove(key) {
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
            Err(e) if e.code == Some(404) => sb.succeeded(key),
            Err(e) => {
                let delay = sb.failed(key, now);
                tracing::warn!(namespace = %ns, source = %source, error = %e, retry_in = ?delay, "could not record the propagated head");
            }
        }
    }
    sb.retain(|k| plan.done.contains(k));

    st.moved.retain(|k, _| plan.done.contains(k) || plan.plans.iter().any(|p| p.namespace == k.0 && p.trigger.get(&k.1) == Some(&k.2)));
    let planned: HashSet<WorkloadKey> = plan.plans.iter().map(Plan::key).collect();
    st.in_flight.retain(|k, (_, at)| planned.contains(k) && at.elapsed() < IN_FLIGHT);
    let wb = st.workload_backoff.as_mut().expect("set");
    wb.retain(|k| planned.contains(k));
    for p in &plan.plans {
        let key = p.key();
        let trigger = p.trigger_value();
        if st.in_flight.get(&key).is_some_and(|(t, _)| *t == trigger) || !wb.ready(&key, Instant::now()) {
            continue;
        }
        if ctx.writes.lock().await.try_acquire(&p.namespace, Instant::now()).is_err() {
            continue; // this namespace (or the cluster) is at its rate: next tick
        }
        match trigger_workload(ctx, p, false).await {
            Ok(()) => {
                wb.succeeded(&key);
                st.in_flight.insert(key, (trigger.clone(), Instant::now()));
                for (source, head) in &p.trigger {
                    *st.moved.entry((p.namespace.clone(), source.clone(), head.clone())).or_default() += 1;
                }
                METRICS.propagation(if p.released.is_empty() { "rolled" } else { "released" });
                tracing::info!(kind = p.kind.as_str(), namespace = %p.namespace, name = %p.name, trigger = %trigger, "propagating");
                let sources: Vec<String> = p.trigger.iter().map(|(s, h)| format!("{s} ({h})")).collect();
                let note = format!("Moving to the current content of {}", sources.join(", "));
                event(ctx, workload_ref(ctx, p), false, "ConfigPropagated", "Propagate", note).await;
                if !p.released.is_empty() {
                    let released: Vec<String> = p.released.iter().map(SourceId::to_string).collect();
                    let note = format!("{} changed after the hold an undo took: the pin moves to the new content", released.join(", "));
                    event(ctx, workload_ref(ctx, p), false, "HoldReleased", "Propagate", note).await;
                }
            }
            Err(e) if e.code == Some(404) || e.code == Some(409) => {
                // Gone or replaced: the next pass decides from the cache again.
                METRICS.propagation("skipped");
                wb.failed(&key, Instant::now());
            }
            Err(e) => {
                METRICS.propagation("failed");
                let attempts = wb.attempts(&key);
                let delay = wb.failed(&key, Instant::now());
                tracing::warn!(kind = p.kind.as_str(), namespace = %p.namespace, name = %p.name, error = %e, retry_in = ?delay, "propagation failed");
                if attempts == 0 {
                    let note = format!("Could not move to the current config: {}", e.message);
                    event(ctx, workload_ref(ctx, p), true, "ConfigPropagationFailed", "Propagate", note).await;
                }
            }
        }
    }
}

/// Sets the propagation trigger on a workload: one metadata merge patch, as confighistory's own
/// identity, with the uid as a precondition. The webhook re-pins while admitting it.
async fn trigger_workload(ctx: &Ctx, p: &Plan, repair: bool) -> Result<(), ApiError> {
    let cause = {
        let state = cache::read(&ctx.shared.state);
        trigger_change_cause(&state, p, repair)
    };
    let patch = trigger_patch(p, cause.as_deref());
    ctx.cluster.patch_workload(p.kind, &p.namespace, &p.name, &patch).await
}

/// The change-cause a plan's trigger sets (docs/behaviour.md §7.9), from the cache: the
/// workload's change-cause and confighistory's record of its own, each source's `changed-by`.
fn trigger_change_cause(state: &cache::State, p: &Plan, repair: bool) -> Option<String> {
    use crate::model::meta::Meta;
    let workload = state.workloads.get(&p.key());
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
fn trigger_patch(p: &Plan, cause: Option<&str>) -> serde_json::Value {
    let mut patch = json!({"metadata": {"uid": p.uid, "annotations": {names::PROPAGATE: p.trigger_value()}}});
    if let Some(cause) = cause {
        patch["metadata"]["annotations"][names::CHANGE_CAUSE] = json!(cause);
        patch["metadata"]["annotations"][names::CHANGE_CAUSE_OWN] = json!(cause);
    }
    patch
}

/// The workload a plan moves, as an Event's subject.
fn workload_ref(ctx: &Ctx, p: &Plan) -> ObjectRef {
    ObjectRef {
        api_version: api_resource(Watched::Workload(p.kind), ctx.kinds).api_version,
        kind: p.kind.as_str().to_owned(),
        namespace: p.namespace.clone(),
        name: p.name.clone(),
        uid: p.uid.clone(),
    }
}

/// Records an Event (best effort: a failure is logged, never retried).
async fn event(ctx: &Ctx, regarding: ObjectRef, warning: bool, reason: &'static str, action: &'static str, note: String) {
    let ev = Event { regarding, warning, reason, action, note };
    if let Err(e) = ctx.cluster.publish(&ev).await {
        tracing::debug!(reason, error = %e, "could not record an Event");
    }
}

// ---------------------------------------------------------------------------------------------
// Resync: re-hash, adoption, repair
// ---------------------------------------------------------------------------------------------

async fn resync_loop(ctx: Arc<Ctx>) {
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
struct ResyncState {
    /// (namespace, source, template) adoption records written.
    adopted: HashSet<(String, SourceId, String)>,
    /// Workloads given a repair trigger recently, with the trigger value and when.
    repaired: HashMap<WorkloadKey, (String, Instant)>,
    /// ConfigMap sources a re-hash read found named by their `head`, with the resourceVersion it
    /// read. Any write changes the resourceVersion, which the metadata watch delivers, so a source
    /// whose cached resourceVersion is still that one is not read again: at 10,000 sources every
    /// pass read every one at the resync rate, 17 minutes of GETs at 10/s, over and over
    /// (docs/performance.md, "Scale on a real cluster").
    verified: HashMap<SourceKey, String>,
    /// The last leader's checkpoint of `verified` ([`checkpoint`]), read when this replica
    /// starts leading and used by its first re-hash; `None` until read.
    checkpoint: Option<std::collections::BTreeMap<String, String>>,
    /// The checkpoint data this replica last wrote.
    saved: Option<String>,
}

/// How often a long re-hash writes the checkpoint while it runs (and once at its end), so that a
/// leader change half-way keeps what it confirmed.
const CHECKPOINT_EVERY: Duration = Duration::from_secs(60);

/// One resync pass: re-hash, adoption, repair; `seen` are the templates seen before. The number
/// of adoptions and repairs it decided on.
async fn resync_pass(ctx: &Ctx, seen: &adopt::Seen, st: &mut ResyncState) -> (usize, usize) {
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
    for a in &decisions.adoptions {
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
    st.repaired.retain(|_, (_, at)| at.elapsed() < IN_FLIGHT);
    for p in &decisions.repairs {
        if !ctx.leadership.is_leader() {
            break;
        }
        let trigger = p.trigger_value();
        if st.repaired.get(&p.key()).is_some_and(|(t, _)| *t == trigger) {
            continue;
        }
        // Before the trigger: the plain template the outage admitted ran with the source's
        // current content (repair skips sources with a pending change, and adopt_one refuses a
        // change the webhook missed). Recording it lets an undo to that revision bring its
        // config back (docs/behaviour.md §9); when it cannot be told, an Event says so.
        let template = cache::read(&ctx.shared.state).workloads.get(&p.key()).map(|w| w.template_hash.to_string());
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
                    let message =
                        format!("The config this revision ran with ({source}) is unknown, an undo to it gets the current one: {e}");
                    event(ctx, workload_ref(ctx, p), true, "ConfigUnknown", "Repair", message).await;
                }
            }
        }
        Limiter::acquire(&ctx.writes, &p.namespace).await;
        match trigger_workload(ctx, p, true).await {
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
    // Everything present now has been seen, except the templates still waiting for repair
    // (they stay repair candidates until the webhook has pinned them) and those left undecided
    // because a source could not be read (under load): an outage's must not pass for seen.
    cache::pass(&ctx.shared.state, |state| {
        let waiting: adopt::Seen = decisions
            .repairs
            .iter()
            .filter_map(|p| Some((p.namespace.clone(), state.workloads.get(&p.key())?.template_hash.to_string())))
            .chain(decisions.deferred.iter().cloned())
            .collect();
        // Kept while the template exists: one gone is never decided about again.
        ctx.seen_without_secrets(state).retain(|ns, t| present.contains(ns, t));
        if let Some(seen) = ctx.seen(state).as_mut() {
            seen.extend_except(present, &waiting);
        }
    });
    (decisions.adoptions.len(), decisions.repairs.len())
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

/// Re-hashes every referenced source (rate-limited GETs). A stored head that does not match the
/// content means a change the webhook missed: touching the source lets the webhook record it as a
/// change first seen now (missed changes, docs/how-it-works.md). A source without a head is compared with the
/// snapshots its workloads are pinned to ([`propagate::rehash_sources`]); its touch names one of
/// them as the head, which the webhook takes from confighistory alone.
async fn rehash(ctx: &Ctx, st: &mut ResyncState) {
    if st.checkpoint.is_none() {
        st.checkpoint = Some(checkpoint::load(ctx).await);
    }
    let kept = st.checkpoint.as_ref().filter(|k| !k.is_empty());
    let verified = &mut st.verified;
    let sources = cache::pass(&ctx.shared.state, |state| {
        let sources = propagate::rehash_sources(state, &ctx.shared.policy, &ctx.selector);
        let listed: HashSet<&SourceKey> = sources.iter().map(|(k, _)| k).collect();
        verified.retain(|k, _| listed.contains(k));
        if let Some(kept) = kept {
            // What the last leader confirmed and the cache shows unchanged (the sources with a
            // head, the ones a re-hash confirms).
            let candidates = sources.iter().filter_map(|(k, _)| {
                let c = state.sources.get(k).filter(|c| c.annotation(names::HEAD).is_some())?;
                Some((k, c.resource_version.as_str()))
            });
            verified.extend(checkpoint::confirmed(candidates, kept));
        }
        let unchanged = |k: &SourceKey| {
            verified.get(k).is_some_and(|rv| state.sources.get(k).is_some_and(|c| c.resource_version.as_str() == rv.as_str()))
        };
        sources.into_iter().filter(|(k, _)| !unchanged(k)).collect::<Vec<_>>()
    });
    // Used once: later passes know from the watch what changed.
    st.checkpoint = Some(Default::default());
    let mut saved_at = Instant::now();
    // Many ConfigMaps to read (a first pass, or a lost checkpoint): pages of a cluster-wide list
    // instead of one GET each (docs/behaviour.md §7.8). What the list does not deliver as the cache
    // knows it, and Secrets, are read one by one as before.
    let (listable, mut one_by_one): (Vec<_>, Vec<_>) = sources.into_iter().partition(|((_, id), _)| id.kind == SourceKind::ConfigMap);
    if listable.len() >= LIST_AT_LEAST {
        let mut pending: HashMap<SourceKey, Vec<propagate::PinnedTo>> = listable.into_iter().collect();
        if !rehash_listed(ctx, st, &mut pending, &mut saved_at).await {
            return;
        }
        let mut rest: Vec<_> = pending.into_iter().collect();
        rest.sort_by(|a, b| a.0.cmp(&b.0));
        one_by_one.extend(rest);
    } else {
        one_by_one.extend(listable);
    }
    for ((ns, name), pins) in one_by_one {
        if !ctx.leadership.is_leader() {
            return;
        }
        if saved_at.elapsed() >= CHECKPOINT_EVERY {
            save_checkpoint(ctx, st).await;
            saved_at = Instant::now();
        }
        Limiter::acquire(&ctx.reads, &ns).await;
        let obj = match ctx.cluster.get_source(&ns, &name).await {
            Ok(Some(o)) => o,
            Ok(None) => continue,
            Err(e) => {
                tracing::debug!(namespace = %ns, source = %name, error = %e, "re-hash: read failed");
                continue;
            }
        };
        rehash_one(ctx, &mut st.verified, ns, name, &pins, &obj).await;
    }
    save_checkpoint(ctx, st).await;
}

/// From how many ConfigMap sources to re-hash a pass lists them instead of reading each.
pub const LIST_AT_LEAST: usize = 64;
/// The most objects a re-hash list page asks for.
pub const LIST_PAGE_MAX: u32 = 500;
/// The most bytes of a re-hash list page's body: a longer one is asked again in pages half the
/// size, so a page of large ConfigMaps costs at most this and its parse.
pub const LIST_PAGE_BYTES: usize = 8 << 20;

/// The list path of [`rehash`]: pages of every ConfigMap that is not a snapshot, each taking a
/// token of the resync rate, hashed and dropped as they come. A listed object is re-hashed here
/// when it is one of `pending` at the resourceVersion the cache knows (so a page never tells an
/// older content than the watch has delivered) and taken out of `pending`; what stays there is
/// read one by one after. False when this replica stopped leading.
async fn rehash_listed(
    ctx: &Ctx,
    st: &mut ResyncState,
    pending: &mut HashMap<SourceKey, Vec<propagate::PinnedTo>>,
    saved_at: &mut Instant,
) -> bool {
    let mut token: Option<String> = None;
    let mut limit = LIST_PAGE_MAX;
    let (mut pages, mut listed) = (0usize, 0usize);
    let started = Instant::now();
    loop {
        if !ctx.leadership.is_leader() {
            return false;
        }
        if saved_at.elapsed() >= CHECKPOINT_EVERY {
            save_checkpoint(ctx, st).await;
            *saved_at = Instant::now();
        }
        // One token per page, from the bucket shared by every namespace.
        Limiter::acquire(&ctx.reads, "").await;
        let page = match ctx.cluster.list_configmaps_page(token.as_deref(), limit, LIST_PAGE_BYTES).await {
            Ok(page) => page,
            Err(e) if e.reason == crate::cluster::TOO_LARGE && limit > 1 => {
                limit = (limit / 2).max(1);
                continue;
            }
            Err(e) => {
                // Expired continue token (410), no list permission, an outage: what is left is
                // read one by one.
                tracing::info!(error = %e, pages, "re-hash: listing ConfigMaps failed; reading the rest one by one");
                return true;
            }
        };
        pages += 1;
        for obj in page.items {
            let meta = &obj["metadata"];
            let (Some(ns), Some(name)) = (meta["namespace"].as_str(), meta["name"].as_str()) else { continue };
            let key: SourceKey = (ns.into(), SourceId::configmap(name));
            // Most of a page is no source to re-hash: looked up before the cache's lock is taken.
            if !pending.contains_key(&key) {
                continue;
            }
            let rv = meta["resourceVersion"].as_str().unwrap_or_default();
            let known = cache::read(&ctx.shared.state).sources.get(&key).is_some_and(|c| c.resource_version.as_str() == rv);
            if !known {
                continue;
            }
            let Some(pins) = pending.remove(&key) else { continue };
            listed += 1;
            let (ns, id) = key;
            rehash_one(ctx, &mut st.verified, ns, id, &pins, &obj).await;
        }
        // Pages that come back small may grow again.
        limit = (limit * 2).min(LIST_PAGE_MAX);
        match page.next {
            Some(next) => token = Some(next),
            None => break,
        }
    }
    tracing::info!(pages, listed, left = pending.len(), elapsed = ?started.elapsed(), "re-hash: listed ConfigMaps");
    true
}

/// Re-hashes one source read fresh (`obj`): confirmed by its head at its resourceVersion, or a
/// change made while the webhook was away, recorded now with a no-op write of its head.
async fn rehash_one(
    ctx: &Ctx,
    verified: &mut HashMap<SourceKey, String>,
    ns: compact_str::CompactString,
    name: SourceId,
    pins: &[propagate::PinnedTo],
    obj: &serde_json::Value,
) {
    cache::write(&ctx.shared.state).learn_source(&ns, &name, obj);
    if obj.immutable() {
        return; // made immutable after it was a source: never touched (docs/behaviour.md §3)
    }
    let keys = ctx.shared.policy.secrets.keys.get();
    let keys = keys.as_deref();
    let content = match SourceContent::from_object(name.kind, obj) {
        Ok(c) => c,
        Err(e) => {
            tracing::debug!(namespace = %ns, source = %name, error = %e, "re-hash: not a source's content");
            return;
        }
    };
    let Some(actual) = content.snap(obj, &ns, &name.name, keys).map(|s| s.hash(&ns, &name.name)) else { return };
    let stored = match crate::admission::annotation(obj, names::HEAD) {
        Some(head) => (!content.is_named_by(&ns, &name.name, head, keys)).then(|| head.to_owned()),
        None => propagate::missed_change(pins, &actual).map(str::to_owned),
    };
    let rv = obj["metadata"]["resourceVersion"].as_str().unwrap_or_default();
    let Some(stored) = stored else {
        // Named by its head at this resourceVersion: not read again until it changes. Only
        // ConfigMaps with a head: whether a Secret's head names it depends on the keys kept,
        // and a source without one is compared with pins, which change without it.
        if name.kind == SourceKind::ConfigMap && crate::admission::annotation(obj, names::HEAD).is_some() && !rv.is_empty() {
            verified.insert((ns, name), rv.to_owned());
        }
        return;
    };
    tracing::info!(namespace = %ns, source = %name, stored = %stored, actual = %actual, "source changed while the webhook was away; recording the change now");
    // A no-op write (or, without a head, one naming the pin): the webhook sees a stale head and
    // records the change as first seen now. At the resourceVersion read: a source written since
    // is not given a head from before that write (409, read again next pass).
    let mut patch = json!({"metadata": {"annotations": {names::HEAD: stored}}});
    if !rv.is_empty() {
        patch["metadata"]["resourceVersion"] = json!(rv);
    }
    if let Err(e) = ctx.cluster.patch_source(&ns, &name, &patch).await {
        tracing::warn!(namespace = %ns, source = %name, error = %e, "could not touch the source");
    }
}

/// Writes what the re-hash confirmed as the checkpoint ([`checkpoint`]), when it changed since
/// this replica last wrote it.
async fn save_checkpoint(ctx: &Ctx, st: &mut ResyncState) {
    let data = checkpoint::encode(&checkpoint::digests(&st.verified));
    if st.saved.as_ref() == Some(&data) || !ctx.leadership.is_leader() {
        return;
    }
    // A failure costs the next leader reads only: tried again at the next save.
    if checkpoint::save(ctx, &data).await {
        st.saved = Some(data);
    }
}

/// Touches the sources whose versioning the admin's selector changed without a write of theirs
/// ([`propagate::versioning_touches`]), rate-limited: the webhook records the change, and
/// propagation moves their workloads (to the plain name, or back to snapshots) once.
async fn touch_versioning(ctx: &Ctx) {
    let plan = || cache::pass(&ctx.shared.state, |state| propagate::versioning_touches(state, &ctx.shared.policy, &ctx.selector));
    let (mut touches, unknown) = plan();
    if !unknown.is_empty() {
        learn_immutability(ctx, unknown.iter(), Some(&ctx.reads)).await;
        touches = plan().0;
    }
    for (ns, name) in touches {
        if !ctx.leadership.is_leader() {
            return;
        }
        // Without a head (never written while a workload named it), the touch names a pin as
        // the head confighistory last knew, which the webhook takes from it alone.
        let head = {
            let state = cache::read(&ctx.shared.state);
            let head = state.source(&ns, &name).and_then(|c| c.annotation(names::HEAD)).map(str::to_owned);
            head.or_else(|| propagate::pinned_hash(&state, &ctx.shared.policy, &ns, &name))
        };
        let Some(head) = head else { continue };
        Limiter::acquire(&ctx.reads, &ns).await;
        tracing::info!(namespace = %ns, source = %name, "the excluded-sources selector changed this source's versioning; recording the change now");
        // A no-op write: the webhook sees the versioning the source was recorded with differ.
        let patch = json!({"metadata": {"annotations": {names::HEAD: head}}});
        if let Err(e) = ctx.cluster.patch_source(&ns, &name, &patch).await {
            tracing::warn!(namespace = %ns, source = %name, error = %e, "could not touch the source");
        }
    }
}

/// Reads of sources whose immutability the cache does not know, per propagation pass.
const UNKNOWN_READS_PER_PASS: usize = 16;

/// Reads sources the planners need to know immutability of (the cache's records are
/// metadata, docs/behaviour.md §10) and records what the reads say; `limiter` paces them.
async fn learn_immutability(ctx: &Ctx, sources: impl Iterator<Item = &SourceKey>, limiter: Option<&Mutex<Limiter>>) {
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

// ---------------------------------------------------------------------------------------------
// GC
// ---------------------------------------------------------------------------------------------

async fn gc_loop(ctx: Arc<Ctx>) {
    wait_synced(&ctx).await;
    let interval = Duration::from_secs(ctx.args.gc_interval.max(1));
    let settings = gc::Settings { keep: ctx.args.gc_keep, grace: Duration::from_secs(ctx.args.gc_grace) };
    loop {
        tokio::time::sleep(interval).await;
        if !ctx.leadership.is_leader() {
            continue;
        }
        gc_pass(&ctx, settings).await;
    }
}

/// One sweep of every namespace holding snapshots (from the cache) that GC may act in; Secret
/// snapshots too where the loops act on Secrets ([`propagate::kinds_in`]).
async fn gc_pass(ctx: &Ctx, settings: gc::Settings) {
    let start = Instant::now();
    let keys = ctx.shared.policy.secrets.keys.get();
    let keys = keys.as_deref();
    let namespaces: Vec<(String, bool)> = cache::pass(&ctx.shared.state, |state| {
        let policy = &ctx.shared.policy;
        let mut v: Vec<(String, bool)> = state
            .sources
            .iter()
            .filter(|((ns, id), cm)| propagate::kinds_in(state, policy, ns).contains(id.kind) && cm.snapshot_of(&id.name).is_some())
            .map(|((ns, _), _)| ns.to_string())
            .filter(|ns| gc_namespace_allowed(state, policy, &ctx.selector, ns))
            .map(|ns| {
                let secrets = propagate::kinds_in(state, policy, &ns).contains(SourceKind::Secret);
                (ns, secrets)
            })
            .collect();
        v.sort();
        v.dedup();
        v
    });
    let (mut deleted, mut total) = (0, 0);
    for (ns, secrets) in namespaces {
        if !ctx.leadership.is_leader() {
            break;
        }
        let keys = keys.filter(|_| secrets);
        // At the resync rate: a sweep lists each namespace's snapshots in full, and 1,000 of them
        // back to back took the API server and this replica from the admissions beside them
        // (docs/performance.md, "Scale on a real cluster").
        Limiter::acquire(&ctx.reads, &ns).await;
        match gc::sweep_namespace(ctx.cluster.as_ref(), &ctx.shared.clock, &ns, settings, false, keys).await {
            Ok(report) => {
                METRICS.set_gauge("confighistory_snapshots", &ns, report.snapshots as f64);
                METRICS.set_gauge("confighistory_snapshot_bytes", &ns, report.bytes as f64);
                deleted += report.deleted.len();
                total += report.snapshots;
                for e in &report.errors {
                    tracing::warn!(namespace = %ns, error = %e, "gc");
                }
            }
            Err(e) => tracing::warn!(namespace = %ns, error = %e, "gc sweep failed; retried next interval"),
        }
    }
    tracing::info!(snapshots = total, deleted, elapsed = ?start.elapsed(), "gc sweep done");
    METRICS.gc_pass(start.elapsed());
}

/// GC acts in namespaces that are not excluded, not off, not being deleted (the namespace's own
/// deletion removes everything) and selected.
fn gc_namespace_allowed(state: &crate::cache::State, policy: &crate::model::policy::Policy, selector: &Selector, ns: &str) -> bool {
    policy.in_scope(selector, ns, state.namespace(ns)).is_some_and(|m| m != crate::model::policy::Mode::Off)
}

/// `confighistory gc`: one sweep, printing every verdict; the same code as the periodic sweep.
/// `clock`: the API server's time, read off the responses of `cluster`'s client.
pub async fn run_gc_command(
    cluster: &dyn Cluster,
    clock: &crate::cluster::clock::Clock,
    policy: crate::model::policy::Policy,
    args: crate::cli::GcArgs,
) -> Result<()> {
    let settings = gc::Settings { keep: args.keep, grace: Duration::from_secs(args.grace) };
    // Secret snapshots where Secrets are on and the keys were read (docs/behaviour.md §4a).
    let keys = policy.secrets.keys.get();
    let keys = keys.as_deref();
    let namespaces = match &args.namespace_filter {
        Some(ns) => vec![ns.clone()],
        None => {
            let mut all = Vec::new();
            for kind in policy.acted_on().iter().filter(|k| *k == SourceKind::ConfigMap || keys.is_some()) {
                all.extend(cluster.namespaces_with_snapshots(kind).await.map_err(Error::Namespaces)?);
            }
            all.sort();
            all.dedup();
            all
        }
    };
    let (mut deleting, mut kept, mut errors) = (0, 0, 0);
    let start = Instant::now();
    for ns in namespaces {
        if policy.excluded_namespaces.contains(&ns) {
            continue;
        }
        let secrets = match keys {
            Some(keys) if !policy.secrets.namespaces.is_empty() => {
                let obj = cluster.get_namespace(&ns).await.map_err(|source| Error::Sweep { namespace: ns.clone(), source })?;
                policy.source_kinds(obj.as_ref()).contains(SourceKind::Secret).then_some(keys)
            }
            keys => keys,
        };
        let report = gc::sweep_namespace(cluster, clock, &ns, settings, args.dry_run, secrets)
            .await
            .map_err(|source| Error::Sweep { namespace: ns.clone(), source })?;
        print!("{report}");
        deleting += report.items.iter().filter(|i| matches!(i.verdict, gc::Verdict::Delete(_))).count();
        kept += report.items.iter().filter(|i| matches!(i.verdict, gc::Verdict::Keep(_))).count();
        errors += report.errors.len();
    }
    println!(
        "{}: {deleting} to delete, {kept} kept, {errors} errors, in {:.2}s",
        if args.dry_run { "dry run" } else { "done" },
        start.elapsed().as_secs_f64()
    );
    if errors > 0 {
        return Err(Error::Unfinished(errors));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
