//! docs/behaviour.md §6.2 workloads: pins, holds, releases and undos.

use confighistory::cache::{Watched, Writer as _};
use confighistory::model::snapshot;
use confighistory::model::template::template_hash;
use serde_json::{json, Value};

use crate::common::{review, NS};
use crate::fixture::{annotation, configmap, content, deployment, pin_of, snap, with_annotations, Fixture, A, B, ME};

#[tokio::test]
async fn create_pins_every_reference_of_a_source_to_one_snapshot() {
    let f = Fixture::new().source("pricing-config", A);
    let d = deployment("pricing:4.11", "pricing-config");
    let a = f.mutate_deployment("CREATE", &d, None).await;
    assert!(a.allowed());
    let out = a.patched(&d);
    let want = snap("pricing-config", A);
    assert_eq!(pin_of(&out), (want.clone(), want.clone()));
    let pins: Value = serde_json::from_str(&annotation(&out, "confighistory.io/pins").unwrap()).unwrap();
    assert_eq!(pins, json!({"pricing-config": content(A).hash()}));
    assert!(a.warnings().iter().any(|w| w.contains(&want)), "{:?}", a.warnings());
    let created = f.cluster.get(NS, &want).expect("snapshot created");
    assert_eq!(snapshot::validate(&created), Ok(content(A).hash()));
    assert_eq!(created["data"], configmap("x", A)["data"], "byte-for-byte copy");
    assert!(created["metadata"]["labels"].get("app").is_none());
}

/// The head annotation of `source` in the cluster once the background write lands (up to 2 s).
async fn recorded_head(f: &Fixture, source: &str) -> Option<String> {
    for _ in 0..100 {
        if let Some(head) = f.cluster.get(NS, source).and_then(|cm| annotation(&cm, "confighistory.io/head")) {
            return Some(head);
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    None
}

/// docs/behaviour.md §6.1, §10.11: a source created before any workload named it (GitOps tools apply
/// ConfigMaps first) has no head. Pinning a workload to it records the head on it, so the next
/// apply of the unchanged source writes nothing and a dry run of it matches the stored object;
/// a dry run records nothing, and a source that has a head is not written.
#[tokio::test]
async fn pinning_a_source_without_a_head_records_its_head() {
    let f = Fixture::new().source("pricing-config", A);
    let d = deployment("pricing:4.11", "pricing-config");
    let mut dry = review("Deployment", "apps", "v1", "CREATE", Some(&d), None);
    dry["request"]["dryRun"] = json!(true);
    f.send("/mutate", dry).await;
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    assert_eq!(annotation(&f.cluster.get(NS, "pricing-config").unwrap(), "confighistory.io/head"), None, "a dry run writes nothing");

    assert!(f.mutate_deployment("CREATE", &d, None).await.allowed());
    assert_eq!(recorded_head(&f, "pricing-config").await, Some(content(A).hash()));

    let with_head = Fixture::new().source("pricing-config", A);
    let cm = with_annotations(with_head.cluster.get(NS, "pricing-config").unwrap(), &[("confighistory.io/head", &content(A).hash())]);
    with_head.cluster.insert(cm.clone());
    with_head.state.write().apply_configmap(&cm);
    assert!(with_head.mutate_deployment("CREATE", &d, None).await.allowed());
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let patches: Vec<String> = with_head.calls().into_iter().filter(|c| *c == format!("patch {NS}/pricing-config")).collect();
    assert!(patches.is_empty(), "{:?}", with_head.calls());
}

#[tokio::test]
async fn reapplying_unchanged_manifests_keeps_pins_without_api_calls() {
    let pinned = deployment("pricing:4.11", &snap("pricing-config", A));
    let old = with_annotations(pinned.clone(), &[("confighistory.io/pins", &format!("{{\"pricing-config\":\"{}\"}}", content(A).hash()))]);
    let f = Fixture::new().source("pricing-config", B).snapshot("pricing-config", A, &[]).workload(&old);
    // kubectl apply sends the plain names again, and an annotation from the manifest.
    let reapplied = with_annotations(deployment("pricing:4.11", "pricing-config"), &[("team", "pricing")]);
    let a = f.mutate_deployment("UPDATE", &reapplied, Some(&old)).await;
    let out = a.patched(&reapplied);
    assert_eq!(out["spec"]["template"], old["spec"]["template"], "template unchanged: no new revision");
    assert_eq!(annotation(&out, "confighistory.io/pins"), annotation(&old, "confighistory.io/pins"));
    assert!(f.calls().is_empty(), "no API call on the steady-state path: {:?}", f.calls());

    // A scale is no change either.
    let mut scaled = old.clone();
    scaled["spec"]["replicas"] = json!(5);
    let a = f.mutate_deployment("UPDATE", &scaled, Some(&old)).await;
    assert!(a.patch().is_empty(), "{:?}", a.patch());
    assert!(f.calls().is_empty());
}

/// The router answers the steady state from memory, without the admission driver and its log
/// span (docs/performance.md "The small path over the floor"): that answer is the driver's, and
/// what needs a read, a write or a log line is left to the driver.
#[tokio::test]
async fn the_answer_from_memory_is_the_drivers_answer() {
    use confighistory::admission::review::parse;
    use confighistory::webhook::{admit, from_memory, Endpoint};
    let pinned = deployment("pricing:4.11", &snap("pricing-config", A));
    let old = with_annotations(pinned.clone(), &[("confighistory.io/pins", &format!("{{\"pricing-config\":\"{}\"}}", content(A).hash()))]);
    let f = Fixture::new().source("pricing-config", B).snapshot("pricing-config", A, &[]).workload(&old);
    let app = f.app();
    let request = |kind: &str, group: &str, op: &str, obj: &Value, old: Option<&Value>| {
        parse(&serde_json::to_vec(&review(kind, group, "v1", op, Some(obj), old)).unwrap()).unwrap()
    };
    let reapplied = deployment("pricing:4.11", "pricing-config");
    let release = deployment("pricing:4.12", "pricing-config");
    let answered = [
        (Endpoint::Mutate, request("Deployment", "apps", "UPDATE", &reapplied, Some(&old))),
        (Endpoint::Validate, request("Deployment", "apps", "UPDATE", &old, Some(&old))),
        (Endpoint::Protect, request("ConfigMap", "", "UPDATE", &configmap("pricing-config", B), None)),
    ];
    for (endpoint, req) in &answered {
        let fast = from_memory(&app, *endpoint, req).unwrap_or_else(|| panic!("{endpoint:?} {}: not answered from memory", req.kind.kind));
        assert_eq!(fast, admit(&app, *endpoint, req).await, "{endpoint:?} {}", req.kind.kind);
    }
    let (response, reason) = from_memory(&app, Endpoint::Mutate, &answered[0].1).unwrap();
    let kept: Vec<&Value> = response.patch.iter().filter(|op| op["op"] == "replace").map(|op| &op["value"]).collect();
    assert_eq!((reason.as_str(), kept.len()), ("unchanged", 2), "both references keep the pinned name: {:?}", response.patch);
    assert!(kept.iter().all(|v| **v == json!(snap("pricing-config", A))), "{:?}", response.patch);
    // A denial (a mutable reference left unpinned) is logged and may be let through by a replica
    // that just started: left to the driver.
    let unpinned = request("Deployment", "apps", "CREATE", &reapplied, None);
    assert!(!admit(&app, Endpoint::Validate, &unpinned).await.0.allowed, "the driver refuses it");
    assert_eq!(from_memory(&app, Endpoint::Validate, &unpinned), None);
    // A release makes a snapshot, a ConfigMap write is hashed and recorded, a namespace the watch
    // has listed and does not know is read: all left to the driver.
    let unlisted = {
        let mut r = request("Deployment", "apps", "UPDATE", &reapplied, Some(&old));
        r.namespace = "listed-but-unknown".into();
        r
    };
    f.state.write().listed(Watched::Namespaces);
    for (endpoint, req) in [
        (Endpoint::Mutate, request("Deployment", "apps", "UPDATE", &release, Some(&old))),
        (Endpoint::Mutate, request("ConfigMap", "", "UPDATE", &configmap("pricing-config", A), Some(&configmap("pricing-config", B)))),
        (Endpoint::Mutate, unlisted),
    ] {
        assert_eq!(from_memory(&app, endpoint, &req), None, "{endpoint:?} {} {}", req.kind.kind, req.namespace);
    }
    assert!(f.calls().iter().all(|c| !c.contains("create")), "nothing was written: {:?}", f.calls());
}

/// docs/behaviour.md §6.2: the unchanged rule holds in every mode that acts. A workload pinned in rewrite mode,
/// its namespace switched to enforce or audit, the same manifest re-applied: the pins stay, no API
/// call, and validation lets it through.
#[tokio::test]
async fn switching_modes_never_unpins_an_unchanged_template() {
    for mode in ["enforce", "audit"] {
        let old = deployment("pricing:4.11", &snap("pricing-config", A));
        let f = Fixture::new().source("pricing-config", B).snapshot("pricing-config", A, &[]).workload(&old).namespace_mode(mode);
        let reapplied = deployment("pricing:4.11", "pricing-config");
        let a = f.mutate_deployment("UPDATE", &reapplied, Some(&old)).await;
        let out = a.patched(&reapplied);
        assert_eq!(out["spec"]["template"], old["spec"]["template"], "{mode}: the pins stay");
        let v = f.send("/validate", review("Deployment", "apps", "v1", "UPDATE", Some(&out), Some(&old))).await;
        assert!(v.allowed(), "{mode}: {}", v.message());
        assert!(f.calls().is_empty(), "{mode}: {:?}", f.calls());
        // A changed template is not rewritten in these modes.
        let release = deployment("pricing:4.12", "pricing-config");
        assert!(f
            .mutate_deployment("UPDATE", &release, Some(&old))
            .await
            .patch()
            .iter()
            .all(|op| op["path"] != "/spec/template/spec/volumes/0/configMap/name"));
    }
}

#[tokio::test]
async fn release_takes_the_head_and_releases_a_hold() {
    let old = with_annotations(deployment("pricing:4.11", &snap("pricing-config", A)), &[("confighistory.io/held", "pricing-config")]);
    let f = Fixture::new().source("pricing-config", B).snapshot("pricing-config", A, &[]).workload(&old);
    let new = deployment("pricing:4.12", "pricing-config");
    let a = f.mutate_deployment("UPDATE", &new, Some(&old)).await;
    let out = a.patched(&new);
    assert_eq!(pin_of(&out).0, snap("pricing-config", B));
    assert_eq!(annotation(&out, "confighistory.io/held"), None);
    assert!(f.cluster.get(NS, &snap("pricing-config", B)).is_some());
}

/// docs/behaviour.md §7.9: the change-cause confighistory wrote for a propagation's revision does
/// not ride along into the user's next release (its revision would claim a config change); a
/// change-cause the user sets, or one that is not confighistory's, stays, and so does the one an
/// undo brings back.
#[tokio::test]
async fn a_release_drops_the_change_cause_confighistory_wrote_and_keeps_a_users() {
    // Longer than 64 characters, as confighistory writes them (a change-cause of up to 200): read
    // whole, or a release would carry it over and the next propagation take it for the user's.
    const OURS: &str = "config pricing-config changed by system:serviceaccount:ci:deployer: settings removed [discount_rules_path], added [rules.discount_path]";
    let cause = |obj: &Value| (annotation(obj, "kubernetes.io/change-cause"), annotation(obj, "confighistory.io/change-cause"));
    let pinned = deployment("pricing:4.11", &snap("pricing-config", B));
    let propagated = with_annotations(pinned.clone(), &[("kubernetes.io/change-cause", OURS), ("confighistory.io/change-cause", OURS)]);
    let f = Fixture::new().source("pricing-config", B).snapshot("pricing-config", B, &[]).workload(&propagated);

    // `kubectl apply` of the next image: the manifest says nothing of the change-cause, which the
    // stored object carries over.
    let release = with_annotations(
        deployment("pricing:4.12", "pricing-config"),
        &[("kubernetes.io/change-cause", OURS), ("confighistory.io/change-cause", OURS)],
    );
    let a = f.mutate_deployment("UPDATE", &release, Some(&propagated)).await;
    assert!(a.allowed());
    let out = a.patched(&release);
    assert_eq!(cause(&out), (None, None), "{:#}", out["metadata"]);
    assert_eq!(pin_of(&out).0, snap("pricing-config", B));

    // The same release carrying the user's own change-cause (set by the request): kept.
    let theirs = with_annotations(release.clone(), &[("kubernetes.io/change-cause", "release 4.12")]);
    let out = f.mutate_deployment("UPDATE", &theirs, Some(&propagated)).await.patched(&theirs);
    assert_eq!(cause(&out).0.as_deref(), Some("release 4.12"));
    // A change-cause the user wrote before (not confighistory's record): kept.
    let annotated = with_annotations(propagated.clone(), &[("kubernetes.io/change-cause", "by hand")]);
    let release = with_annotations(annotated.clone(), &[]);
    let mut release = release;
    release["spec"]["template"]["spec"]["containers"][0]["image"] = json!("pricing:4.12");
    let out = f.mutate_deployment("UPDATE", &release, Some(&annotated)).await.patched(&release);
    assert_eq!(cause(&out), (Some("by hand".to_owned()), Some(OURS.to_owned())));
    // A restart of the propagated revision's template is no config change either: dropped.
    let mut restarted = propagated.clone();
    restarted["spec"]["template"]["metadata"]["annotations"] = json!({"kubectl.kubernetes.io/restartedAt": "now"});
    let out = f.mutate_deployment("UPDATE", &restarted, Some(&propagated)).await.patched(&restarted);
    assert_eq!(cause(&out), (None, None));
    // Re-applying the unchanged manifest makes no revision: left as it is.
    let out = f.mutate_deployment("UPDATE", &propagated, Some(&propagated)).await.patched(&propagated);
    assert_eq!(cause(&out), (Some(OURS.to_owned()), Some(OURS.to_owned())));
}

#[tokio::test]
async fn undo_keeps_the_revisions_snapshot_and_holds_it() {
    let rev1 = deployment("pricing:4.11", &snap("pricing-config", A));
    let rev2 = deployment("pricing:4.12", &snap("pricing-config", B));
    let f = Fixture::new()
        .source("pricing-config", B)
        .snapshot("pricing-config", A, &[])
        .snapshot("pricing-config", B, &[])
        .workload(&rev2)
        .revision(&rev1, 1)
        .revision(&rev2, 2);
    // kubectl rollout undo copies revision 1's annotations too: never trusted.
    let undo = with_annotations(rev1.clone(), &[("confighistory.io/pins", "{\"pricing-config\":\"forged\"}")]);
    let a = f.mutate_deployment("UPDATE", &undo, Some(&rev2)).await;
    assert!(a.allowed());
    let out = a.patched(&undo);
    assert_eq!(pin_of(&out).0, snap("pricing-config", A), "old image with old config");
    assert_eq!(annotation(&out, "confighistory.io/held").as_deref(), Some("pricing-config"));
    assert!(annotation(&out, "confighistory.io/pins").unwrap().contains(&content(A).hash()));
    assert!(a.warnings().iter().any(|w| w.contains("held")), "{:?}", a.warnings());

    // A restart afterwards keeps the held pin even though a change is pending.
    f.update_source("pricing-config", B);
    let held = out.clone();
    let mut restarted = held.clone();
    restarted["spec"]["template"]["metadata"]["annotations"] = json!({"kubectl.kubernetes.io/restartedAt": "now"});
    let a = f.mutate_deployment("UPDATE", &restarted, Some(&held)).await;
    let out = a.patched(&restarted);
    assert_eq!(pin_of(&out).0, snap("pricing-config", A));
    assert_eq!(annotation(&out, "confighistory.io/held").as_deref(), Some("pricing-config"));
}

/// docs/behaviour.md §2: the workload records the head a hold was taken at; a change made after the hold
/// moves the held pin (here: a restart joins the fix-forward that is waiting for propagation).
#[tokio::test]
async fn a_hold_records_its_head_and_a_later_change_moves_it() {
    const C: &[(&str, &str)] = &[("mode", "c"), ("rules.discount_path", "/rules")];
    let rev1 = deployment("pricing:4.11", &snap("pricing-config", A));
    let rev2 = deployment("pricing:4.12", &snap("pricing-config", B));
    let f = Fixture::new()
        .source("pricing-config", B)
        .snapshot("pricing-config", A, &[])
        .snapshot("pricing-config", B, &[])
        .workload(&rev2)
        .revision(&rev1, 1)
        .revision(&rev2, 2);
    let held = f.mutate_deployment("UPDATE", &rev1, Some(&rev2)).await.patched(&rev1);
    assert_eq!(annotation(&held, "confighistory.io/held").as_deref(), Some("pricing-config"));
    let heads = annotation(&held, "confighistory.io/held-heads").expect("the head at hold time");
    assert_eq!(heads, format!("{{\"pricing-config\":\"{}\"}}", content(B).hash()));

    // The team fixes the config forward (a change after the hold, waiting for propagation).
    f.update_source("pricing-config", C);
    let mut source = f.cluster.get(NS, "pricing-config").unwrap();
    source["metadata"]["annotations"] =
        json!({"confighistory.io/head": content(C).hash(), "confighistory.io/changed-at": "2026-12-03T09:00:00Z"});
    f.cluster.insert(source);
    let mut restarted = held.clone();
    restarted["spec"]["template"]["metadata"]["annotations"] = json!({"kubectl.kubernetes.io/restartedAt": "now"});
    let out = f.mutate_deployment("UPDATE", &restarted, Some(&held)).await.patched(&restarted);
    assert_eq!(pin_of(&out).0, snap("pricing-config", C), "joins the fix-forward");
    assert_eq!(annotation(&out, "confighistory.io/held"), None);
    assert_eq!(annotation(&out, "confighistory.io/held-heads"), None);
}

/// The source at B, its snapshot of B, and its snapshot of A whose adoption record lists `plain`'s
/// template: `plain` ran with A before confighistory was installed.
fn adopted_before_install(plain: &Value) -> Fixture {
    Fixture::new().source("pricing-config", B).snapshot("pricing-config", A, &[template_hash(&plain["spec"]["template"])]).snapshot(
        "pricing-config",
        B,
        &[],
    )
}

#[tokio::test]
async fn undo_to_a_revision_from_before_the_install_uses_the_adoption_record() {
    let plain = deployment("pricing:4.11", "pricing-config");
    let pinned_b = deployment("pricing:4.12", &snap("pricing-config", B));
    let f = adopted_before_install(&plain).workload(&pinned_b).revision(&plain, 1).revision(&pinned_b, 2);
    let a = f.mutate_deployment("UPDATE", &plain, Some(&pinned_b)).await;
    let out = a.patched(&plain);
    assert_eq!(pin_of(&out), (snap("pricing-config", A), snap("pricing-config", A)));
    assert_eq!(annotation(&out, "confighistory.io/held").as_deref(), Some("pricing-config"));
}

/// docs/behaviour.md §9 with §6.2.1: `rollout undo` admitted while the webhook was away, back to a revision
/// from before the install, names the source plainly. Repair's trigger names the snapshot whose
/// adoption record lists that template: admitting it is the undo it is (that snapshot, held
/// against the head). A trigger naming the head (propagation) still moves it to the head.
#[tokio::test]
async fn a_repair_trigger_on_an_undone_plain_template_takes_the_snapshot_its_adoption_record_names() {
    let plain = deployment("pricing:4.11", "pricing-config");
    let pinned_b = deployment("pricing:4.12", &snap("pricing-config", B));
    let f = adopted_before_install(&plain).workload(&plain).revision(&pinned_b, 2).revision(&plain, 3);
    let trigger =
        |data| with_annotations(plain.clone(), &[("confighistory.io/propagate", &format!("pricing-config={}", content(data).hash()))]);

    let repair = trigger(A);
    let a = f.as_user("/mutate", ME, review("Deployment", "apps", "v1", "UPDATE", Some(&repair), Some(&plain))).await;
    let out = a.patched(&repair);
    assert_eq!(pin_of(&out), (snap("pricing-config", A), snap("pricing-config", A)), "{:?}", a.warnings());
    assert_eq!(annotation(&out, "confighistory.io/held").as_deref(), Some("pricing-config"));
    assert!(annotation(&out, "confighistory.io/held-heads").is_some_and(|h| h.contains(&content(B).hash())));
    assert!(a.warnings().iter().any(|w| w.contains("held on")), "{:?}", a.warnings());
    assert_eq!(annotation(&out, "confighistory.io/propagate"), None, "the trigger is consumed");

    let propagate = trigger(B);
    let out =
        f.as_user("/mutate", ME, review("Deployment", "apps", "v1", "UPDATE", Some(&propagate), Some(&plain))).await.patched(&propagate);
    assert_eq!(pin_of(&out).0, snap("pricing-config", B), "a propagation trigger takes the head");
    assert_eq!(annotation(&out, "confighistory.io/held"), None);

    // Nobody else's trigger counts; and a trigger naming a snapshot no adoption record ties to
    // this template takes the head.
    let out =
        f.as_user("/mutate", "mallory", review("Deployment", "apps", "v1", "UPDATE", Some(&repair), Some(&plain))).await.patched(&repair);
    assert_eq!(pin_of(&out).0, "pricing-config");
    let stranger = Fixture::new().source("pricing-config", B).snapshot("pricing-config", A, &[]).workload(&plain).revision(&plain, 1);
    let out =
        stranger.as_user("/mutate", ME, review("Deployment", "apps", "v1", "UPDATE", Some(&repair), Some(&plain))).await.patched(&repair);
    assert_eq!(pin_of(&out).0, snap("pricing-config", B));
}

#[tokio::test]
async fn partial_edit_joins_a_pending_change_unless_held() {
    let old = deployment("pricing:4.11", &snap("pricing-config", A));
    let f = Fixture::new().snapshot("pricing-config", A, &[]).workload(&old);
    let mut src = configmap("pricing-config", B);
    src["metadata"]["annotations"] =
        json!({"confighistory.io/head": content(B).hash(), "confighistory.io/changed-at": "2026-12-02T10:00:00Z"});
    f.cluster.insert(src);
    let new = deployment("pricing:4.12", &snap("pricing-config", A)); // kubectl set image
    let a = f.mutate_deployment("UPDATE", &new, Some(&old)).await;
    assert_eq!(pin_of(&a.patched(&new)).0, snap("pricing-config", B), "joins the pending change");

    let held_old = with_annotations(old.clone(), &[("confighistory.io/held", "pricing-config")]);
    let a = f.mutate_deployment("UPDATE", &new, Some(&held_old)).await;
    assert_eq!(pin_of(&a.patched(&new)).0, snap("pricing-config", A), "a held pin stays");

    // Once propagated, a partial edit keeps its pin and is told it is not the head.
    let mut src = f.cluster.get(NS, "pricing-config").unwrap();
    src["metadata"]["annotations"]["confighistory.io/propagated"] = json!(content(B).hash());
    f.cluster.insert(src);
    let a = f.mutate_deployment("UPDATE", &new, Some(&old)).await;
    assert_eq!(pin_of(&a.patched(&new)).0, snap("pricing-config", A));
    assert!(a.warnings().iter().any(|w| w.contains("stays on")), "{:?}", a.warnings());
}

/// A suspended Job (queued by a batch scheduler) whose ConfigMap has a pending change
/// gets a scheduling update (nodeSelector): its references are kept as they are, since the API
/// server refuses any other change of a Job's template; nor is the update denied for a plain
/// reference (a Job admitted while the webhook was away), which it could never fix.
#[tokio::test]
async fn a_suspended_jobs_scheduling_update_keeps_its_references() {
    let job = |cm: &str, node_selector: Value| {
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train", "namespace": NS, "uid": "uid-train"},
            "spec": {"suspend": true, "template": {"metadata": {"labels": {"app": "train"}}, "spec": {
                "restartPolicy": "Never", "nodeSelector": node_selector,
                "volumes": [{"name": "config", "configMap": {"name": cm}}],
                "containers": [{"name": "app", "image": "train:1"}]}}}})
    };
    let f = Fixture::new().snapshot("pricing-config", A, &[]);
    let mut src = configmap("pricing-config", B);
    src["metadata"]["annotations"] =
        json!({"confighistory.io/head": content(B).hash(), "confighistory.io/changed-at": "2026-12-02T10:00:00Z"});
    f.cluster.insert(src);
    for cm in [snap("pricing-config", A), "pricing-config".to_owned()] {
        let old = job(&cm, json!({"pool": "any"}));
        let new = job(&cm, json!({"pool": "gpu"}));
        let m = f.send("/mutate", review("Job", "batch", "v1", "UPDATE", Some(&new), Some(&old))).await;
        let out = m.patched(&new);
        assert_eq!(out["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"], json!(cm), "{cm}: {:?}", m.patch());
        let v = f.send("/validate", review("Job", "batch", "v1", "UPDATE", Some(&out), Some(&old))).await;
        assert!(v.allowed(), "{cm}: {}", v.message());
    }
}

#[tokio::test]
async fn a_snapshot_named_by_the_request_is_kept_and_held() {
    let old = deployment("pricing:4.12", &snap("pricing-config", B));
    let f = Fixture::new().source("pricing-config", B).snapshot("pricing-config", A, &[]).snapshot("pricing-config", B, &[]).workload(&old);
    let new = deployment("pricing:4.12", &snap("pricing-config", A));
    let a = f.mutate_deployment("UPDATE", &new, Some(&old)).await;
    let out = a.patched(&new);
    assert_eq!(pin_of(&out).0, snap("pricing-config", A));
    assert_eq!(annotation(&out, "confighistory.io/held").as_deref(), Some("pricing-config"));
}

/// A snapshot the request names that nothing else uses, and that GC has recorded unused past its
/// grace period: a sweep that listed it before the admission must not delete it after (docs/behaviour.md §8).
/// Failed before the fix: the admission kept the name without writing anything, and
/// the sweep's delete (with the resourceVersion it listed) went through.
#[tokio::test]
async fn a_snapshot_named_by_the_request_is_not_swept_while_being_pinned() {
    use confighistory::controller::gc;
    let old = deployment("pricing:4.12", &snap("pricing-config", B));
    let f = Fixture::new().source("pricing-config", B).snapshot("pricing-config", A, &[]).snapshot("pricing-config", B, &[]).workload(&old);
    let chosen = snap("pricing-config", A);
    let mut obj = f.cluster.get(NS, &chosen).unwrap();
    obj["metadata"]["annotations"][confighistory::model::names::LAST_USED] = json!("2025-01-01T00:00:00Z");
    obj["metadata"]["resourceVersion"] = json!("7");
    f.cluster.insert(obj);
    let (reached, resume) = f.cluster.pause(&format!("delete {NS}/{chosen}"), false);
    let sweep = {
        let cluster = f.cluster.clone();
        let now = confighistory::controller::propagate::parse_time_ms("2025-02-01T00:00:00Z").unwrap();
        let settings = gc::Settings { keep: 0, grace: std::time::Duration::from_secs(600) };
        tokio::spawn(async move { gc::sweep_namespace_at(&cluster, NS, settings, false, None, now).await })
    };
    reached.await.expect("the sweep is about to delete it");

    let new = deployment("pricing:4.12", &chosen);
    let a = f.mutate_deployment("UPDATE", &new, Some(&old)).await;
    assert!(a.allowed(), "{}", a.message());
    assert_eq!(pin_of(&a.patched(&new)).0, chosen);
    resume.send(()).unwrap();
    let report = sweep.await.unwrap().unwrap();
    assert!(f.cluster.get(NS, &chosen).is_some(), "pinned, so not swept:\n{report}");
    assert!(report.errors.is_empty(), "{report}");

    // A dry run writes nothing; a snapshot GC has not recorded unused costs a read, no write.
    f.clear_calls();
    let mut r = review("Deployment", "apps", "v1", "UPDATE", Some(&new), Some(&old));
    r["request"]["dryRun"] = json!(true);
    f.send("/mutate", r).await;
    f.mutate_deployment("UPDATE", &new, Some(&old)).await;
    assert!(f.calls().iter().all(|c| c.starts_with("get ")), "{:?}", f.calls());
}

#[tokio::test]
async fn the_propagation_trigger_is_honoured_only_from_confighistory() {
    let old = deployment("pricing:4.11", &snap("pricing-config", A));
    // The current template is, of course, one of the workload's revisions: the trigger must not
    // be mistaken for an undo.
    let f = Fixture::new().source("pricing-config", B).snapshot("pricing-config", A, &[]).workload(&old).revision(&old, 1);
    let trigger = format!("pricing-config={}", content(B).hash());
    let new = with_annotations(old.clone(), &[("confighistory.io/propagate", &trigger)]);

    let a = f.as_user("/mutate", "mallory", review("Deployment", "apps", "v1", "UPDATE", Some(&new), Some(&old))).await;
    let out = a.patched(&new);
    assert_eq!(pin_of(&out).0, snap("pricing-config", A), "nobody else can force a re-pin");
    assert_eq!(annotation(&out, "confighistory.io/propagate"), None);

    let a = f.as_user("/mutate", ME, review("Deployment", "apps", "v1", "UPDATE", Some(&new), Some(&old))).await;
    let out = a.patched(&new);
    assert_eq!(pin_of(&out).0, snap("pricing-config", B));
    assert_eq!(annotation(&out, "confighistory.io/propagate"), None, "the trigger is consumed");

    let held = with_annotations(new.clone(), &[]);
    let held_old = with_annotations(old.clone(), &[("confighistory.io/held", "pricing-config")]);
    let a = f.as_user("/mutate", ME, review("Deployment", "apps", "v1", "UPDATE", Some(&held), Some(&held_old))).await;
    assert_eq!(pin_of(&a.patched(&held)).0, snap("pricing-config", A), "propagation skips held pins");
}

/// A source that stops being versioned is propagated once more, to the plain name
/// (docs/how-it-works.md), held workloads included: a hold keeps a snapshot against later changes of a
/// versioned source, and there are none any more; held on its old snapshot for good, later edits
/// of the ConfigMap would never reach it. The hold goes with the pin.
#[tokio::test]
async fn a_held_workload_goes_back_to_the_plain_name_when_its_source_stops_being_versioned() {
    let old = deployment("pricing:4.11", &snap("pricing-config", A));
    let opted_out = with_annotations(configmap("pricing-config", B), &[("confighistory.io/versioned", "false")]);
    let f = Fixture::new().snapshot("pricing-config", A, &[]).workload(&old);
    f.cluster.insert(opted_out);
    let heads = format!("{{\"pricing-config\":\"{}\"}}", content(B).hash());
    let held_old = with_annotations(old.clone(), &[("confighistory.io/held", "pricing-config"), ("confighistory.io/held-heads", &heads)]);
    let trigger = format!("pricing-config={}", content(B).hash());
    let new = with_annotations(held_old.clone(), &[("confighistory.io/propagate", &trigger)]);
    let a = f.as_user("/mutate", ME, review("Deployment", "apps", "v1", "UPDATE", Some(&new), Some(&held_old))).await;
    let out = a.patched(&new);
    assert_eq!(pin_of(&out), ("pricing-config".to_owned(), "pricing-config".to_owned()), "{:?}", a.warnings());
    assert_eq!(annotation(&out, "confighistory.io/held"), None, "the hold goes with the pin");
}

#[tokio::test]
async fn mutation_is_idempotent_under_reinvocation() {
    let f = Fixture::new().source("pricing-config", A);
    let d = deployment("pricing:4.11", "pricing-config");
    let first = f.mutate_deployment("CREATE", &d, None).await;
    let once = first.patched(&d);
    let second = f.mutate_deployment("CREATE", &once, None).await;
    assert_eq!(second.patched(&once), once, "a second pass over our own output changes nothing");
}

#[tokio::test]
async fn a_missing_source_stays_plain_with_a_warning() {
    let f = Fixture::new();
    let d = deployment("pricing:4.11", "not-yet");
    let a = f.mutate_deployment("CREATE", &d, None).await;
    assert!(a.allowed());
    assert_eq!(pin_of(&a.patched(&d)).0, "not-yet");
    assert!(a.warnings().iter().any(|w| w.contains("does not exist yet")));
}

#[tokio::test]
async fn a_source_named_like_a_snapshot_is_pinned_before_the_watch_sees_it() {
    // `backend12345` is 12 characters of the hash alphabet: the name has a snapshot's shape.
    // Applied together with its first workload, the ConfigMap is in the API server but not yet
    // in the caches: the fresh read, not the shape, decides that it is a source.
    let f = Fixture::new();
    f.cluster.insert(configmap("cache-backend12345", A));
    let d = deployment("cache:1", "cache-backend12345");
    let m = f.mutate_deployment("CREATE", &d, None).await;
    assert!(m.allowed(), "{}", m.message());
    let pinned = m.patched(&d);
    let want = snap("cache-backend12345", A);
    assert_eq!(pin_of(&pinned), (want.clone(), want.clone()));
    let created = f.cluster.get(NS, &want).expect("snapshot created");
    assert_eq!(created["metadata"]["annotations"]["confighistory.io/source-name"], "cache-backend12345");
    let v = f.send("/validate", review("Deployment", "apps", "v1", "CREATE", Some(&pinned), None)).await;
    assert!(v.allowed(), "{}", v.message());
    // Unpinned, the same object is still refused: it names a mutable ConfigMap.
    let v = f.send("/validate", review("Deployment", "apps", "v1", "CREATE", Some(&d), None)).await;
    assert!(!v.allowed());
    assert!(v.message().contains("names mutable ConfigMap cache-backend12345"), "{}", v.message());
}

#[tokio::test]
async fn a_snapshot_the_watch_has_not_delivered_is_read_as_the_snapshot_it_is() {
    // A source over 236 characters: its snapshot's name holds a shortened prefix, so only the
    // snapshot object (its source-name annotation) tells the source. Neither is in the caches:
    // the decision reads the snapshot, learns its source, then reads that, each once.
    let long = format!("pricing-{}", "x".repeat(240));
    let f = Fixture::new();
    f.cluster.insert(configmap(&long, A));
    let c = content(A);
    let name = snapshot::name(&long, &c.hash(), 0);
    f.cluster.insert(snapshot::object(NS, &long, &name, &c, &[]));
    let d = deployment("pricing:4.11", &name);
    let a = f.mutate_deployment("CREATE", &d, None).await;
    assert!(a.allowed(), "{}", a.message());
    let out = a.patched(&d);
    assert_eq!(pin_of(&out), (name.clone(), name.clone()), "the snapshot is kept");
    let pins: Value = serde_json::from_str(&annotation(&out, "confighistory.io/pins").expect("pins")).unwrap();
    assert_eq!(pins, json!({long.as_str(): c.hash()}), "pinned under its full source name");
    let reads: Vec<String> = f.calls().into_iter().filter(|c| c.starts_with("get ")).collect();
    let mut distinct = reads.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(reads.len(), distinct.len(), "no name read twice: {reads:?}");
    assert!(reads.contains(&format!("get {NS}/{long}")), "{reads:?}");
}

#[tokio::test]
async fn immutable_unversioned_and_ignored_are_left_alone() {
    let f = Fixture::new();
    let mut imm = configmap("static", A);
    imm["immutable"] = json!(true);
    f.cluster.insert(imm);
    let mut flags = configmap("flags", A);
    flags["metadata"]["annotations"] = json!({"confighistory.io/versioned": "false"});
    f.cluster.insert(flags);
    for name in ["static", "flags"] {
        let d = deployment("x:1", name);
        let a = f.mutate_deployment("CREATE", &d, None).await;
        assert_eq!(pin_of(&a.patched(&d)).0, name);
    }
    let f = f.source("pricing-config", A);
    let ignored = with_annotations(deployment("x:1", "pricing-config"), &[("confighistory.io/ignore", "true")]);
    let a = f.mutate_deployment("CREATE", &ignored, None).await;
    assert!(a.patch().is_empty());
}

#[tokio::test]
async fn cronjobs_on_batch_v1beta1_are_pinned() {
    let f = Fixture::new().source("pricing-config", A);
    let cj = json!({"apiVersion": "batch/v1beta1", "kind": "CronJob", "metadata": {"name": "report", "namespace": NS},
        "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": {"spec": {
            "containers": [{"name": "r", "image": "r:1", "envFrom": [{"configMapRef": {"name": "pricing-config"}}]}]}}}}}});
    let a = f.send("/mutate", review("CronJob", "batch", "v1beta1", "CREATE", Some(&cj), None)).await;
    let out = a.patched(&cj);
    assert_eq!(
        out.pointer("/spec/jobTemplate/spec/template/spec/containers/0/envFrom/0/configMapRef/name").unwrap(),
        &json!(snap("pricing-config", A))
    );
}
