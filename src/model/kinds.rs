//! Workload kinds as data: which API objects carry pod templates, where the template lives, where
//! their earlier revisions are kept, and what confighistory may do with them. Every rule, watch,
//! metric label and the plugin's undo read a kind's entry here instead of matching on its name;
//! kinds are told apart by (group, kind), never by the kind string alone (an `apps.kruise.io`
//! StatefulSet is not an `apps` one).
//!
//! The built-in kinds are the constants below; a [`Registry`] is a value built from them at start
//! (resolved once against the API server's discovery, e.g. the batch version serving CronJobs), so
//! that kinds an admin registers can later be added as more entries.

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::LazyLock;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::model::names;
use crate::model::rollout::Rollout;

/// Where a kind's pod template is, relative to [`KindDef::template`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// A `PodTemplateSpec` (`metadata` + `spec`): every built-in kind.
    PodTemplate,
    /// A bare `PodSpec`, for kinds that embed one (none is registered yet; its references would
    /// be read as a template's `spec`).
    PodSpec,
}

/// Where a workload's earlier templates are kept, which `kubectl rollout undo` restores from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum History {
    /// ReplicaSets the workload controls, numbered by `revision_annotation`; their templates
    /// carry `hash_label`, which the workload's controller adds and which is not part of the
    /// template's content.
    ReplicaSets { revision_annotation: &'static str, hash_label: &'static str },
    /// ControllerRevisions the workload controls, numbered by their `revision` field.
    ControllerRevisions,
    /// No history: nothing to undo to.
    None,
}

/// What confighistory does with objects of a kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Admitted by the webhook (references pinned), watched, propagated per [`KindDef`].
    Workload,
    /// A revision store of some workload kind: watched and read, never admitted.
    Revision,
}

/// One kind, as data.
#[derive(Clone, Copy, Debug)]
pub struct KindDef {
    /// API group (`""` for the core group).
    pub group: &'static str,
    /// Versions served, preferred first. Watches and writes use the first one the API server
    /// serves (resolved once at start); the last when none is found. Admission accepts any
    /// version of a kind's group (the webhook rules register versions per group).
    pub versions: &'static [&'static str],
    pub kind: &'static str,
    /// How logs, metrics and the cache's sync name the kind: `kind` for a built-in, `Kind.group`
    /// for a registered one (never confused with a built-in of the same kind name).
    pub name: &'static str,
    /// Plural resource name.
    pub resource: &'static str,
    /// kubectl's short names for the resource (`deploy`), which the plugin also takes.
    pub short_names: &'static [&'static str],
    /// JSON pointer of the pod template in an object of this kind.
    pub template: &'static str,
    pub shape: Shape,
    pub role: Role,
    /// Where earlier templates are kept (for a revision kind: which store it is).
    pub history: History,
    /// Whether the template may change after creation. A Job's may not, except a suspended
    /// Job's scheduling directives (nodeSelector, tolerations, ...), which a batch scheduler
    /// updates: re-pinning one is refused by the API server, so such an update keeps every
    /// reference as it is, and such a workload is never repaired.
    pub template_mutable: bool,
    /// Whether propagation may move it to a source's new head.
    pub propagates: bool,
    /// (group, kind) of the workload whose runs objects of this kind are, when its controller is
    /// one of those (a Job made by a CronJob).
    pub run_of: Option<(&'static str, &'static str)>,
    /// Position among kinds: the loops visit workloads in this order (the built-ins first, in the
    /// order they always had).
    pub order: u16,
    /// How its status says that its pods run its current template (the SLI to pods ready).
    pub rollout: Rollout,
}

/// The label Kubernetes' ReplicaSet-based controllers add to a template; dropped from every
/// template hash of a kind without its own.
const POD_TEMPLATE_HASH: &str = names::POD_TEMPLATE_HASH;

const DEPLOYMENT_HISTORY: History =
    History::ReplicaSets { revision_annotation: "deployment.kubernetes.io/revision", hash_label: POD_TEMPLATE_HASH };

const fn workload(
    group: &'static str,
    versions: &'static [&'static str],
    kind: &'static str,
    resource: &'static str,
    template: &'static str,
    history: History,
    order: u16,
) -> KindDef {
    KindDef {
        group,
        versions,
        kind,
        name: kind,
        resource,
        short_names: &[],
        template,
        shape: Shape::PodTemplate,
        role: Role::Workload,
        history,
        template_mutable: true,
        propagates: true,
        run_of: None,
        order,
        rollout: Rollout::Unseen,
    }
}

static DEPLOYMENT: KindDef = KindDef {
    short_names: &["deploy"],
    rollout: Rollout::Deployment,
    ..workload("apps", &["v1"], "Deployment", "deployments", "/spec/template", DEPLOYMENT_HISTORY, 0)
};
static STATEFULSET: KindDef = KindDef {
    short_names: &["sts"],
    rollout: Rollout::StatefulSet,
    ..workload("apps", &["v1"], "StatefulSet", "statefulsets", "/spec/template", History::ControllerRevisions, 1)
};
static DAEMONSET: KindDef = KindDef {
    short_names: &["ds"],
    rollout: Rollout::DaemonSet,
    ..workload("apps", &["v1"], "DaemonSet", "daemonsets", "/spec/template", History::ControllerRevisions, 2)
};
static JOB: KindDef = KindDef {
    template_mutable: false,
    propagates: false,
    run_of: Some(("batch", "CronJob")),
    ..workload("batch", &["v1"], "Job", "jobs", "/spec/template", History::None, 3)
};
static CRONJOB: KindDef = KindDef {
    short_names: &["cj"],
    ..workload("batch", &["v1", "v1beta1"], "CronJob", "cronjobs", "/spec/jobTemplate/spec/template", History::None, 4)
};
// A revision kind's `history` says which store it is.
static REPLICASET: KindDef = KindDef {
    role: Role::Revision,
    propagates: false,
    ..workload("apps", &["v1"], "ReplicaSet", "replicasets", "/spec/template", DEPLOYMENT_HISTORY, 5)
};
static CONTROLLERREVISION: KindDef = KindDef {
    role: Role::Revision,
    propagates: false,
    ..workload("apps", &["v1"], "ControllerRevision", "controllerrevisions", "/data/spec/template", History::ControllerRevisions, 6)
};

/// A kind: a handle on its [`KindDef`], compared, hashed and ordered by (group, kind).
#[derive(Clone, Copy)]
pub struct Kind(&'static KindDef);

// The built-ins keep the names they had as enum variants, so `Kind::Deployment` reads as before.
#[allow(non_upper_case_globals)]
impl Kind {
    pub const Deployment: Kind = Kind(&DEPLOYMENT);
    pub const StatefulSet: Kind = Kind(&STATEFULSET);
    pub const DaemonSet: Kind = Kind(&DAEMONSET);
    pub const Job: Kind = Kind(&JOB);
    pub const CronJob: Kind = Kind(&CRONJOB);
    pub const ReplicaSet: Kind = Kind(&REPLICASET);
    pub const ControllerRevision: Kind = Kind(&CONTROLLERREVISION);
    /// Every built-in kind, workloads first.
    pub const BUILTIN: [Kind; 7] =
        [Kind::Deployment, Kind::StatefulSet, Kind::DaemonSet, Kind::Job, Kind::CronJob, Kind::ReplicaSet, Kind::ControllerRevision];
}

impl Kind {
    /// A kind from its definition (registered kinds; tests).
    pub const fn new(def: &'static KindDef) -> Kind {
        Kind(def)
    }

    pub fn def(self) -> &'static KindDef {
        self.0
    }

    pub fn as_str(self) -> &'static str {
        self.0.kind
    }

    /// The kind's name in logs, metrics and the cache's sync (`Rollout.argoproj.io` for a
    /// registered kind): unique among registered kinds, unlike [`Kind::as_str`].
    pub fn name(self) -> &'static str {
        self.0.name
    }

    /// Whether the kind is one of [`Kind::BUILTIN`] (not registered by the admin).
    pub fn is_builtin(self) -> bool {
        Kind::BUILTIN.contains(&self)
    }

    pub fn group(self) -> &'static str {
        self.0.group
    }

    /// Whether a user typed this kind as `typed` (lower case), as kubectl takes it: the kind,
    /// its resource or a short name, with or without `.group` (`deploy`, `deployments.apps`).
    pub fn typed_as(self, typed: &str) -> bool {
        let suffix = [".", self.0.group].concat();
        let base = typed.strip_suffix(suffix.as_str()).filter(|_| !self.0.group.is_empty()).unwrap_or(typed);
        base.eq_ignore_ascii_case(self.0.kind) || base == self.0.resource || self.0.short_names.contains(&base)
    }

    /// JSON pointer of the pod template.
    pub fn template_pointer(self) -> &'static str {
        self.0.template
    }

    /// Workloads are what the webhook admits; the rest are revisions it reads.
    pub fn is_workload(self) -> bool {
        self.0.role == Role::Workload
    }

    /// Kinds whose templates propagation may move (Jobs are immutable).
    pub fn propagates(self) -> bool {
        self.0.propagates
    }

    pub fn template_mutable(self) -> bool {
        self.0.template_mutable
    }

    pub fn history(self) -> History {
        self.0.history
    }

    /// Whether the workload kind keeps earlier templates that an undo restores.
    pub fn has_history(self) -> bool {
        self.is_workload() && self.0.history != History::None
    }

    /// The label to drop from this kind's templates before hashing them.
    pub fn hash_label(self) -> &'static str {
        match self.0.history {
            History::ReplicaSets { hash_label, .. } => hash_label,
            _ => POD_TEMPLATE_HASH,
        }
    }

    /// The canonical hash of a template of this kind (see [`crate::model::template::template_hash`]).
    pub fn template_hash(self, template: &Value) -> String {
        crate::model::template::template_hash_without(template, self.hash_label())
    }

    /// [`Self::template_hash`] of a template a request's review parsed (its unread parts folded,
    /// `model::fold`).
    pub fn request_template_hash(self, template: &Value) -> String {
        crate::model::template::request_template_hash(template, self.hash_label())
    }

    /// [`Self::request_template_hash`] of `template` less the pod labels in `labels` (and the
    /// labels map when nothing else is left in it), without copying it.
    pub fn request_template_hash_less_labels(self, template: &Value, labels: &[&str]) -> String {
        crate::model::template::request_template_hash_less_labels(template, self.hash_label(), labels)
    }

    /// Whether this is the kind (group, kind).
    pub fn is(self, group: &str, kind: &str) -> bool {
        self.0.group == group && self.0.kind == kind
    }

    fn key(self) -> (u16, &'static str, &'static str) {
        (self.0.order, self.0.group, self.0.kind)
    }
}

impl PartialEq for Kind {
    fn eq(&self, other: &Kind) -> bool {
        self.is(other.0.group, other.0.kind)
    }
}

impl Eq for Kind {}

impl Hash for Kind {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (self.0.group, self.0.kind).hash(state)
    }
}

impl PartialOrd for Kind {
    fn partial_cmp(&self, other: &Kind) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Kind {
    fn cmp(&self, other: &Kind) -> Ordering {
        self.key().cmp(&other.key())
    }
}

impl fmt::Debug for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.group {
            "apps" | "batch" => f.write_str(self.0.kind),
            group => write!(f, "{}.{group}", self.0.kind),
        }
    }
}

/// The group of an `apiVersion` (`apps/v1` → `apps`, `v1` → the core group).
pub fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
}

/// The kinds confighistory handles, each with the version it watches and writes.
#[derive(Clone, Debug)]
pub struct Registry {
    entries: Vec<(Kind, &'static str)>,
}

static BUILTIN: LazyLock<Registry> = LazyLock::new(Registry::new_builtin);

impl Registry {
    /// The built-in kinds, each at its preferred version.
    pub fn builtin() -> &'static Registry {
        &BUILTIN
    }

    fn new_builtin() -> Registry {
        Registry { entries: Kind::BUILTIN.iter().map(|k| (*k, k.0.versions[0])).collect() }
    }

    /// This registry and one more kind; refused when (group, kind) is already registered.
    pub fn with(mut self, def: &'static KindDef) -> Result<Registry, String> {
        let kind = Kind(def);
        if self.find(def.group, def.kind).is_some() {
            return Err(format!("kind {kind:?} is registered twice"));
        }
        let Some(version) = def.versions.first() else { return Err(format!("kind {kind:?} has no version")) };
        self.entries.push((kind, version));
        Ok(self)
    }

    /// Each kind at the first of its versions for which `served(group, version, resource)`
    /// (the last when none is): the once-at-start resolution against discovery.
    pub fn resolve(mut self, served: impl Fn(&str, &str, &str) -> bool) -> Registry {
        for (kind, version) in &mut self.entries {
            let d = kind.0;
            if d.versions.len() > 1 {
                *version = d.versions.iter().copied().find(|v| served(d.group, v, d.resource)).unwrap_or(d.versions[d.versions.len() - 1]);
            }
        }
        self
    }

    /// The group/versions whose discovery [`Registry::resolve`] needs (kinds with a choice).
    pub fn to_probe(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for (kind, _) in &self.entries {
            let d = kind.0;
            if d.versions.len() > 1 {
                for v in &d.versions[..d.versions.len() - 1] {
                    let gv = if d.group.is_empty() { v.to_string() } else { format!("{}/{v}", d.group) };
                    if !out.contains(&gv) {
                        out.push(gv);
                    }
                }
            }
        }
        out
    }

    /// This registry and the kinds an admin registers, each checked (see [`Entry`]); refused as a
    /// whole, naming the entry, when one is wrong. The definitions are leaked to `'static`: done
    /// once per process at start, at most [`MAX_REGISTERED`] of them.
    pub fn register(self, entries: &[Entry]) -> Result<Registry, String> {
        if entries.len() > MAX_REGISTERED {
            return Err(format!("{} kinds registered; at most {MAX_REGISTERED} are", entries.len()));
        }
        let mut checked = Vec::new();
        for (i, e) in entries.iter().enumerate() {
            let at = format!("entry {i} ({}.{})", e.kind, e.group);
            if let Some(k) = self.find(&e.group, &e.kind) {
                return Err(format!("{at}: {k:?} of group {:?} is built in; register only kinds of other groups", e.group));
            }
            if let Some(k) = self.entries.iter().map(|(k, _)| *k).find(|k| k.group() == e.group && k.def().resource == e.resource) {
                return Err(format!("{at}: resource {:?} of group {:?} is the built-in {k:?}'s", e.resource, e.group));
            }
            if checked.iter().any(|(o, _): &(&Entry, _)| o.group == e.group && (o.kind == e.kind || o.resource == e.resource)) {
                return Err(format!("{at}: registered twice (the same group and kind, or resource)"));
            }
            checked.push((e, e.check(i).map_err(|why| format!("{at}: {why}"))?));
        }
        let mut out = self;
        for (e, def) in checked {
            out = out.with(def.leak(e))?;
        }
        Ok(out)
    }

    /// The registered kind a user names as kubectl does: its kind or plural resource,
    /// lowercase, each optionally followed by `.group` (`rollout`, `rollouts.argoproj.io`).
    pub fn registered_named(&self, typed: &str) -> Option<Kind> {
        let typed = typed.to_ascii_lowercase();
        self.registered().find(|k| {
            let (kind, resource, group) = (k.as_str().to_ascii_lowercase(), k.def().resource, k.group());
            [kind.clone(), resource.to_owned(), format!("{kind}.{group}"), format!("{resource}.{group}")].contains(&typed)
        })
    }

    /// The kinds an admin registered (not built in).
    pub fn registered(&self) -> impl Iterator<Item = Kind> + '_ {
        self.entries.iter().map(|(k, _)| *k).filter(|k| !k.is_builtin())
    }

    pub fn find(&self, group: &str, kind: &str) -> Option<Kind> {
        self.entries.iter().map(|(k, _)| *k).find(|k| k.is(group, kind))
    }

    /// The workload kind (group, kind), if registered.
    pub fn workload(&self, group: &str, kind: &str) -> Option<Kind> {
        self.find(group, kind).filter(|k| k.is_workload())
    }

    pub fn workloads(&self) -> impl Iterator<Item = Kind> + '_ {
        self.entries.iter().map(|(k, _)| *k).filter(|k| k.is_workload())
    }

    pub fn revisions(&self) -> impl Iterator<Item = Kind> + '_ {
        self.entries.iter().map(|(k, _)| *k).filter(|k| !k.is_workload())
    }

    /// The version `kind` is watched and written at.
    pub fn version(&self, kind: Kind) -> &'static str {
        self.entries.iter().find(|(k, _)| *k == kind).map_or(kind.0.versions[0], |(_, v)| v)
    }

    /// Whether a request for (group, version, kind, resource) is one for a registered workload, at a
    /// version some kind of its group is served at (the webhook rules list versions per group).
    pub fn admits(&self, group: &str, version: &str, kind: &str, resource: &str) -> Option<Kind> {
        let k = self.workload(group, kind).filter(|k| k.0.resource == resource)?;
        self.workloads().any(|o| o.0.group == group && o.0.versions.contains(&version)).then_some(k)
    }

    /// The registered kind of an owner reference (or any object's `apiVersion` and `kind`).
    pub fn of(&self, obj: &Value) -> Option<Kind> {
        let api_version = obj.get("apiVersion").and_then(Value::as_str).unwrap_or_default();
        self.find(group_of(api_version), obj.get("kind").and_then(Value::as_str)?)
    }

    /// A revision object's number and template hash, as its history keeps them (a ReplicaSet's
    /// numbered and labelled as its owner's kind does it): what adoption records and undo
    /// compares against, so the server and the plugin read a revision the same way.
    pub fn revision_of(&self, kind: Kind, obj: &Value) -> (i64, String) {
        let tpl = crate::model::json::At::at(obj, kind.template_pointer()).unwrap_or(&Value::Null);
        match kind.history() {
            History::ControllerRevisions => (obj.get("revision").and_then(Value::as_i64).unwrap_or(0), kind.template_hash(tpl)),
            _ => {
                let meta = &obj["metadata"];
                let (annotation, hash_label) = self.replicaset_history(meta);
                let revision = meta.get("annotations").and_then(|a| a.get(annotation)).and_then(Value::as_str);
                (revision.and_then(|s| s.parse().ok()).unwrap_or(0), crate::model::template::template_hash_without(tpl, hash_label))
            }
        }
    }

    /// The history a revision object belongs to: its controlling owner's kind's, when that is a
    /// ReplicaSet-kept history; otherwise a Deployment's (what Kubernetes' own ReplicaSets carry).
    pub fn replicaset_history(&self, meta: &Value) -> (&'static str, &'static str) {
        let owner = meta
            .get("ownerReferences")
            .and_then(Value::as_array)
            .and_then(|o| o.iter().find(|o| o.get("controller").and_then(Value::as_bool) == Some(true)));
        let history = owner.and_then(|o| self.of(o)).map(Kind::history);
        match history {
            Some(History::ReplicaSets { revision_annotation, hash_label }) => (revision_annotation, hash_label),
            _ => match DEPLOYMENT_HISTORY {
                History::ReplicaSets { revision_annotation, hash_label } => (revision_annotation, hash_label),
                _ => unreachable!("a Deployment's history is ReplicaSets"),
            },
        }
    }
}

/// The most kinds an admin may register: their definitions live as long as the process.
pub const MAX_REGISTERED: usize = 32;

/// A kind an admin registers: one entry of the chart's `extraWorkloadKinds`, as the server reads
/// it (`--extra-workload-kinds`, a JSON array of these).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Entry {
    /// API group (its CustomResourceDefinition's).
    pub group: String,
    /// Versions served, preferred first.
    pub versions: Vec<String>,
    pub kind: String,
    /// Plural resource name.
    pub resource: String,
    /// Where the pod template is, dot-separated (`spec.template` when left out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template_path: Option<String>,
    /// Whether propagation moves it to a source's new head.
    pub propagates: bool,
    /// Where its earlier templates are kept; none when left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<HistoryEntry>,
}

/// Where a registered kind's earlier templates are kept: `apps/replicasets` (with the revision
/// annotation and the hash label its controller writes) or `apps/controllerrevisions`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HistoryEntry {
    pub group: String,
    pub resource: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision_annotation: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash_label: Option<String>,
}

/// A checked [`Entry`], before its strings are leaked.
struct Checked {
    template: String,
    history: CheckedHistory,
    order: u16,
}

enum CheckedHistory {
    None,
    ReplicaSets { revision_annotation: String, hash_label: String },
    ControllerRevisions,
}

impl Entry {
    /// The entries of `--extra-workload-kinds` (empty: none).
    pub fn parse_list(json: &str) -> Result<Vec<Entry>, String> {
        if json.trim().is_empty() {
            return Ok(Vec::new());
        }
        serde_json::from_str(json).map_err(|e| format!("not a JSON array of kind entries: {e}"))
    }

    fn check(&self, i: usize) -> Result<Checked, String> {
        if !names::is_dns_subdomain(&self.group) || !self.group.contains('.') {
            return Err(format!("group {:?}: give the API group of its CustomResourceDefinition, such as argoproj.io", self.group));
        }
        if self.versions.is_empty() || !self.versions.iter().all(|v| names::is_dns_label(v)) {
            return Err(format!("versions {:?}: give the versions served, preferred first, such as [v1alpha1]", self.versions));
        }
        let kind_ok = self.kind.len() <= 63
            && self.kind.starts_with(|c: char| c.is_ascii_uppercase())
            && self.kind.chars().all(|c| c.is_ascii_alphanumeric());
        if !kind_ok {
            return Err(format!("kind {:?}: give the kind as its objects say it, such as Rollout", self.kind));
        }
        if !names::is_dns_label(&self.resource) {
            return Err(format!("resource {:?}: give the plural resource name, such as rollouts", self.resource));
        }
        let path = self.template_path.as_deref().unwrap_or("spec.template");
        let segments: Vec<&str> = path.split('.').collect();
        if segments.iter().any(|s| s.is_empty() || !s.chars().all(|c| c.is_ascii_alphanumeric())) {
            return Err(format!("templatePath {path:?}: give the pod template's field path, dot-separated, such as spec.template"));
        }
        let template = segments.iter().map(|s| format!("/{s}")).collect();
        let history = match &self.history {
            None => CheckedHistory::None,
            Some(h) => match (h.group.as_str(), h.resource.as_str()) {
                ("apps", "replicasets") => {
                    let (Some(revision), Some(hash)) = (&h.revision_annotation, &h.hash_label) else {
                        return Err(
                            "history in ReplicaSets needs revisionAnnotation and hashLabel (what its controller writes on them)".into()
                        );
                    };
                    for (what, key) in [("revisionAnnotation", revision), ("hashLabel", hash)] {
                        if !is_qualified_name(key) {
                            return Err(format!("{what} {key:?} is not an annotation or label key"));
                        }
                    }
                    CheckedHistory::ReplicaSets { revision_annotation: revision.clone(), hash_label: hash.clone() }
                }
                ("apps", "controllerrevisions") if h.revision_annotation.is_none() && h.hash_label.is_none() => {
                    CheckedHistory::ControllerRevisions
                }
                ("apps", "controllerrevisions") => {
                    return Err("history in ControllerRevisions takes no revisionAnnotation or hashLabel".into())
                }
                (g, r) => {
                    return Err(format!(
                        "unknown history store {g:?}/{r:?}: confighistory reads apps/replicasets (with revisionAnnotation and \
                         hashLabel) or apps/controllerrevisions; leave history out for a kind without one"
                    ))
                }
            },
        };
        Ok(Checked { template, history, order: 100 + u16::try_from(i).unwrap_or(u16::MAX - 100) })
    }
}

impl Checked {
    /// The definition, for the life of the process.
    fn leak(self, e: &Entry) -> &'static KindDef {
        fn s(v: &str) -> &'static str {
            Box::leak(v.to_owned().into_boxed_str())
        }
        let history = match self.history {
            CheckedHistory::ReplicaSets { revision_annotation, hash_label } => {
                History::ReplicaSets { revision_annotation: s(&revision_annotation), hash_label: s(&hash_label) }
            }
            CheckedHistory::ControllerRevisions => History::ControllerRevisions,
            CheckedHistory::None => History::None,
        };
        let versions: Vec<&'static str> = e.versions.iter().map(|v| s(v)).collect();
        Box::leak(Box::new(KindDef {
            group: s(&e.group),
            versions: Box::leak(versions.into_boxed_slice()),
            kind: s(&e.kind),
            name: s(&format!("{}.{}", e.kind, e.group)),
            resource: s(&e.resource),
            short_names: &[],
            template: s(&self.template),
            shape: Shape::PodTemplate,
            role: Role::Workload,
            history,
            template_mutable: true,
            propagates: e.propagates,
            run_of: None,
            order: self.order,
            rollout: Rollout::Unseen,
        }))
    }
}

/// A Kubernetes qualified name (label and annotation keys): an optional DNS-subdomain prefix and
/// `/`, then at most 63 alphanumerics, `-`, `_` or `.`, starting and ending alphanumeric.
fn is_qualified_name(key: &str) -> bool {
    let (prefix, name) = key.rsplit_once('/').map_or((None, key), |(p, n)| (Some(p), n));
    let b = name.as_bytes();
    prefix.is_none_or(names::is_dns_subdomain)
        && !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter().all(|c| c.is_ascii_alphanumeric() || b"-_.".contains(c))
}

impl Default for &'static Registry {
    fn default() -> &'static Registry {
        Registry::builtin()
    }
}

#[cfg(test)]
pub mod tests {
    use super::*;
    use serde_json::json;

    /// A made-up workload kind: another group, its template elsewhere, its own ReplicaSet history.
    pub static ROLLOUT: KindDef = KindDef {
        group: "example.io",
        versions: &["v1alpha1"],
        kind: "Rollout",
        name: "Rollout.example.io",
        resource: "rollouts",
        short_names: &[],
        template: "/spec/workload/template",
        shape: Shape::PodTemplate,
        role: Role::Workload,
        history: History::ReplicaSets { revision_annotation: "rollout.example.io/revision", hash_label: "rollouts-pod-template-hash" },
        template_mutable: true,
        propagates: true,
        run_of: None,
        order: 100,
        rollout: Rollout::Unseen,
    };

    /// An `apps.kruise.io` StatefulSet: the same kind string as apps/v1's, a different kind.
    pub static KRUISE_STATEFULSET: KindDef = KindDef {
        group: "apps.kruise.io",
        versions: &["v1beta1"],
        kind: "StatefulSet",
        name: "StatefulSet.apps.kruise.io",
        resource: "statefulsets",
        short_names: &["sts"],
        template: "/spec/template",
        shape: Shape::PodTemplate,
        role: Role::Workload,
        history: History::ControllerRevisions,
        template_mutable: true,
        propagates: false,
        run_of: None,
        order: 101,
        rollout: Rollout::Unseen,
    };

    pub fn with_rollout() -> &'static Registry {
        static R: LazyLock<Registry> = LazyLock::new(|| Registry::builtin().clone().with(&ROLLOUT).expect("one Rollout"));
        &R
    }

    #[test]
    fn kinds_are_typed_as_kubectl_takes_them() {
        for typed in ["deployment", "deployments", "deploy", "deployments.apps", "deploy.apps", "Deployment"] {
            assert!(Kind::Deployment.typed_as(&typed.to_ascii_lowercase()), "{typed}");
        }
        for typed in ["cj", "cronjobs.batch", "cronjob"] {
            assert!(Kind::CronJob.typed_as(typed), "{typed}");
        }
        // Another group's kind of the same name is not the built-in.
        assert!(!Kind::StatefulSet.typed_as("statefulsets.apps.kruise.io"));
        assert!(!Kind::Deployment.typed_as("deployments.batch"));
        assert!(!Kind::Deployment.typed_as("sts"));
        assert!(!Kind::StatefulSet.typed_as("statefulsets.apps.kruise.io"));
        assert!(Kind::new(&KRUISE_STATEFULSET).typed_as("sts.apps.kruise.io"));
    }

    #[test]
    fn kinds_are_told_apart_by_group_and_kind() {
        let r = Registry::builtin().clone().with(&KRUISE_STATEFULSET).unwrap();
        let apps = r.find("apps", "StatefulSet").unwrap();
        let kruise = r.find("apps.kruise.io", "StatefulSet").unwrap();
        assert_ne!(apps, kruise);
        assert_eq!(apps, Kind::StatefulSet);
        assert!(apps.propagates() && !kruise.propagates());
        assert_eq!(format!("{apps:?} {kruise:?}"), "StatefulSet StatefulSet.apps.kruise.io");
        assert_eq!(r.find("", "StatefulSet"), None);
        assert_eq!(r.of(&json!({"apiVersion": "apps.kruise.io/v1beta1", "kind": "StatefulSet"})), Some(kruise));
        assert_eq!(r.of(&json!({"apiVersion": "apps/v1", "kind": "StatefulSet"})), Some(apps));
        assert_eq!(Registry::builtin().find("apps.kruise.io", "StatefulSet"), None);
        let set: std::collections::HashSet<Kind> = [apps, kruise].into();
        assert_eq!(set.len(), 2);
        assert!(r.clone().with(&KRUISE_STATEFULSET).is_err(), "registered twice");
    }

    #[test]
    fn the_builtins_keep_their_data() {
        let r = Registry::builtin();
        assert_eq!(r.workloads().collect::<Vec<_>>(), [Kind::Deployment, Kind::StatefulSet, Kind::DaemonSet, Kind::Job, Kind::CronJob]);
        assert_eq!(r.revisions().collect::<Vec<_>>(), [Kind::ReplicaSet, Kind::ControllerRevision]);
        assert_eq!(Kind::CronJob.template_pointer(), "/spec/jobTemplate/spec/template");
        assert_eq!(Kind::ControllerRevision.template_pointer(), "/data/spec/template");
        assert!(!Kind::Job.propagates() && !Kind::Job.template_mutable());
        assert!(Kind::Deployment.has_history() && !Kind::CronJob.has_history());
        let mut sorted = Kind::BUILTIN;
        sorted.sort();
        assert_eq!(sorted, Kind::BUILTIN, "the loops' order is the enum's it replaced");
    }

    #[test]
    fn the_cronjob_version_is_resolved_once_from_discovery() {
        let r = Registry::builtin().clone();
        assert_eq!(r.to_probe(), ["batch/v1"]);
        let old = r.clone().resolve(|_, _, _| false);
        assert_eq!((old.version(Kind::CronJob), old.version(Kind::Job)), ("v1beta1", "v1"));
        let new = r.resolve(|g, v, res| (g, v) == ("batch", "v1") && ["jobs", "cronjobs"].contains(&res));
        assert_eq!((new.version(Kind::CronJob), new.version(Kind::Job), new.version(Kind::Deployment)), ("v1", "v1", "v1"));
    }

    #[test]
    fn admission_accepts_the_versions_of_a_kinds_group() {
        let r = Registry::builtin();
        assert_eq!(r.admits("batch", "v1beta1", "Job", "jobs"), Some(Kind::Job));
        assert_eq!(r.admits("batch", "v1beta1", "CronJob", "cronjobs"), Some(Kind::CronJob));
        assert_eq!(r.admits("apps", "v1beta1", "Deployment", "deployments"), None);
        assert_eq!(r.admits("apps", "v1", "Deployment", "statefulsets"), None);
        assert_eq!(r.admits("apps", "v1", "ReplicaSet", "replicasets"), None, "revisions are not admitted");
    }

    #[test]
    fn a_replicaset_belongs_to_its_owners_history() {
        let r = with_rollout();
        let owner = |api: &str, kind: &str| json!({"ownerReferences": [{"apiVersion": api, "kind": kind, "controller": true}]});
        assert_eq!(
            r.replicaset_history(&owner("example.io/v1alpha1", "Rollout")),
            ("rollout.example.io/revision", "rollouts-pod-template-hash")
        );
        assert_eq!(r.replicaset_history(&owner("apps/v1", "Deployment")), ("deployment.kubernetes.io/revision", "pod-template-hash"));
        assert_eq!(r.replicaset_history(&owner("other.io/v1", "Rollout")), ("deployment.kubernetes.io/revision", "pod-template-hash"));
        assert_eq!(r.replicaset_history(&json!({})), ("deployment.kubernetes.io/revision", "pod-template-hash"));
    }

    /// The entry docs/install.md gives for Argo Rollouts (and the chart's values document).
    pub const ARGO_ROLLOUTS: &str = r#"[{"group": "argoproj.io", "versions": ["v1alpha1"], "kind": "Rollout", "resource": "rollouts",
        "templatePath": "spec.template", "propagates": true,
        "history": {"group": "apps", "resource": "replicasets",
                    "revisionAnnotation": "rollout.argoproj.io/revision", "hashLabel": "rollouts-pod-template-hash"}}]"#;

    /// The chart's tested values for Argo Rollouts are this entry, and the server takes them.
    #[test]
    fn the_charts_argo_rollouts_values_are_the_documented_entry() {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Values {
            extra_workload_kinds: Vec<Entry>,
        }
        let values: Values =
            serde_saphyr::from_str(include_str!("../../charts/confighistory/tests/values-argo-rollouts.yaml")).expect("YAML");
        assert_eq!(values.extra_workload_kinds, Entry::parse_list(ARGO_ROLLOUTS).unwrap());
    }

    fn register(json: &str) -> Result<Registry, String> {
        Registry::builtin().clone().register(&Entry::parse_list(json)?)
    }

    #[test]
    fn an_admin_registers_argo_rollouts() {
        let r = register(ARGO_ROLLOUTS).unwrap();
        let rollout = r.workload("argoproj.io", "Rollout").expect("registered");
        assert_eq!((rollout.name(), rollout.template_pointer(), rollout.is_builtin()), ("Rollout.argoproj.io", "/spec/template", false));
        assert_eq!(
            rollout.history(),
            History::ReplicaSets { revision_annotation: "rollout.argoproj.io/revision", hash_label: "rollouts-pod-template-hash" }
        );
        assert!(rollout.propagates() && rollout.template_mutable() && rollout.has_history());
        assert_eq!(r.registered().collect::<Vec<_>>(), [rollout]);
        assert_eq!(r.admits("argoproj.io", "v1alpha1", "Rollout", "rollouts"), Some(rollout));
        assert_eq!(r.version(rollout), "v1alpha1");
        let owner = json!({"ownerReferences": [{"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout", "controller": true}]});
        assert_eq!(r.replicaset_history(&owner), ("rollout.argoproj.io/revision", "rollouts-pod-template-hash"));
        // The built-ins come first in the loops' order, then the registered kinds as listed.
        assert!(r.workloads().last() == Some(rollout) && Kind::BUILTIN.iter().all(|k| *k < rollout));
        // A template elsewhere, no history, not moved.
        let r = register(
            r#"[{"group": "example.io", "versions": ["v1", "v1beta1"], "kind": "Batch", "resource": "batches",
            "templatePath": "spec.runner.pod", "propagates": false}]"#,
        )
        .unwrap();
        let batch = r.workload("example.io", "Batch").unwrap();
        assert_eq!((batch.template_pointer(), batch.history(), batch.propagates()), ("/spec/runner/pod", History::None, false));
        assert_eq!(Entry::parse_list(" ").unwrap(), []);
    }

    /// Each wrong entry is refused as a whole, naming the entry and what to give instead.
    #[test]
    fn a_wrong_entry_says_which_and_why() {
        let entry = |fields: &str| {
            format!(r#"[{{"group": "example.io", "versions": ["v1"], "kind": "Thing", "resource": "things", "propagates": true{fields}}}]"#)
        };
        let rs = r#""group": "apps", "resource": "replicasets""#;
        let cases = [
            (
                entry(r#", "history": {"group": "example.io", "resource": "revisions"}"#),
                "unknown history store \"example.io\"/\"revisions\"",
            ),
            (entry(&format!(r#", "history": {{{rs}}}"#)), "needs revisionAnnotation and hashLabel"),
            (entry(&format!(r#", "history": {{{rs}, "revisionAnnotation": "a/b/c", "hashLabel": "h"}}"#)), "revisionAnnotation \"a/b/c\""),
            (
                entry(r#", "history": {"group": "apps", "resource": "controllerrevisions", "hashLabel": "h"}"#),
                "takes no revisionAnnotation",
            ),
            (entry(r#", "templatePath": "spec..template""#), "templatePath \"spec..template\""),
            (entry(r#", "templatePath": "/spec/template""#), "templatePath \"/spec/template\""),
            (entry(r#", "templatepath": "spec.template""#), "unknown field `templatepath`"),
            (entry("").replace("example.io", "example"), "group \"example\""),
            (entry("").replace("Thing", "thing"), "kind \"thing\""),
            (entry("").replace("\"v1\"", "\"V 1\""), "versions [\"V 1\"]"),
            (entry("").replace("things", "Things"), "resource \"Things\""),
            (
                entry("").replace("example.io", "apps").replace("Thing", "Deployment"),
                "entry 0 (Deployment.apps): Deployment of group \"apps\" is built in",
            ),
            (
                entry("").replace("example.io", "apps").replace("things", "deployments"),
                "resource \"deployments\" of group \"apps\" is the built-in Deployment's",
            ),
            (
                format!("[{},{}]", &entry("")[1..entry("").len() - 1], &entry("")[1..entry("").len() - 1]),
                "entry 1 (Thing.example.io): registered twice",
            ),
            ("{}".to_owned(), "not a JSON array"),
            (format!("[{}]", vec![&entry("")[1..entry("").len() - 1]; MAX_REGISTERED + 1].join(",")), "33 kinds registered; at most 32"),
        ];
        for (json, want) in cases {
            let e = register(&json).unwrap_err();
            assert!(e.contains(want), "{json}\n  said: {e}\n  want: {want}");
        }
        assert!(register(&entry("")).is_ok(), "the base entry is right");
    }

    /// A registered `apps.kruise.io` StatefulSet is its own kind: found, named, watched and
    /// ordered apart from apps/v1's, and the built-in keeps its data.
    #[test]
    fn a_registered_statefulset_of_another_group_is_never_the_builtin() {
        let r = register(
            r#"[{"group": "apps.kruise.io", "versions": ["v1beta1"], "kind": "StatefulSet", "resource": "statefulsets",
                "propagates": true, "history": {"group": "apps", "resource": "controllerrevisions"}}]"#,
        )
        .unwrap();
        let kruise = r.workload("apps.kruise.io", "StatefulSet").unwrap();
        assert_ne!(kruise, Kind::StatefulSet);
        assert_eq!(r.workload("apps", "StatefulSet"), Some(Kind::StatefulSet));
        assert_eq!((kruise.name(), Kind::StatefulSet.name()), ("StatefulSet.apps.kruise.io", "StatefulSet"));
        assert_eq!(r.admits("apps.kruise.io", "v1beta1", "StatefulSet", "statefulsets"), Some(kruise));
        assert_eq!(r.admits("apps", "v1", "StatefulSet", "statefulsets"), Some(Kind::StatefulSet));
        assert_eq!(r.admits("apps", "v1beta1", "StatefulSet", "statefulsets"), None, "apps serves no v1beta1");
        assert_eq!(r.version(kruise), "v1beta1");
        assert_eq!(r.version(Kind::StatefulSet), "v1");
        assert_eq!(r.of(&json!({"apiVersion": "apps.kruise.io/v1beta1", "kind": "StatefulSet"})), Some(kruise));
        assert!(kruise.is_workload() && !kruise.is_builtin() && Kind::StatefulSet.is_builtin());
    }
}
