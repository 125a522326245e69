//! Secrets through the Kubernetes port and the cluster keys' lifecycle (docs/behaviour.md §4a),
//! against `MemoryCluster`, with Secrets off (`Policy::acted_on`): every source call
//! of the port on a Secret, the keys Secret made once however many replicas start together, never
//! overwritten, refused when malformed, rotated keeping old keys; and a canary Secret value that
//! no error or `Debug` of the port and the keys shows.

use base64::Engine as _;
use serde_json::{json, Value};

use confighistory::cache::Watched;
use confighistory::cluster::{ApiError, Cluster, Created, MemoryCluster};
use confighistory::model::digest::{digest, Sha256};
use confighistory::model::ids::{SourceId, SourceKind};
use confighistory::model::keys::{ClusterKey, KeyId, KeySlot, Keyring, MIN_KEY_BYTES};
use confighistory::model::names;
use confighistory::model::secret::{self, SecretContent};
use confighistory::model::trim::LAST_APPLIED;
use confighistory::store::keys::{self, Error, Target};

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
async fn secrets_are_off_unless_the_admin_turns_them_on() {
    let policy = confighistory::model::policy::Policy::default();
    assert!(!policy.acted_on().contains(SourceKind::Secret));
    assert!(!policy.source_kinds::<serde_json::Value>(None).contains(SourceKind::Secret));
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

fn target() -> Target {
    Target { namespace: "confighistory".into(), secret: "confighistory-keys".into() }
}

/// The keys Secret is `--keys-secret` (default `confighistory-keys`) in `--namespace`.
#[test]
fn the_keys_secret_is_named_by_its_flag_in_the_servers_namespace() {
    use clap::Parser as _;
    #[derive(clap::Parser)]
    struct Args {
        #[command(flatten)]
        policy: confighistory::cli::PolicyArgs,
    }
    let parse = |args: &[&str]| Target::from_args(&Args::parse_from(std::iter::once("test").chain(args.iter().copied())).policy);
    assert_eq!(parse(&[]), target());
    assert_eq!(parse(&["--namespace=ops", "--keys-secret=ch-keys"]), Target { namespace: "ops".into(), secret: "ch-keys".into() });
}

fn keys_id() -> SourceId {
    SourceId::new(SourceKind::Secret, "confighistory-keys")
}

/// Two keyrings hold the same keys (compared without printing them).
fn same_keys(a: &Keyring, b: &Keyring) -> bool {
    a.to_data() == b.to_data()
}

#[tokio::test]
async fn the_key_is_made_once_when_missing_and_read_after() {
    let cluster = MemoryCluster::default();
    let ring = keys::ensure(&cluster, &target()).await.unwrap();
    assert_eq!((ring.current().id(), ring.ids().count()), (KeyId(1), 1));
    assert_eq!(calls(&cluster), ["get confighistory/secret/confighistory-keys", "create confighistory/secret/confighistory-keys"]);
    let stored = cluster.source("confighistory", &keys_id()).unwrap();
    assert_eq!(
        (&stored["type"], &stored["metadata"]["labels"]["app.kubernetes.io/managed-by"]),
        (&json!("Opaque"), &json!("confighistory"))
    );
    let key = base64::engine::general_purpose::STANDARD.decode(stored["data"]["key-1"].as_str().unwrap()).unwrap();
    assert_eq!(key.len(), MIN_KEY_BYTES);
    assert!(key.iter().any(|b| *b != 0), "random bytes");
    let again = keys::ensure(&cluster, &target()).await.unwrap();
    assert!(same_keys(&ring, &again));
    assert_eq!(calls(&cluster), ["get confighistory/secret/confighistory-keys"], "read, not made again");
    // Another cluster (or a new Secret) gets another key.
    let other = keys::ensure(&MemoryCluster::default(), &target()).await.unwrap();
    assert!(!same_keys(&ring, &other));
}

/// Two replicas starting together: both read no Secret, both create; the second create finds the
/// first's, and that replica reads it: one key for both.
#[tokio::test]
async fn two_replicas_starting_together_converge_on_one_key() {
    let cluster = MemoryCluster::default();
    let (reached, resume) = cluster.pause("create confighistory/secret/confighistory-keys", false);
    let first = {
        let cluster = cluster.clone();
        tokio::spawn(async move { keys::ensure(&cluster, &target()).await })
    };
    reached.await.unwrap(); // the first has read no Secret and is about to create it
    let second = keys::ensure(&cluster, &target()).await.unwrap();
    resume.send(()).unwrap();
    let first = first.await.unwrap().unwrap();
    assert!(same_keys(&first, &second), "one key");
    let stored = keys::read(&cluster.source("confighistory", &keys_id()).unwrap(), &target()).unwrap().0;
    assert!(same_keys(&stored, &first));
    let described = calls(&cluster);
    assert_eq!(described.iter().filter(|c| c.starts_with("create ")).count(), 2, "{described:?}");
    assert_eq!(described.iter().filter(|c| c.starts_with("get ")).count(), 3, "the loser read again: {described:?}");

    // And unpaused, many at once.
    let cluster = MemoryCluster::default();
    let t = target();
    let rings = futures::future::join_all((0..8).map(|_| keys::ensure(&cluster, &t))).await;
    let rings: Vec<Keyring> = rings.into_iter().map(Result::unwrap).collect();
    assert!(rings.iter().all(|r| same_keys(r, &rings[0])));
}

fn keys_secret(data: Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "confighistory-keys", "namespace": "confighistory", "resourceVersion": "7"},
        "type": "Opaque",
        "data": data,
    })
}

#[tokio::test]
async fn an_existing_key_is_never_overwritten() {
    let cluster = MemoryCluster::default();
    let ring = Keyring::new(ClusterKey::new(KeyId(4), vec![9; 40]).unwrap(), [ClusterKey::new(KeyId(2), vec![8; 32]).unwrap()]).unwrap();
    let existing = keys::object(&target(), &ring);
    cluster.insert(existing.clone());
    let read = keys::ensure(&cluster, &target()).await.unwrap();
    assert!(same_keys(&read, &ring));
    assert_eq!(read.current().id(), KeyId(4));
    assert_eq!(cluster.source("confighistory", &keys_id()), Some(existing));
    assert_eq!(calls(&cluster), ["get confighistory/secret/confighistory-keys"]);
}

/// A keys Secret that does not read as a keyring: refused naming the Secret and what is wrong,
/// never a byte of it, and left as it is (no write).
#[tokio::test]
async fn a_malformed_keyring_is_refused_and_left_as_it_is() {
    let key = || b64(&[5; 32]);
    let cases = [
        ("no current entry", json!({"key-1": key()}), "no \"current\" entry"),
        ("no data", Value::Null, "no \"current\" entry"),
        ("data not a map", json!("x"), "its data is not a map"),
        ("a short key", json!({"current": b64(b"1"), "key-1": b64(CANARY.as_bytes())}), "key 1 is 19 bytes long"),
        (
            "the canary as current",
            json!({"current": b64(CANARY.as_bytes()), "key-1": key()}),
            "the current key's entry does not hold a key id",
        ),
        ("current names no key", json!({"current": b64(b"2"), "key-1": key()}), "the current key 2 is not among the keys"),
        ("not base64", json!({"current": b64(b"1"), "key-1": format!("{CANARY}!")}), "entry \"key-1\" is not base64"),
        ("not a string", json!({"current": b64(b"1"), "key-1": [1, 2]}), "entry \"key-1\" is not a string"),
        (
            "a stray entry",
            json!({"current": b64(b"1"), "key-1": key(), "password": b64(CANARY.as_bytes())}),
            "unexpected entry \"password\"",
        ),
    ];
    let mut shown = Vec::new();
    for (what, data, says) in cases {
        let cluster = MemoryCluster::default();
        let stored = keys_secret(data);
        cluster.insert(stored.clone());
        for (call, e) in [
            ("ensure", keys::ensure(&cluster, &target()).await.unwrap_err()),
            ("rotate", keys::rotate(&cluster, &target()).await.unwrap_err()),
        ] {
            let text = e.to_string();
            assert!(matches!(e, Error::Malformed { .. }), "{what}, {call}: {text}");
            assert!(text.contains("Secret confighistory/confighistory-keys is malformed") && text.contains(says), "{what}, {call}: {text}");
            assert!(text.contains("left as it is"), "{what}, {call}: {text}");
            shown.push((format!("{what}: {call}'s error"), format!("{e} {e:?}")));
        }
        assert_eq!(cluster.source("confighistory", &keys_id()), Some(stored), "{what}: left as it is");
        assert!(calls(&cluster).iter().all(|c| c.starts_with("get ")), "{what}: nothing written");
    }
    assert_no_canary(&shown);
}

/// A Secret snapshot made under key 1 in namespace `ns` (as the wiring will make them).
fn snapshot_under(ring: &Keyring, ns: &str) -> Value {
    let content = SecretContent::new("Opaque", [("password".to_owned(), b"hunter2".to_vec())].into());
    let key = ring.current().namespace_key(ns);
    let name = secret::snapshot_name("db", &content, &key, 0);
    secret::snapshot_object(ns, "db", &name, &content, &key, &[])
}

#[tokio::test]
async fn a_rotation_adds_a_current_key_and_keeps_the_old_ones() {
    let cluster = MemoryCluster::default();
    assert!(matches!(keys::rotate(&cluster, &target()).await.unwrap_err(), Error::Missing { .. }), "nothing to rotate");
    let first = keys::ensure(&cluster, &target()).await.unwrap();
    let snapshot = snapshot_under(&first, "shop");
    assert_eq!(snapshot["metadata"]["labels"][names::KEY_ID_LABEL], "1");
    assert!(secret::validate(&snapshot, "shop", &first).is_ok());

    let rotated = keys::rotate(&cluster, &target()).await.unwrap();
    assert_eq!(rotated.current().id(), KeyId(2));
    assert_eq!(rotated.ids().collect::<Vec<_>>(), [KeyId(1), KeyId(2)]);
    let stored = keys::read(&cluster.source("confighistory", &keys_id()).unwrap(), &target()).unwrap().0;
    assert!(same_keys(&stored, &rotated), "the Secret holds the rotated keyring");
    assert!(same_keys(&keys::ensure(&cluster, &target()).await.unwrap(), &rotated), "and a start reads it");
    // The snapshot MAC'd under key 1 is still valid; a new one is made under key 2.
    assert!(secret::validate(&snapshot, "shop", &stored).is_ok(), "{:?}", secret::validate(&snapshot, "shop", &stored));
    assert_eq!(snapshot_under(&stored, "shop")["metadata"]["labels"][names::KEY_ID_LABEL], "2");
    assert_ne!(snapshot_under(&stored, "shop")["metadata"]["name"], snapshot["metadata"]["name"]);
    assert!(secret::validate(&snapshot, "shop", &stored.without(KeyId(1))).is_err(), "only while key 1 is kept");

    let again = keys::rotate(&cluster, &target()).await.unwrap();
    assert_eq!(again.ids().collect::<Vec<_>>(), [KeyId(1), KeyId(2), KeyId(3)]);
    assert!(secret::validate(&snapshot, "shop", &again).is_ok());
}

/// Two rotations at once: the one whose write finds the Secret changed reads it again and rotates
/// from there, so neither key is lost. Conflicts without end stop after a bounded number of tries.
#[tokio::test]
async fn concurrent_rotations_lose_no_key_and_retries_are_bounded() {
    let cluster = MemoryCluster::default();
    let first = keys::ensure(&cluster, &target()).await.unwrap();
    let (reached, resume) = cluster.pause("patch confighistory/secret/confighistory-keys", false);
    let slow = {
        let cluster = cluster.clone();
        tokio::spawn(async move { keys::rotate(&cluster, &target()).await })
    };
    reached.await.unwrap(); // read the keys at resourceVersion 1, about to write key 2
    let fast = keys::rotate(&cluster, &target()).await.unwrap();
    assert_eq!(fast.current().id(), KeyId(2));
    resume.send(()).unwrap();
    let slow = slow.await.unwrap().unwrap();
    assert_eq!(slow.current().id(), KeyId(3), "read again after the conflict");
    assert_eq!(slow.ids().collect::<Vec<_>>(), [KeyId(1), KeyId(2), KeyId(3)]);
    let stored = keys::read(&cluster.source("confighistory", &keys_id()).unwrap(), &target()).unwrap().0;
    assert!(same_keys(&stored, &slow));
    let only = |ring: &Keyring, id: u32| Keyring::new(ring.get(KeyId(id)).unwrap().clone(), []).unwrap();
    assert!(same_keys(&only(&stored, 1), &first), "key 1 is the first one");
    assert!(same_keys(&only(&stored, 2), &only(&fast, 2)), "key 2 is the fast one's");

    let conflict = ApiError { code: Some(409), reason: "Conflict".into(), message: "the object has been modified".into() };
    *cluster.fail.lock().unwrap() = Some(("patch ", conflict));
    calls(&cluster);
    let e = keys::rotate(&cluster, &target()).await.unwrap_err();
    assert!(matches!(e, Error::Contended { attempts: keys::ROTATE_ATTEMPTS, .. }), "{e}");
    assert_eq!(calls(&cluster).iter().filter(|c| c.starts_with("patch ")).count(), keys::ROTATE_ATTEMPTS);
    let forbidden = ApiError { code: Some(403), reason: "Forbidden".into(), message: "secrets is forbidden".into() };
    *cluster.fail.lock().unwrap() = Some(("patch ", forbidden));
    let e = keys::rotate(&cluster, &target()).await.unwrap_err();
    assert_eq!(e.to_string(), "cluster keys: Secret confighistory/confighistory-keys: secrets is forbidden");
    assert_eq!(calls(&cluster).iter().filter(|c| c.starts_with("patch ")).count(), 1, "not retried");
}

/// The canary in a Secret (its data, and kubectl's last-applied annotation) through every call of
/// the port and the errors of `MemoryCluster` and of the keys: no error, `Debug`, call
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

    // The keys: a malformed keys Secret holding the canary, and a good one, through each call.
    let keys_cluster = MemoryCluster::default();
    keys_cluster.insert(keys_secret(json!({"current": b64(CANARY.as_bytes()), "key-1": b64(CANARY.as_bytes())})));
    for e in [keys::ensure(&keys_cluster, &target()).await.unwrap_err(), keys::rotate(&keys_cluster, &target()).await.unwrap_err()] {
        shown_meta.push(("a keys error".into(), format!("{e} {e:?}")));
    }
    let canary_key = ClusterKey::new(KeyId(1), format!("{CANARY}{CANARY}").into_bytes()).unwrap();
    let ring = Keyring::new(canary_key, []).unwrap();
    let keys_cluster = MemoryCluster::default();
    keys_cluster.insert(keys::object(&target(), &ring));
    let read = keys::ensure(&keys_cluster, &target()).await.unwrap();
    shown_meta.push(("the keyring read".into(), format!("{read:?}")));
    *keys_cluster.fail.lock().unwrap() =
        Some(("patch ", ApiError { code: Some(500), reason: "InternalError".into(), message: "etcd".into() }));
    let e = keys::rotate(&keys_cluster, &target()).await.unwrap_err();
    shown_meta.push(("a failed rotation".into(), format!("{e} {e:?}")));
    shown_meta.push(("the keys' calls".into(), calls(&keys_cluster).join("\n")));
    shown_meta.push(("the target".into(), format!("{:?}", target())));

    shown.extend(shown_meta);
    assert!(shown.len() >= 12);
    assert_no_canary(&shown);
    // What was sent is held as sent: the test would see the canary where it is.
    let held = serde_json::to_string(&cluster.source("shop", &id).unwrap()).unwrap();
    assert!(held.contains(&b64(CANARY.as_bytes())) && held.contains(LAST_APPLIED));
    let stored_key = keys_cluster.source("confighistory", &keys_id()).unwrap().to_string();
    assert!(stored_key.contains(&b64(format!("{CANARY}{CANARY}").as_bytes())[..24]));
}

/// A running server takes a rotation without a restart (docs/operations.md "Secrets' cluster
/// key"): reading the keys Secret again puts the rotated keyring in the slot every clone of the
/// policy shares; an unchanged Secret changes nothing; a Secret gone or malformed leaves the
/// keys held in use, and the error names the Secret, never a byte.
#[tokio::test]
async fn a_rotation_reaches_a_running_server_through_its_key_slot() {
    let cluster = MemoryCluster::default();
    let slot = KeySlot::new(keys::ensure(&cluster, &target()).await.unwrap());
    let held_by_a_clone = slot.clone();
    // The namespace key, derived (and kept) under the first key.
    let mac_in_shop = |slot: &KeySlot| {
        let key = slot.get().unwrap().current().namespace_key("shop");
        (key.id(), secret::snapshot_name("db", &SecretContent::new(secret::OPAQUE, Default::default()), &key, 0))
    };
    let before = mac_in_shop(&slot);
    assert_eq!(mac_in_shop(&slot), before);
    assert!(!keys::reload(&cluster, &target(), &slot).await.unwrap(), "unchanged");
    assert_eq!(mac_in_shop(&held_by_a_clone), before, "an unchanged Secret changes no key");
    keys::rotate(&cluster, &target()).await.unwrap();
    assert!(keys::reload(&cluster, &target(), &slot).await.unwrap(), "rotated");
    assert_eq!(held_by_a_clone.get().unwrap().current().id(), KeyId(2), "every holder of the slot");
    let after = mac_in_shop(&held_by_a_clone);
    assert!(after.0 == KeyId(2) && after.1 != before.1, "the namespace key is derived from the new key, not kept from the old");
    assert!(!keys::reload(&cluster, &target(), &slot).await.unwrap());

    cluster.insert(keys_secret(json!({"current": b64(b"9"), "key-1": b64(&[5; 32])})));
    let e = keys::reload(&cluster, &target(), &slot).await.unwrap_err().to_string();
    assert!(e.contains("confighistory/confighistory-keys"), "{e}");
    assert_eq!(slot.get().unwrap().current().id(), KeyId(2), "the keys held stay");
    let shown = [("the error".to_owned(), e), ("the slot".to_owned(), format!("{slot:?}"))];
    assert!(!shown[1].1.contains(&b64(&[5; 32])), "{}", shown[1].1);
}
