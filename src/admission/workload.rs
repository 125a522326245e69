//! Workload admission (SPEC §6.2): pin every ConfigMap reference of a pod template to a
//! snapshot, deciding per source.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

use serde_json::Value;

use super::review::{Operation, Request};
use super::{annotation, annotation_ops, Decision, Effect, Outcome, Rewrite, Target, View};
use crate::model::json::At;
use crate::model::meta::Meta;
use crate::model::names;
use crate::model::policy::Mode;
use crate::model::snapshot::{self, Content};
use crate::model::source::{self, hold_stands, Holds};
use crate::model::template::{self, Kind, Ref};

/// A reference with the source it belongs to.
#[derive(Clone, Debug)]
pub struct SourcedRef {
    pub r: Ref,
    pub source: String,
    /// The snapshot hash when the reference names a snapshot; `None` for a plain name.
    pub hash: Option<String>,
}

/// The parts of a workload request every rule needs, computed once without I/O.
pub struct Analysis<'a> {
    pub kind: Kind,
    pub namespace: &'a str,
    pub template: &'a Value,
    pub old_template: Option<&'a Value>,
    pub refs: Vec<SourcedRef>,
    /// Source → (snapshot name, hash) that `oldObject` pins.
    pub old_pins: BTreeMap<String, (String, String)>,
    /// The template counts as changed (SPEC §6.2 "what counts as a change").
    pub changed: bool,
}

/// Groups references by source and decides whether the template changed.
pub fn analyze<'a>(req: &'a Request, kind: Kind, view: &View) -> Option<Analysis<'a>> {
    let template = req.object().at(kind.template_pointer())?;
    let old_template = req.old_object.as_ref().and_then(|o| o.at(kind.template_pointer()));
    let ns = req.namespace.as_str();
    let sourced = |r: Ref| match view.snapshot_of(ns, &r.name) {
        Some((source, hash)) => SourcedRef { r, source, hash: Some(hash) },
        None => SourcedRef { source: r.name.clone(), r, hash: None },
    };
    let refs: Vec<SourcedRef> = template::refs(template).into_iter().map(sourced).collect();
    let mut old_pins = BTreeMap::new();
    for r in old_template.map(template::refs).unwrap_or_default().into_iter().map(sourced) {
        if let Some(hash) = r.hash {
            old_pins.entry(r.source).or_insert((r.r.name, hash));
        }
    }
    // The request's template with plain names replaced by oldObject's pins, compared with
    // oldObject's template without building it (this runs on every workload write: no copy).
    let mut pinning = Pinning::default();
    for r in &refs {
        if let (None, Some((pin, _))) = (&r.hash, old_pins.get(&r.source)) {
            pinning.at.insert(r.r.pointer.as_str(), pin.as_str());
            pinning.names.insert(r.r.name.as_str());
        }
    }
    let changed = req.operation == Operation::Create || old_template.is_none_or(|old| !pinning.same(template, old, &mut String::new()));
    Some(Analysis { kind, namespace: ns, template, old_template, refs, old_pins, changed })
}

/// Names that look like snapshot names but are not in the cache: read fresh with the sources,
/// so that [`View::snapshot_of`] can tell a new snapshot from a source with such a name.
fn unseen_snapshot_names<'a>(a: &'a Analysis, view: &'a View) -> impl Iterator<Item = &'a str> {
    a.refs.iter().filter(|r| r.hash.is_some() && view.state.configmap(a.namespace, &r.r.name).is_none()).map(|r| r.r.name.as_str())
}

/// Plain names to read as pins: JSON pointer (relative to the template) → pin.
#[derive(Default)]
struct Pinning<'a> {
    at: BTreeMap<&'a str, &'a str>,
    /// The plain names at those pointers (only strings equal to one of them need their pointer).
    names: BTreeSet<&'a str>,
}

impl Pinning<'_> {
    /// Whether `new`, with the plain names at `self.at` replaced by their pins, equals `old`.
    /// `path` is `new`'s JSON pointer.
    fn same(&self, new: &Value, old: &Value, path: &mut String) -> bool {
        match (new, old) {
            (Value::String(n), _) if self.names.contains(n.as_str()) => match self.at.get(path.as_str()) {
                Some(pin) => old.as_str() == Some(*pin),
                None => new == old,
            },
            (Value::Object(n), Value::Object(o)) => {
                n.len() == o.len()
                    && n.iter().all(|(k, v)| {
                        o.get(k).is_some_and(|w| {
                            let len = path.len();
                            path.push('/');
                            for c in k.chars() {
                                match c {
                                    '~' => path.push_str("~0"),
                                    '/' => path.push_str("~1"),
                                    c => path.push(c),
                                }
                            }
                            let same = self.same(v, w, path);
                            path.truncate(len);
                            same
                        })
                    })
            }
            (Value::Array(n), Value::Array(o)) => {
                n.len() == o.len()
                    && n.iter().zip(o).enumerate().all(|(i, (v, w))| {
                        let len = path.len();
                        let _ = write!(path, "/{i}");
                        let same = self.same(v, w, path);
                        path.truncate(len);
                        same
                    })
            }
            _ => new == old,
        }
    }
}

/// Sources named by `confighistory.io/propagate` (`source=hash,...`).
pub fn parse_trigger(value: &str) -> BTreeSet<String> {
    value
        .split(',')
        .filter_map(|p| p.split_once('=').map(|(s, _)| s.trim().to_owned()).or(Some(p.trim().to_owned())))
        .filter(|s| !s.is_empty())
        .collect()
}

pub fn format_trigger(items: &BTreeMap<String, String>) -> String {
    items.iter().map(|(s, h)| format!("{s}={h}")).collect::<Vec<_>>().join(",")
}

/// Whether a Job was made by a CronJob (its references are the CronJob's business): its
/// controller is a CronJob of its namespace that exists with that uid, and its pod template is
/// that CronJob's (less the labels the Job API adds). An owner reference alone is the request's
/// word, which anyone who may create Jobs can write.
pub fn made_by_cronjob(ns: &str, obj: &Value, template: &Value, view: &View) -> bool {
    let Some(owner) = obj.at("/metadata/ownerReferences").and_then(Value::as_array).and_then(|o| {
        o.iter().find(|o| {
            o.get("controller").and_then(Value::as_bool) == Some(true) && o.get("kind").and_then(Value::as_str) == Some("CronJob")
        })
    }) else {
        return false;
    };
    let (name, uid) = (owner["name"].as_str().unwrap_or_default(), owner["uid"].as_str().unwrap_or_default());
    let Some(cronjob) = view.state.workloads.get(&(Kind::CronJob, ns.to_owned(), name.to_owned())) else { return false };
    let mut template = template.clone();
    if let Some(labels) = template.pointer_mut("/metadata/labels").and_then(Value::as_object_mut) {
        for added in ["controller-uid", "job-name", "batch.kubernetes.io/controller-uid", "batch.kubernetes.io/job-name"] {
            labels.remove(added);
        }
        if labels.is_empty() {
            template["metadata"].as_object_mut().map(|m| m.remove("labels"));
        }
    }
    !uid.is_empty() && cronjob.uid == uid && cronjob.template_hash == template::template_hash(&template)
}

/// What every workload endpoint checks first: a kind we handle, a main-resource CREATE or
/// UPDATE, an object not being deleted. Returns the kind, the namespace's mode and the analysis,
/// or why the request is allowed as it is.
pub fn admissible<'a>(req: &'a Request, view: &View) -> Result<(Mode, Analysis<'a>), &'static str> {
    let Some(kind) = Kind::parse(&req.kind.kind).filter(|k| k.is_workload()) else {
        return Err("unhandled-kind");
    };
    if req.sub_resource.as_deref().is_some_and(|s| !s.is_empty()) || !matches!(req.operation, Operation::Create | Operation::Update) {
        return Err("not-intercepted");
    }
    let obj = req.object();
    if obj.deleting() {
        return Err("deleting");
    }
    let mode = view.policy.namespace_mode(&req.namespace, view.state.namespace(&req.namespace)).0;
    // The ignore annotation is honoured in rewrite and audit mode, never in enforce mode.
    if mode == Mode::Off || (mode != Mode::Enforce && annotation(obj, names::IGNORE) == Some("true")) {
        return Err("mode");
    }
    let analysis = analyze(req, kind, view).ok_or("no-template")?;
    Ok((mode, analysis))
}

/// Whether a changed template is an undo: it equals one of this workload's revisions (SPEC
/// 6.2.1). An undo changes the template; the propagation trigger (metadata only) does not, even
/// though the unchanged template is, of course, one of the workload's revisions. Recognised from
/// the caches alone, before any read, so that nothing the API server does can deny it.
pub fn is_undo(req: &Request, a: &Analysis, template_hash: &str, view: &View) -> bool {
    let uid = req.object().at("/metadata/uid").and_then(Value::as_str).unwrap_or_default();
    a.changed && req.operation == Operation::Update && view.state.is_revision_of(a.namespace, uid, template_hash)
}

/// A Job made by a CronJob: the CronJob's run, whose template was admitted with the CronJob.
fn is_cronjob_run(a: &Analysis, obj: &Value, view: &View) -> bool {
    a.kind == Kind::Job && made_by_cronjob(a.namespace, obj, a.template, view)
}

/// Whether a workload request must never be denied, whatever happens while deciding it (the
/// API server fails, the server's own deadline passes): an undo, or a CronJob's run.
pub fn never_denied(req: &Request, view: &View) -> bool {
    admissible(req, view)
        .is_ok_and(|(_, a)| is_cronjob_run(&a, req.object(), view) || is_undo(req, &a, &template::template_hash(a.template), view))
}

pub fn decide(req: &Request, view: &View) -> Outcome {
    let (mode, a) = match admissible(req, view) {
        Ok(x) => x,
        Err(reason) => return Outcome::Done(Decision::allow(reason)),
    };
    let kind = a.kind;
    let obj = req.object();
    let own = req.user_info.username == view.policy.identity;
    let trigger: Option<BTreeSet<String>> = own.then(|| annotation(obj, names::PROPAGATE).map(parse_trigger)).flatten();
    let old_holds = source::holds(req.old_object());
    let tpl_ptr = kind.template_pointer();

    // In every mode that acts (SPEC 6.2): enforce and audit never rewrite a changed template, but
    // an unchanged one keeps its pins, or a re-applied manifest would un-pin (and restart) it.
    if !a.changed && (trigger.is_none() || mode != Mode::Rewrite) {
        // Unchanged template: keep the pins (re-applied manifests send plain names), carry the
        // annotations over from oldObject. No API call.
        let mut d = Decision::allow("unchanged");
        for r in &a.refs {
            if let (None, Some((pin, _))) = (&r.hash, a.old_pins.get(&r.source)) {
                d.rewrites.push(Rewrite { pointer: format!("{tpl_ptr}{}", r.r.pointer), target: Target::Name(pin.clone()) });
            }
        }
        let pins: BTreeMap<String, String> = a.old_pins.iter().map(|(s, (_, h))| (s.clone(), h.clone())).collect();
        let held: Holds = old_holds.into_iter().filter(|(s, _)| pins.contains_key(s)).collect();
        d.response.patch = annotation_ops(obj, &pin_annotations(&pins, &held));
        return Outcome::Done(d);
    }
    if mode != Mode::Rewrite {
        return Outcome::Done(Decision::allow("mode"));
    }

    let template_hash = template::template_hash(a.template);
    let undo = is_undo(req, &a, &template_hash, view);
    let fail_open = undo || is_cronjob_run(&a, obj, view);

    // The template changed: read every source fresh (it was typically written milliseconds ago).
    let wanted: BTreeSet<&str> =
        a.refs.iter().map(|r| r.source.as_str()).chain(unseen_snapshot_names(&a, view)).filter(|s| *s != names::ROOT_CA).collect();
    if wanted.iter().any(|s| !view.fresh.contains_key(*s) && !view.failed.contains_key(*s)) {
        return Outcome::Fetch(wanted.into_iter().filter(|s| !view.failed.contains_key(*s)).map(str::to_owned).collect());
    }
    if !fail_open {
        if let Some(failure) = wanted.iter().find_map(|s| view.failed.get(*s)) {
            return Outcome::Done(Decision { response: failure.denial.clone(), reason: "api-error", ..Default::default() });
        }
    }

    let mut d = Decision::allow(if undo {
        "undo"
    } else if trigger.is_some() {
        "propagation"
    } else {
        "pinned"
    });
    d.fail_open = fail_open;
    let mut pins = BTreeMap::new();
    let mut held = Holds::new();

    let mut by_source: BTreeMap<&str, Vec<&SourcedRef>> = BTreeMap::new();
    for r in &a.refs {
        by_source.entry(r.source.as_str()).or_default().push(r);
    }
    for (source, refs) in by_source {
        if source == names::ROOT_CA {
            continue;
        }
        if let Some(failure) = view.failed.get(source) {
            // Only an undo or a CronJob's Job gets here: its references stay as sent, and the
            // pins and holds they imply are recorded from the caches (repair finishes the job).
            d.response.warn(format!("{source}: left as sent, repair pins it: could not {} ({})", failure.what, failure.cause));
            if let Some(hash) = refs.iter().find_map(|r| r.hash.clone()) {
                let head = view.state.configmap(&req.namespace, source).and_then(|c| c.annotation(names::HEAD));
                let was_held = old_holds.get(source).is_some_and(|at| head.is_none_or(|h| hold_stands(at.as_deref(), h)));
                if head.is_some_and(|h| h != hash) && (undo || was_held) {
                    held.insert(source.to_owned(), if undo { head.map(str::to_owned) } else { old_holds[source].clone() });
                }
                pins.insert(source.to_owned(), hash);
            }
            continue;
        }
        let Some(Some(cm)) = view.fresh.get(source) else {
            if refs.iter().any(|r| r.hash.is_none() && !r.r.optional) {
                d.response.warn(format!("ConfigMap {source} does not exist yet: left unpinned, pinned once it appears"));
            }
            continue;
        };
        if cm.immutable() {
            continue; // already safe
        }
        if !view.policy.versioned(cm) {
            // Meant to change under running pods. Its owner opted out after workloads were
            // pinned: propagation moves the unheld ones back to the plain name, once (SPEC §7).
            let head = Content::from_object(cm).hash();
            let held = old_holds.get(source).is_some_and(|at| hold_stands(at.as_deref(), &head));
            if trigger.as_ref().is_some_and(|t| t.contains(source)) && !held {
                for r in refs.iter().filter(|r| r.hash.is_some()) {
                    d.rewrites.push(Rewrite { pointer: format!("{tpl_ptr}{}", r.r.pointer), target: Target::Name(source.to_owned()) });
                }
                d.response.warn(format!("{source}: no longer versioned; back on the plain name"));
            }
            continue;
        }
        let content = Content::from_object(cm);
        let head = content.hash();
        let plain = refs.iter().any(|r| r.hash.is_none());
        let requested = refs.iter().find_map(|r| r.hash.as_ref().map(|h| (r.r.name.clone(), h.clone())));
        let old_pin = a.old_pins.get(source);
        // A hold no longer stands once the source has changed after it: that change moves the pin.
        let was_held = old_holds.get(source).is_some_and(|at| hold_stands(at.as_deref(), &head));
        let chosen_by_request = requested.as_ref().is_some_and(|(n, _)| old_pin.map(|(p, _)| p) != Some(n));

        enum To {
            Head,
            Keep(String, String),
        }
        let to = if undo && !plain {
            let (n, h) = requested.clone().expect("not plain");
            To::Keep(n, h)
        } else if undo {
            if old_pin.is_some_and(|(_, h)| *h != head) {
                To::Head // a release re-applying old manifests with new config
            } else if let Some((n, h)) = view.state.adopted_snapshot(&req.namespace, source, &template_hash) {
                To::Keep(n, h)
            } else {
                d.response.warn(format!("{source}: this revision predates confighistory; using the current config"));
                To::Head
            }
        } else if plain {
            To::Head
        } else if let Some(t) = &trigger {
            let (n, h) = requested.clone().expect("not plain");
            if t.contains(source) && !was_held {
                To::Head
            } else {
                To::Keep(n, h)
            }
        } else if chosen_by_request && !own {
            let (n, h) = requested.clone().expect("not plain");
            To::Keep(n, h)
        } else {
            let (n, h) = requested.clone().expect("not plain");
            // confighistory's own update without a trigger is a reinvocation over its own output
            // (the trigger was consumed by the first pass): it joins no pending change the first
            // pass left alone, or a second pass would not be a no-op.
            if h != head && source::pending_change(cm, &head).is_some() && !was_held && !own {
                To::Head
            } else {
                To::Keep(n, h)
            }
        };

        let (hash, name_for_warning) = match to {
            To::Head => {
                d.effects.push(Effect::EnsureSnapshot {
                    namespace: req.namespace.clone(),
                    source: source.to_owned(),
                    content,
                    adopted: Vec::new(),
                });
                for r in &refs {
                    d.rewrites.push(Rewrite {
                        pointer: format!("{tpl_ptr}{}", r.r.pointer),
                        target: Target::Snapshot { source: source.to_owned(), hash: head.clone() },
                    });
                }
                (head.clone(), snapshot::name(source, &head, 0))
            }
            To::Keep(name, hash) => {
                for r in refs.iter().filter(|r| r.r.name != name) {
                    d.rewrites.push(Rewrite { pointer: format!("{tpl_ptr}{}", r.r.pointer), target: Target::Name(name.clone()) });
                }
                if hash != head {
                    // Kept on purpose (undo, explicit choice) → held; carried over → stays held if it was.
                    let on_purpose = undo || (chosen_by_request && !own) || was_held;
                    if on_purpose {
                        // A hold carried over keeps the head it was taken at (a second pass over
                        // this output, read as unchanged, carries it over the same way).
                        let at = if undo || (chosen_by_request && !own) { Some(head.clone()) } else { old_holds[source].clone() };
                        held.insert(source.to_owned(), at);
                        d.response.warn(format!("{source}: held on {name}, not the current config (next apply releases it)"));
                    } else {
                        d.response.warn(format!("{source}: stays on {name}; the current config is {head}"));
                    }
                }
                (hash, name)
            }
        };
        if old_pin.map(|(_, h)| h) != Some(&hash) {
            d.response.warn(format!("{source}: pinned to {name_for_warning}"));
        }
        pins.insert(source.to_owned(), hash);
    }
    d.response.patch = annotation_ops(obj, &pin_annotations(&pins, &held));
    Outcome::Done(d)
}

fn pin_annotations(pins: &BTreeMap<String, String>, held: &Holds) -> Vec<(&'static str, Option<String>)> {
    let heads: BTreeMap<&String, &String> = held.iter().filter_map(|(s, h)| Some((s, h.as_ref()?))).collect();
    vec![
        (names::PINS, (!pins.is_empty()).then(|| serde_json::to_string(pins).unwrap_or_default())),
        (names::HELD, (!held.is_empty()).then(|| held.keys().cloned().collect::<Vec<_>>().join(","))),
        (names::HELD_HEADS, (!heads.is_empty()).then(|| serde_json::to_string(&heads).unwrap_or_default())),
        // The trigger is consumed by this admission; from anyone else it is not trusted.
        (names::PROPAGATE, None),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::{Failed, Fresh};
    use crate::cache::State;
    use crate::model::policy::Policy;
    use serde_json::json;

    const PIN: &str = "cfg-0123456789ab";

    fn deployment(volume: &str, env: &str, extra: Value) -> Value {
        json!({"metadata": {"name": "app", "namespace": "ns"}, "spec": {"template": {
            "metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": "t1", "a~b": "x"}, "labels": {"app": "cfg"}},
            "spec": {"volumes": [{"name": "c", "configMap": {"name": volume}}],
                     "containers": [{"name": "app", "image": "app:1", "extra": extra,
                        "env": [{"name": "M", "valueFrom": {"configMapKeyRef": {"name": env, "key": "m"}}}]}]}}}})
    }

    /// The definition: replace the plain names by the pins in a copy, then compare.
    fn reference(req: &Request, a: &Analysis) -> bool {
        let mut normalized = a.template.clone();
        for r in &a.refs {
            if let (None, Some((pin, _))) = (&r.hash, a.old_pins.get(&r.source)) {
                *normalized.pointer_mut(&r.r.pointer).unwrap() = Value::String(pin.clone());
            }
        }
        req.operation == Operation::Create || a.old_template != Some(&normalized)
    }

    #[test]
    fn changed_matches_comparing_a_pinned_copy() {
        let (policy, state, fresh) = (Policy::default(), State::default(), Fresh::new());
        let view = View { policy: &policy, state: &state, fresh: &fresh, failed: &Failed::new(), now: "" };
        let cases = [
            (deployment("cfg", "cfg", json!(1)), deployment(PIN, PIN, json!(1)), false),
            (deployment("cfg", PIN, json!(1)), deployment(PIN, PIN, json!(1)), false),
            (deployment("cfg", "cfg", json!(2)), deployment(PIN, PIN, json!(1)), true),
            // The old template has the plain name where the new one is read as pinned.
            (deployment("cfg", "cfg", json!(1)), deployment(PIN, "cfg", json!(1)), true),
            (deployment("cfg", "cfg", json!("cfg")), deployment(PIN, PIN, json!("cfg")), false),
            (deployment("cfg", "cfg", json!(["cfg"])), deployment(PIN, PIN, json!([PIN])), true),
            (deployment("other", "cfg", json!(1)), deployment(PIN, PIN, json!(1)), true),
            (deployment("cfg", "cfg", json!(1)), deployment("cfg", "cfg", json!(1)), false),
            (deployment("cfg", "cfg", json!({"x/y": 1})), deployment(PIN, PIN, json!({"x/y": 1})), false),
        ];
        for (i, (new, old, changed)) in cases.into_iter().enumerate() {
            let req = Request {
                operation: Operation::Update,
                namespace: "ns".into(),
                object: Some(new),
                old_object: Some(old),
                ..Default::default()
            };
            let a = analyze(&req, Kind::Deployment, &view).unwrap();
            assert_eq!(a.changed, changed, "case {i}");
            assert_eq!(a.changed, reference(&req, &a), "case {i}");
        }
    }
}
