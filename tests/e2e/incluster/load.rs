//! What the in-cluster tests under load share: a write loop's Deployment applies, each checked
//! pinned in the object the API server stored; the API server's own webhook metrics and log for
//! confighistory's webhooks; the servers' WARN and ERROR lines.

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::Mutex;

use serde_json::Value;

use super::{APP_A, NAMESPACE, RELEASE};
use crate::support::apps::{workload, SOURCE};
use crate::support::{Cluster, TestNamespace};

/// Deployment `name` of the write loop at `round`: replicas 0 (no pods), the pricing ConfigMap
/// mounted and in its environment, and `round` in its template, so each apply changes the template
/// and is an admission that must pin it.
pub(super) fn load_deployment(name: &str, round: usize) -> String {
    let manifest = workload("deployment", name, APP_A, SOURCE)
        .replace("replicas: 1", "replicas: 0")
        .replace("      labels: {app: ", &format!("      annotations: {{round: \"{round}\"}}\n      labels: {{app: "));
    assert!(manifest.contains("round:") && manifest.contains("replicas: 0"), "{manifest}");
    manifest
}

/// One apply's outcome: admitted or not, and the ConfigMap the stored template's `config` volume
/// mounts (a snapshot's name when pinned).
pub(super) struct Applied {
    pub(super) ok: bool,
    pub(super) pinned: Option<String>,
    pub(super) output: String,
}

impl Applied {
    /// Whether the admitted template names a snapshot of the pricing ConfigMap.
    pub(super) fn is_pinned(&self) -> bool {
        self.pinned.as_deref().is_some_and(|p| p.starts_with(&format!("{SOURCE}-")))
    }
}

/// `kubectl apply -o json` of a Deployment `manifest`, read back from what the API server returned.
pub(super) fn apply_deployment(ns: &TestNamespace, manifest: &str) -> Applied {
    let result = ns.apply_with(manifest, &["-o", "json"]);
    let pinned = result.as_ref().ok().map(|o| {
        let d: Value = serde_json::from_str(&o.stdout).unwrap_or_default();
        let volumes = d["spec"]["template"]["spec"]["volumes"].as_array().cloned().unwrap_or_default();
        volumes.iter().find(|v| v["name"] == "config").and_then(|v| v["configMap"]["name"].as_str()).unwrap_or_default().to_owned()
    });
    let (ok, output) = match result {
        Ok(o) => (true, o.stderr),
        Err(e) => (false, e.describe()),
    };
    Applied { ok, pinned, output }
}

/// Where the API server's log ends now, to read what it logs from here on ([`webhook_call_failures`]).
pub(super) fn apiserver_log_end(cluster: &Cluster) -> u64 {
    std::fs::metadata(cluster.state_dir.join("logs/kube-apiserver.log")).map_or(0, |m| m.len())
}

/// The API server's log lines since `from` about a call to one of confighistory's webhooks that
/// failed (an unreachable server, a certificate it did not trust or that had expired, a timeout).
pub(super) fn webhook_call_failures(cluster: &Cluster, from: u64) -> Vec<String> {
    use std::io::{Read as _, Seek as _};
    let Ok(mut file) = std::fs::File::open(cluster.state_dir.join("logs/kube-apiserver.log")) else { return Vec::new() };
    let mut text = String::new();
    if file.seek(std::io::SeekFrom::Start(from)).is_err() || file.read_to_string(&mut text).is_err() {
        return Vec::new();
    }
    text.lines()
        // One line per failed call ("Failed calling webhook, failing open|closed ..."); the
        // error line the dispatcher logs beside it is not counted again.
        .filter(|l| l.contains("Failed calling webhook") && l.contains(".confighistory.io"))
        .map(|l| l.chars().take(400).collect())
        .collect()
}

/// The API server's admission webhook metrics for confighistory's webhooks (names ending in
/// `.confighistory.io`), by metric and labels: `apiserver_admission_webhook_fail_open_count`, and
/// for the figures `..._request_total` with a code other than 200 and `..._rejection_count` of
/// calls that failed (under failurePolicy Fail).
pub(super) fn webhook_metrics(cluster: &Cluster) -> BTreeMap<String, f64> {
    let raw = cluster.kubectl(&["get", "--raw", "/metrics"]).expect_success().stdout;
    raw.lines()
        .filter(|l| {
            l.starts_with("apiserver_admission_webhook_fail_open_count{")
                || (l.starts_with("apiserver_admission_webhook_request_total{") && !l.contains("code=\"200\""))
                || (l.starts_with("apiserver_admission_webhook_rejection_count{") && !l.contains("error_type=\"no_error\""))
        })
        .filter(|l| l.split("name=\"").nth(1).and_then(|r| r.split('"').next()).is_some_and(|n| n.ends_with(".confighistory.io")))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            Some((series.to_owned(), value.parse().ok()?))
        })
        .collect()
}

/// What changed between two readings of [`webhook_metrics`] (series that grew).
pub(super) fn grown(before: &BTreeMap<String, f64>, after: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    let was = |k: &String| before.get(k).copied().unwrap_or(0.0);
    after.iter().filter(|(k, v)| **v > was(k)).map(|(k, v)| (k.clone(), v - was(k))).collect()
}

pub(super) fn fail_opens(m: &BTreeMap<String, f64>) -> f64 {
    m.iter().filter(|(k, _)| k.starts_with("apiserver_admission_webhook_fail_open_count{")).map(|(_, v)| v).sum()
}

/// `kubectl logs -f` of every confighistory pod seen while it lives (a pod rolled away takes its
/// log with it): their WARN and ERROR lines go into the report.
pub(super) struct Logs {
    pub(super) children: Vec<(String, std::process::Child)>,
    pub(super) lines: std::sync::Arc<Mutex<Vec<String>>>,
}

impl Logs {
    pub(super) fn follow_new(&mut self, cluster: &Cluster) {
        let out = cluster.kubectl(&["get", "pods", "-n", NAMESPACE, "-l", &format!("app.kubernetes.io/instance={RELEASE}"), "-o", "name"]);
        for pod in out.stdout.lines().map(str::trim).filter(|p| p.starts_with("pod/")) {
            if self.children.iter().any(|(p, _)| p == pod) {
                continue;
            }
            let child = Command::new(crate::support::find_kubectl())
                .args(["logs", "-f", "-n", NAMESPACE, pod])
                .env("KUBECONFIG", &cluster.kubeconfig)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::null())
                .spawn();
            let Ok(mut child) = child else { continue };
            let stdout = child.stdout.take().expect("piped");
            let (lines, name) = (self.lines.clone(), pod.trim_start_matches("pod/").to_owned());
            std::thread::spawn(move || {
                use std::io::BufRead as _;
                for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
                    if line.contains("\"level\":\"WARN\"") || line.contains("\"level\":\"ERROR\"") {
                        lines.lock().unwrap().push(format!("{name}: {line}"));
                    }
                }
            });
            self.children.push((pod.to_owned(), child));
        }
    }
}

impl Drop for Logs {
    fn drop(&mut self) {
        for (_, child) in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
