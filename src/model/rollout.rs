//! Whether a workload's pods run its current template, read from its status the way
//! `kubectl rollout status` reads it (docs/operations.md "The propagation SLI": the second
//! histogram, to the new pods being ready). Only the kinds whose status says it plainly are
//! read; for any other the answer is "cannot be seen".

use serde_json::Value;

/// How a kind's status tells that its rollout is complete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rollout {
    /// apps/v1 Deployment: the controller has seen this generation, every replica is updated and
    /// available, and no old one is left.
    Deployment,
    /// apps/v1 StatefulSet with the RollingUpdate strategy: every replica ready on the update
    /// revision (or, with a partition, every replica above it updated).
    StatefulSet,
    /// apps/v1 DaemonSet with the RollingUpdate strategy: every scheduled pod updated and available.
    DaemonSet,
    /// No status confighistory reads (Jobs, CronJobs, registered kinds).
    Unseen,
}

/// Whether `obj` (a whole object of a kind read `how`) has rolled out its current template:
/// `None` when its status cannot tell (an unread kind, an OnDelete strategy).
pub fn rolled_out(how: Rollout, obj: &Value) -> Option<bool> {
    let int = |v: &Value, key: &str| v.get(key).and_then(Value::as_i64);
    let (spec, status) = (&obj["spec"], &obj["status"]);
    let generation = int(&obj["metadata"], "generation").unwrap_or(0);
    let observed = int(status, "observedGeneration").unwrap_or(0);
    let seen = observed > 0 && observed >= generation;
    let at = |key: &str| int(status, key).unwrap_or(0);
    let strategy = |path: &str| spec.pointer(path).and_then(Value::as_str).unwrap_or("RollingUpdate");
    match how {
        Rollout::Unseen => None,
        Rollout::Deployment => {
            let want = int(spec, "replicas").unwrap_or(1);
            let updated = at("updatedReplicas");
            Some(seen && updated >= want && at("replicas") <= updated && at("availableReplicas") >= updated)
        }
        Rollout::StatefulSet => {
            if strategy("/updateStrategy/type") != "RollingUpdate" {
                return None;
            }
            let want = int(spec, "replicas").unwrap_or(1);
            if !seen || at("readyReplicas") < want {
                return Some(false);
            }
            match spec.pointer("/updateStrategy/rollingUpdate/partition").and_then(Value::as_i64) {
                Some(partition) if partition > 0 => Some(at("updatedReplicas") >= want - partition),
                _ => Some(status.get("updateRevision").is_some() && status.get("updateRevision") == status.get("currentRevision")),
            }
        }
        Rollout::DaemonSet => {
            if strategy("/updateStrategy/type") != "RollingUpdate" {
                return None;
            }
            let want = at("desiredNumberScheduled");
            Some(seen && at("updatedNumberScheduled") >= want && at("numberAvailable") >= want)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(generation: i64, spec: Value, status: Value) -> Value {
        json!({"metadata": {"generation": generation}, "spec": spec, "status": status})
    }

    #[test]
    fn a_deployment_is_rolled_out_once_every_replica_is_updated_and_available_and_none_old_is_left() {
        let spec = json!({"replicas": 2});
        let done = json!({"observedGeneration": 3, "replicas": 2, "updatedReplicas": 2, "availableReplicas": 2});
        assert_eq!(rolled_out(Rollout::Deployment, &object(3, spec.clone(), done.clone())), Some(true));
        // The new template not yet seen by the controller: the status is the old one's.
        assert_eq!(rolled_out(Rollout::Deployment, &object(4, spec.clone(), done.clone())), Some(false));
        for (key, value) in [("updatedReplicas", 1), ("replicas", 3), ("availableReplicas", 1)] {
            let mut status = done.clone();
            status[key] = json!(value);
            assert_eq!(rolled_out(Rollout::Deployment, &object(3, spec.clone(), status)), Some(false), "{key}={value}");
        }
        // Scaled to zero: nothing to wait for.
        let zero = json!({"observedGeneration": 2});
        assert_eq!(rolled_out(Rollout::Deployment, &object(2, json!({"replicas": 0}), zero)), Some(true));
        // No status at all (just created).
        assert_eq!(rolled_out(Rollout::Deployment, &object(1, spec, json!({}))), Some(false));
    }

    #[test]
    fn a_statefulset_is_rolled_out_on_its_update_revision_or_above_its_partition() {
        let spec = json!({"replicas": 3, "updateStrategy": {"type": "RollingUpdate"}});
        let status = |current: &str| json!({"observedGeneration": 5, "readyReplicas": 3, "updatedReplicas": 3, "currentRevision": current, "updateRevision": "web-2"});
        assert_eq!(rolled_out(Rollout::StatefulSet, &object(5, spec.clone(), status("web-2"))), Some(true));
        assert_eq!(rolled_out(Rollout::StatefulSet, &object(5, spec.clone(), status("web-1"))), Some(false));
        assert_eq!(rolled_out(Rollout::StatefulSet, &object(6, spec.clone(), status("web-2"))), Some(false));
        let mut partitioned = spec.clone();
        partitioned["updateStrategy"]["rollingUpdate"] = json!({"partition": 2});
        let mut one_updated = status("web-1");
        one_updated["updatedReplicas"] = json!(1);
        assert_eq!(rolled_out(Rollout::StatefulSet, &object(5, partitioned, one_updated)), Some(true));
        let on_delete = json!({"replicas": 3, "updateStrategy": {"type": "OnDelete"}});
        assert_eq!(rolled_out(Rollout::StatefulSet, &object(5, on_delete, status("web-2"))), None);
    }

    #[test]
    fn a_daemonset_is_rolled_out_once_every_scheduled_pod_is_updated_and_available() {
        let status = |updated: i64, available: i64| json!({"observedGeneration": 2, "desiredNumberScheduled": 3, "updatedNumberScheduled": updated, "numberAvailable": available});
        assert_eq!(rolled_out(Rollout::DaemonSet, &object(2, json!({}), status(3, 3))), Some(true));
        assert_eq!(rolled_out(Rollout::DaemonSet, &object(2, json!({}), status(2, 3))), Some(false));
        assert_eq!(rolled_out(Rollout::DaemonSet, &object(2, json!({}), status(3, 2))), Some(false));
        let on_delete = json!({"updateStrategy": {"type": "OnDelete"}});
        assert_eq!(rolled_out(Rollout::DaemonSet, &object(2, on_delete, status(3, 3))), None);
        assert_eq!(rolled_out(Rollout::Unseen, &object(2, json!({}), status(3, 3))), None);
    }
}
