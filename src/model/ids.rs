//! Which source: its kind and name ([`SourceId`]), the kinds of source ([`SourceKind`],
//! [`SourceKinds`]) and how an annotation entry names one ([`parse_source`]). The bottom rung of
//! model's files above the leaves (docs/architecture.md "model/ ladder"): it uses none of them.

use super::sourcekinds::{self, SourceKindDef};

/// The kind of sources: ConfigMaps, in the core group.
pub const CONFIGMAP: &str = sourcekinds::CONFIGMAP.kind;
/// The kind of sources where the admin turns Secrets on (docs/behaviour.md §4a), in the core group.
pub const SECRET: &str = sourcekinds::SECRET.kind;

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

    /// The kind's entry in the table of source kinds: everything that tells it from the others.
    /// The one place a kind's variant is matched to its data.
    pub const fn def(self) -> &'static SourceKindDef {
        match self {
            SourceKind::ConfigMap => &sourcekinds::CONFIGMAP,
            SourceKind::Secret => &sourcekinds::SECRET,
        }
    }

    pub fn as_str(self) -> &'static str {
        self.def().kind
    }

    /// The prefix of this kind's entries in workload annotations (`secret/db`), `None` for a
    /// bare name: ConfigMaps, the one kind entries named before there were others
    /// ([`parse_source`]).
    pub fn entry_prefix(self) -> Option<&'static str> {
        self.def().entry_prefix
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

    /// Whether it holds `kind`: every kind the admin need not turn on, and the others when on.
    pub fn contains(self, kind: SourceKind) -> bool {
        !kind.def().opt_in || self.secrets
    }

    /// Whether it holds a kind the admin turns on (Secrets).
    pub fn has_opt_in(self) -> bool {
        self.secrets
    }

    /// These kinds and `kind`.
    pub fn with(self, kind: SourceKind) -> SourceKinds {
        SourceKinds { secrets: self.secrets || kind.def().opt_in }
    }

    /// The kinds of either.
    pub fn union(self, other: SourceKinds) -> SourceKinds {
        SourceKinds { secrets: self.secrets || other.secrets }
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
/// ([`write_source_entry`]): a ConfigMap's bare name, as every message has always named it.
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
        write_source_entry(self, f)
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

impl SourceKind {
    /// The source kind of (group, kind) among every kind this version knows, acted on or not:
    /// how a review is parsed (a source's annotations are kept whole). Which kinds a server acts
    /// on is its policy's choice (`Policy::acted_on`, `Policy::source_kinds`, docs/behaviour.md §4a).
    pub fn known(group: &str, kind: &str) -> Option<SourceKind> {
        SourceKinds::WITH_SECRETS.of(group, kind)
    }

    /// The API group (core: empty).
    pub fn group(self) -> &'static str {
        self.def().group
    }

    /// The API resource (plural) its objects are served as.
    pub fn resource(self) -> &'static str {
        self.def().resource
    }
}

/// The separator of a kind prefix from a name in an annotation entry naming a source
/// (`secret/db`): object names cannot contain it, so no bare name is ever read as prefixed.
pub const KIND_SEPARATOR: char = '/';

/// The source an annotation entry names (pins, holds, held heads, the propagation trigger): a
/// bare name is a ConfigMap, as every entry was before there were other source kinds; another
/// kind is written `prefix/name` ([`SourceKind::entry_prefix`]), so adding one migrates nothing.
///
/// An entry whose prefix this version does not know (`widget/db`; `secret/db` before there were
/// Secrets) is `None`, and its caller leaves the entry out rather than failing the whole annotation: such an
/// entry can only have been written by a newer version (a rollback, or two versions side by side
/// during an upgrade) or by hand, it cannot name a ConfigMap (names have no `/`), and refusing it
/// would lose the ConfigMap entries beside it, or deny the workload's every update.
pub fn parse_source(entry: &str) -> Option<SourceId> {
    let (prefix, name) = match entry.split_once(KIND_SEPARATOR) {
        None => (None, entry),
        Some((prefix, name)) => (Some(prefix), name),
    };
    let kind = SourceKind::ALL.into_iter().find(|k| k.entry_prefix() == prefix)?;
    Some(SourceId::new(kind, name))
}

/// The annotation entry naming `id`, as [`parse_source`] reads it (also `SourceId`'s `Display`).
pub fn write_source_entry(id: &SourceId, f: &mut impl std::fmt::Write) -> std::fmt::Result {
    if let Some(prefix) = id.kind.entry_prefix() {
        f.write_str(prefix)?;
        f.write_char(KIND_SEPARATOR)?;
    }
    f.write_str(&id.name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::sourcekinds::{Content, Naming, Never};

    #[test]
    fn every_source_kinds_entry_is_consistent() {
        for kind in SourceKind::ALL {
            let def = kind.def();
            assert_eq!(
                (kind.as_str(), kind.group(), kind.resource(), kind.entry_prefix()),
                (def.kind, def.group, def.resource, def.entry_prefix)
            );
            assert_eq!(SourceKind::known(def.group, def.kind), Some(kind), "{}: found by (group, kind)", def.kind);
            assert_eq!(def.resource, format!("{}s", def.kind.to_ascii_lowercase()), "{}: its plural resource", def.kind);
            // Its entries round-trip through the annotation form, whatever the name.
            for name in ["db", "a.b-c", "secret", "configmap"] {
                let id = SourceId::new(kind, name);
                let entry = id.to_string();
                assert_eq!(parse_source(&entry), Some(id.clone()), "{entry}");
                assert_eq!(serde_json::to_value(&id).unwrap(), serde_json::Value::String(entry.clone()));
                assert_eq!(entry.contains(KIND_SEPARATOR), def.entry_prefix.is_some(), "{entry}");
            }
            // The plugin takes the kind's own name, its resource and its entry prefix.
            let lower = def.kind.to_ascii_lowercase();
            assert!(def.typed.contains(&lower.as_str()) && def.typed.contains(&def.resource), "{:?}", def.typed);
            assert!(def.entry_prefix.is_none_or(|p| def.typed.contains(&p)), "{:?}", def.typed);
            assert!(def.typed.iter().all(|t| t.chars().all(|c| c.is_ascii_lowercase())), "{:?}", def.typed);
            // Acted on by default unless the admin must turn it on; always when every kind is.
            assert_eq!(SourceKinds::CONFIGMAPS.contains(kind), !def.opt_in, "{}", def.kind);
            assert!(SourceKinds::WITH_SECRETS.contains(kind) && SourceKinds::CONFIGMAPS.with(kind).contains(kind));
            // Confidential values are held as bytes, named under a key, and never a plain source's rules.
            let secret_like = (Content::TypedBytes, Naming::KeyedMac, Never::SecretRules);
            assert_eq!(def.confidential, (def.content, def.naming, def.never) == secret_like, "{}", def.kind);
            assert_ne!(def.refs.projected, "", "{}", def.kind);
        }
        // One kind is named by a bare entry (ConfigMaps, as before there were others); prefixes,
        // kind names, typed names and template fields never overlap between kinds.
        let bare: Vec<_> = SourceKind::ALL.into_iter().filter(|k| k.entry_prefix().is_none()).collect();
        assert_eq!(bare, [SourceKind::ConfigMap]);
        assert_eq!(SourceKind::default(), SourceKind::ConfigMap);
        for (i, a) in SourceKind::ALL.into_iter().enumerate() {
            for b in SourceKind::ALL.into_iter().skip(i + 1) {
                let (a, b) = (a.def(), b.def());
                assert!(a.kind != b.kind && a.resource != b.resource && a.entry_prefix != b.entry_prefix, "{} {}", a.kind, b.kind);
                assert!(a.typed.iter().all(|t| !b.typed.contains(t)), "{} {}", a.kind, b.kind);
                let fields =
                    |d: &crate::model::sourcekinds::SourceKindDef| [d.refs.volume.0, d.refs.projected, d.refs.key_ref, d.refs.env_from];
                assert!(fields(a).iter().all(|f| !fields(b).contains(f)), "{} {}", a.kind, b.kind);
            }
        }
    }

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
    }
}
