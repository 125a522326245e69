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
/// body: taken by a request's Content-Length before its body is read, held until it is
/// answered, so N clients sending N large bodies in parallel cannot buffer more than this.
pub const BODY_BUDGET_BODIES: usize = 4;

/// The byte budget for bodies being buffered or decided ([`BODY_BUDGET_BODIES`]).
pub struct Budget {
    /// KiB, so the largest budgets fit a semaphore's u32 count.
    kib: Arc<tokio::sync::Semaphore>,
    max_body: usize,
}

/// Part of the [`Budget`], given back when dropped.
pub type Bytes = tokio::sync::OwnedSemaphorePermit;

impl Budget {
    pub fn new(max_body: usize) -> Budget {
        let kib = kib(max_body.saturating_mul(BODY_BUDGET_BODIES)).max(1);
        Budget { kib: Arc::new(tokio::sync::Semaphore::new(kib as usize)), max_body }
    }

    /// Takes what a body of `content_length` bytes (the largest allowed when unknown) counts
    /// for, waiting for it while other bodies hold the budget (first come, first served).
    pub async fn take(&self, content_length: Option<usize>) -> Bytes {
        let wanted = kib(content_length.unwrap_or(self.max_body).min(self.max_body)).max(1);
        self.kib.clone().acquire_many_owned(wanted).await.expect("the budget is never closed")
    }

    /// Bytes of the budget free now.
    pub fn available(&self) -> usize {
        self.kib.available_permits() * 1024
    }
}

/// Reads `body` to its end and drops it chunk by chunk (nothing buffered), within `timeout` and
/// `max` bytes: whether it ended, so that its connection can serve the next request.
pub async fn drain(body: axum::body::Body, max: usize, timeout: Duration) -> bool {
    use futures::StreamExt as _;
    let mut chunks = body.into_data_stream();
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

fn kib(bytes: usize) -> u32 {
    u32::try_from(bytes.div_ceil(1024)).unwrap_or(u32::MAX)
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
    async fn the_budget_counts_bodies_by_length() {
        let budget = Budget::new(1024 * 1024);
        assert_eq!(budget.available(), 4 * 1024 * 1024);
        let big = budget.take(Some(3 * 1024 * 1024)).await; // capped at the largest body
        assert_eq!(budget.available(), 3 * 1024 * 1024);
        let unknown = budget.take(None).await; // counts as the largest body
        assert_eq!(budget.available(), 2 * 1024 * 1024);
        drop((big, unknown));
        assert_eq!(budget.available(), 4 * 1024 * 1024);
    }

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
}
