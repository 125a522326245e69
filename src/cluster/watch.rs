//! Watches that keep [`State`] current. Objects are reduced to the records `State` keeps as
//! they arrive; nothing else is retained.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use futures::{Stream, TryStreamExt};
use kube::api::{Api, ApiResource, DynamicObject, PartialObjectMeta};
use kube::runtime::watcher::{self, watcher, Event};
use kube::runtime::WatchStreamExt;
use serde_json::{json, Value};

use crate::cache::{Key, State, Watched, PARTIAL_OBJECT_METADATA};
use crate::cluster::{Cluster, ObjectRef};
use crate::model::kinds::{Kind, Registry};
use crate::model::source::SourceKind;

pub fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: if group.is_empty() { version.into() } else { format!("{group}/{version}") },
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// `registry` (the built-in kinds and those the admin registered) resolved against discovery,
/// once, for the process: each at the first of its versions the API server serves (CronJobs:
/// batch/v1 on 1.21+, batch/v1beta1 before).
pub async fn resolve_kinds(client: &kube::Client, registry: Registry) -> &'static Registry {
    let mut served: Vec<(String, Vec<String>)> = Vec::new();
    for gv in registry.to_probe() {
        let resources = match client.list_api_group_resources(&gv).await {
            Ok(list) => list.resources.into_iter().map(|r| r.name).collect(),
            Err(_) => Vec::new(),
        };
        served.push((gv, resources));
    }
    let resolved = registry.resolve(|group, version, resource| {
        let gv = if group.is_empty() { version.to_owned() } else { format!("{group}/{version}") };
        served.iter().any(|(g, rs)| *g == gv && rs.iter().any(|r| r == resource))
    });
    // Built once per process and shared by every watch, port and loop.
    Box::leak(Box::new(resolved))
}

pub fn api_resource(what: Watched, kinds: &Registry) -> ApiResource {
    match what {
        Watched::Namespaces => resource("", "v1", "Namespace", "namespaces"),
        Watched::Sources(kind) => resource(kind.group(), "v1", kind.as_str(), kind.resource()),
        Watched::Workload(kind) | Watched::Revision(kind) => kind_resource(kind, kinds),
    }
}

/// The resource of a registered kind, at the version it was resolved to.
pub fn kind_resource(kind: Kind, kinds: &Registry) -> ApiResource {
    let d = kind.def();
    resource(d.group, kinds.version(kind), d.kind, d.resource)
}

/// Objects per page of the initial lists. Each page is parsed whole before it is reduced to the
/// records `State` keeps, and all watches list at once: with kube's default of 500, a start against
/// 10,000 ConfigMaps and 2,000 Deployments peaked at about 50 MiB of heap for 16 MiB of caches, and the
/// allocator keeps the peak as RSS (issue 7, valgrind massif). 100 keeps the transient small; the
/// extra list requests cost the API server little.
const LIST_PAGE_SIZE: u32 = 100;

/// How often the API of a registered kind that is not served is looked for again.
const UNSERVED_RETRY: Duration = Duration::from_secs(10);

/// Where a registered kind whose API is not served is reported, besides the log and the metric:
/// an Event regarding `regarding` (an object of the release namespace), through `cluster`.
#[derive(Clone)]
pub struct Reporter {
    pub cluster: Arc<dyn Cluster>,
    pub regarding: ObjectRef,
}

/// Starts every watch; `synced` turns true once all of them delivered their first list. A kind
/// the admin registered is watched once its API is served (looked for every [`UNSERVED_RETRY`]
/// until it is, reported meanwhile: [`watch_when_served`]); it never holds readiness back.
///
/// Sources (ConfigMaps) are listed and watched as metadata (`PartialObjectMetadata`, served by every API
/// server since 1.15): no page or event carries their data, which can be 1 MiB each (docs/behaviour.md §10;
/// a page of 100 dashboards or release records parsed whole was ~90 MiB). Whether one is
/// immutable is not metadata: the controller reads a source when a decision needs it
/// ([`State::learn_source`]), and admission decides from the request and fresh reads.
/// `kinds`: the registry resolved at start ([`resolve_kinds`]).
pub fn start(client: kube::Client, state: Arc<RwLock<State>>, synced: Arc<AtomicBool>, kinds: &'static Registry, report: Option<Reporter>) {
    let registered = |w: &Watched| matches!(w, Watched::Workload(k) if !k.is_builtin());
    let sources = state.read().expect("state lock").source_kinds;
    let all = Watched::all(kinds, sources);
    let pending = Arc::new(Mutex::new(all.iter().filter(|w| !registered(w)).map(|w| w.name()).collect::<HashSet<_>>()));
    for what in all {
        let feed = Feed { what, state: state.clone(), synced: synced.clone(), pending: pending.clone() };
        match what {
            Watched::Workload(kind) if registered(&what) => {
                tokio::spawn(watch_when_served(client.clone(), kind, kinds, feed, report.clone()));
            }
            _ => run_watch(client.clone(), what, kinds, feed),
        }
    }
}

/// Spawns the watch of `what`, feeding `feed`.
fn run_watch(client: kube::Client, what: Watched, kinds: &'static Registry, feed: Feed) {
    let resource = api_resource(what, kinds);
    let mut config = watcher::Config::default().page_size(LIST_PAGE_SIZE);
    if what == Watched::Sources(SourceKind::Secret) {
        // Secrets the admin turned on (docs/behaviour.md §4a), as metadata like ConfigMaps, and
        // never the types that are never sources (tokens, Helm release records): those are not
        // even listed, so the cache holds no record of them and every Secret it holds is of a
        // type that may be a source.
        config = config.fields(&crate::model::secret::NEVER_SOURCE_TYPES.map(|t| format!("type!={t}")).join(","));
    }
    if matches!(what, Watched::Sources(_)) {
        // `Api<PartialObjectMeta<_>>` asks for metadata only (list and watch alike).
        let api: Api<PartialObjectMeta<DynamicObject>> = Api::all_with(client, &resource);
        let stream = watcher(api, config).default_backoff();
        tokio::spawn(feed.run(stream, |o: PartialObjectMeta<DynamicObject>| {
            json!({"kind": PARTIAL_OBJECT_METADATA, "metadata": serde_json::to_value(o.metadata).unwrap_or(Value::Null)})
        }));
    } else {
        let api: Api<DynamicObject> = Api::all_with(client, &resource);
        let stream = watcher(api, config).default_backoff();
        tokio::spawn(feed.run(stream, |o: DynamicObject| serde_json::to_value(o).unwrap_or(Value::Null)));
    }
}

/// Watches a registered kind once discovery shows its API served (docs/behaviour.md §4b). Until
/// then it is reported, once: a warning in the log, `confighistory_workload_kind_served` 0, and
/// a Warning Event `WorkloadKindNotServed` through `report`; and looked for again every
/// [`UNSERVED_RETRY`]. No object of it exists meanwhile, so nothing of it is missed: its webhook
/// rules see none, and GC's fresh lists read its 404 as none.
async fn watch_when_served(client: kube::Client, kind: Kind, kinds: &'static Registry, feed: Feed, report: Option<Reporter>) {
    let resource = kind_resource(kind, kinds);
    let mut reported = false;
    loop {
        let why = match client.list_api_group_resources(&resource.api_version).await {
            Ok(list) if list.resources.iter().any(|r| r.name == resource.plural) => break,
            Ok(_) => format!("{} is served without {}", resource.api_version, resource.plural),
            Err(kube::Error::Api(s)) if s.code == 404 => format!("{} is not served", resource.api_version),
            Err(e) => format!("discovery of {} failed: {e}", resource.api_version),
        };
        crate::metrics::METRICS.set_kind_served(kind.name(), false);
        if !reported {
            reported = true;
            let note = format!(
                "workload kind {} ({}/{}) is registered but its API is not served: {why}; is its CustomResourceDefinition \
                 installed? Its objects are not watched until it is; looked for again every {}s",
                kind.name(),
                resource.api_version,
                resource.plural,
                UNSERVED_RETRY.as_secs()
            );
            tracing::warn!(kind = kind.name(), "{note}");
            if let Some(r) = &report {
                let event = crate::cluster::Event {
                    regarding: r.regarding.clone(),
                    warning: true,
                    reason: "WorkloadKindNotServed",
                    action: "Watch",
                    note,
                };
                if let Err(e) = r.cluster.publish(&event).await {
                    tracing::warn!(kind = kind.name(), error = %e.message, "could not record the Event");
                }
            }
        }
        tokio::time::sleep(UNSERVED_RETRY).await;
    }
    crate::metrics::METRICS.set_kind_served(kind.name(), true);
    tracing::info!(kind = kind.name(), api = %format!("{}/{}", resource.api_version, resource.plural), "watching a registered workload kind");
    run_watch(client, Watched::Workload(kind), kinds, feed);
}

/// One watch feeding [`State`].
struct Feed {
    what: Watched,
    state: Arc<RwLock<State>>,
    synced: Arc<AtomicBool>,
    pending: Arc<Mutex<HashSet<&'static str>>>,
}

impl Feed {
    async fn run<T>(self, stream: impl Stream<Item = Result<Event<T>, watcher::Error>>, value: impl Fn(T) -> Value) {
        let Feed { what, state, synced, pending } = self;
        let mut seen: HashSet<Key> = HashSet::new();
        let mut stream = std::pin::pin!(stream);
        loop {
            match stream.try_next().await {
                Ok(Some(event)) => match event {
                    Event::Init => seen.clear(),
                    Event::InitApply(o) => {
                        let v = value(o);
                        seen.insert(key(&v));
                        state.write().expect("state lock").apply(what, &v);
                    }
                    Event::InitDone => {
                        {
                            let mut state = state.write().expect("state lock");
                            state.retain_seen(what, &seen);
                            state.synced.0.insert(what.name());
                        }
                        // Not `clear()`: the table of a 100,000-object list would stay allocated for
                        // the process's life (docs/performance.md, "Scale on a real cluster").
                        seen = HashSet::new();
                        let mut p = pending.lock().expect("lock");
                        p.remove(what.name());
                        if p.is_empty() && !synced.swap(true, Ordering::Relaxed) {
                            tracing::info!("caches synced");
                        }
                    }
                    Event::Apply(o) => state.write().expect("state lock").apply(what, &value(o)),
                    Event::Delete(o) => state.write().expect("state lock").delete(what, &value(o)),
                },
                Ok(None) => break,
                Err(e) => tracing::warn!(watch = what.name(), error = %e, "watch failed; retrying with backoff"),
            }
        }
    }
}

fn key(v: &Value) -> Key {
    let s = |k: &str| v["metadata"][k].as_str().unwrap_or_default().to_owned();
    (s("namespace"), s("name"))
}
