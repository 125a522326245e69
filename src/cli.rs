//! Command-line interface. Every flag is also an environment variable.
//!
//! The configuration layer (docs/architecture.md): plain data that says what the process was told,
//! built on `model` only, so the runtime, the loops and the edge can all take their settings
//! from here without reaching up.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::model::kinds::Registry;
use crate::model::policy::Policy;
use crate::model::published::EffectiveConfig;

/// Default body limit: a 1 MiB ConfigMap UPDATE carries object and oldObject, and kubectl's
/// last-applied annotation can double each.
/// The memory budget for admissions where no memory limit can be read (tests, tools, a server
/// outside a container): 256 MiB.
pub const DEFAULT_MEMORY_BUDGET: usize = 256 << 20;

/// The memory admissions may take, from `--memory-budget-bytes` or, when that is 0, from the
/// container's memory limit (cgroup v2 `memory.max`, else v1 `memory.limit_in_bytes`): three
/// eighths of it, the rest for the caches, the request bodies' own budget and the allocator's
/// slack (docs/reliability.md, "The memory model").
pub fn memory_budget(flag: usize) -> usize {
    if flag > 0 {
        return flag;
    }
    let read = |path: &str| std::fs::read_to_string(path).ok().and_then(|s| s.trim().parse::<u64>().ok());
    let limit = read("/sys/fs/cgroup/memory.max").or_else(|| read("/sys/fs/cgroup/memory/memory.limit_in_bytes"));
    budget_of_limit(limit)
}

/// Three eighths of a memory limit; [`DEFAULT_MEMORY_BUDGET`] with none (cgroup v1 says "none"
/// with a number near 2^63).
pub fn budget_of_limit(limit: Option<u64>) -> usize {
    match limit {
        Some(l) if l < (1 << 50) => usize::try_from(l / 8 * 3).unwrap_or(DEFAULT_MEMORY_BUDGET),
        _ => DEFAULT_MEMORY_BUDGET,
    }
}

pub const DEFAULT_MAX_BODY: usize = 8 * 1024 * 1024;

/// Default name of the Secret in --namespace holding the cluster keys (`--keys-secret`).
pub const DEFAULT_KEYS_SECRET: &str = "confighistory-keys";

#[derive(Parser, Debug)]
#[command(name = "confighistory", version, about = "Gives ConfigMaps a rollout history: an admission webhook and its controller")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Log format: text or json.
    #[arg(long, env = "CONFIGHISTORY_LOG_FORMAT", default_value = "text", global = true)]
    pub log_format: String,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Serve the admission webhook (and, unless disabled, run the controller loops).
    Serve(Box<ServeArgs>),
    /// Run only the controller loops (propagation, adoption, repair, GC), without the webhook.
    Controller(ControllerCommandArgs),
    /// Sweep snapshots once: print what is deleted and why each kept snapshot is kept.
    Gc(GcArgs),
    /// Prove that a live install pins (the chart's `helm test`): create a ConfigMap in a
    /// namespace, ask the API server for a dry run of a Deployment using it, check the answer
    /// names its snapshot, delete the ConfigMap.
    Selftest(SelftestArgs),
    /// Add a new cluster key for Secret snapshots and make it current, keeping the old ones
    /// (with --secrets; running servers take it within 30 s, existing snapshots stay valid).
    RotateKeys(RotateKeysArgs),
}

#[derive(Args, Debug, Clone)]
pub struct RotateKeysArgs {
    /// --namespace and --keys-secret name the keys Secret.
    #[command(flatten)]
    pub policy: PolicyArgs,
}

#[derive(Args, Debug, Clone)]
pub struct SelftestArgs {
    /// Namespace to test in: one confighistory acts in, in rewrite mode.
    #[arg(long = "in-namespace", env = "CONFIGHISTORY_SELFTEST_NAMESPACE", default_value = "default")]
    pub namespace: String,
    /// Seconds to keep trying, every 2 s, until a dry run comes back pinned (0: one try). Right
    /// after an install the API server may not reach the new pods yet (endpoints, the caBundle
    /// the servers write): the chart's post-install check waits this long before failing.
    #[arg(long = "wait-seconds", env = "CONFIGHISTORY_SELFTEST_WAIT_SECONDS", default_value_t = 0)]
    pub wait_seconds: u64,
}

#[derive(Args, Debug, Clone)]
pub struct ControllerCommandArgs {
    /// Plain-HTTP address for /livez, /readyz and /metrics.
    #[arg(long, env = "CONFIGHISTORY_HEALTH_LISTEN", default_value = "0.0.0.0:8080")]
    pub health_listen: SocketAddr,
    #[command(flatten)]
    pub policy: PolicyArgs,
    #[command(flatten)]
    pub controller: ControllerArgs,
}

#[derive(Args, Debug, Clone)]
pub struct GcArgs {
    /// Print what would be deleted; change nothing.
    #[arg(long, env = "CONFIGHISTORY_GC_DRY_RUN")]
    pub dry_run: bool,
    /// Sweep only this namespace (default: every namespace holding snapshots).
    #[arg(long = "only-namespace", env = "CONFIGHISTORY_GC_NAMESPACE")]
    pub namespace_filter: Option<String>,
    /// Newest snapshots kept per source regardless of use.
    #[arg(long = "gc-keep", env = "CONFIGHISTORY_GC_KEEP", default_value_t = 5)]
    pub keep: usize,
    /// Seconds a snapshot is kept after it was last in use.
    #[arg(long = "gc-grace", env = "CONFIGHISTORY_GC_GRACE", default_value_t = 600)]
    pub grace: u64,
    #[command(flatten)]
    pub policy: PolicyArgs,
}

#[derive(Args, Debug, Clone)]
pub struct PolicyArgs {
    /// Own username, for the rules that trust confighistory's own writes only.
    #[arg(long, env = "CONFIGHISTORY_IDENTITY", default_value = "system:serviceaccount:confighistory:confighistory")]
    pub identity: String,
    /// Own namespace (never acted in).
    #[arg(long, env = "CONFIGHISTORY_NAMESPACE", default_value = "confighistory")]
    pub namespace: String,
    /// More namespaces to leave alone, comma-separated.
    #[arg(long, env = "CONFIGHISTORY_EXCLUDE_NAMESPACES", value_delimiter = ',', default_value = "")]
    pub exclude_namespaces: Vec<String>,
    /// Mode of namespaces without a (permitted) confighistory.io/mode label.
    #[arg(long, env = "CONFIGHISTORY_DEFAULT_MODE", default_value = "rewrite")]
    pub default_mode: String,
    /// Modes a namespace may choose for itself with its label, comma-separated.
    #[arg(long, env = "CONFIGHISTORY_ALLOWED_MODES", value_delimiter = ',', default_value = "rewrite,enforce,audit")]
    pub allowed_modes: Vec<String>,
    /// Label selector of ConfigMaps that are never versioned (e.g. CA bundles rewritten by controllers).
    #[arg(long, env = "CONFIGHISTORY_EXCLUDED_SOURCES_SELECTOR", default_value = "")]
    pub excluded_sources_selector: String,
    /// Settle window in seconds between a config-only edit and its propagation.
    #[arg(long, env = "CONFIGHISTORY_SETTLE", default_value_t = 10)]
    pub settle: u64,
    /// Usernames besides its own allowed to create snapshots carrying adoption records, owner
    /// references or finalizers (backup/restore tools), comma-separated.
    #[arg(long, env = "CONFIGHISTORY_SNAPSHOT_CREATORS", value_delimiter = ',', default_value = "")]
    pub snapshot_creators: Vec<String>,
    /// Workload kinds to handle besides the built-in ones, as a JSON array of entries (the
    /// chart's `extraWorkloadKinds`: group, versions, kind, resource, templatePath, propagates,
    /// history; docs/install.md).
    #[arg(long, env = "CONFIGHISTORY_EXTRA_WORKLOAD_KINDS", default_value = "")]
    pub extra_workload_kinds: String,
    /// Secret in --namespace holding the cluster keys Secret snapshots' names are MAC'd under
    /// (made by the server when missing, never overwritten; docs/operations.md, "Secrets' cluster
    /// key"). Read only with --secrets.
    #[arg(long, env = "CONFIGHISTORY_KEYS_SECRET", default_value = DEFAULT_KEYS_SECRET)]
    pub keys_secret: String,
    /// Version Secrets too (docs/behaviour.md §4a): off unless given. Only this flag and
    /// --secrets-namespace-selector decide; nothing a namespace owner writes turns it on or off.
    #[arg(long, env = "CONFIGHISTORY_SECRETS")]
    pub secrets: bool,
    /// With --secrets: label selector of the namespaces Secrets are versioned in (empty: all).
    #[arg(long, env = "CONFIGHISTORY_SECRETS_NAMESPACE_SELECTOR", default_value = "")]
    pub secrets_namespace_selector: String,
    /// Record on sources and snapshots the username of the write that changed their content
    /// (`confighistory.io/changed-by`); `--record-authors=false` leaves usernames out (the field
    /// manager and the time are still recorded).
    #[arg(long, env = "CONFIGHISTORY_RECORD_AUTHORS", default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub record_authors: bool,
}

/// A setting that does not parse; each names the flag, its variable and what it takes.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("--default-mode (CONFIGHISTORY_DEFAULT_MODE): {0}")]
    DefaultMode(String),
    #[error("--allowed-modes (CONFIGHISTORY_ALLOWED_MODES): {0}; give a comma-separated list of them")]
    AllowedModes(String),
    #[error("--excluded-sources-selector (CONFIGHISTORY_EXCLUDED_SOURCES_SELECTOR): {0}; give a label selector such as `a=b,c!=d`, or leave it empty")]
    ExcludedSources(String),
    #[error("--extra-workload-kinds (CONFIGHISTORY_EXTRA_WORKLOAD_KINDS): {0}")]
    ExtraWorkloadKinds(String),
    #[error("--secrets-namespace-selector (CONFIGHISTORY_SECRETS_NAMESPACE_SELECTOR): {0}; give a label selector such as `a=b,c!=d`, or leave it empty")]
    SecretsNamespaces(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl PolicyArgs {
    pub fn policy(&self) -> Result<Policy> {
        let excluded: Vec<String> = self.exclude_namespaces.iter().filter(|s| !s.is_empty()).cloned().collect();
        let mut p = crate::model::policy::Policy::new(&self.identity, &self.namespace, &excluded);
        p.default_mode = self.default_mode.parse().map_err(Error::DefaultMode)?;
        p.allowed_modes =
            self.allowed_modes.iter().filter(|s| !s.is_empty()).map(|m| m.parse().map_err(Error::AllowedModes)).collect::<Result<_>>()?;
        p.excluded_sources = self.excluded_sources_selector.parse().map_err(Error::ExcludedSources)?;
        p.settle = std::time::Duration::from_secs(self.settle);
        p.snapshot_creators = self.snapshot_creators.iter().filter(|s| !s.is_empty()).cloned().collect();
        p.secrets.enabled = self.secrets;
        p.secrets.namespaces = self.secrets_namespace_selector.parse().map_err(Error::SecretsNamespaces)?;
        p.record_authors = self.record_authors;
        Ok(p)
    }

    /// The built-in kinds and those the admin registers, each checked; the definitions live as
    /// long as the process (call once, at start).
    pub fn kinds(&self) -> Result<Registry> {
        let entries = crate::model::kinds::Entry::parse_list(&self.extra_workload_kinds).map_err(Error::ExtraWorkloadKinds)?;
        Registry::builtin().clone().register(&entries).map_err(Error::ExtraWorkloadKinds)
    }
}

#[derive(Args, Debug, Clone)]
pub struct ServeArgs {
    /// HTTPS admission address.
    #[arg(long, env = "CONFIGHISTORY_LISTEN", default_value = "0.0.0.0:8443")]
    pub listen: SocketAddr,
    /// Plain-HTTP address for /livez, /readyz and /metrics.
    #[arg(long, env = "CONFIGHISTORY_HEALTH_LISTEN", default_value = "0.0.0.0:8080")]
    pub health_listen: SocketAddr,
    /// Serving certificate (PEM), reloaded when it changes.
    #[arg(long, env = "CONFIGHISTORY_TLS_CERT", default_value = "/etc/confighistory/tls/tls.crt")]
    pub tls_cert: PathBuf,
    /// Serving key (PEM), reloaded when it changes.
    #[arg(long, env = "CONFIGHISTORY_TLS_KEY", default_value = "/etc/confighistory/tls/tls.key")]
    pub tls_key: PathBuf,
    /// Server-managed certificates: keep a CA and the serving certificate in this Secret of
    /// --namespace (created when missing), write the CA bundle into the webhook configurations
    /// named by --webhook-configurations, and rotate both before they expire (docs/operations.md,
    /// "Certificates"). --tls-cert and --tls-key are not read then.
    #[arg(long, env = "CONFIGHISTORY_TLS_SECRET")]
    pub tls_secret: Option<String>,
    /// With --tls-secret: the names the serving certificate is for (DNS names, or IP addresses),
    /// comma-separated; the first is also its common name.
    #[arg(long, env = "CONFIGHISTORY_TLS_NAMES", value_delimiter = ',', default_value = "")]
    pub tls_names: Vec<String>,
    /// With --tls-secret: Mutating- and ValidatingWebhookConfigurations whose caBundle this server
    /// keeps, comma-separated (each name is looked up as both kinds).
    #[arg(long, env = "CONFIGHISTORY_WEBHOOK_CONFIGURATIONS", value_delimiter = ',', default_value = "")]
    pub webhook_configurations: Vec<String>,
    /// With --tls-secret: seconds a CA and the serving certificates it signs are valid; each is
    /// replaced once a third of that is left.
    #[arg(long, env = "CONFIGHISTORY_TLS_VALIDITY", default_value_t = 90 * 24 * 3600)]
    pub tls_validity: u64,
    /// With --tls-secret: this replica's name in the Secret's records (default: the host name,
    /// which is the pod's name).
    #[arg(long, env = "CONFIGHISTORY_REPLICA_ID", default_value = "")]
    pub replica_id: String,
    /// CA bundle (PEM) that signed the API server's client certificate: when set, only clients
    /// with a certificate it signed may connect to the admission port (mutual TLS). Reloaded
    /// when it changes.
    #[arg(long, env = "CONFIGHISTORY_CLIENT_CA")]
    pub client_ca: Option<PathBuf>,
    /// With --client-ca: the names (subject CN or SAN DNS name, exact) a client certificate must
    /// carry one of, comma-separated. Empty accepts any certificate the CA signed, which a
    /// cluster CA also gives kubelets and users.
    #[arg(long, env = "CONFIGHISTORY_CLIENT_NAMES", value_delimiter = ',', default_value = "")]
    pub client_names: Vec<String>,
    /// Largest admission request body accepted, in bytes.
    #[arg(long, env = "CONFIGHISTORY_MAX_BODY_BYTES", default_value_t = DEFAULT_MAX_BODY)]
    pub max_body_bytes: usize,
    /// Bytes of memory admissions may take at once (parsed reviews, sources read for them, their
    /// copies); 0: three eighths of the container's memory limit (docs/reliability.md, "The
    /// memory model").
    #[arg(long, env = "CONFIGHISTORY_MEMORY_BUDGET_BYTES", default_value_t = 0)]
    pub memory_budget_bytes: usize,
    /// Most admission requests handled at once; more wait.
    #[arg(long, env = "CONFIGHISTORY_MAX_CONCURRENCY", default_value_t = 256)]
    pub max_concurrency: usize,
    /// Seconds an admission may take before it is denied as unavailable (with a retry hint);
    /// keep it below the webhooks' timeoutSeconds.
    #[arg(long, env = "CONFIGHISTORY_ADMISSION_DEADLINE", default_value_t = 4.0)]
    pub admission_deadline: f64,
    /// Seconds to keep serving after SIGTERM while reporting not-ready.
    #[arg(long, env = "CONFIGHISTORY_SHUTDOWN_DELAY", default_value_t = 5)]
    pub shutdown_delay: u64,
    /// Serve admissions only; run no controller loops.
    #[arg(long, env = "CONFIGHISTORY_NO_CONTROLLERS")]
    pub no_controllers: bool,
    /// ConfigMap in --namespace whose `confighistory.io/effective-config` annotation this server
    /// keeps set to the configuration it runs with (the chart creates it, readable by every
    /// authenticated user, for `kubectl confighistory`). Empty: publish nothing.
    #[arg(long, env = "CONFIGHISTORY_EFFECTIVE_CONFIG", default_value = "confighistory-effective-config")]
    pub effective_config: String,
    #[command(flatten)]
    pub policy: PolicyArgs,
    #[command(flatten)]
    pub controller: ControllerArgs,
}

impl ServeArgs {
    /// The configuration this server runs with, as it publishes it: from the very policy its
    /// admissions and loops use, and its controller settings (docs/operations.md).
    pub fn effective_config(&self, policy: &Policy, kinds: &Registry) -> EffectiveConfig {
        let mut doc = effective_config(policy, &self.controller, !self.no_controllers, kinds);
        // Checked at start (`PolicyArgs::kinds`): the entries the registry was built from.
        doc.extra_workload_kinds = crate::model::kinds::Entry::parse_list(&self.policy.extra_workload_kinds).unwrap_or_default();
        doc
    }
}

/// [`ServeArgs::effective_config`], from its parts; the workload kinds are the registry's the
/// server runs with.
pub fn effective_config(policy: &Policy, controller: &ControllerArgs, controllers: bool, kinds: &Registry) -> EffectiveConfig {
    use crate::model::published::{Gc, Propagation};
    EffectiveConfig {
        format: crate::model::published::FORMAT,
        server_version: env!("CARGO_PKG_VERSION").into(),
        default_mode: policy.default_mode.as_str().into(),
        allowed_modes: policy.allowed_modes.iter().map(|m| m.as_str().to_owned()).collect(),
        excluded_namespaces: EffectiveConfig::excluded(policy),
        excluded_sources_selector: policy.excluded_sources.to_string(),
        controller_namespace_selector: controller.controller_namespace_selector.clone(),
        settle_seconds: policy.settle.as_secs(),
        controllers,
        gc: Gc {
            keep: u32::try_from(controller.gc_keep).unwrap_or(u32::MAX),
            grace_seconds: controller.gc_grace,
            interval_seconds: controller.gc_interval,
        },
        propagation: Propagation {
            qps: controller.propagation_qps,
            burst: controller.propagation_burst,
            namespace_qps: controller.propagation_namespace_qps,
            namespace_burst: controller.propagation_namespace_burst,
        },
        secrets: policy.secrets.enabled,
        secrets_namespace_selector: if policy.secrets.enabled { policy.secrets.namespaces.to_string() } else { String::new() },
        workload_kinds: kinds.workloads().map(|k| k.name().to_owned()).collect(),
        extra_workload_kinds: Vec::new(),
    }
}

#[derive(Args, Debug, Clone)]
pub struct ControllerArgs {
    /// Cluster-wide propagation rate (workload updates per second).
    #[arg(long, env = "CONFIGHISTORY_PROPAGATION_QPS", default_value_t = 5.0)]
    pub propagation_qps: f64,
    #[arg(long, env = "CONFIGHISTORY_PROPAGATION_BURST", default_value_t = 10)]
    pub propagation_burst: u32,
    /// Per-namespace propagation rate (workload updates per second).
    #[arg(long, env = "CONFIGHISTORY_PROPAGATION_NAMESPACE_QPS", default_value_t = 2.0)]
    pub propagation_namespace_qps: f64,
    #[arg(long, env = "CONFIGHISTORY_PROPAGATION_NAMESPACE_BURST", default_value_t = 5)]
    pub propagation_namespace_burst: u32,
    /// Newest snapshots kept per source regardless of use.
    #[arg(long, env = "CONFIGHISTORY_GC_KEEP", default_value_t = 5)]
    pub gc_keep: usize,
    /// Seconds a snapshot is kept after it was last in use.
    #[arg(long, env = "CONFIGHISTORY_GC_GRACE", default_value_t = 600)]
    pub gc_grace: u64,
    /// Seconds between garbage-collection sweeps.
    #[arg(long, env = "CONFIGHISTORY_GC_INTERVAL", default_value_t = 300)]
    pub gc_interval: u64,
    /// Namespace of the leader-election Lease (default: --namespace).
    #[arg(long, env = "CONFIGHISTORY_LEADER_ELECTION_NAMESPACE")]
    pub leader_election_namespace: Option<String>,
    #[arg(long, env = "CONFIGHISTORY_LEASE_NAME", default_value = "confighistory")]
    pub lease_name: String,
    /// Seconds between resyncs: re-hash of referenced sources, adoption, repair.
    #[arg(long, env = "CONFIGHISTORY_RESYNC_INTERVAL", default_value_t = 60)]
    pub resync_interval: u64,
    /// Rate of the resync's API reads and snapshot writes, and of GC's per-namespace lists (per second).
    #[arg(long, env = "CONFIGHISTORY_RESYNC_QPS", default_value_t = 10.0)]
    pub resync_qps: f64,
    /// Label selector of the namespaces the loops act in (default: all). For canaries and tests.
    #[arg(long, env = "CONFIGHISTORY_CONTROLLER_NAMESPACE_SELECTOR", default_value = "")]
    pub controller_namespace_selector: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Parser)]
    struct PolicyOnly {
        #[command(flatten)]
        policy: PolicyArgs,
    }

    fn policy(args: &[&str]) -> Result<crate::model::policy::Policy> {
        PolicyOnly::parse_from(std::iter::once("test").chain(args.iter().copied())).policy.policy()
    }

    #[derive(Parser)]
    struct Serve {
        #[command(flatten)]
        serve: ServeArgs,
    }

    /// Every field of the published configuration comes from the flags the server was started
    /// with (each set away from its default here), through the policy it runs with.
    #[test]
    fn the_published_configuration_is_the_one_the_server_runs_with() {
        let args = [
            "test",
            "--default-mode=audit",
            "--allowed-modes=audit,off",
            "--exclude-namespaces=legacy,tools",
            "--namespace=ops",
            "--excluded-sources-selector=ca-bundle=true,tier in (a,b)",
            "--controller-namespace-selector=team=payments",
            "--settle=45",
            "--gc-keep=7",
            "--gc-grace=70",
            "--gc-interval=80",
            "--propagation-qps=1.5",
            "--propagation-burst=3",
            "--propagation-namespace-qps=0.25",
            "--propagation-namespace-burst=2",
            "--no-controllers",
        ];
        let serve = Serve::parse_from(args).serve;
        let policy = serve.policy.policy().unwrap();
        let doc = serde_json::to_value(serve.effective_config(&policy, Registry::builtin())).unwrap();
        assert_eq!(
            doc,
            serde_json::json!({
                "format": 1,
                "serverVersion": env!("CARGO_PKG_VERSION"),
                "defaultMode": "audit",
                "allowedModes": ["audit", "off"],
                "excludedNamespaces": ["kube-node-lease", "kube-public", "kube-system", "legacy", "ops", "tools"],
                "excludedSourcesSelector": "ca-bundle=true,tier in (a,b)",
                "controllerNamespaceSelector": "team=payments",
                "settleSeconds": 45,
                "controllers": false,
                "gc": {"keep": 7, "graceSeconds": 70, "intervalSeconds": 80},
                "propagation": {"qps": 1.5, "burst": 3, "namespaceQps": 0.25, "namespaceBurst": 2},
                "secrets": false,
                "workloadKinds": ["Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob"],
            })
        );
        // And it is the policy the plugin decides with.
        let back: EffectiveConfig = serde_json::from_value(doc).unwrap();
        let p = back.policy().unwrap();
        assert_eq!(
            (p.default_mode, &p.allowed_modes, &p.excluded_namespaces),
            (policy.default_mode, &policy.allowed_modes, &policy.excluded_namespaces)
        );
        assert_eq!((p.settle, &p.excluded_sources), (policy.settle, &policy.excluded_sources));
        assert_eq!(Serve::parse_from(["test"]).serve.effective_config, "confighistory-effective-config");
        assert_eq!(Serve::parse_from(["test"]).serve.policy.keys_secret, "confighistory-keys");
        assert_eq!(Serve::parse_from(["test", "--keys-secret=ch-keys"]).serve.policy.keys_secret, "ch-keys");
    }

    /// A bad setting names its flag and variable, what is wrong and what it takes.
    #[test]
    fn a_setting_that_does_not_parse_says_which_and_what_it_takes() {
        let e = policy(&["--default-mode", "strict"]).unwrap_err().to_string();
        assert!(e.starts_with("--default-mode (CONFIGHISTORY_DEFAULT_MODE): unknown mode \"strict\""), "{e}");
        assert!(e.contains("expected rewrite, enforce, audit or off"), "{e}");
        let e = policy(&["--allowed-modes", "rewrite,lax"]).unwrap_err().to_string();
        assert!(e.contains("--allowed-modes") && e.contains("\"lax\""), "{e}");
        let e = policy(&["--excluded-sources-selector", "a in b"]).unwrap_err().to_string();
        assert!(e.contains("CONFIGHISTORY_EXCLUDED_SOURCES_SELECTOR") && e.contains("give a label selector"), "{e}");
        assert!(policy(&["--excluded-sources-selector", "a in (b)"]).is_ok());
        let e = policy(&["--secrets", "--secrets-namespace-selector", "a in b"]).unwrap_err().to_string();
        assert!(e.starts_with("--secrets-namespace-selector (CONFIGHISTORY_SECRETS_NAMESPACE_SELECTOR): "), "{e}");
    }

    /// Usernames are recorded unless the admin's flag (or its variable) says not to.
    #[test]
    fn authors_are_recorded_unless_the_flag_turns_them_off() {
        assert!(policy(&[]).unwrap().record_authors);
        assert!(policy(&["--record-authors"]).unwrap().record_authors);
        assert!(policy(&["--record-authors=true"]).unwrap().record_authors);
        assert!(!policy(&["--record-authors=false"]).unwrap().record_authors);
    }

    /// Secrets are off unless the admin's flags (or their variables) turn them on, for every
    /// namespace or the selected ones; the published configuration says which.
    #[test]
    fn secrets_are_off_unless_the_flags_turn_them_on() {
        use crate::model::ids::{SourceKind, SourceKinds};
        let ns = |labels: serde_json::Value| serde_json::json!({"metadata": {"name": "shop", "labels": labels}});
        let off = policy(&[]).unwrap();
        assert!(!off.secrets.enabled && off.acted_on() == SourceKinds::CONFIGMAPS);
        assert_eq!(off.source_kinds(Some(&ns(serde_json::json!({"secrets": "on"})))), SourceKinds::CONFIGMAPS);
        let all = policy(&["--secrets"]).unwrap();
        assert!(all.acted_on().contains(SourceKind::Secret));
        assert_eq!(all.source_kinds::<serde_json::Value>(None), SourceKinds::WITH_SECRETS, "empty selector: every namespace");
        let some = policy(&["--secrets", "--secrets-namespace-selector=secrets=on"]).unwrap();
        assert_eq!(some.source_kinds(Some(&ns(serde_json::json!({"secrets": "on"})))), SourceKinds::WITH_SECRETS);
        assert_eq!(some.source_kinds(Some(&ns(serde_json::json!({})))), SourceKinds::CONFIGMAPS);
        assert_eq!(some.source_kinds::<serde_json::Value>(None), SourceKinds::CONFIGMAPS, "a namespace not seen is not selected");
        assert!(!some.secrets.keys.is_loaded(), "the keys are read at start, not from flags");
        let serve = Serve::parse_from(["test", "--secrets", "--secrets-namespace-selector=secrets=on"]).serve;
        let doc = serve.effective_config(&serve.policy.policy().unwrap(), Registry::builtin());
        assert!(doc.secrets && doc.secrets_namespace_selector == "secrets=on");
        let back = doc.policy().unwrap();
        assert!(back.secrets.enabled && back.secrets.namespaces.to_string() == "secrets=on");
        let plain = Serve::parse_from(["test"]).serve;
        let doc = serde_json::to_value(plain.effective_config(&plain.policy.policy().unwrap(), Registry::builtin())).unwrap();
        assert_eq!((&doc["secrets"], doc.get("secretsNamespaceSelector")), (&serde_json::json!(false), None));
    }

    /// Kinds an admin registers come with the policy's flags; a wrong entry names the flag.
    #[test]
    fn extra_workload_kinds_are_registered_or_refused_naming_the_flag() {
        let kinds = |args: &[&str]| PolicyOnly::parse_from(std::iter::once("test").chain(args.iter().copied())).policy.kinds();
        assert_eq!(kinds(&[]).unwrap().workloads().count(), 5);
        let r = kinds(&["--extra-workload-kinds", crate::model::kinds::tests::ARGO_ROLLOUTS]).unwrap();
        assert_eq!(r.registered().map(|k| k.name()).collect::<Vec<_>>(), ["Rollout.argoproj.io"]);
        let e = kinds(&[
            "--extra-workload-kinds",
            r#"[{"group": "apps", "versions": ["v1"], "kind": "Deployment", "resource": "deployments", "propagates": true}]"#,
        ])
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("--extra-workload-kinds (CONFIGHISTORY_EXTRA_WORKLOAD_KINDS): entry 0 (Deployment.apps): "), "{e}");
        assert!(e.contains("is built in"), "{e}");
    }
}
