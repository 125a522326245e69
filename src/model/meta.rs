//! The metadata the rules of docs/behaviour.md read, whatever holds it: an object as the API server sends it
//! (raw JSON, admission and the plugin) or a record of the cache (the controller's planners).
//! Each rule is written once over [`Meta`] (model::source, model::policy), so the two forms
//! cannot drift apart.

use serde_json::Value;

use super::json::At;
use super::names;

/// What an annotation confighistory reads reads as when its value is longer than [`max_len`]
/// allows, on a raw object and in a cache record alike: malformed, never a shortened value. No
/// rule takes it for anything valid: not a hash, name, time, number, JSON, `true`, `false` or
/// `manual`, and as a list it is one item that names nothing.
pub const TOO_LONG: &str = "<too long>";

/// The longest value of annotation `key` that confighistory reads whole. Lists (adoption records,
/// holds, pins, triggers) hold at least 60 entries of 253-character names; every other
/// confighistory annotation is a word, a hash, a time, a number or a name. Other keys: no bound.
pub fn max_len(key: &str) -> usize {
    match key {
        names::ADOPTED | names::HELD | names::HELD_HEADS | names::PINS | names::PROPAGATE => 16 * 1024,
        names::SOURCE_NAME => 253,
        // Who wrote a content: a username, which Kubernetes does not bound (a ServiceAccount's
        // is `system:serviceaccount:` and two names of up to 253), so confighistory records at
        // most this much of it (`admission::configmap::authorship`).
        names::CHANGED_BY => MAX_AUTHOR,
        // A field manager (the API server allows 128 characters) and confighistory's own
        // change-cause (at most 200 characters and an ellipsis, controller::propagate). At 64 a
        // change-cause over that read as malformed: a release carried it over into its
        // revision, and the next propagation took it for the user's and left it.
        names::CHANGED_WITH | names::CHANGE_CAUSE_OWN => 256,
        // The server's published configuration: a JSON document the plugin reads, not a rule's
        // input; well under the API server's 256 KiB for all annotations.
        names::EFFECTIVE_CONFIG => 64 * 1024,
        k if k.starts_with(names::PREFIX) => 64,
        _ => usize::MAX,
    }
}

/// The longest username `confighistory.io/changed-by` records whole (a longer one is cut, and
/// says so with a trailing `…`).
pub const MAX_AUTHOR: usize = 1024;

/// `value` of annotation `key`, or [`TOO_LONG`] when it is longer than [`max_len`].
pub fn bounded<'a>(key: &str, value: &'a str) -> &'a str {
    if value.len() > max_len(key) {
        TOO_LONG
    } else {
        value
    }
}

pub trait Meta {
    /// An annotation's value ([`TOO_LONG`] when over [`max_len`]). Cache records keep only the
    /// confighistory annotations the rules read.
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
        string_at(self, "/metadata/annotations", key).map(|v| bounded(key, v))
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
