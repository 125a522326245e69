//! Micro-benchmarks of the pure decisions (issue 7): what one admission costs the API server's
//! write path before any I/O. `cargo bench --bench decisions`.

use std::collections::HashMap;
use std::hint::black_box;

use confighistory::admission::{self, review, Fresh, Outcome, View};
use confighistory::policy::Policy;
use confighistory::snapshot::{self, Content};
use confighistory::state::State;
use confighistory::template::Kind;
use criterion::{criterion_group, criterion_main, Criterion};
use serde_json::{json, Value};

fn configmap(name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "shop"}, "data": data})
}

/// A Deployment with `containers` containers, each reading `refs_per_container` ConfigMaps.
fn deployment(containers: usize, refs_per_container: usize, name_of: impl Fn(usize) -> String) -> Value {
    let cs: Vec<Value> = (0..containers)
        .map(|c| {
            let env: Vec<Value> = (0..refs_per_container)
                .map(|r| json!({"name": format!("V{r}"), "valueFrom": {"configMapKeyRef": {"name": name_of((c * refs_per_container + r) % 10), "key": "k"}}}))
                .collect();
            json!({"name": format!("c{c}"), "image": "app:1", "env": env})
        })
        .collect();
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "app", "namespace": "shop", "uid": "u1"},
        "spec": {"replicas": 3, "template": {"metadata": {"labels": {"app": "app"}}, "spec": {"containers": cs}}}})
}

fn request(kind: &str, op: &str, object: &Value, old: &Value) -> review::Request {
    let body = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "1", "kind": {"group": "apps", "version": "v1", "kind": kind}, "name": object["metadata"]["name"], "namespace": "shop",
        "operation": op, "userInfo": {"username": "alice"}, "object": object, "oldObject": old}});
    review::parse(&serde_json::to_vec(&body).unwrap()).unwrap()
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
    let req = request("Deployment", "UPDATE", &plain, &pinned);
    c.bench_function("small deployment, steady state", |b| {
        b.iter(|| {
            let view = View { policy: &policy, state: &state, fresh: &fresh, now };
            black_box(admission::workload::decide(black_box(&req), &view))
        })
    });

    // The same through parse → decide → serialize, as the handler does.
    let body = serde_json::to_vec(&json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "1", "kind": {"group": "apps", "version": "v1", "kind": "Deployment"}, "name": "app", "namespace": "shop",
        "operation": "UPDATE", "userInfo": {"username": "alice"}, "object": plain, "oldObject": pinned}}))
    .unwrap();
    c.bench_function("small deployment, parse+decide+encode", |b| {
        b.iter(|| {
            let req = review::parse(black_box(&body)).unwrap();
            let view = View { policy: &policy, state: &state, fresh: &fresh, now };
            let Outcome::Done(d) = admission::workload::decide(&req, &view) else { panic!() };
            black_box(serde_json::to_vec(&d.finish(&HashMap::new()).into_review(&req.uid)).unwrap())
        })
    });

    // (b) 20 containers, 50 references to 10 sources, a release (template changed).
    let big_plain = deployment(20, 50 / 20 + 1, |i| format!("cfg-{i}"));
    let big_old = deployment(20, 50 / 20 + 1, snap);
    let mut big_new = big_plain.clone();
    big_new["spec"]["template"]["spec"]["containers"][0]["image"] = json!("app:2");
    let mut fresh_big = Fresh::new();
    for i in 0..10 {
        fresh_big.insert(format!("cfg-{i}"), Some(configmap(&format!("cfg-{i}"), json!({"k": "v2"}))));
    }
    let mut big_state = State::default();
    big_state.apply_workload(Kind::Deployment, &big_old);
    let req = request("Deployment", "UPDATE", &big_new, &big_old);
    c.bench_function("20 containers / 50 references, release", |b| {
        b.iter(|| {
            let view = View { policy: &policy, state: &big_state, fresh: &fresh_big, now };
            black_box(admission::workload::decide(black_box(&req), &view))
        })
    });

    // (c) a 1 MiB ConfigMap UPDATE of a source: hash both contents and diff the keys.
    let blob = "x".repeat(1024 * 1024 - 1024);
    let old = configmap("big", json!({"a": blob, "b": "1"}));
    let new = configmap("big", json!({"a": format!("{blob}y"), "c": "1"}));
    let mut cm_state = State::default();
    cm_state.apply_workload(Kind::Deployment, &deployment(1, 1, |_| snapshot::name("big", &content.hash(), 0)));
    let body = serde_json::to_vec(&json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "1", "kind": {"group": "", "version": "v1", "kind": "ConfigMap"}, "name": "big", "namespace": "shop",
        "operation": "UPDATE", "userInfo": {"username": "alice"}, "object": new, "oldObject": old}}))
    .unwrap();
    c.bench_function("1 MiB configmap update, parse+decide", |b| {
        b.iter(|| {
            let req = review::parse(black_box(&body)).unwrap();
            let view = View { policy: &policy, state: &cm_state, fresh: &fresh, now };
            black_box(admission::configmap::decide(&req, &view))
        })
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30).measurement_time(std::time::Duration::from_secs(3));
    targets = bench
}
criterion_main!(benches);
