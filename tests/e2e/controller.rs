//! The controller loops on the real control plane (docs/behaviour.md §7–9, §11.2, 6, 8, 10, 11, 12):
//! propagation after the settle window, adoption at install, GC, rate limits and leader failover.
//!
//! The shared server runs with `--settle 2 --resync-interval 5`. Tests that need controllers of
//! their own (failover) label their namespace with [`CONTROLLER_LABEL`], which the shared
//! server's loops skip, and start `confighistory controller` processes for it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::apps::{configmap as config, Workload};
use crate::support::confighistory::{webhook, CONTROLLER_LABEL, NAMESPACE};
use crate::support::{cluster, free_port, repo_root, wait_for, wait_for_value, Cluster, Revision, TestNamespace};

const SOURCE_NAME: &str = "confighistory.io/source-name";
const PROPAGATED: &str = "confighistory.io/propagated";
const HEAD: &str = "confighistory.io/head";

/// A Deployment whose container mounts every source (volume `v<i>` at /etc/<source>).
fn deployment(name: &str, image: &str, sources: &[&str]) -> Workload {
    let mut workload = Workload::deployment(name, image);
    for (i, source) in sources.iter().enumerate() {
        workload = workload.configmap_volume(&format!("v{i}"), source, &format!("/etc/{source}"));
    }
    workload
}

fn annotation(ns: &TestNamespace, kind: &str, name: &str, key: &str) -> Option<String> {
    ns.get_json(kind, name).and_then(|o| o["metadata"]["annotations"][key].as_str().map(str::to_owned))
}

/// Waits until the Deployment's history has `n` revisions and returns it.
#[track_caller]
fn history_len(ns: &TestNamespace, deployment: &str, n: usize, timeout: Duration) -> Vec<Revision> {
    wait_for_value(&format!("{deployment} to have {n} revisions"), timeout, || {
        let h = ns.history_of(deployment);
        (h.len() == n).then_some(h)
    })
}

/// Waits until the source records its current head as propagated.
#[track_caller]
fn propagated(ns: &TestNamespace, source: &str, timeout: Duration) {
    wait_for(&format!("{source} to record its change as propagated"), timeout, || {
        let head = annotation(ns, "configmap", source, HEAD);
        head.is_some() && annotation(ns, "configmap", source, PROPAGATED) == head
    });
}

fn setup(prefix: &str) -> Option<(&'static Cluster, TestNamespace)> {
    let cluster = cluster()?;
    webhook(cluster);
    Some((cluster, TestNamespace::new(cluster, prefix)))
}

/// docs/behaviour.md §11.2: a config-only edit gives exactly one new revision (same image, new config) after
/// the settle window; undo brings the old config back.
#[test]
fn a_config_only_edit_gives_one_new_revision_and_undo_restores_the_old_config() {
    let Some((_, ns)) = setup("ctl-edit") else { return };
    ns.accepts(&config("app-config", &[("mode", "a")]));
    ns.accepts(&deployment("app", "registry.example/app:1.0", &["app-config"]).yaml());
    history_len(&ns, "app", 1, Duration::from_secs(30));

    let edited = Instant::now();
    ns.accepts(&config("app-config", &[("mode", "b")]));
    let history = history_len(&ns, "app", 2, Duration::from_secs(30));
    eprintln!("MEASURE edit-to-revision: {:.2}s (settle window 2 s)", edited.elapsed().as_secs_f64());
    assert_eq!(history[1].image, "registry.example/app:1.0");
    assert_eq!(history[1].config("app-config").unwrap()["mode"], "b");
    assert_ne!(history[0].snapshots["app-config"], history[1].snapshots["app-config"]);
    propagated(&ns, "app-config", Duration::from_secs(10));
    // Not before the window (2 s in the suite). changed-at has milliseconds, but the ReplicaSet's
    // creationTimestamp is truncated to whole seconds: compare at the second.
    let changed_at = annotation(&ns, "configmap", "app-config", "confighistory.io/changed-at").expect("changed-at");
    let rs = ns.get_json("replicaset", &history[1].owner).expect("the new ReplicaSet");
    let ms = |s: &str| confighistory::controller::propagate::parse_time_ms(s).expect("RFC 3339");
    let waited_s = ms(rs["metadata"]["creationTimestamp"].as_str().unwrap()) / 1000 - ms(&changed_at) / 1000;
    assert!(waited_s >= 2, "propagated {waited_s} s (whole seconds) after the change, inside the window");
    // Once: no further revision.
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(ns.history_of("app").len(), 2);
    let deployment = ns.get_json("deployment", "app").unwrap();
    assert!(deployment["metadata"]["annotations"]["confighistory.io/propagate"].is_null(), "the webhook consumed the trigger");

    let events = ns.kubectl(&["get", "events", "-o", "json"]).expect_success().json();
    assert!(
        events["items"].as_array().unwrap().iter().any(|e| e["reason"] == "ConfigPropagated" && e["involvedObject"]["name"] == "app"),
        "an Event on the workload"
    );

    ns.rollout_undo("app", None);
    let last = ns.history_of("app").pop().unwrap();
    assert_eq!(last.image, "registry.example/app:1.0");
    assert_eq!(last.config("app-config").unwrap()["mode"], "a");
}

/// docs/behaviour.md §11.6: two sources edited in one apply give one new revision.
#[test]
fn two_sources_edited_in_one_apply_give_one_revision() {
    let Some((_, ns)) = setup("ctl-two") else { return };
    ns.accepts(&format!("{}---\n{}", config("one", &[("a", "1")]), config("two", &[("b", "1")])));
    ns.accepts(&deployment("app", "registry.example/app:1.0", &["one", "two"]).yaml());
    history_len(&ns, "app", 1, Duration::from_secs(30));

    ns.accepts(&format!("{}---\n{}", config("one", &[("a", "2")]), config("two", &[("b", "2")])));
    let history = history_len(&ns, "app", 2, Duration::from_secs(30));
    propagated(&ns, "one", Duration::from_secs(10));
    propagated(&ns, "two", Duration::from_secs(10));
    std::thread::sleep(Duration::from_secs(3));
    let history_after = ns.history_of("app");
    assert_eq!(history_after.len(), 2, "{history_after:#?}");
    assert_eq!(history[1].config("one").unwrap()["a"], "2");
    assert_eq!(history[1].config("two").unwrap()["b"], "2");
}

/// The incident: ConfigMap applied, Deployment with the new image applied 2 s later. History
/// holds no revision with the old image and the new config; undo gives old image, old config.
#[test]
fn configmap_then_deployment_two_seconds_later_never_mixes_image_and_config() {
    let Some((_, ns)) = setup("ctl-incident") else { return };
    // The default window is 10 s; the suite runs with 2 s, so give this namespace the default.
    ns.cluster.kubectl(&["annotate", "namespace", &ns.name, "confighistory.io/settle=10"]).expect_success();
    ns.accepts(&config("pricing-config", &[("discount_rules_path", "/etc/rules")]));
    ns.accepts(&deployment("pricing", "registry.example/pricing:4.11", &["pricing-config"]).yaml());
    history_len(&ns, "pricing", 1, Duration::from_secs(30));

    ns.accepts(&config("pricing-config", &[("rules.discount_path", "/etc/rules")]));
    std::thread::sleep(Duration::from_secs(2));
    ns.accepts(&deployment("pricing", "registry.example/pricing:4.12", &["pricing-config"]).yaml());
    propagated(&ns, "pricing-config", Duration::from_secs(30));
    std::thread::sleep(Duration::from_secs(2));
    let history = ns.history_of("pricing");
    let summary: Vec<(String, Vec<String>)> =
        history.iter().map(|r| (r.image.clone(), r.config("pricing-config").unwrap().keys().cloned().collect())).collect();
    assert_eq!(
        summary,
        [
            ("registry.example/pricing:4.11".to_owned(), vec!["discount_rules_path".to_owned()]),
            ("registry.example/pricing:4.12".to_owned(), vec!["rules.discount_path".to_owned()]),
        ]
    );
    ns.rollout_undo("pricing", None);
    let last = ns.history_of("pricing").pop().unwrap();
    assert_eq!(last.image, "registry.example/pricing:4.11");
    assert!(last.config("pricing-config").unwrap().contains_key("discount_rules_path"));
}

/// docs/behaviour.md §11.11: a workload rolled back after a config change is not dragged forward; a restart or
/// `set image` keeps the undone config; the next release takes the head again.
#[test]
fn an_undone_config_is_held_through_restarts_until_the_next_release() {
    let Some((_, ns)) = setup("ctl-held") else { return };
    ns.accepts(&config("app-config", &[("mode", "a")]));
    ns.accepts(&deployment("app", "registry.example/app:1.0", &["app-config"]).yaml());
    history_len(&ns, "app", 1, Duration::from_secs(30));
    ns.accepts(&config("app-config", &[("mode", "b")]));
    history_len(&ns, "app", 2, Duration::from_secs(30));
    propagated(&ns, "app-config", Duration::from_secs(10));

    ns.rollout_undo("app", None);
    let config_of_last = |ns: &TestNamespace| ns.history_of("app").pop().unwrap().config("app-config").unwrap()["mode"].clone();
    assert_eq!(config_of_last(&ns), "a");
    assert_eq!(annotation(&ns, "deployment", "app", "confighistory.io/held").as_deref(), Some("app-config"));
    std::thread::sleep(Duration::from_secs(6));
    assert_eq!(config_of_last(&ns), "a", "not dragged forward by propagation");

    ns.kubectl(&["rollout", "restart", "deployment/app"]).expect_success();
    ns.wait_observed("deployment", "app");
    assert_eq!(config_of_last(&ns), "a", "a restart keeps the held config");
    ns.kubectl(&["set", "image", "deployment/app", "app=registry.example/app:1.1"]).expect_success();
    ns.wait_observed("deployment", "app");
    let last = ns.history_of("app").pop().unwrap();
    assert_eq!((last.image.as_str(), last.config("app-config").unwrap()["mode"].as_str()), ("registry.example/app:1.1", "a"));
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(config_of_last(&ns), "a");

    ns.accepts(&deployment("app", "registry.example/app:1.2", &["app-config"]).yaml());
    assert_eq!(config_of_last(&ns), "b", "a release takes the head");
}

/// docs/behaviour.md §11.10: installed into a namespace whose Deployment already runs unpinned: nothing
/// restarts, the controller adopts the running config; the next release and an undo bring back
/// the old image with the old config.
#[test]
fn installing_restarts_nothing_and_the_first_release_can_be_undone() {
    let Some(cluster) = cluster() else { return };
    webhook(cluster);
    // audit mode: confighistory neither rewrites nor propagates here yet.
    let ns = TestNamespace::with_labels(cluster, "ctl-install", &[("confighistory.io/mode", "audit")]);
    ns.accepts(&config("app-config", &[("discount_rules_path", "/etc/rules")]));
    ns.accepts(&deployment("app", "registry.example/app:4.11", &["app-config"]).yaml());
    let before = history_len(&ns, "app", 1, Duration::from_secs(30));
    assert_eq!(before[0].snapshots["app-config"], "app-config", "unpinned");

    // "Install": the namespace switches to rewrite (after the controller has had a moment to see
    // the workload in audit mode: it was admitted unpinned on purpose, not during an outage).
    std::thread::sleep(Duration::from_secs(1));
    cluster.kubectl(&["label", "namespace", &ns.name, "confighistory.io/mode=rewrite", "--overwrite"]).expect_success();
    // Adoption at the next resync (5 s in the suite): the running content gets a snapshot with an
    // adoption record, and no pod template changes.
    let adopted = wait_for_value("the running config to be adopted", Duration::from_secs(30), || {
        ns.list_json("configmaps").into_iter().find(|cm| {
            cm["metadata"]["annotations"][SOURCE_NAME] == "app-config"
                && cm["metadata"]["annotations"]["confighistory.io/adopted-templates"].is_string()
        })
    });
    assert_eq!(adopted["data"]["discount_rules_path"], "/etc/rules");
    std::thread::sleep(Duration::from_secs(6));
    let after = ns.history_of("app");
    assert_eq!(after, before, "installing restarted nothing");

    // The next release: config and image.
    ns.accepts(&config("app-config", &[("rules.discount_path", "/etc/rules")]));
    ns.accepts(&deployment("app", "registry.example/app:4.12", &["app-config"]).yaml());
    history_len(&ns, "app", 2, Duration::from_secs(30));
    ns.rollout_undo("app", None);
    let last = ns.history_of("app").pop().unwrap();
    assert_eq!(last.image, "registry.example/app:4.11");
    assert!(last.config("app-config").unwrap().contains_key("discount_rules_path"), "{last:#?}");
}

/// The first release after leaving audit mode can be undone: a team trials confighistory in
/// audit mode, switches the namespace to rewrite and ships an image-only release at once (no
/// resync pass has adopted the running template yet); a config edit rolls out later. `kubectl
/// rollout undo --to-revision=1` brings back 1.25 with the config 1.25 ran with, not the current
/// one (docs/behaviour.md §9.1: the release records its predecessor's template on the snapshot
/// it pins).
#[test]
fn the_first_release_after_audit_mode_can_be_undone_to_the_config_its_predecessor_ran_with() {
    let Some(cluster) = cluster() else { return };
    webhook(cluster);
    let ns = TestNamespace::with_labels(cluster, "ctl-after-audit", &[("confighistory.io/mode", "audit")]);
    ns.accepts(&config("app-config", &[("discount_rules_path", "/etc/rules")]));
    ns.accepts(&deployment("app", "registry.example/app:1.25", &["app-config"]).yaml());
    let first = history_len(&ns, "app", 1, Duration::from_secs(30));
    assert_eq!(first[0].snapshots["app-config"], "app-config", "unpinned in audit mode");

    cluster.kubectl(&["label", "namespace", &ns.name, "confighistory.io/mode=rewrite", "--overwrite"]).expect_success();
    std::thread::sleep(Duration::from_millis(500)); // the namespace watch delivers the label
    ns.accepts(&deployment("app", "registry.example/app:1.26", &["app-config"]).yaml());
    let second = history_len(&ns, "app", 2, Duration::from_secs(30));
    assert_ne!(second[1].snapshots["app-config"], "app-config", "the release is pinned: {second:#?}");

    ns.accepts(&config("app-config", &[("rules.discount_path", "/etc/rules")]));
    let third = history_len(&ns, "app", 3, Duration::from_secs(60));
    assert!(third[2].config("app-config").unwrap().contains_key("rules.discount_path"), "{third:#?}");

    ns.rollout_undo("app", Some(1));
    let last = wait_for_value("the undo's revision", Duration::from_secs(30), || {
        ns.history_of("app").pop().filter(|r| r.image == "registry.example/app:1.25")
    });
    let config = last.config("app-config").unwrap_or_else(|| panic!("{last:#?}"));
    assert!(config.contains_key("discount_rules_path") && !config.contains_key("rules.discount_path"), "1.25 with its config: {last:#?}");
}

/// docs/behaviour.md §11.12: after a propagated edit, `kubectl apply --server-side` of the same manifests
/// succeeds without a conflict (the controller never owns pod-template fields).
#[test]
fn server_side_apply_after_a_propagated_edit_does_not_conflict() {
    let Some((_, ns)) = setup("ctl-ssa") else { return };
    let cfg_a = config("app-config", &[("mode", "a")]);
    let app = deployment("app", "registry.example/app:1.0", &["app-config"]).yaml();
    ns.apply_with(&cfg_a, &["--server-side"]).expect("server-side apply");
    ns.apply_with(&app, &["--server-side"]).expect("server-side apply");
    history_len(&ns, "app", 1, Duration::from_secs(30));
    ns.apply_with(&config("app-config", &[("mode", "b")]), &["--server-side"]).expect("server-side apply");
    history_len(&ns, "app", 2, Duration::from_secs(30));
    propagated(&ns, "app-config", Duration::from_secs(10));

    let again = ns.apply_with(&app, &["--server-side"]);
    let again = again.unwrap_or_else(|out| panic!("server-side apply conflicted after propagation:\n{}", out.describe()));
    assert!(!again.stderr.contains("conflict"), "{}", again.describe());
    let history = ns.history_of("app");
    assert_eq!(history.len(), 2, "re-applying the same manifests adds no revision: {history:#?}");
    assert_eq!(history[1].config("app-config").unwrap()["mode"], "b");
}

/// `confighistory gc` as confighistory's own identity (the chart's ServiceAccount).
fn run_gc(cluster: &Cluster, ns: &str, extra: &[&str]) -> String {
    let (ok, stdout, stderr) = gc_as(&cluster.webhook_kubeconfig, ns, extra);
    assert!(ok, "gc failed:\n{stdout}\n{stderr}");
    stdout
}

fn gc_as(kubeconfig: &std::path::Path, ns: &str, extra: &[&str]) -> (bool, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_confighistory"))
        .args(["gc", "--only-namespace", ns, "--gc-keep", "1", "--gc-grace", "3"])
        .args(extra)
        .env("KUBECONFIG", kubeconfig)
        .output()
        .expect("run confighistory gc");
    (output.status.success(), String::from_utf8_lossy(&output.stdout).into_owned(), String::from_utf8_lossy(&output.stderr).into_owned())
}

fn verdict_of<'a>(report: &'a str, ns: &str, name: &str) -> &'a str {
    let needle = format!(" {ns}/{name}:");
    report.lines().find(|l| l.contains(&needle)).unwrap_or_else(|| panic!("{name} not in the report:\n{report}"))
}

/// docs/behaviour.md §11.8: deleting a referenced snapshot is denied; GC removes a snapshot only after history
/// stops reaching it and the grace period passed; never a referenced one, never a head.
#[test]
fn gc_removes_a_snapshot_only_after_history_lets_go_and_the_grace_period() {
    let Some((cluster, ns)) = setup("ctl-gc") else { return };
    // No kubelet here: only a Deployment with no replicas completes its rollouts, and only a
    // complete rollout trims old ReplicaSets.
    let app = |image: &str| deployment("app", image, &["app-config"]).spec("revisionHistoryLimit: 1").replicas(0).yaml();
    ns.accepts(&config("app-config", &[("v", "a")]));
    ns.accepts(&app("registry.example/app:1.0"));
    let first = history_len(&ns, "app", 1, Duration::from_secs(30))[0].snapshots["app-config"].clone();
    ns.accepts(&config("app-config", &[("v", "b")]));
    let second = history_len(&ns, "app", 2, Duration::from_secs(30))[1].snapshots["app-config"].clone();

    let refused = ns.kubectl(&["delete", "configmap", &first]);
    assert!(!refused.success, "a snapshot history still reaches is not deleted:\n{}", refused.describe());

    ns.accepts(&config("app-config", &[("v", "c")]));
    wait_for("revision 1 to be trimmed", Duration::from_secs(30), || {
        let h = ns.history_of("app");
        h.len() == 2 && h[0].snapshots["app-config"] == second
    });
    let third = ns.history_of("app")[1].snapshots["app-config"].clone();

    let dry = run_gc(cluster, &ns.name, &["--dry-run"]);
    eprintln!("{dry}");
    assert!(verdict_of(&dry, &ns.name, &first).starts_with("keep"), "grace period first:\n{dry}");
    assert!(verdict_of(&dry, &ns.name, &second).contains("referenced by ReplicaSet/"), "{dry}");
    assert!(verdict_of(&dry, &ns.name, &third).contains("the head of app-config"), "{dry}");
    assert!(ns.get_json("configmap", &first).is_some());

    // A sweep run by a person (the admin here) may read, but not record last use: snapshot
    // protection keeps snapshot metadata for confighistory's identity. It says how to run it.
    let (ok, stdout, _) = gc_as(&cluster.kubeconfig, &ns.name, &[]);
    assert!(!ok, "{stdout}");
    assert!(stdout.contains("run `confighistory gc` as confighistory's ServiceAccount"), "{stdout}");
    assert!(ns.get_json("configmap", &first).is_some());

    // The first sweep records when it found the snapshot unused; one after the grace period deletes.
    run_gc(cluster, &ns.name, &[]);
    assert!(annotation(&ns, "configmap", &first, "confighistory.io/last-used").is_some());
    std::thread::sleep(Duration::from_secs(4));
    let report = run_gc(cluster, &ns.name, &[]);
    eprintln!("{report}");
    assert!(verdict_of(&report, &ns.name, &first).starts_with("deleted"), "{report}");
    assert!(ns.get_json("configmap", &first).is_none());
    assert!(ns.get_json("configmap", &second).is_some(), "referenced by a ReplicaSet");
    assert!(ns.get_json("configmap", &third).is_some(), "the head");
    // Undo still works with what is left.
    ns.rollout_undo("app", None);
    assert_eq!(ns.history_of("app").pop().unwrap().config("app-config").unwrap()["v"], "b");
}

/// docs/behaviour.md §8: a snapshot being pinned is never swept. A snapshot GC recorded unused,
/// past its grace period (a sweep would delete it now), pinned again by a request naming it or by a
/// release after a revert: the admission removes GC's record, so its resourceVersion moves and a
/// sweep that listed it before fails its delete; later sweeps keep it. Then GC runs in a loop while
/// releases revert between three contents: every pinned snapshot exists after every round, and no
/// sweep fails (one that listed a snapshot just before its source went back to that content meets
/// snapshot protection's refusal and keeps it). The first part failed before the fix (the record
/// stayed, the resourceVersion too).
#[test]
fn a_snapshot_being_pinned_is_never_swept() {
    let Some((cluster, ns)) = setup("ctl-gcpin") else { return };
    const LAST_USED: &str = "confighistory.io/last-used";
    // No kubelet: replicas 0 completes rollouts; history limit 0 trims old ReplicaSets at once.
    let app = |image: &str, cm: &str| deployment("app", image, &[cm]).spec("revisionHistoryLimit: 0").replicas(0).yaml();
    let pinned = || ns.current_template("deployment", "app").snapshots["app-config"].clone();
    let rv = |name: &str| ns.get_json("configmap", name).map(|o| o["metadata"]["resourceVersion"].as_str().unwrap_or_default().to_owned());
    let release = |v: &str, image: &str| {
        ns.accepts(&config("app-config", &[("v", v)]));
        ns.accepts(&app(image, "app-config"));
        wait_for("the old ReplicaSets to be trimmed", Duration::from_secs(30), || {
            let sets = ns.list_json("replicasets");
            sets.len() == 1 && sets[0]["spec"]["template"]["spec"]["containers"][0]["image"] == image
        });
        pinned()
    };
    // Past the grace period (3 s) on a sweep's record: the next sweep deletes it.
    let about_to_be_swept = |name: &str| {
        run_gc(cluster, &ns.name, &[]);
        assert!(annotation(&ns, "configmap", name, LAST_USED).is_some(), "{name}: recorded unused");
        std::thread::sleep(Duration::from_secs(4));
        let dry = run_gc(cluster, &ns.name, &["--dry-run"]);
        assert!(verdict_of(&dry, &ns.name, name).starts_with("delete"), "{dry}");
        rv(name).expect("still there")
    };

    let first = release("a", "registry.example/app:1.0");
    // creationTimestamps have whole seconds: the newest-N rule needs these two apart.
    std::thread::sleep(Duration::from_millis(1100));
    let second = release("b", "registry.example/app:2.0");
    assert_ne!(first, second);

    // A request naming the old snapshot (docs/behaviour.md §6.2.3).
    let listed = about_to_be_swept(&first);
    ns.accepts(&app("registry.example/app:1.0", &first));
    assert_eq!(pinned(), first);
    assert_eq!(annotation(&ns, "configmap", &first, LAST_USED), None, "the admission removed GC's record");
    assert_ne!(rv(&first).as_deref(), Some(listed.as_str()), "a delete with the listed resourceVersion fails");

    // A release after a revert to the old content (6.2 rule 2: the snapshot exists, reused).
    let third = release("c", "registry.example/app:3.0");
    let listed = about_to_be_swept(&second);
    assert_eq!(release("b", "registry.example/app:4.0"), second);
    assert_eq!(annotation(&ns, "configmap", &second, LAST_USED), None, "the admission removed GC's record");
    assert_ne!(rv(&second).as_deref(), Some(listed.as_str()));
    let report = run_gc(cluster, &ns.name, &[]);
    assert!(verdict_of(&report, &ns.name, &second).starts_with("keep"), "{report}");

    // GC in a loop while releases revert between the three contents.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sweeper = {
        let (stop, kubeconfig, name) = (stop.clone(), cluster.webhook_kubeconfig.clone(), ns.name.clone());
        std::thread::spawn(move || {
            let (mut sweeps, mut deleted, mut raced) = (0, 0, 0);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let (ok, stdout, stderr) = gc_as(&kubeconfig, &name, &[]);
                assert!(ok, "a sweep failed while admissions pinned:\n{stdout}\n{stderr}");
                sweeps += 1;
                deleted += stdout.lines().filter(|l| l.starts_with("deleted")).count();
                raced += stdout.lines().filter(|l| l.contains("since this sweep listed it")).count();
            }
            (sweeps, deleted, raced)
        })
    };
    let contents = [("a", &first), ("b", &second), ("c", &third)];
    let started = Instant::now();
    for round in 0..12 {
        let (v, snapshot) = contents[round % 3];
        let got = release(v, &format!("registry.example/app:r{round}"));
        assert_eq!(&got, snapshot, "round {round}: same content, same snapshot");
        assert!(ns.get_json("configmap", &got).is_some(), "round {round}: {got} is pinned and missing");
        std::thread::sleep(Duration::from_millis(300 * (round as u64 % 4)));
        assert!(ns.get_json("configmap", &pinned()).is_some(), "round {round}: the pinned snapshot is missing");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (sweeps, deleted, raced) = sweeper.join().expect("sweeper");
    eprintln!(
        "MEASURE 12 reverting releases under {sweeps} concurrent sweeps: {:.1}s, {deleted} snapshots deleted (and made again), \
         {raced} deletes lost to a pin",
        started.elapsed().as_secs_f64()
    );
    assert!(sweeps >= 3, "the sweeps ran alongside ({sweeps})");
    for volume in ns
        .list_json("replicasets")
        .iter()
        .chain(ns.list_json("deployments").iter())
        .flat_map(|o| o["spec"]["template"]["spec"]["volumes"].as_array().cloned().unwrap_or_default())
    {
        let cm = volume["configMap"]["name"].as_str().unwrap_or_default();
        assert!(ns.get_json("configmap", cm).is_some(), "{cm} is referenced and missing");
    }
}

/// A source shared by 50 Deployments: one edit rolls them out within the rate limit (2 per second
/// per namespace after a burst of 5), not all at once.
#[test]
fn an_edit_of_a_source_shared_by_fifty_deployments_is_rate_limited() {
    let Some((_, ns)) = setup("ctl-fifty") else { return };
    ns.accepts(&config("shared", &[("v", "1")]));
    let all: Vec<String> =
        (0..50).map(|i| deployment(&format!("app-{i}"), "registry.example/app:1.0", &["shared"]).replicas(0).yaml()).collect();
    ns.accepts(&all.join("---\n"));
    wait_for("50 first revisions", Duration::from_secs(120), || replica_sets(&ns, "1").len() == 50);

    let edited = Instant::now();
    ns.accepts(&config("shared", &[("v", "2")]));
    let mut first_seen: BTreeMap<String, f64> = BTreeMap::new();
    wait_for("50 second revisions", Duration::from_secs(180), || {
        for name in replica_sets(&ns, "2") {
            first_seen.entry(name).or_insert_with(|| edited.elapsed().as_secs_f64());
        }
        first_seen.len() == 50
    });
    let mut times: Vec<f64> = first_seen.values().copied().collect();
    times.sort_by(f64::total_cmp);
    eprintln!("MEASURE fifty: first {:.1}s, last {:.1}s after the edit", times[0], times[49]);
    // burst 5, then 2/s: the last one no sooner than ~22 s after the first.
    assert!(times[49] - times[0] >= 15.0, "rolled out too fast for the limit: {times:?}");
    let early = times.iter().filter(|t| **t <= times[0] + 2.0).count();
    assert!(early <= 12, "{early} within 2 s of the first: {times:?}");
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(replica_sets(&ns, "3").len(), 0, "one revision each");
}

/// Owners of ReplicaSets with the given revision.
fn replica_sets(ns: &TestNamespace, revision: &str) -> Vec<String> {
    ns.list_json("replicasets")
        .into_iter()
        .filter(|rs| rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == revision)
        .map(|rs| rs["metadata"]["ownerReferences"][0]["name"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// A `confighistory controller` process of a test's own, run through `tests/e2e/run-webhook`
/// (stopped when the test process goes away).
struct ControllerProcess {
    wrapper: Child,
    stdin: Option<ChildStdin>,
    log: PathBuf,
}

impl ControllerProcess {
    fn start(cluster: &Cluster, pod_name: &str, lease: &str, selector: &str) -> ControllerProcess {
        let log = cluster.state_dir.join(format!("logs/controller-{pod_name}-{}.log", std::process::id()));
        let health = format!("127.0.0.1:{}", free_port("127.0.0.1"));
        let mut wrapper = Command::new(repo_root().join("tests/e2e/run-webhook"))
            .arg(&log)
            .arg("--")
            .arg(env!("CARGO_BIN_EXE_confighistory"))
            .args(["controller", "--health-listen", &health, "--namespace", NAMESPACE])
            .args(["--identity", crate::support::WEBHOOK_IDENTITY, "--settle", "2", "--resync-interval", "5"])
            .args(["--lease-name", lease, "--controller-namespace-selector", selector])
            .env("KUBECONFIG", &cluster.webhook_kubeconfig)
            .env("POD_NAME", pod_name)
            .env("CONFIGHISTORY_E2E_DIR", &cluster.state_dir)
            .env("RUST_LOG", "info")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start a controller");
        let stdin = wrapper.stdin.take();
        ControllerProcess { wrapper, stdin, log }
    }

    /// The controller's pid (the wrapper's child).
    fn pid(&self) -> Option<u32> {
        let parent = self.wrapper.id();
        std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            let ppid: u32 = stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()?;
            (ppid == parent).then_some(pid)
        })
    }

    /// SIGKILL: no chance to give the Lease up.
    fn kill_hard(&mut self) {
        let pid = wait_for_value("the controller's pid", Duration::from_secs(5), || self.pid());
        Command::new("kill").args(["-KILL", &pid.to_string()]).status().expect("kill");
    }
}

impl Drop for ControllerProcess {
    fn drop(&mut self) {
        drop(self.stdin.take()); // the wrapper stops the controller
        let _ = self.wrapper.wait();
        if std::thread::panicking() {
            eprintln!("controller log {}:\n{}", self.log.display(), std::fs::read_to_string(&self.log).unwrap_or_default());
        }
    }
}

fn lease_holder(cluster: &Cluster, lease: &str) -> String {
    let out = cluster.kubectl(&["get", "lease", lease, "-n", NAMESPACE, "-o", "jsonpath={.spec.holderIdentity}"]);
    if out.success {
        out.stdout.trim().to_owned()
    } else {
        String::new()
    }
}

/// Two controller processes; the leader is killed; the other one takes over and propagates the
/// next edit.
#[test]
fn another_replica_takes_over_when_the_leader_dies() {
    let Some(cluster) = cluster() else { return };
    webhook(cluster);
    let ns = TestNamespace::with_labels(cluster, "ctl-failover", &[]);
    cluster.kubectl(&["label", "namespace", &ns.name, &format!("{CONTROLLER_LABEL}={}", ns.name)]).expect_success();
    let lease = format!("e2e-{}", ns.name);
    let selector = format!("{CONTROLLER_LABEL}={}", ns.name);

    let mut a = ControllerProcess::start(cluster, "ctl-a", &lease, &selector);
    wait_for("ctl-a to lead", Duration::from_secs(30), || lease_holder(cluster, &lease).starts_with("ctl-a_"));
    let _b = ControllerProcess::start(cluster, "ctl-b", &lease, &selector);

    ns.accepts(&config("app-config", &[("mode", "a")]));
    ns.accepts(&deployment("app", "registry.example/app:1.0", &["app-config"]).yaml());
    history_len(&ns, "app", 1, Duration::from_secs(30));
    ns.accepts(&config("app-config", &[("mode", "b")]));
    history_len(&ns, "app", 2, Duration::from_secs(30));
    propagated(&ns, "app-config", Duration::from_secs(10));

    a.kill_hard();
    let killed = Instant::now();
    ns.accepts(&config("app-config", &[("mode", "c")]));
    let history = history_len(&ns, "app", 3, Duration::from_secs(60));
    eprintln!("MEASURE failover: new revision {:.1}s after the leader was killed", killed.elapsed().as_secs_f64());
    assert!(lease_holder(cluster, &lease).starts_with("ctl-b_"));
    assert_eq!(history[2].config("app-config").unwrap()["mode"], "c");
    propagated(&ns, "app-config", Duration::from_secs(10));
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(ns.history_of("app").len(), 3, "nothing lost, nothing duplicated");
}

/// docs/behaviour.md §10.2: a leader that stops (SIGTERM: a rolling restart) gives its Lease up,
/// so the other replica leads at its next round (every 2 s), not after the lease duration (10 s)
/// that a replica killed outright leaves behind. Its election loop stops first, so it cannot take
/// back the Lease it has just released while it exits.
#[test]
fn a_leader_that_stops_hands_over_at_once() {
    let Some(cluster) = cluster() else { return };
    webhook(cluster);
    let ns = TestNamespace::with_labels(cluster, "ctl-handover", &[]);
    let lease = format!("e2e-{}", ns.name);
    let selector = format!("{CONTROLLER_LABEL}={}", ns.name);
    let a = ControllerProcess::start(cluster, "ctl-a", &lease, &selector);
    wait_for("ctl-a to lead", Duration::from_secs(30), || lease_holder(cluster, &lease).starts_with("ctl-a_"));
    let _b = ControllerProcess::start(cluster, "ctl-b", &lease, &selector);
    std::thread::sleep(Duration::from_secs(3)); // b has read the Lease: it would wait out the duration
    let stopped = Instant::now();
    drop(a); // SIGTERM, and waits for the process to end
    wait_for("ctl-b to lead", Duration::from_secs(30), || lease_holder(cluster, &lease).starts_with("ctl-b_"));
    let after = stopped.elapsed();
    eprintln!("MEASURE handover: ctl-b leads {:.1}s after ctl-a was told to stop", after.as_secs_f64());
    assert!(after < Duration::from_secs(8), "the Lease was released, not left to expire (10 s): {after:?}");
}

/// The time of one GC sweep over 1,000 snapshots (a measurement, not a check: run with
/// `cargo test --test e2e gc_sweep_over -- --ignored --nocapture`).
#[test]
#[ignore]
fn gc_sweep_over_a_thousand_snapshots() {
    let Some((cluster, ns)) = setup("ctl-gc1000") else { return };
    let mut list = Vec::new();
    for i in 0..1000 {
        let source = format!("src-{}", i % 20);
        let content =
            confighistory::model::snapshot::Content { data: BTreeMap::from([("value".to_owned(), format!("{i}"))]), ..Default::default() };
        let name = confighistory::model::snapshot::name(&source, &content.hash(), 0);
        list.push(confighistory::model::snapshot::object(&ns.name, &source, &name, &content, &[]));
    }
    let manifest = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": list}).to_string();
    let created = Instant::now();
    ns.cluster.kubectl_stdin(&["create", "-n", &ns.name, "-f", "-", "-o", "name"], &manifest).expect_success();
    eprintln!("MEASURE created 1000 snapshots in {:.1}s", created.elapsed().as_secs_f64());

    let time = |extra: &[&str]| {
        let start = Instant::now();
        let out = run_gc(cluster, &ns.name, extra);
        (start.elapsed().as_secs_f64(), out)
    };
    let (dry, out) = time(&["--dry-run"]);
    eprintln!("MEASURE gc dry run over 1000 snapshots: {dry:.2}s ({})", out.lines().last().unwrap_or_default());
    let (stamp, out) = time(&[]);
    eprintln!("MEASURE gc sweep recording last use of 1000 snapshots: {stamp:.2}s ({})", out.lines().last().unwrap_or_default());
    std::thread::sleep(Duration::from_secs(4));
    let (delete, out) = time(&[]);
    eprintln!("MEASURE gc sweep deleting: {delete:.2}s ({})", out.lines().last().unwrap_or_default());
    assert_eq!(out.lines().filter(|l| l.starts_with("deleted")).count(), 1000, "sources do not exist: all expire");
}

/// docs/behaviour.md §7 (mechanism): after a propagated edit, a Helm 4 upgrade (server-side apply) of the
/// release does not conflict over the references the webhook re-pinned.
#[test]
fn helm_upgrade_after_a_propagated_edit_does_not_conflict() {
    let Some((cluster, ns)) = setup("ctl-helm") else { return };
    let helm = std::env::var_os("CONFIGHISTORY_HELM").map(PathBuf::from).unwrap_or_else(|| cluster.kubectl.with_file_name("helm"));
    let chart = cluster.state_dir.join(format!("run/ctl-helm-chart-{}", ns.name));
    std::fs::create_dir_all(chart.join("templates")).unwrap();
    std::fs::write(chart.join("Chart.yaml"), "apiVersion: v2\nname: app\nversion: 0.1.0\n").unwrap();
    std::fs::write(chart.join("values.yaml"), "image: registry.example/app:1.0\nmode: a\n").unwrap();
    std::fs::write(chart.join("templates/config.yaml"), config("app-config", &[("mode", "{{ .Values.mode }}")])).unwrap();
    std::fs::write(chart.join("templates/app.yaml"), deployment("app", "{{ .Values.image }}", &["app-config"]).replicas(0).yaml()).unwrap();
    let run = |args: &[&str]| {
        let out = Command::new(&helm)
            .args(args)
            .arg(&chart)
            .args(["-n", &ns.name, "--wait=false"])
            .env("KUBECONFIG", &cluster.kubeconfig)
            .output()
            .expect("run helm");
        let text = format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "helm {args:?} failed:\n{text}");
        text
    };
    run(&["install", "app"]);
    history_len(&ns, "app", 1, Duration::from_secs(30));
    run(&["upgrade", "app", "--set", "mode=b"]);
    let history = history_len(&ns, "app", 2, Duration::from_secs(30));
    assert_eq!(history[1].config("app-config").unwrap()["mode"], "b");
    propagated(&ns, "app-config", Duration::from_secs(10));

    let out = run(&["upgrade", "app", "--set", "mode=b", "--set", "image=registry.example/app:1.1"]);
    assert!(!out.to_lowercase().contains("conflict"), "{out}");
    let last = history_len(&ns, "app", 3, Duration::from_secs(30)).pop().unwrap();
    assert_eq!((last.image.as_str(), last.config("app-config").unwrap()["mode"].as_str()), ("registry.example/app:1.1", "b"));
}

/// docs/behaviour.md §9 (repair): a workload admitted with mutable references while the webhook could not see
/// it gets the propagation trigger and an Event, and is pinned once the webhook sees it again.
/// Workloads that were there before are not touched.
#[test]
fn a_workload_admitted_while_the_webhook_was_away_is_repaired() {
    let Some(cluster) = cluster() else { return };
    webhook(cluster);
    // The webhooks skip namespaces with the exclude label: "the webhook is unreachable".
    let ns = TestNamespace::with_labels(cluster, "ctl-repair", &[(crate::support::EXCLUDE_LABEL, "true")]);
    cluster.kubectl(&["label", "namespace", &ns.name, &format!("{CONTROLLER_LABEL}={}", ns.name)]).expect_success();
    ns.accepts(&config("app-config", &[("mode", "a")]));
    ns.accepts(&deployment("old", "registry.example/app:1.0", &["app-config"]).yaml());
    history_len(&ns, "old", 1, Duration::from_secs(30));
    // The controller starts: "old" is from before, adopted and left alone.
    let lease = format!("e2e-{}", ns.name);
    let _ctl = ControllerProcess::start(cluster, "ctl-repair", &lease, &format!("{CONTROLLER_LABEL}={}", ns.name));
    wait_for("the controller to lead", Duration::from_secs(30), || lease_holder(cluster, &lease).starts_with("ctl-repair_"));
    wait_for("adoption", Duration::from_secs(30), || {
        ns.list_json("configmaps").iter().any(|cm| cm["metadata"]["annotations"]["confighistory.io/adopted-templates"].is_string())
    });

    ns.accepts(&deployment("new", "registry.example/app:1.0", &["app-config"]).yaml());
    wait_for("the repair trigger", Duration::from_secs(30), || {
        annotation(&ns, "deployment", "new", "confighistory.io/propagate").is_some()
    });
    // The webhook is back.
    cluster.kubectl(&["label", "namespace", &ns.name, &format!("{}-", crate::support::EXCLUDE_LABEL)]).expect_success();
    let history = wait_for_value("new to be pinned", Duration::from_secs(60), || {
        let h = ns.history_of("new");
        (h.len() == 2).then_some(h)
    });
    assert_ne!(history[1].snapshots["app-config"], "app-config");
    assert_eq!(history[1].config("app-config").unwrap()["mode"], "a");
    let events = ns.kubectl(&["get", "events", "-o", "json"]).expect_success().json();
    assert!(events["items"].as_array().unwrap().iter().any(|e| e["reason"] == "ConfigRepaired" && e["involvedObject"]["name"] == "new"));
    assert_eq!(ns.history_of("old").len(), 1, "the workload from before was not restarted");
}

/// docs/behaviour.md §7 (missed changes): a source edited while the webhook could not see it has a stale head;
/// the resync re-hashes it and the change is propagated as first seen then.
#[test]
fn a_change_made_while_the_webhook_was_away_is_propagated_after_resync() {
    let Some(cluster) = cluster() else { return };
    webhook(cluster);
    let ns = TestNamespace::new(cluster, "ctl-missed");
    cluster.kubectl(&["label", "namespace", &ns.name, &format!("{CONTROLLER_LABEL}={}", ns.name)]).expect_success();
    let lease = format!("e2e-{}", ns.name);
    let _ctl = ControllerProcess::start(cluster, "ctl-missed", &lease, &format!("{CONTROLLER_LABEL}={}", ns.name));
    ns.accepts(&config("app-config", &[("mode", "a")]));
    ns.accepts(&deployment("app", "registry.example/app:1.0", &["app-config"]).yaml());
    history_len(&ns, "app", 1, Duration::from_secs(30));
    // A first edit makes app-config a tracked source with a head.
    ns.accepts(&config("app-config", &[("mode", "b")]));
    history_len(&ns, "app", 2, Duration::from_secs(30));
    propagated(&ns, "app-config", Duration::from_secs(10));

    // The webhook goes away; the edit is not seen.
    let exclude = crate::support::EXCLUDE_LABEL;
    cluster.kubectl(&["label", "namespace", &ns.name, &format!("{exclude}=true")]).expect_success();
    std::thread::sleep(Duration::from_secs(2)); // the API server picks up the selector change
    let stale = annotation(&ns, "configmap", "app-config", HEAD);
    ns.accepts(&config("app-config", &[("mode", "c")]));
    assert_eq!(annotation(&ns, "configmap", "app-config", HEAD), stale, "the webhook did not see the edit");
    cluster.kubectl(&["label", "namespace", &ns.name, &format!("{exclude}-")]).expect_success();

    let history = history_len(&ns, "app", 3, Duration::from_secs(60));
    assert_eq!(history[2].config("app-config").unwrap()["mode"], "c");
    assert_eq!(history[2].image, "registry.example/app:1.0");

    // Who wrote that content is not known, and that is said, never guessed (docs/behaviour.md
    // §6.1.1): on its snapshot, and in the workload's timeline as a developer reads it.
    let snapshot = ns.get_json("configmap", &history[2].snapshots["app-config"]).unwrap();
    let a = &snapshot["metadata"]["annotations"];
    assert_eq!(a["confighistory.io/unattributed"], "written while confighistory was unreachable", "{a:#}");
    assert!(a.get("confighistory.io/changed-by").is_none(), "{a:#}");
    let out = Command::new(env!("CARGO_BIN_EXE_kubectl-confighistory"))
        .args(["history", "deployment/app", "-n", &ns.name, &format!("--server-config={}", webhook(cluster).server_config())])
        .env("KUBECONFIG", &cluster.kubeconfig)
        .env_remove("NO_COLOR")
        .output()
        .expect("run kubectl-confighistory");
    let text = String::from_utf8_lossy(&out.stdout);
    let row = text
        .lines()
        .find(|l| l.starts_with("3 "))
        .unwrap_or_else(|| panic!("no revision 3:\n{text}{}", String::from_utf8_lossy(&out.stderr)));
    assert!(row.contains("written while confighistory was unreachable") && row.contains("~mode"), "{text}");
}

/// The value of the sample whose line starts with `series` (name and labels as printed), if any.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
}

/// docs/operations.md "Metrics": after a config-only edit propagates, the shared server's
/// /metrics has the propagation SLI sampled (at least the settle window, 2 s here), then its
/// second half once the new pod is Ready (the test app really runs), the
/// workload's move counted by result, the controller's API calls by verb, resource and code
/// (never an object's name), the process_* families with plausible values, and the pass
/// durations.
#[test]
fn a_propagated_edit_shows_in_the_sli_and_the_controllers_metrics() {
    let Some((cluster, ns)) = setup("ctl-sli") else { return };
    let server = webhook(cluster);
    ns.accepts(&config("sli-config", &[("mode", "a")]));
    // The test app's image (`tests/e2e/cluster`): its pods run and become Ready.
    ns.accepts(&deployment("app", "pricing:4.11", &["sli-config"]).spec("minReadySeconds: 1").yaml());
    history_len(&ns, "app", 1, Duration::from_secs(30));

    let count = "confighistory_propagation_duration_seconds_count";
    let ready_count = "confighistory_propagation_ready_duration_seconds_count";
    let ready_sum = "confighistory_propagation_ready_duration_seconds_sum";
    let sum = "confighistory_propagation_duration_seconds_sum";
    let rolled = "confighistory_propagations_total{result=\"rolled\"}";
    let before = server.metrics();
    let value = |text: &str, series: &str| sample(text, series).unwrap_or_else(|| panic!("no {series} in:\n{text}"));
    let (count0, sum0, rolled0) = (value(&before, count), value(&before, sum), value(&before, rolled));
    let (ready_count0, ready_sum0) = (value(&before, ready_count), value(&before, ready_sum));

    ns.accepts(&config("sli-config", &[("mode", "b")]));
    history_len(&ns, "app", 2, Duration::from_secs(30));
    propagated(&ns, "sli-config", Duration::from_secs(10));
    // Sampled in the pass that found the workload on the new content, before `propagated` was
    // written; resync runs every 5 s.
    let after = wait_for_value("the SLI sample and a resync pass", Duration::from_secs(20), || {
        let text = server.metrics();
        let resynced = sample(&text, "confighistory_resync_pass_duration_seconds_count").is_some_and(|n| n >= 1.0);
        (sample(&text, count).is_some_and(|n| n > count0) && resynced).then_some(text)
    });
    let samples = value(&after, count) - count0;
    eprintln!(
        "MEASURE propagation SLI: {samples} sample(s), mean {:.2}s (settle window 2 s)",
        (value(&after, sum) - sum0) / samples.max(1.0)
    );
    let shown = [
        "confighistory_propagation",
        "confighistory_controller_api_calls",
        "confighistory_gc_pass",
        "confighistory_resync_pass",
        "process_",
    ];
    eprintln!("{}", after.lines().filter(|l| shown.iter().any(|p| l.starts_with(p))).collect::<Vec<_>>().join("\n"));
    assert!(value(&after, sum) - sum0 >= 2.0 * samples - 0.01, "every sample includes the 2 s settle window:\n{after}");
    assert!(value(&after, rolled) > rolled0, "{after}");
    for result in ["released", "skipped", "failed"] {
        assert!(sample(&after, &format!("confighistory_propagations_total{{result=\"{result}\"}}")).is_some(), "{result}:\n{after}");
    }
    assert!(after.contains("# TYPE confighistory_propagation_duration_seconds histogram\n"), "{after}");
    assert!(sample(&after, "confighistory_propagations_pending").is_some(), "{after}");
    assert!(sample(&after, "confighistory_propagation_oldest_pending_seconds").is_some(), "{after}");
    assert!(sample(&after, "confighistory_gc_pass_duration_seconds_count").is_some(), "declared before the first sweep:\n{after}");

    // The trigger on the Deployment, the `propagated` record on the ConfigMap, the Lease.
    let calls: Vec<&str> = after.lines().filter(|l| l.starts_with("confighistory_controller_api_calls_total{")).collect();
    for series in [
        "{verb=\"patch\",resource=\"deployments\",code=\"200\"}",
        "{verb=\"patch\",resource=\"configmaps\",code=\"200\"}",
        "{verb=\"get\",resource=\"leases\",code=\"200\"}",
    ] {
        let n = sample(&after, &format!("confighistory_controller_api_calls_total{series}"));
        assert!(n.is_some_and(|n| n >= 1.0), "{series}: {calls:#?}");
    }
    assert!(calls.iter().all(|l| !l.contains(&ns.name) && !l.contains("sli-config")), "no namespace or object name: {calls:#?}");

    // The second half: the new pod Ready (the Deployment's status says so), measured from the
    // same admission, so never shorter than the first.
    let ready = wait_for_value("the pods-ready sample", Duration::from_secs(90), || {
        let text = server.metrics();
        sample(&text, ready_count).is_some_and(|n| n > ready_count0).then_some(text)
    });
    let ready_samples = value(&ready, ready_count) - ready_count0;
    let ready_mean = (value(&ready, ready_sum) - ready_sum0) / ready_samples;
    eprintln!("MEASURE propagation SLI to pods ready: {ready_samples} sample(s), mean {ready_mean:.2}s");
    let status = ns.get_json("deployment", "app").expect("the Deployment")["status"].clone();
    assert_eq!((status["updatedReplicas"].as_i64(), status["availableReplicas"].as_i64()), (Some(1), Some(1)), "{status}");
    assert!(ready_mean >= (value(&after, sum) - sum0) / samples - 0.01, "pods ready after the template:\n{ready}");

    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    let start = value(&after, "process_start_time_seconds");
    assert!(start <= now + 1.0 && start > now - 86_400.0, "started {start}, now {now}");
    let (rss, vsz) = (value(&after, "process_resident_memory_bytes"), value(&after, "process_virtual_memory_bytes"));
    assert!(rss > 1e6 && rss < vsz, "rss {rss}, vsz {vsz}");
    let (open, max) = (value(&after, "process_open_fds"), value(&after, "process_max_fds"));
    assert!(open >= 3.0 && open < max, "open {open}, max {max}");
    assert!(value(&after, "process_cpu_seconds_total") > 0.0, "{after}");
}

/// docs/behaviour.md §7.8 at a first pass's size: with 64 or more ConfigMaps to re-hash, the
/// controller lists the cluster's ConfigMaps in pages instead of reading each, and a change made
/// to one of 70 sources while the webhook could not see it is still found and propagated.
#[test]
fn a_change_made_while_the_webhook_was_away_among_many_sources_is_found_by_a_listed_re_hash() {
    let Some(cluster) = cluster() else { return };
    webhook(cluster);
    let ns = TestNamespace::new(cluster, "ctl-listed");
    cluster.kubectl(&["label", "namespace", &ns.name, &format!("{CONTROLLER_LABEL}={}", ns.name)]).expect_success();
    let names: Vec<String> = (0..70).map(|i| format!("cfg-{i:02}")).collect();
    let mut all = String::new();
    for name in &names {
        all.push_str(&config(name, &[("mode", "a")]));
        all.push_str("---\n");
    }
    ns.accepts(&all);
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    // Pinned at admission, each source with its head.
    // Two workloads: one request reads at most 64 sources.
    ns.accepts(&deployment("other", "registry.example/app:1.0", &refs[..35]).yaml());
    ns.accepts(&deployment("app", "registry.example/app:1.0", &refs[35..]).yaml());
    history_len(&ns, "app", 1, Duration::from_secs(30));

    // The webhook goes away; the edit is not seen.
    let exclude = crate::support::EXCLUDE_LABEL;
    cluster.kubectl(&["label", "namespace", &ns.name, &format!("{exclude}=true")]).expect_success();
    std::thread::sleep(Duration::from_secs(2)); // the API server picks up the selector change
    let stale = annotation(&ns, "configmap", "cfg-37", HEAD);
    ns.accepts(&config("cfg-37", &[("mode", "b")]));
    assert_eq!(annotation(&ns, "configmap", "cfg-37", HEAD), stale, "the webhook did not see the edit");
    cluster.kubectl(&["label", "namespace", &ns.name, &format!("{exclude}-")]).expect_success();

    let lease = format!("e2e-{}", ns.name);
    let ctl = ControllerProcess::start(cluster, "ctl-listed", &lease, &format!("{CONTROLLER_LABEL}={}", ns.name));
    let history = history_len(&ns, "app", 2, Duration::from_secs(90));
    assert_eq!(history[1].config("cfg-37").unwrap()["mode"], "b");
    assert_eq!(history[1].config("cfg-36").unwrap()["mode"], "a");
    assert_eq!(ns.history_of("other").len(), 1, "the workload of the unchanged sources stays");
    let log = std::fs::read_to_string(&ctl.log).unwrap_or_default();
    assert!(log.contains("re-hash: listed ConfigMaps"), "the pass listed instead of reading each:\n{log}");
}
