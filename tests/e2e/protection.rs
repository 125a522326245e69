//! Snapshot protection (docs/behaviour.md §5, §6.4, §11.8): history can't be forged, handed to the garbage
//! collector or deleted while rollout history reaches it; a namespace still goes away; a name
//! squatter can't block a release.

use std::collections::BTreeMap;
use std::time::Duration;

use confighistory::model::names::{HASH_LABEL, MANAGED_BY, MANAGER, SOURCE_LABEL, SOURCE_NAME};
use confighistory::model::snapshot::{self, Content};

use crate::support::apps::{configmap, pricing, pricing_config, workload, IMAGE_A, KEY_A, SOURCE};
use crate::support::confighistory::webhook;
use crate::support::{cluster, wait_for, Kubectl, TestNamespace};

/// A namespace with release A applied; returns it and the snapshot its Deployment is pinned to.
fn released(prefix: &str) -> Option<(TestNamespace, String)> {
    let cluster = cluster()?;
    webhook(cluster);
    let ns = TestNamespace::new(cluster, prefix);
    ns.accepts(&pricing_config(KEY_A));
    ns.accepts(&pricing(IMAGE_A));
    let pinned = ns.current_template("deployment", "pricing").snapshots[SOURCE].clone();
    assert_ne!(pinned, SOURCE);
    Some((ns, pinned))
}

/// A ConfigMap that claims to be the snapshot `name` of `pricing-config` (labels and annotation
/// as confighistory writes them, immutable) with `data`.
fn claimed_snapshot(name: &str, hash: &str, data: &[(&str, &str)]) -> String {
    let mut yaml = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  labels:\n    {HASH_LABEL}: {hash}\n    {SOURCE_LABEL}: {SOURCE}\n    \
         {MANAGED_BY}: {MANAGER}\n  annotations:\n    {SOURCE_NAME}: {SOURCE}\nimmutable: true\ndata:\n"
    );
    for (key, value) in data {
        yaml.push_str(&format!("  {key:?}: {value:?}\n"));
    }
    yaml
}

#[track_caller]
fn refused(out: Kubectl, expected: &str) -> Kubectl {
    assert!(!out.success, "expected a refusal, kubectl {} succeeded:\n{}", out.args.join(" "), out.describe());
    assert!(out.stderr.contains(expected), "refused, but not with {expected:?}:\n{}", out.describe());
    out
}

/// docs/behaviour.md §5, §6.4 CREATE: a "snapshot" whose labels are right but whose content does not hash to
/// its name is refused; an honest copy of a real snapshot (a backup restore) is accepted.
#[test]
fn a_forged_snapshot_is_refused_and_an_honest_copy_is_accepted() {
    let Some((ns, pinned)) = released("forged") else { return };
    let hash = ns.get_json("configmap", &pinned).unwrap()["metadata"]["labels"][HASH_LABEL].as_str().unwrap().to_owned();
    let elsewhere = TestNamespace::new(ns.cluster, "restore");

    let out = elsewhere.rejects(&claimed_snapshot(&pinned, &hash, &[(KEY_A, "/etc/forged-rules")]), "is not a valid snapshot");
    assert!(out.stderr.contains(&pinned), "the refusal names the ConfigMap:\n{}", out.describe());
    assert!(elsewhere.get_json("configmap", &pinned).is_none());
    // Mutable, with the label: not a snapshot either.
    let mutable = claimed_snapshot(&pinned, &hash, &[(KEY_A, "/etc/rules")]).replace("immutable: true\n", "");
    elsewhere.rejects(&mutable, "is not a valid snapshot");

    elsewhere.accepts(&claimed_snapshot(&pinned, &hash, &[(KEY_A, "/etc/rules")]));
    assert_eq!(elsewhere.snapshots(), [pinned]);
}

/// docs/behaviour.md §6.4 CREATE, §9a: a tenant who may create ConfigMaps cannot plant history: a valid
/// snapshot carrying an adoption record (which a later undo to a pre-install revision would trust),
/// a finalizer or an owner of their choosing, or a source name its name does not agree with, is
/// refused on the real API server; the same snapshot without them is accepted.
#[test]
fn a_tenant_cannot_plant_history_in_a_snapshot() {
    let Some((ns, pinned)) = released("plant") else { return };
    let hash = ns.get_json("configmap", &pinned).unwrap()["metadata"]["labels"][HASH_LABEL].as_str().unwrap().to_owned();
    let elsewhere = TestNamespace::new(ns.cluster, "planted");
    let honest = claimed_snapshot(&pinned, &hash, &[(KEY_A, "/etc/rules")]);
    let annotations = format!("  annotations:\n    {SOURCE_NAME}: {SOURCE}\n");
    for (extra, refusal) in [
        (format!("{annotations}    confighistory.io/adopted-templates: 0123456789abcdef\n"), "adoption records"),
        (format!("{annotations}  finalizers: [example.com/hold]\n"), "finalizers"),
        (format!("  annotations:\n    {SOURCE_NAME}: other-config\n"), "source"),
    ] {
        elsewhere.rejects(&honest.replace(&annotations, &extra), refusal);
    }
    assert!(elsewhere.snapshots().is_empty());
    elsewhere.accepts(&honest);
    assert_eq!(elsewhere.snapshots(), [pinned]);
}

/// docs/behaviour.md §6.4 UPDATE: nobody but confighistory may change a snapshot's labels (not even remove the
/// hash label that makes it one), annotations, ownerReferences or finalizers; confighistory's own
/// identity (its ServiceAccount) may.
#[test]
fn a_snapshots_metadata_is_frozen_for_everyone_but_confighistory() {
    let Some((ns, pinned)) = released("frozen") else { return };
    let target = format!("configmap/{pinned}");
    let source_uid = ns.get_json("configmap", SOURCE).unwrap()["metadata"]["uid"].as_str().unwrap().to_owned();
    let owner = format!(
        r#"{{"metadata":{{"ownerReferences":[{{"apiVersion":"v1","kind":"ConfigMap","name":"{SOURCE}","uid":"{source_uid}"}}]}}}}"#
    );
    for (args, field) in [
        (vec!["label", &target, "team=pricing"], "labels"),
        (vec!["label", &target, &format!("{HASH_LABEL}-")], "labels"),
        (vec!["label", &target, "--overwrite", &format!("{SOURCE_LABEL}=other")], "labels"),
        (vec!["annotate", &target, "note=mine"], "annotations"),
        (vec!["patch", &target, "--type=merge", "-p", &owner], "ownerReferences"),
        (vec!["patch", &target, "--type=merge", "-p", r#"{"metadata":{"finalizers":["example.com/keep"]}}"#], "finalizers"),
    ] {
        let out = refused(ns.kubectl(&args), "is a confighistory snapshot");
        assert!(out.stderr.contains(field), "{args:?}: the refusal names {field}:\n{}", out.describe());
    }
    let snapshot = ns.get_json("configmap", &pinned).unwrap();
    assert_eq!(snapshot["metadata"]["ownerReferences"], serde_json::Value::Null);
    assert_eq!(snapshot["metadata"]["finalizers"], serde_json::Value::Null);
    assert_eq!(snapshot["metadata"]["labels"].as_object().unwrap().len(), 3, "{snapshot:#}");

    let server = webhook(ns.cluster);
    let own = server.kubectl(&["label", &target, "-n", &ns.name, "e2e.confighistory.io/touched=by-confighistory"]);
    assert!(own.success, "confighistory's own identity may:\n{}", own.describe());
}

/// docs/behaviour.md §6.4 DELETE, §11.8: deleting a snapshot that rollout history references is denied with a
/// message saying why; deleting the whole namespace still works.
#[test]
fn a_referenced_snapshot_is_not_deleted_but_its_namespace_is() {
    let Some((ns, pinned)) = released("delete") else { return };
    // The decision reads the server's watch cache: first let it see the Deployment (a dry run
    // asks the same question and deletes nothing).
    wait_for("the server to know the snapshot's users", Duration::from_secs(20), || {
        let dry = ns.kubectl(&["delete", "configmap", &pinned, "--dry-run=server"]);
        !dry.success && dry.stderr.contains("Deployment/pricing")
    });
    let out = refused(ns.kubectl(&["delete", "configmap", &pinned]), "is still part of rollout history");
    assert!(out.stderr.contains("Deployment/pricing"), "the refusal names the user:\n{}", out.describe());
    // The API server relays the refusal's reason: a sweep that lost a race to a pin tells it apart
    // from any other refusal by it (kubectl prints it in parentheses).
    assert!(out.stderr.contains("Error from server (SnapshotInUse)"), "the refusal's reason:\n{}", out.describe());
    assert!(ns.get_json("configmap", &pinned).is_some());

    ns.cluster.kubectl(&["delete", "namespace", &ns.name, "--wait=false"]).expect_success();
    wait_for(&format!("namespace {} to go away", ns.name), Duration::from_secs(120), || {
        let out = ns.cluster.kubectl(&["get", "namespace", &ns.name]);
        !out.success && out.stderr.contains("NotFound")
    });
}

/// A DELETECOLLECTION reaches admission as one DELETE per item with an empty request
/// name and the item in oldObject; the in-use checks looked the snapshot up by that empty name
/// and let a referenced snapshot go. (`kubectl delete -l` deletes one by one by name; collection
/// deletes are what operators and API clients send.) Each item is judged by its own name.
#[test]
fn a_collection_delete_leaves_a_referenced_snapshot() {
    let Some((ns, pinned)) = released("deletecollection") else { return };
    wait_for("the server to know the snapshot's users", Duration::from_secs(20), || {
        let dry = ns.kubectl(&["delete", "configmap", &pinned, "--dry-run=server"]);
        !dry.success && dry.stderr.contains("Deployment/pricing")
    });
    let out = ns.kubectl(&["delete", "--raw", &format!("/api/v1/namespaces/{}/configmaps?labelSelector={HASH_LABEL}", ns.name)]);
    assert!(!out.success, "the collection delete removed a referenced snapshot:\n{}", out.describe());
    assert!(out.stderr.contains("is still part of rollout history") && out.stderr.contains(&pinned), "{}", out.describe());
    assert!(ns.get_json("configmap", &pinned).is_some(), "the referenced snapshot survives");
    // kubectl's own bulk delete (one DELETE by name per item) too.
    refused(ns.kubectl(&["delete", "configmap", "--all"]), "is still part of rollout history");
    assert!(ns.get_json("configmap", &pinned).is_some());
}

/// docs/behaviour.md §5 collisions: a mutable ConfigMap created in advance under the exact name the new
/// content's snapshot would get is never overwritten or reused; the release lands on `<name>-1`,
/// with a warning, and every later pin of that content finds the same name.
#[test]
fn a_squatted_snapshot_name_is_never_reused_and_the_release_takes_the_next_one() {
    let Some((scratch, name)) = released("squat-scratch") else { return };
    // Same content, same name in any namespace, computed the way the product does.
    let content = Content { data: BTreeMap::from([(KEY_A.to_owned(), "/etc/rules".to_owned())]), ..Content::default() };
    assert_eq!(name, snapshot::name(SOURCE, &content.hash(), 0));
    drop(scratch);

    let ns = TestNamespace::new(cluster().unwrap(), "squat");
    ns.accepts(&configmap(&name, &[("squatter", "yes")]));
    ns.accepts(&pricing_config(KEY_A));
    let out = ns.accepts(&pricing(IMAGE_A));
    let next = format!("{name}-1");
    assert_eq!(ns.current_template("deployment", "pricing").snapshots[SOURCE], next, "{}", out.describe());
    assert!(
        out.warnings().iter().any(|w| w.contains(&format!("{name} is taken by a ConfigMap that is not this snapshot"))),
        "the collision is reported:\n{}",
        out.describe()
    );
    let squatter = ns.get_json("configmap", &name).unwrap();
    assert_eq!(ns.configmap_data(&name).unwrap(), BTreeMap::from([("squatter".to_owned(), "yes".to_owned())]), "never overwritten");
    assert!(squatter["metadata"]["labels"].is_null() && squatter["immutable"].is_null(), "never taken over: {squatter:#}");
    let snapshot = ns.get_json("configmap", &next).unwrap();
    assert_eq!(snapshot["immutable"], true);
    assert_eq!(snapshot["metadata"]["labels"][HASH_LABEL], content.hash());
    assert_eq!(ns.configmap_data(&next).unwrap(), content.data);
    // The source says so too, for whoever owns the namespace (recorded after the answer).
    let event = crate::support::wait_for_value("the SnapshotCollision Event", Duration::from_secs(20), || {
        let events = ns.kubectl(&["get", "events", "-o", "json"]).expect_success().json();
        events["items"]
            .as_array()?
            .iter()
            .find(|e| {
                e["reason"] == "SnapshotCollision" && e["involvedObject"]["name"] == SOURCE && e["involvedObject"]["kind"] == "ConfigMap"
            })
            .cloned()
    });
    let note = event["message"].as_str().unwrap_or_default();
    assert!(note.contains(&name) && note.contains(&format!("the snapshot is {next}")), "{event:#}");
    assert_eq!(event["type"], "Warning");

    // Another workload using the same content finds the same snapshot.
    ns.accepts(&workload("statefulset", "pricing-worker", IMAGE_A, SOURCE));
    assert_eq!(ns.current_template("statefulset", "pricing-worker").snapshots[SOURCE], next);
    assert_eq!(ns.snapshots(), [next]);
}
