//! Rules about sources and what workloads record about them (docs/behaviour.md §2, §6.1, §7, §9),
//! each written once over [`Meta`]: admission and the plugin call them on raw objects, the
//! controller's planners on cache records.

use std::collections::BTreeMap;

use super::meta::Meta;
use super::names;
use super::policy::Selector;
use super::snapshot;

/// The kind of sources: ConfigMaps, in the core group.
pub const CONFIGMAP: &str = "ConfigMap";
/// The kind of sources where the admin turns Secrets on (docs/behaviour.md §4a), in the core group.
pub const SECRET: &str = "Secret";

/// The kinds of source a snapshot copies: ConfigMaps, and Secrets where the admin turns them on
/// (docs/behaviour.md §4a; which kinds a server acts on: [`SourceKinds`], chosen by `Policy::source_kinds`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SourceKind {
    #[default]
    ConfigMap,
    Secret,
}

impl SourceKind {
    /// Every source kind this version knows: what annotation entries may name. Which of them a
    /// server acts on is the admin's choice (`Policy::source_kinds`).
    pub const ALL: [SourceKind; 2] = [SourceKind::ConfigMap, SourceKind::Secret];

    pub fn as_str(self) -> &'static str {
        match self {
            SourceKind::ConfigMap => CONFIGMAP,
            SourceKind::Secret => SECRET,
        }
    }

    /// The prefix of this kind's entries in workload annotations (`secret/db`), `None` for a
    /// bare name: ConfigMaps, the one kind entries named before there were others
    /// ([`names::parse_source`]).
    pub fn entry_prefix(self) -> Option<&'static str> {
        match self {
            SourceKind::ConfigMap => None,
            SourceKind::Secret => Some("secret"),
        }
    }
}

/// A set of source kinds: which kinds a decision, watch or sweep acts on. ConfigMaps always;
/// Secrets only where the admin turned them on (docs/behaviour.md §4a: for all namespaces or a
/// selector of them, so the set is chosen per namespace by whoever wires it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SourceKinds {
    secrets: bool,
}

impl SourceKinds {
    /// ConfigMaps only: Secrets off, the default.
    pub const CONFIGMAPS: SourceKinds = SourceKinds { secrets: false };
    /// ConfigMaps and Secrets.
    pub const WITH_SECRETS: SourceKinds = SourceKinds { secrets: true };

    /// ConfigMaps, and Secrets when `secrets`.
    pub fn new(secrets: bool) -> SourceKinds {
        SourceKinds { secrets }
    }

    pub fn contains(self, kind: SourceKind) -> bool {
        match kind {
            SourceKind::ConfigMap => true,
            SourceKind::Secret => self.secrets,
        }
    }

    /// Its kinds, in [`SourceKind::ALL`]'s order.
    pub fn iter(self) -> impl Iterator<Item = SourceKind> {
        SourceKind::ALL.into_iter().filter(move |k| self.contains(*k))
    }

    /// The source kind of (group, kind) when it is one of these: identified by both, never by
    /// the kind string alone.
    pub fn of(self, group: &str, kind: &str) -> Option<SourceKind> {
        self.iter().find(|k| k.group() == group && k.as_str() == kind)
    }
}

/// Which source: its kind and its name (namespaces are the caller's). The key of every map,
/// cache record, port call, fresh read, effect and annotation entry about a source, so that a
/// ConfigMap and a Secret of the same name never meet. Ordered by kind, then name: the
/// order annotations list their entries in. Its `Display` is its annotation entry
/// ([`names::source_entry`]): a ConfigMap's bare name, as every message has always named it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SourceId {
    pub kind: SourceKind,
    pub name: String,
}

impl SourceId {
    pub fn new(kind: SourceKind, name: impl Into<String>) -> SourceId {
        SourceId { kind, name: name.into() }
    }

    pub fn configmap(name: impl Into<String>) -> SourceId {
        SourceId::new(SourceKind::ConfigMap, name)
    }

    /// The same kind, another name: a snapshot of a source is an object of the source's kind.
    pub fn with_name(&self, name: impl Into<String>) -> SourceId {
        SourceId::new(self.kind, name)
    }

    /// Its kind's name, for messages that name the object (`read ConfigMap shop/cfg`).
    pub fn kind_str(&self) -> &'static str {
        self.kind.as_str()
    }
}

impl std::fmt::Display for SourceId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        names::write_source_entry(self, f)
    }
}

/// As its annotation entry: a map keyed by source serializes as the JSON object annotations hold.
impl serde::Serialize for SourceId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.kind.entry_prefix() {
            None => s.serialize_str(&self.name),
            Some(_) => s.collect_str(self),
        }
    }
}

/// The root CA bundle Kubernetes publishes into every namespace: never a versioned source.
pub fn is_root_ca(id: &SourceId) -> bool {
    id.kind == SourceKind::ConfigMap && id.name == names::ROOT_CA
}

impl SourceKind {
    /// The source kind of (group, kind) among every kind this version knows, acted on or not:
    /// how a review is parsed (a source's annotations are kept whole). Which kinds a server acts
    /// on is its policy's choice (`Policy::acted_on`, `Policy::source_kinds`, docs/behaviour.md §4a).
    pub fn known(group: &str, kind: &str) -> Option<SourceKind> {
        SourceKinds::WITH_SECRETS.of(group, kind)
    }

    /// The API group (core: empty).
    pub fn group(self) -> &'static str {
        match self {
            SourceKind::ConfigMap | SourceKind::Secret => "",
        }
    }

    /// The API resource (plural) its objects are served as.
    pub fn resource(self) -> &'static str {
        match self {
            SourceKind::ConfigMap => "configmaps",
            SourceKind::Secret => "secrets",
        }
    }
}

/// A mutable ConfigMap that is not a snapshot (nor the root CA bundle Kubernetes publishes),
/// versioned or not: one whose changes, including leaving versioning (docs/behaviour.md §7), are tracked.
pub fn is_tracked(name: &str, obj: &impl Meta) -> bool {
    name != names::ROOT_CA && !obj.immutable() && obj.label(names::HASH_LABEL).is_none()
}

/// Whether a ConfigMap is versioned: not opted out by its `versioned: "false"` annotation nor by
/// the admin's selector of excluded sources (docs/behaviour.md §3).
pub fn is_versioned(obj: &impl Meta, excluded_sources: &Selector) -> bool {
    obj.annotation(names::VERSIONED) != Some("false") && !excluded_sources.selects(obj)
}

/// Whether the admin's selector of excluded sources is what takes a ConfigMap out of versioning
/// (not its own `versioned: "false"` annotation).
pub fn excluded_by_selector(obj: &impl Meta, excluded_sources: &Selector) -> bool {
    obj.annotation(names::VERSIONED) != Some("false") && excluded_sources.selects(obj)
}

/// Whether a source was versioned when confighistory last recorded it. The selector lives in the
/// server's flags, so a stored object does not say which selector it was written under: a
/// source the selector excludes counts as versioned until its exclusion is recorded
/// ([`names::EXCLUDED`]), once it ever had a head. Comparing this with [`is_versioned`] of the
/// new object tells a change of versioning (docs/behaviour.md §7), whichever way it came.
pub fn was_versioned(obj: &impl Meta, excluded_sources: &Selector) -> bool {
    let recorded_out = obj.annotation(names::EXCLUDED) == Some("true");
    if excluded_by_selector(obj, excluded_sources) {
        obj.annotation(names::HEAD).is_some() && !recorded_out
    } else {
        is_versioned(obj, excluded_sources) && !recorded_out
    }
}

/// A tracked ConfigMap that is versioned: a source whose changes are pinned and propagated.
pub fn is_versioned_source(name: &str, obj: &impl Meta, excluded_sources: &Selector) -> bool {
    is_tracked(name, obj) && is_versioned(obj, excluded_sources)
}

/// [`is_tracked`] for a source of either kind, from its object or its cache record: a Secret is
/// tracked when it is mutable, no snapshot and no never-source (docs/behaviour.md §4a). A cache
/// record holds no `type`; the watch lists no Secret of a never-source type
/// ([`super::secret::RECORD_TYPE`]).
pub fn is_tracked_source(id: &SourceId, obj: &impl Meta, excluded_sources: &Selector) -> bool {
    match id.kind {
        SourceKind::ConfigMap => is_tracked(&id.name, obj),
        SourceKind::Secret => super::secret::is_tracked(obj, super::secret::RECORD_TYPE, excluded_sources),
    }
}

/// [`is_versioned_source`] for a source of either kind (a Secret: [`super::secret::is_versioned`]),
/// from its object or its cache record, as [`is_tracked_source`].
pub fn is_versioned_source_of(id: &SourceId, obj: &impl Meta, excluded_sources: &Selector) -> bool {
    match id.kind {
        SourceKind::ConfigMap => is_versioned_source(&id.name, obj, excluded_sources),
        SourceKind::Secret => super::secret::is_versioned(obj, super::secret::RECORD_TYPE, excluded_sources),
    }
}

/// The pending change of a source whose current content hashes to `head`: when confighistory saw
/// it change (`changed-at`) and propagation has not delivered that head yet. A source with
/// `rollout: manual` never has one (docs/behaviour.md §7).
pub fn pending_change<'a>(obj: &'a impl Meta, head: &str) -> Option<&'a str> {
    if obj.annotation(names::ROLLOUT) == Some("manual") || obj.annotation(names::PROPAGATED) == Some(head) {
        return None;
    }
    obj.annotation(names::CHANGED_AT)
}

/// The source a snapshot belongs to: its `source-name` annotation, else the source part of its
/// name (docs/behaviour.md §5).
pub fn snapshot_source<'a>(name: &'a str, obj: &'a impl Meta) -> Option<&'a str> {
    obj.annotation(names::SOURCE_NAME).or_else(|| snapshot::parse_name(name).map(|(s, _, _)| s))
}

/// Held sources, each with the head its hold was taken at (docs/behaviour.md §2); `None` for a hold recorded
/// without its head (held against every change, as holds were before heads were recorded).
pub type Holds = BTreeMap<SourceId, Option<String>>;

/// A workload's holds, from its `held` and `held-heads` annotations (entries of a kind this
/// version does not know are left out: [`names::parse_source`]).
pub fn holds(obj: &impl Meta) -> Holds {
    let heads: BTreeMap<String, String> = obj.annotation(names::HELD_HEADS).and_then(|h| serde_json::from_str(h).ok()).unwrap_or_default();
    list(obj.annotation(names::HELD)).filter_map(|s| Some((names::parse_source(s)?, heads.get(s).cloned()))).collect()
}

/// A workload's pins, from its `pins` annotation: source → hash (a malformed value pins nothing).
pub fn pins(obj: &impl Meta) -> BTreeMap<SourceId, String> {
    names::parse_source_map(obj.annotation(names::PINS).unwrap_or_default())
}

/// Whether a hold taken at head `held_at` stands against the source's head `head`: a hold stands
/// against the changes made before it, not against those made after it (docs/behaviour.md §2, §7).
pub fn hold_stands(held_at: Option<&str>, head: &str) -> bool {
    held_at.is_none_or(|h| h == head)
}

/// The template hashes of a snapshot's adoption record (docs/behaviour.md §9).
pub fn adopted(obj: &impl Meta) -> impl Iterator<Item = &str> {
    list(obj.annotation(names::ADOPTED))
}

/// The items of a comma-separated annotation value.
fn list(value: Option<&str>) -> impl Iterator<Item = &str> {
    value.unwrap_or_default().split(',').map(str::trim).filter(|s| !s.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_a_source_kind_of_their_own_and_off_unless_chosen() {
        let secret = SourceKind::Secret;
        assert_eq!((secret.as_str(), secret.group(), secret.resource(), secret.entry_prefix()), ("Secret", "", "secrets", Some("secret")));
        assert_eq!(SourceKinds::default(), SourceKinds::CONFIGMAPS);
        assert_eq!(SourceKinds::CONFIGMAPS.iter().collect::<Vec<_>>(), [SourceKind::ConfigMap]);
        assert_eq!(SourceKinds::WITH_SECRETS.iter().collect::<Vec<_>>(), SourceKind::ALL);
        assert_eq!(SourceKinds::new(true), SourceKinds::WITH_SECRETS);
        assert_eq!(SourceKinds::WITH_SECRETS.of("", "Secret"), Some(secret));
        assert_eq!(SourceKinds::WITH_SECRETS.of("example.io", "Secret"), None, "by group and kind");
        assert_eq!(SourceKinds::CONFIGMAPS.of("", "Secret"), None);
        assert_eq!(SourceKind::known("", "Secret"), Some(secret));
        assert_eq!(SourceKind::known("", "ConfigMap"), Some(SourceKind::ConfigMap));
        // The root CA bundle is a ConfigMap's name; a Secret of that name is not it.
        assert!(is_root_ca(&SourceId::configmap(names::ROOT_CA)) && !is_root_ca(&SourceId::new(secret, names::ROOT_CA)));
    }
}
