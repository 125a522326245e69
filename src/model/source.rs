//! Rules about sources and what workloads record about them (docs/behaviour.md §2, §6.1, §7, §9),
//! each written once over [`Meta`]: admission and the plugin call them on raw objects, the
//! controller's planners on cache records.

use std::collections::BTreeMap;

use super::ids::{self, SourceId, SourceKind};
use super::meta::Meta;
use super::names;
use super::selector::Selector;
use super::sourcekinds::Never;

/// The root CA bundle Kubernetes publishes into every namespace: never a versioned source.
pub fn is_root_ca(id: &SourceId) -> bool {
    id.kind.def().never == Never::RootCaBundle && id.name == names::ROOT_CA
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
    match id.kind.def().never {
        Never::RootCaBundle => is_tracked(&id.name, obj),
        Never::SecretRules => super::secret::is_tracked(obj, super::secret::RECORD_TYPE, excluded_sources),
    }
}

/// [`is_versioned_source`] for a source of either kind (a Secret: [`super::secret::is_versioned`]),
/// from its object or its cache record, as [`is_tracked_source`].
pub fn is_versioned_source_of(id: &SourceId, obj: &impl Meta, excluded_sources: &Selector) -> bool {
    match id.kind.def().never {
        Never::RootCaBundle => is_versioned_source(&id.name, obj, excluded_sources),
        Never::SecretRules => super::secret::is_versioned(obj, super::secret::RECORD_TYPE, excluded_sources),
    }
}

/// Whether a source of `kind`, as read (its object, not a cache record), is versioned: a
/// ConfigMap by its annotation and the admin's selector ([`is_versioned`]), a Secret also only
/// when it is mutable and no never-source ([`super::secret::is_versioned`], docs/behaviour.md §4a).
pub fn is_versioned_object(kind: SourceKind, obj: &serde_json::Value, excluded_sources: &Selector) -> bool {
    match kind.def().never {
        Never::RootCaBundle => is_versioned(obj, excluded_sources),
        Never::SecretRules => super::secret::is_versioned(obj, super::secret::secret_type(obj), excluded_sources),
    }
}

/// Whether, and why, a source of `kind`, as read, is never a source by its kind's own rules (a
/// Secret's: [`super::secret::never_source`]; the root CA bundle is told by its name, [`is_root_ca`]).
pub fn never_source_object(kind: SourceKind, obj: &serde_json::Value, excluded_sources: &Selector) -> Option<super::secret::NeverSource> {
    match kind.def().never {
        Never::RootCaBundle => None,
        Never::SecretRules => super::secret::never_source(obj, super::secret::secret_type(obj), excluded_sources),
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

/// Held sources, each with the head its hold was taken at (docs/behaviour.md §2); `None` for a hold recorded
/// without its head (held against every change, as holds were before heads were recorded).
pub type Holds = BTreeMap<SourceId, Option<String>>;

/// A workload's holds, from its `held` and `held-heads` annotations (entries of a kind this
/// version does not know are left out: [`ids::parse_source`]).
pub fn holds(obj: &impl Meta) -> Holds {
    let heads: BTreeMap<String, String> = obj.annotation(names::HELD_HEADS).and_then(|h| serde_json::from_str(h).ok()).unwrap_or_default();
    list(obj.annotation(names::HELD)).filter_map(|s| Some((ids::parse_source(s)?, heads.get(s).cloned()))).collect()
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
    fn the_root_ca_bundle_is_a_configmap_name() {
        // The root CA bundle is a ConfigMap's name; a Secret of that name is not it.
        assert!(is_root_ca(&SourceId::configmap(names::ROOT_CA)) && !is_root_ca(&SourceId::new(SourceKind::Secret, names::ROOT_CA)));
    }
}
