//! Every admission rule of docs/behaviour.md §6, driven through the very router the binary serves, with real
//! AdmissionReview JSON. The API server is an in-memory stand-in here (fault injection included);
//! the e2e suite repeats the important scenarios against a real kube-apiserver.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request as HttpRequest, StatusCode};
use confighistory::cache::Lock;
use confighistory::cluster::{ApiError, MemoryCluster};
use confighistory::model::ids::{SourceId, SourceKind};
use confighistory::model::kinds::Kind;
use confighistory::model::policy::{Mode, Policy};
use confighistory::model::snapshot::{self, Content};
use confighistory::model::template::template_hash;
use confighistory::webhook::{self, App};
use serde_json::{json, Value};
use tower::ServiceExt;

mod common;
use common::{review, Answer, Logs, NS};

const ME: &str = "system:serviceaccount:confighistory:confighistory";

// ---------- fixtures ----------

struct Fixture {
    state: Arc<Lock>,
    cluster: MemoryCluster,
    policy: Policy,
}

fn configmap(name: &str, data: &[(&str, &str)]) -> Value {
    let data: serde_json::Map<String, Value> = data.iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": NS, "uid": format!("uid-{name}")}, "data": data})
}

fn content(data: &[(&str, &str)]) -> Content {
    Content::from_object(&configmap("x", data))
}

fn snap(source: &str, data: &[(&str, &str)]) -> String {
    snapshot::name(source, &content(data).hash(), 0)
}

/// A Deployment whose single container mounts `cm` and reads one key from it through env.
fn deployment(image: &str, cm: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "pricing", "namespace": NS, "uid": "uid-pricing"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "pricing"}}, "template": {
            "metadata": {"labels": {"app": "pricing"}, "creationTimestamp": null},
            "spec": {
                "volumes": [{"name": "config", "configMap": {"name": cm}}],
                "containers": [{"name": "app", "image": image,
                    "env": [{"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": cm, "key": "mode"}}}]}]
            }
        }}
    })
}

fn with_annotations(mut obj: Value, pairs: &[(&str, &str)]) -> Value {
    for (k, v) in pairs {
        obj["metadata"]["annotations"][*k] = json!(v);
    }
    obj
}

impl Fixture {
    fn new() -> Fixture {
        Fixture { state: Arc::default(), cluster: MemoryCluster::default(), policy: Policy::default() }
    }

    /// A source ConfigMap that exists in the cluster and the caches.
    fn source(self, name: &str, data: &[(&str, &str)]) -> Fixture {
        let cm = configmap(name, data);
        self.cluster.insert(cm.clone());
        self.state.write().apply_configmap(&cm);
        self
    }

    /// A valid snapshot of `data` for `source`, in cluster and caches, with adoption records.
    fn snapshot(self, source: &str, data: &[(&str, &str)], adopted: &[String]) -> Fixture {
        let c = content(data);
        let obj = snapshot::object(NS, source, &snapshot::name(source, &c.hash(), 0), &c, adopted);
        self.cluster.insert(obj.clone());
        self.state.write().apply_configmap(&obj);
        self
    }

    fn workload(self, obj: &Value) -> Fixture {
        self.state.write().apply_workload(Kind::Deployment, obj);
        self
    }

    /// A ReplicaSet of the Deployment with this template (rollout history).
    fn revision(self, deploy: &Value, n: u32) -> Fixture {
        let mut tpl = deploy["spec"]["template"].clone();
        tpl["metadata"]["labels"]["pod-template-hash"] = json!(format!("h{n}"));
        let rs = json!({"metadata": {"name": format!("pricing-{n}"), "namespace": NS,
            "annotations": {"deployment.kubernetes.io/revision": n.to_string()},
            "ownerReferences": [{"kind": "Deployment", "uid": "uid-pricing", "controller": true}]},
            "spec": {"template": tpl}});
        self.state.write().apply_revision(Kind::ReplicaSet, &rs);
        self
    }

    fn namespace_mode(self, mode: &str) -> Fixture {
        self.state.write().apply_namespace(&json!({"metadata": {"name": NS, "labels": {"confighistory.io/mode": mode}}}));
        self
    }

    fn update_source(&self, name: &str, data: &[(&str, &str)]) {
        let mut cm = self.cluster.get(NS, name).unwrap();
        cm["data"] = json!(data.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>());
        self.cluster.insert(cm.clone());
        self.state.write().apply_configmap(&cm);
    }

    fn app(&self) -> Arc<App> {
        common::app(&self.policy, &self.state, &self.cluster)
    }

    async fn post(&self, path: &str, body: Vec<u8>) -> Answer {
        common::post(&self.app(), path, body).await
    }

    async fn send(&self, path: &str, review: Value) -> Answer {
        self.send_to(&self.app(), path, review).await
    }

    /// [`Fixture::send`] to a given server (one that keeps what it learnt between requests).
    async fn send_to(&self, app: &Arc<App>, path: &str, review: Value) -> Answer {
        let a = common::send(app, path, &review).await;
        assert_eq!(a.status, StatusCode::OK, "{}", a.body);
        assert_eq!(a.response()["uid"], "req-1", "the uid is always copied");
        a
    }

    async fn mutate_deployment(&self, op: &str, new: &Value, old: Option<&Value>) -> Answer {
        self.send("/mutate", review("Deployment", "apps", "v1", op, Some(new), old)).await
    }

    async fn as_user(&self, path: &str, user: &str, mut review: Value) -> Answer {
        review["request"]["userInfo"]["username"] = json!(user);
        self.send(path, review).await
    }

    fn calls(&self) -> Vec<String> {
        self.cluster.calls.lock().unwrap().clone()
    }

    fn clear_calls(&self) {
        self.cluster.calls.lock().unwrap().clear();
    }
}

fn pin_of(obj: &Value) -> (String, String) {
    let tpl = &obj["spec"]["template"]["spec"];
    (
        tpl["volumes"][0]["configMap"]["name"].as_str().unwrap().to_owned(),
        tpl["containers"][0]["env"][0]["valueFrom"]["configMapKeyRef"]["name"].as_str().unwrap().to_owned(),
    )
}

fn annotation(obj: &Value, key: &str) -> Option<String> {
    obj["metadata"]["annotations"][key].as_str().map(str::to_owned)
}

const A: &[(&str, &str)] = &[("mode", "a"), ("discount_rules_path", "/rules")];
const B: &[(&str, &str)] = &[("mode", "b"), ("rules.discount_path", "/rules")];

// ---------- §6.2 workloads ----------

#[tokio::test]
async fn create_pins_every_reference_of_a_source_to_one_snapshot() {
    let f = Fixture::new().source("pricing-config", A);
    let d = deployment("pricing:4.11", "pricing-config");
    let a = f.mutate_deployment("CREATE", &d, None).await;
    assert!(a.allowed());
    let out = a.patched(&d);
    let want = snap("pricing-config", A);
    assert_eq!(pin_of(&out), (want.clone(), want.clone()));
    let pins: Value = serde_json::from_str(&annotation(&out, "confighistory.io/pins").unwrap()).unwrap();
    assert_eq!(pins, json!({"pricing-config": content(A).hash()}));
    assert!(a.warnings().iter().any(|w| w.contains(&want)), "{:?}", a.warnings());
    let created = f.cluster.get(NS, &want).expect("snapshot created");
    assert_eq!(snapshot::validate(&created), Ok(content(A).hash()));
    assert_eq!(created["data"], configmap("x", A)["data"], "byte-for-byte copy");
    assert!(created["metadata"]["labels"].get("app").is_none());
}

/// The head annotation of `source` in the cluster once the background write lands (up to 2 s).
async fn recorded_head(f: &Fixture, source: &str) -> Option<String> {
    for _ in 0..100 {
        if let Some(head) = f.cluster.get(NS, source).and_then(|cm| annotation(&cm, "confighistory.io/head")) {
            return Some(head);
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    None
}

/// docs/behaviour.md §6.1, §10.11: a source created before any workload named it (GitOps tools apply
/// ConfigMaps first) has no head. Pinning a workload to it records the head on it, so the next
/// apply of the unchanged source writes nothing and a dry run of it matches the stored object;
/// a dry run records nothing, and a source that has a head is not written.
#[tokio::test]
async fn pinning_a_source_without_a_head_records_its_head() {
    let f = Fixture::new().source("pricing-config", A);
    let d = deployment("pricing:4.11", "pricing-config");
    let mut dry = review("Deployment", "apps", "v1", "CREATE", Some(&d), None);
    dry["request"]["dryRun"] = json!(true);
    f.send("/mutate", dry).await;
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    assert_eq!(annotation(&f.cluster.get(NS, "pricing-config").unwrap(), "confighistory.io/head"), None, "a dry run writes nothing");

    assert!(f.mutate_deployment("CREATE", &d, None).await.allowed());
    assert_eq!(recorded_head(&f, "pricing-config").await, Some(content(A).hash()));

    let with_head = Fixture::new().source("pricing-config", A);
    let cm = with_annotations(with_head.cluster.get(NS, "pricing-config").unwrap(), &[("confighistory.io/head", &content(A).hash())]);
    with_head.cluster.insert(cm.clone());
    with_head.state.write().apply_configmap(&cm);
    assert!(with_head.mutate_deployment("CREATE", &d, None).await.allowed());
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let patches: Vec<String> = with_head.calls().into_iter().filter(|c| *c == format!("patch {NS}/pricing-config")).collect();
    assert!(patches.is_empty(), "{:?}", with_head.calls());
}

#[tokio::test]
async fn reapplying_unchanged_manifests_keeps_pins_without_api_calls() {
    let pinned = deployment("pricing:4.11", &snap("pricing-config", A));
    let old = with_annotations(pinned.clone(), &[("confighistory.io/pins", &format!("{{\"pricing-config\":\"{}\"}}", content(A).hash()))]);
    let f = Fixture::new().source("pricing-config", B).snapshot("pricing-config", A, &[]).workload(&old);
    // kubectl apply sends the plain names again, and an annotation from the manifest.
    let reapplied = with_annotations(deployment("pricing:4.11", "pricing-config"), &[("team", "pricing")]);
    let a = f.mutate_deployment("UPDATE", &reapplied, Some(&old)).await;
    let out = a.patched(&reapplied);
    assert_eq!(out["spec"]["template"], old["spec"]["template"], "template unchanged: no new revision");
    assert_eq!(annotation(&out, "confighistory.io/pins"), annotation(&old, "confighistory.io/pins"));
    assert!(f.calls().is_empty(), "no API call on the steady-state path: {:?}", f.calls());

    // A scale is no change either.
    let mut scaled = old.clone();
    scaled["spec"]["replicas"] = json!(5);
    let a = f.mutate_deployment("UPDATE", &scaled, Some(&old)).await;
    assert!(a.patch().is_empty(), "{:?}", a.patch());
    assert!(f.calls().is_empty());
}

/// docs/behaviour.md §6.2: the unchanged rule holds in every mode that acts. A workload pinned in rewrite mode,
/// its namespace switched to enforce or audit, the same manifest re-applied: the pins stay, no API
/// call, and validation lets it through.
#[tokio::test]
async fn switching_modes_never_unpins_an_unchanged_template() {
    for mode in ["enforce", "audit"] {
        let old = deployment("pricing:4.11", &snap("pricing-config", A));
        let f = Fixture::new().source("pricing-config", B).snapshot("pricing-config", A, &[]).workload(&old).namespace_mode(mode);
        let reapplied = deployment("pricing:4.11", "pricing-config");
        let a = f.mutate_deployment("UPDATE", &reapplied, Some(&old)).await;
        let out = a.patched(&reapplied);
        assert_eq!(out["spec"]["template"], old["spec"]["template"], "{mode}: the pins stay");
        let v = f.send("/validate", review("Deployment", "apps", "v1", "UPDATE", Some(&out), Some(&old))).await;
        assert!(v.allowed(), "{mode}: {}", v.message());
        assert!(f.calls().is_empty(), "{mode}: {:?}", f.calls());
        // A changed template is not rewritten in these modes.
        let release = deployment("pricing:4.12", "pricing-config");
        assert!(f
            .mutate_deployment("UPDATE", &release, Some(&old))
            .await
            .patch()
            .iter()
            .all(|op| op["path"] != "/spec/template/spec/volumes/0/configMap/name"));
    }
}

#[tokio::test]
async fn release_takes_the_head_and_releases_a_hold() {
    let old = with_annotations(deployment("pricing:4.11", &snap("pricing-config", A)), &[("confighistory.io/held", "pricing-config")]);
    let f = Fixture::new().source("pricing-config", B).snapshot("pricing-config", A, &[]).workload(&old);
    let new = deployment("pricing:4.12", "pricing-config");
    let a = f.mutate_deployment("UPDATE", &new, Some(&old)).await;
    let out = a.patched(&new);
    assert_eq!(pin_of(&out).0, snap("pricing-config", B));
    assert_eq!(annotation(&out, "confighistory.io/held"), None);
    assert!(f.cluster.get(NS, &snap("pricing-config", B)).is_some());
}

#[tokio::test]
async fn undo_keeps_the_revisions_snapshot_and_holds_it() {
    let rev1 = deployment("pricing:4.11", &snap("pricing-config", A));
    let rev2 = deployment("pricing:4.12", &snap("pricing-config", B));
    let f = Fixture::new()
        .source("pricing-config", B)
        .snapshot("pricing-config", A, &[])
        .snapshot("pricing-config", B, &[])
        .workload(&rev2)
        .revision(&rev1, 1)
        .revision(&rev2, 2);
    // kubectl rollout undo copies revision 1's annotations too: never trusted.
    let undo = with_annotations(rev1.clone(), &[("confighistory.io/pins", "{\"pricing-config\":\"forged\"}")]);
    let a = f.mutate_deployment("UPDATE", &undo, Some(&rev2)).await;
    assert!(a.allowed());
    let out = a.patched(&undo);
    assert_eq!(pin_of(&out).0, snap("pricing-config", A), "old image with old config");
    assert_eq!(annotation(&out, "confighistory.io/held").as_deref(), Some("pricing-config"));
    assert!(annotation(&out, "confighistory.io/pins").unwrap().contains(&content(A).hash()));
    assert!(a.warnings().iter().any(|w| w.contains("held")), "{:?}", a.warnings());

    // A restart afterwards keeps the held pin even though a change is pending.
    f.update_source("pricing-config", B);
    let held = out.clone();
    let mut restarted = held.clone();
    restarted["spec"]["template"]["metadata"]["annotations"] = json!({"kubectl.kubernetes.io/restartedAt": "now"});
    let a = f.mutate_deployment("UPDATE", &restarted, Some(&held)).await;
    let out = a.patched(&restarted);
    assert_eq!(pin_of(&out).0, snap("pricing-config", A));
    assert_eq!(annotation(&out, "confighistory.io/held").as_deref(), Some("pricing-config"));
}

/// docs/behaviour.md §2: the workload records the head a hold was taken at; a change made after the hold
/// moves the held pin (here: a restart joins the fix-forward that is waiting for propagation).
#[tokio::test]
async fn a_hold_records_its_head_and_a_later_change_moves_it() {
    const C: &[(&str, &str)] = &[("mode", "c"), ("rules.discount_path", "/rules")];
    let rev1 = deployment("pricing:4.11", &snap("pricing-config", A));
    let rev2 = deployment("pricing:4.12", &snap("pricing-config", B));
    let f = Fixture::new()
        .source("pricing-config", B)
        .snapshot("pricing-config", A, &[])
        .snapshot("pricing-config", B, &[])
        .workload(&rev2)
        .revision(&rev1, 1)
        .revision(&rev2, 2);
    let held = f.mutate_deployment("UPDATE", &rev1, Some(&rev2)).await.patched(&rev1);
    assert_eq!(annotation(&held, "confighistory.io/held").as_deref(), Some("pricing-config"));
    let heads = annotation(&held, "confighistory.io/held-heads").expect("the head at hold time");
    assert_eq!(heads, format!("{{\"pricing-config\":\"{}\"}}", content(B).hash()));

    // The team fixes the config forward (a change after the hold, waiting for propagation).
    f.update_source("pricing-config", C);
    let mut source = f.cluster.get(NS, "pricing-config").unwrap();
    source["metadata"]["annotations"] =
        json!({"confighistory.io/head": content(C).hash(), "confighistory.io/changed-at": "2026-12-03T09:00:00Z"});
    f.cluster.insert(source);
    let mut restarted = held.clone();
    restarted["spec"]["template"]["metadata"]["annotations"] = json!({"kubectl.kubernetes.io/restartedAt": "now"});
    let out = f.mutate_deployment("UPDATE", &restarted, Some(&held)).await.patched(&restarted);
    assert_eq!(pin_of(&out).0, snap("pricing-config", C), "joins the fix-forward");
    assert_eq!(annotation(&out, "confighistory.io/held"), None);
    assert_eq!(annotation(&out, "confighistory.io/held-heads"), None);
}

/// The source at B, its snapshot of B, and its snapshot of A whose adoption record lists `plain`'s
/// template: `plain` ran with A before confighistory was installed.
fn adopted_before_install(plain: &Value) -> Fixture {
    Fixture::new().source("pricing-config", B).snapshot("pricing-config", A, &[template_hash(&plain["spec"]["template"])]).snapshot(
        "pricing-config",
        B,
        &[],
    )
}

#[tokio::test]
async fn undo_to_a_revision_from_before_the_install_uses_the_adoption_record() {
    let plain = deployment("pricing:4.11", "pricing-config");
    let pinned_b = deployment("pricing:4.12", &snap("pricing-config", B));
    let f = adopted_before_install(&plain).workload(&pinned_b).revision(&plain, 1).revision(&pinned_b, 2);
    let a = f.mutate_deployment("UPDATE", &plain, Some(&pinned_b)).await;
    let out = a.patched(&plain);
    assert_eq!(pin_of(&out), (snap("pricing-config", A), snap("pricing-config", A)));
    assert_eq!(annotation(&out, "confighistory.io/held").as_deref(), Some("pricing-config"));
}

/// docs/behaviour.md §9 with §6.2.1: `rollout undo` admitted while the webhook was away, back to a revision
/// from before the install, names the source plainly. Repair's trigger names the snapshot whose
/// adoption record lists that template: admitting it is the undo it is (that snapshot, held
/// against the head). A trigger naming the head (propagation) still moves it to the head.
#[tokio::test]
async fn a_repair_trigger_on_an_undone_plain_template_takes_the_snapshot_its_adoption_record_names() {
    let plain = deployment("pricing:4.11", "pricing-config");
    let pinned_b = deployment("pricing:4.12", &snap("pricing-config", B));
    let f = adopted_before_install(&plain).workload(&plain).revision(&pinned_b, 2).revision(&plain, 3);
    let trigger =
        |data| with_annotations(plain.clone(), &[("confighistory.io/propagate", &format!("pricing-config={}", content(data).hash()))]);

    let repair = trigger(A);
    let a = f.as_user("/mutate", ME, review("Deployment", "apps", "v1", "UPDATE", Some(&repair), Some(&plain))).await;
    let out = a.patched(&repair);
    assert_eq!(pin_of(&out), (snap("pricing-config", A), snap("pricing-config", A)), "{:?}", a.warnings());
    assert_eq!(annotation(&out, "confighistory.io/held").as_deref(), Some("pricing-config"));
    assert!(annotation(&out, "confighistory.io/held-heads").is_some_and(|h| h.contains(&content(B).hash())));
    assert!(a.warnings().iter().any(|w| w.contains("held on")), "{:?}", a.warnings());
    assert_eq!(annotation(&out, "confighistory.io/propagate"), None, "the trigger is consumed");

    let propagate = trigger(B);
    let out =
        f.as_user("/mutate", ME, review("Deployment", "apps", "v1", "UPDATE", Some(&propagate), Some(&plain))).await.patched(&propagate);
    assert_eq!(pin_of(&out).0, snap("pricing-config", B), "a propagation trigger takes the head");
    assert_eq!(annotation(&out, "confighistory.io/held"), None);

    // Nobody else's trigger counts; and a trigger naming a snapshot no adoption record ties to
    // this template takes the head.
    let out =
        f.as_user("/mutate", "mallory", review("Deployment", "apps", "v1", "UPDATE", Some(&repair), Some(&plain))).await.patched(&repair);
    assert_eq!(pin_of(&out).0, "pricing-config");
    let stranger = Fixture::new().source("pricing-config", B).snapshot("pricing-config", A, &[]).workload(&plain).revision(&plain, 1);
    let out =
        stranger.as_user("/mutate", ME, review("Deployment", "apps", "v1", "UPDATE", Some(&repair), Some(&plain))).await.patched(&repair);
    assert_eq!(pin_of(&out).0, snap("pricing-config", B));
}

#[tokio::test]
async fn partial_edit_joins_a_pending_change_unless_held() {
    let old = deployment("pricing:4.11", &snap("pricing-config", A));
    let f = Fixture::new().snapshot("pricing-config", A, &[]).workload(&old);
    let mut src = configmap("pricing-config", B);
    src["metadata"]["annotations"] =
        json!({"confighistory.io/head": content(B).hash(), "confighistory.io/changed-at": "2026-12-02T10:00:00Z"});
    f.cluster.insert(src);
    let new = deployment("pricing:4.12", &snap("pricing-config", A)); // kubectl set image
    let a = f.mutate_deployment("UPDATE", &new, Some(&old)).await;
    assert_eq!(pin_of(&a.patched(&new)).0, snap("pricing-config", B), "joins the pending change");

    let held_old = with_annotations(old.clone(), &[("confighistory.io/held", "pricing-config")]);
    let a = f.mutate_deployment("UPDATE", &new, Some(&held_old)).await;
    assert_eq!(pin_of(&a.patched(&new)).0, snap("pricing-config", A), "a held pin stays");

    // Once propagated, a partial edit keeps its pin and is told it is not the head.
    let mut src = f.cluster.get(NS, "pricing-config").unwrap();
    src["metadata"]["annotations"]["confighistory.io/propagated"] = json!(content(B).hash());
    f.cluster.insert(src);
    let a = f.mutate_deployment("UPDATE", &new, Some(&old)).await;
    assert_eq!(pin_of(&a.patched(&new)).0, snap("pricing-config", A));
    assert!(a.warnings().iter().any(|w| w.contains("stays on")), "{:?}", a.warnings());
}

/// A suspended Job (queued by a batch scheduler) whose ConfigMap has a pending change
/// gets a scheduling update (nodeSelector): its references are kept as they are, since the API
/// server refuses any other change of a Job's template; nor is the update denied for a plain
/// reference (a Job admitted while the webhook was away), which it could never fix.
#[tokio::test]
async fn a_suspended_jobs_scheduling_update_keeps_its_references() {
    let job = |cm: &str, node_selector: Value| {
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train", "namespace": NS, "uid": "uid-train"},
            "spec": {"suspend": true, "template": {"metadata": {"labels": {"app": "train"}}, "spec": {
                "restartPolicy": "Never", "nodeSelector": node_selector,
                "volumes": [{"name": "config", "configMap": {"name": cm}}],
                "containers": [{"name": "app", "image": "train:1"}]}}}})
    };
    let f = Fixture::new().snapshot("pricing-config", A, &[]);
    let mut src = configmap("pricing-config", B);
    src["metadata"]["annotations"] =
        json!({"confighistory.io/head": content(B).hash(), "confighistory.io/changed-at": "2026-12-02T10:00:00Z"});
    f.cluster.insert(src);
    for cm in [snap("pricing-config", A), "pricing-config".to_owned()] {
        let old = job(&cm, json!({"pool": "any"}));
        let new = job(&cm, json!({"pool": "gpu"}));
        let m = f.send("/mutate", review("Job", "batch", "v1", "UPDATE", Some(&new), Some(&old))).await;
        let out = m.patched(&new);
        assert_eq!(out["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"], json!(cm), "{cm}: {:?}", m.patch());
        let v = f.send("/validate", review("Job", "batch", "v1", "UPDATE", Some(&out), Some(&old))).await;
        assert!(v.allowed(), "{cm}: {}", v.message());
    }
}

#[tokio::test]
async fn a_snapshot_named_by_the_request_is_kept_and_held() {
    let old = deployment("pricing:4.12", &snap("pricing-config", B));
    let f = Fixture::new().source("pricing-config", B).snapshot("pricing-config", A, &[]).snapshot("pricing-config", B, &[]).workload(&old);
    let new = deployment("pricing:4.12", &snap("pricing-config", A));
    let a = f.mutate_deployment("UPDATE", &new, Some(&old)).await;
    let out = a.patched(&new);
    assert_eq!(pin_of(&out).0, snap("pricing-config", A));
    assert_eq!(annotation(&out, "confighistory.io/held").as_deref(), Some("pricing-config"));
}

/// A snapshot the request names that nothing else uses, and that GC has recorded unused past its
/// grace period: a sweep that listed it before the admission must not delete it after (docs/behaviour.md §8).
/// Failed before the fix: the admission kept the name without writing anything, and
/// the sweep's delete (with the resourceVersion it listed) went through.
#[tokio::test]
async fn a_snapshot_named_by_the_request_is_not_swept_while_being_pinned() {
    use confighistory::controller::gc;
    let old = deployment("pricing:4.12", &snap("pricing-config", B));
    let f = Fixture::new().source("pricing-config", B).snapshot("pricing-config", A, &[]).snapshot("pricing-config", B, &[]).workload(&old);
    let chosen = snap("pricing-config", A);
    let mut obj = f.cluster.get(NS, &chosen).unwrap();
    obj["metadata"]["annotations"][confighistory::model::names::LAST_USED] = json!("2025-01-01T00:00:00Z");
    obj["metadata"]["resourceVersion"] = json!("7");
    f.cluster.insert(obj);
    let (reached, resume) = f.cluster.pause(&format!("delete {NS}/{chosen}"), false);
    let sweep = {
        let cluster = f.cluster.clone();
        let now = confighistory::controller::propagate::parse_time_ms("2025-02-01T00:00:00Z").unwrap();
        let settings = gc::Settings { keep: 0, grace: std::time::Duration::from_secs(600) };
        tokio::spawn(async move { gc::sweep_namespace_at(&cluster, NS, settings, false, None, now).await })
    };
    reached.await.expect("the sweep is about to delete it");

    let new = deployment("pricing:4.12", &chosen);
    let a = f.mutate_deployment("UPDATE", &new, Some(&old)).await;
    assert!(a.allowed(), "{}", a.message());
    assert_eq!(pin_of(&a.patched(&new)).0, chosen);
    resume.send(()).unwrap();
    let report = sweep.await.unwrap().unwrap();
    assert!(f.cluster.get(NS, &chosen).is_some(), "pinned, so not swept:\n{report}");
    assert!(report.errors.is_empty(), "{report}");

    // A dry run writes nothing; a snapshot GC has not recorded unused costs a read, no write.
    f.clear_calls();
    let mut r = review("Deployment", "apps", "v1", "UPDATE", Some(&new), Some(&old));
    r["request"]["dryRun"] = json!(true);
    f.send("/mutate", r).await;
    f.mutate_deployment("UPDATE", &new, Some(&old)).await;
    assert!(f.calls().iter().all(|c| c.starts_with("get ")), "{:?}", f.calls());
}

#[tokio::test]
async fn the_propagation_trigger_is_honoured_only_from_confighistory() {
    let old = deployment("pricing:4.11", &snap("pricing-config", A));
    // The current template is, of course, one of the workload's revisions: the trigger must not
    // be mistaken for an undo.
    let f = Fixture::new().source("pricing-config", B).snapshot("pricing-config", A, &[]).workload(&old).revision(&old, 1);
    let trigger = format!("pricing-config={}", content(B).hash());
    let new = with_annotations(old.clone(), &[("confighistory.io/propagate", &trigger)]);

    let a = f.as_user("/mutate", "mallory", review("Deployment", "apps", "v1", "UPDATE", Some(&new), Some(&old))).await;
    let out = a.patched(&new);
    assert_eq!(pin_of(&out).0, snap("pricing-config", A), "nobody else can force a re-pin");
    assert_eq!(annotation(&out, "confighistory.io/propagate"), None);

    let a = f.as_user("/mutate", ME, review("Deployment", "apps", "v1", "UPDATE", Some(&new), Some(&old))).await;
    let out = a.patched(&new);
    assert_eq!(pin_of(&out).0, snap("pricing-config", B));
    assert_eq!(annotation(&out, "confighistory.io/propagate"), None, "the trigger is consumed");

    let held = with_annotations(new.clone(), &[]);
    let held_old = with_annotations(old.clone(), &[("confighistory.io/held", "pricing-config")]);
    let a = f.as_user("/mutate", ME, review("Deployment", "apps", "v1", "UPDATE", Some(&held), Some(&held_old))).await;
    assert_eq!(pin_of(&a.patched(&held)).0, snap("pricing-config", A), "propagation skips held pins");
}

/// A source that stops being versioned is propagated once more, to the plain name
/// (docs/how-it-works.md), held workloads included: a hold keeps a snapshot against later changes of a
/// versioned source, and there are none any more; held on its old snapshot for good, later edits
/// of the ConfigMap would never reach it. The hold goes with the pin.
#[tokio::test]
async fn a_held_workload_goes_back_to_the_plain_name_when_its_source_stops_being_versioned() {
    let old = deployment("pricing:4.11", &snap("pricing-config", A));
    let opted_out = with_annotations(configmap("pricing-config", B), &[("confighistory.io/versioned", "false")]);
    let f = Fixture::new().snapshot("pricing-config", A, &[]).workload(&old);
    f.cluster.insert(opted_out);
    let heads = format!("{{\"pricing-config\":\"{}\"}}", content(B).hash());
    let held_old = with_annotations(old.clone(), &[("confighistory.io/held", "pricing-config"), ("confighistory.io/held-heads", &heads)]);
    let trigger = format!("pricing-config={}", content(B).hash());
    let new = with_annotations(held_old.clone(), &[("confighistory.io/propagate", &trigger)]);
    let a = f.as_user("/mutate", ME, review("Deployment", "apps", "v1", "UPDATE", Some(&new), Some(&held_old))).await;
    let out = a.patched(&new);
    assert_eq!(pin_of(&out), ("pricing-config".to_owned(), "pricing-config".to_owned()), "{:?}", a.warnings());
    assert_eq!(annotation(&out, "confighistory.io/held"), None, "the hold goes with the pin");
}

#[tokio::test]
async fn mutation_is_idempotent_under_reinvocation() {
    let f = Fixture::new().source("pricing-config", A);
    let d = deployment("pricing:4.11", "pricing-config");
    let first = f.mutate_deployment("CREATE", &d, None).await;
    let once = first.patched(&d);
    let second = f.mutate_deployment("CREATE", &once, None).await;
    assert_eq!(second.patched(&once), once, "a second pass over our own output changes nothing");
}

#[tokio::test]
async fn a_missing_source_stays_plain_with_a_warning() {
    let f = Fixture::new();
    let d = deployment("pricing:4.11", "not-yet");
    let a = f.mutate_deployment("CREATE", &d, None).await;
    assert!(a.allowed());
    assert_eq!(pin_of(&a.patched(&d)).0, "not-yet");
    assert!(a.warnings().iter().any(|w| w.contains("does not exist yet")));
}

#[tokio::test]
async fn a_source_named_like_a_snapshot_is_pinned_before_the_watch_sees_it() {
    // `backend12345` is 12 characters of the hash alphabet: the name has a snapshot's shape.
    // Applied together with its first workload, the ConfigMap is in the API server but not yet
    // in the caches: the fresh read, not the shape, decides that it is a source.
    let f = Fixture::new();
    f.cluster.insert(configmap("cache-backend12345", A));
    let d = deployment("cache:1", "cache-backend12345");
    let m = f.mutate_deployment("CREATE", &d, None).await;
    assert!(m.allowed(), "{}", m.message());
    let pinned = m.patched(&d);
    let want = snap("cache-backend12345", A);
    assert_eq!(pin_of(&pinned), (want.clone(), want.clone()));
    let created = f.cluster.get(NS, &want).expect("snapshot created");
    assert_eq!(created["metadata"]["annotations"]["confighistory.io/source-name"], "cache-backend12345");
    let v = f.send("/validate", review("Deployment", "apps", "v1", "CREATE", Some(&pinned), None)).await;
    assert!(v.allowed(), "{}", v.message());
    // Unpinned, the same object is still refused: it names a mutable ConfigMap.
    let v = f.send("/validate", review("Deployment", "apps", "v1", "CREATE", Some(&d), None)).await;
    assert!(!v.allowed());
    assert!(v.message().contains("names mutable ConfigMap cache-backend12345"), "{}", v.message());
}

#[tokio::test]
async fn a_snapshot_the_watch_has_not_delivered_is_read_as_the_snapshot_it_is() {
    // A source over 236 characters: its snapshot's name holds a shortened prefix, so only the
    // snapshot object (its source-name annotation) tells the source. Neither is in the caches:
    // the decision reads the snapshot, learns its source, then reads that, each once.
    let long = format!("pricing-{}", "x".repeat(240));
    let f = Fixture::new();
    f.cluster.insert(configmap(&long, A));
    let c = content(A);
    let name = snapshot::name(&long, &c.hash(), 0);
    f.cluster.insert(snapshot::object(NS, &long, &name, &c, &[]));
    let d = deployment("pricing:4.11", &name);
    let a = f.mutate_deployment("CREATE", &d, None).await;
    assert!(a.allowed(), "{}", a.message());
    let out = a.patched(&d);
    assert_eq!(pin_of(&out), (name.clone(), name.clone()), "the snapshot is kept");
    let pins: Value = serde_json::from_str(&annotation(&out, "confighistory.io/pins").expect("pins")).unwrap();
    assert_eq!(pins, json!({long.as_str(): c.hash()}), "pinned under its full source name");
    let reads: Vec<String> = f.calls().into_iter().filter(|c| c.starts_with("get ")).collect();
    let mut distinct = reads.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(reads.len(), distinct.len(), "no name read twice: {reads:?}");
    assert!(reads.contains(&format!("get {NS}/{long}")), "{reads:?}");
}

#[tokio::test]
async fn immutable_unversioned_and_ignored_are_left_alone() {
    let f = Fixture::new();
    let mut imm = configmap("static", A);
    imm["immutable"] = json!(true);
    f.cluster.insert(imm);
    let mut flags = configmap("flags", A);
    flags["metadata"]["annotations"] = json!({"confighistory.io/versioned": "false"});
    f.cluster.insert(flags);
    for name in ["static", "flags"] {
        let d = deployment("x:1", name);
        let a = f.mutate_deployment("CREATE", &d, None).await;
        assert_eq!(pin_of(&a.patched(&d)).0, name);
    }
    let f = f.source("pricing-config", A);
    let ignored = with_annotations(deployment("x:1", "pricing-config"), &[("confighistory.io/ignore", "true")]);
    let a = f.mutate_deployment("CREATE", &ignored, None).await;
    assert!(a.patch().is_empty());
}

#[tokio::test]
async fn cronjobs_on_batch_v1beta1_are_pinned() {
    let f = Fixture::new().source("pricing-config", A);
    let cj = json!({"apiVersion": "batch/v1beta1", "kind": "CronJob", "metadata": {"name": "report", "namespace": NS},
        "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": {"spec": {
            "containers": [{"name": "r", "image": "r:1", "envFrom": [{"configMapRef": {"name": "pricing-config"}}]}]}}}}}});
    let a = f.send("/mutate", review("CronJob", "batch", "v1beta1", "CREATE", Some(&cj), None)).await;
    let out = a.patched(&cj);
    assert_eq!(
        out.pointer("/spec/jobTemplate/spec/template/spec/containers/0/envFrom/0/configMapRef/name").unwrap(),
        &json!(snap("pricing-config", A))
    );
}

// ---------- §5 collisions, faults, dry run ----------

#[tokio::test]
async fn a_squatted_snapshot_name_is_never_reused() {
    let f = Fixture::new().source("pricing-config", A);
    let squatter = configmap(&snap("pricing-config", A), &[("evil", "1")]);
    f.cluster.insert(squatter.clone());
    let d = deployment("pricing:4.11", "pricing-config");
    let a = f.mutate_deployment("CREATE", &d, None).await;
    let next = snapshot::name("pricing-config", &content(A).hash(), 1);
    assert_eq!(pin_of(&a.patched(&d)).0, next);
    assert!(a.warnings().iter().any(|w| w.contains("taken")), "{:?}", a.warnings());
    assert_eq!(f.cluster.get(NS, &snap("pricing-config", A)).unwrap(), squatter, "squatter untouched");
    assert!(snapshot::validate(&f.cluster.get(NS, &next).unwrap()).is_ok());
}

/// The collision is said on the source too: one Event naming the squatted name and
/// the one the snapshot took, written after the answer; a dry run writes none (docs/behaviour.md §6.5).
#[tokio::test]
async fn a_collision_records_one_event_on_the_source_and_a_dry_run_none() {
    let f = Fixture::new().source("pricing-config", A);
    let squatted = snap("pricing-config", A);
    f.cluster.insert(configmap(&squatted, &[("evil", "1")]));
    let d = deployment("pricing:4.11", "pricing-config");
    let mut dry = review("Deployment", "apps", "v1", "CREATE", Some(&d), None);
    dry["request"]["dryRun"] = json!(true);
    let a = f.send("/mutate", dry).await;
    assert!(a.warnings().iter().any(|w| w.contains("taken")), "the dry run meets the collision: {:?}", a.warnings());

    f.mutate_deployment("CREATE", &d, None).await;
    let next = snapshot::name("pricing-config", &content(A).hash(), 1);
    for _ in 0..200 {
        if !f.cluster.events().is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    let events = f.cluster.events();
    assert_eq!(events.len(), 1, "one Event, none for the dry run: {events:?}");
    let e = &events[0];
    assert_eq!((e.reason, e.action, e.warning), ("SnapshotCollision", "Snapshot", true));
    let r = &e.regarding;
    assert_eq!(
        (r.kind.as_str(), r.namespace.as_str(), r.name.as_str(), r.uid.as_str()),
        ("ConfigMap", NS, "pricing-config", "uid-pricing-config")
    );
    assert!(e.note.contains(&format!("{squatted} (")) && e.note.contains(&format!("the snapshot is {next}")), "{}", e.note);
}

#[tokio::test]
async fn api_server_failure_denies_with_a_retry_hint() {
    let f = Fixture::new().source("pricing-config", A);
    *f.cluster.fail.lock().unwrap() =
        Some(("", ApiError { code: None, reason: "Unavailable".into(), message: "connection refused".into() }));
    let a = f.mutate_deployment("CREATE", &deployment("x:1", "pricing-config"), None).await;
    assert!(!a.allowed());
    assert!(a.message().contains("connection refused") && a.message().contains("retrying is safe"), "{}", a.message());
}

fn unavailable() -> Option<(&'static str, ApiError)> {
    Some(("", ApiError { code: None, reason: "Unavailable".into(), message: "connection refused".into() }))
}

#[tokio::test]
async fn an_undo_goes_through_when_the_api_server_fails() {
    let rev1 = deployment("pricing:4.11", &snap("pricing-config", A));
    let rev2 = deployment("pricing:4.12", &snap("pricing-config", B));
    let f = Fixture::new().source("pricing-config", B).workload(&rev2).revision(&rev1, 1).revision(&rev2, 2);
    let mut source = configmap("pricing-config", B);
    source["metadata"]["annotations"] = json!({"confighistory.io/head": content(B).hash()});
    f.state.write().apply_configmap(&source);
    *f.cluster.fail.lock().unwrap() = unavailable();
    let a = f.mutate_deployment("UPDATE", &rev1, Some(&rev2)).await;
    assert!(a.allowed(), "{}", a.message());
    let out = a.patched(&rev1);
    assert_eq!(pin_of(&out).0, snap("pricing-config", A), "the revision's own snapshot, as sent");
    assert_eq!(annotation(&out, "confighistory.io/held").as_deref(), Some("pricing-config"), "held, judged from the caches");
    assert!(a.warnings().iter().any(|w| w.contains("left as sent") && w.contains("connection refused")), "{:?}", a.warnings());
    let v = f.send("/validate", review("Deployment", "apps", "v1", "UPDATE", Some(&out), Some(&rev2))).await;
    assert!(v.allowed(), "{}", v.message());
    // The same failure denies a release, with a retry hint.
    let release = deployment("pricing:4.13", "pricing-config");
    assert!(!f.mutate_deployment("UPDATE", &release, Some(&rev2)).await.allowed());
}

#[tokio::test]
async fn an_undo_whose_snapshot_cannot_be_written_goes_through_as_sent() {
    // Revision 1 predates confighistory and has no adoption record: the undo goes to the head,
    // whose snapshot a full quota forbids.
    let rev1 = deployment("pricing:4.11", "pricing-config");
    let rev2 = deployment("pricing:4.12", &snap("pricing-config", B));
    let f = Fixture::new().source("pricing-config", A).workload(&rev2).revision(&rev1, 1).revision(&rev2, 2);
    *f.cluster.fail.lock().unwrap() = Some((
        "create",
        ApiError { code: Some(403), reason: "Forbidden".into(), message: "exceeded quota: cm, requested: configmaps=1".into() },
    ));
    let a = f.mutate_deployment("UPDATE", &rev1, Some(&rev2)).await;
    assert!(a.allowed(), "{}", a.message());
    assert_eq!(pin_of(&a.patched(&rev1)), ("pricing-config".to_owned(), "pricing-config".to_owned()));
    assert!(a.warnings().iter().any(|w| w.contains("left as sent") && w.contains("exceeded quota")), "{:?}", a.warnings());
}

#[tokio::test]
async fn a_cronjobs_job_is_never_denied_when_the_api_server_fails() {
    let (cronjob, job) = cronjob_and_job(&snap("pricing-config", A));
    let f = Fixture::new().source("pricing-config", A).snapshot("pricing-config", A, &[]);
    f.state.write().apply_workload(Kind::CronJob, &cronjob);
    *f.cluster.fail.lock().unwrap() = unavailable();
    let m = f.send("/mutate", review("Job", "batch", "v1", "CREATE", Some(&job), None)).await;
    assert!(m.allowed(), "{}", m.message());
    let v = f.send("/validate", review("Job", "batch", "v1", "CREATE", Some(&job), None)).await;
    assert!(v.allowed(), "{}", v.message());
    assert!(v.warnings().iter().any(|w| w.contains("connection refused")), "{:?}", v.warnings());
}

#[tokio::test]
async fn quota_refusals_are_explained() {
    let f = Fixture::new().source("pricing-config", A);
    *f.cluster.fail.lock().unwrap() = Some((
        "create",
        ApiError { code: Some(403), reason: "Forbidden".into(), message: "exceeded quota: cm, requested: count/configmaps=1".into() },
    ));
    let a = f.mutate_deployment("CREATE", &deployment("x:1", "pricing-config"), None).await;
    assert!(!a.allowed());
    assert!(a.message().contains("exceeded quota") && a.message().contains("ResourceQuota"), "{}", a.message());
}

#[tokio::test]
async fn a_full_quota_does_not_deny_a_release_whose_snapshot_exists() {
    let old = deployment("pricing:4.11", &snap("pricing-config", A));
    let f = Fixture::new().source("pricing-config", A).snapshot("pricing-config", A, &[]).workload(&old);
    // The API server's quota admission refuses any ConfigMap POST, even of a name that exists.
    *f.cluster.fail.lock().unwrap() = Some((
        "create",
        ApiError { code: Some(403), reason: "Forbidden".into(), message: "exceeded quota: cm, requested: configmaps=1".into() },
    ));
    let new = deployment("pricing:4.12", "pricing-config");
    let a = f.mutate_deployment("UPDATE", &new, Some(&old)).await;
    assert!(a.allowed(), "{}", a.message());
    assert_eq!(pin_of(&a.patched(&new)).0, snap("pricing-config", A));
    assert!(!f.calls().iter().any(|c| c.starts_with("create")), "read before create: {:?}", f.calls());
}

/// A writer that records its own adoption between our read and our patch (another replica's
/// admission, the controller's resync): its record must survive ours.
struct RacingAdopter {
    inner: MemoryCluster,
    raced: std::sync::atomic::AtomicBool,
}

impl confighistory::cluster::Cluster for RacingAdopter {
    fn get_source<'a>(
        &'a self,
        ns: &'a str,
        id: &'a SourceId,
    ) -> futures::future::BoxFuture<'a, confighistory::cluster::Result<Option<Value>>> {
        self.inner.get_source(ns, id)
    }
    fn create_source<'a>(
        &'a self,
        ns: &'a str,
        kind: SourceKind,
        obj: &'a Value,
        dry_run: bool,
    ) -> futures::future::BoxFuture<'a, confighistory::cluster::Result<confighistory::cluster::Created>> {
        self.inner.create_source(ns, kind, obj, dry_run)
    }
    fn patch_source<'a>(
        &'a self,
        ns: &'a str,
        id: &'a SourceId,
        patch: &'a Value,
    ) -> futures::future::BoxFuture<'a, confighistory::cluster::Result<()>> {
        Box::pin(async move {
            if !self.raced.swap(true, std::sync::atomic::Ordering::SeqCst) {
                let mut other = self.inner.get(ns, &id.name).unwrap();
                other["metadata"]["annotations"][confighistory::model::names::ADOPTED] = json!("t-other");
                other["metadata"]["resourceVersion"] = json!("2");
                self.inner.insert(other);
            }
            self.inner.patch_source(ns, id, patch).await
        })
    }
}

#[tokio::test]
async fn adoption_records_written_concurrently_are_all_kept() {
    let c = content(A);
    let name = snapshot::name("pricing-config", &c.hash(), 0);
    let mut obj = snapshot::object(NS, "pricing-config", &name, &c, &[]);
    obj["metadata"]["resourceVersion"] = json!("1");
    let cluster = RacingAdopter { inner: MemoryCluster::default(), raced: Default::default() };
    cluster.inner.insert(obj);
    let (got, _) = confighistory::store::ensure(
        &cluster,
        NS,
        &SourceId::configmap("pricing-config"),
        &c,
        &["t-mine".to_owned()],
        &Default::default(),
        false,
    )
    .await
    .unwrap();
    assert_eq!(got, name);
    let adopted = annotation(&cluster.inner.get(NS, &name).unwrap(), confighistory::model::names::ADOPTED).unwrap();
    assert_eq!(adopted, "t-other,t-mine", "the concurrent record is kept");
}

#[tokio::test]
async fn dry_run_answers_the_same_and_writes_nothing() {
    let f = Fixture::new().source("pricing-config", A);
    let d = deployment("pricing:4.11", "pricing-config");
    let mut r = review("Deployment", "apps", "v1", "CREATE", Some(&d), None);
    r["request"]["dryRun"] = json!(true);
    let a = f.send("/mutate", r).await;
    assert_eq!(pin_of(&a.patched(&d)).0, snap("pricing-config", A));
    assert!(f.cluster.get(NS, &snap("pricing-config", A)).is_none(), "no snapshot written");
    assert!(f.calls().iter().any(|c| c.contains("(dry run)")));
}

// ---------- §6.1 sources ----------

#[tokio::test]
async fn unrelated_configmap_writes_are_answered_from_memory() {
    let f = Fixture::new();
    let cm = configmap("leader-lock", A);
    let a = f.send("/mutate", review("ConfigMap", "", "v1", "UPDATE", Some(&cm), Some(&cm))).await;
    assert!(a.allowed() && a.patch().is_empty() && a.warnings().is_empty());
    assert!(f.calls().is_empty());
}

/// The incident's ConfigMap: one key, `config.yaml`, a setting renamed inside it.
#[tokio::test]
async fn source_update_warns_about_settings_renamed_inside_a_value() {
    const A_YAML: &str = "currency: EUR\ndiscount_rules_path: /etc/pricing/discounts.yaml\n";
    const B_YAML: &str = "currency: EUR\nrules:\n  discount_path: /etc/pricing/discounts.yaml\n";
    let plain = deployment("pricing:4.11", "pricing-config");
    let f = Fixture::new().source("pricing-config", &[("config.yaml", A_YAML)]).workload(&plain);
    let (old, new) = (configmap("pricing-config", &[("config.yaml", A_YAML)]), configmap("pricing-config", &[("config.yaml", B_YAML)]));
    let a = f.send("/mutate", review("ConfigMap", "", "v1", "UPDATE", Some(&new), Some(&old))).await;
    assert!(a.allowed());
    assert_eq!(
        a.warnings(),
        vec![
            "pricing-config: values changed, same keys",
            "pricing-config: config.yaml: settings removed [discount_rules_path], added [rules.discount_path]",
        ]
    );
    // A value that is no document (or keeps its settings) adds nothing to the key warning.
    let (old, new) = (
        configmap("pricing-config", &[("config.yaml", A_YAML)]),
        configmap("pricing-config", &[("config.yaml", "currency: USD\ndiscount_rules_path: /x\n")]),
    );
    let a = f.send("/mutate", review("ConfigMap", "", "v1", "UPDATE", Some(&new), Some(&old))).await;
    assert_eq!(a.warnings(), vec!["pricing-config: values changed, same keys"]);
}

/// YAML aliases replaying an 8 KiB scalar as a key 7,380 times: about 60 MB of keys and paths
/// produced from 8 KiB read before the parse was bounded in bytes produced. The
/// settings are not compared; the key warning stays.
#[tokio::test]
async fn a_yaml_alias_amplifier_in_a_source_update_is_not_compared() {
    let nine = |a: &str| vec![format!("*{a}"); 9].join(", ");
    let doc = |m: &str| {
        format!(
            "s: &s \"\\t{}\"\n{m}: &m {{*s : 1}}\nl1: &l1 [{}]\nl2: &l2 [{}]\nl3: &l3 [{}]\nl4: [{}]\n",
            "x".repeat(8 * 1024),
            nine("m"),
            nine("l1"),
            nine("l2"),
            nine("l3")
        )
    };
    let (a, b) = (doc("m"), doc("n"));
    let plain = deployment("pricing:4.11", "pricing-config");
    let f = Fixture::new().source("pricing-config", &[("config.yaml", &a)]).workload(&plain);
    let (old, new) = (configmap("pricing-config", &[("config.yaml", &a)]), configmap("pricing-config", &[("config.yaml", &b)]));
    let started = std::time::Instant::now();
    let answer = f.send("/mutate", review("ConfigMap", "", "v1", "UPDATE", Some(&new), Some(&old))).await;
    assert!(answer.allowed());
    assert_eq!(answer.warnings(), vec!["pricing-config: values changed, same keys"]);
    assert!(started.elapsed() < std::time::Duration::from_secs(2), "{:?}", started.elapsed());
}

#[tokio::test]
async fn source_update_tracks_head_warns_keys_and_adopts_outgoing_content() {
    let plain = deployment("pricing:4.11", "pricing-config");
    let f = Fixture::new().source("pricing-config", A).workload(&plain);
    let old = configmap("pricing-config", A);
    let new = configmap("pricing-config", B);
    let a = f.send("/mutate", review("ConfigMap", "", "v1", "UPDATE", Some(&new), Some(&old))).await;
    let out = a.patched(&new);
    assert_eq!(annotation(&out, "confighistory.io/head"), Some(content(B).hash()));
    assert!(annotation(&out, "confighistory.io/changed-at").is_some());
    assert_eq!(a.warnings(), vec!["pricing-config: keys removed [discount_rules_path], added [rules.discount_path]"]);
    let kept = f.cluster.get(NS, &snap("pricing-config", A)).expect("outgoing content kept");
    assert_eq!(annotation(&kept, "confighistory.io/adopted-templates"), Some(template_hash(&plain["spec"]["template"])));
    assert_eq!(out["data"], new["data"], "the source itself is allowed as sent");

    // Same content again: head stays, changed-at carried over, nothing written.
    f.clear_calls();
    let again = f.send("/mutate", review("ConfigMap", "", "v1", "UPDATE", Some(&new), Some(&out))).await;
    let out2 = again.patched(&new);
    assert_eq!(annotation(&out2, "confighistory.io/changed-at"), annotation(&out, "confighistory.io/changed-at"));
    assert!(f.calls().is_empty());
}

/// docs/behaviour.md §5.2, §6.1.1: a source's content change records who made it (the admitted
/// request's username, never its object's word), with what field manager and when; the snapshot
/// of that content copies them when it is made (a release by someone else names the writer of
/// the config, not the releaser); content from before confighistory says so instead of a name.
#[tokio::test]
async fn who_wrote_a_content_and_when_reaches_its_snapshot() {
    let plain = deployment("pricing:4.11", "pricing-config");
    let f = Fixture::new().source("pricing-config", A).workload(&plain);
    let (old, new) =
        (configmap("pricing-config", A), with_annotations(configmap("pricing-config", B), &[("confighistory.io/changed-by", "mallory")]));
    let mut edit = review("ConfigMap", "", "v1", "UPDATE", Some(&new), Some(&old));
    edit["request"]["options"] = json!({"kind": "UpdateOptions", "apiVersion": "meta.k8s.io/v1", "fieldManager": "kubectl-edit"});
    let a = f.as_user("/mutate", "bob", edit).await;
    let stored = a.patched(&new);
    assert_eq!(annotation(&stored, "confighistory.io/changed-by").as_deref(), Some("bob"), "userInfo, not the object's claim");
    assert_eq!(annotation(&stored, "confighistory.io/changed-with").as_deref(), Some("kubectl-edit"));
    let at = annotation(&stored, "confighistory.io/changed-at").expect("changed-at");
    // The outgoing content predates confighistory's tracking: said, not guessed.
    let kept = f.cluster.get(NS, &snap("pricing-config", A)).expect("outgoing content kept");
    assert_eq!(annotation(&kept, "confighistory.io/unattributed").as_deref(), Some("before confighistory"));
    assert_eq!(annotation(&kept, "confighistory.io/changed-by"), None);

    // The API server stores bob's write; carol releases the workload: the snapshot names bob.
    f.cluster.insert(stored.clone());
    f.state.write().apply_configmap(&stored);
    let release = deployment("pricing:4.12", "pricing-config");
    let a = f.as_user("/mutate", "carol", review("Deployment", "apps", "v1", "UPDATE", Some(&release), Some(&plain))).await;
    assert!(a.allowed(), "{}", a.message());
    let made = f.cluster.get(NS, &snap("pricing-config", B)).expect("snapshot of bob's content");
    assert_eq!(annotation(&made, "confighistory.io/changed-by").as_deref(), Some("bob"));
    assert_eq!(annotation(&made, "confighistory.io/changed-with").as_deref(), Some("kubectl-edit"));
    assert_eq!(annotation(&made, "confighistory.io/changed-at"), Some(at.clone()));
    assert_eq!(annotation(&made, "confighistory.io/unattributed"), None);

    // Re-applying the same content (claiming another author) changes nothing of it.
    let claim = with_annotations(configmap("pricing-config", B), &[("confighistory.io/changed-by", "dave")]);
    let a = f.as_user("/mutate", "dave", review("ConfigMap", "", "v1", "UPDATE", Some(&claim), Some(&stored))).await;
    let again = a.patched(&claim);
    assert_eq!(annotation(&again, "confighistory.io/changed-by").as_deref(), Some("bob"), "carried over from oldObject");
    assert_eq!(annotation(&again, "confighistory.io/changed-with").as_deref(), Some("kubectl-edit"));
    assert_eq!(annotation(&again, "confighistory.io/changed-at"), Some(at));

    // A change without a field manager records none; the earlier one does not linger.
    let c = configmap("pricing-config", &[("mode", "c")]);
    let a = f.as_user("/mutate", "erin", review("ConfigMap", "", "v1", "UPDATE", Some(&c), Some(&stored))).await;
    let out = a.patched(&c);
    assert_eq!(annotation(&out, "confighistory.io/changed-by").as_deref(), Some("erin"));
    assert_eq!(annotation(&out, "confighistory.io/changed-with"), None);
}

/// docs/install.md: with `--record-authors=false` no username is recorded (the field manager
/// and the time still are), and one recorded before goes at the next write.
#[tokio::test]
async fn recording_authors_off_records_no_username() {
    let plain = deployment("pricing:4.11", "pricing-config");
    let mut f = Fixture::new().source("pricing-config", A).workload(&plain);
    f.policy.record_authors = false;
    let old = with_annotations(
        configmap("pricing-config", A),
        &[
            ("confighistory.io/head", &content(A).hash()),
            ("confighistory.io/changed-at", "2026-01-01T00:00:00Z"),
            ("confighistory.io/changed-by", "bob"),
        ],
    );
    for (what, new) in [("a change", configmap("pricing-config", B)), ("no change", old.clone())] {
        let mut edit = review("ConfigMap", "", "v1", "UPDATE", Some(&new), Some(&old));
        edit["request"]["options"] = json!({"fieldManager": "kubectl-client-side-apply"});
        let out = f.as_user("/mutate", "bob", edit).await.patched(&new);
        assert_eq!(annotation(&out, "confighistory.io/changed-by"), None, "{what}");
        assert!(annotation(&out, "confighistory.io/changed-at").is_some(), "{what}");
        if what == "a change" {
            assert_eq!(annotation(&out, "confighistory.io/changed-with").as_deref(), Some("kubectl-client-side-apply"));
        }
    }
}

/// docs/reliability.md: a review forged to the port may claim any username in its userInfo, but
/// the answer is all it gets: no write of the source is stored, and what confighistory writes
/// (the outgoing content's snapshot) takes its author from the stored object, so the claimed
/// name is recorded nowhere.
#[tokio::test]
async fn a_forged_reviews_username_is_recorded_nowhere() {
    let plain = deployment("pricing:4.11", "pricing-config");
    let stored = with_annotations(
        configmap("pricing-config", A),
        &[
            ("confighistory.io/head", &content(A).hash()),
            ("confighistory.io/changed-at", "2026-01-01T00:00:00Z"),
            ("confighistory.io/changed-by", "bob"),
        ],
    );
    let f = Fixture::new().workload(&plain);
    f.cluster.insert(stored.clone());
    f.state.write().apply_configmap(&stored);
    let forged = configmap("pricing-config", B);
    let mut review = review("ConfigMap", "", "v1", "UPDATE", Some(&forged), Some(&stored));
    review["request"]["options"] = json!({"fieldManager": "forged-manager"});
    let a = f.as_user("/mutate", "mallory", review).await;
    assert!(a.allowed());
    assert_eq!(annotation(&a.patched(&forged), "confighistory.io/changed-by").as_deref(), Some("mallory"), "the answer only");
    let kept = f.cluster.get(NS, &snap("pricing-config", A)).expect("the stored outgoing content kept");
    assert_eq!(annotation(&kept, "confighistory.io/changed-by").as_deref(), Some("bob"), "the stored object's author");
    let everything = serde_json::to_string(&*f.cluster.objects.lock().unwrap().values().collect::<Vec<_>>()).unwrap();
    assert!(!everything.contains("mallory") && !everything.contains("forged-manager"), "{everything}");
}

/// A workload annotated `confighistory.io/ignore` is left alone in rewrite mode, so it
/// is no plain-name user of its ConfigMap: an edit keeps no outgoing content for it (a snapshot
/// whose adoption record GC would keep while it lives), and a full quota does not deny the edit.
#[tokio::test]
async fn an_ignored_workload_is_not_a_user_whose_outgoing_content_is_kept() {
    let ignored = with_annotations(deployment("pricing:4.11", "pricing-config"), &[("confighistory.io/ignore", "true")]);
    let f = Fixture::new().source("pricing-config", A).workload(&ignored);
    *f.cluster.fail.lock().unwrap() = Some((
        "create",
        ApiError { code: Some(403), reason: "Forbidden".into(), message: "exceeded quota: cm, requested: configmaps=1".into() },
    ));
    let (old, new) = (configmap("pricing-config", A), configmap("pricing-config", B));
    let a = f.send("/mutate", review("ConfigMap", "", "v1", "UPDATE", Some(&new), Some(&old))).await;
    assert!(a.allowed(), "{}", a.message());
    assert_eq!(annotation(&a.patched(&new), "confighistory.io/head"), Some(content(B).hash()), "still tracked");
    assert!(f.calls().is_empty(), "nothing read or written for it: {:?}", f.calls());

    // Creating the ConfigMap it reads: no user in audit mode; enforce mode does not exempt it.
    for (mode, allowed, warned) in [("audit", true, false), ("enforce", false, false)] {
        let f = Fixture::new().workload(&ignored).namespace_mode(mode);
        let a = f.send("/mutate", review("ConfigMap", "", "v1", "CREATE", Some(&new), None)).await;
        assert_eq!((a.allowed(), !a.warnings().is_empty()), (allowed, warned), "{mode}: {} {:?}", a.message(), a.warnings());
    }
}

/// `changed-at` is the API server's time, not the admitting replica's: the leader
/// counts the settle window from it on the API server's clock too, so a replica whose clock is off
/// neither shortens nor stretches the window. Failed before: the replica's own clock was written.
#[tokio::test]
async fn changed_at_is_the_api_servers_time() {
    use confighistory::cluster::clock::{Clock, Sample};
    use confighistory::controller::propagate::parse_time_ms;
    let plain = deployment("pricing:4.11", "pricing-config");
    let f = Fixture::new().source("pricing-config", A).workload(&plain);
    // This replica's clock reads 2026-12-03T10:00:00Z; the API server's said 10:00:30.
    let local = parse_time_ms("2026-12-03T10:00:00Z").unwrap();
    let clock = Arc::new(Clock::with_local(move || local));
    clock.record(Sample { sent_ms: local - 20, received_ms: local, date_ms: local + 30_000 });
    let ctx = confighistory::context::Context::synced(f.policy.clone(), f.state.clone(), Arc::new(f.cluster.clone())).with_clock(clock);
    let app = Arc::new(App::new(Arc::new(ctx)));
    let (old, new) = (configmap("pricing-config", A), configmap("pricing-config", B));
    let body = serde_json::to_vec(&review("ConfigMap", "", "v1", "UPDATE", Some(&new), Some(&old))).unwrap();
    let req = HttpRequest::post("/mutate").header("content-type", "application/json").body(Body::from(body)).unwrap();
    let resp = webhook::router(app).oneshot(req).await.unwrap();
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX).await.unwrap();
    let a = Answer { status: StatusCode::OK, body: serde_json::from_slice(&bytes).unwrap(), text: String::new() };
    let changed_at = annotation(&a.patched(&new), "confighistory.io/changed-at").expect("changed-at");
    let at = parse_time_ms(&changed_at).unwrap();
    assert!((local + 29_000..=local + 31_000).contains(&at), "{changed_at}: the API server's time, within its uncertainty");
}

/// Metrics name namespaces: the admission port, which the API server (and, without
/// `networkPolicy.apiServerCIDRs`, any pod) reaches, does not serve them; the health port does,
/// and the chart's NetworkPolicy opens it to the scraper's namespaces only.
#[tokio::test]
async fn the_admission_port_serves_no_metrics() {
    let f = Fixture::new();
    for path in ["/metrics", "/readyz", "/livez"] {
        let req = HttpRequest::get(path).body(Body::empty()).unwrap();
        let resp = webhook::router(f.app()).oneshot(req).await.unwrap();
        assert_eq!(resp.status(), StatusCode::NOT_FOUND, "{path} on the admission port");
        let req = HttpRequest::get(path).body(Body::empty()).unwrap();
        let resp = webhook::health_router(f.app()).oneshot(req).await.unwrap();
        assert_ne!(resp.status(), StatusCode::NOT_FOUND, "{path} on the health port");
    }
}

/// docs/behaviour.md §7: a change is an edit, not a content. A → B, then back to A before B was propagated:
/// the marker that says "A was propagated" belongs to the first change to A, not to this one.
#[tokio::test]
async fn a_revert_is_a_change_of_its_own() {
    let f = Fixture::new().source("pricing-config", A).workload(&deployment("x:1", &snap("pricing-config", B)));
    let (a, b) = (content(A).hash(), content(B).hash());
    let old = with_annotations(
        configmap("pricing-config", B),
        &[("confighistory.io/head", &b), ("confighistory.io/changed-at", "2026-12-03T09:00:00Z"), ("confighistory.io/propagated", &a)],
    );
    let reverted = configmap("pricing-config", A);
    for user in ["alice", ME] {
        let r = f.as_user("/mutate", user, review("ConfigMap", "", "v1", "UPDATE", Some(&reverted), Some(&old))).await;
        let out = r.patched(&reverted);
        assert_eq!(annotation(&out, "confighistory.io/head"), Some(a.clone()));
        assert_eq!(annotation(&out, "confighistory.io/propagated"), None, "{user}: the revert waits for propagation");
        // A second pass over the first one's output changes nothing more.
        let again = f.as_user("/mutate", user, review("ConfigMap", "", "v1", "UPDATE", Some(&out), Some(&old))).await;
        assert!(again.patch().is_empty(), "{user}: {:?}", again.patch());
    }
    // An edit of the metadata only keeps the marker; confighistory's own record of it is taken.
    let relabelled = with_annotations(old.clone(), &[("team", "pricing")]);
    let r = f.send("/mutate", review("ConfigMap", "", "v1", "UPDATE", Some(&relabelled), Some(&old))).await;
    assert_eq!(annotation(&r.patched(&relabelled), "confighistory.io/propagated"), Some(a.clone()));
    let recorded = with_annotations(old.clone(), &[("confighistory.io/propagated", &b)]);
    let r = f.as_user("/mutate", ME, review("ConfigMap", "", "v1", "UPDATE", Some(&recorded), Some(&old))).await;
    assert_eq!(annotation(&r.patched(&recorded), "confighistory.io/propagated"), Some(b));
}

/// docs/behaviour.md §7: a source that stops being versioned is a change of its own (propagated once more, to
/// the plain name); later writes of it are no business of confighistory's.
#[tokio::test]
async fn opting_a_source_out_of_versioning_is_a_change() {
    let f = Fixture::new().source("pricing-config", A).workload(&deployment("x:1", &snap("pricing-config", A)));
    let a = content(A).hash();
    let old = with_annotations(
        configmap("pricing-config", A),
        &[("confighistory.io/head", &a), ("confighistory.io/changed-at", "2026-12-03T09:00:00Z"), ("confighistory.io/propagated", &a)],
    );
    let opted_out = with_annotations(old.clone(), &[("confighistory.io/versioned", "false")]);
    let r = f.send("/mutate", review("ConfigMap", "", "v1", "UPDATE", Some(&opted_out), Some(&old))).await;
    let out = r.patched(&opted_out);
    assert_ne!(annotation(&out, "confighistory.io/changed-at").as_deref(), Some("2026-12-03T09:00:00Z"));
    assert_eq!(annotation(&out, "confighistory.io/propagated"), None);
    let edited = with_annotations(configmap("pricing-config", B), &[("confighistory.io/versioned", "false")]);
    let r = f.send("/mutate", review("ConfigMap", "", "v1", "UPDATE", Some(&edited), Some(&out))).await;
    assert!(r.patch().is_empty(), "{:?}", r.patch());
}

/// docs/behaviour.md §7 with the admin's selector, which a restart changes without any object saying so: a
/// source the selector now excludes, its exclusion not yet recorded, changes versioning on its
/// next write (the owner's, or the controller's no-op touch): recorded, later writes are live
/// updates; the selector gone, the record is dropped and that is a change again. A record a
/// client forges on a versioned source is dropped and changes nothing, and a ConfigMap the
/// selector excluded from the start (no head) is not a source at all.
#[tokio::test]
async fn the_admins_selector_changing_a_sources_versioning_is_a_change_on_its_next_write() {
    let mut other = deployment("y:1", "ca-bundle");
    other["metadata"]["name"] = json!("other");
    other["metadata"]["uid"] = json!("uid-other");
    let mut f = Fixture::new().source("pricing-config", A).workload(&deployment("x:1", &snap("pricing-config", A))).workload(&other);
    f.policy.excluded_sources = "ca-bundle=true".parse().unwrap();
    let a = content(A).hash();
    let before = "2026-12-03T09:00:00Z";
    let mut old = with_annotations(
        configmap("pricing-config", A),
        &[("confighistory.io/head", &a), ("confighistory.io/changed-at", before), ("confighistory.io/propagated", &a)],
    );
    old["metadata"]["labels"] = json!({"ca-bundle": "true"});
    let out = touch(&f, &old).await;
    assert_ne!(annotation(&out, "confighistory.io/changed-at").as_deref(), Some(before), "a change, first seen now");
    assert_eq!(annotation(&out, "confighistory.io/propagated"), None);
    assert_eq!(annotation(&out, "confighistory.io/excluded-by-selector").as_deref(), Some("true"));

    let mut edited = out.clone();
    edited["data"] = json!({"mode": "live"});
    let r = f.send("/mutate", review("ConfigMap", "", "v1", "UPDATE", Some(&edited), Some(&out))).await;
    assert!(r.patch().is_empty(), "recorded: a live update: {:?}", r.patch());

    // Propagated since, a while ago.
    let out = with_annotations(out, &[("confighistory.io/changed-at", before), ("confighistory.io/propagated", &a)]);
    f.policy.excluded_sources = Default::default();
    let back = touch(&f, &out).await;
    assert_ne!(annotation(&back, "confighistory.io/changed-at").as_deref(), Some(before), "versioned again: a change");
    assert_eq!(annotation(&back, "confighistory.io/propagated"), None);
    assert_eq!(annotation(&back, "confighistory.io/excluded-by-selector"), None);

    let back = with_annotations(back, &[("confighistory.io/changed-at", before), ("confighistory.io/propagated", &a)]);
    let forged = with_annotations(back.clone(), &[("confighistory.io/excluded-by-selector", "true")]);
    let r = f.send("/mutate", review("ConfigMap", "", "v1", "UPDATE", Some(&forged), Some(&back))).await.patched(&forged);
    assert_eq!(annotation(&r, "confighistory.io/excluded-by-selector"), None, "never taken from a request");
    assert_eq!(annotation(&r, "confighistory.io/changed-at").as_deref(), Some(before), "no change");
    assert_eq!(annotation(&r, "confighistory.io/propagated"), Some(a.clone()));

    f.policy.excluded_sources = "ca-bundle=true".parse().unwrap();
    let mut ca = configmap("ca-bundle", &[("ca.crt", "x")]);
    ca["metadata"]["labels"] = json!({"ca-bundle": "true"});
    let r = f.send("/mutate", review("ConfigMap", "", "v1", "UPDATE", Some(&ca), Some(&ca))).await;
    assert!(r.patch().is_empty(), "{:?}", r.patch());
}

/// Enforce mode checks workloads; a ConfigMap an enforce-mode Deployment reads by name
/// that drops its opt-out (its annotation, or its labels stop matching the admin's selector)
/// becomes mutable, versioned config under it. The update is allowed (enforce never blocks
/// config edits) with a short warning naming a user.
#[tokio::test]
async fn a_configmap_read_by_name_that_becomes_versioned_is_warned_in_enforce_mode() {
    let mut f = Fixture::new().workload(&deployment("x:1", "pricing-config")).namespace_mode("enforce");
    f.policy.excluded_sources = "live=true".parse().unwrap();
    let opted_out = with_annotations(configmap("pricing-config", A), &[("confighistory.io/versioned", "false")]);
    let mut labelled = configmap("pricing-config", A);
    labelled["metadata"]["labels"] = json!({"live": "true"});
    for old in [opted_out, labelled] {
        let new = configmap("pricing-config", A);
        let a = f.send("/mutate", review("ConfigMap", "", "v1", "UPDATE", Some(&new), Some(&old))).await;
        assert!(a.allowed(), "{}", a.message());
        let warnings = a.warnings();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("pricing-config") && warnings[0].contains("Deployment/pricing"), "{warnings:?}");
        assert!(warnings[0].len() <= 120, "{}", warnings[0].len());
        // Still opted out: nothing to say.
        let a = f.send("/mutate", review("ConfigMap", "", "v1", "UPDATE", Some(&old), Some(&old))).await;
        assert!(a.warnings().is_empty(), "{:?}", a.warnings());
    }
}

#[tokio::test]
async fn installing_sets_no_changed_at_on_existing_sources() {
    let f = Fixture::new().source("pricing-config", A).workload(&deployment("x:1", "pricing-config"));
    let cm = with_annotations(configmap("pricing-config", A), &[("owner", "team")]);
    let a = f.send("/mutate", review("ConfigMap", "", "v1", "UPDATE", Some(&cm), Some(&configmap("pricing-config", A)))).await;
    let out = a.patched(&cm);
    assert_eq!(annotation(&out, "confighistory.io/head"), Some(content(A).hash()));
    assert_eq!(annotation(&out, "confighistory.io/changed-at"), None);
}

// ---------- §6.3 validation ----------

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

/// A CronJob `report` whose template reads `cm`, and the Job its controller makes from it (with
/// the labels the Job API adds to the pod template).
fn cronjob_and_job(cm: &str) -> (Value, Value) {
    let template = json!({"metadata": {"creationTimestamp": null}, "spec": {"containers": [{"name": "r", "envFrom": [{"configMapRef": {"name": cm}}]}]}});
    let cronjob = json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "report", "namespace": NS, "uid": "uid-report"},
        "spec": {"schedule": "@daily", "jobTemplate": {"spec": {"template": template}}}});
    let mut job_template = template.clone();
    job_template["metadata"]["labels"] = json!({"controller-uid": "uid-report-1", "job-name": "report-1"});
    let job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "report-1", "namespace": NS,
        "ownerReferences": [{"kind": "CronJob", "name": "report", "uid": "uid-report", "controller": true}]},
        "spec": {"template": job_template}});
    (cronjob, job)
}

// ---------- §9a trust: enforce mode cannot be bypassed ----------

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
    f.state.write().revisions_trusted_before = Some("2026-12-01T00:00:00Z".into());
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

// ---------- §6.4 snapshot protection ----------

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

// ---------- bad input ----------

#[tokio::test]
async fn bad_input_gets_clear_errors() {
    let f = Fixture::new();
    let a = f.post("/mutate", b"{not json".to_vec()).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    assert!(a.body["error"].as_str().unwrap().contains("not valid JSON"));

    let mut r = review("ConfigMap", "", "v1", "CREATE", Some(&configmap("x", A)), None);
    r["apiVersion"] = json!("admission.k8s.io/v1beta1");
    let a = f.post("/mutate", serde_json::to_vec(&r).unwrap()).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    assert!(a.body["error"].as_str().unwrap().contains("admissionReviewVersions"));

    // Not UTF-8, in a field that is left out while parsing: refused all the same (JSON is UTF-8).
    let mut body = serde_json::to_vec(&review("ConfigMap", "", "v1", "CREATE", Some(&configmap("x", A)), None)).unwrap();
    body.splice(1..1, b"\"extra\":\"\xff\",".iter().copied());
    let a = f.post("/mutate", body).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    assert!(a.body["error"].as_str().unwrap().contains("not UTF-8"), "{}", a.body);

    let a = f.post("/mutate", vec![b' '; webhook::DEFAULT_MAX_BODY + 1]).await;
    assert_eq!(a.status, StatusCode::PAYLOAD_TOO_LARGE);

    // A kind no webhook configuration of the chart sends to that endpoint is refused, with the
    // endpoint and kind named.
    let a =
        f.post("/validate", serde_json::to_vec(&review("ConfigMap", "", "v1", "CREATE", Some(&configmap("x", A)), None)).unwrap()).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    assert!(a.body["error"].as_str().unwrap().contains("/validate is not registered for \"/v1/configmaps\""), "{}", a.body);
}

#[tokio::test]
async fn a_one_mebibyte_configmap_update_fits() {
    let big = "x".repeat(1024 * 1024 - 100);
    let f = Fixture::new().source("big", &[("blob", "small")]).workload(&deployment("x:1", &snap("big", &[("blob", "small")])));
    let old = with_annotations(configmap("big", &[("blob", &big)]), &[("kubectl.kubernetes.io/last-applied-configuration", &big)]);
    let new =
        with_annotations(configmap("big", &[("blob", &format!("{big}y"))]), &[("kubectl.kubernetes.io/last-applied-configuration", &big)]);
    let a = f.send("/mutate", review("ConfigMap", "", "v1", "UPDATE", Some(&new), Some(&old))).await;
    assert!(a.allowed());
    assert!(annotation(&a.patched(&new), "confighistory.io/head").is_some());
}

// ---------- §9a trust: forged reviews sent straight to the port ----------

/// A review for another namespace than the fixtures'.
fn in_namespace(mut review: Value, ns: &str) -> Value {
    review["request"]["namespace"] = json!(ns);
    for o in ["object", "oldObject"] {
        if review["request"][o].is_object() {
            review["request"][o]["metadata"]["namespace"] = json!(ns);
        }
    }
    review
}

#[tokio::test]
async fn a_forged_old_object_plants_no_content() {
    // Another tenant's source, used by a plain-name workload: an UPDATE "from" forged content.
    let plain = deployment("pricing:4.11", "pricing-config");
    let f = Fixture::new().source("pricing-config", A).workload(&plain);
    let forged_old = configmap("pricing-config", &[("mode", "attacker"), ("discount_rules_path", "/evil")]);
    let new = configmap("pricing-config", B);
    let a = f.send("/mutate", review("ConfigMap", "", "v1", "UPDATE", Some(&new), Some(&forged_old))).await;
    assert!(a.allowed());
    let planted = content(&[("mode", "attacker"), ("discount_rules_path", "/evil")]);
    assert!(f.cluster.get(NS, &snapshot::name("pricing-config", &planted.hash(), 0)).is_none(), "no snapshot of forged content");
    assert!(!f.calls().iter().any(|c| c.starts_with("create")), "nothing written: {:?}", f.calls());
    assert!(a.warnings().iter().any(|w| w.contains("outgoing config not kept")), "{:?}", a.warnings());

    // The same request with a stale resourceVersion: not the stored object either.
    let mut stale = configmap("pricing-config", A);
    stale["metadata"]["resourceVersion"] = json!("1");
    let mut stored = f.cluster.get(NS, "pricing-config").unwrap();
    stored["metadata"]["resourceVersion"] = json!("2");
    f.cluster.insert(stored);
    let a = f.send("/mutate", review("ConfigMap", "", "v1", "UPDATE", Some(&new), Some(&stale))).await;
    assert!(f.cluster.get(NS, &snap("pricing-config", A)).is_none(), "{:?}", a.warnings());

    // oldObject as stored: the outgoing content is kept, as read from the API server.
    let mut current = configmap("pricing-config", A);
    current["metadata"]["resourceVersion"] = json!("2");
    f.send("/mutate", review("ConfigMap", "", "v1", "UPDATE", Some(&new), Some(&current))).await;
    let kept = f.cluster.get(NS, &snap("pricing-config", A)).expect("outgoing content kept");
    assert_eq!(kept["data"], configmap("x", A)["data"]);
}

#[tokio::test]
async fn dry_run_and_real_agree_on_forged_old_objects() {
    let plain = deployment("pricing:4.11", "pricing-config");
    let f = Fixture::new().source("pricing-config", A).workload(&plain);
    let forged_old = configmap("pricing-config", &[("mode", "attacker")]);
    let new = configmap("pricing-config", B);
    let mut answers = Vec::new();
    for dry in [true, false] {
        let mut r = review("ConfigMap", "", "v1", "UPDATE", Some(&new), Some(&forged_old));
        r["request"]["dryRun"] = json!(dry);
        let a = f.send("/mutate", r).await;
        answers.push((a.allowed(), a.warnings(), a.patch().len()));
    }
    assert_eq!(answers[0], answers[1]);
    assert!(!f.calls().iter().any(|c| c.starts_with("create")), "{:?}", f.calls());
}

#[tokio::test]
async fn namespaces_outside_the_policy_get_no_reads_or_writes() {
    let f = Fixture::new().source("pricing-config", A);
    let d = deployment("pricing:4.11", "pricing-config");
    let cm = configmap("pricing-config", B);
    let snapshot_obj = snapshot::object("kube-system", "pricing-config", &snap("pricing-config", A), &content(A), &["t".into()]);
    for (path, r) in [
        ("/mutate", review("Deployment", "apps", "v1", "CREATE", Some(&d), None)),
        ("/validate", review("Deployment", "apps", "v1", "CREATE", Some(&d), None)),
        ("/mutate", review("ConfigMap", "", "v1", "UPDATE", Some(&cm), Some(&configmap("pricing-config", A)))),
        ("/protect", review("ConfigMap", "", "v1", "CREATE", Some(&snapshot_obj), None)),
        ("/protect", review("ConfigMap", "", "v1", "DELETE", None, Some(&snapshot_obj))),
    ] {
        for ns in ["kube-system", "confighistory"] {
            let a = f.send(path, in_namespace(r.clone(), ns)).await;
            assert!(a.allowed() && a.patch().is_empty() && a.warnings().is_empty(), "{path} in {ns}: {}", a.body);
        }
    }
    assert!(f.calls().is_empty(), "{:?}", f.calls());
}

/// A kind another configuration of the chart registers and this server does not handle (a Secret
/// with Secrets off, a workload kind it has no registry entry for, forged kinds alike) is answered
/// "allowed, unchanged": during a `helm upgrade` that turns such a feature on, the webhooks reach
/// pods that do not serve it yet, and a refusal there failed the write (failurePolicy Fail) or
/// failed it open as an error. Nothing is read, written or labelled from it.
#[tokio::test]
async fn kinds_this_server_does_not_handle_are_allowed_unchanged_without_state() {
    let f = Fixture::new().source("pricing-config", A);
    let d = deployment("pricing:4.11", "pricing-config");
    let secret =
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db", "namespace": NS}, "data": {"password": "aHVudGVyMg=="}});
    let rollout = {
        let mut r = review("Rollout", "argoproj.io", "v1alpha1", "CREATE", Some(&d), None);
        r["request"]["resource"]["resource"] = json!("rollouts");
        r
    };
    let cases = vec![
        ("/mutate", review("Secret", "", "v1", "CREATE", Some(&secret), None)),
        ("/protect", review("Secret", "", "v1", "CREATE", Some(&secret), None)),
        ("/protect", review("Secret", "", "v1", "DELETE", None, Some(&secret))),
        ("/mutate", rollout.clone()),
        ("/validate", rollout),
        ("/mutate", review("Deployment-x1", "apps", "v1", "CREATE", Some(&d), None)),
        ("/mutate", review("Deployment", "evil.io", "v1", "CREATE", Some(&d), None)),
    ];
    for (path, r) in cases {
        let a = f.post(path, serde_json::to_vec(&r).unwrap()).await;
        assert_eq!(a.status, StatusCode::OK, "{path}: {r}");
        assert!(a.allowed() && a.patch().is_empty() && a.warnings().is_empty(), "{path}: {}", a.body);
        assert_eq!(a.response()["uid"], r["request"]["uid"]);
    }
    assert!(f.calls().is_empty(), "{:?}", f.calls());
    let metrics = confighistory::metrics::METRICS.render();
    assert!(!metrics.contains("Deployment-x1") && !metrics.contains("evil.io"), "no metric label from the request");
}

#[tokio::test]
async fn requests_the_webhooks_never_send_are_refused_without_state() {
    let f = Fixture::new().source("pricing-config", A);
    let d = deployment("pricing:4.11", "pricing-config");
    let cm = configmap("pricing-config", A);
    let mut cases = vec![
        // Kinds the endpoint is never registered for, in any configuration of the chart.
        ("/validate", review("ConfigMap", "", "v1", "CREATE", Some(&cm), None)),
        ("/protect", review("Deployment", "apps", "v1", "CREATE", Some(&d), None)),
        ("/mutate", review("ConfigMap", "", "v1", "DELETE", None, Some(&cm))),
        ("/mutate", review("Deployment", "apps", "v1", "CONNECT", Some(&d), None)),
        ("/mutate", review("ConfigMap", "", "v2", "CREATE", Some(&cm), None)),
    ];
    let mut sub = review("Deployment", "apps", "v1", "UPDATE", Some(&d), Some(&d));
    sub["request"]["subResource"] = json!("scale");
    cases.push(("/mutate", sub));
    // Names that are not Kubernetes names never reach a log line or an API path.
    cases.push(("/mutate", in_namespace(review("Deployment", "apps", "v1", "CREATE", Some(&d), None), "../../secrets")));
    let mut name = review("ConfigMap", "", "v1", "CREATE", Some(&cm), None);
    name["request"]["name"] = json!("x\n level=error msg=forged");
    cases.push(("/mutate", name));
    for (path, r) in cases {
        let a = f.post(path, serde_json::to_vec(&r).unwrap()).await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{path}: {r}");
        assert!(!a.body["error"].as_str().unwrap().is_empty());
    }
    assert!(f.calls().is_empty(), "{:?}", f.calls());
    let metrics = confighistory::metrics::METRICS.render();
    assert!(!metrics.contains("Deployment-x1"), "no metric label from a refused request");
}

/// Forged reviews naming missing ConfigMaps in namespaces that do not exist made one
/// GET each with confighistory's cluster-wide identity (and each invented namespace got its own
/// fair share of places). Once the namespace watch has listed, a namespace it does not know is
/// answered "allowed, no patch" without any read; one it knows is read from as before.
#[tokio::test]
async fn a_namespace_that_does_not_exist_costs_one_namespace_read() {
    let f = Fixture::new();
    {
        let mut state = f.state.write();
        state.apply_namespace(&json!({"metadata": {"name": NS}}));
        state.synced.0.insert("namespaces");
    }
    let mut d = deployment("pricing:4.11", "missing-0");
    d["spec"]["template"]["spec"]["volumes"] =
        json!((0..20).map(|i| json!({"name": format!("v{i}"), "configMap": {"name": format!("missing-{i}")}})).collect::<Vec<_>>());
    let old = with_annotations(configmap("pricing-config", A), &[("confighistory.io/head", &content(A).hash())]);
    let new = with_annotations(configmap("pricing-config", B), &[("confighistory.io/head", &content(A).hash())]);
    // One server, as in a pod: what it learnt a namespace is missing, it remembers for a while.
    let app = f.app();
    for i in 0..10 {
        let ns = format!("invented-{i}");
        for (path, r) in [
            ("/mutate", review("Deployment", "apps", "v1", "CREATE", Some(&d), None)),
            ("/validate", review("Deployment", "apps", "v1", "CREATE", Some(&d), None)),
            ("/mutate", review("ConfigMap", "", "v1", "UPDATE", Some(&new), Some(&old))),
        ] {
            let a = f.send_to(&app, path, in_namespace(r, &ns)).await;
            assert!(a.allowed() && a.patch().is_empty(), "{path} in {ns}: {}", a.body);
        }
    }
    let want: Vec<String> = (0..10).map(|i| format!("get namespace invented-{i}")).collect();
    assert_eq!(f.calls(), want, "one namespace read per invented namespace, and nothing else");
    // The namespace that exists is read from, as before, without reading the namespace.
    f.clear_calls();
    f.mutate_deployment("CREATE", &d, None).await;
    assert!(f.calls().iter().any(|c| c.contains("missing-3")), "{:?}", f.calls());
    assert!(f.calls().iter().all(|c| !c.contains("namespace")), "{:?}", f.calls());
}

/// The first release after leaving audit mode (or right after an install, before adoption has
/// reached the workload): its replaced revision names the source plainly and has no adoption
/// record. The release records that the revision ran with the content it is pinned to now, so a
/// later `rollout undo --to-revision=1` brings back that config, not the current one.
#[tokio::test]
async fn the_first_release_after_audit_mode_can_be_undone_to_the_config_its_predecessor_ran_with() {
    let rev1 = deployment("pricing:1.25", "pricing-config");
    let f = Fixture::new().source("pricing-config", A).workload(&rev1).revision(&rev1, 1);
    // The image-only release, right after the mode label went: pinned to A, and A's snapshot
    // records revision 1's template.
    let rev2 = deployment("pricing:1.26", "pricing-config");
    let a = f.mutate_deployment("UPDATE", &rev2, Some(&rev1)).await;
    assert!(a.allowed(), "{}", a.message());
    let rev2 = a.patched(&rev2);
    assert_eq!(pin_of(&rev2).0, snap("pricing-config", A));
    let snapshot = f.cluster.get(NS, &snap("pricing-config", A)).expect("the snapshot of A");
    let rev1_hash = template_hash(&rev1["spec"]["template"]);
    assert_eq!(annotation(&snapshot, "confighistory.io/adopted-templates"), Some(rev1_hash), "{snapshot}");
    f.state.write().apply_configmap(&snapshot);
    // Later a config edit rolls out (revision 3 on B); then the undo to revision 1.
    f.update_source("pricing-config", B);
    let rev3 = deployment("pricing:1.26", &snap("pricing-config", B));
    let f = f.snapshot("pricing-config", B, &[]).workload(&rev3).revision(&rev2, 2).revision(&rev3, 3);
    let a = f.mutate_deployment("UPDATE", &rev1, Some(&rev3)).await;
    assert!(a.allowed(), "{}", a.message());
    assert_eq!(pin_of(&a.patched(&rev1)).0, snap("pricing-config", A), "1.25 with the config 1.25 ran with: {:?}", a.warnings());
    assert!(!a.warnings().iter().any(|w| w.contains("predates")), "{:?}", a.warnings());
}

/// Promotion by copy: a team copies the live Deployment from staging into production (or restores
/// it from a backup taken with `kubectl get`), where the same ConfigMap exists but staging's pinned
/// snapshot does not. The workload must name a ConfigMap that exists and holds what its name
/// promises: that snapshot made from an identical source, or the head; never a dangling name.
#[tokio::test]
async fn a_copied_workload_naming_a_snapshot_missing_here_is_pinned_to_one_that_exists() {
    let f = Fixture::new().source("pricing-config", A);
    // Staging ran the same config: the name is made here, from the identical source.
    let copied = deployment("pricing:4.11", &snap("pricing-config", A));
    let a = f.mutate_deployment("CREATE", &copied, None).await;
    assert!(a.allowed(), "{}", a.body);
    let snapshot = SourceId::configmap(snap("pricing-config", A).as_str());
    assert!(f.cluster.source(NS, &snapshot).is_some(), "the snapshot the copy names now exists: {:?}", f.calls());
    let patched = a.patched(&copied);
    assert_eq!(patched["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"], json!(snap("pricing-config", A)));
    // Staging ran other config: the content that name promises is not here; the head is.
    let copied = deployment("pricing:4.11", &snap("pricing-config", B));
    let a = f.mutate_deployment("CREATE", &copied, None).await;
    assert!(a.allowed(), "{}", a.body);
    assert_eq!(a.patched(&copied)["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"], json!(snap("pricing-config", A)));
    assert!(
        a.warnings().iter().any(|w| w.contains(&format!("{} does not exist in {NS}", snap("pricing-config", B)))),
        "{:?}",
        a.warnings()
    );
    // Neither the snapshot nor its source exists here: refused, saying what to do.
    let copied = deployment("pricing:4.11", &snap("checkout-config", A));
    let a = f.mutate_deployment("CREATE", &copied, None).await;
    assert!(!a.allowed(), "{}", a.body);
    assert!(a.message().contains("neither exists") && a.message().contains("Create ConfigMap checkout-config first"), "{}", a.message());
}

/// Round 2 of the trust review: a forged review naming 64 invented ConfigMaps in a namespace that
/// exists cost 64 GETs each (3,072 from 48 reviews), and a 15 s flood slowed another tenant's
/// admissions from 0.1 s to 1-2 s. Once the ConfigMap watch has listed, names it does not know are
/// read at a bounded rate per namespace, and one found missing is not read again for a while;
/// names it knows are read as before, and another namespace has its own rate.
#[tokio::test]
async fn invented_source_names_cost_a_bounded_number_of_reads_per_namespace() {
    let f = Fixture::new().source("pricing-config", A);
    {
        let mut state = f.state.write();
        state.apply_namespace(&json!({"metadata": {"name": NS}}));
        state.apply_namespace(&json!({"metadata": {"name": "other"}}));
        state.synced.0.insert("namespaces");
        state.synced.0.insert("configmaps");
    }
    let app = f.app();
    let naming = |from: usize| {
        let mut d = deployment("pricing:4.11", "pricing-config");
        d["spec"]["template"]["spec"]["volumes"] = json!((from..from + 64)
            .map(|i| json!({"name": format!("v{i}"), "configMap": {"name": format!("invented-{i}")}}))
            .collect::<Vec<_>>());
        review("Deployment", "apps", "v1", "CREATE", Some(&d), None)
    };
    // The same 64 names 24 times, then 24 reviews of 64 new names each.
    let started = std::time::Instant::now();
    for round in 0..48 {
        let from = if round < 24 { 0 } else { 64 * round };
        let a = f.send_to(&app, "/mutate", naming(from)).await;
        assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    }
    let reads = f.calls().iter().filter(|c| c.contains("invented-")).count();
    // The namespace's burst, then its rate for as long as the flood took (a loaded machine).
    let most = 64 + (16.0 * started.elapsed().as_secs_f64()).ceil() as usize;
    assert!(reads <= most, "{reads} reads of invented names from 48 forged reviews (at most {most})");
    // A name the watch knows is still read fresh, and pinned.
    f.clear_calls();
    let a = f.mutate_deployment("CREATE", &deployment("pricing:4.12", "pricing-config"), None).await;
    assert!(f.calls().iter().any(|c| c.contains("pricing-config")), "{:?}", f.calls());
    assert!(a.patched(&deployment("pricing:4.12", "pricing-config")).to_string().contains(&snap("pricing-config", A)), "{}", a.body);
    // Another namespace has its own rate: its invented names are read.
    f.clear_calls();
    let a = f.send_to(&app, "/mutate", in_namespace(naming(100_000), "other")).await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(f.calls().iter().filter(|c| c.contains("invented-")).count(), 64, "{:?}", f.calls());
}

/// Flux and Argo CD dry-run a whole release on the server before applying it (so do `kubectl diff`
/// and `kubectl apply --dry-run=server`): the dry run of a Deployment comes before its ConfigMap
/// exists. The create that follows within seconds, while the ConfigMap watch has not delivered the
/// new ConfigMap yet, must still read it and pin: a dry run's "missing" is not remembered, and a
/// ConfigMap this replica admitted is no longer remembered missing (docs/behaviour.md §9a.5).
#[tokio::test]
async fn a_release_dry_run_before_its_configmap_exists_does_not_leave_the_apply_unpinned() {
    let f = Fixture::new();
    {
        let mut state = f.state.write();
        state.apply_namespace(&json!({"metadata": {"name": NS}}));
        state.synced.0.insert("namespaces");
        state.synced.0.insert("configmaps");
    }
    let app = f.app();
    let pinned = |a: &Answer, d: &Value| a.patched(d)["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"].clone();

    // The dry run of the whole release: the ConfigMap does not exist yet.
    let d = deployment("pricing:4.11", "pricing-config");
    let mut dry = review("Deployment", "apps", "v1", "CREATE", Some(&d), None);
    dry["request"]["dryRun"] = json!(true);
    let a = f.send_to(&app, "/mutate", dry).await;
    assert!(a.allowed(), "{}", a.body);
    // The apply: the ConfigMap is created (the watch has not delivered it), then the Deployment.
    f.cluster.insert(configmap("pricing-config", A));
    let a = f.send_to(&app, "/mutate", review("Deployment", "apps", "v1", "CREATE", Some(&d), None)).await;
    assert!(a.allowed(), "{}", a.body);
    assert_eq!(pinned(&a, &d), json!(snap("pricing-config", A)), "pinned at the first apply: {}", a.body);

    // Without a dry run: a Deployment applied before its ConfigMap is admitted unpinned (nothing
    // to pin to); the ConfigMap's create through this replica makes the next write read it.
    let d = deployment("pricing:4.11", "checkout-config");
    let a = f.send_to(&app, "/mutate", review("Deployment", "apps", "v1", "CREATE", Some(&d), None)).await;
    assert!(a.allowed(), "{}", a.body);
    assert_eq!(pinned(&a, &d), json!("checkout-config"), "nothing to pin to yet: {}", a.body);
    let cm = configmap("checkout-config", A);
    let a = f.send_to(&app, "/mutate", review("ConfigMap", "", "v1", "CREATE", Some(&cm), None)).await;
    assert!(a.allowed(), "{}", a.body);
    f.cluster.insert(cm);
    let d2 = deployment("pricing:4.12", "checkout-config");
    let a = f.send_to(&app, "/mutate", review("Deployment", "apps", "v1", "UPDATE", Some(&d2), Some(&d))).await;
    assert!(a.allowed(), "{}", a.body);
    assert_eq!(pinned(&a, &d2), json!(snap("checkout-config", A)), "pinned once the ConfigMap exists: {}", a.body);
}

/// `kubectl create namespace x && kubectl apply -f app.yaml` (or `helm install --create-namespace`):
/// the first workloads come before the namespace watch delivers the namespace. They are decided
/// like any other, with the namespace read fresh (its mode label counts), not let through as
/// if the namespace did not exist.
#[tokio::test]
async fn a_namespace_the_watch_has_not_delivered_yet_is_read_and_decided_normally() {
    let f = Fixture::new();
    {
        let mut state = f.state.write();
        state.apply_namespace(&json!({"metadata": {"name": NS}}));
        state.synced.0.insert("namespaces");
    }
    f.cluster.insert_namespace(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "fresh-ns"}}));
    f.cluster.insert_namespace(json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "fresh-enforce", "labels": {"confighistory.io/mode": "enforce"}}}));
    for ns in ["fresh-ns", "fresh-enforce"] {
        let mut cm = configmap("pricing-config", A);
        cm["metadata"]["namespace"] = json!(ns);
        f.cluster.insert(cm);
    }
    let d = deployment("pricing:4.11", "pricing-config");

    // Rewrite mode (the default): pinned, and the snapshot written.
    let create = |ns: &str, obj: &Value| in_namespace(review("Deployment", "apps", "v1", "CREATE", Some(obj), None), ns);
    let m = f.send("/mutate", create("fresh-ns", &d)).await;
    assert!(m.allowed(), "{}", m.message());
    let pinned = m.patched(&d);
    let want = snap("pricing-config", A);
    assert_eq!(pin_of(&pinned), (want.clone(), want.clone()), "{}", m.body);
    assert!(f.cluster.get("fresh-ns", &want).is_some(), "snapshot created in fresh-ns");
    assert_eq!(f.calls()[0], "get namespace fresh-ns", "the namespace is confirmed before any other read: {:?}", f.calls());
    let v = f.send("/validate", create("fresh-ns", &pinned)).await;
    assert!(v.allowed(), "{}", v.message());
    let v = f.send("/validate", create("fresh-ns", &d)).await;
    assert!(!v.allowed(), "validation runs: {}", v.body);
    assert!(v.message().contains("names mutable ConfigMap pricing-config"), "{}", v.message());

    // The fresh namespace's mode label is honoured: enforce never rewrites, and refuses.
    let m = f.send("/mutate", create("fresh-enforce", &d)).await;
    assert!(m.allowed() && m.patch().is_empty(), "{}", m.body);
    let v = f.send("/validate", create("fresh-enforce", &d)).await;
    assert!(!v.allowed(), "{}", v.body);
}

#[tokio::test]
async fn a_reference_that_is_not_a_configmap_name_is_never_read() {
    let f = Fixture::new().source("pricing-config", A);
    let d = deployment("pricing:4.11", "../secrets/db-password");
    let a = f.mutate_deployment("CREATE", &d, None).await;
    assert!(a.allowed());
    assert!(f.calls().iter().all(|c| !c.contains("secrets")), "{:?}", f.calls());
}

#[tokio::test]
async fn tenants_cannot_plant_history_in_snapshots() {
    let f = Fixture::new();
    let name = snap("pricing-config", A);
    let adopted = snapshot::object(NS, "pricing-config", &name, &content(A), &["template-of-an-old-revision".into()]);
    let a = f.send("/protect", review("ConfigMap", "", "v1", "CREATE", Some(&adopted), None)).await;
    assert!(!a.allowed());
    assert!(a.message().contains("adoption records"), "{}", a.message());
    // confighistory itself and the admin's allowlist (backup restores) may.
    assert!(f.as_user("/protect", ME, review("ConfigMap", "", "v1", "CREATE", Some(&adopted), None)).await.allowed());
    let mut allowing = Fixture::new();
    allowing.policy.snapshot_creators = vec!["system:serviceaccount:velero:velero".into()];
    let r = review("ConfigMap", "", "v1", "CREATE", Some(&adopted), None);
    assert!(allowing.as_user("/protect", "system:serviceaccount:velero:velero", r).await.allowed());

    let plain = snapshot::object(NS, "pricing-config", &name, &content(A), &[]);
    let mut owned = plain.clone();
    owned["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "mine", "uid": "u"}]);
    let mut finalized = plain.clone();
    finalized["metadata"]["finalizers"] = json!(["example.com/hold"]);
    let mut renamed = plain.clone();
    renamed["metadata"]["annotations"]["confighistory.io/source-name"] = json!("other-config");
    let mut relabelled = plain.clone();
    relabelled["metadata"]["labels"]["confighistory.io/source"] = json!("other-config");
    // Nor name who wrote its content: a snapshot made ahead of a write would name anyone.
    let mut authored = plain.clone();
    authored["metadata"]["annotations"]["confighistory.io/changed-by"] = json!("alice");
    let mut unattributed = plain.clone();
    unattributed["metadata"]["annotations"]["confighistory.io/unattributed"] = json!("before confighistory");
    assert!(f.as_user("/protect", ME, review("ConfigMap", "", "v1", "CREATE", Some(&authored), None)).await.allowed());
    for (obj, why) in [
        (&owned, "ownerReferences"),
        (&finalized, "finalizers"),
        (&renamed, "source"),
        (&relabelled, "source"),
        (&authored, "confighistory.io/changed-by"),
        (&unattributed, "confighistory.io/unattributed"),
    ] {
        let a = f.send("/protect", review("ConfigMap", "", "v1", "CREATE", Some(obj), None)).await;
        assert!(!a.allowed() && a.message().contains(why), "{why}: {}", a.message());
    }
    // An honest copy of its own content (a tenant restoring one by hand) is fine.
    assert!(f.send("/protect", review("ConfigMap", "", "v1", "CREATE", Some(&plain), None)).await.allowed());
    let second = snapshot::object(NS, "pricing-config", &snapshot::name("pricing-config", &content(A).hash(), 2), &content(A), &[]);
    assert!(f.send("/protect", review("ConfigMap", "", "v1", "CREATE", Some(&second), None)).await.allowed());
}

#[tokio::test]
async fn the_oldest_adoption_record_wins_whatever_its_name() {
    let plain = deployment("pricing:4.11", "pricing-config");
    let t = template_hash(&plain["spec"]["template"]);
    let pinned_b = deployment("pricing:4.12", &snap("pricing-config", B));
    let f = Fixture::new()
        .source("pricing-config", B)
        .snapshot("pricing-config", B, &[])
        .workload(&pinned_b)
        .revision(&plain, 1)
        .revision(&pinned_b, 2);
    // The record written when the template ran, and a later claim under a name that sorts first.
    let mut first = snapshot::object(NS, "pricing-config", &snap("pricing-config", A), &content(A), std::slice::from_ref(&t));
    first["metadata"]["creationTimestamp"] = json!("2026-01-01T00:00:00Z");
    let other = (0..)
        .map(|i| Content { data: [("mode".to_owned(), format!("attacker-{i}"))].into(), ..Default::default() })
        .find(|c| snapshot::name("pricing-config", &c.hash(), 0) < snap("pricing-config", A))
        .unwrap();
    let mut later = snapshot::object(NS, "pricing-config", &snapshot::name("pricing-config", &other.hash(), 0), &other, &[t]);
    later["metadata"]["creationTimestamp"] = json!("2026-06-01T00:00:00Z");
    for o in [&first, &later] {
        f.cluster.insert(o.clone());
        f.state.write().apply_configmap(o);
    }
    let a = f.mutate_deployment("UPDATE", &plain, Some(&pinned_b)).await;
    assert_eq!(pin_of(&a.patched(&plain)).0, snap("pricing-config", A));
}

// ---------- signals: logs and metrics operators read ----------

/// The value of one sample in a scrape (0 when absent).
fn sample(scrape: &str, series: &str) -> u64 {
    scrape.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok()).unwrap_or(0)
}

/// Every log line of an admission, down to its effects' (the snapshot it creates), carries the
/// request's uid, kind, namespace, name and operation.
#[tokio::test]
async fn every_log_line_of_an_admission_carries_its_uid() {
    let logs = Logs::default();
    let _guard = logs.capture();
    let f = Fixture::new().source("pricing-config", A);
    let mut r = review("Deployment", "apps", "v1", "CREATE", Some(&deployment("pricing:4.11", "pricing-config")), None);
    r["request"]["uid"] = json!("uid-of-the-span\"test");
    let a = f.post("/mutate", serde_json::to_vec(&r).unwrap()).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    let lines = logs.lines();
    let created = lines.iter().find(|l| l.contains("created snapshot")).unwrap_or_else(|| panic!("{lines:#?}"));
    for field in [r#"uid="uid-of-the-span\"test""#, "kind=Deployment", "namespace=shop", "name=pricing", "operation=\"CREATE\""] {
        assert!(created.contains(field), "{field} missing from {created}");
    }
    // The decision's own summary line too.
    assert!(lines.iter().any(|l| l.contains("uid-of-the-span") && l.contains("reason=")), "{lines:#?}");
}

/// docs/behaviour.md §3: a namespace asking for a mode the admin refuses is logged, once (not per request).
#[tokio::test]
async fn a_refused_mode_label_is_logged_once_per_namespace() {
    let logs = Logs::default();
    let _guard = logs.capture();
    // Its own namespace: the once-only memory is process-wide and other tests use "shop".
    let ns = "signals-refused";
    let mut f = Fixture::new();
    f.policy.allowed_modes = vec![Mode::Rewrite];
    f.state.write().apply_namespace(&json!({"metadata": {"name": ns, "labels": {"confighistory.io/mode": "audit"}}}));
    for i in 0..3 {
        let r = in_namespace(review("ConfigMap", "", "v1", "CREATE", Some(&configmap(&format!("cm-{i}"), A)), None), ns);
        assert!(f.post("/mutate", serde_json::to_vec(&r).unwrap()).await.body["response"]["allowed"] == json!(true));
    }
    let warned: Vec<String> = logs.lines().into_iter().filter(|l| l.contains("asks for mode audit")).collect();
    assert_eq!(warned.len(), 1, "{warned:#?}");
    assert!(warned[0].contains("WARN") && warned[0].contains(ns) && warned[0].contains("using rewrite"), "{}", warned[0]);
    // Another refused value is news: logged again, once.
    f.state.write().apply_namespace(&json!({"metadata": {"name": ns, "labels": {"confighistory.io/mode": "off"}}}));
    for _ in 0..2 {
        let r = in_namespace(review("ConfigMap", "", "v1", "CREATE", Some(&configmap("cm-x", A)), None), ns);
        f.post("/mutate", serde_json::to_vec(&r).unwrap()).await;
    }
    assert_eq!(logs.lines().iter().filter(|l| l.contains("asks for mode off")).count(), 1);
}

/// What audit mode lets through but enforce mode would refuse is counted (and logged); what
/// enforce mode refuses is counted as a decision with its reason.
#[tokio::test]
async fn audit_mode_violations_and_decision_reasons_are_counted() {
    let metrics = &confighistory::metrics::METRICS;
    let audit = "confighistory_audit_violations_total{kind=\"Deployment\"}";
    let denied = "confighistory_admission_requests_total{endpoint=\"validate\",kind=\"Deployment\",operation=\"CREATE\",decision=\"denied\",reason=\"mutable-config\"}";
    let before = metrics.render();
    let d = deployment("x:1", "pricing-config");
    let f = Fixture::new().source("pricing-config", A).namespace_mode("audit");
    assert!(f.send("/validate", review("Deployment", "apps", "v1", "CREATE", Some(&d), None)).await.allowed());
    let after = metrics.render();
    assert!(sample(&after, audit) > sample(&before, audit), "{after}");
    let f = Fixture::new().source("pricing-config", A).namespace_mode("enforce");
    assert!(!f.send("/validate", review("Deployment", "apps", "v1", "CREATE", Some(&d), None)).await.allowed());
    let last = metrics.render();
    assert!(sample(&last, denied) > sample(&after, denied), "{last}");
}

/// A no-op write of `obj` (the controller's touch), as the webhook patches it.
async fn touch(f: &Fixture, obj: &Value) -> Value {
    f.send("/mutate", review("ConfigMap", "", "v1", "UPDATE", Some(obj), Some(obj))).await.patched(obj)
}

/// docs/performance.md, "Admissions beside the controller's passes": an admission is answered while
/// a long pass holds the cache and a watch event waits to write it; it does not queue behind the
/// waiting writer (`cache::admission_read`).
#[tokio::test]
async fn an_admission_does_not_wait_behind_a_writer_waiting_for_a_pass() {
    let f = Fixture::new().source("pricing-config", A);
    let pass = f.state.clone();
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        confighistory::cache::pass(&pass, |_| {
            held_tx.send(()).unwrap();
            std::thread::sleep(std::time::Duration::from_secs(3));
        })
    });
    held_rx.recv().unwrap();
    let event = f.state.clone();
    let writer = std::thread::spawn(move || drop(confighistory::cache::write(&event)));
    // The writer is parked on the lock by now, for longer than it lets admissions' reads go
    // ahead of it: a pass, not admissions, keeps it out.
    std::thread::sleep(std::time::Duration::from_millis(200));
    let started = std::time::Instant::now();
    let a = f.mutate_deployment("CREATE", &deployment("pricing:4.11", "pricing-config"), None).await;
    let took = started.elapsed();
    assert!(a.allowed());
    assert!(took < std::time::Duration::from_secs(1), "the admission waited {took:?} for the pass");
    reader.join().unwrap();
    writer.join().unwrap();
}

/// docs/performance.md, "Admissions beside the controller's passes": the webhook's reads of the
/// cache do not queue behind a waiting writer, so admissions on several threads whose reads
/// overlap without a gap could keep a watch event out of the cache for as long as they flood
/// (a tenant's big ConfigMap updates, each hashed under the read lock). A writer that has waited
/// past a short bound while no pass holds the cache makes new admissions queue behind it.
#[test]
fn a_watch_event_gets_in_while_admissions_flood_on_several_threads() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::time::{Duration, Instant};
    let big = "x".repeat(512 * 1024);
    let f = Fixture::new().source("big", &[("blob", "small")]).workload(&deployment("x:1", &snap("big", &[("blob", "small")])));
    let old = configmap("big", &[("blob", &big)]);
    let new = configmap("big", &[("blob", &format!("{big}y"))]);
    let body = serde_json::to_vec(&review("ConfigMap", "", "v1", "UPDATE", Some(&new), Some(&old))).unwrap();
    let app = f.app();
    let (stop, admitted) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicUsize::new(0)));
    let senders: Vec<_> = (0..4)
        .map(|_| {
            let (app, body, stop, admitted) = (app.clone(), body.clone(), stop.clone(), admitted.clone());
            std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
                runtime.block_on(async {
                    while !stop.load(Ordering::Relaxed) {
                        let a = common::post(&app, "/mutate", body.clone()).await;
                        assert_eq!(a.status, StatusCode::OK, "{}", a.text);
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
        })
        .collect();
    while admitted.load(Ordering::Relaxed) < 4 {
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut worst = Duration::ZERO;
    for i in 0..20 {
        let started = Instant::now();
        let labels = json!({"metadata": {"name": NS, "labels": {"n": i.to_string()}}});
        confighistory::cache::write(&f.state).apply_namespace(&labels);
        worst = worst.max(started.elapsed());
        std::thread::sleep(Duration::from_millis(5));
    }
    stop.store(true, Ordering::Relaxed);
    senders.into_iter().for_each(|s| s.join().unwrap());
    assert!(worst < Duration::from_millis(500), "a watch event waited {worst:?} for the admissions' reads");
}
