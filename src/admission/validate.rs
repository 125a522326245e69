//! Validation of the final object (SPEC §6.3): in rewrite and enforce mode, a workload whose
//! changed template still names a mutable, versioned ConfigMap is refused.

use std::collections::BTreeSet;

use serde_json::Value;

use super::review::{Operation, Request};
use super::workload::{admissible, made_by_cronjob};
use super::{annotation, labels, Decision, Outcome, View};
use crate::names;
use crate::policy::Mode;
use crate::template::{self, Kind};

pub fn decide(req: &Request, view: &View) -> Outcome {
    let (mode, a) = match admissible(req, view) {
        Ok(x) => x,
        Err(reason) => return Outcome::Done(Decision::allow(reason)),
    };
    let (kind, obj) = (a.kind, req.object());
    if !a.changed {
        return Outcome::Done(Decision::allow("unchanged"));
    }
    let uid = obj.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or_default();
    if req.operation == Operation::Update && view.state.is_revision_of(uid, &template::template_hash(a.template)) {
        // An emergency rollback must go through.
        return Outcome::Done(Decision::allow("undo"));
    }
    let wanted: BTreeSet<&str> = a.refs.iter().map(|r| r.r.name.as_str()).filter(|n| *n != names::ROOT_CA).collect();
    if wanted.iter().any(|n| !view.fresh.contains_key(*n)) {
        return Outcome::Fetch(wanted.into_iter().map(str::to_owned).collect());
    }

    let prefix = kind.template_pointer().trim_start_matches('/').replace('/', ".");
    let mut problems = Vec::new();
    for r in &a.refs {
        let Some(Some(cm)) = view.fresh.get(&r.r.name) else { continue };
        let mutable = cm.get("immutable").and_then(Value::as_bool) != Some(true);
        if mutable && view.policy.versioned(&labels(cm), annotation(cm, names::VERSIONED)) {
            problems.push(format!("{prefix}.{} names mutable ConfigMap {}", r.r.field, r.r.name));
        }
    }
    if problems.is_empty() {
        return Outcome::Done(Decision::allow("valid"));
    }
    let kind_name = format!("{} {}", kind.as_str(), req.name);
    let fix = "a rollback could not restore its content. Fix: use an immutable ConfigMap (e.g. kustomize configMapGenerator), \
               let confighistory pin it (namespace mode rewrite), or annotate the ConfigMap confighistory.io/versioned=false";
    if mode == Mode::Audit || (kind == Kind::Job && made_by_cronjob(obj)) {
        let mut d = Decision::allow("audit");
        for p in &problems {
            d.response.warn(format!("{kind_name}: {p}"));
        }
        return Outcome::Done(d);
    }
    Outcome::Done(Decision::deny("mutable-config", 403, format!("{kind_name}: {}; {fix}", problems.join("; "))))
}
