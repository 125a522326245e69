//! The HTTPS admission server: the router the binary serves (and tests drive), which hands each
//! review to the admission driver (`driver`: decide, read, decide again) and the execution of its
//! effects (`effects`); the listener and its limits (`serve`, `limits`), TLS with hot reload, and
//! health and metrics on their own port.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, Mutex};

use std::time::Instant;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State as AxState};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response as HttpResponse};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;
use tracing::Instrument;

use crate::admission::{review, Outcome, Reason, Response};
use crate::cache::{Lock, Ready};
use crate::cluster::Cluster;
use crate::context::Context;
use crate::model::ids;
use crate::model::kinds::{Kind, Registry};
use crate::model::policy::{Mode, Policy};

pub mod driver;
pub mod effects;
pub mod limits;
pub mod memory;
pub mod reads;
pub mod secret_head;
pub mod serve;
pub mod tls;

use crate::metrics::METRICS;

/// A warning said at most once a minute, for a condition every request (or connection) meets
/// until someone fixes it: one line a minute tells the operator; one a request floods the log.
#[derive(Debug, Default)]
pub struct OncePerMinute(std::sync::atomic::AtomicU64);

impl OncePerMinute {
    pub const fn new() -> OncePerMinute {
        OncePerMinute(std::sync::atomic::AtomicU64::new(0))
    }

    /// Whether the warning is due now (it was not said in the last minute); taken when it is.
    pub fn due(&self) -> bool {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        let last = self.0.load(Ordering::Relaxed);
        now >= last + 60 && self.0.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_ok()
    }
}

pub use crate::cli::DEFAULT_MAX_BODY;
pub use driver::{admit, from_memory, never_denied, MAX_SOURCES_READ};

/// Everything a request handler needs: the shared context, plus the edge's own state.
pub struct App {
    pub ctx: Arc<Context>,
    /// A certificate is loaded.
    pub tls_ready: Arc<AtomicBool>,
    pub max_body: usize,
    /// Fresh reads of namespaces the namespace watch does not know.
    pub namespace_reads: Arc<reads::NamespaceReads>,
    /// Fresh reads of source names the source watches do not know.
    pub source_reads: Arc<reads::SourceReads>,
    /// What admissions may take of the replica's memory (docs/reliability.md, "The memory model").
    pub memory: Arc<memory::Memory>,
    /// Source Secrets whose head is being recorded after a write's answer.
    pub secret_heads: Arc<secret_head::Pending>,
    /// Until when replicas of another configuration may still serve beside this one (a
    /// `helm upgrade` rolling the pods): a validation in rewrite mode then lets through what only
    /// a mutating pass of such a replica left unpinned ([`MIXED_FLEET`]). `None`: never (tests
    /// and tools).
    pub mixed_fleet_until: Option<Instant>,
}

/// How long after a replica starts the replicas it replaces may still answer beside it: the
/// API server may send a request's mutating call to an old replica (which does not pin what its
/// configuration does not cover: Secrets off, a workload kind it has no entry for) and its
/// validating call to this one (docs/behaviour.md §9a.2). The chart's roll ends well within it.
pub const MIXED_FLEET: std::time::Duration = std::time::Duration::from_secs(90);

impl App {
    /// An app over `ctx` with its certificate counted as loaded and the default body limit
    /// (tests and tools; `serve` sets readiness from the certificate it loads).
    pub fn new(ctx: Arc<Context>) -> App {
        App {
            ctx,
            tls_ready: Arc::new(AtomicBool::new(true)),
            max_body: DEFAULT_MAX_BODY,
            namespace_reads: Arc::default(),
            source_reads: Arc::default(),
            memory: Arc::new(memory::Memory::new(crate::cli::DEFAULT_MEMORY_BUDGET)),
            secret_heads: Arc::default(),
            mixed_fleet_until: None,
        }
    }

    /// [`App::new`] over a context whose caches count as synced.
    pub fn ready(policy: Policy, state: Arc<Lock>, cluster: Arc<dyn Cluster>) -> App {
        App::new(Arc::new(Context::synced(policy, state, cluster)))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    Mutate,
    Validate,
    Protect,
}

impl Endpoint {
    fn as_str(self) -> &'static str {
        match self {
            Endpoint::Mutate => "mutate",
            Endpoint::Validate => "validate",
            Endpoint::Protect => "protect",
        }
    }
}

/// The admission router (served over TLS by the binary, driven directly by tests).
pub fn router(app: Arc<App>) -> Router {
    let limit = app.max_body;
    Router::new()
        .route("/mutate", post(|s, b| handle(s, Endpoint::Mutate, b)))
        .route("/validate", post(|s, b| handle(s, Endpoint::Validate, b)))
        .route("/protect", post(|s, b| handle(s, Endpoint::Protect, b)))
        .layer(DefaultBodyLimit::max(limit))
        .with_state(app)
}

/// Health and metrics of the admission server, plain HTTP on their own port.
pub fn health_router(app: Arc<App>) -> Router {
    health(app.ctx.ready.clone(), Some(app.tls_ready.clone()))
}

/// Health and metrics: ready once the caches are synced and, for a server with a certificate
/// (`tls_ready`), once it is loaded.
pub fn health(ready: Ready, tls_ready: Option<Arc<AtomicBool>>) -> Router {
    let metrics_ready = ready.clone();
    Router::new()
        .route("/livez", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(move || async move {
                let synced = ready.is_ready();
                match tls_ready.map(|t| t.load(Ordering::Relaxed)) {
                    Some(true) | None if synced => (StatusCode::OK, "ok".to_owned()),
                    Some(tls) => (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: tls loaded={tls}, caches synced={synced}")),
                    None => (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: caches synced={synced}")),
                }
            }),
        )
        .route(
            "/metrics",
            get(move || async move {
                METRICS.set_cache_synced(metrics_ready.is_ready());
                ([(axum::http::header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)], METRICS.render())
            }),
        )
}

async fn handle(AxState(app): AxState<Arc<App>>, endpoint: Endpoint, body: Bytes) -> HttpResponse {
    let start = Instant::now();
    // What parsing and deciding this body can take, charged before anything is built
    // (docs/reliability.md, "The memory model"); held until the answer.
    let _charge = match app.memory.charge(request_cost(&body)).await {
        Ok(charge) => charge,
        Err(too_large) => return refuse_too_large(endpoint, too_large),
    };
    // Boxed: axum boxes this future for every request, and held inline the request would make
    // it over 1 KiB, past what glibc's per-thread cache serves (docs/performance.md).
    let req = match Box::pin(parse(body, app.ctx.kinds)).await {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(endpoint = endpoint.as_str(), error = %e, "bad admission request");
            METRICS.error("bad-request");
            return (StatusCode::BAD_REQUEST, Json(json!({"error": e.to_string()}))).into_response();
        }
    };
    // Anything the webhook configurations never send is refused before it is decided, logged
    // or counted: no reads, no writes, no metric label from the request.
    match expected(endpoint, &req, app.ctx.kinds, app.ctx.policy.acted_on()) {
        Ok(Expected::Decide) => {}
        Ok(Expected::Off) => {
            let kind = kind_label(app.ctx.kinds, app.ctx.policy.acted_on(), &req.kind);
            METRICS.request(endpoint.as_str(), kind, req.operation.as_str(), "allowed", Reason::UnhandledKind.as_str(), start.elapsed());
            tracing::debug!(
                endpoint = endpoint.as_str(),
                "allowed a kind this server does not handle (another configuration registers it)"
            );
            return reply(&Response::allow(), &req.uid);
        }
        Err(e) => {
            tracing::warn!(endpoint = endpoint.as_str(), error = %e, "refused an admission request the webhooks never send");
            METRICS.error("bad-request");
            return (StatusCode::BAD_REQUEST, Json(json!({"error": e}))).into_response();
        }
    }
    // Settled from memory with nothing to read, write or log (the steady state of re-applies):
    // answered without the span below, which would log nothing. With debug logs on, the
    // decision's summary line is one, so every review gets the span.
    // The first pass's outcome otherwise goes on to the driver: not decided twice.
    let first = match tracing::enabled!(tracing::Level::DEBUG) {
        true => None,
        false => match driver::first_pass(&app, endpoint, &req) {
            driver::FirstPass::Answered(response, reason) => return finish(&app, endpoint, &req, start, response, reason),
            driver::FirstPass::Decided(outcome) => Some(outcome),
            driver::FirstPass::NotTried => None,
        },
    };
    // Every log line of this admission, down to the API calls of its effects, carries these.
    // `?`: request-supplied strings are escaped in text logs (validated above, but uid is free).
    let span = tracing::info_span!("admission", uid = ?req.uid, kind = %req.kind.kind, namespace = %req.namespace,
        name = %req.name, operation = req.operation.as_str(), endpoint = endpoint.as_str());
    answer(&app, endpoint, &req, start, first).instrument(span).await
}

/// Bodies at least this long are parsed on a blocking thread: parsing a few MiB takes
/// milliseconds, which on the runtime's worker (the chart gives one CPU) would stall every other
/// connection's handshake and answer.
const PARSE_APART: usize = 256 * 1024;

/// The review in `body`, parsed on a blocking thread when it is long.
/// The templates of `kinds`' workloads are parsed with their unread parts folded (`model::fold`).
async fn parse(body: Bytes, kinds: &'static Registry) -> Result<Box<review::Request>, review::Error> {
    if body.len() < PARSE_APART {
        return review::parse_in(&body, kinds).map(Box::new);
    }
    tokio::task::spawn_blocking(move || review::parse_in(&body, kinds).map(Box::new)).await.expect("parsing does not panic")
}

/// What deciding the review in `body` may take at most (docs/reliability.md, "The memory model"):
/// its parsed tree ([`crate::model::json::parse_cost`]), plus what the decision copies of it (the
/// source content it keeps or snapshots, the patch and the answer: each at most the body).
pub fn request_cost(body: &[u8]) -> usize {
    // A small body is charged its length's bound, which never comes near what one request may
    // take; a scan of it would cost a third of the parse (docs/performance.md).
    let tree = if body.len() <= SCAN_FROM { crate::model::json::parse_bound(body.len()) } else { crate::model::json::parse_cost(body) };
    tree.saturating_add(body.len().saturating_mul(4)).saturating_add(64 * 1024)
}

/// Bodies up to this long are charged by their length alone ([`request_cost`]).
const SCAN_FROM: usize = 6 * 1024;

/// The answer to a review that may never fit the memory one request may take: an HTTP error, so
/// the webhook's failurePolicy decides, saying what to do.
pub(crate) fn refuse_too_large(endpoint: Endpoint, too_large: memory::TooLarge) -> HttpResponse {
    let mib = |b: usize| b as f64 / (1024.0 * 1024.0);
    tracing::warn!(
        endpoint = endpoint.as_str(),
        cost_bytes = too_large.cost,
        max_bytes = too_large.max,
        "refused an admission request too large to decide"
    );
    METRICS.error("too-large");
    let message = format!(
        "confighistory refused this request: deciding it would take {:.1} MiB of memory, more than the {:.1} MiB one request may take \
         (an object with very many fields or entries, or very large ConfigMaps). Split the object or its configuration, \
         or raise the server's memory limit (its budget is a share of it)",
        mib(too_large.cost),
        mib(too_large.max)
    );
    (StatusCode::PAYLOAD_TOO_LARGE, Json(json!({"error": message}))).into_response()
}

/// Decides, counts and logs one admission that passed [`expected`].
async fn answer(app: &App, endpoint: Endpoint, req: &review::Request, start: Instant, first: Option<Box<Outcome>>) -> HttpResponse {
    let (response, reason) = driver::admit_after(app, endpoint, req, first).await;
    finish(app, endpoint, req, start, response, reason)
}

/// Counts and logs a decided admission, and answers it.
fn finish(app: &App, endpoint: Endpoint, req: &review::Request, start: Instant, response: Response, reason: Reason) -> HttpResponse {
    let decision = if !response.allowed {
        "denied"
    } else if response.patch.is_empty() {
        "allowed"
    } else {
        "patched"
    };
    let kind = kind_label(app.ctx.kinds, app.ctx.policy.acted_on(), &req.kind);
    METRICS.request(endpoint.as_str(), kind, req.operation.as_str(), decision, reason.as_str(), start.elapsed());
    let mode = mode(app, &req.namespace);
    match reason {
        Reason::UnhandledKind => tracing::info!(group = %req.kind.group, "allowed a kind confighistory does not handle"),
        // validate answers "audit" for what it only warns about: in audit mode, that is what
        // enforce mode would refuse (a CronJob's Job is lenient in every mode, so not counted).
        Reason::Audit if mode == Mode::Audit => {
            METRICS.audit_violation(kind);
            tracing::info!(warnings = ?response.warnings, "audit mode: admitted what enforce mode would refuse");
        }
        _ => {}
    }
    tracing::debug!(reason = reason.as_str(), allowed = response.allowed, patch_ops = response.patch.len(), "admission");
    reply(&response, &req.uid)
}

/// The HTTP answer carrying `response` for the review `uid` (every path that answers a review).
pub(crate) fn reply(response: &Response, uid: &str) -> HttpResponse {
    ([(axum::http::header::CONTENT_TYPE, "application/json")], response.review_json(uid)).into_response()
}

/// The namespace's mode; a mode label the admin refuses is logged, once per namespace and label
/// value (docs/behaviour.md §3: the default applies, and the admin should know someone asked).
fn mode(app: &App, namespace: &str) -> Mode {
    let state = crate::cache::admission_read(&app.ctx.state);
    let info = state.namespace(namespace);
    let (mode, refused) = app.ctx.policy.namespace_mode(namespace, info);
    let label = info.and_then(|n| crate::model::meta::Meta::label(n, crate::model::names::MODE_LABEL));
    if let Some(why) = refused {
        let mut warned = REFUSED_MODES.lock().expect("refused modes lock");
        if warned.get(namespace).map(String::as_str) != label {
            warned.insert(namespace.to_owned(), label.unwrap_or_default().to_owned());
            METRICS.refused_mode();
            tracing::warn!(namespace, "{why}");
        }
    }
    mode
}

/// Namespaces whose refused mode label was logged, with that label (bounded by the namespaces).
static REFUSED_MODES: LazyLock<Mutex<HashMap<String, String>>> = LazyLock::new(Mutex::default);

/// What [`expected`] says of a request that a webhook configuration of the chart may send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expected {
    /// A kind this server handles on this endpoint: decided.
    Decide,
    /// A kind another configuration of the chart registers and this server does not handle (a
    /// Secret with Secrets off, a workload kind it has no registry entry for): answered "allowed,
    /// unchanged" with no read, write or log of its content. During a `helm upgrade` that turns
    /// such a feature on or off, the webhooks and the pods change at different moments, and a
    /// pod called for a feature it does not serve yet must not fail the write (failurePolicy
    /// Fail) or fail it open as an error (docs/behaviour.md §9a.2).
    Off,
}

/// Whether `req` is a request the chart's webhook configurations send to `endpoint`: a main
/// resource they register (or one another configuration of the chart registers: [`Expected::Off`]),
/// an operation they register, a valid namespace and name (docs/behaviour.md §9a).
/// The error says what is wrong, with request-supplied strings quoted (escaped).
/// The chart registers the registry's workload kinds (its `workloadKinds`) and ConfigMaps, and
/// Secrets where the admin turned them on (`sources`: `Policy::acted_on`, docs/behaviour.md §4a).
pub fn expected(endpoint: Endpoint, req: &review::Request, kinds: &Registry, sources: ids::SourceKinds) -> Result<Expected, String> {
    let (k, r) = (&req.kind, &req.resource);
    let same_resource = r.group == k.group && r.version == k.version;
    let workload = || same_resource && kinds.admits(&k.group, &k.version, &k.kind, &r.resource).is_some();
    let source_of = |set: ids::SourceKinds| {
        same_resource && set.of(&k.group, &k.kind).is_some_and(|s| s.def().version == k.version && s.resource() == r.resource)
    };
    let source = || source_of(sources);
    // A source kind this version knows, acted on or not (Secrets with Secrets off).
    let known_source = || source_of(ids::SourceKinds::WITH_SECRETS);
    // Any kind but a source kind: a workload kind another configuration registers.
    let other_workload = || ids::SourceKind::known(&k.group, &k.kind).is_none();
    let (handled, off, operations): (bool, bool, &[review::Operation]) = match endpoint {
        Endpoint::Mutate => {
            (workload() || source(), other_workload() || known_source(), &[review::Operation::Create, review::Operation::Update])
        }
        Endpoint::Validate => (workload(), other_workload(), &[review::Operation::Create, review::Operation::Update]),
        Endpoint::Protect => (source(), known_source(), &[review::Operation::Create, review::Operation::Update, review::Operation::Delete]),
    };
    if !handled && !off {
        return Err(format!(
            "/{} is not registered for {:?} (kind {:?}/{:?}/{:?}); check the webhook configuration's rules",
            endpoint.as_str(),
            format!("{}/{}/{}", r.group, r.version, r.resource),
            k.group,
            k.version,
            k.kind
        ));
    }
    if req.sub_resource.as_deref().is_some_and(|s| !s.is_empty()) || !operations.contains(&req.operation) {
        return Err(format!(
            "/{} is not registered for operation {} of subresource {:?}",
            endpoint.as_str(),
            req.operation.as_str(),
            req.sub_resource
        ));
    }
    if !crate::model::names::is_dns_label(&req.namespace) {
        return Err(format!("namespace {:?} is not a valid namespace name", req.namespace));
    }
    // CREATE with generateName may reach admission before the name is generated.
    if !req.name.is_empty() && !crate::model::names::is_dns_subdomain(&req.name) {
        return Err(format!("name {:?} is not a valid object name", req.name));
    }
    Ok(if handled { Expected::Decide } else { Expected::Off })
}

/// The `kind` label of a request: its registered kind's name, else `other` (a request-supplied
/// string never becomes a label value).
fn kind_label(kinds: &Registry, sources: ids::SourceKinds, k: &review::GroupVersionKind) -> &'static str {
    match sources.of(&k.group, &k.kind) {
        Some(kind) => kind.as_str(),
        None => kinds.workload(&k.group, &k.kind).map_or("other", Kind::name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A warning every request meets is said once, then not again within the minute.
    #[test]
    fn a_once_a_minute_warning_is_due_once() {
        let w = OncePerMinute::new();
        assert!(w.due());
        assert!(!w.due() && !w.due());
    }

    /// axum boxes the handler's future for every request. Over 1 KiB, glibc's malloc serves it from
    /// its slower bins (1,032 bytes is the largest size its per-thread cache holds), so the API
    /// path's awaits are boxed where they happen and the request is boxed once parsed.
    #[test]
    fn the_per_request_future_stays_small() {
        let app = App::ready(Policy::default(), Default::default(), Arc::new(crate::cluster::MemoryCluster::default()));
        let req = review::Request::default();
        let admit = std::mem::size_of_val(&admit(&app, Endpoint::Mutate, &req));
        let handle = std::mem::size_of_val(&handle(AxState(Arc::new(App::new(app.ctx.clone()))), Endpoint::Mutate, Bytes::new()));
        assert!(admit <= 768 && handle <= 1024, "admit's future is {admit} bytes, handle's {handle}: box the new await");
    }
}
