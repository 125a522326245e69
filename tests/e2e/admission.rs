//! Admission scenarios of docs/behaviour.md §11 (1, 3, 4, 5, 7, 9, 11) and §6.2's "what counts as a change",
//! driven the way a pipeline or a person drives a cluster: `kubectl apply`, `kubectl rollout
//! undo`, `kubectl set image`, Helm.
//!
//! The example application is the incident's pricing service (`support::apps`). Propagation
//! (§7) is not what these scenarios test: their namespaces set a settle window far longer than
//! any of them takes, so a slow machine never lets the controller move a running workload to
//! new config between a ConfigMap apply and the Deployment apply that follows it. (The controller
//! scenarios test the window itself.)

use std::process::Command;
use std::time::Duration;

use confighistory::model::names::{HELD, PINS, SETTLE};
use serde_json::Value;

use crate::support::apps::{configmap, pricing, pricing_config, release, workload, IMAGE_A, IMAGE_B, KEY_A, KEY_B, SOURCE};
use crate::support::confighistory::{webhook, Webhook};
use crate::support::{cluster, find_helm, run_id, wait_for, wait_for_value, Kubectl, Revision, TestNamespace};

/// A namespace of this run whose settle window outlasts the scenario.
fn namespace(prefix: &str) -> Option<TestNamespace> {
    let cluster = cluster()?;
    webhook(cluster);
    let ns = TestNamespace::new(cluster, prefix);
    ns.annotate(SETTLE, "600");
    Some(ns)
}

/// Which release an image belongs to: 4.11 (and its patch releases) is A, anything else B.
fn key_of(image: &str) -> &'static str {
    if image.starts_with(IMAGE_A) {
        KEY_A
    } else {
        KEY_B
    }
}

/// Every revision names a snapshot of `pricing-config` and runs its own release's config: 4.11
/// with `discount_rules_path`, 4.12 with `rules.discount_path`. In particular there is no
/// (4.11, B-config) revision, the one the incident's undo landed on.
#[track_caller]
fn assert_each_revision_runs_its_own_config(history: &[Revision]) {
    assert!(!history.is_empty());
    for r in history {
        let snapshot = &r.snapshots[SOURCE];
        assert_ne!(snapshot, SOURCE, "revision {} is not pinned: {history:#?}", r.revision);
        let config = r.config(SOURCE).unwrap_or_else(|| panic!("revision {}: snapshot {snapshot} is gone: {history:#?}", r.revision));
        let keys: Vec<&str> = config.keys().map(String::as_str).collect();
        assert_eq!(keys, [key_of(&r.image)], "revision {} runs {} with the config of the other release: {history:#?}", r.revision, r.image);
    }
}

/// Asserts the live Deployment runs `image` with the config of its release.
#[track_caller]
fn assert_runs(ns: &TestNamespace, kind: &str, image: &str) -> Revision {
    let now = ns.current_template(kind, "pricing");
    assert_eq!(now.image, image, "{now:#?}");
    let config = now.config(SOURCE).unwrap_or_else(|| panic!("the template names no existing ConfigMap for {SOURCE}: {now:#?}"));
    assert!(config.contains_key(key_of(image)) && config.len() == 1, "{image} runs with {config:?}: {now:#?}");
    assert_ne!(now.snapshots[SOURCE], SOURCE, "the template names a snapshot, not the source: {now:#?}");
    now
}

/// Applies release A then release B, either as one `kubectl apply -f` of both documents or as
/// two applies (ConfigMap, then Deployment). Returns the output of release B's apply(es).
fn releases_a_then_b(ns: &TestNamespace, one_apply: bool) -> Vec<Kubectl> {
    let apply = |image: &str, key: &str| {
        if one_apply {
            vec![ns.accepts(&release(image, key))]
        } else {
            vec![ns.accepts(&pricing_config(key)), ns.accepts(&pricing(image))]
        }
    };
    apply(IMAGE_A, KEY_A);
    assert_eq!(ns.history_of("pricing").len(), 1);
    apply(IMAGE_B, KEY_B)
}

fn warnings(outputs: &[Kubectl]) -> Vec<String> {
    outputs.iter().flat_map(Kubectl::warnings).collect()
}

/// docs/behaviour.md §11.1, the incident: A (4.11, `discount_rules_path`), then B (4.12, renamed to
/// `rules.discount_path`), ConfigMap before Deployment; `kubectl rollout undo` brings back 4.11
/// *and* the config 4.11 ran with.
fn the_incident(prefix: &str, one_apply: bool) {
    let Some(ns) = namespace(prefix) else { return };
    let out = releases_a_then_b(&ns, one_apply);
    let warned = warnings(&out);
    assert!(
        warned.iter().any(|w| w.contains(&format!("{SOURCE}: keys removed [{KEY_A}], added [{KEY_B}]"))),
        "the ConfigMap apply warns about the renamed key: {warned:#?}"
    );
    assert!(
        warned.iter().any(|w| w.contains(&format!("{SOURCE}: pinned to {SOURCE}-"))),
        "the Deployment apply names the new pin: {warned:#?}"
    );
    let history = ns.history_of("pricing");
    assert_eq!(history.iter().map(|r| r.image.as_str()).collect::<Vec<_>>(), [IMAGE_A, IMAGE_B], "{history:#?}");
    assert_each_revision_runs_its_own_config(&history);

    let undo = ns.rollout_undo("pricing", None);
    let now = assert_runs(&ns, "deployment", IMAGE_A);
    assert_eq!(now.config(SOURCE).unwrap()[KEY_A], "/etc/rules");
    assert!(undo.warnings().iter().any(|w| w.contains("held on")), "the undo says the old config is held:\n{}", undo.describe());
    assert_eq!(ns.annotation_of("deployment", "pricing", HELD).as_deref(), Some(SOURCE));
    let history = ns.history_of("pricing");
    assert_eq!(history.iter().map(|r| r.image.as_str()).collect::<Vec<_>>(), [IMAGE_B, IMAGE_A], "{history:#?}");
    assert_each_revision_runs_its_own_config(&history);
    assert_eq!(ns.snapshots().len(), 2, "one snapshot per content");
}

#[test]
fn the_incident_rollout_undo_restores_image_and_config_when_both_documents_are_applied_at_once() {
    the_incident("incident-one", true);
}

#[test]
fn the_incident_rollout_undo_restores_image_and_config_when_configmap_and_deployment_are_applied_in_turn() {
    the_incident("incident-two", false);
}

/// docs/behaviour.md §11.3: undo, undo, undo toggles between the two revisions; each keeps its own image and
/// its own config, and no snapshot is added.
#[test]
fn undo_twice_toggles_and_each_revision_keeps_its_own_image_and_config() {
    let Some(ns) = namespace("toggle") else { return };
    releases_a_then_b(&ns, true);
    let pins = |image: &str| ns.history_of("pricing").into_iter().find(|r| r.image == image).map(|r| r.snapshots[SOURCE].clone());
    let (pin_a, pin_b) = (pins(IMAGE_A).unwrap(), pins(IMAGE_B).unwrap());
    assert_ne!(pin_a, pin_b);

    for (round, image) in [IMAGE_A, IMAGE_B, IMAGE_A, IMAGE_B].into_iter().enumerate() {
        ns.rollout_undo("pricing", None);
        let now = assert_runs(&ns, "deployment", image);
        assert_eq!(&now.snapshots[SOURCE], if image == IMAGE_A { &pin_a } else { &pin_b }, "undo {}", round + 1);
        let history = ns.history_of("pricing");
        assert_eq!(history.len(), 2, "undo {}: {history:#?}", round + 1);
        assert_each_revision_runs_its_own_config(&history);
        assert_eq!(history.last().unwrap().image, image);
    }
    assert_eq!(ns.snapshots(), {
        let mut both = vec![pin_a, pin_b];
        both.sort();
        both
    });
    // B is the head again: nothing is held.
    assert_eq!(ns.annotation_of("deployment", "pricing", HELD), None);
}

/// The ConfigMap a template names for `pricing-config`, in a printed object.
fn pinned_in(object: &Value) -> String {
    let refs = crate::support::configmap_refs(&object["spec"]["template"]["spec"]);
    assert_eq!(refs.len(), 1, "both references name one ConfigMap: {refs:?}");
    refs.into_iter().next().unwrap()
}

/// docs/behaviour.md §11.4, §6.5: a server-side dry run gets the same pin as the real request would, and
/// writes nothing: no snapshot, no Deployment. A combined dry run of a release shows the pin of
/// the current content (the ConfigMap is not written).
#[test]
fn a_dry_run_apply_shows_the_pinned_name_and_creates_no_snapshot() {
    let Some(ns) = namespace("dry-run") else { return };
    ns.accepts(&pricing_config(KEY_A));

    let dry = ns.apply_with(&pricing(IMAGE_A), &["--dry-run=server", "-o", "json"]).expect("dry run");
    let pinned = pinned_in(&dry.json());
    assert!(pinned.starts_with(&format!("{SOURCE}-")) && pinned.len() == SOURCE.len() + 13, "{}", dry.describe());
    assert!(ns.snapshots().is_empty(), "a dry run creates no snapshot: {:?}", ns.snapshots());
    assert!(ns.get_json("deployment", "pricing").is_none(), "a dry run creates no Deployment");

    ns.accepts(&pricing(IMAGE_A));
    assert_eq!(ns.current_template("deployment", "pricing").snapshots[SOURCE], pinned, "the real apply gets the pin the dry run showed");
    assert_eq!(ns.snapshots(), std::slice::from_ref(&pinned));

    // Release B as a dry run: nothing changes, and the Deployment shows the current content's pin.
    let dry = ns.apply_with(&release(IMAGE_B, KEY_B), &["--dry-run=server", "-o", "json"]).expect("dry run");
    let printed = dry.json();
    let items = printed["items"].as_array().cloned().unwrap_or_else(|| vec![printed.clone()]);
    let deployment =
        items.iter().find(|o| o["kind"] == "Deployment").unwrap_or_else(|| panic!("no Deployment printed:\n{}", dry.describe()));
    assert_eq!(deployment["spec"]["template"]["spec"]["containers"][0]["image"], IMAGE_B);
    assert_eq!(pinned_in(deployment), pinned, "the dry run did not write the ConfigMap: the pin is the current content's");
    assert_eq!(ns.snapshots(), [pinned], "no snapshot of B's content");
    assert_eq!(ns.configmap_data(SOURCE).unwrap().keys().collect::<Vec<_>>(), [KEY_A]);
    assert_runs(&ns, "deployment", IMAGE_A);
    assert_eq!(ns.history_of("pricing").len(), 1);
}

/// docs/behaviour.md §11.5: StatefulSets and DaemonSets (history in ControllerRevisions) are undone the same way.
fn undo_restores_config_of(kind: &str) {
    let Some(ns) = namespace(kind) else { return };
    ns.accepts(&pricing_config(KEY_A));
    ns.accepts(&workload(kind, "pricing", IMAGE_A, SOURCE));
    assert_eq!(ns.history_of_kind(kind, "pricing").len(), 1);
    ns.accepts(&pricing_config(KEY_B));
    ns.accepts(&workload(kind, "pricing", IMAGE_B, SOURCE));
    let history = ns.history_of_kind(kind, "pricing");
    assert_eq!(history.iter().map(|r| r.image.as_str()).collect::<Vec<_>>(), [IMAGE_A, IMAGE_B], "{history:#?}");
    assert_each_revision_runs_its_own_config(&history);

    ns.rollout_undo_of(kind, "pricing", None);
    assert_runs(&ns, kind, IMAGE_A);
    assert_eq!(ns.annotation_of(kind, "pricing", HELD).as_deref(), Some(SOURCE));
    let history = ns.history_of_kind(kind, "pricing");
    assert_each_revision_runs_its_own_config(&history);
    assert_eq!(history.last().unwrap().image, IMAGE_A, "{history:#?}");
}

#[test]
fn statefulset_rollout_undo_restores_image_and_config() {
    undo_restores_config_of("statefulset");
}

#[test]
fn daemonset_rollout_undo_restores_image_and_config() {
    undo_restores_config_of("daemonset");
}

/// What must not move when unchanged manifests are re-applied: the Deployment's generation,
/// spec and annotations, its ReplicaSets, the snapshots, and the source's data and annotations.
#[derive(Clone, Debug, PartialEq)]
struct Observed {
    generation: Value,
    spec: Value,
    annotations: Value,
    replica_sets: Vec<String>,
    snapshots: Vec<String>,
    source: (Value, Value),
}

const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

impl Observed {
    /// Without what Kubernetes itself changes when a client-side applied object is first applied
    /// server-side: the API server rewrites `last-applied-configuration` (and, for a
    /// Deployment, bumps the generation with it).
    fn without_apply_bookkeeping(&self) -> Observed {
        let mut o = self.clone();
        o.generation = Value::Null;
        for annotations in [&mut o.annotations, &mut o.source.1] {
            if let Some(map) = annotations.as_object_mut() {
                map.remove(LAST_APPLIED);
            }
        }
        o
    }
}

fn observe(ns: &TestNamespace) -> Observed {
    ns.wait_observed("deployment", "pricing");
    let deployment = ns.get_json("deployment", "pricing").unwrap();
    let source = ns.get_json("configmap", SOURCE).unwrap();
    let mut replica_sets: Vec<String> =
        ns.list_json("replicasets").iter().map(|rs| rs["metadata"]["name"].as_str().unwrap_or_default().to_owned()).collect();
    replica_sets.sort();
    Observed {
        generation: deployment["metadata"]["generation"].clone(),
        spec: deployment["spec"].clone(),
        annotations: deployment["metadata"]["annotations"].clone(),
        replica_sets,
        snapshots: ns.snapshots(),
        source: (source["data"].clone(), source["metadata"]["annotations"].clone()),
    }
}

/// docs/behaviour.md §11.7: re-applying unchanged manifests (which name the source plainly) changes nothing:
/// no revision, no snapshot, no change to spec or annotations. Client-side apply, server-side
/// apply, and a move from client-side to server-side apply.
///
/// The move needs `--force-conflicts`, as Kubernetes says when it refuses it: the pinned name in
/// the live object differs from the plain name in the manifest, and its owner is
/// `kubectl-client-side-apply`, so server-side apply reports a conflict before any webhook runs.
/// Once forced, the server-side manager owns the references and later applies are quiet. On that
/// first server-side apply the API server rewrites `last-applied-configuration` itself.
#[test]
fn reapplying_unchanged_manifests_changes_nothing() {
    for (prefix, first, again) in [
        ("reapply-csa", &[][..], &[][..]),
        ("reapply-ssa", &["--server-side"][..], &["--server-side"][..]),
        ("reapply-csa-ssa", &[][..], &["--server-side", "--force-conflicts"][..]),
    ] {
        let Some(ns) = namespace(prefix) else { return };
        let migrating = first != again;
        ns.apply_with(&release(IMAGE_A, KEY_A), first).unwrap_or_else(|e| panic!("{prefix}: release A failed:\n{}", e.describe()));
        ns.apply_with(&release(IMAGE_B, KEY_B), first).unwrap_or_else(|e| panic!("{prefix}: release B failed:\n{}", e.describe()));
        let mut before = observe(&ns);
        assert_eq!(before.replica_sets.len(), 2, "{prefix}: {before:#?}");
        for round in 1..=2 {
            let out = ns
                .apply_with(&release(IMAGE_B, KEY_B), again)
                .unwrap_or_else(|e| panic!("{prefix}: re-apply {round} was refused:\n{}", e.describe()));
            assert!(out.warnings().is_empty(), "{prefix}: nothing to warn about:\n{}", out.describe());
            let after = observe(&ns);
            if migrating && round == 1 {
                assert_eq!(after.without_apply_bookkeeping(), before.without_apply_bookkeeping(), "{prefix}: the first server-side apply");
                before = after;
            } else {
                assert_eq!(after, before, "{prefix}: re-apply {round} changed something");
            }
        }
    }
}

/// docs/behaviour.md §11.11: after an undo the old config is held; `kubectl rollout restart` and `kubectl set
/// image` keep it (the annotation `confighistory.io/held` says so); the next `kubectl apply` of
/// the release takes the head again and releases the hold.
#[test]
fn an_undone_config_stays_through_restart_and_set_image_until_the_next_apply() {
    let Some(ns) = namespace("held") else { return };
    releases_a_then_b(&ns, true);
    ns.rollout_undo("pricing", None);
    let undone = assert_runs(&ns, "deployment", IMAGE_A).snapshots[SOURCE].clone();
    let held = || ns.annotation_of("deployment", "pricing", HELD);
    assert_eq!(held().as_deref(), Some(SOURCE));

    let restart = ns.kubectl(&["rollout", "restart", "deployment/pricing"]).expect_success();
    assert!(restart.warnings().iter().any(|w| w.contains("held on")), "{}", restart.describe());
    assert_eq!(assert_runs(&ns, "deployment", IMAGE_A).snapshots[SOURCE], undone, "a restart keeps the undone config");
    assert_eq!(held().as_deref(), Some(SOURCE));

    let patched = format!("{IMAGE_A}.1");
    ns.kubectl(&["set", "image", "deployment/pricing", &format!("app={patched}")]).expect_success();
    assert_eq!(assert_runs(&ns, "deployment", &patched).snapshots[SOURCE], undone, "set image keeps the undone config");
    assert_eq!(held().as_deref(), Some(SOURCE));
    let history = ns.history_of("pricing");
    assert_eq!(history.len(), 4, "B, the undo, the restart, set image: {history:#?}");
    assert_each_revision_runs_its_own_config(&history);

    let out = ns.accepts(&release(IMAGE_B, KEY_B));
    assert!(out.warnings().iter().any(|w| w.contains("pinned to")), "{}", out.describe());
    assert_runs(&ns, "deployment", IMAGE_B);
    assert_eq!(held(), None, "the release let go of the hold");
    assert_each_revision_runs_its_own_config(&ns.history_of("pricing"));
}

/// docs/behaviour.md §11.9: `helm upgrade` then `helm rollback` of an application chart (a ConfigMap and a
/// Deployment, image and config key from values) → the old image with the old config.
#[test]
fn helm_rollback_restores_the_old_image_with_the_old_config() {
    let Some(ns) = namespace("helm") else { return };
    let Some(helm) = find_helm() else {
        assert!(!crate::support::ci(), "helm is missing (CI=true)");
        eprintln!("e2e: no helm; skipping");
        return;
    };
    let chart = ns.cluster.state_dir.join(format!("run/app-chart-{}", ns.name));
    std::fs::create_dir_all(chart.join("templates")).unwrap();
    std::fs::write(chart.join("Chart.yaml"), "apiVersion: v2\nname: pricing\nversion: 0.1.0\n").unwrap();
    std::fs::write(chart.join("values.yaml"), format!("image: {IMAGE_A}\nkey: {KEY_A}\n")).unwrap();
    std::fs::write(chart.join("templates/configmap.yaml"), configmap(SOURCE, &[("{{ .Values.key }}", "/etc/rules")])).unwrap();
    std::fs::write(chart.join("templates/deployment.yaml"), pricing("{{ .Values.image }}")).unwrap();
    let helm_run = |args: &[&str]| {
        let out = Command::new(&helm)
            .args(args)
            .args(["-n", &ns.name])
            .env("KUBECONFIG", &ns.cluster.kubeconfig)
            .output()
            .unwrap_or_else(|e| panic!("run {}: {e}", helm.display()));
        let text = format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "helm {args:?} failed:\n{text}");
        text
    };
    let chart_dir = chart.to_str().unwrap();
    helm_run(&["install", "pricing", chart_dir]);
    assert_runs(&ns, "deployment", IMAGE_A);
    helm_run(&["upgrade", "pricing", chart_dir, "--set", &format!("image={IMAGE_B}"), "--set", &format!("key={KEY_B}")]);
    assert_runs(&ns, "deployment", IMAGE_B);
    assert_eq!(ns.history_of("pricing").len(), 2);

    helm_run(&["rollback", "pricing", "1"]);
    ns.wait_observed("deployment", "pricing");
    assert_runs(&ns, "deployment", IMAGE_A);
    let history = ns.history_of("pricing");
    assert_each_revision_runs_its_own_config(&history);
    assert_eq!(history.last().unwrap().image, IMAGE_A, "{history:#?}");
    assert_eq!(ns.snapshots().len(), 2, "the rollback found A's snapshot again");
}

/// docs/behaviour.md §6.2 "what counts as a change", §9: a workload that existed before confighistory was
/// registered is left alone by updates that do not change its pod template — scale (through the
/// scale subresource and through the main resource), label, annotate, pause: all allowed, no new
/// revision, no pin. (Its server starts after the workload exists, like an install.)
#[test]
fn unrelated_updates_of_a_workload_from_before_the_install_are_allowed_and_pin_nothing() {
    let Some(cluster) = cluster() else { return };
    let run = format!("{}-pre", run_id());
    let ns = TestNamespace::in_run(cluster, Some(&run), "before-install", &[]);
    ns.accepts(&pricing_config(KEY_A));
    ns.accepts(&pricing(IMAGE_A));
    let before = ns.history_of("pricing");
    assert_eq!(before[0].snapshots[SOURCE], SOURCE, "nothing pinned it: no server of run {run} yet");

    let server = Webhook::start(cluster, &run, &["--settle", "2", "--resync-interval", "5"]);
    // The controller has looked at the workload: it kept the content it runs with (adoption).
    wait_for("the adoption record of the running template", Duration::from_secs(60), || {
        ns.snapshots().iter().any(|s| {
            ns.get_json("configmap", s).is_some_and(|cm| !cm["metadata"]["annotations"]["confighistory.io/adopted-templates"].is_null())
        })
    });

    let updates: [&[&str]; 6] = [
        &["scale", "deployment/pricing", "--replicas=3"],
        &["patch", "deployment", "pricing", "--type=merge", "-p", r#"{"spec":{"replicas":2}}"#],
        &["label", "deployment", "pricing", "team=pricing"],
        &["annotate", "deployment", "pricing", "owner=pricing-team"],
        &["rollout", "pause", "deployment/pricing"],
        &["rollout", "resume", "deployment/pricing"],
    ];
    for update in updates {
        let out = ns.kubectl(update).expect_success();
        assert!(out.warnings().is_empty(), "{update:?} warned:\n{}", out.describe());
        let deployment = ns.get_json("deployment", "pricing").unwrap();
        assert_eq!(deployment["metadata"]["annotations"][PINS], Value::Null, "{update:?} pinned: {deployment:#}");
        assert_eq!(ns.history_of("pricing"), before, "{update:?} made a revision");
    }
    let deployment = ns.get_json("deployment", "pricing").unwrap();
    assert_eq!(deployment["spec"]["replicas"], 2);
    assert_eq!(deployment["metadata"]["labels"]["team"], "pricing");
    assert_eq!(ns.current_template("deployment", "pricing").snapshots[SOURCE], SOURCE);
    drop(server);
}

/// docs/behaviour.md §10: the caches hold metadata only, and ConfigMaps are listed and watched as metadata.
/// A server started in a cluster holding 60 ConfigMaps of 900 KiB (dashboards, release records:
/// 54 MiB of data, which fit in one page of the initial list) peaks below one copy of that data.
/// When the list carried whole objects, each page was parsed whole: about twice the data, and 200
/// such ConfigMaps took the server past the chart's 256Mi limit (docs/performance.md).
#[test]
fn a_namespace_of_large_configmaps_does_not_grow_the_server() {
    let Some(cluster) = cluster() else { return };
    let run = format!("{}-large", run_id());
    let ns = TestNamespace::in_run(cluster, Some(&run), "large", &[]);
    const COUNT: usize = 60;
    const KIB: usize = 900;
    let value: String = "0123456789abcdef".repeat(KIB * 1024 / 16 / 3);
    let items: Vec<Value> = (0..COUNT)
        .map(|i| {
            serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("dashboard-{i:02}")},
                               "data": {"a.json": value, "b.json": value, "c.json": value}})
        })
        .collect();
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string();
    cluster.kubectl_stdin(&["create", "-n", &ns.name, "-f", "-"], &list).expect_success();
    let data_kib = (COUNT * KIB) as u64;

    let server = Webhook::start(cluster, &run, &["--no-controllers"]);
    let peak = server.peak_rss_kib();
    assert!(
        peak < data_kib,
        "the server peaked at {} MiB starting beside {} MiB of ConfigMap data: the list carried the data",
        peak / 1024,
        data_kib / 1024
    );
    drop(server);
}

/// The namespace label selects the run: a namespace of no run is seen by no server.
#[test]
fn a_namespace_of_no_run_is_left_alone() {
    let Some(cluster) = cluster() else { return };
    webhook(cluster);
    let ns = TestNamespace::in_run(cluster, None, "no-run", &[]);
    ns.accepts(&release(IMAGE_A, KEY_A));
    assert_eq!(ns.current_template("deployment", "pricing").snapshots[SOURCE], SOURCE);
    assert!(ns.snapshots().is_empty());
    // Joining the run: the next release is pinned.
    ns.join_run(run_id());
    let pinned = wait_for_value("the webhooks to see the namespace", Duration::from_secs(20), || {
        let dry = ns.apply_with(&pricing(IMAGE_B), &["--dry-run=server", "-o", "json"]).ok()?;
        let pinned = pinned_in(&dry.json());
        (pinned != SOURCE).then_some(pinned)
    });
    assert!(pinned.starts_with(&format!("{SOURCE}-")));
}

/// A server whose stderr is a file (as in a pod, where it is a pipe) writes plain text: escape
/// codes for colours would garble `kubectl logs` and log collectors.
#[test]
fn the_server_log_is_plain_text_when_it_is_not_written_to_a_terminal() {
    let Some(cluster) = cluster() else { return };
    let log = webhook(cluster).log();
    assert!(log.contains("serving admission webhook"), "{log}");
    assert!(!log.contains('\u{1b}'), "escape codes in a log written to a file:\n{log}");
}
