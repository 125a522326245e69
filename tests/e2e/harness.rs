//! The harness itself: kubectl drives the control plane the way people do, rollout history is
//! real, and the webhook configurations confighistory needs are valid for the API server.

use std::collections::BTreeMap;

use crate::support::apps::{app, configmap};
use crate::support::confighistory::{chart_webhook_configurations, webhook_configurations};
use crate::support::{cluster, generate_serving_cert, repo_root, TestNamespace};

fn config(value: &str) -> String {
    configmap("app-config", &[("mode", value)])
}

fn deployment(image: &str) -> String {
    app(image).env_from_configmap("app-config").yaml()
}

fn images(ns: &TestNamespace) -> Vec<(u32, String)> {
    ns.history_of("app").into_iter().map(|r| (r.revision, r.image)).collect()
}

#[test]
fn kubectl_drives_rollouts_and_history_is_real() {
    let Some(cluster) = cluster() else { return };
    let ns = TestNamespace::excluded(cluster, "harness");

    ns.accepts(&config("a"));
    ns.accepts(&deployment("registry.example/app:1.0"));
    let history = ns.history_of("app");
    assert_eq!(history.len(), 1, "{history:#?}");
    let first = &history[0];
    assert_eq!((first.revision, first.image.as_str()), (1, "registry.example/app:1.0"));
    assert_eq!(first.snapshots, BTreeMap::from([("app-config".into(), "app-config".into())]));
    assert_eq!(first.config("app-config").unwrap()["mode"], "a");

    // Partial edits.
    ns.kubectl(&["set", "image", "deployment/app", "app=registry.example/app:1.1"]).expect_success();
    ns.kubectl(&["rollout", "restart", "deployment/app"]).expect_success();
    assert_eq!(
        images(&ns),
        [(1, "registry.example/app:1.0".into()), (2, "registry.example/app:1.1".into()), (3, "registry.example/app:1.1".into())]
    );
    let listed = ns.kubectl(&["rollout", "history", "deployment/app"]).expect_success();
    assert!(listed.stdout.contains('3'), "{}", listed.describe());

    // Undo to a revision: its ReplicaSet becomes the newest revision.
    ns.rollout_undo("app", Some(1));
    assert_eq!(
        images(&ns),
        [(2, "registry.example/app:1.1".into()), (3, "registry.example/app:1.1".into()), (4, "registry.example/app:1.0".into())]
    );
    ns.rollout_undo("app", None);
    assert_eq!(images(&ns).last().unwrap(), &(5, "registry.example/app:1.1".into()));

    // A server-side dry run changes nothing.
    ns.apply_with(&deployment("registry.example/app:9.9"), &["--dry-run=server"]).expect("dry run");
    assert_eq!(images(&ns).len(), 3);

    // Server-side apply (taking over the image from `kubectl set image`).
    ns.apply_with(&deployment("registry.example/app:2.0"), &["--server-side", "--force-conflicts"]).expect("server-side apply");
    assert_eq!(images(&ns).last().unwrap(), &(6, "registry.example/app:2.0".into()));

    // Client-side apply again, with a config edit.
    ns.accepts(&config("b"));
    ns.accepts(&deployment("registry.example/app:2.1"));
    let last = ns.history_of("app").pop().unwrap();
    assert_eq!((last.revision, last.image.as_str()), (7, "registry.example/app:2.1"));
    assert_eq!(last.config("app-config").unwrap()["mode"], "b");
}

#[test]
fn confighistory_webhook_configurations_are_valid_for_the_api_server() {
    let Some(cluster) = cluster() else { return };
    let ca = generate_serving_cert(&cluster.state_dir.join("run/registration-check-builtin"), "127.0.0.1");
    let manifests =
        webhook_configurations("https://127.0.0.1:1", &ca, "Fail").iter().map(|c| c.to_string()).collect::<Vec<_>>().join("\n---\n");
    cluster.kubectl_stdin(&["apply", "--dry-run=server", "-f", "-"], &manifests).expect_success();
}

#[test]
fn the_charts_webhook_configurations_in_url_mode_are_valid_for_the_api_server() {
    let Some(cluster) = cluster() else { return };
    if !repo_root().join("charts/confighistory/Chart.yaml").exists() {
        eprintln!("e2e: no chart yet; nothing to check");
        return;
    }
    let ca = generate_serving_cert(&cluster.state_dir.join("run/registration-check-chart"), "127.0.0.1");
    let manifests = chart_webhook_configurations("https://127.0.0.1:1", &ca);
    assert!(manifests.contains("MutatingWebhookConfiguration"), "{manifests}");
    assert!(manifests.contains("ValidatingWebhookConfiguration"), "{manifests}");
    cluster.kubectl_stdin(&["apply", "--dry-run=server", "-f", "-"], &manifests).expect_success();
}
