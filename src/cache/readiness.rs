//! Readiness: which watches have delivered their first list, and whether every watch readiness
//! waits for has. One signal, read two ways: per watch under the cache's lock (admission's
//! "the watch listed it and does not know it", [`super::State::namespace_unlisted`]), and as a
//! whole without it ([`Ready`]: the health endpoint, the controller loops' start).

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::watched::Watched;

/// Which watches have synced. Written by the writer only ([`super::Event::Relisted`]).
#[derive(Debug, Default)]
pub struct Readiness {
    /// The names of the watches that have delivered their first list.
    synced: HashSet<&'static str>,
    ready: Ready,
}

/// Whether every watch readiness waits for has delivered its first list: a handle read without
/// the cache's lock, shared by the context, the health endpoint and the loops.
#[derive(Clone, Debug, Default)]
pub struct Ready(Arc<AtomicBool>);

impl Ready {
    pub fn is_ready(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// Counts the caches as synced: for tests and tools that fill the state themselves, with no
    /// watch to wait for.
    pub fn assume_ready(&self) {
        self.0.store(true, Ordering::Relaxed)
    }
}

impl Readiness {
    /// Whether the watch `what` has delivered its first list.
    pub fn has_synced(&self, what: Watched) -> bool {
        self.synced.contains(what.name())
    }

    /// Whether every watch readiness waits for has delivered its first list.
    pub fn is_ready(&self) -> bool {
        self.ready.is_ready()
    }

    /// The handle that says so without the cache's lock.
    pub fn ready(&self) -> Ready {
        self.ready.clone()
    }

    /// The watch `what` delivered its first list (or a relist). Readiness waits for the watches
    /// of `awaited`; `true` when this one made it ready.
    pub(super) fn synced(&mut self, what: Watched, awaited: impl IntoIterator<Item = Watched>) -> bool {
        self.synced.insert(what.name());
        if self.ready.is_ready() || !awaited.into_iter().all(|w| self.has_synced(w)) {
            return false;
        }
        self.ready.0.store(true, Ordering::Relaxed);
        true
    }
}
