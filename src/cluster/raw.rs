//! Objects as watches and lists deliver them, parsed once, straight into the JSON the cache and
//! the rules read.
//!
//! kube's `DynamicObject` parses an object's metadata into a typed `ObjectMeta` and the rest into
//! JSON, and the cache wanted JSON: every listed object was parsed, then serialized back into a
//! second tree. At 163,000 objects that was most of a replica's CPU before it was ready
//! (docs/performance.md, "Scale on a real cluster"). [`Raw`] parses the object once, and leaves
//! out on the way in the two parts of `metadata` nothing reads and that are the largest:
//! `managedFields`, and kubectl's last-applied annotation (a whole copy of the object, so for a
//! Secret its values: they are never even held).

use std::borrow::Cow;
use std::fmt;

use kube::api::{ApiResource, DynamicObject};
use kube::core::{DynamicResourceScope, ObjectMeta, Resource};
use serde::de::{self, DeserializeSeed, Deserializer};
use serde::Deserialize;
use serde_json::Value;

use crate::cache::PARTIAL_OBJECT_METADATA;
use crate::model::trim::{described, Annotations, Leave, Trim};

/// What a watched or listed object leaves out besides `managedFields`: kubectl's last-applied
/// copy. Everything else, `status` too, reaches the caller as the server sent it.
const WATCHED: Leave = Leave { status: false, annotations: Annotations::LastApplied, fold: None };

/// An object of any kind, parsed once into JSON. `METADATA`: it is asked for as metadata only
/// (`PartialObjectMetadata`, as `kube::core::PartialObjectMeta` does), and its JSON says so in
/// its `kind` whatever the server sent.
///
/// [`Resource::meta`] holds only the name, namespace and resourceVersion (what kube's watcher
/// reads), copied from the JSON; changing it does not change the JSON.
#[derive(Clone)]
pub struct Raw<const METADATA: bool> {
    meta: ObjectMeta,
    value: Value,
}

/// A whole object (less the parts [`Raw`] leaves out).
pub type RawObject = Raw<false>;
/// An object's metadata (less the parts [`Raw`] leaves out).
pub type RawMetadata = Raw<true>;

impl<const M: bool> Raw<M> {
    /// The object's JSON.
    pub fn into_value(self) -> Value {
        self.value
    }
}

/// The object's name only: its content may be a Secret's.
impl<const M: bool> fmt::Debug for Raw<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ns = self.meta.namespace.as_deref().map(|n| format!("{n}/")).unwrap_or_default();
        write!(f, "{ns}{}", self.meta.name.as_deref().unwrap_or_default())
    }
}

impl<const M: bool> Resource for Raw<M> {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        DynamicObject::kind(dt)
    }
    fn group(dt: &ApiResource) -> Cow<'_, str> {
        DynamicObject::group(dt)
    }
    fn version(dt: &ApiResource) -> Cow<'_, str> {
        DynamicObject::version(dt)
    }
    fn api_version(dt: &ApiResource) -> Cow<'_, str> {
        DynamicObject::api_version(dt)
    }
    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        DynamicObject::plural(dt)
    }
    fn metadata_api() -> bool {
        M
    }
    fn meta(&self) -> &ObjectMeta {
        &self.meta
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.meta
    }
}

impl<'de, const M: bool> Deserialize<'de> for Raw<M> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Errors describe what came instead and never quote it: it may be a Secret's.
        let wrong = |what: &Value, expected: &'static str| de::Error::invalid_type(de::Unexpected::Other(described(what)), &expected);
        let object = match Trim::object(WATCHED).deserialize(d)? {
            Value::Object(object) => object,
            other => return Err(wrong(&other, "an object")),
        };
        let m = match object.get("metadata") {
            None | Some(Value::Object(_)) => object.get("metadata"),
            Some(other) => return Err(wrong(other, "an object's metadata")),
        };
        let s = |k: &str| m.and_then(|m| m.get(k)).and_then(Value::as_str).map(str::to_owned);
        let meta = ObjectMeta { name: s("name"), namespace: s("namespace"), resource_version: s("resourceVersion"), ..Default::default() };
        let mut object = object;
        if M {
            object.insert("kind".into(), Value::String(PARTIAL_OBJECT_METADATA.into()));
        }
        Ok(Raw { meta, value: Value::Object(object) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::trim::LAST_APPLIED;
    use kube::ResourceExt;
    use serde_json::json;

    const MANAGED_FIELDS: &str = "managedFields";

    fn object() -> Value {
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": "web", "namespace": "team", "resourceVersion": "42", "uid": "u1",
                "labels": {"app": "web"},
                "annotations": {LAST_APPLIED: "{\"data\":{\"password\":\"canary\"}}", "confighistory.io/pins": "cfg"},
                "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}],
                "ownerReferences": [{"kind": "X", "uid": "o", "controller": true}],
            },
            "spec": {"template": {"metadata": {"annotations": {LAST_APPLIED: "kept: not metadata's"}}, "spec": {"containers": []}}},
            "status": {"replicas": 1},
        })
    }

    #[test]
    fn an_object_parses_to_its_json_without_managed_fields_or_the_last_applied_copy() {
        let raw: RawObject = serde_json::from_value(object()).unwrap();
        assert_eq!(raw.meta().resource_version.as_deref(), Some("42"));
        assert_eq!(raw.meta().name.as_deref(), Some("web"));
        assert_eq!(raw.meta().namespace.as_deref(), Some("team"));
        let mut expected = object();
        let meta = expected["metadata"].as_object_mut().unwrap();
        meta.remove(MANAGED_FIELDS);
        meta["annotations"].as_object_mut().unwrap().remove(LAST_APPLIED);
        // Only the object's own metadata is trimmed: the same names elsewhere are content.
        assert_eq!(raw.into_value(), expected);
    }

    #[test]
    fn parsed_from_text_it_is_what_value_parses_less_the_left_out_parts() {
        let text = serde_json::to_string(&object()).unwrap();
        let raw: RawObject = serde_json::from_str(&text).unwrap();
        let mut whole: Value = serde_json::from_str(&text).unwrap();
        whole["metadata"].as_object_mut().unwrap().remove(MANAGED_FIELDS);
        whole["metadata"]["annotations"].as_object_mut().unwrap().remove(LAST_APPLIED);
        assert_eq!(raw.into_value(), whole);
    }

    #[test]
    fn metadata_says_so_in_its_kind_and_null_annotations_stay_null() {
        let raw: RawMetadata =
            serde_json::from_value(json!({"kind": "ConfigMap", "metadata": {"name": "c", "annotations": null}})).unwrap();
        assert!(RawMetadata::metadata_api() && !RawObject::metadata_api());
        assert_eq!(raw.into_value(), json!({"kind": PARTIAL_OBJECT_METADATA, "metadata": {"name": "c", "annotations": null}}));
    }

    #[test]
    fn a_watch_event_and_a_list_parse_as_kube_reads_them() {
        let event: kube::core::WatchEvent<RawMetadata> = serde_json::from_value(
            json!({"type": "ADDED", "object": {"kind": PARTIAL_OBJECT_METADATA, "metadata": {"name": "c", "resourceVersion": "7"}}}),
        )
        .unwrap();
        let kube::core::WatchEvent::Added(o) = event else { panic!("not an ADDED event") };
        assert_eq!(o.resource_version().as_deref(), Some("7"));
        let list: kube::core::ObjectList<RawObject> =
            serde_json::from_value(json!({"metadata": {"resourceVersion": "9"}, "items": [object(), object()]})).unwrap();
        assert_eq!(list.items.len(), 2);
    }

    #[test]
    fn not_an_object_is_an_error_that_quotes_nothing() {
        let e = serde_json::from_str::<RawObject>(r#"["canary"]"#).unwrap_err().to_string();
        assert!(e.contains("expected an object") && !e.contains("canary"), "{e}");
        let e = serde_json::from_str::<RawObject>(r#"{"metadata": "canary"}"#).unwrap_err().to_string();
        assert!(e.contains("an object's metadata") && !e.contains("canary"), "{e}");
    }

    #[test]
    fn debug_shows_the_name_only() {
        let raw: RawObject = serde_json::from_value(object()).unwrap();
        assert_eq!(format!("{raw:?}"), "team/web");
    }
}
