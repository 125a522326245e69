//! Micro-benchmarks of the pure decisions: what one admission costs the API server's
//! write path before any I/O. `cargo bench --bench decisions`.
//!
//! The same binary counts instructions: `decisions --count PATH N` runs one hot path N
//! times and nothing else, for `benches/instructions/run`, which runs it under callgrind. Instruction
//! counts do not depend on what else the machine is doing, so a regression shows without timing noise.

use std::collections::HashMap;
use std::hint::black_box;
use std::sync::Arc;

use confighistory::admission::{self, review, Failed, Fresh, Outcome, View};
use confighistory::cache::State;
use confighistory::cache::Writer as _;
use confighistory::model::ids::SourceId;
use confighistory::model::kinds::Kind;
use confighistory::model::policy::Policy;
use confighistory::model::snapshot::{self, Content};
use criterion::{criterion_group, Criterion};
use serde_json::{json, Value};

fn configmap(name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "shop"}, "data": data})
}

/// A Deployment with `containers` containers reading `refs` ConfigMap keys in all, spread evenly
/// (over 10 distinct ConfigMaps when there are that many references).
fn deployment(containers: usize, refs: usize, name_of: impl Fn(usize) -> String) -> Value {
    let cs: Vec<Value> = (0..containers)
        .map(|c| {
            let mine: Vec<usize> = (0..refs).filter(|r| r % containers == c).collect();
            let env: Vec<Value> = mine
                .iter()
                .map(|r| json!({"name": format!("V{r}"), "valueFrom": {"configMapKeyRef": {"name": name_of(r % 10), "key": "k"}}}))
                .collect();
            json!({"name": format!("c{c}"), "image": "app:1", "env": env})
        })
        .collect();
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "app", "namespace": "shop", "uid": "u1"},
        "spec": {"replicas": 3, "template": {"metadata": {"labels": {"app": "app"}}, "spec": {"containers": cs}}}})
}

/// A Deployment as the API server sends it in a review after `kubectl apply`: server-set
/// metadata, kubectl's last-applied copy of the manifest, managedFields and status (the shape of
/// benches/load's fixtures). ConfigMaps are sent as they are: a 1 MiB one has no room for a
/// last-applied copy (annotations are capped at 256 KiB).
fn as_served(mut obj: Value) -> Value {
    let manifest = serde_json::to_string(&obj).unwrap();
    let meta = &mut obj["metadata"];
    meta["resourceVersion"] = json!("48213");
    meta["generation"] = json!(3);
    meta["creationTimestamp"] = json!("2026-12-01T09:00:00Z");
    meta["annotations"] = json!({"kubectl.kubernetes.io/last-applied-configuration": manifest, "deployment.kubernetes.io/revision": "3"});
    meta["managedFields"] = json!([{"manager": "kubectl-client-side-apply", "operation": "Update", "apiVersion": "apps/v1",
        "time": "2026-12-01T09:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:annotations": {".": {},
        "f:kubectl.kubernetes.io/last-applied-configuration": {}}}, "f:spec": {"f:replicas": {}, "f:template": {}}}}]);
    obj["status"] = json!({"observedGeneration": 3, "replicas": 3, "updatedReplicas": 3, "readyReplicas": 3, "availableReplicas": 3});
    obj
}

/// An UPDATE review of `object` (a Deployment or a ConfigMap) over `old`, as the API server sends it.
fn review_body(kind: &str, object: &Value, old: &Value) -> Vec<u8> {
    let (group, resource) = match kind {
        "ConfigMap" => ("", "configmaps"),
        "Secret" => ("", "secrets"),
        _ => ("apps", "deployments"),
    };
    let served = |o: &Value| if group.is_empty() { o.clone() } else { as_served(o.clone()) };
    serde_json::to_vec(&json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "1", "kind": {"group": group, "version": "v1", "kind": kind},
        "resource": {"group": group, "version": "v1", "resource": resource}, "name": object["metadata"]["name"], "namespace": "shop",
        "operation": "UPDATE", "userInfo": {"username": "alice"}, "object": served(object), "oldObject": served(old)}}))
    .unwrap()
}

fn request(kind: &str, object: &Value, old: &Value) -> review::Request {
    review::parse(&review_body(kind, object, old)).unwrap()
}

/// A 1 MiB source before and after an UPDATE: 200 keys of about 5 KiB, every value changed, one
/// key renamed.
fn big_configmaps() -> (Value, Value) {
    let data = |seed: &str| -> serde_json::Map<String, Value> {
        (0..200).map(|i| (format!("section-{i:03}.yaml"), json!(format!("setting_{i}_{seed}: {}\n", "v".repeat(5250))))).collect()
    };
    let old = configmap("big", Value::Object(data("a")));
    let mut new_data = data("b");
    let moved = new_data.remove("section-199.yaml").unwrap();
    new_data.insert("section-200.yaml".into(), moved);
    (old, configmap("big", Value::Object(new_data)))
}

/// A small source before and after an UPDATE: a database URL and a password, the password changed.
fn small_configmaps() -> (Value, Value) {
    let data = |password: &str| json!({"url": "postgres://db.shop.svc:5432/pricing", "password": password});
    (configmap("db", data("correct-horse-battery")), configmap("db", data("staple-2026-12")))
}

/// ConfigMaps as Secrets: the same bytes, base64 in `data`.
fn as_secrets((old, new): (Value, Value)) -> (Value, Value) {
    use base64::Engine as _;
    let as_secret = |cm: Value| {
        let data: serde_json::Map<String, Value> = cm["data"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), json!(base64::engine::general_purpose::STANDARD.encode(v.as_str().unwrap()))))
            .collect();
        json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": cm["metadata"].clone(), "data": data})
    };
    (as_secret(old), as_secret(new))
}

/// [`big_configmaps`] as Secrets (1.4 MiB of JSON each).
fn big_secrets() -> (Value, Value) {
    as_secrets(big_configmaps())
}

/// The policy of a server with Secrets on and its keys loaded.
fn secrets_on() -> Policy {
    use confighistory::model::keys::{ClusterKey, KeyId, KeySlot, Keyring};
    let mut p = Policy::default();
    p.secrets.enabled = true;
    p.secrets.keys = KeySlot::new(Keyring::new(ClusterKey::new(KeyId(1), (0u8..32).collect()).unwrap(), []).unwrap());
    p
}

fn bench(c: &mut Criterion) {
    let policy = Policy::default();
    let now = "2026-12-02T10:00:00Z";
    let content = Content::from_object(&configmap("x", json!({"k": "v"})));
    let snap = |i: usize| snapshot::name(&format!("cfg-{i}"), &content.hash(), 0);

    // (a) steady state: re-applying a pinned small Deployment (plain names in the request).
    let pinned = deployment(1, 2, snap);
    let plain = deployment(1, 2, |i| format!("cfg-{i}"));
    let mut state = State::default();
    state.apply_workload(Kind::Deployment, &pinned);
    let fresh = Fresh::new();
    let req = request("Deployment", &plain, &pinned);
    let view = View { policy: &policy, state: &state, fresh: &fresh, failed: &Failed::new(), now, namespace: None };
    let Outcome::Done(d) = admission::workload::decide(&req, &view) else { panic!("the steady state reads nothing") };
    assert_eq!((d.reason.as_str(), d.rewrites.len()), ("unchanged", 2), "the steady-state path, pins kept");
    c.bench_function("small deployment, steady state", |b| {
        b.iter(|| {
            let view = View { policy: &policy, state: &state, fresh: &fresh, failed: &Failed::new(), now, namespace: None };
            black_box(admission::workload::decide(black_box(&req), &view))
        })
    });

    // The same through parse → decide → serialize, as the handler does.
    let body = review_body("Deployment", &plain, &pinned);
    c.bench_function("small deployment, parse+decide+encode", |b| {
        b.iter(|| {
            let req = review::parse(black_box(&body)).unwrap();
            let view = View { policy: &policy, state: &state, fresh: &fresh, failed: &Failed::new(), now, namespace: None };
            let Outcome::Done(d) = admission::workload::decide(&req, &view) else { panic!() };
            black_box(d.finish(&HashMap::new()).review_json(&req.uid))
        })
    });

    // (b) 20 containers, 50 references to 10 sources, a release (template changed).
    let big_plain = deployment(20, 50, |i| format!("cfg-{i}"));
    let big_old = deployment(20, 50, snap);
    let mut big_new = big_plain.clone();
    big_new["spec"]["template"]["spec"]["containers"][0]["image"] = json!("app:2");
    let mut fresh_big = Fresh::new();
    for i in 0..10 {
        fresh_big.insert(SourceId::configmap(format!("cfg-{i}")), Some(configmap(&format!("cfg-{i}"), json!({"k": "v2"}))));
    }
    let mut big_state = State::default();
    big_state.apply_workload(Kind::Deployment, &big_old);
    let req = request("Deployment", &big_new, &big_old);
    let view = View { policy: &policy, state: &big_state, fresh: &fresh_big, failed: &Failed::new(), now, namespace: None };
    let Outcome::Done(d) = admission::workload::decide(&req, &view) else { panic!("release reads its sources") };
    // Ten snapshots to make sure of, and ten heads to record: the fixture's sources have none.
    assert_eq!((d.reason.as_str(), d.rewrites.len(), d.effects.len()), ("pinned", 50, 20), "a release pinning 50 references to 10 sources");
    c.bench_function("20 containers / 50 references, release", |b| {
        b.iter(|| {
            let view = View { policy: &policy, state: &big_state, fresh: &fresh_big, failed: &Failed::new(), now, namespace: None };
            black_box(admission::workload::decide(black_box(&req), &view))
        })
    });

    // (c) a 1 MiB ConfigMap UPDATE of a source, 200 keys of about 5 KiB: every value changes, one
    // key is renamed. Hash the new content, compare with the old one, diff the keys.
    let (old, new) = big_configmaps();
    let mut cm_state = State::default();
    cm_state.apply_workload(Kind::Deployment, &deployment(1, 1, |_| snapshot::name("big", &content.hash(), 0)));
    let body = review_body("ConfigMap", &new, &old);
    assert!((1 << 20..(1 << 20) + (64 << 10)).contains(&serde_json::to_vec(&new["data"]).unwrap().len()), "1 MiB of data");
    let req = review::parse(&body).unwrap();
    let admission::Outcome::Done(d) = admission::configmap::decide(
        &req,
        &View { policy: &policy, state: &cm_state, fresh: &fresh, failed: &Failed::new(), now, namespace: None },
    ) else {
        panic!("decided from memory")
    };
    assert_eq!(d.reason.as_str(), "source-changed");
    assert!(
        d.response.warnings.iter().any(|w| w.contains("removed [section-199.yaml], added [section-200.yaml]")),
        "{:?}",
        d.response.warnings
    );
    c.bench_function("1 MiB configmap update, decide (hash, compare, key diff)", |b| {
        b.iter(|| {
            let view = View { policy: &policy, state: &cm_state, fresh: &fresh, failed: &Failed::new(), now, namespace: None };
            black_box(admission::configmap::decide(black_box(&req), &view))
        })
    });
    c.bench_function("1 MiB configmap update, parse+decide", |b| {
        b.iter(|| {
            let req = review::parse(black_box(&body)).unwrap();
            let view = View { policy: &policy, state: &cm_state, fresh: &fresh, failed: &Failed::new(), now, namespace: None };
            black_box(admission::configmap::decide(&req, &view))
        })
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30).measurement_time(std::time::Duration::from_secs(3));
    targets = bench
}

/// The hot paths that `--count` runs: each the whole of what the handler does with a body
/// (parse, decide, encode), on the fixtures `bench` measures.
const COUNTED: [&str; 7] = ["steady", "serve-steady", "release50", "configmap1mib", "secret1mib", "configmap-small", "secret-small"];

fn count(path: &str, n: usize) {
    // `floor-PATH`: what any webhook on this stack must do with the same body (parse the whole
    // review, answer allowed with its uid), so the counts give a noise-free ratio to the floor.
    let (path, floor) = match path.strip_prefix("floor-") {
        Some(p) => (p, true),
        None => (path, false),
    };
    // `serve-PATH`: the same body through the very router the binary serves (limits, routing,
    // handler, log span, metrics) under the binary's subscriber, so what the edge adds shows too.
    let (path, serve) = match path.strip_prefix("serve-") {
        Some(p) => (p, true),
        None => (path, false),
    };
    let policy = if path.starts_with("secret") { secrets_on() } else { Policy::default() };
    let now = "2026-12-02T10:00:00Z";
    let content = Content::from_object(&configmap("x", json!({"k": "v"})));
    let snap = |i: usize| snapshot::name(&format!("cfg-{i}"), &content.hash(), 0);
    let fresh = Fresh::new();
    let mut fresh_big = Fresh::new();
    let mut state = State::default();
    let body = match path {
        "steady" => {
            let pinned = deployment(1, 2, snap);
            state.apply_workload(Kind::Deployment, &pinned);
            review_body("Deployment", &deployment(1, 2, |i| format!("cfg-{i}")), &pinned)
        }
        "release50" => {
            let old = deployment(20, 50, snap);
            let mut new = deployment(20, 50, |i| format!("cfg-{i}"));
            new["spec"]["template"]["spec"]["containers"][0]["image"] = json!("app:2");
            for i in 0..10 {
                fresh_big.insert(SourceId::configmap(format!("cfg-{i}")), Some(configmap(&format!("cfg-{i}"), json!({"k": "v2"}))));
            }
            state.apply_workload(Kind::Deployment, &old);
            review_body("Deployment", &new, &old)
        }
        "configmap1mib" => {
            let (old, new) = big_configmaps();
            state.apply_workload(Kind::Deployment, &deployment(1, 1, |_| snapshot::name("big", &content.hash(), 0)));
            review_body("ConfigMap", &new, &old)
        }
        // The same update of a Secret, where Secrets are on: its head a MAC under the
        // namespace's key, warnings naming keys only (docs/performance.md).
        "configmap-small" => {
            let (old, new) = small_configmaps();
            state.apply_workload(Kind::Deployment, &deployment(1, 1, |_| snapshot::name("db", &content.hash(), 0)));
            review_body("ConfigMap", &new, &old)
        }
        "secret1mib" | "secret-small" => {
            let (old, new) = if path == "secret1mib" { big_secrets() } else { as_secrets(small_configmaps()) };
            let source = old["metadata"]["name"].as_str().unwrap().to_owned();
            state.set_source_kinds(confighistory::model::ids::SourceKinds::WITH_SECRETS);
            let mut w = deployment(1, 0, |_| String::new());
            w["spec"]["template"]["spec"]["volumes"] =
                json!([{"name": "s", "secret": {"secretName": snapshot::name(&source, &content.hash(), 0)}}]);
            state.apply_workload(Kind::Deployment, &w);
            review_body("Secret", &new, &old)
        }
        other => {
            eprintln!("--count: unknown path {other}; one of {COUNTED:?}");
            std::process::exit(2)
        }
    };
    let fresh = if path == "release50" { &fresh_big } else { &fresh };
    if floor {
        for _ in 0..n {
            let review: Value = serde_json::from_slice(black_box(&body)).unwrap();
            let uid = review["request"]["uid"].as_str().unwrap_or_default();
            black_box(
                serde_json::to_vec(&json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                "response": {"uid": uid, "allowed": true}}))
                .unwrap(),
            );
        }
        return;
    }
    if serve {
        return count_served(path, body, policy, state, fresh.clone(), n);
    }
    for _ in 0..n {
        let req = review::parse(black_box(&body)).unwrap();
        let failed = Failed::new();
        let view = View { policy: &policy, state: &state, fresh, failed: &failed, now, namespace: None };
        let outcome = match req.kind.kind.as_str() {
            "ConfigMap" => admission::configmap::decide(&req, &view),
            "Secret" => admission::secret::decide(&req, &view),
            _ => admission::workload::decide(&req, &view),
        };
        let Outcome::Done(d) = outcome else { panic!("{path} decides in one pass") };
        let response = d.finish(&HashMap::new());
        black_box(response.review_json(&req.uid));
    }
}

/// `n` admissions of `body` through `serve::limited(webhook::router(..))` on a current-thread
/// runtime, the sources of `fresh` in a [`MemoryCluster`], logging at info to nowhere.
fn count_served(path: &str, body: Vec<u8>, policy: Policy, state: State, fresh: Fresh, n: usize) {
    use confighistory::cluster::MemoryCluster;
    use confighistory::webhook::{self, serve, App};
    use tower::ServiceExt as _;
    confighistory::runtime::init_logging("info", false, false, std::io::sink);
    let cluster = MemoryCluster::default();
    for obj in fresh.into_values().flatten() {
        cluster.insert(obj);
    }
    let app = Arc::new(App::ready(policy, Arc::new(confighistory::cache::Lock::new(state)), Arc::new(cluster)));
    let router = serve::limited(webhook::router(app.clone()), app, 4 << 20, 64, std::time::Duration::from_secs(10));
    let body = axum::body::Bytes::from(body);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        for _ in 0..n {
            let request = axum::http::Request::post("/mutate")
                .header("content-type", "application/json")
                .header("content-length", body.len())
                .body(axum::body::Body::from(body.clone()))
                .unwrap();
            let response = router.clone().oneshot(request).await.unwrap();
            assert_eq!(response.status(), 200, "{path}");
            black_box(axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap());
        }
    });
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--count") {
        let path = args.get(i + 1).map(String::as_str).unwrap_or("");
        let n = args.get(i + 2).and_then(|n| n.parse().ok()).unwrap_or(1);
        count(path, n);
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
