//! Snapshot protection (docs/behaviour.md §6.4): only valid snapshots may be created, their metadata is
//! frozen for everyone but confighistory, and a snapshot history still reaches is not deleted.

use serde_json::Value;

use super::review::{Operation, Request};
use super::{annotation, Decision, Reason, View};
use crate::model::ids::{SourceId, SourceKind};
use crate::model::json::At;
use crate::model::meta::Meta;
use crate::model::names;
use crate::model::snapshot;
use crate::model::source;
use crate::model::sourcekinds::Naming;

pub fn decide(req: &Request, view: &View) -> Decision {
    let Some(kind) = view.policy.acted_on().of(&req.kind.group, &req.kind.kind) else { return Decision::allow(Reason::UnhandledKind) };
    let what = kind.as_str();
    if req.sub_resource.as_deref().is_some_and(|s| !s.is_empty()) {
        return Decision::allow(Reason::UnhandledKind);
    }
    let name = subject_name(req);
    if view.policy.excludes(&req.namespace) {
        return Decision::allow(Reason::ExcludedNamespace);
    }
    let trusted = req.user_info.username == view.policy.identity || view.policy.snapshot_creators.contains(&req.user_info.username);
    match req.operation {
        // A Secret snapshot's validity is its MAC over the content the request carries: answering
        // it would compare a caller's guess with a MAC it knows (from a pinned template). So the
        // answer never depends on it (docs/behaviour.md §4a, §9a): only confighistory and the
        // admin's snapshot creators create Secret snapshots, checked on labels and names; the MAC
        // is checked where a snapshot is used (store, GC), never answered.
        Operation::Create if kind.def().naming == Naming::KeyedMac => match secret_snapshot_shape(req.object(), view) {
            Ok(()) if trusted => Decision::allow(Reason::ValidSnapshot),
            Ok(()) => Decision::deny(
                Reason::ForeignSnapshot,
                403,
                format!(
                    "Secret {name} carries the {} label: only confighistory (or an identity the admin allows) creates Secret \
                     snapshots. Remove the label to create an ordinary Secret",
                    names::HASH_LABEL
                ),
            ),
            Err(why) => Decision::deny(
                Reason::InvalidSnapshot,
                403,
                format!(
                    "Secret {name} carries the {} label but is not a valid snapshot: {why}. \
                     Snapshots are made by confighistory; remove the label to create an ordinary Secret",
                    names::HASH_LABEL
                ),
            ),
        },
        Operation::Create => match validate(kind, req.object(), &req.namespace, view) {
            Ok(_) if trusted => Decision::allow(Reason::ValidSnapshot),
            Ok(hash) => match foreign_problems(req.object(), name, &hash) {
                None => Decision::allow(Reason::ValidSnapshot),
                Some(why) => Decision::deny(
                    Reason::ForeignSnapshot,
                    403,
                    format!(
                        "{what} {name} is a valid snapshot, but only confighistory (or an identity the admin allows) may create \
                         one that {why}: it could plant history a later undo trusts"
                    ),
                ),
            },
            Err(why) => Decision::deny(
                Reason::InvalidSnapshot,
                403,
                format!(
                    "{what} {name} carries the {} label but is not a valid snapshot: {why}. \
                     Snapshots are made by confighistory; remove the label to create an ordinary {what}",
                    names::HASH_LABEL
                ),
            ),
        },
        Operation::Update => {
            if req.user_info.username == view.policy.identity {
                return Decision::allow(Reason::OwnUpdate);
            }
            let (old, new) = (req.old_object(), req.object());
            let frozen = ["labels", "annotations", "ownerReferences", "finalizers"];
            let changed: Vec<&str> = frozen.into_iter().filter(|f| meta_field(old, f) != meta_field(new, f)).collect();
            if changed.is_empty() {
                return Decision::allow(Reason::NoMetadataChange);
            }
            Decision::deny(
                Reason::SnapshotMetadata,
                403,
                format!(
                    "{what} {name} is a confighistory snapshot: its {} can't change (owner references or finalizers \
                     could let history be deleted). Edit the source {what} instead",
                    changed.join(", ")
                ),
            )
        }
        Operation::Delete => {
            let ns = req.namespace.as_str();
            if view.state.namespace(ns).is_some_and(|n| n.deleting) {
                return Decision::allow(Reason::NamespaceDeleting);
            }
            let old = req.old_object();
            let Some(hash) = old.at("/metadata/labels").and_then(|l| l.get(names::HASH_LABEL)).and_then(Value::as_str) else {
                return Decision::allow(Reason::NotASnapshot);
            };
            let source = snapshot::snapshot_source(name, old).unwrap_or_default();
            let (snapshot_id, source_id) = (SourceId::new(kind, name), SourceId::new(kind, source));
            let mut reasons = Vec::new();
            if view.state.source(ns, &source_id).and_then(|c| c.annotation(names::HEAD)) == Some(hash) {
                reasons.push(format!("it is the current content of {source}"));
            }
            let users = view.state.user_names(ns, &snapshot_id, true);
            if !users.is_empty() {
                reasons.push(format!("{} use it", users.join(", ")));
            } else if view.state.ref_count(ns, &snapshot_id).revisions > 0 {
                reasons.push("rollout history (ReplicaSets or ControllerRevisions) uses it".into());
            }
            if source::adopted(old).any(|t| view.state.template_exists(ns, t)) {
                reasons.push("it holds the config of a revision from before confighistory".into());
            }
            if reasons.is_empty() {
                return Decision::allow(Reason::Unreferenced);
            }
            let mut decision = Decision::deny(
                Reason::SnapshotInUse,
                403,
                format!(
                    "snapshot {name} is still part of rollout history: {}. It is deleted automatically once nothing reaches it",
                    reasons.join("; ")
                ),
            );
            // A sweep that listed the snapshot unused before it was pinned again (it became the
            // head, say) meets this refusal: the reason lets it keep the snapshot, not fail.
            decision.response.reason = Some(names::REASON_SNAPSHOT_IN_USE);
            decision
        }
        Operation::Connect => Decision::allow(Reason::NotIntercepted),
    }
}

/// The hash of a valid ConfigMap snapshot, or why it is none (a Secret snapshot's CREATE is
/// checked by [`secret_snapshot_shape`]).
fn validate(kind: SourceKind, obj: &Value, _ns: &str, _view: &View) -> Result<String, String> {
    match kind.def().naming {
        Naming::Hash => snapshot::validate(obj).map_err(|e| e.to_string()),
        Naming::KeyedMac => Err(format!("a {} snapshot's content is never checked in an answer", kind.as_str())),
    }
}

/// What a Secret snapshot's CREATE is checked on (docs/behaviour.md §4a): immutable, the snapshot
/// labels, a key id the keyring keeps, and a name that ends in its hash label; never its content
/// (whose MAC a caller could test guesses against).
fn secret_snapshot_shape(obj: &Value, view: &View) -> Result<(), String> {
    let claimed = snapshot::claimed_hash(obj).map_err(|e| e.to_string())?;
    let id_text = obj.at("/metadata/labels").and_then(|l| l.get(names::KEY_ID_LABEL)).and_then(Value::as_str);
    let id_text = id_text.ok_or_else(|| format!("it has no {} label", names::KEY_ID_LABEL))?;
    let id: crate::model::keys::KeyId = id_text.parse().map_err(|e: crate::model::keys::KeyError| e.to_string())?;
    match view.policy.secrets.keys.get().as_deref() {
        Some(keys) if keys.get(id).is_none() => return Err(format!("its key {id} is not kept")),
        Some(_) => {}
        None => return Err("the cluster keys Secret snapshots are checked with are not loaded".into()),
    }
    if !snapshot::names_its_hash(obj, claimed) {
        return Err(format!("its name does not end in its hash {claimed}"));
    }
    Ok(())
}

/// The name of the object a request is about. A DELETECOLLECTION (`kubectl delete --raw` of a
/// collection, a namespace's cleanup, an operator's bulk delete) reaches admission as one DELETE
/// per item with an empty request name and the item in `oldObject`: each item is judged by its
/// own name, so a collection delete is refused per snapshot exactly where a DELETE would be. A
/// CREATE with generateName may also arrive without a request name.
fn subject_name(req: &Request) -> &str {
    let obj = match req.operation {
        Operation::Delete => req.old_object(),
        _ => req.object(),
    };
    match obj.at("/metadata/name").and_then(Value::as_str) {
        Some(n) if req.name.is_empty() || req.operation == Operation::Delete => n,
        _ => &req.name,
    }
}

/// Why a valid snapshot created by someone other than confighistory (docs/behaviour.md §6.4) is refused: it
/// carries adoption records, an author record, owner references or finalizers, or its source name and label do not
/// agree with its name. `None`: an honest copy of its own content.
fn foreign_problems(obj: &Value, name: &str, hash: &str) -> Option<String> {
    if annotation(obj, names::ADOPTED).is_some_and(|a| !a.is_empty()) {
        return Some(format!("carries adoption records ({})", names::ADOPTED));
    }
    // Who wrote the content is confighistory's word, from the admitted write (§5.2): a snapshot
    // made ahead of a write would otherwise name anyone as its author.
    if let Some(k) =
        [names::CHANGED_BY, names::CHANGED_WITH, names::CHANGED_AT, names::UNATTRIBUTED].into_iter().find(|k| annotation(obj, k).is_some())
    {
        return Some(format!("carries an author record ({k}); leave confighistory's annotations out of a copy"));
    }
    for (field, what) in [("ownerReferences", "has ownerReferences"), ("finalizers", "has finalizers")] {
        if meta_field(obj, field).is_some() {
            return Some(what.to_owned());
        }
    }
    let Some(source) = annotation(obj, names::SOURCE_NAME) else {
        return Some(format!("has no {} annotation", names::SOURCE_NAME));
    };
    let label = obj.at("/metadata/labels").and_then(|l| l.get(names::SOURCE_LABEL)).and_then(Value::as_str);
    let index = snapshot::parse_name(name).map(|(_, _, i)| i).unwrap_or_default();
    if snapshot::name(source, hash, index) != name || label != Some(snapshot::source_label(source).as_str()) {
        return Some(format!("names a source ({}) its name and {} label do not agree with", names::SOURCE_NAME, names::SOURCE_LABEL));
    }
    None
}

/// A metadata field, with absent, null and empty treated alike.
fn meta_field<'a>(obj: &'a Value, field: &str) -> Option<&'a Value> {
    obj.get("metadata").and_then(|m| m.get(field)).filter(|v| match v {
        Value::Object(m) => !m.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Null => false,
        _ => true,
    })
}
