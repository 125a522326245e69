//! One place that builds the processes: `serve`, `controller` and `gc`. Each gets the kube
//! client, the policy, and (for the long-running two) the cache, its watches, the shared
//! [`Context`] and the shutdown signal from here; `main` only parses and dispatches.
//!
//! This is the top layer: it may import every other module, and nothing imports it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use std::time::Duration;

use std::net::SocketAddr;

use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::cache::{Lock, State};
use crate::cli::{ControllerCommandArgs, GcArgs, PolicyArgs, RotateKeysArgs, SelftestArgs, ServeArgs};
use crate::cluster::clock::{Clock, DateLayer};
use crate::cluster::{watch, KubeCluster, ObjectRef};
use crate::context::Context;
use crate::model::kinds::Registry;
use crate::model::published::EffectiveConfig;
use crate::store::authority;
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
    /// With --secrets, the cluster keys could not be read or made (docs/operations.md, "Secrets'
    /// cluster key"): no Secret snapshot could be named or checked.
    #[error(transparent)]
    Keys(#[from] crate::store::keys::Error),
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
/// with (docs/behaviour.md §9a). Only admission judges undos.
/// `regarding`: the object of the release namespace that Events about the process itself (a
/// registered kind not served) are recorded on.
async fn start(
    args: &PolicyArgs,
    trust_revisions_before_now: bool,
    regarding: ObjectRef,
) -> Result<(kube::Client, Arc<Context>, &'static Registry)> {
    let policy = args.policy()?;
    let registry = args.kinds()?;
    let clock = Arc::new(Clock::system());
    let client = client_with_clock(clock.clone()).await?;
    // The probe is a first response: from here the clock knows the API server's time.
    let kinds = watch::resolve_kinds(&client, registry).await;
    crate::metrics::METRICS.set_kinds(kinds);
    let cluster = Arc::new(KubeCluster::new(client.clone(), FIELD_MANAGER, kinds));
    if policy.secrets.enabled {
        // Secrets on (docs/behaviour.md §4a): the keys their snapshots are named under, read or
        // made before anything is watched or admitted.
        let target = crate::store::keys::Target::from_args(args);
        let ring = crate::store::keys::ensure(cluster.as_ref(), &target).await?;
        tracing::info!(secret = %format!("{}/{}", target.namespace, target.secret), key_ids = ?ring.ids().map(|i| i.0).collect::<Vec<_>>(),
            namespaces = %policy.secrets.namespaces, "Secrets are versioned");
        policy.secrets.keys.set(ring);
        // A rotation reaches this process without a restart (docs/operations.md).
        let (cluster, slot) = (cluster.clone(), policy.secrets.keys.clone());
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(crate::store::keys::RELOAD_INTERVAL).await;
                if let Err(e) = crate::store::keys::reload(cluster.as_ref(), &target, &slot).await {
                    tracing::warn!(error = %e, "cluster keys: could not read them again; the keys held stay in use");
                }
            }
        });
    }
    crate::metrics::METRICS.set_sources(policy.acted_on());
    let mut state = State::keeping_labels(&policy.excluded_sources);
    state.set_kinds(kinds);
    state.set_source_kinds(policy.acted_on());
    if trust_revisions_before_now {
        // Compared with revisions' creationTimestamps: the API server's time.
        let now = k8s_openapi::jiff::Timestamp::from_millisecond(clock.now_ms()).unwrap_or_default();
        state.set_revisions_trusted_before(Some(format!("{now:.0}")));
    }
    let state = Arc::new(Lock::new(state));
    let report = watch::Reporter { cluster: cluster.clone(), regarding };
    let shared = Arc::new(Context::new(policy, state.clone(), cluster).with_clock(clock).with_kinds(kinds));
    watch::start(client.clone(), state, kinds, Some(report));
    Ok((client, shared, kinds))
}

/// A ConfigMap of `namespace` as an Event's subject (`name` empty: the namespace's default
/// ServiceAccount's root CA, which every namespace has).
fn configmap_ref(namespace: &str, name: &str) -> ObjectRef {
    let name = if name.is_empty() { crate::model::names::ROOT_CA } else { name };
    ObjectRef {
        api_version: "v1".into(),
        kind: crate::model::ids::CONFIGMAP.into(),
        namespace: namespace.into(),
        name: name.into(),
        uid: String::new(),
    }
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

/// Where `serve`'s certificate comes from: the servers' own CA with `--tls-secret`, else the files.
fn tls_source(args: &ServeArgs) -> tls::Source {
    match args.tls_secret.as_deref().filter(|s| !s.is_empty()) {
        Some(secret) => tls::Source::Managed(authority::Target {
            namespace: args.policy.namespace.clone(),
            secret: secret.to_owned(),
            configurations: args.webhook_configurations.iter().filter(|n| !n.is_empty()).cloned().collect(),
            names: args.tls_names.iter().map(|n| n.trim().to_owned()).filter(|n| !n.is_empty()).collect(),
            replica: replica_id(&args.replica_id),
            timing: authority::Timing::new(Duration::from_secs(args.tls_validity)),
        }),
        None => tls::Source::Files { cert: args.tls_cert.clone(), key: args.tls_key.clone(), every: Duration::from_secs(5) },
    }
}

/// `confighistory serve`: the admission webhook, and unless disabled the controller loops.
pub async fn serve(args: ServeArgs) -> Result<()> {
    let client_auth =
        args.client_ca.as_deref().map(|ca| tls::ClientAuth::load(ca, args.client_names.clone())).transpose().map_err(Error::Tls)?;
    if client_auth.is_some() && args.client_names.iter().all(|n| n.trim().is_empty()) {
        tracing::warn!("--client-ca without --client-names: any certificate the CA signed is accepted, kubelets' and users' too if it is the cluster CA");
    }
    let source = tls_source(&args);
    let resolver = source.resolver().map_err(Error::Tls)?;
    let tls_config = tls::server_config_with(resolver.clone(), client_auth.clone()).map_err(Error::Tls)?;
    // The published configuration's ConfigMap: what an admin looks at for this server.
    let regarding = configmap_ref(&args.policy.namespace, &args.effective_config);
    let (client, shared, kinds) = start(&args.policy, true, regarding).await?;
    let tls_ready = Arc::new(AtomicBool::new(false));
    let memory = crate::cli::memory_budget(args.memory_budget_bytes);
    tracing::info!(budget_bytes = memory, "admission memory budget");
    let app = Arc::new(App {
        ctx: shared.clone(),
        tls_ready: tls_ready.clone(),
        max_body: args.max_body_bytes,
        namespace_reads: Arc::default(),
        source_reads: Arc::default(),
        memory: Arc::new(webhook::memory::Memory::new(memory)),
        secret_heads: Arc::default(),
        mixed_fleet_until: Some(std::time::Instant::now() + webhook::MIXED_FLEET),
    });

    if let tls::Source::Managed(target) = &source {
        if target.names.is_empty() || target.configurations.is_empty() {
            tracing::warn!(
                "--tls-secret without --tls-names or --webhook-configurations: the certificate names no host, or no webhook gets its CA"
            );
        }
        tracing::info!(secret = %format!("{}/{}", target.namespace, target.secret), replica = %target.replica, "server-managed certificates");
    }
    tokio::spawn(source.run(client.clone(), shared.clock.clone(), resolver, tls_ready));
    if let Some(auth) = client_auth {
        tokio::spawn(tls::watch_client_ca(auth, Duration::from_secs(5)));
    }
    let controller = (!args.no_controllers).then(|| {
        let mut controller = args.controller.clone();
        controller.leader_election_namespace.get_or_insert_with(|| args.policy.namespace.clone());
        let port = KubeCluster::new(client.clone(), FIELD_MANAGER, kinds).for_controller();
        crate::controller::spawn(port.client.clone(), shared.clone(), Arc::new(port), controller, kinds)
    });

    if !args.effective_config.is_empty() {
        let doc = args.effective_config(&shared.policy, kinds);
        tokio::spawn(publish(client.clone(), args.policy.namespace.clone(), args.effective_config.clone(), doc));
    }

    let health = bind(args.health_listen, "--health-listen").await?;
    spawn_health(health, webhook::health_router(app.clone()));

    let listener = bind(args.listen, "--listen").await?;
    tracing::info!(listen = %args.listen, health = %args.health_listen, "serving admission webhook");
    let deadline = Duration::from_secs_f64(args.admission_deadline.max(0.1));
    let router = serve::limited(webhook::router(app.clone()), app.clone(), args.max_body_bytes, args.max_concurrency, deadline);
    // On SIGTERM, report not-ready first and keep serving while the endpoints update, so a
    // rolling update of confighistory itself never drops an admission.
    let drain = Duration::from_secs(args.shutdown_delay);
    let (draining_tx, mut draining_rx) = tokio::sync::watch::channel(false);
    let draining = async move {
        shutdown_signal().await;
        tracing::info!(seconds = drain.as_secs(), "shutting down: not ready, draining");
        app.tls_ready.store(false, Ordering::Relaxed);
        draining_tx.send_replace(true);
    };
    let shutdown = async move {
        let _ = draining_rx.wait_for(|d| *d).await;
        tokio::time::sleep(drain).await;
    };
    serve::serve_tls_until(listener, TlsAcceptor::from(tls_config), router, draining, shutdown).await;
    if let Some(controller) = controller {
        controller.shutdown().await;
    }
    Ok(())
}

/// This replica's name in the managed certificates' records: the flag, else the host name (a
/// pod's name), else the process id.
fn replica_id(flag: &str) -> String {
    let host = || std::env::var("HOSTNAME").ok().or_else(|| std::fs::read_to_string("/etc/hostname").ok());
    let id = Some(flag.trim().to_owned()).filter(|f| !f.is_empty()).or_else(host).unwrap_or_default();
    let id = id.trim().to_owned();
    if id.is_empty() {
        format!("pid-{}", std::process::id())
    } else {
        id
    }
}

/// How often the published configuration is written again: a ConfigMap re-created (a
/// reinstall) or reset by a tool gets it back within this time.
const PUBLISH_EVERY: Duration = Duration::from_secs(60);

/// Keeps the effective configuration published in the annotation of ConfigMap `namespace/name`
/// (docs/operations.md, "What the server does"). Every replica writes the same document with a
/// merge patch of that one annotation: the chart's ServiceAccount may patch ConfigMaps, and its
/// admission policy guard allows it to change `confighistory.io/` annotations only. A direct
/// kube call, like the Lease's: nothing below the runtime needs it.
async fn publish(client: kube::Client, namespace: String, name: String, doc: EffectiveConfig) {
    use kube::api::{Api, Patch, PatchParams};
    let api: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client, &namespace);
    let text = serde_json::to_string(&doc).unwrap_or_default();
    let patch = serde_json::json!({"metadata": {"annotations": {crate::model::names::EFFECTIVE_CONFIG: text}}});
    let params = PatchParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() };
    // Log changes of outcome only: one line when it works, one when it stops working.
    let mut last_ok = None;
    loop {
        match api.patch(&name, &params, &Patch::Merge(&patch)).await {
            Ok(_) if last_ok != Some(true) => {
                tracing::info!(configmap = %format!("{namespace}/{name}"), "published the effective configuration");
                last_ok = Some(true);
            }
            Ok(_) => {}
            Err(e) if last_ok != Some(false) => {
                let hint = match &e {
                    kube::Error::Api(s) if s.code == 404 => "the chart creates it (templates/effective-config.yaml); until it exists, kubectl confighistory cannot show what this server does",
                    kube::Error::Api(s) if s.code == 403 => "the ServiceAccount needs patch on ConfigMaps (the chart's ClusterRole grants it)",
                    _ => "will retry",
                };
                tracing::warn!(configmap = %format!("{namespace}/{name}"), error = %e, hint, "cannot publish the effective configuration");
                last_ok = Some(false);
            }
            Err(_) => {}
        }
        tokio::time::sleep(PUBLISH_EVERY).await;
    }
}

/// `confighistory controller`: the watches and the loops without the admission server.
pub async fn controller(args: ControllerCommandArgs) -> Result<()> {
    let mut controller = args.controller.clone();
    controller.leader_election_namespace.get_or_insert_with(|| args.policy.namespace.clone());
    // Its Lease: the one object of the release namespace a controller-only process owns.
    let regarding = ObjectRef {
        api_version: "coordination.k8s.io/v1".into(),
        kind: "Lease".into(),
        namespace: controller.leader_election_namespace.clone().unwrap_or_default(),
        name: controller.lease_name.clone(),
        uid: String::new(),
    };
    let (client, shared, kinds) = start(&args.policy, false, regarding).await?;
    let port = KubeCluster::new(client, FIELD_MANAGER, kinds).for_controller();
    let ctx = crate::controller::start(port.client.clone(), shared.clone(), Arc::new(port), controller, kinds).await?;
    let health = bind(args.health_listen, "--health-listen").await?;
    tracing::info!(health = %args.health_listen, "controller running");
    spawn_health(health, webhook::health(shared.ready.clone(), None));
    shutdown_signal().await;
    crate::controller::release(&ctx).await;
    Ok(())
}

/// `confighistory gc`: one sweep, printing every verdict (no cache, no watches: fresh lists).
pub async fn gc(args: GcArgs) -> Result<()> {
    let policy = args.policy.policy()?;
    let clock = Arc::new(Clock::system());
    let client = client_with_clock(clock.clone()).await?;
    let cluster = KubeCluster::new(client.clone(), FIELD_MANAGER, watch::resolve_kinds(&client, args.policy.kinds()?).await);
    if policy.secrets.enabled {
        // Secret snapshots are validated under the cluster keys, read (never made) here: without
        // them no Secret snapshot is swept (docs/behaviour.md §4a).
        let target = crate::store::keys::Target::from_args(&args.policy);
        match crate::store::keys::load(&cluster, &target).await? {
            Some(ring) => policy.secrets.keys.set(ring),
            None => {
                eprintln!("the cluster keys Secret {}/{} does not exist: Secret snapshots are not swept", target.namespace, target.secret)
            }
        }
    }
    Ok(crate::controller::run_gc_command(&cluster, &clock, policy, args).await?)
}

/// `confighistory rotate-keys`: adds a new cluster key to the keys Secret and makes it current,
/// keeping the old ones (docs/operations.md "Secrets' cluster key"); running servers take it within
/// `store::keys::RELOAD_INTERVAL`. Prints key ids, never a key.
pub async fn rotate_keys(args: RotateKeysArgs) -> Result<()> {
    let clock = Arc::new(Clock::system());
    let client = client_with_clock(clock).await?;
    let cluster = KubeCluster::new(client.clone(), FIELD_MANAGER, crate::model::kinds::Registry::builtin());
    let target = crate::store::keys::Target::from_args(&args.policy);
    let ring = crate::store::keys::rotate(&cluster, &target).await?;
    let kept: Vec<String> = ring.ids().map(|i| i.to_string()).collect();
    println!(
        "rotated the cluster keys in Secret {}/{}: new Secret content is MAC'd under key {}; kept {} (existing snapshots stay valid); running servers take it within {} s",
        target.namespace,
        target.secret,
        ring.current().id(),
        kept.join(", "),
        crate::store::keys::RELOAD_INTERVAL.as_secs()
    );
    Ok(())
}

/// `confighistory selftest` (the chart's `helm test`): a ConfigMap created for real (the
/// webhook pins only content that exists), a server-side dry run of a Deployment that mounts it
/// (nothing else is written: the webhooks write no snapshot for a dry run), and the answer must
/// reference the ConfigMap's snapshot. The ConfigMap is deleted whatever the outcome.
pub async fn selftest(args: SelftestArgs) -> Result<(), anyhow::Error> {
    use kube::api::Api;
    let client = client().await?;
    let configmaps: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), &args.namespace);
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> = Api::namespaced(client, &args.namespace);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(args.wait_seconds);
    let mut attempt = 0u32;
    loop {
        attempt += 1;
        match selftest_once(&configmaps, &deployments, &args.namespace, attempt).await {
            Ok((name, snapshot)) => {
                println!("ok: a Deployment mounting ConfigMap {name} in namespace {} is pinned to its snapshot {snapshot}", args.namespace);
                return Ok(());
            }
            Err(e) if std::time::Instant::now() < deadline => {
                eprintln!("attempt {attempt}: {e:#}; trying again in 2 s");
                tokio::time::sleep(std::time::Duration::from_secs(2)).await;
            }
            Err(e) if attempt > 1 => return Err(e.context(format!("still failing after {attempt} attempts in {} s", args.wait_seconds))),
            Err(e) => return Err(e),
        }
    }
}

/// One try of [`selftest`]: create a ConfigMap, dry-run a Deployment mounting it, delete the
/// ConfigMap; the ConfigMap's name and the snapshot the answer names.
async fn selftest_once(
    configmaps: &kube::Api<k8s_openapi::api::core::v1::ConfigMap>,
    deployments: &kube::Api<k8s_openapi::api::apps::v1::Deployment>,
    namespace: &str,
    attempt: u32,
) -> Result<(String, String), anyhow::Error> {
    use kube::api::{DeleteParams, PostParams};
    let (source, deployment) = selftest_objects(&format!("{}-{attempt}", std::process::id()))?;
    let created = configmaps.create(&PostParams::default(), &source).await.map_err(|e| {
        anyhow::anyhow!(
            "create ConfigMap {} in namespace {namespace}: {e} (the test's Role must allow it)",
            source.metadata.name.as_deref().unwrap_or_default(),
        )
    })?;
    let name = created.metadata.name.clone().unwrap_or_default();
    let dry = PostParams { dry_run: true, field_manager: Some(FIELD_MANAGER.into()) };
    let answer = deployments.create(&dry, &deployment).await;
    let deleted = configmaps.delete(&name, &DeleteParams::default()).await;
    let answer = answer.map_err(|e| anyhow::anyhow!("dry run of a Deployment in namespace {namespace}: {e}"))?;
    let verdict = selftest_verdict(&created, &serde_json::to_value(&answer)?);
    if let Err(e) = deleted {
        tracing::warn!(configmap = %name, error = %e, "could not delete the test ConfigMap");
    }
    let snapshot = verdict.map_err(|e| anyhow::anyhow!("namespace {namespace}: {e}"))?;
    Ok((name, snapshot))
}

/// The ConfigMap and the Deployment of [`selftest`] (`id` makes the ConfigMap's name unique).
fn selftest_objects(
    id: &str,
) -> Result<(k8s_openapi::api::core::v1::ConfigMap, k8s_openapi::api::apps::v1::Deployment), serde_json::Error> {
    let name = format!("confighistory-selftest-{id}");
    let labels = serde_json::json!({"app.kubernetes.io/name": "confighistory-selftest"});
    let source = serde_json::json!({
        "metadata": {"name": name, "labels": labels},
        "data": {"selftest": format!("written by confighistory selftest {id}")},
    });
    let deployment = serde_json::json!({
        "metadata": {"name": "confighistory-selftest", "labels": labels},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [{"name": "c", "image": "confighistory-selftest", "volumeMounts": [{"name": "config", "mountPath": "/config"}]}],
                    "volumes": [{"name": "config", "configMap": {"name": name}}],
                },
            },
        },
    });
    Ok((serde_json::from_value(source)?, serde_json::from_value(deployment)?))
}

/// Whether the dry run's answer references the snapshot of `source`'s content: its name, or why
/// not.
fn selftest_verdict(source: &k8s_openapi::api::core::v1::ConfigMap, answer: &serde_json::Value) -> Result<String, String> {
    use crate::model::snapshot::{self, Content};
    let source = serde_json::to_value(source).map_err(|e| e.to_string())?;
    let name = source.pointer("/metadata/name").and_then(serde_json::Value::as_str).unwrap_or_default();
    let hash = Content::from_object(&source).hash();
    let refs = crate::model::template::ref_sources(
        answer.pointer("/spec/template").unwrap_or(&serde_json::Value::Null),
        crate::model::ids::SourceKinds::CONFIGMAPS,
    );
    if let Some(pinned) = refs.iter().find(|r| snapshot::parse_name(&r.name).is_some_and(|(s, h, _)| s == name && h == hash)) {
        return Ok(pinned.name.clone());
    }
    Err(format!(
        "the Deployment was admitted referencing {} instead of the snapshot of ConfigMap {name}: confighistory's webhook did not pin it \
         (is the server running and reachable by the API server, is this namespace in rewrite mode and not excluded?)",
        refs.iter().map(|r| r.name.as_str()).collect::<Vec<_>>().join(", ")
    ))
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
/// tracing-subscriber's own formatters, not a cheaper hand-written one (measured:
/// 3K instructions per admission): they also escape ANSI sequences in messages, which may quote
/// what a request carried, and leave out the `log` bridge's fields; a copy would have to keep up.
/// The log target whose lines quote API responses whole, capped at `error` whatever the filter asks.
pub const QUOTES_BODIES: &str = "kube_client::client=error";

pub fn subscriber<W>(filter: &str, json: bool, ansi: bool, writer: W) -> Box<dyn tracing::Subscriber + Send + Sync>
where
    W: for<'a> tracing_subscriber::fmt::MakeWriter<'a> + Send + Sync + 'static,
{
    let filter = tracing_subscriber::EnvFilter::try_new(filter).unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // kube's client quotes whole response bodies in its own warnings (a body that does not parse)
    // and debug/trace lines: with Secrets on, a Secret's values (docs/behaviour.md §4a). Its errors
    // come back to this code, which logs what the port keeps of them; its own lines stay off at
    // any level asked for.
    let filter = filter.add_directive(QUOTES_BODIES.parse().expect("a valid directive"));
    let fmt = tracing_subscriber::fmt().with_env_filter(filter).with_writer(writer).with_ansi(ansi);
    if json {
        Box::new(fmt.json().finish())
    } else {
        Box::new(fmt.finish())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// kube's client logs whole response bodies (a Secret's values, with Secrets on) in its
    /// warnings and debug lines: whatever level is asked for, even for its own target, none is
    /// written; its errors and everything else are.
    #[test]
    fn kubes_client_lines_that_quote_bodies_are_never_written() {
        #[derive(Clone, Default)]
        struct Out(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
        impl std::io::Write for Out {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(buf);
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        for filter in ["trace", "debug", "info", "kube_client=trace", "kube_client::client=trace", "trace,kube_client::client=trace"] {
            let out = Out::default();
            let writer = out.clone();
            let sub = subscriber(filter, false, false, move || writer.clone());
            tracing::subscriber::with_default(sub, || {
                tracing::warn!(target: "kube_client::client", "canary-body-warn, expected value");
                tracing::debug!(target: "kube_client::client", "Unsuccessful data error parse: canary-body-debug");
                tracing::trace!(target: "kube_client::client", "Status from canary-body-trace");
                tracing::error!(target: "kube_client::client", "failed with status 500");
                tracing::warn!(target: "confighistory::controller", "our own line");
            });
            let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
            assert!(!text.contains("canary-body"), "{filter}: {text}");
            assert!(text.contains("failed with status 500"), "{filter}: kube's errors are kept: {text}");
            assert!(text.contains("our own line") || filter.starts_with("kube_client"), "{filter}: {text}");
        }
    }

    /// The selftest passes only when the answer references the snapshot of the ConfigMap's own
    /// content, by its snapshot name.
    #[test]
    fn the_selftest_passes_only_for_the_snapshot_of_its_configmap() {
        use crate::model::snapshot::{self, Content};
        let (source, deployment) = selftest_objects("7").unwrap();
        let hash = Content::from_object(&serde_json::to_value(&source).unwrap()).hash();
        let mut answer = serde_json::to_value(&deployment).unwrap();
        let unpinned = selftest_verdict(&source, &answer).unwrap_err();
        assert!(unpinned.contains("referencing confighistory-selftest-7 instead of the snapshot"), "{unpinned}");
        let pinned = snapshot::name("confighistory-selftest-7", &hash, 0);
        answer["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"] = pinned.clone().into();
        assert_eq!(selftest_verdict(&source, &answer), Ok(pinned));
        answer["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"] =
            snapshot::name("confighistory-selftest-7", &"a".repeat(hash.len()), 0).into();
        assert!(selftest_verdict(&source, &answer).is_err(), "another content's snapshot is not a pass");
    }
}
