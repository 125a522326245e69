//! Pure construction of what the plugin shows ([`super::model`]) from objects read from the
//! cluster ([`Inventory`]): no I/O, so every rule here is testable with fixtures.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{anyhow, bail, Result};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde_json::{json, Value};

use super::model::*;
use crate::model::ids::{self, SourceId, SourceKind, SourceKinds};
use crate::model::kinds::Kind;
use crate::model::kinds::{self, Registry};
use crate::model::meta::Meta;
use crate::model::names;
use crate::model::policy::Policy;
use crate::model::published::{self, EffectiveConfig};
use crate::model::secret::{self, SecretContent};
use crate::model::selector::Selector;
use crate::model::snapshot::{self, Content};
use crate::model::source;
use crate::model::sourcekinds::{self, Naming};
use crate::model::template;
use crate::model::trim::LAST_APPLIED;

/// The revision annotation of a ReplicaSet-kept history (its owner's kind's), or of a workload
/// that keeps its history in ReplicaSets.
pub fn revision_annotation(kinds: &Registry, obj: &Value) -> Option<&'static str> {
    let kind = kinds.of(obj)?;
    match kind.history() {
        _ if !kind.is_workload() => Some(kinds.replicaset_history(obj.get("metadata")?).0),
        kinds::History::ReplicaSets { revision_annotation, .. } => Some(revision_annotation),
        _ => None,
    }
}

/// Objects of one namespace, as read from the API server.
#[derive(Clone, Debug, Default)]
pub struct Inventory {
    pub namespace: String,
    /// The Namespace object (labels: mode; annotations: settle).
    pub namespace_object: Value,
    /// Sources that were read, by their annotation entry (`SourceId`'s `Display`): a
    /// ConfigMap's name, `secret/NAME` for a Secret.
    pub sources: BTreeMap<String, Value>,
    /// Snapshots (label `confighistory.io/hash`): ConfigMaps, and Secrets where they are read.
    /// A Secret's `data` is not kept here once [`Inventory::sealed`]: see `secret_contents`.
    pub snapshots: Vec<Value>,
    /// The content of each Secret read (snapshots and sources), by object name, taken out of its
    /// object by [`Inventory::sealed`] so that no `Value` (nor this inventory's `Debug`) holds a
    /// Secret's value (docs/behaviour.md §4a).
    pub secret_contents: BTreeMap<String, SecretContent>,
    /// Why Secrets could not be read with the user's credentials, when they could not.
    pub secrets_unreadable: Option<String>,
    /// Deployments, StatefulSets, DaemonSets, CronJobs and Jobs.
    pub workloads: Vec<Value>,
    /// ReplicaSets and ControllerRevisions.
    pub revisions: Vec<Value>,
    /// What the server runs with, from its published configuration.
    pub server: Server,
    /// The kinds the server handles: the built-ins and those its configuration registers.
    pub kinds: &'static Registry,
}

/// The server's published effective configuration (docs/operations.md, "What the server
/// does"), or why it could not be read: then the plugin says so, and shows what it cannot know
/// as unknown rather than as a default of its own.
#[derive(Clone, Debug)]
pub enum Server {
    Published(Box<Published>),
    Unavailable(String),
}

/// The document and the policy it gives, parsed once.
#[derive(Clone, Debug)]
pub struct Published {
    pub config: EffectiveConfig,
    pub policy: Policy,
}

impl Default for Server {
    fn default() -> Server {
        Server::Unavailable("not read".into())
    }
}

impl Server {
    /// From the ConfigMap at `location` (`None`: not found), as the server publishes it.
    pub fn from_configmap(location: &str, cm: Option<&Value>) -> Server {
        let Some(cm) = cm else {
            return Server::Unavailable(format!(
                "ConfigMap {location} not found (confighistory not installed there, or older than 0.2; see --server-config)"
            ));
        };
        match published::parse(cm).and_then(|config| Ok(Server::Published(Box::new(Published { policy: config.policy()?, config })))) {
            Ok(s) => s,
            Err(e) => Server::Unavailable(format!("ConfigMap {location}: {e}")),
        }
    }

    pub fn config(&self) -> Option<&EffectiveConfig> {
        match self {
            Server::Published(p) => Some(&p.config),
            Server::Unavailable(_) => None,
        }
    }

    /// Why the configuration is unknown.
    pub fn unavailable(&self) -> Option<String> {
        match self {
            Server::Published(_) => None,
            Server::Unavailable(why) => Some(format!("the server's configuration is unknown: {why}")),
        }
    }
}

/// The mode in force in a namespace, and where it comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModeView {
    /// rewrite, enforce, audit, off, or `unknown` (no label, and the server's default unknown).
    pub mode: String,
    /// `label`, `default` (the server's), `refused-label` (the label asks for a mode the admin
    /// does not allow, or for none: the server's default applies), `excluded` (a namespace the
    /// server never acts in), `label-unchecked` (the label, not checked against the allowed
    /// modes, the server's configuration being unknown), `unknown`.
    pub source: &'static str,
    /// The label's value when it was refused.
    pub refused: Option<String>,
}

/// A snapshot, parsed.
#[derive(Clone, Debug)]
pub struct Snap {
    /// The kind of its source (and of the snapshot object).
    pub kind: SourceKind,
    pub name: String,
    /// Its source's annotation entry (`cfg`, `secret/db`).
    pub source: String,
    pub hash: String,
    pub created: Option<String>,
    pub content: SourceContent,
    pub adopted: Vec<String>,
    /// The API server's resourceVersion, where it is a number (etcd's revision, as on every
    /// cluster today): orders snapshots created within the same second, which creationTimestamp
    /// cannot (a release right after another made them swap revisions in `history`).
    pub written: Option<u64>,
    /// Who wrote its content, as it records it (docs/behaviour.md §5.2.1).
    pub origin: snapshot::Origin,
}

/// A workload with its rollout revisions.
#[derive(Clone, Debug)]
pub struct Workload {
    pub kind: Kind,
    pub name: String,
    pub object: Value,
    /// Ascending by revision.
    pub revisions: Vec<(i64, Value)>,
}

impl Workload {
    pub fn reference(&self) -> WorkloadRef {
        WorkloadRef { kind: self.kind.name().into(), name: self.name.clone() }
    }
    pub fn template(&self) -> &Value {
        self.object.pointer(self.kind.template_pointer()).unwrap_or(&Value::Null)
    }
    /// The current rollout revision: the newest revision whose template is the live one
    /// (Deployments: their revision annotation when no ReplicaSet matches yet).
    pub fn current_revision(&self) -> Option<i64> {
        let live = self.kind.template_hash(self.template());
        self.revisions.iter().rev().find(|(_, t)| self.kind.template_hash(t) == live).map(|(r, _)| *r).or_else(|| {
            match self.kind.history() {
                kinds::History::ReplicaSets { revision_annotation, .. } => annotation(&self.object, revision_annotation)?.parse().ok(),
                _ => None,
            }
        })
    }
    /// The sources it holds, by annotation entry.
    pub fn held(&self) -> BTreeSet<String> {
        source::holds(&self.object).into_keys().map(|id| id.to_string()).collect()
    }
}

/// The source a plugin argument or an entry names: `NAME` or `configmap/NAME` (`cm/NAME`) for a
/// ConfigMap, `secret/NAME` for a Secret; the name a Kubernetes name (it goes into request paths).
pub fn parse_source(s: &str) -> Result<SourceId> {
    // `TYPE/NAME` with a type kubectl names a source kind by (`cm/cfg`), else an annotation entry.
    let typed =
        s.split_once('/').and_then(|(typed, name)| Some((SourceKind::ALL.into_iter().find(|k| k.def().typed.contains(&typed))?, name)));
    let id = match typed {
        Some((kind, name)) => SourceId::new(kind, name),
        None => ids::parse_source(s)
            .ok_or_else(|| anyhow!("{s:?} is not a valid source: use NAME (a ConfigMap), configmap/NAME or secret/NAME"))?,
    };
    if !names::is_dns_subdomain(&id.name) {
        bail!("{s:?} is not a valid {} name", id.kind_str());
    }
    Ok(id)
}

/// The source an annotation entry names (a ConfigMap's for a bare name).
pub fn source_id(entry: &str) -> SourceId {
    ids::parse_source(entry).unwrap_or_else(|| SourceId::configmap(entry))
}

/// `kind/name` of a source's object, as `kubectl get -o name` prints it: `configmap/cfg`,
/// `secret/db-<mac>`.
pub fn object_name(kind: SourceKind, name: &str) -> String {
    format!("{}/{name}", kind.as_str().to_ascii_lowercase())
}

/// The sources of `kinds` a template references (pinned ones by their snapshot's name).
pub fn source_refs(template: &Value, kinds: SourceKinds) -> BTreeSet<SourceId> {
    template::ref_sources(template, kinds)
}

/// A source's or a snapshot's content, by its kind. A Secret's is a [`SecretContent`]: its
/// `Debug` shows keys and sizes, and its values leave it only for `diff --show-values`
/// (docs/plugin.md, "Secrets"); it is never hashed without a key (docs/behaviour.md §4a).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SourceContent {
    ConfigMap(Content),
    Secret(SecretContent),
}

impl Default for SourceContent {
    fn default() -> SourceContent {
        SourceContent::ConfigMap(Content::default())
    }
}

impl SourceContent {
    /// An empty content of `kind`.
    pub fn empty(kind: SourceKind) -> SourceContent {
        match kind.def().content {
            sourcekinds::Content::Data => SourceContent::ConfigMap(Content::default()),
            sourcekinds::Content::TypedBytes => SourceContent::Secret(SecretContent::default()),
        }
    }

    /// Bytes of keys and values.
    pub fn bytes(&self) -> usize {
        match self {
            SourceContent::ConfigMap(c) => c.bytes(),
            SourceContent::Secret(c) => c.bytes(),
        }
    }

    /// Each key (a ConfigMap's binaryData keys suffixed ` (binary)`) with the size of its value
    /// in bytes (binaryData: as served, base64).
    pub fn sizes(&self) -> BTreeMap<String, usize> {
        match self {
            SourceContent::ConfigMap(c) => flat(c).into_iter().map(|(k, (v, _))| (k, v.len())).collect(),
            SourceContent::Secret(c) => c.key_sizes().map(|(k, n)| (k.to_owned(), n)).collect(),
        }
    }

    pub fn keys(&self) -> Vec<String> {
        self.sizes().into_keys().collect()
    }

    /// Keys added, removed and changed from `self` to `new`.
    pub fn changes(&self, new: &SourceContent) -> (Vec<String>, Vec<String>, Vec<String>) {
        match (self, new) {
            (SourceContent::ConfigMap(o), SourceContent::ConfigMap(n)) => key_changes(o, n),
            (SourceContent::Secret(o), SourceContent::Secret(n)) => {
                let c = secret::key_changes(o, n);
                (c.added, c.removed, c.changed)
            }
            // Never one source's: every key is another's.
            _ => (new.keys(), self.keys(), Vec::new()),
        }
    }

    /// The text a line diff of `key` compares: a ConfigMap's data value; a Secret's value only
    /// with `show_values` (and when it is UTF-8). `None` for a missing key, a binary value or a
    /// hidden one.
    pub fn text(&self, key: &str, show_values: bool) -> Option<std::borrow::Cow<'_, str>> {
        match self {
            SourceContent::ConfigMap(c) => c.data.get(key).map(|v| v.as_str().into()),
            SourceContent::Secret(c) if show_values => c.revealed_value(key).and_then(|v| std::str::from_utf8(v).ok()).map(Into::into),
            SourceContent::Secret(_) => None,
        }
    }

    pub fn is_secret(&self) -> bool {
        matches!(self, SourceContent::Secret(_))
    }
}

pub fn annotation<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    Meta::annotation(obj, key)
}

pub fn label<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    Meta::label(obj, key)
}

fn meta<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    obj.pointer("/metadata").and_then(|m| m.get(key)).and_then(Value::as_str)
}

/// The source kind of an object read from the cluster (its `kind`; ConfigMap when it has none).
pub fn kind_of(obj: &Value) -> SourceKind {
    obj.get("kind").and_then(Value::as_str).and_then(|k| SourceKind::known("", k)).unwrap_or_default()
}

impl Inventory {
    /// The inventory with each Secret's values taken out of its object (`data`, `stringData`)
    /// into [`Inventory::secret_contents`]: what `gather` does to everything it reads, before
    /// anything else sees it. Idempotent: an object sealed already keeps its recorded content.
    /// `kubectl apply`'s last-applied annotation, a copy of the manifest and so of its values, is
    /// dropped.
    pub fn sealed(mut self) -> Inventory {
        for obj in self.snapshots.iter_mut().chain(self.sources.values_mut()) {
            if !kind_of(obj).def().confidential {
                continue;
            }
            if let Some(a) = obj.pointer_mut("/metadata/annotations").and_then(Value::as_object_mut) {
                a.remove(LAST_APPLIED);
            }
            let holds_values = obj.get("data").is_some() || obj.get("stringData").is_some();
            if !holds_values && meta(obj, "name").is_some_and(|n| self.secret_contents.contains_key(n)) {
                continue;
            }
            if let Some(m) = obj.as_object_mut() {
                // A value that is not base64 cannot come from the API server; it counts as empty
                // rather than be quoted anywhere.
                let content = SecretContent::from_object(&Value::Object(m.clone())).unwrap_or_default();
                m.remove("data");
                m.remove("stringData");
                if let Some(name) = meta(obj, "name") {
                    self.secret_contents.insert(name.to_owned(), content);
                }
            }
        }
        self
    }

    /// The content of a source or snapshot object of `kind`.
    pub fn content_of(&self, kind: SourceKind, obj: &Value) -> SourceContent {
        match kind.def().content {
            sourcekinds::Content::Data => SourceContent::ConfigMap(Content::from_object(obj)),
            sourcekinds::Content::TypedBytes => SourceContent::Secret(
                meta(obj, "name")
                    .and_then(|n| self.secret_contents.get(n).cloned())
                    .unwrap_or_else(|| SecretContent::from_object(obj).unwrap_or_default()),
            ),
        }
    }

    /// The source kinds the server acts on in this namespace (its published policy); every kind
    /// when its configuration is unknown, or when Secrets were read (asked for, or a server
    /// versioned them here once: their users are shown). Constant time: it is asked for every
    /// template looked at.
    pub fn source_kinds(&self) -> SourceKinds {
        match &self.server {
            Server::Published(_) if !self.secret_contents.is_empty() => SourceKinds::WITH_SECRETS,
            Server::Published(p) => p.policy.source_kinds(Some(&self.namespace_object)),
            Server::Unavailable(_) => SourceKinds::WITH_SECRETS,
        }
    }

    /// The sources a template references, of the kinds the server acts on here.
    pub fn refs(&self, template: &Value) -> BTreeSet<SourceId> {
        source_refs(template, self.source_kinds())
    }

    /// The head of a source (by entry): a ConfigMap's is the hash of its current content; a
    /// Secret's is a MAC under a key the plugin does not have, so it is the hash of the newest
    /// snapshot holding its current content, else the `head` annotation the webhook recorded.
    pub fn head(&self, source: &str) -> Option<String> {
        let obj = self.sources.get(source)?;
        let kind = kind_of(obj);
        match kind.def().naming {
            Naming::Hash => Some(head_of(obj)),
            Naming::KeyedMac => {
                let live = self.content_of(kind, obj);
                let snaps = self.snaps_of(source);
                snaps
                    .iter()
                    .rev()
                    .find(|s| s.content == live)
                    .map(|s| s.hash.clone())
                    .or_else(|| annotation(obj, names::HEAD).map(String::from))
            }
        }
    }

    /// All snapshots, oldest first (creation time, then resourceVersion, then name).
    pub fn snaps(&self) -> Vec<Snap> {
        let mut out: Vec<Snap> = self
            .snapshots
            .iter()
            .filter_map(|o| {
                let name = meta(o, "name")?.to_owned();
                let hash = label(o, names::HASH_LABEL)?.to_owned();
                let kind = kind_of(o);
                let source = snapshot::snapshot_source(&name, o).or_else(|| label(o, names::SOURCE_LABEL))?;
                let source = SourceId::new(kind, source).to_string();
                Some(Snap {
                    kind,
                    created: meta(o, "creationTimestamp").map(String::from),
                    content: self.content_of(kind, o),
                    adopted: source::adopted(o).map(String::from).collect(),
                    written: meta(o, "resourceVersion").and_then(|v| v.parse().ok()),
                    origin: snapshot::Origin::of_snapshot(o),
                    name,
                    source,
                    hash,
                })
            })
            .collect();
        out.sort_by(|a, b| {
            (timestamp(a.created.as_deref()), a.written, &a.name).cmp(&(timestamp(b.created.as_deref()), b.written, &b.name))
        });
        out
    }

    /// Snapshots of one source, oldest first: revision N is index N-1.
    pub fn snaps_of(&self, source: &str) -> Vec<Snap> {
        self.snaps().into_iter().filter(|s| s.source == source).collect()
    }

    /// Workloads with their revisions, linked by their controller's ownerReference (uid, and
    /// `controller: true`: anyone who may create a ReplicaSet may add another owner reference, and
    /// an undo must not take a template from it).
    pub fn workloads(&self) -> Vec<Workload> {
        // Revisions by their controller's uid, found once: matching each workload against every
        // revision was 1.1 million comparisons on a namespace of 1,000 Deployments and 1,100
        // ReplicaSets, 1.5 s of a debug build each time (docs/plugin.md "Web view").
        let mut by_owner: std::collections::HashMap<&str, Vec<&Value>> = std::collections::HashMap::new();
        for r in &self.revisions {
            let owners = r.pointer("/metadata/ownerReferences").and_then(Value::as_array).into_iter().flatten();
            for uid in owners.filter_map(|x| x["uid"].as_str().filter(|uid| is_controller_ref(x, uid))) {
                let of = by_owner.entry(uid).or_default();
                if !of.last().is_some_and(|l| std::ptr::eq(*l, r)) {
                    of.push(r);
                }
            }
        }
        let mut out: Vec<Workload> = self
            .workloads
            .iter()
            .filter_map(|o| {
                let kind = self.kinds.of(o).filter(|k| k.is_workload())?;
                let uid = meta(o, "uid").unwrap_or_default();
                let mut revisions: Vec<(i64, Value)> = by_owner
                    .get(uid)
                    .into_iter()
                    .flatten()
                    .filter_map(|r| Some((revision_number(self.kinds, r)?, revision_template(self.kinds, r)?.clone())))
                    .collect();
                revisions.sort_by_key(|(n, _)| *n);
                Some(Workload { kind, name: meta(o, "name")?.to_owned(), object: o.clone(), revisions })
            })
            .collect();
        out.sort_by(|a, b| (a.kind, &a.name).cmp(&(b.kind, &b.name)));
        out
    }

    pub fn workload(&self, wanted: &WorkloadRef) -> Option<Workload> {
        self.workloads().into_iter().find(|w| w.kind.name() == wanted.kind && w.name == wanted.name)
    }

    /// `wanted` with its kind as the server names it: a kind [`parse_workload`] left as typed
    /// (not built in) must be one the server registers (`rollout`, `rollouts.argoproj.io`).
    pub fn resolve(&self, wanted: WorkloadRef) -> Result<WorkloadRef> {
        if self.kinds.workloads().any(|k| k.name() == wanted.kind) {
            return Ok(wanted);
        }
        match self.kinds.registered_named(&wanted.kind) {
            Some(k) => Ok(WorkloadRef { kind: k.name().into(), name: wanted.name }),
            None => {
                let registered: Vec<String> = self.kinds.registered().map(|k| k.as_str().to_ascii_lowercase()).collect();
                let registered = if registered.is_empty() {
                    "the server's configuration registers none".to_owned()
                } else {
                    format!("the server registers {}", registered.join(", "))
                };
                bail!("unsupported workload kind {:?}: use deployment/NAME, statefulset/NAME, daemonset/NAME, cronjob/NAME, NAME, or a kind the server registers ({registered})", wanted.kind)
            }
        }
    }

    /// The namespace's mode, by the server's own rule (excluded namespaces, allowed modes) when
    /// its configuration is known.
    pub fn mode(&self) -> ModeView {
        let view = |mode: &str, source, refused: Option<&str>| ModeView { mode: mode.into(), source, refused: refused.map(String::from) };
        let label = label(&self.namespace_object, names::MODE_LABEL);
        match &self.server {
            Server::Published(p) => {
                let policy = &p.policy;
                if policy.excludes(&self.namespace) {
                    return view("off", "excluded", None);
                }
                let (mode, refused) = policy.namespace_mode(&self.namespace, Some(&self.namespace_object));
                match (label, refused) {
                    (Some(l), Some(_)) => view(mode.as_str(), "refused-label", Some(l)),
                    (Some(_), None) => view(mode.as_str(), "label", None),
                    (None, _) => view(mode.as_str(), "default", None),
                }
            }
            Server::Unavailable(_) if names::SYSTEM_NAMESPACES.contains(&self.namespace.as_str()) => view("off", "excluded", None),
            Server::Unavailable(_) => match label {
                Some(l) => view(l, "label-unchecked", None),
                None => view("unknown", "unknown", None),
            },
        }
    }

    /// The admin's selector of sources that are never versioned (none when unknown).
    fn excluded_sources(&self) -> Selector {
        match &self.server {
            Server::Published(p) => p.policy.excluded_sources.clone(),
            Server::Unavailable(_) => Selector::default(),
        }
    }
}

/// The number of a revision object (a ReplicaSet or ControllerRevision).
pub fn revision_number(kinds: &Registry, obj: &Value) -> Option<i64> {
    match kinds.of(obj).filter(|k| !k.is_workload())?.history() {
        kinds::History::ControllerRevisions => obj.get("revision")?.as_i64(),
        _ => annotation(obj, revision_annotation(kinds, obj)?)?.parse().ok(),
    }
}

fn revision_template<'a>(kinds: &Registry, obj: &'a Value) -> Option<&'a Value> {
    obj.pointer(kinds.of(obj)?.template_pointer())
}

pub fn timestamp(s: Option<&str>) -> Option<Timestamp> {
    s.and_then(|s| s.parse().ok())
}

/// The head of a source: the hash of its current content (the `head` annotation records the
/// same once the webhook has seen the source referenced).
pub fn head_of(source: &Value) -> String {
    Content::from_object(source).hash()
}

/// Keys added, removed and changed from `old` to `new` (binary keys suffixed ` (binary)`).
pub fn key_changes(old: &Content, new: &Content) -> (Vec<String>, Vec<String>, Vec<String>) {
    let (o, n) = (flat(old), flat(new));
    let added = n.keys().filter(|k| !o.contains_key(*k)).cloned().collect();
    let removed = o.keys().filter(|k| !n.contains_key(*k)).cloned().collect();
    let changed = n.iter().filter(|(k, v)| o.get(*k).is_some_and(|ov| ov != *v)).map(|(k, _)| k.clone()).collect();
    (added, removed, changed)
}

/// data and binaryData in one map: key (binary keys suffixed) → (value, is binary).
fn flat(c: &Content) -> BTreeMap<String, (String, bool)> {
    let mut m: BTreeMap<String, (String, bool)> = c.data.iter().map(|(k, v)| (k.clone(), (v.clone(), false))).collect();
    m.extend(c.binary_data.iter().map(|(k, v)| (format!("{k} (binary)"), (v.clone(), true))));
    m
}

/// `history SOURCE`.
pub fn history(inv: &Inventory, source: &str) -> Result<History> {
    let id = source_id(source);
    let source_obj = inv.sources.get(source);
    let snaps = inv.snaps_of(source);
    if snaps.is_empty() {
        return Err(match source_obj {
            None => not_found(inv, &id),
            Some(_) => no_history(inv, source),
        });
    }
    let head = inv.head(source);
    // The source's own setting, else the server's; unknown when neither is known.
    let keep: Option<u32> = source_obj
        .and_then(|s| annotation(s, names::KEEP))
        .and_then(|k| k.trim().parse().ok())
        .or_else(|| inv.server.config().map(|c| c.gc.keep));
    let workloads = inv.workloads();

    // Every template that keeps snapshots: live templates (and Jobs), revisions of any owner.
    let live: Vec<&Value> = workloads.iter().map(|w| w.template()).collect();
    let revision_templates: Vec<&Value> = inv.revisions.iter().filter_map(|r| revision_template(inv.kinds, r)).collect();
    // Hashed as the server hashes them (adoption records are these hashes).
    let revision_hashes: BTreeSet<String> =
        inv.revisions.iter().filter_map(|r| Some(inv.kinds.revision_of(inv.kinds.of(r)?, r).1)).collect();

    // Each template's references read once, not once per snapshot (a source with 100 snapshots
    // in a namespace of 1,000 workloads: docs/plugin.md "Web view"); a revision's template hash
    // only where it references the source plainly (adoption records are of those).
    let live_refs: Vec<BTreeSet<SourceId>> = live.iter().map(|t| inv.refs(t)).collect();
    let revision_refs: Vec<BTreeSet<SourceId>> = revision_templates.iter().map(|t| inv.refs(t)).collect();
    // Per workload: (revision, its template's references, its hash if it names the source).
    type Revisions = Vec<(i64, BTreeSet<SourceId>, Option<String>)>;
    let workload_revisions: Vec<Revisions> = workloads
        .iter()
        .map(|w| {
            w.revisions
                .iter()
                .map(|(r, t)| {
                    let refs = inv.refs(t);
                    let hash = refs.contains(&id).then(|| w.kind.template_hash(t));
                    (*r, refs, hash)
                })
                .collect()
        })
        .collect();

    let n = snaps.len();
    let mut entries = Vec::new();
    for (i, s) in snaps.iter().enumerate() {
        let (added, removed, changed) = match i {
            0 => (s.content.keys(), Vec::new(), Vec::new()),
            _ => snaps[i - 1].content.changes(&s.content),
        };
        let is_head = head.as_deref() == Some(s.hash.as_str());
        let snap_id = id.with_name(&s.name);
        let mut used_by = Vec::new();
        for ((w, live), revisions) in workloads.iter().zip(&live_refs).zip(&workload_revisions) {
            let current = live.contains(&snap_id);
            let pinned: Vec<i64> = revisions.iter().filter(|(_, refs, _)| refs.contains(&snap_id)).map(|(r, _, _)| *r).collect();
            if current || !pinned.is_empty() {
                used_by.push(Usage { workload: w.reference(), current, revisions: pinned, adopted: false });
            }
            let adopted: Vec<i64> =
                revisions.iter().filter(|(_, _, hash)| hash.as_ref().is_some_and(|h| s.adopted.contains(h))).map(|(r, _, _)| *r).collect();
            if !adopted.is_empty() {
                used_by.push(Usage { workload: w.reference(), current: false, revisions: adopted, adopted: true });
            }
        }
        let mut kept_by = Vec::new();
        if is_head && source_obj.is_some() {
            kept_by.push("head".to_owned());
        }
        if live_refs.iter().any(|refs| refs.contains(&snap_id)) {
            kept_by.push("workload".into());
        }
        if revision_refs.iter().any(|refs| refs.contains(&snap_id)) {
            kept_by.push("revision".into());
        }
        if s.adopted.iter().any(|h| revision_hashes.contains(h)) {
            kept_by.push("adoption".into());
        }
        if source_obj.is_some() && keep.is_some_and(|k| i + (k as usize) >= n) {
            kept_by.push("newest".into());
        }
        entries.push(SnapshotEntry {
            revision: (i + 1) as u32,
            name: s.name.clone(),
            hash: s.hash.clone(),
            created: s.created.clone(),
            size: s.content.bytes(),
            keys: s.content.keys(),
            added,
            removed,
            changed,
            head: is_head,
            used_by,
            kept_only_by_newest: kept_by == ["newest"],
            kept_by,
        });
    }
    entries.reverse();
    Ok(History {
        namespace: inv.namespace.clone(),
        source: source.to_owned(),
        source_kind: id.kind_str().into(),
        source_exists: source_obj.is_some(),
        head,
        keep,
        snapshots: entries,
        server_config_unavailable: inv.server.unavailable(),
    })
}

/// No source nor snapshot of that name: said with the kind asked for, and for a Secret that the
/// user cannot read, why.
fn not_found(inv: &Inventory, id: &SourceId) -> anyhow::Error {
    match (&inv.secrets_unreadable, id.kind) {
        (Some(why), kind) if kind.def().confidential => anyhow!("{why}"),
        _ => anyhow!("no {} or snapshot named {:?} in namespace {}", id.kind_str(), id.name, inv.namespace),
    }
}

/// Why a source that exists has no snapshots.
fn no_history(inv: &Inventory, source: &str) -> anyhow::Error {
    let mode = inv.mode();
    let obj = &inv.sources[source];
    let id = source_id(source);
    let (kind, source) = (id.kind_str(), id.name.as_str());
    // A kind the admin turns on: whether they did here.
    let acted_on = match &inv.server {
        Server::Published(p) => p.policy.source_kinds(Some(&inv.namespace_object)).contains(id.kind),
        Server::Unavailable(_) => true,
    };
    if !acted_on {
        return anyhow!(
            "{kind} {source} has no history: confighistory does not version {kind}s in namespace {} (the admin's choice, docs/install.md)",
            inv.namespace
        );
    }
    if let Some(why) = source::never_source_object(id.kind, obj, &inv.excluded_sources()) {
        return anyhow!("{kind} {source} in namespace {} is never versioned: {why}", inv.namespace);
    }
    if !source::is_versioned(obj, &Selector::default()) {
        return anyhow!("{kind} {source} in namespace {} is not versioned (annotation {}: \"false\")", inv.namespace, names::VERSIONED);
    }
    if !source::is_versioned(obj, &inv.excluded_sources()) {
        return anyhow!(
            "{kind} {source} in namespace {} is not versioned: the admin excludes {kind}s matching {}",
            inv.namespace,
            inv.excluded_sources()
        );
    }
    if obj.immutable() {
        return anyhow!("{kind} {source} in namespace {} is immutable: confighistory leaves it alone", inv.namespace);
    }
    if mode.source == "unknown" {
        return anyhow!(
            "{kind} {source} in namespace {} has no snapshots; the namespace's mode is unknown ({})",
            inv.namespace,
            inv.server.unavailable().unwrap_or_default()
        );
    }
    if mode.mode != "rewrite" {
        return anyhow!(
            "{kind} {source} has no history: confighistory is in mode {} in namespace {}, and only rewrite takes snapshots",
            mode.mode,
            inv.namespace
        );
    }
    anyhow!(
        "{kind} {source} in namespace {} has no snapshots yet: no workload has been released with it since confighistory was installed",
        inv.namespace
    )
}

/// A content picked for one side of a diff.
#[derive(Clone, Debug)]
pub struct Picked {
    pub side: DiffSide,
    pub content: SourceContent,
}

/// Resolves a diff argument: `head`, a snapshot revision number, a hash (or unique prefix), a
/// snapshot name, or `WORKLOAD@N` (the snapshot rollout revision N of a workload ran with).
pub fn pick(inv: &Inventory, source: &str, spec: &str) -> Result<Picked> {
    let snaps = inv.snaps_of(source);
    let head = inv.head(source);
    let head = head.as_deref();
    let of = |i: usize| -> Picked {
        let s = &snaps[i];
        Picked {
            side: DiffSide {
                revision: Some((i + 1) as u32),
                name: s.name.clone(),
                hash: Some(s.hash.clone()),
                head: head == Some(s.hash.as_str()),
                created: s.created.clone(),
            },
            content: s.content.clone(),
        }
    };
    if spec == "head" {
        if let Some(i) = snaps.iter().rposition(|s| Some(s.hash.as_str()) == head) {
            return Ok(of(i));
        }
        let id = source_id(source);
        let Some(obj) = inv.sources.get(source) else { bail!("{source} has no head: the source {} was deleted", id.kind_str()) };
        // A Secret's live content has no hash the plugin could compute (its head is a MAC).
        let side = DiffSide { revision: None, name: id.name.clone(), hash: head.map(String::from), head: true, created: None };
        return Ok(Picked { side, content: inv.content_of(id.kind, obj) });
    }
    if let Ok(n) = spec.parse::<usize>() {
        if n == 0 || n > snaps.len() {
            bail!("{source} has no revision {n}: its snapshots are revisions 1 to {} (see `history {source}`)", snaps.len());
        }
        return Ok(of(n - 1));
    }
    if let Some((workload, rev)) = spec.rsplit_once('@') {
        let wanted = inv.resolve(parse_workload(workload)?)?;
        let w = inv.workload(&wanted).ok_or_else(|| anyhow!("{wanted} not found in namespace {}", inv.namespace))?;
        let rev: i64 = rev.parse().map_err(|_| anyhow!("{spec:?}: expected WORKLOAD@REVISION, e.g. deployment/app@3"))?;
        let (_, template) = w.revisions.iter().find(|(r, _)| *r == rev).ok_or_else(|| anyhow!("{wanted} has no revision {rev}"))?;
        let used = config_uses(inv, w.kind, template).into_iter().find(|c| c.source == source);
        let Some(used) = used else { bail!("revision {rev} of {wanted} does not use {source}") };
        let Some(name) = used.snapshot.filter(|_| used.exists) else {
            bail!("revision {rev} of {wanted} references {source} plainly and no snapshot records what it ran with (it predates confighistory)")
        };
        let i = snaps.iter().position(|s| s.name == name).ok_or_else(|| anyhow!("snapshot {name} not found"))?;
        return Ok(of(i));
    }
    if let Some(i) = snaps.iter().position(|s| s.name == spec) {
        return Ok(of(i));
    }
    let matching: Vec<usize> = (0..snaps.len()).filter(|&i| spec.len() >= 4 && snaps[i].hash.starts_with(spec)).collect();
    match matching.as_slice() {
        [i] => Ok(of(*i)),
        [] => bail!("no snapshot of {source} matches {spec:?} (use head, a revision number, a hash, a snapshot name or WORKLOAD@REVISION)"),
        _ => bail!("{spec:?} matches {} snapshots of {source}; give more of the hash", matching.len()),
    }
}

/// `diff SOURCE [A] [B]`: default B is the head, default A the snapshot before B.
/// A Secret's values are compared, never shown, unless `show_values` (docs/plugin.md, "Secrets").
pub fn diff(inv: &Inventory, source: &str, a: Option<&str>, b: Option<&str>, show_values: bool) -> Result<Diff> {
    let snaps = inv.snaps_of(source);
    if snaps.is_empty() {
        return Err(match inv.sources.get(source) {
            None => not_found(inv, &source_id(source)),
            Some(_) => no_history(inv, source),
        });
    }
    let to = match b {
        Some(b) => pick(inv, source, b)?,
        None if inv.sources.contains_key(source) => pick(inv, source, "head")?,
        None => pick(inv, source, &snaps.len().to_string())?,
    };
    let from = match a {
        Some(a) => pick(inv, source, a)?,
        None => {
            // The newest snapshot older than `to` (by revision; head content without a snapshot
            // compares against the newest snapshot).
            let before = match to.side.revision {
                Some(r) => r as usize - 1,
                None => snaps.len(),
            };
            if before == 0 {
                bail!("{source} has only one snapshot ({}): nothing before it to compare with", to.side.name);
            }
            pick(inv, source, &before.to_string())?
        }
    };
    Ok(compare(&inv.namespace, source, from, to, show_values))
}

/// The key- and line-level difference between two contents. A Secret's keys are listed with
/// their sizes and whether they changed; their values go into hunks only with `show_values`.
pub fn compare(namespace: &str, source: &str, from: Picked, to: Picked, show_values: bool) -> Diff {
    let (old_sizes, new_sizes) = (from.content.sizes(), to.content.sizes());
    let (added, removed, changed) = from.content.changes(&to.content);
    let unchanged = new_sizes.keys().filter(|k| old_sizes.contains_key(*k) && !changed.contains(k)).cloned().collect();
    let hidden = to.content.is_secret() && !show_values;
    let all: BTreeMap<&String, &str> = added
        .iter()
        .map(|k| (k, "added"))
        .chain(removed.iter().map(|k| (k, "removed")))
        .chain(changed.iter().map(|k| (k, "changed")))
        .collect();
    let mut keys: Vec<KeyDiff> = Vec::new();
    for (k, change) in all {
        let (old_size, new_size) = (old_sizes.get(k).copied(), new_sizes.get(k).copied());
        let (old, new) = (from.content.text(k, show_values), to.content.text(k, show_values));
        // A side with the key but no text to compare: a binary value.
        let binary = !hidden && ((old_size.is_some() && old.is_none()) || (new_size.is_some() && new.is_none()));
        let hunks = if hidden || binary {
            Vec::new()
        } else {
            super::linediff::hunks(old.as_deref().unwrap_or(""), new.as_deref().unwrap_or(""), 3)
        };
        keys.push(KeyDiff { key: k.clone(), change: change.into(), binary, hidden, old_size, new_size, hunks });
    }
    let type_changed = match (&from.content, &to.content) {
        (SourceContent::Secret(o), SourceContent::Secret(n)) if o.secret_type() != n.secret_type() => {
            Some(TypeChange { from: o.secret_type().into(), to: n.secret_type().into() })
        }
        _ => None,
    };
    Diff {
        namespace: namespace.into(),
        source: source.into(),
        source_kind: source_id(source).kind_str().into(),
        from: from.side,
        to: to.side,
        added,
        removed,
        changed,
        unchanged,
        keys,
        type_changed,
    }
}

/// Parses `deployment/NAME`, `sts/NAME`, … or a bare NAME (a Deployment).
pub fn parse_workload(s: &str) -> Result<WorkloadRef> {
    let (kind, name) = match s.split_once('/') {
        None => (Kind::Deployment.as_str(), s),
        Some((k, n)) => (k, n),
    };
    let typed = kind.to_ascii_lowercase();
    let usage = || {
        let kinds: Vec<String> = undoable().map(|k| format!("{}/NAME", k.as_str().to_ascii_lowercase())).collect();
        format!("use {} or NAME", kinds.join(", "))
    };
    let builtin = Kind::BUILTIN.into_iter().filter(|k| k.is_workload()).find(|k| k.typed_as(&typed));
    let kind = match builtin {
        Some(k) if !k.template_mutable() => {
            bail!("unsupported workload kind {typed:?}: {} (a {} has no rollout history)", usage(), k.as_str())
        }
        Some(k) => k.as_str(),
        // Perhaps a kind the server registers: told once its configuration is read
        // (`Inventory::resolve`). Only a Kubernetes name is kept.
        None if names::is_dns_subdomain(&typed) => typed.as_str(),
        None => bail!("unsupported workload kind {typed:?}: {}", usage()),
    };
    // The name goes into a request path.
    if !names::is_dns_subdomain(name) {
        bail!("{s:?} is not a valid workload name: use KIND/NAME or NAME");
    }
    Ok(WorkloadRef { kind: kind.into(), name: name.into() })
}

/// The built-in kinds the plugin shows and undoes (a Job's template never changes).
fn undoable() -> impl Iterator<Item = Kind> {
    Kind::BUILTIN.into_iter().filter(|k| k.is_workload() && k.template_mutable())
}

/// Images of a template's containers.
pub fn images(template: &Value) -> Vec<Image> {
    template
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .map(|cs| {
            cs.iter()
                .map(|c| Image {
                    container: c["name"].as_str().unwrap_or_default().into(),
                    image: c["image"].as_str().unwrap_or_default().into(),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Which content of each source a template of `kind` runs with.
pub fn config_uses(inv: &Inventory, kind: Kind, template: &Value) -> Vec<ConfigUse> {
    let snaps = inv.snaps();
    let tpl_hash = kind.template_hash(template);
    let mut out: Vec<ConfigUse> = inv
        .refs(template)
        .into_iter()
        .map(|id| {
            let entry = id.to_string();
            let name = id.name.clone();
            if let Some(s) = snaps.iter().find(|s| s.kind == id.kind && s.name == name) {
                return ConfigUse {
                    source: s.source.clone(),
                    reference: name.clone(),
                    snapshot: Some(name),
                    hash: Some(s.hash.clone()),
                    exists: true,
                    via: "pin".into(),
                };
            }
            // A snapshot name whose object is gone, unless a source by that name exists.
            if !inv.sources.contains_key(&entry) {
                if let Some((source, hash, _)) = snapshot::parse_name(&name) {
                    return ConfigUse {
                        source: id.with_name(source).to_string(),
                        reference: name.clone(),
                        snapshot: Some(name.clone()),
                        hash: Some(hash.into()),
                        exists: false,
                        via: "pin".into(),
                    };
                }
            }
            match snaps.iter().rev().find(|s| s.source == entry && s.adopted.contains(&tpl_hash)) {
                Some(s) => ConfigUse {
                    source: entry,
                    reference: name,
                    snapshot: Some(s.name.clone()),
                    hash: Some(s.hash.clone()),
                    exists: true,
                    via: "adoption".into(),
                },
                None => ConfigUse { source: entry, reference: name, snapshot: None, hash: None, exists: false, via: "plain".into() },
            }
        })
        .collect();
    out.sort_by(|a, b| a.source.cmp(&b.source));
    out
}

pub fn revision_config(inv: &Inventory, kind: Kind, revision: Option<i64>, template: &Value) -> RevisionConfig {
    RevisionConfig { revision, images: images(template), config: config_uses(inv, kind, template) }
}

/// Whether an ownerReference names `uid` as the object's controller.
pub fn is_controller_ref(r: &Value, uid: &str) -> bool {
    !uid.is_empty() && r["uid"].as_str() == Some(uid) && r["controller"] == json!(true)
}

/// The patch an undo applies: the target revision's pod template and nothing else (a revision's
/// other fields and annotations are not the rollback's to copy). A kind whose history is kept in
/// ReplicaSets (a Deployment) gets a JSON patch of its template (the ReplicaSet's template
/// without the kind's hash label); one whose history is kept in ControllerRevisions (a
/// StatefulSet or DaemonSet) the template of the revision's data, replacing the current one as
/// that data says.
pub fn rollback_patch(kind: Kind, target: &Value) -> Result<Value> {
    match kind.history() {
        kinds::History::ReplicaSets { hash_label, .. } => {
            let mut tpl =
                target.pointer(Kind::ReplicaSet.template_pointer()).cloned().ok_or_else(|| anyhow!("the revision has no pod template"))?;
            if let Some(labels) = tpl.pointer_mut("/metadata/labels").and_then(Value::as_object_mut) {
                labels.remove(hash_label);
            }
            Ok(json!([{"op": "replace", "path": kind.template_pointer(), "value": tpl}]))
        }
        kinds::History::ControllerRevisions => {
            let tpl = target
                .pointer(Kind::ControllerRevision.template_pointer())
                .cloned()
                .ok_or_else(|| anyhow!("the revision has no pod template"))?;
            Ok(json!({"spec": {"template": tpl}}))
        }
        kinds::History::None => bail!("a {} has no rollout history", kind.as_str()),
    }
}

/// The revision an undo goes to, as kubectl picks it: `to` when non-zero, else the newest
/// revision before the latest.
pub fn undo_target(w: &Workload, to: i64) -> Result<(i64, Value)> {
    if !w.kind.has_history() {
        bail!("{} has no rollout history: only Deployments, StatefulSets and DaemonSets can be undone", w.reference());
    }
    if to != 0 {
        return w.revisions.iter().find(|(r, _)| *r == to).cloned().ok_or_else(|| {
            let have: Vec<String> = w.revisions.iter().map(|(r, _)| r.to_string()).collect();
            anyhow!("unable to find specified revision {to} in history of {} (revisions: {})", w.reference(), have.join(", "))
        });
    }
    if w.revisions.len() < 2 {
        bail!("no rollout history found for {}: it has no previous revision", w.reference());
    }
    Ok(w.revisions[w.revisions.len() - 2].clone())
}

/// Settle window for a source: its annotation, the namespace's, or the server's default
/// (unknown when the server's configuration is).
fn settle(inv: &Inventory, source: &Value) -> Option<u64> {
    annotation(source, names::SETTLE)
        .or_else(|| annotation(&inv.namespace_object, names::SETTLE))
        .and_then(|s| crate::model::policy::parse_duration(s).ok())
        .map(|d| d.as_secs())
        .or_else(|| inv.server.config().map(|c| c.settle_seconds))
}

/// What `status --wait` still waits for: one line per reference that is neither on its source's
/// head nor held (an undo's, as intended), saying for what it waits. Empty: settled. A source
/// confighistory records no head for (unversioned, immutable, missing) has nothing to wait for,
/// and neither has a plain reference where the mode pins nothing (enforce, audit, off).
pub fn waiting(s: &Status) -> Vec<String> {
    s.pins
        .iter()
        .filter(|p| !(p.held || (p.hash.is_some() && p.is_head)))
        .filter_map(|p| {
            let head = p.head.as_deref()?;
            let why = if let Some(pending) = &p.pending {
                match &pending.fires_at {
                    Some(at) => format!("propagation to {head}, due at {at}"),
                    None => format!("propagation to {head} (settle window unknown)"),
                }
            } else if p.manual {
                format!("a release: {head} is the head and the source says rollout: manual")
            } else if p.hash.is_none() {
                if s.mode != "rewrite" {
                    return None;
                }
                format!("being pinned to {head}")
            } else {
                format!("propagation to {head}")
            };
            Some(format!("{} ({}): {why}", p.source, p.reference))
        })
        .collect()
}

/// `status WORKLOAD`.
pub fn status(inv: &Inventory, wanted: &WorkloadRef) -> Result<Status> {
    let w = inv.workload(wanted).ok_or_else(|| anyhow!("{wanted} not found in namespace {}", inv.namespace))?;
    let mode = inv.mode();
    let excluded_sources = inv.excluded_sources();
    let held = w.held();
    let template = w.template();
    let mut pins = Vec::new();
    let mut secrets_unreadable = None;
    for used in config_uses(inv, w.kind, template) {
        let source_obj = inv.sources.get(&used.source);
        let head = inv.head(&used.source);
        let kind = source_id(&used.source).kind;
        if kind.def().confidential && inv.secrets_unreadable.is_some() {
            secrets_unreadable.clone_from(&inv.secrets_unreadable);
        }
        let manual = source_obj.and_then(|s| annotation(s, names::ROLLOUT)) == Some("manual");
        let is_head = used.via == "pin" && used.hash.is_some() && used.hash == head;
        let is_held = held.contains(&used.source);
        let mut pending = None;
        // Propagation follows the head annotation the webhook recorded with changed-at.
        if let (Some(src), Some(h)) = (source_obj, source_obj.and_then(|s| annotation(s, names::HEAD))) {
            let versioned = source::is_versioned_object(kind, src, &excluded_sources);
            let stale = used.via != "pin" || used.hash.as_deref() != Some(h);
            if let (Some(at), true) = (source::pending_change(src, h), mode.mode == "rewrite" && versioned && !is_held && stale) {
                let secs = settle(inv, src);
                let fires_at = secs.zip(timestamp(Some(at))).and_then(|(s, t)| t.checked_add(SignedDuration::from_secs(s as i64)).ok());
                pending = Some(Pending {
                    head: h.to_owned(),
                    changed_at: at.to_owned(),
                    fires_at: fires_at.map(|t| t.to_string()),
                    settle_seconds: secs,
                });
            }
        }
        pins.push(Pin {
            source: used.source,
            reference: used.reference,
            hash: if used.via == "pin" { used.hash } else { None },
            head,
            is_head,
            held: is_held,
            exists: used.exists || (used.via != "pin" && source_obj.is_some()),
            manual,
            pending,
        });
    }
    let (undo, undo_unavailable) = match undo_target(&w, 0) {
        Ok((rev, t)) => (Some(revision_config(inv, w.kind, Some(rev), &t)), None),
        Err(e) => (None, Some(e.to_string())),
    };
    Ok(Status {
        namespace: inv.namespace.clone(),
        workload: w.reference(),
        mode_from_label: matches!(mode.source, "label" | "label-unchecked"),
        mode: mode.mode,
        mode_source: mode.source.into(),
        refused_label: mode.refused,
        server_config_unavailable: inv.server.unavailable(),
        secrets_unreadable,
        revision: w.current_revision(),
        images: images(template),
        pins,
        undo,
        undo_unavailable,
    })
}

/// Refuses an undo to a revision that uses Secrets the user cannot read: whether their snapshots
/// still exist cannot be told (docs/plugin.md, "Secrets").
pub fn check_secrets_readable(inv: &Inventory, target: &RevisionConfig) -> Result<()> {
    match &inv.secrets_unreadable {
        Some(why) if target.config.iter().any(|c| source_id(&c.source).kind.def().confidential) => {
            bail!("cannot check the Secret snapshots revision {} uses: {why}", target.revision.unwrap_or_default())
        }
        _ => Ok(()),
    }
}

/// Refuses an undo whose target names a snapshot that no longer exists.
pub fn check_target(w: &WorkloadRef, target: &RevisionConfig) -> Result<()> {
    let gone: Vec<&ConfigUse> = target.config.iter().filter(|c| c.via == "pin" && !c.exists).collect();
    if gone.is_empty() {
        return Ok(());
    }
    let list: Vec<String> = gone.iter().map(|c| format!("{} (config {})", c.reference, c.source)).collect();
    bail!(
        "refusing to roll {w} back to revision {}: its config snapshot {} no longer exists, so its pods could not start with the config they ran with",
        target.revision.unwrap_or_default(),
        list.join(", ")
    )
}

/// The `list` table from snapshot metadata, the sources' metadata (`None`: gone) and workload
/// metadata, all of them `{"metadata": ...}` objects.
pub fn sources(
    namespace: Option<&str>,
    snapshots: &[Value],
    sources: &BTreeMap<(String, String), Option<Value>>,
    workloads: &[Value],
) -> Sources {
    let mut rows: BTreeMap<(String, String), SourceRow> = BTreeMap::new();
    for ((ns, name), obj) in sources {
        let head = obj.as_ref().and_then(|o| annotation(o, names::HEAD)).map(String::from);
        let row = SourceRow {
            namespace: ns.clone(),
            name: name.clone(),
            exists: obj.is_some(),
            snapshots: 0,
            head,
            workloads: 0,
            behind: 0,
            held: 0,
        };
        rows.insert((ns.clone(), name.clone()), row);
    }
    for s in snapshots {
        if let Some(row) = snapshot_source(s).and_then(|k| rows.get_mut(&k)) {
            row.snapshots += 1;
        }
    }
    for w in workloads {
        let ns = meta(w, "namespace").unwrap_or_default().to_owned();
        let pins: BTreeMap<String, String> = source::pins(w).into_iter().map(|(id, h)| (id.to_string(), h)).collect();
        let held: BTreeSet<String> = source::holds(w).into_keys().map(|id| id.to_string()).collect();
        for (source, hash) in &pins {
            let Some(row) = rows.get_mut(&(ns.clone(), source.clone())) else { continue };
            row.workloads += 1;
            if held.contains(source) {
                row.held += 1;
            } else if row.head.as_ref().is_some_and(|h| h != hash) {
                row.behind += 1;
            }
        }
    }
    Sources { namespace: namespace.map(String::from), sources: rows.into_values().collect(), secrets_unreadable: None }
}

/// (namespace, source entry) of a snapshot, from its metadata and `kind` (`secret/db` for a
/// Secret's).
pub fn snapshot_source(s: &Value) -> Option<(String, String)> {
    let name = annotation(s, names::SOURCE_NAME).or_else(|| label(s, names::SOURCE_LABEL))?;
    Some((meta(s, "namespace")?.to_owned(), SourceId::new(kind_of(s), name).to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(pairs: &[(&str, &[u8])]) -> SecretContent {
        SecretContent::new(secret::OPAQUE, pairs.iter().map(|(k, v)| (k.to_string(), v.to_vec())).collect())
    }

    fn picked(name: &str, content: SourceContent) -> Picked {
        Picked { side: DiffSide { revision: None, name: name.into(), hash: None, head: false, created: None }, content }
    }

    #[test]
    fn sealing_takes_a_secrets_values_out_of_its_object() {
        let applied = r#"{"kind":"Secret","data":{"password":"aHVudGVyMg=="},"stringData":{"user":"admin"}}"#;
        let obj = json!({"kind": "Secret", "metadata": {"name": "db", "annotations": {LAST_APPLIED: applied, "a": "b"}}, "type": "Opaque",
            "data": {"password": "aHVudGVyMg=="}, "stringData": {"user": "admin"}});
        let cm = json!({"kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"a": "b"}});
        let inv =
            Inventory { sources: BTreeMap::from([("secret/db".into(), obj.clone()), ("cfg".into(), cm.clone())]), ..Default::default() };
        let inv = inv.sealed().sealed();
        let sealed = &inv.sources["secret/db"];
        assert!(sealed.get("data").is_none() && sealed.get("stringData").is_none(), "{sealed}");
        assert_eq!(sealed["metadata"]["annotations"], json!({"a": "b"}), "kubectl's copy of the values dropped");
        assert_eq!(inv.sources["cfg"], cm, "a ConfigMap is left as it is");
        let content = inv.content_of(SourceKind::Secret, sealed);
        assert_eq!(content, SourceContent::Secret(secret(&[("password", b"hunter2"), ("user", b"admin")])), "sealing twice keeps it");
        assert_eq!(content.sizes(), BTreeMap::from([("password".to_owned(), 7), ("user".to_owned(), 5)]));
        let debug = format!("{inv:?}");
        assert!(!debug.contains("hunter2") && !debug.contains("aHVudGVyMg") && !debug.contains("admin"), "{debug}");
    }

    #[test]
    fn a_secrets_keys_are_compared_and_its_values_shown_only_when_asked() {
        let old = SourceContent::Secret(secret(&[("a", b"1"), ("b", b"x"), ("bin", b"\xff\x00")]));
        let new = SourceContent::Secret(secret(&[("a", b"2"), ("c", b"new"), ("bin", b"\xfe")]));
        assert_eq!(old.changes(&new), (vec!["c".into()], vec!["b".into()], vec!["a".into(), "bin".into()]));
        let hidden = compare("ns", "secret/s", picked("s-1", old.clone()), picked("s-2", new.clone()), false);
        assert!(hidden.keys.iter().all(|k| k.hidden && k.hunks.is_empty() && !k.binary), "{:?}", hidden.keys);
        let bin = hidden.keys.iter().find(|k| k.key == "bin").unwrap();
        assert_eq!((bin.old_size, bin.new_size), (Some(2), Some(1)));
        let shown = compare("ns", "secret/s", picked("s-1", old), picked("s-2", new), true);
        let by_key: BTreeMap<&str, &KeyDiff> = shown.keys.iter().map(|k| (k.key.as_str(), k)).collect();
        assert!(by_key["bin"].binary && by_key["bin"].hunks.is_empty(), "not UTF-8: not printed as text");
        assert_eq!(by_key["a"].hunks[0].lines, ["-1", "+2"]);
        // Contents of two kinds never share keys.
        let cm = SourceContent::ConfigMap(Content { data: [("a".into(), "1".into())].into(), ..Default::default() });
        let s = SourceContent::Secret(secret(&[("a", b"1")]));
        assert_eq!(cm.changes(&s), (vec!["a".into()], vec!["a".into()], vec![]));
    }
}

/// What the web view's `history` of a source costs past the API server's reads, on the shape of
/// docs/plugin.md "Web view" (1,001 Deployments, 1,100 ReplicaSets, a source with 100 snapshots):
/// `cargo test --release --lib -- --ignored history_of_a_source_in_a_large_namespace --nocapture`.
#[cfg(test)]
mod scale {
    use super::*;

    fn rs(owner: &str, n: i64, snapshot: &str) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": format!("{owner}-h{n}"), "annotations": {"deployment.kubernetes.io/revision": n.to_string()},
                "ownerReferences": [{"kind": "Deployment", "name": owner, "uid": format!("uid-{owner}"), "controller": true}]},
            "spec": {"template": {"metadata": {"labels": {"app": "pricing", "pod-template-hash": format!("h{n}")}},
                "spec": {"containers": [{"name": "app", "image": format!("pricing:{n}")}], "volumes": [{"name": "c", "configMap": {"name": snapshot}}]}}}})
    }

    pub(super) fn large_namespace() -> Inventory {
        let mut inv = Inventory { namespace: "ns".into(), namespace_object: json!({"metadata": {"name": "ns"}}), ..Default::default() };
        let mut last = String::new();
        for i in 1..=100 {
            let c = Content { data: [("config.yaml".to_owned(), format!("release: {i}\n"))].into(), ..Default::default() };
            last = snapshot::name("pricing-config", &c.hash(), 0);
            inv.snapshots.push(snapshot::object("ns", "pricing-config", &last, &c, &[]));
            inv.revisions.push(rs("pricing", i, &last));
            if i == 100 {
                let obj = json!({"kind": "ConfigMap", "metadata": {"name": "pricing-config", "annotations": {names::HEAD: c.hash()}}, "data": c.data});
                inv.sources.insert("pricing-config".into(), obj);
            }
        }
        for i in 0..=1000 {
            let name = if i == 1000 { "pricing".to_owned() } else { format!("app-{i:04}") };
            if i < 1000 {
                inv.revisions.push(rs(&name, 1, &last));
            }
            let template = rs(&name, 100, &last)["spec"]["template"].clone();
            inv.workloads.push(json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": name, "uid": format!("uid-{name}"), "annotations": {"deployment.kubernetes.io/revision": "100"}},
                "spec": {"template": template}}));
        }
        inv.sealed()
    }

    #[test]
    #[ignore]
    fn history_of_a_source_in_a_large_namespace() {
        let inv = large_namespace();
        let t = std::time::Instant::now();
        let workloads = inv.workloads().len();
        eprintln!("workloads(): {workloads} in {:?}", t.elapsed());
        let t = std::time::Instant::now();
        let h = history(&inv, "pricing-config").unwrap();
        eprintln!("history: {} snapshots in {:?}", h.snapshots.len(), t.elapsed());
        assert_eq!(h.snapshots.len(), 100);
    }
}
