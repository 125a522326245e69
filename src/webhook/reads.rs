//! Fresh reads admission makes of objects the watches do not know, bounded so that a forged
//! review cannot turn the server into an amplifier against the API server (docs/behaviour.md
//! §9a.5): namespaces and source names a review invents cost one read each at most, a few at a
//! time, and per namespace and cluster-wide a bounded number per second.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::model::ids::SourceId;

/// Fresh reads of namespaces the namespace watch does not know (created a moment ago, or
/// invented by a forged review): at most [`NamespaceReads::CONCURRENT`] at once, outside the
/// per-namespace places (an invented namespace never takes a fair share of its own), and a name
/// found missing is not read again for [`NamespaceReads::MISSING_TTL`] (at most
/// [`NamespaceReads::MISSING_MAX`] names remembered), so a flood of forged reviews costs one GET per
/// invented name at most, a few at a time (docs/behaviour.md §9a).
pub struct NamespaceReads {
    permits: tokio::sync::Semaphore,
    /// Names found missing, with when.
    missing: Mutex<std::collections::HashMap<String, Instant>>,
}

impl Default for NamespaceReads {
    fn default() -> NamespaceReads {
        NamespaceReads { permits: tokio::sync::Semaphore::new(Self::CONCURRENT), missing: Mutex::default() }
    }
}

impl NamespaceReads {
    pub const CONCURRENT: usize = 4;
    /// Short: a namespace created right after a forged review named it is read again soon.
    pub const MISSING_TTL: Duration = Duration::from_secs(5);
    pub const MISSING_MAX: usize = 1024;

    /// Whether `name` was found missing less than [`Self::MISSING_TTL`] ago.
    pub fn known_missing(&self, name: &str) -> bool {
        let missing = self.missing.lock().expect("missing namespaces lock");
        missing.get(name).is_some_and(|at| at.elapsed() < Self::MISSING_TTL)
    }

    /// Remembers that `name` does not exist; past [`Self::MISSING_MAX`] names, expired ones
    /// are dropped, then the oldest.
    pub fn record_missing(&self, name: &str) {
        let mut missing = self.missing.lock().expect("missing namespaces lock");
        if missing.len() >= Self::MISSING_MAX && !missing.contains_key(name) {
            missing.retain(|_, at| at.elapsed() < Self::MISSING_TTL);
            if missing.len() >= Self::MISSING_MAX {
                if let Some(oldest) = missing.iter().min_by_key(|(_, at)| **at).map(|(n, _)| n.clone()) {
                    missing.remove(&oldest);
                }
            }
        }
        missing.insert(name.to_owned(), Instant::now());
    }

    /// Names remembered as missing now.
    pub fn remembered(&self) -> usize {
        self.missing.lock().expect("missing namespaces lock").len()
    }

    /// A turn to read a namespace (one of [`Self::CONCURRENT`]).
    pub async fn turn(&self) -> tokio::sync::SemaphorePermit<'_> {
        self.permits.acquire().await.expect("the namespace read semaphore is never closed")
    }
}

/// Reads of source names the source watches have listed and do not know (a ConfigMap created a
/// moment ago, or a name a forged review invents): a name found missing is not read again for
/// [`SourceReads::MISSING_TTL`] while the watch still does not know it, and such reads are rate
/// limited per namespace and cluster-wide (token buckets). A name without a token is decided as
/// missing without a read: the watch delivers a real one within moments, and adoption pins a
/// workload admitted meanwhile (docs/behaviour.md §9.1). Names the watches know are always read:
/// their content is what a decision needs.
pub struct SourceReads {
    inner: Mutex<Inner>,
}

struct Inner {
    global: Bucket,
    namespaces: HashMap<String, Bucket>,
    missing: HashMap<(String, SourceId), Instant>,
}

/// A token bucket: `burst` tokens, refilled at `rate` a second.
#[derive(Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn full(burst: f64, now: Instant) -> Bucket {
        Bucket { tokens: burst, at: now }
    }
    fn refill(&mut self, rate: f64, burst: f64, now: Instant) {
        self.tokens = (self.tokens + now.duration_since(self.at).as_secs_f64() * rate).min(burst);
        self.at = now;
    }
}

impl Default for SourceReads {
    fn default() -> SourceReads {
        let now = Instant::now();
        SourceReads {
            inner: Mutex::new(Inner { global: Bucket::full(Self::GLOBAL_BURST, now), namespaces: HashMap::new(), missing: HashMap::new() }),
        }
    }
}

impl SourceReads {
    /// Unknown names read per namespace a second, and at once: one request naming the most
    /// sources a request may read ([`super::MAX_SOURCES_READ`]) is read whole.
    pub const NAMESPACE_RATE: f64 = 16.0;
    pub const NAMESPACE_BURST: f64 = 64.0;
    /// Unknown names read cluster-wide a second, and at once.
    pub const GLOBAL_RATE: f64 = 64.0;
    pub const GLOBAL_BURST: f64 = 256.0;
    /// How long a name found missing is not read again (while the watch does not know it).
    pub const MISSING_TTL: Duration = Duration::from_secs(5);
    /// Names remembered as missing, and namespaces with a bucket of their own, at most.
    pub const MISSING_MAX: usize = 4096;
    pub const NAMESPACES_MAX: usize = 4096;

    /// Whether to read `id` in `ns`, a name the watches do not know: not when it was found
    /// missing a moment ago, nor without a token of its namespace and of the cluster (taken).
    pub fn allow(&self, ns: &str, id: &SourceId) -> bool {
        self.allow_at(ns, id, Instant::now())
    }

    fn allow_at(&self, ns: &str, id: &SourceId, now: Instant) -> bool {
        let mut inner = self.inner.lock().expect("source reads lock");
        if inner.missing.get(&(ns.to_owned(), id.clone())).is_some_and(|at| now.duration_since(*at) < Self::MISSING_TTL) {
            return false;
        }
        if inner.namespaces.len() >= Self::NAMESPACES_MAX && !inner.namespaces.contains_key(ns) {
            // Buckets that have refilled say nothing a new full bucket would not.
            inner.namespaces.retain(|_, b| {
                b.refill(Self::NAMESPACE_RATE, Self::NAMESPACE_BURST, now);
                b.tokens < Self::NAMESPACE_BURST
            });
            if inner.namespaces.len() >= Self::NAMESPACES_MAX {
                return false;
            }
        }
        inner.global.refill(Self::GLOBAL_RATE, Self::GLOBAL_BURST, now);
        let bucket = inner.namespaces.entry(ns.to_owned()).or_insert_with(|| Bucket::full(Self::NAMESPACE_BURST, now));
        bucket.refill(Self::NAMESPACE_RATE, Self::NAMESPACE_BURST, now);
        if bucket.tokens < 1.0 {
            return false;
        }
        if inner.global.tokens < 1.0 {
            return false;
        }
        inner.global.tokens -= 1.0;
        if let Some(b) = inner.namespaces.get_mut(ns) {
            b.tokens -= 1.0;
        }
        true
    }

    /// Forgets that `id` was found missing in `ns` (it is being created).
    pub fn forget(&self, ns: &str, id: &SourceId) {
        self.inner.lock().expect("source reads lock").missing.remove(&(ns.to_owned(), id.clone()));
    }

    /// Remembers that `id` does not exist in `ns`; past [`Self::MISSING_MAX`] names, expired ones
    /// are dropped, then the oldest.
    pub fn record_missing(&self, ns: &str, id: &SourceId) {
        let mut inner = self.inner.lock().expect("source reads lock");
        let key = (ns.to_owned(), id.clone());
        if inner.missing.len() >= Self::MISSING_MAX && !inner.missing.contains_key(&key) {
            inner.missing.retain(|_, at| at.elapsed() < Self::MISSING_TTL);
            if inner.missing.len() >= Self::MISSING_MAX {
                if let Some(oldest) = inner.missing.iter().min_by_key(|(_, at)| **at).map(|(k, _)| k.clone()) {
                    inner.missing.remove(&oldest);
                }
            }
        }
        inner.missing.insert(key, Instant::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_namespaces_are_remembered_within_a_bound() {
        let reads = NamespaceReads::default();
        assert!(!reads.known_missing("a"));
        reads.record_missing("a");
        assert!(reads.known_missing("a"));
        for i in 0..NamespaceReads::MISSING_MAX + 10 {
            reads.record_missing(&format!("invented-{i}"));
        }
        assert_eq!(reads.remembered(), NamespaceReads::MISSING_MAX);
        // The oldest went first.
        assert!(!reads.known_missing("a"));
        assert!(reads.known_missing(&format!("invented-{}", NamespaceReads::MISSING_MAX + 9)));
    }

    #[test]
    fn unknown_source_names_are_read_at_a_bounded_rate_per_namespace() {
        let reads = SourceReads::default();
        let t0 = Instant::now();
        let id = |i: usize| SourceId::configmap(format!("invented-{i}").as_str());
        let read = |ns: &str, from: usize, n: usize, at: Instant| (from..from + n).filter(|i| reads.allow_at(ns, &id(*i), at)).count();
        assert_eq!(read("a", 0, 100, t0), 64, "a burst of one request's worth");
        assert_eq!(read("b", 0, 100, t0), 64, "another namespace has its own");
        assert_eq!(read("a", 100, 100, t0 + Duration::from_secs(1)), 16, "then the namespace's rate");
        // The cluster-wide bucket bounds many namespaces: 256 at once, then its rate.
        // At t0 + 1 s it holds 256 - 128 + 64 (refilled) - 16 = 176.
        let many: usize = (0..10).map(|n| read(&format!("ns-{n}"), 0, 64, t0 + Duration::from_secs(1))).sum();
        assert_eq!(many, 176, "reads across namespaces at once");
    }

    #[test]
    fn a_missing_source_name_is_not_read_again_for_a_while() {
        let reads = SourceReads::default();
        let id = SourceId::configmap("gone");
        assert!(reads.allow("a", &id));
        reads.record_missing("a", &id);
        assert!(!reads.allow("a", &id), "remembered");
        assert!(reads.allow("b", &id), "per namespace");
        assert!(reads.allow_at("a", &id, Instant::now() + SourceReads::MISSING_TTL), "forgotten after the TTL");
        reads.record_missing("a", &id);
        reads.forget("a", &id);
        assert!(reads.allow("a", &id), "forgotten when created");
    }
}
