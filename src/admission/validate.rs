//! Validation of the final object (SPEC §6.3): in rewrite and enforce mode, a workload whose
//! changed template still names a mutable, versioned ConfigMap is refused.

use std::collections::BTreeSet;

use serde_json::Value;

use super::review::Request;
use super::workload::{admissible, is_undo, made_by_cronjob};
use super::{Decision, Outcome, Reason, View};
use crate::model::json::At;
use crate::model::meta::Meta;
use crate::model::names;
use crate::model::policy::Mode;
use crate::model::template::{self, Kind};

pub fn decide(req: &Request, view: &View) -> Outcome {
    let (mode, a) = match admissible(req, view) {
        Ok(x) => x,
        Err(reason) => return Outcome::Done(Decision::allow(reason)),
    };
    let (kind, obj) = (a.kind, req.object());
    if !a.changed {
        return Outcome::Done(Decision::allow(Reason::Unchanged));
    }
    if is_undo(req, &a, &template::template_hash(a.template), view) {
        // An emergency rollback must go through.
        return Outcome::Done(Decision::allow(Reason::Undo));
    }
    let wanted: BTreeSet<&str> = a.refs.iter().map(|r| r.r.name.as_str()).filter(|n| *n != names::ROOT_CA).collect();
    if wanted.iter().any(|n| !view.fresh.contains_key(*n) && !view.failed.contains_key(*n)) {
        return Outcome::Fetch(wanted.into_iter().filter(|n| !view.failed.contains_key(*n)).map(str::to_owned).collect());
    }
    // Audit mode and a CronJob's Jobs only ever warn: what could not be read is a warning too.
    let lenient = mode == Mode::Audit || (kind == Kind::Job && made_by_cronjob(&req.namespace, obj, a.template, view));
    let failures: Vec<&super::Failure> = wanted.iter().filter_map(|n| view.failed.get(*n)).collect();
    if let (Some(failure), false) = (failures.first(), lenient) {
        return Outcome::Done(Decision { response: failure.denial.clone(), reason: Reason::ApiError, ..Default::default() });
    }

    let prefix = kind.template_pointer().trim_start_matches('/').replace('/', ".");
    let kind_name = format!("{} {}", kind.as_str(), req.name);
    let mut problems = Vec::new();
    let mut appeared = Vec::new();
    for r in &a.refs {
        let Some(Some(cm)) = view.fresh.get(&r.r.name) else { continue };
        if !cm.immutable() && view.policy.versioned(cm) {
            if mode == Mode::Rewrite && created_during_admission(cm, view.now) {
                // Created in parallel with this workload (Terraform, Pulumi, parallel scripts):
                // the mutating pass found no source to pin; repair pins it (SPEC 6.3).
                appeared.push(format!("{kind_name}: ConfigMap {} appeared while admitting; pinned shortly", r.r.name));
            } else {
                problems.push(format!("{prefix}.{} names mutable ConfigMap {}", r.r.field, r.r.name));
            }
        }
    }
    let unchecked = failures.iter().map(|f| format!("{kind_name}: not checked: could not {} ({})", f.what, f.cause));
    if problems.is_empty() {
        let mut d = Decision::allow(if appeared.is_empty() { Reason::Valid } else { Reason::Appeared });
        appeared.into_iter().chain(unchecked).for_each(|w| d.response.warn(w));
        return Outcome::Done(d);
    }
    let fix = "a rollback could not restore its content. Fix: use an immutable ConfigMap (e.g. kustomize configMapGenerator), \
               let confighistory pin it (namespace mode rewrite), or annotate the ConfigMap confighistory.io/versioned=false";
    if lenient {
        let mut d = Decision::allow(Reason::Audit);
        for p in &problems {
            d.response.warn(format!("{kind_name}: {p}"));
        }
        unchecked.for_each(|w| d.response.warn(w));
        return Outcome::Done(d);
    }
    Outcome::Done(Decision::deny(Reason::MutableConfig, 403, format!("{kind_name}: {}; {fix}", problems.join("; "))))
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
