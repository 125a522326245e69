//! Source ConfigMap admission (docs/behaviour.md §6.1): track the head, warn about removed keys, and keep
//! the outgoing content for workloads that still run with it (as the API server stores it, §9a).

use serde_json::Value;

use super::review::{Operation, Request};
use super::{annotation, annotation_ops, Decision, Effect, Outcome, Reason, View};
use crate::model::ids::SourceId;
use crate::model::json::At;
use crate::model::names;
use crate::model::policy::Mode;
use crate::model::snapshot::{self, Content, ContentRef};
use crate::model::source;

/// What a source ConfigMap's request says about its content, from the request alone: the hash
/// of its content, whether that differs from `oldObject`'s, and the warnings naming the change.
/// The webhook computes it before it takes the cache ([`ContentFacts::ahead`]), so that hashing
/// and comparing a 1 MiB source never hold the cache's lock: a watch event waits for every reader
/// that holds it (docs/performance.md, "A watch writer beside admissions").
#[derive(Clone, Debug, PartialEq)]
pub struct ContentFacts {
    /// The hash of the request's content: the `head` it gets.
    pub head: String,
    /// Whether the content differs from `oldObject`'s (a CREATE: always).
    pub changed: bool,
    /// The warnings naming a changed content's keys and settings.
    pub warnings: Vec<String>,
    /// The hash of `oldObject`'s content, when it changed and workloads still read the source by
    /// its plain name: the name of the snapshot that keeps the outgoing content (§9).
    pub old_head: Option<String>,
}

impl ContentFacts {
    /// The facts of the request's content (a ConfigMap CREATE or UPDATE); the outgoing content's
    /// hash too when it changed and `outgoing()` says workloads still run with it.
    pub fn of(req: &Request, outgoing: impl FnOnce() -> bool) -> ContentFacts {
        let obj = req.object();
        let name = req.name.as_str();
        // Read where the review holds it, not copied (docs/performance.md: a 1 MiB source's old and
        // new contents were 2 MiB of copies per admission); copied only for a snapshot to write.
        let content = ContentRef::from_object(obj);
        let head = content.hash();
        // The old one as the review's JSON text, each value decoded only where it is read.
        let old_content = req.old_object.as_ref().filter(|_| req.operation == Operation::Update).map(|_| req.old_content());
        // Equal contents have equal hashes: compare the bytes rather than hash the old content too
        // (a 1 MiB source costs a millisecond per SHA-256 pass).
        let changed = old_content.as_ref().is_none_or(|o| !o.same(&content));
        let mut warnings = Vec::new();
        if let (Some(old_content), true) = (&old_content, changed) {
            let (removed, added) = snapshot::key_changes(old_content, &content);
            warnings.push(match (removed.is_empty(), added.is_empty()) {
                (true, true) => format!("{name}: values changed, same keys"),
                _ => format!("{name}: keys removed [{}], added [{}]", removed.join(", "), added.join(", ")),
            });
            warnings.extend(super::settings::warnings_from(name, old_content.data_values(), &content));
        }
        let old_head = old_content.filter(|_| changed && outgoing()).map(|o| o.owned().hash());
        ContentFacts { head, changed, warnings, old_head }
    }

    /// The facts, for a request that [`decide`] will find to be a source's by the request alone:
    /// a CREATE or UPDATE of a mutable ConfigMap carrying a `head` (or whose `oldObject` does), in
    /// a namespace the admin has not excluded. `None` for the rest, which is every other
    /// ConfigMap write of the cluster: those are never hashed (the hot path), and a source known
    /// only from the cache (its first write, after a workload named it) is hashed by [`decide`].
    /// `outgoing` as for [`ContentFacts::of`].
    pub fn ahead(req: &Request, policy: &crate::model::policy::Policy, outgoing: impl FnOnce() -> bool) -> Option<ContentFacts> {
        let intercepted =
            req.sub_resource.as_deref().is_none_or(str::is_empty) && matches!(req.operation, Operation::Create | Operation::Update);
        let obj = req.object();
        let has_head =
            annotation(obj, names::HEAD).is_some() || req.old_object.as_ref().is_some_and(|o| annotation(o, names::HEAD).is_some());
        (intercepted && has_head && !policy.excludes(&req.namespace) && source::is_tracked(&req.name, obj))
            .then(|| ContentFacts::of(req, outgoing))
    }
}

/// [`decide_with`] the content's facts computed here.
pub fn decide(req: &Request, view: &View) -> Outcome {
    decide_with(req, view, None)
}

/// The decision about a source ConfigMap's CREATE or UPDATE; `facts` are its content's, when the
/// caller computed them ([`ContentFacts::ahead`]), or computed here when needed.
pub fn decide_with(req: &Request, view: &View, facts: Option<&ContentFacts>) -> Outcome {
    if req.sub_resource.as_deref().is_some_and(|s| !s.is_empty()) || !matches!(req.operation, Operation::Create | Operation::Update) {
        return Outcome::Done(Decision::allow(Reason::NotIntercepted));
    }
    // The router sends only source kinds here.
    let Some(kind) = view.policy.acted_on().of(&req.kind.group, &req.kind.kind) else {
        return Outcome::Done(Decision::allow(Reason::UnhandledKind));
    };
    let obj = req.object();
    let name = req.name.as_str();
    let id = SourceId::new(kind, name);
    if !source::is_tracked(name, obj) {
        return Outcome::Done(Decision::allow(Reason::NotASource));
    }
    let mode = match super::acting_mode(req, view) {
        Ok(mode) => mode,
        Err(reason) => return Outcome::Done(Decision::allow(reason)),
    };
    let old = req.old_object.as_ref().filter(|_| req.operation == Operation::Update);
    let is_source = view.state.is_referenced_source(&req.namespace, &id)
        || annotation(obj, names::HEAD).is_some()
        || old.is_some_and(|o| annotation(o, names::HEAD).is_some());
    let versioned = |o: &Value| view.policy.versioned(o);
    let own = req.user_info.username == view.policy.identity;
    // confighistory's own touch of a source that never had a head (no write of it passed here
    // while a workload named it) names the head its workloads are pinned to: what the stored
    // object would say had a write recorded it (missed changes, versioning changes). Taken from
    // no one else: confighistory's annotations in a request are never trusted.
    let claimed_head = old.filter(|o| own && annotation(o, names::HEAD).is_none()).and_then(|_| annotation(obj, names::HEAD));
    // A source that stops (or starts again) being versioned is a change of its own: propagated
    // once, it moves its workloads to the plain name (back to snapshots), docs/behaviour.md §7. By its
    // annotation, its labels, or the admin's selector changed by a restart (recorded on the
    // source; the controller touches the sources it finds unrecorded).
    let excluded = &view.policy.excluded_sources;
    let was_versioned = |o: &Value| source::was_versioned(o, excluded) || claimed_head.is_some(); // workloads were pinned to it
    let versioning_changed = old.is_some_and(|o| was_versioned(o) != versioned(obj));
    // The hot path: every ConfigMap write in the cluster passes here.
    if !is_source || (!versioned(obj) && !versioning_changed) {
        return Outcome::Done(Decision::allow(Reason::NotASource));
    }

    let facts = match facts {
        Some(f) => std::borrow::Cow::Borrowed(f),
        // Under the cache: the outgoing content is hashed where `keep_outgoing` needs it.
        None => std::borrow::Cow::Owned(ContentFacts::of(req, || false)),
    };
    let head = facts.head.clone();
    // A stored head that no longer matches the content means the content changed while the
    // webhook was down: that change counts as first seen now (docs/behaviour.md §7, missed changes).
    let stale_head = old.and_then(|o| annotation(o, names::HEAD)).or(claimed_head).is_some_and(|h| h != head);
    let content_changed = facts.changed;
    let changed = stale_head || content_changed || versioning_changed;
    let mut d = Decision::allow(if changed { Reason::SourceChanged } else { Reason::Source });
    facts.warnings.iter().for_each(|w| d.response.warn(w.clone()));
    // A workload admitted in enforce mode while its ConfigMap did not exist yet, then the
    // ConfigMap created mutable: the same mutable reference validation refuses, reached the other
    // way round (docs/behaviour.md §9a). Refused in enforce mode, flagged in audit mode.
    if req.operation == Operation::Create && matches!(mode, Mode::Enforce | Mode::Audit) {
        let users = view.state.user_names(&req.namespace, &id, mode == Mode::Enforce);
        if !users.is_empty() {
            let message = format!(
                "{} {name} is mutable and {} use it by name: a rollback could not restore its content. \
                 Fix: create it with immutable: true (e.g. kustomize configMapGenerator) or annotate it {}=false",
                kind.as_str(),
                users.join(", "),
                names::VERSIONED
            );
            if mode == Mode::Enforce {
                return Outcome::Done(Decision::deny(Reason::MutableConfig, 403, message));
            }
            d.response.warn(message);
        }
    }
    // Enforce mode checks workloads, not ConfigMaps: one its workloads read by name that leaves
    // its opt-out (annotation, or labels the admin's selector stops matching) is mutable,
    // versioned config under them from now on. Allowed (enforce never blocks a config edit),
    // and said (docs/how-it-works.md says what enforce guarantees).
    if req.operation == Operation::Update && matches!(mode, Mode::Enforce | Mode::Audit) && versioning_changed && versioned(obj) {
        if let Some(first) = view.state.user_names(&req.namespace, &id, mode == Mode::Enforce).first() {
            d.response.warn(format!("{name}: now versioned and mutable, read by name by {first} (enforce checks workloads only)"));
        }
    }
    if mode != Mode::Rewrite {
        return Outcome::Done(d);
    }

    let first_pass = annotation(obj, names::HEAD) == Some(head.as_str());
    let (changed_at, propagated) = change_markers(obj, old, first_pass, changed, own, view.now);
    let recorded_out = source::excluded_by_selector(obj, excluded).then(|| "true".to_owned());
    let [by, with, unattributed] = authorship(req, old, content_changed, stale_head && !content_changed, view.policy.record_authors);
    d.response.patch = annotation_ops(
        obj,
        &[
            (names::HEAD, Some(head)),
            (names::CHANGED_AT, changed_at),
            by,
            with,
            unattributed,
            (names::PROPAGATED, propagated),
            (names::EXCLUDED, recorded_out),
        ],
    );

    // Workloads still on the plain name ran with the outgoing content: keep it, with their
    // template hashes as adoption records, so an undo to them finds it (docs/behaviour.md §9).
    if let (Some(_), true) = (old, content_changed) {
        let old_content = || Some(req.old_content().owned());
        let named = |c: &Content| (facts.old_head.clone().unwrap_or_else(|| c.hash()), ());
        if let Some(outcome) = keep_outgoing(req, view, &id, name, old, old_content, named, &mut d) {
            return outcome;
        }
    }
    Outcome::Done(d)
}

/// The content of a source kind as [`keep_outgoing`] keeps it: a ConfigMap's [`Content`], named
/// by its hash (a Secret's is kept by `admission::secret`, named from the stored object only).
pub(super) trait Outgoing: PartialEq + Sized {
    /// What names the content besides itself (nothing for a ConfigMap).
    type Key;
    /// The kind, as the log says it.
    const KIND: &'static str;
    /// What a warning calls the content.
    const WHAT: &'static str;
    /// The content of the stored object, when it has one of this kind.
    fn stored(obj: &Value) -> Option<Self>;
    /// The effect that makes sure a snapshot of it exists, listing `adopted` templates.
    /// `stored`: the source as the API server stores it, holding this content (who wrote it).
    fn ensure(self, key: Self::Key, namespace: String, source: SourceId, adopted: Vec<String>, stored: &Value) -> Effect;
}

impl Outgoing for Content {
    type Key = ();
    const KIND: &'static str = "ConfigMap";
    const WHAT: &'static str = "config";
    fn stored(obj: &Value) -> Option<Content> {
        Some(Content::from_object(obj))
    }
    fn ensure(self, _: (), namespace: String, source: SourceId, adopted: Vec<String>, stored: &Value) -> Effect {
        let origin = crate::model::snapshot::Origin::of_source(stored, &self.hash());
        Effect::EnsureSnapshot { namespace, source, content: self, adopted, origin }
    }
}

/// The outgoing content of a source whose content changed (docs/behaviour.md §9), for ConfigMaps
/// and Secrets alike: when workloads still on the plain name ran with it and no snapshot of it
/// (named by the first of `named(&old_content)`, under the key that is the second) records all
/// their templates yet, an effect keeps it, from the
/// stored object, never the request's word for it (a forged oldObject sent straight to the port
/// must not plant content). `label` names the source in warnings. `Some`: the whole answer (a
/// read to make first, or its failure).
#[allow(clippy::too_many_arguments)]
pub(super) fn keep_outgoing<C: Outgoing>(
    req: &Request,
    view: &View,
    id: &SourceId,
    label: &str,
    old: Option<&Value>,
    old_content: impl FnOnce() -> Option<C>,
    named: impl FnOnce(&C) -> (String, C::Key),
    d: &mut Decision,
) -> Option<Outcome> {
    let users = view.state.plain_users(&req.namespace, id);
    if users.is_empty() {
        return None;
    }
    // Read only now: a Secret's is decoded from base64, which costs more than its MAC.
    let old_content = old_content()?;
    let (old_name, key) = named(&old_content);
    // The source's own snapshots only (the cache's index), not every object of the cluster.
    let recorded = view
        .state
        .snapshots_of(&req.namespace, id)
        .any(|(_, cm, hash)| hash == old_name && users.iter().all(|u| source::adopted(cm).any(|a| a == u)));
    if recorded {
        return None;
    }
    if let Some(failure) = view.failed.get(id) {
        return Some(Outcome::Done(Decision { response: failure.denial.clone(), reason: Reason::ApiError, ..Default::default() }));
    }
    let Some(stored) = view.fresh.get(id) else { return Some(Outcome::Fetch(vec![id.clone()])) };
    let version = |o: &Value| o.at("/metadata/resourceVersion").and_then(Value::as_str).map(str::to_owned);
    match stored.as_ref().and_then(|s| Some((s, C::stored(s)?))) {
        Some((s, stored_content)) if version(s) == old.and_then(version) && stored_content == old_content => {
            d.effects.push(stored_content.ensure(key, req.namespace.clone(), id.clone(), users, s))
        }
        _ => {
            tracing::warn!(namespace = %req.namespace, source = label, "oldObject is not the stored {}; outgoing content not kept", C::KIND);
            d.response.warn(format!("{label}: outgoing {} not kept (the stored object is not this request's oldObject)", C::WHAT));
        }
    }
    None
}

/// A source's change markers after this request (docs/behaviour.md §6.1, §7): when its content
/// last changed, and the propagation marker, for ConfigMaps and Secrets alike. `first_pass`:
/// the request's `changed-at` may be one an earlier pass over this very change set (a ConfigMap
/// whose request carries the head of this content; a Secret whose request carries another
/// `changed-at` than `oldObject`'s).
pub(super) fn change_markers(
    obj: &Value,
    old: Option<&Value>,
    first_pass: bool,
    changed: bool,
    own: bool,
    now: &str,
) -> (Option<String>, Option<String>) {
    let changed_at = if changed {
        // A second pass over our own output (reinvocation) finds the time the first pass set, for
        // this very content: keep it, or the second pass would not be a no-op, even on another
        // replica. Only a recent time is taken from the request (a client cannot move a change
        // out of its settle window, nor delay it by more than replicas' clocks may disagree).
        let first_pass =
            first_pass.then(|| annotation(obj, names::CHANGED_AT)).flatten().filter(|t| just_before(t, now, REINVOCATION_WINDOW));
        Some(first_pass.unwrap_or(now).to_owned())
    } else {
        old.and_then(|o| annotation(o, names::CHANGED_AT)).map(str::to_owned)
    };
    // The marker belongs to one change: a new change (a revert to a content propagated before
    // included: a change is an edit, not a content, docs/behaviour.md §7) starts without it. Otherwise it is
    // carried over, and taken from the request only from the controller that records it.
    let propagated = if changed {
        None
    } else if own {
        annotation(obj, names::PROPAGATED)
    } else {
        old.and_then(|o| annotation(o, names::PROPAGATED))
    };
    (changed_at, propagated.map(str::to_owned))
}

/// Who changed a source's content, as its annotations record it after this request
/// (docs/behaviour.md §6.1.1), for ConfigMaps and Secrets alike: on a change of content, the
/// admitted request's `userInfo.username` (unless `record_authors` is off) and field manager
/// (`options.fieldManager`); on a change first seen now that no write here made (`missed`: a
/// head that names other content, written while the webhook did not see it), no one, and why;
/// otherwise what `oldObject` records, carried over. Never from the request's object: the
/// annotations it carries are the client's word.
pub(super) fn authorship(
    req: &Request,
    old: Option<&Value>,
    content_changed: bool,
    missed: bool,
    record_authors: bool,
) -> [(&'static str, Option<String>); 3] {
    let (by, with, unattributed) = if content_changed {
        let by = Some(author(&req.user_info.username)).filter(|u| record_authors && !u.is_empty());
        (by, req.field_manager.clone(), None)
    } else if missed {
        (None, None, Some(snapshot::WHILE_UNREACHABLE.to_owned()))
    } else {
        let kept = |k: &str| old.and_then(|o| annotation(o, k)).map(str::to_owned);
        // Recording turned off since: the username goes at the next write, the rest stays.
        (kept(names::CHANGED_BY).filter(|_| record_authors), kept(names::CHANGED_WITH), kept(names::UNATTRIBUTED))
    };
    [(names::CHANGED_BY, by), (names::CHANGED_WITH, with), (names::UNATTRIBUTED, unattributed)]
}

/// A username as `changed-by` records it: whole up to [`crate::model::meta::MAX_AUTHOR`] bytes,
/// else cut there with a trailing `…` (read back whole either way: never `<too long>`).
fn author(username: &str) -> String {
    let max = crate::model::meta::MAX_AUTHOR;
    if username.len() <= max {
        return username.to_owned();
    }
    let mut cut = max - '…'.len_utf8();
    while !username.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}…", &username[..cut])
}

/// How far back a `changed-at` in the request may lie and still be this admission's own first
/// pass: the API server gives a whole admission chain at most 30 s (webhook timeouts).
pub(super) const REINVOCATION_WINDOW: std::time::Duration = std::time::Duration::from_secs(30);

/// How far two replicas' estimates of the API server's time may differ (each is within about half
/// a second of it once a response has been seen, `cluster::clock`): the reinvocation may reach
/// another replica than the first pass did. Delaying a change by this much is harmless.
const CLOCK_TOLERANCE_MS: i64 = 2_000;

/// Whether RFC 3339 time `t` lies within `window` before `now` (or no further after it than
/// replicas' clocks may disagree).
pub(super) fn just_before(t: &str, now: &str, window: std::time::Duration) -> bool {
    use k8s_openapi::jiff::Timestamp;
    let (Ok(t), Ok(now)) = (t.parse::<Timestamp>(), now.parse::<Timestamp>()) else { return false };
    let age = now.as_millisecond() - t.as_millisecond();
    age >= -CLOCK_TOLERANCE_MS && age <= window.as_millis() as i64
}

#[cfg(test)]
mod tests {
    use crate::cache::Writer;
    use serde_json::json;

    use super::*;
    use crate::admission::review::GroupVersionKind;
    use crate::admission::{Failed, Fresh};
    use crate::cache::State;
    use crate::model::kinds::Kind;
    use crate::model::policy::Policy;

    const NOW: &str = "2026-12-03T12:00:00Z";
    const A: &str = "currency: EUR\ndiscount_rules_path: /etc/pricing/discounts.yaml\n";
    const B: &str = "currency: EUR\nrules:\n  discount_path: /etc/pricing/discounts.yaml\n";

    fn cm(ns: &str, config: &str, head: Option<&str>) -> Value {
        let mut cm = json!({"metadata": {"name": "cfg", "namespace": ns, "resourceVersion": "3"}, "data": {"config.yaml": config}});
        if let Some(h) = head {
            cm["metadata"]["annotations"] = json!({names::HEAD: h});
        }
        cm
    }

    fn request(operation: Operation, object: Value, old: Option<Value>) -> Request {
        Request {
            kind: GroupVersionKind { group: "".into(), version: "v1".into(), kind: "ConfigMap".into() },
            operation,
            namespace: object["metadata"]["namespace"].as_str().unwrap_or_default().into(),
            name: "cfg".into(),
            object: Some(object),
            old_object: old,
            ..Default::default()
        }
    }

    /// A namespace where Deployment `app` reads `cfg` by its plain name.
    fn state() -> State {
        let mut state = State::default();
        state.apply_namespace(&json!({"metadata": {"name": "ns"}}));
        let app = json!({"metadata": {"name": "app", "namespace": "ns", "uid": "uid-app"},
            "spec": {"template": {"spec": {"containers": [{"name": "app", "image": "app:1", "envFrom": [{"configMapRef": {"name": "cfg"}}]}]}}}});
        state.apply_workload(Kind::Deployment, &app);
        state
    }

    /// The webhook hashes a source's content before it takes the cache: the decision made with
    /// those facts is the one made by hashing under it, warnings, patch and effects alike.
    #[test]
    fn a_decision_with_its_facts_computed_ahead_is_the_decision_computed_under_the_cache() {
        let (policy, state, fresh, failed) = (Policy::default(), state(), Fresh::new(), Failed::new());
        let view = View { policy: &policy, state: &state, fresh: &fresh, failed: &failed, now: NOW, namespace: None };
        let head_a = ContentFacts::of(&request(Operation::Create, cm("ns", A, None), None), || false).head;
        let cases = [
            ("renamed key", request(Operation::Update, cm("ns", B, Some(&head_a)), Some(cm("ns", A, Some(&head_a))))),
            ("same content", request(Operation::Update, cm("ns", A, Some(&head_a)), Some(cm("ns", A, Some(&head_a))))),
            ("a head stale since an outage", request(Operation::Update, cm("ns", B, None), Some(cm("ns", B, Some(&head_a))))),
            ("a create carrying a head", request(Operation::Create, cm("ns", A, Some("forged")), None)),
        ];
        for (what, req) in cases {
            for outgoing in [false, true] {
                let facts = ContentFacts::ahead(&req, &policy, || outgoing);
                assert!(facts.is_some(), "{what}: a source by the request alone");
                assert_eq!(
                    decide_with(&req, &view, facts.as_ref()),
                    decide(&req, &view),
                    "{what}, outgoing content hashed ahead: {outgoing}"
                );
            }
        }
        let renamed = ContentFacts::of(&request(Operation::Update, cm("ns", B, None), Some(cm("ns", A, None))), || true);
        assert!(renamed.changed && renamed.warnings.iter().any(|w| w.contains("discount_rules_path")), "{renamed:?}");
        assert_eq!(renamed.old_head, Some(head_a), "the outgoing content's hash, for its snapshot's name");
    }

    /// Every ConfigMap write in the cluster reaches the webhook: only those that carry a head are
    /// hashed before the cache says whether they are sources at all.
    #[test]
    fn the_hot_path_is_never_hashed_ahead() {
        let policy = Policy::default();
        let plain = request(Operation::Update, cm("ns", B, None), Some(cm("ns", A, None)));
        assert_eq!(ContentFacts::ahead(&plain, &policy, || true), None, "no head: the cache decides first");
        let excluded = request(Operation::Update, cm("kube-system", B, Some("h")), Some(cm("kube-system", A, Some("h"))));
        assert_eq!(ContentFacts::ahead(&excluded, &policy, || true), None, "an excluded namespace");
        let mut immutable = cm("ns", B, Some("h"));
        immutable["immutable"] = json!(true);
        assert_eq!(ContentFacts::ahead(&request(Operation::Create, immutable, None), &policy, || true), None, "immutable");
        let mut status = request(Operation::Update, cm("ns", B, Some("h")), Some(cm("ns", A, Some("h"))));
        status.sub_resource = Some("status".into());
        assert_eq!(ContentFacts::ahead(&status, &policy, || true), None, "a subresource");
        let delete = request(Operation::Delete, cm("ns", B, Some("h")), None);
        assert_eq!(ContentFacts::ahead(&delete, &policy, || true), None, "a delete");
    }
}
