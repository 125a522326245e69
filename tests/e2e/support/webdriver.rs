//! A tiny W3C WebDriver client (JSON over HTTP, the dev-dependency hyper's client) driving
//! Debian's chromedriver and headless chromium: the browser tests of the plugin's web view
//! (docs/testing.md "Browser tests"). Only what those tests use: a session, navigation, finding
//! elements by CSS, clicks, text, script execution and screenshots.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use serde_json::{json, Value};

/// The W3C element reference key.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

pub struct Browser {
    runtime: tokio::runtime::Runtime,
    driver: Child,
    /// chromedriver's `127.0.0.1:PORT`.
    addr: String,
    session: String,
}

/// An element found on the page.
#[derive(Clone, Debug)]
pub struct Element(String);

fn find_program(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).flat_map(|dir| names.iter().map(move |n| dir.join(n))).find(|p| p.is_file())
}

impl Browser {
    /// Starts chromedriver and a headless chromium session. `None` (saying why) when either is
    /// missing and `CONFIGHISTORY_REQUIRE_BROWSER` is unset; with it set (tests/run sets it), a
    /// missing browser fails the test.
    pub fn start() -> Option<Browser> {
        let chromium = find_program(&["chromium", "chromium-browser", "google-chrome"]);
        let driver = find_program(&["chromedriver"]);
        let (Some(chromium), Some(driver)) = (chromium, driver) else {
            let why = "chromium or chromedriver not found on PATH (Debian: apt-get install chromium chromium-driver)";
            if std::env::var_os("CONFIGHISTORY_REQUIRE_BROWSER").is_some_and(|v| !v.is_empty()) {
                panic!("browser test: {why}, and CONFIGHISTORY_REQUIRE_BROWSER is set");
            }
            eprintln!("browser test skipped: {why}");
            return None;
        };
        let port = super::free_port("127.0.0.1");
        let child = Command::new(&driver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", driver.display()));
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime");
        let mut browser = Browser { runtime, driver: child, addr: format!("127.0.0.1:{port}"), session: String::new() };
        let deadline = Instant::now() + Duration::from_secs(20);
        while browser.request("GET", "/status", None).map(|v| v["value"]["ready"] == true) != Ok(true) {
            assert!(Instant::now() < deadline, "chromedriver did not get ready in 20 s");
            std::thread::sleep(Duration::from_millis(100));
        }
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": path_str(&chromium), "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,1000", "--disable-dev-shm-usage"]},
        }}});
        let created = browser.request("POST", "/session", Some(caps)).unwrap_or_else(|e| panic!("new WebDriver session: {e}"));
        browser.session = created["value"]["sessionId"].as_str().expect("sessionId").to_owned();
        Some(browser)
    }

    /// One WebDriver call; `Err` with the driver's error and message.
    fn request(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value, String> {
        let addr = self.addr.clone();
        let path = path.to_owned();
        let method = hyper::Method::from_bytes(method.as_bytes()).expect("method");
        self.runtime.block_on(async move {
            let stream = tokio::net::TcpStream::connect(&addr).await.map_err(|e| e.to_string())?;
            let (mut sender, conn) =
                hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await.map_err(|e| e.to_string())?;
            tokio::spawn(conn);
            let bytes = body.map(|b| b.to_string()).unwrap_or_default();
            let req = hyper::Request::builder()
                .method(method)
                .uri(&path)
                .header("Host", &addr)
                .header("Content-Type", "application/json")
                .body(Full::new(Bytes::from(bytes)))
                .map_err(|e| e.to_string())?;
            let res = tokio::time::timeout(Duration::from_secs(60), sender.send_request(req))
                .await
                .map_err(|_| "timed out".to_owned())?
                .map_err(|e| e.to_string())?;
            let status = res.status();
            let body = res.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes();
            let v: Value = serde_json::from_slice(&body).map_err(|e| format!("{status}: not JSON: {e}"))?;
            if status.is_success() {
                Ok(v)
            } else {
                Err(format!(
                    "{status}: {}: {}",
                    v["value"]["error"],
                    v["value"]["message"].as_str().unwrap_or_default().lines().next().unwrap_or_default()
                ))
            }
        })
    }

    fn session_call(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value, String> {
        self.request(method, &format!("/session/{}{path}", self.session), body).map(|v| v["value"].clone())
    }

    #[track_caller]
    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        self.session_call(method, path, body).unwrap_or_else(|e| panic!("WebDriver {method} {path}: {e}"))
    }

    pub fn goto(&self, url: &str) {
        self.call("POST", "/url", Some(json!({ "url": url })));
    }

    /// The elements matching `css` now.
    pub fn find_all(&self, css: &str) -> Vec<Element> {
        let found = self.call("POST", "/elements", Some(json!({"using": "css selector", "value": css})));
        found.as_array().into_iter().flatten().filter_map(|e| e[ELEMENT].as_str()).map(|id| Element(id.to_owned())).collect()
    }

    /// The first element matching `css`, waiting up to 20 s for it (the page loads data lazily).
    #[track_caller]
    pub fn find(&self, css: &str) -> Element {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(e) = self.find_all(css).into_iter().next() {
                return e;
            }
            if Instant::now() > deadline {
                let page = self.text(&self.find_all("body").into_iter().next().expect("a body"));
                panic!("no element matches {css:?} after 20 s; the page says:\n{page}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn click(&self, e: &Element) {
        self.call("POST", &format!("/element/{}/click", e.0), Some(json!({})));
    }

    /// The element's rendered text.
    pub fn text(&self, e: &Element) -> String {
        self.call("GET", &format!("/element/{}/text", e.0), None).as_str().unwrap_or_default().to_owned()
    }

    /// Runs `script` (a function body; `arguments` are `args`) in the page and returns its value.
    pub fn execute(&self, script: &str, args: Value) -> Value {
        self.call("POST", "/execute/sync", Some(json!({"script": script, "args": args})))
    }

    /// The text of an open alert, if one is open.
    pub fn alert_text(&self) -> Option<String> {
        self.session_call("GET", "/alert/text", None).ok().map(|v| v.as_str().unwrap_or_default().to_owned())
    }

    /// A PNG of the window.
    pub fn screenshot(&self) -> Vec<u8> {
        use base64::Engine as _;
        let data = self.call("GET", "/screenshot", None);
        base64::engine::general_purpose::STANDARD.decode(data.as_str().expect("base64")).expect("a base64 PNG")
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = self.request("DELETE", &format!("/session/{}", self.session), None);
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

fn path_str(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 path")
}
