//! Per-namespace modes (docs/behaviour.md §3, §6.3): enforce refuses mutable references with the field path
//! and the fix, audit only warns, and a namespace can't label itself into a mode the admin does
//! not allow.

use confighistory::model::names::{IGNORE, MODE_LABEL};

use crate::support::apps::{configmap, pricing, pricing_config, IMAGE_A, KEY_A, SOURCE};
use crate::support::confighistory::{webhook, Webhook};
use crate::support::{cluster, run_id, TestNamespace};

/// The pricing Deployment mounting the immutable ConfigMap `name` (versioned by its owner, e.g.
/// a kustomize configMapGenerator).
fn immutable_config(name: &str) -> String {
    format!("{}immutable: true\n", configmap(name, &[(KEY_A, "/etc/rules")]))
}

/// What enforce mode answers, whoever chose it (the namespace's label, or the admin's default).
fn enforces(ns: &TestNamespace) {
    ns.accepts(&pricing_config(KEY_A));
    let out = ns.rejects(&pricing(IMAGE_A), "Deployment pricing:");
    for expected in [
        "spec.template.spec.volumes[0].configMap.name names mutable ConfigMap pricing-config",
        "spec.template.spec.containers[0].envFrom[0].configMapRef.name names mutable ConfigMap pricing-config",
        "Fix: use an immutable ConfigMap",
    ] {
        assert!(out.stderr.contains(expected), "the refusal says {expected:?}:\n{}", out.describe());
    }
    assert!(ns.get_json("deployment", "pricing").is_none());
    // The ignore annotation does not exempt a workload from enforcement.
    let ignored = pricing(IMAGE_A).replace("  name: pricing\n", &format!("  name: pricing\n  annotations:\n    {IGNORE}: \"true\"\n"));
    ns.rejects(&ignored, "names mutable ConfigMap pricing-config");

    // An immutable ConfigMap is accepted as it is: nothing is rewritten, no snapshot is made.
    let versioned = "pricing-config-v1";
    ns.accepts(&immutable_config(versioned));
    let out = ns.accepts(&pricing(IMAGE_A).replace(&format!("name: {SOURCE}}}"), &format!("name: {versioned}}}")));
    assert!(out.warnings().is_empty(), "{}", out.describe());
    assert_eq!(ns.current_template("deployment", "pricing").snapshots[versioned], versioned);
    assert!(ns.snapshots().is_empty());
}

#[test]
fn an_enforce_namespace_rejects_mutable_references_with_the_field_path_and_the_fix() {
    let Some(cluster) = cluster() else { return };
    webhook(cluster);
    enforces(&TestNamespace::with_labels(cluster, "enforce", &[(MODE_LABEL, "enforce")]));
}

#[test]
fn an_audit_namespace_accepts_mutable_references_with_a_warning() {
    let Some(cluster) = cluster() else { return };
    webhook(cluster);
    let ns = TestNamespace::with_labels(cluster, "audit", &[(MODE_LABEL, "audit")]);
    ns.accepts(&pricing_config(KEY_A));
    let out = ns.accepts(&pricing(IMAGE_A));
    assert!(
        out.warnings()
            .iter()
            .any(|w| w.contains("Deployment pricing: spec.template.spec.volumes[0].configMap.name names mutable ConfigMap pricing-config")),
        "{}",
        out.describe()
    );
    assert_eq!(ns.current_template("deployment", "pricing").snapshots[SOURCE], SOURCE, "audit never rewrites");
    assert!(ns.snapshots().is_empty());
}

/// The default policy allows rewrite, enforce and audit: a namespace labelled `off` is ignored
/// (with a logged warning) and its workloads are pinned as in any rewrite namespace.
#[test]
fn a_namespace_labelled_off_is_still_pinned_when_off_is_not_allowed() {
    let Some(cluster) = cluster() else { return };
    webhook(cluster);
    let ns = TestNamespace::with_labels(cluster, "off", &[(MODE_LABEL, "off")]);
    ns.accepts(&pricing_config(KEY_A));
    ns.accepts(&pricing(IMAGE_A));
    let pinned = &ns.current_template("deployment", "pricing").snapshots[SOURCE];
    assert!(pinned.starts_with(&format!("{SOURCE}-")), "{pinned}");
}

/// An admin who sets `defaultMode: enforce, allowedModes: [enforce]`: no namespace can label its
/// way out, whatever it asks for. (A server of its own, for the namespaces of its own run.)
#[test]
fn with_enforce_as_the_only_allowed_mode_no_namespace_label_escapes_it() {
    let Some(cluster) = cluster() else { return };
    let run = format!("{}-enforce", run_id());
    let server = Webhook::start(cluster, &run, &["--default-mode", "enforce", "--allowed-modes", "enforce", "--no-controllers"]);
    for mode in [None, Some("off"), Some("audit"), Some("rewrite")] {
        let labels: Vec<(&str, &str)> = mode.map(|m| (MODE_LABEL, m)).into_iter().collect();
        let ns = server.namespace(&format!("only-enforce-{}", mode.unwrap_or("unlabelled")), &labels);
        enforces(&ns);
    }
    drop(server);
}

/// docs/behaviour.md §9a on the real API server: the ways around enforce mode a tenant has are closed.
/// - A ReplicaSet the tenant creates with an owner reference to their own Deployment, whose
///   template names a mutable ConfigMap, does not make that template an "undo" (never denied).
/// - A Job claiming a CronJob owner that does not exist is refused like any Job.
/// - A Deployment applied before its ConfigMap, then the ConfigMap created mutable: refused.
#[test]
fn enforce_mode_cannot_be_bypassed_by_forged_history_owners_or_ordering() {
    let Some(cluster) = cluster() else { return };
    webhook(cluster);
    let ns = TestNamespace::with_labels(cluster, "bypass", &[(MODE_LABEL, "enforce")]);
    let versioned = "pricing-config-v1";
    ns.accepts(&immutable_config(versioned));
    ns.accepts(&pricing(IMAGE_A).replace(&format!("name: {SOURCE}}}"), &format!("name: {versioned}}}")));
    ns.accepts(&pricing_config(KEY_A));
    ns.wait_observed("deployment", "pricing");

    let deployment = ns.get_json("deployment", "pricing").unwrap();
    let uid = deployment["metadata"]["uid"].as_str().unwrap().to_owned();
    let mut template = deployment["spec"]["template"].clone();
    template["spec"]["containers"][0]["image"] = serde_json::json!("pricing:unvetted");
    template["spec"]["containers"][0]["envFrom"][0]["configMapRef"]["name"] = serde_json::json!(SOURCE);
    template["spec"]["volumes"][0]["configMap"]["name"] = serde_json::json!(SOURCE);
    let forged = serde_json::json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "pricing-forged",
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "pricing", "uid": uid, "controller": true}]},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "pricing"}}, "template": template}});
    ns.accepts(&forged.to_string());
    std::thread::sleep(std::time::Duration::from_secs(3)); // the webhook's watch has the ReplicaSet
    let patch = serde_json::json!([{"op": "replace", "path": "/spec/template", "value": template}]).to_string();
    let out = ns.kubectl(&["patch", "deployment", "pricing", "--type=json", "-p", &patch]);
    assert!(!out.success, "a forged ReplicaSet made a mutable template an undo:\n{}", out.describe());
    assert!(out.stderr.contains("names mutable ConfigMap pricing-config"), "{}", out.describe());

    let job = format!(
        "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: report-1\n  ownerReferences:\n  - {{apiVersion: batch/v1beta1, kind: CronJob, \
         name: report, uid: 6a1e0c0e-0000-4000-8000-000000000001, controller: true}}\nspec:\n  template:\n    spec:\n      \
         restartPolicy: Never\n      containers:\n      - name: r\n        image: report:1\n        envFrom:\n        - configMapRef: \
         {{name: {SOURCE}}}\n"
    );
    ns.rejects(&job, "names mutable ConfigMap pricing-config");

    ns.accepts(&crate::support::apps::workload("deployment", "late", IMAGE_A, "late-config"));
    std::thread::sleep(std::time::Duration::from_secs(3)); // the webhook's watch has the Deployment
    ns.rejects(&configmap("late-config", &[(KEY_A, "/etc/rules")]), "is mutable and Deployment/late use it");
    ns.accepts(&format!("{}immutable: true\n", configmap("late-config", &[(KEY_A, "/etc/rules")])));
}
