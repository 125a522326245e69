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

use serde_json::Value;

use crate::model::names;

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
    /// Plural resource name.
    pub resource: &'static str,
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
        resource,
        template,
        shape: Shape::PodTemplate,
        role: Role::Workload,
        history,
        template_mutable: true,
        propagates: true,
        run_of: None,
        order,
    }
}

static DEPLOYMENT: KindDef = workload("apps", &["v1"], "Deployment", "deployments", "/spec/template", DEPLOYMENT_HISTORY, 0);
static STATEFULSET: KindDef = workload("apps", &["v1"], "StatefulSet", "statefulsets", "/spec/template", History::ControllerRevisions, 1);
static DAEMONSET: KindDef = workload("apps", &["v1"], "DaemonSet", "daemonsets", "/spec/template", History::ControllerRevisions, 2);
static JOB: KindDef = KindDef {
    template_mutable: false,
    propagates: false,
    run_of: Some(("batch", "CronJob")),
    ..workload("batch", &["v1"], "Job", "jobs", "/spec/template", History::None, 3)
};
static CRONJOB: KindDef = workload("batch", &["v1", "v1beta1"], "CronJob", "cronjobs", "/spec/jobTemplate/spec/template", History::None, 4);
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

    pub fn group(self) -> &'static str {
        self.0.group
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
        resource: "rollouts",
        template: "/spec/workload/template",
        shape: Shape::PodTemplate,
        role: Role::Workload,
        history: History::ReplicaSets { revision_annotation: "rollout.example.io/revision", hash_label: "rollouts-pod-template-hash" },
        template_mutable: true,
        propagates: true,
        run_of: None,
        order: 100,
    };

    /// An `apps.kruise.io` StatefulSet: the same kind string as apps/v1's, a different kind.
    pub static KRUISE_STATEFULSET: KindDef = KindDef {
        group: "apps.kruise.io",
        versions: &["v1beta1"],
        kind: "StatefulSet",
        resource: "statefulsets",
        template: "/spec/template",
        shape: Shape::PodTemplate,
        role: Role::Workload,
        history: History::ControllerRevisions,
        template_mutable: true,
        propagates: false,
        run_of: None,
        order: 101,
    };

    pub fn with_rollout() -> &'static Registry {
        static R: LazyLock<Registry> = LazyLock::new(|| Registry::builtin().clone().with(&ROLLOUT).expect("one Rollout"));
        &R
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
}
