//! Counting the controller's calls to the API server (`confighistory_controller_api_calls_total`,
//! docs/operations.md "Metrics"), by verb, resource and HTTP code: the loops get a client of
//! their own ([`counted`]) over the process's one, whose layer sees every call whichever API it
//! goes through (the port, the Lease, the checkpoint, Events), with the status the API server
//! answered. Admission's calls, through the process's client, are not counted here.
//!
//! Labels come from the request's path as the client built it (a plural, never an object's
//! name): their values are bounded by the resources confighistory talks to.

use std::task::{Context as TaskContext, Poll};

use futures::future::BoxFuture;
use hyper::http::{Method, Request, Response};
use tower::Layer as _;

/// A client whose every call is counted as the controller's, sent through `client` (its
/// connections, and its layers: the API server's clock is fed by these responses too).
pub fn counted(client: kube::Client) -> kube::Client {
    let namespace = client.default_namespace().to_owned();
    let send = tower::service_fn(move |req: Request<kube::client::Body>| {
        let client = client.clone();
        async move { client.send(req).await }
    });
    kube::Client::new(CallsLayer.layer(send), namespace)
}

/// The verb and resource of a request, as Kubernetes' audit names them: `get`, `list`, `watch`,
/// `create`, `update`, `patch`, `delete`, `deletecollection`; the resource's plural, with a
/// subresource after a `/` (`deployments/status`). A path that is no resource's (discovery,
/// `/version`) is `other`.
pub fn classify(method: &Method, path: &str, query: Option<&str>) -> (&'static str, String) {
    let parts: Vec<&str> = path.trim_matches('/').split('/').filter(|p| !p.is_empty()).collect();
    // /api/v1/..., /apis/group/version/...
    let rest = match parts.as_slice() {
        ["api", _version, rest @ ..] => rest,
        ["apis", _group, _version, rest @ ..] => rest,
        _ => &[][..],
    };
    // namespaces/<ns>/<resource>...: the namespace itself is a resource only without more.
    let rest = match rest {
        ["namespaces", _ns, r, more @ ..] => {
            let mut v = vec![*r];
            v.extend(more);
            v
        }
        r => r.to_vec(),
    };
    let named = rest.len() >= 2;
    let watch = query.is_some_and(|q| q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1"));
    let verb = match *method {
        Method::GET if watch => "watch",
        Method::GET if named => "get",
        Method::GET => "list",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE if named => "delete",
        Method::DELETE => "deletecollection",
        _ => "other",
    };
    let plain = |s: &str| {
        !s.is_empty() && s.len() <= 63 && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
    };
    let resource = match rest.as_slice() {
        [r, _name, sub, ..] if plain(r) && plain(sub) => format!("{r}/{sub}"),
        [r, ..] if plain(r) => (*r).to_owned(),
        _ => "other".to_owned(),
    };
    (verb, resource)
}

/// The layer ([`kube::client::ClientBuilder::with_layer`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct CallsLayer;

impl<S> tower::Layer<S> for CallsLayer {
    type Service = CallsService<S>;
    fn layer(&self, inner: S) -> CallsService<S> {
        CallsService { inner }
    }
}

#[derive(Clone)]
pub struct CallsService<S> {
    inner: S,
}

impl<S, ReqBody, ResBody> tower::Service<Request<ReqBody>> for CallsService<S>
where
    S: tower::Service<Request<ReqBody>, Response = Response<ResBody>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ResBody: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        let (verb, resource) = classify(req.method(), req.uri().path(), req.uri().query());
        let response = self.inner.call(req);
        Box::pin(async move {
            let response = response.await;
            let code = response.as_ref().ok().map(|r| r.status().as_u16());
            crate::metrics::METRICS.controller_api_call(verb, &resource, code);
            response
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_named_by_verb_and_resource_never_by_object() {
        let cases = [
            (Method::GET, "/api/v1/namespaces/shop/configmaps/pricing", None, "get", "configmaps"),
            (Method::GET, "/api/v1/namespaces/shop/configmaps", Some("labelSelector=x&limit=500"), "list", "configmaps"),
            (Method::GET, "/api/v1/configmaps", Some("labelSelector=x"), "list", "configmaps"),
            (Method::GET, "/apis/apps/v1/namespaces/shop/deployments", Some("watch=true&resourceVersion=1"), "watch", "deployments"),
            (Method::PATCH, "/apis/apps/v1/namespaces/shop/deployments/web", None, "patch", "deployments"),
            (Method::PUT, "/apis/coordination.k8s.io/v1/namespaces/confighistory/leases/confighistory", None, "update", "leases"),
            (Method::POST, "/apis/events.k8s.io/v1/namespaces/shop/events", None, "create", "events"),
            (Method::DELETE, "/api/v1/namespaces/shop/configmaps/pricing-0a1b2c", None, "delete", "configmaps"),
            (Method::DELETE, "/api/v1/namespaces/shop/configmaps", None, "deletecollection", "configmaps"),
            (Method::GET, "/api/v1/namespaces/shop", None, "get", "namespaces"),
            (Method::GET, "/api/v1/namespaces", None, "list", "namespaces"),
            (Method::PATCH, "/apis/apps/v1/namespaces/shop/deployments/web/status", None, "patch", "deployments/status"),
            (Method::GET, "/apis/argoproj.io/v1alpha1/namespaces/shop/rollouts/r", None, "get", "rollouts"),
            (Method::GET, "/version", None, "list", "other"),
            (Method::GET, "/apis", None, "list", "other"),
        ];
        for (method, path, query, verb, resource) in cases {
            assert_eq!(classify(&method, path, query), (verb, resource.to_owned()), "{method} {path}");
        }
    }

    /// Every request is counted with its status; a transport failure is `error`.
    #[tokio::test]
    async fn the_layer_counts_requests_with_their_code() {
        use tower::{Layer as _, Service as _, ServiceExt as _};
        let server = tower::service_fn(|req: Request<()>| async move {
            let status = if req.uri().path().ends_with("/missing") { 404 } else { 200 };
            if req.uri().path().ends_with("/down") {
                return Err("connection refused");
            }
            Ok::<_, &str>(Response::builder().status(status).body(()).unwrap())
        });
        let mut svc = CallsLayer.layer(server);
        let count = |verb: &str, resource: &str, code: &str| {
            let text = crate::metrics::METRICS.render();
            let line = format!("confighistory_controller_api_calls_total{{verb=\"{verb}\",resource=\"{resource}\",code=\"{code}\"}} ");
            text.lines().find_map(|l| l.strip_prefix(&line)).map_or(0, |v| v.parse::<u64>().unwrap())
        };
        // A resource name of this test's own, so other tests' calls do not change the counts.
        let path = |name: &str| format!("/api/v1/namespaces/ns/callstestthings/{name}");
        let before =
            (count("get", "callstestthings", "200"), count("get", "callstestthings", "404"), count("get", "callstestthings", "error"));
        let req = |name: &str| Request::get(path(name)).body(()).unwrap();
        svc.ready().await.unwrap().call(req("a")).await.unwrap();
        svc.ready().await.unwrap().call(req("missing")).await.unwrap();
        let _ = svc.ready().await.unwrap().call(req("down")).await;
        let after =
            (count("get", "callstestthings", "200"), count("get", "callstestthings", "404"), count("get", "callstestthings", "error"));
        assert_eq!((after.0 - before.0, after.1 - before.1, after.2 - before.2), (1, 1, 1));
        assert!(!crate::metrics::METRICS.render().contains("missing"), "no object name is a label");
    }
}
