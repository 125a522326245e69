//! Objects and AdmissionReview bodies for the load scenarios, and bulk objects for memory at scale.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::{Opts, Result};

/// Keeps confighistory's webhooks registered by other users of a shared test cluster away from
/// these objects; `confighistory serve` itself does not read this label (only its webhook
/// configuration's namespaceSelector does), so the server under test still caches everything here.
const EXCLUDE_LABEL: &str = "confighistory.io/exclude";
const SOURCE: &str = "bench-config";
const APP: &str = "bench-app";

/// confighistory's content hash (src/snapshot/mod.rs `hash`), repeated here so this tool does not
/// build the whole product; `run` checks that the steady-state review makes no API call, which
/// it could not if the name were not recognised as a snapshot.
fn content_hash(data: &BTreeMap<String, String>) -> String {
    let mut h = Sha256::new();
    h.update(b"confighistory/v1\0");
    for (tag, map) in [(b'd', data), (b'b', &BTreeMap::new())] {
        h.update([tag]);
        h.update((map.len() as u64).to_be_bytes());
        for (k, v) in map {
            h.update((k.len() as u64).to_be_bytes());
            h.update(k.as_bytes());
            h.update((v.len() as u64).to_be_bytes());
            h.update(v.as_bytes());
        }
    }
    const ALPHABET: &[u8; 32] = b"0123456789abcdefghjkmnpqrstvwxyz";
    let mut bits = u64::from_be_bytes(h.finalize()[..8].try_into().expect("8 bytes"));
    (0..12)
        .map(|_| {
            let c = ALPHABET[(bits >> 59) as usize] as char;
            bits <<= 5;
            c
        })
        .collect()
}

fn configmap(ns: &str, name: &str, data: &BTreeMap<String, String>) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns, "labels": {"app": APP}}, "data": data})
}

fn snapshot(ns: &str, source: &str, data: &BTreeMap<String, String>) -> (String, Value) {
    let hash = content_hash(data);
    let name = format!("{source}-{hash}");
    let obj = json!({"apiVersion": "v1", "kind": "ConfigMap", "immutable": true,
        "metadata": {"name": name, "namespace": ns,
            "labels": {"confighistory.io/hash": hash, "confighistory.io/source": source, "app.kubernetes.io/managed-by": "confighistory"},
            "annotations": {"confighistory.io/source-name": source}},
        "data": data});
    (name, obj)
}

/// A Deployment shaped like what kubectl sends: one container reading `cm` as a volume, through
/// envFrom and through one key.
fn deployment(ns: &str, name: &str, cms: &[&str], replicas: u32) -> Value {
    let cm = cms[0];
    let mut volumes = vec![json!({"name": "config", "configMap": {"name": cm}})];
    let mut env_from = vec![];
    for (i, other) in cms.iter().enumerate().skip(1) {
        if i % 2 == 1 {
            env_from.push(json!({"configMapRef": {"name": other}}));
        } else {
            volumes.push(json!({"name": format!("extra-{i}"), "configMap": {"name": other}}));
        }
    }
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns, "labels": {"app": name}},
        "spec": {"replicas": replicas, "revisionHistoryLimit": 10, "selector": {"matchLabels": {"app": name}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"volumes": volumes,
                    "containers": [{"name": "app", "image": "registry.example.com/shop/app:4.11.2",
                        "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
                        "env": [{"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": cm, "key": "mode"}}},
                                {"name": "LOG_LEVEL", "value": "info"}],
                        "envFrom": env_from,
                        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
                        "readinessProbe": {"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 5},
                        "volumeMounts": [{"name": "config", "mountPath": "/etc/app"}]}]}}}})
}

/// The object as the API server sends it in a review: server-set metadata, last-applied, status.
fn as_served(mut obj: Value, pins: Option<&str>) -> Value {
    let manifest = serde_json::to_string(&obj).expect("json");
    let meta = &mut obj["metadata"];
    meta["uid"] = json!("6f1c2a9e-3b7d-4c1e-9a53-0d2f8e7b4c11");
    meta["resourceVersion"] = json!("48213");
    meta["generation"] = json!(3);
    meta["creationTimestamp"] = json!("2026-12-01T09:00:00Z");
    let mut annotations = json!({"kubectl.kubernetes.io/last-applied-configuration": manifest, "deployment.kubernetes.io/revision": "3"});
    if let Some(p) = pins {
        annotations["confighistory.io/pins"] = json!(p);
    }
    meta["annotations"] = annotations;
    meta["managedFields"] = json!([{"manager": "kubectl-client-side-apply", "operation": "Update", "apiVersion": "apps/v1",
        "time": "2026-12-01T09:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:annotations": {".": {},
        "f:kubectl.kubernetes.io/last-applied-configuration": {}}, "f:labels": {".": {}, "f:app": {}}},
        "f:spec": {"f:replicas": {}, "f:selector": {}, "f:template": {"f:metadata": {"f:labels": {".": {}, "f:app": {}}},
        "f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {".": {}, "f:image": {}, "f:name": {}}}, "f:volumes": {}}}}}}]);
    obj["status"] = json!({"observedGeneration": 3, "replicas": 2, "updatedReplicas": 2, "readyReplicas": 2, "availableReplicas": 2,
        "conditions": [{"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable",
            "lastUpdateTime": "2026-12-01T09:01:00Z", "lastTransitionTime": "2026-12-01T09:01:00Z"}]});
    obj
}

fn review(kind: (&str, &str, &str), ns: &str, name: &str, object: &Value, old: &Value) -> Value {
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "0b7c6a52-8f0e-4d63-b1f4-5f8e2d9c3a10",
        "kind": {"group": kind.0, "version": kind.1, "kind": kind.2},
        "resource": {"group": kind.0, "version": kind.1, "resource": format!("{}s", kind.2.to_lowercase())},
        "requestKind": {"group": kind.0, "version": kind.1, "kind": kind.2},
        "requestResource": {"group": kind.0, "version": kind.1, "resource": format!("{}s", kind.2.to_lowercase())},
        "name": name, "namespace": ns, "operation": "UPDATE",
        "userInfo": {"username": "alice", "groups": ["developers", "system:authenticated"]},
        "object": object, "oldObject": old, "dryRun": false,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "UpdateOptions", "fieldManager": "kubectl-client-side-apply"}}})
}

fn write(dir: &Path, file: &str, v: &Value) -> Result<()> {
    std::fs::write(dir.join(file), serde_json::to_vec(v)?)?;
    Ok(())
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

pub fn main(opts: &Opts) -> Result<()> {
    let ns = opts.get("namespace")?;
    let dir = Path::new(opts.get("out")?);
    std::fs::create_dir_all(dir)?;

    // Cluster objects: a source, its snapshot, a Deployment already pinned to it.
    let data: BTreeMap<String, String> =
        [("mode".to_owned(), "strict".to_owned()), ("app.yaml".to_owned(), "listen: 8080\nupstream: pricing\nretries: 3\n".to_owned())]
            .into();
    let (snap_name, snap) = snapshot(ns, SOURCE, &data);
    let pins = format!("{{\"{SOURCE}\":\"{}\"}}", content_hash(&data));
    let mut pinned = deployment(ns, APP, &[&snap_name], 2);
    pinned["metadata"]["annotations"] = json!({"confighistory.io/pins": pins});
    let namespace = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": {EXCLUDE_LABEL: "true"}}});
    let items = vec![namespace, configmap(ns, SOURCE, &data), snap, pinned];
    write(dir, "steady.json", &json!({"apiVersion": "v1", "kind": "List", "items": items}))?;

    // (a) kubectl apply of the unchanged manifest: plain names in the object, oldObject pinned.
    let old = as_served(deployment(ns, APP, &[&snap_name], 2), Some(&pins));
    let object = as_served(deployment(ns, APP, &[SOURCE], 2), Some(&pins));
    write(dir, "small.json", &review(("apps", "v1", "Deployment"), ns, APP, &object, &old))?;

    // (b) a 1 MiB UPDATE of the source: values changed, one key removed, one added.
    let before = big_data(200, 1024 * 1024, "a");
    let mut after = big_data(200, 1024 * 1024, "b");
    after.remove("section-199.yaml");
    after.insert("section-200.yaml".into(), before["section-199.yaml"].clone());
    // kubectl apply sends the stored annotations back: the head of the outgoing content.
    let head = content_hash(&before);
    let served = |data: &BTreeMap<String, String>, rv: &str| {
        let mut cm = configmap(ns, SOURCE, data);
        cm["metadata"]["uid"] = json!("2d9e7f30-5a1b-4c8d-8e2f-7b6a5c4d3e21");
        cm["metadata"]["resourceVersion"] = json!(rv);
        cm["metadata"]["creationTimestamp"] = json!("2026-12-01T09:00:00Z");
        cm["metadata"]["annotations"] = json!({"confighistory.io/head": head, "confighistory.io/changed-at": "2026-12-01T09:00:00Z"});
        cm
    };
    write(dir, "big.json", &review(("", "v1", "ConfigMap"), ns, SOURCE, &served(&after, "48300"), &served(&before, "48299")))?;
    println!("{snap_name}");
    Ok(())
}

/// `--namespaces N --configmaps C --deployments D --prefix P --out DIR`: the namespaces
/// (`DIR/namespaces.json`), then one List per namespace (`DIR/bulk-NNN.json`) holding its share of C ConfigMaps (about 2 KiB of data each, as kubectl
/// apply would leave them: with the last-applied copy) and D Deployments (replicas 0, each
/// referencing 3 of the namespace's ConfigMaps by plain name).
pub fn bulk(opts: &Opts) -> Result<()> {
    let namespaces: usize = opts.num("namespaces", 20)?;
    let configmaps: usize = opts.num("configmaps", 10_000)?;
    let deployments: usize = opts.num("deployments", 2_000)?;
    let prefix = opts.or("prefix", "bench-scale");
    let dir = Path::new(opts.get("out")?);
    std::fs::create_dir_all(dir)?;
    let (cm_per, dep_per) = (configmaps.div_ceil(namespaces), deployments.div_ceil(namespaces));
    let names: Vec<Value> = (0..namespaces)
        .map(|n| json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": format!("{prefix}-{n:03}"), "labels": {EXCLUDE_LABEL: "true"}}}))
        .collect();
    write(dir, "namespaces.json", &json!({"apiVersion": "v1", "kind": "List", "items": names}))?;
    for n in 0..namespaces {
        let ns = format!("{prefix}-{n:03}");
        let mut items = vec![];
        for c in 0..cm_per.min(configmaps.saturating_sub(n * cm_per)) {
            let mut data = big_data(3, 2048, &format!("{n}-{c}"));
            data.insert("mode".into(), "strict".into());
            let mut cm = configmap(&ns, &format!("config-{c:04}"), &data);
            let manifest = serde_json::to_string(&cm)?;
            cm["metadata"]["annotations"] = json!({"kubectl.kubernetes.io/last-applied-configuration": manifest});
            items.push(cm);
        }
        for d in 0..dep_per.min(deployments.saturating_sub(n * dep_per)) {
            let cms: Vec<String> = (0..3).map(|k| format!("config-{:04}", (d * 3 + k) % cm_per)).collect();
            let refs: Vec<&str> = cms.iter().map(String::as_str).collect();
            items.push(deployment(&ns, &format!("app-{d:04}"), &refs, 0));
        }
        write(dir, &format!("bulk-{n:03}.json"), &json!({"apiVersion": "v1", "kind": "List", "items": items}))?;
    }
    Ok(())
}
