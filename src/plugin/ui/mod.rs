//! `kubectl confighistory ui`: a local, read-only web view of the plugin's models
//! (docs/plugin.md "Web view"). The server binds to loopback only and reads the cluster with the
//! plugin's own kube client (the user's credentials); the page is plain JS embedded in the binary.
//!
//! Handlers are thin: each reads with [`super::gather`] and answers with the JSON of the model
//! [`super::build`] makes for the matching command (`History`, `Diff`, `Status`, `Timeline`), so
//! the page shows exactly what the terminal commands show. A Secret's values are never sent: the
//! inventory is sealed ([`super::build::Inventory::sealed`]) and every diff is made without
//! `show_values`.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context as _, Result};
use axum::extract::{Path, Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use serde::Serialize;

use super::{build, gather, model};
use crate::model::kinds::Kind;
use crate::model::names;

const INDEX_HTML: &str = include_str!("assets/index.html");
const APP_JS: &str = include_str!("assets/app.js");
const APP_CSS: &str = include_str!("assets/app.css");

/// No inline script or style, nothing from elsewhere: every text on the page is the tenant's
/// (names, keys, values, authors), and the page builds its DOM from text nodes only.
pub const CSP: &str =
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// Workloads per page of `/api/namespaces/{ns}/workloads` unless `limit` says otherwise.
pub const DEFAULT_PAGE: u32 = 200;
const MAX_PAGE: u32 = 1000;

/// What the handlers share.
pub struct Ui {
    pub client: kube::Client,
    /// The namespace the page opens on (`-n`, else the kubeconfig's).
    pub namespace: String,
    pub server_config: String,
}

impl Ui {
    fn ctx(&self, namespace: &str) -> gather::Ctx {
        gather::Ctx { client: self.client.clone(), namespace: namespace.into(), server_config: self.server_config.clone() }
    }
}

/// The `Host` header values the server answers to: its own address, and `localhost` on its port
/// (a DNS-rebinding guard: a page of another site resolving its name to 127.0.0.1 sends its own
/// name).
pub fn allowed_hosts(addr: SocketAddr) -> Vec<String> {
    let port = addr.port();
    let mut out = vec![addr.to_string(), format!("localhost:{port}")];
    if port == 80 {
        out.push(match addr {
            SocketAddr::V4(a) => a.ip().to_string(),
            SocketAddr::V6(a) => format!("[{}]", a.ip()),
        });
        out.push("localhost".into());
    }
    out
}

/// An error answered as `{"error": "..."}`.
#[derive(Debug)]
pub struct ApiError(StatusCode, String);

impl ApiError {
    fn bad(msg: impl Into<String>) -> ApiError {
        ApiError(StatusCode::BAD_REQUEST, msg.into())
    }
    /// The cluster could not be read (kube I/O).
    fn cluster(e: anyhow::Error) -> ApiError {
        ApiError(StatusCode::BAD_GATEWAY, super::describe(&e))
    }
    /// What was asked for does not exist or cannot be shown (the plugin's own refusals).
    fn build(e: anyhow::Error) -> ApiError {
        ApiError(StatusCode::NOT_FOUND, super::describe(&e))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, Json(serde_json::json!({ "error": self.1 }))).into_response()
    }
}

type ApiResult<T> = std::result::Result<Json<T>, ApiError>;

/// `GET /api/namespaces`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Namespaces {
    /// The namespace the page opens on.
    pub current: String,
    pub namespaces: Vec<String>,
    /// Why the namespaces could not be listed (then only `current` is offered).
    pub unlistable: Option<String>,
}

/// `GET /api/namespaces/{ns}/workloads`: names only, one page.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Workloads {
    pub namespace: String,
    pub workloads: Vec<model::WorkloadRef>,
    /// Pass as `continue` for the next page; absent on the last.
    pub r#continue: Option<String>,
}

/// The router: the page, its assets and the JSON API, GET only, behind the host guard, with
/// the security headers on every answer.
pub fn router(ui: Arc<Ui>, hosts: Vec<String>) -> Router {
    let api = Router::new()
        .route("/api/namespaces", get(namespaces))
        .route("/api/namespaces/{ns}/workloads", get(workloads))
        .route("/api/namespaces/{ns}/sources", get(sources))
        .route("/api/namespaces/{ns}/history", get(history))
        .route("/api/namespaces/{ns}/diff", get(diff))
        .route("/api/namespaces/{ns}/workloads/{kind}/{name}/status", get(status))
        .route("/api/namespaces/{ns}/workloads/{kind}/{name}/timeline", get(timeline))
        .route("/api/namespaces/{ns}/workloads/{kind}/{name}/diff", get(revision_diff))
        .with_state(ui);
    let hosts = Arc::new(hosts);
    Router::new()
        .route("/", get(|| async { asset("text/html; charset=utf-8", INDEX_HTML) }))
        .route("/app.js", get(|| async { asset("text/javascript; charset=utf-8", APP_JS) }))
        .route("/app.css", get(|| async { asset("text/css; charset=utf-8", APP_CSS) }))
        .merge(api)
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::from_fn(move |req: Request, next: Next| guard(hosts.clone(), req, next)))
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, content_type)], body).into_response()
}

async fn not_found(req: Request) -> ApiError {
    ApiError(
        StatusCode::NOT_FOUND,
        format!(
            "no such page or API route: {}; the page is / and its JSON API is under /api/ (docs/plugin.md \"Web view\")",
            req.uri().path()
        ),
    )
}

async fn method_not_allowed(req: Request) -> ApiError {
    ApiError(StatusCode::METHOD_NOT_ALLOWED, format!("{} is not allowed: the web view is read-only (GET only)", req.method()))
}

/// The host guard, GET only, and the headers of every answer.
async fn guard(hosts: Arc<Vec<String>>, req: Request, next: Next) -> Response {
    let host = req.headers().get(header::HOST).and_then(|h| h.to_str().ok()).map(str::to_ascii_lowercase);
    let mut response = match host {
        Some(h) if hosts.contains(&h) => {
            if req.method() == Method::GET || req.method() == Method::HEAD {
                next.run(req).await
            } else {
                method_not_allowed(req).await.into_response()
            }
        }
        _ => ApiError(
            StatusCode::FORBIDDEN,
            format!(
                "refused: the Host header is not this server's address (a DNS-rebinding guard); open http://{}/",
                hosts.first().map(String::as_str).unwrap_or("127.0.0.1")
            ),
        )
        .into_response(),
    };
    let h = response.headers_mut();
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// The query's parameters, percent-decoded (`+` is a space).
fn query(req_query: Option<&str>) -> Vec<(String, String)> {
    fn decode(s: &str) -> String {
        let b = s.as_bytes();
        let mut out = Vec::with_capacity(b.len());
        let mut i = 0;
        while i < b.len() {
            match b[i] {
                b'+' => out.push(b' '),
                b'%' if i + 2 < b.len() => {
                    match std::str::from_utf8(&b[i + 1..i + 3]).ok().and_then(|h| u8::from_str_radix(h, 16).ok()).ok_or(()) {
                        Ok(v) => {
                            out.push(v);
                            i += 2;
                        }
                        Err(_) => out.push(b'%'),
                    }
                }
                c => out.push(c),
            }
            i += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    }
    req_query
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (decode(k), decode(v))
        })
        .collect()
}

fn param(uri: &axum::http::Uri, name: &str) -> Option<String> {
    query(uri.query()).into_iter().find(|(k, _)| k == name).map(|(_, v)| v)
}

fn required(uri: &axum::http::Uri, name: &str, example: &str) -> std::result::Result<String, ApiError> {
    param(uri, name)
        .filter(|v| !v.is_empty())
        .ok_or_else(|| ApiError::bad(format!("the query parameter {name} is missing, e.g. ?{example}")))
}

fn namespace(ns: &str) -> std::result::Result<&str, ApiError> {
    if names::is_dns_label(ns) {
        Ok(ns)
    } else {
        Err(ApiError::bad(format!("{ns:?} is not a valid namespace name")))
    }
}

async fn namespaces(State(ui): State<Arc<Ui>>) -> ApiResult<Namespaces> {
    let api: Api<DynamicObject> = Api::all_with(ui.client.clone(), &ApiResource::erase::<Namespace>(&()));
    let (mut list, unlistable) = match api.list_metadata(&ListParams::default()).await {
        Ok(l) => (l.items.into_iter().filter_map(|o| o.metadata.name).collect::<Vec<_>>(), None),
        Err(kube::Error::Api(s)) if s.code == 403 => {
            (Vec::new(), Some(format!("you may not list namespaces ({}): use -n to open another one", s.message)))
        }
        Err(e) => return Err(ApiError::cluster(anyhow::Error::new(e).context("list namespaces"))),
    };
    if !list.contains(&ui.namespace) {
        list.push(ui.namespace.clone());
    }
    list.sort();
    Ok(Json(Namespaces { current: ui.namespace.clone(), namespaces: list, unlistable }))
}

/// One page of workload names, kind after kind (the kinds `list` counts: Jobs are runs of their
/// CronJob), each kind paged by the API server (`limit`/`continue`): a namespace with thousands
/// of workloads is never read at once. The cursor is `KIND-INDEX:SERVER-TOKEN`.
async fn workloads(State(ui): State<Arc<Ui>>, Path(ns): Path<String>, uri: axum::http::Uri) -> ApiResult<Workloads> {
    let ns = namespace(&ns)?;
    let limit = match param(&uri, "limit") {
        None => DEFAULT_PAGE,
        Some(l) => l
            .parse::<u32>()
            .ok()
            .filter(|l| (1..=MAX_PAGE).contains(l))
            .ok_or_else(|| ApiError::bad(format!("limit must be 1 to {MAX_PAGE}")))?,
    };
    let (mut index, mut token) = match param(&uri, "continue").filter(|c| !c.is_empty()) {
        None => (0usize, String::new()),
        Some(c) => {
            let (i, t) = c.split_once(':').ok_or_else(|| ApiError::bad("continue: not a cursor this server gave"))?;
            (i.parse().map_err(|_| ApiError::bad("continue: not a cursor this server gave"))?, t.to_owned())
        }
    };
    let ctx = ui.ctx(ns);
    let server = gather::server(&ctx).await;
    let kinds = gather::kinds(&ctx, &server).await;
    let listed: Vec<Kind> = kinds.workloads().filter(|k| *k != Kind::Job).collect();
    let mut out = Vec::new();
    while index < listed.len() && (out.len() as u32) < limit {
        let kind = listed[index];
        let api: Api<DynamicObject> = Api::namespaced_with(ui.client.clone(), ns, &gather::resource(kind, kinds));
        let mut params = ListParams::default().limit(limit - out.len() as u32);
        if !token.is_empty() {
            params = params.continue_token(&token);
        }
        match api.list_metadata(&params).await {
            Ok(page) => {
                out.extend(
                    page.items
                        .into_iter()
                        .filter_map(|o| o.metadata.name)
                        .map(|name| model::WorkloadRef { kind: kind.name().into(), name }),
                );
                match page.metadata.continue_.filter(|c| !c.is_empty()) {
                    Some(next) => token = next,
                    None => (index, token) = (index + 1, String::new()),
                }
            }
            // A registered kind whose API is not served: no objects.
            Err(kube::Error::Api(s)) if s.code == 404 && !kind.is_builtin() => (index, token) = (index + 1, String::new()),
            Err(e) => return Err(ApiError::cluster(anyhow::Error::new(e).context(format!("list {} in {ns}", kind.name())))),
        }
    }
    let r#continue = (index < listed.len()).then(|| format!("{index}:{token}"));
    Ok(Json(Workloads { namespace: ns.into(), workloads: out, r#continue }))
}

async fn sources(State(ui): State<Arc<Ui>>, Path(ns): Path<String>) -> ApiResult<model::Sources> {
    let ctx = ui.ctx(namespace(&ns)?);
    gather::sources(&ctx, false).await.map(Json).map_err(ApiError::cluster)
}

/// The source named by `?source=` (as `history` takes it), read with the namespace: all of it
/// (`history` names every workload using a snapshot, a `WORKLOAD@N` side needs that workload),
/// else only the snapshots and the source ([`gather::source_inventory`]).
async fn source_inventory(
    ui: &Ui,
    ns: &str,
    uri: &axum::http::Uri,
    whole: bool,
) -> std::result::Result<(build::Inventory, String), ApiError> {
    let given = required(uri, "source", "source=pricing-config")?;
    let id = build::parse_source(&given).map_err(|e| ApiError::bad(super::describe(&e)))?;
    let ctx = ui.ctx(namespace(ns)?);
    let inv = if whole { gather::inventory(&ctx, std::slice::from_ref(&id)).await } else { gather::source_inventory(&ctx, &id).await };
    let inv = inv.map_err(ApiError::cluster)?;
    let source = super::resolve_source(&inv, &id);
    Ok((inv, source))
}

async fn history(State(ui): State<Arc<Ui>>, Path(ns): Path<String>, uri: axum::http::Uri) -> ApiResult<model::History> {
    let (inv, source) = source_inventory(&ui, &ns, &uri, true).await?;
    build::history(&inv, &source).map(Json).map_err(ApiError::build)
}

/// `diff SOURCE A B`, never with a Secret's values (there is no way to ask for them here).
async fn diff(State(ui): State<Arc<Ui>>, Path(ns): Path<String>, uri: axum::http::Uri) -> ApiResult<model::Diff> {
    let (a, b) = (param(&uri, "a").filter(|s| !s.is_empty()), param(&uri, "b").filter(|s| !s.is_empty()));
    let names_revision = [&a, &b].into_iter().flatten().any(|s| s.contains('@'));
    let (inv, source) = source_inventory(&ui, &ns, &uri, names_revision).await?;
    build::diff(&inv, &source, a.as_deref(), b.as_deref(), false).map(Json).map_err(ApiError::build)
}

/// What the workload's views need, read for that workload only ([`gather::workload_inventory`]),
/// and the workload named in the path as the server names its kind.
async fn workload_inventory(
    ui: &Ui,
    ns: &str,
    kind: &str,
    name: &str,
) -> std::result::Result<(build::Inventory, model::WorkloadRef), ApiError> {
    let wanted = build::parse_workload(&format!("{kind}/{name}")).map_err(|e| ApiError::bad(super::describe(&e)))?;
    gather::workload_inventory(&ui.ctx(namespace(ns)?), &wanted).await.map_err(|e| {
        // A workload that is not there (or of a kind the server does not register) is the
        // request's fault, not the cluster's.
        if e.to_string().contains(" not found in namespace ") || e.to_string().contains("workload kind") {
            ApiError::build(e)
        } else {
            ApiError::cluster(e)
        }
    })
}

async fn status(State(ui): State<Arc<Ui>>, Path((ns, kind, name)): Path<(String, String, String)>) -> ApiResult<model::Status> {
    let (inv, w) = workload_inventory(&ui, &ns, &kind, &name).await?;
    build::status(&inv, &w).map(Json).map_err(ApiError::build)
}

/// `history WORKLOAD`'s model, drawn by the page.
async fn timeline(State(ui): State<Arc<Ui>>, Path((ns, kind, name)): Path<(String, String, String)>) -> ApiResult<model::Timeline> {
    let (inv, w) = workload_inventory(&ui, &ns, &kind, &name).await?;
    super::timeline::timeline(&inv, &w).map(Json).map_err(ApiError::build)
}

/// `diff WORKLOAD --from-revision A --to-revision B`'s model (`a`, `b` optional as there),
/// never with a Secret's values.
async fn revision_diff(
    State(ui): State<Arc<Ui>>,
    Path((ns, kind, name)): Path<(String, String, String)>,
    uri: axum::http::Uri,
) -> ApiResult<model::RevisionDiff> {
    let rev = |p: &str| -> std::result::Result<Option<i64>, ApiError> {
        match param(&uri, p).filter(|v| !v.is_empty()) {
            None => Ok(None),
            Some(v) => v.parse().map(Some).map_err(|_| ApiError::bad(format!("{p} must be a revision number, e.g. ?a=1&b=2"))),
        }
    };
    let (a, b) = (rev("a")?, rev("b")?);
    let (inv, w) = workload_inventory(&ui, &ns, &kind, &name).await?;
    super::timeline::revision_diff(&inv, &w, a, b, false).map(Json).map_err(ApiError::build)
}

/// Completes on SIGTERM or Ctrl-C.
async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    if let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        tokio::select! { _ = ctrl_c => {}, _ = term.recv() => {} }
        return;
    }
    let _ = ctrl_c.await;
}

/// `kubectl confighistory ui`: binds `address:port` (loopback only), prints the URL as the
/// first line of stdout and serves until Ctrl-C or SIGTERM.
pub async fn serve(ui: Ui, address: std::net::IpAddr, port: u16) -> Result<()> {
    if !address.is_loopback() {
        anyhow::bail!(
            "--address {address} is not a loopback address: the web view answers with your credentials and asks no password, so it listens on 127.0.0.1 or ::1 only (reach it from elsewhere through an SSH tunnel)"
        );
    }
    let listener = tokio::net::TcpListener::bind((address, port)).await.with_context(|| format!("listen on {address}:{port}"))?;
    let bound = listener.local_addr()?;
    let hosts = allowed_hosts(bound);
    {
        use std::io::Write as _;
        let mut out = std::io::stdout().lock();
        writeln!(out, "Serving on http://{bound}/ (Ctrl-C to stop)")?;
        out.flush()?;
    }
    axum::serve(listener, router(Arc::new(ui), hosts)).with_graceful_shutdown(shutdown_signal()).await.context("serve the web view")
}

#[cfg(test)]
mod tests;
