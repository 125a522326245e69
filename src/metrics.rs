//! Prometheus metrics through `prometheus-client`, in the Prometheus text format (0.0.4) that the
//! chart's ServiceMonitor scrapes. One process-wide registry, [`METRICS`].
//!
//! Every label value is bounded by construction: `&'static str` from a fixed set (endpoints,
//! operations, decision reasons, API verbs, error kinds), a request's kind mapped to the kinds the
//! webhooks register (else `other`), or a namespace name for the controller's per-namespace gauges
//! (namespaces are created by cluster admins, and the gauges are rebuilt on every pass).

use std::ops::Deref;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::info::Info;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use crate::model::ids;
use crate::model::kinds::{Kind, Registry as Kinds};

pub mod process;

/// The `Content-Type` of [`Metrics::render`]'s output.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// Latency buckets in seconds: webhook latency is added to every apply, so millisecond scale, up
/// to the webhooks' deadline: the chart's default timeoutSeconds (5) and admission deadline (4),
/// and its largest timeoutSeconds (30), so a slow answer lands in a bucket of its own.
const BUCKETS: [f64; 16] = [0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 4.0, 5.0, 10.0, 30.0];

/// Propagation buckets in seconds: a change waits its settle window (10 s by default,
/// docs/behaviour.md §7) and then the workload writes' rate, so seconds to an hour; the stuck
/// alert's default (10 minutes) falls between two of them.
const PROPAGATION_BUCKETS: [f64; 15] = [1.0, 2.5, 5.0, 10.0, 12.5, 15.0, 20.0, 30.0, 45.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0];

/// Pass buckets in seconds: a GC sweep or a resync pass is milliseconds on a small cluster and
/// minutes at 10,000 workloads (rate-limited reads, docs/performance.md).
const PASS_BUCKETS: [f64; 14] = [0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0];

/// The `result` label values of `confighistory_propagations_total`: what a propagation pass did
/// about one workload it planned to move (`controller::propagation::propagation_pass`), each exported from the
/// start. `rolled`: the trigger was written, the workload rolls to the new content; `released`:
/// likewise, and the write released a hold an undo took (docs/behaviour.md §2); `skipped`: the
/// workload was deleted or replaced meanwhile (404, 409), the next pass decides again; `failed`:
/// the write failed, retried with backoff.
pub const PROPAGATION_RESULTS: [&str; 4] = ["rolled", "released", "skipped", "failed"];

/// The `what` label values of `confighistory_errors_total`, each exported from the start (0) so
/// alerts and dashboards see the series before the first error.
pub const ERRORS: [&str; 5] = ["api", "bad-request", "deadline", "overloaded", "too-large"];

/// Per-namespace gauges the controller sets (leader only), by name and help.
const GAUGES: [(&str, &str); 4] = [
    ("confighistory_held_pins", "Held pins (an undo or an explicit snapshot) per namespace"),
    ("confighistory_snapshot_bytes", "Bytes of snapshots per namespace"),
    ("confighistory_snapshots", "Snapshots per namespace"),
    ("confighistory_workloads_behind_head", "Workloads whose pin is not their source's head, per namespace"),
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    endpoint: &'static str,
    kind: &'static str,
    operation: &'static str,
    decision: &'static str,
    reason: &'static str,
}

type One = [(&'static str, &'static str); 1];

/// A controller call to the API server: verb, resource (plural, with a subresource after a `/`)
/// and the response's HTTP status (`error`: no response).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    verb: &'static str,
    resource: String,
    code: String,
}

type PerNamespace = Family<[(&'static str, String); 1], Gauge<f64, AtomicU64>>;

/// A value the call sites update with plain atomics (`fetch_add`, `store`), exposed as a counter
/// or a gauge: keeps the call-site API of the hand-rolled metrics this module replaced.
#[derive(Clone, Debug)]
pub struct Live {
    value: Arc<AtomicU64>,
    kind: MetricType,
}

impl Live {
    fn new(kind: MetricType) -> Live {
        Live { value: Arc::default(), kind }
    }
}

impl Deref for Live {
    type Target = AtomicU64;
    fn deref(&self) -> &AtomicU64 {
        &self.value
    }
}

impl EncodeMetric for Live {
    fn encode(&self, encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let v = self.value.load(Ordering::Relaxed);
        match self.kind {
            MetricType::Counter => ConstCounter::new(v).encode(encoder),
            _ => ConstGauge::new(v).encode(encoder),
        }
    }
    fn metric_type(&self) -> MetricType {
        self.kind
    }
}

/// A family declared (HELP and TYPE) even before its first sample: prometheus-client leaves empty
/// families out, and dashboards and alerts must find every family in any scrape.
#[derive(Clone, Debug)]
struct Declared<M>(M);

impl<M: EncodeMetric> EncodeMetric for Declared<M> {
    fn encode(&self, encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        self.0.encode(encoder)
    }
    fn metric_type(&self) -> MetricType {
        self.0.metric_type()
    }
    fn is_empty(&self) -> bool {
        false
    }
}

pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    latency: Family<One, Histogram, fn() -> Histogram>,
    api_calls: Family<One, Counter>,
    api_calls_total: AtomicU64,
    errors: Family<One, Counter>,
    audit_violations: Family<One, Counter>,
    refused_modes: Counter,
    pub snapshots_created: Live,
    pub collisions: Live,
    propagations: Family<One, Counter>,
    /// Time from a change being admitted to its last workload being on it (`controller::sli`).
    propagation_duration: Histogram,
    propagation_ready: Histogram,
    /// Settled changes whose workloads are not all on them yet (leader only).
    pub propagations_pending: Live,
    /// Seconds since the oldest pending change's settle window ended (leader only; 0: none).
    pub propagation_oldest_pending: Live,
    controller_api_calls: Family<CallLabels, Counter>,
    gc_pass: Histogram,
    resync_pass: Histogram,
    /// Source changes waiting for their settle window (leader only).
    pub propagations_waiting: Live,
    pub gc_deleted: Live,
    /// notAfter of the serving certificate, seconds since the epoch (0: none loaded yet).
    pub tls_not_after: Live,
    leader: Gauge,
    cache_synced: Gauge,
    kind_served: Family<One, Gauge>,
    /// The kinds the process handles, for the `kind` label (the built-ins until set at start).
    kinds: std::sync::OnceLock<&'static Kinds>,
    /// The source kinds acted on (`Policy::acted_on`): ConfigMaps unless set at start.
    sources: std::sync::OnceLock<ids::SourceKinds>,
    per_namespace: [PerNamespace; GAUGES.len()],
}

pub static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new()
    }
}

impl Metrics {
    /// A registry with every family registered (the binary uses [`METRICS`]; tests make their own).
    pub fn new() -> Metrics {
        let mut registry = Registry::default();
        // prometheus-client appends `_total` to counters and `_info` to infos when encoding.
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "confighistory_admission_requests",
            "Admission requests answered, by endpoint, kind, operation, decision (allowed, patched, denied) and reason (the rule that decided)",
            Declared(requests.clone()),
        );
        let latency = Family::<One, Histogram, fn() -> Histogram>::new_with_constructor(|| Histogram::new(BUCKETS));
        registry.register(
            "confighistory_admission_duration_seconds",
            "Time to answer an admission request, by endpoint",
            Declared(latency.clone()),
        );
        let api_calls = Family::<One, Counter>::default();
        registry.register(
            "confighistory_api_calls",
            "Calls to the API server made while answering admissions, by verb",
            Declared(api_calls.clone()),
        );
        let errors = Family::<One, Counter>::default();
        for what in ERRORS {
            drop(errors.get_or_create(&[("what", what)]));
        }
        registry.register(
            "confighistory_errors",
            "Admissions not answered normally: bad-request (malformed or never sent by the webhooks: 400, 408, 413), \
             api (an API server call failed), deadline (no answer within the admission deadline), \
             overloaded (no place free within the deadline), too-large (deciding it would take more memory than one request may)",
            Declared(errors.clone()),
        );
        let audit_violations = Family::<One, Counter>::default();
        registry.register(
            "confighistory_audit_violations",
            "Workloads admitted in audit mode that enforce mode would have refused (they name a mutable, versioned ConfigMap), by kind",
            Declared(audit_violations.clone()),
        );
        let refused_modes = Counter::default();
        registry.register(
            "confighistory_refused_mode_labels",
            "Namespaces seen asking for a mode the admin does not allow (each logged once; the default mode applies)",
            refused_modes.clone(),
        );
        let live = |registry: &mut Registry, name: &str, help: &str, kind: MetricType| {
            let l = Live::new(kind);
            registry.register(name, help, l.clone());
            l
        };
        let snapshots_created = live(&mut registry, "confighistory_snapshots_created", "Snapshots created", MetricType::Counter);
        let collisions = live(
            &mut registry,
            "confighistory_snapshot_collisions",
            "Snapshot names taken by something that is not a valid snapshot",
            MetricType::Counter,
        );
        let propagations = Family::<One, Counter>::default();
        for result in PROPAGATION_RESULTS {
            drop(propagations.get_or_create(&[("result", result)]));
        }
        registry.register(
            "confighistory_propagations",
            "Workloads a propagation pass moved or tried to move to a new head, by result: rolled (trigger written), \
             released (trigger written, releasing an undo's hold), skipped (deleted or replaced meanwhile), failed (retried)",
            Declared(propagations.clone()),
        );
        let propagation_duration = Histogram::new(PROPAGATION_BUCKETS);
        registry.register(
            "confighistory_propagation_duration_seconds",
            "Time from a source change being admitted (its changed-at) to the last workload using the source being on the new \
             content, settle window included; once per source and head (leader only)",
            propagation_duration.clone(),
        );
        let propagation_ready = Histogram::new(PROPAGATION_BUCKETS);
        registry.register(
            "confighistory_propagation_ready_duration_seconds",
            "Time from a source change being admitted (its changed-at) to every workload using it having rolled it out, as its \
             status says (Deployments, StatefulSets and DaemonSets updating RollingUpdate); once per source and head, none for \
             a change whose pods cannot be seen or are not ready within an hour (leader only)",
            propagation_ready.clone(),
        );
        let propagations_pending = live(
            &mut registry,
            "confighistory_propagations_pending",
            "Source changes past their settle window that not every workload is on yet (leader only)",
            MetricType::Gauge,
        );
        let propagation_oldest_pending = live(
            &mut registry,
            "confighistory_propagation_oldest_pending_seconds",
            "Seconds since the settle window of the oldest pending change ended (leader only; 0 when none is pending)",
            MetricType::Gauge,
        );
        let controller_api_calls = Family::<CallLabels, Counter>::default();
        registry.register(
            "confighistory_controller_api_calls",
            "Calls to the API server made by the controller loops and leader election, by verb, resource and HTTP code \
             (error: no response)",
            Declared(controller_api_calls.clone()),
        );
        let gc_pass = Histogram::new(PASS_BUCKETS);
        registry.register(
            "confighistory_gc_pass_duration_seconds",
            "Time a garbage-collection sweep of every namespace holding snapshots took (leader only)",
            gc_pass.clone(),
        );
        let resync_pass = Histogram::new(PASS_BUCKETS);
        registry.register(
            "confighistory_resync_pass_duration_seconds",
            "Time a resync pass (re-hash, adoption, repair) took (leader only)",
            resync_pass.clone(),
        );
        let propagations_waiting = live(
            &mut registry,
            "confighistory_propagations_waiting",
            "Source changes waiting for their settle window (leader only)",
            MetricType::Gauge,
        );
        let gc_deleted = live(&mut registry, "confighistory_gc_deleted", "Snapshots deleted by garbage collection", MetricType::Counter);
        let tls_not_after = live(
            &mut registry,
            "confighistory_tls_certificate_not_after_timestamp_seconds",
            "Expiry of the serving certificate (Unix time; 0 until one is loaded)",
            MetricType::Gauge,
        );
        // The name before Prometheus' `_timestamp_seconds` convention, kept for one release.
        registry.register(
            "confighistory_tls_certificate_not_after_seconds",
            "Deprecated, removed in the next release: confighistory_tls_certificate_not_after_timestamp_seconds",
            tls_not_after.clone(),
        );
        let leader = Gauge::default();
        registry.register("confighistory_leader", "1 while this replica holds the controller's Lease, else 0", leader.clone());
        let cache_synced = Gauge::default();
        registry.register(
            "confighistory_cache_synced",
            "1 once every watch cache has delivered its first list, else 0",
            cache_synced.clone(),
        );
        let kind_served = Family::<One, Gauge>::default();
        registry.register(
            "confighistory_workload_kind_served",
            "1 while the API of a workload kind the admin registered is served, 0 while it is not (its objects are not \
             watched; reported in the log and an Event, looked for again periodically), by kind",
            Declared(kind_served.clone()),
        );
        registry.register(
            "confighistory_build",
            "Build information: the version of the running binary",
            Info::new([("version", env!("CARGO_PKG_VERSION"))]),
        );
        // The standard process_* families (Prometheus' client_golang names), read on each scrape.
        registry.register_collector(Box::new(process::Process));
        // Every family is declared even before the controller has set a sample, so dashboards
        // and alerts find it in any scrape.
        let per_namespace = GAUGES.map(|(name, help)| {
            let family = PerNamespace::default();
            registry.register(name, format!("{help} (leader only)"), Declared(family.clone()));
            family
        });
        Metrics {
            registry,
            requests,
            latency,
            api_calls,
            api_calls_total: AtomicU64::new(0),
            errors,
            audit_violations,
            refused_modes,
            snapshots_created,
            collisions,
            propagations,
            propagation_duration,
            propagation_ready,
            propagations_pending,
            propagation_oldest_pending,
            controller_api_calls,
            gc_pass,
            resync_pass,
            propagations_waiting,
            gc_deleted,
            tls_not_after,
            leader,
            cache_synced,
            kind_served,
            kinds: std::sync::OnceLock::new(),
            sources: std::sync::OnceLock::new(),
            per_namespace,
        }
    }

    /// An answered admission. `kind` is the request's registered kind, mapped to a known kind
    /// name (else `other`: a request-supplied string never becomes a label value); every other
    /// label is a constant.
    pub fn request(
        &self,
        endpoint: &'static str,
        kind: &str,
        operation: &'static str,
        decision: &'static str,
        reason: &'static str,
        elapsed: Duration,
    ) {
        let kind = self.kind_label(kind);
        self.requests.get_or_create(&RequestLabels { endpoint, kind, operation, decision, reason }).inc();
        self.latency.get_or_create(&[("endpoint", endpoint)]).observe(elapsed.as_secs_f64());
    }

    /// The kinds this process handles: their names become `kind` label values (set once, at start).
    pub fn set_kinds(&self, kinds: &'static Kinds) {
        let _ = self.kinds.set(kinds);
    }

    /// The source kinds acted on, once at start: `Secret` is a `kind` label only where the admin
    /// turned Secrets on (docs/behaviour.md §4a).
    pub fn set_sources(&self, sources: ids::SourceKinds) {
        let _ = self.sources.set(sources);
    }

    /// Whether a registered workload kind's API is served (`name`: [`Kind::name`]).
    pub fn set_kind_served(&self, name: &'static str, served: bool) {
        self.kind_served.get_or_create(&[("kind", name)]).set(served as i64);
    }

    /// An admission not answered normally: one of [`ERRORS`].
    pub fn error(&self, what: &'static str) {
        debug_assert!(ERRORS.contains(&what), "unknown error kind {what}");
        self.errors.get_or_create(&[("what", what)]).inc();
    }

    /// A workload admitted in audit mode that enforce mode would have refused.
    pub fn audit_violation(&self, kind: &str) {
        self.audit_violations.get_or_create(&[("kind", self.kind_label(kind))]).inc();
    }

    /// A namespace whose mode label the admin refuses was seen (logged once).
    pub fn refused_mode(&self) {
        self.refused_modes.inc();
    }

    /// An API call on the admission path. The controller's calls go through a port of their
    /// own, counted apart by its client ([`Metrics::controller_api_call`]).
    pub fn api_call(&self, verb: &'static str) {
        self.api_calls.get_or_create(&[("verb", verb)]).inc();
        self.api_calls_total.fetch_add(1, Ordering::Relaxed);
    }

    /// Total API calls made on the admission path so far (tests assert the steady state adds none).
    pub fn api_calls_total(&self) -> u64 {
        self.api_calls_total.load(Ordering::Relaxed)
    }

    /// A controller call to the API server (`cluster::calls`): `resource` is a plural the client
    /// built the path with, never an object's name.
    pub fn controller_api_call(&self, verb: &'static str, resource: &str, code: Option<u16>) {
        let code = code.map_or_else(|| "error".to_owned(), |c| c.to_string());
        self.controller_api_calls.get_or_create(&CallLabels { verb, resource: resource.to_owned(), code }).inc();
    }

    /// What a propagation pass did about one workload: one of [`PROPAGATION_RESULTS`].
    pub fn propagation(&self, result: &'static str) {
        debug_assert!(PROPAGATION_RESULTS.contains(&result), "unknown propagation result {result}");
        self.propagations.get_or_create(&[("result", result)]).inc();
    }

    /// A change's last workload is on it, `elapsed` after the change was admitted.
    pub fn propagated(&self, elapsed: Duration) {
        self.propagation_duration.observe(elapsed.as_secs_f64());
    }

    /// A change's workloads all run it on ready pods, `elapsed` after the change was admitted.
    pub fn pods_ready(&self, elapsed: Duration) {
        self.propagation_ready.observe(elapsed.as_secs_f64());
    }

    pub fn gc_pass(&self, elapsed: Duration) {
        self.gc_pass.observe(elapsed.as_secs_f64());
    }

    pub fn resync_pass(&self, elapsed: Duration) {
        self.resync_pass.observe(elapsed.as_secs_f64());
    }

    /// Sets a per-namespace gauge (one of the controller's, by full name).
    pub fn set_gauge(&self, name: &'static str, namespace: &str, value: f64) {
        if let Some(family) = self.per_namespace(name) {
            family.get_or_create(&[("namespace", namespace.to_owned())]).set(value);
        }
    }

    /// Drops every sample of a per-namespace gauge (before setting this pass's).
    pub fn clear_gauge(&self, name: &'static str) {
        if let Some(family) = self.per_namespace(name) {
            family.clear();
        }
    }

    fn per_namespace(&self, name: &str) -> Option<&PerNamespace> {
        let i = GAUGES.iter().position(|(n, _)| *n == name);
        debug_assert!(i.is_some(), "unknown per-namespace gauge {name}");
        i.map(|i| &self.per_namespace[i])
    }

    /// Whether this replica leads. Losing the lease clears what only the leader measures: a
    /// follower's stale per-namespace numbers would otherwise be summed with the leader's.
    pub fn set_leader(&self, leader: bool) {
        self.leader.set(leader as i64);
        if !leader {
            self.per_namespace.iter().for_each(Family::clear);
            self.propagations_waiting.store(0, Ordering::Relaxed);
            self.propagations_pending.store(0, Ordering::Relaxed);
            self.propagation_oldest_pending.store(0, Ordering::Relaxed);
        }
    }

    pub fn set_cache_synced(&self, synced: bool) {
        self.cache_synced.set(synced as i64);
    }

    /// The text exposition of every family.
    pub fn render(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry).expect("writing to a String cannot fail");
        out
    }
}

impl Metrics {
    /// The `kind` label: a source kind acted on ([`Metrics::set_sources`]) or a handled workload kind's name ([`Kind::name`]), else
    /// `other`.
    fn kind_label(&self, kind: &str) -> &'static str {
        let kinds = self.kinds.get().copied().unwrap_or_else(Kinds::builtin);
        let sources = self.sources.get().copied().unwrap_or_default().iter().map(ids::SourceKind::as_str);
        sources.chain(kinds.workloads().map(Kind::name)).find(|k| *k == kind).unwrap_or("other")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every family's name, from its `# TYPE` line.
    fn families(text: &str) -> Vec<String> {
        text.lines().filter_map(|l| l.strip_prefix("# TYPE ")).map(|l| l.split(' ').next().unwrap().to_owned()).collect()
    }

    #[test]
    fn every_family_has_help_and_the_names_dashboards_query() {
        let m = Metrics::new();
        m.request("mutate", "Deployment", "CREATE", "patched", "source-changed", Duration::from_millis(3));
        m.api_call("get");
        let text = m.render();
        let names = families(&text);
        for name in &names {
            let help = text.lines().find_map(|l| l.strip_prefix(&format!("# HELP {name} "))).unwrap_or_default();
            assert!(help.len() > 10, "{name} has no HELP:\n{text}");
        }
        for name in [
            "confighistory_admission_requests_total",
            "confighistory_admission_duration_seconds",
            "confighistory_api_calls_total",
            "confighistory_snapshots_created_total",
            "confighistory_snapshot_collisions_total",
            "confighistory_propagations_total",
            "confighistory_propagations_waiting",
            "confighistory_gc_deleted_total",
            "confighistory_errors_total",
            "confighistory_tls_certificate_not_after_timestamp_seconds",
            "confighistory_tls_certificate_not_after_seconds",
            "confighistory_held_pins",
            "confighistory_snapshot_bytes",
            "confighistory_snapshots",
            "confighistory_workloads_behind_head",
            "confighistory_audit_violations_total",
            "confighistory_leader",
            "confighistory_cache_synced",
            "confighistory_build_info",
            "confighistory_propagation_duration_seconds",
            "confighistory_propagation_ready_duration_seconds",
            "confighistory_propagations_pending",
            "confighistory_propagation_oldest_pending_seconds",
            "confighistory_controller_api_calls_total",
            "confighistory_gc_pass_duration_seconds",
            "confighistory_resync_pass_duration_seconds",
            "process_cpu_seconds_total",
        ] {
            assert!(names.iter().any(|n| n == name), "{name} missing:\n{text}");
        }
        assert!(text.contains(
            "confighistory_admission_requests_total{endpoint=\"mutate\",kind=\"Deployment\",operation=\"CREATE\",decision=\"patched\",reason=\"source-changed\"} 1\n"
        ), "{text}");
        assert!(
            text.contains("confighistory_admission_duration_seconds_bucket{le=\"0.005\",endpoint=\"mutate\"} 1\n")
                || text.contains("confighistory_admission_duration_seconds_bucket{endpoint=\"mutate\",le=\"0.005\"} 1\n"),
            "{text}"
        );
        assert!(text.contains("confighistory_api_calls_total{verb=\"get\"} 1\n"), "{text}");
        assert!(text.contains(&format!("confighistory_build_info{{version=\"{}\"}} 1\n", env!("CARGO_PKG_VERSION"))), "{text}");
        for what in ERRORS {
            assert!(text.contains(&format!("confighistory_errors_total{{what=\"{what}\"}} 0\n")), "{text}");
        }
        assert_eq!(m.api_calls_total(), 1);
    }

    /// The expiry is a timestamp, named as Prometheus names them; the old name carries the same
    /// value for one release, marked deprecated.
    #[test]
    fn the_certificate_expiry_is_a_timestamp_and_the_old_name_a_deprecated_copy() {
        let m = Metrics::new();
        m.tls_not_after.store(1_900_000_000, Ordering::Relaxed);
        let text = m.render();
        assert!(text.contains("\nconfighistory_tls_certificate_not_after_timestamp_seconds 1900000000\n"), "{text}");
        assert!(text.contains("\nconfighistory_tls_certificate_not_after_seconds 1900000000\n"), "{text}");
        assert!(text.contains("# HELP confighistory_tls_certificate_not_after_seconds Deprecated"), "{text}");
    }

    /// Latency buckets reach the webhooks' deadline: an admission answered after 4.5 s (past the
    /// chart's default admission deadline, before its 5 s timeout) is told from one of 25 s.
    #[test]
    fn latency_buckets_reach_the_webhook_deadline() {
        let m = Metrics::new();
        m.request("mutate", "Deployment", "CREATE", "denied", "api-error", Duration::from_millis(4500));
        m.request("mutate", "Deployment", "CREATE", "denied", "api-error", Duration::from_secs(25));
        let text = m.render();
        let bucket = |le: &str| {
            text.lines()
                .find(|l| l.starts_with("confighistory_admission_duration_seconds_bucket") && l.contains(&format!("le=\"{le}\"")))
                .and_then(|l| l.rsplit(' ').next())
                .unwrap_or_else(|| panic!("no bucket le={le}:\n{text}"))
                .to_owned()
        };
        assert_eq!((bucket("4"), bucket("5"), bucket("10"), bucket("30")), ("0".into(), "1".into(), "1".into(), "2".into()));
    }

    #[test]
    fn kinds_nobody_registered_are_one_label_value() {
        let m = Metrics::new();
        for kind in ["Secret", "Deployment\"}", "x".repeat(300).as_str()] {
            m.request("validate", kind, "UPDATE", "allowed", "valid", Duration::ZERO);
            m.audit_violation(kind);
        }
        let text = m.render();
        assert!(text.contains("kind=\"other\",operation=\"UPDATE\",decision=\"allowed\",reason=\"valid\"} 3\n"), "{text}");
        assert!(text.contains("confighistory_audit_violations_total{kind=\"other\"} 3\n"), "{text}");
        assert!(!text.contains("Secret") && !text.contains("xxx"), "{text}");
    }

    /// A registered kind is its own label value, named apart from a built-in of the same kind
    /// name; whether its API is served is a gauge per kind.
    #[test]
    fn registered_kinds_are_label_values_of_their_own() {
        let m = Metrics::new();
        m.set_kinds(crate::model::kinds::tests::with_rollout());
        m.request("validate", "Rollout.example.io", "UPDATE", "allowed", "valid", Duration::ZERO);
        m.request("validate", "Rollout", "UPDATE", "allowed", "valid", Duration::ZERO);
        m.set_kind_served("Rollout.example.io", false);
        let text = m.render();
        assert!(text.contains("kind=\"Rollout.example.io\",operation=\"UPDATE\",decision=\"allowed\",reason=\"valid\"} 1\n"), "{text}");
        assert!(text.contains("kind=\"other\",operation=\"UPDATE\",decision=\"allowed\",reason=\"valid\"} 1\n"), "{text}");
        assert!(text.contains("confighistory_workload_kind_served{kind=\"Rollout.example.io\"} 0\n"), "{text}");
    }

    #[test]
    fn live_values_keep_their_atomic_call_sites() {
        let m = Metrics::new();
        m.snapshots_created.fetch_add(2, Ordering::Relaxed);
        m.tls_not_after.store(1_900_000_000, Ordering::Relaxed);
        let text = m.render();
        assert!(text.contains("# TYPE confighistory_snapshots_created_total counter\nconfighistory_snapshots_created_total 2\n"), "{text}");
        assert!(text.contains("# TYPE confighistory_tls_certificate_not_after_seconds gauge\n"), "{text}");
        assert!(text.contains("confighistory_tls_certificate_not_after_seconds 1900000000\n"), "{text}");
    }

    #[test]
    fn losing_the_lease_clears_what_only_the_leader_measures() {
        let m = Metrics::new();
        m.set_leader(true);
        m.set_gauge("confighistory_held_pins", "shop", 2.0);
        m.set_gauge("confighistory_snapshot_bytes", "shop", 4096.0);
        m.propagations_waiting.store(3, Ordering::Relaxed);
        m.snapshots_created.fetch_add(1, Ordering::Relaxed);
        let text = m.render();
        assert!(text.contains("confighistory_leader 1\n"), "{text}");
        assert!(text.contains("confighistory_held_pins{namespace=\"shop\"} 2.0\n"), "{text}");
        assert!(text.contains("confighistory_snapshot_bytes{namespace=\"shop\"} 4096.0\n"), "{text}");

        m.set_leader(false);
        let text = m.render();
        assert!(text.contains("confighistory_leader 0\n"), "{text}");
        assert!(!text.contains("namespace=\"shop\""), "{text}");
        assert!(text.contains("confighistory_propagations_waiting 0\n"), "{text}");
        assert!(text.contains("# TYPE confighistory_held_pins gauge\n"), "families stay declared:\n{text}");
        assert!(text.contains("confighistory_snapshots_created_total 1\n"), "counters are kept:\n{text}");
    }

    /// Every propagation result is exported from the start; the controller's calls are labelled
    /// by verb, resource and code (`error` without a response); the SLI and pass histograms use
    /// their own buckets (a 12-minute propagation is told from a 9-minute one: the stuck alert's
    /// default is 10).
    #[test]
    fn propagation_results_controller_calls_and_the_slis_buckets() {
        let m = Metrics::new();
        let text = m.render();
        for result in PROPAGATION_RESULTS {
            assert!(text.contains(&format!("confighistory_propagations_total{{result=\"{result}\"}} 0\n")), "{text}");
        }
        m.propagation("rolled");
        m.controller_api_call("patch", "deployments", Some(200));
        m.controller_api_call("patch", "deployments", Some(200));
        m.controller_api_call("get", "leases", None);
        m.propagated(Duration::from_secs(9 * 60));
        m.propagated(Duration::from_secs(12 * 60));
        m.gc_pass(Duration::from_millis(30));
        let text = m.render();
        assert!(text.contains("confighistory_propagations_total{result=\"rolled\"} 1\n"), "{text}");
        assert!(
            text.contains("confighistory_controller_api_calls_total{verb=\"patch\",resource=\"deployments\",code=\"200\"} 2\n"),
            "{text}"
        );
        assert!(text.contains("confighistory_controller_api_calls_total{verb=\"get\",resource=\"leases\",code=\"error\"} 1\n"), "{text}");
        assert!(text.contains("confighistory_propagation_duration_seconds_bucket{le=\"600\"} 1\n"), "{text}");
        assert!(text.contains("confighistory_propagation_duration_seconds_bucket{le=\"1800\"} 2\n"), "{text}");
        assert!(text.contains("confighistory_gc_pass_duration_seconds_bucket{le=\"0.05\"} 1\n"), "{text}");
        assert!(text.contains("confighistory_resync_pass_duration_seconds_count 0\n"), "declared before the first pass:\n{text}");
    }

    #[test]
    fn losing_the_lease_clears_the_pending_propagation_gauges() {
        let m = Metrics::new();
        m.set_leader(true);
        m.propagations_pending.store(2, Ordering::Relaxed);
        m.propagation_oldest_pending.store(700, Ordering::Relaxed);
        m.set_leader(false);
        let text = m.render();
        assert!(text.contains("confighistory_propagations_pending 0\n"), "{text}");
        assert!(text.contains("confighistory_propagation_oldest_pending_seconds 0\n"), "{text}");
    }

    #[test]
    fn clear_gauge_drops_one_family() {
        let m = Metrics::new();
        m.set_gauge("confighistory_held_pins", "a", 1.0);
        m.set_gauge("confighistory_workloads_behind_head", "a", 1.0);
        m.clear_gauge("confighistory_held_pins");
        let text = m.render();
        assert!(!text.contains("confighistory_held_pins{"), "{text}");
        assert!(text.contains("confighistory_workloads_behind_head{namespace=\"a\"} 1"), "{text}");
    }
}
