//! Secrets as sources (docs/behaviour.md §4a), the pure pieces: which Secrets are never sources,
//! a Secret's content, its snapshot (named by a MAC under the namespace's key, `model::keys`),
//! the snapshot's validity, and what an UPDATE warning may say (key names only).
//!
//! Nothing here reads or writes a cluster, and nothing here is acted on unless the admin turns
//! Secrets on (`--secrets`, `Policy::source_kinds`). A Secret's values live only in
//! [`SecretContent`], whose fields are private: no `Debug`, error or warning built here holds a value, nor an unkeyed hash of one,
//! and there is no way from a `SecretContent` to a ConfigMap's `model::snapshot::Content`, so the
//! settings parser (which takes a `Content`) is never handed a Secret's values:
//!
//! ```compile_fail,E0308
//! use confighistory::model::secret::SecretContent;
//! let s = SecretContent::new("Opaque", Default::default());
//! confighistory::admission::settings::warnings("db", &s, &s);
//! ```
//! ```
//! use confighistory::model::snapshot::Content;
//! let c = Content::default();
//! confighistory::admission::settings::warnings("db", &c.borrowed(), &c.borrowed());
//! ```

use std::collections::BTreeMap;

use serde_json::Value;

use super::digest::Mac;
use super::ids::SECRET;
use super::json::At;
use super::keys::{ClusterKey, KeyId, Keyring, NamespaceKey};
use super::meta::Meta;
use super::names;
use super::selector::Selector;
use super::snapshot::{self, Sizes};

/// The type of a Secret that says none.
pub const OPAQUE: &str = "Opaque";

/// Secret types that are never sources: credentials Kubernetes and Helm manage, not config.
pub const NEVER_SOURCE_TYPES: [&str; 3] = ["kubernetes.io/service-account-token", "bootstrap.kubernetes.io/token", "helm.sh/release.v1"];

/// The type the rules are given for a Secret's cache record, which holds none: the watch lists
/// no Secret of a [`NEVER_SOURCE_TYPES`] type (its field selector, docs/how-it-works.md), so a
/// record's Secret is of another type, and only its annotations and labels can make it a
/// never-source.
pub const RECORD_TYPE: &str = "";

/// Why a Secret is never a source (docs/behaviour.md §4a): it is never versioned, never
/// snapshotted and never written (no head, no annotation): left exactly as it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NeverSource {
    /// A token or a release record ([`NEVER_SOURCE_TYPES`]).
    #[error("Secrets of type {0} are never versioned")]
    Type(&'static str),
    /// A certificate issuer manages it: rotating a certificate must not roll out its users, and an
    /// undo must not bring back an expired certificate.
    #[error("a certificate issuer manages it ({})", names::CERTIFICATE_NAME)]
    CertificateIssuer,
    /// The admin's selector of Secrets that are never sources.
    #[error("the admin's selector of excluded Secrets matches it")]
    Selector,
}

/// The type of a Secret object (`Opaque` when it says none, as the API server defaults it).
pub fn secret_type(obj: &Value) -> &str {
    obj.get("type").and_then(Value::as_str).filter(|t| !t.is_empty()).unwrap_or(OPAQUE)
}

/// Whether, and why, a Secret of type `secret_type` is never a source: its type, a certificate
/// issuer's annotation, or the admin's selector (`excluded`, matched as the ConfigMaps' selector
/// of excluded sources is: `Selector::selects`; an empty one matches nothing).
pub fn never_source(obj: &impl Meta, secret_type: &str, excluded: &Selector) -> Option<NeverSource> {
    if let Some(t) = NEVER_SOURCE_TYPES.iter().find(|t| **t == secret_type) {
        return Some(NeverSource::Type(t));
    }
    if obj.annotation(names::CERTIFICATE_NAME).is_some() {
        return Some(NeverSource::CertificateIssuer);
    }
    excluded.selects(obj).then_some(NeverSource::Selector)
}

/// A Secret whose changes are tracked (docs/behaviour.md §6.1 for Secrets): mutable, not a
/// snapshot, and not a never-source. Versioned or not: [`is_versioned`].
pub fn is_tracked(obj: &impl Meta, secret_type: &str, excluded: &Selector) -> bool {
    !obj.immutable() && obj.label(names::HASH_LABEL).is_none() && never_source(obj, secret_type, excluded).is_none()
}

/// A tracked Secret that is versioned: not opted out by its `versioned: "false"` annotation, as
/// for ConfigMaps (docs/behaviour.md §3).
pub fn is_versioned(obj: &impl Meta, secret_type: &str, excluded: &Selector) -> bool {
    is_tracked(obj, secret_type, excluded) && obj.annotation(names::VERSIONED) != Some("false")
}

/// A Secret's data that is not what the API serves (values are base64): names the key only.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Malformed {
    #[error("the value of key {0:?} is not base64")]
    NotBase64(String),
}

/// A `data` value's bytes: strict, padded standard base64, as the API server writes it (and as
/// the `base64` crate's STANDARD engine reads it: `secret::tests::values_decode_as_the_api_server_encodes_them`).
/// SIMD: the MAC of a 1 MiB Secret is over its bytes, and decoding them one byte at a time cost
/// about 10 million instructions, most of what a Secret costs beyond its ConfigMap twin
/// (docs/performance.md, "Secrets").
fn decode(text: &str) -> Option<Vec<u8>> {
    base64_simd::STANDARD.decode_to_vec(text).ok()
}

/// What a Secret snapshot copies and its name is MAC'd over: its `type` and its `data`, values as
/// bytes. The fields are private: its `Debug` names the type, keys and sizes, never a value, and
/// nothing hands the values out but the snapshot object written to the API server.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct SecretContent {
    secret_type: String,
    data: BTreeMap<String, Vec<u8>>,
}

impl SecretContent {
    pub fn new(secret_type: impl Into<String>, data: BTreeMap<String, Vec<u8>>) -> SecretContent {
        SecretContent { secret_type: secret_type.into(), data }
    }

    /// Reads `type` and `data` (base64) from a Secret object. `stringData` (write-only; the API
    /// server merges it into `data` before admission sees the object) is merged the same way, its
    /// keys over `data`'s, for objects read from elsewhere.
    pub fn from_object(obj: &Value) -> Result<SecretContent, Malformed> {
        let mut data = BTreeMap::new();
        for (k, v) in obj.get("data").and_then(Value::as_object).into_iter().flatten() {
            let bytes = v.as_str().and_then(decode).ok_or_else(|| Malformed::NotBase64(k.clone()))?;
            data.insert(k.clone(), bytes);
        }
        for (k, v) in obj.get("stringData").and_then(Value::as_object).into_iter().flatten() {
            data.insert(k.clone(), v.as_str().unwrap_or_default().as_bytes().to_vec());
        }
        Ok(SecretContent { secret_type: secret_type(obj).to_owned(), data })
    }

    pub fn secret_type(&self) -> &str {
        &self.secret_type
    }

    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.data.keys().map(String::as_str)
    }

    /// Size in bytes of keys and values, for metrics.
    pub fn bytes(&self) -> usize {
        self.data.iter().map(|(k, v)| k.len() + v.len()).sum()
    }

    /// Each key with the size in bytes of its value: what the plugin shows of a Secret by
    /// default (docs/plugin.md, "Secrets").
    pub fn key_sizes(&self) -> impl Iterator<Item = (&str, usize)> {
        self.data.iter().map(|(k, v)| (k.as_str(), v.len()))
    }

    /// The value of `key`. The one way a value leaves this type besides the snapshot object:
    /// the plugin's `diff --show-values` (docs/plugin.md, "Secrets"), the user's explicit request,
    /// read with their own credentials. Nothing else calls it.
    pub fn revealed_value(&self, key: &str) -> Option<&[u8]> {
        self.data.get(key).map(Vec::as_slice)
    }

    /// The MAC of this content as the content of Secret `source`, under `key`, in the current
    /// frame ([`Frame::V2`]), encoded as a snapshot's hash is (`snapshot::encode_digest`): the
    /// hash part of its snapshot's name and its hash label.
    pub fn mac(&self, key: &NamespaceKey, source: &str) -> String {
        self.mac_in(key, source, Frame::V2)
    }

    /// [`Self::mac`] in frame `frame` (a [`Frame::V1`] MAC ignores `source`).
    pub fn mac_in(&self, key: &NamespaceKey, source: &str, frame: Frame) -> String {
        let mut m = key.mac();
        self.frame(source, frame, |bytes| m.update(bytes));
        snapshot::encode_digest(&m.finish())
    }

    /// The byte stream [`Self::mac_in`] MACs: a version tag; in v2 the source's name (the
    /// namespace is in the namespace key), so one content under two names gets unrelated MACs;
    /// then the type and each key and value; everything length-prefixed, keys in sorted order
    /// (BTreeMap). Lengths make it injective: no two contents, nor a name, a type and a key,
    /// produce the same stream.
    fn frame(&self, source: &str, frame: Frame, mut sink: impl FnMut(&[u8])) {
        match frame {
            Frame::V1 => sink(b"confighistory/secret/v1\0"),
            Frame::V2 => {
                sink(b"confighistory/secret/v2\0");
                sink(&(source.len() as u64).to_be_bytes());
                sink(source.as_bytes());
            }
        }
        sink(&(self.secret_type.len() as u64).to_be_bytes());
        sink(self.secret_type.as_bytes());
        sink(&(self.data.len() as u64).to_be_bytes());
        for (k, v) in &self.data {
            sink(&(k.len() as u64).to_be_bytes());
            sink(k.as_bytes());
            sink(&(v.len() as u64).to_be_bytes());
            sink(v);
        }
    }

    #[cfg(test)]
    fn framing(&self, source: &str, frame: Frame) -> Vec<u8> {
        let mut out = Vec::new();
        self.frame(source, frame, |b| out.extend_from_slice(b));
        out
    }
}

impl std::fmt::Debug for SecretContent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretContent").field("type", &self.secret_type).field("data", &Sizes(&self.data)).finish()
    }
}

/// The frame a Secret's MAC is computed over (docs/behaviour.md §4a). [`Frame::V2`] binds the
/// source's name; [`Frame::V1`] (content only) is what heads and snapshots made before v2 are
/// MAC'd over: they stay valid, and a source whose content stays keeps its v1 head.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Frame {
    V1,
    V2,
}

/// How a source Secret's current content is named (docs/behaviour.md §4a): the cluster key and
/// frame its MACs are under, and the MAC of that content (its head).
#[derive(Clone, Debug)]
pub struct Named<'a> {
    pub key: &'a ClusterKey,
    pub frame: Frame,
    pub mac: String,
}

/// How `content`, the content of source Secret `obj` named `source` in namespace `ns`, is named:
/// while its recorded head names it, under the key and frame the head was MAC'd under (the key
/// its `confighistory.io/key-id` annotation names while it is kept, else the kept key under which
/// the head names it), so a key rotation or the v2 frame renames nothing and moves no workload;
/// otherwise (new content, or a head it no longer matches) under the current key in the current
/// frame ([`Frame::V2`]). `obj` is the stored
/// source as the API server gave it, never a request's word for it (§9a).
pub fn source_mac<'a>(obj: &impl Meta, content: &SecretContent, ns: &str, source: &str, keys: &'a Keyring) -> Named<'a> {
    let head = obj.annotation(names::HEAD);
    let recorded = obj.annotation(names::KEY_ID).and_then(|t| t.parse::<KeyId>().ok()).and_then(|id| keys.get(id));
    // The MAC under `key` in the frame that gives the head, if one does; else the current frame's.
    let under = |key: &'a ClusterKey| -> (Named<'a>, bool) {
        let nk = key.namespace_key(ns);
        let v2 = content.mac_in(&nk, source, Frame::V2);
        match head {
            Some(h) if h == v2 => (Named { key, frame: Frame::V2, mac: v2 }, true),
            Some(h) => {
                let v1 = content.mac_in(&nk, source, Frame::V1);
                if h == v1 {
                    (Named { key, frame: Frame::V1, mac: v1 }, true)
                } else {
                    (Named { key, frame: Frame::V2, mac: v2 }, false)
                }
            }
            None => (Named { key, frame: Frame::V2, mac: v2 }, false),
        }
    };
    if let Some((named, true)) = recorded.map(&under) {
        return named;
    }
    if head.is_some() {
        let others = keys.kept().filter(|k| recorded.is_none_or(|r| r.id() != k.id()));
        if let Some(named) = others.map(&under).find_map(|(n, heads)| heads.then_some(n)) {
            return named;
        }
    }
    under(keys.current()).0
}

/// The name of the snapshot of `content` of Secret `source` under the namespace's `key`:
/// `<source>-<mac>`, then `-1`, `-2`, … in the collision sequence, shortened as a ConfigMap
/// snapshot's name is (`snapshot::name`).
pub fn snapshot_name(source: &str, content: &SecretContent, key: &NamespaceKey, index: u32) -> String {
    snapshot::name(source, &content.mac(key, source), index)
}

/// The Secret object a snapshot is created as: immutable, the source's type and data, the
/// snapshot labels of a ConfigMap snapshot (hash: the MAC) and the key id it was MAC'd under.
pub fn snapshot_object(
    namespace: &str,
    source: &str,
    snapshot_name: &str,
    content: &SecretContent,
    key: &NamespaceKey,
    adopted: &[String],
) -> Value {
    snapshot_object_in(namespace, source, snapshot_name, content, key, Frame::V2, adopted)
}

/// [`snapshot_object`] MAC'd in frame `frame` (a source that keeps its v1 head, [`source_mac`]).
pub fn snapshot_object_in(
    namespace: &str,
    source: &str,
    snapshot_name: &str,
    content: &SecretContent,
    key: &NamespaceKey,
    frame: Frame,
    adopted: &[String],
) -> Value {
    let mut obj = snapshot::skeleton(SECRET, namespace, source, snapshot_name, &content.mac_in(key, source, frame), adopted);
    obj["metadata"]["labels"][names::KEY_ID_LABEL] = Value::String(key.id().to_string());
    obj["type"] = Value::String(content.secret_type.clone());
    if !content.data.is_empty() {
        let b64 = |v: &Vec<u8>| Value::String(base64_simd::STANDARD.encode_to_string(v));
        obj["data"] = Value::Object(content.data.iter().map(|(k, v)| (k.clone(), b64(v))).collect());
    }
    obj
}

/// Why an object is not a valid Secret snapshot (docs/behaviour.md §4a, §5). Names labels, key
/// ids and the claimed MAC (from the object's own name and label), never content or a MAC of it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Invalid {
    #[error("it is not immutable")]
    Mutable,
    #[error("it has no {0} label")]
    MissingLabel(&'static str),
    #[error("its key id {0:?} is not a key id")]
    BadKeyId(String),
    #[error("its key {0} is not kept")]
    UnknownKey(KeyId),
    #[error("its data is malformed: {0}")]
    Malformed(Malformed),
    #[error("its content does not MAC to {0} under its namespace's key {1}")]
    WrongContent(String, KeyId),
    #[error("its name does not end in its MAC {0}")]
    NameMismatch(String),
}

/// Checks a Secret snapshot in `namespace` from the object itself: immutable, labelled as a
/// snapshot, its key id one the keyring keeps, and its content's MAC under that key's namespace
/// key the one in its hash label and name: as the content of the source it names (its
/// `source-name` annotation, else its name's source part) in frame v2, or in frame v1 (made
/// before v2, docs/behaviour.md §4a). `Ok` with the MAC.
pub fn validate(obj: &Value, namespace: &str, keys: &Keyring) -> Result<String, Invalid> {
    let claimed = snapshot::claimed_hash(obj).map_err(|e| match e {
        snapshot::Invalid::MissingLabel(l) => Invalid::MissingLabel(l),
        _ => Invalid::Mutable,
    })?;
    let label = |k: &'static str| obj.at("/metadata/labels").and_then(|l| l.get(k)).and_then(Value::as_str);
    let id_text = label(names::KEY_ID_LABEL).ok_or(Invalid::MissingLabel(names::KEY_ID_LABEL))?;
    let id: KeyId = id_text.parse().map_err(|_| Invalid::BadKeyId(id_text.chars().take(16).collect()))?;
    let key = keys.get(id).ok_or(Invalid::UnknownKey(id))?.namespace_key(namespace);
    let content = SecretContent::from_object(obj).map_err(Invalid::Malformed)?;
    let name = obj.at("/metadata/name").and_then(Value::as_str).unwrap_or_default();
    let source = snapshot::snapshot_source(name, obj).unwrap_or_default();
    if content.mac_in(&key, source, Frame::V2) != claimed && content.mac_in(&key, source, Frame::V1) != claimed {
        return Err(Invalid::WrongContent(claimed.chars().take(snapshot::HASH_LEN).collect(), id));
    }
    if !snapshot::names_its_hash(obj, claimed) {
        return Err(Invalid::NameMismatch(claimed.to_owned()));
    }
    Ok(claimed.to_owned())
}

/// Keys removed, added and changed between two contents of a Secret, by name: what an UPDATE
/// warning says about a Secret (docs/behaviour.md §4a: keys, never values; the settings inside a
/// value are never parsed).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyChanges {
    pub removed: Vec<String>,
    pub added: Vec<String>,
    /// Keys in both whose values differ.
    pub changed: Vec<String>,
    /// Whether the type changed (the type is said, it is not a value).
    pub type_changed: bool,
}

pub fn key_changes(old: &SecretContent, new: &SecretContent) -> KeyChanges {
    let names = |m: &BTreeMap<String, Vec<u8>>, other: &BTreeMap<String, Vec<u8>>| -> Vec<String> {
        m.keys().filter(|k| !other.contains_key(*k)).cloned().collect()
    };
    KeyChanges {
        removed: names(&old.data, &new.data),
        added: names(&new.data, &old.data),
        changed: old.data.iter().filter(|(k, v)| new.data.get(*k).is_some_and(|n| n != *v)).map(|(k, _)| k.clone()).collect(),
        type_changed: old.secret_type != new.secret_type,
    }
}

/// Whether two Secret objects hold the same content (type and data), compared as the API server
/// sends them: base64 text, which it writes canonically from the bytes it stores, so equal text is
/// equal bytes and the values need no decoding (a 1 MiB Secret's decode costs about twice its
/// MAC's SHA-256 in instructions, docs/performance.md). `stringData`, which the API server merges
/// into `data` before admission, is compared too.
pub fn same_content(a: &Value, b: &Value) -> bool {
    fn part<'a>(o: &'a Value, k: &str) -> Option<&'a Value> {
        o.get(k).filter(|v| !v.is_null() && v.as_object().is_none_or(|m| !m.is_empty()))
    }
    secret_type(a) == secret_type(b) && part(a, "data") == part(b, "data") && part(a, "stringData") == part(b, "stringData")
}

/// [`key_changes`] of two Secret objects, from their base64 text as [`same_content`] compares it:
/// no value is decoded, nor copied.
pub fn key_changes_of(old: &Value, new: &Value) -> KeyChanges {
    use std::borrow::Cow;
    fn values(o: &Value) -> BTreeMap<String, Cow<'_, str>> {
        let mut m: BTreeMap<String, Cow<'_, str>> = BTreeMap::new();
        for (k, v) in o.get("data").and_then(Value::as_object).into_iter().flatten() {
            m.insert(k.clone(), Cow::Borrowed(v.as_str().unwrap_or_default()));
        }
        for (k, v) in o.get("stringData").and_then(Value::as_object).into_iter().flatten() {
            m.insert(k.clone(), Cow::Owned(base64_simd::STANDARD.encode_to_string(v.as_str().unwrap_or_default())));
        }
        m
    }
    let (old_values, new_values) = (values(old), values(new));
    let names = |m: &BTreeMap<String, Cow<'_, str>>, other: &BTreeMap<String, Cow<'_, str>>| -> Vec<String> {
        m.keys().filter(|k| !other.contains_key(*k)).cloned().collect()
    };
    KeyChanges {
        removed: names(&old_values, &new_values),
        added: names(&new_values, &old_values),
        changed: old_values.iter().filter(|(k, v)| new_values.get(*k).is_some_and(|n| n != *v)).map(|(k, _)| k.clone()).collect(),
        type_changed: secret_type(old) != secret_type(new),
    }
}

/// At most this many key names in each list of a warning; the rest are counted.
const MAX_WARNED_KEYS: usize = 16;

/// The UPDATE warning for Secret `source` (its annotation entry, `secret/db`) whose content
/// changed, naming keys only: `secret/db: keys removed [a], added [b]`, or `values changed in
/// [c]` when the keys are the same. `None` when nothing changed.
pub fn update_warning(source: &str, old: &SecretContent, new: &SecretContent) -> Option<String> {
    warning(source, &key_changes(old, new), &old.secret_type, &new.secret_type)
}

/// [`update_warning`] of two Secret objects, from their base64 text ([`key_changes_of`]).
pub fn update_warning_of(source: &str, old: &Value, new: &Value) -> Option<String> {
    warning(source, &key_changes_of(old, new), secret_type(old), secret_type(new))
}

fn warning(source: &str, c: &KeyChanges, old_type: &str, new_type: &str) -> Option<String> {
    // The lists share the room the line leaves (the API server cuts longer warnings), so their
    // `+N` counts and the words after them are never cut off: at most MAX_WARNED_KEYS names.
    // Key names have no spaces (Kubernetes' rule), so " +" only ever starts the count.
    let list = |keys: &[String], room: usize| {
        let shown = &keys[..keys.len().min(MAX_WARNED_KEYS)];
        let fitted = super::text::fit_list(shown, room);
        match (keys.len() - shown.len(), fitted.rsplit_once(" +")) {
            (0, _) => fitted,
            (more, Some((names, counted))) => format!("{names} +{}", counted.parse::<usize>().unwrap_or(0) + more),
            (more, None) => format!("{fitted} +{more}"),
        }
    };
    let type_part = format!("type changed from {old_type} to {new_type}");
    let fixed = source.len() + 2 + if c.type_changed { type_part.len() + 2 } else { 0 };
    let mut parts = Vec::new();
    if !c.removed.is_empty() || !c.added.is_empty() {
        let lists = [&c.removed, &c.added].iter().filter(|l| !l.is_empty()).count();
        let room = super::text::MAX_WARNING.saturating_sub(fixed + "keys removed [], added []".len()) / lists;
        parts.push(format!("keys removed [{}], added [{}]", list(&c.removed, room), list(&c.added, room)));
    } else if !c.changed.is_empty() {
        let room = super::text::MAX_WARNING.saturating_sub(fixed + "values changed in [], same keys".len());
        parts.push(format!("values changed in [{}], same keys", list(&c.changed, room)));
    }
    if c.type_changed {
        parts.push(type_part);
    }
    (!parts.is_empty()).then(|| format!("{source}: {}", parts.join("; ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The SIMD decoder reads exactly what the `base64` crate's strict STANDARD engine reads
    /// (canonical, padded), and nothing it refuses: a MAC is over these bytes.
    #[test]
    fn values_decode_as_the_api_server_encodes_them() {
        use base64::Engine as _;
        let engine = base64::engine::general_purpose::STANDARD;
        for n in 0..200usize {
            let bytes: Vec<u8> = (0..n).map(|i| (i * 37 + n) as u8).collect();
            let text = engine.encode(&bytes);
            assert_eq!(decode(&text), Some(bytes), "{n} bytes");
        }
        for text in ["aGVsbG9=", "aGVsbG8", "aGVs bG8=", "aGVsbG8==", "aGVsbG8=\n", "a===", "=", "aGVs\nbG8=", "aGVsbG8-", "aGVsbG8_"] {
            assert_eq!(decode(text), engine.decode(text).ok(), "{text:?}");
        }
    }
    use crate::model::keys::tests::key;
    use serde_json::json;

    fn content(t: &str, pairs: &[(&str, &[u8])]) -> SecretContent {
        SecretContent::new(t, pairs.iter().map(|(k, v)| (k.to_string(), v.to_vec())).collect())
    }

    fn secret(t: Option<&str>, labels: Value, annotations: Value) -> Value {
        let mut obj = json!({"metadata": {"name": "s", "labels": labels, "annotations": annotations}});
        if let Some(t) = t {
            obj["type"] = json!(t);
        }
        obj
    }

    /// The key and frame a source's MACs are under: the ones its head was MAC'd under while the
    /// head names its content (the recorded key first, then any kept key; v2, then v1); else the
    /// current key in frame v2.
    #[test]
    fn a_source_is_named_under_the_key_and_frame_its_head_was_made_with() {
        let ring = Keyring::new(key(1, 1), []).unwrap().rotate(key(2, 2)).unwrap();
        let c = content("Opaque", &[("password", b"x")]);
        let k1 = ring.get(KeyId(1)).unwrap().namespace_key("ns");
        let (mac1, mac1_v1) = (c.mac(&k1, "s"), c.mac_in(&k1, "s", Frame::V1));
        let named = |obj: &Value| {
            let n = source_mac(obj, &c, "ns", "s", &ring);
            assert_eq!(n.mac, c.mac_in(&n.key.namespace_key("ns"), "s", n.frame), "the MAC under the key and frame named");
            (n.key.id(), n.frame)
        };
        let current = (KeyId(2), Frame::V2);
        assert_eq!(named(&secret(None, json!({}), json!({names::KEY_ID: "1", names::HEAD: mac1}))), (KeyId(1), Frame::V2), "recorded");
        assert_eq!(named(&secret(None, json!({}), json!({names::KEY_ID: "1", names::HEAD: mac1_v1}))), (KeyId(1), Frame::V1), "a v1 head");
        assert_eq!(
            named(&secret(None, json!({}), json!({names::KEY_ID: "7", names::HEAD: mac1}))),
            (KeyId(1), Frame::V2),
            "not kept: its head's"
        );
        assert_eq!(named(&secret(None, json!({}), json!({names::HEAD: mac1_v1}))), (KeyId(1), Frame::V1), "no record: its head's");
        assert_eq!(
            named(&secret(None, json!({}), json!({names::KEY_ID: "1", names::HEAD: "other"}))),
            current,
            "a stale head: new content"
        );
        assert_eq!(named(&secret(None, json!({}), json!({names::KEY_ID: "1"}))), current, "no head: new content");
        assert_eq!(named(&secret(None, json!({}), json!({}))), current, "nothing recorded");
    }

    /// Comparing the base64 text agrees with comparing the decoded content, and names the same keys.
    #[test]
    fn text_comparison_agrees_with_decoded_content() {
        let b = |s: &str| base64::Engine::encode(&base64::engine::general_purpose::STANDARD, s);
        let obj = |t: &str, data: Value, string_data: Value| json!({"type": t, "data": data, "stringData": string_data});
        let base = obj("Opaque", json!({"a": b("1"), "b": b("2")}), json!(null));
        let cases = [
            base.clone(),
            obj("Opaque", json!({"a": b("1"), "b": b("2")}), json!({})),
            obj("Opaque", json!({"a": b("1"), "b": b("3")}), json!(null)),
            obj("Opaque", json!({"a": b("1"), "c": b("2")}), json!(null)),
            obj("kubernetes.io/tls", json!({"a": b("1"), "b": b("2")}), json!(null)),
            obj("Opaque", json!({"a": b("1")}), json!({"b": "2"})),
            obj("Opaque", json!({}), json!(null)),
        ];
        for (i, other) in cases.iter().enumerate() {
            let (x, y) = (SecretContent::from_object(&base).unwrap(), SecretContent::from_object(other).unwrap());
            if i != 5 {
                assert_eq!(same_content(&base, other), x == y, "case {i}");
            }
            assert_eq!(key_changes_of(&base, other), key_changes(&x, &y), "case {i}");
            assert_eq!(update_warning_of("secret/s", &base, other), update_warning("secret/s", &x, &y), "case {i}");
        }
    }

    #[test]
    fn never_sources_and_opt_outs() {
        let none = Selector::default();
        let sel: Selector = "ca-bundle=true".parse().unwrap();
        let plain = secret(None, json!({}), json!({}));
        assert_eq!(secret_type(&plain), OPAQUE);
        assert_eq!(never_source(&plain, secret_type(&plain), &sel), None);
        assert!(is_tracked(&plain, OPAQUE, &sel) && is_versioned(&plain, OPAQUE, &sel));
        for t in NEVER_SOURCE_TYPES {
            let obj = secret(Some(t), json!({}), json!({}));
            assert_eq!(never_source(&obj, secret_type(&obj), &none), Some(NeverSource::Type(t)));
            assert!(!is_tracked(&obj, t, &none) && !is_versioned(&obj, t, &none));
        }
        for t in ["kubernetes.io/tls", "kubernetes.io/dockerconfigjson", "Opaque", "example.com/x"] {
            assert_eq!(never_source(&plain, t, &none), None, "{t}");
        }
        let cert = secret(Some("kubernetes.io/tls"), json!({}), json!({names::CERTIFICATE_NAME: "web"}));
        assert_eq!(never_source(&cert, secret_type(&cert), &none), Some(NeverSource::CertificateIssuer));
        let selected = secret(None, json!({"ca-bundle": "true"}), json!({}));
        assert_eq!(never_source(&selected, OPAQUE, &sel), Some(NeverSource::Selector));
        assert_eq!(never_source(&selected, OPAQUE, &none), None, "an empty selector excludes nothing");
        // `versioned: "false"`: tracked (leaving versioning is a change), not versioned.
        let opted_out = secret(None, json!({}), json!({names::VERSIONED: "false"}));
        assert!(is_tracked(&opted_out, OPAQUE, &none) && !is_versioned(&opted_out, OPAQUE, &none));
        // Immutable Secrets and snapshots are never tracked.
        let mut immutable = plain.clone();
        immutable["immutable"] = json!(true);
        assert!(!is_tracked(&immutable, OPAQUE, &none));
        assert!(!is_tracked(&secret(None, json!({names::HASH_LABEL: "x"}), json!({})), OPAQUE, &none));
        assert_eq!(NeverSource::Type(NEVER_SOURCE_TYPES[2]).to_string(), "Secrets of type helm.sh/release.v1 are never versioned");
    }

    #[test]
    fn content_reads_base64_data_and_string_data() {
        let obj = json!({"type": "kubernetes.io/basic-auth", "data": {"username": "YWRtaW4=", "password": "b2xk"}, "stringData": {"password": "new"}});
        let c = SecretContent::from_object(&obj).unwrap();
        assert_eq!(c, content("kubernetes.io/basic-auth", &[("username", b"admin"), ("password", b"new")]));
        assert_eq!(
            (c.secret_type(), c.keys().collect::<Vec<_>>(), c.bytes()),
            ("kubernetes.io/basic-auth", vec!["password", "username"], 24)
        );
        let bad = json!({"data": {"k": "not base64!"}});
        assert_eq!(SecretContent::from_object(&bad), Err(Malformed::NotBase64("k".into())));
        assert!(!Malformed::NotBase64("k".into()).to_string().contains("not base64!"));
        assert_eq!(SecretContent::from_object(&json!({})).unwrap(), content(OPAQUE, &[]));
    }

    #[test]
    fn the_mac_covers_name_type_and_data_unambiguously() {
        let k = key(1, 1).namespace_key("ns");
        let base = content(OPAQUE, &[("a", b"1"), ("b", b"2")]);
        let mac = base.mac(&k, "db");
        assert!(snapshot::is_hash(&mac), "{mac}");
        assert_eq!(content(OPAQUE, &[("b", b"2"), ("a", b"1")]).mac(&k, "db"), mac, "key order does not matter");
        let others = [
            content("kubernetes.io/tls", &[("a", b"1"), ("b", b"2")]),
            content(OPAQUE, &[("a", b"1")]),
            content(OPAQUE, &[("a", b"12")]),
            content(OPAQUE, &[("a1", b"")]),
            content(OPAQUE, &[("a", b"")]),
            content(OPAQUE, &[]),
            content("", &[]),
            // The type's bytes moved into a key.
            content("", &[("Opaque", b"")]),
        ];
        let mut framings = vec![base.framing("db", Frame::V2)];
        for o in &others {
            assert_ne!(o.mac(&k, "db"), mac, "{o:?}");
            framings.push(o.framing("db", Frame::V2));
        }
        // The same content under another name, or in frame v1: another stream.
        for (source, frame) in [("db2", Frame::V2), ("d", Frame::V2), ("", Frame::V2), ("db", Frame::V1)] {
            assert_ne!(base.mac_in(&k, source, frame), mac, "{source:?} {frame:?}");
            framings.push(base.framing(source, frame));
        }
        assert_eq!(base.mac_in(&k, "db", Frame::V1), base.mac_in(&k, "other", Frame::V1), "v1 binds no name");
        // A name's bytes moved into the type.
        let moved = content("dbOpaque", &[("a", b"1"), ("b", b"2")]);
        assert_ne!(moved.mac(&k, ""), mac);
        framings.push(moved.framing("", Frame::V2));
        let n = framings.len();
        framings.sort();
        framings.dedup();
        assert_eq!(framings.len(), n, "every framing differs");
        // Not an unkeyed hash: another key, another MAC; and not the ConfigMap hash of the same text.
        assert_ne!(base.mac(&key(1, 2).namespace_key("ns"), "db"), mac);
        let as_configmap = snapshot::Content { data: [("a".into(), "1".into()), ("b".into(), "2".into())].into(), ..Default::default() };
        assert_ne!(as_configmap.hash(), mac);
    }

    /// Snapshots made before frame v2 (their MAC binds no name) stay valid; a v2 snapshot is
    /// valid only as the content of the source it names.
    #[test]
    fn v1_snapshots_stay_valid_and_v2_ones_are_bound_to_their_source() {
        let ring = Keyring::new(key(1, 1), []).unwrap();
        let k = ring.current().namespace_key("shop");
        let c = content(OPAQUE, &[("password", b"hunter2")]);
        let v1_mac = c.mac_in(&k, "db", Frame::V1);
        let v1 = snapshot_object_in("shop", "db", &snapshot::name("db", &v1_mac, 0), &c, &k, Frame::V1, &[]);
        assert_eq!(validate(&v1, "shop", &ring), Ok(v1_mac.clone()));
        let v2 = snapshot_object("shop", "db", &snapshot_name("db", &c, &k, 0), &c, &k, &[]);
        assert_eq!(validate(&v2, "shop", &ring), Ok(c.mac(&k, "db")));
        // The v2 object relabelled as another source's (its name agreeing): its MAC is db's.
        let mut moved = v2.clone();
        let mac = c.mac(&k, "db");
        moved["metadata"]["name"] = json!(snapshot::name("other", &mac, 0));
        moved["metadata"]["annotations"][names::SOURCE_NAME] = json!("other");
        assert!(matches!(validate(&moved, "shop", &ring), Err(Invalid::WrongContent(..))));
        assert_ne!(snapshot_name("db", &c, &k, 0), snapshot::name("db", &v1_mac, 0));
    }

    #[test]
    fn a_snapshot_is_valid_under_its_key_only() {
        let ring = Keyring::new(key(1, 1), []).unwrap();
        let k = ring.current().namespace_key("shop");
        let c = content("kubernetes.io/basic-auth", &[("password", b"hunter2")]);
        let name = snapshot_name("db", &c, &k, 0);
        assert_eq!(snapshot::parse_name(&name), Some(("db", c.mac(&k, "db").as_str(), 0)));
        let obj = snapshot_object("shop", "db", &name, &c, &k, &["t1".to_owned()]);
        assert_eq!(obj["kind"], "Secret");
        assert_eq!(obj["type"], "kubernetes.io/basic-auth");
        assert_eq!(obj["immutable"], true);
        assert_eq!(obj["data"]["password"], "aHVudGVyMg==");
        assert_eq!(obj["metadata"]["labels"][names::KEY_ID_LABEL], "1");
        assert_eq!(obj["metadata"]["labels"][names::HASH_LABEL], c.mac(&k, "db"));
        assert_eq!(obj["metadata"]["annotations"][names::SOURCE_NAME], "db");
        assert_eq!(obj["metadata"]["annotations"][names::ADOPTED], "t1");
        assert_eq!(SecretContent::from_object(&obj).unwrap(), c, "the snapshot holds the content byte for byte");
        assert_eq!(validate(&obj, "shop", &ring), Ok(c.mac(&k, "db")));
        // Another namespace's key does not validate it (a copy into another namespace is invalid).
        assert!(matches!(validate(&obj, "billing", &ring), Err(Invalid::WrongContent(..))));
        let broken = |f: &dyn Fn(&mut Value)| {
            let mut o = obj.clone();
            f(&mut o);
            validate(&o, "shop", &ring)
        };
        assert_eq!(broken(&|o| o["immutable"] = json!(false)), Err(Invalid::Mutable));
        assert!(matches!(broken(&|o| o["data"]["password"] = json!("b3RoZXI=")), Err(Invalid::WrongContent(..))));
        assert!(matches!(broken(&|o| o["type"] = json!("Opaque")), Err(Invalid::WrongContent(..))), "the type is MAC'd");
        assert_eq!(
            broken(&|o| {
                o["metadata"]["labels"].as_object_mut().unwrap().remove(names::KEY_ID_LABEL);
            }),
            Err(Invalid::MissingLabel(names::KEY_ID_LABEL))
        );
        assert_eq!(broken(&|o| o["metadata"]["labels"][names::KEY_ID_LABEL] = json!("2")), Err(Invalid::UnknownKey(KeyId(2))));
        assert_eq!(broken(&|o| o["metadata"]["labels"][names::KEY_ID_LABEL] = json!("x")), Err(Invalid::BadKeyId("x".into())));
        assert_eq!(broken(&|o| o["metadata"]["name"] = json!("db-0000000000zz")), Err(Invalid::NameMismatch(c.mac(&k, "db"))));
        assert!(matches!(broken(&|o| o["data"]["password"] = json!("%%%")), Err(Invalid::Malformed(_))));
        // The collision sequence's names are valid too.
        let mut second = snapshot_object("shop", "db", &snapshot_name("db", &c, &k, 2), &c, &k, &[]);
        assert_eq!(validate(&second, "shop", &ring), Ok(c.mac(&k, "db")));
        second["metadata"]["labels"][names::MANAGED_BY] = json!("someone");
        assert_eq!(validate(&second, "shop", &ring), Err(Invalid::MissingLabel(names::MANAGED_BY)));
    }

    #[test]
    fn a_snapshot_stays_valid_across_a_rotation_while_its_key_is_kept() {
        let ring1 = Keyring::new(key(1, 1), []).unwrap();
        let c = content(OPAQUE, &[("url", b"postgres://db")]);
        let k1 = ring1.current().namespace_key("shop");
        let old = snapshot_object("shop", "db", &snapshot_name("db", &c, &k1, 0), &c, &k1, &[]);
        let ring2 = ring1.rotate(key(2, 2)).unwrap();
        assert_eq!(validate(&old, "shop", &ring2), Ok(c.mac(&k1, "db")), "key 1 kept: still valid");
        // New snapshots are MAC'd under key 2: another name for the same content.
        let k2 = ring2.current().namespace_key("shop");
        assert_eq!(k2.id(), KeyId(2));
        assert_ne!(snapshot_name("db", &c, &k2, 0), snapshot_name("db", &c, &k1, 0));
        let new = snapshot_object("shop", "db", &snapshot_name("db", &c, &k2, 0), &c, &k2, &[]);
        assert_eq!(validate(&new, "shop", &ring2), Ok(c.mac(&k2, "db")));
        let ring3 = ring2.without(KeyId(1));
        assert_eq!(validate(&old, "shop", &ring3), Err(Invalid::UnknownKey(KeyId(1))), "key 1 dropped: invalid");
        assert_eq!(validate(&new, "shop", &ring3), Ok(c.mac(&k2, "db")));
    }

    #[test]
    fn update_warnings_name_keys_never_values() {
        let old = content(OPAQUE, &[("db_url", b"postgres://old"), ("token", b"t0"), ("same", b"x")]);
        let renamed = content(OPAQUE, &[("database.url", b"postgres://old"), ("token", b"t1"), ("same", b"x")]);
        let c = key_changes(&old, &renamed);
        assert_eq!(
            (c.removed, c.added, c.changed, c.type_changed),
            (vec!["db_url".into()], vec!["database.url".into()], vec!["token".into()], false)
        );
        let w = update_warning("secret/db", &old, &renamed).unwrap();
        assert_eq!(w, "secret/db: keys removed [db_url], added [database.url]");
        let values_only = content(OPAQUE, &[("db_url", b"postgres://new"), ("token", b"t0"), ("same", b"x")]);
        assert_eq!(update_warning("secret/db", &old, &values_only).unwrap(), "secret/db: values changed in [db_url], same keys");
        assert_eq!(update_warning("secret/db", &old, &old), None);
        let retyped = SecretContent { secret_type: "kubernetes.io/tls".into(), ..old.clone() };
        assert_eq!(update_warning("secret/db", &old, &retyped).unwrap(), "secret/db: type changed from Opaque to kubernetes.io/tls");
        for w in [update_warning("secret/db", &old, &renamed), update_warning("secret/db", &old, &values_only)].into_iter().flatten() {
            assert!(!w.contains("postgres") && !w.contains("t0") && !w.contains("t1"), "{w}");
        }
        let many = SecretContent::new(OPAQUE, (0..40).map(|i| (format!("k{i:02}"), b"v".to_vec())).collect());
        let w = update_warning("secret/db", &content(OPAQUE, &[]), &many).unwrap();
        // Fitted to the line the API server keeps, the rest counted: every key accounted for.
        assert!(w.len() <= crate::model::text::MAX_WARNING, "{w}");
        let (names, more) = w.trim_end_matches(']').rsplit_once(" +").expect("a count");
        let shown = names.rsplit_once('[').unwrap().1.split(", ").count();
        assert_eq!(shown + more.parse::<usize>().unwrap(), 40, "{w}");
    }
}
