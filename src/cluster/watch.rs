//! Watches that keep the cache current: each applies its events through the cache's
//! [`Writer`], which reduces objects to the records the cache keeps as they arrive (nothing else
//! is retained) and counts the watch synced once its first list is in.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use std::time::Duration;

use futures::{Stream, TryStreamExt};
use kube::api::{Api, ApiResource};
use kube::runtime::watcher::{self, watcher, Event};
use kube::runtime::WatchStreamExt;
use serde_json::Value;

use crate::cache::{self, Key, Lock, Watched, Writer};
use crate::cluster::raw::{RawMetadata, RawObject};
use crate::cluster::{Cluster, ObjectRef};
use crate::model::ids::SourceKind;
use crate::model::kinds::{Kind, Registry};

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

/// Objects per page of the initial lists, where they are paged (API servers without streaming
/// lists: [`Lists`]). Each page is parsed whole before it is reduced to the records `State`
/// keeps, and all watches list at once: with kube's default of 500, a start against 10,000
/// ConfigMaps and 2,000 Deployments peaked at about 50 MiB of heap for 16 MiB of caches, and the
/// allocator keeps the peak as RSS (valgrind massif). 100 keeps the transient small; the
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

/// Starts every watch; the cache is ready ([`cache::Readiness`]) once all of them delivered
/// their first list. A kind the admin registered is watched once its API is served (looked for
/// every [`UNSERVED_RETRY`] until it is, reported meanwhile: [`watch_when_served`]); it never
/// holds readiness back. `kinds` is the registry the cache was set to (`State::set_kinds`).
///
/// Sources (ConfigMaps) are listed and watched as metadata (`PartialObjectMetadata`, served by every API
/// server since 1.15): no page or event carries their data, which can be 1 MiB each (docs/behaviour.md §10;
/// a page of 100 dashboards or release records parsed whole was ~90 MiB). Whether one is
/// immutable is not metadata: the controller reads a source when a decision needs it
/// ([`State::learn_source`]), and admission decides from the request and fresh reads.
/// `kinds`: the registry resolved at start ([`resolve_kinds`]).
pub fn start(client: kube::Client, state: Arc<Lock>, kinds: &'static Registry, report: Option<Reporter>) {
    let registered = |w: &Watched| matches!(w, Watched::Workload(k) if !k.is_builtin());
    let sources = state.read().source_kinds();
    let all = Watched::all(kinds, sources);
    let paged = Arc::new(AtomicBool::new(false));
    for what in all {
        let feed = Feed { what, state: state.clone(), paged: paged.clone() };
        match what {
            Watched::Workload(kind) if registered(&what) => {
                tokio::spawn(watch_when_served(client.clone(), kind, kinds, feed, report.clone()));
            }
            _ => run_watch(client.clone(), what, kinds, feed),
        }
    }
}

/// How a watch gets its initial list.
///
/// Streamed where the API server can (`sendInitialEvents`, Kubernetes' WatchList, on by default
/// since 1.32): one watch request whose first events are every object, served from the API
/// server's watch cache, then a bookmark. Paged lists are served from etcd when they go past the
/// first page: at 163,000 objects a replica listed for minutes, and one list restarted after `410
/// Expired` when etcd compacted under it (docs/performance.md, "Scale on a real cluster").
/// Older API servers, or ones with the feature off, refuse the request (422) and every watch
/// then lists in pages of [`LIST_PAGE_SIZE`], as they did before.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lists {
    Streamed,
    Paged,
}

/// The watch configuration of `what`.
fn config(what: Watched, lists: Lists) -> watcher::Config {
    let mut config = match lists {
        Lists::Streamed => watcher::Config::default().streaming_lists(),
        Lists::Paged => watcher::Config::default().page_size(LIST_PAGE_SIZE),
    };
    if what == Watched::Sources(SourceKind::Secret) {
        // Secrets the admin turned on (docs/behaviour.md §4a), as metadata like ConfigMaps, and
        // never the types that are never sources (tokens, Helm release records): those are not
        // even listed, so the cache holds no record of them and every Secret it holds is of a
        // type that may be a source.
        config = config.fields(&crate::model::secret::NEVER_SOURCE_TYPES.map(|t| format!("type!={t}")).join(","));
    }
    config
}

/// Spawns the watch of `what`, feeding `feed`: streamed lists unless this API server refused
/// them ([`Lists`]).
fn run_watch(client: kube::Client, what: Watched, kinds: &'static Registry, feed: Feed) {
    let resource = api_resource(what, kinds);
    tokio::spawn(async move {
        loop {
            let lists = if feed.paged.load(Ordering::Relaxed) { Lists::Paged } else { Lists::Streamed };
            let ended = if matches!(what, Watched::Sources(_)) {
                // `RawMetadata` asks for metadata only (list and watch alike).
                let api: Api<RawMetadata> = Api::all_with(client.clone(), &resource);
                feed.run(watcher(api, config(what, lists)).default_backoff(), lists, RawMetadata::into_value).await
            } else {
                let api: Api<RawObject> = Api::all_with(client.clone(), &resource);
                feed.run(watcher(api, config(what, lists)).default_backoff(), lists, RawObject::into_value).await
            };
            match ended {
                Ended::Refused(why) => {
                    if !feed.paged.swap(true, Ordering::Relaxed) {
                        tracing::info!(watch = what.name(), %why, "this API server does not stream lists; every watch lists in pages");
                    }
                }
                Ended::Closed => break,
            }
        }
    });
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

/// One watch feeding the cache.
struct Feed {
    what: Watched,
    state: Arc<Lock>,
    /// Set once the API server refused a streamed list: every watch then lists in pages.
    paged: Arc<AtomicBool>,
}

/// Why [`Feed::run`] returned.
enum Ended {
    /// The stream ended (it does not, with backoff).
    Closed,
    /// The API server refused the streamed list, saying this.
    Refused(String),
}

impl Feed {
    async fn run<T>(
        &self,
        stream: impl Stream<Item = Result<Event<T>, watcher::Error>>,
        lists: Lists,
        value: impl Fn(T) -> Value,
    ) -> Ended {
        let Feed { what, state, .. } = self;
        let what = *what;
        let mut seen: HashSet<Key> = HashSet::new();
        let mut listed = false;
        let mut stream = std::pin::pin!(stream);
        loop {
            match stream.try_next().await {
                Ok(Some(event)) => match event {
                    Event::Init => seen.clear(),
                    Event::InitApply(o) => {
                        let v = value(o);
                        seen.insert(key(&v));
                        cache::write(state).apply(cache::Event::Apply(what, &v));
                    }
                    Event::InitDone => {
                        listed = true;
                        let ready = cache::write(state).apply(cache::Event::Relisted(what, &seen));
                        // Not `clear()`: the table of a 100,000-object list would stay allocated for
                        // the process's life (docs/performance.md, "Scale on a real cluster").
                        seen = HashSet::new();
                        if ready {
                            tracing::info!(lists = ?lists, "caches synced");
                        }
                    }
                    Event::Apply(o) => {
                        cache::write(state).apply(cache::Event::Apply(what, &value(o)));
                    }
                    Event::Delete(o) => {
                        cache::write(state).apply(cache::Event::Delete(what, &value(o)));
                    }
                },
                Ok(None) => return Ended::Closed,
                Err(e) => match refused(&e) {
                    Some(why) if lists == Lists::Streamed && !listed => return Ended::Refused(why),
                    _ => tracing::warn!(watch = what.name(), error = %e, "watch failed; retrying with backoff"),
                },
            }
        }
    }
}

/// What the API server said when it refused a streamed list: a watch that could not start with
/// 400 or 422, what a server without WatchList answers `sendInitialEvents` or a watch's
/// `resourceVersionMatch` with. Any other request that fails so fails as paged lists too, and
/// is retried there.
fn refused(e: &watcher::Error) -> Option<String> {
    match e {
        watcher::Error::WatchStartFailed(kube::Error::Api(s)) if s.code == 400 || s.code == 422 => {
            Some(format!("{} {}", s.code, s.message))
        }
        _ => None,
    }
}

fn key(v: &Value) -> Key {
    let s = |k: &str| v["metadata"][k].as_str().unwrap_or_default().into();
    (s("namespace"), s("name"))
}

#[cfg(test)]
mod tests {
    //! The choice between streamed and paged lists, against faked API servers. Against real ones:
    //! the current lane's serves streamed lists (every e2e test in CI); the v1.20 lane's refuses
    //! them with 422 ("resourceVersionMatch is forbidden for watch") and its e2e suite passes on
    //! paged lists (`tests/run --e2e-only --lane v1.20`, not run in CI).
    use super::*;
    use crate::cache::State;
    use futures::StreamExt;
    use http_body_util::{combinators::BoxBody, BodyExt, Full, StreamBody};
    use hyper::body::{Bytes, Frame};
    use serde_json::json;
    use std::convert::Infallible;
    use std::sync::Mutex;
    use std::time::Duration;

    type Body = BoxBody<Bytes, Infallible>;

    fn full(code: u16, v: Value) -> hyper::Response<Body> {
        hyper::Response::builder().status(code).body(Full::new(Bytes::from(serde_json::to_vec(&v).unwrap())).boxed()).unwrap()
    }

    /// Watch events, one per line, then a stream that never ends (as a watch that stays open).
    fn events(lines: Vec<Value>) -> hyper::Response<Body> {
        let chunks = lines.into_iter().map(|l| Ok(Frame::data(Bytes::from(format!("{l}\n")))));
        let stream = futures::stream::iter(chunks).chain(futures::stream::pending());
        hyper::Response::builder().status(200).body(BodyExt::boxed(StreamBody::new(stream))).unwrap()
    }

    fn namespace(name: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "resourceVersion": "5", "managedFields": [{"manager": "m"}]}})
    }

    /// An API server answering every list and watch with no objects but namespace `team`;
    /// `streams`: whether it serves `sendInitialEvents` (else 422, as one without WatchList).
    /// The requests' paths and queries go to `log`.
    fn server(streams: bool, log: Arc<Mutex<Vec<String>>>) -> kube::Client {
        let svc = tower::service_fn(move |req: hyper::Request<kube::client::Body>| {
            let uri = req.uri().to_string();
            log.lock().unwrap().push(uri.clone());
            let items = if uri.starts_with("/api/v1/namespaces?") { vec![namespace("team")] } else { vec![] };
            let response = if uri.contains("sendInitialEvents=true") {
                if streams {
                    let mut lines: Vec<Value> = items.into_iter().map(|o| json!({"type": "ADDED", "object": o})).collect();
                    lines.push(json!({"type": "BOOKMARK", "object": {"kind": "Namespace", "apiVersion": "v1",
                        "metadata": {"resourceVersion": "6", "annotations": {"k8s.io/initial-events-end": "true"}}}}));
                    events(lines)
                } else {
                    full(
                        422,
                        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Invalid", "code": 422,
                        "message": "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch"}),
                    )
                }
            } else if uri.contains("watch=true") {
                events(vec![])
            } else {
                full(200, json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": "5"}, "items": items}))
            };
            async move { Ok::<_, Infallible>(response) }
        });
        kube::Client::new(svc, "default")
    }

    /// Starts the watches against `client` and waits until they synced.
    async fn synced(client: kube::Client) -> Arc<Lock> {
        let state = Arc::new(Lock::new(State::default()));
        let ready = state.ready();
        start(client, state.clone(), Registry::builtin(), None);
        for _ in 0..500 {
            if ready.is_ready() {
                return state;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the watches did not sync");
    }

    #[tokio::test]
    async fn lists_are_streamed_where_the_api_server_can() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let state = synced(server(true, log.clone())).await;
        assert!(state.read().namespace("team").is_some());
        let log = log.lock().unwrap();
        assert!(log.iter().all(|r| r.contains("sendInitialEvents=true")), "a request that is no streamed list: {log:?}");
        assert_eq!(log.len(), Watched::all(Registry::builtin(), State::default().source_kinds()).len(), "one request per watch: {log:?}");
    }

    #[tokio::test]
    async fn where_the_api_server_refuses_streamed_lists_every_watch_lists_in_pages() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let state = synced(server(false, log.clone())).await;
        assert!(state.read().namespace("team").is_some(), "the namespace of the paged list");
        let log = log.lock().unwrap().clone();
        let watches = Watched::all(Registry::builtin(), State::default().source_kinds());
        for what in &watches {
            let path = format!("/{}?", api_resource(*what, Registry::builtin()).plural);
            let of = |r: &&String| r.contains(&path);
            let streamed = log.iter().filter(of).filter(|r| r.contains("sendInitialEvents=true")).count();
            assert!(streamed <= 1, "{} asked for a streamed list again after a refusal: {log:?}", what.name());
            assert!(
                log.iter().filter(of).any(|r| r.contains("limit=100") && !r.contains("watch=true")),
                "{} was not listed in pages: {log:?}",
                what.name()
            );
        }
    }
}
