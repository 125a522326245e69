//! `kubectl confighistory ui` in a real browser (docs/plugin.md "Web view"): Debian's headless
//! chromium driven over WebDriver ([`crate::support::webdriver`]) against the plugin's server,
//! itself reading the real cluster. The README's worked example, released by three users, read
//! as a timeline and a diff; tenant text that looks like HTML shown as text; a Secret's values
//! never in the page nor in any JSON answer.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

use crate::support::apps::Workload;
use crate::support::confighistory::webhook;
use crate::support::webdriver::Browser;
use crate::support::{cluster, wait_for, Cluster, TestNamespace};

/// The plugin's web view, started as a user starts it; killed when dropped.
struct Ui {
    child: Child,
    /// `http://127.0.0.1:PORT/`
    url: String,
    /// `127.0.0.1:PORT`
    addr: String,
}

impl Ui {
    fn start(cluster: &Cluster, args: &[&str]) -> Ui {
        // `CONFIGHISTORY_UI_BIN`: another build of the plugin (the measurement's release build).
        let bin = std::env::var_os("CONFIGHISTORY_UI_BIN").unwrap_or_else(|| env!("CARGO_BIN_EXE_kubectl-confighistory").into());
        let mut child = Command::new(bin)
            .args(["ui", "--port", "0"])
            .args(args)
            .env("KUBECONFIG", &cluster.kubeconfig)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start kubectl-confighistory ui");
        let mut first = String::new();
        BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut first).expect("read the URL line");
        let url = first
            .strip_prefix("Serving on ")
            .and_then(|rest| rest.strip_suffix(" (Ctrl-C to stop)\n"))
            .unwrap_or_else(|| panic!("first line: {first:?}"))
            .to_owned();
        let addr = url.trim_start_matches("http://").trim_end_matches('/').to_owned();
        assert!(addr.starts_with("127.0.0.1:"), "bound to loopback by default: {url}");
        Ui { child, url, addr }
    }

    /// A GET with `host` as the Host header: (status, body).
    fn get_as(&self, host: &str, path: &str) -> (u16, String) {
        let mut stream = std::net::TcpStream::connect(&self.addr).expect("connect to the web view");
        stream.set_read_timeout(Some(Duration::from_secs(60))).ok();
        write!(stream, "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").expect("send");
        let mut response = String::new();
        stream.read_to_string(&mut response).expect("read the answer");
        let status = response.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
        let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
        (status, body)
    }

    fn get(&self, path: &str) -> (u16, String) {
        self.get_as(&self.addr.clone(), path)
    }

    #[track_caller]
    fn json(&self, path: &str) -> Value {
        let (status, body) = self.get(path);
        assert_eq!(status, 200, "GET {path}: {body}");
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: not JSON ({e}): {body}"))
    }

    /// SIGTERM: the server stops and exits 0.
    fn stop(mut self) {
        let pid = self.child.id().to_string();
        assert!(Command::new("kill").args(["-TERM", &pid]).status().expect("kill").success());
        let status = self.child.wait().expect("wait for the web view");
        assert!(status.success(), "the web view exits 0 on SIGTERM: {status}");
    }
}

impl Drop for Ui {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn config(data: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: pricing-config\ndata:\n{data}")
}

/// The README's worked example Deployment (no replica count: the API server's default), its
/// image quoted (tenant text may look like markup).
fn deployment(image: &str) -> Workload {
    Workload::deployment("pricing", &format!("{image:?}")).default_replicas().configmap_volume("config", "pricing-config", "/etc/pricing")
}

/// One release as `user` (impersonated, with the admin's rights): the ConfigMap, then the
/// Deployment, as Helm and kustomize apply them.
fn release(ns: &TestNamespace, user: &str, config_yaml: &str, deployment_yaml: &str) {
    let as_user = format!("--as={user}");
    for yaml in [config_yaml, deployment_yaml] {
        if let Err(out) = ns.apply_with(yaml, &[&as_user, "--as-group=system:masters"]) {
            panic!("release as {user}: {}", out.describe());
        }
    }
    ns.wait_observed("deployment", "pricing");
}

/// Where a screenshot goes: docs/images/ with `CONFIGHISTORY_UPDATE_SCREENSHOTS=1`, else the
/// target directory.
fn save_screenshot(browser: &Browser, name: &str) {
    let png = browser.screenshot();
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    let dir = if std::env::var("CONFIGHISTORY_UPDATE_SCREENSHOTS").as_deref() == Ok("1") {
        crate::support::repo_root().join("docs/images")
    } else {
        std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
    };
    std::fs::create_dir_all(&dir).expect("screenshot directory");
    let path = dir.join(name);
    std::fs::write(&path, png).expect("write the screenshot");
    eprintln!("screenshot: {}", path.display());
}

/// Nothing on the page came from a tenant's text as markup: no image, one script (the page's
/// own), no alert open.
#[track_caller]
fn assert_inert(browser: &Browser, when: &str) {
    assert_eq!(browser.alert_text(), None, "{when}: an alert is open");
    let counts = browser.execute(
        "return [document.querySelectorAll('img').length, document.scripts.length, document.querySelectorAll('[onerror],[onclick],[onload]').length];",
        json!([]),
    );
    assert_eq!(counts, json!([0, 1, 0]), "{when}: [img, script, on* attributes]");
}

fn body_text(browser: &Browser) -> String {
    browser.text(&browser.find("body"))
}

/// The README's worked example released by three users (impersonated): the page lists the
/// namespace and the workload, draws revisions 1-3 with their images and authors, the third
/// running, and the diff between 1 and 2 shows the renamed setting side by side; the source's
/// snapshot history and its diff; the JSON API refuses another Host; SIGTERM stops the server.
#[test]
fn browser_shows_the_worked_examples_timeline_and_diff() {
    let Some(cluster) = cluster() else { return };
    let Some(browser) = Browser::start() else { return };
    webhook(cluster);
    let ns = TestNamespace::new(cluster, "ui");
    let n = ns.name.as_str();
    release(&ns, "alice", &config("  config.yaml: \"discount_rules_path: /etc/rules\"\n"), &deployment("pricing:4.11").yaml());
    release(&ns, "bob", &config("  config.yaml: \"rules.discount_path: /etc/rules\"\n"), &deployment("pricing:4.12").yaml());
    release(
        &ns,
        "carol",
        &config("  config.yaml: \"rules.discount_path: /etc/rules\\nlog_level: debug\"\n"),
        &deployment("pricing:4.13").yaml(),
    );
    wait_for("three revisions", Duration::from_secs(30), || ns.history_of("pricing").len() == 3);

    // Opened on the kubeconfig's namespace; the test's is picked from the list.
    let ui = Ui::start(cluster, &[&format!("--server-config={}", webhook(cluster).server_config())]);
    browser.goto(&ui.url);
    let option = browser.find(&format!("#namespace option[value=\"{n}\"]"));
    browser.click(&option);
    browser.click(&browser.find("#list button.workload[data-kind=\"Deployment\"][data-name=\"pricing\"]"));
    browser.find(".revision[data-revision=\"3\"]");
    let timeline = ui.json(&format!("/api/namespaces/{n}/workloads/Deployment/pricing/timeline"));
    // The page's models are the commands' (the web view reads one workload, the commands the
    // namespace: the same answer).
    let cli = |args: &[&str]| -> Value {
        let out = Command::new(env!("CARGO_BIN_EXE_kubectl-confighistory"))
            .args(args)
            .args(["-n", n, "-o", "json", &format!("--server-config={}", webhook(cluster).server_config())])
            .env("KUBECONFIG", &cluster.kubeconfig)
            .output()
            .expect("run kubectl-confighistory");
        let mut v: Value =
            serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{args:?}: {e}: {}", String::from_utf8_lossy(&out.stderr)));
        v.as_object_mut().expect("an object").remove("kind");
        v
    };
    assert_eq!(timeline, cli(&["history", "deployment/pricing"]));
    assert_eq!(
        ui.json(&format!("/api/namespaces/{n}/workloads/Deployment/pricing/diff?a=1&b=2")),
        cli(&["diff", "deployment/pricing", "--from-revision", "1", "--to-revision", "2"])
    );
    assert_eq!(ui.json(&format!("/api/namespaces/{n}/history?source=pricing-config")), cli(&["history", "pricing-config"]));
    assert_eq!(ui.json(&format!("/api/namespaces/{n}/diff?source=pricing-config&a=1&b=3")), cli(&["diff", "pricing-config", "1", "3"]));
    assert_eq!(
        ui.json(&format!("/api/namespaces/{n}/diff?source=pricing-config&a=deployment%2Fpricing%401")),
        cli(&["diff", "pricing-config", "deployment/pricing@1"])
    );
    let card = |r: u32, part: &str| browser.text(&browser.find(&format!(".revision[data-revision=\"{r}\"] {part}")));
    for (r, image) in [(1, "pricing:4.11"), (2, "pricing:4.12"), (3, "pricing:4.13")] {
        assert_eq!(card(r, ".images"), image, "revision {r}");
    }
    assert_eq!(card(2, ".authors"), "bob");
    assert_eq!(card(3, ".authors"), "carol");
    // The first release's content predates confighistory's tracking of the source: the page says
    // what the timeline says.
    let first = &timeline["revisions"][0];
    let expected: Vec<String> = first["authors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_owned())
        .chain(first["authorUnknown"].as_str().map(|w| format!("({w})")))
        .collect();
    assert_eq!(card(1, ".authors"), expected.join(", "), "{timeline:#}");
    assert_eq!(browser.find_all(".revision.running").len(), 1);
    assert!(card(3, "h4").contains("running"), "{}", card(3, "h4"));
    // The picture: three nodes, the running one filled, image and config changes marked.
    let marks = browser.execute(
        "return [document.querySelectorAll('svg.timeline circle.node').length, document.querySelectorAll('svg.timeline circle.node.running').length, document.querySelectorAll('svg .mark-image').length, document.querySelectorAll('svg .mark-config').length];",
        json!([]),
    );
    // Revision 1 brings its config (the source is new to the workload): marked as a config change.
    assert_eq!(marks, json!([3, 1, 2, 3]), "[nodes, running, image changes, config changes]");

    // Revision 1 against 2: the renamed setting, side by side.
    browser.click(&browser.find(".revision[data-revision=\"1\"] .pick-a"));
    browser.click(&browser.find(".revision[data-revision=\"2\"] .pick-b"));
    browser.click(&browser.find("#compare"));
    browser.find("#diff .key-diff[data-key=\"config.yaml\"]");
    let old: Vec<String> = browser.find_all("#diff td.old.del").iter().map(|e| browser.text(e)).collect();
    let new: Vec<String> = browser.find_all("#diff td.new.add").iter().map(|e| browser.text(e)).collect();
    assert_eq!((old, new), (vec!["discount_rules_path: /etc/rules".to_owned()], vec!["rules.discount_path: /etc/rules".to_owned()]));
    let images = browser.text(&browser.find("#diff table.images-diff tr.image.changed"));
    assert!(images.contains("pricing:4.11") && images.contains("pricing:4.12"), "{images}");
    assert_inert(&browser, "revision diff");
    save_screenshot(&browser, "plugin-ui.png");

    // The source's snapshot history, and its two newest snapshots compared.
    browser.click(&browser.find("#tab-sources"));
    browser.click(&browser.find("#list button.source[data-source=\"pricing-config\"]"));
    browser.find("table.history tr.snapshot[data-revision=\"3\"]");
    assert_eq!(browser.find_all("table.history tr.snapshot").len(), 3);
    assert!(browser.text(&browser.find("tr.snapshot.head")).starts_with("3 head"));
    browser.click(&browser.find("#compare"));
    browser.find("#diff .key-diff[data-key=\"config.yaml\"]");
    let added: Vec<String> = browser.find_all("#diff td.new.add").iter().map(|e| browser.text(e)).collect();
    assert_eq!(added, ["log_level: debug"]);
    assert_inert(&browser, "source diff");

    // An undo to revision 1: it runs again as revision 4, its config held (docs/behaviour.md §2),
    // and the page says so where a developer looks: the card, the picture and the note.
    ns.rollout_undo("pricing", Some(1));
    wait_for("the undo's revision", Duration::from_secs(30), || ns.history_of("pricing").iter().any(|r| r.revision == 4));
    browser.click(&browser.find("#tab-workloads"));
    browser.click(&browser.find("#list button.workload[data-kind=\"Deployment\"][data-name=\"pricing\"]"));
    browser.find(".revision[data-revision=\"4\"]");
    assert_eq!(card(4, ".images"), "pricing:4.11");
    let badges: Vec<String> = browser.find_all(".revision[data-revision=\"4\"] .badge").iter().map(|e| browser.text(e)).collect();
    assert_eq!(badges, ["running", "held"], "the running revision, held");
    assert!(browser.find_all(".revision[data-revision=\"3\"] .badge").is_empty(), "revision 3 no longer runs");
    let picture = browser.execute(
        "return Array.from(document.querySelectorAll('svg.timeline text.badge')).map(t => t.textContent).filter(t => t);",
        json!([]),
    );
    assert_eq!(picture, json!(["running, held"]));
    assert!(body_text(&browser).contains("Held (an undo's pin, propagation skips it): pricing-config"), "{}", body_text(&browser));
    assert_inert(&browser, "held revision");

    // The JSON API answers its own address only, and GET only.
    let (status, body) = ui.get_as("rebound.example:80", &format!("/api/namespaces/{n}/sources"));
    assert_eq!(status, 403, "{body}");
    let page = ui.json(&format!("/api/namespaces/{n}/workloads?limit=1"));
    assert_eq!(page["workloads"], json!([{"kind": "Deployment", "name": "pricing"}]), "{page:#}");
    ui.stop();
}

/// The Secret canary of tests/e2e/plugin.rs: never in the page, nor in any JSON answer.
const CANARY: &str = "canary-7f3c9e1d";
const SCRIPT: &str = "<script>alert(1)</script>";
const IMG: &str = "\"><img src=x onerror=alert(1)>";

/// The canary's plain, base64 and SHA-256 (hex) forms.
fn canary_forms() -> Vec<String> {
    use base64::Engine as _;
    use confighistory::model::digest::{digest, Sha256};
    let hex: String = digest::<Sha256>(CANARY.as_bytes()).iter().map(|b| format!("{b:02x}")).collect();
    vec![CANARY.into(), base64::engine::general_purpose::STANDARD.encode(CANARY), hex.to_uppercase(), hex]
}

#[track_caller]
fn assert_no_canary(what: &str, text: &str) {
    for (i, form) in canary_forms().iter().enumerate() {
        // Named by its index only: a failure never quotes text that may hold a Secret value.
        assert!(!text.contains(form.as_str()), "{what}: canary form #{i} shown");
    }
}

/// Tenant text that looks like markup (a user name, an image, a change-cause, a ConfigMap value)
/// is shown as text: present on the page, no element or alert made of it. A Deployment using
/// two snapshots of a Secret holding the canary: its keys and sizes are shown, the canary is in
/// no page text and no JSON answer.
#[test]
fn browser_shows_tenant_text_as_text_and_never_a_secret_value() {
    use confighistory::model::keys::{ClusterKey, KeyId, MIN_KEY_BYTES};
    use confighistory::model::secret::{self, SecretContent};
    let Some(cluster) = cluster() else { return };
    let Some(browser) = Browser::start() else { return };
    webhook(cluster);
    let ns = TestNamespace::new(cluster, "ui-hostile");
    let n = ns.name.as_str();
    // Secret snapshots made by hand, as the server makes them (tests/e2e/plugin.rs
    // `secret_views_show_keys_and_sizes_never_values`): the shared server does not version Secrets.
    let key = ClusterKey::new(KeyId(1), vec![9; MIN_KEY_BYTES]).unwrap().namespace_key(n);
    let content = |password: &str| {
        let data = std::collections::BTreeMap::from([
            ("api_key".to_owned(), CANARY.as_bytes().to_vec()),
            ("password".to_owned(), password.as_bytes().to_vec()),
        ]);
        SecretContent::new(secret::OPAQUE, data)
    };
    let (old, new) = (content(CANARY), content("s3cret-rotated-value"));
    let (snap_old, snap_new) = (secret::snapshot_name("db", &old, &key, 0), secret::snapshot_name("db", &new, &key, 0));
    ns.accepts(&secret::snapshot_object(n, "db", &snap_old, &old, &key, &[]).to_string());
    ns.accepts(&secret::snapshot_object(n, "db", &snap_new, &new, &key, &[]).to_string());
    let secret_volume = |snap: &str| format!("secret: {{secretName: {snap}}}");
    let value = |v: &str| config(&format!("  payload: {:?}\n", format!("{SCRIPT}\n{IMG}\nversion: {v}")));
    let first = deployment(&format!("registry.example/app:{IMG}")).unmounted_volume("db", &secret_volume(&snap_old));
    let second = deployment("registry.example/app:2")
        .unmounted_volume("db", &secret_volume(&snap_new))
        .annotation("kubernetes.io/change-cause", IMG);
    release(&ns, SCRIPT, &value("1"), &first.yaml());
    release(&ns, SCRIPT, &value("2"), &second.yaml());
    wait_for("two revisions", Duration::from_secs(30), || ns.history_of("pricing").len() == 2);

    // The server's configuration unknown: the plugin then reads Secrets everywhere.
    let ui = Ui::start(cluster, &["-n", n, "--server-config", "confighistory/nothing-here"]);
    browser.goto(&ui.url);
    assert_eq!(browser.text(&browser.find("#namespace option:checked")), n, "opened on -n");
    browser.click(&browser.find("#list button.workload[data-name=\"pricing\"]"));
    browser.find(".revision[data-revision=\"2\"]");
    let text = body_text(&browser);
    assert_no_canary("timeline page", &text);
    for shown in [SCRIPT, IMG] {
        assert!(text.contains(shown), "{shown} shown as text:\n{text}");
    }
    assert!(browser.text(&browser.find(".revision[data-revision=\"2\"] .cause")) == IMG);
    assert!(browser.text(&browser.find(".revision[data-revision=\"1\"] .images")).contains(IMG));
    assert!(browser.text(&browser.find(".revision[data-revision=\"2\"] .authors")).contains(SCRIPT));
    assert_inert(&browser, "timeline");

    browser.click(&browser.find("#compare"));
    browser.find("#diff .source-diff[data-source=\"secret/db\"]");
    let text = body_text(&browser);
    assert_no_canary("revision diff page", &text);
    assert!(
        text.contains("password (changed, 15 B \u{2192} 20 B)") && text.contains("value differs (hidden)"),
        "{}",
        text.replace(CANARY, "#")
    );
    let old: Vec<String> = browser.find_all("#diff td.old.del").iter().map(|e| browser.text(e)).collect();
    assert_eq!(old, ["version: 1"]);
    assert_inert(&browser, "revision diff");

    browser.click(&browser.find("#tab-sources"));
    browser.click(&browser.find("#list button.source[data-source=\"secret/db\"]"));
    browser.find("table.history tr.snapshot[data-revision=\"2\"]");
    browser.click(&browser.find("#compare"));
    browser.find("#diff .key-diff[data-key=\"password\"]");
    let text = body_text(&browser);
    assert_no_canary("secret history and diff page", &text);
    assert!(text.contains("api_key") && text.contains("value differs (hidden)"));
    assert_inert(&browser, "secret diff");
    let html = browser.execute("return document.documentElement.outerHTML;", json!([])).as_str().unwrap_or_default().to_owned();
    assert_no_canary("the page's DOM", &html);

    // Every JSON answer.
    let w = format!("/api/namespaces/{n}/workloads/Deployment/pricing");
    for path in [
        format!("/api/namespaces/{n}/workloads"),
        format!("/api/namespaces/{n}/sources"),
        format!("/api/namespaces/{n}/history?source=secret%2Fdb"),
        format!("/api/namespaces/{n}/diff?source=secret%2Fdb"),
        format!("/api/namespaces/{n}/diff?source=secret%2Fdb&a=1&b=2"),
        format!("/api/namespaces/{n}/diff?source=secret%2F{snap_old}"),
        format!("/api/namespaces/{n}/history?source=pricing-config"),
        format!("{w}/timeline"),
        format!("{w}/status"),
        format!("{w}/diff"),
        format!("{w}/diff?a=2&b=1"),
    ] {
        let (status, body) = ui.get(&path);
        assert_no_canary(&path, &body);
        assert_eq!(status, 200, "{path}: {}", body.replace(CANARY, "#"));
    }
    let d = ui.json(&format!("/api/namespaces/{n}/diff?source=secret%2Fdb&a=1&b=2"));
    assert_eq!(d["keys"][0]["hidden"], true, "values hidden");
    ui.stop();
}

/// The figures of docs/plugin.md "Web view": the JSON endpoints' times on a namespace with
/// 1,000 Deployments (replicas 0, each with its ReplicaSet) and one source with 100 snapshots
/// (100 releases of a Deployment keeping its 100 revisions). A measurement, not an assertion of
/// speed: `cargo test --test e2e -- --ignored ui::measure --nocapture` prints the table, for the
/// debug build the tests use, or for the build `CONFIGHISTORY_UI_BIN` names (a release build:
/// what users run).
#[test]
#[ignore = "a measurement (minutes): run by hand, see docs/plugin.md \"Web view\""]
fn measure_api_times_with_a_thousand_workloads() {
    let Some(cluster) = cluster() else { return };
    webhook(cluster);
    let ns = TestNamespace::new(cluster, "ui-scale");
    let n = ns.name.as_str();
    // The source with 100 snapshots: 100 releases, each with new content.
    let started = std::time::Instant::now();
    for i in 1..=100 {
        let cm = config(&format!("  config.yaml: \"release: {i}\\nrules.discount_path: /etc/rules\"\n"));
        let d = deployment(&format!("pricing:{i}")).spec("revisionHistoryLimit: 100").replicas(0).yaml();
        ns.accepts(&format!("{cm}\n---\n{d}"));
    }
    let replicasets = || ns.kubectl(&["get", "replicasets", "-o", "name"]).expect_success().stdout.lines().count();
    wait_for("100 revisions", Duration::from_secs(300), || replicasets() >= 100);
    eprintln!("100 releases: {:.0?}", started.elapsed());
    // 1,000 more Deployments naming the same ConfigMap, applied in batches of 100.
    let started = std::time::Instant::now();
    for batch in 0..10 {
        let docs: Vec<String> = (0..100)
            .map(|i| {
                // Renamed only: every one selects the pods labelled app=pricing.
                deployment("pricing:100").replicas(0).yaml().replace("  name: pricing\n", &format!("  name: app-{:04}\n", batch * 100 + i))
            })
            .collect();
        ns.accepts(&docs.join("---\n"));
    }
    wait_for("1,000 ReplicaSets", Duration::from_secs(600), || {
        ns.kubectl(&["get", "replicasets", "-o", "name"]).expect_success().stdout.lines().count() >= 1100
    });
    eprintln!("1,000 Deployments: {:.0?}", started.elapsed());

    let ui = Ui::start(cluster, &["-n", n, &format!("--server-config={}", webhook(cluster).server_config())]);
    let w = format!("/api/namespaces/{n}/workloads/Deployment");
    let cases = [
        ("namespaces", "/api/namespaces".to_owned()),
        ("workloads, first page (200 names)", format!("/api/namespaces/{n}/workloads?limit=200")),
        ("sources (metadata only)", format!("/api/namespaces/{n}/sources")),
        ("history of the source (100 snapshots)", format!("/api/namespaces/{n}/history?source=pricing-config")),
        ("diff of two snapshots", format!("/api/namespaces/{n}/diff?source=pricing-config&a=1&b=100")),
        ("timeline (100 revisions)", format!("{w}/pricing/timeline")),
        ("timeline (1 revision)", format!("{w}/app-0500/timeline")),
        ("revision diff 1 -> 100", format!("{w}/pricing/diff?a=1&b=100")),
        ("status", format!("{w}/app-0500/status")),
    ];
    eprintln!("| endpoint | median of 5 | max | bytes |");
    eprintln!("|---|---|---|---|");
    for (what, path) in cases {
        let mut times = Vec::new();
        let mut bytes = 0;
        for _ in 0..5 {
            let t = std::time::Instant::now();
            let (status, body) = ui.get(&path);
            times.push(t.elapsed());
            assert_eq!(status, 200, "{path}: {body}");
            bytes = body.len();
        }
        times.sort();
        eprintln!("| {what} | {} ms | {} ms | {bytes} |", times[2].as_millis(), times[4].as_millis());
    }
    // Every page of names.
    let t = std::time::Instant::now();
    let (mut names, mut cursor, mut pages) = (0, String::new(), 0);
    loop {
        let page = ui.json(&format!("/api/namespaces/{n}/workloads?limit=200{cursor}"));
        names += page["workloads"].as_array().map_or(0, Vec::len);
        pages += 1;
        match page["continue"].as_str() {
            Some(c) => cursor = format!("&continue={}", c.replace(':', "%3A").replace('=', "%3D").replace('+', "%2B").replace('/', "%2F")),
            None => break,
        }
    }
    assert_eq!(names, 1001);
    eprintln!("| all workload names ({names}, {pages} pages) | {} ms total | | |", t.elapsed().as_millis());
    ui.stop();
}
