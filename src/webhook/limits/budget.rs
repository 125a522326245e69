//! The byte budget for request bodies (docs/behaviour.md §9a): how many body bytes are buffered
//! at once, across all requests, charged as they arrive and held until the answer.

use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long the one body that goes past the shared byte budget (the reserve, [`Budget`]) may
/// take to arrive in full: a legitimate body arrives at network speed; one that stalls while
/// holding the reserve would stop every other body behind it.
pub const RESERVE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a body keeps the budget promised to its whole declared length ([`Budget`]) before
/// only the bytes that arrived count: a legitimate body arrives well within it.
pub const PROMISE_TIMEOUT: Duration = Duration::from_secs(2);

/// Bytes of request bodies buffered at once, across all requests, as a multiple of the largest
/// body: charged as they arrive and held until the request is answered, so N clients sending N
/// large bodies in parallel cannot buffer more than this (plus the reserve: one more body).
pub const BODY_BUDGET_BODIES: usize = 4;

/// The byte budget for bodies being received or decided ([`BODY_BUDGET_BODIES`] largest bodies).
///
/// What a body holds is what arrived, not what it declared (docs/behaviour.md §9a): a client that
/// declares the largest body and sends nothing loses its part within [`PROMISE_TIMEOUT`]. Three
/// rules keep honest bodies moving:
/// - a body starts with its whole declared length promised, for [`PROMISE_TIMEOUT`]; bodies
///   arriving at network speed finish within it, one set after another, rather than all
///   advancing a little and waiting for each other. Past it, the unused part goes back and the
///   rest is charged chunk by chunk as it arrives;
/// - freed budget goes first to the waiting body with the fewest bytes still to come (then the
///   oldest), so small reviews are never stuck behind large ones;
/// - a body that finds the budget taken waits for budget *or* for the reserve: the right, held by
///   one request at a time, to receive its whole body beyond the budget (its share of the budget
///   goes back). The reserve's holder must finish within [`RESERVE_TIMEOUT`], so bodies that
///   arrived in part and stalled cannot stop the rest.
///
/// At most `(BODY_BUDGET_BODIES + 1) x max_body` is buffered, plus one read buffer (64 KiB) per
/// connection for the chunk being charged.
pub struct Budget {
    pool: Arc<Mutex<Pool>>,
    reserve: Arc<tokio::sync::Mutex<()>>,
    max_body: usize,
}

/// The budget's free KiB and the bodies waiting for some.
#[derive(Default)]
struct Pool {
    free: usize,
    waiters: Vec<BodyWaiter>,
    next: u64,
}

struct BodyWaiter {
    /// KiB still to come for the body (by its declared length): the fewest go first.
    missing: usize,
    id: u64,
    need: usize,
    granted: tokio::sync::oneshot::Sender<()>,
}

impl Pool {
    /// Gives free KiB to waiters, fewest missing first (then oldest), each that fits.
    fn grant(&mut self) {
        self.waiters.sort_by_key(|w| (w.missing, w.id));
        let mut i = 0;
        while i < self.waiters.len() && self.free > 0 {
            if self.waiters[i].need <= self.free {
                let w = self.waiters.remove(i);
                self.free -= w.need;
                // A waiter that is gone gives its grant back when it cleans up (`Waiting::drop`).
                let _ = w.granted.send(());
            } else {
                i += 1;
            }
        }
    }
}

/// What a received body holds of the [`Budget`], given back when dropped (once answered).
#[derive(Default)]
pub struct Held {
    kib: usize,
    pool: Option<Arc<Mutex<Pool>>>,
    reserve: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl Drop for Held {
    fn drop(&mut self) {
        if let (Some(pool), kib @ 1..) = (&self.pool, self.kib) {
            let mut pool = pool.lock().expect("budget lock");
            pool.free += kib;
            pool.grant();
        }
    }
}

/// A waiter in the pool, taken out again (and a grant that came too late given back) however
/// the wait ends: granted, the reserve, the timeout, or the request dropped.
struct Waiting {
    pool: Arc<Mutex<Pool>>,
    id: u64,
    need: usize,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let mut pool = self.pool.lock().expect("budget lock");
        match pool.waiters.iter().position(|w| w.id == self.id) {
            Some(i) => {
                pool.waiters.remove(i);
            }
            // Granted: unless the grant was kept (`need` set to 0), it goes back.
            None if self.need > 0 => {
                pool.free += self.need;
                pool.grant();
            }
            None => {}
        }
    }
}

/// Why a body was not received.
pub enum Refused {
    /// More than the largest body.
    TooLarge,
    /// The client broke the body off.
    Broken,
    /// Not received within the body timeout (or, holding the reserve, within its timeout).
    Timeout,
    /// No budget and no reserve within the body timeout: the rest of the body, to drain.
    Overloaded(axum::body::BodyDataStream),
}

impl Budget {
    pub fn new(max_body: usize) -> Budget {
        let free = kib(max_body.saturating_mul(BODY_BUDGET_BODIES)).max(1);
        Budget { pool: Arc::new(Mutex::new(Pool { free, ..Pool::default() })), reserve: Arc::default(), max_body }
    }

    /// Receives `body` (of `declared` bytes, when the request says) in full within `timeout`,
    /// charging its bytes as they arrive.
    pub async fn receive(
        &self,
        body: axum::body::Body,
        declared: Option<usize>,
        timeout: Duration,
    ) -> Result<(axum::body::Bytes, Held), Refused> {
        use futures::StreamExt as _;
        let deadline = tokio::time::Instant::now() + timeout;
        let expected = declared.unwrap_or(self.max_body).min(self.max_body);
        let mut chunks = body.into_data_stream();
        let mut parts: Vec<axum::body::Bytes> = Vec::new();
        let (mut total, mut until) = (0usize, deadline);
        let mut held = Held { kib: 0, pool: Some(self.pool.clone()), reserve: None };
        let promise = kib(expected).max(1);
        let mut promised = None;
        // Nothing held yet, so waiting cannot stop anyone: the reserve only once the budget has
        // not freed up for a while (bodies that arrived in part and stalled).
        match self.take(promise, promise, deadline, PROMISE_TIMEOUT).await {
            Some(Taken::Bytes) => {
                held.kib = promise;
                promised = Some(tokio::time::Instant::now() + PROMISE_TIMEOUT);
            }
            Some(Taken::Reserve(guard)) => {
                held.reserve = Some(guard);
                until = deadline.min(tokio::time::Instant::now() + RESERVE_TIMEOUT);
            }
            None => return Err(Refused::Overloaded(chunks)),
        }
        loop {
            let wake = promised.map_or(until, |p: tokio::time::Instant| p.min(until));
            let chunk = match tokio::time::timeout_at(wake, chunks.next()).await {
                // The promise ends: from now on only what arrived counts.
                Err(_) if promised.is_some() && tokio::time::Instant::now() < until => {
                    promised = None;
                    self.keep_only(&mut held, kib(total));
                    continue;
                }
                Err(_) => return Err(Refused::Timeout),
                Ok(None) => {
                    // A body shorter than promised (none declared: the largest) keeps its size.
                    self.keep_only(&mut held, kib(total));
                    break;
                }
                Ok(Some(Err(_))) => return Err(Refused::Broken),
                Ok(Some(Ok(chunk))) => chunk,
            };
            total += chunk.len();
            if total > self.max_body {
                return Err(Refused::TooLarge);
            }
            // Holding the reserve, the rest of the body (at most `max_body` in all) is its.
            let need = kib(total).saturating_sub(held.kib);
            if need > 0 && held.reserve.is_none() {
                let missing = kib(expected.saturating_sub(total));
                match self.take(need, missing, deadline, Duration::ZERO).await {
                    Some(Taken::Bytes) => held.kib += need,
                    Some(Taken::Reserve(guard)) => {
                        // The reserve holds the whole body: what it had of the shared budget
                        // goes back, so the bodies waiting there can finish too.
                        drop(std::mem::take(&mut held));
                        held.reserve = Some(guard);
                        (until, promised) = (deadline.min(tokio::time::Instant::now() + RESERVE_TIMEOUT), None);
                    }
                    None => return Err(Refused::Overloaded(chunks)),
                }
            }
            parts.push(chunk);
        }
        let bytes = match parts.len() {
            0 => axum::body::Bytes::new(),
            1 => parts.pop().expect("one part"),
            _ => parts.concat().into(),
        };
        Ok((bytes, held))
    }

    /// Gives back what `held` has of the budget beyond `kib`.
    fn keep_only(&self, held: &mut Held, kib: usize) {
        if held.kib > kib {
            let unused = held.kib - kib;
            held.kib = kib;
            let mut pool = self.pool.lock().expect("budget lock");
            pool.free += unused;
            pool.grant();
        }
    }

    /// `need` KiB of the budget, or else (after waiting `reserve_after`) the reserve, whichever
    /// comes first before `deadline`.
    async fn take(&self, need: usize, missing: usize, deadline: tokio::time::Instant, reserve_after: Duration) -> Option<Taken> {
        let (rx, mut waiting) = {
            let mut pool = self.pool.lock().expect("budget lock");
            if pool.free >= need {
                pool.free -= need;
                return Some(Taken::Bytes);
            }
            let (tx, rx) = tokio::sync::oneshot::channel();
            let id = pool.next;
            pool.next += 1;
            pool.waiters.push(BodyWaiter { missing, id, need, granted: tx });
            (rx, Waiting { pool: self.pool.clone(), id, need })
        };
        let wait = async {
            tokio::select! {
                biased;
                Ok(()) = rx => {
                    waiting.need = 0; // kept
                    Taken::Bytes
                }
                guard = async {
                    tokio::time::sleep(reserve_after).await;
                    self.reserve.clone().lock_owned().await
                } => Taken::Reserve(guard),
            }
        };
        let taken = tokio::time::timeout_at(deadline, wait).await.ok();
        drop(waiting);
        taken
    }

    /// Bytes of the budget free now.
    pub fn available(&self) -> usize {
        self.pool.lock().expect("budget lock").free * 1024
    }
}

enum Taken {
    Bytes,
    Reserve(tokio::sync::OwnedMutexGuard<()>),
}

/// Reads the rest of a body and drops it chunk by chunk (nothing buffered), within `timeout` and
/// `max` bytes: whether it ended, so that its connection can serve the next request.
pub async fn drain(mut chunks: axum::body::BodyDataStream, max: usize, timeout: Duration) -> bool {
    use futures::StreamExt as _;
    let read = async {
        let mut total = 0usize;
        while let Some(chunk) = chunks.next().await {
            total += chunk.map_err(|_| ())?.len();
            if total > max {
                return Err(());
            }
        }
        Ok(())
    };
    matches!(tokio::time::timeout(timeout, read).await, Ok(Ok(())))
}

fn kib(bytes: usize) -> usize {
    bytes.div_ceil(1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_budget_charges_what_arrived_and_keeps_one_body_in_reserve() {
        const MIB: usize = 1024 * 1024;
        let budget = Budget::new(MIB);
        assert_eq!(budget.available(), 4 * MIB);
        let body = |n: usize| axum::body::Body::from(vec![b' '; n]);
        // Charged by what arrived (rounded up to KiB), not by a declared length.
        let (bytes, small) = budget.receive(body(1000), None, Duration::from_secs(1)).await.ok().unwrap();
        assert_eq!((bytes.len(), budget.available()), (1000, 4 * MIB - 1024));
        let mut held = vec![small];
        for _ in 0..3 {
            held.push(budget.receive(body(MIB), None, Duration::from_secs(1)).await.ok().unwrap().1);
        }
        assert_eq!(budget.available(), MIB - 1024);
        // Past the budget: once the budget has not freed for a while, the reserve takes the
        // body, one at a time.
        let started = tokio::time::Instant::now();
        let (bytes, reserved) = budget.receive(body(MIB), None, Duration::from_secs(5)).await.ok().unwrap();
        assert!(started.elapsed() >= PROMISE_TIMEOUT);
        assert!(reserved.reserve.is_some() && bytes.len() == MIB);
        assert!(matches!(budget.receive(body(MIB), None, Duration::from_millis(100)).await, Err(Refused::Overloaded(_))));
        drop((held, reserved));
        assert_eq!(budget.available(), 4 * MIB);
        assert!(matches!(budget.receive(body(MIB + 1), None, Duration::from_millis(100)).await, Err(Refused::TooLarge)));
        assert_eq!(budget.available(), 4 * MIB);
    }

    #[tokio::test]
    async fn a_declared_body_that_does_not_arrive_loses_its_promise() {
        const MIB: usize = 1024 * 1024;
        let budget = Arc::new(Budget::new(MIB));
        let silent = || axum::body::Body::from_stream(futures::stream::pending::<Result<axum::body::Bytes, std::io::Error>>());
        let waiting = {
            let budget = budget.clone();
            tokio::spawn(async move { budget.receive(silent(), Some(MIB), Duration::from_secs(30)).await.is_ok() })
        };
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(budget.available(), 3 * MIB, "promised its declared length at first");
        tokio::time::sleep(PROMISE_TIMEOUT).await;
        assert_eq!(budget.available(), 4 * MIB, "then only what arrived: nothing");
        waiting.abort();
    }
}
