//! Rollback correctness under pressure (docs/behaviour.md §2, §6.2, §6.3, §7, §9): undos that must
//! never be denied, reverts and fix-forwards that must land, mode switches that must not un-pin.

use std::time::Duration;

use confighistory::model::names::{ADOPTED, EXCLUDED, HEAD, HELD, MODE_LABEL, PROPAGATED, SETTLE};

use crate::support::apps::{configmap, pricing, pricing_config, release, workload, IMAGE_A, IMAGE_B, KEY_A, KEY_B, SOURCE};
use crate::support::confighistory::{webhook, Webhook};
use crate::support::test_webhook::{allow, TestWebhook};
use crate::support::{cluster, run_id, wait_for, TestNamespace};

fn setup(prefix: &str, labels: &[(&str, &str)]) -> Option<TestNamespace> {
    let cluster = cluster()?;
    webhook(cluster);
    Some(TestNamespace::with_labels(cluster, prefix, labels))
}

/// Fills the namespace's ConfigMap quota: a ResourceQuota whose `configmaps` limit is the number
/// there is now, once the quota controller has counted them (admission refuses creates before).
fn fill_configmap_quota(ns: &TestNamespace) {
    let count = ns.list_json("configmaps").len();
    ns.kubectl(&["create", "quota", "full", &format!("--hard=configmaps={count}")]).expect_success();
    wait_for("the quota controller to count the ConfigMaps", Duration::from_secs(30), || {
        ns.get_json("resourcequota", "full").is_some_and(|q| q["status"]["used"]["configmaps"].as_str() == Some(&count.to_string()))
    });
}

/// docs/behaviour.md §5, §6.2.1: a snapshot that exists is used, never re-created. With the namespace's
/// ConfigMap quota full, a release whose config already has its snapshot goes through (a POST
/// first would be refused by the quota even though the object exists).
#[test]
fn a_release_under_a_full_configmap_quota_uses_the_existing_snapshot() {
    let Some(ns) = setup("quota-release", &[]) else { return };
    ns.accepts(&release(IMAGE_A, KEY_A));
    let pinned = ns.current_template("deployment", "pricing").snapshots[SOURCE].clone();
    assert_ne!(pinned, SOURCE);
    fill_configmap_quota(&ns);

    let out = ns.accepts(&pricing(IMAGE_B));
    let now = ns.current_template("deployment", "pricing");
    assert_eq!((now.image.as_str(), now.snapshots[SOURCE].as_str()), (IMAGE_B, pinned.as_str()), "{}", out.describe());
    // The same answer from a dry run and from the real apply.
    ns.apply_with(&pricing("registry.example/pricing:4.13"), &["--dry-run=server"]).expect("dry run accepted");

    // A config the quota has no room for is refused, and says why.
    ns.rejects(&release("registry.example/pricing:4.13", KEY_B), "ResourceQuota");
}

/// docs/behaviour.md §6.2.1: an undo is never denied, not even when the snapshot it needs cannot be written
/// (full quota). Here the target revision predates confighistory (no adoption record: the quota
/// kept adoption from writing one), so it goes to the head, whose snapshot the quota forbids: the
/// undo goes through as it is, with warnings, for repair to finish.
#[test]
fn an_undo_is_never_denied_when_its_snapshot_cannot_be_written() {
    let Some(ns) = setup("quota-undo", &[(MODE_LABEL, "audit")]) else { return };
    ns.accepts(&release(IMAGE_A, KEY_A));
    ns.wait_observed("deployment", "pricing");
    ns.accepts(&release(IMAGE_B, KEY_B));
    assert_eq!(ns.history_of("pricing").len(), 2);
    fill_configmap_quota(&ns);
    ns.cluster.kubectl(&["label", "namespace", &ns.name, &format!("{MODE_LABEL}=rewrite"), "--overwrite"]).expect_success();
    // The webhook's cache has seen the label (a release would now be refused for want of room).
    wait_for("rewrite mode to apply", Duration::from_secs(10), || {
        ns.apply_with(&pricing("registry.example/pricing:probe"), &["--dry-run=server"]).is_err()
    });

    let out = ns.rollout_undo("pricing", None);
    let now = ns.current_template("deployment", "pricing");
    assert_eq!(now.image, IMAGE_A, "{}", out.describe());
    assert!(out.warnings().iter().any(|w| w.contains(SOURCE)), "the undo says what it could not do:\n{}", out.describe());
}

/// The mode the pricing Deployment's current template runs with (`mode` key of its config).
fn current_mode(ns: &TestNamespace) -> String {
    ns.current_template("deployment", "pricing").config(SOURCE).and_then(|c| c.get("mode").cloned()).unwrap_or_default()
}

fn mode_config(mode: &str) -> String {
    configmap(SOURCE, &[("mode", mode)])
}

/// Waits until the source records its current head as propagated.
fn propagated(ns: &TestNamespace) {
    wait_for("the change to be propagated", Duration::from_secs(30), || {
        let cm = ns.get_json("configmap", SOURCE).unwrap_or_default();
        let a = &cm["metadata"]["annotations"];
        a[HEAD].is_string() && a[HEAD] == a[PROPAGATED]
    });
}

/// docs/behaviour.md §7: a change is an edit, not a content. A was propagated; the owner changes the config to
/// B, a `rollout restart` inside the settle window joins B, and the owner reverts to A before B's
/// window ends: the revert is a change of its own and brings the workload back to A.
#[test]
fn a_revert_before_propagation_lands() {
    let Some(ns) = setup("revert", &[]) else { return };
    ns.accepts(&mode_config("x"));
    ns.accepts(&pricing(IMAGE_A));
    ns.accepts(&mode_config("a"));
    wait_for("A to reach the workload", Duration::from_secs(30), || current_mode(&ns) == "a");
    propagated(&ns);
    ns.annotate(SETTLE, "6");
    std::thread::sleep(Duration::from_secs(1)); // the caches see the namespace's window

    ns.accepts(&mode_config("b"));
    ns.kubectl(&["rollout", "restart", "deployment/pricing"]).expect_success();
    assert_eq!(current_mode(&ns), "b", "a restart joins the pending change");
    ns.accepts(&mode_config("a"));
    wait_for("the revert to reach the workload", Duration::from_secs(30), || current_mode(&ns) == "a");
    propagated(&ns);
}

/// docs/behaviour.md §2: an undo holds the old config against the change it undid, not against the changes
/// made after it. The team fixes the config forward and re-applies unchanged manifests: the fix
/// reaches the workload (propagation moves the held pin), once, and the hold is released.
#[test]
fn a_fix_forward_after_an_undo_lands() {
    let Some(ns) = setup("fix-forward", &[]) else { return };
    ns.accepts(&mode_config("a"));
    ns.accepts(&pricing(IMAGE_A));
    ns.accepts(&mode_config("b"));
    wait_for("b to reach the workload", Duration::from_secs(30), || current_mode(&ns) == "b");
    propagated(&ns);

    ns.rollout_undo("pricing", None);
    assert_eq!(current_mode(&ns), "a");
    assert_eq!(ns.annotation_of("deployment", "pricing", HELD).as_deref(), Some(SOURCE));
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(current_mode(&ns), "a", "the hold stands against the change it undid");

    ns.accepts(&mode_config("c"));
    ns.accepts(&pricing(IMAGE_A));
    wait_for("the fix-forward to reach the held workload", Duration::from_secs(30), || current_mode(&ns) == "c");
    propagated(&ns);
    assert_eq!(ns.annotation_of("deployment", "pricing", HELD), None, "the hold is released");
    let history = ns.history_of("pricing");
    assert_eq!(history.iter().filter(|r| r.config(SOURCE).is_some_and(|c| c["mode"] == "c")).count(), 1, "{history:#?}");
}

/// docs/behaviour.md §6.2, §3: switching a namespace between the modes that act never un-pins or restarts
/// anything by itself. Pinned in rewrite mode, switched to enforce (or audit), the same manifests
/// re-applied: the template keeps its pins and the history gains no revision.
#[test]
fn switching_a_namespace_to_enforce_or_audit_never_unpins_or_restarts() {
    for mode in ["enforce", "audit"] {
        let Some(ns) = setup(&format!("switch-{mode}"), &[]) else { return };
        ns.accepts(&release(IMAGE_A, KEY_A));
        let before = ns.history_of("pricing");
        assert_eq!(before.len(), 1);
        assert_ne!(before[0].snapshots[SOURCE], SOURCE);
        ns.cluster.kubectl(&["label", "namespace", &ns.name, &format!("{MODE_LABEL}={mode}"), "--overwrite"]).expect_success();
        std::thread::sleep(Duration::from_secs(1)); // the webhook's namespace cache
        ns.accepts(&release(IMAGE_A, KEY_A));
        ns.accepts(&pricing(IMAGE_A));
        assert_eq!(ns.history_of("pricing"), before, "{mode}: no new revision, the pins stay");
        if mode == "enforce" {
            // A changed template naming the mutable ConfigMap is what enforce refuses.
            ns.rejects(&pricing(IMAGE_B), "names mutable ConfigMap");
        }
    }
}

/// docs/behaviour.md §6.3: a tool that creates a ConfigMap and its Deployment at the same moment (Terraform,
/// Pulumi, parallel scripts) can have the mutating pass find no ConfigMap and the validating pass
/// find a mutable one. Made deterministic here: a second mutating webhook, called after
/// confighistory's, creates the ConfigMap. The Deployment is allowed with a warning (repair pins
/// it at the next resync).
#[test]
fn a_configmap_created_in_parallel_with_its_deployment_is_allowed_and_pinned_afterwards() {
    let Some(ns) = setup("parallel", &[]) else { return };
    let (cluster, name) = (ns.cluster, ns.name.clone());
    let created = std::sync::atomic::AtomicBool::new(false);
    let hook = TestWebhook::start(cluster, move |req| {
        if req["kind"]["kind"] == "Deployment" && !created.swap(true, std::sync::atomic::Ordering::SeqCst) {
            cluster.kubectl_stdin(&["apply", "-n", &name, "-f", "-"], &pricing_config(KEY_A)).expect_success();
        }
        allow()
    });
    let _registration = hook.register_mutating(&ns, "apps", &["CREATE"], &["deployments"]);
    let out = ns.accepts(&pricing(IMAGE_A));
    assert!(out.warnings().iter().any(|w| w.contains("does not exist yet")), "{}", out.describe());
    assert!(out.warnings().iter().any(|w| w.contains("appeared while admitting")), "{}", out.describe());
    // Pinning afterwards is repair's job, at a resync whose timing depends on the whole suite's
    // load: proven by `an_undo_to_a_revision_admitted_during_an_outage_brings_its_config_back`.
}

/// docs/behaviour.md §7: a source its owner opts out of versioning after workloads were pinned is propagated
/// once more: its workloads move back to the plain name (one new revision), and from then on see
/// its live updates (no revision per edit).
#[test]
fn opting_a_source_out_of_versioning_moves_its_workloads_to_the_plain_name() {
    let Some(ns) = setup("opt-out", &[]) else { return };
    ns.accepts(&release(IMAGE_A, KEY_A));
    assert_ne!(ns.current_template("deployment", "pricing").snapshots[SOURCE], SOURCE);
    ns.kubectl(&["annotate", "configmap", SOURCE, "confighistory.io/versioned=false"]).expect_success();
    wait_for("the workload to be back on the plain name", Duration::from_secs(30), || {
        ns.current_template("deployment", "pricing").snapshots[SOURCE] == SOURCE
    });
    let history = ns.history_of("pricing");
    assert_eq!(history.len(), 2, "{history:#?}");
    ns.kubectl(&["patch", "configmap", SOURCE, "--type=merge", "-p", r#"{"data":{"feature":"on"}}"#]).expect_success();
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(ns.history_of("pricing").len(), 2, "live updates, no new revision");
}

/// docs/behaviour.md §9: a revision created while the webhook was unreachable names its source plainly. Repair
/// pins the workload, and first records the content that revision ran with (the source has not
/// changed since), so a later undo to it brings that config back, not the current one.
#[test]
fn an_undo_to_a_revision_admitted_during_an_outage_brings_its_config_back() {
    let Some(cluster) = cluster() else { return };
    // The webhooks skip namespaces with the exclude label; the controller does not: an outage.
    let run = format!("{}-outage", run_id());
    let ns = TestNamespace::in_run(cluster, Some(&run), "outage-undo", &[(crate::support::EXCLUDE_LABEL, "true")]);
    // Its own server, resyncing every second: the shared one's passes, over every namespace of a
    // busy suite, outlasted the timeouts (two passes: the trigger, then the repair once back).
    ns.accepts(&mode_config("a"));
    ns.accepts(&workload("deployment", "before", IMAGE_A, SOURCE));
    let _server = Webhook::start(cluster, &run, &["--settle", "2", "--resync-interval", "1", "--resync-qps", "50"]);
    // The controller has taken stock of what was there before it (adopted, not repaired): what
    // comes now is the outage's.
    wait_for("the adoption record of the workload from before", Duration::from_secs(60), || {
        ns.snapshots().iter().any(|s| ns.get_json("configmap", s).is_some_and(|cm| cm["metadata"]["annotations"][ADOPTED].is_string()))
    });
    ns.accepts(&pricing(IMAGE_A));
    assert_eq!(ns.history_of("pricing")[0].snapshots[SOURCE], SOURCE, "admitted unpinned");
    wait_for("the repair trigger", Duration::from_secs(30), || {
        ns.annotation_of("deployment", "pricing", "confighistory.io/propagate").is_some()
    });
    // The webhook is back: repair pins the workload.
    ns.cluster.kubectl(&["label", "namespace", &ns.name, &format!("{}-", crate::support::EXCLUDE_LABEL)]).expect_success();
    wait_for("the repair to pin it", Duration::from_secs(90), || ns.current_template("deployment", "pricing").snapshots[SOURCE] != SOURCE);

    ns.accepts(&format!("{}---\n{}", mode_config("b"), pricing(IMAGE_B)));
    assert_eq!(current_mode(&ns), "b");
    let out = ns.rollout_undo("pricing", Some(1));
    let now = ns.current_template("deployment", "pricing");
    assert_eq!((now.image.as_str(), current_mode(&ns).as_str()), (IMAGE_A, "a"), "{}", out.describe());
}

/// docs/behaviour.md §9, §6.2.1: `kubectl rollout undo` admitted while the webhook was unreachable, back to a
/// revision from before the install, names its source plainly. Repair pins it to the config that
/// revision ran with (the snapshot whose adoption record lists its template), held against the
/// current one, with an Event saying so: not to the current config.
#[test]
fn an_undo_admitted_during_an_outage_is_repaired_to_the_config_it_ran_with() {
    let Some(cluster) = cluster() else { return };
    // A namespace of a run with no server yet: "before the install".
    let run = format!("{}-undo-outage", run_id());
    let ns = TestNamespace::in_run(cluster, Some(&run), "outage-plain-undo", &[]);
    ns.accepts(&mode_config("a"));
    ns.accepts(&pricing(IMAGE_A));
    ns.wait_observed("deployment", "pricing");
    // Its own server, resyncing every second, so the test waits on repair, not on a busy suite.
    let _server = Webhook::start(cluster, &run, &["--settle", "2", "--resync-interval", "1", "--resync-qps", "50"]);
    wait_for("the adoption record of the running template", Duration::from_secs(60), || {
        ns.snapshots().iter().any(|s| ns.get_json("configmap", s).is_some_and(|cm| cm["metadata"]["annotations"][ADOPTED].is_string()))
    });
    ns.accepts(&format!("{}---\n{}", mode_config("b"), pricing(IMAGE_B)));
    assert_eq!(current_mode(&ns), "b");
    assert_ne!(ns.current_template("deployment", "pricing").snapshots[SOURCE], SOURCE);

    // The outage: the webhooks skip the namespace, the undo goes through as sent.
    let exclude = crate::support::EXCLUDE_LABEL;
    ns.cluster.kubectl(&["label", "namespace", &ns.name, &format!("{exclude}=true")]).expect_success();
    std::thread::sleep(Duration::from_secs(2)); // the API server picks up the selector change
    ns.rollout_undo("pricing", None);
    let undone = ns.current_template("deployment", "pricing");
    assert_eq!((undone.image.as_str(), undone.snapshots[SOURCE].as_str()), (IMAGE_A, SOURCE), "admitted as sent");
    ns.cluster.kubectl(&["label", "namespace", &ns.name, &format!("{exclude}-")]).expect_success();

    wait_for("the repair to pin it", Duration::from_secs(90), || ns.current_template("deployment", "pricing").snapshots[SOURCE] != SOURCE);
    assert_eq!((ns.current_template("deployment", "pricing").image.as_str(), current_mode(&ns).as_str()), (IMAGE_A, "a"));
    assert_eq!(ns.annotation_of("deployment", "pricing", HELD).as_deref(), Some(SOURCE), "held against the current config");
    let events = ns.kubectl(&["get", "events", "-o", "json"]).expect_success().json();
    let repaired: Vec<&str> = events["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["reason"] == "ConfigRepaired" && e["involvedObject"]["name"] == "pricing")
        .filter_map(|e| e["message"].as_str().or(e["note"].as_str()))
        .collect();
    assert!(repaired.iter().any(|m| m.contains("held")), "the Event says the undo's config is held: {repaired:?}");
    // The hold stands: nothing moves it back to the current config.
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(current_mode(&ns), "a");
}

/// docs/behaviour.md §9, §9a, §6.2.1: the same outage undo, to a revision from before the install that was never
/// adopted (the one before the revision running at install time): no one knows the config it ran
/// with. Repair takes it to the current config with a ConfigUnknown Event, and records no adoption
/// on the current content, which that revision never ran with.
#[test]
fn an_undo_admitted_during_an_outage_to_a_revision_never_adopted_is_repaired_to_the_current_config_as_unknown() {
    let Some(cluster) = cluster() else { return };
    let run = format!("{}-unknown-outage", run_id());
    let ns = TestNamespace::in_run(cluster, Some(&run), "outage-unknown-undo", &[]);
    // Two revisions before the install: 1 (IMAGE_A with "x"), 2 (IMAGE_B with "a", running).
    ns.accepts(&format!("{}---\n{}", mode_config("x"), pricing(IMAGE_A)));
    ns.wait_observed("deployment", "pricing");
    ns.accepts(&format!("{}---\n{}", mode_config("a"), pricing(IMAGE_B)));
    ns.wait_observed("deployment", "pricing");
    let _server = Webhook::start(cluster, &run, &["--settle", "2", "--resync-interval", "1", "--resync-qps", "50"]);
    wait_for("the adoption record of the running template", Duration::from_secs(60), || {
        ns.snapshots().iter().any(|s| ns.get_json("configmap", s).is_some_and(|cm| cm["metadata"]["annotations"][ADOPTED].is_string()))
    });
    ns.accepts(&format!("{}---\n{}", mode_config("b"), pricing("registry.example/pricing:4.13")));
    assert_eq!(current_mode(&ns), "b");
    let head = ns.current_template("deployment", "pricing").snapshots[SOURCE].clone();
    assert_ne!(head, SOURCE);

    // The outage: undo to revision 1, admitted as sent.
    let exclude = crate::support::EXCLUDE_LABEL;
    ns.cluster.kubectl(&["label", "namespace", &ns.name, &format!("{exclude}=true")]).expect_success();
    std::thread::sleep(Duration::from_secs(2)); // the API server picks up the selector change
    ns.rollout_undo("pricing", Some(1));
    let undone = ns.current_template("deployment", "pricing");
    assert_eq!((undone.image.as_str(), undone.snapshots[SOURCE].as_str()), (IMAGE_A, SOURCE), "admitted as sent");
    ns.cluster.kubectl(&["label", "namespace", &ns.name, &format!("{exclude}-")]).expect_success();

    wait_for("the repair to pin it", Duration::from_secs(90), || ns.current_template("deployment", "pricing").snapshots[SOURCE] != SOURCE);
    let now = ns.current_template("deployment", "pricing");
    assert_eq!((now.image.as_str(), now.snapshots[SOURCE].as_str(), current_mode(&ns).as_str()), (IMAGE_A, head.as_str(), "b"));
    let record = ns.get_json("configmap", &head).unwrap()["metadata"]["annotations"][ADOPTED].clone();
    assert!(record.is_null(), "revision 1 never ran with the current config: {record}");
    let events = ns.kubectl(&["get", "events", "-o", "json"]).expect_success().json();
    let unknown: Vec<&str> = events["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["reason"] == "ConfigUnknown" && e["involvedObject"]["name"] == "pricing")
        .filter_map(|e| e["message"].as_str().or(e["note"].as_str()))
        .collect();
    assert!(unknown.iter().any(|m| m.contains("predates confighistory")), "{unknown:?}");
}

/// docs/behaviour.md §7, the admin's selector: `--excluded-sources-selector` (Helm
/// config.excludedSourcesSelector) changes with a restart of the server, and no ConfigMap is
/// written. A source the new selector matches, with a workload pinned to its snapshot, is
/// propagated once more: the workload moves back to the plain name (one new revision) and from
/// then on sees its live updates.
#[test]
fn a_source_the_admins_new_selector_excludes_moves_its_workloads_to_the_plain_name_after_the_restart() {
    let Some(cluster) = cluster() else { return };
    let run = format!("{}-selector", run_id());
    let ns = TestNamespace::in_run(cluster, Some(&run), "selector-opt-out", &[]);
    let flags = ["--settle", "2", "--resync-interval", "1", "--resync-qps", "50"];
    let server = Webhook::start(cluster, &run, &flags);
    ns.accepts(&release(IMAGE_A, KEY_A));
    let pinned = ns.current_template("deployment", "pricing").snapshots[SOURCE].clone();
    assert_ne!(pinned, SOURCE);
    // The owner labels it; the selector that will match the label is not there yet.
    ns.kubectl(&["label", "configmap", SOURCE, "ca-bundle=true"]).expect_success();
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(ns.current_template("deployment", "pricing").snapshots[SOURCE], pinned);
    drop(server);

    // The admin's upgrade: the same server restarted with the selector.
    let _server = Webhook::start(cluster, &run, &[&flags[..], &["--excluded-sources-selector", "ca-bundle=true"]].concat());
    wait_for("the workload to be back on the plain name", Duration::from_secs(60), || {
        ns.current_template("deployment", "pricing").snapshots[SOURCE] == SOURCE
    });
    assert_eq!(ns.annotation_of("configmap", SOURCE, EXCLUDED).as_deref(), Some("true"), "recorded on the source");
    let history = ns.history_of("pricing");
    assert_eq!(history.len(), 2, "{history:#?}");
    ns.kubectl(&["patch", "configmap", SOURCE, "--type=merge", "-p", r#"{"data":{"feature":"on"}}"#]).expect_success();
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(ns.history_of("pricing").len(), 2, "live updates, no new revision");
    assert_eq!(ns.current_template("deployment", "pricing").snapshots[SOURCE], SOURCE);
}
