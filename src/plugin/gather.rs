//! Kube I/O: reads a namespace into an [`Inventory`] and applies undos. Everything it returns is
//! plain data for [`super::build`].

use anyhow::{anyhow, bail, Context as _, Result};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams};
use serde_json::{json, Value};

use super::build::{self, Inventory, Workload};
use crate::model::ids::{SourceId, SourceKind, SourceKinds};
use crate::model::kinds::Kind;
use crate::model::kinds::{History, Registry};
use crate::model::names;

/// Field manager of the plugin's writes.
pub const FIELD_MANAGER: &str = "kubectl-confighistory";

pub struct Ctx {
    pub client: kube::Client,
    pub namespace: String,
    /// `NAMESPACE/NAME` of the ConfigMap the server publishes its configuration in.
    pub server_config: String,
}

/// The server's published configuration; what cannot be read is said, never an error.
pub async fn server(ctx: &Ctx) -> build::Server {
    let loc = &ctx.server_config;
    let (namespace, name) = match crate::model::published::parse_location(loc) {
        Ok(l) => l,
        Err(e) => return build::Server::Unavailable(e),
    };
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &namespace, &ApiResource::erase::<ConfigMap>(&()));
    match api.get_opt(&name).await {
        Ok(cm) => build::Server::from_configmap(loc, cm.and_then(|o| serde_json::to_value(o).ok()).as_ref()),
        Err(kube::Error::Api(s)) if s.code == 403 => build::Server::Unavailable(format!(
            "you may not read ConfigMap {loc} ({}); the chart lets every authenticated user read it, so the release is older than this plugin or elsewhere (--server-config)",
            s.message
        )),
        Err(e) => build::Server::Unavailable(format!("cannot read ConfigMap {loc}: {e}")),
    }
}

/// A readable message for an API error.
fn api_err(e: kube::Error, what: &str) -> anyhow::Error {
    match e {
        kube::Error::Api(s) if s.code == 403 => anyhow!("{what}: forbidden: {}", s.message),
        kube::Error::Api(s) => anyhow!("{what}: {}", s.message),
        other => anyhow!("{what}: cannot reach the API server: {other}"),
    }
}

/// The objects of `ar` in the namespace; with `missing_is_empty`, a resource the API server does
/// not serve (404) has no objects.
async fn list_or_missing(ctx: &Ctx, ar: &ApiResource, params: &ListParams, missing_is_empty: bool) -> Result<Vec<Value>> {
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &ctx.namespace, ar);
    match api.list(params).await {
        Err(kube::Error::Api(s)) if missing_is_empty && s.code == 404 => Ok(Vec::new()),
        listed => Ok(items(listed.map_err(|e| api_err(e, &format!("list {}", ar.plural)))?, ar)),
    }
}

/// A list's items as JSON, each with its kind and apiVersion (list items carry none; the
/// builders need them).
fn items(list: kube::core::ObjectList<DynamicObject>, ar: &ApiResource) -> Vec<Value> {
    list.items
        .into_iter()
        .map(|o| {
            let mut v = serde_json::to_value(o).unwrap_or_default();
            v["kind"] = json!(ar.kind);
            v["apiVersion"] = json!(ar.api_version);
            v
        })
        .collect()
}

/// The resource of `kind`, at the version it is served at (`kinds` resolved by
/// [`crate::cluster::watch::resolve_kinds`]).
pub fn resource(kind: Kind, kinds: &Registry) -> ApiResource {
    crate::cluster::watch::kind_resource(kind, kinds)
}

/// Fails clearly when confighistory's webhooks are not registered. A client that may not list
/// webhook configurations is given the benefit of the doubt.
pub async fn check_installed(client: &kube::Client) -> Result<()> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &ApiResource::erase::<MutatingWebhookConfiguration>(&()));
    match api.list(&ListParams::default()).await {
        Ok(list) => {
            let installed = list.items.iter().any(|c| {
                c.data["webhooks"]
                    .as_array()
                    .is_some_and(|hooks| hooks.iter().any(|h| h["name"].as_str().is_some_and(|n| n.ends_with(".confighistory.io"))))
            });
            if installed {
                Ok(())
            } else {
                bail!("confighistory is not installed in this cluster (no MutatingWebhookConfiguration has a *.confighistory.io webhook); see docs/install.md")
            }
        }
        Err(kube::Error::Api(s)) if s.code == 403 => Ok(()),
        Err(e) => Err(api_err(e, "list mutatingwebhookconfigurations")),
    }
}

/// The resource a source kind's objects are served as.
fn source_resource(kind: SourceKind) -> ApiResource {
    crate::cluster::source_resource(kind)
}

/// What to tell a user who may not read Secrets (the plugin reads them with their own
/// credentials, docs/plugin.md "Secrets"). The API server's message names the user and the verb,
/// never a value.
fn secrets_forbidden(namespace: &str, verb: &str, message: &str) -> String {
    format!(
        "you may not {verb} Secrets in namespace {namespace} ({message}); the plugin reads them with your own credentials: ask for get and list on secrets there (check with `kubectl auth can-i {verb} secrets -n {namespace}`)"
    )
}

/// The snapshots of `kind` in the namespace; a 403 on Secrets is `Err(why)` to be said, not a failure.
async fn list_snapshots(ctx: &Ctx, kind: SourceKind) -> Result<std::result::Result<Vec<Value>, String>> {
    let params = ListParams::default().labels(names::HASH_LABEL);
    let ar = source_resource(kind);
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &ctx.namespace, &ar);
    match api.list(&params).await {
        Err(kube::Error::Api(s)) if s.code == 403 && kind.def().confidential => {
            Ok(Err(secrets_forbidden(&ctx.namespace, "list", &s.message)))
        }
        Err(e) => Err(api_err(e, &format!("list {}", ar.plural))),
        Ok(list) => Ok(Ok(items(list, &ar))),
    }
}

/// Reads the namespace: its object, snapshots, workloads and revisions, and the given sources
/// plus every source the workloads reference. Secrets are read (with the user's credentials)
/// where the server versions them or one is asked for; their values are sealed
/// ([`Inventory::sealed`]) before anything else sees them.
pub async fn inventory(ctx: &Ctx, sources: &[SourceId]) -> Result<Inventory> {
    let namespace_object = namespace_object(ctx).await?;
    let all = ListParams::default();
    let server = server(ctx).await;
    let kinds = kinds(ctx, &server).await;
    let mut inv = Inventory { namespace: ctx.namespace.clone(), namespace_object, server, kinds, ..Default::default() };
    // Secrets only where the server versions them, or when one is asked for.
    let read = sources.iter().fold(inv.source_kinds(), |read, id| read.with(id.kind));
    let ((snapshots, unreadable), workloads, revisions) = futures::try_join!(
        namespace_snapshots(ctx, read),
        futures::future::try_join_all(kinds.workloads().map(|k| list_kind(ctx, k, kinds, &all))),
        futures::future::try_join_all(kinds.revisions().map(|k| list_kind(ctx, k, kinds, &all))),
    )?;
    (inv.snapshots, inv.secrets_unreadable) = (snapshots, unreadable);
    inv.workloads = workloads.concat();
    inv.revisions = revisions.concat();
    let mut inv = inv.sealed();
    // Sources: the ones asked for, those of snapshots in use, and plain references.
    let mut wanted: std::collections::BTreeSet<SourceId> = sources.iter().cloned().collect();
    let templates: Vec<Value> = inv.workloads().iter().map(|w| w.template().clone()).collect();
    referenced_sources(&inv, templates.iter(), &mut wanted);
    read_sources(ctx, &mut inv, wanted).await?;
    Ok(inv.sealed())
}

/// The Namespace object, or only its name when the user may not read it (defaults then apply).
async fn namespace_object(ctx: &Ctx) -> Result<Value> {
    let ns_api: Api<DynamicObject> = Api::all_with(ctx.client.clone(), &ApiResource::erase::<Namespace>(&()));
    match ns_api.get_opt(&ctx.namespace).await {
        Ok(Some(ns)) => Ok(serde_json::to_value(ns)?),
        Ok(None) => bail!("namespace {:?} not found", ctx.namespace),
        // May not read namespaces: go on with defaults.
        Err(kube::Error::Api(s)) if s.code == 403 => Ok(json!({"metadata": {"name": ctx.namespace}})),
        Err(e) => Err(api_err(e, &format!("get namespace {}", ctx.namespace))),
    }
}

/// Adds to `wanted` the sources `templates` reference (a snapshot's source for a pinned one).
fn referenced_sources<'a>(inv: &Inventory, templates: impl Iterator<Item = &'a Value>, wanted: &mut std::collections::BTreeSet<SourceId>) {
    let snap_sources: std::collections::BTreeMap<(SourceKind, String), String> =
        inv.snaps().into_iter().map(|s| ((s.kind, s.name), s.source)).collect();
    for template in templates {
        for id in inv.refs(template) {
            let source = snap_sources.get(&(id.kind, id.name.clone())).map(|entry| build::source_id(entry));
            wanted.insert(source.unwrap_or(id));
        }
    }
}

/// Reads the `wanted` sources into `inv.sources` (a Secret's only where Secrets are readable).
async fn read_sources(ctx: &Ctx, inv: &mut Inventory, wanted: std::collections::BTreeSet<SourceId>) -> Result<()> {
    // Names from templates: only Kubernetes names go into a request path (any other cannot exist).
    for id in wanted.into_iter().filter(|id| names::is_dns_subdomain(&id.name)) {
        if id.kind.def().confidential && inv.secrets_unreadable.is_some() {
            continue;
        }
        let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &ctx.namespace, &source_resource(id.kind));
        let got = match api.get_opt(&id.name).await {
            Err(kube::Error::Api(s)) if s.code == 403 && id.kind.def().confidential => {
                inv.secrets_unreadable = Some(secrets_forbidden(&ctx.namespace, "get", &s.message));
                continue;
            }
            got => got.map_err(|e| api_err(e, &format!("get {} {}", id.kind_str().to_ascii_lowercase(), id.name)))?,
        };
        if let Some(obj) = got {
            let mut v = serde_json::to_value(obj)?;
            v["kind"] = json!(id.kind_str());
            inv.sources.insert(id.to_string(), v);
        }
    }
    Ok(())
}

/// What a diff of two snapshots (or a snapshot and the head) of `id` needs: the namespace, its
/// snapshots and the source, without its workloads and revisions (a diff naming `WORKLOAD@N`
/// needs [`inventory`]). The web view's snapshot diff on a namespace of thousands of workloads
/// (docs/plugin.md "Web view").
pub async fn source_inventory(ctx: &Ctx, id: &SourceId) -> Result<Inventory> {
    let namespace_object = namespace_object(ctx).await?;
    let server = server(ctx).await;
    let kinds = kinds(ctx, &server).await;
    let mut inv = Inventory { namespace: ctx.namespace.clone(), namespace_object, server, kinds, ..Default::default() };
    let (snapshots, unreadable) = namespace_snapshots(ctx, SourceKinds::CONFIGMAPS.with(id.kind)).await?;
    (inv.snapshots, inv.secrets_unreadable) = (snapshots, unreadable);
    let mut inv = inv.sealed();
    // A snapshot's name given for the source: its source too (as `resolve_source` reads it).
    let mut wanted = std::collections::BTreeSet::from([id.clone()]);
    if let Some(s) = inv.snaps().into_iter().find(|s| s.kind == id.kind && s.name == id.name) {
        wanted.insert(build::source_id(&s.source));
    }
    read_sources(ctx, &mut inv, wanted).await?;
    Ok(inv.sealed())
}

/// What the views of one workload need (its timeline, revision diffs and status): the namespace,
/// its snapshots, the workload, its revisions (listed by the workload's selector, then kept by
/// ownerReference as [`Inventory::workloads`] does) and the sources its templates reference.
/// The namespace's other workloads are not read: in the web view a click on one workload of a
/// namespace of thousands reads that one (docs/plugin.md "Web view"). `wanted` is resolved
/// against the kinds the server handles, as [`Inventory::resolve`] does.
pub async fn workload_inventory(ctx: &Ctx, wanted: &super::model::WorkloadRef) -> Result<(Inventory, super::model::WorkloadRef)> {
    let namespace_object = namespace_object(ctx).await?;
    let server = server(ctx).await;
    let kinds = kinds(ctx, &server).await;
    let mut inv = Inventory { namespace: ctx.namespace.clone(), namespace_object, server, kinds, ..Default::default() };
    let wanted = inv.resolve(wanted.clone())?;
    let kind = kinds.workloads().find(|k| k.name() == wanted.kind).ok_or_else(|| anyhow!("unsupported workload kind {}", wanted.kind))?;
    let ar = resource(kind, kinds);
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &ctx.namespace, &ar);
    let object = match api.get_opt(&wanted.name).await {
        Ok(Some(o)) => {
            let mut v = serde_json::to_value(o)?;
            v["kind"] = json!(ar.kind);
            v["apiVersion"] = json!(ar.api_version);
            v
        }
        Ok(None) => bail!("{wanted} not found in namespace {}", ctx.namespace),
        Err(kube::Error::Api(s)) if s.code == 404 && !kind.is_builtin() => bail!("{wanted} not found in namespace {}", ctx.namespace),
        Err(e) => return Err(api_err(e, &format!("get {} {}", ar.plural, wanted.name))),
    };
    // Its revisions carry its pod template's labels, which its selector's matchLabels select
    // (a narrower list, never a wrong one: ownership is checked after).
    let selector: Vec<String> = object
        .pointer("/spec/selector/matchLabels")
        .and_then(Value::as_object)
        .map(|m| m.iter().filter_map(|(k, v)| Some(format!("{k}={}", v.as_str()?))).collect())
        .unwrap_or_default();
    let params = ListParams::default().labels(&selector.join(","));
    let ((snapshots, unreadable), revisions) = futures::try_join!(namespace_snapshots(ctx, inv.source_kinds()), async {
        if kind.has_history() {
            futures::future::try_join_all(kinds.revisions().map(|k| list_kind(ctx, k, kinds, &params))).await
        } else {
            Ok(Vec::new())
        }
    },)?;
    (inv.snapshots, inv.secrets_unreadable) = (snapshots, unreadable);
    inv.workloads = vec![object];
    inv.revisions = revisions.concat();
    let mut inv = inv.sealed();
    let mut sources = std::collections::BTreeSet::new();
    // The live template's, as [`inventory`] reads them: the views show what the commands show.
    let templates: Vec<Value> = inv.workloads().iter().map(|w| w.template().clone()).collect();
    referenced_sources(&inv, templates.iter(), &mut sources);
    read_sources(ctx, &mut inv, sources).await?;
    Ok((inv.sealed(), wanted))
}

/// The namespace's snapshots of `kinds` (ConfigMaps always; Secrets where asked); when the user
/// may not list Secrets, the reason to say (second), not a failure.
async fn namespace_snapshots(ctx: &Ctx, kinds: SourceKinds) -> Result<(Vec<Value>, Option<String>)> {
    let lists = futures::future::try_join_all(kinds.iter().map(|k| list_snapshots(ctx, k))).await?;
    let (mut snapshots, mut unreadable) = (Vec::new(), None);
    // Only a kind whose reading may be forbidden answers `Err(why)` (`list_snapshots`).
    for list in lists {
        match list {
            Ok(s) => snapshots.extend(s),
            Err(why) => unreadable = Some(why),
        }
    }
    Ok((snapshots, unreadable))
}

/// The kinds the server handles: the built-ins and those its published configuration registers
/// (the built-ins alone when it is unknown), resolved against discovery. Once per process.
pub async fn kinds(ctx: &Ctx, server: &build::Server) -> &'static Registry {
    let extra = server.config().map(|c| c.extra_workload_kinds.as_slice()).unwrap_or_default();
    // The server checked the entries before publishing them; a document it did not write falls back.
    let registry = Registry::builtin().clone().register(extra).unwrap_or_else(|_| Registry::builtin().clone());
    crate::cluster::watch::resolve_kinds(&ctx.client, registry).await
}

/// The objects of `kind` in the namespace; none when it is a registered kind whose API is not
/// served (its CRD not installed).
async fn list_kind(ctx: &Ctx, kind: Kind, kinds: &Registry, params: &ListParams) -> Result<Vec<Value>> {
    list_or_missing(ctx, &resource(kind, kinds), params, !kind.is_builtin()).await
}

/// The object of revision `n` of a workload (ReplicaSet or ControllerRevision).
pub fn revision_object<'a>(inv: &'a Inventory, w: &Workload, n: i64) -> Option<&'a Value> {
    super::timeline::revision_object(inv, w, n)
}

/// Applies the rollback the way `kubectl rollout undo` does and returns the stored object.
pub async fn rollback(ctx: &Ctx, inv: &Inventory, w: &Workload, revision: i64, dry_run: bool) -> Result<Value> {
    let target = revision_object(inv, w, revision).ok_or_else(|| anyhow!("revision {revision} of {} not found", w.reference()))?;
    let patch = build::rollback_patch(w.kind, target).map_err(|e| anyhow!("revision {revision} of {}: {e}", w.reference()))?;
    match w.kind.history() {
        History::ReplicaSets { .. } => {
            if w.object.pointer("/spec/paused").and_then(Value::as_bool) == Some(true) {
                bail!(
                    "you cannot rollback a paused deployment; resume it first with `kubectl rollout resume {}` and try again",
                    w.reference()
                );
            }
            let ar = resource(w.kind, inv.kinds);
            let mut uri =
                format!("/apis/{}/namespaces/{}/{}/{}?fieldManager={FIELD_MANAGER}", ar.api_version, ctx.namespace, ar.plural, w.name);
            if dry_run {
                uri.push_str("&dryRun=All");
            }
            let request = axum::http::Request::patch(uri)
                .header("Content-Type", "application/json-patch+json")
                .body(serde_json::to_vec(&patch)?)
                .context("build the patch request")?;
            let out: Value = ctx.client.request(request).await.map_err(|e| api_err(e, &format!("roll back {}", w.reference())))?;
            Ok(out)
        }
        History::ControllerRevisions => {
            let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &ctx.namespace, &resource(w.kind, inv.kinds));
            let pp = PatchParams { dry_run, field_manager: Some(FIELD_MANAGER.into()), ..Default::default() };
            let out = api
                .patch(&w.name, &pp, &Patch::Strategic(&patch))
                .await
                .map_err(|e| api_err(e, &format!("roll back {}", w.reference())))?;
            Ok(serde_json::to_value(out)?)
        }
        History::None => bail!("{} has no rollout history", w.reference()),
    }
}

/// `inv` with its snapshots re-read (after an undo the webhook may have created one), of the
/// kinds it read before, sealed.
pub async fn reread_snapshots(ctx: &Ctx, inv: &Inventory) -> Result<Inventory> {
    let mut inv = inv.clone();
    let had = inv.snaps().iter().fold(SourceKinds::CONFIGMAPS, |had, s| had.with(s.kind));
    let read = if inv.secrets_unreadable.is_none() { had.union(inv.source_kinds()) } else { had };
    inv.snapshots = Vec::new();
    for kind in read.iter() {
        // Only a kind whose reading may be forbidden answers `Err(why)` (`list_snapshots`).
        match list_snapshots(ctx, kind).await? {
            Ok(s) => inv.snapshots.extend(s),
            Err(why) => inv.secrets_unreadable = Some(why),
        }
    }
    Ok(inv.sealed())
}

/// Everything `list` needs, metadata only (no ConfigMap data is read): snapshots, their sources
/// (a GET each), and workloads, in one namespace or all (`all`).
pub async fn sources(ctx: &Ctx, all: bool) -> Result<super::model::Sources> {
    let client = &ctx.client;
    let api = |ar: &ApiResource| -> Api<DynamicObject> {
        if all {
            Api::all_with(client.clone(), ar)
        } else {
            Api::namespaced_with(client.clone(), &ctx.namespace, ar)
        }
    };
    let metas = |list: kube::core::ObjectList<kube::core::PartialObjectMeta<DynamicObject>>, kind: &str| -> Vec<Value> {
        list.items.into_iter().map(|o| json!({ "kind": kind, "metadata": o.metadata })).collect()
    };
    let server = server(ctx).await;
    // Secret snapshots where the server versions Secrets (or may: its configuration unknown).
    let secrets = server.config().is_none_or(|c| c.secrets);
    let mut snapshots = Vec::new();
    let mut secrets_unreadable = None;
    for kind in SourceKinds::new(secrets).iter() {
        let ar = source_resource(kind);
        // Metadata only: no value of any kind is read.
        match api(&ar).list_metadata(&ListParams::default().labels(names::HASH_LABEL)).await {
            Ok(list) => snapshots.extend(metas(list, kind.as_str())),
            Err(kube::Error::Api(s)) if s.code == 403 && kind.def().confidential => {
                let ns = if all { "any namespace".to_owned() } else { ctx.namespace.clone() };
                secrets_unreadable = Some(secrets_forbidden(&ns, "list", &s.message));
            }
            Err(e) => return Err(api_err(e, &format!("list {}", ar.plural))),
        }
    }
    let mut sources = std::collections::BTreeMap::new();
    for key in snapshots.iter().filter_map(build::snapshot_source) {
        if sources.contains_key(&key) {
            continue;
        }
        let id = build::source_id(&key.1);
        // A source name from a snapshot's annotation (the tenant's text): not a Kubernetes name,
        // no source of that name exists, and it never goes into a request path.
        if !names::is_dns_subdomain(&id.name) {
            sources.insert(key, None);
            continue;
        }
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &key.0, &source_resource(id.kind));
        let got = api
            .get_metadata_opt(&id.name)
            .await
            .map_err(|e| api_err(e, &format!("get {} {}/{}", id.kind_str().to_ascii_lowercase(), key.0, id.name)))?;
        sources.insert(key, got.map(|o| json!({ "kind": id.kind_str(), "metadata": o.metadata })));
    }
    let mut workloads = Vec::new();
    let kinds = kinds(ctx, &server).await;
    // Jobs are runs: they pin what their CronJob or creator pinned.
    for kind in kinds.workloads().filter(|k| *k != Kind::Job) {
        let ar = resource(kind, kinds);
        match api(&ar).list_metadata(&ListParams::default()).await {
            Ok(list) => workloads.extend(metas(list, kind.as_str())),
            // A registered kind whose API is not served: no objects.
            Err(kube::Error::Api(s)) if s.code == 404 && !kind.is_builtin() => {}
            Err(e) => return Err(api_err(e, &format!("list {}", ar.plural))),
        }
    }
    let mut out = build::sources((!all).then_some(ctx.namespace.as_str()), &snapshots, &sources, &workloads);
    out.secrets_unreadable = secrets_unreadable;
    Ok(out)
}
