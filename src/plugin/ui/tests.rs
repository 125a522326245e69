//! The router without a cluster: the host guard, GET only, the security headers, clear 404s and
//! refusals of bad input before any request to the API server (docs/plugin.md "Web view").

use std::sync::Arc;

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use tower::ServiceExt as _;

use super::*;

const ADDR: &str = "127.0.0.1:38123";

/// A router whose kube client points at a port where nothing listens: a test that reached the
/// API server would fail with a 502.
fn app() -> Router {
    let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
    let client = kube::Client::try_from(config).unwrap();
    let ui = Ui { client, namespace: "shop".into(), server_config: "confighistory/confighistory-effective-config".into() };
    router(Arc::new(ui), allowed_hosts(ADDR.parse().unwrap()))
}

async fn send(method: &str, path: &str, host: Option<&str>) -> (StatusCode, axum::http::HeaderMap, String) {
    let mut req = Request::builder().method(method).uri(path);
    if let Some(h) = host {
        req = req.header(header::HOST, h);
    }
    let res = app().oneshot(req.body(Body::empty()).unwrap()).await.unwrap();
    let (parts, body) = res.into_parts();
    let bytes = axum::body::to_bytes(body, 1 << 20).await.unwrap();
    (parts.status, parts.headers, String::from_utf8_lossy(&bytes).into_owned())
}

fn error_of(body: &str) -> String {
    let v: serde_json::Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"));
    v["error"].as_str().unwrap_or_else(|| panic!("no error: {body}")).to_owned()
}

#[tokio::test]
async fn serves_the_page_to_its_own_address_and_localhost() {
    for host in [ADDR, "localhost:38123", "LOCALHOST:38123"] {
        let (status, headers, body) = send("GET", "/", Some(host)).await;
        assert_eq!(status, StatusCode::OK, "{host}");
        assert_eq!(headers[header::CONTENT_TYPE], "text/html; charset=utf-8");
        assert!(body.contains(r#"<script src="/app.js" defer></script>"#), "{body}");
    }
    let (status, headers, body) = send("GET", "/app.js", Some(ADDR)).await;
    assert_eq!((status, headers[header::CONTENT_TYPE].to_str().unwrap()), (StatusCode::OK, "text/javascript; charset=utf-8"));
    assert_eq!(body, APP_JS);
    let (status, headers, _) = send("GET", "/app.css", Some(ADDR)).await;
    assert_eq!((status, headers[header::CONTENT_TYPE].to_str().unwrap()), (StatusCode::OK, "text/css; charset=utf-8"));
}

#[tokio::test]
async fn refuses_other_hosts_dns_rebinding_guard() {
    for host in [Some("evil.example:38123"), Some("127.0.0.1:1"), Some("evil.example"), Some("127.0.0.1.nip.io:38123"), None] {
        for path in ["/", "/api/namespaces", "/api/namespaces/shop/sources", "/nothing"] {
            let (status, headers, body) = send("GET", path, host).await;
            assert_eq!(status, StatusCode::FORBIDDEN, "{host:?} {path}");
            assert!(error_of(&body).contains("DNS-rebinding guard"), "{body}");
            assert!(error_of(&body).contains("http://127.0.0.1:38123/"), "{body}");
            assert_eq!(headers[header::CONTENT_SECURITY_POLICY], CSP);
        }
    }
}

#[tokio::test]
async fn only_get() {
    for method in ["POST", "PUT", "PATCH", "DELETE", "OPTIONS"] {
        for path in ["/", "/api/namespaces", "/api/namespaces/shop/diff?source=x", "/nothing"] {
            let (status, _, body) = send(method, path, Some(ADDR)).await;
            assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {path}: {body}");
            assert!(error_of(&body).contains("read-only (GET only)"), "{body}");
        }
    }
    // HEAD is a GET without its body.
    let (status, _, body) = send("HEAD", "/", Some(ADDR)).await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, ""));
}

#[tokio::test]
async fn security_headers_on_every_answer() {
    for (path, status) in [("/", 200), ("/app.js", 200), ("/nothing", 404), ("/api/namespaces/Bad_NS/sources", 400)] {
        let (got, h, _) = send("GET", path, Some(ADDR)).await;
        assert_eq!(got.as_u16(), status, "{path}");
        assert_eq!(h[header::CONTENT_SECURITY_POLICY], CSP, "{path}");
        assert_eq!(h[header::X_CONTENT_TYPE_OPTIONS], "nosniff", "{path}");
        assert_eq!(h[header::X_FRAME_OPTIONS], "DENY", "{path}");
        assert_eq!(h[header::REFERRER_POLICY], "no-referrer", "{path}");
        assert_eq!(h[header::CACHE_CONTROL], "no-store", "{path}");
    }
    assert!(CSP.starts_with("default-src 'self';") && !CSP.contains("unsafe"), "{CSP}");
}

#[tokio::test]
async fn unknown_routes_are_404_with_a_clear_message() {
    for path in ["/nothing", "/api", "/api/namespaces/shop", "/api/namespaces/shop/workloads/Deployment/app/nope", "/index.html"] {
        let (status, _, body) = send("GET", path, Some(ADDR)).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
        let e = error_of(&body);
        assert!(e.contains(&format!("no such page or API route: {path}")) && e.contains("/api/"), "{e}");
    }
}

#[tokio::test]
async fn bad_input_is_refused_before_the_cluster_is_asked() {
    for (path, expected) in [
        ("/api/namespaces/Bad_NS/sources", "\"Bad_NS\" is not a valid namespace name"),
        ("/api/namespaces/a%2Fb/workloads", "\"a/b\" is not a valid namespace name"),
        ("/api/namespaces/shop/history", "the query parameter source is missing"),
        ("/api/namespaces/shop/diff?a=1", "the query parameter source is missing"),
        ("/api/namespaces/shop/history?source=..%2Fsecrets%2Fx", "not a valid"),
        ("/api/namespaces/shop/workloads?limit=0", "limit must be 1 to 1000"),
        ("/api/namespaces/shop/workloads?continue=zz", "not a cursor this server gave"),
        ("/api/namespaces/shop/workloads/Bad_Kind/app/status", "unsupported workload kind \"bad_kind\""),
        ("/api/namespaces/shop/workloads/Deployment/a%20b/diff?a=1&b=2", "not a valid workload name"),
        ("/api/namespaces/shop/workloads/Deployment/app/diff?a=one", "a must be a revision number"),
    ] {
        let (status, _, body) = send("GET", path, Some(ADDR)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {body}");
        let e = error_of(&body);
        assert!(e.contains(expected), "{path}: {e}");
    }
    // A valid request reaches the (absent) API server and says so.
    let (status, _, body) = send("GET", "/api/namespaces/shop/sources", Some(ADDR)).await;
    assert_eq!(status, StatusCode::BAD_GATEWAY, "{body}");
    assert!(error_of(&body).contains("cannot reach the API server"), "{body}");
}

#[test]
fn query_parameters_are_decoded() {
    assert_eq!(
        query(Some("source=secret%2Fdb&a=deployment%2Fapp%401&b=&x+y=1+2&bad=%zz%4")),
        [("source", "secret/db"), ("a", "deployment/app@1"), ("b", ""), ("x y", "1 2"), ("bad", "%zz%4")]
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
    );
    assert!(query(None).is_empty());
}

#[test]
fn hosts_allowed_are_the_bound_address_and_localhost() {
    assert_eq!(allowed_hosts("127.0.0.1:8080".parse().unwrap()), ["127.0.0.1:8080", "localhost:8080"]);
    assert_eq!(allowed_hosts("[::1]:8080".parse().unwrap()), ["[::1]:8080", "localhost:8080"]);
    assert_eq!(allowed_hosts("127.0.0.1:80".parse().unwrap()), ["127.0.0.1:80", "localhost:80", "127.0.0.1", "localhost"]);
}

/// The page's own rules, checked on its source: no inline script or style for the CSP to allow,
/// no HTML parsing of text (docs/plugin.md "Web view"), nothing fetched from elsewhere.
#[test]
fn assets_build_the_dom_from_text_only() {
    for banned in ["innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function", "http://", "https://"] {
        let allowed_svg_ns =
            banned == "http://" && APP_JS.matches("http://").count() == 1 && APP_JS.contains("\"http://www.w3.org/2000/svg\"");
        assert!(!APP_JS.contains(banned) || allowed_svg_ns, "app.js uses {banned}");
    }
    assert!(!INDEX_HTML.contains("<script>") && !INDEX_HTML.contains("style=") && !INDEX_HTML.contains("<style"));
    // No event handler attribute (` onclick=`...).
    let handler = INDEX_HTML.match_indices(" on").any(|(i, _)| {
        let rest = &INDEX_HTML[i + 3..];
        let name_len = rest.find(|c: char| !c.is_ascii_alphabetic()).unwrap_or(rest.len());
        name_len > 0 && rest[name_len..].starts_with('=')
    });
    assert!(!handler, "an inline event handler in index.html");
    assert!(!INDEX_HTML.contains("http"), "nothing from elsewhere");
}

#[tokio::test]
async fn refuses_a_non_loopback_address() {
    let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
    let ui = Ui { client: kube::Client::try_from(config).unwrap(), namespace: "shop".into(), server_config: String::new() };
    let e = serve(ui, "0.0.0.0".parse().unwrap(), 0).await.unwrap_err();
    assert!(e.to_string().contains("not a loopback address"), "{e}");
}
