//! The API server really calls a webhook served by the tests, and honours its decision.

use crate::support::test_webhook::{allow, deny, TestWebhook};
use crate::support::{cluster, wait_for, TestNamespace};
use std::time::Duration;

const DENIED: &str = "smoke test webhook refuses ConfigMaps labelled smoke=deny";

fn configmap(name: &str, label: &str) -> String {
    format!(
        "apiVersion: v1
kind: ConfigMap
metadata:
  name: {name}
  labels:
    smoke: {label}
data:
  greeting: hello
"
    )
}

#[test]
fn api_server_calls_a_webhook_served_by_the_test_and_honours_its_decision() {
    let Some(cluster) = cluster() else { return };
    let ns = TestNamespace::excluded(cluster, "smoke");
    let webhook =
        TestWebhook::start(
            cluster,
            |request| {
                if request["object"]["metadata"]["labels"]["smoke"] == "deny" {
                    deny(DENIED)
                } else {
                    allow()
                }
            },
        );
    let _registration = webhook.register_validating(&ns, &["CREATE", "UPDATE"], &["configmaps"]);

    // The API server picks up a new webhook configuration within a moment.
    wait_for("the webhook to be called", Duration::from_secs(20), || {
        ns.apply_with(&configmap("probe", "deny"), &["--dry-run=server"]).is_err()
    });

    ns.accepts(&configmap("allowed", "allow"));
    let refused = ns.rejects(&configmap("refused", "deny"), DENIED);
    assert!(refused.stderr.contains("admission webhook"), "the refusal names the admission webhook:\n{}", refused.describe());
    assert!(ns.get_json("configmap", "allowed").is_some());
    assert!(ns.get_json("configmap", "refused").is_none(), "a refused object is not stored");
    assert!(webhook.calls() >= 2, "the webhook answered {} reviews", webhook.calls());
}
