//! The Helm chart in the e2e suite: the webhook configurations the API server calls are the
//! chart's (url mode), and the server runs with the chart's ServiceAccount and RBAC — enough for
//! every scenario, and (`charts/confighistory/tests/can-i`) not more than needed.

use std::process::Command;

use crate::support::confighistory::{registration, webhook, Registration, NAMESPACE, SERVICE_ACCOUNT};
use crate::support::{cluster, repo_root, run_id, WEBHOOK_IDENTITY};

fn chart_registered() -> bool {
    if registration() == Registration::Chart {
        return true;
    }
    eprintln!("e2e: webhooks registered without the chart (no helm, or CONFIGHISTORY_E2E_WEBHOOKS=builtin): nothing to check");
    false
}

#[test]
fn the_webhook_configurations_the_api_server_calls_are_the_charts() {
    let Some(cluster) = cluster() else { return };
    let server = webhook(cluster);
    if !chart_registered() {
        return;
    }
    for kind in ["mutatingwebhookconfiguration", "validatingwebhookconfiguration"] {
        let configuration = cluster.kubectl(&["get", kind, &server.name, "-o", "json"]).expect_success().json();
        let labels = &configuration["metadata"]["labels"];
        assert_eq!(labels["app.kubernetes.io/managed-by"], "Helm", "{kind}: {labels:#}");
        // The same labels from one chart version to the next (docs/install.md "Upgrading with Helm 4").
        assert!(labels["helm.sh/chart"].is_null() && labels["app.kubernetes.io/version"].is_null(), "{kind}: {labels:#}");
        assert_eq!(labels["app.kubernetes.io/instance"], server.name.as_str());
        for hook in configuration["webhooks"].as_array().unwrap() {
            let url = hook["clientConfig"]["url"].as_str().unwrap_or_default();
            assert!(url.starts_with(&server.url_base), "{kind} {}: {url}", hook["name"]);
            assert_eq!(hook["namespaceSelector"]["matchLabels"][crate::support::RUN_LABEL], run_id(), "{kind} {}", hook["name"]);
        }
    }
}

/// The server's credentials are the chart ServiceAccount's token: the API server knows it as
/// `system:serviceaccount:confighistory:confighistory`, and it can't read Secrets.
#[test]
fn the_server_runs_as_the_charts_service_account() {
    let Some(cluster) = cluster() else { return };
    let server = webhook(cluster);
    if !chart_registered() || std::env::var_os("CONFIGHISTORY_E2E_WEBHOOK_KUBECONFIG").is_some() {
        return;
    }
    let out = server.kubectl(&["get", "secrets", "-n", NAMESPACE]);
    assert!(!out.success, "the ServiceAccount must not read Secrets:\n{}", out.describe());
    assert!(out.stderr.contains(&format!("User \"{WEBHOOK_IDENTITY}\" cannot list resource \"secrets\"")), "{}", out.describe());
    let sa = cluster.kubectl(&["get", "serviceaccount", SERVICE_ACCOUNT, "-n", NAMESPACE, "-o", "json"]).expect_success().json();
    assert_eq!(sa["metadata"]["labels"]["app.kubernetes.io/name"], "confighistory", "the chart's ServiceAccount: {sa:#}");
}

/// `charts/confighistory/tests/can-i` with the server's own credentials: everything it needs is
/// allowed, and nothing else (Secrets, Pods, RBAC, other Leases, ...).
#[test]
fn the_charts_rbac_allows_what_the_server_needs_and_no_more() {
    let Some(cluster) = cluster() else { return };
    let server = webhook(cluster);
    if !chart_registered() || std::env::var_os("CONFIGHISTORY_E2E_WEBHOOK_KUBECONFIG").is_some() {
        return;
    }
    let out = Command::new(repo_root().join("charts/confighistory/tests/can-i"))
        .args([NAMESPACE, SERVICE_ACCOUNT, &server.name])
        .env("KUBECONFIG", &server.kubeconfig)
        .env("KUBECTL", &cluster.kubectl)
        .output()
        .expect("run charts/confighistory/tests/can-i");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "can-i:\n{text}");
    assert!(text.contains("can-i: all answers as expected"), "{text}");
}
