//! The 1 MiB source ConfigMap UPDATE against its limit, in process, no cluster:
//! `cargo bench --bench limit`. docs/performance.md ("The 1 MiB UPDATE against its limit") gives
//! the figures and the machine.
//!
//! On `benches/load`'s scenario (b) review body (the same bytes `chbench fixtures` writes to
//! `big.json`: 200 keys of ~5 KiB, every value changed, one key renamed, 2 MiB of JSON), it times,
//! round after round, interleaved so that the machine's noise falls on all three alike:
//!
//! - (i) **the floor**'s work: the whole AdmissionReview parsed into a `serde_json::Value`,
//!   answered allowed with its uid, as `chbench floor` does (`benches/load/src/floor.rs`);
//! - (ii) **SHA-256 of the content**: the very byte stream confighistory hashes into the
//!   snapshot's name (`snapshot::framing`, docs/behaviour.md §5.1), ~1 MiB;
//! - (iii) **confighistory**: the body through the router the binary serves
//!   (`serve::limited(webhook::router(..))`: limits, routing, parse, decision, response, log span
//!   at info, metrics) on a current-thread runtime, over a cache holding what the load's cluster
//!   holds (the source, its snapshot, a Deployment pinned to it).
//!
//! The limit is (i) + (ii): no implementation of docs/behaviour.md §5 does less than parse the
//! review and hash the content. Reported: each one's CPU time per request (this thread's, from
//! `/proc/thread-self/schedstat`, so time the scheduler gave to other processes does not count),
//! and (i) + (ii) as a share of (iii). TLS and hyper's connection handling cost the floor and the
//! server the same and are left out of both.
//!
//! `cargo bench --bench limit -- --rounds N` (default 30), `-- --breakdown` to time the parse, the
//! decision and the settings diff on their own too; `-- --only PATH --seconds S` runs one of
//! `floor`, `sha`, `confighistory` in a loop for S seconds (for `perf record`); `-- --body FILE` takes
//! the review body from a file (e.g. `chbench fixtures`' `big.json`) instead of building it. Under
//! `cargo test --benches` it checks the answer and runs two rounds.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::Arc;

use std::time::{Duration, Instant};

use confighistory::cache::State;
use confighistory::cache::Writer as _;
use confighistory::cluster::MemoryCluster;
use confighistory::model::digest::{self, Sha256};
use confighistory::model::kinds::Kind;
use confighistory::model::policy::Policy;
use confighistory::model::snapshot::{self, Content};
use confighistory::webhook::{self, serve, App};
use serde_json::{json, Value};
use tower::ServiceExt as _;

// ---- benches/load/src/fixtures.rs, scenario (b), byte for byte ----

const NS: &str = "bench-steady";
const SOURCE: &str = "bench-config";
const APP: &str = "bench-app";

fn configmap(data: &BTreeMap<String, String>) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": SOURCE, "namespace": NS, "labels": {"app": APP}}, "data": data})
}

/// About `size` bytes of config text over `keys` keys (`seed` makes values differ).
fn big_data(keys: usize, size: usize, seed: &str) -> BTreeMap<String, String> {
    let per = size / keys;
    (0..keys)
        .map(|i| {
            let line = format!("setting_{i}_{seed}: value-{i}-abcdefghijklmnopqrstuvwxyz-0123456789\n");
            let mut v = line.repeat(per / line.len() + 1);
            v.truncate(per);
            (format!("section-{i:03}.yaml"), v)
        })
        .collect()
}

fn hash_of(data: &BTreeMap<String, String>) -> String {
    Content { data: data.clone(), ..Default::default() }.hash()
}

fn review(object: &Value, old: &Value) -> Value {
    let kind = ("", "v1", "ConfigMap");
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "0b7c6a52-8f0e-4d63-b1f4-5f8e2d9c3a10",
        "kind": {"group": kind.0, "version": kind.1, "kind": kind.2},
        "resource": {"group": kind.0, "version": kind.1, "resource": format!("{}s", kind.2.to_lowercase())},
        "requestKind": {"group": kind.0, "version": kind.1, "kind": kind.2},
        "requestResource": {"group": kind.0, "version": kind.1, "resource": format!("{}s", kind.2.to_lowercase())},
        "name": SOURCE, "namespace": NS, "operation": "UPDATE",
        "userInfo": {"username": "alice", "groups": ["developers", "system:authenticated"]},
        "object": object, "oldObject": old, "dryRun": false,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "UpdateOptions", "fieldManager": "kubectl-client-side-apply"}}})
}

/// `big.json`: the 1 MiB UPDATE of the source, values changed, one key removed, one added.
fn big_review() -> Vec<u8> {
    let before = big_data(200, 1024 * 1024, "a");
    let mut after = big_data(200, 1024 * 1024, "b");
    after.remove("section-199.yaml");
    after.insert("section-200.yaml".into(), before["section-199.yaml"].clone());
    let head = hash_of(&before);
    let served = |data: &BTreeMap<String, String>, rv: &str| {
        let mut cm = configmap(data);
        cm["metadata"]["uid"] = json!("2d9e7f30-5a1b-4c8d-8e2f-7b6a5c4d3e21");
        cm["metadata"]["resourceVersion"] = json!(rv);
        cm["metadata"]["creationTimestamp"] = json!("2026-12-01T09:00:00Z");
        cm["metadata"]["annotations"] = json!({"confighistory.io/head": head, "confighistory.io/changed-at": "2026-12-01T09:00:00Z"});
        cm
    };
    serde_json::to_vec(&review(&served(&after, "48300"), &served(&before, "48299"))).unwrap()
}

/// The cache of the load's cluster (`steady.json`): the namespace, the source, its snapshot and
/// a Deployment pinned to it (no plain-name user: the 1 MiB UPDATE reads nothing).
fn state() -> State {
    let data: BTreeMap<String, String> =
        [("mode".to_owned(), "strict".to_owned()), ("app.yaml".to_owned(), "listen: 8080\nupstream: pricing\nretries: 3\n".to_owned())]
            .into();
    let hash = hash_of(&data);
    let snap = snapshot::name(SOURCE, &hash, 0);
    let mut state = State::default();
    state.apply_namespace(&json!({"metadata": {"name": NS, "labels": {"confighistory.io/exclude": "true"}}}));
    state.apply_configmap(&configmap(&data));
    state.apply_configmap(&snapshot::object(NS, SOURCE, &snap, &Content { data, ..Default::default() }, &[]));
    state.apply_workload(
        Kind::Deployment,
        &json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": APP, "namespace": NS, "uid": "6f1c2a9e-3b7d-4c1e-9a53-0d2f8e7b4c11",
                "annotations": {"confighistory.io/pins": format!("{{\"{SOURCE}\":\"{hash}\"}}")}},
            "spec": {"template": {"metadata": {"labels": {"app": APP}},
                "spec": {"volumes": [{"name": "config", "configMap": {"name": snap}}], "containers": [{"name": "app", "image": "app:1"}]}}}}),
    );
    state
}

// ---- the three paths ----

/// (i) What `chbench floor` does with a body.
fn floor(body: &[u8]) -> Vec<u8> {
    let review: Value = serde_json::from_slice(body).unwrap();
    let uid = review.pointer("/request/uid").cloned().unwrap_or(Value::Null);
    let out = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {"uid": uid, "allowed": true}});
    serde_json::to_vec(&out).unwrap()
}

/// (ii) The stream confighistory hashes for the content of the review's `object`.
fn framing_of(body: &[u8]) -> (Vec<u8>, String) {
    let review: Value = serde_json::from_slice(body).unwrap();
    let content = Content::from_object(&review["request"]["object"]);
    (snapshot::framing(&content), content.hash())
}

struct Served {
    runtime: tokio::runtime::Runtime,
    router: axum::Router,
    body: axum::body::Bytes,
}

impl Served {
    fn new(body: Vec<u8>) -> Served {
        confighistory::runtime::init_logging("info", false, false, std::io::sink);
        let app =
            Arc::new(App::ready(Policy::default(), Arc::new(confighistory::cache::Lock::new(state())), Arc::new(MemoryCluster::default())));
        let router = serve::limited(webhook::router(app.clone()), app, 4 << 20, 64, Duration::from_secs(10));
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        Served { runtime, router, body: body.into() }
    }

    /// (iii) One admission of the body; the answer.
    fn admit(&self) -> axum::body::Bytes {
        self.runtime.block_on(async {
            let request = axum::http::Request::post("/mutate")
                .header("content-type", "application/json")
                .header("content-length", self.body.len())
                .body(axum::body::Body::from(self.body.clone()))
                .unwrap();
            let response = self.router.clone().oneshot(request).await.unwrap();
            assert_eq!(response.status(), 200);
            axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap()
        })
    }
}

/// This thread's CPU time so far (the scheduler's account, `/proc/thread-self/schedstat`).
fn cpu() -> Duration {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    Duration::from_nanos(s.split_whitespace().next().and_then(|n| n.parse().ok()).unwrap_or(0))
}

/// CPU and wall time per call of `f`, over `n` calls.
fn per_call(n: u32, mut f: impl FnMut()) -> (Duration, Duration) {
    let (c, t) = (cpu(), Instant::now());
    for _ in 0..n {
        f();
    }
    ((cpu() - c) / n, t.elapsed() / n)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn us(d: Duration) -> String {
    format!("{:.0} µs", d.as_secs_f64() * 1e6)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).map(String::as_str);
    let full = args.iter().any(|a| a == "--bench");
    let body = match arg("--body") {
        Some(path) => std::fs::read(path).unwrap(),
        None => big_review(),
    };
    let (framing, hash) = framing_of(&body);
    let served = Served::new(body.clone());

    // The answer is the one the load gets: the content's head, the renamed key named.
    let answer: Value = serde_json::from_slice(&served.admit()).unwrap();
    let warnings = answer["response"]["warnings"].to_string();
    assert!(warnings.contains("removed [section-199.yaml], added [section-200.yaml]"), "{answer}");
    let patch = answer["response"]["patch"].as_str().unwrap_or_default();
    use base64::Engine as _;
    let patch = String::from_utf8(base64::engine::general_purpose::STANDARD.decode(patch).unwrap()).unwrap();
    assert!(patch.contains(&hash), "the head is the content's hash: {patch}");

    if let Some(only) = arg("--only") {
        let seconds: f64 = arg("--seconds").and_then(|s| s.parse().ok()).unwrap_or(10.0);
        let until = Instant::now() + Duration::from_secs_f64(seconds);
        let mut n = 0u64;
        while Instant::now() < until {
            match only {
                "floor" => drop(black_box(floor(black_box(&body)))),
                "sha" => {
                    black_box(digest::digest::<Sha256>(black_box(&framing)));
                }
                "confighistory" => drop(black_box(served.admit())),
                other => panic!("--only {other}: one of floor, sha, confighistory"),
            }
            n += 1;
        }
        println!("{only}: {n} runs in {seconds} s");
        return;
    }

    let rounds: usize = arg("--rounds").and_then(|s| s.parse().ok()).unwrap_or(if full { 30 } else { 2 });
    let per_round = 10;
    let (mut f, mut s, mut c) = (vec![], vec![], vec![]);
    let (mut fw, mut sw, mut cw) = (vec![], vec![], vec![]);
    for _ in 0..rounds {
        let (cpu, wall) = per_call(per_round, || drop(black_box(floor(black_box(&body)))));
        f.push(cpu);
        fw.push(wall);
        let (cpu, wall) = per_call(per_round, || {
            black_box(digest::digest::<Sha256>(black_box(&framing)));
        });
        s.push(cpu);
        sw.push(wall);
        let (cpu, wall) = per_call(per_round, || drop(black_box(served.admit())));
        c.push(cpu);
        cw.push(wall);
    }
    // Where (iii) goes beyond the floor: the parse alone (into the trimmed request), the decision
    // alone (on a parsed request: hash, compare, key diff, settings diff, patch), the settings
    // diff alone.
    let (mut p, mut d, mut w) = (vec![], vec![], vec![]);
    if args.iter().any(|a| a == "--breakdown") {
        use confighistory::admission::{self, review, Failed, Fresh, View};
        let state = state();
        let (policy, fresh, failed) = (Policy::default(), Fresh::new(), Failed::new());
        let req = review::parse(&body).unwrap();
        let (old, new) = (req.old_content().owned(), Content::from_object(req.object()));
        for _ in 0..rounds {
            p.push(per_call(per_round, || drop(black_box(review::parse(black_box(&body)).unwrap()))).0);
            d.push(
                per_call(per_round, || {
                    let view = View {
                        policy: &policy,
                        state: &state,
                        fresh: &fresh,
                        failed: &failed,
                        now: "2026-12-05T06:00:00Z",
                        namespace: None,
                    };
                    drop(black_box(admission::configmap::decide(black_box(&req), &view)))
                })
                .0,
            );
            w.push(per_call(per_round, || drop(black_box(admission::settings::warnings(SOURCE, &old.borrowed(), &new.borrowed())))).0);
        }
    }
    let (f, s, c) = (median(f), median(s), median(c));
    let limit = f + s;
    println!(
        "1 MiB source UPDATE ({} bytes of review, {} bytes hashed), {rounds} rounds of {per_round}, CPU per request (median):",
        body.len(),
        framing.len()
    );
    println!("  (i)   floor: parse into Value, answer          {:>9}   (wall {})", us(f), us(median(fw)));
    println!("  (ii)  SHA-256 of the content                   {:>9}   (wall {})", us(s), us(median(sw)));
    println!("  (iii) confighistory through the router         {:>9}   (wall {})", us(c), us(median(cw)));
    println!("  limit (i)+(ii)                                 {:>9}", us(limit));
    println!(
        "  confighistory at {:.1}% of the limit; {} beyond it (the 90% target allows {})",
        limit.as_secs_f64() / c.as_secs_f64() * 100.0,
        us(c.saturating_sub(limit)),
        us(limit / 9)
    );
    if !p.is_empty() {
        println!(
            "  of (iii): the parse {}, the decision {} (of which SHA-256 ~(ii), the settings diff {})",
            us(median(p)),
            us(median(d)),
            us(median(w))
        );
    }
    println!("  load average: {}", std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim());
}
