//! kubectl-confighistory without a cluster: the human formats against golden files
//! (tests/golden/plugin-*.txt; `UPDATE_GOLDEN=1 cargo test --test plugin` rewrites them), and the
//! JSON output against the shapes documented in docs/plugin.md.

use std::collections::{BTreeMap, BTreeSet};

use confighistory::model::snapshot::{self, Content};
use confighistory::model::template;
use confighistory::plugin::build::{self, Inventory};
use confighistory::plugin::model::{Undo, WorkloadRef};
use confighistory::plugin::render::{self, Style};
use confighistory::plugin::{machine, Output};
use k8s_openapi::jiff::Timestamp;
use serde_json::{json, Value};

const NS: &str = "shop";
const SOURCE: &str = "pricing-config";
const NOW: &str = "2024-05-01T12:00:00Z";

fn now() -> Timestamp {
    NOW.parse().unwrap()
}

fn content(pairs: &[(&str, &str)]) -> Content {
    Content { data: pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(), ..Default::default() }
}

const APP_YAML: &str = "server:\n  port: 8080\n  timeout: 5s\nrules:\n  - spring\n  - summer\n";
const APP_YAML_4: &str = "server:\n  port: 8080\n  timeout: 10s\nrules:\n  - spring\n  - summer\n  - autumn\n";

fn contents() -> [Content; 4] {
    [
        content(&[("discount_rules_path", "/etc/rules"), ("log_level", "info"), ("app.yaml", APP_YAML)]),
        content(&[("rules.discount_path", "/etc/rules"), ("log_level", "info"), ("app.yaml", APP_YAML)]),
        content(&[("rules.discount_path", "/etc/rules"), ("log_level", "debug"), ("app.yaml", APP_YAML)]),
        content(&[("rules.discount_path", "/etc/rules"), ("log_level", "debug"), ("app.yaml", APP_YAML_4)]),
    ]
}

fn snap_name(source: &str, c: &Content) -> String {
    snapshot::name(source, &c.hash(), 0)
}

fn snapshot_object(source: &str, c: &Content, created: &str, adopted: &[String]) -> Value {
    let mut o = snapshot::object(NS, source, &snap_name(source, c), c, adopted);
    o["metadata"]["creationTimestamp"] = json!(created);
    o
}

fn pod_template(image: &str, configs: &[&str]) -> Value {
    let volumes: Vec<Value> =
        configs.iter().enumerate().map(|(i, c)| json!({"name": format!("cfg{i}"), "configMap": {"name": c}})).collect();
    json!({
        "metadata": {"labels": {"app": "pricing"}},
        "spec": {"containers": [{"name": "app", "image": image}], "volumes": volumes}
    })
}

fn replicaset(revision: i64, template: &Value) -> Value {
    let mut t = template.clone();
    t["metadata"]["labels"]["pod-template-hash"] = json!(format!("h{revision}"));
    json!({
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": format!("pricing-h{revision}"),
            "annotations": {"deployment.kubernetes.io/revision": revision.to_string()},
            "ownerReferences": [{"kind": "Deployment", "name": "pricing", "uid": "uid-pricing", "controller": true}],
        },
        "spec": {"template": t},
    })
}

/// Four snapshots of pricing-config (keep 2): the oldest holds the adoption record of revision
/// 1 (from before the install) and is pinned by revision 2; the second expires; the third is
/// kept only by the newest-N rule; the fourth is the head, pinned by revision 4 (current).
/// A second source, limits, changed 4 s ago and waits for propagation.
fn inventory() -> Inventory {
    let c = contents();
    let limits_old = content(&[("max", "10")]);
    let limits_new = content(&[("max", "20")]);
    let rev1 = pod_template("registry.example/pricing:4.10", &[SOURCE]);
    let rev2 = pod_template("registry.example/pricing:4.11", &[&snap_name(SOURCE, &c[0])]);
    let rev4 = pod_template("registry.example/pricing:4.12", &[&snap_name(SOURCE, &c[3]), &snap_name("limits", &limits_old)]);
    let adopted = vec![template::template_hash(&rev1)];
    let deployment = json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "pricing", "uid": "uid-pricing",
            "annotations": {"deployment.kubernetes.io/revision": "4", "confighistory.io/pins": "{}"},
        },
        "spec": {"template": rev4},
    });
    let source = json!({
        "kind": "ConfigMap",
        "metadata": {"name": SOURCE, "annotations": {
            "confighistory.io/head": c[3].hash(), "confighistory.io/keep": "2",
            "confighistory.io/changed-at": "2024-05-01T11:30:00Z", "confighistory.io/propagated": c[3].hash(),
        }},
        "data": c[3].data,
    });
    let limits = json!({
        "kind": "ConfigMap",
        "metadata": {"name": "limits", "annotations": {
            "confighistory.io/head": limits_new.hash(),
            "confighistory.io/changed-at": "2024-05-01T11:59:56Z",
            "confighistory.io/propagated": limits_old.hash(),
        }},
        "data": limits_new.data,
    });
    Inventory {
        namespace: NS.into(),
        namespace_object: json!({"metadata": {"name": NS, "labels": {"confighistory.io/mode": "rewrite"}}}),
        sources: BTreeMap::from([(SOURCE.to_owned(), source), ("limits".to_owned(), limits)]),
        snapshots: vec![
            snapshot_object(SOURCE, &c[0], "2024-04-20T09:00:00Z", &adopted),
            snapshot_object(SOURCE, &c[1], "2024-04-30T10:00:00Z", &[]),
            snapshot_object(SOURCE, &c[2], "2024-05-01T09:15:00Z", &[]),
            snapshot_object(SOURCE, &c[3], "2024-05-01T11:30:00Z", &[]),
            snapshot_object("limits", &limits_old, "2024-05-01T08:00:00Z", &[]),
        ],
        workloads: vec![deployment],
        revisions: vec![replicaset(1, &rev1), replicaset(2, &rev2), replicaset(4, &rev4)],
    }
}

fn pricing() -> WorkloadRef {
    WorkloadRef { kind: "Deployment".into(), name: "pricing".into() }
}

fn undo_model(inv: &Inventory) -> Undo {
    let w = inv.workload(&pricing()).unwrap();
    let (rev, template) = build::undo_target(&w, 0).unwrap();
    let before = build::revision_config(inv, w.current_revision(), w.template());
    let target = build::revision_config(inv, Some(rev), &template);
    let after = build::revision_config(inv, None, &template);
    Undo { namespace: NS.into(), workload: pricing(), dry_run: false, skipped: false, before, target, after, held: vec![SOURCE.into()] }
}

/// Compares with tests/golden/<name>, or writes it with UPDATE_GOLDEN=1.
#[track_caller]
fn golden(name: &str, actual: &str) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e} (run with UPDATE_GOLDEN=1)", path.display()));
    assert_eq!(actual, expected, "{name} differs from the golden file (UPDATE_GOLDEN=1 rewrites it); actual:\n{actual}");
}

#[test]
fn history_golden() {
    let inv = inventory();
    let h = build::history(&inv, SOURCE).unwrap();
    let revs: Vec<u32> = h.snapshots.iter().map(|s| s.revision).collect();
    assert_eq!(revs, [4, 3, 2, 1], "newest first");
    assert!(h.snapshots[0].head);
    assert!(h.snapshots[1].kept_only_by_newest);
    assert!(h.snapshots[2].kept_by.is_empty(), "{:?}", h.snapshots[2]);
    assert_eq!(h.snapshots[3].kept_by, ["revision", "adoption"]);
    golden("plugin-history.txt", &render::history(&h, now(), Style::PLAIN));
    golden("plugin-history-color.txt", &render::history(&h, now(), Style::COLOR));
}

#[test]
fn diff_golden() {
    let inv = inventory();
    let d = build::diff(&inv, SOURCE, None, None).unwrap();
    assert_eq!((d.from.revision, d.to.revision), (Some(3), Some(4)), "default: the head against the one before");
    golden("plugin-diff.txt", &render::diff(&d, now(), Style::PLAIN));
    golden("plugin-diff-color.txt", &render::diff(&d, now(), Style::COLOR));

    // "What config did revision 1 of the Deployment run with, and what changed since?"
    let since = build::diff(&inv, SOURCE, Some("deployment/pricing@1"), None).unwrap();
    assert_eq!(since.from.revision, Some(1), "revision 1 predates the install: its content is known from the adoption record");
    assert_eq!(since.removed, ["discount_rules_path"]);
    assert_eq!(since.added, ["rules.discount_path"]);
    golden("plugin-diff-since.txt", &render::diff(&since, now(), Style::PLAIN));

    let same = build::diff(&inv, SOURCE, Some("head"), Some("4")).unwrap();
    assert!(same.keys.is_empty());
    let by_hash = build::diff(&inv, SOURCE, Some(&contents()[1].hash()[..6]), Some("2")).unwrap();
    assert!(by_hash.keys.is_empty());
    for (bad, expected) in
        [("9", "has no revision 9"), ("zzzzzz", "no snapshot of pricing-config matches"), ("deployment/pricing@3", "has no revision 3")]
    {
        let err = build::diff(&inv, SOURCE, Some(bad), None).unwrap_err().to_string();
        assert!(err.contains(expected), "{bad}: {err}");
    }
}

#[test]
fn status_golden() {
    let inv = inventory();
    let s = build::status(&inv, &pricing()).unwrap();
    assert_eq!(s.revision, Some(4));
    let limits = s.pins.iter().find(|p| p.source == "limits").unwrap();
    let pending = limits.pending.as_ref().expect("limits changed 4 s ago and waits for its settle window");
    assert_eq!(pending.fires_at, "2024-05-01T12:00:06Z");
    assert!(s.pins.iter().find(|p| p.source == SOURCE).unwrap().is_head);
    assert_eq!(s.undo.as_ref().unwrap().revision, Some(2));
    golden("plugin-status.txt", &render::status(&s, now(), Style::PLAIN));
}

#[test]
fn undo_golden_and_refusal() {
    let inv = inventory();
    golden("plugin-undo.txt", &render::undo(&undo_model(&inv), Style::PLAIN));

    // Revision 1 predates confighistory: its content is the adopted snapshot.
    let w = inv.workload(&pricing()).unwrap();
    let (_, t1) = build::undo_target(&w, 1).unwrap();
    let r1 = build::revision_config(&inv, Some(1), &t1);
    assert_eq!(r1.config[0].via, "adoption");
    assert!(build::check_target(&pricing(), &r1).is_ok());

    // With revision 2's snapshot gone, the undo is refused.
    let mut gone = inv.clone();
    let s1 = snap_name(SOURCE, &contents()[0]);
    gone.snapshots.retain(|s| s["metadata"]["name"] != s1.as_str());
    let (_, t2) = build::undo_target(&w, 0).unwrap();
    let err = build::check_target(&pricing(), &build::revision_config(&gone, Some(2), &t2)).unwrap_err().to_string();
    assert!(err.contains("refusing") && err.contains(&s1), "{err}");
    assert!(build::undo_target(&w, 7).unwrap_err().to_string().contains("unable to find specified revision 7"));
}

#[test]
fn errors_are_clear() {
    let inv = inventory();
    let err = build::history(&inv, "nope").unwrap_err().to_string();
    assert_eq!(err, "no ConfigMap or snapshot named \"nope\" in namespace shop");
    let err = build::status(&inv, &WorkloadRef { kind: "StatefulSet".into(), name: "db".into() }).unwrap_err().to_string();
    assert_eq!(err, "statefulset/db not found in namespace shop");
    let mut off = inv.clone();
    off.namespace_object["metadata"]["labels"]["confighistory.io/mode"] = json!("off");
    off.sources.insert("plain".into(), json!({"metadata": {"name": "plain"}, "data": {"a": "b"}}));
    let err = build::history(&off, "plain").unwrap_err().to_string();
    assert!(err.contains("mode off"), "{err}");
    assert!(build::parse_workload("job/x").unwrap_err().to_string().contains("unsupported workload kind"));
    assert_eq!(build::parse_workload("sts/db").unwrap().kind, "StatefulSet");
    assert_eq!(build::parse_workload("deployment.apps/web").unwrap(), WorkloadRef { kind: "Deployment".into(), name: "web".into() });
    assert_eq!(build::parse_workload("web").unwrap().kind, "Deployment");
}

/// Every path of object keys in a JSON value (array items as `[]`).
fn shape(v: &Value, prefix: &str, out: &mut BTreeSet<String>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                let p = format!("{prefix}.{k}");
                out.insert(p.clone());
                shape(v, &p, out);
            }
        }
        Value::Array(a) => {
            for v in a {
                shape(v, &format!("{prefix}[]"), out);
            }
        }
        _ => {}
    }
}

/// The ```json example under the `### <command>` heading of docs/plugin.md.
fn documented(command: &str) -> Value {
    let doc = std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/plugin.md")).unwrap();
    let section = doc.split(&format!("### `{command}`")).nth(1).unwrap_or_else(|| panic!("docs/plugin.md has no ### `{command}` section"));
    let block = section.split("```json\n").nth(1).and_then(|b| b.split("\n```").next()).expect("a json block");
    serde_json::from_str(block).unwrap_or_else(|e| panic!("the {command} example in docs/plugin.md is not JSON: {e}"))
}

#[track_caller]
fn same_shape(command: &str, kind: &str, actual: &Value) {
    let doc = documented(command);
    assert_eq!(doc["kind"], kind);
    let (mut want, mut got) = (BTreeSet::new(), BTreeSet::new());
    shape(&doc, "", &mut want);
    shape(actual, "", &mut got);
    assert_eq!(got, want, "the JSON of {command} differs from its documented shape in docs/plugin.md");
}

#[test]
fn json_matches_the_documented_shapes() {
    let inv = inventory();
    let parse = |s: String| -> Value { serde_json::from_str(&s).unwrap() };
    same_shape("history", "History", &parse(machine("History", &build::history(&inv, SOURCE).unwrap(), Output::Json)));
    same_shape("diff", "Diff", &parse(machine("Diff", &build::diff(&inv, SOURCE, None, None).unwrap(), Output::Json)));
    same_shape("status", "Status", &parse(machine("Status", &build::status(&inv, &pricing()).unwrap(), Output::Json)));
    same_shape("undo", "Undo", &parse(machine("Undo", &undo_model(&inv), Output::Json)));
    // YAML carries the same document.
    let yaml = machine("Status", &build::status(&inv, &pricing()).unwrap(), Output::Yaml);
    assert!(yaml.starts_with("images:\n- container: app\n"), "{yaml}");
    assert!(yaml.contains("kind: Status\n"), "{yaml}");
}

/// Prints the JSON of each command for the fixture (to refresh docs/plugin.md):
/// `cargo test --test plugin -- --ignored --nocapture print_json_examples`.
#[test]
#[ignore]
fn print_json_examples() {
    let inv = inventory();
    print!("{}", machine("History", &build::history(&inv, SOURCE).unwrap(), Output::Json));
    print!("{}", machine("Diff", &build::diff(&inv, SOURCE, None, None).unwrap(), Output::Json));
    print!("{}", machine("Status", &build::status(&inv, &pricing()).unwrap(), Output::Json));
    print!("{}", machine("Undo", &undo_model(&inv), Output::Json));
}

/// Runs the plugin binary with no kubeconfig at all: what it answers must need no cluster.
fn offline(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_kubectl-confighistory"))
        .args(args)
        .env_remove("KUBECONFIG")
        .env("HOME", std::env::temp_dir().join("confighistory-plugin-no-home"))
        .output()
        .expect("run kubectl-confighistory")
}

#[test]
fn completions_need_no_cluster() {
    for shell in ["bash", "zsh", "fish"] {
        let out = offline(&["completion", shell]);
        let script = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success() && script.contains("kubectl-confighistory") && script.contains("history"), "{shell}: {script}");
    }
    // kubectl's plugin completion (kubectl_complete-confighistory → __complete), cobra's format.
    let out = String::from_utf8(offline(&["__complete", ""]).stdout).unwrap();
    assert_eq!(out, "completion\ndiff\nhistory\nlist\nstatus\nundo\n:4\n");
    let out = String::from_utf8(offline(&["__complete", "undo", "app", "--d"]).stdout).unwrap();
    assert_eq!(out, "--dry-run\n:4\n");
    let out = String::from_utf8(offline(&["__complete", "completion", "z"]).stdout).unwrap();
    assert_eq!(out, "zsh\n:4\n");
    let script =
        std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("dist/kubectl_complete-confighistory")).unwrap();
    assert!(script.contains("exec kubectl-confighistory __complete \"$@\""));
}

#[test]
fn refusals_and_bad_flags_are_clear_before_any_connection() {
    let out = offline(&["undo", "app", "--dry-run=client"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(err.starts_with("error: --dry-run=client is not supported") && err.contains("--dry-run=server"), "{err}");
    let out = offline(&["history", "x", "-o", "wide"]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("use json, yaml, name or jsonpath=TEMPLATE"));
    let out = offline(&["history", "x", "--request-timeout", "soon"]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("invalid timeout"));
    // An error of diff exits 2 (1 means "different", as for kubectl diff).
    assert_eq!(offline(&["diff", "x"]).status.code(), Some(2));
    assert_eq!(offline(&["history", "x"]).status.code(), Some(1));
}

#[test]
fn name_and_jsonpath_outputs() {
    use confighistory::plugin::emit;
    let inv = inventory();
    let h = build::history(&inv, SOURCE).unwrap();
    let names: Vec<String> = h.snapshots.iter().map(|s| format!("configmap/{}", s.name)).collect();
    let c = contents();
    assert_eq!(
        emit("History", &h, &names, Output::Name).unwrap(),
        format!("configmap/{}\n", snap_name(SOURCE, &c[3])) + &names[1..].iter().map(|n| format!("{n}\n")).collect::<String>()
    );
    let t = "{.kind} {.source}: {.snapshots[0].name}{\"\\n\"}";
    assert_eq!(
        emit("History", &h, &names, Output::JsonPath(t.into())).unwrap(),
        format!("History {SOURCE}: {}\n", snap_name(SOURCE, &c[3]))
    );
    let d = build::diff(&inv, SOURCE, None, None).unwrap();
    assert_eq!(emit("Diff", &d, &[], Output::JsonPath("{.changed[*]}".into())).unwrap(), "app.yaml");
}

#[test]
fn request_timeouts_read_like_kubectl() {
    use confighistory::plugin::parse_timeout;
    use std::time::Duration;
    assert_eq!(parse_timeout("30s"), Ok(Duration::from_secs(30)));
    assert_eq!(parse_timeout("2m"), Ok(Duration::from_secs(120)));
    assert_eq!(parse_timeout("15"), Ok(Duration::from_secs(15)));
    assert_eq!(parse_timeout("500ms"), Ok(Duration::from_millis(500)));
    assert_eq!(parse_timeout("0"), Ok(Duration::ZERO));
    assert!(parse_timeout("1d").is_err() && parse_timeout("").is_err());
}

/// kubectl reads a `--request-timeout` that is not a whole number of seconds with Go's
/// time.ParseDuration: units combine and take fractions (`1m30s` was refused, issue 28).
#[test]
fn request_timeouts_take_go_durations() {
    use confighistory::plugin::parse_timeout;
    use std::time::Duration;
    assert_eq!(parse_timeout("1m30s"), Ok(Duration::from_secs(90)));
    assert_eq!(parse_timeout("1h"), Ok(Duration::from_secs(3600)));
    assert_eq!(parse_timeout("1h2m3s"), Ok(Duration::from_secs(3723)));
    assert_eq!(parse_timeout("1.5h"), Ok(Duration::from_secs(5400)));
    assert_eq!(parse_timeout("2m0.5s"), Ok(Duration::from_millis(120_500)));
    assert_eq!(parse_timeout(".5s"), Ok(Duration::from_millis(500)));
    assert_eq!(parse_timeout("1s500ms"), Ok(Duration::from_millis(1500)));
    assert_eq!(parse_timeout("1500us"), Ok(Duration::from_micros(1500)));
    assert_eq!(parse_timeout("1500µs"), Ok(Duration::from_micros(1500)));
    assert_eq!(parse_timeout("250ns"), Ok(Duration::from_nanos(250)));
    assert_eq!(parse_timeout("+5s"), Ok(Duration::from_secs(5)));
    assert_eq!(parse_timeout("0s"), Ok(Duration::ZERO));
    // What Go or kubectl refuse: no unit after a fraction, a unit alone, an unknown unit, a lone
    // dot, a negative timeout, an overflow.
    for bad in ["1.5", "s", "1x", "1m30", ".s", "-1s", "1 m", "99999999999999999999h", "3000000h"] {
        let e = parse_timeout(bad).expect_err(bad);
        assert!(e.contains(bad), "{bad}: {e}");
    }
}

#[test]
fn list_golden() {
    let meta = |ns: &str, name: &str, ann: Value| json!({"metadata": {"namespace": ns, "name": name, "annotations": ann}});
    let snap = |ns: &str, source: &str, hash: &str| {
        let mut s = meta(ns, &format!("{source}-{hash}"), json!({"confighistory.io/source-name": source}));
        s["metadata"]["labels"] = json!({"confighistory.io/hash": hash});
        s
    };
    let snapshots = vec![
        snap(NS, SOURCE, "aaaa"),
        snap(NS, SOURCE, "bbbb"),
        snap(NS, SOURCE, "cccc"),
        snap("other", "flags", "dddd"),
        snap("other", "gone", "eeee"),
    ];
    let mut sources = BTreeMap::new();
    sources.insert((NS.to_string(), SOURCE.to_string()), Some(meta(NS, SOURCE, json!({"confighistory.io/head": "cccc"}))));
    sources.insert(("other".to_string(), "flags".to_string()), Some(meta("other", "flags", json!({"confighistory.io/head": "dddd"}))));
    sources.insert(("other".to_string(), "gone".to_string()), None);
    let workloads = vec![
        meta(NS, "pricing", json!({"confighistory.io/pins": r#"{"pricing-config":"cccc"}"#})),
        meta(NS, "pricing-canary", json!({"confighistory.io/pins": r#"{"pricing-config":"bbbb"}"#})),
        meta(
            NS,
            "pricing-old",
            json!({"confighistory.io/pins": r#"{"pricing-config":"aaaa"}"#, "confighistory.io/held": "pricing-config"}),
        ),
        meta("other", "web", json!({"confighistory.io/pins": r#"{"flags":"dddd","gone":"eeee"}"#})),
        meta("other", "unpinned", json!({})),
    ];
    let all = build::sources(None, &snapshots, &sources, &workloads);
    golden("plugin-list-all.txt", &render::sources(&all, Style::PLAIN));
    let row = &all.sources.iter().find(|r| r.name == SOURCE).unwrap();
    assert_eq!((row.snapshots, row.workloads, row.behind, row.held), (3, 3, 1, 1));
    let one =
        build::sources(Some(NS), &snapshots[..3], &sources.clone().into_iter().filter(|((n, _), _)| n == NS).collect(), &workloads[..3]);
    golden("plugin-list.txt", &render::sources(&one, Style::PLAIN));
    assert_eq!(
        render::sources(&build::sources(Some("empty"), &[], &BTreeMap::new(), &[]), Style::PLAIN),
        "No versioned ConfigMaps found in empty namespace.\n"
    );
    let json: Value = serde_json::from_str(&machine("Sources", &one, Output::Json)).unwrap();
    assert_eq!(json["sources"][0]["behind"], 1);
}

/// Two releases within one second give two snapshots with the same creationTimestamp: their
/// order (and so their revision numbers in `history`) comes from the order the API server wrote
/// them, not from their names (found by the e2e plugin test under load).
#[test]
fn snapshots_created_in_the_same_second_keep_the_order_they_were_written_in() {
    let (a, b) = (content(&[("k", "a")]), content(&[("k", "b")]));
    let (name_a, name_b) = (snap_name(SOURCE, &a), snap_name(SOURCE, &b));
    // Whichever name sorts first is written second.
    let (first, second) = if name_a > name_b { ((a, name_a), (b, name_b)) } else { ((b, name_b), (a, name_a)) };
    let mut older = snapshot_object(SOURCE, &first.0, "2024-05-01T10:00:00Z", &[]);
    older["metadata"]["resourceVersion"] = json!("900");
    let mut newer = snapshot_object(SOURCE, &second.0, "2024-05-01T10:00:00Z", &[]);
    newer["metadata"]["resourceVersion"] = json!("1000"); // a longer number: compared as numbers
    let inv = Inventory { namespace: NS.into(), snapshots: vec![newer, older], ..Inventory::default() };
    let order: Vec<String> = inv.snaps_of(SOURCE).into_iter().map(|s| s.name).collect();
    assert_eq!(order, vec![first.1, second.1]);
}
