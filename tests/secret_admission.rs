//! Secrets as sources where the admin turns them on (docs/behaviour.md §4a), driven through the
//! very router the binary serves with real AdmissionReview JSON, against `MemoryCluster`: a
//! Secret's update keeps its outgoing content as a MAC-named immutable Secret, a Deployment
//! reading a Secret through a volume and env is pinned to its snapshot, never-sources pass
//! untouched, the admin's namespace selector decides where, snapshot protection covers Secret
//! snapshots, and with Secrets off nothing about Secrets changes. A canary run repeats the
//! scenarios at debug log level and finds no form of the canary value in anything written.

use std::sync::Arc;

use axum::http::StatusCode;
use base64::Engine as _;
use confighistory::cache::State;
use confighistory::cache::Writer as _;
use confighistory::cluster::{ApiError, MemoryCluster};
use confighistory::model::digest::{digest, Sha256};
use confighistory::model::ids::{SourceId, SourceKind};
use confighistory::model::keys::{ClusterKey, KeyId, KeySlot, Keyring};
use confighistory::model::kinds::Kind;
use confighistory::model::names;
use confighistory::model::policy::Policy;
use confighistory::model::secret::{self, SecretContent};
use confighistory::model::snapshot::{self, Content};
use serde_json::{json, Value};

mod common;
use common::{review, Answer, Logs, NS};

const CANARY: &str = "canary-s3cr3t-value";

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn keyring() -> Keyring {
    Keyring::new(ClusterKey::new(KeyId(1), (0u8..32).collect()).unwrap(), []).unwrap()
}

/// Secrets on for every namespace (`selector` empty) or the selected ones, with the keys loaded.
fn secrets_on(selector: &str) -> Policy {
    let mut p = Policy::default();
    p.secrets.enabled = true;
    p.secrets.namespaces = selector.parse().unwrap();
    p.secrets.keys = KeySlot::new(keyring());
    p
}

fn secret_of(name: &str, secret_type: &str, data: &[(&str, &str)]) -> Value {
    let data: serde_json::Map<String, Value> = data.iter().map(|(k, v)| (k.to_string(), json!(b64(v.as_bytes())))).collect();
    json!({"apiVersion": "v1", "kind": "Secret", "type": secret_type, "data": data,
           "metadata": {"name": name, "namespace": NS, "uid": format!("uid-{name}"), "resourceVersion": "7"}})
}

fn opaque(name: &str, value: &str) -> Value {
    secret_of(name, "Opaque", &[("password", value), ("url", "postgres://db:5432")])
}

/// The MAC of Secret `obj`'s content as its own (frame v2: its name bound) under key 1.
fn mac_of(obj: &Value) -> String {
    let name = obj["metadata"]["name"].as_str().unwrap();
    SecretContent::from_object(obj).unwrap().mac(&keyring().current().namespace_key(NS), name)
}

/// The same before frame v2 (no name bound): what heads and snapshots made before record.
fn v1_mac_of(obj: &Value) -> String {
    let name = obj["metadata"]["name"].as_str().unwrap();
    SecretContent::from_object(obj).unwrap().mac_in(&keyring().current().namespace_key(NS), name, secret::Frame::V1)
}

/// A Deployment reading Secret `s` through a volume and an env var, and ConfigMap `cm` through a volume.
fn deployment(image: &str, s: &str, cm: &str) -> Value {
    common::deployment(
        "pricing",
        json!({
            "volumes": [{"name": "creds", "secret": {"secretName": s}}, {"name": "config", "configMap": {"name": cm}}],
            "containers": [{"name": "app", "image": image,
                "env": [{"name": "DB_PASSWORD", "valueFrom": {"secretKeyRef": {"name": s, "key": "password"}}}]}]
        }),
    )
}

struct Fixture {
    state: Arc<confighistory::cache::Lock>,
    cluster: MemoryCluster,
    policy: Policy,
    /// The server that answered last: its after-answer work ([`Fixture::settle`]).
    last: std::sync::Mutex<Option<Arc<confighistory::webhook::App>>>,
}

impl Fixture {
    fn new(policy: Policy) -> Fixture {
        let mut state = State::default();
        state.set_source_kinds(policy.acted_on());
        Fixture {
            state: Arc::new(confighistory::cache::Lock::new(state)),
            cluster: MemoryCluster::default(),
            policy,
            last: Default::default(),
        }
    }

    /// A source (ConfigMap or Secret, by its kind) in the cluster and the caches.
    fn source(self, obj: Value) -> Fixture {
        self.cluster.insert(obj.clone());
        let kind = if obj["kind"] == "Secret" { SourceKind::Secret } else { SourceKind::ConfigMap };
        self.state.write().apply_source(kind, &obj);
        self
    }

    fn workload(self, obj: &Value) -> Fixture {
        self.state.write().apply_workload(Kind::Deployment, obj);
        self
    }

    fn namespace(self, labels: Value) -> Fixture {
        self.state.write().apply_namespace(&json!({"metadata": {"name": NS, "labels": labels}}));
        self
    }

    async fn send(&self, path: &str, review: Value) -> Answer {
        let app = common::app(&self.policy, &self.state, &self.cluster);
        *self.last.lock().unwrap() = Some(app.clone());
        common::send(&app, path, &review).await
    }

    /// Waits (bounded) until the last server's after-answer reads and writes are done.
    async fn settle(&self) {
        // What is spawned without being tracked (a ConfigMap's head, an Event) runs meanwhile.
        tokio::time::sleep(std::time::Duration::from_millis(30)).await;
        let app = self.last.lock().unwrap().clone();
        let Some(app) = app else { return };
        for _ in 0..200 {
            if app.secret_heads.idle() {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        panic!("the after-answer work did not finish within 4 s");
    }

    /// What the API server does with an admitted write: stores `obj` (an answer applied to the
    /// request's object) at a new resourceVersion, and the watch delivers it.
    fn store(&self, obj: &Value) -> Value {
        let mut obj = obj.clone();
        let id = SourceId::new(SourceKind::Secret, obj["metadata"]["name"].as_str().unwrap());
        let rv = self.cluster.source(NS, &id).and_then(|o| o["metadata"]["resourceVersion"].as_str()?.parse::<u64>().ok());
        obj["metadata"]["resourceVersion"] = json!(rv.map_or(1, |v| v + 1).to_string());
        self.cluster.insert(obj.clone());
        self.state.write().apply_source(SourceKind::Secret, &obj);
        obj
    }

    fn calls(&self) -> Vec<String> {
        std::mem::take(&mut *self.cluster.calls.lock().unwrap())
    }

    fn secret(&self, name: &str) -> Option<Value> {
        self.cluster.source(NS, &SourceId::new(SourceKind::Secret, name))
    }
}

fn configmap(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": NS, "uid": format!("uid-{name}")},
           "data": {"mode": "fast"}})
}

// ---------- scenarios, each returning what it wrote (for the canary run) ----------

/// What a scenario showed the outside: answers, as (what, text).
type Shown = Vec<(String, String)>;

/// A Secret update whose workloads still read it by name keeps the outgoing content as an
/// immutable Secret of the same type and data, named by its MAC under the namespace's key (from
/// the stored object); the answer carries no head (the stale one goes), and once the API server
/// stored the write, the head of the stored content is recorded after the answer; the warning
/// names keys only.
async fn secret_update_keeps_outgoing_content(value: &str) -> Shown {
    let mut old = opaque("db", value);
    old["metadata"]["annotations"] = json!({names::HEAD: mac_of(&old), names::KEY_ID: "1"});
    let f = Fixture::new(secrets_on("")).source(old.clone()).source(configmap("cfg")).workload(&deployment("app:1", "db", "cfg"));
    let mut new = opaque("db", "rotated-password");
    new["metadata"]["annotations"] = old["metadata"]["annotations"].clone();
    let a = f.send("/mutate", review("Secret", "", "v1", "UPDATE", Some(&new), Some(&old))).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    assert!(a.allowed(), "{}", a.body);
    assert_eq!(a.warnings(), ["secret/db: values changed in [password], same keys"]);
    let patched = a.patched(&new);
    let annotations = &patched["metadata"]["annotations"];
    assert!(annotations.get(names::HEAD).is_none() && annotations.get(names::KEY_ID).is_none(), "the stale head goes: {annotations}");
    assert!(annotations.get(names::CHANGED_AT).is_some(), "{annotations}");
    assert_eq!(annotations[names::CHANGED_BY], "alice", "who wrote it, from userInfo: {annotations}");
    assert_no_mac_of(&a, &new);
    let name = snapshot::name("db", &mac_of(&old), 0);
    assert!(!shown(&a).contains(&mac_of(&old)), "the answer does not name the outgoing content's snapshot");
    let snap = f.secret(&name).expect("the outgoing content is kept as a Secret snapshot");
    assert_eq!((&snap["type"], &snap["data"], &snap["immutable"]), (&old["type"], &old["data"], &json!(true)));
    assert_eq!(secret::validate(&snap, NS, &keyring()), Ok(mac_of(&old)));
    assert_eq!(
        snap["metadata"]["annotations"][names::ADOPTED],
        json!(confighistory::model::template::template_hash(&deployment("app:1", "db", "cfg")["spec"]["template"]))
    );
    assert_eq!(snap["metadata"]["annotations"][names::UNATTRIBUTED], "before confighistory", "no change of it was seen");
    assert!(f.cluster.get(NS, &name).is_none(), "no ConfigMap of that name");
    // The API server stores the write: its head is recorded from what it stored.
    f.store(&patched);
    let stored = head_recorded(&f, "db", &mac_of(&new)).await;
    assert_eq!(stored["metadata"]["annotations"][names::KEY_ID], "1");
    // A release pins the stored content: its snapshot names who wrote it.
    let made = f.send("/mutate", review("Deployment", "apps", "v1", "CREATE", Some(&deployment("app:2", "db", "cfg")), None)).await;
    assert!(made.allowed(), "{}", made.body);
    let snap_new = f.secret(&snapshot::name("db", &mac_of(&new), 0)).expect("the new content's snapshot");
    assert_eq!(snap_new["metadata"]["annotations"][names::CHANGED_BY], "alice");
    assert_eq!(snap_new["metadata"]["annotations"][names::CHANGED_AT], stored["metadata"]["annotations"][names::CHANGED_AT]);
    vec![("the Secret update's answer".into(), shown(&a)), ("the stored Secret's metadata".into(), stored["metadata"].to_string())]
}

/// Waits (bounded) until Secret `name` as stored records head `head`; the stored Secret.
async fn head_recorded(f: &Fixture, name: &str, head: &str) -> Value {
    for _ in 0..200 {
        let stored = f.secret(name).expect("stored");
        if stored["metadata"]["annotations"][names::HEAD] == json!(head) {
            f.settle().await;
            return stored;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("secret/{name}'s head was not recorded within 4 s: {}", f.secret(name).unwrap()["metadata"]);
}

/// No MAC of `obj`'s content under key 1, in either frame and as any Secret's of the namespace
/// the tests use, is in the answer.
fn assert_no_mac_of(a: &Answer, obj: &Value) {
    let content = SecretContent::from_object(obj).unwrap();
    let key = keyring().current().namespace_key(NS);
    let text = shown(a);
    for name in ["db", "guess", "other", obj["metadata"]["name"].as_str().unwrap()] {
        for frame in [secret::Frame::V1, secret::Frame::V2] {
            let mac = content.mac_in(&key, name, frame);
            assert!(!text.contains(&mac), "the answer holds the MAC of the request's content ({name}, {frame:?}): {text}");
        }
    }
}

/// An answer as its caller sees it: the review, and its patch decoded (base64 in the review).
fn shown(a: &Answer) -> String {
    format!("{}\n{}", a.text, serde_json::to_string(&a.patch()).unwrap_or_default())
}

/// A Deployment reading a Secret through a volume and env is pinned to the Secret's snapshot
/// (made from the stored Secret, MAC-named), its ConfigMap as always; the pins name `secret/db`.
async fn deployment_is_pinned_to_secret_snapshots(value: &str) -> Shown {
    let s = opaque("db", value);
    let f = Fixture::new(secrets_on("")).source(s.clone()).source(configmap("cfg"));
    let d = deployment("app:1", "db", "cfg");
    let a = f.send("/mutate", review("Deployment", "apps", "v1", "CREATE", Some(&d), None)).await;
    assert!(a.allowed(), "{}", a.body);
    let out = a.patched(&d);
    let name = snapshot::name("db", &mac_of(&s), 0);
    let spec = &out["spec"]["template"]["spec"];
    assert_eq!(spec["volumes"][0]["secret"]["secretName"], json!(name));
    assert_eq!(spec["containers"][0]["env"][0]["valueFrom"]["secretKeyRef"]["name"], json!(name));
    let cm_snap = snapshot::name("cfg", &Content::from_object(&configmap("cfg")).hash(), 0);
    assert_eq!(spec["volumes"][1]["configMap"]["name"], json!(cm_snap));
    let pins: Value = serde_json::from_str(out["metadata"]["annotations"][names::PINS].as_str().unwrap()).unwrap();
    assert_eq!(pins, json!({"cfg": Content::from_object(&configmap("cfg")).hash(), "secret/db": mac_of(&s)}));
    let snap = f.secret(&name).expect("the Secret snapshot is made");
    assert_eq!((&snap["type"], &snap["data"]), (&s["type"], &s["data"]));
    assert_eq!(secret::validate(&snap, NS, &keyring()), Ok(mac_of(&s)));
    // A second apply of the same manifest keeps the pins (no new snapshot, no read).
    let again = f.send("/mutate", review("Deployment", "apps", "v1", "UPDATE", Some(&d), Some(&out))).await;
    assert_eq!(again.patched(&d)["spec"]["template"]["spec"]["volumes"][0]["secret"]["secretName"], json!(name));
    // Validation of the pinned Deployment passes: it names a valid snapshot.
    let v = f.send("/validate", review("Deployment", "apps", "v1", "CREATE", Some(&out), None)).await;
    assert!(v.allowed(), "{}", v.body);
    vec![("the Deployment's answer".into(), shown(&a)), ("its re-apply".into(), shown(&again)), ("its validation".into(), shown(&v))]
}

/// Propagation for Secrets (docs/behaviour.md §4a with §7): confighistory's trigger naming
/// `secret/db` and its new head moves the Deployment's volume and env from the old Secret
/// snapshot to the head's (made from the stored Secret), and the trigger is consumed; from anyone
/// else the same trigger moves nothing.
async fn a_trigger_moves_a_secret_pin_to_the_head(value: &str) -> Shown {
    let old = opaque("db", value);
    let f = Fixture::new(secrets_on("")).source(old.clone()).source(configmap("cfg"));
    let d = deployment("app:1", "db", "cfg");
    let pinned = f.send("/mutate", review("Deployment", "apps", "v1", "CREATE", Some(&d), None)).await.patched(&d);
    // The Secret edited since (through the webhook, which recorded the new head).
    let mut new = opaque("db", "rotated-password");
    new["metadata"]["resourceVersion"] = json!("8");
    new["metadata"]["annotations"] = json!({names::HEAD: mac_of(&new)});
    let f = f.source(new.clone()).workload(&pinned);
    let mut triggered = pinned.clone();
    triggered["metadata"]["annotations"][names::PROPAGATE] = json!(format!("secret/db={}", mac_of(&new)));
    let mut as_confighistory = review("Deployment", "apps", "v1", "UPDATE", Some(&triggered), Some(&pinned));
    as_confighistory["request"]["userInfo"]["username"] = json!(f.policy.identity);
    let a = f.send("/mutate", as_confighistory).await;
    assert!(a.allowed(), "{}", a.body);
    let out = a.patched(&triggered);
    let head_snapshot = snapshot::name("db", &mac_of(&new), 0);
    let spec = &out["spec"]["template"]["spec"];
    assert_eq!(spec["volumes"][0]["secret"]["secretName"], json!(head_snapshot));
    assert_eq!(spec["containers"][0]["env"][0]["valueFrom"]["secretKeyRef"]["name"], json!(head_snapshot));
    assert_eq!(spec["volumes"][1], pinned["spec"]["template"]["spec"]["volumes"][1], "the ConfigMap pin stays");
    assert!(out["metadata"]["annotations"].get(names::PROPAGATE).is_none(), "the trigger is consumed");
    let snap = f.secret(&head_snapshot).expect("the head's snapshot is made");
    assert_eq!(secret::validate(&snap, NS, &keyring()), Ok(mac_of(&new)));
    // The same trigger from a user moves nothing.
    let b = f.send("/mutate", review("Deployment", "apps", "v1", "UPDATE", Some(&triggered), Some(&pinned))).await;
    let by_user = b.patched(&triggered);
    assert_eq!(by_user["spec"]["template"]["spec"]["volumes"][0], pinned["spec"]["template"]["spec"]["volumes"][0], "{}", b.body);
    vec![("the triggered update's answer".into(), shown(&a)), ("a user's trigger's answer".into(), shown(&b))]
}

/// Snapshot protection covers Secret snapshots: a tenant's CREATE of one is refused whether its
/// MAC matches its content or not (the answer never depends on a MAC of the request's content:
/// a right guess of a value is refused as a wrong one), naming no content; confighistory's own is
/// allowed when its labels and name are a snapshot's; metadata edits are refused; deleting one a
/// workload uses is refused.
async fn secret_snapshots_are_protected(value: &str) -> Shown {
    let s = opaque("db", value);
    let f = Fixture::new(secrets_on("")).source(s.clone());
    let key = keyring().current().namespace_key(NS);
    let content = SecretContent::from_object(&s).unwrap();
    let name = secret::snapshot_name("db", &content, &key, 0);
    let snap = secret::snapshot_object(NS, "db", &name, &content, &key, &[]);
    let mut forged = snap.clone();
    forged["data"]["password"] = json!(b64(b"planted"));
    let a = f.send("/protect", review("Secret", "", "v1", "CREATE", Some(&forged), None)).await;
    assert!(!a.allowed(), "{}", a.body);
    assert!(a.message().contains("only confighistory (or an identity the admin allows) creates Secret snapshots"), "{}", a.message());
    let right = f.send("/protect", review("Secret", "", "v1", "CREATE", Some(&snap), None)).await;
    assert_eq!((right.response(), right.warnings()), (a.response(), a.warnings()), "a right guess is answered as a wrong one");
    let mut own = review("Secret", "", "v1", "CREATE", Some(&snap), None);
    own["request"]["userInfo"]["username"] = json!(f.policy.identity);
    let ok = f.send("/protect", own).await;
    assert!(ok.allowed(), "{}", ok.body);
    let mut unlabelled = snap.clone();
    unlabelled["metadata"]["labels"].as_object_mut().unwrap().remove(names::KEY_ID_LABEL);
    let mut own = review("Secret", "", "v1", "CREATE", Some(&unlabelled), None);
    own["request"]["userInfo"]["username"] = json!(f.policy.identity);
    let bad = f.send("/protect", own).await;
    assert!(!bad.allowed() && bad.message().contains("is not a valid snapshot"), "{}", bad.body);
    let mut relabelled = snap.clone();
    relabelled["metadata"]["labels"]["extra"] = json!("x");
    let edit = f.send("/protect", review("Secret", "", "v1", "UPDATE", Some(&relabelled), Some(&snap))).await;
    assert!(!edit.allowed() && edit.message().contains("Secret") && edit.message().contains("labels"), "{}", edit.body);
    let f = f.source(snap.clone()).workload(&deployment("app:1", &name, "cfg"));
    let del = f.send("/protect", review("Secret", "", "v1", "DELETE", None, Some(&snap))).await;
    assert!(!del.allowed() && del.message().contains("Deployment/pricing use it"), "{}", del.body);
    vec![
        ("the forged snapshot's denial".into(), shown(&a)),
        ("the unlabelled snapshot's denial".into(), shown(&bad)),
        ("the edit's denial".into(), shown(&edit)),
        ("the delete's denial".into(), shown(&del)),
    ]
}

/// In enforce mode, a mutable Secret created after a workload named it is refused, naming no value.
async fn enforce_denies_a_mutable_secret(value: &str) -> Shown {
    let f = Fixture::new(secrets_on("")).namespace(json!({"confighistory.io/mode": "enforce"})).workload(&deployment("app:1", "db", "cfg"));
    let a = f.send("/mutate", review("Secret", "", "v1", "CREATE", Some(&opaque("db", value)), None)).await;
    assert!(!a.allowed(), "{}", a.body);
    assert!(a.message().contains("Secret db is mutable"), "{}", a.message());
    vec![("the enforce denial".into(), shown(&a))]
}

/// A name of the collision sequence taken by another Secret: the next name, a warning and an
/// Event that say why without content.
async fn a_collision_moves_to_the_next_name(value: &str) -> Shown {
    let s = opaque("db", value);
    let first = snapshot::name("db", &mac_of(&s), 0);
    let mut squatter = opaque(&first, "squatting");
    squatter["metadata"]["labels"] = json!({names::HASH_LABEL: mac_of(&s), names::MANAGED_BY: names::MANAGER});
    let f = Fixture::new(secrets_on("")).source(s.clone()).source(configmap("cfg")).source(squatter);
    let d = deployment("app:1", "db", "cfg");
    let a = f.send("/mutate", review("Deployment", "apps", "v1", "CREATE", Some(&d), None)).await;
    assert!(a.allowed(), "{}", a.body);
    let second = snapshot::name("db", &mac_of(&s), 1);
    assert_eq!(a.patched(&d)["spec"]["template"]["spec"]["volumes"][0]["secret"]["secretName"], json!(second));
    assert!(
        a.warnings().iter().any(|w| w.contains(&format!("{first} is taken by a Secret")) && w.contains("using the next name")),
        "{:?}",
        a.warnings()
    );
    tokio::task::yield_now().await;
    let events: Vec<String> = f.cluster.events().iter().map(|e| e.note.clone()).collect();
    assert!(events.iter().any(|e| e.starts_with("Snapshot name taken by a Secret")), "{events:?}");
    vec![("the collision's answer".into(), shown(&a)), ("the collision's Events".into(), events.join("\n"))]
}

/// In enforce mode a Deployment reading a mutable Secret by name is refused, and the fix it gives
/// speaks of Secrets too.
async fn enforce_denies_a_workload_reading_a_mutable_secret(value: &str) -> Shown {
    let f = Fixture::new(secrets_on(""))
        .namespace(json!({"confighistory.io/mode": "enforce"}))
        .source(opaque("db", value))
        .source(configmap("cfg"));
    let d = deployment("app:1", "db", "cfg");
    let a = f.send("/validate", review("Deployment", "apps", "v1", "CREATE", Some(&d), None)).await;
    assert!(!a.allowed(), "{}", a.body);
    let m = a.message();
    assert!(m.contains("mutable Secret secret/db") && m.contains("immutable ConfigMap or Secret") && m.contains("annotate it"), "{m}");
    vec![("the workload's enforce denial".into(), shown(&a))]
}

/// A full quota for Secrets: the Deployment is refused, saying which quota, without content.
async fn a_full_quota_is_explained(value: &str) -> Shown {
    let f = Fixture::new(secrets_on("")).source(opaque("db", value)).source(configmap("cfg"));
    *f.cluster.fail.lock().unwrap() = Some((
        "create shop/secret/",
        ApiError { code: Some(403), reason: "Forbidden".into(), message: "exceeded quota: s, requested: count/secrets=1".into() },
    ));
    let a = f.send("/mutate", review("Deployment", "apps", "v1", "CREATE", Some(&deployment("app:1", "db", "cfg")), None)).await;
    assert!(!a.allowed(), "{}", a.body);
    assert!(a.message().contains("ResourceQuota for secrets"), "{}", a.message());
    vec![("the quota denial".into(), shown(&a))]
}

/// The head recorded after the answer (docs/behaviour.md §4a), its logs and errors: a write whose
/// head cannot be written is logged (the error names no value) and answered as any; the next
/// write records it, and confighistory's own patch of it is admitted as it is.
async fn the_head_is_recorded_after_the_answer(value: &str) -> Shown {
    let s = opaque("db", value);
    let f = Fixture::new(secrets_on("")).source(configmap("cfg")).workload(&deployment("app:1", "db", "cfg"));
    // Created after its workload named it; the head cannot be written.
    *f.cluster.fail.lock().unwrap() =
        Some(("patch shop/secret/db", ApiError { code: Some(500), reason: "InternalError".into(), message: "etcd timeout".into() }));
    let a = f.send("/mutate", review("Secret", "", "v1", "CREATE", Some(&s), None)).await;
    assert!(a.allowed(), "{}", a.body);
    let created = a.patched(&s);
    assert!(created["metadata"]["annotations"].get(names::HEAD).is_none(), "{}", a.body);
    assert_no_mac_of(&a, &s);
    let created = f.store(&created);
    f.settle().await;
    assert!(f.calls().iter().any(|c| c == "patch shop/secret/db"), "the head was tried");
    assert!(f.secret("db").unwrap()["metadata"]["annotations"].get(names::HEAD).is_none());
    *f.cluster.fail.lock().unwrap() = None;
    // Its next write (a label) records it.
    let mut labelled = created.clone();
    labelled["metadata"]["labels"] = json!({"team": "pricing"});
    let l = f.send("/mutate", review("Secret", "", "v1", "UPDATE", Some(&labelled), Some(&created))).await;
    assert!(l.allowed() && l.patched(&labelled)["metadata"]["annotations"].get(names::HEAD).is_none(), "{}", l.body);
    let before = f.store(&l.patched(&labelled));
    let stored = head_recorded(&f, "db", &mac_of(&s)).await;
    assert_eq!(stored["metadata"]["annotations"][names::KEY_ID], "1");
    f.calls();
    // That patch, admitted as confighistory's own: taken as it is, no change recorded.
    let mut own = review("Secret", "", "v1", "UPDATE", Some(&stored), Some(&before));
    own["request"]["userInfo"]["username"] = json!(f.policy.identity);
    let o = f.send("/mutate", own).await;
    assert!(o.allowed() && o.patch().is_empty(), "{}", o.body);
    f.settle().await;
    assert!(f.calls().iter().all(|c| !c.starts_with("patch")), "recorded already: nothing written");
    vec![
        ("the create's answer".into(), shown(&a)),
        ("the label's answer".into(), shown(&l)),
        ("the own patch's answer".into(), shown(&o)),
        ("the stored Secret's metadata".into(), stored["metadata"].to_string()),
    ]
}

/// A review forged to the port (nothing checks a caller there without mTLS): the victim's Secret
/// `db`, read by a pinned Deployment, written with content the forger chose (a guess of its
/// value), as a CREATE and as an UPDATE, from a user and claiming confighistory's identity, its
/// head the victim's. No answer holds a MAC of the chosen content, a right guess is answered as
/// a wrong one, and nothing is written.
async fn forged_secret_writes_reveal_nothing(value: &str) -> Shown {
    let mut stored = opaque("db", value);
    stored["metadata"]["annotations"] = json!({names::HEAD: mac_of(&stored), names::KEY_ID: "1"});
    let f = Fixture::new(secrets_on("")).source(stored.clone()).source(configmap("cfg"));
    let d = deployment("app:1", "db", "cfg");
    let pinned = f.send("/mutate", review("Deployment", "apps", "v1", "CREATE", Some(&d), None)).await.patched(&d);
    let f = f.workload(&pinned);
    f.settle().await;
    f.calls();
    let mut out = Shown::new();
    let identity = f.policy.identity.clone();
    for user in ["mallory", identity.as_str()] {
        for op in ["CREATE", "UPDATE same", "UPDATE changed"] {
            let mut answers = Vec::new();
            for guess in ["wrong-guess", value] {
                let mut obj = opaque("db", guess);
                obj["metadata"]["annotations"] = stored["metadata"]["annotations"].clone();
                let old = match op {
                    "CREATE" => None,
                    "UPDATE same" => Some(obj.clone()),
                    _ => Some(with_annotation(opaque("db", "another-guess"), names::HEAD, "x")),
                };
                let mut r = review("Secret", "", "v1", op.split(' ').next().unwrap(), Some(&obj), old.as_ref());
                r["request"]["userInfo"]["username"] = json!(user);
                let a = f.send("/mutate", r).await;
                assert!(a.allowed(), "{user} {op}: {}", a.body);
                assert_no_mac_of(&a, &obj);
                f.settle().await;
                let calls = f.calls();
                assert!(calls.iter().all(|c| c.starts_with("get ")), "{user} {op}: only reads: {calls:?}");
                assert_eq!(f.secret("db").unwrap(), stored, "{user} {op}: the stored Secret is left as it is");
                // The answer as it would be for any guess: the change time is now.
                let mut patch = a.patch();
                for p in &mut patch {
                    if p["path"] == "/metadata/annotations/confighistory.io~1changed-at" {
                        p["value"] = json!("<now>");
                    }
                }
                answers.push((patch, a.warnings(), a.response()["allowed"].clone()));
                out.push((format!("{user}'s forged {op}"), shown(&a)));
            }
            assert_eq!(answers[0], answers[1], "{user} {op}: a right guess is answered as a wrong one");
        }
    }
    out
}

// ---------- tests ----------

#[tokio::test]
async fn forged_secret_writes_to_the_port_get_no_mac_and_cause_no_write() {
    forged_secret_writes_reveal_nothing("4321").await;
}

#[tokio::test]
async fn a_secrets_head_is_recorded_after_the_answer_from_what_was_stored() {
    the_head_is_recorded_after_the_answer("hunter2").await;
}

/// A CREATE carrying a head of its own, of a Secret nothing reads and the cache records no head
/// of: no source (the request's annotations never make one), answered without a patch, nothing
/// read or written. Failed before: its head made it a source, answered with the MAC of its
/// content under the namespace's key.
#[tokio::test]
async fn a_create_carrying_its_own_head_is_no_source() {
    let f = Fixture::new(secrets_on("")).source(configmap("cfg"));
    let mut s = opaque("guess", "1234");
    s["metadata"]["annotations"] = json!({names::HEAD: "forged"});
    for dry in [false, true] {
        let mut r = review("Secret", "", "v1", "CREATE", Some(&s), None);
        r["request"]["dryRun"] = json!(dry);
        let a = f.send("/mutate", r).await;
        assert!(a.allowed() && a.patch().is_empty() && a.warnings().is_empty(), "dry run {dry}: {}", a.body);
        f.settle().await;
    }
    assert!(f.calls().is_empty(), "{:?}", f.calls());
}

/// A dry-run write of a source Secret (through the API server, `--dry-run=server`, by a user who
/// may create Secrets but not read them): no head, no key id, no MAC in the answer, and nothing
/// read, written or recorded. Failed before: the answer carried the head of the request's
/// content, a MAC oracle in a user's hands.
#[tokio::test]
async fn a_dry_run_secret_write_answers_no_head_and_has_no_effect() {
    let mut stored = opaque("db", "s3cr3t");
    stored["metadata"]["annotations"] = json!({names::HEAD: mac_of(&stored), names::KEY_ID: "1"});
    // Read by name: its outgoing content would be kept by a real write.
    let f = Fixture::new(secrets_on("")).source(stored.clone()).source(configmap("cfg")).workload(&deployment("app:1", "db", "cfg"));
    let guess = opaque("db", "1234");
    let bare = opaque("db", "s3cr3t");
    let cases = [("CREATE", &guess, None), ("UPDATE", &guess, Some(&stored)), ("UPDATE", &bare, Some(&stored))];
    for (op, obj, old) in cases {
        let mut r = review("Secret", "", "v1", op, Some(obj), old);
        r["request"]["dryRun"] = json!(true);
        let a = f.send("/mutate", r).await;
        assert!(a.allowed(), "{}", a.body);
        let out = a.patched(obj);
        let annotations = &out["metadata"]["annotations"];
        assert!(annotations.get(names::HEAD).is_none() && annotations.get(names::KEY_ID).is_none(), "{op}: {}", a.body);
        assert_no_mac_of(&a, obj);
        f.settle().await;
    }
    assert!(f.calls().is_empty(), "nothing read or written: {:?}", f.calls());
    assert_eq!(f.secret("db"), Some(stored));
}

/// Two Secrets holding one content under different names are named by unrelated MACs (frame v2
/// binds the source's name, docs/behaviour.md §4a): a Secret one may write says nothing about
/// another's MAC. Failed before: one content, one MAC, whatever the name.
#[tokio::test]
async fn two_secrets_holding_one_content_get_unrelated_macs() {
    let (db, other) = (opaque("db", "same"), opaque("other", "same"));
    let f = Fixture::new(secrets_on("")).source(db.clone()).source(other.clone()).source(configmap("cfg"));
    let mut d = deployment("app:1", "db", "cfg");
    d["spec"]["template"]["spec"]["containers"][0]["envFrom"] = json!([{"secretRef": {"name": "other"}}]);
    let a = f.send("/mutate", review("Deployment", "apps", "v1", "CREATE", Some(&d), None)).await;
    assert!(a.allowed(), "{}", a.body);
    let out = a.patched(&d);
    let pins: Value = serde_json::from_str(out["metadata"]["annotations"][names::PINS].as_str().unwrap()).unwrap();
    let (x, y) = (pins["secret/db"].as_str().unwrap(), pins["secret/other"].as_str().unwrap());
    assert_ne!(x, y, "one content, two names, two MACs");
    assert_eq!((x, y), (mac_of(&db).as_str(), mac_of(&other).as_str()));
    let spec = &out["spec"]["template"]["spec"];
    assert_eq!(spec["containers"][0]["envFrom"][0]["secretRef"]["name"], json!(snapshot::name("other", y, 0)));
    for (source, mac) in [("db", x), ("other", y)] {
        let snap = f.secret(&snapshot::name(source, mac, 0)).expect("made");
        assert_eq!(secret::validate(&snap, NS, &keyring()), Ok(mac.to_owned()));
    }
}

/// A Secret edited while the webhook was away carries a stale head (docs/behaviour.md §7.8): a
/// later write that keeps its content is answered without computing anything, and the read after
/// the answer replaces the head with the stored content's; that write, admitted as
/// confighistory's own, is a change first seen now (`changed-at` now, `propagated` cleared).
#[tokio::test]
async fn a_stale_head_is_replaced_after_the_answer_and_counts_as_a_change() {
    let mut stale = opaque("db", "edited-while-away");
    let old_mac = mac_of(&opaque("db", "before"));
    stale["metadata"]["annotations"] =
        json!({names::HEAD: old_mac, names::KEY_ID: "1", names::PROPAGATED: old_mac, names::CHANGED_AT: "2025-01-01T00:00:00Z"});
    let f = Fixture::new(secrets_on("")).source(stale.clone()).source(configmap("cfg")).workload(&deployment("app:1", "db", "cfg"));
    let mut labelled = stale.clone();
    labelled["metadata"]["labels"] = json!({"team": "pricing"});
    let a = f.send("/mutate", review("Secret", "", "v1", "UPDATE", Some(&labelled), Some(&stale))).await;
    assert!(a.allowed() && a.patch().is_empty(), "nothing computed from the request: {}", a.body);
    let before = f.store(&labelled);
    let after = head_recorded(&f, "db", &mac_of(&stale)).await;
    // The patch the read wrote, as the API server sends it to admission.
    let mut own = review("Secret", "", "v1", "UPDATE", Some(&after), Some(&before));
    own["request"]["userInfo"]["username"] = json!(f.policy.identity);
    let o = f.send("/mutate", own).await;
    let out = o.patched(&after);
    let annotations = &out["metadata"]["annotations"];
    assert_eq!(annotations[names::HEAD], json!(mac_of(&stale)), "{}", o.body);
    assert_ne!(annotations[names::CHANGED_AT], json!("2025-01-01T00:00:00Z"), "a change first seen now: {annotations}");
    assert!(annotations.get(names::PROPAGATED).is_none(), "{annotations}");
    // A user cannot do the same: their head is not taken, and nothing changes.
    let mut forged = before.clone();
    forged["metadata"]["annotations"][names::HEAD] = json!("forged");
    let u = f.send("/mutate", review("Secret", "", "v1", "UPDATE", Some(&forged), Some(&before))).await;
    assert_eq!(u.patched(&forged)["metadata"]["annotations"], before["metadata"]["annotations"], "{}", u.body);
}

/// Heads and snapshots made before frame v2 (their MACs bind no name) stay valid, and a source
/// whose content stays keeps its v1 head: a Deployment applied now is pinned to the existing v1
/// snapshot, a write that keeps the content writes nothing after its answer (no change, so no
/// propagation after an upgrade), and the controller's re-hash finds the head naming the content.
/// Its next content change takes frame v2.
#[tokio::test]
async fn v1_heads_and_snapshots_stay_valid_and_move_no_workload() {
    let s = opaque("db", "s3cr3t");
    let v1 = v1_mac_of(&s);
    assert_ne!(v1, mac_of(&s));
    let mut stored = s.clone();
    stored["metadata"]["annotations"] = json!({names::HEAD: v1, names::KEY_ID: "1", names::CHANGED_AT: "2025-01-01T00:00:00Z"});
    let key = keyring().current().namespace_key(NS);
    let content = SecretContent::from_object(&s).unwrap();
    let v1_name = snapshot::name("db", &v1, 0);
    let v1_snap = secret::snapshot_object_in(NS, "db", &v1_name, &content, &key, secret::Frame::V1, &[]);
    assert_eq!(secret::validate(&v1_snap, NS, &keyring()), Ok(v1.clone()), "valid");
    let f = Fixture::new(secrets_on("")).source(stored.clone()).source(v1_snap).source(configmap("cfg"));
    let named = confighistory::store::SourceContent::from_object(SourceKind::Secret, &stored).unwrap();
    assert!(named.is_named_by(NS, "db", &v1, Some(&keyring())), "the re-hash finds no missed change");

    let d = deployment("app:1", "db", "cfg");
    let a = f.send("/mutate", review("Deployment", "apps", "v1", "CREATE", Some(&d), None)).await;
    let out = a.patched(&d);
    assert_eq!(out["spec"]["template"]["spec"]["volumes"][0]["secret"]["secretName"], json!(v1_name), "{}", a.body);
    let f = f.workload(&out);
    f.settle().await;
    assert!(f.calls().iter().all(|c| !c.starts_with("create shop/secret/")), "no new snapshot");

    let mut relabelled = stored.clone();
    relabelled["metadata"]["labels"] = json!({"team": "pricing"});
    let r = f.send("/mutate", review("Secret", "", "v1", "UPDATE", Some(&relabelled), Some(&stored))).await;
    assert!(r.allowed() && r.patch().is_empty(), "no change: {}", r.body);
    f.store(&relabelled);
    f.settle().await;
    assert!(f.calls().iter().all(|c| !c.starts_with("patch")), "the head names the stored content: nothing written");

    let mut edited = opaque("db", "new");
    edited["metadata"]["annotations"] = stored["metadata"]["annotations"].clone();
    let e = f.send("/mutate", review("Secret", "", "v1", "UPDATE", Some(&edited), Some(&f.secret("db").unwrap()))).await;
    f.store(&e.patched(&edited));
    head_recorded(&f, "db", &mac_of(&edited)).await;
}

#[tokio::test]
async fn a_secret_update_keeps_its_outgoing_content_as_a_mac_named_snapshot() {
    secret_update_keeps_outgoing_content("hunter2").await;
}

#[tokio::test]
async fn a_deployment_reading_a_secret_volume_and_env_is_pinned() {
    deployment_is_pinned_to_secret_snapshots("hunter2").await;
}

#[tokio::test]
async fn a_propagation_trigger_moves_a_secret_pin_to_the_head() {
    a_trigger_moves_a_secret_pin_to_the_head("s3cr3t").await;
}

#[tokio::test]
async fn secret_snapshots_are_protected_like_configmap_snapshots() {
    secret_snapshots_are_protected("hunter2").await;
}

#[tokio::test]
async fn denials_collisions_and_quotas_speak_of_secrets() {
    enforce_denies_a_mutable_secret("hunter2").await;
    enforce_denies_a_workload_reading_a_mutable_secret("hunter2").await;
    a_collision_moves_to_the_next_name("hunter2").await;
    a_full_quota_is_explained("hunter2").await;
}

/// Every kind of Secret reference is pinned: a projected volume's Secret and an envFrom
/// `secretRef`, beside a volume and a `secretKeyRef`; `imagePullSecrets` never (a registry
/// credential is no config, and the kubelet reads it by name).
#[tokio::test]
async fn projected_and_env_from_references_are_pinned_and_image_pull_secrets_never() {
    let s = opaque("db", "hunter2");
    let f = Fixture::new(secrets_on("")).source(s.clone()).source(configmap("cfg")).source(opaque("regcred", "x"));
    let mut d = deployment("app:1", "db", "cfg");
    let spec = &mut d["spec"]["template"]["spec"];
    spec["volumes"].as_array_mut().unwrap().push(json!({"name": "all", "projected": {"sources": [{"secret": {"name": "db"}}]}}));
    spec["containers"][0]["envFrom"] = json!([{"secretRef": {"name": "db"}}]);
    spec["imagePullSecrets"] = json!([{"name": "regcred"}]);
    let a = f.send("/mutate", review("Deployment", "apps", "v1", "CREATE", Some(&d), None)).await;
    assert!(a.allowed(), "{}", a.body);
    let out = a.patched(&d);
    let name = json!(snapshot::name("db", &mac_of(&s), 0));
    let spec = &out["spec"]["template"]["spec"];
    assert_eq!(spec["volumes"][2]["projected"]["sources"][0]["secret"]["name"], name);
    assert_eq!(spec["containers"][0]["envFrom"][0]["secretRef"]["name"], name);
    assert_eq!(spec["imagePullSecrets"][0]["name"], json!("regcred"));
    assert!(f.secret(&snapshot::name("regcred", &mac_of(&opaque("regcred", "x")), 0)).is_none());
}

/// Service-account and bootstrap tokens, Helm release records, a certificate issuer's Secret and
/// one opted out are never touched: their writes pass without a patch, warning or read, and a
/// Deployment reading them keeps the plain names (no snapshot, no warning about them).
#[tokio::test]
async fn never_sources_pass_untouched() {
    let never = [
        secret_of("sa-token", "kubernetes.io/service-account-token", &[("token", "t")]),
        secret_of("bootstrap-token-abcdef", "bootstrap.kubernetes.io/token", &[("token-id", "abcdef")]),
        secret_of("sh.helm.release.v1.shop.v3", "helm.sh/release.v1", &[("release", "H4sI")]),
        with_annotation(secret_of("tls", "kubernetes.io/tls", &[("tls.crt", "c"), ("tls.key", "k")]), names::CERTIFICATE_NAME, "tls"),
        with_annotation(opaque("free", "x"), names::VERSIONED, "false"),
    ];
    let mut f = Fixture::new(secrets_on(""));
    for s in &never {
        f = f.source(s.clone());
    }
    for s in &never {
        let mut head = s.clone();
        head["metadata"]["annotations"][names::HEAD] = json!("forged");
        for (op, new, old) in [("CREATE", s, None), ("UPDATE", &head, Some(s))] {
            let a = f.send("/mutate", review("Secret", "", "v1", op, Some(new), old)).await;
            assert!(a.allowed(), "{}", a.body);
            assert!(a.patch().is_empty() && a.warnings().is_empty(), "{} {op}: {}", s["metadata"]["name"], a.body);
        }
    }
    assert!(f.calls().is_empty());
    for s in &never {
        let name = s["metadata"]["name"].as_str().unwrap();
        let d = deployment("app:1", name, "cfg");
        let a = f.send("/mutate", review("Deployment", "apps", "v1", "CREATE", Some(&d), None)).await;
        assert!(a.allowed(), "{}", a.body);
        let out = a.patched(&d);
        assert_eq!(out["spec"]["template"]["spec"]["volumes"][0]["secret"]["secretName"], json!(name), "{name}");
        assert!(!a.warnings().iter().any(|w| w.contains(name)), "{name}: {:?}", a.warnings());
    }
    assert!(f.calls().iter().all(|c| !c.starts_with("create shop/secret/")), "no Secret snapshot");
}

fn with_annotation(mut obj: Value, key: &str, value: &str) -> Value {
    obj["metadata"]["annotations"][key] = json!(value);
    obj
}

/// The admin's namespace selector decides where Secrets are versioned: a namespace it does not
/// select is as with Secrets off, however its workloads or Secrets are annotated.
#[tokio::test]
async fn only_the_admins_namespace_selector_turns_secrets_on() {
    let s = opaque("db", "hunter2");
    let d = deployment("app:1", "db", "cfg");
    let pinned = |a: &Answer| a.patched(&d)["spec"]["template"]["spec"]["volumes"][0]["secret"]["secretName"] != json!("db");
    let off = Fixture::new(secrets_on("secrets=on")).namespace(json!({})).source(s.clone()).source(configmap("cfg"));
    let a = off.send("/mutate", review("Deployment", "apps", "v1", "CREATE", Some(&d), None)).await;
    assert!(a.allowed() && !pinned(&a), "{}", a.body);
    assert!(off.calls().iter().all(|c| !c.contains("/secret/")), "no Secret read where they are off");
    let u = off.send("/mutate", review("Secret", "", "v1", "UPDATE", Some(&opaque("db", "new")), Some(&s))).await;
    assert!(u.allowed() && u.patch().is_empty() && u.warnings().is_empty(), "{}", u.body);
    let on = Fixture::new(secrets_on("secrets=on")).namespace(json!({"secrets": "on"})).source(s).source(configmap("cfg"));
    let a = on.send("/mutate", review("Deployment", "apps", "v1", "CREATE", Some(&d), None)).await;
    assert!(a.allowed() && pinned(&a), "{}", a.body);
}

/// With Secrets off (the default) everything about Secrets is as before: a Deployment's Secret
/// references are neither read nor rewritten, and a Secret review (sent during an upgrade that
/// turns Secrets on, before this pod has them) is allowed unchanged without a read.
#[tokio::test]
async fn with_secrets_off_nothing_about_secrets_changes() {
    let s = opaque("db", "hunter2");
    let f = Fixture::new(Policy::default()).source(s.clone()).source(configmap("cfg"));
    let d = deployment("app:1", "db", "cfg");
    let a = f.send("/mutate", review("Deployment", "apps", "v1", "CREATE", Some(&d), None)).await;
    assert!(a.allowed(), "{}", a.body);
    let out = a.patched(&d);
    assert_eq!(out["spec"]["template"]["spec"]["volumes"][0]["secret"]["secretName"], json!("db"));
    assert_eq!(out["spec"]["template"]["spec"]["containers"][0]["env"][0]["valueFrom"]["secretKeyRef"]["name"], json!("db"));
    assert_ne!(out["spec"]["template"]["spec"]["volumes"][1]["configMap"]["name"], json!("cfg"), "the ConfigMap is pinned as always");
    assert!(f.calls().iter().all(|c| !c.contains("/secret/")), "{:?}", f.calls());
    for path in ["/mutate", "/protect"] {
        let a = f.send(path, review("Secret", "", "v1", "UPDATE", Some(&opaque("db", "new")), Some(&s))).await;
        assert_eq!(a.status, StatusCode::OK, "{path}: {}", a.body);
        assert!(a.allowed() && a.patch().is_empty() && a.warnings().is_empty(), "{path}: {}", a.body);
    }
    assert!(f.calls().iter().all(|c| !c.contains("/secret/")), "{:?}", f.calls());
}

/// A replica with Secrets on whose read of a Secret is forbidden: an upgrade turning Secrets off
/// took the RBAC on Secrets while this replica still serves (the pods roll after the ClusterRole
/// is gone). It decides as a replica with Secrets off does (docs/behaviour.md §9a.2): the release
/// is admitted, its ConfigMap pinned, its Secret references left as sent, with a warning; no
/// Secret snapshot is written. Before, the release was refused ("could not read Secret ...").
#[tokio::test]
async fn a_forbidden_secret_read_is_decided_as_with_secrets_off() {
    let f = Fixture::new(secrets_on("")).source(opaque("db", "hunter2")).source(configmap("cfg"));
    *f.cluster.fail.lock().unwrap() = Some((
        "get shop/secret/db",
        ApiError {
            code: Some(403),
            reason: "Forbidden".into(),
            message:
                "secrets \"db\" is forbidden: User \"system:serviceaccount:confighistory:confighistory\" cannot get resource \"secrets\""
                    .into(),
        },
    ));
    let d = deployment("app:1", "db", "cfg");
    let a = f.send("/mutate", review("Deployment", "apps", "v1", "CREATE", Some(&d), None)).await;
    assert!(a.allowed(), "{}", a.body);
    let out = a.patched(&d);
    assert_eq!(out["spec"]["template"]["spec"]["volumes"][0]["secret"]["secretName"], json!("db"), "{}", a.body);
    assert_eq!(out["spec"]["template"]["spec"]["containers"][0]["env"][0]["valueFrom"]["secretKeyRef"]["name"], json!("db"));
    let cm = out["spec"]["template"]["spec"]["volumes"][1]["configMap"]["name"].as_str().unwrap().to_owned();
    assert!(cm.starts_with("cfg-"), "the ConfigMap is pinned as always: {cm}");
    assert!(a.warnings().iter().any(|w| w.contains("may not read Secrets") && w.len() <= 120), "{:?}", a.warnings());
    let calls = f.calls();
    assert!(calls.iter().any(|c| c == "get shop/secret/db"), "the Secret was tried: {calls:?}");
    assert!(!calls.iter().any(|c| c.starts_with("create shop/secret/")), "no Secret snapshot: {calls:?}");
    // Validation of the final object, by the same replica: admitted too.
    let v = f.send("/validate", review("Deployment", "apps", "v1", "CREATE", Some(&out), None)).await;
    assert!(v.allowed(), "{}", v.body);
    // Any other failed read still decides as before: the release is refused, retrying is safe.
    *f.cluster.fail.lock().unwrap() =
        Some(("get shop/secret/db", ApiError { code: Some(500), reason: "InternalError".into(), message: "etcd timeout".into() }));
    let a = f.send("/mutate", review("Deployment", "apps", "v1", "CREATE", Some(&d), None)).await;
    assert!(!a.allowed() && a.message().contains("retrying is safe"), "{}", a.body);
}

/// The same upgrade, met at the snapshot instead: the source is read (cached or allowed a moment
/// before) but the Secret snapshot's read is forbidden, the RBAC gone in between. Decided again
/// as with Secrets off, not refused (an in-cluster upgrade run found the refusal).
#[tokio::test]
async fn a_forbidden_secret_snapshot_write_is_decided_as_with_secrets_off() {
    let f = Fixture::new(secrets_on("")).source(opaque("db", "hunter2")).source(configmap("cfg"));
    *f.cluster.fail.lock().unwrap() = Some((
        "get shop/secret/db-",
        ApiError {
            code: Some(403),
            reason: "Forbidden".into(),
            message: "secrets is forbidden: User cannot get resource \"secrets\"".into(),
        },
    ));
    let d = deployment("app:1", "db", "cfg");
    let a = f.send("/mutate", review("Deployment", "apps", "v1", "CREATE", Some(&d), None)).await;
    assert!(a.allowed(), "{}", a.body);
    let out = a.patched(&d);
    assert_eq!(out["spec"]["template"]["spec"]["volumes"][0]["secret"]["secretName"], json!("db"), "{}", a.body);
    let cm = out["spec"]["template"]["spec"]["volumes"][1]["configMap"]["name"].as_str().unwrap().to_owned();
    assert!(cm.starts_with("cfg-"), "the ConfigMap is pinned as always: {cm}");
    assert!(a.warnings().iter().any(|w| w.contains("may not read Secrets")), "{:?}", a.warnings());
    let calls = f.calls();
    assert!(calls.iter().any(|c| c.starts_with("get shop/secret/db-")), "the snapshot was tried: {calls:?}");
    assert!(!calls.iter().any(|c| c.starts_with("create shop/secret/")), "no Secret snapshot: {calls:?}");
}

/// During an upgrade that turns Secrets on, the API server may send a release's mutating call to
/// an old replica (Secrets off: its Secret references left as sent) and its validating call to a
/// new one (docs/behaviour.md §9a.2). A replica that started moments ago lets such a reference
/// through in rewrite mode, with a warning (repair pins it); in enforce mode, or once the replicas
/// it replaced are surely gone, it refuses it as always. Before, the release was refused.
#[tokio::test]
async fn a_new_replica_lets_through_what_an_old_one_left_unpinned_in_rewrite_mode() {
    let d = deployment("app:1", "db", "cfg");
    let validate = |f: &Fixture, started: Option<std::time::Instant>| {
        let app = common::app(&f.policy, &f.state, &f.cluster);
        let app = Arc::new(confighistory::webhook::App { mixed_fleet_until: started, ..Arc::into_inner(app).unwrap() });
        let r = review("Deployment", "apps", "v1", "CREATE", Some(&d), None);
        async move { common::send(&app, "/validate", &r).await }
    };
    let soon = Some(std::time::Instant::now() + std::time::Duration::from_secs(60));
    let f = Fixture::new(secrets_on("")).source(opaque("db", "hunter2")).source(configmap("cfg"));
    let a = validate(&f, soon).await;
    assert!(a.allowed(), "{}", a.body);
    assert!(a.warnings().iter().any(|w| w.contains("being upgraded") && w.contains("repair pins it")), "{:?}", a.warnings());
    for late in [None, Some(std::time::Instant::now())] {
        let a = validate(&f, late).await;
        assert!(!a.allowed() && a.message().contains("mutable Secret secret/db"), "{}", a.body);
    }
    let enforce = Fixture::new(secrets_on(""))
        .namespace(json!({"confighistory.io/mode": "enforce"}))
        .source(opaque("db", "hunter2"))
        .source(configmap("cfg"));
    let a = validate(&enforce, soon).await;
    assert!(!a.allowed() && a.message().contains("mutable Secret secret/db"), "{}", a.body);
}

/// The canary: every scenario above with a Secret value of "canary-s3cr3t-value", at debug log
/// level with the binary's subscriber. No log line, answer (warnings, messages, patches), Event,
/// API call description or metric shows the canary, its base64, its SHA-256 in hex, or the
/// unkeyed content hash a ConfigMap of its data would get. (The snapshot objects the port is
/// asked to create hold the value: that is their job, and they are not searched.)
#[tokio::test]
async fn no_form_of_a_canary_secret_value_is_written_anywhere() {
    let logs = Logs::default();
    let _guard = logs.capture();
    let mut shown: Shown = Vec::new();
    Logs::refresh();
    shown.extend(secret_update_keeps_outgoing_content(CANARY).await);
    shown.extend(deployment_is_pinned_to_secret_snapshots(CANARY).await);
    shown.extend(a_trigger_moves_a_secret_pin_to_the_head(CANARY).await);
    shown.extend(secret_snapshots_are_protected(CANARY).await);
    shown.extend(enforce_denies_a_mutable_secret(CANARY).await);
    shown.extend(enforce_denies_a_workload_reading_a_mutable_secret(CANARY).await);
    shown.extend(a_collision_moves_to_the_next_name(CANARY).await);
    shown.extend(a_full_quota_is_explained(CANARY).await);
    shown.extend(the_head_is_recorded_after_the_answer(CANARY).await);
    shown.extend(forged_secret_writes_reveal_nothing(CANARY).await);
    let lines = logs.text();
    assert!(lines.contains("could not record the Secret's head"), "the failed head write was logged");
    assert!(lines.contains("recorded the Secret's head"), "the head write was logged");
    assert!(lines.contains("created snapshot"), "the run logged at debug level: {} bytes", lines.len());
    shown.push(("the logs".into(), lines));
    shown.push(("the metrics".into(), confighistory::metrics::METRICS.render()));

    let b = b64(CANARY.as_bytes());
    let sha: String = digest::<Sha256>(CANARY.as_bytes()).iter().map(|b| format!("{b:02x}")).collect();
    let mut forms = vec![
        ("the canary", CANARY.to_owned()),
        ("its base64", b.clone()),
        ("its base64, unpadded prefix", b.trim_end_matches('=')[..24].to_owned()),
        ("its SHA-256 in hex", sha.clone()),
        ("its SHA-256 in upper-case hex", sha.to_uppercase()),
    ];
    // The unkeyed hashes a ConfigMap's rules would give the canary Secret's data.
    for obj in [opaque("db", CANARY), secret_of("db", "Opaque", &[("password", CANARY)])] {
        forms.push(("an unkeyed content hash of it", Content::from_object(&obj).hash()));
    }
    for (what, text) in &shown {
        for (form, value) in &forms {
            assert!(!text.contains(value.as_str()), "{what} shows {form}");
        }
    }
}

/// A key rotation (docs/operations.md "Secrets' cluster key") renames nothing and moves nothing:
/// a Secret whose content stays keeps the key its head was MAC'd under (recorded in
/// `confighistory.io/key-id`), so an edit of its labels records no change, and a Deployment
/// applied after the rotation is pinned to the existing snapshot, not a new one; the Secret's next
/// content change takes the new key. Failed before: the head was always MAC'd under the current
/// key, so the first write after a rotation recorded a change and propagation would have moved
/// every workload reading the Secret.
#[tokio::test]
async fn a_key_rotation_renames_no_snapshot_and_moves_no_workload() {
    let s = opaque("db", "s3cr3t");
    let f = Fixture::new(secrets_on("")).source(s.clone()).source(configmap("cfg"));
    let d = deployment("app:1", "db", "cfg");
    let pinned = f.send("/mutate", review("Deployment", "apps", "v1", "CREATE", Some(&d), None)).await.patched(&d);
    let before = snapshot::name("db", &mac_of(&s), 0);
    assert_eq!(pinned["spec"]["template"]["spec"]["volumes"][0]["secret"]["secretName"], json!(before));
    // Its next write (here confighistory's own head record) records the head and its key.
    let f = f.workload(&pinned);
    let mut touched = s.clone();
    touched["metadata"]["annotations"] = json!({names::HEAD: mac_of(&s), names::KEY_ID: "1"});
    let mut as_confighistory = review("Secret", "", "v1", "UPDATE", Some(&touched), Some(&s));
    as_confighistory["request"]["userInfo"]["username"] = json!(f.policy.identity);
    let created = f.send("/mutate", as_confighistory).await.patched(&touched);
    assert_eq!(created["metadata"]["annotations"][names::KEY_ID], "1", "the key its head is MAC'd under");
    f.settle().await;
    let f = f.source(created.clone());

    let rotated = keyring().rotate(ClusterKey::new(KeyId(2), vec![9; 32]).unwrap()).unwrap();
    let mut f = f;
    f.policy.secrets.keys = KeySlot::new(rotated.clone());
    f.calls();

    // Its labels edited: the same head, key and change time.
    let mut relabelled = created.clone();
    relabelled["metadata"]["labels"] = json!({"team": "pricing"});
    let a = f.send("/mutate", review("Secret", "", "v1", "UPDATE", Some(&relabelled), Some(&created))).await;
    assert!(a.allowed(), "{}", a.body);
    let after = a.patched(&relabelled);
    for key in [names::HEAD, names::KEY_ID, names::CHANGED_AT] {
        assert_eq!(after["metadata"]["annotations"][key], created["metadata"]["annotations"][key], "{key}");
    }
    // A Deployment applied after the rotation: the existing snapshot, valid under the kept key.
    let mut other = deployment("app:1", "db", "cfg");
    other["metadata"]["name"] = json!("other");
    let o = f.send("/mutate", review("Deployment", "apps", "v1", "CREATE", Some(&other), None)).await;
    assert_eq!(o.patched(&other)["spec"]["template"]["spec"]["volumes"][0]["secret"]["secretName"], json!(before), "{}", o.body);
    assert!(f.calls().iter().all(|c| !c.starts_with("create")), "no snapshot made under the new key");

    // Its content changed: the new key.
    let mut edited = opaque("db", "rotated-password");
    edited["metadata"]["annotations"] = created["metadata"]["annotations"].clone();
    let e = f.send("/mutate", review("Secret", "", "v1", "UPDATE", Some(&edited), Some(&created))).await;
    let after = e.patched(&edited);
    assert!(after["metadata"]["annotations"].get(names::KEY_ID).is_none(), "the stale key id goes with the stale head");
    f.store(&after);
    let new_mac = SecretContent::from_object(&edited).unwrap().mac(&rotated.current().namespace_key(NS), "db");
    let stored = head_recorded(&f, "db", &new_mac).await;
    assert_eq!(stored["metadata"]["annotations"][names::KEY_ID], "2");
    // The outgoing content is kept under the key it was named by: the snapshot the Deployments use.
    assert!(f.secret(&before).is_some());
}

/// A Secret its owner opts out of versioning (`versioned: "false"`, to change under running pods)
/// is a change of its own, as a ConfigMap's (docs/behaviour.md §7): the UPDATE records it, and
/// confighistory's trigger then moves the Deployment from the snapshot back to the plain name.
#[tokio::test]
async fn a_secret_opted_out_of_versioning_moves_its_workloads_back_to_the_plain_name() {
    let s = opaque("db", "s3cr3t");
    let f = Fixture::new(secrets_on("")).source(s.clone()).source(configmap("cfg"));
    let d = deployment("app:1", "db", "cfg");
    let pinned = f.send("/mutate", review("Deployment", "apps", "v1", "CREATE", Some(&d), None)).await.patched(&d);
    let mut stored = s.clone();
    stored["metadata"]["annotations"] = json!({names::HEAD: mac_of(&s), names::KEY_ID: "1"});
    let f = f.workload(&pinned).source(stored.clone());

    let mut opted_out = stored.clone();
    opted_out["metadata"]["annotations"][names::VERSIONED] = json!("false");
    let a = f.send("/mutate", review("Secret", "", "v1", "UPDATE", Some(&opted_out), Some(&stored))).await;
    assert!(a.allowed(), "{}", a.body);
    let recorded = a.patched(&opted_out);
    assert!(recorded["metadata"]["annotations"].get(names::CHANGED_AT).is_some(), "a change: {}", a.body);

    // Propagation's trigger (docs/behaviour.md §7): back on the plain name.
    let f = f.source(recorded.clone());
    let mut triggered = pinned.clone();
    triggered["metadata"]["annotations"][names::PROPAGATE] = json!(format!("secret/db={}", mac_of(&s)));
    let mut as_confighistory = review("Deployment", "apps", "v1", "UPDATE", Some(&triggered), Some(&pinned));
    as_confighistory["request"]["userInfo"]["username"] = json!(f.policy.identity);
    let t = f.send("/mutate", as_confighistory).await;
    let out = t.patched(&triggered);
    let spec = &out["spec"]["template"]["spec"];
    assert_eq!(spec["volumes"][0]["secret"]["secretName"], json!("db"), "{}", t.body);
    assert_eq!(spec["containers"][0]["env"][0]["valueFrom"]["secretKeyRef"]["name"], json!("db"));
    assert!(t.warnings().iter().any(|w| w.contains("secret/db: no longer versioned")), "{:?}", t.warnings());

    // Opted in again: a change again (propagation pins the plain-name workloads once more).
    let mut propagated = recorded.clone();
    propagated["metadata"]["annotations"][names::PROPAGATED] = recorded["metadata"]["annotations"][names::HEAD].clone();
    let mut opted_in = propagated.clone();
    opted_in["metadata"]["annotations"].as_object_mut().unwrap().remove(names::VERSIONED);
    let back = f.send("/mutate", review("Secret", "", "v1", "UPDATE", Some(&opted_in), Some(&propagated))).await;
    let back = back.patched(&opted_in);
    assert!(
        back["metadata"]["annotations"].get(names::PROPAGATED).is_none(),
        "a new change starts unpropagated: {}",
        back["metadata"]["annotations"]
    );
}

/// A Secret of 20,000 keys, every value a form of the canary (`key_changes_of` maps every key of
/// both sides): an UPDATE changing every value, then one renaming half the keys and changing the
/// other half. Each is answered correctly (the new MAC as head, the outgoing content kept as a
/// snapshot of all 20,000 keys), its warning is one line naming at most 16 keys (the first ones:
/// the router cuts a warning at 120 characters, here inside the first list), and no form of a
/// value appears in the answer or the debug log. Nothing timing-based is
/// asserted: the time of each admission is printed (`cargo test --test secret_admission
/// many_keys -- --nocapture`).
#[tokio::test]
async fn a_secret_of_twenty_thousand_keys_is_answered_with_capped_warnings_and_no_value() {
    const KEYS: usize = 20_000;
    let logs = Logs::default();
    let _guard = logs.capture();
    let value = |i: usize, rev: u32| format!("{CANARY}-{rev}-{i}");
    let secret = |rev: u32, renamed: bool| {
        let data: serde_json::Map<String, Value> = (0..KEYS)
            .map(|i| {
                let key = if renamed && i % 2 == 0 { format!("renamed-{i:05}") } else { format!("key-{i:05}") };
                (key, json!(b64(value(i, rev).as_bytes())))
            })
            .collect();
        json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "data": data,
               "metadata": {"name": "db", "namespace": NS, "uid": "uid-db", "resourceVersion": rev.to_string()}})
    };
    // (old, new, what the line says before its lists, each list's prefix, step and length)
    let cases = [
        (secret(1, false), secret(2, false), "secret/db: values changed in [", vec![("key", 1, KEYS)]),
        (secret(2, false), secret(3, true), "secret/db: keys removed [", vec![("key", 2, KEYS / 2), ("renamed", 2, KEYS / 2)]),
    ];
    let mut shown = Vec::new();
    for (old, new, warning, expected) in cases {
        let f = Fixture::new(secrets_on("")).source(old.clone()).source(configmap("cfg")).workload(&deployment("app:1", "db", "cfg"));
        Logs::refresh();
        let started = std::time::Instant::now();
        let a = f.send("/mutate", review("Secret", "", "v1", "UPDATE", Some(&new), Some(&old))).await;
        eprintln!(
            "MEASURE a {KEYS}-key Secret UPDATE admitted in {:.1?} ({} bytes of review)",
            started.elapsed(),
            new.to_string().len() * 2
        );
        assert_eq!(a.status, StatusCode::OK);
        assert!(a.allowed(), "allowed ({} bytes of answer)", a.text.len());
        let warnings = a.warnings();
        assert_eq!(warnings.len(), 1, "one warning: {} of them", warnings.len());
        // Key names only (never a value, so failure output shows none), the first ones in order,
        // at most 16, fitted to the router's 120 characters with the rest counted: nothing cut.
        let w = &warnings[0];
        assert!(w.chars().count() <= 120 && !w.ends_with('…'), "one line, not cut: {w}");
        assert!(w.starts_with(warning), "{w}");
        assert!(w.matches("key-").count() + w.matches("renamed-").count() <= 16, "at most 16 names: {w}");
        let lists: Vec<&str> = w.split('[').skip(1).map(|l| l.split(']').next().unwrap_or_default()).collect();
        assert_eq!(lists.len(), expected.len(), "{w}");
        for (list, (prefix, step, len)) in lists.iter().zip(&expected) {
            let (names, more) = list.rsplit_once(" +").expect("the rest counted");
            let names: Vec<&str> = names.split(", ").collect();
            let first: Vec<String> = (0..names.len()).map(|n| format!("{prefix}-{:05}", n * step)).collect();
            assert_eq!(names, first, "the first keys, in order: {w}");
            assert_eq!(names.len() + more.parse::<usize>().unwrap(), *len, "every key accounted for: {w}");
        }
        assert!(a.patched(&new)["metadata"]["annotations"].get(names::HEAD).is_none(), "no head in the answer");
        let kept = f.secret(&snapshot::name("db", &mac_of(&old), 0)).expect("the outgoing content is kept");
        assert!(kept["data"] == old["data"] && kept["immutable"] == json!(true), "a snapshot of all {KEYS} keys");
        shown.push(a.text);
    }
    shown.push(logs.text());
    assert!(shown[2].contains("created snapshot"), "the run logged at debug level");
    // Every value starts with the canary: its plain form and the base64 of its first 18 bytes
    // (whole 3-byte groups, so the same in every value's base64) show any value.
    let b = b64(&CANARY.as_bytes()[..18]);
    for (i, text) in shown.iter().enumerate() {
        assert!(!text.contains(CANARY) && !text.contains(&b), "output #{i} shows a value (its {} bytes not printed)", text.len());
    }
}
