//! docs/behaviour.md §6.1 sources: ConfigMap writes, heads, authors and outgoing content.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request as HttpRequest, StatusCode};
use confighistory::cache::Writer as _;
use confighistory::cluster::ApiError;
use confighistory::model::template::template_hash;
use confighistory::webhook::{self, App};
use serde_json::json;
use tower::ServiceExt;

use crate::common::{review, Answer, NS};
use crate::fixture::{annotation, configmap, content, deployment, snap, touch, with_annotations, Fixture, A, B, ME};

#[tokio::test]
async fn unrelated_configmap_writes_are_answered_from_memory() {
    let f = Fixture::new();
    let cm = configmap("leader-lock", A);
    let a = f.send("/mutate", review("ConfigMap", "", "v1", "UPDATE", Some(&cm), Some(&cm))).await;
    assert!(a.allowed() && a.patch().is_empty() && a.warnings().is_empty());
    assert!(f.calls().is_empty());
}

/// The incident's ConfigMap: one key, `config.yaml`, a setting renamed inside it.
#[tokio::test]
async fn source_update_warns_about_settings_renamed_inside_a_value() {
    const A_YAML: &str = "currency: EUR\ndiscount_rules_path: /etc/pricing/discounts.yaml\n";
    const B_YAML: &str = "currency: EUR\nrules:\n  discount_path: /etc/pricing/discounts.yaml\n";
    let plain = deployment("pricing:4.11", "pricing-config");
    let f = Fixture::new().source("pricing-config", &[("config.yaml", A_YAML)]).workload(&plain);
    let (old, new) = (configmap("pricing-config", &[("config.yaml", A_YAML)]), configmap("pricing-config", &[("config.yaml", B_YAML)]));
    let a = f.send("/mutate", review("ConfigMap", "", "v1", "UPDATE", Some(&new), Some(&old))).await;
    assert!(a.allowed());
    assert_eq!(
        a.warnings(),
        vec![
            "pricing-config: values changed, same keys",
            "pricing-config: config.yaml: settings removed [discount_rules_path], added [rules.discount_path]",
        ]
    );
    // A value that is no document (or keeps its settings) adds nothing to the key warning.
    let (old, new) = (
        configmap("pricing-config", &[("config.yaml", A_YAML)]),
        configmap("pricing-config", &[("config.yaml", "currency: USD\ndiscount_rules_path: /x\n")]),
    );
    let a = f.send("/mutate", review("ConfigMap", "", "v1", "UPDATE", Some(&new), Some(&old))).await;
    assert_eq!(a.warnings(), vec!["pricing-config: values changed, same keys"]);
}

/// YAML aliases replaying an 8 KiB scalar as a key 7,380 times: about 60 MB of keys and paths
/// produced from 8 KiB read before the parse was bounded in bytes produced. The
/// settings are not compared; the key warning stays.
#[tokio::test]
async fn a_yaml_alias_amplifier_in_a_source_update_is_not_compared() {
    let nine = |a: &str| vec![format!("*{a}"); 9].join(", ");
    let doc = |m: &str| {
        format!(
            "s: &s \"\\t{}\"\n{m}: &m {{*s : 1}}\nl1: &l1 [{}]\nl2: &l2 [{}]\nl3: &l3 [{}]\nl4: [{}]\n",
            "x".repeat(8 * 1024),
            nine("m"),
            nine("l1"),
            nine("l2"),
            nine("l3")
        )
    };
    let (a, b) = (doc("m"), doc("n"));
    let plain = deployment("pricing:4.11", "pricing-config");
    let f = Fixture::new().source("pricing-config", &[("config.yaml", &a)]).workload(&plain);
    let (old, new) = (configmap("pricing-config", &[("config.yaml", &a)]), configmap("pricing-config", &[("config.yaml", &b)]));
    let started = std::time::Instant::now();
    let answer = f.send("/mutate", review("ConfigMap", "", "v1", "UPDATE", Some(&new), Some(&old))).await;
    assert!(answer.allowed());
    assert_eq!(answer.warnings(), vec!["pricing-config: values changed, same keys"]);
    assert!(started.elapsed() < std::time::Duration::from_secs(2), "{:?}", started.elapsed());
}

#[tokio::test]
async fn source_update_tracks_head_warns_keys_and_adopts_outgoing_content() {
    let plain = deployment("pricing:4.11", "pricing-config");
    let f = Fixture::new().source("pricing-config", A).workload(&plain);
    let old = configmap("pricing-config", A);
    let new = configmap("pricing-config", B);
    let a = f.send("/mutate", review("ConfigMap", "", "v1", "UPDATE", Some(&new), Some(&old))).await;
    let out = a.patched(&new);
    assert_eq!(annotation(&out, "confighistory.io/head"), Some(content(B).hash()));
    assert!(annotation(&out, "confighistory.io/changed-at").is_some());
    assert_eq!(a.warnings(), vec!["pricing-config: keys removed [discount_rules_path], added [rules.discount_path]"]);
    let kept = f.cluster.get(NS, &snap("pricing-config", A)).expect("outgoing content kept");
    assert_eq!(annotation(&kept, "confighistory.io/adopted-templates"), Some(template_hash(&plain["spec"]["template"])));
    assert_eq!(out["data"], new["data"], "the source itself is allowed as sent");

    // Same content again: head stays, changed-at carried over, nothing written.
    f.clear_calls();
    let again = f.send("/mutate", review("ConfigMap", "", "v1", "UPDATE", Some(&new), Some(&out))).await;
    let out2 = again.patched(&new);
    assert_eq!(annotation(&out2, "confighistory.io/changed-at"), annotation(&out, "confighistory.io/changed-at"));
    assert!(f.calls().is_empty());
}

/// docs/behaviour.md §5.2, §6.1.1: a source's content change records who made it (the admitted
/// request's username, never its object's word), with what field manager and when; the snapshot
/// of that content copies them when it is made (a release by someone else names the writer of
/// the config, not the releaser); content from before confighistory says so instead of a name.
#[tokio::test]
async fn who_wrote_a_content_and_when_reaches_its_snapshot() {
    let plain = deployment("pricing:4.11", "pricing-config");
    let f = Fixture::new().source("pricing-config", A).workload(&plain);
    let (old, new) =
        (configmap("pricing-config", A), with_annotations(configmap("pricing-config", B), &[("confighistory.io/changed-by", "mallory")]));
    let mut edit = review("ConfigMap", "", "v1", "UPDATE", Some(&new), Some(&old));
    edit["request"]["options"] = json!({"kind": "UpdateOptions", "apiVersion": "meta.k8s.io/v1", "fieldManager": "kubectl-edit"});
    let a = f.as_user("/mutate", "bob", edit).await;
    let stored = a.patched(&new);
    assert_eq!(annotation(&stored, "confighistory.io/changed-by").as_deref(), Some("bob"), "userInfo, not the object's claim");
    assert_eq!(annotation(&stored, "confighistory.io/changed-with").as_deref(), Some("kubectl-edit"));
    let at = annotation(&stored, "confighistory.io/changed-at").expect("changed-at");
    // The outgoing content predates confighistory's tracking: said, not guessed.
    let kept = f.cluster.get(NS, &snap("pricing-config", A)).expect("outgoing content kept");
    assert_eq!(annotation(&kept, "confighistory.io/unattributed").as_deref(), Some("before confighistory"));
    assert_eq!(annotation(&kept, "confighistory.io/changed-by"), None);

    // The API server stores bob's write; carol releases the workload: the snapshot names bob.
    f.cluster.insert(stored.clone());
    f.state.write().apply_configmap(&stored);
    let release = deployment("pricing:4.12", "pricing-config");
    let a = f.as_user("/mutate", "carol", review("Deployment", "apps", "v1", "UPDATE", Some(&release), Some(&plain))).await;
    assert!(a.allowed(), "{}", a.message());
    let made = f.cluster.get(NS, &snap("pricing-config", B)).expect("snapshot of bob's content");
    assert_eq!(annotation(&made, "confighistory.io/changed-by").as_deref(), Some("bob"));
    assert_eq!(annotation(&made, "confighistory.io/changed-with").as_deref(), Some("kubectl-edit"));
    assert_eq!(annotation(&made, "confighistory.io/changed-at"), Some(at.clone()));
    assert_eq!(annotation(&made, "confighistory.io/unattributed"), None);

    // Re-applying the same content (claiming another author) changes nothing of it.
    let claim = with_annotations(configmap("pricing-config", B), &[("confighistory.io/changed-by", "dave")]);
    let a = f.as_user("/mutate", "dave", review("ConfigMap", "", "v1", "UPDATE", Some(&claim), Some(&stored))).await;
    let again = a.patched(&claim);
    assert_eq!(annotation(&again, "confighistory.io/changed-by").as_deref(), Some("bob"), "carried over from oldObject");
    assert_eq!(annotation(&again, "confighistory.io/changed-with").as_deref(), Some("kubectl-edit"));
    assert_eq!(annotation(&again, "confighistory.io/changed-at"), Some(at));

    // A change without a field manager records none; the earlier one does not linger.
    let c = configmap("pricing-config", &[("mode", "c")]);
    let a = f.as_user("/mutate", "erin", review("ConfigMap", "", "v1", "UPDATE", Some(&c), Some(&stored))).await;
    let out = a.patched(&c);
    assert_eq!(annotation(&out, "confighistory.io/changed-by").as_deref(), Some("erin"));
    assert_eq!(annotation(&out, "confighistory.io/changed-with"), None);
}

/// docs/behaviour.md §6.1.1: a long username (a ServiceAccount's, two long names) and a field
/// manager at the API server's 128 characters are recorded whole, carried over whole by a write
/// that changes no content, and reach the snapshot whole: read back, never as malformed.
/// (Failed when confighistory read its annotations past 64 characters as malformed: the next
/// write recorded `<too long>` as the author.) A username past the record's bound is cut and
/// says so.
#[tokio::test]
async fn long_usernames_and_field_managers_are_recorded_whole() {
    let plain = deployment("pricing:4.11", "pricing-config");
    let f = Fixture::new().source("pricing-config", A).workload(&plain);
    let user = format!("system:serviceaccount:{}:{}", "payments-production-eu-west", "github-actions-release-deployer");
    let manager = "m".repeat(128);
    assert!(user.len() > 64);
    let (old, new) = (configmap("pricing-config", A), configmap("pricing-config", B));
    let mut edit = review("ConfigMap", "", "v1", "UPDATE", Some(&new), Some(&old));
    edit["request"]["options"] = json!({"kind": "UpdateOptions", "apiVersion": "meta.k8s.io/v1", "fieldManager": manager});
    let stored = f.as_user("/mutate", &user, edit).await.patched(&new);
    assert_eq!(annotation(&stored, "confighistory.io/changed-by"), Some(user.clone()));
    assert_eq!(annotation(&stored, "confighistory.io/changed-with"), Some(manager.clone()));
    f.cluster.insert(stored.clone());
    f.state.write().apply_configmap(&stored);

    // A label added by someone else: no content change, the record carried over whole.
    let labelled = {
        let mut c = stored.clone();
        c["metadata"]["labels"] = json!({"team": "payments"});
        c
    };
    let again =
        f.as_user("/mutate", "dave", review("ConfigMap", "", "v1", "UPDATE", Some(&labelled), Some(&stored))).await.patched(&labelled);
    assert_eq!(annotation(&again, "confighistory.io/changed-by"), Some(user.clone()), "carried over whole");
    assert_eq!(annotation(&again, "confighistory.io/changed-with"), Some(manager.clone()));

    // A release: the snapshot of that content names the same author, whole.
    let release = deployment("pricing:4.12", "pricing-config");
    let a = f.as_user("/mutate", "carol", review("Deployment", "apps", "v1", "UPDATE", Some(&release), Some(&plain))).await;
    assert!(a.allowed(), "{}", a.message());
    let made = f.cluster.get(NS, &snap("pricing-config", B)).expect("snapshot");
    assert_eq!(annotation(&made, "confighistory.io/changed-by"), Some(user));
    assert_eq!(annotation(&made, "confighistory.io/changed-with"), Some(manager));

    // Past the record's bound: cut, and says so.
    let huge = format!("oidc:{}", "é".repeat(600));
    let c = configmap("pricing-config", &[("mode", "c")]);
    let out = f.as_user("/mutate", &huge, review("ConfigMap", "", "v1", "UPDATE", Some(&c), Some(&stored))).await.patched(&c);
    let by = annotation(&out, "confighistory.io/changed-by").unwrap();
    assert!(by.len() <= 1024 && by.ends_with('…') && huge.starts_with(by.trim_end_matches('…')), "{by}");
}

/// docs/install.md: with `--record-authors=false` no username is recorded (the field manager
/// and the time still are), and one recorded before goes at the next write.
#[tokio::test]
async fn recording_authors_off_records_no_username() {
    let plain = deployment("pricing:4.11", "pricing-config");
    let mut f = Fixture::new().source("pricing-config", A).workload(&plain);
    f.policy.record_authors = false;
    let old = with_annotations(
        configmap("pricing-config", A),
        &[
            ("confighistory.io/head", &content(A).hash()),
            ("confighistory.io/changed-at", "2026-01-01T00:00:00Z"),
            ("confighistory.io/changed-by", "bob"),
        ],
    );
    for (what, new) in [("a change", configmap("pricing-config", B)), ("no change", old.clone())] {
        let mut edit = review("ConfigMap", "", "v1", "UPDATE", Some(&new), Some(&old));
        edit["request"]["options"] = json!({"fieldManager": "kubectl-client-side-apply"});
        let out = f.as_user("/mutate", "bob", edit).await.patched(&new);
        assert_eq!(annotation(&out, "confighistory.io/changed-by"), None, "{what}");
        assert!(annotation(&out, "confighistory.io/changed-at").is_some(), "{what}");
        if what == "a change" {
            assert_eq!(annotation(&out, "confighistory.io/changed-with").as_deref(), Some("kubectl-client-side-apply"));
        }
    }
}

/// docs/reliability.md: a review forged to the port may claim any username in its userInfo, but
/// the answer is all it gets: no write of the source is stored, and what confighistory writes
/// (the outgoing content's snapshot) takes its author from the stored object, so the claimed
/// name is recorded nowhere.
#[tokio::test]
async fn a_forged_reviews_username_is_recorded_nowhere() {
    let plain = deployment("pricing:4.11", "pricing-config");
    let stored = with_annotations(
        configmap("pricing-config", A),
        &[
            ("confighistory.io/head", &content(A).hash()),
            ("confighistory.io/changed-at", "2026-01-01T00:00:00Z"),
            ("confighistory.io/changed-by", "bob"),
        ],
    );
    let f = Fixture::new().workload(&plain);
    f.cluster.insert(stored.clone());
    f.state.write().apply_configmap(&stored);
    let forged = configmap("pricing-config", B);
    let mut review = review("ConfigMap", "", "v1", "UPDATE", Some(&forged), Some(&stored));
    review["request"]["options"] = json!({"fieldManager": "forged-manager"});
    let a = f.as_user("/mutate", "mallory", review).await;
    assert!(a.allowed());
    assert_eq!(annotation(&a.patched(&forged), "confighistory.io/changed-by").as_deref(), Some("mallory"), "the answer only");
    let kept = f.cluster.get(NS, &snap("pricing-config", A)).expect("the stored outgoing content kept");
    assert_eq!(annotation(&kept, "confighistory.io/changed-by").as_deref(), Some("bob"), "the stored object's author");
    let everything = serde_json::to_string(&*f.cluster.objects.lock().unwrap().values().collect::<Vec<_>>()).unwrap();
    assert!(!everything.contains("mallory") && !everything.contains("forged-manager"), "{everything}");
}

/// A workload annotated `confighistory.io/ignore` is left alone in rewrite mode, so it
/// is no plain-name user of its ConfigMap: an edit keeps no outgoing content for it (a snapshot
/// whose adoption record GC would keep while it lives), and a full quota does not deny the edit.
#[tokio::test]
async fn an_ignored_workload_is_not_a_user_whose_outgoing_content_is_kept() {
    let ignored = with_annotations(deployment("pricing:4.11", "pricing-config"), &[("confighistory.io/ignore", "true")]);
    let f = Fixture::new().source("pricing-config", A).workload(&ignored);
    *f.cluster.fail.lock().unwrap() = Some((
        "create",
        ApiError { code: Some(403), reason: "Forbidden".into(), message: "exceeded quota: cm, requested: configmaps=1".into() },
    ));
    let (old, new) = (configmap("pricing-config", A), configmap("pricing-config", B));
    let a = f.send("/mutate", review("ConfigMap", "", "v1", "UPDATE", Some(&new), Some(&old))).await;
    assert!(a.allowed(), "{}", a.message());
    assert_eq!(annotation(&a.patched(&new), "confighistory.io/head"), Some(content(B).hash()), "still tracked");
    assert!(f.calls().is_empty(), "nothing read or written for it: {:?}", f.calls());

    // Creating the ConfigMap it reads: no user in audit mode; enforce mode does not exempt it.
    for (mode, allowed, warned) in [("audit", true, false), ("enforce", false, false)] {
        let f = Fixture::new().workload(&ignored).namespace_mode(mode);
        let a = f.send("/mutate", review("ConfigMap", "", "v1", "CREATE", Some(&new), None)).await;
        assert_eq!((a.allowed(), !a.warnings().is_empty()), (allowed, warned), "{mode}: {} {:?}", a.message(), a.warnings());
    }
}

/// `changed-at` is the API server's time, not the admitting replica's: the leader
/// counts the settle window from it on the API server's clock too, so a replica whose clock is off
/// neither shortens nor stretches the window. Failed before: the replica's own clock was written.
#[tokio::test]
async fn changed_at_is_the_api_servers_time() {
    use confighistory::cluster::clock::{Clock, Sample};
    use confighistory::controller::propagate::parse_time_ms;
    let plain = deployment("pricing:4.11", "pricing-config");
    let f = Fixture::new().source("pricing-config", A).workload(&plain);
    // This replica's clock reads 2026-12-03T10:00:00Z; the API server's said 10:00:30.
    let local = parse_time_ms("2026-12-03T10:00:00Z").unwrap();
    let clock = Arc::new(Clock::with_local(move || local));
    clock.record(Sample { sent_ms: local - 20, received_ms: local, date_ms: local + 30_000 });
    let ctx = confighistory::context::Context::synced(f.policy.clone(), f.state.clone(), Arc::new(f.cluster.clone())).with_clock(clock);
    let app = Arc::new(App::new(Arc::new(ctx)));
    let (old, new) = (configmap("pricing-config", A), configmap("pricing-config", B));
    let body = serde_json::to_vec(&review("ConfigMap", "", "v1", "UPDATE", Some(&new), Some(&old))).unwrap();
    let req = HttpRequest::post("/mutate").header("content-type", "application/json").body(Body::from(body)).unwrap();
    let resp = webhook::router(app).oneshot(req).await.unwrap();
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX).await.unwrap();
    let a = Answer { status: StatusCode::OK, body: serde_json::from_slice(&bytes).unwrap(), text: String::new() };
    let changed_at = annotation(&a.patched(&new), "confighistory.io/changed-at").expect("changed-at");
    let at = parse_time_ms(&changed_at).unwrap();
    assert!((local + 29_000..=local + 31_000).contains(&at), "{changed_at}: the API server's time, within its uncertainty");
}

/// Metrics name namespaces: the admission port, which the API server (and, without
/// `networkPolicy.apiServerCIDRs`, any pod) reaches, does not serve them; the health port does,
/// and the chart's NetworkPolicy opens it to the scraper's namespaces only.
#[tokio::test]
async fn the_admission_port_serves_no_metrics() {
    let f = Fixture::new();
    for path in ["/metrics", "/readyz", "/livez"] {
        let req = HttpRequest::get(path).body(Body::empty()).unwrap();
        let resp = webhook::router(f.app()).oneshot(req).await.unwrap();
        assert_eq!(resp.status(), StatusCode::NOT_FOUND, "{path} on the admission port");
        let req = HttpRequest::get(path).body(Body::empty()).unwrap();
        let resp = webhook::health_router(f.app()).oneshot(req).await.unwrap();
        assert_ne!(resp.status(), StatusCode::NOT_FOUND, "{path} on the health port");
    }
}

/// docs/behaviour.md §7: a change is an edit, not a content. A → B, then back to A before B was propagated:
/// the marker that says "A was propagated" belongs to the first change to A, not to this one.
#[tokio::test]
async fn a_revert_is_a_change_of_its_own() {
    let f = Fixture::new().source("pricing-config", A).workload(&deployment("x:1", &snap("pricing-config", B)));
    let (a, b) = (content(A).hash(), content(B).hash());
    let old = with_annotations(
        configmap("pricing-config", B),
        &[("confighistory.io/head", &b), ("confighistory.io/changed-at", "2026-12-03T09:00:00Z"), ("confighistory.io/propagated", &a)],
    );
    let reverted = configmap("pricing-config", A);
    for user in ["alice", ME] {
        let r = f.as_user("/mutate", user, review("ConfigMap", "", "v1", "UPDATE", Some(&reverted), Some(&old))).await;
        let out = r.patched(&reverted);
        assert_eq!(annotation(&out, "confighistory.io/head"), Some(a.clone()));
        assert_eq!(annotation(&out, "confighistory.io/propagated"), None, "{user}: the revert waits for propagation");
        // A second pass over the first one's output changes nothing more.
        let again = f.as_user("/mutate", user, review("ConfigMap", "", "v1", "UPDATE", Some(&out), Some(&old))).await;
        assert!(again.patch().is_empty(), "{user}: {:?}", again.patch());
    }
    // An edit of the metadata only keeps the marker; confighistory's own record of it is taken.
    let relabelled = with_annotations(old.clone(), &[("team", "pricing")]);
    let r = f.send("/mutate", review("ConfigMap", "", "v1", "UPDATE", Some(&relabelled), Some(&old))).await;
    assert_eq!(annotation(&r.patched(&relabelled), "confighistory.io/propagated"), Some(a.clone()));
    let recorded = with_annotations(old.clone(), &[("confighistory.io/propagated", &b)]);
    let r = f.as_user("/mutate", ME, review("ConfigMap", "", "v1", "UPDATE", Some(&recorded), Some(&old))).await;
    assert_eq!(annotation(&r.patched(&recorded), "confighistory.io/propagated"), Some(b));
}

/// docs/behaviour.md §7: a source that stops being versioned is a change of its own (propagated once more, to
/// the plain name); later writes of it are no business of confighistory's.
#[tokio::test]
async fn opting_a_source_out_of_versioning_is_a_change() {
    let f = Fixture::new().source("pricing-config", A).workload(&deployment("x:1", &snap("pricing-config", A)));
    let a = content(A).hash();
    let old = with_annotations(
        configmap("pricing-config", A),
        &[("confighistory.io/head", &a), ("confighistory.io/changed-at", "2026-12-03T09:00:00Z"), ("confighistory.io/propagated", &a)],
    );
    let opted_out = with_annotations(old.clone(), &[("confighistory.io/versioned", "false")]);
    let r = f.send("/mutate", review("ConfigMap", "", "v1", "UPDATE", Some(&opted_out), Some(&old))).await;
    let out = r.patched(&opted_out);
    assert_ne!(annotation(&out, "confighistory.io/changed-at").as_deref(), Some("2026-12-03T09:00:00Z"));
    assert_eq!(annotation(&out, "confighistory.io/propagated"), None);
    let edited = with_annotations(configmap("pricing-config", B), &[("confighistory.io/versioned", "false")]);
    let r = f.send("/mutate", review("ConfigMap", "", "v1", "UPDATE", Some(&edited), Some(&out))).await;
    assert!(r.patch().is_empty(), "{:?}", r.patch());
}

/// docs/behaviour.md §7 with the admin's selector, which a restart changes without any object saying so: a
/// source the selector now excludes, its exclusion not yet recorded, changes versioning on its
/// next write (the owner's, or the controller's no-op touch): recorded, later writes are live
/// updates; the selector gone, the record is dropped and that is a change again. A record a
/// client forges on a versioned source is dropped and changes nothing, and a ConfigMap the
/// selector excluded from the start (no head) is not a source at all.
#[tokio::test]
async fn the_admins_selector_changing_a_sources_versioning_is_a_change_on_its_next_write() {
    let mut other = deployment("y:1", "ca-bundle");
    other["metadata"]["name"] = json!("other");
    other["metadata"]["uid"] = json!("uid-other");
    let mut f = Fixture::new().source("pricing-config", A).workload(&deployment("x:1", &snap("pricing-config", A))).workload(&other);
    f.policy.excluded_sources = "ca-bundle=true".parse().unwrap();
    let a = content(A).hash();
    let before = "2026-12-03T09:00:00Z";
    let mut old = with_annotations(
        configmap("pricing-config", A),
        &[("confighistory.io/head", &a), ("confighistory.io/changed-at", before), ("confighistory.io/propagated", &a)],
    );
    old["metadata"]["labels"] = json!({"ca-bundle": "true"});
    let out = touch(&f, &old).await;
    assert_ne!(annotation(&out, "confighistory.io/changed-at").as_deref(), Some(before), "a change, first seen now");
    assert_eq!(annotation(&out, "confighistory.io/propagated"), None);
    assert_eq!(annotation(&out, "confighistory.io/excluded-by-selector").as_deref(), Some("true"));

    let mut edited = out.clone();
    edited["data"] = json!({"mode": "live"});
    let r = f.send("/mutate", review("ConfigMap", "", "v1", "UPDATE", Some(&edited), Some(&out))).await;
    assert!(r.patch().is_empty(), "recorded: a live update: {:?}", r.patch());

    // Propagated since, a while ago.
    let out = with_annotations(out, &[("confighistory.io/changed-at", before), ("confighistory.io/propagated", &a)]);
    f.policy.excluded_sources = Default::default();
    let back = touch(&f, &out).await;
    assert_ne!(annotation(&back, "confighistory.io/changed-at").as_deref(), Some(before), "versioned again: a change");
    assert_eq!(annotation(&back, "confighistory.io/propagated"), None);
    assert_eq!(annotation(&back, "confighistory.io/excluded-by-selector"), None);

    let back = with_annotations(back, &[("confighistory.io/changed-at", before), ("confighistory.io/propagated", &a)]);
    let forged = with_annotations(back.clone(), &[("confighistory.io/excluded-by-selector", "true")]);
    let r = f.send("/mutate", review("ConfigMap", "", "v1", "UPDATE", Some(&forged), Some(&back))).await.patched(&forged);
    assert_eq!(annotation(&r, "confighistory.io/excluded-by-selector"), None, "never taken from a request");
    assert_eq!(annotation(&r, "confighistory.io/changed-at").as_deref(), Some(before), "no change");
    assert_eq!(annotation(&r, "confighistory.io/propagated"), Some(a.clone()));

    f.policy.excluded_sources = "ca-bundle=true".parse().unwrap();
    let mut ca = configmap("ca-bundle", &[("ca.crt", "x")]);
    ca["metadata"]["labels"] = json!({"ca-bundle": "true"});
    let r = f.send("/mutate", review("ConfigMap", "", "v1", "UPDATE", Some(&ca), Some(&ca))).await;
    assert!(r.patch().is_empty(), "{:?}", r.patch());
}

/// Enforce mode checks workloads; a ConfigMap an enforce-mode Deployment reads by name
/// that drops its opt-out (its annotation, or its labels stop matching the admin's selector)
/// becomes mutable, versioned config under it. The update is allowed (enforce never blocks
/// config edits) with a short warning naming a user.
#[tokio::test]
async fn a_configmap_read_by_name_that_becomes_versioned_is_warned_in_enforce_mode() {
    let mut f = Fixture::new().workload(&deployment("x:1", "pricing-config")).namespace_mode("enforce");
    f.policy.excluded_sources = "live=true".parse().unwrap();
    let opted_out = with_annotations(configmap("pricing-config", A), &[("confighistory.io/versioned", "false")]);
    let mut labelled = configmap("pricing-config", A);
    labelled["metadata"]["labels"] = json!({"live": "true"});
    for old in [opted_out, labelled] {
        let new = configmap("pricing-config", A);
        let a = f.send("/mutate", review("ConfigMap", "", "v1", "UPDATE", Some(&new), Some(&old))).await;
        assert!(a.allowed(), "{}", a.message());
        let warnings = a.warnings();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("pricing-config") && warnings[0].contains("Deployment/pricing"), "{warnings:?}");
        assert!(warnings[0].len() <= 120, "{}", warnings[0].len());
        // Still opted out: nothing to say.
        let a = f.send("/mutate", review("ConfigMap", "", "v1", "UPDATE", Some(&old), Some(&old))).await;
        assert!(a.warnings().is_empty(), "{:?}", a.warnings());
    }
}

#[tokio::test]
async fn installing_sets_no_changed_at_on_existing_sources() {
    let f = Fixture::new().source("pricing-config", A).workload(&deployment("x:1", "pricing-config"));
    let cm = with_annotations(configmap("pricing-config", A), &[("owner", "team")]);
    let a = f.send("/mutate", review("ConfigMap", "", "v1", "UPDATE", Some(&cm), Some(&configmap("pricing-config", A)))).await;
    let out = a.patched(&cm);
    assert_eq!(annotation(&out, "confighistory.io/head"), Some(content(A).hash()));
    assert_eq!(annotation(&out, "confighistory.io/changed-at"), None);
}
