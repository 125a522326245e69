//! Source Secret admission (docs/behaviour.md §4a, with §6.1): where the admin turned Secrets on,
//! a tracked Secret's writes are handled as a source ConfigMap's are (change markers, kept
//! outgoing content for workloads still on the plain name), with warnings that name keys only. A
//! never-source (tokens, Helm release records, a certificate issuer's, `versioned: "false"`, the
//! admin's selector) is left exactly as it is.
//!
//! Nothing built here holds a Secret's value or an unkeyed hash of one, and no answer depends on
//! a MAC of the request's content (§9a: a review forged to the port holds content the forger
//! chose, and a user who may write a Secret but not read it sees the stored object): whether a
//! Secret is a source is the cache's word, the head is recorded after the answer from a fresh
//! read of the stored Secret (`Effect::RecordSecretHead`), and the outgoing content is named
//! from the stored object only.

use serde_json::Value;

use super::review::{Operation, Request};
use super::{annotation, annotation_ops, Decision, Effect, Outcome, Reason, View};
use crate::model::ids::{SourceId, SourceKind};
use crate::model::json::At;
use crate::model::keys::Keyring;
use crate::model::meta::Meta;
use crate::model::names;
use crate::model::policy::Mode;
use crate::model::secret::{self, SecretContent};
use crate::model::source as source_model;

pub fn decide(req: &Request, view: &View) -> Outcome {
    if req.sub_resource.as_deref().is_some_and(|s| !s.is_empty()) || !matches!(req.operation, Operation::Create | Operation::Update) {
        return Outcome::Done(Decision::allow(Reason::NotIntercepted));
    }
    let obj = req.object();
    let name = req.name.as_str();
    let id = SourceId::new(SourceKind::Secret, name);
    let excluded = &view.policy.excluded_sources;
    if !secret::is_tracked(obj, secret::secret_type(obj), excluded) {
        return Outcome::Done(Decision::allow(Reason::NotASource));
    }
    let mode = match super::acting_mode(req, view) {
        Ok(mode) => mode,
        Err(reason) => return Outcome::Done(Decision::allow(reason)),
    };
    // Only the admin's choice of namespaces turns Secrets on (docs/behaviour.md §4a).
    if !view.source_kinds(&req.namespace).contains(SourceKind::Secret) {
        return Outcome::Done(Decision::allow(Reason::NotASource));
    }
    let old = req.old_object.as_ref().filter(|_| req.operation == Operation::Update);
    // A source by the API server's word (the watches): a workload names it, or the stored Secret
    // carries a head. Never by the request's annotations: in a review forged to the port, object
    // and oldObject are both the forger's (docs/behaviour.md §9a).
    let is_source = view.state.is_referenced_source(&req.namespace, &id)
        || view.state.source(&req.namespace, &id).is_some_and(|c| c.annotation(names::HEAD).is_some());
    let versioned = |o: &Value| secret::is_versioned(o, secret::secret_type(o), excluded);
    // A never-source (by its type, a certificate issuer's annotation or the admin's selector) was
    // left above, whatever the old object was. A tracked Secret whose owner opts it out
    // (`versioned: "false"`) or back in is a change of its own, as a ConfigMap's (docs/behaviour.md
    // §7): propagated once, it moves its workloads to the plain name (back to snapshots).
    let versioning_changed = old.is_some_and(|o| secret::is_tracked(o, secret::secret_type(o), excluded) && versioned(o) != versioned(obj));
    if !is_source || (!versioned(obj) && !versioning_changed) {
        return Outcome::Done(Decision::allow(Reason::NotASource));
    }
    let keys = view.policy.secrets.keys.get();
    let Some(keys) = keys.as_deref() else {
        let mut d = Decision::allow(Reason::Source);
        d.response.warn(format!("secret/{name}: not versioned now: the cluster keys Secret snapshots are named under are not loaded"));
        return Outcome::Done(d);
    };
    // Compared as the API server sends them (canonical base64): nothing is decoded, nothing MAC'd.
    let content_changed = old.is_none_or(|o| !secret::same_content(o, obj));
    let own = req.user_info.username == view.policy.identity;
    let old_head = old.and_then(|o| annotation(o, names::HEAD));
    // A head only confighistory sets, on a write that keeps the content: one it computed from a
    // fresh read (after a write's answer, a workload's first pin, a controller's touch), checked
    // again after this answer (`Effect::RecordSecretHead`). One that replaces another is a change
    // first seen now (missed while the webhook was away, docs/behaviour.md §7.8).
    let own_head = annotation(obj, names::HEAD).filter(|_| own && !content_changed);
    let head_replaced = own_head.is_some_and(|h| old_head.is_some_and(|o| o != h));
    let changed = content_changed || versioning_changed || head_replaced;
    let mut d = Decision::allow(if changed { Reason::SourceChanged } else { Reason::Source });
    if let (Some(old), true) = (old, content_changed) {
        // Keys and the type; never a value, and the settings inside a value are never parsed.
        if let Some(w) = secret::update_warning_of(&id.to_string(), old, obj) {
            d.response.warn(w);
        }
    }
    if req.operation == Operation::Create && matches!(mode, Mode::Enforce | Mode::Audit) {
        let users = view.state.user_names(&req.namespace, &id, mode == Mode::Enforce);
        if !users.is_empty() {
            let message = format!(
                "Secret {name} is mutable and {} use it by name: a rollback could not restore its content. \
                 Fix: create it with immutable: true or annotate it {}=false",
                users.join(", "),
                names::VERSIONED
            );
            if mode == Mode::Enforce {
                return Outcome::Done(Decision::deny(Reason::MutableConfig, 403, message));
            }
            d.response.warn(message);
        }
    }
    if mode != Mode::Rewrite {
        return Outcome::Done(d);
    }
    // The head and key id: none once the content changed (the stale ones go; the stored content's
    // are recorded after the answer), confighistory's own, or the stored ones kept. Never one
    // computed here, and none added in a dry run.
    let (head, key_id) = match (content_changed, own_head) {
        (true, _) => (None, None),
        (false, Some(h)) => (Some(h), annotation(obj, names::KEY_ID)),
        (false, None) => (old_head, old.and_then(|o| annotation(o, names::KEY_ID))),
    };
    let (head, key_id) = if req.dry_run() {
        // Removed where they go; otherwise left as the request has them.
        (head.and(annotation(obj, names::HEAD)), key_id.and(annotation(obj, names::KEY_ID)))
    } else {
        (head, key_id)
    };
    let first_pass = annotation(obj, names::CHANGED_AT) != old.and_then(|o| annotation(o, names::CHANGED_AT));
    let (changed_at, propagated) = super::configmap::change_markers(obj, old, first_pass, changed, own, view.now);
    // Names and field managers only: nothing of the value (docs/behaviour.md §4a).
    let [by, with, unattributed] = super::configmap::authorship(req, old, content_changed, head_replaced, view.policy.record_authors);
    d.response.patch = annotation_ops(
        obj,
        &[
            (names::HEAD, head.map(str::to_owned)),
            (names::KEY_ID, key_id.map(str::to_owned)),
            (names::CHANGED_AT, changed_at),
            by,
            with,
            unattributed,
            (names::PROPAGATED, propagated),
        ],
    );
    if req.dry_run() {
        // Nothing read, written or recorded for a dry run (docs/behaviour.md §4a, §6.5).
        return Outcome::Done(d);
    }
    // Workloads still on the plain name ran with the outgoing content: keep it, as for a
    // ConfigMap (docs/behaviour.md §9), from the stored object, never the request's word for it.
    if let (Some(old), true) = (old, content_changed) {
        if let Some(outcome) = keep_outgoing(req, view, &id, old, keys, &mut d) {
            return outcome;
        }
    }
    let version = |o: &Value| o.at("/metadata/resourceVersion").and_then(Value::as_str).map(str::to_owned);
    let after = old.filter(|_| content_changed).and_then(version);
    d.effects.push(Effect::RecordSecretHead { namespace: req.namespace.clone(), source: id, after });
    Outcome::Done(d)
}

/// The outgoing content of a Secret whose content changed (docs/behaviour.md §9), when workloads
/// still on the plain name ran with it: read fresh and, when the stored object is still at
/// `oldObject`'s resourceVersion (the content this write replaces), kept as a snapshot named from
/// the stored object (its key and frame, `secret::source_mac`) with their adoption records,
/// unless one records them all already. Nothing in the answer depends on the request's content
/// or names the snapshot: `oldObject` gives only the resourceVersion, and the snapshot is the
/// stored content's (a forged review can make it kept, never planted nor compared). `Some`: the
/// whole answer (a read to make first, or its failure).
fn keep_outgoing(req: &Request, view: &View, id: &SourceId, old: &Value, keys: &Keyring, d: &mut Decision) -> Option<Outcome> {
    let users = view.state.plain_users(&req.namespace, id);
    if users.is_empty() {
        return None;
    }
    if let Some(failure) = view.failed.get(id) {
        return Some(Outcome::Done(Decision { response: failure.denial.clone(), reason: Reason::ApiError, ..Default::default() }));
    }
    let Some(stored) = view.fresh.get(id) else { return Some(Outcome::Fetch(vec![id.clone()])) };
    let version = |o: &Value| o.at("/metadata/resourceVersion").and_then(Value::as_str).map(str::to_owned);
    let stored = stored.as_ref().filter(|s| version(s).is_some() && version(s) == version(old));
    let content = stored.and_then(|s| Some((s, SecretContent::from_object(s).ok()?)));
    let Some((stored, content)) = content.filter(|(s, _)| secret::is_tracked(*s, secret::secret_type(s), &view.policy.excluded_sources))
    else {
        tracing::warn!(namespace = %req.namespace, source = %id, "oldObject is not the stored Secret; outgoing content not kept");
        d.response.warn(format!("{id}: outgoing content not kept (the stored object is not this request's oldObject)"));
        return None;
    };
    let named = secret::source_mac(stored, &content, &req.namespace, &id.name, keys);
    // The source's own snapshots only (the cache's index), not every object of the cluster.
    let recorded = view
        .state
        .snapshots_of(&req.namespace, id)
        .any(|(_, s, hash)| hash == named.mac && users.iter().all(|u| source_model::adopted(s).any(|a| a == u)));
    if !recorded {
        let (key, frame) = (named.key.id(), named.frame);
        let origin = crate::model::snapshot::Origin::of_source(stored, &named.mac);
        d.effects.push(Effect::EnsureSecretSnapshot {
            namespace: req.namespace.clone(),
            source: id.clone(),
            content,
            key,
            frame,
            adopted: users,
            origin,
        });
    }
    None
}

/// The head and key id to record on source Secret `obj` named `name` in namespace `ns`, as the
/// API server stored it (read fresh after a write's answer, docs/behaviour.md §4a): the MAC of
/// its content under its key and frame (`secret::source_mac`), when that is not what it records
/// already. `None` too when it is no tracked Secret any more, or its data is not what the API
/// serves.
pub fn head_to_record(
    obj: &Value,
    ns: &str,
    name: &str,
    keys: &Keyring,
    excluded: &crate::model::selector::Selector,
) -> Option<(String, String)> {
    if !secret::is_tracked(obj, secret::secret_type(obj), excluded) {
        return None;
    }
    let content = SecretContent::from_object(obj).ok()?;
    let named = secret::source_mac(obj, &content, ns, name, keys);
    let key_id = named.key.id().to_string();
    let recorded = annotation(obj, names::HEAD) == Some(named.mac.as_str()) && annotation(obj, names::KEY_ID) == Some(key_id.as_str());
    (!recorded).then_some((named.mac, key_id))
}
