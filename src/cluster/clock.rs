//! The API server's time. `confighistory.io/changed-at` is written by whichever replica
//! admits a change and compared, for the settle window (docs/behaviour.md §7), on the leader; GC's last-use
//! records likewise. A replica whose clock is 30 s off would shorten (or stretch) the window by
//! that much, so both sides use the API server's clock instead: every replica estimates the
//! offset of its own clock from the `Date` header of the API server's responses it gets anyway
//! (watches, Lease renewals, reads), through [`DateLayer`] on its kube client.
//!
//! A `Date` has whole seconds and was written at some instant between sending the request and
//! receiving the response, so each response bounds the offset (server − local) to an interval;
//! the estimate intersects the intervals of recent responses, newest first, and stops at the first
//! one that disagrees (the local clock was stepped). Its uncertainty is half that interval: under
//! a second plus half a round trip from one response, narrowing as responses fall at different
//! phases of the second. Local time is monotonic (anchored to the wall clock at start), so a step
//! of the local wall clock changes nothing.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll};
use std::time::Instant;

use futures::future::BoxFuture;
use hyper::http::{header::DATE, Request, Response};

/// Responses kept for the estimate.
const SAMPLES: usize = 32;

/// One response: when the request was sent and the response received (local ms since the epoch),
/// and the server's `Date` (ms since the epoch, a whole second).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    pub sent_ms: i64,
    pub received_ms: i64,
    pub date_ms: i64,
}

/// The API server's time minus local time lies within `[low_ms, high_ms]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Offset {
    pub low_ms: i64,
    pub high_ms: i64,
}

impl Offset {
    /// The middle of the interval.
    pub fn ms(&self) -> i64 {
        self.low_ms + (self.high_ms - self.low_ms) / 2
    }
    /// How far the true offset may lie from [`Offset::ms`].
    pub fn uncertainty_ms(&self) -> i64 {
        (self.high_ms - self.low_ms + 1) / 2
    }
    fn intersect(&self, other: &Offset) -> Option<Offset> {
        let o = Offset { low_ms: self.low_ms.max(other.low_ms), high_ms: self.high_ms.min(other.high_ms) };
        (o.low_ms <= o.high_ms).then_some(o)
    }
}

/// What one response says about the offset: the server wrote `Date` (truncated to the second)
/// at some local instant between sending and receiving.
pub fn bounds(s: &Sample) -> Offset {
    Offset { low_ms: s.date_ms - s.received_ms, high_ms: s.date_ms + 999 - s.sent_ms }
}

/// The offset from samples, newest first: the intersection of their bounds, up to the first
/// sample that disagrees with the newer ones (the local clock moved: older samples no longer hold).
pub fn estimate<'a>(newest_first: impl IntoIterator<Item = &'a Sample>) -> Option<Offset> {
    let mut samples = newest_first.into_iter();
    let mut out = bounds(samples.next()?);
    for s in samples {
        match out.intersect(&bounds(s)) {
            Some(o) => out = o,
            None => break,
        }
    }
    Some(out)
}

/// An HTTP `Date` header (`Thu, 03 Dec 2026 15:35:44 GMT`) in ms since the epoch.
pub fn parse_date(value: &str) -> Option<i64> {
    k8s_openapi::jiff::fmt::rfc2822::DateTimeParser::new().parse_timestamp(value).ok().map(|t| t.as_millisecond())
}

/// A replica's view of the API server's clock.
pub struct Clock {
    local: Box<dyn Fn() -> i64 + Send + Sync>,
    state: Mutex<Estimate>,
}

#[derive(Default)]
struct Estimate {
    samples: VecDeque<Sample>,
    offset: Option<Offset>,
    /// The offset last logged, to log only changes of a second or more.
    logged_ms: i64,
}

impl Clock {
    /// Local time from a monotonic clock anchored to the wall clock now.
    pub fn system() -> Clock {
        let (wall, start) = (k8s_openapi::jiff::Timestamp::now().as_millisecond(), Instant::now());
        Clock::with_local(move || wall + i64::try_from(start.elapsed().as_millis()).unwrap_or(i64::MAX / 4))
    }

    /// A clock whose local time is `local` (ms since the epoch): for tests of skewed replicas.
    pub fn with_local(local: impl Fn() -> i64 + Send + Sync + 'static) -> Clock {
        Clock { local: Box::new(local), state: Mutex::new(Estimate::default()) }
    }

    pub fn local_ms(&self) -> i64 {
        (self.local)()
    }

    /// Takes one response into the estimate.
    pub fn record(&self, sample: Sample) {
        let mut st = self.state.lock().expect("clock lock");
        if st.samples.len() == SAMPLES {
            st.samples.pop_back();
        }
        st.samples.push_front(sample);
        st.offset = estimate(&st.samples);
        if let Some(o) = st.offset {
            if (o.ms() - st.logged_ms).abs() >= 1000 {
                st.logged_ms = o.ms();
                tracing::warn!(
                    offset_ms = o.ms(),
                    uncertainty_ms = o.uncertainty_ms(),
                    "this replica's clock differs from the API server's; settle windows and last-use records use the API server's time"
                );
            }
        }
    }

    /// The estimated offset, once a response has been seen.
    pub fn offset(&self) -> Option<Offset> {
        self.state.lock().expect("clock lock").offset
    }

    /// The API server's time now (ms since the epoch): local time plus the estimated offset
    /// (local time alone before the first response).
    pub fn now_ms(&self) -> i64 {
        self.local_ms() + self.offset().map_or(0, |o| o.ms())
    }

    /// [`Clock::now_ms`] as RFC 3339 with milliseconds.
    pub fn now_rfc3339(&self) -> String {
        format!("{:.3}", k8s_openapi::jiff::Timestamp::from_millisecond(self.now_ms()).unwrap_or_default())
    }
}

impl Default for Clock {
    fn default() -> Clock {
        Clock::system()
    }
}

/// A tower layer for the kube client: every response's `Date` goes into the clock.
#[derive(Clone)]
pub struct DateLayer(pub Arc<Clock>);

impl<S> tower::Layer<S> for DateLayer {
    type Service = DateService<S>;
    fn layer(&self, inner: S) -> DateService<S> {
        DateService { inner, clock: self.0.clone() }
    }
}

#[derive(Clone)]
pub struct DateService<S> {
    inner: S,
    clock: Arc<Clock>,
}

impl<S, ReqBody, ResBody> tower::Service<Request<ReqBody>> for DateService<S>
where
    S: tower::Service<Request<ReqBody>, Response = Response<ResBody>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ResBody: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        let clock = self.clock.clone();
        let sent_ms = clock.local_ms();
        let response = self.inner.call(req);
        Box::pin(async move {
            let response = response.await?;
            let date = response.headers().get(DATE).and_then(|v| v.to_str().ok()).and_then(parse_date);
            if let Some(date_ms) = date {
                clock.record(Sample { sent_ms, received_ms: clock.local_ms(), date_ms });
            }
            Ok(response)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(sent_ms: i64, received_ms: i64, date_ms: i64) -> Sample {
        Sample { sent_ms, received_ms, date_ms }
    }

    #[test]
    fn parses_http_dates() {
        assert_eq!(parse_date("Thu, 01 Jan 1970 00:00:01 GMT"), Some(1000));
        assert_eq!(parse_date("Thu, 03 Dec 2026 15:35:44 GMT"), Some(1_796_312_144_000));
        assert_eq!(parse_date("yesterday"), None);
    }

    #[test]
    fn one_response_bounds_the_offset_to_a_second_and_the_round_trip() {
        // Sent at local 10.000 s, received at 10.100 s; the server said 40 (its clock is ~30 s ahead).
        let o = estimate(&[sample(10_000, 10_100, 40_000)]).unwrap();
        assert_eq!((o.low_ms, o.high_ms), (29_900, 30_999));
        assert_eq!(o.ms(), 30_449);
        assert_eq!(o.uncertainty_ms(), 550);
    }

    #[test]
    fn responses_at_different_phases_of_the_second_narrow_it() {
        // The server is exactly 30.3 s ahead; round trips of 20 ms at several phases.
        let truth = 30_300;
        let samples: Vec<Sample> = (0..10)
            .rev()
            .map(|i| {
                let sent = 100_000 + i * 1_170;
                let server_at = sent + 10 + truth;
                sample(sent, sent + 20, server_at - server_at.rem_euclid(1000))
            })
            .collect();
        let o = estimate(&samples).unwrap();
        assert!(o.low_ms <= truth && truth <= o.high_ms, "{o:?}");
        assert!(o.uncertainty_ms() <= 100, "{o:?}");
        // Any one response alone is much less sure.
        assert!(estimate(&samples[..1]).unwrap().uncertainty_ms() > 500);
    }

    #[test]
    fn a_local_clock_step_drops_the_older_responses() {
        // Newest first: after the step the local clock is 60 s behind where it was.
        let samples = [sample(50_000, 50_010, 80_000), sample(100_000, 100_010, 70_000)];
        let o = estimate(&samples).unwrap();
        assert!(o.low_ms >= 29_000 && o.high_ms <= 31_000, "the newest response wins: {o:?}");
    }

    #[tokio::test]
    async fn the_layer_takes_each_responses_date_into_the_clock() {
        use tower::{Layer as _, Service as _, ServiceExt as _};
        let clock = Arc::new(Clock::with_local(|| 1_796_312_114_000)); // 30 s behind the server
        let server = tower::service_fn(|_: Request<()>| async {
            Ok::<_, std::convert::Infallible>(Response::builder().header(DATE, "Thu, 03 Dec 2026 15:35:44 GMT").body(()).unwrap())
        });
        let mut svc = DateLayer(clock.clone()).layer(server);
        svc.ready().await.unwrap().call(Request::new(())).await.unwrap();
        let o = clock.offset().expect("one response seen");
        assert!((30_000..31_000).contains(&o.ms()), "{o:?}");
        let bare = tower::service_fn(|_: Request<()>| async { Ok::<_, std::convert::Infallible>(Response::new(())) });
        DateLayer(clock.clone()).layer(bare).ready().await.unwrap().call(Request::new(())).await.unwrap();
        assert_eq!(clock.offset(), Some(o), "a response without Date changes nothing");
    }

    #[test]
    fn now_is_local_time_plus_the_offset() {
        let clock = Clock::with_local(|| 1_000_000);
        assert_eq!(clock.now_ms(), 1_000_000, "no response yet: local time");
        clock.record(sample(1_000_000 - 10, 1_000_000, 1_030_000));
        let now = clock.now_ms();
        assert!((1_030_000..1_031_000).contains(&now), "{now}");
        assert_eq!(clock.now_rfc3339().len(), "1970-01-01T00:17:10.490Z".len());
    }
}
