//! AdmissionReview v1 on the wire: the request we read and the response we write.
//!
//! Objects stay `serde_json::Value`: the webhook must handle batch/v1beta1 CronJobs and fields
//! newer or older than any typed client knows, and must copy ConfigMap bytes exactly.

use base64::Engine;
use serde::de::value::SeqAccessDeserializer;
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("request body is not valid JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("expected apiVersion admission.k8s.io/v1 and kind AdmissionReview, got {0}/{1}; register the webhook with admissionReviewVersions: [v1]")]
    Version(String, String),
    #[error("AdmissionReview has no request")]
    NoRequest,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Review {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    pub request: Option<Request>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupVersionKind {
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub version: String,
    #[serde(default)]
    pub kind: String,
}

/// The resource a request is about, as the API server names it.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupVersionResource {
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub version: String,
    #[serde(default)]
    pub resource: String,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UserInfo {
    #[serde(default)]
    pub username: String,
    #[serde(default)]
    pub groups: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "UPPERCASE")]
pub enum Operation {
    #[default]
    Create,
    Update,
    Delete,
    Connect,
}

impl Operation {
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
            Operation::Connect => "CONNECT",
        }
    }
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Request {
    pub uid: String,
    pub kind: GroupVersionKind,
    #[serde(default)]
    pub resource: GroupVersionResource,
    #[serde(default)]
    pub sub_resource: Option<String>,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub namespace: String,
    pub operation: Operation,
    #[serde(default)]
    pub user_info: UserInfo,
    #[serde(default, deserialize_with = "trimmed")]
    pub object: Option<Value>,
    #[serde(default, deserialize_with = "trimmed")]
    pub old_object: Option<Value>,
    #[serde(default)]
    pub dry_run: Option<bool>,
}

impl Request {
    pub fn dry_run(&self) -> bool {
        self.dry_run.unwrap_or(false)
    }
    pub fn object(&self) -> &Value {
        self.object.as_ref().unwrap_or(&Value::Null)
    }
    pub fn old_object(&self) -> &Value {
        self.old_object.as_ref().unwrap_or(&Value::Null)
    }
}

/// `object` and `oldObject` as the decisions read them: `status` and `metadata.managedFields`,
/// which no rule reads and which are often most of a workload's bytes, are skipped while parsing
/// rather than built and dropped (issue 7: parsing is most of an admission's cost).
fn trimmed<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    struct Top(Value);
    impl<'de> Deserialize<'de> for Top {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Top, D::Error> {
            d.deserialize_any(Skipping { skip: "status", metadata: true }).map(Top)
        }
    }
    Ok(Option::<Top>::deserialize(d)?.map(|t| t.0))
}

/// Builds a [`Value`], leaving out the key `skip` of a map (and `managedFields` of its `metadata`).
#[derive(Clone, Copy)]
struct Skipping {
    skip: &'static str,
    metadata: bool,
}

impl<'de> DeserializeSeed<'de> for Skipping {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Skipping {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a Kubernetes object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = serde_json::Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if key == self.skip {
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            let value = if self.metadata && key == "metadata" {
                map.next_value_seed(Skipping { skip: "managedFields", metadata: false })?
            } else {
                map.next_value::<Value>()?
            };
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }

    // Anything but a map is kept as it is.
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Value, A::Error> {
        Value::deserialize(SeqAccessDeserializer::new(seq))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
}

/// Parses and checks an AdmissionReview body.
pub fn parse(body: &[u8]) -> Result<Request, Error> {
    let review: Review = serde_json::from_slice(body)?;
    if review.api_version != "admission.k8s.io/v1" || review.kind != "AdmissionReview" {
        return Err(Error::Version(review.api_version, review.kind));
    }
    review.request.ok_or(Error::NoRequest)
}

/// What the webhook answers: allowed or denied, an optional JSONPatch, warnings.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Response {
    pub allowed: bool,
    pub message: Option<String>,
    pub code: Option<u16>,
    /// A machine-readable `status.reason` for a refusal, relayed by the API server to the caller.
    pub reason: Option<&'static str>,
    pub patch: Vec<Value>,
    pub warnings: Vec<String>,
}

/// Longest warning we send: the API server truncates longer ones.
pub const MAX_WARNING: usize = 120;
/// Few warnings per response: more would drown the one that matters.
pub const MAX_WARNINGS: usize = 8;

impl Response {
    pub fn allow() -> Response {
        Response { allowed: true, ..Default::default() }
    }

    pub fn deny(code: u16, message: impl Into<String>) -> Response {
        Response { allowed: false, code: Some(code), message: Some(message.into()), ..Default::default() }
    }

    pub fn warn(&mut self, w: impl Into<String>) {
        let mut w: String = w.into();
        if w.len() > MAX_WARNING {
            let mut cut = MAX_WARNING - 1;
            while !w.is_char_boundary(cut) {
                cut -= 1;
            }
            w.truncate(cut);
            w.push('…');
        }
        if self.warnings.len() < MAX_WARNINGS && !self.warnings.contains(&w) {
            self.warnings.push(w);
        }
    }

    /// The AdmissionReview the API server expects, with `uid` copied from the request: the one
    /// encoder of every answer, written directly rather than through a `Value`; the base64 patch,
    /// most of a patched answer's bytes, is written as it is encoded, never escaped (its alphabet
    /// needs none).
    pub fn review_json(&self, uid: &str) -> Vec<u8> {
        let mut out = Vec::with_capacity(128 + self.patch.len() * 160);
        out.extend_from_slice(br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"#);
        // Writing JSON into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut out, uid);
        out.extend_from_slice(if self.allowed { b",\"allowed\":true" } else { b",\"allowed\":false" });
        if !self.allowed {
            out.extend_from_slice(b",\"status\":{\"code\":");
            let _ = serde_json::to_writer(&mut out, &self.code.unwrap_or(403));
            out.extend_from_slice(b",\"message\":");
            let _ = serde_json::to_writer(&mut out, self.message.as_deref().unwrap_or_default());
            if let Some(reason) = self.reason {
                out.extend_from_slice(b",\"reason\":");
                let _ = serde_json::to_writer(&mut out, reason);
            }
            out.push(b'}');
        }
        if !self.patch.is_empty() {
            out.extend_from_slice(b",\"patchType\":\"JSONPatch\",\"patch\":\"");
            let patch = serde_json::to_vec(&self.patch).unwrap_or_default();
            let start = out.len();
            out.resize(start + base64::encoded_len(patch.len(), true).unwrap_or(0), 0);
            let written = base64::engine::general_purpose::STANDARD.encode_slice(&patch, &mut out[start..]).unwrap_or(0);
            out.truncate(start + written);
            out.push(b'"');
        }
        if !self.warnings.is_empty() {
            out.extend_from_slice(b",\"warnings\":");
            let _ = serde_json::to_writer(&mut out, &self.warnings);
        }
        out.extend_from_slice(b"}}");
        out
    }
}

pub use crate::model::json::escape;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rejects_other_versions_with_a_hint() {
        let err = parse(
            br#"{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"1","kind":{},"operation":"CREATE"}}"#,
        )
        .unwrap_err();
        assert!(err.to_string().contains("admissionReviewVersions: [v1]"), "{err}");
        assert!(matches!(parse(b"{not json"), Err(Error::Json(_))));
    }

    #[test]
    fn objects_are_parsed_without_status_and_managed_fields() {
        let object = json!({"metadata": {"name": "a", "managedFields": [{"manager": "kubectl"}], "labels": {"status": "x"}},
            "spec": {"status": 1, "template": {"metadata": {"managedFields": 2}}}, "status": {"replicas": 2}, "data": {"k": "v"}});
        let body = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "1", "kind": {},
            "operation": "UPDATE", "object": object, "oldObject": null}});
        let req = parse(&serde_json::to_vec(&body).unwrap()).unwrap();
        assert_eq!(
            req.object,
            Some(
                json!({"metadata": {"name": "a", "labels": {"status": "x"}}, "spec": {"status": 1, "template": {"metadata": {"managedFields": 2}}},
                "data": {"k": "v"}})
            )
        );
        assert_eq!(req.old_object, None);
        let body = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "1", "kind": {},
            "operation": "DELETE", "oldObject": [1, "x", true, null, 2.5]}});
        let req = parse(&serde_json::to_vec(&body).unwrap()).unwrap();
        assert_eq!((req.object, req.old_object), (None, Some(json!([1, "x", true, null, 2.5]))));
    }

    #[test]
    fn response_copies_uid_and_encodes_patch() {
        let review = |r: &Response, uid: &str| serde_json::from_slice::<Value>(&r.review_json(uid)).unwrap();
        let mut r = Response::allow();
        r.patch.push(json!({"op": "add", "path": "/a", "value": 1}));
        r.warn("x".repeat(500));
        let patched = review(&r, "abc");
        assert_eq!((patched["apiVersion"].as_str(), patched["kind"].as_str()), (Some("admission.k8s.io/v1"), Some("AdmissionReview")));
        assert_eq!(
            review(&Response::deny(409, "no"), "u"),
            json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                "response": {"uid": "u", "allowed": false, "status": {"code": 409, "message": "no"}}})
        );
        let in_use = Response { reason: Some("SnapshotInUse"), ..Response::deny(403, "kept") };
        assert_eq!(
            review(&in_use, "u")["response"]["status"],
            json!({"code": 403, "message": "kept", "reason": "SnapshotInUse"}),
            "a refusal's reason reaches the caller"
        );
        assert_eq!(
            review(&Response::allow(), "u"),
            json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {"uid": "u", "allowed": true}})
        );
        // Written by hand, so strings from the request and messages must come out escaped.
        let odd = "a\"b\\c\n\u{1}é";
        let mut denied = Response::deny(422, odd);
        denied.warn(odd);
        assert_eq!(
            review(&denied, odd)["response"],
            json!({"uid": odd, "allowed": false, "status": {"code": 422, "message": odd}, "warnings": [odd]})
        );
        assert_eq!(patched["response"]["uid"], "abc");
        assert_eq!(patched["response"]["allowed"], true);
        assert_eq!(patched["response"]["patchType"], "JSONPatch");
        let w = patched["response"]["warnings"][0].as_str().unwrap();
        assert!(w.len() <= MAX_WARNING + 3);
        let patch = base64::engine::general_purpose::STANDARD.decode(patched["response"]["patch"].as_str().unwrap()).unwrap();
        assert_eq!(serde_json::from_slice::<Value>(&patch).unwrap(), json!([{"op": "add", "path": "/a", "value": 1}]));
    }
}
