//! What the controller loops share: their context ([`Ctx`]: the port, the policy and cache, the
//! rate limiters, leadership and the templates seen), their [`Error`], and the waits they all take.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Mutex;

use super::ratelimit::Limiter;
use super::{adopt, leader};
use crate::cli::ControllerArgs;
use crate::cluster::{ApiError, Cluster};
use crate::context::Context;
use crate::model::ids::SourceId;
use crate::model::kinds::Registry;
use crate::model::selector::Selector;

/// A workload patched with a trigger is not patched again for this long while the cache catches up.
pub(crate) const IN_FLIGHT: Duration = Duration::from_secs(20);

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
    /// client that counts the controller's API calls ([`super::start`]).
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
    pub(super) seen: std::sync::Mutex<Option<adopt::Seen>>,
    /// Templates seen where Secrets were off for their namespace, while this replica leads
    /// (`adopt::decide`: adopted, not repaired, when the admin turns Secrets on there).
    /// Taken through [`Ctx::seen_without_secrets`] only.
    pub(super) seen_without_secrets: std::sync::Mutex<adopt::Seen>,
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
    pub(crate) fn forget_seen(&self) {
        *self.seen.lock().expect("seen lock") = None;
        self.seen_without_secrets.lock().expect("seen lock").clear();
    }

    /// The loops' context; `client` is used for the Lease and the checkpoint only, every other
    /// call goes through `shared.cluster` (or the `cluster` [`super::start`] sets).
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

pub(crate) async fn wait_synced(ctx: &Ctx) {
    while !ctx.shared.ready.is_ready() {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
