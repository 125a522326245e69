//! Source Secret admission (docs/behaviour.md §4a, with §6.1): where the admin turned Secrets on,
//! a tracked Secret's writes are handled as a source ConfigMap's are (the head, kept outgoing
//! content for workloads still on the plain name), with its head a MAC under the namespace's key
//! and warnings that name keys only. A never-source (tokens, Helm release records, a certificate
//! issuer's, `versioned: "false"`, the admin's selector) is left exactly as it is.
//!
//! Nothing built here holds a Secret's value or an unkeyed hash of one: the content stays in
//! `SecretContent` (value-free `Debug`), heads and snapshot names are MACs, warnings name keys.

use serde_json::Value;

use super::review::{Operation, Request};
use super::{annotation, annotation_ops, Decision, Outcome, Reason, View};
use crate::model::names;
use crate::model::policy::Mode;
use crate::model::secret::{self, SecretContent};
use crate::model::source::{SourceId, SourceKind};

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
    let is_source = view.state.is_referenced_source(&req.namespace, &id)
        || annotation(obj, names::HEAD).is_some()
        || old.is_some_and(|o| annotation(o, names::HEAD).is_some());
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
    let content = match SecretContent::from_object(obj) {
        Ok(c) => c,
        Err(e) => {
            let mut d = Decision::allow(Reason::Source);
            d.response.warn(format!("secret/{name}: not versioned: {e}"));
            return Outcome::Done(d);
        }
    };
    // Compared as the API server sends them (canonical base64): the old values are decoded only
    // when its outgoing content must be kept (docs/performance.md).
    let content_changed = old.is_none_or(|o| !secret::same_content(o, obj));
    // The key its MACs are under: while its content stays, the one the stored Secret recorded (a
    // key rotation renames nothing and moves no workload); new content takes the current key.
    let cluster_key = match old {
        Some(o) if !content_changed => secret::source_key(o, &content, &req.namespace, keys),
        _ => keys.current(),
    };
    let head = content.mac(&cluster_key.namespace_key(&req.namespace));
    let own = req.user_info.username == view.policy.identity;
    let claimed_head = old.filter(|o| own && annotation(o, names::HEAD).is_none()).and_then(|_| annotation(obj, names::HEAD));
    let stale_head = old.and_then(|o| annotation(o, names::HEAD)).or(claimed_head).is_some_and(|h| h != head);
    let changed = stale_head || content_changed || versioning_changed;
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
    let (changed_at, propagated) = super::configmap::change_markers(obj, old, &head, changed, own, view.now);
    let key_id = Some(cluster_key.id().to_string());
    d.response.patch = annotation_ops(
        obj,
        &[(names::HEAD, Some(head)), (names::KEY_ID, key_id), (names::CHANGED_AT, changed_at), (names::PROPAGATED, propagated)],
    );

    // Workloads still on the plain name ran with the outgoing content: keep it, as for a
    // ConfigMap (docs/behaviour.md §9), from the stored object, never the request's word for it.
    if let (Some(old), true) = (old, content_changed) {
        let label = id.to_string();
        // The outgoing content is named under the key the stored Secret recorded.
        let named = |c: &SecretContent| {
            let old_key = secret::source_key(old, c, &req.namespace, keys);
            (c.mac(&old_key.namespace_key(&req.namespace)), old_key.id())
        };
        let old_content = || SecretContent::from_object(old).ok();
        if let Some(outcome) = super::configmap::keep_outgoing(req, view, &id, &label, Some(old), old_content, named, &mut d) {
            return outcome;
        }
    }
    Outcome::Done(d)
}
