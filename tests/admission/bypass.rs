//! docs/behaviour.md §9a trust: enforce mode cannot be bypassed.

use confighistory::cache::Writer as _;
use confighistory::model::kinds::Kind;
use serde_json::json;

use crate::common::{review, NS};
use crate::fixture::{configmap, cronjob_and_job, deployment, snap, with_annotations, Fixture, A, B};

#[tokio::test]
async fn a_forged_replicaset_does_not_make_a_mutable_template_an_undo() {
    let rev1 = deployment("pricing:4.11", &snap("pricing-config", A));
    let rev2 = deployment("pricing:4.12", &snap("pricing-config", B));
    let f = Fixture::new()
        .source("pricing-config", B)
        .snapshot("pricing-config", A, &[])
        .snapshot("pricing-config", B, &[])
        .namespace_mode("enforce")
        .workload(&rev1)
        .workload(&rev2);
    f.state.write().set_revisions_trusted_before(Some("2026-12-01T00:00:00Z".into()));
    // The tenant creates a ReplicaSet "of" their Deployment whose template names the mutable source.
    let mutable = deployment("pricing:unvetted", "pricing-config");
    let forged = |ns: &str| {
        let mut tpl = mutable["spec"]["template"].clone();
        tpl["metadata"]["labels"]["pod-template-hash"] = json!("forged");
        json!({"metadata": {"name": "pricing-forged", "namespace": ns, "creationTimestamp": "2026-12-02T10:00:00Z",
            "ownerReferences": [{"kind": "Deployment", "uid": "uid-pricing", "controller": true}]}, "spec": {"template": tpl}})
    };
    f.state.write().apply_revision(Kind::ReplicaSet, &forged(NS));
    let a = f.send("/validate", review("Deployment", "apps", "v1", "UPDATE", Some(&mutable), Some(&rev2))).await;
    assert!(!a.allowed(), "not an undo: the workload was never seen with that template");
    assert!(a.message().contains("names mutable ConfigMap pricing-config"), "{}", a.message());
    // The same ReplicaSet from another namespace claiming the Deployment's uid: not its history either.
    let f2 = Fixture::new().source("pricing-config", A).namespace_mode("enforce").workload(&rev2);
    f2.state.write().apply_revision(Kind::ReplicaSet, &forged("elsewhere"));
    assert!(!f2.send("/validate", review("Deployment", "apps", "v1", "UPDATE", Some(&mutable), Some(&rev2))).await.allowed());

    // A real revision, created after this process started, whose template the workload had (a
    // mutable one, from before the namespace was switched to enforce): an undo, never denied.
    let before = deployment("pricing:4.10", "pricing-config");
    f.state.write().apply_workload(Kind::Deployment, &before);
    f.state.write().apply_workload(Kind::Deployment, &rev2);
    let mut tpl = before["spec"]["template"].clone();
    tpl["metadata"]["labels"]["pod-template-hash"] = json!("h0");
    let real = json!({"metadata": {"name": "pricing-0", "namespace": NS, "creationTimestamp": "2026-12-02T09:00:00Z",
        "ownerReferences": [{"kind": "Deployment", "uid": "uid-pricing", "controller": true}]}, "spec": {"template": tpl}});
    f.state.write().apply_revision(Kind::ReplicaSet, &real);
    assert!(f.send("/validate", review("Deployment", "apps", "v1", "UPDATE", Some(&before), Some(&rev2))).await.allowed());
}

#[tokio::test]
async fn a_job_claiming_a_cronjob_owner_is_checked_against_that_cronjob() {
    let f = Fixture::new().source("pricing-config", A).namespace_mode("enforce");
    let (cronjob, job) = cronjob_and_job("pricing-config");
    // No such CronJob: the owner reference is only the request's word.
    assert!(!f.send("/validate", review("Job", "batch", "v1", "CREATE", Some(&job), None)).await.allowed());
    // A CronJob of that name with another uid, or whose template is not the Job's.
    let mut other_uid = cronjob.clone();
    other_uid["metadata"]["uid"] = json!("uid-someone-else");
    f.state.write().apply_workload(Kind::CronJob, &other_uid);
    assert!(!f.send("/validate", review("Job", "batch", "v1", "CREATE", Some(&job), None)).await.allowed());
    let (immutable_cronjob, _) = cronjob_and_job("immutable-config");
    f.state.write().apply_workload(Kind::CronJob, &immutable_cronjob);
    assert!(!f.send("/validate", review("Job", "batch", "v1", "CREATE", Some(&job), None)).await.allowed());
    // The real thing: warned, not denied.
    f.state.write().apply_workload(Kind::CronJob, &cronjob);
    let a = f.send("/validate", review("Job", "batch", "v1", "CREATE", Some(&job), None)).await;
    assert!(a.allowed() && !a.warnings().is_empty());
}

#[tokio::test]
async fn a_mutable_configmap_created_after_its_workload_is_refused_in_enforce_mode() {
    let d = deployment("x:1", "pricing-config");
    let f = Fixture::new().namespace_mode("enforce").workload(&d);
    let cm = configmap("pricing-config", A);
    let a = f.send("/mutate", review("ConfigMap", "", "v1", "CREATE", Some(&cm), None)).await;
    assert!(!a.allowed());
    assert!(a.message().contains("Deployment/pricing") && a.message().contains("immutable: true"), "{}", a.message());
    let mut immutable = cm.clone();
    immutable["immutable"] = json!(true);
    assert!(f.send("/mutate", review("ConfigMap", "", "v1", "CREATE", Some(&immutable), None)).await.allowed());
    let unversioned = with_annotations(cm.clone(), &[("confighistory.io/versioned", "false")]);
    assert!(f.send("/mutate", review("ConfigMap", "", "v1", "CREATE", Some(&unversioned), None)).await.allowed());
    // Audit mode flags it.
    let f = Fixture::new().namespace_mode("audit").workload(&d);
    let a = f.send("/mutate", review("ConfigMap", "", "v1", "CREATE", Some(&cm), None)).await;
    assert!(a.allowed() && a.warnings().iter().any(|w| w.contains("mutable")), "{:?}", a.warnings());
}
