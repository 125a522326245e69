//! Workload admission (docs/behaviour.md §6.2): pin every ConfigMap reference of a pod template to a
//! snapshot, deciding per source.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

use serde_json::Value;

use super::review::{Operation, Request};
use super::{annotation, annotation_ops, Decision, Effect, Outcome, Reason, Rewrite, Target, View};
use crate::model::ids::SourceId;
use crate::model::json::At;
use crate::model::keys::KeyId;
use crate::model::kinds;
use crate::model::kinds::Kind;
use crate::model::meta::Meta;
use crate::model::names;
use crate::model::policy::Mode;
use crate::model::secret::{self, SecretContent};
use crate::model::snapshot::{self, Content, Origin};
use crate::model::source::{self, hold_stands, Holds};
use crate::model::sourcekinds::Naming;
use crate::model::template::{self, Ref};

/// A reference with the source it belongs to.
#[derive(Clone, Debug)]
pub struct SourcedRef {
    pub r: Ref,
    pub source: SourceId,
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
    pub old_pins: BTreeMap<SourceId, (String, String)>,
    /// The template counts as changed (docs/behaviour.md §6.2 "what counts as a change").
    pub changed: bool,
}

/// Groups references by source and decides whether the template changed.
pub fn analyze<'a>(req: &'a Request, kind: Kind, view: &View) -> Option<Analysis<'a>> {
    let template = req.object().at(kind.template_pointer())?;
    let old_template = req.old_object.as_ref().and_then(|o| o.at(kind.template_pointer()));
    let ns = req.namespace.as_str();
    let sourced = |r: Ref| match view.snapshot_of(ns, &r.id) {
        Some((source, hash)) => SourcedRef { r, source, hash: Some(hash) },
        None => SourcedRef { source: r.id.clone(), r, hash: None },
    };
    let kinds = view.source_kinds(ns);
    let refs: Vec<SourcedRef> = template::refs(template, kinds).into_iter().map(sourced).collect();
    let mut old_pins = BTreeMap::new();
    for r in old_template.map(|t| template::refs(t, kinds)).unwrap_or_default().into_iter().map(sourced) {
        if let Some(hash) = r.hash {
            old_pins.entry(r.source).or_insert((r.r.id.name, hash));
        }
    }
    // The request's template with plain names replaced by oldObject's pins, compared with
    // oldObject's template without building it (this runs on every workload write: no copy).
    let mut pinning = Pinning::default();
    for r in &refs {
        if let (None, Some((pin, _))) = (&r.hash, old_pins.get(&r.source)) {
            pinning.at.insert(r.r.pointer.as_str(), pin.as_str());
            pinning.names.insert(r.r.id.name.as_str());
        }
    }
    // A Job's references cannot change after its creation (`KindDef::template_mutable`): its UPDATE
    // (a suspended Job's scheduling directives) changes no config, so it keeps its pins as an
    // unchanged template does, and is neither re-pinned (the API server refuses that) nor denied.
    let changed = req.operation == Operation::Create
        || (kind.template_mutable() && old_template.is_none_or(|old| !pinning.same(template, old, &mut String::new())));
    Some(Analysis { kind, namespace: ns, template, old_template, refs, old_pins, changed })
}

/// Names that look like snapshot names but are not in the cache: read fresh with the sources,
/// so that [`View::snapshot_of`] can tell a new snapshot from a source with such a name.
fn unseen_snapshot_names<'a>(a: &'a Analysis, view: &'a View) -> impl Iterator<Item = &'a SourceId> {
    a.refs.iter().filter(|r| r.hash.is_some() && view.state.source(a.namespace, &r.r.id).is_none()).map(|r| &r.r.id)
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
                // Null members and `$patch` markers are no content (docs/behaviour.md §6.2.0), as
                // for the template hash, which reads the parts no rule reads (`model::fold`).
                let content = |(k, v): &(&String, &Value)| !v.is_null() && k.as_str() != "$patch";
                let mut members = 0;
                n.iter().filter(content).all(|(k, v)| {
                    members += 1;
                    o.get(k).filter(|w| !w.is_null()).is_some_and(|w| {
                        let len = path.len();
                        path.push('/');
                        // Keys almost never need escaping: copy them whole when they don't.
                        if k.bytes().any(|b| b == b'~' || b == b'/') {
                            path.push_str(&crate::model::json::escape(k));
                        } else {
                            path.push_str(k);
                        }
                        let same = self.same(v, w, path);
                        path.truncate(len);
                        same
                    })
                }) && o.iter().filter(content).count() == members
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

/// The pod labels the Job API adds to a Job's template: a CronJob's template has none of them.
const RUN_LABELS: [&str; 4] = ["controller-uid", "job-name", "batch.kubernetes.io/controller-uid", "batch.kubernetes.io/job-name"];

/// Whether a workload is a run of another (a Job made by a CronJob: its references are the
/// CronJob's business): its kind is a run of some kind ([`KindDef::run_of`]), its controller is
/// one of that kind in its namespace that exists with that uid, and its pod template is that
/// workload's (less the labels the Job API adds). An owner reference alone is the request's
/// word, which anyone who may create Jobs can write.
///
/// [`KindDef::run_of`]: crate::model::kinds::KindDef::run_of
pub fn made_by_cronjob(kind: Kind, ns: &str, obj: &Value, template: &Value, view: &View) -> bool {
    let Some((group, maker)) = kind.def().run_of else { return false };
    let Some(maker) = view.state.kinds().workload(group, maker) else { return false };
    let Some(owner) = obj.at("/metadata/ownerReferences").and_then(Value::as_array).and_then(|o| {
        o.iter().find(|o| {
            // The uid below identifies the owner; an apiVersion, when given, must be its group's.
            let api_version = o.get("apiVersion").and_then(Value::as_str);
            o.get("controller").and_then(Value::as_bool) == Some(true)
                && o.get("kind").and_then(Value::as_str) == Some(maker.as_str())
                && api_version.is_none_or(|v| kinds::group_of(v) == maker.group())
        })
    }) else {
        return false;
    };
    let (name, uid) = (owner["name"].as_str().unwrap_or_default(), owner["uid"].as_str().unwrap_or_default());
    let Some(cronjob) = view.state.workload(&(maker, ns.into(), name.into())) else { return false };
    !uid.is_empty() && cronjob.uid == uid && cronjob.template_hash == maker.request_template_hash_less_labels(template, &RUN_LABELS)
}

/// What every workload endpoint checks first: a kind we handle, a main-resource CREATE or
/// UPDATE, an object not being deleted. Returns the kind, the namespace's mode and the analysis,
/// or why the request is allowed as it is.
pub fn admissible<'a>(req: &'a Request, view: &View) -> Result<(Mode, Analysis<'a>), Reason> {
    let Some(kind) = view.state.kinds().workload(&req.kind.group, &req.kind.kind) else {
        return Err(Reason::UnhandledKind);
    };
    if req.sub_resource.as_deref().is_some_and(|s| !s.is_empty()) || !matches!(req.operation, Operation::Create | Operation::Update) {
        return Err(Reason::NotIntercepted);
    }
    let obj = req.object();
    if obj.deleting() {
        return Err(Reason::Deleting);
    }
    let mode = super::acting_mode(req, view)?;
    // The ignore annotation is honoured in rewrite and audit mode, never in enforce mode.
    if mode != Mode::Enforce && crate::model::policy::ignored(obj) {
        return Err(Reason::Mode);
    }
    let analysis = analyze(req, kind, view).ok_or(Reason::NoTemplate)?;
    Ok((mode, analysis))
}

/// A workload without a pod template where its kind keeps one: allowed as it is. A registered
/// kind's creation says so once (docs/behaviour.md §4b: an Argo Rollout with `spec.workloadRef`
/// keeps its template in a Deployment, which is pinned as Deployments are).
fn no_template(req: &Request, view: &View) -> Decision {
    let mut d = Decision::allow(Reason::NoTemplate);
    let kind = view.state.kinds().workload(&req.kind.group, &req.kind.kind);
    if let Some(kind) = kind.filter(|k| !k.is_builtin() && req.operation == Operation::Create) {
        let path = kind.template_pointer().trim_start_matches('/').replace('/', ".");
        d.response.warnings.push(format!(
            "confighistory: {} {} has no pod template at {path} (a template kept in another object, such as a Rollout's spec.workloadRef, is pinned there): nothing in it is pinned",
            kind.as_str(),
            req.name
        ));
    }
    d
}

/// Whether a changed template is an undo: it equals one of this workload's revisions (docs/behaviour.md
/// §6.2.1). An undo changes the template; the propagation trigger (metadata only) does not, even
/// though the unchanged template is, of course, one of the workload's revisions. Recognised from
/// the caches alone, before any read, so that nothing the API server does can deny it.
pub fn is_undo(req: &Request, a: &Analysis, template_hash: &str, view: &View) -> bool {
    let uid = req.object().at("/metadata/uid").and_then(Value::as_str).unwrap_or_default();
    a.changed && req.operation == Operation::Update && view.state.is_revision_of(a.namespace, uid, template_hash)
}

/// A Job made by a CronJob: the CronJob's run, whose template was admitted with the CronJob.
fn is_cronjob_run(a: &Analysis, obj: &Value, view: &View) -> bool {
    made_by_cronjob(a.kind, a.namespace, obj, a.template, view)
}

/// Whether a workload request must never be denied, whatever happens while deciding it (the
/// API server fails, the server's own deadline passes): an undo, or a CronJob's run.
pub fn never_denied(req: &Request, view: &View) -> bool {
    admissible(req, view)
        .is_ok_and(|(_, a)| is_cronjob_run(&a, req.object(), view) || is_undo(req, &a, &a.kind.request_template_hash(a.template), view))
}

/// Which rule of docs/behaviour.md §6.2 decides one versioned source of a changed template (first match wins),
/// and where its references go: a snapshot to keep, or the head.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Choice {
    /// 6.2 rule 1, undo: snapshot references are kept exactly.
    UndoKeeps { name: String, hash: String },
    /// Rule 1, a plain reference while the source has a change this workload has not taken (a
    /// release re-applying old manifests with new config): rule 2, the head.
    UndoTakesNewConfig,
    /// Rule 1, a plain reference: the snapshot whose adoption record names this template.
    UndoAdopted { name: String, hash: String },
    /// Rule 1, a plain reference with neither: the head, with a warning.
    UndoPredates,
    /// Rule 2, release: the source is named plainly → the head.
    Release,
    /// §7, the propagation trigger names the source and its pin is not held → the head.
    Propagate,
    /// §7, the trigger does not name the source, or its pin is held → keep.
    PropagationKeeps { name: String, hash: String },
    /// Rule 3, a snapshot chosen by the request → keep (held when not the head).
    Chosen { name: String, hash: String },
    /// Rule 4, a snapshot carried over while the source has a change waiting for propagation and
    /// the pin is not held → the head, joining that change.
    JoinsPendingChange,
    /// Rule 4, a snapshot carried over → keep.
    CarriedOver { name: String, hash: String },
    /// A snapshot the request keeps by name that does not exist in the namespace (a workload
    /// copied from another namespace, a captured manifest re-applied after GC) → the head, made
    /// if needed, never a dangling name (docs/behaviour.md §6.2.5).
    Missing { name: String, hash: String },
}

impl Choice {
    /// The snapshot kept, or `None` for the head.
    pub fn kept(&self) -> Option<(&str, &str)> {
        match self {
            Choice::UndoKeeps { name, hash }
            | Choice::UndoAdopted { name, hash }
            | Choice::PropagationKeeps { name, hash }
            | Choice::Chosen { name, hash }
            | Choice::CarriedOver { name, hash } => Some((name, hash)),
            _ => None,
        }
    }

    /// Kept on purpose (an undo, an explicit choice): a kept pin that is not the head is held, from now.
    pub fn takes_hold(&self) -> bool {
        matches!(self, Choice::UndoKeeps { .. } | Choice::UndoAdopted { .. } | Choice::Chosen { .. })
    }
}

/// What [`choose`] looks at for one source: all of it known before choosing, nothing read.
#[derive(Clone, Debug, Default)]
pub struct Facts<'a> {
    /// The request is an undo (docs/behaviour.md §6.2.1).
    pub undo: bool,
    /// Some reference names the source plainly.
    pub plain: bool,
    /// The snapshot a reference names (name, hash), when one does.
    pub requested: Option<(&'a str, &'a str)>,
    /// The snapshot `oldObject` pins (name, hash).
    pub old_pin: Option<(&'a str, &'a str)>,
    /// The source's current content hash, read fresh.
    pub head: &'a str,
    /// The pin is held and the hold stands against this head.
    pub was_held: bool,
    /// The request is confighistory's own.
    pub own: bool,
    /// Confighistory's propagation trigger is on the request: whether it names this source.
    pub triggered: Option<bool>,
    /// The source has a change waiting for propagation (§7).
    pub pending: bool,
    /// For an undo naming the source plainly: the snapshot whose adoption record names this template.
    pub adopted: Option<(String, String)>,
}

/// The rule of docs/behaviour.md §6.2 that decides one versioned source, first match wins.
pub fn choose(f: &Facts) -> Choice {
    let keep = |(name, hash): (&str, &str)| (name.to_owned(), hash.to_owned());
    match (f.undo, f.plain, f.requested) {
        (true, false, Some(r)) => {
            let (name, hash) = keep(r);
            Choice::UndoKeeps { name, hash }
        }
        (true, _, _) if f.old_pin.is_some_and(|(_, h)| h != f.head) => Choice::UndoTakesNewConfig,
        (true, _, _) => match f.adopted.clone() {
            Some((name, hash)) => Choice::UndoAdopted { name, hash },
            None => Choice::UndoPredates,
        },
        (false, true, _) | (false, false, None) => Choice::Release,
        (false, false, Some(r)) => {
            let chosen_by_request = f.old_pin.map(|(p, _)| p) != Some(r.0);
            let (name, hash) = keep(r);
            match f.triggered {
                Some(true) if !f.was_held => Choice::Propagate,
                Some(_) => Choice::PropagationKeeps { name, hash },
                // confighistory's own update without a trigger is a reinvocation over its own
                // output (the trigger was consumed by the first pass): it joins no pending change
                // the first pass left alone, or a second pass would not be a no-op.
                None if chosen_by_request && !f.own => Choice::Chosen { name, hash },
                None if hash != f.head && f.pending && !f.was_held && !f.own => Choice::JoinsPendingChange,
                None => Choice::CarriedOver { name, hash },
            }
        }
    }
}

/// `choice`, unless it keeps a snapshot that a fresh read of this admission found missing and the
/// caches do not know (docs/behaviour.md §6.2.5): then [`Choice::Missing`].
fn missing(choice: Choice, view: &View, source: &SourceId) -> Choice {
    match choice.kept() {
        Some((name, hash)) if matches!(view.fresh.get(&source.with_name(name)), Some(None)) => {
            Choice::Missing { name: name.to_owned(), hash: hash.to_owned() }
        }
        _ => choice,
    }
}

pub fn decide(req: &Request, view: &View) -> Outcome {
    let (mode, a) = match admissible(req, view) {
        Ok(x) => x,
        Err(Reason::NoTemplate) => return Outcome::Done(no_template(req, view)),
        Err(reason) => return Outcome::Done(Decision::allow(reason)),
    };
    let obj = req.object();
    let own = req.user_info.username == view.policy.identity;
    let trigger: Option<BTreeMap<SourceId, String>> = own.then(|| annotation(obj, names::PROPAGATE).map(names::parse_trigger)).flatten();
    let old_holds = source::holds(req.old_object());

    // In every mode that acts (docs/behaviour.md §6.2): enforce and audit never rewrite a changed template, but
    // an unchanged one keeps its pins, or a re-applied manifest would un-pin (and restart) it.
    // (A Job is never re-pinned, by a trigger neither: `KindDef::template_mutable`.)
    if !a.changed && (trigger.is_none() || mode != Mode::Rewrite || !a.kind.template_mutable()) {
        return Outcome::Done(keep_pins(obj, &a, old_holds));
    }
    if mode != Mode::Rewrite {
        return Outcome::Done(Decision::allow(Reason::Mode));
    }

    let template_hash = a.kind.request_template_hash(a.template);
    let undo = is_undo(req, &a, &template_hash, view);
    let fail_open = undo || is_cronjob_run(&a, obj, view);

    // The template changed: read every source fresh (it was typically written milliseconds ago).
    let wanted: BTreeSet<&SourceId> =
        a.refs.iter().map(|r| &r.source).chain(unseen_snapshot_names(&a, view)).filter(|s| !source::is_root_ca(s)).collect();
    if wanted.iter().any(|s| !view.fresh.contains_key(*s) && !view.failed.contains_key(*s)) {
        return Outcome::Fetch(wanted.into_iter().filter(|s| !view.failed.contains_key(*s)).cloned().collect());
    }
    if !fail_open {
        if let Some(failure) = wanted.iter().find_map(|s| view.failed.get(*s)) {
            return Outcome::Done(Decision { response: failure.denial.clone(), reason: Reason::ApiError, ..Default::default() });
        }
    }

    let mut d = Decision::allow(if undo {
        Reason::Undo
    } else if trigger.is_some() {
        Reason::Propagation
    } else {
        Reason::Pinned
    });
    d.fail_open = fail_open;
    let mut out = Builder {
        d,
        pins: BTreeMap::new(),
        held: Holds::new(),
        adopt: BTreeMap::new(),
        tpl_ptr: a.kind.template_pointer(),
        namespace: a.namespace,
    };
    // The revision this release replaces, when it names sources plainly and the API server's
    // records show it as a revision of this workload (never the request's word alone): the
    // first release after an install or after audit mode records that it ran with the content
    // it is pinned to now, as adoption would (docs/behaviour.md §9.1), so an undo to it finds it.
    // Worked out once, and only when a source is released whose pin oldObject lacks: the
    // template hash of oldObject costs a hash of the whole template.
    let mut replaced: Option<Option<(String, BTreeSet<SourceId>)>> = None;
    let mut replaced_of = || -> Option<(String, BTreeSet<SourceId>)> {
        // A user's release only: confighistory's own triggers (propagation, repair) and unchanged
        // templates replace no revision.
        let old = a.old_template.filter(|_| req.operation == Operation::Update && !undo && !own && a.changed)?;
        let hash = a.kind.request_template_hash(old);
        let uid = req.object().at("/metadata/uid").and_then(Value::as_str).unwrap_or_default();
        view.state.is_revision_of(a.namespace, uid, &hash).then(|| {
            let plain: BTreeSet<SourceId> = template::refs(old, view.source_kinds(a.namespace))
                .into_iter()
                .filter(|r| view.snapshot_of(a.namespace, &r.id).is_none())
                .map(|r| r.id)
                .collect();
            (hash, plain)
        })
    };

    let mut by_source: BTreeMap<&SourceId, Vec<&SourcedRef>> = BTreeMap::new();
    for r in &a.refs {
        by_source.entry(&r.source).or_default().push(r);
    }
    for (source, refs) in by_source {
        // A snapshot named that does not exist, of a source that does not exist either (a copy
        // from another namespace, before its config): no content here to pin to (§6.2.5).
        let gone = |id: &SourceId| matches!(view.fresh.get(id), Some(None));
        if !fail_open && gone(source) {
            if let Some(r) = refs.iter().find(|r| r.hash.is_some() && gone(&r.r.id)) {
                let message = format!(
                    "{} {} names {} {}, a snapshot of {source}, and neither exists in namespace {}. \
                     Create {} {} first, or name it plainly, then apply again",
                    a.kind.name(),
                    req.name,
                    source.kind_str(),
                    r.r.id.name,
                    a.namespace,
                    source.kind_str(),
                    source.name
                );
                return Outcome::Done(Decision::deny(Reason::MissingSnapshot, 422, message));
            }
        }
        let Some(cm) = out.outside_the_rules(source, &refs, view, &old_holds, undo, trigger.as_ref()) else { continue };
        let Some((content, head)) = out.content(source, cm, view) else { continue };
        let plain = refs.iter().any(|r| r.hash.is_none());
        let old_pin = a.old_pins.get(source).map(|(n, h)| (n.as_str(), h.as_str()));
        // A hold no longer stands once the source has changed after it: that change moves the pin.
        let old_hold = old_holds.get(source).filter(|at| hold_stands(at.as_deref(), &head));
        // Repair of an undo admitted while the webhook was away (docs/behaviour.md §9 with §6.2.1): the plain
        // template is a revision from before the install, and the trigger names the snapshot
        // whose adoption record lists it. Admitting it is the undo it is; a trigger naming any
        // other content (propagation's head) takes the head.
        let undone = (plain && !undo)
            .then(|| view.state.adopted_snapshot(a.namespace, source, &template_hash))
            .flatten()
            .filter(|(_, hash)| trigger.as_ref().and_then(|t| t.get(source)) == Some(hash));
        let facts = Facts {
            undo: undo || undone.is_some(),
            plain,
            requested: refs.iter().find_map(|r| r.hash.as_deref().map(|h| (r.r.id.name.as_str(), h))),
            old_pin,
            head: &head,
            was_held: old_hold.is_some(),
            own,
            triggered: trigger.as_ref().map(|t| t.contains_key(source)),
            pending: source::pending_change(cm, &head).is_some(),
            adopted: if undo && plain { view.state.adopted_snapshot(a.namespace, source, &template_hash) } else { undone },
        };
        let choice = missing(choose(&facts), view, source);
        if choice == Choice::Release && !a.old_pins.contains_key(source) && !facts.pending {
            if let Some((old_hash, plain)) = replaced.get_or_insert_with(&mut replaced_of) {
                if plain.contains(source) && view.state.adopted_snapshot(a.namespace, source, old_hash).is_none() {
                    out.adopt.insert(source.clone(), old_hash.clone());
                }
            }
        }
        if choice.kept().is_none() && annotation(cm, names::HEAD).is_none() {
            out.d.effects.push(Effect::RecordHead { namespace: a.namespace.to_owned(), source: source.to_owned(), hash: head.clone() });
        }
        out.apply(source, &refs, &choice, (content, head), old_pin.map(|(_, h)| h), old_hold.cloned());
    }
    let Builder { mut d, pins, held, .. } = out;
    let mut want = pin_annotations(&pins, &held);
    if !own && !undo && cause_carried_over(req) {
        want.extend([(names::CHANGE_CAUSE, None), (names::CHANGE_CAUSE_OWN, None)]);
    }
    d.response.patch = annotation_ops(obj, &want);
    Outcome::Done(d)
}

/// Whether a user's update carries over, unchanged, the change-cause confighistory wrote for its
/// own revision (docs/behaviour.md §7.9): `kubernetes.io/change-cause` is as it was and still the
/// one confighistory recorded beside it. The revision this release makes would otherwise claim a
/// config change as its cause, so both are removed. An undo keeps what it brings back; a
/// change-cause the request sets or changes is the user's.
fn cause_carried_over(req: &Request) -> bool {
    if req.operation != Operation::Update {
        return false;
    }
    let cause = annotation(req.object(), names::CHANGE_CAUSE);
    cause.is_some()
        && cause == annotation(req.object(), names::CHANGE_CAUSE_OWN)
        && cause == annotation(req.old_object(), names::CHANGE_CAUSE)
}

/// An unchanged template keeps its pins (re-applied manifests send plain names) and carries the
/// annotations over from oldObject. No API call.
fn keep_pins(obj: &Value, a: &Analysis, old_holds: Holds) -> Decision {
    let tpl_ptr = a.kind.template_pointer();
    let mut d = Decision::allow(Reason::Unchanged);
    for r in &a.refs {
        if let (None, Some((pin, _))) = (&r.hash, a.old_pins.get(&r.source)) {
            d.rewrites.push(Rewrite {
                pointer: format!("{tpl_ptr}{}", r.r.pointer),
                target: Target::Name(pin.clone()),
                current: r.r.id.name.clone(),
            });
        }
    }
    let pins: BTreeMap<SourceId, String> = a.old_pins.iter().map(|(s, (_, h))| (s.clone(), h.clone())).collect();
    let held: Holds = old_holds.into_iter().filter(|(s, _)| pins.contains_key(s)).collect();
    d.response.patch = annotation_ops(obj, &pin_annotations(&pins, &held));
    d
}

/// What a snapshot of a source copies, by kind.
/// Each with who wrote it, as the stored source says (docs/behaviour.md §5.2).
enum Payload {
    ConfigMap(Content, Origin),
    /// A Secret's content and the cluster key and frame its MAC is under (the source's).
    Secret(SecretContent, KeyId, secret::Frame, Origin),
}

/// The decision being built from the choices, with the pins and holds it records.
struct Builder<'a> {
    d: Decision,
    pins: BTreeMap<SourceId, String>,
    held: Holds,
    /// Per source, the replaced revision's template hash to record on the head's snapshot.
    adopt: BTreeMap<SourceId, String>,
    tpl_ptr: &'a str,
    namespace: &'a str,
}

impl Builder<'_> {
    /// The sources no rule of 6.2 decides, handled here: the root CA bundle, a read that failed
    /// (only an undo or a CronJob's run gets that far), a source that does not exist yet, an
    /// immutable one, one that is not versioned. Returns the source as read when the rules decide it.
    fn outside_the_rules<'v>(
        &mut self,
        source: &SourceId,
        refs: &[&SourcedRef],
        view: &'v View,
        old_holds: &Holds,
        undo: bool,
        trigger: Option<&BTreeMap<SourceId, String>>,
    ) -> Option<&'v Value> {
        if source::is_root_ca(source) {
            return None;
        }
        if let Some(failure) = view.failed.get(source) {
            // Only an undo or a CronJob's Job gets here: its references stay as sent, and the
            // pins and holds they imply are recorded from the caches (repair finishes the job).
            self.d.response.warn(format!("{source}: left as sent, repair pins it: could not {} ({})", failure.what, failure.cause));
            if let Some(hash) = refs.iter().find_map(|r| r.hash.clone()) {
                let head = view.state.source(self.namespace, source).and_then(|c| c.annotation(names::HEAD));
                let was_held = old_holds.get(source).is_some_and(|at| head.is_none_or(|h| hold_stands(at.as_deref(), h)));
                if head.is_some_and(|h| h != hash) && (undo || was_held) {
                    self.held.insert(source.clone(), if undo { head.map(str::to_owned) } else { old_holds[source].clone() });
                }
                self.pins.insert(source.clone(), hash);
            }
            return None;
        }
        let Some(Some(cm)) = view.fresh.get(source) else {
            if refs.iter().any(|r| r.hash.is_none() && !r.r.optional) {
                self.d.response.warn(format!("{} {source} does not exist yet: left unpinned, pinned once it appears", source.kind_str()));
            }
            return None;
        };
        if cm.immutable() {
            return None; // already safe
        }
        if view.never_source(source, cm) {
            return None; // never a source: left exactly as it is (docs/behaviour.md §4a)
        }
        if !view.versioned(source, cm) {
            // Meant to change under running pods. Its owner opted out after workloads were
            // pinned: propagation moves them back to the plain name, once (docs/how-it-works.md), held ones
            // too: a hold stands against changes of a versioned source, and on a snapshot of
            // this one no later edit would reach the workload. The hold goes with the pin.
            if trigger.is_some_and(|t| t.contains_key(source)) {
                for r in refs.iter().filter(|r| r.hash.is_some()) {
                    self.rewrite(r, Target::Name(source.name.clone()));
                }
                self.d.response.warn(format!("{source}: no longer versioned; back on the plain name"));
            }
            return None;
        }
        Some(cm)
    }

    /// What a snapshot of the source `cm` would copy, with its head: a ConfigMap's content and
    /// hash, a Secret's content and MAC under the namespace's key (docs/behaviour.md §4a). A
    /// Secret is left as sent, with a warning that names no value, when there are no keys to name
    /// its snapshot or its data is not what the API serves.
    fn content(&mut self, source: &SourceId, cm: &Value, view: &View) -> Option<(Payload, String)> {
        if source.kind.def().naming == Naming::Hash {
            let content = Content::from_object(cm);
            let head = content.hash();
            let origin = Origin::of_source(cm, &head);
            return Some((Payload::ConfigMap(content, origin), head));
        }
        let keys = view.policy.secrets.keys.get();
        let Some(keys) = keys.as_deref() else {
            self.d.response.warn(format!("{source}: left as sent: the cluster keys Secret snapshots are named under are not loaded"));
            return None;
        };
        match SecretContent::from_object(cm) {
            Ok(content) => {
                // Under the key and frame its head was made with while that still names the
                // content (a key rotation or the v2 frame renames nothing), from the stored
                // Secret read fresh: the API server's word, never the request's.
                let named = secret::source_mac(cm, &content, self.namespace, &source.name, keys);
                let (key, frame) = (named.key.id(), named.frame);
                let origin = Origin::of_source(cm, &named.mac);
                Some((Payload::Secret(content, key, frame, origin), named.mac))
            }
            Err(e) => {
                self.d.response.warn(format!("{source}: left as sent: {e}"));
                None
            }
        }
    }

    fn rewrite(&mut self, r: &SourcedRef, target: Target) {
        self.d.rewrites.push(Rewrite { pointer: format!("{}{}", self.tpl_ptr, r.r.pointer), target, current: r.r.id.name.clone() });
    }

    /// The rewrites, snapshot write, warnings, pin and hold of one source's choice. `old_hold`:
    /// the hold oldObject records for the source, when it stands against the head.
    fn apply(
        &mut self,
        source: &SourceId,
        refs: &[&SourcedRef],
        choice: &Choice,
        (content, head): (Payload, String),
        old_pin: Option<&str>,
        old_hold: Option<Option<String>>,
    ) {
        if *choice == Choice::UndoPredates {
            self.d.response.warn(format!("{source}: this revision predates confighistory; using the current config"));
        }
        if let Choice::Missing { name, hash } = choice {
            if *hash != head {
                self.d.response.warn(format!(
                    "{source}: {name} does not exist in {}: pinned to the current {} instead (the content that name promised is not here; \
                     create {name} first to run with it)",
                    self.namespace,
                    source.kind_str()
                ));
            }
        }
        let (hash, name_for_warning) = match choice.kept() {
            None => {
                let adopted: Vec<String> = self.adopt.remove(source).into_iter().collect();
                let (namespace, id) = (self.namespace.to_owned(), source.clone());
                self.d.effects.push(match content {
                    Payload::ConfigMap(content, origin) => Effect::EnsureSnapshot { namespace, source: id, content, adopted, origin },
                    Payload::Secret(content, key, frame, origin) => {
                        Effect::EnsureSecretSnapshot { namespace, source: id, content, key, frame, adopted, origin }
                    }
                });
                // A reference that already names the snapshot made (a missing one made again,
                // §6.2.5) is left as it is: `Decision::finish` writes no operation for it.
                for r in refs {
                    self.rewrite(r, Target::Snapshot { source: source.clone(), hash: head.clone() });
                }
                let name = snapshot::name(&source.name, &head, 0);
                (head, name)
            }
            Some((name, hash)) => {
                // Nothing else may reference a snapshot chosen by name (an undo's is referenced by
                // its revision, a carried-over one by this workload): GC could be sweeping it.
                if matches!(choice, Choice::Chosen { .. }) {
                    self.d.effects.push(Effect::UseSnapshot {
                        namespace: self.namespace.to_owned(),
                        source: source.clone(),
                        name: name.to_owned(),
                    });
                }
                for r in refs.iter().filter(|r| r.r.id.name != name) {
                    self.rewrite(r, Target::Name(name.to_owned()));
                }
                if hash != head {
                    // Kept on purpose (undo, explicit choice) → held from now; carried over →
                    // stays held if it was, at the head it was taken at (a second pass over this
                    // output, read as unchanged, carries it over the same way).
                    let hold = if choice.takes_hold() { Some(Some(head.clone())) } else { old_hold };
                    match hold {
                        Some(at) => {
                            self.held.insert(source.clone(), at);
                            self.d.response.warn(format!("{source}: held on {name}, not the current config (next apply releases it)"));
                        }
                        None => self.d.response.warn(format!("{source}: stays on {name}; the current config is {head}")),
                    }
                }
                (hash.to_owned(), name.to_owned())
            }
        };
        if old_pin != Some(hash.as_str()) {
            self.d.response.warn(format!("{source}: pinned to {name_for_warning}"));
        }
        self.pins.insert(source.clone(), hash);
    }
}

fn pin_annotations(pins: &BTreeMap<SourceId, String>, held: &Holds) -> Vec<(&'static str, Option<String>)> {
    let heads: BTreeMap<&SourceId, &String> = held.iter().filter_map(|(s, h)| Some((s, h.as_ref()?))).collect();
    vec![
        (names::PINS, (!pins.is_empty()).then(|| serde_json::to_string(pins).unwrap_or_default())),
        (names::HELD, (!held.is_empty()).then(|| held.keys().map(SourceId::to_string).collect::<Vec<_>>().join(","))),
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

    fn update(new: Value, old: Value) -> Request {
        Request { operation: Operation::Update, namespace: "ns".into(), object: Some(new), old_object: Some(old), ..Default::default() }
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
        let view = View { policy: &policy, state: &state, fresh: &fresh, failed: &Failed::new(), now: "", namespace: None };
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
            let req = update(new, old);
            let a = analyze(&req, Kind::Deployment, &view).unwrap();
            assert_eq!(a.changed, changed, "case {i}");
            assert_eq!(a.changed, reference(&req, &a), "case {i}");
        }
        // Null members and `$patch` markers are no content, where rules read the template (here:
        // its env entry's `valueFrom`) as where they do not (`extra`, folded when parsed).
        let with = |v: &str, extra: Value, env: Value| {
            let mut d = deployment(v, v, extra);
            d["spec"]["template"]["spec"]["containers"][0]["env"][0]["valueFrom"]["configMapKeyRef"]["x"] = env;
            d
        };
        for (i, (new, old, changed)) in [
            (with("cfg", json!({"a": 1, "b": null}), json!(null)), with(PIN, json!({"a": 1}), json!(null)), false),
            (with("cfg", json!({"a": 1}), json!(null)), with(PIN, json!({"a": 1, "$patch": "merge"}), json!(null)), false),
            (with("cfg", json!({"a": 1}), json!(null)), with(PIN, json!({"a": 1}), json!(1)), true),
            (with("cfg", json!({"a": 1}), json!(1)), with(PIN, json!({"a": 1}), json!(null)), true),
        ]
        .into_iter()
        .enumerate()
        {
            let req = update(new, old);
            assert_eq!(analyze(&req, Kind::Deployment, &view).unwrap().changed, changed, "null case {i}");
        }
    }

    /// A registered kind created without a template at its path (an Argo Rollout with
    /// spec.workloadRef) is allowed as it is and told, once; its updates and built-ins are not.
    #[test]
    fn a_registered_kind_without_a_template_is_told_on_creation() {
        use crate::admission::review::GroupVersionKind;
        use crate::model::kinds::tests::with_rollout;
        let (policy, fresh) = (Policy::default(), Fresh::new());
        let mut state = State::default();
        state.set_kinds(with_rollout());
        let view = View { policy: &policy, state: &state, fresh: &fresh, failed: &Failed::new(), now: "", namespace: None };
        let request = |group: &str, kind: &str, operation| Request {
            kind: GroupVersionKind { group: group.into(), version: "v1alpha1".into(), kind: kind.into() },
            operation,
            name: "app".into(),
            namespace: "ns".into(),
            object: Some(
                json!({"metadata": {"name": "app", "namespace": "ns"}, "spec": {"workloadRef": {"kind": "Deployment", "name": "app"}}}),
            ),
            ..Default::default()
        };
        let warnings = |req: &Request| match decide(req, &view) {
            Outcome::Done(d) => {
                assert_eq!((d.reason, d.response.allowed, d.response.patch.len()), (Reason::NoTemplate, true, 0));
                d.response.warnings
            }
            Outcome::Fetch(f) => panic!("asked to read {f:?}"),
        };
        let created = warnings(&request("example.io", "Rollout", Operation::Create));
        assert_eq!(created.len(), 1, "{created:?}");
        assert!(created[0].contains("Rollout app has no pod template at spec.workload.template"), "{created:?}");
        assert_eq!(warnings(&request("example.io", "Rollout", Operation::Update)), Vec::<String>::new());
        assert_eq!(warnings(&request("apps", "Deployment", Operation::Create)), Vec::<String>::new());
    }

    /// One row per rule of docs/behaviour.md §6.2 (and §7's trigger), first match wins.
    #[test]
    fn each_source_is_decided_by_the_first_matching_rule() {
        let (old, new) = (("cfg-0ld", "0ld"), ("cfg-new", "new"));
        let keep = |(n, h): (&str, &str)| (n.to_owned(), h.to_owned());
        let base = Facts { head: "head", requested: Some(old), old_pin: Some(old), ..Default::default() };
        let undo = Facts { undo: true, ..base.clone() };
        let plain = Facts { plain: true, requested: None, ..base.clone() };
        let adopted = Some(keep(("cfg-adopted", "adopted")));
        #[rustfmt::skip]
        let rows: Vec<(&str, Facts, Choice, bool)> = vec![
            ("undo keeps snapshot references", Facts { requested: Some(new), ..undo.clone() },
                Choice::UndoKeeps { name: "cfg-new".into(), hash: "new".into() }, true),
            ("undo, plain, behind the head: release", Facts { plain: true, requested: None, ..undo.clone() },
                Choice::UndoTakesNewConfig, false),
            ("undo, plain, adoption record", Facts { plain: true, requested: None, old_pin: None, adopted: adopted.clone(), ..undo.clone() },
                Choice::UndoAdopted { name: "cfg-adopted".into(), hash: "adopted".into() }, true),
            ("undo, plain, on the head, adoption record", Facts { plain: true, requested: None, old_pin: Some(("cfg-head", "head")), adopted, ..undo.clone() },
                Choice::UndoAdopted { name: "cfg-adopted".into(), hash: "adopted".into() }, true),
            ("undo, plain, predates", Facts { plain: true, requested: None, old_pin: None, ..undo.clone() },
                Choice::UndoPredates, false),
            ("release", plain.clone(), Choice::Release, false),
            ("release beats a pending change and a hold", Facts { pending: true, was_held: true, requested: Some(old), ..plain.clone() },
                Choice::Release, false),
            ("propagation trigger names it", Facts { own: true, triggered: Some(true), ..base.clone() },
                Choice::Propagate, false),
            ("propagation trigger, held", Facts { own: true, triggered: Some(true), was_held: true, ..base.clone() },
                Choice::PropagationKeeps { name: "cfg-0ld".into(), hash: "0ld".into() }, false),
            ("propagation trigger names another source", Facts { own: true, triggered: Some(false), ..base.clone() },
                Choice::PropagationKeeps { name: "cfg-0ld".into(), hash: "0ld".into() }, false),
            ("chosen by the request", Facts { requested: Some(new), pending: true, ..base.clone() },
                Choice::Chosen { name: "cfg-new".into(), hash: "new".into() }, true),
            ("carried over, pending change: joins it", Facts { pending: true, ..base.clone() },
                Choice::JoinsPendingChange, false),
            ("carried over, pending change, held", Facts { pending: true, was_held: true, ..base.clone() },
                Choice::CarriedOver { name: "cfg-0ld".into(), hash: "0ld".into() }, false),
            ("carried over, own reinvocation joins nothing", Facts { pending: true, own: true, ..base.clone() },
                Choice::CarriedOver { name: "cfg-0ld".into(), hash: "0ld".into() }, false),
            ("carried over, already the head", Facts { pending: true, requested: Some(("cfg-head", "head")), old_pin: Some(("cfg-head", "head")), ..base.clone() },
                Choice::CarriedOver { name: "cfg-head".into(), hash: "head".into() }, false),
            ("carried over, nothing pending", base.clone(),
                Choice::CarriedOver { name: "cfg-0ld".into(), hash: "0ld".into() }, false),
        ];
        for (rule, facts, want, takes_hold) in rows {
            let got = choose(&facts);
            assert_eq!(got, want, "{rule}");
            assert_eq!(got.takes_hold(), takes_hold, "{rule}");
            assert_eq!(
                got.kept().is_none(),
                matches!(
                    want,
                    Choice::UndoTakesNewConfig | Choice::UndoPredates | Choice::Release | Choice::Propagate | Choice::JoinsPendingChange
                ),
                "{rule}"
            );
        }
    }
}
