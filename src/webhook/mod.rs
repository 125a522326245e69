//! The HTTPS admission server: the router the binary serves (and tests drive), the edge that
//! runs a decision's effects, TLS with hot reload, and health and metrics on their own port.

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

use crate::admission::{self, review, Decision, Effect, Failed, Failure, Fresh, Outcome, Reason, Response, View};
use crate::cache::{Lock, NamespaceInfo};
use crate::cluster::{ApiError, Cluster};
use crate::context::Context;
use crate::model::kinds::{Kind, Registry};
use crate::model::policy::{Mode, Policy};
use crate::model::source::{self, SourceId};
use crate::store;

pub mod keys;
pub mod limits;
pub mod managed;
pub mod memory;
pub mod reads;
pub mod secret_head;
pub mod serve;
pub mod tls;

use crate::metrics::METRICS;

pub use crate::cli::DEFAULT_MAX_BODY;

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
}

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
    health(app.ctx.synced.clone(), Some(app.tls_ready.clone()))
}

/// Health and metrics: ready once the caches are synced and, for a server with a certificate
/// (`tls_ready`), once it is loaded.
pub fn health(synced: Arc<AtomicBool>, tls_ready: Option<Arc<AtomicBool>>) -> Router {
    let metrics_synced = synced.clone();
    Router::new()
        .route("/livez", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(move || async move {
                let synced = synced.load(Ordering::Relaxed);
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
                METRICS.set_cache_synced(metrics_synced.load(Ordering::Relaxed));
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
    let req = match Box::pin(parse(body)).await {
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
    // Every log line of this admission, down to the API calls of its effects, carries these.
    // `?`: request-supplied strings are escaped in text logs (validated above, but uid is free).
    let span = tracing::info_span!("admission", uid = ?req.uid, kind = %req.kind.kind, namespace = %req.namespace,
        name = %req.name, operation = req.operation.as_str(), endpoint = endpoint.as_str());
    answer(&app, endpoint, &req, start).instrument(span).await
}

/// Bodies at least this long are parsed on a blocking thread: parsing a few MiB takes
/// milliseconds, which on the runtime's worker (the chart gives one CPU) would stall every other
/// connection's handshake and answer.
const PARSE_APART: usize = 256 * 1024;

/// The review in `body`, parsed on a blocking thread when it is long.
async fn parse(body: Bytes) -> Result<Box<review::Request>, review::Error> {
    if body.len() < PARSE_APART {
        return review::parse(&body).map(Box::new);
    }
    tokio::task::spawn_blocking(move || review::parse(&body).map(Box::new)).await.expect("parsing does not panic")
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
async fn answer(app: &App, endpoint: Endpoint, req: &review::Request, start: Instant) -> HttpResponse {
    let (response, reason) = admit(app, endpoint, req).await;
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
pub fn expected(endpoint: Endpoint, req: &review::Request, kinds: &Registry, sources: source::SourceKinds) -> Result<Expected, String> {
    let (k, r) = (&req.kind, &req.resource);
    let same_resource = r.group == k.group && r.version == k.version;
    let workload = || same_resource && kinds.admits(&k.group, &k.version, &k.kind, &r.resource).is_some();
    let source_of = |set: source::SourceKinds| {
        same_resource && k.version == "v1" && set.of(&k.group, &k.kind).is_some_and(|s| s.resource() == r.resource)
    };
    let source = || source_of(sources);
    // A source kind this version knows, acted on or not (Secrets with Secrets off).
    let known_source = || source_of(source::SourceKinds::WITH_SECRETS);
    // Any kind but a source kind: a workload kind another configuration registers.
    let other_workload = || source::SourceKind::known(&k.group, &k.kind).is_none();
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
fn kind_label(kinds: &Registry, sources: source::SourceKinds, k: &review::GroupVersionKind) -> &'static str {
    match sources.of(&k.group, &k.kind) {
        Some(kind) => kind.as_str(),
        None => kinds.workload(&k.group, &k.kind).map_or("other", Kind::name),
    }
}

/// Whether a workload request must never be denied (an undo, a CronJob's run), from the caches.
pub fn never_denied(app: &App, req: &review::Request) -> bool {
    let (state, now) = (crate::cache::admission_read(&app.ctx.state), String::new());
    let view = View { policy: &app.ctx.policy, state: &state, fresh: &Fresh::new(), failed: &Failed::new(), now: &now, namespace: None };
    app.ctx.policy.acted_on().of(&req.kind.group, &req.kind.kind).is_none() && admission::workload::never_denied(req, &view)
}

/// Decides, reading sources fresh when the decision asks, runs the effects, and answers.
pub async fn admit(app: &App, endpoint: Endpoint, req: &review::Request) -> (Response, Reason) {
    // The API server's time, in milliseconds: the settle window is counted from changed-at, on
    // the leader, which uses the API server's time too (never a replica's own clock alone).
    let now = app.ctx.clock.now_rfc3339();
    let namespace = match Box::pin(read_namespace(app, endpoint, req)).await {
        Ok(namespace) => namespace,
        Err(failure) => return (failure.denial, Reason::ApiError),
    };
    // A source created through this replica is no longer remembered missing: a workload applied
    // with it a moment later reads it even before the watch delivers it (docs/behaviour.md §9a.5).
    if let (Endpoint::Mutate, Some(kind)) = (endpoint, app.ctx.policy.acted_on().of(&req.kind.group, &req.kind.kind)) {
        if req.operation == review::Operation::Create && !req.dry_run() {
            app.source_reads.forget(&req.namespace, &SourceId::new(kind, req.name.as_str()));
        }
    }
    let mut fresh = Fresh::new();
    let mut failed = Failed::new();
    // Pass 0 decides from memory; a decision that needs fresh reads asks for them once, and,
    // when those reads change how a reference is classified (a name shaped like a snapshot name
    // that is in fact a source), once more. A decision that is never denied (an undo) and whose
    // snapshot write fails is made again without that source, once per source.
    let mut fetches = 0;
    // What the sources read for this request hold, given back with the answer.
    let mut held_reads = memory::Charge::default();
    // Taken before the first API call and kept to the answer; a decision from memory takes none
    // (docs/behaviour.md §9a: it never waits behind API-bound ones).
    let mut place = None;
    // A source's content is hashed and compared before the cache is taken (a 1 MiB one would
    // hold it for a millisecond and more), once for every pass; its outgoing content too when
    // a glance at the cache finds workloads that still run with it.
    let facts = match (endpoint, app.ctx.policy.acted_on().of(&req.kind.group, &req.kind.kind)) {
        (Endpoint::Mutate, Some(source::SourceKind::ConfigMap)) => {
            let outgoing = || {
                let id = SourceId::configmap(req.name.as_str());
                !crate::cache::admission_read(&app.ctx.state).plain_users(&req.namespace, &id).is_empty()
            };
            admission::configmap::ContentFacts::ahead(req, &app.ctx.policy, outgoing)
        }
        _ => None,
    };
    for _ in 0..MAX_PASSES {
        let outcome = {
            let state = crate::cache::admission_read(&app.ctx.state);
            let view =
                View { policy: &app.ctx.policy, state: &state, fresh: &fresh, failed: &failed, now: &now, namespace: namespace.as_deref() };
            match endpoint {
                Endpoint::Mutate => match app.ctx.policy.acted_on().of(&req.kind.group, &req.kind.kind) {
                    Some(source::SourceKind::Secret) => admission::secret::decide(req, &view),
                    Some(source::SourceKind::ConfigMap) => admission::configmap::decide_with(req, &view, facts.as_ref()),
                    None => admission::workload::decide(req, &view),
                },
                Endpoint::Validate => admission::validate::decide(req, &view),
                Endpoint::Protect => Outcome::Done(admission::protect::decide(req, &view)),
            }
        };
        match outcome {
            Outcome::Done(decision) => {
                let (reason, fail_open) = (decision.reason, decision.fail_open);
                if place.is_none() && decision.effects.iter().any(|e| !e.after_answer()) {
                    place = Some(Box::pin(limits::api_place(&req.namespace)).await);
                }
                // Boxed, like every await on the API path: the future of an admission decided
                // from memory then stays small (axum boxes it per request; see the test
                // the_per_request_future_stays_small).
                match Box::pin(execute(app, req, decision, &fresh)).await {
                    Ok(response) => return (response, reason),
                    Err((source, failure)) if fail_open && !failed.contains_key(&source) => {
                        failed.insert(source, failure);
                    }
                    Err((_, failure)) => return (failure.denial, Reason::ApiError),
                }
            }
            Outcome::Fetch(ids) if fetches < 2 => {
                fetches += 1;
                let unread: Vec<SourceId> = ids.into_iter().filter(|n| !fresh.contains_key(n) && !failed.contains_key(n)).collect();
                if place.is_none() {
                    place = Some(Box::pin(limits::api_place(&req.namespace)).await);
                }
                // At most MAX_SOURCES_READ distinct names per request are read (docs/behaviour.md §9a): the
                // rest count as failed reads, and the decision says whether that denies.
                let mut reads = Vec::new();
                for id in unread {
                    // A name from the request's template goes into an API path only when it is a
                    // valid object name (`../secrets/x` is not); any other cannot exist.
                    if !crate::model::names::is_dns_subdomain(&id.name) {
                        fresh.insert(id, None);
                    } else if fresh.len() + failed.len() + reads.len() >= MAX_SOURCES_READ {
                        failed.insert(id, too_many_sources(&req.namespace));
                    } else {
                        // A name the watches do not know, found missing a moment ago or past the
                        // namespace's rate: decided as missing, not read (docs/behaviour.md §9a.5).
                        let unlisted = crate::cache::admission_read(&app.ctx.state).source_unlisted(&req.namespace, &id);
                        if unlisted && !app.source_reads.allow(&req.namespace, &id) {
                            fresh.insert(id, None);
                        } else {
                            reads.push((id, unlisted));
                        }
                    }
                }
                // Read concurrently, a few at a time: one after another, N sources cost N round trips.
                // Each read is charged to the memory budget before it starts, at the most it may
                // take in flight, then at what it holds once its size is known; reads that would
                // take the request past what one request may hold are not made (docs/reliability.md,
                // "The memory model").
                use futures::StreamExt as _;
                let promised = std::sync::Mutex::new(held_reads.bytes());
                let promised = &promised;
                let results: Vec<_> = Box::pin(
                    futures::stream::iter(reads)
                        .map(|(id, unlisted)| async move {
                            {
                                let mut p = promised.lock().expect("promised lock");
                                if *p + memory::READ_IN_FLIGHT > app.memory.max_request() {
                                    return (id, unlisted, Err(Unread::Memory), memory::Charge::default());
                                }
                                *p += memory::READ_IN_FLIGHT;
                            }
                            let Ok(mut slot) = app.memory.charge(memory::READ_IN_FLIGHT).await else {
                                *promised.lock().expect("promised lock") -= memory::READ_IN_FLIGHT;
                                return (id, unlisted, Err(Unread::Memory), memory::Charge::default());
                            };
                            let read = app.ctx.cluster.get_source(&req.namespace, &id).await;
                            let holds = match &read {
                                Ok(Some(obj)) => crate::model::json::heap_size(obj).saturating_mul(memory::READ_HELD_FACTOR),
                                _ => 0,
                            };
                            slot.shrink_to(holds);
                            *promised.lock().expect("promised lock") -= memory::READ_IN_FLIGHT - slot.bytes().min(memory::READ_IN_FLIGHT);
                            (id, unlisted, read.map_err(Unread::Api), slot)
                        })
                        .buffer_unordered(READ_CONCURRENCY)
                        .collect(),
                )
                .await;
                for (id, unlisted, read, slot) in results {
                    held_reads.absorb(slot);
                    match read {
                        Ok(obj) => {
                            // A dry run's "missing" is not remembered: Flux, Argo CD and
                            // `kubectl diff` dry-run a release before creating its ConfigMaps,
                            // and the apply that follows must read them (docs/behaviour.md §9a.5).
                            if obj.is_none() && unlisted && !req.dry_run() {
                                app.source_reads.record_missing(&req.namespace, &id);
                            }
                            fresh.insert(id, obj);
                        }
                        // The decision says whether this denies the request (docs/behaviour.md §6.2.1).
                        Err(Unread::Api(e)) => {
                            let failure = failure(&format!("read {} {}/{}", id.kind_str(), req.namespace, id.name), &e);
                            failed.insert(id, failure);
                        }
                        Err(Unread::Memory) => {
                            failed.insert(id, too_much_config(&req.namespace, app.memory.max_request()));
                        }
                    }
                }
            }
            Outcome::Fetch(_) => break,
        }
    }
    (Response::deny(500, "confighistory could not decide (sources changed while reading); retrying is safe"), Reason::Internal)
}

/// The request's namespace, read fresh when the namespace watch has listed and does not know it
/// (`admission::acting_mode` decides from it): one GET, before any other read, among a few at a
/// time and outside the per-namespace places; `None` when not needed, or when the namespace does
/// not exist (remembered for a while: a flood of forged reviews naming it costs one GET).
async fn read_namespace(app: &App, endpoint: Endpoint, req: &review::Request) -> Result<Option<Box<NamespaceInfo>>, Failure> {
    let ns = req.namespace.as_str();
    // Snapshot protection does not depend on the namespace's mode.
    let unlisted = || crate::cache::admission_read(&app.ctx.state).namespace_unlisted(ns);
    if endpoint == Endpoint::Protect || !unlisted() || app.namespace_reads.known_missing(ns) {
        return Ok(None);
    }
    let _turn = app.namespace_reads.turn().await;
    // While this one waited, the watch may have delivered it, or another request found it missing.
    if !unlisted() || app.namespace_reads.known_missing(ns) {
        return Ok(None);
    }
    match app.ctx.cluster.get_namespace(ns).await {
        Ok(Some(obj)) => Ok(Some(Box::new(NamespaceInfo::from_object(&obj)))),
        Ok(None) => {
            app.namespace_reads.record_missing(ns);
            Ok(None)
        }
        Err(e) => Err(failure(&format!("read Namespace {ns}"), &e)),
    }
}

/// Distinct ConfigMaps read for one request at most (docs/behaviour.md §9a): a template naming more is
/// decided as if the rest could not be read.
pub const MAX_SOURCES_READ: usize = 64;
/// Reads of one request in flight at once.
const READ_CONCURRENCY: usize = 8;

/// Why a source was not read.
enum Unread {
    Api(ApiError),
    /// Reading it would take the request past what one request may hold.
    Memory,
}

fn too_much_config(ns: &str, max: usize) -> Failure {
    let message = format!(
        "the sources this request names in {ns} are too large to read together: confighistory holds at most {} MiB of sources \
         for one request. Split the configuration into fewer or smaller ConfigMaps, or raise the server's memory limit",
        max >> 20
    );
    Failure { what: "read the request's sources".into(), cause: message.clone(), denial: Response::deny(422, message) }
}

fn too_many_sources(ns: &str) -> Failure {
    let message = format!(
        "the request names more than {MAX_SOURCES_READ} ConfigMaps in {ns}; confighistory reads at most {MAX_SOURCES_READ} per request"
    );
    Failure { what: "read the request's ConfigMaps".into(), cause: message.clone(), denial: Response::deny(422, message) }
}

/// Decisions per admission at most: three for reads, then one more per failed snapshot write of
/// a decision that is never denied.
const MAX_PASSES: usize = 3 + 8;

/// Runs the effects and answers; or the source whose snapshot could not be written, and why.
/// `fresh`: what this admission read from the API server (effects may start from it).
async fn execute(app: &App, req: &review::Request, decision: Decision, fresh: &Fresh) -> Result<Response, (SourceId, Failure)> {
    let mut names = HashMap::new();
    let secret_write = app.ctx.policy.acted_on().of(&req.kind.group, &req.kind.kind) == Some(source::SourceKind::Secret);
    let mut warnings = Vec::new();
    for effect in &decision.effects {
        match effect {
            Effect::EnsureSnapshot { namespace, source, content, adopted, origin } => {
                let (name, collisions) =
                    store::ensure(app.ctx.cluster.as_ref(), namespace, source, content, adopted, origin, req.dry_run())
                        .await
                        .map_err(|e| (source.clone(), store_failure(e, source.kind)))?;
                if !collisions.is_empty() && !req.dry_run() {
                    record_collision(app, namespace, source, &name, &collisions);
                }
                warnings.extend(collisions.iter().map(store::Collision::warning));
                names.insert((source.clone(), content.hash()), name);
            }
            Effect::EnsureSecretSnapshot { namespace, source, content, key, frame, adopted, origin } => {
                // A decision makes this effect only with the keys loaded (admission::secret,
                // workload): without them no snapshot could be named, so nothing is pinned.
                let keys = app.ctx.policy.secrets.keys.get();
                let Some(keys) = keys.as_deref() else {
                    let message = "confighistory could not name a Secret snapshot: the cluster keys are not loaded; retrying is safe";
                    let failure =
                        Failure { what: "name a Secret snapshot".into(), cause: message.into(), denial: Response::deny(503, message) };
                    return Err((source.clone(), failure));
                };
                let snap = store::Snap::Secret(content, keys, *key, *frame);
                let hash = snap.hash(namespace, &source.name);
                // A Secret write's answer never names the snapshot of its outgoing content: its
                // name holds the MAC, which pins in no template (docs/reliability.md, "Secrets").
                let unnamed = |f: Failure| if secret_write { unnamed_failure(f, &hash) } else { f };
                let (name, collisions) =
                    store::ensure_snap(app.ctx.cluster.as_ref(), namespace, source, snap, adopted, origin, req.dry_run())
                        .await
                        .map_err(|e| (source.clone(), unnamed(store_failure(e, source.kind))))?;
                if !collisions.is_empty() && !req.dry_run() {
                    record_collision(app, namespace, source, &name, &collisions);
                }
                if !secret_write {
                    warnings.extend(collisions.iter().map(store::Collision::warning));
                } else if !collisions.is_empty() {
                    warnings.push(format!("{source}: outgoing content kept under a later snapshot name (one was taken; see its Events)"));
                }
                names.insert((source.clone(), hash), name);
            }
            Effect::UseSnapshot { namespace, source, name } => {
                let snapshot = source.with_name(name.as_str());
                let read = fresh.get(&snapshot).and_then(Option::as_ref);
                store::keep(app.ctx.cluster.as_ref(), namespace, &snapshot, read, req.dry_run())
                    .await
                    .map_err(|e| (source.clone(), store_failure(e, source.kind)))?
            }
            Effect::RecordHead { namespace, source, hash } if !req.dry_run() => record_head(app, namespace, source, hash),
            Effect::RecordSecretHead { namespace, source, after } if !req.dry_run() => {
                secret_head::record(app, namespace, source, after.clone())
            }
            Effect::RecordHead { .. } | Effect::RecordSecretHead { .. } => {}
        }
    }
    let mut response = decision.finish(&names);
    for w in warnings {
        response.warn(w);
    }
    Ok(response)
}

/// Records the head a workload was just pinned to on a source that had none, in the background (a
/// no-op write the source's admission takes from confighistory alone, docs/behaviour.md §6.1); one
/// that cannot be written is logged, and the next write of the source records it.
fn record_head(app: &App, namespace: &str, source: &SourceId, hash: &str) {
    let patch = serde_json::json!({"metadata": {"annotations": {crate::model::names::HEAD: hash}}});
    let (cluster, namespace, source) = (app.ctx.cluster.clone(), namespace.to_owned(), source.clone());
    tokio::spawn(
        async move {
            if let Err(e) = cluster.patch_source(&namespace, &source, &patch).await {
                tracing::warn!(namespace = %namespace, source = %source, error = %e, "could not record the source's head");
            }
        }
        .instrument(tracing::Span::current()),
    );
}

/// Says on the source that its snapshot met collisions (docs/behaviour.md §5), in the background: the answer
/// does not wait for an Event, and one that cannot be written is logged, not retried.
fn record_collision(app: &App, namespace: &str, source: &SourceId, name: &str, collisions: &[store::Collision]) {
    let uid = crate::cache::admission_read(&app.ctx.state).source(namespace, source).map(|c| c.uid.clone()).unwrap_or_default();
    let event = store::collision_event(namespace, source, &uid, name, collisions);
    let cluster = app.ctx.cluster.clone();
    tokio::spawn(
        async move {
            if let Err(e) = cluster.publish(&event).await {
                tracing::warn!(error = %e, "could not record the collision Event");
            }
        }
        .instrument(tracing::Span::current()),
    );
}

/// `f` without the MAC `hash` (a Secret snapshot's name part) in what the answer says.
fn unnamed_failure(f: Failure, hash: &str) -> Failure {
    let hide = |t: &str| t.replace(hash, "<mac>");
    let mut denial = f.denial;
    denial.message = denial.message.as_deref().map(hide);
    Failure { what: hide(&f.what), cause: hide(&f.cause), denial }
}

/// The answer to a request whose snapshot could not be made sure of.
fn store_failure(e: store::Error, kind: source::SourceKind) -> Failure {
    match e {
        store::Error::Api { what, source } => failure(&what, &source),
        store::Error::Race { namespace, name } => failure(&format!("create snapshot {namespace}/{name}"), &store::race_error(&name)),
        store::Error::Quota { name, source_name: source, source: e } => Failure {
            what: format!("create snapshot {name}"),
            cause: e.message.clone(),
            denial: Response::deny(
                403,
                format!(
                    "confighistory could not create snapshot {name} of {source}: {}. Raise the namespace's ResourceQuota for {resource} \
                         (count/{resource}) or delete unused snapshots; nothing was changed, retrying is safe",
                    e.message,
                    resource = kind.resource()
                ),
            ),
        },
        store::Error::Exhausted { source_name: source, hash } => Failure {
            what: format!("find a free snapshot name for {source}"),
            cause: "every name is taken".into(),
            denial: Response::deny(
                409,
                format!("every snapshot name for {source} ({hash}) is taken; delete the {}s squatting on {source}-{hash}-*", kind.as_str()),
            ),
        },
    }
}

fn failure(what: &str, e: &ApiError) -> Failure {
    tracing::warn!(what, error = %e, "API server call failed during admission");
    METRICS.error("api");
    Failure {
        what: what.to_owned(),
        cause: e.message.clone(),
        denial: Response::deny(
            503,
            format!("confighistory could not {what}: API server said: {}. Nothing was changed; retrying is safe", e.message),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
