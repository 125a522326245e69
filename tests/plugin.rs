//! kubectl-confighistory without a cluster: the human formats against golden files
//! (tests/golden/plugin-*.txt; `UPDATE_GOLDEN=1 cargo test --test plugin` rewrites them), and the
//! JSON output against the shapes documented in docs/plugin.md.

use std::collections::{BTreeMap, BTreeSet};

use confighistory::model::keys::{ClusterKey, KeyId, NamespaceKey, MIN_KEY_BYTES};
use confighistory::model::kinds::Kind;
use confighistory::model::names;
use confighistory::model::published;
use confighistory::model::secret::{self, SecretContent};
use confighistory::model::snapshot::{self, Content};
use confighistory::model::template;
use confighistory::plugin::build::{self, Inventory, Server};
use confighistory::plugin::model::{Undo, Usage, WorkloadRef};
use confighistory::plugin::render::{self, Style};
use confighistory::plugin::{machine, timeline, Output};
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
        server: server(json!({})),
        ..Default::default()
    }
}

/// [`inventory`] with the pricing Deployment an Argo Rollout instead: the kind registered by the
/// server's published configuration, its revision annotation and hash label on its ReplicaSets.
fn rollout_inventory() -> Inventory {
    let entry = json!({"group": "argoproj.io", "versions": ["v1alpha1"], "kind": "Rollout", "resource": "rollouts",
        "propagates": true, "history": {"group": "apps", "resource": "replicasets",
        "revisionAnnotation": "rollout.argoproj.io/revision", "hashLabel": "rollouts-pod-template-hash"}});
    let mut inv = inventory();
    inv.server = server(json!({"extraWorkloadKinds": [entry]}));
    let entries = inv.server.config().unwrap().extra_workload_kinds.clone();
    inv.kinds = Box::leak(Box::new(confighistory::model::kinds::Registry::builtin().clone().register(&entries).unwrap()));
    let as_rollout = |s: String| {
        s.replace("\"apps/v1\",\"kind\":\"Deployment\"", "\"argoproj.io/v1alpha1\",\"kind\":\"Rollout\"")
            .replace("deployment.kubernetes.io/revision", "rollout.argoproj.io/revision")
            .replace("\"pod-template-hash\"", "\"rollouts-pod-template-hash\"")
    };
    for obj in inv.workloads.iter_mut().chain(inv.revisions.iter_mut()) {
        *obj = serde_json::from_str(&as_rollout(obj.to_string())).unwrap();
    }
    for rs in &mut inv.revisions {
        rs["metadata"]["ownerReferences"] =
            json!([{"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout", "name": "pricing", "uid": "uid-pricing", "controller": true}]);
    }
    inv
}

/// `status` and `undo` read a registered kind as they read a Deployment: the same
/// pins, revisions and undo target, named as the server names the kind.
#[test]
fn a_registered_kinds_status_and_undo_are_a_deployments() {
    let (deployment, rollout) = (inventory(), rollout_inventory());
    let wanted = rollout.resolve(build::parse_workload("rollouts.argoproj.io/pricing").unwrap()).unwrap();
    assert_eq!(wanted, WorkloadRef { kind: "Rollout.argoproj.io".into(), name: "pricing".into() });
    assert_eq!(rollout.resolve(build::parse_workload("rollout/pricing").unwrap()).unwrap(), wanted);
    let err = deployment.resolve(build::parse_workload("rollout/pricing").unwrap()).unwrap_err().to_string();
    assert!(err.contains("unsupported workload kind \"rollout\"") && err.contains("registers none"), "{err}");
    let as_deployment = |s: String| s.replace("Rollout.argoproj.io", "Deployment");
    let (d, r) = (build::status(&deployment, &pricing()).unwrap(), build::status(&rollout, &wanted).unwrap());
    assert_eq!(as_deployment(serde_json::to_string(&r).unwrap()), serde_json::to_string(&d).unwrap());
    let (dw, rw) = (deployment.workload(&pricing()).unwrap(), rollout.workload(&wanted).unwrap());
    assert_eq!(rw.current_revision(), dw.current_revision());
    let (d_target, r_target) = (build::undo_target(&dw, 0).unwrap(), build::undo_target(&rw, 0).unwrap());
    assert_eq!(r_target.0, d_target.0);
    assert_eq!(rw.kind.template_hash(&r_target.1), dw.kind.template_hash(&d_target.1));
    let patch = build::rollback_patch(rw.kind, &rollout.revisions[1]).unwrap();
    assert!(patch[0]["value"]["metadata"]["labels"].get("rollouts-pod-template-hash").is_none(), "{patch}");
    // The source's history names the Rollout's revisions where it named the Deployment's.
    let (dh, rh) = (build::history(&deployment, SOURCE).unwrap(), build::history(&rollout, SOURCE).unwrap());
    let rh = serde_json::to_string(&rh).unwrap();
    assert!(rh.contains("Rollout.argoproj.io"), "{rh}");
    assert_eq!(as_deployment(rh), serde_json::to_string(&dh).unwrap());
}

/// The server's published configuration, as `kubectl confighistory` reads it from the
/// ConfigMap: the defaults, with `changes` merged over the JSON document.
fn server(changes: Value) -> Server {
    let mut doc = json!({
        "format": 1, "serverVersion": "0.1.0", "defaultMode": "rewrite", "allowedModes": ["rewrite", "enforce", "audit"],
        "excludedNamespaces": ["confighistory", "kube-node-lease", "kube-public", "kube-system"],
        "excludedSourcesSelector": "", "controllerNamespaceSelector": "", "settleSeconds": 10, "controllers": true,
        "gc": {"keep": 5, "graceSeconds": 600, "intervalSeconds": 300},
        "propagation": {"qps": 5.0, "burst": 10, "namespaceQps": 2.0, "namespaceBurst": 5},
        "secrets": false, "workloadKinds": ["Deployment", "StatefulSet", "DaemonSet", "CronJob", "Job"],
    });
    for (k, v) in changes.as_object().unwrap() {
        doc[k] = v.clone();
    }
    let cm = json!({"metadata": {"annotations": {names::EFFECTIVE_CONFIG: doc.to_string()}}});
    let s = Server::from_configmap(published::DEFAULT_LOCATION, Some(&cm));
    assert!(s.config().is_some(), "{s:?}");
    s
}

fn pricing() -> WorkloadRef {
    WorkloadRef { kind: "Deployment".into(), name: "pricing".into() }
}

fn undo_model(inv: &Inventory) -> Undo {
    let w = inv.workload(&pricing()).unwrap();
    let (rev, template) = build::undo_target(&w, 0).unwrap();
    let before = build::revision_config(inv, w.kind, w.current_revision(), w.template());
    let target = build::revision_config(inv, w.kind, Some(rev), &template);
    let after = build::revision_config(inv, w.kind, None, &template);
    let preview = Some(undo_preview(inv, &w, &template));
    Undo {
        namespace: NS.into(),
        workload: pricing(),
        dry_run: false,
        skipped: false,
        before,
        target,
        after,
        held: vec![SOURCE.into()],
        preview,
        preview_unavailable: None,
    }
}

/// What an undo to `template` brings back against the live template.
fn undo_preview(inv: &Inventory, w: &build::Workload, template: &Value) -> confighistory::plugin::model::RevisionDiff {
    let live = timeline::Side { revision: w.current_revision(), template: w.template(), live: true };
    let stored = timeline::Side { revision: None, template, live: true };
    timeline::compare_templates(inv, w, live, stored, false).unwrap()
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
fn timeline_golden() {
    let inv = inventory();
    let t = timeline::timeline(&inv, &pricing()).unwrap();
    let revs: Vec<i64> = t.revisions.iter().map(|r| r.revision).collect();
    assert_eq!(revs, [1, 2, 4], "oldest first");
    assert!(t.revisions[1].config_unchanged, "revision 2 pins the content revision 1 ran with (its adoption record)");
    golden("plugin-timeline.txt", &render::timeline(&t, now(), Style::PLAIN));
    golden("plugin-timeline.json", &machine("Timeline", &t, Output::Json));
    let view =
        confighistory::plugin::model::TimelineRevisionView { namespace: NS.into(), workload: pricing(), revision: t.revisions[2].clone() };
    golden("plugin-timeline-revision.txt", &render::timeline_revision(&view, now(), Style::PLAIN));
    let d = timeline::revision_diff(&inv, &pricing(), None, None, false).unwrap();
    assert_eq!((d.from, d.to), (Some(2), Some(4)));
    golden("plugin-revision-diff.txt", &render::revision_diff(&d, now(), Style::PLAIN));
    golden("plugin-revision-diff-color.txt", &render::revision_diff(&d, now(), Style::COLOR));
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
    let d = build::diff(&inv, SOURCE, None, None, false).unwrap();
    assert_eq!((d.from.revision, d.to.revision), (Some(3), Some(4)), "default: the head against the one before");
    golden("plugin-diff.txt", &render::diff(&d, now(), Style::PLAIN));
    golden("plugin-diff-color.txt", &render::diff(&d, now(), Style::COLOR));

    // "What config did revision 1 of the Deployment run with, and what changed since?"
    let since = build::diff(&inv, SOURCE, Some("deployment/pricing@1"), None, false).unwrap();
    assert_eq!(since.from.revision, Some(1), "revision 1 predates the install: its content is known from the adoption record");
    assert_eq!(since.removed, ["discount_rules_path"]);
    assert_eq!(since.added, ["rules.discount_path"]);
    golden("plugin-diff-since.txt", &render::diff(&since, now(), Style::PLAIN));

    let same = build::diff(&inv, SOURCE, Some("head"), Some("4"), false).unwrap();
    assert!(same.keys.is_empty());
    let by_hash = build::diff(&inv, SOURCE, Some(&contents()[1].hash()[..6]), Some("2"), false).unwrap();
    assert!(by_hash.keys.is_empty());
    for (bad, expected) in
        [("9", "has no revision 9"), ("zzzzzz", "no snapshot of pricing-config matches"), ("deployment/pricing@3", "has no revision 3")]
    {
        let err = build::diff(&inv, SOURCE, Some(bad), None, false).unwrap_err().to_string();
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
    assert_eq!(pending.fires_at.as_deref(), Some("2024-05-01T12:00:06Z"));
    assert!(s.pins.iter().find(|p| p.source == SOURCE).unwrap().is_head);
    assert_eq!(s.undo.as_ref().unwrap().revision, Some(2));
    golden("plugin-status.txt", &render::status(&s, now(), Style::PLAIN));
}

/// `status --wait` (docs/plugin.md, "In a pipeline"): settled once every reference is on its
/// head or held (exit 0); a pin still pending at the timeout keeps it waiting (exit 1), saying
/// which reference waits and for what; a fetch's error ends the wait (exit 2 in the binary).
#[tokio::test]
async fn status_wait_settles_or_times_out_saying_what_waits() {
    use confighistory::plugin::{wait_for, waiting_message};
    use std::time::Duration;
    let inv = inventory();
    let pending = build::status(&inv, &pricing()).unwrap();
    let waits = build::waiting(&pending);
    assert_eq!(waits.len(), 1, "{waits:?}");
    assert!(
        waits[0].starts_with("limits (limits-") && waits[0].contains("propagation to") && waits[0].contains("2024-05-01T12:00:06Z"),
        "{waits:?}"
    );
    let mut settled = pending.clone();
    for p in &mut settled.pins {
        p.is_head = p.hash.is_some() && p.hash == p.head;
        if p.source == "limits" {
            (p.hash, p.is_head, p.pending) = (p.head.clone(), true, None);
        }
    }
    assert!(build::waiting(&settled).is_empty());
    let mut held = pending.clone();
    held.pins.iter_mut().for_each(|p| p.held |= p.source == "limits");
    assert!(build::waiting(&held).is_empty(), "held by an undo, as intended");

    // Pending twice, then settled: the wait ends on the third look, with nothing waiting.
    let calls = std::sync::atomic::AtomicUsize::new(0);
    let fetch = || {
        let n = calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let s = if n < 2 { pending.clone() } else { settled.clone() };
        async move { anyhow::Ok((s, ())) }
    };
    let (_, (), still) = wait_for(fetch, Duration::from_secs(5), Duration::from_millis(10)).await.unwrap();
    assert!(still.is_empty());
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 3);

    // Still pending at a short timeout: it says so, bounded in time.
    let started = std::time::Instant::now();
    let fetch = || {
        let s = pending.clone();
        async move { anyhow::Ok((s, ())) }
    };
    let (_, (), still) = wait_for(fetch, Duration::from_millis(300), Duration::from_millis(50)).await.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(300) && started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());
    assert_eq!(still, waits);
    let said = waiting_message("deployment/pricing", Duration::from_millis(300), &still);
    assert!(said.starts_with("timed out after 0.3s: deployment/pricing still waits for:\n  limits (limits-"), "{said}");

    // An error ends the wait.
    let fetch = || async { Err::<(confighistory::plugin::model::Status, ()), _>(anyhow::anyhow!("forbidden")) };
    assert!(wait_for(fetch, Duration::from_secs(5), Duration::from_millis(10)).await.is_err());
}

#[test]
fn undo_golden_and_refusal() {
    let inv = inventory();
    golden("plugin-undo.txt", &render::undo(&undo_model(&inv), Style::PLAIN));

    // Revision 1 predates confighistory: its content is the adopted snapshot.
    let w = inv.workload(&pricing()).unwrap();
    let (_, t1) = build::undo_target(&w, 1).unwrap();
    let r1 = build::revision_config(&inv, w.kind, Some(1), &t1);
    assert_eq!(r1.config[0].via, "adoption");
    assert!(build::check_target(&pricing(), &r1).is_ok());

    // With revision 2's snapshot gone, the undo is refused.
    let mut gone = inv.clone();
    let s1 = snap_name(SOURCE, &contents()[0]);
    gone.snapshots.retain(|s| s["metadata"]["name"] != s1.as_str());
    let (_, t2) = build::undo_target(&w, 0).unwrap();
    let err = build::check_target(&pricing(), &build::revision_config(&gone, w.kind, Some(2), &t2)).unwrap_err().to_string();
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
    // The label counts only where the admin allows the mode it asks for.
    let err = build::history(&off, "plain").unwrap_err().to_string();
    assert!(err.contains("has no snapshots yet"), "off is refused: rewrite is in force: {err}");
    off.server = server(json!({"allowedModes": ["rewrite", "off"]}));
    let err = build::history(&off, "plain").unwrap_err().to_string();
    assert!(err.contains("mode off"), "{err}");
    assert!(build::parse_workload("job/x").unwrap_err().to_string().contains("unsupported workload kind"));
    assert_eq!(build::parse_workload("sts/db").unwrap().kind, "StatefulSet");
    assert_eq!(build::parse_workload("deployment.apps/web").unwrap(), WorkloadRef { kind: "Deployment".into(), name: "web".into() });
    assert_eq!(build::parse_workload("web").unwrap().kind, "Deployment");
}

/// `status` and `history` show what the server does: its settle window, its default mode, its
/// rule for refused labels and excluded namespaces, its keep count and its selector of excluded
/// sources, all from the configuration it publishes.
#[test]
fn the_plugin_shows_what_the_server_does() {
    let mut inv = inventory();
    inv.server = server(json!({"settleSeconds": 45}));
    let s = build::status(&inv, &pricing()).unwrap();
    let pending = s.pins.iter().find(|p| p.source == "limits").unwrap().pending.clone().unwrap();
    assert_eq!((pending.settle_seconds, pending.fires_at.as_deref()), (Some(45), Some("2024-05-01T12:00:41Z")));
    assert!(render::status(&s, now(), Style::PLAIN).contains("in 41s (changed 4s ago, settle 45s)"));

    // A label asking for a mode the admin does not allow: the default is in force.
    inv.namespace_object["metadata"]["labels"]["confighistory.io/mode"] = json!("off");
    let s = build::status(&inv, &pricing()).unwrap();
    assert_eq!((s.mode.as_str(), s.mode_source.as_str(), s.refused_label.as_deref()), ("rewrite", "refused-label", Some("off")));
    assert!(!s.mode_from_label);
    let text = render::status(&s, now(), Style::PLAIN);
    assert!(
        text.contains("mode:      rewrite (the server's default: the namespace label asks for off, which the admin does not allow)"),
        "{text}"
    );
    assert!(s.pins.iter().any(|p| p.pending.is_some()), "rewrite is in force: the change still propagates");

    // The server's default mode, and a namespace the admin excluded.
    inv.namespace_object["metadata"]["labels"] = json!({});
    inv.server = server(json!({"defaultMode": "enforce"}));
    let s = build::status(&inv, &pricing()).unwrap();
    assert_eq!((s.mode.as_str(), s.mode_source.as_str()), ("enforce", "default"));
    assert!(s.pins.iter().all(|p| p.pending.is_none()), "enforce never propagates");
    assert!(render::status(&s, now(), Style::PLAIN).contains("mode:      enforce (the server's default)"));
    inv.server = server(json!({"excludedNamespaces": ["kube-system", NS]}));
    let s = build::status(&inv, &pricing()).unwrap();
    assert_eq!((s.mode.as_str(), s.mode_source.as_str()), ("off", "excluded"));

    // Keep comes from the server unless the source says; the admin's selector of sources.
    inv.server = server(json!({"gc": {"keep": 3, "graceSeconds": 1, "intervalSeconds": 1}, "excludedSourcesSelector": "ca=true"}));
    assert_eq!(build::history(&inv, "limits").unwrap().keep, Some(3));
    assert_eq!(build::history(&inv, SOURCE).unwrap().keep, Some(2), "the source's confighistory.io/keep");
    inv.sources.insert("bundle".into(), json!({"metadata": {"name": "bundle", "labels": {"ca": "true"}}, "data": {"a": "b"}}));
    let err = build::history(&inv, "bundle").unwrap_err().to_string();
    assert!(err.contains("the admin excludes ConfigMaps matching ca=true"), "{err}");
}

/// Without the server's configuration nothing is assumed: the plugin says why it does not know,
/// and shows unknown what depends on it.
#[test]
fn without_the_servers_configuration_the_plugin_says_so() {
    let mut inv = inventory();
    inv.server = Server::from_configmap("confighistory/confighistory-effective-config", None);
    let s = build::status(&inv, &pricing()).unwrap();
    let why = s.server_config_unavailable.clone().expect("a reason");
    assert!(why.contains("ConfigMap confighistory/confighistory-effective-config not found"), "{why}");
    assert_eq!((s.mode.as_str(), s.mode_source.as_str()), ("rewrite", "label-unchecked"));
    let pending = s.pins.iter().find(|p| p.source == "limits").unwrap().pending.clone().unwrap();
    assert_eq!((pending.settle_seconds, pending.fires_at), (None, None));
    let text = render::status(&s, now(), Style::PLAIN);
    assert!(text.contains("note: the server's configuration is unknown: ConfigMap"), "{text}");
    assert!(text.contains("the server's settle window is unknown"), "{text}");
    assert!(!text.contains("settle 10s"), "no default of the plugin's own: {text}");

    // A namespace setting still counts; without a label the mode is unknown.
    inv.namespace_object["metadata"]["annotations"] = json!({"confighistory.io/settle": "20s"});
    inv.namespace_object["metadata"]["labels"] = json!({});
    let s = build::status(&inv, &pricing()).unwrap();
    assert_eq!((s.mode.as_str(), s.mode_source.as_str()), ("unknown", "unknown"));
    assert!(s.pins.iter().all(|p| p.pending.is_none()), "no propagation is promised in an unknown mode");
    let h = build::history(&inv, "limits").unwrap();
    assert_eq!(h.keep, None);
    assert!(h.snapshots.iter().all(|e| !e.kept_by.contains(&"newest".to_owned())));
    let text = render::history(&h, now(), Style::PLAIN);
    assert!(text.contains("how many newest are kept unknown") && text.contains("note: the server's configuration is unknown"), "{text}");

    // A document it cannot use says what is wrong with it.
    let cm = json!({"metadata": {"annotations": {names::EFFECTIVE_CONFIG: "{\"format\": 9}"}}});
    let why = Server::from_configmap("ops/cfg", Some(&cm)).unavailable().unwrap();
    assert!(why.contains("ConfigMap ops/cfg") && why.contains("upgrade kubectl-confighistory"), "{why}");
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
    same_shape("diff", "Diff", &parse(machine("Diff", &build::diff(&inv, SOURCE, None, None, false).unwrap(), Output::Json)));
    same_shape("status", "Status", &parse(machine("Status", &build::status(&inv, &pricing()).unwrap(), Output::Json)));
    same_shape("undo", "Undo", &parse(machine("Undo", &undo_model(&inv), Output::Json)));
    let t = timeline::timeline(&inv, &pricing()).unwrap();
    same_shape("history WORKLOAD", "Timeline", &parse(machine("Timeline", &t, Output::Json)));
    let view =
        confighistory::plugin::model::TimelineRevisionView { namespace: NS.into(), workload: pricing(), revision: t.revisions[2].clone() };
    same_shape("history WORKLOAD --revision N", "TimelineRevision", &parse(machine("TimelineRevision", &view, Output::Json)));
    let d = timeline::revision_diff(&inv, &pricing(), None, None, false).unwrap();
    same_shape("diff WORKLOAD", "RevisionDiff", &parse(machine("RevisionDiff", &d, Output::Json)));
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
    print!("{}", machine("Diff", &build::diff(&inv, SOURCE, None, None, false).unwrap(), Output::Json));
    print!("{}", machine("Status", &build::status(&inv, &pricing()).unwrap(), Output::Json));
    print!("{}", machine("Undo", &undo_model(&inv), Output::Json));
    let t = timeline::timeline(&inv, &pricing()).unwrap();
    print!("{}", machine("Timeline", &t, Output::Json));
    let view =
        confighistory::plugin::model::TimelineRevisionView { namespace: NS.into(), workload: pricing(), revision: t.revisions[2].clone() };
    print!("{}", machine("TimelineRevision", &view, Output::Json));
    print!("{}", machine("RevisionDiff", &timeline::revision_diff(&inv, &pricing(), None, None, false).unwrap(), Output::Json));
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
    assert_eq!(out, "completion\ndiff\nhistory\nlist\nstatus\nui\nundo\n:4\n");
    let out = String::from_utf8(offline(&["__complete", "undo", "app", "--d"]).stdout).unwrap();
    assert_eq!(out, "--dry-run\n:4\n");
    let out = String::from_utf8(offline(&["__complete", "completion", "z"]).stdout).unwrap();
    assert_eq!(out, "zsh\n:4\n");
    // Names from a cluster with no kubeconfig to find it: no candidate, no error text, exit 0.
    for args in [&["__complete", "-n", ""][..], &["__complete", "status", ""], &["__complete", "--context", ""]] {
        let out = offline(args);
        assert_eq!((String::from_utf8_lossy(&out.stdout).as_ref(), out.status.code()), (":4\n", Some(0)), "{args:?}");
        assert!(out.stderr.is_empty(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    // A half-typed or wrong line is never a clap error: cobra's answer still.
    let out = offline(&["__complete", "--no-such-flag", "-o", "ya"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "yaml\n:4\n");
    let out = offline(&["__complete", "--request-timeout", "x", "st"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "status\n:4\n");
    let script =
        std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("dist/kubectl_complete-confighistory")).unwrap();
    assert!(script.contains("exec kubectl-confighistory __complete \"$@\""));
}

#[test]
fn refusals_and_bad_flags_are_clear_before_any_connection() {
    let out = offline(&["undo", "app", "--dry-run=client"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert!(err.starts_with("error: --dry-run=client is not supported") && err.contains("--dry-run=server"), "{err}");
    let out = offline(&["history", "x", "-o", "wide"]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("use json, yaml, name or jsonpath=TEMPLATE"));
    let out = offline(&["history", "x", "--request-timeout", "soon"]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("invalid timeout"));
    // Every error exits 2, as a bad command line does (1 means "different" for diff, as for
    // kubectl diff, and "still waiting" for status --wait).
    for args in [&["diff", "x"][..], &["history", "x"], &["history", "deployment/x"], &["undo", "x"], &["status", "x"], &["list"]] {
        assert_eq!(offline(args).status.code(), Some(2), "{args:?}");
    }
    assert_eq!(offline(&["history", "x", "-o", "wide"]).status.code(), Some(2));
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
    let d = build::diff(&inv, SOURCE, None, None, false).unwrap();
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
/// time.ParseDuration: units combine and take fractions (`1m30s` was refused).
#[test]
fn request_timeouts_take_go_durations() {
    use confighistory::plugin::parse_timeout;
    use std::time::Duration;
    assert_eq!(parse_timeout("1m30s"), Ok(Duration::from_secs(90)));
    assert_eq!(parse_timeout("1h"), Ok(Duration::from_secs(3600)));
    assert_eq!(parse_timeout("1h2m3s"), Ok(Duration::from_secs(3723)));
    assert_eq!(parse_timeout("1.5h"), Ok(Duration::from_secs(5400)));
    assert_eq!(parse_timeout("1.5h30m"), Ok(Duration::from_secs(7200)));
    assert_eq!(parse_timeout("2m0.5s"), Ok(Duration::from_millis(120_500)));
    assert_eq!(parse_timeout(".5s"), Ok(Duration::from_millis(500)));
    assert_eq!(parse_timeout("1s500ms"), Ok(Duration::from_millis(1500)));
    assert_eq!(parse_timeout("1500us"), Ok(Duration::from_micros(1500)));
    assert_eq!(parse_timeout("1500µs"), Ok(Duration::from_micros(1500)));
    assert_eq!(parse_timeout("1500\u{3bc}s"), Ok(Duration::from_micros(1500)), "Greek mu, as Go takes it");
    assert_eq!(parse_timeout("250ns"), Ok(Duration::from_nanos(250)));
    assert_eq!(parse_timeout("+5s"), Ok(Duration::from_secs(5)));
    assert_eq!(parse_timeout("0s"), Ok(Duration::ZERO));
    // What Go or kubectl refuse: no unit after a fraction, a unit alone, an unknown unit, a lone
    // dot, a negative timeout, an overflow.
    for bad in ["1.5", "s", "1x", "1m30", ".s", "-1s", "1 m", "1 hour", "PT1M", "99999999999999999999h", "3000000h"] {
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

// ----------: cluster-controlled text and names ----------

/// A source whose newest value hides a line from the terminal: ESC [2K erases the line, a
/// carriage return rewinds it, U+202E reverses what follows. Every human format shows escapes.
fn hostile_inventory() -> (Inventory, String) {
    let source = "evil-config";
    let hostile = "ok\x1b[2K\rhidden \u{202e}txet\u{9b}2J\u{7f}";
    let (old, new) = (content(&[("k", "safe")]), content(&[("k", hostile)]));
    let cm =
        json!({"kind": "ConfigMap", "metadata": {"name": source, "annotations": {"confighistory.io/head": new.hash()}}, "data": new.data});
    let inv = Inventory {
        namespace: NS.into(),
        namespace_object: json!({"metadata": {"name": NS}}),
        sources: BTreeMap::from([(source.to_owned(), cm)]),
        snapshots: vec![
            snapshot_object(source, &old, "2024-05-01T10:00:00Z", &[]),
            snapshot_object(source, &new, "2024-05-01T11:00:00Z", &[]),
        ],
        ..Inventory::default()
    };
    (inv, source.to_owned())
}

#[track_caller]
fn assert_escaped(out: &str, style: Style) {
    for c in ['\r', '\u{202e}', '\u{9b}', '\u{7f}'] {
        assert!(!out.contains(c), "{c:?} printed raw:\n{out:?}");
    }
    // The only escape sequences are the plugin's own colours.
    let own = ["\x1b[0m", "\x1b[1m", "\x1b[2m", "\x1b[31m", "\x1b[32m", "\x1b[33m", "\x1b[36m"];
    let mut rest = out.to_owned();
    for o in own {
        rest = rest.replace(o, "");
    }
    assert!(!rest.contains('\x1b'), "{style:?}: a raw ESC:\n{out:?}");
    assert!(out.contains("\\x1b[2K") && out.contains("\\r") && out.contains("\\u{202e}"), "escapes shown:\n{out}");
}

#[test]
fn cluster_text_is_escaped_in_human_output() {
    let (inv, source) = hostile_inventory();
    let d = build::diff(&inv, &source, None, None, false).unwrap();
    for style in [Style::PLAIN, Style::COLOR] {
        assert_escaped(&render::diff(&d, now(), style), style);
    }
    // JSON keeps the value as it is (JSON escapes it).
    let json: Value = serde_json::from_str(&machine("Diff", &d, Output::Json)).unwrap();
    assert!(json.to_string().contains("\\u001b[2K"), "{json}");

    // `list -A`: a snapshot's source-name annotation is the tenant's text.
    let hostile = "x\x1b]0;owned\x07\u{202e}";
    let snap = json!({"metadata": {"namespace": "other", "name": "x-aaaa", "labels": {"confighistory.io/hash": "aaaa"},
        "annotations": {"confighistory.io/source-name": hostile}}});
    let sources = BTreeMap::from([(("other".to_owned(), hostile.to_owned()), None)]);
    let out = render::sources(&build::sources(None, &[snap], &sources, &[]), Style::PLAIN);
    assert!(!out.contains('\x1b') && !out.contains('\x07') && !out.contains('\u{202e}'), "{out:?}");
    assert!(out.contains("x\\x1b]0;owned\\x07\\u{202e}"), "{out}");

    // Errors quote names from the cluster and the command line.
    let e = anyhow::anyhow!("no ConfigMap named \"a\x1b[2Kb\u{2066}\" here");
    let text = confighistory::plugin::describe(&e);
    assert!(!text.contains('\x1b') && !text.contains('\u{2066}') && text.contains("\\x1b[2Kb\\u{2066}"), "{text:?}");
}

/// Names go into request paths: anything that is not a Kubernetes name is refused before any
/// connection (a source named `../secrets/x` would read another resource).
#[test]
fn names_are_validated_before_they_reach_a_request_path() {
    for args in [
        &["history", "../secrets/db"][..],
        &["diff", "a%2Fb"],
        &["history", "Pricing"],
        &["status", "deployment/web\x1b[2K"],
        &["undo", "web..x", "--dry-run"],
        &["history", "x", "-n", "kube-system/../x"],
    ] {
        let out = offline(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains("is not a valid"), "{args:?}: {err}");
        assert!(!err.contains('\x1b'), "{err:?}");
    }
}

/// `undo` follows the controller's owner reference only: a ReplicaSet anyone may create with a
/// non-controller reference to the Deployment is not one of its revisions.
#[test]
fn undo_follows_the_controller_owner_reference_only() {
    let mut inv = inventory();
    let mut forged = replicaset(9, &pod_template("evil.example/miner:1", &[SOURCE]));
    forged["metadata"]["ownerReferences"][0]["controller"] = json!(false);
    inv.revisions.push(forged.clone());
    forged["metadata"]["ownerReferences"][0].as_object_mut().unwrap().remove("controller");
    forged["metadata"]["annotations"]["deployment.kubernetes.io/revision"] = json!("8");
    inv.revisions.push(forged);
    let w = inv.workload(&pricing()).unwrap();
    let revs: Vec<i64> = w.revisions.iter().map(|(r, _)| *r).collect();
    assert_eq!(revs, [1, 2, 4], "only the controller's revisions");
    assert!(build::undo_target(&w, 9).is_err() && build::undo_target(&w, 8).is_err());
    assert_eq!(build::undo_target(&w, 0).unwrap().0, 2);

    // The patch is the pod template and nothing else: a revision's annotations, replicas or
    // owners are not the undo's to copy.
    let mut rs = replicaset(2, &pod_template("registry.example/pricing:4.11", &[SOURCE]));
    rs["metadata"]["annotations"]["evil.example/x"] = json!("y");
    rs["spec"]["replicas"] = json!(100);
    let patch = build::rollback_patch(Kind::Deployment, &rs).unwrap();
    let ops = patch.as_array().unwrap();
    assert_eq!(ops.len(), 1, "{patch}");
    assert_eq!((&ops[0]["op"], &ops[0]["path"]), (&json!("replace"), &json!("/spec/template")));
    assert!(ops[0]["value"]["metadata"]["labels"].get("pod-template-hash").is_none(), "{patch}");
    let cr = json!({"data": {"spec": {"template": {"spec": {"containers": []}, "$patch": "replace"}, "replicas": 100}}});
    let patch = build::rollback_patch(Kind::StatefulSet, &cr).unwrap();
    assert_eq!(patch, json!({"spec": {"template": {"spec": {"containers": []}, "$patch": "replace"}}}));
}

// ----------: Secret sources (docs/plugin.md, "Secrets") ----------

/// The canary: a Secret value that must never be printed without `--show-values`.
const CANARY: &str = "canary-7f3c9e1d";

fn secret_content(pairs: &[(&str, &str)]) -> SecretContent {
    SecretContent::new(secret::OPAQUE, pairs.iter().map(|(k, v)| (k.to_string(), v.as_bytes().to_vec())).collect())
}

/// The namespace key the fixture's Secret snapshots are MAC'd under (the plugin never has it).
fn namespace_key() -> NamespaceKey {
    ClusterKey::new(KeyId(1), vec![7; MIN_KEY_BYTES]).unwrap().namespace_key(NS)
}

fn secret_contents() -> [SecretContent; 3] {
    let url1 = "postgres://db:5432/shop\n";
    let url2 = "postgres://db2:5432/shop\n";
    [
        secret_content(&[("api_key", CANARY), ("password", CANARY), ("url", url1)]),
        secret_content(&[("api_key", CANARY), ("password", CANARY), ("pool", "10"), ("url", url2)]),
        secret_content(&[("api_key", CANARY), ("password", "s3cret-rotated-value"), ("pool", "10"), ("url", url2)]),
    ]
}

fn secret_snap_name(c: &SecretContent) -> String {
    secret::snapshot_name("db", c, &namespace_key(), 0)
}

fn secret_template(image: &str, volume_secret: &str, env_secret: &str) -> Value {
    json!({
        "metadata": {"labels": {"app": "api"}},
        "spec": {
            "containers": [{"name": "api", "image": image,
                "env": [{"name": "DB_PASSWORD", "valueFrom": {"secretKeyRef": {"name": env_secret, "key": "password"}}}],
                "volumeMounts": [{"name": "db", "mountPath": "/etc/db"}]}],
            "volumes": [{"name": "db", "secret": {"secretName": volume_secret}},
                        {"name": "cfg", "configMap": {"name": snap_name(SOURCE, &contents()[3])}}],
            "imagePullSecrets": [{"name": "registry"}],
        }
    })
}

fn api_replicaset(revision: i64, template: &Value) -> Value {
    let mut rs = replicaset(revision, template);
    rs["metadata"]["name"] = json!(format!("api-h{revision}"));
    rs["metadata"]["ownerReferences"] = json!([{"kind": "Deployment", "name": "api", "uid": "uid-api", "controller": true}]);
    rs
}

fn api() -> WorkloadRef {
    WorkloadRef { kind: "Deployment".into(), name: "api".into() }
}

/// [`inventory`] with Secrets on and a Secret source `db` of three snapshots (MAC'd under a key
/// the plugin does not have), whose values include [`CANARY`] (in `api_key`, never changed, and in
/// `password` until revision 3), used by Deployment `api`: revision 1 through a volume and an env
/// var, revision 2 by its pins, revision 3 (current) pinned to the head. Sealed as `gather` seals
/// what it reads.
fn secret_inventory() -> Inventory {
    let mut inv = inventory();
    inv.server = server(json!({"secrets": true}));
    let c = secret_contents();
    let key = namespace_key();
    let created = ["2024-04-28T08:00:00Z", "2024-04-30T16:00:00Z", "2024-05-01T11:00:00Z"];
    for (content, at) in c.iter().zip(created) {
        let mut o = secret::snapshot_object(NS, "db", &secret_snap_name(content), content, &key, &[]);
        o["metadata"]["creationTimestamp"] = json!(at);
        inv.snapshots.push(o);
    }
    let live = secret::snapshot_object(NS, "db", "db", &c[2], &key, &[]);
    let mut source = json!({"kind": "Secret", "apiVersion": "v1", "type": "Opaque", "data": live["data"].clone(),
        "metadata": {"name": "db", "namespace": NS, "annotations": {"confighistory.io/head": c[2].mac(&key, "db")}}});
    source["metadata"]["annotations"]["confighistory.io/changed-at"] = json!("2024-05-01T11:00:00Z");
    // `kubectl apply` keeps a copy of the manifest, values included.
    let applied = json!({"kind": "Secret", "stringData": {"api_key": CANARY}, "data": live["data"].clone()});
    source["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] = json!(applied.to_string());
    source["metadata"]["annotations"]["confighistory.io/propagated"] = json!(c[2].mac(&key, "db"));
    inv.sources.insert("secret/db".into(), source);
    let (s1, s2, s3) = (secret_snap_name(&c[0]), secret_snap_name(&c[1]), secret_snap_name(&c[2]));
    let revs = [
        secret_template("registry.example/api:1", &s1, &s1),
        secret_template("registry.example/api:2", &s2, &s2),
        secret_template("registry.example/api:3", &s3, &s3),
    ];
    inv.workloads.push(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "api", "uid": "uid-api", "annotations": {"deployment.kubernetes.io/revision": "3",
            "confighistory.io/pins": json!({"secret/db": c[2].mac(&key, "db"), SOURCE: contents()[3].hash()}).to_string()}},
        "spec": {"template": revs[2].clone()},
    }));
    for (i, t) in revs.iter().enumerate() {
        inv.revisions.push(api_replicaset(i as i64 + 1, t));
    }
    inv.sealed()
}

/// The forms of the canary that must not be printed: the value, its base64, its SHA-256 (hex,
/// both cases), and the unkeyed hash a ConfigMap's rules would give content holding it.
fn canary_forms() -> Vec<String> {
    use base64::Engine as _;
    let sha = confighistory::model::digest::digest::<confighistory::model::digest::Sha256>(CANARY.as_bytes());
    let hex: String = sha.iter().map(|b| format!("{b:02x}")).collect();
    vec![
        CANARY.to_owned(),
        base64::engine::general_purpose::STANDARD.encode(CANARY),
        hex.to_uppercase(),
        hex,
        content(&[("password", CANARY)]).hash(),
        content(&[("api_key", CANARY)]).hash(),
    ]
}

/// Fails naming the form found, never printing the text it was found in (a failure's message
/// is test output too: docs/testing.md's Secrets discipline).
#[track_caller]
fn assert_no_canary(what: &str, text: &str) {
    for (i, form) in canary_forms().iter().enumerate() {
        assert!(!text.contains(form.as_str()), "{what}: canary form #{i} printed ({} bytes of output)", text.len());
    }
}

#[test]
fn secret_history_golden() {
    let inv = secret_inventory();
    let h = build::history(&inv, "secret/db").unwrap();
    assert_eq!(h.source_kind, "Secret");
    let key = namespace_key();
    let c = secret_contents();
    assert_eq!(h.head.as_deref(), Some(c[2].mac(&key, "db").as_str()), "the head: the snapshot holding the live content");
    let revs: Vec<(u32, bool)> = h.snapshots.iter().map(|s| (s.revision, s.head)).collect();
    assert_eq!(revs, [(3, true), (2, false), (1, false)]);
    assert_eq!((h.snapshots[0].changed.clone(), h.snapshots[0].added.clone()), (vec!["password".to_owned()], vec![]));
    assert_eq!((h.snapshots[1].changed.clone(), h.snapshots[1].added.clone()), (vec!["url".to_owned()], vec!["pool".to_owned()]));
    assert_eq!(h.snapshots[2].keys, ["api_key", "password", "url"]);
    assert_eq!(h.snapshots[2].size, c[0].bytes());
    assert_eq!(h.snapshots[0].used_by, [Usage { workload: api(), current: true, revisions: vec![3], adopted: false }]);
    golden("plugin-history-secret.txt", &render::history(&h, now(), Style::PLAIN));
    golden("plugin-history-secret.json", &machine("History", &h, Output::Json));
    // A snapshot's name, or secret/NAME of it, means its source; a bare name is a ConfigMap.
    assert!(build::history(&inv, "db").unwrap_err().to_string().contains("no ConfigMap or snapshot named \"db\""));
}

#[test]
fn secret_diff_golden() {
    let inv = secret_inventory();
    let d = build::diff(&inv, "secret/db", None, None, false).unwrap();
    assert_eq!((d.from.revision, d.to.revision, d.source_kind.as_str()), (Some(2), Some(3), "Secret"));
    assert_eq!(
        (d.changed.clone(), d.unchanged.clone()),
        (vec!["password".to_owned()], vec!["api_key".into(), "pool".into(), "url".into()])
    );
    let k = &d.keys[0];
    assert!(k.hidden && k.hunks.is_empty() && !k.binary, "{k:?}");
    assert_eq!((k.old_size, k.new_size), (Some(CANARY.len()), Some("s3cret-rotated-value".len())));
    golden("plugin-diff-secret.txt", &render::diff(&d, now(), Style::PLAIN));
    golden("plugin-diff-secret.json", &machine("Diff", &d, Output::Json));

    // Revision 1 of the Deployment against the head: a key added, two changed.
    let since = build::diff(&inv, "secret/db", Some("deployment/api@1"), Some("head"), false).unwrap();
    assert_eq!((since.added.clone(), since.changed.clone()), (vec!["pool".to_owned()], vec!["password".to_owned(), "url".into()]));
    golden("plugin-diff-secret-since.txt", &render::diff(&since, now(), Style::PLAIN));

    // --show-values: the values, as a ConfigMap's are shown.
    let shown = build::diff(&inv, "secret/db", Some("1"), Some("3"), true).unwrap();
    assert!(shown.keys.iter().all(|k| !k.hidden && !k.hunks.is_empty()), "{:?}", shown.keys);
    golden("plugin-diff-secret-values.txt", &render::diff(&shown, now(), Style::PLAIN));

    // The live content without a snapshot: its hash is the recorded head, never one computed.
    let mut fresh = inv.clone();
    fresh.snapshots.retain(|s| s["metadata"]["name"] != secret_snap_name(&secret_contents()[2]).as_str());
    let d = build::diff(&fresh, "secret/db", None, None, false).unwrap();
    assert_eq!((d.to.revision, d.to.name.as_str()), (None, "db"));
    assert_eq!(d.to.hash, Some(secret_contents()[2].mac(&namespace_key(), "db")), "the head annotation");
    fresh.sources.get_mut("secret/db").unwrap()["metadata"]["annotations"] = json!({});
    assert_eq!(build::diff(&fresh, "secret/db", None, None, false).unwrap().to.hash, None);
}

/// A Secret whose `type` alone changed (same keys, same values): the diff says so, with the two
/// types, never "no differences" (the command exits 1 for it, as for any difference); no value
/// is printed.
#[test]
fn secret_diff_names_a_type_change() {
    let mut inv = secret_inventory();
    let c = secret_contents();
    let retyped = SecretContent::new(
        "example.com/db-credentials",
        c[2].keys().map(|k| (k.to_owned(), c[2].revealed_value(k).unwrap().to_vec())).collect(),
    );
    let key = namespace_key();
    let mut o = secret::snapshot_object(NS, "db", &secret_snap_name(&retyped), &retyped, &key, &[]);
    o["metadata"]["creationTimestamp"] = json!("2024-05-02T09:00:00Z");
    inv.snapshots.push(o);
    let inv = inv.sealed();
    let d = build::diff(&inv, "secret/db", Some("3"), Some("4"), false).unwrap();
    assert!(d.keys.is_empty() && d.changed.is_empty(), "no key changed: {:?}", d.keys.iter().map(|k| &k.key).collect::<Vec<_>>());
    let text = render::diff(&d, now(), Style::PLAIN);
    assert!(!text.contains("no differences"), "the type differs:\n{text}");
    assert!(text.contains("type changed: Opaque → example.com/db-credentials"), "the two types are named:\n{text}");
    let json = machine("Diff", &d, Output::Json);
    assert!(json.contains("\"typeChanged\""), "the machine output has it too:\n{json}");
    for out in [&text, &json] {
        assert_no_canary("a type-only diff", out);
    }
    // The same type on both sides: no type line, nothing new in the machine output.
    let same = build::diff(&inv, "secret/db", Some("2"), Some("3"), false).unwrap();
    assert!(!render::diff(&same, now(), Style::PLAIN).contains("type changed"));
    assert!(!machine("Diff", &same, Output::Json).contains("typeChanged"));
}

#[test]
fn secret_status_golden() {
    let inv = secret_inventory();
    let s = build::status(&inv, &api()).unwrap();
    let sources: Vec<(&str, bool)> = s.pins.iter().map(|p| (p.source.as_str(), p.is_head)).collect();
    assert_eq!(sources, [(SOURCE, true), ("secret/db", true)], "the env var and the volume are one source; imagePullSecrets none");
    assert_eq!(s.undo.as_ref().unwrap().config[1].reference, secret_snap_name(&secret_contents()[1]));
    golden("plugin-status-secret.txt", &render::status(&s, now(), Style::PLAIN));
    golden("plugin-status-secret.json", &machine("Status", &s, Output::Json));
    // Secret snapshots read: their users are shown even where the server no longer versions Secrets.
    let mut off = inv.clone();
    off.server = server(json!({"secrets": false}));
    assert!(build::status(&off, &api()).unwrap().pins.iter().any(|p| p.source == "secret/db"));
    // With Secrets off in the namespace (the server's choice) and none read (gather reads none
    // unless one is asked for), Secret references are not sources.
    off.snapshots.retain(|s| s["kind"] != "Secret");
    off.secret_contents.clear();
    let s = build::status(&off, &api()).unwrap();
    assert!(s.pins.iter().all(|p| !p.source.starts_with("secret/")), "{:?}", s.pins);
    // A Secret asked for is read (and sealed) though the server does not version Secrets.
    off.sources.insert("secret/db".into(), json!({"kind": "Secret", "metadata": {"name": "db"}, "data": {"k": "dg=="}}));
    let off = off.sealed();
    let err = build::history(&off, "secret/db").unwrap_err().to_string();
    assert!(err.contains("does not version Secrets in namespace shop"), "{err}");
}

/// Every view and output format over fixtures holding the canary: none of its forms without
/// `--show-values`; with it, the value is shown (and only in `diff`).
#[test]
fn secret_values_never_printed_without_show_values() {
    let inv = secret_inventory();
    let outputs = || [Output::Json, Output::Yaml, Output::Name, Output::JsonPath("{.source} {.keys[*].key}".into())];
    let h = build::history(&inv, "secret/db").unwrap();
    let s = build::status(&inv, &api()).unwrap();
    let w = inv.workload(&api()).unwrap();
    let u = {
        let (rev, template) = build::undo_target(&w, 0).unwrap();
        Undo {
            namespace: NS.into(),
            workload: api(),
            dry_run: true,
            skipped: false,
            before: build::revision_config(&inv, w.kind, w.current_revision(), w.template()),
            target: build::revision_config(&inv, w.kind, Some(rev), &template),
            after: build::revision_config(&inv, w.kind, None, &template),
            held: vec!["secret/db".into()],
            preview: Some(undo_preview(&inv, &w, &template)),
            preview_unavailable: None,
        }
    };
    let t = timeline::timeline(&inv, &api()).unwrap();
    let view =
        confighistory::plugin::model::TimelineRevisionView { namespace: NS.into(), workload: api(), revision: t.revisions[1].clone() };
    let rd = timeline::revision_diff(&inv, &api(), Some(1), None, false).unwrap();
    assert!(rd.sources.iter().any(|s| s.source == "secret/db" && s.changed), "{rd:?}");
    let mut texts: Vec<(String, String)> = Vec::new();
    for style in [Style::PLAIN, Style::COLOR] {
        texts.push((format!("history {style:?}"), render::history(&h, now(), style)));
        texts.push((format!("status {style:?}"), render::status(&s, now(), style)));
        texts.push((format!("undo {style:?}"), render::undo(&u, style)));
        texts.push((format!("timeline {style:?}"), render::timeline(&t, now(), style)));
        texts.push((format!("timeline revision {style:?}"), render::timeline_revision(&view, now(), style)));
        texts.push((format!("revision diff {style:?}"), render::revision_diff(&rd, now(), style)));
    }
    let specs = [None, Some("head"), Some("1"), Some("2"), Some("3"), Some("deployment/api@1"), Some("deployment/api@2")];
    for a in specs {
        for b in [None, Some("head"), Some("1")] {
            let d = match build::diff(&inv, "secret/db", a, b, false) {
                Ok(d) => d,
                Err(e) => {
                    texts.push((format!("diff {a:?} {b:?} error"), confighistory::plugin::describe(&e)));
                    continue;
                }
            };
            for style in [Style::PLAIN, Style::COLOR] {
                texts.push((format!("diff {a:?} {b:?} {style:?}"), render::diff(&d, now(), style)));
            }
            for o in outputs() {
                texts.push((format!("diff {a:?} {b:?} {o:?}"), confighistory::plugin::emit("Diff", &d, &[], o).unwrap()));
            }
            texts.push((format!("diff {a:?} {b:?} Debug"), format!("{d:?}")));
        }
    }
    for o in outputs() {
        texts.push((format!("history {o:?}"), confighistory::plugin::emit("History", &h, &[], o.clone()).unwrap()));
        texts.push((format!("status {o:?}"), confighistory::plugin::emit("Status", &s, &[], o.clone()).unwrap()));
        texts.push((format!("undo {o:?}"), confighistory::plugin::emit("Undo", &u, &[], o.clone()).unwrap()));
        texts.push((format!("timeline {o:?}"), confighistory::plugin::emit("Timeline", &t, &[], o.clone()).unwrap()));
        texts.push((format!("timeline revision {o:?}"), confighistory::plugin::emit("TimelineRevision", &view, &[], o.clone()).unwrap()));
        texts.push((format!("revision diff {o:?}"), confighistory::plugin::emit("RevisionDiff", &rd, &[], o).unwrap()));
    }
    texts.push(("timeline Debug".into(), format!("{t:?} {view:?} {rd:?}")));
    // Errors, and the Debug of everything the plugin holds.
    for (a, b) in [(Some("9"), None), (Some("zzzz"), None), (Some("deployment/api@7"), None), (Some(CANARY), None)] {
        let e = build::diff(&inv, "secret/db", a, b, false).unwrap_err();
        let text = confighistory::plugin::describe(&e);
        // The canary given as a spec is the user's own text; any other error must not hold it.
        if a != Some(CANARY) {
            texts.push((format!("diff error {a:?}"), text));
        }
    }
    texts.push(("history error".into(), build::history(&inv, "secret/nope").unwrap_err().to_string()));
    texts.push(("inventory Debug".into(), format!("{inv:?}")));
    texts.push(("snaps Debug".into(), format!("{:?}", inv.snaps())));
    texts.push(("history Debug".into(), format!("{h:?} {s:?} {u:?}")));
    for (what, text) in &texts {
        assert_no_canary(what, text);
    }
    assert!(texts.len() > 100, "{}", texts.len());

    // With --show-values the value is there, in human and JSON output.
    let shown = build::diff(&inv, "secret/db", Some("2"), Some("3"), true).unwrap();
    assert!(render::diff(&shown, now(), Style::PLAIN).contains(&format!("-{CANARY}")), "the old password shown");
    assert!(machine("Diff", &shown, Output::Json).contains(&format!("\"-{CANARY}\"")));
    // Unchanged keys' values are not printed even then (a diff shows changes).
    let shown = build::diff(&inv, "secret/db", Some("3"), Some("3"), true).unwrap();
    assert_no_canary("diff 3 3 --show-values", &render::diff(&shown, now(), Style::PLAIN));
}

/// A user who may not read Secrets is told so and what to do; nothing is guessed.
#[test]
fn secrets_the_user_cannot_read_are_said_so() {
    let mut inv = secret_inventory();
    let why = "you may not list Secrets in namespace shop (secrets is forbidden); ask for get and list on secrets there";
    inv.snapshots.retain(|s| s["kind"] != "Secret");
    inv.sources.remove("secret/db");
    inv.secret_contents.clear();
    inv.secrets_unreadable = Some(why.into());
    assert_eq!(build::history(&inv, "secret/db").unwrap_err().to_string(), why);
    assert_eq!(build::diff(&inv, "secret/db", None, None, false).unwrap_err().to_string(), why);
    let s = build::status(&inv, &api()).unwrap();
    assert_eq!(s.secrets_unreadable.as_deref(), Some(why));
    let text = render::status(&s, now(), Style::PLAIN);
    assert!(text.contains(&format!("note: {why}")) && text.contains("unknown: you may not read Secrets here"), "{text}");
    assert!(!text.contains("snapshot deleted"), "{text}");
    // An undo to a revision using a Secret is refused: whether its snapshot exists is unknown.
    let w = inv.workload(&api()).unwrap();
    let (rev, t) = build::undo_target(&w, 0).unwrap();
    let err = build::check_secrets_readable(&inv, &build::revision_config(&inv, w.kind, Some(rev), &t)).unwrap_err().to_string();
    assert!(err.contains("cannot check the Secret snapshots revision 2 uses") && err.contains(why), "{err}");
    // ConfigMap views are not affected.
    assert!(
        build::history(&inv, SOURCE).is_ok()
            && build::check_secrets_readable(&inv, &build::revision_config(&inv, w.kind, Some(rev), &json!({}))).is_ok()
    );
}

#[test]
fn sources_are_named_with_their_kind() {
    use confighistory::model::ids::{SourceId, SourceKind};
    let secret = |n: &str| SourceId::new(SourceKind::Secret, n);
    assert_eq!(build::parse_source("db").unwrap(), SourceId::configmap("db"));
    assert_eq!(build::parse_source("configmap/db").unwrap(), SourceId::configmap("db"));
    assert_eq!(build::parse_source("cm/db").unwrap(), SourceId::configmap("db"));
    assert_eq!(build::parse_source("secret/db").unwrap(), secret("db"));
    assert_eq!(build::parse_source("secrets/db").unwrap(), secret("db"));
    for bad in ["secret/", "secret/../x", "deployment/db", "secret/a/b", "Db"] {
        assert!(build::parse_source(bad).unwrap_err().to_string().contains("is not a valid"), "{bad}");
    }
    assert_eq!(build::object_name(SourceKind::Secret, "db-x"), "secret/db-x");
    // `list`: Secret snapshots count for their source, named secret/NAME.
    let snap = json!({"kind": "Secret", "metadata": {"namespace": NS, "name": "db-aaaa", "labels": {"confighistory.io/hash": "aaaa"},
        "annotations": {"confighistory.io/source-name": "db"}}});
    let sources = BTreeMap::from([(
        (NS.to_owned(), "secret/db".to_owned()),
        Some(json!({"kind": "Secret", "metadata": {"name": "db", "annotations": {"confighistory.io/head": "aaaa"}}})),
    )]);
    let w = json!({"metadata": {"namespace": NS, "name": "api", "annotations": {"confighistory.io/pins": r#"{"secret/db":"aaaa"}"#}}});
    let list = build::sources(Some(NS), &[snap], &sources, &[w]);
    let row = &list.sources[0];
    assert_eq!((row.name.as_str(), row.snapshots, row.workloads, row.behind), ("secret/db", 1, 1, 0));
}

#[test]
fn show_values_is_a_diff_flag_and_secret_names_are_checked_offline() {
    let out = offline(&["diff", "secret/../db"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not a valid"));
    // Accepted by the parser: the error is the missing kubeconfig, after parsing.
    let out = offline(&["diff", "secret/db", "--show-values"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("unexpected argument") && out.status.code() == Some(2), "{err}");
    assert!(String::from_utf8_lossy(&offline(&["diff", "--help"]).stdout).contains("--show-values"));
}
