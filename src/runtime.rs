//! One place that builds the processes: `serve`, `controller` and `gc`. Each gets the kube
//! client, the policy, and (for the long-running two) the cache, its watches, the shared
//! [`Context`] and the shutdown signal from here; `main` only parses and dispatches.
//!
//! This is the top layer: it may import every other module, and nothing imports it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use std::net::SocketAddr;

use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::cache::State;
use crate::cli::{ControllerCommandArgs, GcArgs, PolicyArgs, ServeArgs};
use crate::cluster::clock::{Clock, DateLayer};
use crate::cluster::{watch, KubeCluster};
use crate::context::Context;
use crate::model::kinds::Registry;
use crate::webhook::{self, serve, tls, App};

/// Why a command could not start. Each says what to check; `main` prints the cause below it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("no Kubernetes configuration: run in a pod with a ServiceAccount token, or set KUBECONFIG to a kubeconfig file")]
    Client(#[source] kube::Error),
    #[error(transparent)]
    Policy(#[from] crate::cli::Error),
    #[error("could not load the TLS certificate and key: check --tls-cert and --tls-key (the chart mounts them from its Secret)")]
    Tls(#[source] tls::Error),
    #[error("could not listen on {addr} ({flag}): another process has the port, or choose another address")]
    Bind { addr: SocketAddr, flag: &'static str, source: std::io::Error },
    #[error(transparent)]
    Controller(#[from] crate::controller::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The field manager of every write confighistory makes.
pub const FIELD_MANAGER: &str = "confighistory";

/// A kube client from the in-cluster configuration or KUBECONFIG.
pub async fn client() -> Result<kube::Client> {
    kube::Client::try_default().await.map_err(Error::Client)
}

/// Binds `addr`, given by `flag`.
async fn bind(addr: SocketAddr, flag: &'static str) -> Result<TcpListener> {
    TcpListener::bind(addr).await.map_err(|source| Error::Bind { addr, flag, source })
}

/// [`client`] whose every response's `Date` feeds `clock` (the API server's time).
async fn client_with_clock(clock: Arc<Clock>) -> Result<kube::Client> {
    let config = kube::Config::infer().await.map_err(|e| Error::Client(kube::Error::InferConfig(e)))?;
    Ok(kube::client::ClientBuilder::try_from(config).map_err(Error::Client)?.with_layer(&DateLayer(clock)).build())
}

/// The kube client, the shared context over a fresh cache, the watches that feed it, and the
/// The kinds, resolved here once against discovery, for the watches, the port and the loops.
/// `trust_revisions_before_now`: rollout history that exists when the process starts is taken
/// as it is; revisions created later count for undo only with a template a workload was seen
/// with (SPEC §9a). Only admission judges undos.
async fn start(policy: &PolicyArgs, trust_revisions_before_now: bool) -> Result<(kube::Client, Arc<Context>, &'static Registry)> {
    let policy = policy.policy()?;
    let clock = Arc::new(Clock::system());
    let client = client_with_clock(clock.clone()).await?;
    // The probe is a first response: from here the clock knows the API server's time.
    let kinds = watch::resolve_kinds(&client).await;
    let cluster = Arc::new(KubeCluster::new(client.clone(), FIELD_MANAGER, kinds));
    let mut state = State { kinds, ..State::default() };
    if trust_revisions_before_now {
        // Compared with revisions' creationTimestamps: the API server's time.
        let now = k8s_openapi::jiff::Timestamp::from_millisecond(clock.now_ms()).unwrap_or_default();
        state.revisions_trusted_before = Some(format!("{now:.0}"));
    }
    let state = Arc::new(RwLock::new(state));
    let shared = Arc::new(Context::new(policy, state.clone(), cluster).with_clock(clock).with_kinds(kinds));
    watch::start(client.clone(), state, shared.synced.clone(), kinds);
    Ok((client, shared, kinds))
}

/// Completes on SIGTERM or Ctrl-C: the one shutdown signal of every command.
pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut term) => tokio::select! { _ = ctrl_c => {}, _ = term.recv() => {} },
            Err(_) => {
                let _ = ctrl_c.await;
            }
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

/// Serves health and metrics on `listener` in the background.
fn spawn_health(listener: TcpListener, router: axum::Router) {
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router).await {
            tracing::error!(error = %e, "health server stopped");
        }
    });
}

/// `confighistory serve`: the admission webhook, and unless disabled the controller loops.
pub async fn serve(args: ServeArgs) -> Result<()> {
    let (tls_config, resolver) = tls::server_config(&args.tls_cert, &args.tls_key, args.client_ca.as_deref()).map_err(Error::Tls)?;
    let (client, shared, kinds) = start(&args.policy, true).await?;
    let tls_ready = Arc::new(AtomicBool::new(false));
    let app = Arc::new(App { ctx: shared.clone(), tls_ready: tls_ready.clone(), max_body: args.max_body_bytes });

    tokio::spawn(tls::watch(args.tls_cert.clone(), args.tls_key.clone(), resolver, tls_ready, Duration::from_secs(5)));
    let controller = (!args.no_controllers).then(|| {
        let mut controller = args.controller.clone();
        controller.leader_election_namespace.get_or_insert_with(|| args.policy.namespace.clone());
        crate::controller::spawn(client.clone(), shared.clone(), controller, kinds)
    });

    let health = bind(args.health_listen, "--health-listen").await?;
    spawn_health(health, webhook::health_router(app.clone()));

    let listener = bind(args.listen, "--listen").await?;
    tracing::info!(listen = %args.listen, health = %args.health_listen, "serving admission webhook");
    let deadline = Duration::from_secs_f64(args.admission_deadline.max(0.1));
    let router = serve::limited(webhook::router(app.clone()), app.clone(), args.max_body_bytes, args.max_concurrency, deadline);
    // On SIGTERM, report not-ready first and keep serving while the endpoints update, so a
    // rolling update of confighistory itself never drops an admission.
    let drain = Duration::from_secs(args.shutdown_delay);
    let shutdown = async move {
        shutdown_signal().await;
        tracing::info!(seconds = drain.as_secs(), "shutting down: not ready, draining");
        app.tls_ready.store(false, Ordering::Relaxed);
        tokio::time::sleep(drain).await;
    };
    serve::serve_tls_until(listener, TlsAcceptor::from(tls_config), router, shutdown).await;
    if let Some(controller) = controller {
        controller.shutdown().await;
    }
    Ok(())
}

/// `confighistory controller`: the watches and the loops without the admission server.
pub async fn controller(args: ControllerCommandArgs) -> Result<()> {
    let (client, shared, kinds) = start(&args.policy, false).await?;
    let mut controller = args.controller.clone();
    controller.leader_election_namespace.get_or_insert_with(|| args.policy.namespace.clone());
    let ctx = crate::controller::start(client, shared.clone(), controller, kinds).await?;
    let health = bind(args.health_listen, "--health-listen").await?;
    tracing::info!(health = %args.health_listen, "controller running");
    spawn_health(health, webhook::health(shared.synced.clone(), None));
    shutdown_signal().await;
    crate::controller::release(&ctx).await;
    Ok(())
}

/// `confighistory gc`: one sweep, printing every verdict (no cache, no watches: fresh lists).
pub async fn gc(args: GcArgs) -> Result<()> {
    let policy = args.policy.policy()?;
    let clock = Arc::new(Clock::system());
    let client = client_with_clock(clock.clone()).await?;
    let cluster = KubeCluster::new(client.clone(), FIELD_MANAGER, watch::resolve_kinds(&client).await);
    Ok(crate::controller::run_gc_command(&cluster, &clock, policy, args).await?)
}

/// Installs the process's log subscriber ([`subscriber`]) and the bridge for the `log` crate.
pub fn init_logging<W>(filter: &str, json: bool, ansi: bool, writer: W)
where
    W: for<'a> tracing_subscriber::fmt::MakeWriter<'a> + Send + Sync + 'static,
{
    use tracing_subscriber::util::SubscriberInitExt as _;
    subscriber(filter, json, ansi, writer).init();
}

/// The process's log subscriber: `json` or text, at `filter` (RUST_LOG syntax; `info` when it
/// does not parse), to `writer`, with colours only when `ansi`. `main`, the instruction benchmark
/// and the tests that read logs all use it, so they count and read what pods run.
///
/// tracing-subscriber's own formatters, not a cheaper hand-written one (measured in issue 17:
/// 3K instructions per admission): they also escape ANSI sequences in messages, which may quote
/// what a request carried, and leave out the `log` bridge's fields; a copy would have to keep up.
pub fn subscriber<W>(filter: &str, json: bool, ansi: bool, writer: W) -> Box<dyn tracing::Subscriber + Send + Sync>
where
    W: for<'a> tracing_subscriber::fmt::MakeWriter<'a> + Send + Sync + 'static,
{
    let filter = tracing_subscriber::EnvFilter::try_new(filter).unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let fmt = tracing_subscriber::fmt().with_env_filter(filter).with_writer(writer).with_ansi(ansi);
    if json {
        Box::new(fmt.json().finish())
    } else {
        Box::new(fmt.finish())
    }
}
