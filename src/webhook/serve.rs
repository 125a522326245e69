//! How the admission router is served: limits around it, and TLS connections with timeouts
//! (`crate::runtime::serve` wires it up).

use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use super::{limits, App};

pub use super::limits::{CLIENT_TIMEOUT, IDLE_TIMEOUT};
/// Largest request head (headers) accepted.
const MAX_HEADER_BYTES: usize = 64 * 1024;

/// The admission router as served. A request's body is read in full, within [`CLIENT_TIMEOUT`]
/// and `max_body` bytes, each chunk charged to a byte budget as it arrives ([`limits::Budget`]:
/// waiting for budget past the timeout is HTTP 503, so failurePolicy decides); N clients sending
/// large bodies at once cannot buffer more than the budget, and one that declares a body and
/// sends nothing holds none of it. Only then can the request take one of `max_concurrency`
/// places: a slow or stalled client holds its own connection, never a place.
///
/// Places are taken only around work that calls the API server ([`limits::api_place`], in
/// [`super::admit`]), fairly by the request's namespace ([`limits::Places`]): a decision made
/// from memory never queues behind API-bound ones, and one namespace's flood queues mostly
/// behind itself.
///
/// An admission gets `deadline` to answer (waiting for a place counts). Past it, it is denied as
/// unavailable, with a retry hint, before the API server's own webhook timeout turns it into an
/// opaque error (or, with failurePolicy Ignore, an unpinned write): an API server that accepts
/// connections and never answers would otherwise hold each admission, and its place, for the
/// kube client's 30 s connect timeout or longer.
///
/// An undo or a CronJob's run is never denied (docs/behaviour.md §6.2.1): past the deadline it is allowed as
/// sent, with a warning, judged from `app`'s caches; repair finishes the job.
pub fn limited(router: axum::Router, app: Arc<App>, max_body: usize, max_concurrency: usize, deadline: Duration) -> axum::Router {
    let places = limits::Places::new(max_concurrency);
    let budget = Arc::new(limits::Budget::new(max_body));
    router.layer(axum::middleware::from_fn(move |req: axum::extract::Request, next: axum::middleware::Next| {
        let (places, budget, app) = (places.clone(), budget.clone(), app.clone());
        async move {
            use axum::response::IntoResponse;
            let (parts, body) = req.into_parts();
            let workloads = matches!(parts.uri.path(), "/mutate" | "/validate");
            let length = parts
                .headers
                .get(axum::http::header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok()?.parse::<usize>().ok())
                .or_else(|| usize::try_from(axum::body::HttpBody::size_hint(&body).exact()?).ok());
            if length.is_some_and(|n| n > max_body) {
                crate::metrics::METRICS.error("bad-request");
                let message = format!("request body over {max_body} bytes");
                return (axum::http::StatusCode::PAYLOAD_TOO_LARGE, message).into_response();
            }
            // Held until the request is answered: its buffer lives that long.
            let (bytes, _held) = match budget.receive(body, length, CLIENT_TIMEOUT).await {
                Ok(received) => received,
                Err(limits::Refused::TooLarge) => {
                    crate::metrics::METRICS.error("bad-request");
                    let message = format!("request body over {max_body} bytes");
                    return (axum::http::StatusCode::PAYLOAD_TOO_LARGE, [(axum::http::header::CONNECTION, "close")], message).into_response();
                }
                Err(limits::Refused::Broken) => {
                    crate::metrics::METRICS.error("bad-request");
                    return (axum::http::StatusCode::BAD_REQUEST, "request body broken off").into_response();
                }
                Err(limits::Refused::Timeout) => {
                    crate::metrics::METRICS.error("bad-request");
                    let message = "request body not received in time";
                    return (axum::http::StatusCode::REQUEST_TIMEOUT, [(axum::http::header::CONNECTION, "close")], message).into_response();
                }
                Err(limits::Refused::Overloaded(rest)) => {
                    tracing::warn!(budget_bytes = max_body * limits::BODY_BUDGET_BODIES, "request bodies over the byte budget for the client timeout (overloaded)");
                    crate::metrics::METRICS.error("overloaded");
                    let message = format!("confighistory is overloaded: request bodies over its byte budget for {} s", CLIENT_TIMEOUT.as_secs());
                    // Read to its end without keeping it, so the connection serves the client's next
                    // request; one that does not end in time cannot be reused.
                    let drained = limits::drain(rest, max_body, CLIENT_TIMEOUT).await;
                    let connection = if drained { "keep-alive" } else { "close" };
                    return (axum::http::StatusCode::SERVICE_UNAVAILABLE, [(axum::http::header::CONNECTION, connection)], message).into_response();
                }
            };
            let gate = limits::Gate::new(places);
            // `Bytes` clones share the buffer; the uid is parsed only if the deadline passes
            // (parsing is most of an admission's cost: never twice on the normal path).
            let body = bytes.clone();
            let admit = gate.scope(next.run(axum::extract::Request::from_parts(parts, axum::body::Body::from(body))));
            match tokio::time::timeout(deadline, admit).await {
                Ok(response) => response,
                // Most of the deadline went waiting for a place: the server is overloaded (a flood
                // from somewhere), which says nothing about this request. An error, not a denial,
                // so the webhook's failurePolicy decides (Ignore: it goes through and repair pins
                // it later); a flood must not turn into refused writes for everyone (docs/behaviour.md §9a).
                Err(_) if match gate.wait() {
                    limits::Wait::Waiting(_) => true,
                    limits::Wait::Got(waited) => waited > deadline / 2,
                    limits::Wait::NotAsked => false,
                } => {
                    tracing::warn!(deadline_ms = deadline.as_millis() as u64, "no admission place free within the deadline (overloaded)");
                    crate::metrics::METRICS.error("overloaded");
                    let message = format!("confighistory is overloaded: no place free within {:.1} s", deadline.as_secs_f64());
                    (axum::http::StatusCode::SERVICE_UNAVAILABLE, message).into_response()
                }
                Err(_) => {
                    // Parsed again only within the memory budget, without waiting (the decision's
                    // own charge went with its future); else only the uid is read, which builds
                    // nothing but it (docs/reliability.md, "The memory model").
                    let charge = app.memory.try_charge(super::request_cost(&bytes));
                    let request = charge.as_ref().and_then(|_| crate::admission::review::parse_in(&bytes, app.ctx.kinds).ok());
                    let uid = match &request {
                        Some(r) => r.uid.clone(),
                        None => crate::admission::review::uid(&bytes).unwrap_or_default(),
                    };
                    // `?`: the uid is the request's, escaped in text logs.
                    tracing::warn!(uid = ?uid, deadline_ms = deadline.as_millis() as u64, "admission took too long (API server slow or unreachable?)");
                    crate::metrics::METRICS.error("deadline");
                    if let Some(req) = request.filter(|r| workloads && super::never_denied(&app, r)) {
                        let mut response = crate::admission::Response::allow();
                        response.warn(format!(
                            "confighistory could not decide within {:.1} s; let through as sent, repair pins it",
                            deadline.as_secs_f64()
                        ));
                        return super::reply(&response, &req.uid);
                    }
                    let message = format!(
                        "confighistory could not decide within {:.1} s: the API server did not answer in time. Nothing was changed; retrying is safe",
                        deadline.as_secs_f64()
                    );
                    super::reply(&crate::admission::Response::deny(503, message), &uid)
                }
            }
        }
    }))
}

/// Accepts TLS connections and serves the router over HTTP/1.1 keep-alive, with timeouts
/// for slow clients ([`CLIENT_TIMEOUT`] for a handshake or a begun head, [`IDLE_TIMEOUT`]
/// between requests) and a cap on header size.
pub async fn serve_tls(listener: TcpListener, acceptor: TlsAcceptor, router: axum::Router) {
    serve_tls_until(listener, acceptor, router, std::future::pending(), std::future::pending()).await
}

/// [`serve_tls`] until `shutdown` completes, draining from when `draining` completes: every
/// answer from then on says `connection: close` and its connection closes after it (one opened
/// during the drain after its first answer), while new ones are still accepted. The API server
/// keeps its keep-alive connections to a replica that is shutting down (a Service's endpoints
/// steer only new ones) and sends on them until they close. A connection closed while idle can
/// meet a request the API server is writing at that moment, which fails open with "broken
/// pipe", so an idle one is left open through the drain for its next answer to close it; only
/// those idle for the whole drain close at exit (docs/performance.md, "Rolling restart under load").
pub async fn serve_tls_until(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    router: axum::Router,
    draining: impl std::future::Future<Output = ()>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(draining, shutdown);
    let (drain, drained) = tokio::sync::watch::channel(false);
    loop {
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => { tracing::warn!(error = %e, "accept failed"); continue; }
            },
            _ = &mut draining, if !*drain.borrow() => {
                tracing::info!("draining: each connection closes after its answer");
                drain.send_replace(true);
                continue;
            }
            _ = &mut shutdown => { tracing::info!("shutting down"); return; }
        };
        let (acceptor, router, mut drained) = (acceptor.clone(), router.clone(), drained.clone());
        tokio::spawn(async move {
            let stream = match tokio::time::timeout(CLIENT_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => return tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                Err(_) => return tracing::debug!(%peer, "TLS handshake timed out"),
            };
            let (stream, clock) = super::limits::watch(stream, CLIENT_TIMEOUT, IDLE_TIMEOUT);
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder.timer(clock).header_read_timeout(CLIENT_TIMEOUT).max_buf_size(MAX_HEADER_BYTES);
            // Opened during the drain (a client that has not seen the endpoints change): one
            // answer, then closed.
            let late = *drained.borrow();
            builder.keep_alive(!late);
            // From the drain on, every answer says `connection: close`: hyper then closes the
            // connection after writing it, and the client, told so, sends nothing more on it.
            let draining = drained.clone();
            let router = <axum::Router as tower::ServiceExt<axum::http::Request<hyper::body::Incoming>>>::map_response(
                router,
                move |mut response: axum::response::Response| {
                    if *draining.borrow() {
                        response.headers_mut().insert(axum::http::header::CONNECTION, axum::http::HeaderValue::from_static("close"));
                    }
                    response
                },
            );
            let conn = builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(router));
            tokio::pin!(conn);
            // Closed gracefully only when the server is gone (the sender dropped: shutdown).
            let server_gone = async move { while drained.changed().await.is_ok() {} };
            let result = tokio::select! {
                r = conn.as_mut() => r,
                () = server_gone => {
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            };
            if let Err(e) = result {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
}
