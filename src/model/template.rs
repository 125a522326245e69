//! Pod templates: the source references inside them (docs/behaviour.md §4, §4a),
//! and a canonical hash that makes revisions comparable.

use std::collections::BTreeSet;

use crate::model::digest::{Digest, Sha256};
use serde_json::Value;

use crate::model::fold;
use crate::model::ids::{SourceId, SourceKind, SourceKinds};
use crate::model::names;

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

/// Every reference in a pod template to a source of `kinds`, in document order: ConfigMaps
/// (docs/behaviour.md §4) and, when `kinds` has them, Secrets (§4a: secret volumes by
/// `secretName`, projected secrets, `secretKeyRef`, `secretRef`; `imagePullSecrets` are not
/// config and never a reference). A kind not in `kinds` is not a reference at all, so with
/// Secrets off the answer is the ConfigMap references alone.
pub fn refs(template: &Value, kinds: SourceKinds) -> Vec<Ref> {
    // Only the fields of the kinds in `kinds` are looked up: with Secrets off, the walk that runs
    // on every workload admission (the hot path) looks up no Secret field.
    let mut of = SourceKind::ALL;
    let mut n = 0;
    for kind in kinds.iter() {
        of[n] = kind;
        n += 1;
    }
    refs_of(template, &of[..n])
}

/// [`refs`] to sources of `kinds`, found where each kind's entry says pod templates name it
/// ([`crate::model::sourcekinds::RefFields`]).
fn refs_of(template: &Value, kinds: &[SourceKind]) -> Vec<Ref> {
    let mut out = Vec::new();
    let Some(spec) = template.get("spec") else { return out };
    if let Some(volumes) = spec.get("volumes").and_then(Value::as_array) {
        for (i, vol) in volumes.iter().enumerate() {
            for &kind in kinds {
                let (field, name) = kind.def().refs.volume;
                if let Some(v) = vol.get(field) {
                    push(&mut out, kind, v, name, format!("/spec/volumes/{i}/{field}"));
                }
            }
            if let Some(sources) = vol.get("projected").and_then(|p| p.get("sources")).and_then(Value::as_array) {
                for (j, src) in sources.iter().enumerate() {
                    for &kind in kinds {
                        let field = kind.def().refs.projected;
                        if let Some(p) = src.get(field) {
                            push(&mut out, kind, p, "name", format!("/spec/volumes/{i}/projected/sources/{j}/{field}"));
                        }
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
                    let Some(from) = var.get("valueFrom") else { continue };
                    for &kind in kinds {
                        let field = kind.def().refs.key_ref;
                        if let Some(r) = from.get(field) {
                            push(&mut out, kind, r, "name", format!("/spec/{list}/{c}/env/{e}/valueFrom/{field}"));
                        }
                    }
                }
            }
            if let Some(env_from) = container.get("envFrom").and_then(Value::as_array) {
                for (e, from) in env_from.iter().enumerate() {
                    for &kind in kinds {
                        let field = kind.def().refs.env_from;
                        if let Some(r) = from.get(field) {
                            push(&mut out, kind, r, "name", format!("/spec/{list}/{c}/envFrom/{e}/{field}"));
                        }
                    }
                }
            }
        }
    }
    out
}

/// The reference in `holder` (its name at `field`), with the JSON pointer to that name.
fn push(out: &mut Vec<Ref>, kind: SourceKind, holder: &Value, field: &str, mut pointer: String) {
    if let Some(name) = holder.get(field).and_then(Value::as_str) {
        pointer.push('/');
        pointer.push_str(field);
        let id = SourceId::new(kind, name);
        out.push(Ref { pointer, id, optional: holder.get("optional").and_then(Value::as_bool).unwrap_or(false) });
    }
}

/// Distinct objects of `kinds` referenced by a template.
pub fn ref_sources(template: &Value, kinds: SourceKinds) -> BTreeSet<SourceId> {
    refs(template, kinds).into_iter().map(|r| r.id).collect()
}

/// Canonical hash of a pod template, comparable across a workload and its revisions:
/// `pod-template-hash` and the strategic-merge `$patch` marker are dropped, nulls are dropped,
/// and object keys are written in sorted order whatever the map implementation.
pub fn template_hash(template: &Value) -> String {
    template_hash_without(template, names::POD_TEMPLATE_HASH)
}

/// [`template_hash`] dropping `hash_label` from the template's labels instead: the label a kind's
/// controller adds to its revisions' templates (`model::kinds::Kind::hash_label`).
pub fn template_hash_without(template: &Value, hash_label: &str) -> String {
    hash_dropping(template, &Dropped { hash_label, labels: &[], folded: false })
}

/// [`template_hash_without`] of a template a request's review parsed, its unread parts folded
/// ([`crate::model::fold`]): the same hash as the whole template's.
pub fn request_template_hash(template: &Value, hash_label: &str) -> String {
    hash_dropping(template, &Dropped { hash_label, labels: &[], folded: true })
}

/// [`request_template_hash`] of the template with `labels` removed from its labels too, and its
/// labels map with them when nothing else is left in it: a run's template (a Job's) compared with
/// the template of what made it (a CronJob's), without copying the template, which can be most of
/// a request's bytes (docs/reliability.md, "The memory model").
pub fn request_template_hash_less_labels(template: &Value, hash_label: &str, labels: &[&str]) -> String {
    hash_dropping(template, &Dropped { hash_label, labels, folded: true })
}

/// The labels [`canonical`] leaves out of `metadata.labels`, and how it reads folded parts.
struct Dropped<'a> {
    hash_label: &'a str,
    /// Left out, and the labels map with them when they are all it holds.
    labels: &'a [&'a str],
    /// The template is a request's, parsed with its unread parts folded.
    folded: bool,
}

impl Dropped<'_> {
    fn label(&self, key: &str) -> bool {
        key == self.hash_label || self.labels.contains(&key)
    }
    /// Whether the labels map itself is left out: it holds only `labels` (or nothing), and there
    /// are `labels` to drop.
    fn map(&self, labels: &Value) -> bool {
        !self.labels.is_empty() && labels.as_object().is_some_and(|m| m.keys().all(|k| self.labels.contains(&k.as_str())))
    }
}

fn hash_dropping(template: &Value, dropped: &Dropped) -> String {
    let mut h = Sha256::default();
    canonical(template, &mut h, 0, dropped);
    let digest = h.finish();
    super::digest::hex(&digest[..10])
}

/// The template's canonical text ([`fold::text_of`]) into `h`, less the labels `dropped` says.
/// `depth` tracks `metadata.labels`: template (0) → metadata (1) → labels (2); below, the text is
/// [`fold::text_of`]'s.
fn canonical<D: Digest>(v: &Value, h: &mut D, depth: usize, dropped: &Dropped) {
    match v {
        Value::Object(m) if depth < 3 => {
            // The labels dropped, and the labels map when they were all it held.
            let dropped_here = |k: &str| (depth == 2 && dropped.label(k)) || (depth == 1 && k == "labels" && dropped.map(&m[k]));
            let keep = |k: &str| !dropped_here(k);
            h.update(b"{");
            for (k, v) in fold::content_members(m, keep) {
                let next = match (depth, k.as_str()) {
                    (0, "metadata") => 1,
                    (1, "labels") => 2,
                    _ => 3,
                };
                h.update(serde_json::to_string(k).unwrap_or_default().as_bytes());
                h.update(b":");
                canonical(v, h, next, dropped);
                h.update(b",");
            }
            h.update(b"}");
        }
        other => fold::text_of(other, dropped.folded, &mut |b| h.update(b)),
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

    /// The definition: remove the labels from a copy (and the labels map when that leaves it
    /// empty), then hash it.
    fn less_labels_by_copy(template: &Value, hash_label: &str, labels: &[&str]) -> String {
        let mut template = template.clone();
        if let Some(map) = template.pointer_mut("/metadata/labels").and_then(Value::as_object_mut) {
            labels.iter().for_each(|l| drop(map.remove(*l)));
            if map.is_empty() {
                template["metadata"].as_object_mut().map(|m| m.remove("labels"));
            }
        }
        template_hash_without(&template, hash_label)
    }

    #[test]
    fn hashing_less_some_labels_is_hashing_a_copy_without_them() {
        let run = ["job-name", "controller-uid"];
        let spec = json!({"containers": [{"name": "c", "env": [{"name": "job-name", "value": "x"}]}]});
        let cases = [
            json!({"metadata": {"labels": {"job-name": "r-1", "controller-uid": "u"}}, "spec": spec}),
            json!({"metadata": {"labels": {"job-name": "r-1", "app": "r"}}, "spec": spec}),
            json!({"metadata": {"labels": {"job-name": "r-1", "pod-template-hash": "h"}}, "spec": spec}),
            json!({"metadata": {"labels": {"pod-template-hash": "h"}}, "spec": spec}),
            json!({"metadata": {"labels": {}}, "spec": spec}),
            json!({"metadata": {"labels": {"app": null, "job-name": "r"}}, "spec": spec}),
            json!({"metadata": {"labels": null}, "spec": spec}),
            json!({"metadata": {"labels": "job-name"}, "spec": spec}),
            json!({"metadata": {"annotations": {"job-name": "kept"}}, "spec": spec}),
            json!({"metadata": "m", "spec": spec}),
            json!({"spec": {"labels": {"job-name": "kept"}}}),
            json!([{"metadata": {"labels": {"job-name": "r"}}}]),
            json!(null),
        ];
        for (i, t) in cases.iter().enumerate() {
            for hash_label in ["pod-template-hash", ""] {
                assert_eq!(request_template_hash_less_labels(t, hash_label, &run), less_labels_by_copy(t, hash_label, &run), "case {i}");
                assert_eq!(request_template_hash_less_labels(t, hash_label, &[]), template_hash_without(t, hash_label), "case {i}");
            }
        }
        // The labels are left out: a CronJob's template and its Job's hash alike.
        assert_eq!(
            request_template_hash_less_labels(&cases[0], "", &run),
            request_template_hash_less_labels(&json!({"metadata": {}, "spec": spec}), "", &run)
        );
        assert_ne!(
            request_template_hash_less_labels(&cases[1], "", &run),
            request_template_hash_less_labels(&json!({"metadata": {}, "spec": spec}), "", &run)
        );
    }

    #[test]
    fn finds_every_reference_kind() {
        let r = refs(&template(), SourceKinds::CONFIGMAPS);
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

    /// Every Secret reference of docs/behaviour.md §4a beside ConfigMap ones, in every container
    /// list, with `imagePullSecrets` and a secret volume's other fields around them.
    fn template_with_secrets() -> Value {
        json!({
            "spec": {
                "imagePullSecrets": [{"name": "registry"}],
                "volumes": [
                    {"name": "tls", "secret": {"secretName": "db", "optional": true, "items": [{"key": "k", "path": "p"}]}},
                    {"name": "cfg", "configMap": {"name": "db"}},
                    {"name": "p", "projected": {"sources": [{"secret": {"name": "proj"}}, {"configMap": {"name": "extra"}}, {"serviceAccountToken": {"path": "t"}}]}},
                    {"name": "bad", "secret": {"name": "not-the-field"}}
                ],
                "initContainers": [{"name": "i", "envFrom": [{"secretRef": {"name": "init-env"}}]}],
                "containers": [{
                    "name": "app",
                    "env": [
                        {"name": "A", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}},
                        {"name": "B", "valueFrom": {"configMapKeyRef": {"name": "db", "key": "url"}}},
                        {"name": "C", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
                    ],
                    "envFrom": [{"configMapRef": {"name": "env-cm"}}, {"secretRef": {"name": "env-s", "optional": false}}]
                }],
                "ephemeralContainers": [{"name": "debug", "envFrom": [{"secretRef": {"name": "dbg"}}]}]
            }
        })
    }

    #[test]
    fn secret_references_only_when_secrets_are_on() {
        let t = template_with_secrets();
        let off = refs(&t, SourceKinds::CONFIGMAPS);
        assert!(off.iter().all(|r| r.id.kind == SourceKind::ConfigMap), "{off:?}");
        assert_eq!(off.len(), 4);
        // The existing template (a projected secret and a secretRef in it) is read as before.
        assert_eq!(refs(&template(), SourceKinds::CONFIGMAPS), refs(&template(), SourceKinds::default()));
        let on = refs(&t, SourceKinds::WITH_SECRETS);
        let got: Vec<(&str, SourceKind, &str, bool)> =
            on.iter().map(|r| (r.pointer.as_str(), r.id.kind, r.id.name.as_str(), r.optional)).collect();
        use SourceKind::{ConfigMap as C, Secret as S};
        assert_eq!(
            got,
            vec![
                ("/spec/volumes/0/secret/secretName", S, "db", true),
                ("/spec/volumes/1/configMap/name", C, "db", false),
                ("/spec/volumes/2/projected/sources/0/secret/name", S, "proj", false),
                ("/spec/volumes/2/projected/sources/1/configMap/name", C, "extra", false),
                ("/spec/initContainers/0/envFrom/0/secretRef/name", S, "init-env", false),
                ("/spec/containers/0/env/0/valueFrom/secretKeyRef/name", S, "db", false),
                ("/spec/containers/0/env/1/valueFrom/configMapKeyRef/name", C, "db", false),
                ("/spec/containers/0/envFrom/0/configMapRef/name", C, "env-cm", false),
                ("/spec/containers/0/envFrom/1/secretRef/name", S, "env-s", false),
                ("/spec/ephemeralContainers/0/envFrom/0/secretRef/name", S, "dbg", false),
            ]
        );
        // Each pointer names the reference, so it can be repointed at a snapshot.
        for r in &on {
            assert_eq!(t.pointer(&r.pointer).and_then(Value::as_str), Some(r.id.name.as_str()), "{}", r.pointer);
        }
        assert_eq!(on[0].field(), "spec.volumes[0].secret.secretName");
        // The ConfigMap db and the Secret db are two sources; imagePullSecrets are none.
        let ids = ref_sources(&t, SourceKinds::WITH_SECRETS);
        assert!(ids.contains(&SourceId::configmap("db")) && ids.contains(&SourceId::new(S, "db")));
        assert!(!ids.iter().any(|id| id.name == "registry" || id.name == "not-the-field"), "{ids:?}");
        assert_eq!(ids.len(), 8);
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
