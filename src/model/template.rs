//! Pod templates: the ConfigMap references inside them (docs/behaviour.md §4),
//! and a canonical hash that makes revisions comparable.

use std::collections::BTreeSet;

use crate::model::digest::{Digest, Sha256};
use serde_json::Value;

use crate::model::names;
use crate::model::source::{SourceId, SourceKind};

/// Workload kinds live in [`crate::model::kinds`]; re-exported where templates are read.
pub use crate::model::kinds::Kind;

/// One reference to a source inside a pod template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ref {
    /// JSON pointer to the name string, relative to the template.
    pub pointer: String,
    /// The object named: a source, or a snapshot of one (of the same kind).
    pub id: SourceId,
    pub optional: bool,
}

impl Ref {
    /// Human field path relative to the template, e.g. `spec.volumes[0].configMap.name`: only
    /// messages need it, so it is derived from the pointer (whose segments are field names and
    /// indices, never escaped) rather than built for every reference of every admission.
    pub fn field(&self) -> String {
        let mut field = String::with_capacity(self.pointer.len() + 8);
        for segment in self.pointer.split('/').skip(1) {
            if !segment.is_empty() && segment.bytes().all(|b| b.is_ascii_digit()) {
                field.push('[');
                field.push_str(segment);
                field.push(']');
            } else {
                if !field.is_empty() {
                    field.push('.');
                }
                field.push_str(segment);
            }
        }
        field
    }
}

/// Every source reference in a pod template (ConfigMaps), in document order.
pub fn refs(template: &Value) -> Vec<Ref> {
    let mut out = Vec::new();
    let Some(spec) = template.get("spec") else { return out };
    if let Some(volumes) = spec.get("volumes").and_then(Value::as_array) {
        for (i, vol) in volumes.iter().enumerate() {
            if let Some(cm) = vol.get("configMap") {
                push(&mut out, SourceKind::ConfigMap, cm, format!("/spec/volumes/{i}/configMap"));
            }
            if let Some(sources) = vol.get("projected").and_then(|p| p.get("sources")).and_then(Value::as_array) {
                for (j, src) in sources.iter().enumerate() {
                    if let Some(cm) = src.get("configMap") {
                        push(&mut out, SourceKind::ConfigMap, cm, format!("/spec/volumes/{i}/projected/sources/{j}/configMap"));
                    }
                }
            }
        }
    }
    for list in ["initContainers", "containers", "ephemeralContainers"] {
        let Some(containers) = spec.get(list).and_then(Value::as_array) else { continue };
        for (c, container) in containers.iter().enumerate() {
            if let Some(env) = container.get("env").and_then(Value::as_array) {
                for (e, var) in env.iter().enumerate() {
                    if let Some(r) = var.get("valueFrom").and_then(|v| v.get("configMapKeyRef")) {
                        push(&mut out, SourceKind::ConfigMap, r, format!("/spec/{list}/{c}/env/{e}/valueFrom/configMapKeyRef"));
                    }
                }
            }
            if let Some(env_from) = container.get("envFrom").and_then(Value::as_array) {
                for (e, from) in env_from.iter().enumerate() {
                    if let Some(r) = from.get("configMapRef") {
                        push(&mut out, SourceKind::ConfigMap, r, format!("/spec/{list}/{c}/envFrom/{e}/configMapRef"));
                    }
                }
            }
        }
    }
    out
}

fn push(out: &mut Vec<Ref>, kind: SourceKind, holder: &Value, mut pointer: String) {
    if let Some(name) = holder.get("name").and_then(Value::as_str) {
        pointer.push_str("/name");
        let id = SourceId::new(kind, name);
        out.push(Ref { pointer, id, optional: holder.get("optional").and_then(Value::as_bool).unwrap_or(false) });
    }
}

/// Distinct objects referenced by a template.
pub fn ref_sources(template: &Value) -> BTreeSet<SourceId> {
    refs(template).into_iter().map(|r| r.id).collect()
}

/// Canonical hash of a pod template, comparable across a workload and its revisions:
/// `pod-template-hash` and the strategic-merge `$patch` marker are dropped, nulls are dropped,
/// and object keys are written in sorted order whatever the map implementation.
pub fn template_hash(template: &Value) -> String {
    template_hash_without(template, names::POD_TEMPLATE_HASH)
}

/// [`template_hash`] dropping `hash_label` from the template's labels instead: the label a kind's
/// controller adds to its revisions' templates ([`Kind::hash_label`]).
pub fn template_hash_without(template: &Value, hash_label: &str) -> String {
    let mut h = Sha256::default();
    canonical(template, &mut h, 0, hash_label);
    let digest = h.finish();
    digest[..10].iter().map(|b| format!("{b:02x}")).collect()
}

fn canonical<D: Digest>(v: &Value, h: &mut D, depth: usize, hash_label: &str) {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m
                .keys()
                .filter(|k| !m[k.as_str()].is_null() && k.as_str() != "$patch")
                .filter(|k| !(depth == 2 && k.as_str() == hash_label))
                .collect();
            keys.sort();
            h.update(b"{");
            for k in keys {
                // depth tracks metadata.labels: template(0) → metadata(1) → labels(2).
                let next = match (depth, k.as_str()) {
                    (0, "metadata") => 1,
                    (1, "labels") => 2,
                    _ => 3,
                };
                h.update(serde_json::to_string(k).unwrap_or_default().as_bytes());
                h.update(b":");
                canonical(&m[k.as_str()], h, next, hash_label);
                h.update(b",");
            }
            h.update(b"}");
        }
        Value::Array(a) => {
            h.update(b"[");
            for x in a {
                canonical(x, h, 3, hash_label);
                h.update(b",");
            }
            h.update(b"]");
        }
        other => h.update(other.to_string().as_bytes()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn template() -> Value {
        json!({
            "metadata": {"labels": {"app": "pricing"}, "creationTimestamp": null},
            "spec": {
                "volumes": [
                    {"name": "cfg", "configMap": {"name": "pricing-config"}},
                    {"name": "p", "projected": {"sources": [{"configMap": {"name": "extra", "optional": true}}, {"secret": {"name": "s"}}]}},
                    {"name": "e", "emptyDir": {}}
                ],
                "initContainers": [{"name": "i", "envFrom": [{"configMapRef": {"name": "init-env"}}]}],
                "containers": [{
                    "name": "app",
                    "env": [{"name": "A", "valueFrom": {"configMapKeyRef": {"name": "pricing-config", "key": "a"}}}, {"name": "B", "value": "b"}],
                    "envFrom": [{"secretRef": {"name": "x"}}, {"configMapRef": {"name": "env-cm"}}]
                }]
            }
        })
    }

    #[test]
    fn finds_every_reference_kind() {
        let r = refs(&template());
        let got: Vec<(&str, &str, bool)> = r.iter().map(|r| (r.pointer.as_str(), r.id.name.as_str(), r.optional)).collect();
        assert_eq!(
            got,
            vec![
                ("/spec/volumes/0/configMap/name", "pricing-config", false),
                ("/spec/volumes/1/projected/sources/0/configMap/name", "extra", true),
                ("/spec/initContainers/0/envFrom/0/configMapRef/name", "init-env", false),
                ("/spec/containers/0/env/0/valueFrom/configMapKeyRef/name", "pricing-config", false),
                ("/spec/containers/0/envFrom/1/configMapRef/name", "env-cm", false),
            ]
        );
        let t = template();
        for r in &r {
            assert_eq!(t.pointer(&r.pointer).and_then(Value::as_str), Some(r.id.name.as_str()));
        }
        let fields: Vec<String> = r.iter().map(Ref::field).collect();
        assert_eq!(
            fields,
            [
                "spec.volumes[0].configMap.name",
                "spec.volumes[1].projected.sources[0].configMap.name",
                "spec.initContainers[0].envFrom[0].configMapRef.name",
                "spec.containers[0].env[0].valueFrom.configMapKeyRef.name",
                "spec.containers[0].envFrom[1].configMapRef.name",
            ]
        );
    }

    #[test]
    fn template_hash_ignores_pod_template_hash_nulls_and_key_order() {
        let a = template();
        let mut b = template();
        b["metadata"]["labels"]["pod-template-hash"] = json!("5d8f7c");
        b["metadata"].as_object_mut().unwrap().remove("creationTimestamp");
        b["$patch"] = json!("replace");
        assert_eq!(template_hash(&a), template_hash(&b));
        let mut c = template();
        c["spec"]["containers"][0]["image"] = json!("pricing:4.12");
        assert_ne!(template_hash(&a), template_hash(&c));
        // pod-template-hash elsewhere than template labels still counts.
        let mut d = template();
        d["spec"]["containers"][0]["env"][1]["name"] = json!("pod-template-hash");
        assert_ne!(template_hash(&a), template_hash(&d));
    }
}
