//! Snapshots (docs/behaviour.md §5): content-addressed, immutable copies of a source's content.
//!
//! Everything here is pure: hashing, naming, validity and the object a snapshot is created as.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashSet};

use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

use crate::model::digest::{self, Digest, Sha256};
use crate::model::ids::CONFIGMAP;
use crate::model::json::At;
use crate::model::meta::Meta;
use crate::model::names;

/// Crockford's base32, lowercase: DNS-safe and free of look-alike letters.
const ALPHABET: &[u8; 32] = b"0123456789abcdefghjkmnpqrstvwxyz";
/// 12 characters of 5 bits: 60 bits of SHA-256.
pub const HASH_LEN: usize = 12;
/// Longest ConfigMap name (DNS subdomain).
const MAX_NAME: usize = 253;
/// Longest label value.
const MAX_LABEL: usize = 63;
/// Room kept for the collision suffix (`-NNN`).
const SUFFIX_ROOM: usize = 4;
/// How far the collision sequence goes before giving up.
pub const MAX_COLLISION_INDEX: u32 = 100;

/// The content of a ConfigMap that a snapshot copies: its `data` and `binaryData`, hashed with
/// SHA-256. Its `Debug` names the keys and sizes, never a value (values may be credentials). A
/// Secret's content is another type, `model::secret::SecretContent`, hashed only under a key
/// (docs/behaviour.md §4a): no Secret is ever read into this one, so nothing that takes a
/// `Content` (the settings parser, the unkeyed hash) can be handed a Secret's values.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Content {
    pub data: BTreeMap<String, String>,
    /// binaryData, still base64 as the API serves it (copied byte for byte).
    pub binary_data: BTreeMap<String, String>,
}

impl Content {
    /// Reads `data` and `binaryData` from a ConfigMap object; anything else is ignored.
    pub fn from_object(obj: &Value) -> Content {
        ContentRef::from_object(obj).owned()
    }

    /// This content as a [`ContentRef`] (what the settings comparison and the key diff read).
    pub fn borrowed(&self) -> ContentRef<'_> {
        ContentRef { data: pairs(&self.data).collect(), binary_data: pairs(&self.binary_data).collect() }
    }

    /// Hash of this content, see [`hash`].
    pub fn hash(&self) -> String {
        hash_with::<Sha256>(pairs(&self.data), pairs(&self.binary_data))
    }

    /// Size in bytes of keys and values, for metrics.
    pub fn bytes(&self) -> usize {
        self.data.iter().chain(self.binary_data.iter()).map(|(k, v)| k.len() + v.len()).sum()
    }

    /// All keys, with binary keys marked so a data→binaryData move shows as a change.
    pub fn keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = self.data.keys().cloned().collect();
        keys.extend(self.binary_data.keys().map(|k| format!("{k} (binary)")));
        keys
    }
}

impl std::fmt::Debug for Content {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Content").field("data", &Sizes(&self.data)).field("binary_data", &Sizes(&self.binary_data)).finish()
    }
}

/// A ConfigMap's content where its object holds it: [`Content`] borrowed, not copied. A source
/// UPDATE reads the content of `object` and `oldObject` to hash, compare and diff them; copied out,
/// a 1 MiB source was 2 MiB of copies and 400 allocations per admission (docs/performance.md, "The
/// 1 MiB UPDATE against its limit"). Keys in sorted order, as [`Content`]'s, so the same content
/// frames, hashes and compares the same either way. Its `Debug` names keys and sizes, never a value.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ContentRef<'a> {
    data: Vec<(&'a str, &'a str)>,
    binary_data: Vec<(&'a str, &'a str)>,
}

impl<'a> ContentRef<'a> {
    /// Reads `data` and `binaryData` from a ConfigMap object, as [`Content::from_object`] does (a
    /// value that is not a string reads as empty); anything else is ignored.
    pub fn from_object(obj: &'a Value) -> ContentRef<'a> {
        let field = |k: &str| -> Vec<(&'a str, &'a str)> {
            let Some(map) = obj.get(k).and_then(Value::as_object) else { return Vec::new() };
            let mut pairs: Vec<(&str, &str)> = map.iter().map(|(k, v)| (k.as_str(), v.as_str().unwrap_or_default())).collect();
            // serde_json's map iterates in key order unless its `preserve_order` feature is on
            // (some dependency may turn it on): the framing needs sorted keys either way.
            if !pairs.windows(2).all(|w| w[0].0 < w[1].0) {
                pairs.sort_unstable_by(|a, b| a.0.cmp(b.0));
            }
            pairs
        };
        ContentRef { data: field("data"), binary_data: field("binaryData") }
    }

    /// Hash of this content: [`Content::hash`] of the same content.
    pub fn hash(&self) -> String {
        hash_with::<Sha256>(self.data.iter().copied(), self.binary_data.iter().copied())
    }

    /// `data`, keys sorted.
    pub fn data(&self) -> &[(&'a str, &'a str)] {
        &self.data
    }

    /// `binaryData` (base64 as served), keys sorted.
    pub fn binary_data(&self) -> &[(&'a str, &'a str)] {
        &self.binary_data
    }

    /// The value of `data` key `key`.
    pub fn data_value(&self, key: &str) -> Option<&'a str> {
        self.data.binary_search_by(|(k, _)| (*k).cmp(key)).ok().map(|i| self.data[i].1)
    }

    /// A copy, for what outlives the object (a snapshot to write).
    pub fn owned(&self) -> Content {
        let map = |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Content { data: map(&self.data), binary_data: map(&self.binary_data) }
    }

    /// All keys, with binary keys marked so a data→binaryData move shows as a change.
    pub fn keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = self.data.iter().map(|(k, _)| k.to_string()).collect();
        keys.extend(self.binary_data.iter().map(|(k, _)| format!("{k} (binary)")));
        keys
    }
}

impl std::fmt::Debug for ContentRef<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ContentRef").field("data", &PairSizes(&self.data)).field("binary_data", &PairSizes(&self.binary_data)).finish()
    }
}

/// A ConfigMap's content with each value still as JSON text (a JSON string, escapes and all), as
/// the review's `oldObject` carries it: parsed only for its keys and where each value ends, each
/// value decoded when it is read (docs/performance.md, "The 1 MiB UPDATE against its limit": the old
/// content of a source UPDATE is compared with the new one, which stops at the first difference,
/// and read for the few keys the settings diff parses). The same content as
/// [`Content::from_object`] reads from the object: a value that is not a string reads as empty,
/// a key given twice keeps its last value. Its `Debug` names keys and sizes, never a value.
#[derive(Clone, Default)]
pub struct RawContent {
    data: Vec<(String, Box<RawValue>)>,
    binary_data: Vec<(String, Box<RawValue>)>,
}

impl RawContent {
    /// From the `data` and `binaryData` maps as parsed, in the order given (`None`: the field is
    /// absent or not a map).
    pub fn new(data: Option<Vec<(String, Box<RawValue>)>>, binary_data: Option<Vec<(String, Box<RawValue>)>>) -> RawContent {
        let sorted = |mut pairs: Vec<(String, Box<RawValue>)>| {
            if !pairs.windows(2).all(|w| w[0].0 < w[1].0) {
                // Stable: of a key given twice the last one stays last, and is the one kept (as a
                // map parsed from the same text keeps it).
                pairs.sort_by(|a, b| a.0.cmp(&b.0));
                let mut kept: Vec<(String, Box<RawValue>)> = Vec::with_capacity(pairs.len());
                for pair in pairs {
                    match kept.last_mut() {
                        Some(last) if last.0 == pair.0 => *last = pair,
                        _ => kept.push(pair),
                    }
                }
                pairs = kept;
            }
            pairs
        };
        RawContent { data: sorted(data.unwrap_or_default()), binary_data: sorted(binary_data.unwrap_or_default()) }
    }

    /// The content of a ConfigMap object, its values written back as JSON text (for a request
    /// whose old object was parsed whole).
    pub fn from_object(obj: &Value) -> RawContent {
        let raw = |pairs: &[(&str, &str)]| -> Vec<(String, Box<RawValue>)> {
            pairs.iter().map(|(k, v)| (k.to_string(), RawValue::from_string(Value::from(*v).to_string()).expect("a JSON string"))).collect()
        };
        let content = ContentRef::from_object(obj);
        RawContent { data: raw(&content.data), binary_data: raw(&content.binary_data) }
    }

    /// `data`'s values, decoded, in key order.
    pub fn data_values(&self) -> impl Iterator<Item = (&str, Cow<'_, str>)> {
        self.data.iter().map(|(k, v)| (k.as_str(), decode(v)))
    }

    /// Whether this is the same content as `other`: keys and decoded values equal.
    pub fn same(&self, other: &ContentRef) -> bool {
        let same = |raw: &[(String, Box<RawValue>)], pairs: &[(&str, &str)]| {
            raw.len() == pairs.len() && raw.iter().zip(pairs).all(|((k, v), (k2, v2))| k == k2 && decode(v) == *v2)
        };
        same(&self.data, &other.data) && same(&self.binary_data, &other.binary_data)
    }

    /// All keys, as [`ContentRef::keys`].
    pub fn keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = self.data.iter().map(|(k, _)| k.clone()).collect();
        keys.extend(self.binary_data.iter().map(|(k, _)| format!("{k} (binary)")));
        keys
    }

    /// Decoded, for what outlives the request (a snapshot to write).
    pub fn owned(&self) -> Content {
        let map = |pairs: &[(String, Box<RawValue>)]| pairs.iter().map(|(k, v)| (k.clone(), decode(v).into_owned())).collect();
        Content { data: map(&self.data), binary_data: map(&self.binary_data) }
    }
}

/// A value's JSON text decoded: borrowed when it has no escapes; empty when it is not a string.
fn decode(raw: &RawValue) -> Cow<'_, str> {
    let text = raw.get();
    match text.strip_prefix('"').and_then(|t| t.strip_suffix('"')) {
        // Valid JSON (checked while parsing): without a backslash, the text between the quotes is the string.
        Some(inner) if !inner.contains('\\') => Cow::Borrowed(inner),
        Some(_) => Cow::Owned(serde_json::from_str::<String>(text).unwrap_or_default()),
        None => Cow::Borrowed(""),
    }
}

impl std::fmt::Debug for RawContent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let sizes = |pairs: &[(String, Box<RawValue>)]| pairs.iter().map(|(k, v)| (k.clone(), Bytes(v.get().len()))).collect::<Vec<_>>();
        f.debug_struct("RawContent").field("data", &sizes(&self.data)).field("binary_data", &sizes(&self.binary_data)).finish()
    }
}

/// Keys with the size of their values, for [`ContentRef`]'s `Debug`.
struct PairSizes<'a>(&'a [(&'a str, &'a str)]);

impl std::fmt::Debug for PairSizes<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.0.iter().map(|(k, v)| (k, Bytes(v.len())))).finish()
    }
}

/// Keys with the size of their values, for [`Content`]'s `Debug`.
pub(crate) struct Sizes<'a, V: AsRef<[u8]>>(pub(crate) &'a BTreeMap<String, V>);

impl<V: AsRef<[u8]>> std::fmt::Debug for Sizes<'_, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.0.iter().map(|(k, v)| (k, Bytes(v.as_ref().len())))).finish()
    }
}

struct Bytes(usize);

impl std::fmt::Debug for Bytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} bytes", self.0)
    }
}

/// SHA-256 over an unambiguous framing of `data` and `binaryData`: a
/// section tag, then each key and value length-prefixed, keys in sorted order (BTreeMap).
/// Lengths make the framing injective: no two different contents produce the same byte stream.
pub fn hash(content: &Content) -> String {
    content.hash()
}

fn hash_with<'a, D: Digest>(
    data: impl ExactSizeIterator<Item = (&'a str, &'a str)>,
    binary_data: impl ExactSizeIterator<Item = (&'a str, &'a str)>,
) -> String {
    let mut h = D::default();
    frame(data, binary_data, |bytes| h.update(bytes));
    encode_digest(&h.finish())
}

/// The hash a snapshot name and its hash label carry, from a 32-byte digest (or MAC): its first
/// 60 bits in [`ALPHABET`], [`HASH_LEN`] characters.
pub(crate) fn encode_digest(digest: &[u8; 32]) -> String {
    encode(&digest[..8], HASH_LEN)
}

/// The byte stream [`hash`] digests, for tests that prove it decodes back to one content.
pub fn framing(content: &Content) -> Vec<u8> {
    let mut out = Vec::with_capacity(content.bytes() + 64);
    frame(pairs(&content.data), pairs(&content.binary_data), |bytes| out.extend_from_slice(bytes));
    out
}

/// A map's entries as string pairs, in key order.
fn pairs(map: &BTreeMap<String, String>) -> impl ExactSizeIterator<Item = (&str, &str)> {
    map.iter().map(|(k, v)| (k.as_str(), v.as_str()))
}

/// The framing of a content given as its `data` and `binaryData` pairs, each in key order.
fn frame<'a>(
    data: impl ExactSizeIterator<Item = (&'a str, &'a str)>,
    binary_data: impl ExactSizeIterator<Item = (&'a str, &'a str)>,
    mut sink: impl FnMut(&[u8]),
) {
    sink(b"confighistory/v1\0");
    let mut section = |tag: u8, pairs: &mut dyn ExactSizeIterator<Item = (&'a str, &'a str)>| {
        sink(&[tag]);
        sink(&(pairs.len() as u64).to_be_bytes());
        for (k, v) in pairs {
            sink(&(k.len() as u64).to_be_bytes());
            sink(k.as_bytes());
            sink(&(v.len() as u64).to_be_bytes());
            sink(v.as_bytes());
        }
    };
    section(b'd', &mut { data });
    section(b'b', &mut { binary_data });
}

/// Short DNS-safe hash of any string (used to shorten over-long label values).
pub fn short_hash(s: &str) -> String {
    encode_digest(&digest::digest::<Sha256>(s.as_bytes()))
}

fn encode(bytes: &[u8], len: usize) -> String {
    let mut bits = u64::from_be_bytes(bytes.try_into().expect("8 bytes"));
    let mut out = String::with_capacity(len);
    for _ in 0..len {
        out.push(ALPHABET[(bits >> 59) as usize] as char);
        bits <<= 5;
    }
    out
}

/// True when `s` looks like a hash this module produced.
pub fn is_hash(s: &str) -> bool {
    s.len() == HASH_LEN && s.bytes().all(|b| ALPHABET.contains(&b))
}

/// Source names longer than this are shortened in snapshot names.
pub const MAX_SOURCE_PART: usize = MAX_NAME - 1 - HASH_LEN - SUFFIX_ROOM;

/// The name of a snapshot: `<source>-<hash>`, then `-1`, `-2`, … in the collision sequence.
/// The source part is shortened so the name stays a valid ConfigMap name.
pub fn name(source: &str, hash: &str, index: u32) -> String {
    let base = prefix(source, MAX_SOURCE_PART).trim_end_matches(['-', '.']);
    if index == 0 {
        format!("{base}-{hash}")
    } else {
        format!("{base}-{hash}-{index}")
    }
}

/// The longest prefix of `s` of at most `max` bytes that ends on a character boundary (names in
/// a request are not validated yet when admission runs).
fn prefix(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Splits a name that looks like a snapshot name into (source prefix, hash, index).
/// The source prefix is exact unless the source was shortened; callers prefer the
/// `source-name` annotation when they have the object.
pub fn parse_name(name: &str) -> Option<(&str, &str, u32)> {
    let (rest, index) = match name.rsplit_once('-') {
        Some((rest, idx)) if !idx.is_empty() && idx.len() <= 3 && idx.bytes().all(|b| b.is_ascii_digit()) => (rest, idx.parse().ok()?),
        _ => (name, 0),
    };
    let (source, hash) = rest.rsplit_once('-')?;
    if source.is_empty() || !is_hash(hash) {
        return None;
    }
    if index != 0 && !(1..=MAX_COLLISION_INDEX).contains(&index) {
        return None;
    }
    Some((source, hash, index))
}

/// Value of the `source` label: the name itself, or a shortened form with a hash.
pub fn source_label(source: &str) -> String {
    if source.len() <= MAX_LABEL {
        return source.to_owned();
    }
    let keep = prefix(source, MAX_LABEL - 1 - HASH_LEN).trim_end_matches(['-', '.', '_']);
    format!("{keep}-{}", short_hash(source))
}

/// The ConfigMap object a snapshot is created as.
pub fn object(namespace: &str, source: &str, snapshot_name: &str, content: &Content, adopted: &[String]) -> Value {
    let mut obj = skeleton(CONFIGMAP, namespace, source, snapshot_name, &content.hash(), adopted);
    if !content.data.is_empty() {
        obj["data"] = json!(content.data);
    }
    if !content.binary_data.is_empty() {
        obj["binaryData"] = json!(content.binary_data);
    }
    obj
}

/// Who wrote a snapshot's content, with what and when (docs/behaviour.md §5.2), as its source
/// recorded it for that content: `changed-by`, `changed-with` and `changed-at`, which the source's
/// own admission writes from the admitted request's `userInfo` and options whenever its content
/// changes (§6.1.1). Copied only when the source's head names the content copied; otherwise the
/// snapshot says why no author is known ([`Origin::unattributed`]) instead of a username: never a
/// guess.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Origin {
    /// The username of the write that produced the content.
    pub by: Option<String>,
    /// Its field manager, when the request carried one.
    pub with: Option<String>,
    /// When confighistory saw the content appear (RFC 3339, the API server's time).
    pub at: Option<String>,
    /// Why no author is recorded ([`BEFORE_CONFIGHISTORY`], [`WHILE_UNREACHABLE`]).
    pub unattributed: Option<String>,
}

/// Content written before confighistory tracked its source (before the install, or before any
/// workload named the source): no admission recorded who wrote it.
pub const BEFORE_CONFIGHISTORY: &str = "before confighistory";
/// Content written while the webhook did not see the write (its source's head names other content).
pub const WHILE_UNREACHABLE: &str = "written while confighistory was unreachable";

impl Origin {
    /// Why no author is known.
    pub fn unattributed(why: &str) -> Origin {
        Origin { unattributed: Some(why.to_owned()), ..Default::default() }
    }

    /// The origin of the content of source `obj` (as the API server stores it), whose head would
    /// be `hash` for that content: what the source recorded when its head names the content (or,
    /// for a Secret, when its admission dropped the stale head on this change and recorded
    /// `changed-at`, the head following after the answer); content under a head that names other
    /// content was written while confighistory did not see it; with neither, before it tracked the
    /// source.
    pub fn of_source(obj: &Value, hash: &str) -> Origin {
        let annotation = |k: &str| crate::model::meta::Meta::annotation(obj, k).map(str::to_owned);
        match annotation(names::HEAD) {
            Some(head) if head != hash => Origin::unattributed(WHILE_UNREACHABLE),
            // No change of the content seen since confighistory tracks the source (installing
            // sets no `changed-at`).
            _ if annotation(names::CHANGED_AT).is_none() => Origin::unattributed(BEFORE_CONFIGHISTORY),
            _ => Origin::of_snapshot(obj),
        }
    }

    /// The origin a snapshot `obj` records (to make it again as it was); the same annotations
    /// on a source.
    pub fn of_snapshot(obj: &Value) -> Origin {
        let annotation = |k: &str| crate::model::meta::Meta::annotation(obj, k).map(str::to_owned);
        Origin {
            by: annotation(names::CHANGED_BY),
            with: annotation(names::CHANGED_WITH),
            at: annotation(names::CHANGED_AT),
            unattributed: annotation(names::UNATTRIBUTED),
        }
    }

    /// The annotations a snapshot carries for it.
    pub fn annotations(&self) -> impl Iterator<Item = (&'static str, &str)> {
        [
            (names::CHANGED_BY, &self.by),
            (names::CHANGED_WITH, &self.with),
            (names::CHANGED_AT, &self.at),
            (names::UNATTRIBUTED, &self.unattributed),
        ]
        .into_iter()
        .filter_map(|(k, v)| Some((k, v.as_deref()?)))
    }

    /// Writes them onto snapshot object `obj`.
    pub fn annotate(&self, obj: &mut Value) {
        if let Some(map) = obj.pointer_mut("/metadata/annotations").and_then(Value::as_object_mut) {
            for (k, v) in self.annotations() {
                map.insert(k.to_owned(), Value::String(v.to_owned()));
            }
        }
    }
}

/// What every snapshot object is, whatever its kind (docs/behaviour.md §5): immutable, named and
/// labelled by its hash, its source named in full, and the revisions it was adopted for.
pub fn skeleton(kind: &str, namespace: &str, source: &str, snapshot_name: &str, hash: &str, adopted: &[String]) -> Value {
    let mut annotations = Map::new();
    annotations.insert(names::SOURCE_NAME.into(), Value::String(source.into()));
    if !adopted.is_empty() {
        annotations.insert(names::ADOPTED.into(), Value::String(adopted.join(",")));
    }
    json!({
        "apiVersion": "v1",
        "kind": kind,
        "metadata": {
            "name": snapshot_name,
            "namespace": namespace,
            "labels": {
                names::HASH_LABEL: hash,
                names::SOURCE_LABEL: source_label(source),
                names::MANAGED_BY: names::MANAGER,
            },
            "annotations": annotations,
        },
        "immutable": true,
    })
}

/// Why an object is not a valid snapshot (docs/behaviour.md §5), or `Ok` with its hash.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum Invalid {
    #[error("it is not immutable")]
    Mutable,
    #[error("it has no {0} label")]
    MissingLabel(&'static str),
    #[error("its content hashes to {actual}, not {claimed}")]
    WrongContent { claimed: String, actual: String },
    #[error("its name does not end in its hash {0}")]
    NameMismatch(String),
}

/// What a snapshot of any kind claims about itself (docs/behaviour.md §5): it is immutable and
/// labelled as a snapshot, and the hash its label claims, for the caller to check against its
/// content and [`names_its_hash`].
pub fn claimed_hash(obj: &Value) -> Result<&str, Invalid> {
    let label = |k: &'static str| obj.at("/metadata/labels").and_then(|l| l.get(k)).and_then(Value::as_str);
    if obj.get("immutable").and_then(Value::as_bool) != Some(true) {
        return Err(Invalid::Mutable);
    }
    let claimed = label(names::HASH_LABEL).ok_or(Invalid::MissingLabel(names::HASH_LABEL))?;
    label(names::SOURCE_LABEL).ok_or(Invalid::MissingLabel(names::SOURCE_LABEL))?;
    if label(names::MANAGED_BY) != Some(names::MANAGER) {
        return Err(Invalid::MissingLabel(names::MANAGED_BY));
    }
    Ok(claimed)
}

/// Whether a snapshot's name ends in the hash its label claims.
pub fn names_its_hash(obj: &Value, claimed: &str) -> bool {
    let name = obj.at("/metadata/name").and_then(Value::as_str).unwrap_or_default();
    parse_name(name).is_some_and(|(_, h, _)| h == claimed)
}

/// Checks validity from the object itself, not from who created it.
pub fn validate(obj: &Value) -> Result<String, Invalid> {
    let claimed = claimed_hash(obj)?;
    let actual = Content::from_object(obj).hash();
    if actual != claimed {
        return Err(Invalid::WrongContent { claimed: claimed.into(), actual });
    }
    if !names_its_hash(obj, claimed) {
        return Err(Invalid::NameMismatch(claimed.into()));
    }
    Ok(actual)
}

/// Keys removed and added between two contents, for the UPDATE warning.
pub fn key_changes(old: &RawContent, new: &ContentRef) -> (Vec<String>, Vec<String>) {
    keys_removed_added(&old.keys(), &new.keys())
}

/// Keys removed and added between two contents' key lists (as `keys()` gives them: binary keys
/// marked, so a data→binaryData move is both).
pub fn keys_removed_added(old_keys: &[String], new_keys: &[String]) -> (Vec<String>, Vec<String>) {
    let (old_set, new_set): (HashSet<&String>, HashSet<&String>) = (old_keys.iter().collect(), new_keys.iter().collect());
    let removed = old_keys.iter().filter(|k| !new_set.contains(k)).cloned().collect();
    let added = new_keys.iter().filter(|k| !old_set.contains(k)).cloned().collect();
    (removed, added)
}

/// The source a snapshot belongs to: its `source-name` annotation, else the source part of its
/// name (docs/behaviour.md §5).
pub fn snapshot_source<'a>(name: &'a str, obj: &'a impl Meta) -> Option<&'a str> {
    obj.annotation(names::SOURCE_NAME).or_else(|| parse_name(name).map(|(s, _, _)| s))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn content(pairs: &[(&str, &str)]) -> Content {
        Content { data: pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(), ..Default::default() }
    }

    #[test]
    fn content_debug_names_keys_and_sizes_never_values() {
        let c = Content { binary_data: content(&[("key.bin", "c2VjcmV0")]).data, ..content(&[("password", "hunter2")]) };
        let shown = format!("{c:?}");
        assert!(!shown.contains("hunter2") && !shown.contains("c2VjcmV0"), "{shown}");
        assert!(shown.contains("\"password\": 7 bytes"), "{shown}");
        assert_eq!(object("ns", "cfg", "cfg-x", &c, &[])["kind"], "ConfigMap");
    }

    #[test]
    fn hash_is_deterministic_and_dns_safe() {
        let a = content(&[("a", "1"), ("b", "2")]);
        let b = content(&[("b", "2"), ("a", "1")]);
        assert_eq!(a.hash(), b.hash());
        assert!(is_hash(&a.hash()));
        assert_ne!(a.hash(), content(&[("a", "1")]).hash());
    }

    #[test]
    fn framing_is_unambiguous() {
        // Moving bytes between key and value, or between data and binaryData, changes the hash.
        assert_ne!(content(&[("ab", "c")]).hash(), content(&[("a", "bc")]).hash());
        let bin = Content { binary_data: content(&[("a", "1")]).data, ..Default::default() };
        assert_ne!(bin.hash(), content(&[("a", "1")]).hash());
        assert_ne!(content(&[("a", "")]).hash(), Content::default().hash());
    }

    #[test]
    fn names_parse_back() {
        let h = content(&[("k", "v")]).hash();
        let n = name("pricing-config", &h, 0);
        assert_eq!(parse_name(&n), Some(("pricing-config", h.as_str(), 0)));
        let n2 = name("pricing-config", &h, 2);
        assert_eq!(parse_name(&n2), Some(("pricing-config", h.as_str(), 2)));
        assert_eq!(parse_name("pricing-config"), None);
        assert_eq!(parse_name("app-config-5g7h8k9m2t"), None, "kustomize's 10-char suffix is not ours");
    }

    #[test]
    fn long_names_stay_valid() {
        let long = "a".repeat(253);
        let h = Content::default().hash();
        for i in [0, 1, 99] {
            assert!(name(&long, &h, i).len() <= 253);
        }
        let wide = "é".repeat(200);
        assert!(name(&wide, &h, 0).len() <= 253);
        assert!(source_label(&wide).len() <= 63);
        let label = source_label(&long);
        assert!(label.len() <= 63, "{label}");
        assert_ne!(source_label(&"a".repeat(100)), source_label(&"a".repeat(101)));
        // At the label limit: 63 characters are the label, 64 are shortened with a hash.
        assert_eq!(source_label(&"a".repeat(63)), "a".repeat(63));
        let over = source_label(&"a".repeat(64));
        assert!(over.len() <= 63 && over.ends_with(&short_hash(&"a".repeat(64))), "{over}");
        // At the name limit: a source of MAX_SOURCE_PART characters is kept whole and parses back,
        // one more is shortened (its snapshot's source-name annotation says the rest).
        let at = "a".repeat(MAX_SOURCE_PART);
        assert_eq!(parse_name(&name(&at, &h, 0)), Some((at.as_str(), h.as_str(), 0)));
        assert_eq!(parse_name(&name(&long, &h, 100)), Some((at.as_str(), h.as_str(), 100)));
        assert_eq!(name(&long, &h, 100).len(), 253, "the longest name is a valid one");
    }

    #[test]
    fn validity_is_read_from_the_object() {
        let c = content(&[("k", "v")]);
        let n = name("src", &c.hash(), 0);
        let obj = object("ns", "src", &n, &c, &[]);
        assert_eq!(validate(&obj), Ok(c.hash()));
        let mut forged = obj.clone();
        forged["data"]["k"] = json!("other");
        assert!(matches!(validate(&forged), Err(Invalid::WrongContent { .. })));
        let mut mutable = obj.clone();
        mutable["immutable"] = json!(false);
        assert_eq!(validate(&mutable), Err(Invalid::Mutable));
        let mut unlabelled = obj;
        unlabelled["metadata"]["labels"].as_object_mut().unwrap().remove(names::HASH_LABEL);
        assert_eq!(validate(&unlabelled), Err(Invalid::MissingLabel(names::HASH_LABEL)));
    }

    #[test]
    fn a_content_hashes_the_same_read_in_place_or_copied() {
        // Escapes, characters outside ASCII (one outside the BMP, as a surrogate pair), a control
        // character, keys out of order in the text, binaryData: the name of this content's snapshot
        // (docs/behaviour.md §5.1), computed independently of this code (Python's hashlib over the framing).
        let text = r#"{"data": {"z-last": "plain", "config.yaml": "a: \"quoted\"\n\tb: back\\slash \u00e9t\u00e9 \ud83d\ude00 \u0001",
            "\u00e9cl\u00e9": "", "A": "x"}, "binaryData": {"key.bin": "AAEC/w==", "a.bin": "aGk="}}"#;
        let obj: Value = serde_json::from_str(text).unwrap();
        let (borrowed, copied) = (ContentRef::from_object(&obj), Content::from_object(&obj));
        assert_eq!(copied.hash(), "qbqepqeyee6q");
        assert_eq!(borrowed.hash(), "qbqepqeyee6q");
        assert_eq!(copied.borrowed(), borrowed);
        assert_eq!(borrowed.owned(), copied);
        assert_eq!(borrowed.keys(), copied.keys());
        assert_eq!(borrowed.data_value("\u{e9}cl\u{e9}"), Some(""));
        assert_eq!(borrowed.data_value("nope"), None);
        let shown = format!("{borrowed:?}");
        assert!(!shown.contains("quoted") && !shown.contains("aGk="), "{shown}");
        assert!(shown.contains("\"key.bin\": 8 bytes"), "{shown}");
        // Keys given out of order (a map that keeps insertion order) frame in sorted order.
        let mut unsorted = borrowed.clone();
        unsorted.data.reverse();
        assert_ne!(unsorted, borrowed);
        let obj2 = json!({"data": {"b": "2", "a": "1"}});
        assert_eq!(ContentRef::from_object(&obj2).hash(), content(&[("a", "1"), ("b", "2")]).hash());
        // A value that is not a string reads as empty, as it always did.
        let odd = json!({"data": {"n": 1, "s": "x"}});
        assert_eq!(ContentRef::from_object(&odd).hash(), content(&[("n", ""), ("s", "x")]).hash());
    }

    #[test]
    fn key_changes_show_renames() {
        let old = object("ns", "cfg", "cfg-x", &content(&[("discount_rules_path", "x"), ("a", "1")]), &[]);
        let (removed, added) =
            key_changes(&RawContent::from_object(&old), &content(&[("rules.discount_path", "x"), ("a", "2")]).borrowed());
        assert_eq!(removed, vec!["discount_rules_path"]);
        assert_eq!(added, vec!["rules.discount_path"]);
    }
}
