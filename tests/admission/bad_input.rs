//! Bad input: clear errors, and the largest ConfigMap update that fits.

use axum::http::StatusCode;
use confighistory::webhook;
use serde_json::json;

use crate::common::review;
use crate::fixture::{annotation, configmap, deployment, snap, with_annotations, Fixture, A};

#[tokio::test]
async fn bad_input_gets_clear_errors() {
    let f = Fixture::new();
    let a = f.post("/mutate", b"{not json".to_vec()).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    assert!(a.body["error"].as_str().unwrap().contains("not valid JSON"));

    let mut r = review("ConfigMap", "", "v1", "CREATE", Some(&configmap("x", A)), None);
    r["apiVersion"] = json!("admission.k8s.io/v1beta1");
    let a = f.post("/mutate", serde_json::to_vec(&r).unwrap()).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    assert!(a.body["error"].as_str().unwrap().contains("admissionReviewVersions"));

    // Not UTF-8, in a field that is left out while parsing: refused all the same (JSON is UTF-8).
    let mut body = serde_json::to_vec(&review("ConfigMap", "", "v1", "CREATE", Some(&configmap("x", A)), None)).unwrap();
    body.splice(1..1, b"\"extra\":\"\xff\",".iter().copied());
    let a = f.post("/mutate", body).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    assert!(a.body["error"].as_str().unwrap().contains("not UTF-8"), "{}", a.body);

    let a = f.post("/mutate", vec![b' '; webhook::DEFAULT_MAX_BODY + 1]).await;
    assert_eq!(a.status, StatusCode::PAYLOAD_TOO_LARGE);

    // A kind no webhook configuration of the chart sends to that endpoint is refused, with the
    // endpoint and kind named.
    let a =
        f.post("/validate", serde_json::to_vec(&review("ConfigMap", "", "v1", "CREATE", Some(&configmap("x", A)), None)).unwrap()).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    assert!(a.body["error"].as_str().unwrap().contains("/validate is not registered for \"/v1/configmaps\""), "{}", a.body);
}

#[tokio::test]
async fn a_one_mebibyte_configmap_update_fits() {
    let big = "x".repeat(1024 * 1024 - 100);
    let f = Fixture::new().source("big", &[("blob", "small")]).workload(&deployment("x:1", &snap("big", &[("blob", "small")])));
    let old = with_annotations(configmap("big", &[("blob", &big)]), &[("kubectl.kubernetes.io/last-applied-configuration", &big)]);
    let new =
        with_annotations(configmap("big", &[("blob", &format!("{big}y"))]), &[("kubectl.kubernetes.io/last-applied-configuration", &big)]);
    let a = f.send("/mutate", review("ConfigMap", "", "v1", "UPDATE", Some(&new), Some(&old))).await;
    assert!(a.allowed());
    assert!(annotation(&a.patched(&new), "confighistory.io/head").is_some());
}
