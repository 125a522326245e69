//! Token buckets (cluster-wide and per namespace) and exponential backoff for retries.
//!
//! Pure: every method takes the current [`Instant`], so tests drive time by hand.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::{Duration, Instant};

/// A token bucket: `rate` tokens per second, at most `burst` saved up.
#[derive(Clone, Debug)]
pub struct TokenBucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket. A rate of zero or less means unlimited.
    pub fn new(rate: f64, burst: u32, now: Instant) -> TokenBucket {
        let burst = f64::from(burst.max(1));
        TokenBucket { rate, burst, tokens: burst, last: now }
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.rate).min(self.burst);
        self.last = now;
    }

    /// How long until a token is available (zero when one is).
    pub fn wait_time(&mut self, now: Instant) -> Duration {
        if self.rate <= 0.0 {
            return Duration::ZERO;
        }
        self.refill(now);
        if self.tokens >= 1.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64((1.0 - self.tokens) / self.rate)
        }
    }

    fn take(&mut self) {
        if self.rate > 0.0 {
            self.tokens -= 1.0;
        }
    }
}

/// A cluster-wide bucket and one bucket per namespace: a write needs a token from both.
#[derive(Debug)]
pub struct Limiter {
    cluster: TokenBucket,
    namespaces: HashMap<String, TokenBucket>,
    ns_rate: f64,
    ns_burst: u32,
}

impl Limiter {
    pub fn new(rate: f64, burst: u32, ns_rate: f64, ns_burst: u32, now: Instant) -> Limiter {
        Limiter { cluster: TokenBucket::new(rate, burst, now), namespaces: HashMap::new(), ns_rate, ns_burst }
    }

    /// Takes a token for a write in `ns` when both buckets have one; otherwise says how long
    /// to wait and takes nothing.
    pub fn try_acquire(&mut self, ns: &str, now: Instant) -> Result<(), Duration> {
        let (ns_rate, ns_burst) = (self.ns_rate, self.ns_burst);
        let bucket = self.namespaces.entry(ns.to_owned()).or_insert_with(|| TokenBucket::new(ns_rate, ns_burst, now));
        let wait = bucket.wait_time(now).max(self.cluster.wait_time(now));
        if wait > Duration::ZERO {
            return Err(wait);
        }
        bucket.take();
        self.cluster.take();
        Ok(())
    }

    /// Waits (asynchronously) until a token for `ns` is available and takes it.
    pub async fn acquire(limiter: &tokio::sync::Mutex<Limiter>, ns: &str) {
        loop {
            let wait = match limiter.lock().await.try_acquire(ns, Instant::now()) {
                Ok(()) => return,
                Err(w) => w,
            };
            tokio::time::sleep(wait).await;
        }
    }

    /// Forgets namespaces whose buckets are full again (they would be recreated full).
    pub fn prune(&mut self, now: Instant) {
        let (rate, burst) = (self.ns_rate, f64::from(self.ns_burst.max(1)));
        self.namespaces.retain(|_, b| {
            b.refill(now);
            rate > 0.0 && b.tokens < burst
        });
    }
}

/// Exponential backoff per key: 1 s, 2 s, 4 s … up to `max`.
#[derive(Debug)]
pub struct Backoff<K> {
    base: Duration,
    max: Duration,
    entries: HashMap<K, (u32, Instant)>,
}

impl<K: Hash + Eq + Clone> Backoff<K> {
    pub fn new(base: Duration, max: Duration) -> Backoff<K> {
        Backoff { base, max, entries: HashMap::new() }
    }

    /// Whether `key` may be tried now.
    pub fn ready(&self, key: &K, now: Instant) -> bool {
        self.entries.get(key).is_none_or(|(_, next)| now >= *next)
    }

    /// Records a failure; returns the delay before the next try.
    pub fn failed(&mut self, key: &K, now: Instant) -> Duration {
        let attempts = self.entries.get(key).map(|(a, _)| *a).unwrap_or(0);
        let delay = self.base.saturating_mul(1u32 << attempts.min(16)).min(self.max);
        self.entries.insert(key.clone(), (attempts + 1, now + delay));
        delay
    }

    pub fn attempts(&self, key: &K) -> u32 {
        self.entries.get(key).map(|(a, _)| *a).unwrap_or(0)
    }

    pub fn succeeded(&mut self, key: &K) {
        self.entries.remove(key);
    }

    /// Drops entries for keys that no longer matter.
    pub fn retain(&mut self, mut keep: impl FnMut(&K) -> bool) {
        self.entries.retain(|k, _| keep(k));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_allows_a_burst_then_the_rate() {
        let t0 = Instant::now();
        let mut l = Limiter::new(100.0, 100, 2.0, 5, t0);
        for _ in 0..5 {
            assert!(l.try_acquire("a", t0).is_ok());
        }
        let wait = l.try_acquire("a", t0).unwrap_err();
        assert!(wait > Duration::from_millis(400) && wait <= Duration::from_millis(500), "{wait:?}");
        // Another namespace has its own bucket.
        assert!(l.try_acquire("b", t0).is_ok());
        // Half a second later, one more token.
        assert!(l.try_acquire("a", t0 + Duration::from_millis(500)).is_ok());
        assert!(l.try_acquire("a", t0 + Duration::from_millis(500)).is_err());
    }

    #[test]
    fn the_cluster_bucket_limits_all_namespaces() {
        let t0 = Instant::now();
        let mut l = Limiter::new(1.0, 3, 10.0, 10, t0);
        assert!(l.try_acquire("a", t0).is_ok());
        assert!(l.try_acquire("b", t0).is_ok());
        assert!(l.try_acquire("c", t0).is_ok());
        assert!(l.try_acquire("d", t0).is_err());
        // A refused try takes nothing from the namespace bucket.
        assert!(l.try_acquire("d", t0 + Duration::from_secs(1)).is_ok());
    }

    #[test]
    fn over_a_minute_the_rate_holds() {
        let t0 = Instant::now();
        let mut l = Limiter::new(0.0, 1, 2.0, 5, t0);
        let mut granted = 0;
        for ms in (0..60_000).step_by(10) {
            if l.try_acquire("ns", t0 + Duration::from_millis(ms)).is_ok() {
                granted += 1;
            }
        }
        assert!((124..=125).contains(&granted), "{granted}: burst 5 + 2/s × 60 s");
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let t0 = Instant::now();
        let mut b = Backoff::new(Duration::from_secs(1), Duration::from_secs(5));
        assert!(b.ready(&"k", t0));
        assert_eq!(b.failed(&"k", t0), Duration::from_secs(1));
        assert!(!b.ready(&"k", t0));
        assert!(b.ready(&"k", t0 + Duration::from_secs(1)));
        assert_eq!(b.failed(&"k", t0), Duration::from_secs(2));
        assert_eq!(b.failed(&"k", t0), Duration::from_secs(4));
        assert_eq!(b.failed(&"k", t0), Duration::from_secs(5));
        assert_eq!(b.attempts(&"k"), 4);
        b.succeeded(&"k");
        assert!(b.ready(&"k", t0));
    }
}
