//! Secrets as sources on the real cluster (docs/behaviour.md §4a): a server of the
//! group's own, started as an install with `secrets.enabled=true` (chart values, webhook rules and
//! RBAC; the server flag `--secrets`) and Secrets on in the namespaces labelled
//! [`SECRETS_LABEL`]`=on` (`secrets.namespaceSelector`, `--secrets-namespace-selector`), logging at
//! debug level.
//!
//! Every Secret of the group holds one canary value, `canary-<random>` (per process). Each test
//! ends by searching everything the server wrote so far for it ([`Canary::assert_not_shown`]):
//! its log file (the whole group's, at debug level), the Events and the metadata of its namespaces,
//! the metrics endpoint, and what kubectl printed (warnings, denials). Failure messages of this
//! file go through [`Canary::redact`], so a leak shows as a failure, never as the value.
//!
//! The pods run on the current lane's real node (the test app `pricing:4.11`/`4.12` of
//! `tests/e2e/cluster`); the Secret is mounted under /etc/secret, which the app does not print.

use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use serde_json::{json, Value};

use confighistory::model::digest::{digest, Sha256};
use confighistory::model::keys::Keyring;
use confighistory::model::names::{ADOPTED, HASH_LABEL, HEAD, MODE_LABEL, PREFIX, PROPAGATED, SOURCE_NAME};
use confighistory::model::secret::{self, SecretContent};
use confighistory::model::snapshot::Content;
use confighistory::store::keys;

use crate::support::apps::Workload;
use crate::support::confighistory::{ChartRelease, Install, Webhook, NAMESPACE};
use crate::support::{cluster, run_id, wait_for, wait_for_value, Kubectl, TestNamespace};

/// Namespaces with this label have Secrets on (the group server's admin selector).
const SECRETS_LABEL: &str = "e2e.confighistory.io/secrets";
/// The incident's Secret, and the settings of its two releases (docs/behaviour.md §1 with the
/// config in a Secret): release B renames the setting.
const SOURCE: &str = "pricing-secret";
const KEY_A: &str = "discount_rules_path";
const KEY_B: &str = "rules.discount_path";
const RULES: &str = "/etc/rules";
/// The test app's images (`tests/e2e/cluster`): pods really run them.
const APP_A: &str = "pricing:4.11";
const APP_B: &str = "pricing:4.12";
/// The group server's resync interval (`--resync-interval`), in seconds.
const RESYNC: u64 = 5;

/// The group's server and canary.
struct Group {
    server: Webhook,
    canary: Canary,
}

static GROUP: OnceLock<Group> = OnceLock::new();

/// The group's server, started on first use (a run id of its own: `<run>-secrets`).
fn group() -> Option<&'static Group> {
    let cluster = cluster()?;
    Some(GROUP.get_or_init(|| {
        let run = format!("{}-secrets", run_id());
        let selector = format!("{{\"matchLabels\":{{\"{SECRETS_LABEL}\":\"on\"}}}}");
        let namespace_selector = format!("secrets.namespaceSelector={selector}");
        let values = ["--set", "secrets.enabled=true", "--set-json", namespace_selector.as_str()];
        let (resync, selector) = (RESYNC.to_string(), format!("--secrets-namespace-selector={SECRETS_LABEL}=on"));
        let flags = ["--settle", "2", "--resync-interval", &resync, &selector];
        let started = std::time::Instant::now();
        let install = Install { values: &values, rust_log: Some("debug"), ..Install::default() };
        let server = Webhook::start_with(cluster, &run, &flags, &install);
        eprintln!("e2e: the Secret group's server {} is up in {:.1?}", server.name, started.elapsed());
        Group { server, canary: Canary::new() }
    }))
}

/// Whether pods run (the current lane's node, or an external cluster); said once otherwise. The
/// scenarios that read a running pod skip elsewhere (lane v1.20 has no node); the others need
/// only admission and the controller manager, and run on every lane.
fn pods_run(test: &str) -> bool {
    let lane = std::env::var("CONFIGHISTORY_LANE").unwrap_or_default();
    let run = lane == "current" || cluster().is_some_and(|c| c.external);
    if !run {
        eprintln!("e2e: secrets::{test}: skipping: it reads running pods (the current lane), not lane {lane:?}");
    }
    run
}

/// A namespace of the group's run, Secrets on unless `secrets` is false.
fn namespace(g: &Group, prefix: &str, secrets: bool, labels: &[(&str, &str)]) -> TestNamespace {
    let mut all = labels.to_vec();
    if secrets {
        all.push((SECRETS_LABEL, "on"));
    }
    g.server.namespace(prefix, &all)
}

// ---------- the canary ----------

/// The group's Secret value and the forms of it nothing may show.
struct Canary {
    value: String,
    forms: Vec<(&'static str, String)>,
}

impl Canary {
    fn new() -> Canary {
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        let mixed = digest::<Sha256>(format!("{nanos}-{}", std::process::id()).as_bytes());
        let value = format!("canary-{}", hex(&mixed[..8]));
        let sha = digest::<Sha256>(value.as_bytes());
        let b64 = base64::engine::general_purpose::STANDARD.encode(&value);
        let mut forms = vec![
            ("the canary", value.clone()),
            ("its base64", b64.clone()),
            ("its base64, unpadded prefix", b64.trim_end_matches('=')[..20].to_owned()),
            ("its SHA-256 in hex", hex(&sha)),
            ("its SHA-256 in upper-case hex", hex(&sha).to_uppercase()),
            ("its SHA-256 in base64", base64::engine::general_purpose::STANDARD.encode(sha)),
        ];
        // The unkeyed hashes a ConfigMap's rules would give the group's Secrets' data, as sent
        // (base64) and as read (plain).
        for (password, rules) in [(b64.clone(), b64_of(RULES)), (value.clone(), RULES.to_owned())] {
            for data in
                [json!({"password": password}), json!({KEY_A: rules, "password": password}), json!({KEY_B: rules, "password": password})]
            {
                forms.push(("an unkeyed content hash of it", Content::from_object(&json!({"data": data})).hash()));
            }
        }
        Canary { value, forms }
    }

    fn b64(&self) -> String {
        b64_of(&self.value)
    }

    /// `text` with every form of the canary replaced by its description.
    fn redact(&self, text: &str) -> String {
        self.forms.iter().fold(text.to_owned(), |t, (form, value)| t.replace(value.as_str(), &format!("<{form}>")))
    }

    /// Fails, naming where and which form, if any text of `seen`, the server's log, the Events and
    /// Secret/workload metadata of `namespaces` or the metrics show a form of the canary.
    #[track_caller]
    fn assert_not_shown(&self, server: &Webhook, namespaces: &[&TestNamespace], seen: &Seen) {
        let mut texts = seen.0.clone();
        let log = server.log();
        assert!(log.contains("DEBUG"), "the server logs at debug level ({} bytes of log)", log.len());
        texts.push(("the server's log".into(), log));
        texts.push(("the metrics".into(), server.metrics()));
        for ns in namespaces {
            let events = ns.kubectl(&["get", "events", "-o", "json"]);
            texts.push((format!("the Events of {}", ns.name), format!("{}{}", events.stdout, events.stderr)));
            // What the server wrote on objects: workloads whole, Secrets' metadata (their data is
            // the value on purpose; kubectl apply's own record of the manifest is not the server's).
            let workloads = ns.kubectl(&["get", "deployments,replicasets", "-o", "json"]);
            texts.push((format!("the workloads of {}", ns.name), workloads.stdout));
            for s in ns.list_json("secrets") {
                let mut meta = s["metadata"].clone();
                if let Some(a) = meta["annotations"].as_object_mut() {
                    a.remove("kubectl.kubernetes.io/last-applied-configuration");
                }
                meta.as_object_mut().map(|m| m.remove("managedFields"));
                texts.push((format!("the metadata of Secret {}/{}", ns.name, meta["name"]), meta.to_string()));
            }
        }
        // Every place and form, named; never the text around it.
        let shown: Vec<String> = texts
            .iter()
            .flat_map(|(what, text)| {
                self.forms
                    .iter()
                    .filter(|(_, value)| text.contains(value.as_str()))
                    .map(move |(form, _)| format!("{} shows {form}", self.redact(what)))
            })
            .collect();
        assert!(shown.is_empty(), "the canary leaked:\n{}", shown.join("\n"));
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn b64_of(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// What kubectl printed to the test (outputs of applies, patches, undos, denials): (what, text).
#[derive(Default)]
struct Seen(Vec<(String, String)>);

impl Seen {
    fn record(&mut self, out: Kubectl) -> Kubectl {
        self.0.push((format!("kubectl {}", out.args.join(" ")), format!("{}{}", out.stdout, out.stderr)));
        out
    }
}

/// The harness's checks, with failure output redacted and every output recorded.
struct Checked<'a> {
    ns: &'a TestNamespace,
    canary: &'a Canary,
}

impl Checked<'_> {
    #[track_caller]
    fn accepts(&self, seen: &mut Seen, yaml: &str) -> Kubectl {
        let out = seen.record(self.ns.apply(yaml).unwrap_or_else(|e| e));
        assert!(out.success, "expected the cluster to accept the manifest, it refused:\n{}", self.canary.redact(&out.describe()));
        out
    }

    #[track_caller]
    fn rejects(&self, seen: &mut Seen, yaml: &str, expected: &str) -> Kubectl {
        let out = seen.record(self.ns.apply(yaml).unwrap_or_else(|e| e));
        assert!(!out.success, "expected the cluster to refuse the manifest, it accepted:\n{}", self.canary.redact(&out.describe()));
        assert!(out.stderr.contains(expected), "refused, but not with {expected:?}:\n{}", self.canary.redact(&out.describe()));
        out
    }

    /// `kubectl <args> -n <ns>`, which must succeed.
    #[track_caller]
    fn kubectl(&self, seen: &mut Seen, args: &[&str]) -> Kubectl {
        let out = seen.record(self.ns.kubectl(args));
        assert!(out.success, "kubectl {} failed:\n{}", args.join(" "), self.canary.redact(&out.describe()));
        out
    }
}

// ---------- manifests ----------

/// An Opaque Secret with `data` (values given plain, sent base64).
fn opaque(name: &str, data: &[(&str, &str)]) -> String {
    let mut yaml = format!("apiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}\ntype: Opaque\ndata:\n");
    for (k, v) in data {
        yaml.push_str(&format!("  {k:?}: {}\n", b64_of(v)));
    }
    yaml
}

/// The incident's Secret in a release: the setting `key` and the password (the canary).
fn pricing_secret(canary: &Canary, key: &str) -> String {
    opaque(SOURCE, &[(key, RULES), ("password", &canary.value)])
}

/// The pricing Deployment: `image`, the Secret mounted under /etc/secret, its setting `key` in
/// `$RULES` (secretKeyRef) and every key in `$CFG_<key>` (secretRef).
fn pricing(image: &str, key: &str) -> String {
    Workload::deployment("pricing", image)
        .pod("terminationGracePeriodSeconds: 1")
        .env_secret_key("RULES", SOURCE, key)
        .env_from_secret(SOURCE, "CFG_")
        .secret_volume("config", SOURCE, "/etc/secret")
        .read_only()
        .yaml()
}

/// A Deployment `name` (no pods: replicas 0) reading Secret `secret` as a volume.
fn reader(name: &str, image: &str, secret: &str) -> Workload {
    Workload::deployment(name, image).replicas(0).secret_volume("s", secret, "/etc/secret")
}

// ---------- reading the cluster ----------

/// Every Secret name a pod spec references: volumes, projected sources, secretKeyRef, secretRef.
fn secret_refs(pod_spec: &Value) -> Vec<String> {
    let mut names = Vec::new();
    let mut add = |v: &Value| {
        if let Some(n) = v.as_str() {
            names.push(n.to_owned());
        }
    };
    for volume in pod_spec["volumes"].as_array().into_iter().flatten() {
        add(&volume["secret"]["secretName"]);
        for source in volume["projected"]["sources"].as_array().into_iter().flatten() {
            add(&source["secret"]["name"]);
        }
    }
    for container in pod_spec["containers"].as_array().into_iter().flatten() {
        for env in container["env"].as_array().into_iter().flatten() {
            add(&env["valueFrom"]["secretKeyRef"]["name"]);
        }
        for env_from in container["envFrom"].as_array().into_iter().flatten() {
            add(&env_from["secretRef"]["name"]);
        }
    }
    names
}

/// The Secret names a workload's current template references.
fn template_secrets(ns: &TestNamespace, kind: &str, name: &str) -> Vec<String> {
    let obj = ns.get_json(kind, name).unwrap_or_else(|| panic!("{kind}/{name} not found in {}", ns.name));
    secret_refs(&obj["spec"]["template"]["spec"])
}

/// The one Secret name the pricing Deployment's template references (all its references agree).
fn pinned(ns: &TestNamespace) -> String {
    let refs = template_secrets(ns, "deployment", "pricing");
    assert_eq!(refs.len(), 3, "volume, secretKeyRef, secretRef: {refs:?}");
    assert!(refs.iter().all(|r| *r == refs[0]), "the three references name one snapshot: {refs:?}");
    refs[0].clone()
}

/// The ReplicaSets of a Deployment, by name.
fn replicasets(ns: &TestNamespace, app: &str) -> Vec<String> {
    let mut names: Vec<String> = ns
        .list_json("replicasets")
        .iter()
        .filter(|rs| rs["metadata"]["ownerReferences"][0]["name"] == app)
        .filter_map(|rs| rs["metadata"]["name"].as_str().map(str::to_owned))
        .collect();
    names.sort();
    names
}

/// The server's keyring, read as the admin from its keys Secret (key bytes are never printed).
fn keyring(g: &Group, ns: &TestNamespace) -> Keyring {
    let secret = format!("{}-keys", g.server.name);
    let out = ns.cluster.kubectl(&["get", "secret", &secret, "-n", NAMESPACE, "-o", "json"]);
    assert!(out.success, "the server's keys Secret {NAMESPACE}/{secret}: {}", out.stderr);
    let obj: Value = serde_json::from_str(&out.stdout).expect("the keys Secret as JSON");
    keys::read(&obj, &keys::Target { namespace: NAMESPACE.into(), secret }).expect("the keys Secret reads as a keyring").0
}

/// The content of Secret `name` as the server sees it (type and data).
fn content_of(ns: &TestNamespace, name: &str) -> SecretContent {
    let obj = ns.get_json("secret", name).unwrap_or_else(|| panic!("secret/{name} not found in {}", ns.name));
    SecretContent::from_object(&obj).expect("a well-formed Secret")
}

/// Checks that `name` is a snapshot of `source` as docs/behaviour.md §4a says: an immutable Secret
/// of the source's type and data, named `<source>-<mac>` where the MAC is the one under the
/// server's key for this namespace; returns the MAC.
#[track_caller]
fn assert_mac_named_snapshot(g: &Group, ns: &TestNamespace, name: &str, source: &str, content: &SecretContent) -> String {
    let snap = ns.get_json("secret", name).unwrap_or_else(|| panic!("snapshot secret/{name} not found in {}", ns.name));
    assert_eq!(snap["immutable"], true, "{name} is immutable");
    assert_eq!(snap["metadata"]["annotations"][SOURCE_NAME].as_str(), Some(source), "{name} names its source");
    let ring = keyring(g, ns);
    let mac = secret::validate(&snap, &ns.name, &ring).unwrap_or_else(|e| panic!("{name} is not a valid Secret snapshot: {e}"));
    assert_eq!(snap["metadata"]["labels"][HASH_LABEL].as_str(), Some(mac.as_str()));
    assert_eq!(name, secret::snapshot_name(source, content, &ring.current().namespace_key(&ns.name), 0), "named by its MAC");
    assert!(SecretContent::from_object(&snap).is_ok_and(|c| c == *content), "{name} holds the content it is named for");
    mac
}

/// The one live, Ready pod of `app` once it runs `image` with a template naming `secret`.
fn running_pod(ns: &TestNamespace, app: &str, image: &str, secret: &str) -> String {
    wait_for_value(&format!("one Ready pod of {app} running {image} with {secret}"), Duration::from_secs(120), || {
        let pods = ns.kubectl(&["get", "pods", "-l", &format!("app={app}"), "-o", "json"]).expect_success().json();
        let live: Vec<&Value> = pods["items"].as_array()?.iter().filter(|p| p["metadata"]["deletionTimestamp"].is_null()).collect();
        let [pod] = live.as_slice() else { return None };
        let ready = pod["status"]["conditions"].as_array()?.iter().any(|c| c["type"] == "Ready" && c["status"] == "True");
        let spec = &pod["spec"];
        (ready && spec["containers"][0]["image"] == image && secret_refs(spec).iter().all(|s| s == secret))
            .then(|| pod["metadata"]["name"].as_str().map(str::to_owned))
            .flatten()
    })
}

/// `kubectl exec <pod> -- <command>`: (exit success, stdout trimmed).
fn exec(ns: &TestNamespace, pod: &str, command: &[&str]) -> (bool, String) {
    // `-n` before `--` (TestNamespace::kubectl appends it, which would hand it to the command).
    let mut args = vec!["exec", "-n", &ns.name, pod, "--"];
    args.extend_from_slice(command);
    let out = ns.cluster.kubectl(&args);
    (out.success, out.stdout.trim().to_owned())
}

/// The pod's environment variables `names` that are set. `env` is run directly: the test app's
/// shell would drop the names with a dot that `secretRef` gives. Every other line (the password's
/// among them) is dropped unread.
fn env_of(ns: &TestNamespace, pod: &str, names: &[&str]) -> BTreeMap<String, String> {
    let (ok, out) = exec(ns, pod, &["env"]);
    assert!(ok, "env in {pod}");
    out.lines().filter_map(|l| l.split_once('=')).filter(|(k, _)| names.contains(k)).map(|(k, v)| (k.to_owned(), v.to_owned())).collect()
}

/// What the running pod reads: the setting `key` from the file and from `$RULES` (secretKeyRef)
/// and `$CFG_<key>` (secretRef), and nothing of the other release's setting `other`.
fn assert_pod_reads(ns: &TestNamespace, pod: &str, key: &str, other: &str) {
    assert_eq!(exec(ns, pod, &["cat", &format!("/etc/secret/{key}")]), (true, RULES.to_owned()), "the file of {key}");
    assert!(!exec(ns, pod, &["test", "-e", &format!("/etc/secret/{other}")]).0, "no file of {other}");
    let (cfg_key, cfg_other) = (format!("CFG_{key}"), format!("CFG_{other}"));
    let env = env_of(ns, pod, &["RULES", &cfg_key, &cfg_other]);
    let expected: BTreeMap<String, String> = [("RULES".to_owned(), RULES.to_owned()), (cfg_key, RULES.to_owned())].into();
    assert_eq!(env, expected, "$RULES (secretKeyRef {key}) and $CFG_* (secretRef)");
}

/// `kubectl confighistory <args> -n <ns>` with the admin's kubeconfig, reading the group server's
/// published configuration; recorded in `seen` (its output is searched for the canary too).
fn plugin(g: &Group, ns: &TestNamespace, seen: &mut Seen, args: &[&str]) -> Kubectl {
    let location = format!("--server-config={}", g.server.server_config());
    let mut all = args.to_vec();
    all.extend(["-n", &ns.name, &location]);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kubectl-confighistory"))
        .args(&all)
        .env("KUBECONFIG", &ns.cluster.kubeconfig)
        .output()
        .expect("run kubectl-confighistory");
    let run = Kubectl {
        args: all.iter().map(|a| a.to_string()).collect(),
        // diff exits 1 when there are differences.
        success: out.status.success() || (args[0] == "diff" && out.status.code() == Some(1)),
        stdout: String::from_utf8_lossy(&out.stdout).into(),
        stderr: String::from_utf8_lossy(&out.stderr).into(),
    };
    let run = seen.record(run);
    assert!(run.success, "kubectl confighistory {} failed:\n{}", args.join(" "), g.canary.redact(&run.describe()));
    run
}

// ---------- a) the incident ----------

/// docs/behaviour.md §1, §4a, §6.2.1: the incident with the config in a Secret, read as files (a
/// secret volume) and env (secretKeyRef, secretRef). Release A; release B renames the setting in
/// the Secret and ships a new image; `kubectl rollout undo` brings the running pod back to A's
/// Secret content (read in the pod), pinned to A's MAC-named snapshot.
#[test]
fn an_undo_brings_back_the_secret_content_the_old_pods_ran_with() {
    if !pods_run("an_undo_brings_back_the_secret_content_the_old_pods_ran_with") {
        return;
    }
    let Some(g) = group() else { return };
    let ns = namespace(g, "sec-incident", true, &[]);
    let (c, mut seen) = (Checked { ns: &ns, canary: &g.canary }, Seen::default());

    c.accepts(&mut seen, &format!("{}---\n{}", pricing_secret(&g.canary, KEY_A), pricing(APP_A, KEY_A)));
    let snap_a = pinned(&ns);
    assert_ne!(snap_a, SOURCE, "release A is pinned to a snapshot");
    assert_mac_named_snapshot(g, &ns, &snap_a, SOURCE, &content_of(&ns, SOURCE));
    let pod = running_pod(&ns, "pricing", APP_A, &snap_a);
    assert_pod_reads(&ns, &pod, KEY_A, KEY_B);

    // Release B: the Secret's setting renamed, a new image, one apply.
    let out = c.accepts(&mut seen, &format!("{}---\n{}", pricing_secret(&g.canary, KEY_B), pricing(APP_B, KEY_B)));
    assert!(
        out.warnings().iter().any(|w| w.contains(KEY_A) && w.contains(KEY_B)),
        "the Secret's update warning names the keys: {:?}",
        out.warnings().iter().map(|w| g.canary.redact(w)).collect::<Vec<_>>()
    );
    let snap_b = pinned(&ns);
    assert!(snap_b != snap_a && snap_b != SOURCE, "release B is pinned to a snapshot of its own: {snap_b}");
    assert_mac_named_snapshot(g, &ns, &snap_b, SOURCE, &content_of(&ns, SOURCE));
    let pod = running_pod(&ns, "pricing", APP_B, &snap_b);
    assert_pod_reads(&ns, &pod, KEY_B, KEY_A);

    // The incident: B fails, the team undoes the Deployment.
    ns.wait_observed("deployment", "pricing");
    c.kubectl(&mut seen, &["rollout", "undo", "deployment/pricing"]);
    assert_eq!(pinned(&ns), snap_a, "the undone Deployment is pinned to A's snapshot");
    let pod = running_pod(&ns, "pricing", APP_A, &snap_a);
    assert_pod_reads(&ns, &pod, KEY_A, KEY_B);
    // The Secret itself keeps release B's content (the undo changed only the Deployment).
    assert!(content_of(&ns, SOURCE).keys().any(|k| k == KEY_B));

    // The plugin's views of what the server made (docs/plugin.md "Secrets"): keys, never values.
    let source = format!("secret/{SOURCE}");
    let history: Value = serde_json::from_str(&plugin(g, &ns, &mut seen, &["history", &source, "-o", "json"]).stdout).unwrap_or_default();
    let names: Vec<&str> = history["snapshots"].as_array().into_iter().flatten().filter_map(|s| s["name"].as_str()).collect();
    assert_eq!(names, [snap_b.as_str(), snap_a.as_str()], "history lists the two snapshots, newest first");
    let diff = plugin(g, &ns, &mut seen, &["diff", &source, &snap_a, &snap_b]);
    assert!(
        diff.stdout.contains(KEY_A) && diff.stdout.contains(KEY_B),
        "the diff names the renamed keys: {}",
        g.canary.redact(&diff.stdout)
    );
    for args in
        [&["history", &source][..], &["diff", &source, "-o", "json"], &["status", "pricing"], &["undo", "pricing", "--dry-run"], &["list"]]
    {
        plugin(g, &ns, &mut seen, args);
    }
    // The workload's views (docs/plugin.md "Timeline", "Revision diff", "Undo preview"): the
    // Secret's keys between its revisions, in every format, never a value.
    let timeline: Value =
        serde_json::from_str(&plugin(g, &ns, &mut seen, &["history", "deployment/pricing", "-o", "json"]).stdout).unwrap_or_default();
    let used: Vec<&str> =
        timeline["revisions"].as_array().into_iter().flatten().filter_map(|r| r["config"][0]["snapshot"].as_str()).collect();
    assert_eq!(used, [snap_b.as_str(), snap_a.as_str()], "revisions 2 (B) and 3 (the undo, A's snapshot)");
    let diff = plugin(g, &ns, &mut seen, &["diff", "deployment/pricing"]);
    assert!(
        diff.stdout.contains(&format!("{KEY_A} (added")) && diff.stdout.contains(&format!("{KEY_B} (removed")),
        "{}",
        g.canary.redact(&diff.stdout)
    );
    for args in [
        &["history", "deployment/pricing"][..],
        &["history", "deployment/pricing", "-o", "yaml"],
        &["history", "deployment/pricing", "--revision", "2"],
        &["history", "deployment/pricing", "--revision", "3", "-o", "json"],
        &["diff", "deployment/pricing", "-o", "json"],
        &["diff", "deployment/pricing", "--from-revision", "3", "--to-revision", "2", "-o", "yaml"],
        &["undo", "pricing", "--dry-run", "-o", "json"],
        &["undo", "pricing", "--dry-run", "-o", "yaml"],
    ] {
        plugin(g, &ns, &mut seen, args);
    }

    g.canary.assert_not_shown(&g.server, &[&ns], &seen);
}

// ---------- b) never sources ----------

/// docs/behaviour.md §4a: a certificate issuer's TLS Secret (cert-manager's annotation), a Helm
/// release record (type `helm.sh/release.v1`) and a ServiceAccount token Secret, read by name by a
/// Deployment and edited while it does, are never touched: no confighistory annotation or label,
/// no snapshot, the Deployment's references to them stay plain. An Opaque Secret of the same
/// Deployment is pinned (Secrets are on here).
#[test]
fn tls_helm_release_and_token_secrets_are_never_touched() {
    let Some(g) = group() else { return };
    let ns = namespace(g, "sec-never", true, &[]);
    let (c, mut seen) = (Checked { ns: &ns, canary: &g.canary }, Seen::default());
    let canary = &g.canary.value;
    let tls = |crt: &str| {
        format!(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: web-tls\n  annotations:\n    cert-manager.io/certificate-name: web\n\
             type: kubernetes.io/tls\ndata:\n  tls.crt: {}\n  tls.key: {}\n",
            b64_of(crt),
            g.canary.b64()
        )
    };
    let helm = |version: &str| {
        format!(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: sh.helm.release.v1.web.v1\n  labels:\n    owner: helm\n    name: web\n    \
             status: {version}\ntype: helm.sh/release.v1\ndata:\n  release: {}\n",
            b64_of(&format!("{canary}-{version}"))
        )
    };
    let token = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: web-token\n  annotations:\n    \
                 kubernetes.io/service-account.name: default\ntype: kubernetes.io/service-account-token\n";
    let web = |image: &str| {
        Workload::deployment("web", image)
            .replicas(0)
            .env_secret_key("RELEASE", "sh.helm.release.v1.web.v1", "release")
            .env_from_secret("app-secret", "")
            .secret_volume("tls", "web-tls", "/etc/tls")
            .volume("token", "/etc/token", "projected: {sources: [{secret: {name: web-token}}]}")
            .yaml()
    };
    c.accepts(&mut seen, &format!("{}---\n{}---\n{token}", tls("crt-1"), helm("deployed")));
    c.accepts(&mut seen, &opaque("app-secret", &[("password", canary)]));
    wait_for("the token controller to fill web-token", Duration::from_secs(30), || {
        ns.get_json("secret", "web-token").is_some_and(|s| s["data"]["token"].is_string())
    });
    let out = c.accepts(&mut seen, &web(APP_A));
    // Edited while the Deployment reads them by name; a new release of the Deployment.
    let edits = [
        c.accepts(&mut seen, &tls("crt-2")),
        c.accepts(&mut seen, &helm("superseded")),
        c.kubectl(&mut seen, &["annotate", "secret", "web-token", "example.com/rotated=1"]),
        c.accepts(&mut seen, &web(APP_B)),
    ];

    let never = ["web-tls", "sh.helm.release.v1.web.v1", "web-token"];
    for out in std::iter::once(&out).chain(&edits) {
        let warned: Vec<String> = out.warnings().iter().filter(|w| never.iter().any(|n| w.contains(n))).cloned().collect();
        assert!(warned.is_empty(), "no warning about a never-source: {:?}", warned.iter().map(|w| g.canary.redact(w)).collect::<Vec<_>>());
    }
    for name in never {
        let s = ns.get_json("secret", name).unwrap_or_else(|| panic!("secret/{name}"));
        let ours = |m: &Value| m.as_object().is_some_and(|m| m.keys().any(|k| k.starts_with(PREFIX)));
        assert!(!ours(&s["metadata"]["annotations"]) && !ours(&s["metadata"]["labels"]), "{name} carries no confighistory metadata");
    }
    let snapshots: Vec<String> = ns
        .list_json("secrets")
        .iter()
        .filter(|s| s["metadata"]["labels"][HASH_LABEL].is_string())
        .filter_map(|s| s["metadata"]["annotations"][SOURCE_NAME].as_str().map(str::to_owned))
        .collect();
    assert_eq!(snapshots, ["app-secret"], "snapshots of app-secret only (sources of the snapshots)");
    for rs in ns.history_of("web") {
        let template = ns.get_json("replicaset", &rs.owner).unwrap()["spec"]["template"]["spec"].clone();
        let refs = secret_refs(&template);
        for name in never {
            assert!(refs.iter().any(|r| r == name), "revision {} reads {name} by name: {refs:?}", rs.revision);
        }
        assert!(!refs.iter().any(|r| r == "app-secret"), "revision {}: app-secret is pinned: {refs:?}", rs.revision);
    }
    let pins = ns.annotation_of("deployment", "web", confighistory::model::names::PINS).unwrap_or_default();
    assert!(never.iter().all(|n| !pins.contains(n)), "no pin of a never-source: {pins}");

    g.canary.assert_not_shown(&g.server, &[&ns], &seen);
}

// ---------- c) the canary: a denial, a collision, a quota failure ----------

/// docs/behaviour.md §4a "Nothing leaks",: the canary in Secrets the server refuses (in
/// enforce mode), names a snapshot of around a squatter (a collision) and cannot snapshot for a
/// full `count/secrets` quota; then nothing the server wrote (log at debug level, Events,
/// metrics, warnings, denials) shows it in any form.
#[test]
fn no_form_of_the_canary_shows_in_a_denial_a_collision_or_a_quota_failure() {
    let Some(g) = group() else { return };
    let canary = &g.canary;
    let mut seen = Seen::default();

    // A denial: enforce mode, a mutable Secret created after a workload named it, and a new
    // workload naming a mutable Secret.
    let enforce = namespace(g, "sec-enforce", true, &[(MODE_LABEL, "enforce")]);
    let c = Checked { ns: &enforce, canary };
    c.accepts(&mut seen, &reader("app", APP_A, "db").yaml());
    let db = opaque("db", &[("password", &canary.value)]);
    wait_for("the server to know app reads db", Duration::from_secs(20), || {
        enforce.apply_with(&db, &["--dry-run=server"]).is_err_and(|out| out.stderr.contains("is mutable"))
    });
    let denied = c.rejects(&mut seen, &db, "Secret db is mutable");
    assert!(denied.stderr.contains("Deployment/app"), "{}", canary.redact(&denied.stderr));
    c.accepts(&mut seen, &opaque("other", &[("password", &canary.value)]));
    c.rejects(&mut seen, &reader("app2", APP_A, "other").yaml(), "names mutable Secret secret/other");

    // A collision: the first name of db's snapshot is taken by a Secret that is not its snapshot.
    let collide = namespace(g, "sec-collision", true, &[]);
    let c = Checked { ns: &collide, canary };
    c.accepts(&mut seen, &db);
    let content = content_of(&collide, "db");
    let ring = keyring(g, &collide);
    let key = ring.current().namespace_key(&collide.name);
    let (first, second) = (secret::snapshot_name("db", &content, &key, 0), secret::snapshot_name("db", &content, &key, 1));
    c.accepts(&mut seen, &opaque(&first, &[("squatting", "yes")]));
    let out = c.accepts(&mut seen, &reader("app", APP_A, "db").yaml());
    assert_eq!(template_secrets(&collide, "deployment", "app"), [second], "pinned to the next name");
    assert!(
        out.warnings().iter().any(|w| w.contains(&first) && w.contains("using the next name")),
        "the collision is explained: {:?}",
        out.warnings().iter().map(|w| canary.redact(w)).collect::<Vec<_>>()
    );
    wait_for("the SnapshotCollision Event", Duration::from_secs(20), || {
        collide.kubectl(&["get", "events", "-o", "json"]).stdout.contains("SnapshotCollision")
    });

    // A quota failure: no room for db's snapshot.
    let quota = namespace(g, "sec-quota", true, &[]);
    let c = Checked { ns: &quota, canary };
    c.accepts(&mut seen, &db);
    let count = quota.list_json("secrets").len();
    c.kubectl(&mut seen, &["create", "quota", "full", &format!("--hard=count/secrets={count}")]);
    wait_for("the quota controller to count the Secrets", Duration::from_secs(30), || {
        quota.get_json("resourcequota", "full").is_some_and(|q| q["status"]["used"]["count/secrets"].as_str() == Some(&count.to_string()))
    });
    c.rejects(&mut seen, &reader("app", APP_A, "db").yaml(), "ResourceQuota for secrets");

    let log = g.server.log();
    assert!(log.contains("snapshot name collision") && log.contains("created snapshot"), "the server logged what it did");
    canary.assert_not_shown(&g.server, &[&enforce, &collide, &quota], &seen);
}

// ---------- d) the controller loops on Secrets ----------

/// docs/behaviour.md §4a, §7: a config-only edit of a Secret reaches its Deployment: after the
/// settle window the template is pinned to the new content's snapshot and the pod reads it.
#[test]
fn a_config_only_secret_edit_propagates_to_its_deployment() {
    if !pods_run("a_config_only_secret_edit_propagates_to_its_deployment") {
        return;
    }
    let Some(g) = group() else { return };
    let ns = namespace(g, "sec-propagate", true, &[]);
    let (c, mut seen) = (Checked { ns: &ns, canary: &g.canary }, Seen::default());
    c.accepts(&mut seen, &format!("{}---\n{}", pricing_secret(&g.canary, KEY_A), pricing(APP_A, KEY_A)));
    let snap_a = pinned(&ns);
    running_pod(&ns, "pricing", APP_A, &snap_a);

    // The setting's value changes, its key stays (the Deployment's secretKeyRef reads it).
    let v2 = "/etc/rules-v2";
    c.accepts(&mut seen, &opaque(SOURCE, &[(KEY_A, v2), ("password", &g.canary.value)]));
    let snap_b = wait_for_value("the edit to reach the Deployment", Duration::from_secs(60), || {
        let now = pinned(&ns);
        (now != snap_a).then_some(now)
    });
    assert_mac_named_snapshot(g, &ns, &snap_b, SOURCE, &content_of(&ns, SOURCE));
    let pod = running_pod(&ns, "pricing", APP_A, &snap_b);
    assert_eq!(exec(&ns, &pod, &["cat", &format!("/etc/secret/{KEY_A}")]), (true, v2.to_owned()), "the file");
    assert_eq!(env_of(&ns, &pod, &["RULES"]).get("RULES").map(String::as_str), Some(v2), "$RULES");
    wait_for("the source to record its head as propagated", Duration::from_secs(30), || {
        let s = ns.get_json("secret", SOURCE).unwrap_or_default();
        let a = &s["metadata"]["annotations"];
        a[HEAD].is_string() && a[HEAD] == a[PROPAGATED]
    });
    assert_eq!(ns.history_of("pricing").len(), 2, "one new revision");

    g.canary.assert_not_shown(&g.server, &[&ns], &seen);
}

/// docs/behaviour.md §4a, §9: turning Secrets on for a namespace that already runs workloads
/// reading Secrets restarts nothing (no new ReplicaSet, the template untouched) and adopts: the
/// snapshot of the current content carries the running template's adoption record.
#[test]
fn turning_secrets_on_for_a_namespace_restarts_nothing_and_adopts() {
    if !pods_run("turning_secrets_on_for_a_namespace_restarts_nothing_and_adopts") {
        return;
    }
    let Some(g) = group() else { return };
    let ns = namespace(g, "sec-adopt", false, &[]);
    let (c, mut seen) = (Checked { ns: &ns, canary: &g.canary }, Seen::default());
    c.accepts(&mut seen, &format!("{}---\n{}", pricing_secret(&g.canary, KEY_A), pricing(APP_A, KEY_A)));
    assert_eq!(pinned(&ns), SOURCE, "Secrets are off here: the plain name");
    running_pod(&ns, "pricing", APP_A, SOURCE);
    let before = replicasets(&ns, "pricing");
    let template = ns.get_json("deployment", "pricing").unwrap()["spec"]["template"].clone();
    // A workload that runs before Secrets are turned on: a resync pass has seen its template. One
    // that no pass has seen yet cannot be told from an outage's admission and is repaired
    // (src/controller/adopt.rs, docs/behaviour.md §9): two resync intervals of the group server.
    std::thread::sleep(Duration::from_secs(2 * RESYNC + 1));

    // The admin turns Secrets on for the namespace.
    ns.cluster.kubectl(&["label", "namespace", &ns.name, &format!("{SECRETS_LABEL}=on")]).expect_success();
    let content = content_of(&ns, SOURCE);
    let adopted = wait_for_value("the adoption record on the current content's snapshot", Duration::from_secs(60), || {
        ns.list_json("secrets")
            .into_iter()
            .find(|s| s["metadata"]["annotations"][SOURCE_NAME] == SOURCE && s["metadata"]["annotations"][ADOPTED].is_string())
    });
    let name = adopted["metadata"]["name"].as_str().unwrap().to_owned();
    assert_mac_named_snapshot(g, &ns, &name, SOURCE, &content);
    let record = adopted["metadata"]["annotations"][ADOPTED].as_str().unwrap();
    assert!(record.contains(&confighistory::model::template::template_hash(&template)), "the running template is adopted: {record}");
    std::thread::sleep(Duration::from_secs(6)); // a resync more
    assert_eq!(replicasets(&ns, "pricing"), before, "no new ReplicaSet");
    assert_eq!(ns.get_json("deployment", "pricing").unwrap()["spec"]["template"], template, "the template is untouched");

    g.canary.assert_not_shown(&g.server, &[&ns], &seen);
}

// ---------- e) GC, a key rotation and the guard, against the real API server ----------

/// `confighistory gc` for one namespace of the group, as confighistory's own identity (the
/// chart ServiceAccount's token the group server runs with), with the group server's cluster keys
/// (`--secrets`, its keys Secret): recorded in `seen`.
fn gc(g: &Group, ns: &TestNamespace, seen: &mut Seen, extra: &[&str]) -> String {
    let keys_secret = format!("--keys-secret={}-keys", g.server.name);
    let selector = format!("--secrets-namespace-selector={SECRETS_LABEL}=on");
    let mut args = vec!["gc", "--only-namespace", &ns.name, "--gc-keep", "1", "--gc-grace", "3", "--secrets", &selector];
    args.extend(["--namespace", NAMESPACE, &keys_secret]);
    args.extend_from_slice(extra);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_confighistory"))
        .args(&args)
        .env("KUBECONFIG", &g.server.kubeconfig)
        .output()
        .expect("run confighistory gc");
    let run = seen.record(Kubectl {
        args: args.iter().map(|a| a.to_string()).collect(),
        success: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into(),
        stderr: String::from_utf8_lossy(&out.stderr).into(),
    });
    assert!(run.success, "confighistory gc failed:\n{}", g.canary.redact(&run.describe()));
    run.stdout
}

/// The report line of snapshot `name` (`keep    ns/name: why`, `deleted ns/name: why`).
#[track_caller]
fn verdict_of<'a>(g: &Group, report: &'a str, ns: &str, name: &str) -> &'a str {
    let needle = format!(" {ns}/{name}:");
    report.lines().find(|l| l.contains(&needle)).unwrap_or_else(|| panic!("{name} not in the report:\n{}", g.canary.redact(report)))
}

/// docs/behaviour.md §4a, §8: GC sweeps Secret snapshots against the real API server as it sweeps
/// ConfigMap snapshots. Three releases of a Deployment (revision history 1) over three contents
/// of its Secret: the first snapshot is left unreferenced once revision 1 is trimmed. A dry run
/// keeps it for the grace period, the second (a ReplicaSet's) and the third (the head); a sweep as
/// confighistory records last use, one after the grace period deletes it and only it, with the
/// snapshots validated under the cluster keys; an undo still finds the second.
#[test]
fn gc_sweeps_secret_snapshots_on_the_api_server() {
    let Some(g) = group() else { return };
    let ns = namespace(g, "sec-gc", true, &[]);
    let (c, mut seen) = (Checked { ns: &ns, canary: &g.canary }, Seen::default());
    let canary = &g.canary.value;
    // No pods (replicas 0): every rollout completes at once, so old ReplicaSets are trimmed.
    let app = |image: &str| reader("app", image, "app-secret").spec("revisionHistoryLimit: 1").yaml();
    let mut snapshots = Vec::new();
    for v in ["1", "2", "3"] {
        c.accepts(
            &mut seen,
            &format!("{}---\n{}", opaque("app-secret", &[("password", canary), ("v", v)]), app(&format!("registry.example/app:{v}"))),
        );
        let now = template_secrets(&ns, "deployment", "app");
        assert_eq!(now.len(), 1, "{now:?}");
        assert_mac_named_snapshot(g, &ns, &now[0], "app-secret", &content_of(&ns, "app-secret"));
        snapshots.push(now[0].clone());
    }
    let [first, second, third] = <[String; 3]>::try_from(snapshots).unwrap();
    wait_for("revision 1 to be trimmed", Duration::from_secs(60), || {
        let rs = ns.list_json("replicasets");
        let refs: Vec<String> = rs.iter().flat_map(|r| secret_refs(&r["spec"]["template"]["spec"])).collect();
        rs.len() == 2 && !refs.contains(&first)
    });
    let refused = seen.record(ns.kubectl(&["delete", "secret", &second]));
    assert!(!refused.success, "a Secret snapshot a ReplicaSet references is not deleted:\n{}", g.canary.redact(&refused.describe()));

    let dry = gc(g, &ns, &mut seen, &["--dry-run"]);
    assert!(verdict_of(g, &dry, &ns.name, &first).starts_with("keep"), "the grace period first:\n{}", g.canary.redact(&dry));
    assert!(verdict_of(g, &dry, &ns.name, &second).contains("referenced by ReplicaSet/"), "{}", g.canary.redact(&dry));
    assert!(verdict_of(g, &dry, &ns.name, &third).contains("the head of"), "{}", g.canary.redact(&dry));
    assert!(
        ns.get_json("secret", &first)
            .and_then(|s| s["metadata"]["annotations"]["confighistory.io/last-used"].as_str().map(str::to_owned))
            .is_none(),
        "a dry run records nothing"
    );

    // The first sweep records when it found the snapshot unused; one past the grace period deletes.
    gc(g, &ns, &mut seen, &[]);
    let first_obj = ns.get_json("secret", &first).expect("the first snapshot is kept by the first sweep");
    assert!(first_obj["metadata"]["annotations"]["confighistory.io/last-used"].is_string(), "its last use is recorded");
    std::thread::sleep(Duration::from_secs(4));
    let report = gc(g, &ns, &mut seen, &[]);
    assert!(verdict_of(g, &report, &ns.name, &first).starts_with("deleted"), "{}", g.canary.redact(&report));
    assert!(ns.get_json("secret", &first).is_none(), "the unused snapshot is gone");
    for kept in [&second, &third] {
        assert!(ns.get_json("secret", kept).is_some(), "{kept} stays");
    }
    assert!(ns.get_json("secret", "app-secret").is_some(), "the source stays");

    // An undo still finds the content revision 2 ran with.
    ns.wait_observed("deployment", "app");
    c.kubectl(&mut seen, &["rollout", "undo", "deployment/app"]);
    assert_eq!(template_secrets(&ns, "deployment", "app"), [second], "the undo is pinned to the second snapshot");

    g.canary.assert_not_shown(&g.server, &[&ns], &seen);
}

/// docs/behaviour.md §4a, docs/operations.md "Secrets' cluster key": `confighistory rotate-keys`
/// against a live server (one of this test's own: the rotation changes its keys for every
/// namespace). The server takes the new key within `store::keys::RELOAD_INTERVAL` (30 s; a
/// few seconds more allowed for the API round trips) without a restart: new content is MAC'd
/// under it, while the workload pinned before stays on its snapshot (a rotation renames no
/// snapshot and moves no workload) until the content changes; the old snapshot stays valid.
#[test]
fn rotate_keys_reaches_a_running_server_within_its_reload_interval() {
    let Some(g) = group() else { return };
    let cluster = cluster().expect("the group runs on a cluster");
    let run = format!("{}-rotate", run_id());
    let selector = format!("{{\"matchLabels\":{{\"{SECRETS_LABEL}\":\"on\"}}}}");
    let namespace_selector = format!("secrets.namespaceSelector={selector}");
    let values = ["--set", "secrets.enabled=true", "--set-json", namespace_selector.as_str()];
    let (resync, selector) = (RESYNC.to_string(), format!("--secrets-namespace-selector={SECRETS_LABEL}=on"));
    let install = Install { values: &values, rust_log: Some("debug"), ..Install::default() };
    let server = Webhook::start_with(cluster, &run, &["--settle", "2", "--resync-interval", &resync, &selector], &install);
    let ns = server.namespace("sec-rotate", &[(SECRETS_LABEL, "on")]);
    let (c, mut seen) = (Checked { ns: &ns, canary: &g.canary }, Seen::default());
    let canary = &g.canary.value;
    let keys_of = || {
        let secret = format!("{}-keys", server.name);
        let out = cluster.kubectl(&["get", "secret", &secret, "-n", NAMESPACE, "-o", "json"]);
        assert!(out.success, "the server's keys Secret {NAMESPACE}/{secret}: {}", out.stderr);
        keys::read(&out.json(), &keys::Target { namespace: NAMESPACE.into(), secret }).expect("a keyring").0
    };
    let key_id_of = |obj: &Value| obj["metadata"]["labels"]["confighistory.io/key-id"].as_str().map(str::to_owned);

    c.accepts(&mut seen, &format!("{}---\n{}", opaque("db", &[("password", canary)]), reader("app", APP_A, "db").yaml()));
    // A Secret only a second workload reads: its writes show which key the server MACs under.
    c.accepts(&mut seen, &format!("{}---\n{}", opaque("probe", &[("round", "0")]), reader("probe-reader", APP_A, "probe").yaml()));
    let [first] = <[String; 1]>::try_from(template_secrets(&ns, "deployment", "app")).expect("one reference");
    let before = keys_of();
    let first_obj = ns.get_json("secret", &first).expect("the first snapshot");
    assert_eq!(key_id_of(&first_obj), Some(before.current().id().to_string()), "made under the current key");

    // The rotation, as docs/operations.md runs it: as confighistory's ServiceAccount.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_confighistory"))
        .args(["rotate-keys", "--namespace", NAMESPACE, &format!("--keys-secret={}-keys", server.name)])
        .env("KUBECONFIG", &server.kubeconfig)
        .output()
        .expect("run confighistory rotate-keys");
    let printed = seen.record(Kubectl {
        args: vec!["confighistory".into(), "rotate-keys".into()],
        success: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into(),
        stderr: String::from_utf8_lossy(&out.stderr).into(),
    });
    assert!(printed.success, "rotate-keys failed:\n{}", g.canary.redact(&printed.describe()));
    let rotated_at = std::time::Instant::now();
    let after = keys_of();
    let new_id = after.current().id().to_string();
    assert_ne!(after.current().id(), before.current().id(), "a new current key");
    assert!(printed.stdout.contains(&format!("MAC'd under key {new_id}")), "{}", printed.stdout);

    // New content of the probe Secret, written: the key id the server records with its head after
    // the answer (a dry run answers none, docs/behaviour.md §4a) names the key it MACs under.
    let edited = opaque("db", &[("password", canary), ("rotated", "yes")]);
    let mut round = 0;
    let taken = wait_for_value("the server to take the new key", Duration::from_secs(45), || {
        round += 1;
        ns.apply(&opaque("probe", &[("round", &round.to_string())])).ok()?;
        let recorded = recorded_key_id(&ns, "probe", Duration::from_secs(5))?;
        (recorded == new_id).then(|| rotated_at.elapsed())
    });
    eprintln!("e2e: secrets: the server took the rotated key {:.1?} after rotate-keys", taken);
    assert!(
        taken <= keys::RELOAD_INTERVAL + Duration::from_secs(5),
        "the running server took the new key after {taken:.1?}, past its reload interval of {:?}",
        keys::RELOAD_INTERVAL
    );
    // The rotation itself moved nothing: same snapshot, still valid under the key it names.
    assert_eq!(template_secrets(&ns, "deployment", "app"), std::slice::from_ref(&first), "no workload moved");
    assert!(secret::validate(&first_obj, &ns.name, &after).is_ok(), "the old snapshot stays valid");

    // A real content change: the release pins a snapshot MAC'd under the new key, and the head
    // recorded after the Secret's answer names it.
    c.accepts(&mut seen, &format!("{edited}---\n{}", reader("app", APP_B, "db").yaml()));
    assert_eq!(recorded_key_id(&ns, "db", Duration::from_secs(10)).as_deref(), Some(new_id.as_str()), "the head's key");
    let [second] = <[String; 1]>::try_from(template_secrets(&ns, "deployment", "app")).expect("one reference");
    let second_obj = ns.get_json("secret", &second).expect("the second snapshot");
    assert_eq!(key_id_of(&second_obj), Some(new_id.clone()), "new content is MAC'd under the new key");
    assert_eq!(second, secret::snapshot_name("db", &content_of(&ns, "db"), &after.current().namespace_key(&ns.name), 0));
    assert!(ns.get_json("secret", &first).is_some(), "the old snapshot stays");

    g.canary.assert_not_shown(&server, &[&ns], &seen);
}

/// The key id Secret `name` records with its head, once the server recorded one after the last
/// write's answer (docs/behaviour.md §4a: a write whose content changed drops both, the head of
/// what was stored follows within about 1.5 s); `None` when none is recorded `within`.
fn recorded_key_id(ns: &TestNamespace, name: &str, within: Duration) -> Option<String> {
    let deadline = std::time::Instant::now() + within;
    loop {
        let obj = ns.get_json("secret", name).unwrap_or_default();
        let a = &obj["metadata"]["annotations"];
        if let (Some(_), Some(id)) = (a[HEAD].as_str(), a["confighistory.io/key-id"].as_str()) {
            return Some(id.to_owned());
        }
        if std::time::Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The chart's guard (ValidatingAdmissionPolicy, docs/behaviour.md §9a) with Secrets on, as the
/// API server enforces it: confighistory's ServiceAccount may not change a Secret's data. The
/// group's release renders the policy (`secrets.enabled=true`); its binding is the chart's,
/// narrowed to this test's namespace (the suite shares the ServiceAccount with every run on the
/// cluster). Writes are server-side dry runs with the group server's own token: admitted before
/// the policy is bound (RBAC allows the patch), denied by the policy after; an annotation-only
/// write by the same identity and the admin's data write stay admitted.
#[test]
fn the_guard_denies_a_forged_secret_data_write_by_confighistorys_service_account() {
    let Some(g) = group() else { return };
    let cluster = cluster().expect("the group runs on a cluster");
    let served = cluster.kubectl(&["api-resources", "--api-group=admissionregistration.k8s.io", "-o", "name"]);
    if !served.stdout.lines().any(|l| l.starts_with("validatingadmissionpolicies")) {
        eprintln!("e2e: secrets: ValidatingAdmissionPolicy is not served here (before 1.28 beta): the chart renders no guard");
        return;
    }
    let ns = namespace(g, "sec-guard", true, &[]);
    let (c, mut seen) = (Checked { ns: &ns, canary: &g.canary }, Seen::default());
    c.accepts(&mut seen, &opaque("db", &[("password", &g.canary.value)]));
    let forged = format!("{{\"data\":{{\"password\":\"{}\"}}}}", b64_of("forged"));
    let write_as_server = |seen: &mut Seen, patch: &str| {
        seen.record(g.server.kubectl(&["patch", "secret", "db", "-n", &ns.name, "--dry-run=server", "--type=merge", "-p", patch]))
    };
    let before = write_as_server(&mut seen, &forged);
    assert!(before.success, "without the guard, RBAC lets the ServiceAccount patch a Secret:\n{}", g.canary.redact(&before.describe()));

    let chart = ChartRelease { cluster, name: &g.server.name, run: &g.server.run, url_base: &g.server.url_base, ca_pem: &g.server.ca_pem };
    let vap_api = "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy";
    let rendered =
        chart.render(&["templates/validatingadmissionpolicy.yaml"], &["--set", "secrets.enabled=true", "--api-versions", vap_api]);
    assert!(rendered.contains("confighistory may not change a Secret's data or type"), "the chart renders the Secret rule:\n{rendered}");
    let narrowed = rendered.replacen(
        "  validationActions: [Deny]",
        &format!("  validationActions: [Deny]\n  matchResources:\n    namespaceSelector:\n      matchLabels:\n        kubernetes.io/metadata.name: {}", ns.name),
        1,
    );
    assert_ne!(narrowed, rendered, "the chart's binding: {rendered}");
    let guard = Guard { cluster, name: format!("{}-guard", g.server.name) };
    cluster.kubectl_stdin(&["apply", "-f", "-"], &narrowed).expect_success();

    let denial = "confighistory may not change a Secret's data or type";
    let denied = wait_for_value("the guard to deny the forged write", Duration::from_secs(30), || {
        let out = write_as_server(&mut seen, &forged);
        (!out.success && out.stderr.contains(denial)).then_some(out)
    });
    assert!(denied.stderr.contains(&guard.name), "the chart's policy denies it: {}", g.canary.redact(&denied.stderr));
    let annotated = write_as_server(&mut seen, "{\"metadata\":{\"annotations\":{\"confighistory.io/e2e-probe\":\"1\"}}}");
    assert!(annotated.success, "its own annotations stay writable:\n{}", g.canary.redact(&annotated.describe()));
    let admin = c.kubectl(&mut seen, &["patch", "secret", "db", "--dry-run=server", "--type=merge", "-p", &forged]);
    assert!(admin.success, "the guard is confighistory's only");
    drop(guard);

    g.canary.assert_not_shown(&g.server, &[&ns], &seen);
}

/// The guard's two cluster-scoped objects, deleted when dropped.
struct Guard {
    cluster: &'static crate::support::Cluster,
    name: String,
}

impl Drop for Guard {
    fn drop(&mut self) {
        let (policy, binding) =
            (format!("validatingadmissionpolicy/{}", self.name), format!("validatingadmissionpolicybinding/{}", self.name));
        self.cluster.kubectl(&["delete", &policy, &binding, "--ignore-not-found", "--wait=false"]);
    }
}
