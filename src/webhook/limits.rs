//! What one client, or one tenant, may take from the server (docs/behaviour.md §9a): how long a connection may
//! sit idle or take over a request head, how many body bytes are buffered at once, and the
//! admission places for API-bound work, shared fairly between namespaces.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// How long a client may take to finish the TLS handshake, send a request head once it started
/// one, or send a body.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the one body that goes past the shared byte budget (the reserve, [`Budget`]) may
/// take to arrive in full: a legitimate body arrives at network speed; one that stalls while
/// holding the reserve would stop every other body behind it.
pub const RESERVE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a body keeps the budget promised to its whole declared length ([`Budget`]) before
/// only the bytes that arrived count: a legitimate body arrives well within it.
pub const PROMISE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a keep-alive connection may sit idle between requests. Longer than the API server's
/// own idle timeout for webhook connections (Go's 90 s), so the API server is the one that closes
/// them: a server-side close can race a request the API server is just sending on that
/// connection, and a POST written into a closing connection is not retried (a failed admission).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(120);

/// When the connection's current request head began to arrive (`None`: idle, none begun).
#[derive(Default)]
struct Activity {
    head_started: Mutex<Option<Instant>>,
}

/// A connection's stream, noting when the bytes of a new request head begin to arrive.
pub struct Watched<S> {
    inner: S,
    activity: Arc<Activity>,
}

/// hyper's header-read timer for one connection, taught the difference between an idle
/// keep-alive connection and a head in progress. hyper starts its header timer as soon as a
/// connection waits for a request (right after the previous response), so on its own it closes
/// every keep-alive connection idle for longer than the head timeout, and the API server's
/// next admission on it fails ("channel closed", or a POST lost). This clock gives a head that
/// has begun `head` to finish, and a connection with nothing begun `idle`.
#[derive(Clone)]
pub struct HeadClock {
    activity: Arc<Activity>,
    head: Duration,
    idle: Duration,
}

/// `stream` watched, and the clock to give hyper (`http1::Builder::timer`, with any
/// `header_read_timeout`: the clock ignores hyper's own deadline).
pub fn watch<S>(stream: S, head: Duration, idle: Duration) -> (Watched<S>, HeadClock) {
    let activity = Arc::new(Activity::default());
    (Watched { inner: stream, activity: activity.clone() }, HeadClock { activity, head, idle })
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.head_started.lock().expect("activity lock").get_or_insert_with(Instant::now);
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
    fn poll_write_vectored(mut self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[std::io::IoSlice<'_>]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

impl hyper::rt::Timer for HeadClock {
    fn sleep(&self, _: Duration) -> Pin<Box<dyn hyper::rt::Sleep>> {
        self.wait_for_head()
    }
    /// hyper asks for a timer when the connection starts waiting for a request head (its only
    /// use of the timer in an HTTP/1 server): what was read before belongs to earlier requests.
    fn sleep_until(&self, _: Instant) -> Pin<Box<dyn hyper::rt::Sleep>> {
        self.wait_for_head()
    }
}

impl HeadClock {
    fn wait_for_head(&self) -> Pin<Box<dyn hyper::rt::Sleep>> {
        *self.activity.head_started.lock().expect("activity lock") = None;
        let idle_until = tokio::time::Instant::now() + self.idle;
        Box::pin(HeadSleep {
            activity: self.activity.clone(),
            head: self.head,
            idle_until,
            sleep: Box::pin(tokio::time::sleep_until(idle_until)),
        })
    }
}

struct HeadSleep {
    activity: Arc<Activity>,
    head: Duration,
    idle_until: tokio::time::Instant,
    sleep: Pin<Box<tokio::time::Sleep>>,
}

impl Future for HeadSleep {
    type Output = ();
    /// hyper polls this whenever the head is still incomplete, so a head that began since the
    /// last poll moves the deadline here.
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let started = *self.activity.head_started.lock().expect("activity lock");
        let deadline = started.map_or(self.idle_until, |t| tokio::time::Instant::from_std(t) + self.head);
        if self.sleep.deadline() != deadline {
            self.sleep.as_mut().reset(deadline);
        }
        self.sleep.as_mut().poll(cx)
    }
}

impl hyper::rt::Sleep for HeadSleep {}

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

/// Admission places for API-bound work, shared fairly between namespaces: any namespace may
/// take a free place, but while requests wait, a freed place goes first to the oldest waiter
/// whose namespace holds fewer than [`Places::share`], so one namespace's flood queues behind
/// itself rather than in front of everyone (docs/behaviour.md §9a).
pub struct Places {
    sched: Mutex<Sched>,
    share: usize,
}

#[derive(Default)]
struct Sched {
    free: usize,
    held: std::collections::HashMap<String, usize>,
    queue: std::collections::VecDeque<Waiter>,
}

struct Waiter {
    namespace: String,
    grant: tokio::sync::oneshot::Sender<Place>,
}

/// One place, given back when dropped.
pub struct Place {
    places: Arc<Places>,
    namespace: String,
}

impl Places {
    /// `total` places; a namespace is served first while it holds fewer than half of them.
    pub fn new(total: usize) -> Arc<Places> {
        let total = total.max(1);
        Arc::new(Places { sched: Mutex::new(Sched { free: total, ..Sched::default() }), share: total.div_ceil(2) })
    }

    /// How many places a namespace holds before others waiting are served first.
    pub fn share(&self) -> usize {
        self.share
    }

    /// A place for a request of `namespace` ("" for cluster-scoped), when one is free and no
    /// one waits, else once the queue gives it one.
    pub async fn take(self: &Arc<Places>, namespace: &str) -> Place {
        let waiting = {
            let mut sched = self.sched.lock().expect("places lock");
            if sched.free > 0 && sched.queue.is_empty() {
                sched.free -= 1;
                *sched.held.entry(namespace.to_owned()).or_default() += 1;
                None
            } else {
                let (grant, granted) = tokio::sync::oneshot::channel();
                sched.queue.push_back(Waiter { namespace: namespace.to_owned(), grant });
                Some(granted)
            }
        };
        match waiting {
            None => Place { places: self.clone(), namespace: namespace.to_owned() },
            Some(granted) => granted.await.expect("a waiter is granted or dropped with its place"),
        }
    }

    /// Places held by `namespace` now.
    pub fn held(&self, namespace: &str) -> usize {
        self.sched.lock().expect("places lock").held.get(namespace).copied().unwrap_or(0)
    }

    fn give_back(self: &Arc<Places>, namespace: &str) {
        let mut grants = Vec::new();
        {
            let mut sched = self.sched.lock().expect("places lock");
            if let Some(n) = sched.held.get_mut(namespace) {
                *n -= 1;
                if *n == 0 {
                    sched.held.remove(namespace);
                }
            }
            sched.free += 1;
            while sched.free > 0 && !sched.queue.is_empty() {
                // The oldest waiter whose namespace is under its share; else the oldest.
                let under = sched.queue.iter().position(|w| sched.held.get(&w.namespace).copied().unwrap_or(0) < self.share);
                let waiter = sched.queue.remove(under.unwrap_or(0)).expect("a waiter");
                if waiter.grant.is_closed() {
                    continue; // gave up waiting (its deadline passed)
                }
                sched.free -= 1;
                *sched.held.entry(waiter.namespace.clone()).or_default() += 1;
                grants.push(waiter);
            }
        }
        // Outside the lock: a place whose waiter gave up meanwhile comes back through Drop.
        for waiter in grants {
            let place = Place { places: self.clone(), namespace: waiter.namespace };
            let _ = waiter.grant.send(place);
        }
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        self.places.give_back(&self.namespace);
    }
}

tokio::task_local! {
    /// The places of the request being decided on this task, for work that calls the API
    /// server ([`api_place`]); absent when the router is driven without [`super::serve::limited`].
    static GATE: Gate;
}

/// What a request decided under [`super::serve::limited`] needs to take a place, and how long
/// it waited for one.
#[derive(Clone)]
pub struct Gate {
    places: Arc<Places>,
    wait: Arc<Mutex<Wait>>,
}

/// Whether a request asked for a place, and how long it waited.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum Wait {
    /// Decided from memory: never asked.
    #[default]
    NotAsked,
    /// Still waiting, since then.
    Waiting(Instant),
    Got(Duration),
}

impl Gate {
    pub fn new(places: Arc<Places>) -> Gate {
        Gate { places, wait: Arc::default() }
    }

    /// Runs `f` (the request's handler) with this gate for [`api_place`].
    pub async fn scope<F: Future>(&self, f: F) -> F::Output {
        GATE.scope(self.clone(), f).await
    }

    pub fn wait(&self) -> Wait {
        *self.wait.lock().expect("wait lock")
    }
}

/// A place for work that calls the API server, taken by the request being decided on this task
/// (fairly by its `namespace`, "" for cluster-scoped, as the decision parsed it: no second
/// look at the body); `None` outside [`super::serve::limited`] (tests, tools), unlimited.
/// Decisions from memory never take one, so they never queue behind API-bound ones.
pub async fn api_place(namespace: &str) -> Option<Place> {
    let gate = GATE.try_with(Gate::clone).ok()?;
    let asked = Instant::now();
    *gate.wait.lock().expect("wait lock") = Wait::Waiting(asked);
    let place = gate.places.take(namespace).await;
    *gate.wait.lock().expect("wait lock") = Wait::Got(asked.elapsed());
    Some(place)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_freed_place_goes_first_to_a_namespace_under_its_share() {
        let places = Places::new(2);
        let (a1, a2) = (places.take("a").await, places.take("a").await);
        assert_eq!(places.held("a"), 2);
        // a's third waits first, then b's.
        let (p, q) = (places.clone(), places.clone());
        let a3 = tokio::spawn(async move { p.take("a").await });
        tokio::task::yield_now().await;
        let b1 = tokio::spawn(async move { q.take("b").await });
        tokio::task::yield_now().await;
        drop(a1);
        let b1 = tokio::time::timeout(Duration::from_secs(1), b1).await.expect("b served first").unwrap();
        assert!(!a3.is_finished(), "a, at its share, waits while b is served");
        assert_eq!((places.held("a"), places.held("b")), (1, 1));
        drop(b1);
        let a3 = tokio::time::timeout(Duration::from_secs(1), a3).await.expect("then a").unwrap();
        drop((a2, a3));
        assert_eq!(places.held("a"), 0);
        assert!(places.sched.lock().unwrap().held.is_empty(), "no namespace kept once it holds none");
    }

    #[tokio::test]
    async fn a_waiter_that_gave_up_loses_no_place() {
        let places = Places::new(1);
        let held = places.take("a").await;
        let p = places.clone();
        let gave_up = tokio::time::timeout(Duration::from_millis(20), async move { p.take("b").await }).await;
        assert!(gave_up.is_err());
        drop(held);
        let again = tokio::time::timeout(Duration::from_secs(1), places.take("c")).await.expect("the place came back");
        drop(again);
        assert_eq!(places.sched.lock().unwrap().free, 1);
    }

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
