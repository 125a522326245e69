//! The scale target in a real cluster: creates the objects of `benches/scale/objects.rs` (the
//! in-process benchmark's cluster) through the API server, in the steady state confighistory
//! would have left them in: sources with their head recorded, one snapshot of each, its adoption
//! record listing the templates of the workloads that read the source by its plain name (computed
//! by the controller's own `adopt::decide` over the created objects), even Deployments pinned,
//! odd ones on plain names, ReplicaSets and ControllerRevisions owned by their workloads.
//!
//! ```sh
//! cargo bench --bench scale_cluster -- populate --namespaces 1000 [--from 0] [--concurrency 6]
//! cargo bench --bench scale_cluster -- applies --namespace restart-load --rate 200 --seconds 120
//! cargo bench --bench scale_cluster -- moves --namespace fanout-1 --rate 2 --count 300
//! ```
//!
//! with `KUBECONFIG` an admin's. `benches/scale-cluster/run` runs it and measures the servers
//! (docs/performance.md, "Scale on a real cluster"). Without `populate` (as under
//! `cargo test --benches`) it builds one namespace's objects and checks them, without a cluster.
//! Every namespace carries the label `confighistory.io/scale-bench=true`, so a bench run's
//! servers can be limited to them (`--controller-namespace-selector`) and they can be deleted by
//! label.

use std::collections::{BTreeMap, HashSet};
use std::time::Instant;

use confighistory::cache::State;
use confighistory::cache::Writer as _;
use confighistory::controller::adopt;
use confighistory::model::kinds::Kind;
use confighistory::model::names;
use confighistory::model::policy::Policy;
use confighistory::model::selector::Selector;
use confighistory::model::snapshot::{self, Content};
use futures::{stream, StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::{ControllerRevision, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::Client;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};

#[path = "scale/objects.rs"]
#[allow(dead_code)]
mod objects;
use objects::*;

/// The label every namespace of the benchmark carries.
const LABEL: &str = "confighistory.io/scale-bench";

type Result<T, E = Box<dyn std::error::Error + Send + Sync>> = std::result::Result<T, E>;

/// An object as the API server stores it, made creatable: what only the server sets removed.
fn creatable(mut obj: Value) -> Value {
    if let Some(meta) = obj["metadata"].as_object_mut() {
        for field in ["uid", "resourceVersion", "creationTimestamp", "managedFields", "generation"] {
            meta.remove(field);
        }
    }
    if let Some(o) = obj.as_object_mut() {
        o.remove("status");
    }
    obj
}

/// A ConfigMap of the namespace with its data, from the metadata the watch would list.
fn configmap(meta: Value, data: &Value) -> Value {
    creatable(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta["metadata"], "data": data}))
}

/// The workloads, revisions and snapshots of a namespace, in creation order.
struct Plan {
    ns: String,
    configmaps: Vec<Value>,
    deployments: Vec<Value>,
    statefulset: Option<Value>,
}

fn plan(n: usize) -> Plan {
    let ns = ns_name(n);
    let mut configmaps = Vec::new();
    for i in 0..CONFIGMAPS_PER_NS {
        if i < SOURCES_PER_NS {
            let (name, d, hash, _) = source(i);
            let annotations = json!({names::HEAD: hash, names::CHANGED_AT: CREATED, names::PROPAGATED: hash});
            configmaps.push(configmap(configmap_metadata(&ns, &name, String::new(), &d, json!({"app": name}), annotations), &d));
        } else if i >= 2 * SOURCES_PER_NS {
            let name = format!("unused-{i}");
            let d = data(&name, 1);
            configmaps
                .push(configmap(configmap_metadata(&ns, &name, String::new(), &d, json!({"app": name, "tier": "backend"}), json!({})), &d));
        }
    }
    // Paused until their ReplicaSets exist: the deployment controller would otherwise make a
    // sixth one for a Deployment whose ReplicaSets it has not seen yet.
    let deployments = (0..DEPLOYMENTS_PER_NS)
        .map(|i| {
            let mut d = creatable(deployment(&ns, &format!("app-{i}"), "", &refs_of(i)));
            d["spec"]["paused"] = json!(true);
            d
        })
        .collect();
    let statefulset = (n % 2 == 0).then(|| creatable(statefulset(&ns, "db", "", &[source(0).3])));
    Plan { ns, configmaps, deployments, statefulset }
}

/// A namespaced kind the API creates and returns as typed objects.
trait Namespaced:
    kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()> + Clone + DeserializeOwned + Serialize + std::fmt::Debug
{
}
impl<K> Namespaced for K where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + Serialize
        + std::fmt::Debug
{
}

async fn create<K: Namespaced>(client: &Client, ns: &str, obj: &Value) -> Result<Value> {
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    let typed: K = serde_json::from_value(obj.clone())?;
    let created = match api.create(&PostParams::default(), &typed).await {
        Ok(o) => o,
        // A rerun over namespaces an earlier run filled: take what is there.
        Err(kube::Error::Api(e)) if e.code == 409 => api.get(obj["metadata"]["name"].as_str().unwrap_or_default()).await?,
        Err(e) => return Err(e.into()),
    };
    Ok(serde_json::to_value(created)?)
}

async fn all<K: Namespaced>(client: &Client, ns: &str, objs: Vec<Value>, concurrency: usize) -> Result<Vec<Value>> {
    stream::iter(objs).map(|o| async move { create::<K>(client, ns, &o).await }).buffered(concurrency).try_collect().await
}

/// Creates one namespace's objects; the number created.
async fn populate_namespace(client: &Client, n: usize) -> Result<usize> {
    let p = plan(n);
    let ns = p.ns.clone();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns_obj: Namespace =
        serde_json::from_value(json!({"metadata": {"name": ns, "labels": {LABEL: "true", "team": format!("t{}", n % 50)}}}))?;
    match namespaces.create(&PostParams::default(), &ns_obj).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => return Err(e.into()),
    }
    let policy = Policy::default();
    let mut state = State::keeping_labels(&policy.excluded_sources);
    state.apply_namespace(&serde_json::to_value(namespaces.get(&ns).await?)?);
    let mut count = 1;
    for cm in all::<ConfigMap>(client, &ns, p.configmaps, 16).await? {
        state.apply_configmap(&cm);
        count += 1;
    }
    for (i, d) in all::<Deployment>(client, &ns, p.deployments, 16).await?.into_iter().enumerate() {
        state.apply_workload(Kind::Deployment, &d);
        let owner = d["metadata"]["uid"].as_str().unwrap_or_default().to_owned();
        let app = format!("app-{i}");
        let rs = (1..=REPLICASETS_PER_DEPLOYMENT).map(|rev| creatable(replicaset(&ns, &app, &owner, rev, &refs_of(i)))).collect();
        for r in all::<ReplicaSet>(client, &ns, rs, 16).await? {
            state.apply_revision(Kind::ReplicaSet, &r);
            count += 1;
        }
        let unpause = json!({"spec": {"paused": null}});
        let api: Api<Deployment> = Api::namespaced(client.clone(), &ns);
        api.patch(&app, &PatchParams::default(), &Patch::Merge(&unpause)).await?;
        count += 1;
    }
    if let Some(sts) = p.statefulset {
        let s = create::<StatefulSet>(client, &ns, &sts).await?;
        state.apply_workload(Kind::StatefulSet, &s);
        let owner = s["metadata"]["uid"].as_str().unwrap_or_default().to_owned();
        let crs =
            (1..=REVISIONS_PER_STATEFULSET).map(|rev| creatable(controller_revision(&ns, "db", &owner, rev, &[source(0).3]))).collect();
        for r in all::<ControllerRevision>(client, &ns, crs, 16).await? {
            state.apply_revision(Kind::ControllerRevision, &r);
            count += 1;
        }
        count += 1;
    }
    // The snapshots, with the adoption records the controller would want for what exists now.
    let snapshots: Vec<(String, Content, String)> = (0..SOURCES_PER_NS)
        .map(|i| {
            let (name, d, _, snap) = source(i);
            (name, Content::from_object(&json!({"data": d})), snap)
        })
        .collect();
    for (name, content, snap) in &snapshots {
        state.apply_configmap(&snapshot::object(&ns, name, snap, content, &[]));
    }
    let seen = adopt::current_templates(&state);
    let decisions = adopt::decide(&state, &policy, &Selector::default(), &seen, &adopt::Seen::new(), &HashSet::new());
    let mut adopted: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for a in decisions.adoptions.iter().filter(|a| a.namespace == ns) {
        adopted.entry(a.source.name.clone()).or_default().extend(a.templates.iter().cloned());
    }
    let objs = snapshots
        .iter()
        .map(|(name, content, snap)| {
            let mut templates = adopted.remove(name).unwrap_or_default();
            templates.sort();
            templates.dedup();
            snapshot::object(&ns, name, snap, content, &templates)
        })
        .collect();
    count += all::<ConfigMap>(client, &ns, objs, 16).await?.len();
    Ok(count)
}

/// `applies`: writes through the API server at `rate`/s for `seconds` into namespace `ns` (made
/// with 20 sources and 20 Deployments reading them): one in five a ConfigMap edit (new content:
/// a snapshot to make), the rest a Deployment's metadata changed (a workload UPDATE whose template
/// stays). Prints one JSON line: sent, succeeded, failed, latency percentiles.
async fn applies(client: &Client, ns: &str, rate: usize, seconds: usize) -> Result<()> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns_obj: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}}))?;
    match namespaces.create(&PostParams::default(), &ns_obj).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => return Err(e.into()),
    }
    const N: usize = 20;
    let cms: Vec<Value> = (0..N)
        .map(|i| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("cfg-{i}"), "namespace": ns}, "data": data(&format!("cfg-{i}"), 0)}))
        .collect();
    all::<ConfigMap>(client, ns, cms, 16).await?;
    let deps: Vec<Value> = (0..N).map(|i| creatable(deployment(ns, &format!("app-{i}"), "", &[format!("cfg-{i}")]))).collect();
    all::<Deployment>(client, ns, deps, 16).await?;
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let interval = std::time::Duration::from_secs_f64(1.0 / rate as f64);
    let total = rate * seconds;
    let start = tokio::time::Instant::now();
    let limit = std::sync::Arc::new(tokio::sync::Semaphore::new(256));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..total {
        tokio::time::sleep_until(start + interval * i as u32).await;
        let permit = limit.clone().acquire_owned().await?;
        let (configmaps, deployments) = (configmaps.clone(), deployments.clone());
        tasks.spawn(async move {
            let t = Instant::now();
            let name = format!("{}-{}", if i % 5 == 0 { "cfg" } else { "app" }, (i / 5) % N);
            let r = if i % 5 == 0 {
                let patch = json!({"data": {"tick": i.to_string()}});
                configmaps.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await.map(|_| ())
            } else {
                let patch = json!({"metadata": {"annotations": {"bench/tick": i.to_string()}}});
                deployments.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await.map(|_| ())
            };
            drop(permit);
            (t.elapsed(), r.err().map(|e| e.to_string()))
        });
    }
    let (mut times, mut failed, mut first_error) = (Vec::new(), 0usize, None);
    while let Some(r) = tasks.join_next().await {
        let (t, e) = r?;
        times.push(t);
        if let Some(e) = e {
            failed += 1;
            first_error.get_or_insert(e);
        }
    }
    times.sort();
    let ms =
        |q: f64| times.get(((times.len() as f64 * q) as usize).min(times.len().saturating_sub(1))).map_or(0.0, |d| d.as_secs_f64() * 1e3);
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{}",
        json!({"sent": total, "succeeded": total - failed, "failed": failed, "seconds": secs, "rate": total as f64 / secs,
            "p50_ms": ms(0.5), "p99_ms": ms(0.99), "max_ms": ms(1.0), "first_error": first_error})
    );
    Ok(())
}

/// `moves`: a rollout of each of `count` Deployments `app-0`.. in `ns`, at `rate`/s, made by a
/// client (a pod-template annotation changed), not by propagation: the control for a fan-out's
/// cost to everybody else (`benches/fanout/run --control`). Prints one JSON line.
async fn moves(client: &Client, ns: &str, rate: usize, count: usize) -> Result<()> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let interval = std::time::Duration::from_secs_f64(1.0 / rate.max(1) as f64);
    let start = tokio::time::Instant::now();
    let mut failed = 0usize;
    for i in 0..count {
        tokio::time::sleep_until(start + interval * i as u32).await;
        let patch = json!({"spec": {"template": {"metadata": {"annotations": {"bench/moved": "1"}}}}});
        if deployments.patch(&format!("app-{i}"), &PatchParams::default(), &Patch::Merge(&patch)).await.is_err() {
            failed += 1;
        }
    }
    println!("{}", json!({"moved": count - failed, "failed": failed, "seconds": start.elapsed().as_secs_f64()}));
    Ok(())
}

fn arg(args: &[String], name: &str, default: usize) -> usize {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(default)
}

#[tokio::main]
async fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let ns =
        || args.iter().position(|a| a == "--namespace").and_then(|i| args.get(i + 1)).cloned().unwrap_or_else(|| "restart-load".into());
    if args.iter().any(|a| a == "applies") {
        return applies(&Client::try_default().await?, &ns(), arg(&args, "--rate", 200), arg(&args, "--seconds", 120)).await;
    }
    if args.iter().any(|a| a == "moves") {
        return moves(&Client::try_default().await?, &ns(), arg(&args, "--rate", 2), arg(&args, "--count", 100)).await;
    }
    if !args.iter().any(|a| a == "populate") {
        // No cluster: one namespace's objects are well formed and what the in-process bench uses.
        let p = plan(0);
        assert_eq!(p.configmaps.len(), CONFIGMAPS_PER_NS - SOURCES_PER_NS, "sources and unused ConfigMaps (snapshots come last)");
        assert_eq!(p.deployments.len(), DEPLOYMENTS_PER_NS);
        for o in p.configmaps.iter().chain(&p.deployments).chain(&p.statefulset) {
            assert!(o["metadata"].get("uid").is_none() && o.get("status").is_none(), "creatable: {}", o["metadata"]["name"]);
        }
        println!("scale_cluster: nothing to do without `populate` (see the file's header)");
        return Ok(());
    }
    let namespaces = arg(&args, "--namespaces", 1000);
    let from = arg(&args, "--from", 0);
    let concurrency = arg(&args, "--concurrency", 6);
    let client = Client::try_default().await?;
    let start = Instant::now();
    let mut done = 0usize;
    let mut objects = 0usize;
    let mut results = stream::iter(from..namespaces).map(|n| populate_namespace(&client, n)).buffer_unordered(concurrency);
    while let Some(r) = results.next().await {
        objects += r?;
        done += 1;
        if done % 50 == 0 || done == namespaces - from {
            let s = start.elapsed().as_secs_f64();
            eprintln!("populate: {done} namespaces, {objects} objects in {s:.0} s ({:.0}/s)", objects as f64 / s);
        }
    }
    println!("{{\"namespaces\": {done}, \"objects\": {objects}, \"seconds\": {:.1}}}", start.elapsed().as_secs_f64());
    Ok(())
}
