//! What the webhook and the controller loops share: the policy, the watch-fed cache, the
//! Kubernetes port, and whether the caches have delivered their first lists. Built once per
//! process (`crate::runtime`), or directly by tests over an in-memory cluster.

use std::sync::Arc;

use crate::cache::{Lock, Ready};
use crate::cluster::clock::Clock;
use crate::cluster::Cluster;
use crate::model::kinds::Registry;
use crate::model::policy::Policy;

pub struct Context {
    pub policy: Policy,
    pub state: Arc<Lock>,
    pub cluster: Arc<dyn Cluster>,
    /// Whether the watches have delivered their first lists: the cache's readiness
    /// ([`crate::cache::Readiness`]), read without its lock.
    pub ready: Ready,
    /// The API server's time: `changed-at`, the settle window and GC's last-use records use it,
    /// never a replica's own clock alone.
    pub clock: Arc<Clock>,
    /// The kinds handled (the built-ins unless set with [`Context::with_kinds`]).
    pub kinds: &'static Registry,
}

impl Context {
    /// A context whose caches are ready once the watches' first lists are in (`state`'s readiness).
    pub fn new(policy: Policy, state: Arc<Lock>, cluster: Arc<dyn Cluster>) -> Context {
        let ready = state.ready();
        Context { policy, state, cluster, ready, clock: Arc::new(Clock::system()), kinds: Registry::builtin() }
    }

    /// A context whose caches count as synced: for tests and tools that fill `state` themselves.
    pub fn synced(policy: Policy, state: Arc<Lock>, cluster: Arc<dyn Cluster>) -> Context {
        let ctx = Context::new(policy, state, cluster);
        ctx.ready.assume_ready();
        ctx
    }

    /// The same context handling `kinds`, in its cache too (one registry for admission and loops).
    pub fn with_kinds(mut self, kinds: &'static Registry) -> Context {
        self.kinds = kinds;
        self.state.write().set_kinds(kinds);
        self
    }

    /// The same context telling time with `clock` (the one fed by the kube client's responses).
    pub fn with_clock(mut self, clock: Arc<Clock>) -> Context {
        self.clock = clock;
        self
    }
}
