//! The memory model (docs/reliability.md, "The memory model"), proved by shape: for request shapes
//! a tenant or a forger can send (wide arrays, deep nesting, many small maps, many keys, long
//! strings, many references), the heap that parsing a review takes, measured by a counting
//! allocator, stays under the cost admission charges before parsing (`model::json::parse_cost`).

use axum::http::StatusCode;
use confighistory::admission::review;
use confighistory::cache::{Lock, Writer};
use confighistory::cluster::MemoryCluster;
use confighistory::model::json::parse_cost;
use confighistory::model::policy::Policy;
use confighistory::webhook::memory::Memory;
use confighistory::webhook::{self, App};
use peak_alloc::PeakAlloc;

mod common;
use serde_json::{json, Value};

/// Counts the bytes allocated now and the most at once (a reallocation counts old and new).
#[global_allocator]
static ALLOC: PeakAlloc = PeakAlloc;

/// The allocator counts every thread: one test of this file at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Runs `test` alone, on a runtime of its own thread.
fn alone<F: std::future::Future<Output = ()>>(test: F) {
    let _serial = SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(test);
}

/// The most bytes `f` had allocated at once beyond what was allocated before it.
fn peak_of<T>(f: impl FnOnce() -> T) -> (usize, T) {
    let before = ALLOC.current_usage();
    ALLOC.reset_peak_usage();
    let out = f();
    (ALLOC.peak_usage().saturating_sub(before), out)
}

fn review_of(object: Value) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "u", "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
            "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
            "name": "web", "namespace": "shop", "operation": "CREATE", "userInfo": {"username": "alice"},
            "object": object, "dryRun": true
        }
    }))
    .unwrap()
}

fn shapes() -> Vec<(&'static str, Vec<u8>)> {
    let env: Vec<Value> = (0..50_000).map(|_| json!({"name": "A"})).collect();
    let wide_env = review_of(common::bare_deployment("web", json!({"containers": [{"name": "c", "image": "i", "env": env}]})));
    let maps: Vec<Value> = (0..60_000).map(|_| json!({"a": 1})).collect();
    let small_maps = review_of(json!({"metadata": {"name": "web"}, "x": maps}));
    let numbers = review_of(json!({"metadata": {"name": "web"}, "x": vec![1; 200_000]}));
    let strings = review_of(json!({"metadata": {"name": "web"}, "x": vec!["a"; 100_000]}));
    let keys: serde_json::Map<String, Value> = (0..40_000).map(|i| (format!("k{i}"), json!("v"))).collect();
    let many_keys = review_of(json!({"metadata": {"name": "web"}, "data": keys}));
    let long = review_of(json!({"metadata": {"name": "web"}, "data": {"big": "x".repeat(1 << 20)}}));
    let nested = |levels: usize| {
        let mut deep = json!(1);
        for _ in 0..levels {
            deep = json!({"a": [deep]});
        }
        review_of(json!({"metadata": {"name": "web"}, "x": deep}))
    };
    let deep = nested(60);
    // Built as text: a `Value` this deep overflows the stack when serialized or dropped.
    let too_deep = String::from_utf8(review_of(json!({"metadata": {"name": "web"}, "x": "HERE"})))
        .unwrap()
        .replace("\"HERE\"", &format!("{}{}", "{\"a\":[".repeat(5_000), "]}".repeat(5_000)))
        .into_bytes();
    let empties = review_of(json!({"metadata": {"name": "web"}, "x": vec![json!([]); 100_000], "y": vec![json!({}); 100_000]}));
    let volumes: Vec<Value> = (0..64).map(|i| json!({"name": format!("v{i}"), "configMap": {"name": format!("cm{i}")}})).collect();
    let references = review_of(common::bare_deployment("web", json!({"containers": [{"name": "c", "image": "i"}], "volumes": volumes})));
    let escaped = review_of(json!({"metadata": {"name": "web"}, "x": vec!["\u{1}\"\\"; 50_000]}));
    vec![
        ("wide env array", wide_env),
        ("many one-key maps", small_maps),
        ("many numbers", numbers),
        ("many short strings", strings),
        ("many keys in one map", many_keys),
        ("one long string", long),
        ("deep nesting", deep),
        ("nesting past serde_json's limit", too_deep),
        ("many empty containers", empties),
        ("many references", references),
        ("escaped strings", escaped),
    ]
}

#[test]
fn parsing_a_review_never_takes_more_than_its_charged_cost() {
    let _serial = SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    for (shape, body) in shapes() {
        let cost = parse_cost(&body);
        let (peak, parsed) = peak_of(|| review::parse(&body));
        assert_eq!(parsed.is_ok(), !shape.contains("past"), "{shape}: {:?}", parsed.err());
        eprintln!(
            "{shape}: body {} B, parsed peak {peak} B, charged {cost} B ({:.1}x the body, peak {:.0}% of it)",
            body.len(),
            cost as f64 / body.len() as f64,
            100.0 * peak as f64 / cost as f64
        );
        assert!(peak <= cost, "{shape}: parsing took {peak} bytes, more than the {cost} charged");
        let bound = confighistory::model::json::parse_bound(body.len());
        assert!(cost <= bound, "{shape}: the scan's {cost} bytes pass the length's bound {bound}");
    }
}

/// A server over an in-memory cluster holding `sources` (name, bytes of its one value) in `shop`,
/// with `budget` bytes for admissions.
fn server(sources: &[(String, usize)], budget: usize) -> std::sync::Arc<App> {
    let (state, cluster) = (std::sync::Arc::new(Lock::default()), MemoryCluster::default());
    for (name, bytes) in sources {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "shop", "uid": format!("uid-{name}"), "resourceVersion": "1"},
            "data": {"config": "x".repeat(*bytes)}});
        cluster.insert(cm.clone());
        state.write().apply_configmap(&cm);
    }
    let app = App::ready(Policy::default(), state, std::sync::Arc::new(cluster));
    std::sync::Arc::new(App { memory: std::sync::Arc::new(Memory::new(budget)), ..app })
}

/// A Deployment CREATE (dry run or not) whose template mounts each of `sources`.
fn deployment_naming(sources: &[(String, usize)], dry_run: bool) -> Vec<u8> {
    let volumes: Vec<Value> = sources.iter().map(|(n, _)| json!({"name": n, "configMap": {"name": n}})).collect();
    let mut body: Value = serde_json::from_slice(&review_of(common::bare_deployment(
        "web",
        json!({"containers": [{"name": "c", "image": "i"}], "volumes": volumes}),
    )))
    .unwrap();
    body["request"]["dryRun"] = json!(dry_run);
    serde_json::to_vec(&body).unwrap()
}

/// Posts to /mutate of the router the binary serves (the shared client of the in-process suites).
async fn post(app: &std::sync::Arc<App>, body: Vec<u8>) -> (StatusCode, Value) {
    let answer = common::post(app, "/mutate", body).await;
    (answer.status, answer.body)
}

const MIB: usize = 1 << 20;

/// Every shape above, decided through the router the binary serves: the whole admission (parse,
/// decision, answer) stays under what it is charged, and the charge is given back.
#[test]
fn an_admission_never_takes_more_than_it_is_charged() {
    alone(async {
        let app = server(&[], 256 * MIB);
        for (shape, body) in shapes() {
            let charged = webhook::request_cost(&body);
            let (peak, (status, _)) = peak_of_async(post(&app, body)).await;
            eprintln!("{shape}: {status}, peak {peak} B of {charged} B charged");
            assert!(peak <= charged, "{shape}: the admission took {peak} bytes, more than the {charged} charged");
            assert_eq!(app.memory.available(), 256 * MIB, "{shape}: the charge is given back");
        }
    });
}

/// The round-2 shapes: a body whose tree would pass what one request may take is refused before
/// it is parsed, with a message saying what to do, and takes (almost) nothing.
#[test]
fn a_review_too_large_to_decide_is_refused_before_it_is_parsed() {
    alone(async {
        let app = server(&[], 64 * MIB);
        let env: Vec<Value> = (0..225_000).map(|_| json!({"name": "A"})).collect();
        let body = review_of(common::bare_deployment("web", json!({"containers": [{"name": "c", "image": "i", "env": env}]})));
        assert!(body.len() < 4 * MIB, "within the body limit: {} bytes", body.len());
        let (peak, (status, answer)) = peak_of_async(post(&app, body.clone())).await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{answer}");
        let message = answer["error"].as_str().unwrap();
        assert!(message.contains("more than the 48.0 MiB one request may take") && message.contains("Split the object"), "{message}");
        // The body itself and the router's own buffers: never a tree.
        assert!(peak < 2 * body.len() + MIB, "refused after {peak} bytes for a {} byte body", body.len());
        assert_eq!(app.memory.available(), 64 * MIB);
    });
}

/// A small template naming many large sources: each read is charged before it is made, so
/// reads that would take the request past its share are not made, and the decision refuses the
/// request with a message naming the cause; nothing is written.
#[test]
fn sources_too_large_to_hold_together_are_not_read() {
    alone(async {
        let sources: Vec<(String, usize)> = (0..64).map(|i| (format!("big-{i}"), 900 * 1024)).collect();
        let app = server(&sources, 64 * MIB);
        let (peak, (status, answer)) = peak_of_async(post(&app, deployment_naming(&sources, true))).await;
        assert_eq!(status, StatusCode::OK);
        let response = &answer["response"];
        assert_eq!(response["allowed"], json!(false), "{response}");
        let message = response["status"]["message"].as_str().unwrap();
        assert!(message.contains("too large to read together") && message.contains("48 MiB"), "{message}");
        assert!(peak <= 64 * MIB, "took {peak} bytes with a 64 MiB budget");
        assert_eq!(app.memory.available(), 64 * MIB);
    });
}

/// The same template with sources that fit is decided as before: pinned, every source read.
#[test]
fn sources_that_fit_are_read_and_pinned() {
    alone(async {
        let sources: Vec<(String, usize)> = (0..8).map(|i| (format!("cfg-{i}"), 100 * 1024)).collect();
        let app = server(&sources, 64 * MIB);
        let (_, (status, answer)) = peak_of_async(post(&app, deployment_naming(&sources, true))).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(answer["response"]["allowed"], json!(true), "{answer}");
        assert!(answer["response"]["patch"].is_string(), "pinned: {answer}");
        assert_eq!(app.memory.available(), 64 * MIB);
    });
}

async fn peak_of_async<T>(f: impl std::future::Future<Output = T>) -> (usize, T) {
    let before = ALLOC.current_usage();
    ALLOC.reset_peak_usage();
    let out = f.await;
    (ALLOC.peak_usage().saturating_sub(before), out)
}

/// Where a generated shape goes: the places a tenant (or a forger) fills with what they like.
#[derive(Clone, Copy, Debug)]
enum Place {
    /// A container's `env` (the round-2 attack's place).
    Env,
    /// The object's annotations.
    Annotations,
    /// A ConfigMap's `data`, as an object of keys.
    Data,
    /// A field of the object no rule reads.
    Field,
}

/// Any JSON a generator builds: scalars (strings with escapes and non-ASCII), arrays and maps,
/// nested up to 8 levels; then repeated side by side so the body grows to megabytes.
fn generated() -> impl proptest::strategy::Strategy<Value = (Place, Value, usize)> {
    use proptest::prelude::*;
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        (-1e9f64..1e9).prop_map(|f| json!(f)),
        "[a-zA-Z\"\\\\\u{1}\u{e9}\u{1F600} ]{0,40}".prop_map(Value::from),
    ];
    let tree = leaf.prop_recursive(8, 2048, 48, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..48).prop_map(Value::Array),
            prop::collection::vec(("[a-z_]{1,12}", inner), 0..48).prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    });
    let place = prop_oneof![Just(Place::Env), Just(Place::Annotations), Just(Place::Data), Just(Place::Field)];
    (place, tree, 1usize..50_000)
}

/// The review `shape` makes: the tree repeated `times` times (at most about 3 MiB of it) where
/// `place` says.
fn generated_review(place: Place, tree: &Value, times: usize) -> Vec<u8> {
    let one = serde_json::to_vec(tree).unwrap().len().max(1);
    let times = times.min((3 * MIB) / one).max(1);
    let many = vec![tree.clone(); times];
    let keyed = || Value::Object(many.iter().enumerate().map(|(i, v)| (format!("k{i}"), v.clone())).collect());
    let object = match place {
        Place::Env => common::bare_deployment(
            "web",
            json!({"containers": [{"name": "c", "image": "i", "env": many.iter().map(|v| json!({"name": "A", "value": v})).collect::<Vec<_>>()}]}),
        ),
        Place::Annotations => json!({"metadata": {"name": "web", "annotations": keyed()}}),
        Place::Data => json!({"metadata": {"name": "web"}, "data": keyed()}),
        Place::Field => json!({"metadata": {"name": "web"}, "x": many}),
    };
    review_of(object)
}

/// Proof by shape, generated: for request shapes a generator builds (fixed seed, so a failure
/// reproduces), parsing takes no more heap than admission charged for it before parsing, the
/// whole admission through the router the binary serves no more than the request's charge, and
/// the charge is given back.
#[test]
fn generated_shapes_never_take_more_than_they_are_charged() {
    use proptest::test_runner::{Config, RngSeed, TestRunner};
    let _serial = SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let app = server(&[], 256 * MIB);
    let config = Config { cases: 32, rng_seed: RngSeed::Fixed(0x5ba9e5), failure_persistence: None, ..Config::default() };
    let (largest, closest) = (std::cell::Cell::new(0usize), std::cell::Cell::new(0f64));
    TestRunner::new(config)
        .run(&generated(), |(place, tree, times)| {
            let body = generated_review(place, &tree, times);
            let cost = parse_cost(&body);
            let (peak, parsed) = peak_of(|| review::parse(&body));
            drop(parsed);
            proptest::prop_assert!(peak <= cost, "{place:?} x{times}: parsing took {peak} B, charged {cost} B");
            let charged = webhook::request_cost(&body);
            let len = body.len();
            let (peak, (status, answer)) = runtime.block_on(peak_of_async(post(&app, body)));
            proptest::prop_assert!(peak <= charged, "{place:?}: the admission took {peak} B of {charged} B charged ({status}: {answer})");
            proptest::prop_assert_eq!(app.memory.available(), 256 * MIB);
            largest.set(largest.get().max(len));
            closest.set(closest.get().max(peak as f64 / charged as f64));
            Ok(())
        })
        .unwrap();
    eprintln!(
        "32 generated shapes, bodies up to {} B: the admission's peak at most {:.0}% of its charge",
        largest.get(),
        100.0 * closest.get()
    );
}

/// A Deployment CREATE in `ns` naming four ConfigMaps nobody made (`missing-0` .. `missing-3`).
fn naming_missing_in(ns: &str) -> Vec<u8> {
    let volumes: Vec<Value> = (0..4).map(|i| json!({"name": format!("v{i}"), "configMap": {"name": format!("missing-{i}")}})).collect();
    let mut body: Value = serde_json::from_slice(&review_of(common::bare_deployment(
        "web",
        json!({"containers": [{"name": "c", "image": "i"}], "volumes": volumes}),
    )))
    .unwrap();
    body["request"]["namespace"] = json!(ns);
    body["request"]["object"]["metadata"]["namespace"] = json!(ns);
    serde_json::to_vec(&body).unwrap()
}

/// The many-namespaces shape: reviews naming ConfigMaps nobody made, each in another of 12,000
/// namespaces that exist (as a forger at the port, or tenants of a large cluster, can send).
/// What the replica remembers per namespace (read buckets, names found missing) is bounded, so
/// the heap it keeps stops growing: the last 8,000 namespaces add almost nothing to what the
/// first 4,000 left.
#[test]
fn reviews_across_many_namespaces_keep_a_bounded_amount_of_memory() {
    use confighistory::cache::Watched;
    use confighistory::model::ids::SourceKind;
    alone(async {
        let (state, cluster) = (std::sync::Arc::new(Lock::default()), MemoryCluster::default());
        {
            let mut s = state.write();
            for i in 0..12_000 {
                s.apply_namespace(&json!({"metadata": {"name": format!("ns-{i:05}")}}));
            }
            s.listed(Watched::Namespaces);
            s.listed(Watched::Sources(SourceKind::ConfigMap));
        }
        let calls = cluster.calls.clone();
        let app = std::sync::Arc::new(App::ready(Policy::default(), state, std::sync::Arc::new(cluster)));
        let mut kept = Vec::new();
        for round in 0..3 {
            for i in round * 4_000..(round + 1) * 4_000 {
                let (status, answer) = post(&app, naming_missing_in(&format!("ns-{i:05}"))).await;
                assert_eq!(status, StatusCode::OK, "{answer}");
                assert_eq!(answer["response"]["allowed"], json!(true), "{answer}");
            }
            // The in-memory API server's own record of calls is the test's, not the replica's.
            calls.lock().unwrap().clear();
            kept.push(ALLOC.current_usage());
        }
        let grew = |a: usize, b: usize| b.saturating_sub(a);
        eprintln!(
            "heap kept after 4,000, 8,000 and 12,000 namespaces: {kept:?} B (+{} B, then +{} B)",
            grew(kept[0], kept[1]),
            grew(kept[1], kept[2])
        );
        // Under 8 bytes a namespace for the last 8,000: an entry per namespace (a name and a
        // bucket, with its map's room) is more (unbounded, the same rounds kept +465 KB).
        assert!(grew(kept[0], kept[2]) < 64 * 1024, "8,000 more namespaces kept {} more bytes", grew(kept[0], kept[2]));
    });
}

/// A review of `kind` (group, kind, resource) for `object` (and `old` for an UPDATE).
fn review_of_kind((group, kind, resource): (&str, &str, &str), object: &Value, old: Option<&Value>) -> Vec<u8> {
    let mut request = json!({
        "uid": "u", "kind": {"group": group, "version": "v1", "kind": kind},
        "resource": {"group": group, "version": "v1", "resource": resource},
        "name": "web", "namespace": "shop", "operation": if old.is_some() { "UPDATE" } else { "CREATE" },
        "userInfo": {"username": "alice"}, "object": object, "dryRun": true
    });
    if let Some(old) = old {
        request["oldObject"] = old.clone();
    }
    serde_json::to_vec(&json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})).unwrap()
}

/// The dense template (round 2's env shape) in every workload kind's place, CREATE and UPDATE,
/// at both endpoints: what a kind's rules do with its template (compare it with the old one, hash
/// it, match a Job with the CronJob that made it) is charged with the rest. A Job whose controller
/// is a CronJob of the cache is the kind whose rule once copied the whole template.
#[test]
fn every_workload_kind_is_decided_within_its_charge() {
    use confighistory::model::kinds::Kind;
    alone(async {
        let app = server(&[("app-config".into(), 64)], 256 * MIB);
        let cronjob = json!({"apiVersion": "batch/v1", "kind": "CronJob",
            "metadata": {"name": "report", "namespace": "shop", "uid": "uid-report"},
            "spec": {"schedule": "@daily", "jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}}}});
        app.ctx.state.write().apply_workload(Kind::CronJob, &cronjob);
        let env: Vec<Value> = (0..50_000).map(|_| json!({"name": "A"})).collect();
        let template = json!({"metadata": {"labels": {"app": "web", "job-name": "report-1"}}, "spec": {
            "volumes": [{"name": "c", "configMap": {"name": "app-config"}}],
            "containers": [{"name": "c", "image": "i", "env": env}]}});
        let meta = json!({"name": "web", "namespace": "shop", "uid": "uid-web"});
        let job_meta = json!({"name": "web", "namespace": "shop",
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "CronJob", "name": "report", "uid": "uid-report", "controller": true}]});
        let shapes = [
            ("Deployment", ("apps", "Deployment", "deployments"), json!({"metadata": meta, "spec": {"template": template}})),
            ("StatefulSet", ("apps", "StatefulSet", "statefulsets"), json!({"metadata": meta, "spec": {"template": template}})),
            (
                "CronJob",
                ("batch", "CronJob", "cronjobs"),
                json!({"metadata": meta, "spec": {"jobTemplate": {"spec": {"template": template}}}}),
            ),
            ("a CronJob's Job", ("batch", "Job", "jobs"), json!({"metadata": job_meta, "spec": {"template": template}})),
        ];
        for (name, kind, object) in shapes {
            let mut old = object.clone();
            old["metadata"]["labels"] = json!({"changed": "yes"});
            for (operation, body) in
                [("CREATE", review_of_kind(kind, &object, None)), ("UPDATE", review_of_kind(kind, &object, Some(&old)))]
            {
                for path in ["/mutate", "/validate"] {
                    let charged = webhook::request_cost(&body);
                    let (peak, answer) = peak_of_async(common::post(&app, path, body.clone())).await;
                    eprintln!("{name} {operation} {path}: {}, peak {peak} B of {charged} B charged", answer.status);
                    assert_eq!(answer.status, StatusCode::OK, "{name} {operation} {path}: {}", answer.text);
                    assert!(peak <= charged, "{name} {operation} {path}: the admission took {peak} B, more than the {charged} B charged");
                    assert_eq!(app.memory.available(), 256 * MIB, "{name} {operation} {path}: the charge is given back");
                }
            }
        }
    });
}
