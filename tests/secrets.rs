//! Secrets through the Kubernetes port (docs/behaviour.md §4a), against `MemoryCluster`, with
//! Secrets still off (`model::source::ACTED_ON`): every source call of the port on a Secret, and a
//! canary Secret value that no error or `Debug` of the port shows.
use base64::Engine as _;
use serde_json::{json, Value};

use confighistory::cache::Watched;
use confighistory::cluster::{ApiError, Cluster, Created, MemoryCluster, LAST_APPLIED};
use confighistory::model::digest::{digest, Sha256};
use confighistory::model::names;
use confighistory::model::source::{SourceId, SourceKind, ACTED_ON};

const CANARY: &str = "canary-s3cr3t-value";

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The canary and its forms that must never be shown: itself, its base64 (padded, and an
/// unpadded prefix, as it shows inside a longer value), its SHA-256 in hex.
fn canary_forms() -> Vec<(&'static str, String)> {
    let b = b64(CANARY.as_bytes());
    let hex: String = digest::<Sha256>(CANARY.as_bytes()).iter().map(|b| format!("{b:02x}")).collect();
    vec![
        ("the canary", CANARY.to_owned()),
        ("its base64", b.clone()),
        ("its base64, unpadded prefix", b.trim_end_matches('=')[..24].to_owned()),
        ("its SHA-256 in hex", hex.clone()),
        ("its SHA-256 in upper-case hex", hex.to_uppercase()),
    ]
}

/// Fails naming what showed which form of the canary, never the text itself.
fn assert_no_canary(shown: &[(String, String)]) {
    let forms = canary_forms();
    for (what, text) in shown {
        for (form, value) in &forms {
            assert!(!text.contains(value.as_str()), "{what} shows {form}");
        }
    }
}

fn secret(ns: &str, name: &str, value: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": ns, "uid": format!("uid-{name}")},
        "type": "Opaque",
        "data": {"password": b64(value.as_bytes())},
    })
}

fn calls(cluster: &MemoryCluster) -> Vec<String> {
    std::mem::take(&mut *cluster.calls.lock().unwrap())
}

#[tokio::test]
async fn secrets_are_acted_on_nowhere_yet() {
    assert!(!ACTED_ON.contains(SourceKind::Secret));
}

/// Each source call of the port on a Secret, a ConfigMap of the same name beside it untouched.
#[tokio::test]
async fn a_secret_goes_through_every_source_call_of_the_port() {
    let cluster = MemoryCluster::default();
    let c: &dyn Cluster = &cluster;
    let (db, db_cm) = (SourceId::new(SourceKind::Secret, "db"), SourceId::configmap("db"));
    cluster.insert(json!({"kind": "ConfigMap", "metadata": {"name": "db", "namespace": "shop"}, "data": {"a": "1"}}));
    let configmap = cluster.get("shop", "db").unwrap();

    assert!(c.get_source("shop", &db).await.unwrap().is_none());
    assert!(matches!(c.create_source("shop", SourceKind::Secret, &secret("shop", "db", "v1"), true).await.unwrap(), Created::Created));
    assert!(c.get_source("shop", &db).await.unwrap().is_none(), "a dry run writes nothing");
    assert!(matches!(c.create_source("shop", SourceKind::Secret, &secret("shop", "db", "v1"), false).await.unwrap(), Created::Created));
    assert!(matches!(
        c.create_source("shop", SourceKind::Secret, &secret("shop", "db", "v2"), false).await.unwrap(),
        Created::AlreadyExists
    ));
    let got = c.get_source("shop", &db).await.unwrap().unwrap();
    assert_eq!(got["data"]["password"], b64(b"v1"), "the first create stands");
    assert_eq!(got["metadata"]["resourceVersion"], "1", "a created object has a resourceVersion");

    // Patches: metadata, and data with the resourceVersion as a precondition.
    c.patch_source("shop", &db, &json!({"metadata": {"labels": {"a": "b"}}})).await.unwrap();
    let stale = c.patch_source("shop", &db, &json!({"metadata": {"resourceVersion": "1"}, "data": {"password": b64(b"v3")}})).await;
    assert!(stale.unwrap_err().is_conflict());
    c.patch_source("shop", &db, &json!({"metadata": {"resourceVersion": "2"}, "data": {"password": b64(b"v3")}})).await.unwrap();
    let got = cluster.source("shop", &db).unwrap();
    assert_eq!((&got["data"]["password"], &got["metadata"]["labels"]["a"]), (&json!(b64(b"v3")), &json!("b")));
    let missing = c.patch_source("shop", &SourceId::new(SourceKind::Secret, "none"), &json!({})).await.unwrap_err();
    assert_eq!((missing.code, missing.message.as_str()), (Some(404), "secrets \"none\" not found"));

    // Lists: whole, metadata only, snapshots.
    let mut snap = secret("shop", "db-abc", "v1");
    snap["metadata"]["labels"] = json!({names::HASH_LABEL: "abc"});
    snap["metadata"]["annotations"] = json!({LAST_APPLIED: "{}", "keep": "me"});
    cluster.insert(snap);
    let listed = c.list("shop", Watched::Sources(SourceKind::Secret)).await.unwrap();
    assert_eq!(listed.iter().map(|o| o["metadata"]["name"].as_str().unwrap()).collect::<Vec<_>>(), ["db", "db-abc"]);
    assert_eq!(c.list("shop", Watched::Sources(SourceKind::ConfigMap)).await.unwrap(), vec![configmap.clone()]);
    let meta = c.list_source_metadata("shop", SourceKind::Secret).await.unwrap();
    assert_eq!(meta.len(), 2);
    assert!(meta.iter().all(|m| m.get("data").is_none() && m["kind"] == "PartialObjectMetadata"));
    assert_eq!(meta[1]["metadata"]["annotations"], json!({"keep": "me"}), "no last-applied annotation");
    assert_eq!(c.list_source_metadata("shop", SourceKind::ConfigMap).await.unwrap().len(), 1);
    let mut snapshots = Vec::new();
    c.list_snapshots("shop", SourceKind::Secret, &mut |o: &Value| snapshots.push(o["metadata"]["name"].clone())).await.unwrap();
    assert_eq!(snapshots, [json!("db-abc")]);
    let mut none = 0;
    c.list_snapshots("shop", SourceKind::ConfigMap, &mut |_: &Value| none += 1).await.unwrap();
    assert_eq!(none, 0);

    // Delete, with uid and resourceVersion preconditions.
    assert!(c.delete_source("shop", &db, "uid-db", "1").await.unwrap_err().is_conflict());
    assert!(c.delete_source("shop", &db, "other", "3").await.unwrap_err().is_conflict());
    c.delete_source("shop", &db, "uid-db", "3").await.unwrap();
    assert!(c.get_source("shop", &db).await.unwrap().is_none());
    assert_eq!(c.delete_source("shop", &db, "uid-db", "3").await.unwrap_err().code, Some(404));

    assert_eq!(c.get_source("shop", &db_cm).await.unwrap(), Some(configmap), "the ConfigMap db is another object");
    let described = calls(&cluster);
    assert!(described.contains(&"create shop/secret/db".to_owned()) && described.contains(&"list Secret snapshots shop".to_owned()));
    assert!(described.contains(&"list snapshots shop".to_owned()), "ConfigMaps' calls are described as before");
}

/// The canary in a Secret (its data, and kubectl's last-applied annotation) through every call of
/// the port and the errors of `MemoryCluster`: no error, `Debug`, call
/// description or metadata list shows it.
#[tokio::test]
async fn no_error_or_debug_of_the_port_shows_a_secrets_value() {
    let cluster = MemoryCluster::default();
    let c: &dyn Cluster = &cluster;
    let id = SourceId::new(SourceKind::Secret, "db");
    let mut obj = secret("shop", "db", CANARY);
    obj["metadata"]["annotations"] = json!({LAST_APPLIED: json!({"data": {"password": b64(CANARY.as_bytes())}}).to_string()});
    obj["metadata"]["labels"] = json!({names::HASH_LABEL: "x"});
    let mut shown: Vec<(String, String)> = Vec::new();
    let mut show_err = |what: &str, e: ApiError| shown.push((what.to_owned(), format!("{e} {e:?}")));

    assert!(matches!(c.create_source("shop", SourceKind::Secret, &obj, false).await.unwrap(), Created::Created));
    assert!(matches!(c.create_source("shop", SourceKind::Secret, &obj, false).await.unwrap(), Created::AlreadyExists));
    let canary_patch = json!({"metadata": {"resourceVersion": "99"}, "data": {"password": b64(CANARY.as_bytes())}});
    show_err("a stale patch", c.patch_source("shop", &id, &canary_patch).await.unwrap_err());
    show_err("a patch of a missing Secret", c.patch_source("shop", &id.with_name("gone"), &canary_patch).await.unwrap_err());
    show_err("a delete with another uid", c.delete_source("shop", &id, "other", "1").await.unwrap_err());
    show_err("a delete with another resourceVersion", c.delete_source("shop", &id, "uid-db", "2").await.unwrap_err());
    show_err("a delete of a missing Secret", c.delete_source("shop", &id.with_name("gone"), "u", "1").await.unwrap_err());
    let meta = c.list_source_metadata("shop", SourceKind::Secret).await.unwrap();
    let mut shown_meta = vec![("the metadata list".to_owned(), serde_json::to_string(&meta).unwrap())];
    shown_meta.push(("the calls".to_owned(), calls(&cluster).join("\n")));

    shown.extend(shown_meta);
    assert!(shown.len() >= 7);
    assert_no_canary(&shown);
    // What was sent is held as sent: the test would see the canary where it is.
    let held = serde_json::to_string(&cluster.source("shop", &id).unwrap()).unwrap();
    assert!(held.contains(&b64(CANARY.as_bytes())) && held.contains(LAST_APPLIED));
}
