//! The memory a replica lets admissions take (docs/reliability.md, "The memory model"): every
//! allocation a request can cause that grows with what it sends or names (its parsed review, the
//! sources read for it, their copies in effects) is charged here before it is made, and a request
//! whose charge cannot fit is refused with an HTTP error (the API server's failurePolicy decides),
//! never decided into an out-of-memory kill that fails every admission of the cluster open.
//!
//! Two pools share the budget. Small requests (every ordinary review) take from a pool that large
//! ones never touch, so a flood of large requests from one tenant, or forged ones to the port,
//! queues behind itself and never in front of everyone's ordinary admissions.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// A request charged at most this much is small: served from the small pool first.
pub const SMALL_REQUEST: usize = 1 << 20;

/// The share of the budget kept for small requests, as a fraction (1/4).
const SMALL_SHARE: usize = 4;

/// What a fresh read of one source may take while it is in flight, before its size is known: the
/// API server's response (an object of up to the 1.5 MiB etcd stores, with JSON escapes), the
/// typed object the client decodes and the JSON value made of it.
pub const READ_IN_FLIGHT: usize = 6 << 20;

/// What a source read for a request holds once read, per byte of it as JSON, until the answer:
/// the object kept for the decision, its content copied into a snapshot effect, the create's body
/// and the API server's answer to it.
pub const READ_HELD_FACTOR: usize = 4;

/// The smallest budget: one request may always read a source (three quarters of it are more
/// than [`READ_IN_FLIGHT`]).
pub const MIN_BUDGET: usize = 16 << 20;

/// The budget, in KiB permits.
pub struct Memory {
    small: Arc<Semaphore>,
    large: Arc<Semaphore>,
    small_kib: usize,
    large_kib: usize,
}

/// Bytes charged to a [`Memory`], given back when dropped (once the request is answered).
#[derive(Default)]
pub struct Charge {
    permits: Vec<OwnedSemaphorePermit>,
    kib: usize,
}

/// Why a charge was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooLarge {
    /// What the request would take in all, in bytes.
    pub cost: usize,
    /// The most one request may take, in bytes.
    pub max: usize,
}

impl Memory {
    /// A budget of `bytes` (at least [`MIN_BUDGET`]): a quarter kept for small requests, the
    /// rest for all.
    pub fn new(bytes: usize) -> Memory {
        let kib = (bytes.max(MIN_BUDGET) / 1024).max(1);
        let small_kib = kib / SMALL_SHARE;
        let large_kib = kib - small_kib;
        Memory { small: Arc::new(Semaphore::new(small_kib)), large: Arc::new(Semaphore::new(large_kib)), small_kib, large_kib }
    }

    /// The most one request may take, in bytes: the pool any request may use.
    pub fn max_request(&self) -> usize {
        self.large_kib * 1024
    }

    /// The whole budget, in bytes.
    pub fn budget(&self) -> usize {
        (self.small_kib + self.large_kib) * 1024
    }

    /// Bytes not charged now.
    pub fn available(&self) -> usize {
        (self.small.available_permits() + self.large.available_permits()) * 1024
    }

    /// Charges `bytes`, waiting for others to give budget back as long as it takes (the
    /// admission deadline bounds the wait); refused at once when one request may never take that
    /// much.
    pub async fn charge(&self, bytes: usize) -> Result<Charge, TooLarge> {
        let mut charge = Charge::default();
        self.add(&mut charge, bytes).await?;
        Ok(charge)
    }

    /// Adds `bytes` to `charge`: from the small pool while the whole stays small, else from the
    /// large one; refused at once when the whole would pass [`Memory::max_request`].
    pub async fn add(&self, charge: &mut Charge, bytes: usize) -> Result<(), TooLarge> {
        let kib = kib(bytes);
        let total = charge.kib + kib;
        if total > self.large_kib {
            return Err(TooLarge { cost: total * 1024, max: self.max_request() });
        }
        if kib == 0 {
            return Ok(());
        }
        let n = u32::try_from(kib).expect("at most the budget, in KiB");
        let permit = if total * 1024 <= SMALL_REQUEST {
            match self.small.clone().try_acquire_many_owned(n).or_else(|_| self.large.clone().try_acquire_many_owned(n)) {
                Ok(p) => p,
                Err(_) => self.small.clone().acquire_many_owned(n).await.expect("the pools are never closed"),
            }
        } else {
            self.large.clone().acquire_many_owned(n).await.expect("the pools are never closed")
        };
        charge.permits.push(permit);
        charge.kib = total;
        Ok(())
    }

    /// Charges `bytes` only when that needs no wait.
    pub fn try_charge(&self, bytes: usize) -> Option<Charge> {
        let kib = kib(bytes);
        if kib > self.large_kib {
            return None;
        }
        let n = u32::try_from(kib).ok()?;
        let permit = self.small.clone().try_acquire_many_owned(n).or_else(|_| self.large.clone().try_acquire_many_owned(n)).ok()?;
        Some(Charge { permits: vec![permit], kib })
    }
}

impl Charge {
    /// Bytes charged.
    pub fn bytes(&self) -> usize {
        self.kib * 1024
    }

    /// Gives back what is charged beyond `bytes` (a read whose size is now known).
    pub fn shrink_to(&mut self, bytes: usize) {
        let keep = kib(bytes);
        while self.kib > keep {
            let Some(mut last) = self.permits.pop() else { break };
            let over = self.kib - keep;
            let n = last.num_permits();
            if n > over {
                // Splits off the part to give back; the rest stays held.
                drop(last.split(over).expect("fewer than held"));
                self.kib -= over;
                self.permits.push(last);
            } else {
                self.kib -= n;
            }
        }
    }

    /// Takes `other`'s budget into this charge.
    pub fn absorb(&mut self, mut other: Charge) {
        self.kib += other.kib;
        self.permits.append(&mut other.permits);
    }
}

fn kib(bytes: usize) -> usize {
    bytes.div_ceil(1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    #[tokio::test]
    async fn a_request_over_the_large_pool_is_refused_at_once_and_takes_nothing() {
        let m = Memory::new(64 * MIB);
        assert_eq!(m.max_request(), 48 * MIB);
        let err = m.charge(49 * MIB).await.err().expect("refused");
        assert_eq!(err, TooLarge { cost: 49 * MIB, max: 48 * MIB });
        assert_eq!(m.available(), 64 * MIB, "a refusal takes nothing");
    }

    #[tokio::test]
    async fn large_requests_never_take_the_small_pool() {
        let m = Memory::new(64 * MIB);
        let big = m.charge(48 * MIB).await.expect("fits the large pool");
        // The large pool is spent: another large request waits, small ones still go through.
        assert!(tokio::time::timeout(std::time::Duration::from_millis(50), m.charge(2 * MIB)).await.is_err(), "a large one waits");
        let small: Vec<Charge> = futures::future::join_all((0..16).map(|_| m.charge(MIB))).await.into_iter().map(Result::unwrap).collect();
        assert_eq!(m.available(), 0);
        drop(small);
        drop(big);
        assert_eq!(m.available(), 64 * MIB);
    }

    #[tokio::test]
    async fn a_charge_grows_to_the_request_limit_and_shrinks_back() {
        let m = Memory::new(64 * MIB);
        let mut c = m.charge(512 * 1024).await.unwrap();
        m.add(&mut c, 8 * MIB).await.unwrap();
        assert_eq!(c.bytes(), 8 * MIB + 512 * 1024);
        assert_eq!(m.add(&mut c, 40 * MIB).await, Err(TooLarge { cost: 48 * MIB + 512 * 1024, max: 48 * MIB }));
        c.shrink_to(MIB);
        assert_eq!(c.bytes(), MIB);
        assert_eq!(m.available(), 63 * MIB);
        let mut other = m.charge(3 * MIB).await.unwrap();
        other.shrink_to(0);
        c.absorb(other);
        assert_eq!(c.bytes(), MIB);
        drop(c);
        assert_eq!(m.available(), 64 * MIB);
    }

    #[test]
    fn try_charge_never_waits() {
        let m = Memory::new(MIN_BUDGET);
        assert_eq!(MIN_BUDGET, 16 * MIB);
        let a = m.try_charge(12 * MIB).expect("fits");
        assert!(m.try_charge(8 * MIB).is_none());
        drop(a);
        assert!(m.try_charge(8 * MIB).is_some());
    }
}
