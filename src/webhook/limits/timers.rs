//! How long a connection may take (docs/behaviour.md §9a): to finish its TLS handshake, to send a
//! request head once it began one, to send a body, and to sit idle between requests.

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
