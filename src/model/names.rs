//! Every label and annotation confighistory reads or writes, in one place, so a reader can find
//! what a key means and which rule owns it.

/// The prefix of every annotation and label confighistory reads or writes: the caches, and the
/// parse of a workload review, keep only annotations under it.
pub const PREFIX: &str = "confighistory.io/";
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
/// Workload annotation: propagation trigger set by the controller (`source=hash,...`).
pub const PROPAGATE: &str = "confighistory.io/propagate";

/// Label the Deployment controller adds to ReplicaSet templates; ignored when comparing revisions.
pub const POD_TEMPLATE_HASH: &str = "pod-template-hash";
/// Kubernetes publishes this ConfigMap into every namespace; never versioned.
pub const ROOT_CA: &str = "kube-root-ca.crt";

/// Namespaces confighistory never acts in, whatever the webhook configuration says.
pub const SYSTEM_NAMESPACES: [&str; 3] = ["kube-system", "kube-public", "kube-node-lease"];

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

    #[test]
    fn dns_names() {
        assert!(is_dns_label("shop") && is_dns_label("a-1") && !is_dns_label("") && !is_dns_label("-a") && !is_dns_label("A"));
        assert!(!is_dns_label(&"a".repeat(64)) && is_dns_label(&"a".repeat(63)));
        assert!(is_dns_subdomain("pricing-config.v1") && !is_dns_subdomain("../secrets/x") && !is_dns_subdomain("a..b"));
        assert!(!is_dns_subdomain("a\nb") && !is_dns_subdomain(&"a".repeat(254)) && !is_dns_subdomain("x/status"));
        assert!(is_dns_subdomain(&"a".repeat(253)), "no per-part limit in object names");
    }
}
