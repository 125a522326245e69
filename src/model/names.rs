//! Every label and annotation confighistory reads or writes, in one place, so a reader can find
//! what a key means and which rule owns it, and the annotation values keyed by source (pins, held
//! heads, the trigger; how one entry names a source: `model::ids::parse_source`).

use std::collections::BTreeMap;

use super::ids::{self, SourceId};

/// The prefix of every annotation and label confighistory reads or writes: the caches, and the
/// parse of a workload review, keep only annotations under it.
pub const PREFIX: &str = "confighistory.io/";
/// ConfigMap annotation holding the effective configuration a server publishes (model::published):
/// an annotation, not `data`, because confighistory's own ServiceAccount may change only
/// `confighistory.io/` annotations of ConfigMaps (the chart's admission policy guard), never their data.
pub const EFFECTIVE_CONFIG: &str = "confighistory.io/effective-config";
/// Namespace label choosing the mode (rewrite, enforce, audit, off).
pub const MODE_LABEL: &str = "confighistory.io/mode";
/// Source annotation: `"false"` opts a ConfigMap out of versioning.
pub const VERSIONED: &str = "confighistory.io/versioned";
/// Workload annotation: `"true"` leaves it alone in rewrite and audit mode.
pub const IGNORE: &str = "confighistory.io/ignore";
/// Source annotation: `manual` means config-only edits are never propagated.
pub const ROLLOUT: &str = "confighistory.io/rollout";
/// Source or namespace annotation: settle window in seconds (or `30s`, `2m`).
pub const SETTLE: &str = "confighistory.io/settle";

/// Source annotation: hash of the current content.
pub const HEAD: &str = "confighistory.io/head";
/// Source annotation: when confighistory saw the content change (RFC 3339).
pub const CHANGED_AT: &str = "confighistory.io/changed-at";
/// Source and snapshot annotation: who wrote the content (the admitted request's
/// `userInfo.username`, never the request body's word), set beside `changed-at` whenever the
/// content changes; left out when the admin turns recording authors off (docs/behaviour.md §6.1.1).
pub const CHANGED_BY: &str = "confighistory.io/changed-by";
/// Source and snapshot annotation: the field manager of the write that changed the content (the
/// request's `options.fieldManager`), when it carries one.
pub const CHANGED_WITH: &str = "confighistory.io/changed-with";
/// Snapshot annotation: why no author is recorded for its content (`before confighistory`,
/// `written while confighistory was unreachable`): said instead of a username, never guessed.
pub const UNATTRIBUTED: &str = "confighistory.io/unattributed";
/// Source annotation: the head whose change has been propagated (written by the controller).
pub const PROPAGATED: &str = "confighistory.io/propagated";

/// Source annotation, written by the webhook: `"true"` once it recorded that the admin's selector
/// of excluded sources took the source out of versioning (a change of its own, docs/behaviour.md §7); dropped
/// when the selector lets it go again (another change). Without it, a selector changed by a
/// restart would go unseen: no write of the source says so.
pub const EXCLUDED: &str = "confighistory.io/excluded-by-selector";

/// Snapshot label: content hash.
pub const HASH_LABEL: &str = "confighistory.io/hash";
/// Snapshot label: source name (shortened with a hash when over 63 characters).
pub const SOURCE_LABEL: &str = "confighistory.io/source";
/// Secret snapshot label: the id of the cluster key whose namespace key MACs its content
/// (docs/behaviour.md §4a): validity looks the key up by it, and a rotation can tell by it which
/// old keys snapshots still need.
pub const KEY_ID_LABEL: &str = "confighistory.io/key-id";
/// Source Secret annotation: the id of the cluster key its head and snapshots are MAC'd under
/// (docs/behaviour.md §4a), kept while its content stays the same: a key rotation renames no
/// snapshot and moves no workload; the source's next content change takes the current key.
pub const KEY_ID: &str = "confighistory.io/key-id";
/// Snapshot annotation: the full source name.
pub const SOURCE_NAME: &str = "confighistory.io/source-name";
/// Snapshot annotation: pod-template hashes that ran with this content before being pinned.
pub const ADOPTED: &str = "confighistory.io/adopted-templates";
/// Snapshot annotation: last time a workload was seen using it (GC grace period).
pub const LAST_USED: &str = "confighistory.io/last-used";
/// Source annotation: keep this many newest snapshots instead of the default.
pub const KEEP: &str = "confighistory.io/keep";
/// The `reason` of snapshot protection's refusal to delete a snapshot in use (docs/behaviour.md §6.4), relayed
/// by the API server: how a sweep tells "used again since I listed it" from any other refusal.
pub const REASON_SNAPSHOT_IN_USE: &str = "SnapshotInUse";
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
pub const MANAGER: &str = "confighistory";

/// Workload annotation: source → pinned hash, as JSON.
pub const PINS: &str = "confighistory.io/pins";
/// Workload annotation: comma-separated sources whose pin was chosen on purpose.
pub const HELD: &str = "confighistory.io/held";
/// Workload annotation: held source → the head when the hold was taken, as JSON. A later change
/// of the source moves the held pin (docs/behaviour.md §2).
pub const HELD_HEADS: &str = "confighistory.io/held-heads";
/// Workload annotation: the `kubernetes.io/change-cause` confighistory last wrote on it, so a
/// later revision can tell its own from a user's (which it never overwrites, docs/behaviour.md §7.9).
pub const CHANGE_CAUSE_OWN: &str = "confighistory.io/change-cause";
/// Kubernetes' annotation `kubectl rollout history` shows for each revision.
pub const CHANGE_CAUSE: &str = "kubernetes.io/change-cause";
/// Workload annotation: propagation trigger set by the controller (`source=hash,...`).
pub const PROPAGATE: &str = "confighistory.io/propagate";

/// Label the Deployment controller adds to ReplicaSet templates; ignored when comparing revisions.
pub const POD_TEMPLATE_HASH: &str = "pod-template-hash";
/// cert-manager's annotation on the Secrets it issues: a Secret a certificate issuer manages is
/// never a source (docs/behaviour.md §4a).
pub const CERTIFICATE_NAME: &str = "cert-manager.io/certificate-name";
/// Kubernetes publishes this ConfigMap into every namespace; never versioned.
pub const ROOT_CA: &str = super::sourcekinds::ROOT_CA;

/// Namespaces confighistory never acts in, whatever the webhook configuration says.
pub const SYSTEM_NAMESPACES: [&str; 3] = ["kube-system", "kube-public", "kube-node-lease"];

/// A JSON object of source entries → strings (`pins`, `held-heads`); a malformed value is empty,
/// an entry of an unknown kind left out ([`parse_source`]).
pub fn parse_source_map(value: &str) -> BTreeMap<SourceId, String> {
    let entries: BTreeMap<String, String> = serde_json::from_str(value).unwrap_or_default();
    entries.into_iter().filter_map(|(k, v)| Some((ids::parse_source(&k)?, v))).collect()
}

/// The items of [`PROPAGATE`] (`source=hash,...`): each source named, with the hash the
/// controller asks for (empty when an item names only the source).
pub fn parse_trigger(value: &str) -> BTreeMap<SourceId, String> {
    value
        .split(',')
        .map(|p| p.split_once('=').unwrap_or((p, "")))
        .map(|(s, h)| (s.trim(), h.trim()))
        .filter(|(s, _)| !s.is_empty())
        .filter_map(|(s, h)| Some((ids::parse_source(s)?, h.to_owned())))
        .collect()
}

/// The value of [`PROPAGATE`] asking for `items`, as [`parse_trigger`] reads it.
pub fn format_trigger(items: &BTreeMap<SourceId, String>) -> String {
    items.iter().map(|(s, h)| format!("{s}={h}")).collect::<Vec<_>>().join(",")
}

/// An RFC 1123 DNS label (namespace names): at most 63 lowercase alphanumerics or `-`, starting
/// and ending alphanumeric. Checked before a request-supplied name is logged or put in a path.
pub fn is_dns_label(s: &str) -> bool {
    s.len() <= 63 && is_label_shaped(s)
}

/// An RFC 1123 DNS subdomain as Kubernetes checks object names (ConfigMaps, workloads): at most
/// 253 characters, dot-separated parts shaped like labels (no length limit per part).
pub fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_label_shaped)
}

fn is_label_shaped(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty() && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-') && b[0] != b'-' && b[b.len() - 1] != b'-'
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ids::{parse_source, SourceKind};

    #[test]
    fn dns_names() {
        assert!(is_dns_label("shop") && is_dns_label("a-1") && !is_dns_label("") && !is_dns_label("-a") && !is_dns_label("A"));
        assert!(!is_dns_label(&"a".repeat(64)) && is_dns_label(&"a".repeat(63)));
        assert!(is_dns_subdomain("pricing-config.v1") && !is_dns_subdomain("../secrets/x") && !is_dns_subdomain("a..b"));
        assert!(!is_dns_subdomain("a\nb") && !is_dns_subdomain(&"a".repeat(254)) && !is_dns_subdomain("x/status"));
        assert!(is_dns_subdomain(&"a".repeat(253)), "no per-part limit in object names");
    }

    #[test]
    fn an_entry_without_a_kind_is_a_configmap_and_reads_back_as_written() {
        let db = SourceId::configmap("db");
        assert_eq!(parse_source("db"), Some(db.clone()));
        assert_eq!(db.to_string(), "db", "written byte for byte as before kinds");
        for id in [db, SourceId::configmap("pricing-config.v1"), SourceId::configmap("<too long>")] {
            assert_eq!(parse_source(&id.to_string()).as_ref(), Some(&id));
        }
    }

    #[test]
    fn a_prefixed_entry_is_never_the_configmap_of_its_name() {
        // `widget/db` names a kind this version does not know: left out, never the ConfigMap db.
        assert_ne!(parse_source("widget/db"), parse_source("db"));
        assert_eq!(parse_source("widget/db"), None);
        assert_eq!(parse_source("/db"), None, "an empty prefix is no kind either");
        assert_eq!(parse_source("Secret/db"), None, "prefixes are exact");
        let pins = parse_source_map(r#"{"db":"h1","widget/db":"h2"}"#);
        assert_eq!(pins, [(SourceId::configmap("db"), "h1".to_owned())].into());
        assert!(parse_source_map("not json").is_empty());
        let trigger = parse_trigger(" db=h1, widget/db=h2 ,other,");
        assert_eq!(trigger, [(SourceId::configmap("db"), "h1".to_owned()), (SourceId::configmap("other"), String::new())].into());
        assert_eq!(format_trigger(&trigger), "db=h1,other=");
    }

    #[test]
    fn a_secret_entry_is_its_own_key_and_reads_back_as_written() {
        let (cm, secret) = (SourceId::configmap("db"), SourceId::new(SourceKind::Secret, "db"));
        assert_eq!(parse_source("secret/db"), Some(secret.clone()));
        assert_eq!(secret.to_string(), "secret/db");
        assert_ne!(cm, secret);
        // A pins map with both: two keys, each written back as it was read.
        let text = r#"{"db":"h1","secret/db":"h2"}"#;
        let pins = parse_source_map(text);
        assert_eq!(pins, [(cm.clone(), "h1".to_owned()), (secret.clone(), "h2".to_owned())].into());
        assert_eq!(serde_json::to_string(&pins).unwrap(), text);
        let trigger = parse_trigger("secret/db=h2,db=h1");
        assert_eq!(trigger, pins);
        assert_eq!(format_trigger(&trigger), "db=h1,secret/db=h2", "ConfigMaps first, then Secrets");
        // Every kind's entries parse back, whatever the name.
        for kind in SourceKind::ALL {
            for name in ["db", "a.b-c", "x"] {
                let id = SourceId::new(kind, name);
                assert_eq!(parse_source(&id.to_string()), Some(id));
            }
        }
    }

    #[test]
    fn source_maps_serialize_as_the_annotations_always_did() {
        let pins: BTreeMap<SourceId, String> =
            [(SourceId::configmap("b"), "h2".to_owned()), (SourceId::configmap("a\"\\"), "h1".to_owned())].into();
        let strings: BTreeMap<String, String> = pins.iter().map(|(k, v)| (k.name.clone(), v.clone())).collect();
        assert_eq!(serde_json::to_string(&pins).unwrap(), serde_json::to_string(&strings).unwrap());
        assert_eq!(parse_source_map(&serde_json::to_string(&pins).unwrap()), pins);
    }
}
