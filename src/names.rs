//! Every label and annotation confighistory reads or writes, in one place, so a reader can find
//! what a key means and which rule owns it.

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
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
pub const MANAGER: &str = "confighistory";

/// Workload annotation: source → pinned hash, as JSON.
pub const PINS: &str = "confighistory.io/pins";
/// Workload annotation: comma-separated sources whose pin was chosen on purpose.
pub const HELD: &str = "confighistory.io/held";
/// Workload annotation: propagation trigger set by the controller (`source=hash,...`).
pub const PROPAGATE: &str = "confighistory.io/propagate";

/// Label the Deployment controller adds to ReplicaSet templates; ignored when comparing revisions.
pub const POD_TEMPLATE_HASH: &str = "pod-template-hash";
/// Kubernetes publishes this ConfigMap into every namespace; never versioned.
pub const ROOT_CA: &str = "kube-root-ca.crt";

/// Namespaces confighistory never acts in, whatever the webhook configuration says.
pub const SYSTEM_NAMESPACES: [&str; 3] = ["kube-system", "kube-public", "kube-node-lease"];
