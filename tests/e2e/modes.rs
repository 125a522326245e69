//! Per-namespace modes (SPEC §3, §6.3): enforce refuses mutable references with the field path
//! and the fix, audit only warns, and a namespace can't label itself into a mode the admin does
//! not allow.

use confighistory::names::{IGNORE, MODE_LABEL};

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
