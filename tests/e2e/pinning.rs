//! confighistory under test: the API server calls the real server, which pins references.

use crate::support::confighistory::webhook;
use crate::support::{cluster, TestNamespace};

const CONFIG: &str = "apiVersion: v1
kind: ConfigMap
metadata:
  name: app-config
data:
  discount_rules_path: /etc/rules
";

const DEPLOYMENT: &str = "apiVersion: apps/v1
kind: Deployment
metadata:
  name: app
spec:
  replicas: 1
  selector:
    matchLabels: {app: app}
  template:
    metadata:
      labels: {app: app}
    spec:
      containers:
      - name: app
        image: registry.example/app:4.11
        volumeMounts:
        - {name: config, mountPath: /etc/app}
      volumes:
      - name: config
        configMap: {name: app-config}
";

#[test]
fn a_release_pins_the_config_reference_to_a_snapshot() {
    let Some(cluster) = cluster() else { return };
    webhook(cluster);
    let ns = TestNamespace::new(cluster, "pinning");

    ns.accepts(CONFIG);
    ns.accepts(DEPLOYMENT);

    let history = ns.history_of("app");
    assert_eq!(history.len(), 1, "{history:#?}");
    let snapshot = &history[0].snapshots["app-config"];
    assert!(snapshot.starts_with("app-config-"), "the template names a snapshot: {history:#?}");
    assert_eq!(history[0].config("app-config").unwrap()["discount_rules_path"], "/etc/rules");
    let snapshot = ns.get_json("configmap", snapshot).unwrap();
    assert_eq!(snapshot["immutable"], true, "{snapshot:#}");
}
