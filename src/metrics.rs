//! Prometheus metrics, hand-rolled: a few counters and one histogram don't need a registry crate.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

/// Latency buckets in seconds: webhook latency is added to every apply, so millisecond scale.
const BUCKETS: [f64; 12] = [0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5];

/// The `what` label values of `confighistory_errors_total`.
const ERRORS: [&str; 2] = ["api", "bad-request"];

/// Per-namespace gauges the controller sets.
const GAUGES: [(&str, &str); 4] = [
    ("confighistory_held_pins", "Held pins (an undo or an explicit snapshot) per namespace."),
    ("confighistory_snapshot_bytes", "Bytes of snapshots per namespace."),
    ("confighistory_snapshots", "Snapshots per namespace."),
    ("confighistory_workloads_behind_head", "Workloads whose pin is not their source's head, per namespace."),
];

#[derive(Default)]
pub struct Metrics {
    requests: Mutex<BTreeMap<(String, String, String, String), u64>>,
    latency: Mutex<BTreeMap<String, Histogram>>,
    api_calls: Mutex<BTreeMap<&'static str, u64>>,
    pub snapshots_created: AtomicU64,
    pub collisions: AtomicU64,
    pub propagations: AtomicU64,
    pub propagations_waiting: AtomicU64,
    pub gc_deleted: AtomicU64,
    /// notAfter of the serving certificate, seconds since the epoch (0: none loaded yet).
    pub tls_not_after: AtomicU64,
    errors: Mutex<BTreeMap<&'static str, u64>>,
    gauges: Mutex<BTreeMap<(&'static str, String), f64>>,
}

#[derive(Default, Clone)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

pub static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::default);

impl Metrics {
    pub fn request(&self, endpoint: &str, kind: &str, operation: &str, decision: &str, elapsed: Duration) {
        let key = (endpoint.to_owned(), kind.to_owned(), operation.to_owned(), decision.to_owned());
        *self.requests.lock().expect("metrics lock").entry(key).or_default() += 1;
        let secs = elapsed.as_secs_f64();
        let mut lat = self.latency.lock().expect("metrics lock");
        let h = lat.entry(endpoint.to_owned()).or_default();
        for (i, b) in BUCKETS.iter().enumerate() {
            if secs <= *b {
                h.counts[i] += 1;
            }
        }
        h.count += 1;
        h.sum += secs;
    }

    /// An error answering admissions: `bad-request` (refused, 400) or `api` (an API server call
    /// failed; the request failed open or was denied with 503).
    pub fn error(&self, what: &'static str) {
        *self.errors.lock().expect("metrics lock").entry(what).or_default() += 1;
    }

    pub fn api_call(&self, verb: &'static str) {
        *self.api_calls.lock().expect("metrics lock").entry(verb).or_default() += 1;
    }

    /// Total API calls made on the admission path so far (tests assert the steady state adds none).
    pub fn api_calls_total(&self) -> u64 {
        self.api_calls.lock().expect("metrics lock").values().sum()
    }

    pub fn set_gauge(&self, name: &'static str, namespace: &str, value: f64) {
        self.gauges.lock().expect("metrics lock").insert((name, namespace.to_owned()), value);
    }

    pub fn clear_gauge(&self, name: &'static str) {
        self.gauges.lock().expect("metrics lock").retain(|(n, _), _| *n != name);
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        out.push_str("# HELP confighistory_admission_requests_total Admission requests by endpoint, kind, operation and decision.\n");
        out.push_str("# TYPE confighistory_admission_requests_total counter\n");
        for ((e, k, o, d), v) in self.requests.lock().expect("metrics lock").iter() {
            let _ = writeln!(
                out,
                "confighistory_admission_requests_total{{endpoint=\"{e}\",kind=\"{k}\",operation=\"{o}\",decision=\"{d}\"}} {v}"
            );
        }
        out.push_str("# HELP confighistory_admission_duration_seconds Time to answer an admission request.\n");
        out.push_str("# TYPE confighistory_admission_duration_seconds histogram\n");
        for (e, h) in self.latency.lock().expect("metrics lock").iter() {
            for (i, b) in BUCKETS.iter().enumerate() {
                let _ = writeln!(out, "confighistory_admission_duration_seconds_bucket{{endpoint=\"{e}\",le=\"{b}\"}} {}", h.counts[i]);
            }
            let _ = writeln!(out, "confighistory_admission_duration_seconds_bucket{{endpoint=\"{e}\",le=\"+Inf\"}} {}", h.count);
            let _ = writeln!(out, "confighistory_admission_duration_seconds_sum{{endpoint=\"{e}\"}} {}", h.sum);
            let _ = writeln!(out, "confighistory_admission_duration_seconds_count{{endpoint=\"{e}\"}} {}", h.count);
        }
        out.push_str("# HELP confighistory_api_calls_total Calls to the API server made while answering admissions.\n");
        out.push_str("# TYPE confighistory_api_calls_total counter\n");
        for (verb, v) in self.api_calls.lock().expect("metrics lock").iter() {
            let _ = writeln!(out, "confighistory_api_calls_total{{verb=\"{verb}\"}} {v}");
        }
        for (name, help, v) in [
            ("confighistory_snapshots_created_total", "Snapshots created.", &self.snapshots_created),
            (
                "confighistory_snapshot_collisions_total",
                "Snapshot names taken by something that is not a valid snapshot.",
                &self.collisions,
            ),
            ("confighistory_propagations_total", "Workloads moved to a new head by propagation.", &self.propagations),
            ("confighistory_gc_deleted_total", "Snapshots deleted by garbage collection.", &self.gc_deleted),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}", v.load(Ordering::Relaxed));
        }
        let _ = writeln!(
            out,
            "# HELP confighistory_propagations_waiting Source changes waiting for their settle window.\n# TYPE confighistory_propagations_waiting gauge\nconfighistory_propagations_waiting {}",
            self.propagations_waiting.load(Ordering::Relaxed)
        );
        out.push_str("# HELP confighistory_errors_total Errors answering admissions: refused requests, failed API server calls.\n");
        out.push_str("# TYPE confighistory_errors_total counter\n");
        let errors = self.errors.lock().expect("metrics lock");
        for what in ERRORS {
            let _ = writeln!(out, "confighistory_errors_total{{what=\"{what}\"}} {}", errors.get(what).copied().unwrap_or(0));
        }
        let _ = writeln!(
            out,
            "# HELP confighistory_tls_certificate_not_after_seconds Expiry of the serving certificate (Unix time).\n# TYPE confighistory_tls_certificate_not_after_seconds gauge\nconfighistory_tls_certificate_not_after_seconds {}",
            self.tls_not_after.load(Ordering::Relaxed)
        );
        // Every family is declared even before the controller has set a sample, so dashboards and
        // alerts find it in any scrape.
        let gauges = self.gauges.lock().expect("metrics lock");
        for (name, help) in GAUGES {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
            for ((_, ns), v) in gauges.iter().filter(|((n, _), _)| *n == name) {
                let _ = writeln!(out, "{name}{{namespace=\"{ns}\"}} {v}");
            }
        }
        out
    }
}
