//! docs/behaviour.md §9a trust: forged reviews sent straight to the port.

use axum::http::StatusCode;
use confighistory::cache::{Watched, Writer as _};
use confighistory::model::ids::{SourceId, SourceKind};
use confighistory::model::snapshot::{self, Content};
use confighistory::model::template::template_hash;
use serde_json::{json, Value};

use crate::common::{review, Answer, NS};
use crate::fixture::{annotation, configmap, content, deployment, in_namespace, pin_of, snap, with_annotations, Fixture, A, B, ME};

#[tokio::test]
async fn a_forged_old_object_plants_no_content() {
    // Another tenant's source, used by a plain-name workload: an UPDATE "from" forged content.
    let plain = deployment("pricing:4.11", "pricing-config");
    let f = Fixture::new().source("pricing-config", A).workload(&plain);
    let forged_old = configmap("pricing-config", &[("mode", "attacker"), ("discount_rules_path", "/evil")]);
    let new = configmap("pricing-config", B);
    let a = f.send("/mutate", review("ConfigMap", "", "v1", "UPDATE", Some(&new), Some(&forged_old))).await;
    assert!(a.allowed());
    let planted = content(&[("mode", "attacker"), ("discount_rules_path", "/evil")]);
    assert!(f.cluster.get(NS, &snapshot::name("pricing-config", &planted.hash(), 0)).is_none(), "no snapshot of forged content");
    assert!(!f.calls().iter().any(|c| c.starts_with("create")), "nothing written: {:?}", f.calls());
    assert!(a.warnings().iter().any(|w| w.contains("outgoing config not kept")), "{:?}", a.warnings());

    // The same request with a stale resourceVersion: not the stored object either.
    let mut stale = configmap("pricing-config", A);
    stale["metadata"]["resourceVersion"] = json!("1");
    let mut stored = f.cluster.get(NS, "pricing-config").unwrap();
    stored["metadata"]["resourceVersion"] = json!("2");
    f.cluster.insert(stored);
    let a = f.send("/mutate", review("ConfigMap", "", "v1", "UPDATE", Some(&new), Some(&stale))).await;
    assert!(f.cluster.get(NS, &snap("pricing-config", A)).is_none(), "{:?}", a.warnings());

    // oldObject as stored: the outgoing content is kept, as read from the API server.
    let mut current = configmap("pricing-config", A);
    current["metadata"]["resourceVersion"] = json!("2");
    f.send("/mutate", review("ConfigMap", "", "v1", "UPDATE", Some(&new), Some(&current))).await;
    let kept = f.cluster.get(NS, &snap("pricing-config", A)).expect("outgoing content kept");
    assert_eq!(kept["data"], configmap("x", A)["data"]);
}

#[tokio::test]
async fn dry_run_and_real_agree_on_forged_old_objects() {
    let plain = deployment("pricing:4.11", "pricing-config");
    let f = Fixture::new().source("pricing-config", A).workload(&plain);
    let forged_old = configmap("pricing-config", &[("mode", "attacker")]);
    let new = configmap("pricing-config", B);
    let mut answers = Vec::new();
    for dry in [true, false] {
        let mut r = review("ConfigMap", "", "v1", "UPDATE", Some(&new), Some(&forged_old));
        r["request"]["dryRun"] = json!(dry);
        let a = f.send("/mutate", r).await;
        answers.push((a.allowed(), a.warnings(), a.patch().len()));
    }
    assert_eq!(answers[0], answers[1]);
    assert!(!f.calls().iter().any(|c| c.starts_with("create")), "{:?}", f.calls());
}

#[tokio::test]
async fn namespaces_outside_the_policy_get_no_reads_or_writes() {
    let f = Fixture::new().source("pricing-config", A);
    let d = deployment("pricing:4.11", "pricing-config");
    let cm = configmap("pricing-config", B);
    let snapshot_obj = snapshot::object("kube-system", "pricing-config", &snap("pricing-config", A), &content(A), &["t".into()]);
    for (path, r) in [
        ("/mutate", review("Deployment", "apps", "v1", "CREATE", Some(&d), None)),
        ("/validate", review("Deployment", "apps", "v1", "CREATE", Some(&d), None)),
        ("/mutate", review("ConfigMap", "", "v1", "UPDATE", Some(&cm), Some(&configmap("pricing-config", A)))),
        ("/protect", review("ConfigMap", "", "v1", "CREATE", Some(&snapshot_obj), None)),
        ("/protect", review("ConfigMap", "", "v1", "DELETE", None, Some(&snapshot_obj))),
    ] {
        for ns in ["kube-system", "confighistory"] {
            let a = f.send(path, in_namespace(r.clone(), ns)).await;
            assert!(a.allowed() && a.patch().is_empty() && a.warnings().is_empty(), "{path} in {ns}: {}", a.body);
        }
    }
    assert!(f.calls().is_empty(), "{:?}", f.calls());
}

/// A kind another configuration of the chart registers and this server does not handle (a Secret
/// with Secrets off, a workload kind it has no registry entry for, forged kinds alike) is answered
/// "allowed, unchanged": during a `helm upgrade` that turns such a feature on, the webhooks reach
/// pods that do not serve it yet, and a refusal there failed the write (failurePolicy Fail) or
/// failed it open as an error. Nothing is read, written or labelled from it.
#[tokio::test]
async fn kinds_this_server_does_not_handle_are_allowed_unchanged_without_state() {
    let f = Fixture::new().source("pricing-config", A);
    let d = deployment("pricing:4.11", "pricing-config");
    let secret =
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db", "namespace": NS}, "data": {"password": "aHVudGVyMg=="}});
    let rollout = {
        let mut r = review("Rollout", "argoproj.io", "v1alpha1", "CREATE", Some(&d), None);
        r["request"]["resource"]["resource"] = json!("rollouts");
        r
    };
    let cases = vec![
        ("/mutate", review("Secret", "", "v1", "CREATE", Some(&secret), None)),
        ("/protect", review("Secret", "", "v1", "CREATE", Some(&secret), None)),
        ("/protect", review("Secret", "", "v1", "DELETE", None, Some(&secret))),
        ("/mutate", rollout.clone()),
        ("/validate", rollout),
        ("/mutate", review("Deployment-x1", "apps", "v1", "CREATE", Some(&d), None)),
        ("/mutate", review("Deployment", "evil.io", "v1", "CREATE", Some(&d), None)),
    ];
    for (path, r) in cases {
        let a = f.post(path, serde_json::to_vec(&r).unwrap()).await;
        assert_eq!(a.status, StatusCode::OK, "{path}: {r}");
        assert!(a.allowed() && a.patch().is_empty() && a.warnings().is_empty(), "{path}: {}", a.body);
        assert_eq!(a.response()["uid"], r["request"]["uid"]);
    }
    assert!(f.calls().is_empty(), "{:?}", f.calls());
    let metrics = confighistory::metrics::METRICS.render();
    assert!(!metrics.contains("Deployment-x1") && !metrics.contains("evil.io"), "no metric label from the request");
}

#[tokio::test]
async fn requests_the_webhooks_never_send_are_refused_without_state() {
    let f = Fixture::new().source("pricing-config", A);
    let d = deployment("pricing:4.11", "pricing-config");
    let cm = configmap("pricing-config", A);
    let mut cases = vec![
        // Kinds the endpoint is never registered for, in any configuration of the chart.
        ("/validate", review("ConfigMap", "", "v1", "CREATE", Some(&cm), None)),
        ("/protect", review("Deployment", "apps", "v1", "CREATE", Some(&d), None)),
        ("/mutate", review("ConfigMap", "", "v1", "DELETE", None, Some(&cm))),
        ("/mutate", review("Deployment", "apps", "v1", "CONNECT", Some(&d), None)),
        ("/mutate", review("ConfigMap", "", "v2", "CREATE", Some(&cm), None)),
    ];
    let mut sub = review("Deployment", "apps", "v1", "UPDATE", Some(&d), Some(&d));
    sub["request"]["subResource"] = json!("scale");
    cases.push(("/mutate", sub));
    // Names that are not Kubernetes names never reach a log line or an API path.
    cases.push(("/mutate", in_namespace(review("Deployment", "apps", "v1", "CREATE", Some(&d), None), "../../secrets")));
    let mut name = review("ConfigMap", "", "v1", "CREATE", Some(&cm), None);
    name["request"]["name"] = json!("x\n level=error msg=forged");
    cases.push(("/mutate", name));
    for (path, r) in cases {
        let a = f.post(path, serde_json::to_vec(&r).unwrap()).await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{path}: {r}");
        assert!(!a.body["error"].as_str().unwrap().is_empty());
    }
    assert!(f.calls().is_empty(), "{:?}", f.calls());
    let metrics = confighistory::metrics::METRICS.render();
    assert!(!metrics.contains("Deployment-x1"), "no metric label from a refused request");
}

/// Forged reviews naming missing ConfigMaps in namespaces that do not exist made one
/// GET each with confighistory's cluster-wide identity (and each invented namespace got its own
/// fair share of places). Once the namespace watch has listed, a namespace it does not know is
/// answered "allowed, no patch" without any read; one it knows is read from as before.
#[tokio::test]
async fn a_namespace_that_does_not_exist_costs_one_namespace_read() {
    let f = Fixture::new();
    {
        let mut state = f.state.write();
        state.apply_namespace(&json!({"metadata": {"name": NS}}));
        state.listed(Watched::Namespaces);
    }
    let mut d = deployment("pricing:4.11", "missing-0");
    d["spec"]["template"]["spec"]["volumes"] =
        json!((0..20).map(|i| json!({"name": format!("v{i}"), "configMap": {"name": format!("missing-{i}")}})).collect::<Vec<_>>());
    let old = with_annotations(configmap("pricing-config", A), &[("confighistory.io/head", &content(A).hash())]);
    let new = with_annotations(configmap("pricing-config", B), &[("confighistory.io/head", &content(A).hash())]);
    // One server, as in a pod: what it learnt a namespace is missing, it remembers for a while.
    let app = f.app();
    for i in 0..10 {
        let ns = format!("invented-{i}");
        for (path, r) in [
            ("/mutate", review("Deployment", "apps", "v1", "CREATE", Some(&d), None)),
            ("/validate", review("Deployment", "apps", "v1", "CREATE", Some(&d), None)),
            ("/mutate", review("ConfigMap", "", "v1", "UPDATE", Some(&new), Some(&old))),
        ] {
            let a = f.send_to(&app, path, in_namespace(r, &ns)).await;
            assert!(a.allowed() && a.patch().is_empty(), "{path} in {ns}: {}", a.body);
        }
    }
    let want: Vec<String> = (0..10).map(|i| format!("get namespace invented-{i}")).collect();
    assert_eq!(f.calls(), want, "one namespace read per invented namespace, and nothing else");
    // The namespace that exists is read from, as before, without reading the namespace.
    f.clear_calls();
    f.mutate_deployment("CREATE", &d, None).await;
    assert!(f.calls().iter().any(|c| c.contains("missing-3")), "{:?}", f.calls());
    assert!(f.calls().iter().all(|c| !c.contains("namespace")), "{:?}", f.calls());
}

/// The first release after leaving audit mode (or right after an install, before adoption has
/// reached the workload): its replaced revision names the source plainly and has no adoption
/// record. The release records that the revision ran with the content it is pinned to now, so a
/// later `rollout undo --to-revision=1` brings back that config, not the current one.
#[tokio::test]
async fn the_first_release_after_audit_mode_can_be_undone_to_the_config_its_predecessor_ran_with() {
    let rev1 = deployment("pricing:1.25", "pricing-config");
    let f = Fixture::new().source("pricing-config", A).workload(&rev1).revision(&rev1, 1);
    // The image-only release, right after the mode label went: pinned to A, and A's snapshot
    // records revision 1's template.
    let rev2 = deployment("pricing:1.26", "pricing-config");
    let a = f.mutate_deployment("UPDATE", &rev2, Some(&rev1)).await;
    assert!(a.allowed(), "{}", a.message());
    let rev2 = a.patched(&rev2);
    assert_eq!(pin_of(&rev2).0, snap("pricing-config", A));
    let snapshot = f.cluster.get(NS, &snap("pricing-config", A)).expect("the snapshot of A");
    let rev1_hash = template_hash(&rev1["spec"]["template"]);
    assert_eq!(annotation(&snapshot, "confighistory.io/adopted-templates"), Some(rev1_hash), "{snapshot}");
    f.state.write().apply_configmap(&snapshot);
    // Later a config edit rolls out (revision 3 on B); then the undo to revision 1.
    f.update_source("pricing-config", B);
    let rev3 = deployment("pricing:1.26", &snap("pricing-config", B));
    let f = f.snapshot("pricing-config", B, &[]).workload(&rev3).revision(&rev2, 2).revision(&rev3, 3);
    let a = f.mutate_deployment("UPDATE", &rev1, Some(&rev3)).await;
    assert!(a.allowed(), "{}", a.message());
    assert_eq!(pin_of(&a.patched(&rev1)).0, snap("pricing-config", A), "1.25 with the config 1.25 ran with: {:?}", a.warnings());
    assert!(!a.warnings().iter().any(|w| w.contains("predates")), "{:?}", a.warnings());
}

/// Promotion by copy: a team copies the live Deployment from staging into production (or restores
/// it from a backup taken with `kubectl get`), where the same ConfigMap exists but staging's pinned
/// snapshot does not. The workload must name a ConfigMap that exists and holds what its name
/// promises: that snapshot made from an identical source, or the head; never a dangling name.
#[tokio::test]
async fn a_copied_workload_naming_a_snapshot_missing_here_is_pinned_to_one_that_exists() {
    let f = Fixture::new().source("pricing-config", A);
    // Staging ran the same config: the name is made here, from the identical source.
    let copied = deployment("pricing:4.11", &snap("pricing-config", A));
    let a = f.mutate_deployment("CREATE", &copied, None).await;
    assert!(a.allowed(), "{}", a.body);
    let snapshot = SourceId::configmap(snap("pricing-config", A).as_str());
    assert!(f.cluster.source(NS, &snapshot).is_some(), "the snapshot the copy names now exists: {:?}", f.calls());
    let patched = a.patched(&copied);
    assert_eq!(patched["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"], json!(snap("pricing-config", A)));
    // Staging ran other config: the content that name promises is not here; the head is.
    let copied = deployment("pricing:4.11", &snap("pricing-config", B));
    let a = f.mutate_deployment("CREATE", &copied, None).await;
    assert!(a.allowed(), "{}", a.body);
    assert_eq!(a.patched(&copied)["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"], json!(snap("pricing-config", A)));
    assert!(
        a.warnings().iter().any(|w| w.contains(&format!("{} does not exist in {NS}", snap("pricing-config", B)))),
        "{:?}",
        a.warnings()
    );
    // Neither the snapshot nor its source exists here: refused, saying what to do.
    let copied = deployment("pricing:4.11", &snap("checkout-config", A));
    let a = f.mutate_deployment("CREATE", &copied, None).await;
    assert!(!a.allowed(), "{}", a.body);
    assert!(a.message().contains("neither exists") && a.message().contains("Create ConfigMap checkout-config first"), "{}", a.message());
}

/// Round 2 of the trust review: a forged review naming 64 invented ConfigMaps in a namespace that
/// exists cost 64 GETs each (3,072 from 48 reviews), and a 15 s flood slowed another tenant's
/// admissions from 0.1 s to 1-2 s. Once the ConfigMap watch has listed, names it does not know are
/// read at a bounded rate per namespace, and one found missing is not read again for a while;
/// names it knows are read as before, and another namespace has its own rate.
#[tokio::test]
async fn invented_source_names_cost_a_bounded_number_of_reads_per_namespace() {
    let f = Fixture::new().source("pricing-config", A);
    {
        let mut state = f.state.write();
        state.apply_namespace(&json!({"metadata": {"name": NS}}));
        state.apply_namespace(&json!({"metadata": {"name": "other"}}));
        state.listed(Watched::Namespaces);
        state.listed(Watched::Sources(SourceKind::ConfigMap));
    }
    let app = f.app();
    let naming = |from: usize| {
        let mut d = deployment("pricing:4.11", "pricing-config");
        d["spec"]["template"]["spec"]["volumes"] = json!((from..from + 64)
            .map(|i| json!({"name": format!("v{i}"), "configMap": {"name": format!("invented-{i}")}}))
            .collect::<Vec<_>>());
        review("Deployment", "apps", "v1", "CREATE", Some(&d), None)
    };
    // The same 64 names 24 times, then 24 reviews of 64 new names each.
    let started = std::time::Instant::now();
    for round in 0..48 {
        let from = if round < 24 { 0 } else { 64 * round };
        let a = f.send_to(&app, "/mutate", naming(from)).await;
        assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    }
    let reads = f.calls().iter().filter(|c| c.contains("invented-")).count();
    // The namespace's burst, then its rate for as long as the flood took (a loaded machine).
    let most = 64 + (16.0 * started.elapsed().as_secs_f64()).ceil() as usize;
    assert!(reads <= most, "{reads} reads of invented names from 48 forged reviews (at most {most})");
    // A name the watch knows is still read fresh, and pinned.
    f.clear_calls();
    let a = f.mutate_deployment("CREATE", &deployment("pricing:4.12", "pricing-config"), None).await;
    assert!(f.calls().iter().any(|c| c.contains("pricing-config")), "{:?}", f.calls());
    assert!(a.patched(&deployment("pricing:4.12", "pricing-config")).to_string().contains(&snap("pricing-config", A)), "{}", a.body);
    // Another namespace has its own rate: its invented names are read.
    f.clear_calls();
    let a = f.send_to(&app, "/mutate", in_namespace(naming(100_000), "other")).await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(f.calls().iter().filter(|c| c.contains("invented-")).count(), 64, "{:?}", f.calls());
}

/// Flux and Argo CD dry-run a whole release on the server before applying it (so do `kubectl diff`
/// and `kubectl apply --dry-run=server`): the dry run of a Deployment comes before its ConfigMap
/// exists. The create that follows within seconds, while the ConfigMap watch has not delivered the
/// new ConfigMap yet, must still read it and pin: a dry run's "missing" is not remembered, and a
/// ConfigMap this replica admitted is no longer remembered missing (docs/behaviour.md §9a.5).
#[tokio::test]
async fn a_release_dry_run_before_its_configmap_exists_does_not_leave_the_apply_unpinned() {
    let f = Fixture::new();
    {
        let mut state = f.state.write();
        state.apply_namespace(&json!({"metadata": {"name": NS}}));
        state.listed(Watched::Namespaces);
        state.listed(Watched::Sources(SourceKind::ConfigMap));
    }
    let app = f.app();
    let pinned = |a: &Answer, d: &Value| a.patched(d)["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"].clone();

    // The dry run of the whole release: the ConfigMap does not exist yet.
    let d = deployment("pricing:4.11", "pricing-config");
    let mut dry = review("Deployment", "apps", "v1", "CREATE", Some(&d), None);
    dry["request"]["dryRun"] = json!(true);
    let a = f.send_to(&app, "/mutate", dry).await;
    assert!(a.allowed(), "{}", a.body);
    // The apply: the ConfigMap is created (the watch has not delivered it), then the Deployment.
    f.cluster.insert(configmap("pricing-config", A));
    let a = f.send_to(&app, "/mutate", review("Deployment", "apps", "v1", "CREATE", Some(&d), None)).await;
    assert!(a.allowed(), "{}", a.body);
    assert_eq!(pinned(&a, &d), json!(snap("pricing-config", A)), "pinned at the first apply: {}", a.body);

    // Without a dry run: a Deployment applied before its ConfigMap is admitted unpinned (nothing
    // to pin to); the ConfigMap's create through this replica makes the next write read it.
    let d = deployment("pricing:4.11", "checkout-config");
    let a = f.send_to(&app, "/mutate", review("Deployment", "apps", "v1", "CREATE", Some(&d), None)).await;
    assert!(a.allowed(), "{}", a.body);
    assert_eq!(pinned(&a, &d), json!("checkout-config"), "nothing to pin to yet: {}", a.body);
    let cm = configmap("checkout-config", A);
    let a = f.send_to(&app, "/mutate", review("ConfigMap", "", "v1", "CREATE", Some(&cm), None)).await;
    assert!(a.allowed(), "{}", a.body);
    f.cluster.insert(cm);
    let d2 = deployment("pricing:4.12", "checkout-config");
    let a = f.send_to(&app, "/mutate", review("Deployment", "apps", "v1", "UPDATE", Some(&d2), Some(&d))).await;
    assert!(a.allowed(), "{}", a.body);
    assert_eq!(pinned(&a, &d2), json!(snap("checkout-config", A)), "pinned once the ConfigMap exists: {}", a.body);
}

/// `kubectl create namespace x && kubectl apply -f app.yaml` (or `helm install --create-namespace`):
/// the first workloads come before the namespace watch delivers the namespace. They are decided
/// like any other, with the namespace read fresh (its mode label counts), not let through as
/// if the namespace did not exist.
#[tokio::test]
async fn a_namespace_the_watch_has_not_delivered_yet_is_read_and_decided_normally() {
    let f = Fixture::new();
    {
        let mut state = f.state.write();
        state.apply_namespace(&json!({"metadata": {"name": NS}}));
        state.listed(Watched::Namespaces);
    }
    f.cluster.insert_namespace(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "fresh-ns"}}));
    f.cluster.insert_namespace(json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "fresh-enforce", "labels": {"confighistory.io/mode": "enforce"}}}));
    for ns in ["fresh-ns", "fresh-enforce"] {
        let mut cm = configmap("pricing-config", A);
        cm["metadata"]["namespace"] = json!(ns);
        f.cluster.insert(cm);
    }
    let d = deployment("pricing:4.11", "pricing-config");

    // Rewrite mode (the default): pinned, and the snapshot written.
    let create = |ns: &str, obj: &Value| in_namespace(review("Deployment", "apps", "v1", "CREATE", Some(obj), None), ns);
    let m = f.send("/mutate", create("fresh-ns", &d)).await;
    assert!(m.allowed(), "{}", m.message());
    let pinned = m.patched(&d);
    let want = snap("pricing-config", A);
    assert_eq!(pin_of(&pinned), (want.clone(), want.clone()), "{}", m.body);
    assert!(f.cluster.get("fresh-ns", &want).is_some(), "snapshot created in fresh-ns");
    assert_eq!(f.calls()[0], "get namespace fresh-ns", "the namespace is confirmed before any other read: {:?}", f.calls());
    let v = f.send("/validate", create("fresh-ns", &pinned)).await;
    assert!(v.allowed(), "{}", v.message());
    let v = f.send("/validate", create("fresh-ns", &d)).await;
    assert!(!v.allowed(), "validation runs: {}", v.body);
    assert!(v.message().contains("names mutable ConfigMap pricing-config"), "{}", v.message());

    // The fresh namespace's mode label is honoured: enforce never rewrites, and refuses.
    let m = f.send("/mutate", create("fresh-enforce", &d)).await;
    assert!(m.allowed() && m.patch().is_empty(), "{}", m.body);
    let v = f.send("/validate", create("fresh-enforce", &d)).await;
    assert!(!v.allowed(), "{}", v.body);
}

#[tokio::test]
async fn a_reference_that_is_not_a_configmap_name_is_never_read() {
    let f = Fixture::new().source("pricing-config", A);
    let d = deployment("pricing:4.11", "../secrets/db-password");
    let a = f.mutate_deployment("CREATE", &d, None).await;
    assert!(a.allowed());
    assert!(f.calls().iter().all(|c| !c.contains("secrets")), "{:?}", f.calls());
}

#[tokio::test]
async fn tenants_cannot_plant_history_in_snapshots() {
    let f = Fixture::new();
    let name = snap("pricing-config", A);
    let adopted = snapshot::object(NS, "pricing-config", &name, &content(A), &["template-of-an-old-revision".into()]);
    let a = f.send("/protect", review("ConfigMap", "", "v1", "CREATE", Some(&adopted), None)).await;
    assert!(!a.allowed());
    assert!(a.message().contains("adoption records"), "{}", a.message());
    // confighistory itself and the admin's allowlist (backup restores) may.
    assert!(f.as_user("/protect", ME, review("ConfigMap", "", "v1", "CREATE", Some(&adopted), None)).await.allowed());
    let mut allowing = Fixture::new();
    allowing.policy.snapshot_creators = vec!["system:serviceaccount:velero:velero".into()];
    let r = review("ConfigMap", "", "v1", "CREATE", Some(&adopted), None);
    assert!(allowing.as_user("/protect", "system:serviceaccount:velero:velero", r).await.allowed());

    let plain = snapshot::object(NS, "pricing-config", &name, &content(A), &[]);
    let mut owned = plain.clone();
    owned["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "mine", "uid": "u"}]);
    let mut finalized = plain.clone();
    finalized["metadata"]["finalizers"] = json!(["example.com/hold"]);
    let mut renamed = plain.clone();
    renamed["metadata"]["annotations"]["confighistory.io/source-name"] = json!("other-config");
    let mut relabelled = plain.clone();
    relabelled["metadata"]["labels"]["confighistory.io/source"] = json!("other-config");
    // Nor name who wrote its content: a snapshot made ahead of a write would name anyone.
    let mut authored = plain.clone();
    authored["metadata"]["annotations"]["confighistory.io/changed-by"] = json!("alice");
    let mut unattributed = plain.clone();
    unattributed["metadata"]["annotations"]["confighistory.io/unattributed"] = json!("before confighistory");
    assert!(f.as_user("/protect", ME, review("ConfigMap", "", "v1", "CREATE", Some(&authored), None)).await.allowed());
    for (obj, why) in [
        (&owned, "ownerReferences"),
        (&finalized, "finalizers"),
        (&renamed, "source"),
        (&relabelled, "source"),
        (&authored, "confighistory.io/changed-by"),
        (&unattributed, "confighistory.io/unattributed"),
    ] {
        let a = f.send("/protect", review("ConfigMap", "", "v1", "CREATE", Some(obj), None)).await;
        assert!(!a.allowed() && a.message().contains(why), "{why}: {}", a.message());
    }
    // An honest copy of its own content (a tenant restoring one by hand) is fine.
    assert!(f.send("/protect", review("ConfigMap", "", "v1", "CREATE", Some(&plain), None)).await.allowed());
    let second = snapshot::object(NS, "pricing-config", &snapshot::name("pricing-config", &content(A).hash(), 2), &content(A), &[]);
    assert!(f.send("/protect", review("ConfigMap", "", "v1", "CREATE", Some(&second), None)).await.allowed());
}

#[tokio::test]
async fn the_oldest_adoption_record_wins_whatever_its_name() {
    let plain = deployment("pricing:4.11", "pricing-config");
    let t = template_hash(&plain["spec"]["template"]);
    let pinned_b = deployment("pricing:4.12", &snap("pricing-config", B));
    let f = Fixture::new()
        .source("pricing-config", B)
        .snapshot("pricing-config", B, &[])
        .workload(&pinned_b)
        .revision(&plain, 1)
        .revision(&pinned_b, 2);
    // The record written when the template ran, and a later claim under a name that sorts first.
    let mut first = snapshot::object(NS, "pricing-config", &snap("pricing-config", A), &content(A), std::slice::from_ref(&t));
    first["metadata"]["creationTimestamp"] = json!("2026-01-01T00:00:00Z");
    let other = (0..)
        .map(|i| Content { data: [("mode".to_owned(), format!("attacker-{i}"))].into(), ..Default::default() })
        .find(|c| snapshot::name("pricing-config", &c.hash(), 0) < snap("pricing-config", A))
        .unwrap();
    let mut later = snapshot::object(NS, "pricing-config", &snapshot::name("pricing-config", &other.hash(), 0), &other, &[t]);
    later["metadata"]["creationTimestamp"] = json!("2026-06-01T00:00:00Z");
    for o in [&first, &later] {
        f.cluster.insert(o.clone());
        f.state.write().apply_configmap(o);
    }
    let a = f.mutate_deployment("UPDATE", &plain, Some(&pinned_b)).await;
    assert_eq!(pin_of(&a.patched(&plain)).0, snap("pricing-config", A));
}
