//! The metadata the SPEC's rules read, whatever holds it: an object as the API server sends it
//! (raw JSON, admission and the plugin) or a record of the cache (the controller's planners).
//! Each rule is written once over [`Meta`] (model::source, model::policy), so the two forms
//! cannot drift apart.

use serde_json::Value;

use super::json::At;

pub trait Meta {
    /// An annotation's value. Cache records keep only confighistory's own annotations.
    fn annotation(&self, key: &str) -> Option<&str>;
    /// A label's value.
    fn label(&self, key: &str) -> Option<&str>;
    /// `immutable: true` (ConfigMaps).
    fn immutable(&self) -> bool {
        false
    }
    /// `deletionTimestamp` is set.
    fn deleting(&self) -> bool {
        false
    }
}

fn string_at<'a>(obj: &'a Value, map: &str, key: &str) -> Option<&'a str> {
    obj.at(map).and_then(|m| m.get(key)).and_then(Value::as_str)
}

impl Meta for Value {
    fn annotation(&self, key: &str) -> Option<&str> {
        string_at(self, "/metadata/annotations", key)
    }
    fn label(&self, key: &str) -> Option<&str> {
        string_at(self, "/metadata/labels", key)
    }
    fn immutable(&self) -> bool {
        self.get("immutable").and_then(Value::as_bool) == Some(true)
    }
    fn deleting(&self) -> bool {
        self.at("/metadata/deletionTimestamp").is_some_and(|t| !t.is_null())
    }
}

impl<T: Meta + ?Sized> Meta for &T {
    fn annotation(&self, key: &str) -> Option<&str> {
        (**self).annotation(key)
    }
    fn label(&self, key: &str) -> Option<&str> {
        (**self).label(key)
    }
    fn immutable(&self) -> bool {
        (**self).immutable()
    }
    fn deleting(&self) -> bool {
        (**self).deleting()
    }
}
