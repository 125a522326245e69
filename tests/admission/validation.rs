//! docs/behaviour.md §6.3 validation: what enforce and audit modes refuse or warn about.

use confighistory::cache::Writer as _;
use confighistory::model::kinds::Kind;
use confighistory::model::policy::Mode;
use serde_json::json;

use crate::common::review;
use crate::fixture::{configmap, cronjob_and_job, deployment, with_annotations, Fixture, A};

#[tokio::test]
async fn enforce_rejects_mutable_config_with_path_and_fix() {
    let f = Fixture::new().source("pricing-config", A).namespace_mode("enforce");
    let d = deployment("x:1", "pricing-config");
    let m = f.mutate_deployment("CREATE", &d, None).await;
    assert!(m.patch().is_empty(), "enforce never rewrites");
    let a = f.send("/validate", review("Deployment", "apps", "v1", "CREATE", Some(&d), None)).await;
    assert!(!a.allowed());
    let msg = a.message();
    assert!(msg.contains("spec.template.spec.volumes[0].configMap.name names mutable ConfigMap pricing-config"), "{msg}");
    assert!(msg.contains("Fix:"), "{msg}");
    // The ignore annotation does not exempt in enforce mode.
    let ignored = with_annotations(d.clone(), &[("confighistory.io/ignore", "true")]);
    assert!(!f.send("/validate", review("Deployment", "apps", "v1", "CREATE", Some(&ignored), None)).await.allowed());
}

/// A reference to a source that is not versioned is allowed in every mode, with a
/// short warning: once per source, however many references name it, and a few per
/// response at most.
#[tokio::test]
async fn a_reference_to_an_unversioned_source_is_allowed_with_one_warning_per_source() {
    for mode in ["rewrite", "enforce", "audit"] {
        let f = Fixture::new().namespace_mode(mode);
        let mut d = deployment("x:1", "flags"); // names it twice: a volume and an env var
        let mut volumes = vec![d["spec"]["template"]["spec"]["volumes"][0].clone()];
        for i in 0..6 {
            let name = format!("flags-{i}");
            let cm = with_annotations(configmap(&name, A), &[("confighistory.io/versioned", "false")]);
            f.cluster.insert(cm);
            volumes.push(json!({"name": format!("v{i}"), "configMap": {"name": name}}));
        }
        d["spec"]["template"]["spec"]["volumes"] = json!(volumes);
        f.cluster.insert(with_annotations(configmap("flags", A), &[("confighistory.io/versioned", "false")]));
        let a = f.send("/validate", review("Deployment", "apps", "v1", "CREATE", Some(&d), None)).await;
        assert!(a.allowed(), "{mode}: {}", a.message());
        let warnings = a.warnings();
        assert_eq!(warnings.iter().filter(|w| w.contains("flags:") || w.contains(" flags ")).count(), 1, "{mode}: {warnings:?}");
        assert!(warnings[0].contains("not versioned"), "{mode}: {warnings:?}");
        assert!(warnings.len() <= 4, "a few per response: {warnings:?}");
        assert!(warnings.iter().all(|w| w.len() <= 120), "{warnings:?}");
        // An unchanged template (a re-applied manifest) is not warned again.
        let again = f.send("/validate", review("Deployment", "apps", "v1", "UPDATE", Some(&d), Some(&d))).await;
        assert!(again.warnings().is_empty(), "{mode}: {:?}", again.warnings());
    }
}

#[tokio::test]
async fn audit_warns_and_never_rejects() {
    let f = Fixture::new().source("pricing-config", A).namespace_mode("audit");
    let d = deployment("x:1", "pricing-config");
    assert!(f.mutate_deployment("CREATE", &d, None).await.patch().is_empty());
    let a = f.send("/validate", review("Deployment", "apps", "v1", "CREATE", Some(&d), None)).await;
    assert!(a.allowed());
    assert!(a.warnings()[0].contains("mutable ConfigMap pricing-config"));
}

#[tokio::test]
async fn a_namespace_cannot_label_itself_into_a_forbidden_mode() {
    let mut f = Fixture::new().source("pricing-config", A).namespace_mode("off");
    f.policy.default_mode = Mode::Enforce;
    f.policy.allowed_modes = vec![Mode::Enforce];
    let d = deployment("x:1", "pricing-config");
    assert!(!f.send("/validate", review("Deployment", "apps", "v1", "CREATE", Some(&d), None)).await.allowed());
}

/// docs/behaviour.md §6.3: in rewrite mode, a plain reference to a ConfigMap created while the workload was
/// being admitted (the mutating pass found none) is allowed with a warning; an older one is not,
/// and enforce mode refuses both.
#[tokio::test]
async fn a_configmap_created_during_the_admission_is_allowed_in_rewrite_mode_only() {
    let now = format!("{:.0}", k8s_openapi::jiff::Timestamp::now());
    for (mode, created, allowed) in
        [("rewrite", now.as_str(), true), ("rewrite", "2026-01-01T00:00:00Z", false), ("enforce", now.as_str(), false)]
    {
        let f = Fixture::new().namespace_mode(mode);
        let mut cm = configmap("pricing-config", A);
        cm["metadata"]["creationTimestamp"] = json!(created);
        f.cluster.insert(cm);
        let d = deployment("pricing:4.11", "pricing-config");
        let v = f.send("/validate", review("Deployment", "apps", "v1", "CREATE", Some(&d), None)).await;
        assert_eq!(v.allowed(), allowed, "{mode} {created}: {}", v.message());
        if allowed {
            assert!(v.warnings().iter().any(|w| w.contains("appeared while admitting")), "{:?}", v.warnings());
        }
    }
}

#[tokio::test]
async fn undos_deletions_and_cronjob_jobs_are_never_denied() {
    let rev1 = deployment("pricing:4.11", "pricing-config");
    let rev2 = deployment("pricing:4.12", "pricing-config-v2");
    let f = Fixture::new().source("pricing-config", A).namespace_mode("enforce").workload(&rev2).revision(&rev1, 1).revision(&rev2, 2);
    assert!(f.send("/validate", review("Deployment", "apps", "v1", "UPDATE", Some(&rev1), Some(&rev2))).await.allowed());

    let mut deleting = rev1.clone();
    deleting["metadata"]["deletionTimestamp"] = json!("2026-12-02T10:00:00Z");
    assert!(f.send("/validate", review("Deployment", "apps", "v1", "CREATE", Some(&deleting), None)).await.allowed());

    let (cronjob, job) = cronjob_and_job("pricing-config");
    f.state.write().apply_workload(Kind::CronJob, &cronjob);
    let a = f.send("/validate", review("Job", "batch", "v1", "CREATE", Some(&job), None)).await;
    assert!(a.allowed());
    assert!(!a.warnings().is_empty());
}
