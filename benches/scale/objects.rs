//! The objects of the scale benchmarks: a cluster of teams' namespaces, each with its
//! ConfigMaps, Deployments with ReplicaSets of history and a StatefulSet with ControllerRevisions,
//! shaped as the API server stores them. `benches/scale.rs` applies them to the watch cache in
//! process; `benches/scale_cluster.rs` creates them in a real cluster (docs/performance.md, "Scale").

use confighistory::model::names;
use confighistory::model::snapshot::{self, Content};
use serde_json::{json, Value};

pub const CONFIGMAPS_PER_NS: usize = 100;
pub const SOURCES_PER_NS: usize = 10;
pub const DEPLOYMENTS_PER_NS: usize = 10;
pub const REPLICASETS_PER_DEPLOYMENT: usize = 5;
pub const REVISIONS_PER_STATEFULSET: usize = 3;
pub const NOW: &str = "2026-12-05T03:00:00Z";
pub const CREATED: &str = "2026-11-01T08:00:00Z";

pub fn ns_name(n: usize) -> String {
    format!("team-{n:04}")
}

pub fn uid(what: &str, ns: usize, i: usize) -> String {
    // The shape of a Kubernetes uid (36 characters).
    format!("{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}", ns, i, what.len(), ns % 4096, i)
}

/// About 2 KiB of settings of ConfigMap `name`, revision `rev`.
pub fn data(name: &str, rev: usize) -> Value {
    let mut yaml = String::new();
    for k in 0..40 {
        yaml.push_str(&format!("setting_{k}: value-{k}-of-{name}-r{rev}\n"));
    }
    json!({"app.yaml": yaml, "LOG_LEVEL": "info", "FEATURE_FLAGS": "a,b,c"})
}

pub fn managed_fields(manager: &str) -> Value {
    json!([{"manager": manager, "operation": "Update", "apiVersion": "v1", "time": CREATED, "fieldsType": "FieldsV1",
        "fieldsV1": {"f:data": {".": {}, "f:app.yaml": {}, "f:LOG_LEVEL": {}, "f:FEATURE_FLAGS": {}},
        "f:metadata": {"f:annotations": {".": {}, "f:kubectl.kubernetes.io/last-applied-configuration": {}}, "f:labels": {".": {}, "f:app": {}}}}}])
}

/// A ConfigMap as the metadata-only watch delivers it: its metadata, including kubectl's copy of
/// the whole manifest (data included) and managedFields.
pub fn configmap_metadata(ns: &str, name: &str, uid: String, data: &Value, labels: Value, annotations: Value) -> Value {
    let manifest =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns, "labels": labels}, "data": data});
    let mut annotations = annotations;
    annotations["kubectl.kubernetes.io/last-applied-configuration"] = json!(serde_json::to_string(&manifest).unwrap());
    json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata", "metadata": {
        "name": name, "namespace": ns, "uid": uid, "resourceVersion": "1048576", "creationTimestamp": CREATED,
        "labels": labels, "annotations": annotations, "managedFields": managed_fields("kubectl-client-side-apply")}})
}

pub fn full_configmap(ns: &str, name: &str, rv: &str, data: &Value, annotations: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns, "uid": format!("uid-{ns}-{name}"),
        "resourceVersion": rv, "creationTimestamp": CREATED, "labels": {"app": name}, "annotations": annotations}, "data": data})
}

pub fn hash_of(data: &Value) -> String {
    Content::from_object(&json!({"data": data})).hash()
}

/// A pod template reading `refs` (ConfigMap names, plain or snapshots) through a volume and env.
pub fn template(app: &str, image: &str, refs: &[String]) -> Value {
    let volumes: Vec<Value> =
        refs.iter().enumerate().map(|(i, r)| json!({"name": format!("config-{i}"), "configMap": {"name": r}})).collect();
    let env: Vec<Value> = refs
        .iter()
        .enumerate()
        .map(|(i, r)| json!({"name": format!("SETTING_{i}"), "valueFrom": {"configMapKeyRef": {"name": r, "key": "LOG_LEVEL"}}}))
        .collect();
    json!({"metadata": {"labels": {"app": app}, "creationTimestamp": null}, "spec": {
        "volumes": volumes,
        "containers": [{"name": "app", "image": image, "env": env, "ports": [{"containerPort": 8080, "protocol": "TCP"}],
            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
            "volumeMounts": refs.iter().enumerate().map(|(i, _)| json!({"name": format!("config-{i}"), "mountPath": format!("/etc/config-{i}")})).collect::<Vec<_>>(),
            "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent"}],
        "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst", "schedulerName": "default-scheduler"}})
}

/// A Deployment as the API server stores it after `kubectl apply` (status, managedFields, the
/// last-applied copy); `replicas: 0`, as on a cluster where nodes are the limit.
pub fn deployment(ns: &str, name: &str, uid: &str, refs: &[String]) -> Value {
    let tpl = template(name, "registry.example/app:5", refs);
    let manifest = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": ns},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": name}}, "template": tpl}});
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {
        "name": name, "namespace": ns, "uid": uid, "resourceVersion": "2097152", "generation": 5, "creationTimestamp": CREATED,
        "annotations": {"deployment.kubernetes.io/revision": "5", "kubectl.kubernetes.io/last-applied-configuration": serde_json::to_string(&manifest).unwrap()},
        "managedFields": managed_fields("kubectl-client-side-apply")},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": name}}, "template": tpl,
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}},
            "revisionHistoryLimit": 10, "progressDeadlineSeconds": 600},
        "status": {"observedGeneration": 5, "conditions": [{"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable",
            "lastUpdateTime": CREATED, "lastTransitionTime": CREATED, "message": "Deployment has minimum availability."}]}})
}

pub fn replicaset(ns: &str, app: &str, owner: &str, rev: usize, refs: &[String]) -> Value {
    let mut tpl = template(app, &format!("registry.example/app:{rev}"), refs);
    let pth = format!("{:x}", 0x5d4c3b2a1_u64 + rev as u64);
    tpl["metadata"]["labels"][names::POD_TEMPLATE_HASH] = json!(pth);
    json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {
        "name": format!("{app}-{pth}"), "namespace": ns, "uid": format!("{owner}-rs{rev}"), "resourceVersion": "2097153",
        "generation": 1, "creationTimestamp": CREATED, "labels": {"app": app, "pod-template-hash": pth},
        "annotations": {"deployment.kubernetes.io/revision": rev.to_string(), "deployment.kubernetes.io/desired-replicas": "0",
            "deployment.kubernetes.io/max-replicas": "0"},
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": app, "uid": owner, "controller": true, "blockOwnerDeletion": true}],
        "managedFields": managed_fields("kube-controller-manager")},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": app, "pod-template-hash": pth}}, "template": tpl},
        "status": {"replicas": 0, "observedGeneration": 1}})
}

pub fn statefulset(ns: &str, name: &str, uid: &str, refs: &[String]) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": name, "namespace": ns, "uid": uid,
        "resourceVersion": "2097154", "generation": 3, "creationTimestamp": CREATED, "managedFields": managed_fields("kubectl-client-side-apply")},
        "spec": {"replicas": 0, "serviceName": name, "selector": {"matchLabels": {"app": name}}, "template": template(name, "registry.example/db:3", refs)},
        "status": {"replicas": 0, "observedGeneration": 3, "currentRevision": format!("{name}-3"), "updateRevision": format!("{name}-3")}})
}

pub fn controller_revision(ns: &str, name: &str, owner: &str, rev: usize, refs: &[String]) -> Value {
    let mut tpl = template(name, &format!("registry.example/db:{rev}"), refs);
    tpl["$patch"] = json!("replace");
    json!({"apiVersion": "apps/v1", "kind": "ControllerRevision", "metadata": {"name": format!("{name}-{rev}"), "namespace": ns,
        "uid": format!("{owner}-cr{rev}"), "resourceVersion": "2097155", "creationTimestamp": CREATED,
        "labels": {"app": name, "controller.kubernetes.io/hash": format!("{rev:x}")},
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": name, "uid": owner, "controller": true, "blockOwnerDeletion": true}]},
        "data": {"spec": {"template": tpl}}, "revision": rev})
}

/// The source `cfg-i` of a namespace: its content, the hash of it, its snapshot's name.
pub fn source(i: usize) -> (String, Value, String, String) {
    let name = format!("cfg-{i}");
    let d = data(&name, 1);
    let hash = hash_of(&d);
    let snap = snapshot::name(&name, &hash, 0);
    (name, d, hash, snap)
}

pub fn refs_of(i: usize) -> Vec<String> {
    let pinned = i % 2 == 0;
    [i % SOURCES_PER_NS, (i + 1) % SOURCES_PER_NS].iter().map(|&s| if pinned { source(s).3 } else { source(s).0 }).collect()
}
