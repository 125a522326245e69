//! What the plugin shows, as plain data: gathered from the cluster by [`super::gather`], turned
//! into text by [`super::render`], or printed as JSON/YAML as is. The JSON shape is documented in
//! docs/plugin.md; field names are camelCase like Kubernetes objects.

use serde::{Deserialize, Serialize};

/// A workload as kubectl names it: `deployment/app`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct WorkloadRef {
    /// Deployment, StatefulSet, DaemonSet, CronJob or Job.
    pub kind: String,
    pub name: String,
}

impl std::fmt::Display for WorkloadRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.kind.to_lowercase(), self.name)
    }
}

/// `history SOURCE`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct History {
    pub namespace: String,
    /// The source as annotations name it: a ConfigMap's name, `secret/NAME` for a Secret.
    pub source: String,
    /// `ConfigMap` or `Secret`.
    pub source_kind: String,
    /// False when the source ConfigMap was deleted (its snapshots live while referenced).
    pub source_exists: bool,
    /// Hash of the source's current content (`confighistory.io/head`); a Secret's is a MAC, read
    /// from the snapshot holding its content or its `head` annotation (null when neither says).
    pub head: Option<String>,
    /// How many newest snapshots the newest-N rule keeps (`confighistory.io/keep`, else the
    /// server's setting); `None` when neither is known.
    pub keep: Option<u32>,
    /// Newest first.
    pub snapshots: Vec<SnapshotEntry>,
    /// Why the server's published configuration could not be read (what depends on it is then
    /// unknown).
    pub server_config_unavailable: Option<String>,
}

/// One snapshot in `history`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotEntry {
    /// 1 for the oldest snapshot, by creation time.
    pub revision: u32,
    pub name: String,
    pub hash: String,
    /// RFC 3339.
    pub created: Option<String>,
    /// Bytes of keys and values (a Secret's values decoded).
    pub size: usize,
    pub keys: Vec<String>,
    /// Keys against the previous (older) snapshot; for revision 1 everything is `added`.
    pub added: Vec<String>,
    pub removed: Vec<String>,
    pub changed: Vec<String>,
    /// This content is the source's current content.
    pub head: bool,
    pub used_by: Vec<Usage>,
    /// Why garbage collection keeps it: `head`, `workload` (a live template or Job names it),
    /// `revision` (a ReplicaSet or ControllerRevision names it), `adoption` (it holds the adoption
    /// record of a revision that still exists), `newest` (among the newest N). Empty: only the
    /// grace period keeps it.
    pub kept_by: Vec<String>,
    /// Nothing but the newest-N rule keeps it.
    pub kept_only_by_newest: bool,
}

/// A workload using a snapshot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    pub workload: WorkloadRef,
    /// The workload's live pod template uses it.
    pub current: bool,
    /// Rollout revisions (ReplicaSets, ControllerRevisions) whose template uses it, ascending.
    pub revisions: Vec<i64>,
    /// The revisions predate confighistory: they name the source plainly, and this snapshot holds
    /// the content they ran with (adoption record).
    pub adopted: bool,
}

/// `diff SOURCE [A] [B]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Diff {
    pub namespace: String,
    /// The source as annotations name it: a ConfigMap's name, `secret/NAME` for a Secret.
    pub source: String,
    /// `ConfigMap` or `Secret`.
    pub source_kind: String,
    pub from: DiffSide,
    pub to: DiffSide,
    pub added: Vec<String>,
    pub removed: Vec<String>,
    pub changed: Vec<String>,
    pub unchanged: Vec<String>,
    /// Every added, removed or changed key, sorted by key.
    pub keys: Vec<KeyDiff>,
    /// A Secret's `type` when it differs between the two sides (a type is no value: shown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub type_changed: Option<TypeChange>,
}

/// A Secret's `type` on each side of a diff.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TypeChange {
    pub from: String,
    pub to: String,
}

/// One side of a diff.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DiffSide {
    /// Snapshot revision (as in `history`); `None` for head content without a snapshot yet.
    pub revision: Option<u32>,
    /// Snapshot name, or the source's name for its live content.
    pub name: String,
    /// Null only for a Secret's live content with no snapshot and no recorded head (a Secret's
    /// hash is a MAC under a key the plugin does not have).
    pub hash: Option<String>,
    pub head: bool,
    pub created: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KeyDiff {
    /// The key; binaryData keys carry the suffix ` (binary)`.
    pub key: String,
    /// `added`, `removed` or `changed`.
    pub change: String,
    pub binary: bool,
    /// A Secret's value, not shown (no hunks) without `--show-values`.
    pub hidden: bool,
    /// Size of the value in bytes on each side (null: the key is not there).
    pub old_size: Option<usize>,
    pub new_size: Option<usize>,
    /// Unified-diff hunks of the value's lines (none for binary or hidden values).
    pub hunks: Vec<Hunk>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Hunk {
    pub old_start: usize,
    pub old_lines: usize,
    pub new_start: usize,
    pub new_lines: usize,
    /// Each line starts with ` `, `-` or `+`.
    pub lines: Vec<String>,
}

/// `status WORKLOAD`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    pub namespace: String,
    pub workload: WorkloadRef,
    /// The mode in force: rewrite, enforce, audit or off; `unknown` when the namespace has no
    /// label and the server's configuration could not be read.
    pub mode: String,
    /// The mode comes from the namespace label `confighistory.io/mode`.
    pub mode_from_label: bool,
    /// Where the mode comes from: `label`, `default` (the server's default mode),
    /// `refused-label` (the label asks for a mode the admin does not allow: the default applies),
    /// `excluded` (a namespace the server never acts in), `label-unchecked` (the label, not
    /// checked against the allowed modes because the server's configuration is unknown), `unknown`.
    pub mode_source: String,
    /// The mode the label asks for, when the server refuses it.
    pub refused_label: Option<String>,
    /// Why the server's published configuration could not be read (the mode, settle windows and
    /// keep counts are then only what the namespace and sources say).
    pub server_config_unavailable: Option<String>,
    /// Why the Secrets this workload references could not be read with the user's credentials
    /// (their pins are then shown as the template names them, unchecked).
    pub secrets_unreadable: Option<String>,
    /// Current rollout revision, when the kind has revisions.
    pub revision: Option<i64>,
    pub images: Vec<Image>,
    pub pins: Vec<Pin>,
    /// What `undo` (and `kubectl rollout undo`) would go back to.
    pub undo: Option<RevisionConfig>,
    /// Why there is nothing to undo to.
    pub undo_unavailable: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Image {
    pub container: String,
    pub image: String,
}

/// One source a workload's template references.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Pin {
    /// The source as annotations name it: a ConfigMap's name, `secret/NAME` for a Secret.
    pub source: String,
    /// The name the template references: a snapshot, or the source itself (not pinned).
    pub reference: String,
    /// Pinned hash; `None` for a plain reference.
    pub hash: Option<String>,
    /// The source's head.
    pub head: Option<String>,
    pub is_head: bool,
    /// Chosen on purpose (undo, explicit snapshot): propagation skips it.
    pub held: bool,
    /// The referenced snapshot exists.
    pub exists: bool,
    /// `confighistory.io/rollout: manual` on the source.
    pub manual: bool,
    pub pending: Option<Pending>,
}

/// A source change waiting for its settle window before it is propagated to this workload.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Pending {
    pub head: String,
    pub changed_at: String,
    /// changedAt + settle window; `None` when the settle window is unknown.
    pub fires_at: Option<String>,
    /// The source's or namespace's `confighistory.io/settle`, else the server's default; `None`
    /// when neither is known.
    pub settle_seconds: Option<u64>,
}

/// Image and config of one rollout revision.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RevisionConfig {
    pub revision: Option<i64>,
    pub images: Vec<Image>,
    pub config: Vec<ConfigUse>,
}

/// A source as one revision uses it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigUse {
    pub source: String,
    /// The name the template references.
    pub reference: String,
    /// The snapshot holding this revision's content: the pinned one, or for a plain reference the
    /// one with its adoption record.
    pub snapshot: Option<String>,
    pub hash: Option<String>,
    /// The snapshot still exists.
    pub exists: bool,
    /// `pin`, `adoption` (plain reference, content known from the adoption record) or `plain`
    /// (plain reference, content unknown: the webhook will use the head).
    pub via: String,
}

/// `undo WORKLOAD`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Undo {
    pub namespace: String,
    pub workload: WorkloadRef,
    pub dry_run: bool,
    /// The live template already matched the target revision: nothing was changed.
    pub skipped: bool,
    /// The workload before the undo.
    pub before: RevisionConfig,
    /// The revision rolled back to, as recorded in its history.
    pub target: RevisionConfig,
    /// The workload as the API server stored it (after confighistory's webhook).
    pub after: RevisionConfig,
    /// Sources the webhook now holds (`confighistory.io/held`).
    pub held: Vec<String>,
    /// What the undo brings back: images and each source's content, from what ran before it to
    /// what it stores (docs/plugin.md, "Undo preview").
    #[serde(default)]
    pub preview: Option<RevisionDiff>,
    /// Why the preview could not be made.
    #[serde(default)]
    pub preview_unavailable: Option<String>,
}

/// `list [-A]`: the versioned sources of a namespace (or of every namespace).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Sources {
    /// `None` with `--all-namespaces`.
    pub namespace: Option<String>,
    pub sources: Vec<SourceRow>,
    /// Why Secret snapshots could not be listed with the user's credentials (then only
    /// ConfigMaps are counted).
    #[serde(default)]
    pub secrets_unreadable: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SourceRow {
    pub namespace: String,
    /// The source as annotations name it: a ConfigMap's name, `secret/NAME` for a Secret.
    pub name: String,
    /// False when only snapshots are left (the source was deleted).
    pub exists: bool,
    pub snapshots: u32,
    /// The source's `confighistory.io/head` hash.
    pub head: Option<String>,
    /// Workloads pinned to one of its snapshots.
    pub workloads: u32,
    /// Of those, pinned to a snapshot other than the head and not held: waiting for propagation.
    pub behind: u32,
    /// Of those, held on purpose (an undo, an explicitly chosen snapshot).
    pub held: u32,
}

/// `history WORKLOAD`: a workload's rollout revisions, oldest first, each with its images, the
/// config it ran with and who wrote that config (docs/plugin.md, "Timeline").
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Timeline {
    pub namespace: String,
    pub workload: WorkloadRef,
    /// The revision the live template is (what runs now, or is being rolled out).
    pub current: Option<i64>,
    /// Sources the workload holds (`confighistory.io/held`: an undo's, propagation skips them).
    pub held: Vec<String>,
    /// Oldest first.
    pub revisions: Vec<TimelineRevision>,
    /// Why the Secrets the revisions use could not be read with the user's credentials (their
    /// keys and authors are then unknown).
    #[serde(default)]
    pub secrets_unreadable: Option<String>,
}

/// One rollout revision in a [`Timeline`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TimelineRevision {
    pub revision: i64,
    /// When the revision's object (ReplicaSet, ControllerRevision) was created, RFC 3339.
    pub created: Option<String>,
    pub images: Vec<ImageEntry>,
    /// One entry per source the revision's template references, by source.
    pub config: Vec<ConfigEntry>,
    /// Sources the previous revision referenced and this one does not.
    pub removed_sources: Vec<String>,
    /// Who wrote the config content this revision brought (the sources whose content changed
    /// against the previous revision; every source for the first), distinct, as recorded.
    pub authors: Vec<String>,
    /// Why (some of) that content has no recorded author, said plainly: `before confighistory`,
    /// `written while confighistory was unreachable`, `not recorded`; never a guess.
    pub author_unknown: Option<String>,
    /// The config content is the previous revision's (an image-only release, an undo's target).
    pub config_unchanged: bool,
    /// The revision's `kubernetes.io/change-cause`.
    pub cause: Option<String>,
    /// The cause is the one confighistory wrote (`confighistory.io/change-cause` agrees).
    pub cause_by_confighistory: bool,
    /// This revision is what the live template runs.
    pub running: bool,
    /// Running, with sources held by an undo.
    pub held: bool,
}

/// A container's image in a revision.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageEntry {
    pub container: String,
    pub image: String,
    /// Differs from (or is not in) the previous revision; false in the first revision.
    pub changed: bool,
    /// The previous revision's image of this container, when it changed.
    pub previous: Option<String>,
}

/// A source as one revision uses it, with what changed against the previous revision.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigEntry {
    /// The source as annotations name it: a ConfigMap's name, `secret/NAME` for a Secret.
    pub source: String,
    /// `ConfigMap` or `Secret`.
    pub source_kind: String,
    /// The name the template references.
    pub reference: String,
    /// The snapshot holding this revision's content (see [`ConfigUse`]).
    pub snapshot: Option<String>,
    pub hash: Option<String>,
    /// The snapshot still exists.
    pub exists: bool,
    /// `pin`, `adoption` or `plain` (see [`ConfigUse`]).
    pub via: String,
    /// The snapshot's content is the source's current content.
    pub head: bool,
    /// The workload holds this source (running revision only).
    pub held: bool,
    /// The content is known (its snapshot exists and could be read).
    pub content_known: bool,
    /// The content's keys (a Secret's names only), when known.
    pub keys: Vec<String>,
    /// Content differs from the previous revision's for this source (or the source is new).
    pub changed: bool,
    /// Keys against the previous revision (first revision, or a new source: all `added`);
    /// empty when either content is unknown.
    pub added: Vec<String>,
    pub removed: Vec<String>,
    pub changed_keys: Vec<String>,
    /// Who wrote this content, as its snapshot records it.
    pub author: Author,
}

/// Who wrote a snapshot's content (docs/behaviour.md §5.2.1), or why it is not known.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Author {
    /// The username of the write that produced the content.
    pub by: Option<String>,
    /// Its field manager.
    pub with: Option<String>,
    /// When confighistory saw the content appear.
    pub at: Option<String>,
    /// Why no username is known: `before confighistory`, `written while confighistory was
    /// unreachable`, `not recorded` (no record on the snapshot), `content unknown`.
    pub unknown: Option<String>,
    /// Where `by` comes from: `snapshot` (its `changed-by`) or `change-cause` (confighistory's
    /// change-cause of the revision, when the snapshot records nothing).
    pub from: Option<String>,
}

/// `diff WORKLOAD --from-revision A --to-revision B`, and what `undo` brings back: images and
/// each source's content between two templates of a workload.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RevisionDiff {
    pub namespace: String,
    pub workload: WorkloadRef,
    /// The revisions compared (`None`: the live template, or the template an undo would store).
    pub from: Option<i64>,
    pub to: Option<i64>,
    pub images: Vec<ImageDiff>,
    /// One per source either side references, by source.
    pub sources: Vec<SourceDiff>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageDiff {
    pub container: String,
    /// `None`: the container is not on that side.
    pub from: Option<String>,
    pub to: Option<String>,
    pub changed: bool,
}

/// One source between two templates.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SourceDiff {
    pub source: String,
    /// `ConfigMap` or `Secret`.
    pub source_kind: String,
    /// The snapshot (or, for a plain reference of the live template, the source) each side runs
    /// with; `None`: the side does not reference the source.
    pub from: Option<String>,
    pub to: Option<String>,
    /// The contents differ (or the source is on one side only).
    pub changed: bool,
    /// Why the contents cannot be compared (a snapshot deleted, a plain reference from before
    /// confighistory); then `diff` is `None`.
    pub unknown: Option<String>,
    /// Key- and line-level difference (a Secret's values hidden unless `--show-values`).
    pub diff: Option<Diff>,
}

/// `history WORKLOAD --revision N`: one revision of a [`Timeline`] in full.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TimelineRevisionView {
    pub namespace: String,
    pub workload: WorkloadRef,
    #[serde(flatten)]
    pub revision: TimelineRevision,
}
