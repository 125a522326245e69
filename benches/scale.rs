//! The watch cache and the decisions that read it at cluster scale (the in-process
//! part): no cluster, the cache filled through the same apply functions the watches call, from
//! objects shaped as the API server delivers them. `cargo bench --bench scale`; docs/performance.md
//! ("Scale") gives the figures and what this does not measure.
//!
//! Under `cargo test --benches` (no `--bench` argument) it runs the same steps at a hundredth of
//! the scale, so the benchmark keeps compiling and running in CI at little cost.
//!
//! The cluster: `NAMESPACES` namespaces, each with
//! - 100 ConfigMaps, listed as metadata (`PartialObjectMetadata`, as the watch lists them), each
//!   with kubectl's `last-applied-configuration` copy of its ~2 KiB of data and managedFields:
//!   10 sources `cfg-0..9` read by the namespace's workloads (one-tenth referenced), a snapshot of
//!   each (confighistory's labels and annotations, adoption records), 80 ConfigMaps no workload reads;
//! - 10 Deployments `app-0..9`, each reading `cfg-i` and `cfg-(i+1)`: the even ones pinned to
//!   snapshots, the odd ones on the plain names; each with 5 ReplicaSets of history;
//! - in half of the namespaces, a StatefulSet pinned to `cfg-0`'s snapshot with 3 ControllerRevisions.
//!
//! Then a fan-out: one ConfigMap read by 1,000 Deployments of one namespace, with a settled change.

use std::collections::HashSet;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use confighistory::cache::Writer as _;
use confighistory::cache::{self, Lock, State};
use confighistory::cluster::MemoryCluster;
use confighistory::controller::{adopt, propagate};
use confighistory::model::ids::SourceId;
use confighistory::model::kinds::Kind;
use confighistory::model::names;
use confighistory::model::policy::Policy;
use confighistory::model::selector::Selector;
use confighistory::model::snapshot;
use confighistory::webhook::{self, App};
use serde_json::{json, Value};
use tower::ServiceExt as _;

#[path = "scale/objects.rs"]
mod objects;
use objects::*;

struct Scale {
    namespaces: usize,
    fan_out: usize,
    requests: usize,
}

/// Time spent in the cache's apply functions (the objects are built outside the clock).
#[derive(Default)]
struct Fill {
    applied: usize,
    in_apply: Duration,
}

impl Fill {
    fn apply(&mut self, state: &mut State, f: impl FnOnce(&mut State)) {
        let t = Instant::now();
        f(state);
        self.in_apply += t.elapsed();
        self.applied += 1;
    }
}

/// A namespace and its ConfigMaps (the source, snapshot and unused ones).
fn fill_configmaps(state: &mut State, fill: &mut Fill, n: usize) {
    let ns = ns_name(n);
    let ns_obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "uid": uid("ns", n, 0), "resourceVersion": "1",
        "creationTimestamp": CREATED, "labels": {"kubernetes.io/metadata.name": ns, "team": format!("t{}", n % 50)}}, "status": {"phase": "Active"}});
    fill.apply(state, |s| s.apply_namespace(&ns_obj));
    for i in 0..CONFIGMAPS_PER_NS {
        let obj = if i < SOURCES_PER_NS {
            let (name, d, hash, _) = source(i);
            let annotations = json!({names::HEAD: hash, names::CHANGED_AT: CREATED, names::PROPAGATED: hash});
            configmap_metadata(&ns, &name, uid("cm", n, i), &d, json!({"app": name}), annotations)
        } else if i < 2 * SOURCES_PER_NS {
            // The snapshot of source i - 10 (its adoption records are set by `fill_adoptions`).
            let (name, d, hash, snap) = source(i - SOURCES_PER_NS);
            let labels = json!({names::HASH_LABEL: hash, names::MANAGED_BY: names::MANAGER, names::SOURCE_LABEL: name});
            configmap_metadata(&ns, &snap, uid("cm", n, i), &d, labels, json!({names::LAST_USED: CREATED}))
        } else {
            let name = format!("unused-{i}");
            configmap_metadata(&ns, &name, uid("cm", n, i), &data(&name, 1), json!({"app": name, "tier": "backend"}), json!({}))
        };
        fill.apply(state, |s| s.apply_configmap(&obj));
    }
}

/// A namespace's Deployments and, `with_statefulset`, its StatefulSet.
fn fill_workloads(state: &mut State, fill: &mut Fill, n: usize, with_statefulset: bool) {
    let ns = ns_name(n);
    for i in 0..DEPLOYMENTS_PER_NS {
        let d = deployment(&ns, &format!("app-{i}"), &uid("deploy", n, i), &refs_of(i));
        fill.apply(state, |s| s.apply_workload(Kind::Deployment, &d));
    }
    if with_statefulset {
        let sts = statefulset(&ns, "db", &uid("sts", n, 0), &[source(0).3]);
        fill.apply(state, |s| s.apply_workload(Kind::StatefulSet, &sts));
    }
}

/// A namespace's ReplicaSets and ControllerRevisions.
fn fill_revisions(state: &mut State, fill: &mut Fill, n: usize, with_statefulset: bool) {
    let ns = ns_name(n);
    for i in 0..DEPLOYMENTS_PER_NS {
        for rev in 1..=REPLICASETS_PER_DEPLOYMENT {
            let rs = replicaset(&ns, &format!("app-{i}"), &uid("deploy", n, i), rev, &refs_of(i));
            fill.apply(state, |s| s.apply_revision(Kind::ReplicaSet, &rs));
        }
    }
    if with_statefulset {
        for rev in 1..=REVISIONS_PER_STATEFULSET {
            let cr = controller_revision(&ns, "db", &uid("sts", n, 0), rev, &[source(0).3]);
            fill.apply(state, |s| s.apply_revision(Kind::ControllerRevision, &cr));
        }
    }
}

/// Adoption records: the snapshot of each source lists its plain users' templates (what
/// admission wrote when their outgoing content was kept), delivered as a watch update.
fn fill_adoptions(state: &mut State, fill: &mut Fill, n: usize) {
    let ns = ns_name(n);
    for i in 0..SOURCES_PER_NS {
        let (name, d, hash, snap) = source(i);
        let users = state.plain_users(&ns, &SourceId::configmap(&name)).join(",");
        let labels = json!({names::HASH_LABEL: hash, names::MANAGED_BY: names::MANAGER, names::SOURCE_LABEL: name});
        let obj = configmap_metadata(
            &ns,
            &snap,
            uid("cm", n, SOURCES_PER_NS + i),
            &d,
            labels,
            json!({names::LAST_USED: CREATED, names::ADOPTED: users}),
        );
        fill.apply(state, |s| s.apply_configmap(&obj));
    }
}

/// One ConfigMap read by `n` Deployments of one namespace, all pinned to its previous content,
/// with a change recorded long enough ago to be due.
fn fill_fan_out(state: &mut State, fill: &mut Fill, n: usize) -> SourceId {
    let ns = "fan-out";
    fill.apply(state, |s| s.apply_namespace(&json!({"metadata": {"name": ns}})));
    let (old, new) = (data("shared", 1), data("shared", 2));
    let (old_hash, new_hash) = (hash_of(&old), hash_of(&new));
    let snap = snapshot::name("shared", &old_hash, 0);
    let labels = json!({names::HASH_LABEL: old_hash, names::MANAGED_BY: names::MANAGER});
    let snap_obj = configmap_metadata(ns, &snap, uid("fan", 0, 1), &old, labels, json!({}));
    fill.apply(state, |s| s.apply_configmap(&snap_obj));
    // A full object: the source is known mutable (the controller reads it before acting).
    let src = full_configmap(ns, "shared", "7", &new, json!({names::HEAD: new_hash, names::CHANGED_AT: "2026-12-05T02:00:00Z"}));
    fill.apply(state, |s| s.apply_configmap(&src));
    for i in 0..n {
        let d = deployment(ns, &format!("app-{i:04}"), &uid("fan", 1, i), std::slice::from_ref(&snap));
        fill.apply(state, |s| s.apply_workload(Kind::Deployment, &d));
    }
    SourceId::configmap("shared")
}

fn status() -> (u64, u64) {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib = |key: &str| {
        s.lines().find(|l| l.starts_with(key)).and_then(|l| l.split_whitespace().nth(1)).and_then(|v| v.parse().ok()).unwrap_or(0)
    };
    (kib("VmRSS:"), kib("VmHWM:"))
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

/// Runs `f` `runs` times; the median time.
fn timed<T>(runs: usize, mut f: impl FnMut() -> T) -> (Duration, T) {
    let mut times = Vec::new();
    let mut last = None;
    for _ in 0..runs {
        let t = Instant::now();
        last = Some(black_box(f()));
        times.push(t.elapsed());
    }
    times.sort();
    (times[times.len() / 2], last.expect("one run"))
}

fn review(kind: &str, group: &str, resource: &str, ns: &str, object: &Value, old: &Value) -> Vec<u8> {
    serde_json::to_vec(&json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "0b9a3c1e-8f5d-4d2b-9a77-1c2d3e4f5a6b", "kind": {"group": group, "version": "v1", "kind": kind},
        "resource": {"group": group, "version": "v1", "resource": resource}, "name": object["metadata"]["name"], "namespace": ns,
        "operation": "UPDATE", "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
        "object": object, "oldObject": old, "dryRun": false}}))
    .unwrap()
}

/// `n` admissions of `body` through the router the binary serves; (median, p99, API calls made).
fn admit(app: &Arc<App>, cluster: &MemoryCluster, body: Vec<u8>, n: usize, want: &str) -> (Duration, Duration, usize) {
    let router = webhook::router(app.clone());
    let body = axum::body::Bytes::from(body);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let calls_before = cluster.calls.lock().unwrap().len();
    let mut times = Vec::with_capacity(n);
    runtime.block_on(async {
        for i in 0..n {
            let request = axum::http::Request::post("/mutate")
                .header("content-type", "application/json")
                .body(axum::body::Body::from(body.clone()))
                .unwrap();
            let t = Instant::now();
            let response = router.clone().oneshot(request).await.unwrap();
            let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
            times.push(t.elapsed());
            if i == 0 {
                let text = String::from_utf8_lossy(&bytes);
                assert!(text.contains("\"allowed\":true"), "{want}: {text}");
            }
        }
    });
    let calls = cluster.calls.lock().unwrap().len() - calls_before;
    times.sort();
    (times[n / 2], times[n * 99 / 100], calls)
}

/// Admissions of `body` at 1,000/s on a runtime with one worker thread (a replica under the
/// chart's one CPU) while the leader's resync pass (`adopt::decide` over the whole cache) runs
/// over and over and a watch event arrives every 5 ms. `inline`: the pass runs on the worker and
/// the events wait for the lock on it, as the loops did before `cache::blocking`. Latency runs
/// from each request's due time, so a stalled worker is not hidden. (median, p99, max, passes).
fn beside_passes(app: &Arc<App>, state: &Arc<Lock>, body: Vec<u8>, inline: bool, n: usize) -> (Duration, Duration, Duration, usize) {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let router = webhook::router(app.clone());
    let body = axum::body::Bytes::from(body);
    let ns = ns_name(0);
    let rs = replicaset(&ns, "app-1", &uid("deploy", 0, 1), 3, &refs_of(1));
    let seen = adopt::current_templates(&state.read());
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let passes = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut times = runtime.block_on(async {
        let pass = {
            let (state, stop, passes) = (state.clone(), stop.clone(), passes.clone());
            tokio::spawn(async move {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let decide = |s: &State| {
                        adopt::decide(s, &Policy::default(), &Selector::default(), &seen, &adopt::Seen::new(), &HashSet::new())
                            .adoptions
                            .len()
                    };
                    black_box(if inline { decide(&state.read()) } else { cache::pass(&state, decide) });
                    passes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            })
        };
        let events = {
            let (state, stop) = (state.clone(), stop.clone());
            tokio::spawn(async move {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    if inline { state.write() } else { cache::write(&state) }.apply_revision(Kind::ReplicaSet, &rs);
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            })
        };
        let start = tokio::time::Instant::now() + Duration::from_millis(10);
        let mut times = Vec::with_capacity(n);
        for i in 0..n {
            let due = start + Duration::from_millis(i as u64);
            tokio::time::sleep_until(due).await;
            let request = axum::http::Request::post("/mutate")
                .header("content-type", "application/json")
                .body(axum::body::Body::from(body.clone()))
                .unwrap();
            let response = router.clone().oneshot(request).await.unwrap();
            axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
            times.push(due.elapsed());
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        pass.await.unwrap();
        events.await.unwrap();
        times
    });
    times.sort();
    (times[n / 2], times[n * 99 / 100], times[n - 1], passes.load(std::sync::atomic::Ordering::Relaxed))
}

/// A watch writer beside admissions on `threads` threads at once, each sending `body` back to
/// back (more workers than the chart's one CPU gives, under a flood): the webhook reads the cache
/// with `read_recursive`, which lets a reader in while other readers hold it even when a writer
/// waits, so overlapping reads could keep a watch event out. The writer applies an event every
/// 5 ms for `run`; (median, p99, max) of its waits for the lock, events, admissions. `ask`: the
/// writer waits with `cache::write`, which makes admissions queue behind it once it has waited
/// long enough; else with the lock's own `write`, as every writer did before.
fn writer_beside_admissions(
    app: &Arc<App>,
    state: &Arc<Lock>,
    body: Vec<u8>,
    threads: usize,
    run: Duration,
    ask: bool,
) -> (Duration, Duration, Duration, usize, usize) {
    let body = axum::body::Bytes::from(body);
    let ns = ns_name(0);
    let rs = replicaset(&ns, "app-1", &uid("deploy", 0, 1), 3, &refs_of(1));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let admitted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let senders: Vec<_> = (0..threads)
        .map(|_| {
            let (router, body, stop, admitted) = (webhook::router(app.clone()), body.clone(), stop.clone(), admitted.clone());
            std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
                runtime.block_on(async {
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        let request = axum::http::Request::post("/mutate")
                            .header("content-type", "application/json")
                            .body(axum::body::Body::from(body.clone()))
                            .unwrap();
                        let response = router.clone().oneshot(request).await.unwrap();
                        black_box(axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap());
                        admitted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                })
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(100));
    let (started, mut waits) = (Instant::now(), Vec::new());
    while started.elapsed() < run || waits.is_empty() {
        let t = Instant::now();
        if ask { cache::write(state) } else { state.write() }.apply_revision(Kind::ReplicaSet, &rs);
        waits.push(t.elapsed());
        std::thread::sleep(Duration::from_millis(5));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    senders.into_iter().for_each(|s| s.join().unwrap());
    waits.sort();
    let n = waits.len();
    (waits[n / 2], waits[n * 99 / 100], waits[n - 1], n, admitted.load(std::sync::atomic::Ordering::Relaxed))
}

/// A policy with Secrets on in the namespaces `selector` selects, the cluster keys loaded.
fn secrets_on_for(selector: &str) -> Policy {
    use confighistory::model::keys::{ClusterKey, KeyId, KeySlot, Keyring};
    let mut policy = Policy::default();
    policy.secrets.enabled = true;
    policy.secrets.namespaces = selector.parse().expect("a label selector");
    policy.secrets.keys = KeySlot::new(Keyring::new(ClusterKey::new(KeyId(1), vec![7; 32]).expect("a key"), []).expect("a keyring"));
    policy
}

fn us(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

/// A list page of `objects` as the API server sends it.
fn page(objects: Vec<Value>) -> Vec<u8> {
    serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": "2097153"}, "items": objects})).unwrap()
}

/// The watches' parse of a list page of 100 ConfigMaps as metadata and one of 100 ReplicaSets:
/// as kube's typed objects turned into the JSON the cache reads (before), and straight into that
/// JSON (`cluster::raw`, now). CPU per object, median of `runs`.
fn parse_pages(runs: usize) {
    use confighistory::cluster::raw::{RawMetadata, RawObject};
    use kube::api::{DynamicObject, PartialObjectMeta};
    use kube::core::ObjectList;
    let configmaps = page(
        (0..100)
            .map(|i| {
                let (name, d, hash, _) = source(i % SOURCES_PER_NS);
                configmap_metadata("ns-0", &format!("{name}-{i}"), uid("cm", 0, i), &d, json!({"app": name}), json!({names::HEAD: hash}))
            })
            .collect(),
    );
    let replicasets =
        page((0..100).map(|i| replicaset("ns-0", &format!("app-{}", i / 5), &uid("deploy", 0, i / 5), i % 5, &refs_of(i / 5))).collect());
    let per = |d: Duration| us(d / 100);
    let (typed, _) = timed(runs, || {
        let l: ObjectList<PartialObjectMeta<DynamicObject>> = serde_json::from_slice(&configmaps).unwrap();
        l.items
            .into_iter()
            .map(|o| json!({"kind": "PartialObjectMetadata", "metadata": serde_json::to_value(o.metadata).unwrap()}))
            .collect::<Vec<Value>>()
    });
    let (raw, _) = timed(runs, || {
        serde_json::from_slice::<ObjectList<RawMetadata>>(&configmaps)
            .unwrap()
            .items
            .into_iter()
            .map(RawMetadata::into_value)
            .collect::<Vec<Value>>()
    });
    println!(
        "parse of a page of 100 ConfigMaps as metadata ({} KiB): typed then JSON {} per object, once into JSON {}",
        configmaps.len() / 1024,
        per(typed),
        per(raw)
    );
    let (typed, _) = timed(runs, || {
        let l: ObjectList<DynamicObject> = serde_json::from_slice(&replicasets).unwrap();
        l.items.into_iter().map(|o| serde_json::to_value(o).unwrap()).collect::<Vec<Value>>()
    });
    let (raw, _) = timed(runs, || {
        serde_json::from_slice::<ObjectList<RawObject>>(&replicasets)
            .unwrap()
            .items
            .into_iter()
            .map(RawObject::into_value)
            .collect::<Vec<Value>>()
    });
    println!(
        "parse of a page of 100 ReplicaSets ({} KiB): typed then JSON {} per object, once into JSON {}",
        replicasets.len() / 1024,
        per(typed),
        per(raw)
    );
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    parse_pages(if full { 200 } else { 3 });
    let scale = if full {
        Scale { namespaces: 1_000, fan_out: 1_000, requests: 3_000 }
    } else {
        Scale { namespaces: 10, fan_out: 20, requests: 50 }
    };
    let (rss0, _) = status();
    let policy = Policy::default();
    let selector = Selector::default();
    let mut state = State::keeping_labels(&policy.excluded_sources);
    let mut fill = Fill::default();
    let start = Instant::now();
    // Each watch lists its kind; the phases show what each kind costs.
    let mut phases = Vec::new();
    for phase in ["ConfigMaps", "workloads", "revisions", "adoption records"] {
        for n in 0..scale.namespaces {
            match phase {
                "ConfigMaps" => fill_configmaps(&mut state, &mut fill, n),
                "workloads" => fill_workloads(&mut state, &mut fill, n, n % 2 == 0),
                "revisions" => fill_revisions(&mut state, &mut fill, n, n % 2 == 0),
                _ => fill_adoptions(&mut state, &mut fill, n),
            }
        }
        phases.push(format!("{phase} {}", mib(status().0)));
    }
    let wall = start.elapsed();
    let (rss, hwm) = status();
    let configmaps = state.sources().len();
    println!(
        "fill: {} namespaces, {configmaps} ConfigMaps, {} workloads, {} revisions ({} objects applied)",
        scale.namespaces,
        state.workloads().len(),
        state.revisions().len(),
        fill.applied
    );
    println!("fill time: {} in the apply functions, {} with building the objects", ms(fill.in_apply), ms(wall));
    println!("RSS after fill: {} (at start {}), peak {}; after each phase: {}", mib(rss), mib(rss0), mib(hwm), phases.join(", "));

    // The loops' pure passes over the whole cache.
    let runs = if full { 5 } else { 2 };
    let now = propagate::parse_time_ms(NOW).unwrap();
    let (t, p) = timed(runs, || propagate::due_propagations(&state, &policy, &selector, now, true));
    println!("due_propagations with the gauges: {} ({} plans, {} waiting), peak RSS {}", ms(t), p.plans.len(), p.waiting, mib(status().1));
    let (t, _) = timed(runs, || propagate::due_propagations(&state, &policy, &selector, now, false));
    println!("due_propagations, a tick without the gauges: {:.1} µs", t.as_secs_f64() * 1e6);
    let seen = adopt::current_templates(&state);
    println!("adopt::current_templates ({} templates, kept by the controller): peak RSS {}", seen.len(), mib(status().1));
    let (t, d) = timed(runs, || adopt::decide(&state, &policy, &selector, &seen, &adopt::Seen::new(), &HashSet::new()));
    println!(
        "adopt::decide: {} ({} adoptions, {} repairs, {} unknown), peak RSS {}",
        ms(t),
        d.adoptions.len(),
        d.repairs.len(),
        d.unknown.len(),
        mib(status().1)
    );
    let (t, (touches, _)) = timed(runs, || propagate::versioning_touches(&state, &policy, &selector));
    println!("versioning_touches: {} ({} touches), peak RSS {}", ms(t), touches.len(), mib(status().1));
    let (t, r) = timed(runs, || propagate::rehash_sources(&state, &policy, &selector));
    println!("rehash_sources: {} ({} sources), peak RSS {}", ms(t), r.len(), mib(status().1));
    // The propagation pass's bookkeeping of templates admitted unpinned on purpose
    // (`adopt::note_seen`, every tick, 250 ms), where the admin turned Secrets on for one team's
    // namespaces in fifty (`--secrets-namespace-selector team=t0`): the other namespaces'
    // templates are noted as seen without Secrets. The first pass notes them; the next ones find
    // them noted.
    let secrets_policy = secrets_on_for("team=t0");
    let (mut noted, mut without_secrets) = (adopt::Seen::new(), adopt::Seen::new());
    let first = Instant::now();
    adopt::note_seen(&state, &secrets_policy, &selector, &mut noted, Some(&mut without_secrets));
    let first = first.elapsed();
    let (t, _) = timed(runs * 4, || adopt::note_seen(&state, &secrets_policy, &selector, &mut noted, Some(&mut without_secrets)));
    println!(
        "adopt::note_seen, Secrets on for 1 namespace in 50: first pass {} ({} templates noted), then {} a pass, peak RSS {}",
        ms(first),
        without_secrets.len(),
        ms(t),
        mib(status().1)
    );
    drop((p, d, touches, r, seen, noted, without_secrets));
    println!("RSS after the passes: {}, peak {}", mib(status().0), mib(status().1));

    // Watch events at scale: a ReplicaSet's status update, a ConfigMap's metadata update.
    let ns = ns_name(0);
    let rs = replicaset(&ns, "app-1", &uid("deploy", 0, 1), 3, &refs_of(1));
    let (t, _) = timed(runs * 20, || state.apply_revision(Kind::ReplicaSet, &rs));
    println!("apply of a ReplicaSet update: {}", us(t));
    let (name, d, hash, _) = source(3);
    let cm = configmap_metadata(&ns, &name, uid("cm", 0, 3), &d, json!({"app": name}), json!({names::HEAD: hash}));
    let (t, _) = timed(runs * 20, || state.apply_configmap(&cm));
    println!("apply of a ConfigMap update: {}", us(t));

    // Admission through the router, steady: nothing to read from the API server.
    let cluster = MemoryCluster::default();
    let (name, old_data, hash, _) = source(1);
    let old =
        full_configmap(&ns, &name, "1048576", &old_data, json!({names::HEAD: hash, names::CHANGED_AT: CREATED, names::PROPAGATED: hash}));
    cluster.insert(old.clone());
    let mut new = old.clone();
    new["data"] = data(&name, 2);
    let configmap_body = review("ConfigMap", "", "configmaps", &ns, &new, &old);
    let pinned = deployment(&ns, "app-0", &uid("deploy", 0, 0), &refs_of(0));
    let plain = deployment(&ns, "app-0", &uid("deploy", 0, 0), &[source(0).0, source(1).0]);
    let deployment_body = review("Deployment", "apps", "deployments", &ns, &plain, &pinned);
    let state = Arc::new(Lock::new(state));
    let app = Arc::new(App::ready(policy.clone(), state.clone(), Arc::new(cluster.clone())));
    for (what, body) in
        [("source ConfigMap UPDATE, plain users", configmap_body.clone()), ("Deployment UPDATE, steady", deployment_body.clone())]
    {
        let (median, p99, calls) = admit(&app, &cluster, body, scale.requests, what);
        println!("admission, {what}: median {}, p99 {}, API calls {calls} in {} requests", us(median), us(p99), scale.requests);
    }
    for (inline, how) in [(true, "on the worker (before)"), (false, "off it (cache::blocking)")] {
        let (median, p99, max, passes) = beside_passes(&app, &state, deployment_body.clone(), inline, scale.requests);
        println!(
            "admission at 1,000/s, one worker thread, beside {passes} resync passes {how}: median {}, p99 {}, max {}; RSS {}",
            us(median),
            us(p99),
            us(max),
            mib(status().0)
        );
    }
    let big = "x".repeat(1024 * 1024 - 4096);
    let mut big_old = old.clone();
    big_old["data"] = json!({"blob": big});
    let mut big_new = old.clone();
    big_new["data"] = json!({"blob": format!("{big}y")});
    let big_body = review("ConfigMap", "", "configmaps", &ns, &big_new, &big_old);
    let bodies = [
        ("source ConfigMap UPDATEs", configmap_body.clone()),
        ("1 MiB source ConfigMap UPDATEs", big_body),
        ("steady Deployment UPDATEs", deployment_body.clone()),
    ];
    for threads in [2, 4] {
        for (what, body) in &bodies {
            for (ask, how) in [(false, "lock's write (before)"), (true, "cache::write")] {
                let run = Duration::from_millis(if full { 5_000 } else { 100 });
                let (median, p99, max, events, admitted) = writer_beside_admissions(&app, &state, body.clone(), threads, run, ask);
                println!(
                    "watch writer ({how}) beside {what} on {threads} threads back to back: its wait median {}, p99 {}, max {} ({events} events, {admitted} admissions)",
                    us(median),
                    us(p99),
                    us(max)
                );
            }
        }
    }
    println!("RSS after the admissions: {}, peak {}", mib(status().0), mib(status().1));

    // Fan-out: one ConfigMap read by many Deployments, its change due.
    let mut state = state.write();
    let id = fill_fan_out(&mut state, &mut Fill::default(), scale.fan_out);
    let (t, p) = timed(runs, || propagate::due_propagations(&state, &policy, &selector, propagate::parse_time_ms(NOW).unwrap(), false));
    let moved = p.plans.iter().filter(|p| p.trigger.contains_key(&id)).count();
    assert_eq!(moved, scale.fan_out, "every workload of the fan-out moves");
    println!("fan-out: due_propagations {} with {} plans ({} readers of one ConfigMap)", ms(t), p.plans.len(), scale.fan_out);
    let (rss, hwm) = status();
    println!("RSS at the end: {}, peak {}", mib(rss), mib(hwm));
}
