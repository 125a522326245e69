//! What the topic modules share: the [`Fixture`] (an in-memory cluster, its caches and a policy,
//! asked through the router the binary serves) and the objects the tests send.

use std::sync::Arc;

use axum::http::StatusCode;
use confighistory::cache::Lock;
use confighistory::cache::Writer as _;
use confighistory::cluster::MemoryCluster;
use confighistory::model::kinds::Kind;
use confighistory::model::policy::Policy;
use confighistory::model::snapshot::{self, Content};
use confighistory::webhook::App;
use serde_json::{json, Value};

use crate::common::{self, review, Answer, NS};

pub const ME: &str = "system:serviceaccount:confighistory:confighistory";

pub struct Fixture {
    pub state: Arc<Lock>,
    pub cluster: MemoryCluster,
    pub policy: Policy,
}

pub fn configmap(name: &str, data: &[(&str, &str)]) -> Value {
    let data: serde_json::Map<String, Value> = data.iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": NS, "uid": format!("uid-{name}")}, "data": data})
}

pub fn content(data: &[(&str, &str)]) -> Content {
    Content::from_object(&configmap("x", data))
}

pub fn snap(source: &str, data: &[(&str, &str)]) -> String {
    snapshot::name(source, &content(data).hash(), 0)
}

/// A Deployment whose single container mounts `cm` and reads one key from it through env.
pub fn deployment(image: &str, cm: &str) -> Value {
    let mut d = common::deployment(
        "pricing",
        json!({
            "volumes": [{"name": "config", "configMap": {"name": cm}}],
            "containers": [{"name": "app", "image": image,
                "env": [{"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": cm, "key": "mode"}}}]}]
        }),
    );
    d["spec"]["replicas"] = json!(2);
    d["spec"]["template"]["metadata"]["creationTimestamp"] = Value::Null;
    d
}

pub fn with_annotations(mut obj: Value, pairs: &[(&str, &str)]) -> Value {
    for (k, v) in pairs {
        obj["metadata"]["annotations"][*k] = json!(v);
    }
    obj
}

impl Fixture {
    pub fn new() -> Fixture {
        Fixture { state: Arc::default(), cluster: MemoryCluster::default(), policy: Policy::default() }
    }

    /// A source ConfigMap that exists in the cluster and the caches.
    pub fn source(self, name: &str, data: &[(&str, &str)]) -> Fixture {
        let cm = configmap(name, data);
        self.cluster.insert(cm.clone());
        self.state.write().apply_configmap(&cm);
        self
    }

    /// A valid snapshot of `data` for `source`, in cluster and caches, with adoption records.
    pub fn snapshot(self, source: &str, data: &[(&str, &str)], adopted: &[String]) -> Fixture {
        let c = content(data);
        let obj = snapshot::object(NS, source, &snapshot::name(source, &c.hash(), 0), &c, adopted);
        self.cluster.insert(obj.clone());
        self.state.write().apply_configmap(&obj);
        self
    }

    pub fn workload(self, obj: &Value) -> Fixture {
        self.state.write().apply_workload(Kind::Deployment, obj);
        self
    }

    /// A ReplicaSet of the Deployment with this template (rollout history).
    pub fn revision(self, deploy: &Value, n: u32) -> Fixture {
        let mut tpl = deploy["spec"]["template"].clone();
        tpl["metadata"]["labels"]["pod-template-hash"] = json!(format!("h{n}"));
        let rs = json!({"metadata": {"name": format!("pricing-{n}"), "namespace": NS,
            "annotations": {"deployment.kubernetes.io/revision": n.to_string()},
            "ownerReferences": [{"kind": "Deployment", "uid": "uid-pricing", "controller": true}]},
            "spec": {"template": tpl}});
        self.state.write().apply_revision(Kind::ReplicaSet, &rs);
        self
    }

    pub fn namespace_mode(self, mode: &str) -> Fixture {
        self.state.write().apply_namespace(&json!({"metadata": {"name": NS, "labels": {"confighistory.io/mode": mode}}}));
        self
    }

    pub fn update_source(&self, name: &str, data: &[(&str, &str)]) {
        let mut cm = self.cluster.get(NS, name).unwrap();
        cm["data"] = json!(data.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>());
        self.cluster.insert(cm.clone());
        self.state.write().apply_configmap(&cm);
    }

    pub fn app(&self) -> Arc<App> {
        common::app(&self.policy, &self.state, &self.cluster)
    }

    pub async fn post(&self, path: &str, body: Vec<u8>) -> Answer {
        common::post(&self.app(), path, body).await
    }

    pub async fn send(&self, path: &str, review: Value) -> Answer {
        self.send_to(&self.app(), path, review).await
    }

    /// [`Fixture::send`] to a given server (one that keeps what it learnt between requests).
    pub async fn send_to(&self, app: &Arc<App>, path: &str, review: Value) -> Answer {
        let a = common::send(app, path, &review).await;
        assert_eq!(a.status, StatusCode::OK, "{}", a.body);
        assert_eq!(a.response()["uid"], "req-1", "the uid is always copied");
        a
    }

    pub async fn mutate_deployment(&self, op: &str, new: &Value, old: Option<&Value>) -> Answer {
        self.send("/mutate", review("Deployment", "apps", "v1", op, Some(new), old)).await
    }

    pub async fn as_user(&self, path: &str, user: &str, mut review: Value) -> Answer {
        review["request"]["userInfo"]["username"] = json!(user);
        self.send(path, review).await
    }

    pub fn calls(&self) -> Vec<String> {
        self.cluster.calls.lock().unwrap().clone()
    }

    pub fn clear_calls(&self) {
        self.cluster.calls.lock().unwrap().clear();
    }
}

pub fn pin_of(obj: &Value) -> (String, String) {
    let tpl = &obj["spec"]["template"]["spec"];
    (
        tpl["volumes"][0]["configMap"]["name"].as_str().unwrap().to_owned(),
        tpl["containers"][0]["env"][0]["valueFrom"]["configMapKeyRef"]["name"].as_str().unwrap().to_owned(),
    )
}

pub fn annotation(obj: &Value, key: &str) -> Option<String> {
    obj["metadata"]["annotations"][key].as_str().map(str::to_owned)
}

pub const A: &[(&str, &str)] = &[("mode", "a"), ("discount_rules_path", "/rules")];
pub const B: &[(&str, &str)] = &[("mode", "b"), ("rules.discount_path", "/rules")];

/// A CronJob `report` whose template reads `cm`, and the Job its controller makes from it (with
/// the labels the Job API adds to the pod template).
pub fn cronjob_and_job(cm: &str) -> (Value, Value) {
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

/// A review for another namespace than the fixtures'.
pub fn in_namespace(mut review: Value, ns: &str) -> Value {
    review["request"]["namespace"] = json!(ns);
    for o in ["object", "oldObject"] {
        if review["request"][o].is_object() {
            review["request"][o]["metadata"]["namespace"] = json!(ns);
        }
    }
    review
}

/// A no-op write of `obj` (the controller's touch), as the webhook patches it.
pub async fn touch(f: &Fixture, obj: &Value) -> Value {
    f.send("/mutate", review("ConfigMap", "", "v1", "UPDATE", Some(obj), Some(obj))).await.patched(obj)
}
