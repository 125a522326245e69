//! [`KubeCluster`]: the [`Cluster`] port over a kube client.

use futures::future::BoxFuture;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::events::{self as kube_events, Recorder, Reporter};
use serde_json::Value;

use super::port::{serde_category, source_metadata, ApiError, Cluster, Created, Event, Result, SourcePage, TOO_LARGE};
use super::{calls, raw, watch};
use crate::cache::Watched;
use crate::model::ids::{SourceId, SourceKind};
use crate::model::kinds::Kind;
use crate::model::kinds::Registry;
use crate::model::names;

/// The real thing.
#[derive(Clone)]
pub struct KubeCluster {
    pub client: kube::Client,
    pub field_manager: String,
    /// The kinds, resolved once at start ([`watch::resolve_kinds`]).
    pub kinds: &'static Registry,
    pub recorder: Recorder,
    /// Its calls are admission's (`confighistory_api_calls_total`); the controller's port
    /// ([`KubeCluster::for_controller`]) is counted by its client instead.
    admission: bool,
}

impl KubeCluster {
    /// A cluster over `client`; `kinds` from [`watch::resolve_kinds`], resolved once by the
    /// caller. Events are reported as `field_manager`, from this pod.
    pub fn new(client: kube::Client, field_manager: &str, kinds: &'static Registry) -> KubeCluster {
        let instance = std::env::var("POD_NAME").or_else(|_| std::env::var("HOSTNAME")).ok().filter(|h| !h.is_empty());
        let reporter = Reporter { controller: field_manager.to_owned(), instance };
        KubeCluster {
            kinds,
            recorder: Recorder::new(client.clone(), reporter),
            field_manager: field_manager.to_owned(),
            client,
            admission: true,
        }
    }

    /// The controller loops' port: over a client that counts every call as the controller's
    /// ([`calls::counted`]), and leaving admission's count alone.
    pub fn for_controller(&self) -> KubeCluster {
        KubeCluster { admission: false, ..KubeCluster::new(calls::counted(self.client.clone()), &self.field_manager, self.kinds) }
    }

    fn admission_call(&self, verb: &'static str) {
        if self.admission {
            crate::metrics::METRICS.api_call(verb);
        }
    }

    fn api(&self, ns: &str, what: Watched) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), ns, &watch::api_resource(what, self.kinds))
    }
}

/// Every page of a list, each item turned into JSON as its page arrives.
async fn list_all<K>(api: Api<K>, mut lp: ListParams, item: impl Fn(K) -> Value) -> Result<Vec<Value>, kube::Error>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut out = Vec::new();
    loop {
        let page = api.list(&lp).await?;
        let next = page.metadata.continue_.clone().filter(|c| !c.is_empty());
        out.extend(page.items.into_iter().map(&item));
        match next {
            Some(c) => lp = lp.continue_token(&c),
            None => return Ok(out),
        }
    }
}

/// An object to send as a source kind's: for a Secret, an object that is none is described,
/// never quoted ([`ApiError::from_source`]).
fn to_dynamic(kind: SourceKind, obj: &Value) -> Result<DynamicObject> {
    serde_json::from_value(obj.clone()).map_err(|e| ApiError {
        code: None,
        reason: "Invalid".into(),
        message: if kind.def().confidential {
            format!("not a {} object ({}; not shown)", kind.as_str(), serde_category(&e))
        } else {
            e.to_string()
        },
    })
}

/// The API of a source kind's objects in `ns`.
fn sources(client: &kube::Client, ns: &str, kind: SourceKind) -> Api<DynamicObject> {
    let ar = super::port::source_resource(kind);
    Api::namespaced_with(client.clone(), ns, &ar)
}

impl Cluster for KubeCluster {
    fn kinds(&self) -> &'static Registry {
        self.kinds
    }

    fn get_source<'a>(&'a self, ns: &'a str, id: &'a SourceId) -> BoxFuture<'a, Result<Option<Value>>> {
        Box::pin(async move {
            self.admission_call("get");
            let obj = sources(&self.client, ns, id.kind).get_opt(&id.name).await.map_err(|e| ApiError::from_source(id.kind, e))?;
            Ok(obj.map(|o| serde_json::to_value(o).unwrap_or_default()))
        })
    }

    fn get_namespace<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<Value>>> {
        Box::pin(async move {
            self.admission_call("get");
            let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(self.client.clone());
            let obj = api.get_opt(name).await?;
            Ok(obj.map(|o| serde_json::to_value(o).unwrap_or_default()))
        })
    }

    fn create_source<'a>(&'a self, ns: &'a str, kind: SourceKind, obj: &'a Value, dry_run: bool) -> BoxFuture<'a, Result<Created>> {
        Box::pin(async move {
            self.admission_call("create");
            let dyn_obj = to_dynamic(kind, obj)?;
            let pp = PostParams { dry_run, field_manager: Some(self.field_manager.clone()) };
            match sources(&self.client, ns, kind).create(&pp, &dyn_obj).await {
                Ok(_) => Ok(Created::Created),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(Created::AlreadyExists),
                Err(e) => Err(ApiError::from_source(kind, e)),
            }
        })
    }

    fn patch_source<'a>(&'a self, ns: &'a str, id: &'a SourceId, patch: &'a Value) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            self.admission_call("patch");
            let pp = PatchParams { field_manager: Some(self.field_manager.clone()), ..Default::default() };
            sources(&self.client, ns, id.kind)
                .patch(&id.name, &pp, &Patch::Merge(patch))
                .await
                .map_err(|e| ApiError::from_source(id.kind, e))?;
            Ok(())
        })
    }

    fn delete_source<'a>(&'a self, ns: &'a str, id: &'a SourceId, uid: &'a str, resource_version: &'a str) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let dp = DeleteParams {
                preconditions: Some(Preconditions { uid: Some(uid.to_owned()), resource_version: Some(resource_version.to_owned()) }),
                ..Default::default()
            };
            sources(&self.client, ns, id.kind).delete(&id.name, &dp).await.map_err(|e| ApiError::from_source(id.kind, e))?;
            Ok(())
        })
    }

    fn patch_workload<'a>(&'a self, kind: Kind, ns: &'a str, name: &'a str, patch: &'a Value) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let pp = PatchParams { field_manager: Some(self.field_manager.clone()), ..Default::default() };
            self.api(ns, Watched::Workload(kind)).patch(name, &pp, &Patch::Merge(patch)).await?;
            Ok(())
        })
    }

    fn list<'a>(&'a self, ns: &'a str, what: Watched) -> BoxFuture<'a, Result<Vec<Value>>> {
        let api: Api<raw::RawObject> = Api::namespaced_with(self.client.clone(), ns, &watch::api_resource(what, self.kinds));
        let all = list_all(api, ListParams::default().limit(500), raw::RawObject::into_value);
        Box::pin(async move {
            all.await.map_err(|e| match what {
                Watched::Sources(kind) => ApiError::from_source(kind, e),
                _ => e.into(),
            })
        })
    }

    fn list_source_metadata<'a>(&'a self, ns: &'a str, kind: SourceKind) -> BoxFuture<'a, Result<Vec<Value>>> {
        // `RawMetadata` asks for metadata only.
        let api: Api<raw::RawMetadata> =
            Api::namespaced_with(self.client.clone(), ns, &watch::api_resource(Watched::Sources(kind), self.kinds));
        let all = list_all(api, ListParams::default().limit(500), move |o: raw::RawMetadata| {
            source_metadata(kind, o.into_value()["metadata"].take())
        });
        Box::pin(async move { all.await.map_err(|e| ApiError::from_source(kind, e)) })
    }

    fn list_snapshots<'a>(&'a self, ns: &'a str, kind: SourceKind, each: &'a mut (dyn FnMut(&Value) + Send)) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let api = sources(&self.client, ns, kind);
            // Small pages: each is parsed whole, and snapshots can be 1 MiB each (60 of 900 KiB:
            // 118 MiB peak listed at once, 62 MiB in pages of 10, 44 MiB in pages of 5, debug build).
            let mut lp = ListParams::default().labels(names::HASH_LABEL).limit(10);
            loop {
                let page = api.list(&lp).await.map_err(|e| ApiError::from_source(kind, e))?;
                let next = page.metadata.continue_.clone().filter(|c| !c.is_empty());
                for o in page.items {
                    each(&serde_json::to_value(o).unwrap_or(Value::Null));
                }
                match next {
                    Some(c) => lp = lp.continue_token(&c),
                    None => return Ok(()),
                }
            }
        })
    }

    fn namespaces_with_snapshots(&self, kind: SourceKind) -> BoxFuture<'_, Result<Vec<String>>> {
        Box::pin(async move {
            let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &watch::api_resource(Watched::Sources(kind), self.kinds));
            let list =
                api.list_metadata(&ListParams::default().labels(names::HASH_LABEL)).await.map_err(|e| ApiError::from_source(kind, e))?;
            let mut v: Vec<String> = list.items.into_iter().filter_map(|o| o.metadata.namespace).collect();
            v.sort();
            v.dedup();
            Ok(v)
        })
    }

    fn list_configmaps_page<'a>(&'a self, token: Option<&'a str>, limit: u32, max_bytes: usize) -> BoxFuture<'a, Result<SourcePage>> {
        Box::pin(async move {
            use futures::AsyncReadExt as _;
            let kind = SourceKind::ConfigMap;
            self.admission_call("list");
            let (path, api_version, kind_name) = ("/api/v1/configmaps", "v1", "ConfigMap");
            let mut lp = ListParams::default().labels(&format!("!{}", names::HASH_LABEL)).limit(limit);
            if let Some(t) = token {
                lp = lp.continue_token(t);
            }
            let request = kube::core::Request::new(path).list(&lp).map_err(|e| ApiError {
                code: None,
                reason: "BadRequest".into(),
                message: format!("build the list request: {e}"),
            })?;
            let body = self.client.request_stream(request).await.map_err(|e| ApiError::from_source(kind, e))?;
            // Read one byte past the bound: a longer body is cut there and never parsed.
            let mut bytes = Vec::new();
            body.take(max_bytes as u64 + 1).read_to_end(&mut bytes).await.map_err(|e| ApiError {
                code: None,
                reason: "ServiceUnavailable".into(),
                message: format!("read the list of {kind_name}s: {e}"),
            })?;
            if bytes.len() > max_bytes {
                return Err(ApiError {
                    code: None,
                    reason: TOO_LARGE.into(),
                    message: format!("a page of {limit} {kind_name}s is over {max_bytes} bytes"),
                });
            }
            #[derive(serde::Deserialize)]
            struct Meta {
                #[serde(rename = "continue", default)]
                next: Option<String>,
            }
            #[derive(serde::Deserialize)]
            struct Page {
                #[serde(default)]
                metadata: Option<Meta>,
                #[serde(default)]
                items: Vec<raw::RawObject>,
            }
            let page: Page = serde_json::from_slice(&bytes).map_err(|e| ApiError {
                code: None,
                reason: "Invalid".into(),
                message: format!("the list of {kind_name}s does not parse ({})", serde_category(&e)),
            })?;
            drop(bytes);
            let items = page
                .items
                .into_iter()
                .map(|o| {
                    let mut v = o.into_value();
                    v["kind"] = kind_name.into();
                    v["apiVersion"] = api_version.into();
                    v
                })
                .collect();
            Ok(SourcePage { items, next: page.metadata.and_then(|m| m.next).filter(|c| !c.is_empty()) })
        })
    }

    fn publish<'a>(&'a self, event: &'a Event) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let r = &event.regarding;
            let reference = k8s_openapi::api::core::v1::ObjectReference {
                api_version: Some(r.api_version.clone()),
                kind: Some(r.kind.clone()),
                namespace: Some(r.namespace.clone()),
                name: Some(r.name.clone()),
                uid: Some(r.uid.clone()).filter(|u| !u.is_empty()),
                ..Default::default()
            };
            let ev = kube_events::Event {
                type_: if event.warning { kube_events::EventType::Warning } else { kube_events::EventType::Normal },
                reason: event.reason.to_owned(),
                note: Some(event.note.clone()),
                action: event.action.to_owned(),
                secondary: None,
            };
            self.recorder.publish(&ev, &reference).await?;
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::port::UNPARSED_STATUS;
    use super::*;
    use crate::model::trim::LAST_APPLIED;

    const CANARY: &str = "canary-s3cr3t-value";

    /// Each source kind's entry names the resource k8s-openapi knows for it.
    #[test]
    fn source_kinds_are_served_as_their_k8s_openapi_resources() {
        use k8s_openapi::api::core::v1::{ConfigMap, Secret};
        use kube::api::ApiResource;
        let same = |a: &ApiResource, b: &ApiResource| {
            (&a.group, &a.version, &a.api_version, &a.kind, &a.plural) == (&b.group, &b.version, &b.api_version, &b.kind, &b.plural)
        };
        assert!(same(&super::super::port::source_resource(SourceKind::ConfigMap), &ApiResource::erase::<ConfigMap>(&())));
        assert!(same(&super::super::port::source_resource(SourceKind::Secret), &ApiResource::erase::<Secret>(&())));
    }

    /// Whether `text` shows the canary, or its base64.
    fn shows_canary(text: &str) -> bool {
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::STANDARD.encode(CANARY);
        text.contains(CANARY) || text.contains(b64.trim_end_matches('='))
    }

    /// An error body that is not a Status (a proxy's, or one echoing the Secret sent), and a
    /// response or an object that does not parse: for a Secret each is described, not quoted;
    /// a ConfigMap's are as before (which shows the test would see a quote).
    #[test]
    fn a_secret_calls_errors_quote_nothing_but_the_api_servers_status() {
        let body = format!(r#"{{"kind":"Secret","data":{{"password":"{CANARY}"}}}}"#);
        let unparsed = || kube::Error::Api(kube::core::Status::failure(&body, UNPARSED_STATUS).with_code(502).boxed());
        let serde = || kube::Error::SerdeError(serde_json::from_str::<u32>(&format!("\"{CANARY}\"")).unwrap_err());
        let not_object = serde_json::json!({"kind": "Secret", "metadata": CANARY});
        for (what, e) in [
            ("unparsed body", ApiError::from_source(SourceKind::Secret, unparsed())),
            ("response that does not parse", ApiError::from_source(SourceKind::Secret, serde())),
            ("object that does not parse", to_dynamic(SourceKind::Secret, &not_object).unwrap_err()),
        ] {
            let shown = format!("{e} {e:?}");
            assert!(!shows_canary(&shown), "{what}: the error shows the canary");
            assert!(shown.contains("not shown"), "{what}: {shown}");
        }
        let e = ApiError::from_source(SourceKind::Secret, unparsed());
        assert_eq!((e.code, e.reason.as_str()), (Some(502), "Unknown"));
        // ConfigMaps' errors are unchanged, and would show it.
        assert!(shows_canary(&ApiError::from_source(SourceKind::ConfigMap, unparsed()).message));
        assert!(shows_canary(&ApiError::from_source(SourceKind::ConfigMap, serde()).message));
        assert!(shows_canary(&to_dynamic(SourceKind::ConfigMap, &not_object).unwrap_err().message));
        // The API server's own Status is kept whole, for either kind.
        let status = kube::core::Status::failure("secrets \"db\" already exists", "AlreadyExists").with_code(409);
        for kind in SourceKind::ALL {
            let e = ApiError::from_source(kind, kube::Error::Api(status.clone().boxed()));
            assert_eq!((e.code, e.reason.as_str(), e.message.as_str()), (Some(409), "AlreadyExists", "secrets \"db\" already exists"));
        }
    }

    /// kubectl's last-applied annotation holds a Secret's data: a metadata list of Secrets drops
    /// it, and keeps it on ConfigMaps (as before).
    #[test]
    fn a_secrets_metadata_comes_without_the_last_applied_annotation() {
        let metadata =
            serde_json::json!({"name": "db", "annotations": {LAST_APPLIED: format!("{{\"data\":{{\"p\":\"{CANARY}\"}}}}"), "a": "b"}});
        let item = source_metadata(SourceKind::Secret, metadata.clone());
        assert_eq!(item["metadata"]["annotations"], serde_json::json!({"a": "b"}));
        assert_eq!(item["kind"], crate::cache::PARTIAL_OBJECT_METADATA);
        assert!(!shows_canary(&item.to_string()));
        assert_eq!(source_metadata(SourceKind::ConfigMap, metadata.clone())["metadata"], metadata);
    }
}
