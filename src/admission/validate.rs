//! Validation of the final object (docs/behaviour.md §6.3): in rewrite and enforce mode, a workload whose
//! changed template still names a mutable, versioned ConfigMap is refused.
//!
//! [`decide`] is early exits (what 6.3 never looks at, and what it never denies before anything
//! is read: objects being deleted, unchanged templates, undos), the facts of the references read
//! fresh, [`choose`] (the rule of 6.3 that decides, first match wins) and the response.

use std::collections::BTreeSet;

use serde_json::Value;

use super::review::Request;
use super::workload::{admissible, is_undo, made_by_cronjob, SourcedRef};
use super::{Decision, Failure, Outcome, Reason, View};
use crate::model::ids::SourceId;
use crate::model::json::At;
use crate::model::meta::Meta;
use crate::model::policy::Mode;
use crate::model::source;

/// The rule of docs/behaviour.md §6.3 that decides a changed template once its sources are read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Choice {
    /// Nothing names an existing, mutable, versioned ConfigMap.
    Valid,
    /// Rewrite mode: the only mutable ones were created while the request was being admitted
    /// (tools that create objects in parallel): allowed with a warning, propagation pins them.
    ParallelCreator,
    /// Audit mode: allowed, with the denial's text as warnings.
    AuditWarns,
    /// A Job made by a CronJob: warned instead, so a CronJob from before the install keeps running.
    CronJobRunWarned,
    /// Rewrite and enforce mode: denied.
    Denied,
}

/// What [`choose`] looks at: all of it known before choosing, nothing read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Facts {
    pub mode: Mode,
    /// The request is a Job made by a CronJob of its namespace ([`made_by_cronjob`]).
    pub cronjob_run: bool,
    /// Some reference names an existing, mutable, versioned ConfigMap created before this admission.
    pub mutable: bool,
    /// Some reference names one created while this request was being admitted.
    pub created_while_admitting: bool,
}

impl Facts {
    /// Audit mode and a CronJob's Jobs only ever warn (what could not be read, too).
    pub fn only_warns(&self) -> bool {
        self.mode == Mode::Audit || self.cronjob_run
    }
}

/// The rule of docs/behaviour.md §6.3 that decides a changed template, first match wins.
pub fn choose(f: &Facts) -> Choice {
    // A source the mutating pass could not pin because it did not exist yet is excused in
    // rewrite mode only: enforce never rewrites, so there it is as mutable as any other.
    let refused = f.mutable || (f.created_while_admitting && f.mode != Mode::Rewrite);
    if !refused {
        return if f.created_while_admitting { Choice::ParallelCreator } else { Choice::Valid };
    }
    if f.mode == Mode::Audit {
        Choice::AuditWarns
    } else if f.cronjob_run {
        Choice::CronJobRunWarned
    } else {
        Choice::Denied
    }
}

pub fn decide(req: &Request, view: &View) -> Outcome {
    // Never denied, and nothing read: objects being deleted (and what is not ours to look at).
    let (mode, a) = match admissible(req, view) {
        Ok(x) => x,
        Err(reason) => return Outcome::Done(Decision::allow(reason)),
    };
    if !a.changed {
        return Outcome::Done(Decision::allow(Reason::Unchanged));
    }
    if is_undo(req, &a, &a.kind.request_template_hash(a.template), view) {
        // An emergency rollback must go through.
        return Outcome::Done(Decision::allow(Reason::Undo));
    }
    let wanted: BTreeSet<&SourceId> = a.refs.iter().map(|r| &r.r.id).filter(|n| !source::is_root_ca(n)).collect();
    if wanted.iter().any(|n| !view.fresh.contains_key(*n) && !view.failed.contains_key(*n)) {
        return Outcome::Fetch(wanted.into_iter().filter(|n| !view.failed.contains_key(*n)).cloned().collect());
    }
    let (kind, obj) = (a.kind, req.object());
    let cronjob_run = made_by_cronjob(kind, &req.namespace, obj, a.template, view);
    let failures: Vec<&Failure> = wanted.iter().filter_map(|n| view.failed.get(*n)).collect();
    let mut facts = Facts { mode, cronjob_run, mutable: false, created_while_admitting: false };
    if let (Some(failure), false) = (failures.first(), facts.only_warns()) {
        return Outcome::Done(Decision { response: failure.denial.clone(), reason: Reason::ApiError, ..Default::default() });
    }

    // The references to existing, mutable, versioned ConfigMaps, and whether each was created
    // while admitting.
    let mutable: Vec<(&SourcedRef, bool)> = a
        .refs
        .iter()
        .filter_map(|r| match view.fresh.get(&r.r.id) {
            Some(Some(cm)) if !cm.immutable() && view.versioned(&r.r.id, cm) => Some((r, created_during_admission(cm, view.now))),
            _ => None,
        })
        .collect();
    facts.mutable = mutable.iter().any(|(_, recent)| !recent);
    facts.created_while_admitting = mutable.iter().any(|(_, recent)| *recent);

    let prefix = kind.template_pointer().trim_start_matches('/').replace('/', ".");
    // What a denial names: in rewrite mode a parallel creator's source is excused (see choose).
    let problems: Vec<String> = mutable
        .iter()
        .filter(|(_, recent)| !(mode == Mode::Rewrite && *recent))
        .map(|(r, _)| format!("{prefix}.{} names mutable {} {}", r.r.field(), r.r.id.kind_str(), r.r.id))
        .collect();
    let appeared: Vec<&SourceId> = mutable.iter().filter(|(_, recent)| *recent).map(|(r, _)| &r.r.id).collect();
    let kind_name = format!("{} {}", kind.as_str(), req.name);
    let mut d = respond(choose(&facts), &kind_name, &problems, &appeared);
    if d.response.allowed {
        for f in failures {
            d.response.warn(format!("{kind_name}: not checked: could not {} ({})", f.what, f.cause));
        }
        unversioned_warnings(&a.refs, view, &mut d);
    }
    Outcome::Done(d)
}

/// Named ConfigMaps at most in the warnings about unversioned sources; the rest are counted.
const UNVERSIONED_NAMED: usize = 3;

/// A reference to a source that is not versioned (its `versioned: "false"`
/// annotation, the admin's selector) is allowed in every mode, with a short warning
/// (docs/how-it-works.md, modes and opt-outs): once per
/// source, however many references name it, a few per response.
fn unversioned_warnings(refs: &[SourcedRef], view: &View, d: &mut Decision) {
    let names: BTreeSet<&SourceId> = refs
        .iter()
        .map(|r| &r.r.id)
        .filter(|n| matches!(view.fresh.get(*n), Some(Some(cm)) if !cm.immutable() && !view.versioned(n, cm) && !view.never_source(n, cm)))
        .collect();
    for id in names.iter().take(UNVERSIONED_NAMED) {
        d.response.warn(format!("{} {id} is not versioned: a rollback keeps its current content", id.kind_str()));
    }
    if names.len() > UNVERSIONED_NAMED {
        d.response.warn(format!("{} more ConfigMaps are not versioned", names.len() - UNVERSIONED_NAMED));
    }
}

/// The answer for a choice: its reason, and the warnings or the denial naming each reference
/// (`problems`: mutable references as field paths; `appeared`: a parallel creator's sources).
fn respond(choice: Choice, kind_name: &str, problems: &[String], appeared: &[&SourceId]) -> Decision {
    match choice {
        Choice::Valid => Decision::allow(Reason::Valid),
        Choice::ParallelCreator => {
            let mut d = Decision::allow(Reason::Appeared);
            for id in appeared {
                d.response.warn(format!("{kind_name}: {} {id} appeared while admitting; pinned shortly", id.kind_str()));
            }
            d
        }
        Choice::AuditWarns | Choice::CronJobRunWarned => {
            let mut d = Decision::allow(Reason::Audit);
            for p in problems {
                d.response.warn(format!("{kind_name}: {p}"));
            }
            d
        }
        Choice::Denied => {
            // The problems name each reference's kind (`mutable ConfigMap x`, `mutable Secret y`).
            let fix = "a rollback could not restore its content. Fix: use an immutable ConfigMap or Secret (e.g. kustomize \
                       configMapGenerator or secretGenerator), let confighistory pin it (namespace mode rewrite), or annotate it \
                       confighistory.io/versioned=false";
            Decision::deny(Reason::MutableConfig, 403, format!("{kind_name}: {}; {fix}", problems.join("; ")))
        }
    }
}

/// How long an admission chain can take (the API server's webhook timeouts add up to at most
/// 30 s): a source created within it, either side of our clock, may postdate the mutating pass.
const ADMISSION_CHAIN: i64 = 30_000;

/// Whether a ConfigMap was created so recently that the mutating pass of the request being
/// validated may have run before it existed.
fn created_during_admission(cm: &Value, now: &str) -> bool {
    let ms = |t: &str| t.parse::<k8s_openapi::jiff::Timestamp>().ok().map(|t| t.as_millisecond());
    let created = cm.at("/metadata/creationTimestamp").and_then(Value::as_str).and_then(ms);
    // creationTimestamp has whole seconds: up to a second older than the real time.
    matches!((created, ms(now)), (Some(c), Some(n)) if (n - c).abs() <= ADMISSION_CHAIN + 1_000)
}

#[cfg(test)]
mod tests {
    use crate::cache::Writer;
    use serde_json::json;

    use super::*;
    use crate::admission::review::{GroupVersionKind, Operation};
    use crate::admission::{Failed, Fresh};
    use crate::cache::State;
    use crate::model::kinds::Kind;
    use crate::model::names;
    use crate::model::policy::Policy;

    const NOW: &str = "2026-12-03T12:00:00Z";

    fn template(image: &str) -> Value {
        json!({"metadata": {"labels": {"app": "app"}},
               "spec": {"containers": [{"name": "app", "image": image, "envFrom": [{"configMapRef": {"name": "cfg"}}]}]}})
    }

    fn deployment(image: &str) -> Value {
        json!({"metadata": {"name": "app", "namespace": "ns", "uid": "uid-app"}, "spec": {"template": template(image)}})
    }

    /// The source as read fresh: mutable and versioned unless `extra` says otherwise.
    fn cfg(created: &str, extra: Value) -> Value {
        let mut cm = json!({"metadata": {"name": "cfg", "namespace": "ns", "creationTimestamp": created}, "data": {"k": "v"}});
        json_patch::merge(&mut cm, &extra);
        cm
    }

    fn request(kind: &str, operation: Operation, object: Value, old: Option<Value>) -> Request {
        let name = object["metadata"]["name"].as_str().unwrap_or_default().to_owned();
        let group = if kind == "Job" { "batch" } else { "apps" };
        Request {
            kind: GroupVersionKind { group: group.into(), version: "v1".into(), kind: kind.into() },
            operation,
            namespace: "ns".into(),
            name,
            object: Some(object),
            old_object: old,
            ..Default::default()
        }
    }

    /// A world in `mode` where revision 1 of `app` (image 1) is a ReplicaSet, and CronJob
    /// `report` reads `cfg`.
    fn state(mode: &str) -> State {
        let mut state = State::default();
        state.apply_namespace(&json!({"metadata": {"name": "ns", "labels": {names::MODE_LABEL: mode}}}));
        let rs = json!({"metadata": {"name": "app-1", "namespace": "ns",
            "ownerReferences": [{"kind": "Deployment", "uid": "uid-app", "controller": true}]},
            "spec": {"template": template("app:1")}});
        state.apply_revision(Kind::ReplicaSet, &rs);
        let cronjob = json!({"metadata": {"name": "report", "namespace": "ns", "uid": "uid-report"},
            "spec": {"jobTemplate": {"spec": {"template": template("report:1")}}}});
        state.apply_workload(Kind::CronJob, &cronjob);
        state
    }

    /// The Job `report`'s controller makes (with the labels the Job API adds).
    fn cronjob_run() -> Value {
        let mut t = template("report:1");
        t["metadata"]["labels"]["job-name"] = json!("report-1");
        json!({"metadata": {"name": "report-1", "namespace": "ns",
            "ownerReferences": [{"kind": "CronJob", "name": "report", "uid": "uid-report", "controller": true}]},
            "spec": {"template": t}})
    }

    fn decide_in(mode: &str, req: &Request, cm: Value) -> Decision {
        let (policy, state) = (Policy::default(), state(mode));
        let fresh: Fresh = [(SourceId::configmap("cfg"), Some(cm))].into();
        let view = View { policy: &policy, state: &state, fresh: &fresh, failed: &Failed::new(), now: NOW, namespace: None };
        match decide(req, &view) {
            Outcome::Done(d) => d,
            Outcome::Fetch(f) => panic!("asked to read {f:?} with every source read"),
        }
    }

    /// One row per rule of docs/behaviour.md §6.3, through `decide`: the reason, whether it is allowed, and a
    /// text the denial or a warning must hold.
    #[test]
    fn each_rule_of_6_3_decides_its_case() {
        let long_ago = "2026-01-01T00:00:00Z";
        let mutable = cfg(long_ago, json!({}));
        let created_now = cfg("2026-12-03T11:59:58Z", json!({}));
        let create = request("Deployment", Operation::Create, deployment("app:2"), None);
        let undo = request("Deployment", Operation::Update, deployment("app:1"), Some(deployment("app:2")));
        let mut deleting = deployment("app:2");
        deleting["metadata"]["deletionTimestamp"] = json!(long_ago);
        let deleting = request("Deployment", Operation::Update, deleting, Some(deployment("app:3")));
        let job = request("Job", Operation::Create, cronjob_run(), None);
        let mut forged = cronjob_run();
        forged["metadata"]["ownerReferences"][0]["uid"] = json!("uid-other");
        let forged = request("Job", Operation::Create, forged, None);
        let mutable_config = "spec.template.spec.containers[0].envFrom[0].configMapRef.name names mutable ConfigMap cfg";
        #[rustfmt::skip]
        let rows: Vec<(&str, &str, &Request, Value, Reason, bool, &str)> = vec![
            ("rewrite: a mutable reference is denied", "rewrite", &create, mutable.clone(),
                Reason::MutableConfig, false, mutable_config),
            ("enforce: a mutable reference is denied", "enforce", &create, mutable.clone(),
                Reason::MutableConfig, false, "Fix: use an immutable ConfigMap"),
            ("rewrite: a parallel creator's source is allowed with a warning", "rewrite", &create, created_now.clone(),
                Reason::Appeared, true, "ConfigMap cfg appeared while admitting; pinned shortly"),
            ("enforce: a parallel creator's source is denied", "enforce", &create, created_now.clone(),
                Reason::MutableConfig, false, mutable_config),
            ("an undo is never denied", "enforce", &undo, mutable.clone(),
                Reason::Undo, true, ""),
            ("an object being deleted is never denied", "enforce", &deleting, mutable.clone(),
                Reason::Deleting, true, ""),
            ("a CronJob's Job is warned", "enforce", &job, mutable.clone(),
                Reason::Audit, true, "Job report-1: spec.template.spec.containers[0].envFrom[0].configMapRef.name names mutable ConfigMap cfg"),
            ("a Job claiming another CronJob is not its run", "enforce", &forged, mutable.clone(),
                Reason::MutableConfig, false, mutable_config),
            ("audit warns", "audit", &create, mutable.clone(),
                Reason::Audit, true, mutable_config),
            ("an immutable source is valid", "enforce", &create, cfg(long_ago, json!({"immutable": true})),
                Reason::Valid, true, ""),
            ("an unversioned source is valid, with a warning", "enforce", &create, cfg(long_ago, json!({"metadata": {"annotations": {names::VERSIONED: "false"}}})),
                Reason::Valid, true, "ConfigMap cfg is not versioned"),
        ];
        for (rule, mode, req, cm, reason, allowed, text) in rows {
            let d = decide_in(mode, req, cm);
            assert_eq!((d.reason, d.response.allowed), (reason, allowed), "{rule}: {:?}", d.response);
            let said = if allowed { d.response.warnings.join("\n") } else { d.response.message.clone().unwrap_or_default() };
            assert!(said.contains(text), "{rule}: {said:?} does not say {text:?}");
            assert_eq!(said.is_empty(), text.is_empty(), "{rule}: {said:?}");
            if !allowed {
                assert_eq!(d.response.code, Some(403), "{rule}");
            }
        }
    }

    /// A registered kind (another group, its template elsewhere, ReplicaSet history with its own
    /// revision annotation and hash label) is decided as a Deployment is, case for case.
    #[test]
    fn a_registered_workload_kind_is_decided_as_a_deployment() {
        use crate::model::kinds::tests::{with_rollout, ROLLOUT};
        let rollout = |image: &str| {
            json!({"apiVersion": "example.io/v1alpha1", "kind": "Rollout",
                   "metadata": {"name": "app", "namespace": "ns", "uid": "uid-app"}, "spec": {"workload": {"template": template(image)}}})
        };
        let as_rollout = |mut req: Request| {
            req.kind = GroupVersionKind { group: ROLLOUT.group.into(), version: "v1alpha1".into(), kind: ROLLOUT.kind.into() };
            let moved = |o: &Value| rollout(o.pointer("/spec/template/spec/containers/0/image").and_then(Value::as_str).unwrap());
            req.object = req.object.as_ref().map(moved);
            req.old_object = req.old_object.as_ref().map(moved);
            req
        };
        // Revision 1 of the Rollout: numbered and labelled its own way.
        let mut rs_template = template("app:1");
        rs_template["metadata"]["labels"]["rollouts-pod-template-hash"] = json!("5d8f");
        let rs = json!({"metadata": {"name": "app-5d8f", "namespace": "ns", "annotations": {"rollout.example.io/revision": "1"},
            "ownerReferences": [{"apiVersion": "example.io/v1alpha1", "kind": "Rollout", "uid": "uid-app", "controller": true}]},
            "spec": {"template": rs_template}});
        let long_ago = "2026-01-01T00:00:00Z";
        let create = request("Deployment", Operation::Create, deployment("app:2"), None);
        let undo = request("Deployment", Operation::Update, deployment("app:1"), Some(deployment("app:2")));
        let update = request("Deployment", Operation::Update, deployment("app:3"), Some(deployment("app:2")));
        let cases = [
            ("rewrite", &create, cfg(long_ago, json!({}))),
            ("enforce", &undo, cfg(long_ago, json!({}))),
            ("enforce", &update, cfg(long_ago, json!({}))),
            ("audit", &update, cfg(long_ago, json!({}))),
            ("rewrite", &create, cfg("2026-12-03T11:59:58Z", json!({}))),
            ("enforce", &create, cfg(long_ago, json!({"immutable": true}))),
        ];
        let policy = Policy::default();
        for (i, (mode, req, cm)) in cases.into_iter().enumerate() {
            let fresh: Fresh = [(SourceId::configmap("cfg"), Some(cm))].into();
            let deployment = decide_in(mode, req, fresh[&SourceId::configmap("cfg")].clone().unwrap());
            let mut state = state(mode);
            state.set_kinds(with_rollout());
            state.apply_revision(Kind::ReplicaSet, &rs);
            let view = View { policy: &policy, state: &state, fresh: &fresh, failed: &Failed::new(), now: NOW, namespace: None };
            let Outcome::Done(rollout) = decide(&as_rollout(req.clone()), &view) else { panic!("case {i}: asked to read") };
            assert_eq!((rollout.reason, rollout.response.allowed), (deployment.reason, deployment.response.allowed), "case {i}");
            let said = |d: &Decision| format!("{:?} {:?}", d.response.message, d.response.warnings);
            let as_said_of_a_rollout =
                said(&deployment).replace("spec.template", "spec.workload.template").replace("Deployment app", "Rollout app");
            assert_eq!(said(&rollout), as_said_of_a_rollout, "case {i}");
        }
        // Without the registration, the same request is a kind confighistory does not handle.
        let state = state("enforce");
        let fresh = Fresh::new();
        let view = View { policy: &policy, state: &state, fresh: &fresh, failed: &Failed::new(), now: NOW, namespace: None };
        let Outcome::Done(d) = decide(&as_rollout(create.clone()), &view) else { panic!("asked to read") };
        assert_eq!(d.reason, Reason::UnhandledKind);
    }

    /// The choice alone, first match wins, where rules meet.
    #[test]
    fn the_first_matching_rule_wins() {
        let f = |mode, cronjob_run, mutable, created_while_admitting| Facts { mode, cronjob_run, mutable, created_while_admitting };
        #[rustfmt::skip]
        let rows = [
            ("nothing mutable", f(Mode::Enforce, false, false, false), Choice::Valid),
            ("parallel creator, rewrite", f(Mode::Rewrite, false, false, true), Choice::ParallelCreator),
            ("parallel creator beside an older mutable source", f(Mode::Rewrite, false, true, true), Choice::Denied),
            ("parallel creator, enforce", f(Mode::Enforce, false, false, true), Choice::Denied),
            ("parallel creator, audit", f(Mode::Audit, false, false, true), Choice::AuditWarns),
            ("audit, a CronJob's run", f(Mode::Audit, true, true, false), Choice::AuditWarns),
            ("a CronJob's run, rewrite", f(Mode::Rewrite, true, true, false), Choice::CronJobRunWarned),
            ("a CronJob's run, nothing mutable", f(Mode::Enforce, true, false, false), Choice::Valid),
            ("rewrite", f(Mode::Rewrite, false, true, false), Choice::Denied),
            ("enforce", f(Mode::Enforce, false, true, false), Choice::Denied),
        ];
        for (rule, facts, want) in rows {
            assert_eq!(choose(&facts), want, "{rule}");
        }
    }
}
