//! A workload's timeline (`history WORKLOAD`) and the difference between two of its revisions
//! (`diff WORKLOAD`, `undo --dry-run`): pure, from an [`Inventory`] (docs/plugin.md, "Timeline",
//! "Undo preview", "Revision diff").

use std::collections::BTreeSet;

use anyhow::{anyhow, bail, Result};
use serde_json::Value;

use super::build::{self, Inventory, Picked, Snap, SourceContent, Workload};
use super::model::*;
use crate::model::ids::SourceKind;
use crate::model::kinds::Kind;
use crate::model::names;

/// The workload `wanted` names (its kind resolved already, [`Inventory::resolve`]), with a
/// rollout history.
pub fn find(inv: &Inventory, wanted: &WorkloadRef) -> Result<Workload> {
    let w = inv.workload(wanted).ok_or_else(|| {
        anyhow!(
            "{wanted} not found in namespace {}: check the name with `kubectl get {} -n {}` (or give the namespace with -n)",
            inv.namespace,
            wanted.kind.to_ascii_lowercase(),
            inv.namespace
        )
    })?;
    if !w.kind.has_history() {
        bail!(
            "{wanted} has no rollout history: a timeline is kept for Deployments, StatefulSets, DaemonSets and the kinds the server registers; see `kubectl confighistory status {wanted}`"
        );
    }
    Ok(w)
}

/// The object of revision `n` of a workload (ReplicaSet or ControllerRevision), owned by it as
/// its controller.
pub fn revision_object<'a>(inv: &'a Inventory, w: &Workload, n: i64) -> Option<&'a Value> {
    let uid = w.object.pointer("/metadata/uid").and_then(Value::as_str)?;
    inv.revisions.iter().find(|r| {
        let owned = r
            .pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .is_some_and(|refs| refs.iter().any(|x| build::is_controller_ref(x, uid)));
        owned && build::revision_number(inv.kinds, r) == Some(n)
    })
}

/// The snapshot a config use names, when it was read.
fn snap_of<'a>(snaps: &'a [Snap], u: &ConfigUse) -> Option<&'a Snap> {
    let kind = build::source_id(&u.source).kind;
    let name = u.snapshot.as_deref()?;
    snaps.iter().find(|s| s.kind == kind && s.name == name)
}

/// The author confighistory's own change-cause names for `source` (`config a changed by alice:
/// values changed [k]; b changed by bob`, docs/behaviour.md §7.9). Sources are separated by `; `
/// (what changed escapes every `;` of tenant text); a change-cause written by a version before
/// what-changed was recorded separates them by `, ` and says nothing after the author.
fn author_in_cause(cause: &str, source: &str) -> Option<String> {
    let body = cause.strip_prefix("config ")?;
    let needle = format!("{source} changed by ");
    let separator = if body.contains("; ") || body.contains(": ") { "; " } else { ", " };
    body.split(separator)
        .find_map(|part| part.strip_prefix(needle.as_str()))
        .map(|by| by.split_once(": ").map_or(by, |(by, _)| by).trim_end_matches('…').to_owned())
        .filter(|b| !b.is_empty())
}

/// Who wrote a content: its snapshot's record, else confighistory's change-cause of the revision,
/// else why it is not known (docs/behaviour.md §5.2.1): never a guess.
fn author(snap: Option<&Snap>, source: &str, own_cause: Option<&str>, secrets_unreadable: bool) -> Author {
    if let Some(s) = snap {
        let o = &s.origin;
        if let Some(by) = &o.by {
            return Author { by: Some(by.clone()), with: o.with.clone(), at: o.at.clone(), unknown: None, from: Some("snapshot".into()) };
        }
        if let Some(why) = &o.unattributed {
            return Author { with: o.with.clone(), at: o.at.clone(), unknown: Some(why.clone()), ..Default::default() };
        }
    }
    if let Some(by) = own_cause.and_then(|c| author_in_cause(c, source)) {
        return Author { by: Some(by), from: Some("change-cause".into()), ..Default::default() };
    }
    let why = match snap {
        Some(s) if s.origin.with.is_some() || s.origin.at.is_some() => "not recorded (the server records no usernames)",
        Some(_) => "not recorded",
        None if secrets_unreadable && build::source_id(source).kind.def().confidential => "unknown: you may not read Secrets here",
        None => "content unknown",
    };
    Author { unknown: Some(why.into()), ..Default::default() }
}

/// A source as a revision uses it, with its content when known.
type Used = (ConfigUse, Option<SourceContent>);

/// `history WORKLOAD`: every rollout revision, oldest first, with its images and config against
/// the previous revision's, who wrote that config, its change-cause, and which revision runs.
pub fn timeline(inv: &Inventory, wanted: &WorkloadRef) -> Result<Timeline> {
    let w = find(inv, wanted)?;
    let snaps = inv.snaps();
    let current = w.current_revision();
    let held = w.held();
    let unreadable = inv.secrets_unreadable.is_some();
    let mut out: Vec<TimelineRevision> = Vec::new();
    // The previous revision's images and (use, content) per source.
    let mut prev: Option<(Vec<Image>, Vec<Used>)> = None;
    for (n, template) in &w.revisions {
        let obj = revision_object(inv, &w, *n);
        let created = obj.and_then(|o| o.pointer("/metadata/creationTimestamp")).and_then(Value::as_str).map(String::from);
        let cause = obj.and_then(|o| build::annotation(o, names::CHANGE_CAUSE)).map(String::from);
        let own = obj.and_then(|o| build::annotation(o, names::CHANGE_CAUSE_OWN));
        let cause_by_confighistory = cause.is_some() && cause.as_deref() == own;
        let own_cause = cause.as_deref().filter(|_| cause_by_confighistory);
        let running = current == Some(*n);

        let imgs = build::images(template);
        let images = imgs
            .iter()
            .map(|i| {
                let before = prev.as_ref().map(|(p, _)| p.iter().find(|x| x.container == i.container).map(|x| x.image.clone()));
                let changed = matches!(&before, Some(b) if b.as_deref() != Some(i.image.as_str()));
                ImageEntry {
                    container: i.container.clone(),
                    image: i.image.clone(),
                    changed,
                    previous: before.flatten().filter(|_| changed),
                }
            })
            .collect();

        let uses = build::config_uses(inv, w.kind, template);
        let mut config = Vec::new();
        let mut this: Vec<Used> = Vec::new();
        for u in uses {
            let snap = snap_of(&snaps, &u).filter(|_| u.via != "plain");
            let content = snap.map(|s| s.content.clone());
            let before = prev.as_ref().map(|(_, p)| p.iter().find(|(pu, _)| pu.source == u.source));
            let (changed, added, removed, changed_keys) = match (&before, &content) {
                // A new source, or the first revision: all its keys are new.
                (None | Some(None), Some(c)) => (true, c.keys(), Vec::new(), Vec::new()),
                (None | Some(None), None) => (true, Vec::new(), Vec::new(), Vec::new()),
                (Some(Some((_, Some(old)))), Some(new)) => {
                    let (a, r, c) = old.changes(new);
                    (!(a.is_empty() && r.is_empty() && c.is_empty()), a, r, c)
                }
                // One content unknown: what it references tells.
                (Some(Some((pu, _))), _) => ((pu.hash.as_ref(), &pu.reference) != (u.hash.as_ref(), &u.reference), vec![], vec![], vec![]),
            };
            let head = u.hash.is_some() && u.via != "plain" && inv.head(&u.source) == u.hash;
            config.push(ConfigEntry {
                source_kind: build::source_id(&u.source).kind_str().into(),
                reference: u.reference.clone(),
                snapshot: u.snapshot.clone(),
                hash: u.hash.clone(),
                exists: u.exists,
                via: u.via.clone(),
                head,
                held: running && held.contains(&u.source),
                content_known: content.is_some(),
                keys: content.as_ref().map(SourceContent::keys).unwrap_or_default(),
                changed,
                added,
                removed,
                changed_keys,
                author: author(snap, &u.source, own_cause, unreadable),
                source: u.source.clone(),
            });
            this.push((u, content));
        }
        let removed_sources: Vec<String> = prev
            .as_ref()
            .map(|(_, p)| {
                p.iter().filter(|(pu, _)| !this.iter().any(|(u, _)| u.source == pu.source)).map(|(pu, _)| pu.source.clone()).collect()
            })
            .unwrap_or_default();
        let brought: Vec<&ConfigEntry> = config.iter().filter(|c| c.changed).collect();
        let authors: Vec<String> = brought.iter().filter_map(|c| c.author.by.clone()).collect::<BTreeSet<_>>().into_iter().collect();
        let unknown: Vec<String> = brought
            .iter()
            .filter(|c| c.author.by.is_none())
            .filter_map(|c| c.author.unknown.clone())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        out.push(TimelineRevision {
            revision: *n,
            created,
            images,
            config_unchanged: prev.is_some() && brought.is_empty() && removed_sources.is_empty(),
            config,
            removed_sources,
            authors,
            author_unknown: (!unknown.is_empty()).then(|| unknown.join("; ")),
            cause,
            cause_by_confighistory,
            running,
            held: running && !held.is_empty(),
        });
        prev = Some((imgs, this));
    }
    Ok(Timeline {
        namespace: inv.namespace.clone(),
        workload: w.reference(),
        current,
        held: held.into_iter().collect(),
        revisions: out,
        secrets_unreadable: inv.secrets_unreadable.clone(),
    })
}

/// One side of a [`revision_diff`]: a revision's number (`None`: a template of no revision yet,
/// such as what an undo would store) and template, and whether it is the live template (whose
/// plain references run the source's current content).
#[derive(Clone, Copy, Debug)]
pub struct Side<'a> {
    pub revision: Option<i64>,
    pub template: &'a Value,
    pub live: bool,
}

/// The revision `n` of `w`, or an error listing the revisions it has.
pub fn revision_side<'a>(w: &'a Workload, n: i64, current: Option<i64>) -> Result<Side<'a>> {
    match w.revisions.iter().find(|(r, _)| *r == n) {
        Some((_, t)) => Ok(Side { revision: Some(n), template: t, live: current == Some(n) }),
        None => {
            let have: Vec<String> = w.revisions.iter().map(|(r, _)| r.to_string()).collect();
            bail!(
                "{} has no revision {n} (its revisions: {}); see `kubectl confighistory history {}`",
                w.reference(),
                if have.is_empty() { "none yet".to_owned() } else { have.join(", ") },
                w.reference()
            )
        }
    }
}

/// `diff WORKLOAD --from-revision A --to-revision B`: by default B is the running revision and A
/// the one before it.
pub fn revision_diff(inv: &Inventory, wanted: &WorkloadRef, from: Option<i64>, to: Option<i64>, show_values: bool) -> Result<RevisionDiff> {
    let w = find(inv, wanted)?;
    let current = w.current_revision();
    let to = match to.or(current) {
        Some(n) => n,
        None => bail!("{wanted} has no rollout revision yet: nothing to compare"),
    };
    let to_side = revision_side(&w, to, current)?;
    let from = match from {
        Some(n) => n,
        None => match w.revisions.iter().rev().find(|(r, _)| *r < to) {
            Some((r, _)) => *r,
            None => bail!(
                "{wanted} has no revision before {to} to compare with; give --from-revision (see `kubectl confighistory history {wanted}`)"
            ),
        },
    };
    let from_side = revision_side(&w, from, current)?;
    compare_templates(inv, &w, from_side, to_side, show_values)
}

/// What one side runs of one source: its content and how to name it, or why it is unknown.
fn side_content(inv: &Inventory, snaps: &[Snap], u: &ConfigUse, live: bool) -> std::result::Result<Picked, String> {
    let id = build::source_id(&u.source);
    if let Some(s) = snap_of(snaps, u).filter(|_| u.via != "plain") {
        let of_source = inv.snaps_of(&u.source);
        let revision = of_source.iter().position(|x| x.name == s.name).map(|i| (i + 1) as u32);
        let side = DiffSide {
            revision,
            name: s.name.clone(),
            hash: Some(s.hash.clone()),
            head: inv.head(&u.source).as_deref() == Some(s.hash.as_str()),
            created: s.created.clone(),
        };
        return Ok(Picked { side, content: s.content.clone() });
    }
    // A pin the webhook just made (an undo's dry run) to the head, whose snapshot is not made yet.
    if let (Some(obj), true) = (inv.sources.get(&u.source), u.via == "pin" && u.hash.is_some() && inv.head(&u.source) == u.hash) {
        let name = format!("{} (to be created from {})", u.snapshot.as_deref().unwrap_or(&u.reference), id.name);
        let side = DiffSide { revision: None, name, hash: u.hash.clone(), head: true, created: None };
        return Ok(Picked { side, content: inv.content_of(id.kind, obj) });
    }
    match (u.via.as_str(), inv.sources.get(&u.source)) {
        ("plain", Some(obj)) if live => {
            let side = DiffSide { revision: None, name: id.name.clone(), hash: inv.head(&u.source), head: true, created: None };
            Ok(Picked { side, content: inv.content_of(id.kind, obj) })
        }
        ("plain", _) => {
            Err(format!("{} is referenced plainly (from before confighistory) and no snapshot records what it ran with", u.reference))
        }
        _ => Err(format!("its snapshot {} no longer exists", u.snapshot.as_deref().unwrap_or(&u.reference))),
    }
}

/// An empty content of a source's kind: the side of a diff that does not reference it.
fn nothing(kind: SourceKind, name: &str) -> Picked {
    let content = SourceContent::empty(kind);
    Picked { side: DiffSide { revision: None, name: format!("{name} (not referenced)"), hash: None, head: false, created: None }, content }
}

/// Images and each source's content between two templates of `w`. A Secret's values are
/// compared, never shown, unless `show_values` (docs/plugin.md, "Secrets"); a template using
/// Secrets the user cannot read is refused, naming why.
pub fn compare_templates(inv: &Inventory, w: &Workload, from: Side<'_>, to: Side<'_>, show_values: bool) -> Result<RevisionDiff> {
    let kind: Kind = w.kind;
    let (from_uses, to_uses) = (build::config_uses(inv, kind, from.template), build::config_uses(inv, kind, to.template));
    if let Some(why) = &inv.secrets_unreadable {
        if from_uses.iter().chain(&to_uses).any(|u| build::source_id(&u.source).kind.def().confidential) {
            bail!("cannot compare the Secrets {} uses: {why}", w.reference());
        }
    }
    let (fi, ti) = (build::images(from.template), build::images(to.template));
    let mut containers: Vec<String> = fi.iter().map(|i| i.container.clone()).collect();
    containers.extend(ti.iter().map(|i| i.container.clone()).filter(|c| !fi.iter().any(|i| &i.container == c)));
    let images = containers
        .into_iter()
        .map(|c| {
            let a = fi.iter().find(|i| i.container == c).map(|i| i.image.clone());
            let b = ti.iter().find(|i| i.container == c).map(|i| i.image.clone());
            ImageDiff { changed: a != b, container: c, from: a, to: b }
        })
        .collect();
    let snaps = inv.snaps();
    let sources: BTreeSet<&str> = from_uses.iter().chain(&to_uses).map(|u| u.source.as_str()).collect();
    let mut out = Vec::new();
    for source in sources {
        let id = build::source_id(source);
        let (a, b) = (from_uses.iter().find(|u| u.source == source), to_uses.iter().find(|u| u.source == source));
        let pick = |u: Option<&ConfigUse>, live: bool| match u {
            Some(u) => side_content(inv, &snaps, u, live),
            None => Ok(nothing(id.kind, &id.name)),
        };
        let name =
            |u: Option<&ConfigUse>| u.map(|u| u.snapshot.clone().filter(|_| u.via != "plain").unwrap_or_else(|| u.reference.clone()));
        let mut entry = SourceDiff {
            source: source.to_owned(),
            source_kind: id.kind_str().into(),
            from: name(a),
            to: name(b),
            changed: false,
            unknown: None,
            diff: None,
        };
        match (pick(a, from.live), pick(b, to.live)) {
            (Ok(pa), Ok(pb)) => {
                let d = build::compare(&inv.namespace, source, pa, pb, show_values);
                entry.changed = a.is_none() || b.is_none() || !d.keys.is_empty() || d.type_changed.is_some();
                entry.diff = Some(d);
            }
            (Err(why), _) => {
                entry.changed = entry.from != entry.to;
                entry.unknown = Some(format!("revision {}'s content is unknown: {why}", side_name(from)));
            }
            (_, Err(why)) => {
                entry.changed = entry.from != entry.to;
                entry.unknown = Some(format!("revision {}'s content is unknown: {why}", side_name(to)));
            }
        }
        out.push(entry);
    }
    Ok(RevisionDiff {
        namespace: inv.namespace.clone(),
        workload: w.reference(),
        from: from.revision,
        to: to.revision,
        images,
        sources: out,
    })
}

fn side_name(s: Side<'_>) -> String {
    s.revision.map_or_else(|| "(new)".to_owned(), |r| r.to_string())
}

impl RevisionDiff {
    /// Something differs: an image, or a source's content or reference.
    pub fn differs(&self) -> bool {
        self.images.iter().any(|i| i.changed) || self.sources.iter().any(|s| s.changed)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::json;

    use crate::model::snapshot::Content;

    use super::*;
    use crate::model::snapshot::{self, Origin};

    const NS: &str = "shop";

    fn content(pairs: &[(&str, &str)]) -> Content {
        Content { data: pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(), ..Default::default() }
    }

    /// A namespace with a Deployment `pricing` built revision by revision.
    struct Fixture {
        inv: Inventory,
        created: u32,
    }

    impl Fixture {
        fn new() -> Fixture {
            let inv = Inventory {
                namespace: NS.into(),
                namespace_object: json!({"metadata": {"name": NS}}),
                server: build::Server::Unavailable("not read".into()),
                ..Default::default()
            };
            Fixture { inv, created: 0 }
        }

        /// A snapshot of `source` with `c`, written by `origin`; its name.
        fn snapshot(&mut self, source: &str, c: &Content, origin: Origin) -> String {
            let name = snapshot::name(source, &c.hash(), 0);
            let mut o = snapshot::object(NS, source, &name, c, &[]);
            self.created += 1;
            o["metadata"]["creationTimestamp"] = json!(format!("2024-05-01T10:{:02}:00Z", self.created));
            origin.annotate(&mut o);
            self.inv.snapshots.push(o);
            name
        }

        /// The live source `name` with content `c`.
        fn source(&mut self, name: &str, c: &Content) -> &mut Fixture {
            let obj = json!({"kind": "ConfigMap", "metadata": {"name": name, "annotations": {"confighistory.io/head": c.hash()}}, "data": c.data});
            self.inv.sources.insert(name.into(), obj);
            self
        }

        /// Revision `n` with `image` and the config references `refs`, with change-cause `cause`
        /// (confighistory's own when `own`).
        fn revision(&mut self, n: i64, image: &str, refs: &[&str], cause: Option<(&str, bool)>) -> &mut Fixture {
            let volumes: Vec<Value> =
                refs.iter().enumerate().map(|(i, c)| json!({"name": format!("cfg{i}"), "configMap": {"name": c}})).collect();
            let template = json!({"metadata": {"labels": {"app": "pricing", "pod-template-hash": format!("h{n}")}},
                "spec": {"containers": [{"name": "app", "image": image}], "volumes": volumes}});
            let mut annotations = json!({"deployment.kubernetes.io/revision": n.to_string()});
            if let Some((c, own)) = cause {
                annotations[names::CHANGE_CAUSE] = json!(c);
                if own {
                    annotations[names::CHANGE_CAUSE_OWN] = json!(c);
                }
            }
            self.inv.revisions.push(json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "metadata": {"name": format!("pricing-h{n}"), "creationTimestamp": format!("2024-05-01T11:0{n}:00Z"), "annotations": annotations,
                    "ownerReferences": [{"kind": "Deployment", "name": "pricing", "uid": "uid-pricing", "controller": true}]},
                "spec": {"template": template}}));
            self
        }

        /// The Deployment running revision `n`'s template, holding `held`.
        fn running(&mut self, n: i64, held: &[&str]) -> Inventory {
            let rs = self.inv.revisions.iter().find(|r| build::revision_number(self.inv.kinds, r) == Some(n)).unwrap();
            let mut template = rs["spec"]["template"].clone();
            template["metadata"]["labels"].as_object_mut().unwrap().remove("pod-template-hash");
            let mut annotations = json!({"deployment.kubernetes.io/revision": n.to_string()});
            if !held.is_empty() {
                annotations[names::HELD] = json!(held.join(","));
            }
            self.inv.workloads = vec![json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "pricing", "uid": "uid-pricing", "annotations": annotations}, "spec": {"template": template}})];
            self.inv.clone()
        }
    }

    fn by(user: &str) -> Origin {
        Origin {
            by: Some(user.into()),
            with: Some("kubectl-client-side-apply".into()),
            at: Some("2024-05-01T10:00:00Z".into()),
            unattributed: None,
        }
    }

    fn pricing() -> WorkloadRef {
        WorkloadRef { kind: "Deployment".into(), name: "pricing".into() }
    }

    /// The README's example: release 1 (content from before confighistory), release 2 renames a
    /// setting (bob) with a new image, revision 3 is a config-only edit by alice propagated by
    /// confighistory, whose change-cause says so; revision 3 runs.
    fn three_releases() -> (Fixture, [String; 3]) {
        let mut f = Fixture::new();
        let c1 = content(&[("discount_rules_path", "/etc/rules"), ("log_level", "info")]);
        let c2 = content(&[("rules.discount_path", "/etc/rules"), ("log_level", "info")]);
        let c3 = content(&[("rules.discount_path", "/etc/rules"), ("log_level", "debug")]);
        let s1 = f.snapshot("cfg", &c1, Origin::unattributed(snapshot::BEFORE_CONFIGHISTORY));
        let s2 = f.snapshot("cfg", &c2, by("bob"));
        let s3 = f.snapshot("cfg", &c3, by("alice"));
        f.source("cfg", &c3);
        f.revision(1, "app:4.11", &[&s1], None).revision(2, "app:4.12", &[&s2], Some(("release 4.12", false))).revision(
            3,
            "app:4.12",
            &[&s3],
            Some(("config cfg changed by alice", true)),
        );
        (f, [s1, s2, s3])
    }

    #[test]
    fn a_timeline_shows_each_revisions_images_config_changes_authors_and_cause() {
        let (mut f, [s1, s2, s3]) = three_releases();
        let t = timeline(&f.running(3, &[]), &pricing()).unwrap();
        assert_eq!((t.namespace.as_str(), t.current, t.held.len()), (NS, Some(3), 0));
        let revs: Vec<i64> = t.revisions.iter().map(|r| r.revision).collect();
        assert_eq!(revs, [1, 2, 3]);
        let [r1, r2, r3] = [&t.revisions[0], &t.revisions[1], &t.revisions[2]];

        assert_eq!(r1.created.as_deref(), Some("2024-05-01T11:01:00Z"));
        assert_eq!(r1.images, [ImageEntry { container: "app".into(), image: "app:4.11".into(), changed: false, previous: None }]);
        assert_eq!((r1.config[0].snapshot.as_deref(), r1.config[0].changed), (Some(s1.as_str()), true));
        assert_eq!(r1.config[0].added, ["discount_rules_path", "log_level"]);
        assert!(r1.authors.is_empty());
        assert_eq!(r1.author_unknown.as_deref(), Some("before confighistory"));
        assert!(!r1.running && !r1.config_unchanged && r1.cause.is_none());

        assert!(r2.images[0].changed);
        assert_eq!(r2.images[0].previous.as_deref(), Some("app:4.11"));
        let c = &r2.config[0];
        assert_eq!((c.snapshot.as_deref(), c.source.as_str(), c.source_kind.as_str()), (Some(s2.as_str()), "cfg", "ConfigMap"));
        assert_eq!(
            (c.added.as_slice(), c.removed.as_slice()),
            (&["rules.discount_path".to_owned()][..], &["discount_rules_path".to_owned()][..])
        );
        assert!(c.changed_keys.is_empty() && !c.head);
        assert_eq!(r2.authors, ["bob"]);
        assert_eq!(c.author.from.as_deref(), Some("snapshot"));
        assert_eq!((r2.cause.as_deref(), r2.cause_by_confighistory), (Some("release 4.12"), false));

        assert!(!r3.images[0].changed && r3.images[0].previous.is_none());
        assert_eq!(r3.config[0].changed_keys, ["log_level"]);
        assert!(r3.config[0].head && r3.config[0].content_known);
        assert_eq!(r3.config[0].keys, ["log_level", "rules.discount_path"]);
        assert_eq!((r3.snapshot_of("cfg"), r3.authors.as_slice()), (Some(s3.as_str()), &["alice".to_owned()][..]));
        assert!(r3.cause_by_confighistory && r3.running && !r3.held);
    }

    impl TimelineRevision {
        fn snapshot_of(&self, source: &str) -> Option<&str> {
            self.config.iter().find(|c| c.source == source)?.snapshot.as_deref()
        }
    }

    #[test]
    fn an_undo_runs_an_old_revision_held_and_an_image_only_release_keeps_its_config() {
        let (mut f, [s1, _, s3]) = three_releases();
        // Revision 4: an image-only release of revision 3's config.
        f.revision(4, "app:4.13", &[&s3], None);
        // Revision 5: an undo to revision 1's template (as a Deployment renumbers it), held.
        f.inv.revisions.retain(|r| build::revision_number(f.inv.kinds, r) != Some(1));
        f.revision(5, "app:4.11", &[&s1], None);
        let t = timeline(&f.running(5, &["cfg"]), &pricing()).unwrap();
        let revs: Vec<i64> = t.revisions.iter().map(|r| r.revision).collect();
        assert_eq!(revs, [2, 3, 4, 5]);
        let r4 = &t.revisions[2];
        assert!(r4.config_unchanged && r4.authors.is_empty() && r4.author_unknown.is_none(), "{r4:?}");
        assert!(r4.images[0].changed);
        let r5 = &t.revisions[3];
        assert!(r5.running && r5.held && r5.config[0].held, "{r5:?}");
        assert_eq!(r5.config[0].added, ["discount_rules_path"]);
        assert_eq!(r5.config[0].changed_keys, ["log_level"]);
        assert_eq!(r5.author_unknown.as_deref(), Some("before confighistory"));
        assert_eq!(t.held, ["cfg"]);
        assert!(!t.revisions[0].held && !t.revisions[0].running);
    }

    #[test]
    fn authors_come_from_the_snapshot_else_confighistorys_change_cause_else_are_unknown() {
        let mut f = Fixture::new();
        let c1 = content(&[("a", "1")]);
        let c2 = content(&[("a", "2")]);
        let c3 = content(&[("a", "3")]);
        let s1 = f.snapshot("cfg", &c1, Origin::default());
        let s2 = f.snapshot("cfg", &c2, Origin::default());
        let s3 = f.snapshot("cfg", &c3, Origin { with: Some("kubectl".into()), ..Default::default() });
        f.source("cfg", &c3);
        f.revision(1, "app:1", &[&s1], None)
            .revision(2, "app:1", &[&s2], Some(("config other changed by eve, cfg changed by carol", true)))
            .revision(3, "app:1", &[&s3], Some(("cfg changed by mallory", false)))
            .revision(4, "app:1", &[&snapshot::name("cfg", &content(&[("a", "4")]).hash(), 0)], None)
            .revision(6, "app:1", &["cfg"], None);
        let t = timeline(&f.running(6, &[]), &pricing()).unwrap();
        let [r1, r2, r3, r4, r6] = [0, 1, 2, 3, 4].map(|i| &t.revisions[i]);
        assert_eq!(r1.author_unknown.as_deref(), Some("not recorded"));
        assert_eq!(r2.authors, ["carol"], "confighistory's own cause names the author");
        assert_eq!(r2.config[0].author.from.as_deref(), Some("change-cause"));
        // A change-cause of the user's own is not taken as a record of who wrote the content.
        assert!(r3.authors.is_empty());
        assert_eq!(r3.author_unknown.as_deref(), Some("not recorded (the server records no usernames)"));
        // A deleted snapshot: content unknown, still changed by its name.
        assert!(r4.config[0].changed && !r4.config[0].content_known && !r4.config[0].exists);
        assert_eq!(r4.author_unknown.as_deref(), Some("content unknown"));
        assert_eq!((r6.config[0].via.as_str(), r6.config[0].changed), ("plain", true));
        assert!(r6.running);
    }

    /// The author in confighistory's change-cause, in the format with what changed and in the
    /// one before it; setting names (tenant text) in what changed cannot name another author.
    #[test]
    fn the_author_is_read_from_either_change_cause_format() {
        let new = "config other changed by eve: settings added [x, cfg changed by mallory]; cfg changed by carol: values changed [a]";
        assert_eq!(author_in_cause(new, "cfg").as_deref(), Some("carol"));
        assert_eq!(author_in_cause(new, "other").as_deref(), Some("eve"));
        let one = "config cfg changed by alice: settings removed [a, b], added [c]";
        assert_eq!(author_in_cause(one, "cfg").as_deref(), Some("alice"));
        assert_eq!(author_in_cause("config other changed by eve, cfg changed by carol", "cfg").as_deref(), Some("carol"));
        assert_eq!(author_in_cause("config cfg changed: values changed [a]", "cfg"), None);
        assert_eq!(author_in_cause("config cfg pinned (admitted while confighistory was unreachable)", "cfg"), None);
    }

    #[test]
    fn bad_input_is_named() {
        let (mut f, _) = three_releases();
        let inv = f.running(3, &[]);
        let missing = WorkloadRef { kind: "Deployment".into(), name: "nope".into() };
        let e = timeline(&inv, &missing).unwrap_err().to_string();
        assert!(e.contains("deployment/nope not found in namespace shop") && e.contains("kubectl get deployment -n shop"), "{e}");
        let e = revision_diff(&inv, &pricing(), Some(7), None, false).unwrap_err().to_string();
        assert!(e.contains("has no revision 7 (its revisions: 1, 2, 3)"), "{e}");
        let mut inv = inv;
        inv.workloads[0]["kind"] = json!("CronJob");
        inv.workloads[0]["apiVersion"] = json!("batch/v1");
        let cj = WorkloadRef { kind: "CronJob".into(), name: "pricing".into() };
        assert!(timeline(&inv, &cj).unwrap_err().to_string().contains("has no rollout history"));
    }

    #[test]
    fn a_revision_diff_shows_images_and_each_sources_content() {
        let (mut f, [s1, s2, s3]) = three_releases();
        let inv = f.running(3, &[]);
        // Default: the one before the running revision against it.
        let d = revision_diff(&inv, &pricing(), None, None, false).unwrap();
        assert_eq!((d.from, d.to), (Some(2), Some(3)));
        assert!(!d.images[0].changed && d.differs());
        let s = &d.sources[0];
        assert_eq!((s.from.as_deref(), s.to.as_deref(), s.changed), (Some(s2.as_str()), Some(s3.as_str()), true));
        let diff = s.diff.as_ref().unwrap();
        assert_eq!(diff.changed, ["log_level"]);
        assert_eq!(diff.keys[0].hunks[0].lines, ["-info", "+debug"]);
        assert_eq!((diff.from.revision, diff.to.revision, diff.to.head), (Some(2), Some(3), true));

        let d = revision_diff(&inv, &pricing(), Some(3), Some(1), false).unwrap();
        assert_eq!(
            (d.images[0].from.as_deref(), d.images[0].to.as_deref(), d.images[0].changed),
            (Some("app:4.12"), Some("app:4.11"), true)
        );
        let diff = d.sources[0].diff.as_ref().unwrap();
        assert_eq!(
            (diff.added.as_slice(), diff.removed.as_slice()),
            (&["discount_rules_path".to_owned()][..], &["rules.discount_path".to_owned()][..])
        );
        assert_eq!(d.sources[0].to.as_deref(), Some(s1.as_str()));
        assert!(!revision_diff(&inv, &pricing(), Some(3), Some(3), false).unwrap().differs());
    }

    #[test]
    fn a_source_on_one_side_or_of_unknown_content_is_said() {
        let mut f = Fixture::new();
        let c = content(&[("a", "1")]);
        let s = f.snapshot("cfg", &c, by("bob"));
        let limits = content(&[("max", "10")]);
        f.source("cfg", &c).source("limits", &limits);
        f.revision(1, "app:1", &["cfg"], None).revision(2, "app:1", &[&s, "limits"], None);
        let inv = f.running(2, &[]);
        let d = revision_diff(&inv, &pricing(), Some(1), Some(2), false).unwrap();
        let by_source: BTreeMap<&str, &SourceDiff> = d.sources.iter().map(|s| (s.source.as_str(), s)).collect();
        let cfg = by_source["cfg"];
        assert!(cfg.diff.is_none() && cfg.changed, "{cfg:?}");
        assert!(cfg.unknown.as_deref().unwrap().contains("revision 1's content is unknown: cfg is referenced plainly"), "{cfg:?}");
        // The live template's plain reference runs the source's current content.
        let lim = by_source["limits"];
        assert_eq!((lim.from.as_deref(), lim.to.as_deref()), (None, Some("limits")));
        assert_eq!(lim.diff.as_ref().unwrap().added, ["max"]);
        assert!(lim.changed);
    }

    #[test]
    fn secrets_show_keys_and_sizes_never_values_and_unreadable_ones_are_refused() {
        use crate::model::secret::{self, SecretContent};
        let mut f = Fixture::new();
        let secret_snap = |name: &str, hash: &str, v: &str| {
            let c = SecretContent::new(secret::OPAQUE, BTreeMap::from([("password".to_owned(), v.as_bytes().to_vec())]));
            let o = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": NS,
                "labels": {names::HASH_LABEL: hash, names::SOURCE_LABEL: "db"}, "annotations": {names::SOURCE_NAME: "db"}},
                "type": "Opaque", "immutable": true, "data": {"password": base64::Engine::encode(&base64::engine::general_purpose::STANDARD, v)}});
            (c, o)
        };
        let (_, o1) = secret_snap("db-aaaa", "aaaa", "canary-old-value");
        let (_, o2) = secret_snap("db-bbbb", "bbbb", "new-value");
        f.inv.snapshots.extend([o1, o2]);
        let tpl = |n: i64, snap: &str| {
            json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": format!("pricing-h{n}"), "annotations": {"deployment.kubernetes.io/revision": n.to_string()},
                "ownerReferences": [{"uid": "uid-pricing", "controller": true}]},
                "spec": {"template": {"metadata": {"labels": {"pod-template-hash": format!("h{n}")}}, "spec": {"containers": [{"name": "app", "image": "app:1"}],
                    "volumes": [{"name": "db", "secret": {"secretName": snap}}]}}}})
        };
        f.inv.revisions = vec![tpl(1, "db-aaaa"), tpl(2, "db-bbbb")];
        let inv = f.running(2, &[]).sealed();
        let t = timeline(&inv, &pricing()).unwrap();
        let c = &t.revisions[1].config[0];
        assert_eq!(
            (c.source.as_str(), c.source_kind.as_str(), c.changed_keys.as_slice()),
            ("secret/db", "Secret", &["password".to_owned()][..])
        );
        let d = revision_diff(&inv, &pricing(), None, None, false).unwrap();
        let k = &d.sources[0].diff.as_ref().unwrap().keys[0];
        assert!(k.hidden && k.hunks.is_empty() && k.old_size == Some(16) && k.new_size == Some(9), "{k:?}");
        let all = format!("{t:?}{d:?}{}{}", serde_json::to_string(&t).unwrap(), serde_json::to_string(&d).unwrap());
        assert!(!all.contains("canary-old-value") && !all.contains("Y2FuYXJ5"), "a value printed");
        let shown = revision_diff(&inv, &pricing(), None, None, true).unwrap();
        assert_eq!(shown.sources[0].diff.as_ref().unwrap().keys[0].hunks[0].lines, ["-canary-old-value", "+new-value"]);

        let mut unreadable = inv.clone();
        unreadable.snapshots.clear();
        unreadable.secret_contents.clear();
        unreadable.secrets_unreadable = Some("you may not list Secrets in namespace shop".into());
        let e = revision_diff(&unreadable, &pricing(), None, None, false).unwrap_err().to_string();
        assert!(e.contains("cannot compare the Secrets deployment/pricing uses: you may not list Secrets"), "{e}");
        let t = timeline(&unreadable, &pricing()).unwrap();
        assert_eq!(t.revisions[1].author_unknown.as_deref(), Some("unknown: you may not read Secrets here"));
        assert!(t.secrets_unreadable.is_some());
    }
}
