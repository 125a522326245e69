//! docs/behaviour.md §6.4 snapshot protection.

use confighistory::cache::Writer as _;
use confighistory::model::snapshot;
use confighistory::model::template::template_hash;
use serde_json::{json, Value};

use crate::common::{review, NS};
use crate::fixture::{configmap, content, deployment, snap, with_annotations, Fixture, A, ME};

#[tokio::test]
async fn only_valid_snapshots_may_be_created() {
    let f = Fixture::new();
    let c = content(A);
    let real = snapshot::object(NS, "pricing-config", &snap("pricing-config", A), &c, &[]);
    assert!(f.send("/protect", review("ConfigMap", "", "v1", "CREATE", Some(&real), None)).await.allowed());
    let mut forged = real.clone();
    forged["data"]["mode"] = json!("evil");
    let a = f.send("/protect", review("ConfigMap", "", "v1", "CREATE", Some(&forged), None)).await;
    assert!(!a.allowed());
    assert!(a.message().contains("not a valid snapshot"), "{}", a.message());
}

#[tokio::test]
async fn snapshot_metadata_is_frozen_except_for_confighistory() {
    let f = Fixture::new();
    let real = snapshot::object(NS, "pricing-config", &snap("pricing-config", A), &content(A), &[]);
    let mut owned = real.clone();
    owned["metadata"]["ownerReferences"] = json!([{"kind": "Deployment", "name": "gone", "uid": "dead"}]);
    let a = f.send("/protect", review("ConfigMap", "", "v1", "UPDATE", Some(&owned), Some(&real))).await;
    assert!(!a.allowed());
    assert!(a.message().contains("ownerReferences"), "{}", a.message());
    let mut relabelled = real.clone();
    relabelled["metadata"]["labels"]["confighistory.io/hash"] = json!("x");
    assert!(!f.send("/protect", review("ConfigMap", "", "v1", "UPDATE", Some(&relabelled), Some(&real))).await.allowed());
    let mut adopted = real.clone();
    adopted["metadata"]["annotations"]["confighistory.io/adopted-templates"] = json!("abc");
    assert!(f.as_user("/protect", ME, review("ConfigMap", "", "v1", "UPDATE", Some(&adopted), Some(&real))).await.allowed());
}

#[tokio::test]
async fn referenced_snapshots_cannot_be_deleted_until_the_namespace_goes() {
    let name = snap("pricing-config", A);
    let d = deployment("pricing:4.11", &name);
    let f = Fixture::new().snapshot("pricing-config", A, &[]).workload(&d);
    let obj = f.cluster.get(NS, &name).unwrap();
    let a = f.send("/protect", review("ConfigMap", "", "v1", "DELETE", None, Some(&obj))).await;
    assert!(!a.allowed());
    assert!(a.message().contains("Deployment/pricing"), "{}", a.message());

    let f = f.namespace_mode("rewrite");
    f.state.write().apply_namespace(&json!({"metadata": {"name": NS, "deletionTimestamp": "2026-12-02T10:00:00Z"}}));
    assert!(f.send("/protect", review("ConfigMap", "", "v1", "DELETE", None, Some(&obj))).await.allowed());

    let unused = Fixture::new().snapshot("pricing-config", A, &[]);
    assert!(unused.send("/protect", review("ConfigMap", "", "v1", "DELETE", None, Some(&obj))).await.allowed());
}

#[tokio::test]
async fn a_head_or_adopted_snapshot_cannot_be_deleted() {
    let name = snap("pricing-config", A);
    let plain = deployment("pricing:4.11", "pricing-config");
    let f = Fixture::new().snapshot("pricing-config", A, &[template_hash(&plain["spec"]["template"])]).revision(&plain, 1);
    let obj = f.cluster.get(NS, &name).unwrap();
    let a = f.send("/protect", review("ConfigMap", "", "v1", "DELETE", None, Some(&obj))).await;
    assert!(a.message().contains("before confighistory"), "{}", a.message());

    let f = Fixture::new().snapshot("pricing-config", A, &[]);
    let head = with_annotations(configmap("pricing-config", A), &[("confighistory.io/head", &content(A).hash())]);
    f.state.write().apply_configmap(&head);
    let a = f.send("/protect", review("ConfigMap", "", "v1", "DELETE", None, Some(&obj))).await;
    assert!(a.message().contains("current content"), "{}", a.message());
    // The reason a sweep keeps a snapshot by, when it lost the race to the source's revert.
    assert_eq!(a.body["response"]["status"]["reason"], "SnapshotInUse", "{}", a.body);
}

/// `kubectl delete cm --all` (a DELETECOLLECTION): the API server admits each item as a DELETE
/// whose request name is empty, the item itself in oldObject. Each is judged by its own name.
#[tokio::test]
async fn a_delete_collection_judges_each_snapshot_by_its_own_name() {
    let name = snap("pricing-config", A);
    let d = deployment("pricing:4.11", &name);
    let f = Fixture::new().snapshot("pricing-config", A, &[]).workload(&d);
    let obj = f.cluster.get(NS, &name).unwrap();
    let item = |obj: &Value| {
        let mut r = review("ConfigMap", "", "v1", "DELETE", None, Some(obj));
        r["request"]["name"] = json!("");
        r["request"]["options"] = json!({"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1", "propagationPolicy": "Background"});
        r
    };
    let a = f.send("/protect", item(&obj)).await;
    assert!(!a.allowed(), "a referenced snapshot deleted in bulk: {}", a.body);
    assert!(a.message().contains(&name) && a.message().contains("Deployment/pricing"), "{}", a.message());

    // The head of its source, unreferenced otherwise: kept too.
    let f = Fixture::new().snapshot("pricing-config", A, &[]);
    f.state.write().apply_configmap(&with_annotations(configmap("pricing-config", A), &[("confighistory.io/head", &content(A).hash())]));
    assert!(f.send("/protect", item(&obj)).await.message().contains("current content"));

    // An unused snapshot goes with the rest.
    let unused = Fixture::new().snapshot("pricing-config", A, &[]);
    assert!(unused.send("/protect", item(&obj)).await.allowed());
}
