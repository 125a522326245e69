//! AdmissionReview v1 on the wire: the request we read and the response we write.
//!
//! Objects stay `serde_json::Value`: the webhook must handle batch/v1beta1 CronJobs and fields
//! newer or older than any typed client knows, and must copy ConfigMap bytes exactly.

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::model::ids;
use crate::model::json::Key;
use crate::model::kinds::Registry;
use crate::model::snapshot::RawContent;
use crate::model::trim::{scalars_as_values, Annotations, Leave, Trim};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("request body is not valid JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("request body is not valid JSON: it is not UTF-8 ({0})")]
    Utf8(#[from] std::str::Utf8Error),
    #[error("expected apiVersion admission.k8s.io/v1 and kind AdmissionReview, got {0}/{1}; register the webhook with admissionReviewVersions: [v1]")]
    Version(String, String),
    #[error("AdmissionReview has no request")]
    NoRequest,
}

/// An AdmissionReview as read ([`parse_in`]: by hand, knowing the registered kinds).
#[derive(Clone, Debug)]
pub struct Review {
    pub api_version: String,
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

/// One admission request. Deserialized by hand (below) so that `object` and `oldObject` are
/// trimmed while they are parsed, knowing the request's kind.
#[derive(Clone, Debug, Default)]
pub struct Request {
    pub uid: String,
    pub kind: GroupVersionKind,
    pub resource: GroupVersionResource,
    pub sub_resource: Option<String>,
    pub name: String,
    pub namespace: String,
    pub operation: Operation,
    pub user_info: UserInfo,
    pub object: Option<Value>,
    pub old_object: Option<Value>,
    /// Of a ConfigMap's UPDATE, `oldObject`'s content, its values left as JSON text while parsing
    /// (`old_object` then has no `data` or `binaryData`): decoded only where the decision reads
    /// them ([`Request::old_content`]).
    pub old_content: Option<RawContent>,
    pub dry_run: Option<bool>,
    /// The field manager the write names (`options.fieldManager` of a CREATE, UPDATE or PATCH
    /// options object), when it names one.
    pub field_manager: Option<String>,
}

/// The part of a request's `options` read: its field manager.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Options {
    #[serde(default)]
    field_manager: Option<String>,
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
    /// The content of `oldObject` (a ConfigMap's), however it was parsed.
    pub fn old_content(&self) -> std::borrow::Cow<'_, RawContent> {
        match &self.old_content {
            Some(raw) => std::borrow::Cow::Borrowed(raw),
            None => std::borrow::Cow::Owned(RawContent::from_object(self.old_object())),
        }
    }
}

/// A ConfigMap's `oldObject`: trimmed as any object, and its `data` and `binaryData` kept as JSON
/// text (docs/performance.md, "The 1 MiB UPDATE against its limit": building the old content's
/// strings was most of what parsing a 1 MiB source's review cost beyond scanning it). The decision
/// reads the old content only to compare it with the new one, name changed keys, and parse the few
/// values the settings diff reads.
struct OldObject<'a>(&'a mut Option<RawContent>);

impl<'de> DeserializeSeed<'de> for OldObject<'_> {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

/// A value parsed by the seed `S` (`object` or `oldObject` by a [`Trim`] or an [`OldObject`], the
/// review's `request` by a [`RequestVisitor`]); absent or null is `None`.
struct OrNull<S>(S);

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for OrNull<S> {
    type Value = Option<S::Value>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<S::Value>, D::Error> {
        d.deserialize_option(self)
    }
}

impl<'de, S: DeserializeSeed<'de>> Visitor<'de> for OrNull<S> {
    type Value = Option<S::Value>;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an object or null")
    }
    fn visit_none<E: de::Error>(self) -> Result<Option<S::Value>, E> {
        Ok(None)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Option<S::Value>, E> {
        Ok(None)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Option<S::Value>, D::Error> {
        self.0.deserialize(d).map(Some)
    }
}

impl<'de> Visitor<'de> for OldObject<'_> {
    type Value = Value;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a Kubernetes object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = serde_json::Map::new();
        let (mut data, mut binary_data) = (None, None);
        let rest = Trim::object(leave(false, None));
        while let Some(Key(key)) = map.next_key::<Key>()? {
            match key.as_ref() {
                // A field given twice keeps its last value, as in a map.
                "data" => data = Some(map.next_value::<RawPairs>()?.0),
                "binaryData" => binary_data = Some(map.next_value::<RawPairs>()?.0),
                _ => {
                    if let Some(value) = rest.value(&key, &mut map)? {
                        out.insert(key.into_owned(), value);
                    }
                }
            }
        }
        *self.0 = Some(RawContent::new(data.flatten(), binary_data.flatten()));
        Ok(Value::Object(out))
    }
    // Anything but a map is kept as it is, and has no content.
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Value, A::Error> {
        Trim::object(leave(false, None)).visit_seq(seq)
    }
    scalars_as_values!();
}

/// A content map's entries with their values as JSON text, in the order given; `None` when it is
/// not a map (no content, as `Content::from_object` reads it).
struct RawPairs(Option<Vec<(String, Box<serde_json::value::RawValue>)>>);

impl<'de> Deserialize<'de> for RawPairs {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<RawPairs, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawPairs;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a map of strings")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawPairs, A::Error> {
                let mut pairs = Vec::with_capacity(map.size_hint().unwrap_or(0));
                while let Some((k, v)) = map.next_entry::<String, Box<serde_json::value::RawValue>>()? {
                    pairs.push((k, v));
                }
                Ok(RawPairs(Some(pairs)))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<RawPairs, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(RawPairs(None))
            }
            fn visit_unit<E: de::Error>(self) -> Result<RawPairs, E> {
                Ok(RawPairs(None))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<RawPairs, E> {
                Ok(RawPairs(None))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<RawPairs, E> {
                Ok(RawPairs(None))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<RawPairs, E> {
                Ok(RawPairs(None))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<RawPairs, E> {
                Ok(RawPairs(None))
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<RawPairs, E> {
                Ok(RawPairs(None))
            }
        }
        d.deserialize_any(V)
    }
}

/// What `object` and `oldObject` leave out while parsing (parsing is most of an admission's cost),
/// because no rule reads it: `status` of every object, often most of a workload's bytes; and of a
/// workload, every annotation but confighistory's own and the change-cause (kubectl's
/// last-applied copy of the whole manifest is a third of a typical Deployment review). A
/// workload's annotations map itself stays, so a patch still knows whether to add the map or a key
/// to it. Sources keep all their annotations: snapshot protection compares them. "Workload" is the
/// request's kind, which the API server sends before the objects; a body that sends them first (no
/// API server does) is parsed whole but for `status`.
/// A registered workload kind's pod template is parsed with its unread parts folded
/// (`model::fold`): `fold` is its pointer.
fn leave(workload: bool, fold: Option<&'static str>) -> Leave {
    Leave { status: true, annotations: if workload { Annotations::AllButOwn } else { Annotations::None }, fold }
}

/// A request alone, knowing the built-in kinds (tests and the fuzz checks build requests so).
impl<'de> Deserialize<'de> for Request {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Request, D::Error> {
        d.deserialize_map(RequestVisitor(Registry::builtin()))
    }
}

/// Parses a request knowing the registered kinds (whose templates it folds).
struct RequestVisitor(&'static Registry);

impl<'de> DeserializeSeed<'de> for RequestVisitor {
    type Value = Request;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Request, D::Error> {
        d.deserialize_map(self)
    }
}

/// Parses a review (`Review`'s fields) knowing the registered kinds.
struct ReviewVisitor(&'static Registry);

impl<'de> Visitor<'de> for ReviewVisitor {
    type Value = Review;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an AdmissionReview")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Review, A::Error> {
        let (mut api_version, mut kind, mut request) = (None, None, None);
        while let Some(Key(key)) = map.next_key::<Key>()? {
            match key.as_ref() {
                "apiVersion" if api_version.is_none() => api_version = Some(map.next_value::<String>()?),
                "kind" if kind.is_none() => kind = Some(map.next_value::<String>()?),
                "request" if request.is_none() => request = Some(map.next_value_seed(OrNull(RequestVisitor(self.0)))?),
                "apiVersion" | "kind" | "request" => return Err(de::Error::custom(format_args!("duplicate field `{key}`"))),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Review { api_version: api_version.unwrap_or_default(), kind: kind.unwrap_or_default(), request: request.flatten() })
    }
}

impl<'de> Visitor<'de> for RequestVisitor {
    type Value = Request;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an admission request")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Request, A::Error> {
        fn once<T, E: de::Error>(slot: &mut Option<T>, field: &'static str, value: T) -> Result<(), E> {
            match slot.replace(value) {
                Some(_) => Err(E::duplicate_field(field)),
                None => Ok(()),
            }
        }
        let (mut uid, mut kind, mut resource, mut sub_resource, mut name, mut namespace) = (None, None, None, None, None, None);
        let (mut operation, mut user_info, mut object, mut old_object, mut dry_run) = (None, None, None, None, None);
        let mut old_content = None;
        let mut options: Option<Option<Options>> = None;
        while let Some(Key(key)) = map.next_key::<Key>()? {
            match key.as_ref() {
                "uid" => once(&mut uid, "uid", map.next_value::<String>()?)?,
                "kind" => once(&mut kind, "kind", map.next_value::<GroupVersionKind>()?)?,
                "resource" => once(&mut resource, "resource", map.next_value::<GroupVersionResource>()?)?,
                "subResource" => once(&mut sub_resource, "subResource", map.next_value::<Option<String>>()?)?,
                "name" => once(&mut name, "name", map.next_value::<String>()?)?,
                "namespace" => once(&mut namespace, "namespace", map.next_value::<String>()?)?,
                "operation" => once(&mut operation, "operation", map.next_value::<Operation>()?)?,
                "userInfo" => once(&mut user_info, "userInfo", map.next_value::<UserInfo>()?)?,
                // A ConfigMap's old content is kept as JSON text (OldObject).
                "oldObject" if kind.as_ref().is_some_and(|k: &GroupVersionKind| k.group.is_empty() && k.kind == ids::CONFIGMAP) => {
                    let value = map.next_value_seed(OrNull(OldObject(&mut old_content)))?;
                    once(&mut old_object, "oldObject", value)?
                }
                "object" | "oldObject" => {
                    // Only sources' other annotations are read (snapshot protection compares them).
                    let workload = kind.as_ref().is_some_and(|k: &GroupVersionKind| ids::SourceKind::known(&k.group, &k.kind).is_none());
                    let fold = kind.as_ref().and_then(|k| self.0.workload(&k.group, &k.kind)).map(|k| k.template_pointer());
                    let value = map.next_value_seed(OrNull(Trim::object(leave(workload, fold))))?;
                    if key == "object" {
                        once(&mut object, "object", value)?
                    } else {
                        once(&mut old_object, "oldObject", value)?
                    }
                }
                "dryRun" => once(&mut dry_run, "dryRun", map.next_value::<Option<bool>>()?)?,
                "options" => once(&mut options, "options", map.next_value::<Option<Options>>()?)?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Request {
            uid: uid.ok_or_else(|| de::Error::missing_field("uid"))?,
            kind: kind.ok_or_else(|| de::Error::missing_field("kind"))?,
            resource: resource.unwrap_or_default(),
            sub_resource: sub_resource.flatten(),
            name: name.unwrap_or_default(),
            namespace: namespace.unwrap_or_default(),
            operation: operation.ok_or_else(|| de::Error::missing_field("operation"))?,
            user_info: user_info.unwrap_or_default(),
            object: object.flatten(),
            old_content: old_content.filter(|_| matches!(old_object, Some(Some(_)))),
            old_object: old_object.flatten(),
            dry_run: dry_run.flatten(),
            field_manager: options.flatten().and_then(|o| o.field_manager).filter(|m| !m.is_empty()),
        })
    }
}

/// Parses and checks an AdmissionReview body, knowing the built-in kinds.
pub fn parse(body: &[u8]) -> Result<Request, Error> {
    parse_in(body, Registry::builtin())
}

/// Parses and checks an AdmissionReview body; the templates of `kinds`' workloads are parsed with
/// their unread parts folded (`model::fold`).
pub fn parse_in(body: &[u8], kinds: &'static Registry) -> Result<Request, Error> {
    // The whole body is checked as UTF-8 once (JSON must be, RFC 8259), which is a fraction of
    // what checking each string as it is parsed costs, and leaves no invalid byte in an
    // ignored field unnoticed.
    let mut de = serde_json::Deserializer::from_str(std::str::from_utf8(body)?);
    let review = de.deserialize_map(ReviewVisitor(kinds))?;
    de.end()?;
    if review.api_version != "admission.k8s.io/v1" || review.kind != "AdmissionReview" {
        return Err(Error::Version(review.api_version, review.kind));
    }
    review.request.ok_or(Error::NoRequest)
}

/// The request's uid alone, read without building anything else (objects are skipped unparsed):
/// for answers to a review that is not decided.
pub fn uid(body: &[u8]) -> Option<String> {
    #[derive(Deserialize)]
    struct Outer {
        request: Option<Inner>,
    }
    #[derive(Deserialize)]
    struct Inner {
        #[serde(default)]
        uid: String,
    }
    serde_json::from_slice::<Outer>(body).ok()?.request.map(|r| r.uid)
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
pub use crate::model::text::MAX_WARNING;
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
            base64_simd::STANDARD.encode_append(&patch, &mut out);
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
    fn a_body_that_is_not_utf8_is_refused_even_where_nothing_reads_it() {
        // In a field no rule reads (left out while parsing) as much as in one that is parsed.
        for at in [&b"\"status\":{\"x\":\"\xff\"}"[..], b"\"extra\":\"\xc3\x28\"", b"\"name\":\"\xff\""] {
            let mut body =
                br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"1","kind":{},"operation":"CREATE","#
                    .to_vec();
            body.extend_from_slice(at);
            body.extend_from_slice(b"}}");
            let err = parse(&body).unwrap_err();
            assert!(matches!(err, Error::Utf8(_)), "{err}");
            assert!(err.to_string().starts_with("request body is not valid JSON: it is not UTF-8"), "{err}");
        }
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

    /// The field manager of a write is read from its options object (CREATE, UPDATE and PATCH
    /// options name one); none, null or empty options read as none.
    #[test]
    fn the_field_manager_is_read_from_the_options() {
        let review = |options: Option<Value>| {
            let mut request = json!({"uid": "1", "kind": {"kind": "ConfigMap", "version": "v1"}, "operation": "UPDATE"});
            if let Some(o) = options {
                request["options"] = o;
            }
            let body = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request});
            parse(&serde_json::to_vec(&body).unwrap()).unwrap().field_manager
        };
        let patch = json!({"kind": "PatchOptions", "apiVersion": "meta.k8s.io/v1", "fieldManager": "kubectl-edit", "force": true});
        assert_eq!(review(Some(patch)).as_deref(), Some("kubectl-edit"));
        assert_eq!(review(Some(json!({"kind": "UpdateOptions", "fieldManager": ""}))), None);
        assert_eq!(review(Some(json!({"kind": "CreateOptions"}))), None);
        assert_eq!(review(Some(Value::Null)), None);
        assert_eq!(review(None), None);
    }

    /// A review body with `fields` in this order (serde_json's `json!` would sort them).
    fn body(fields: &[(&str, Value)]) -> Vec<u8> {
        let inner: Vec<String> = fields.iter().map(|(k, v)| format!("{}:{v}", Value::from(*k))).collect();
        format!(r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{{}}}}}"#, inner.join(",")).into_bytes()
    }

    #[test]
    fn a_workloads_annotations_are_parsed_down_to_confighistorys_own() {
        let last_applied = "kubectl.kubernetes.io/last-applied-configuration";
        let object = |annotations: Value| {
            json!({"metadata": {"name": "app", "annotations": annotations, "labels": {"team": "a"}},
                "spec": {"template": {"metadata": {"annotations": {"team.example/x": "kept"}}, "spec": {}}}})
        };
        let with = object(json!({last_applied: "{\"huge\": true}", "confighistory.io/pins": "{}", "other": "x"}));
        let only_foreign = object(json!({last_applied: "{}"}));
        let head = |kind: &str| {
            let group = if kind == "ConfigMap" { "" } else { "apps" };
            vec![("uid", json!("1")), ("kind", json!({"group": group, "version": "v1", "kind": kind})), ("operation", json!("UPDATE"))]
        };
        let mut fields = head("Deployment");
        fields.extend([("object", with.clone()), ("oldObject", only_foreign.clone())]);
        let req = parse(&body(&fields)).unwrap();
        let obj = req.object();
        assert_eq!(obj["metadata"]["annotations"], json!({"confighistory.io/pins": "{}"}));
        assert_eq!(obj["metadata"]["labels"], json!({"team": "a"}), "labels are whole");
        assert_eq!(obj["spec"]["template"], with["spec"]["template"], "the pod template is whole");
        assert_eq!(req.old_object()["metadata"]["annotations"], json!({}), "the map stays, empty: a patch adds keys to it");

        // ConfigMaps keep every annotation (snapshot protection compares them).
        let mut fields = head("ConfigMap");
        fields.push(("object", with.clone()));
        assert_eq!(parse(&body(&fields)).unwrap().object()["metadata"]["annotations"], with["metadata"]["annotations"]);
        // Objects before the kind (no API server sends them so): parsed whole.
        let mut fields = vec![("object", with.clone())];
        fields.extend(head("Deployment"));
        assert_eq!(parse(&body(&fields)).unwrap().object()["metadata"]["annotations"], with["metadata"]["annotations"]);
        // Escaped keys are read as keys.
        let mut fields = head("Deployment");
        fields.push(("object", json!({"metadata": {"annotations": {"confighistory.io/pins": "p", "x": "y"}}})));
        let escaped = String::from_utf8(body(&fields)).unwrap().replace("confighistory.io/pins", "confighistory.io\\/pins");
        assert_eq!(parse(escaped.as_bytes()).unwrap().object()["metadata"]["annotations"], json!({"confighistory.io/pins": "p"}));
    }

    #[test]
    fn a_configmaps_old_content_is_kept_as_json_text_and_reads_as_parsed_whole() {
        use crate::model::snapshot::{Content, ContentRef};
        // Escapes, characters outside ASCII, a key given twice (the last one counts), a value that
        // is not a string (reads as empty), keys out of order, binaryData, null.
        let olds = [
            r#"{"metadata": {"name": "cfg", "annotations": {"a": "b"}}, "data": {"z": "1", "k": "a\"b\n\u00e9\ud83d\ude00", "k": "last \\ one",
                "n": 5, "o": {"x": [1]}, "e": ""}, "binaryData": {"b.bin": "AAE=", "a.bin": "aGk="}, "status": {"x": 1}}"#,
            r#"{"metadata": {"name": "cfg"}, "data": null, "binaryData": {"b": "AA=="}}"#,
            r#"{"metadata": {"name": "cfg"}, "data": ["x", {"y": 1}], "binaryData": "no"}"#,
            r#"{"metadata": {"name": "cfg"}}"#,
            r#"{"metadata": {"name": "cfg"}, "data": {}, "data": {"again": "x"}}"#,
        ];
        for old in olds {
            let whole: Value = serde_json::from_str(old).unwrap();
            let body = format!(
                r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":"1","kind":{{"group":"","version":"v1","kind":"ConfigMap"}},"operation":"UPDATE","object":{{"data":{{"k":"v"}}}},"oldObject":{old}}}}}"#
            );
            let req = parse(body.as_bytes()).unwrap();
            let raw = req.old_content.as_ref().expect("kept as text");
            let want = Content::from_object(&whole);
            assert_eq!(raw.owned(), want, "{old}");
            assert_eq!(raw.owned().hash(), want.hash());
            assert!(raw.same(&want.borrowed()) && !raw.same(&ContentRef::from_object(req.object())), "{old}");
            assert_eq!(raw.keys(), want.keys());
            let values: Vec<(String, String)> = raw.data_values().map(|(k, v)| (k.to_owned(), v.into_owned())).collect();
            assert_eq!(values, want.data.clone().into_iter().collect::<Vec<_>>());
            assert!(!format!("{raw:?}").contains("last"), "values stay out of Debug: {raw:?}");
            // The rest of the old object as before: trimmed, without the content.
            let mut trimmed = whole.clone();
            for field in ["data", "binaryData", "status"] {
                trimmed.as_object_mut().unwrap().remove(field);
            }
            assert_eq!(req.old_object(), &trimmed);
        }
        // Only a ConfigMap's, and only when the kind comes first (as the API server sends it): else
        // parsed whole, and read from the object.
        let old = json!({"metadata": {"name": "cfg"}, "data": {"k": "v\n"}});
        for fields in [
            vec![
                ("uid", json!("1")),
                ("kind", json!({"group": "", "kind": "Secret"})),
                ("operation", json!("UPDATE")),
                ("oldObject", old.clone()),
            ],
            vec![
                ("uid", json!("1")),
                ("oldObject", old.clone()),
                ("kind", json!({"group": "", "kind": "ConfigMap"})),
                ("operation", json!("UPDATE")),
            ],
        ] {
            let req = parse(&body(&fields)).unwrap();
            assert!(req.old_content.is_none());
            assert_eq!(req.old_object(), &old);
            assert_eq!(req.old_content().owned(), Content::from_object(&old));
        }
        let fields = vec![
            ("uid", json!("1")),
            ("kind", json!({"group": "", "kind": "ConfigMap"})),
            ("operation", json!("DELETE")),
            ("oldObject", Value::Null),
        ];
        assert!(parse(&body(&fields)).unwrap().old_content.is_none(), "no old object, no old content");
    }

    #[test]
    fn the_request_fields_are_checked_as_serde_would() {
        let head = || vec![("uid", json!("1")), ("kind", json!({"kind": "Deployment"})), ("operation", json!("CREATE"))];
        let req = parse(&body(&[head(), vec![("object", Value::Null), ("dryRun", Value::Null), ("future", json!({"a": [1]}))]].concat()))
            .unwrap();
        assert_eq!((req.object, req.dry_run, req.sub_resource), (None, None, None), "null is absent; unknown fields are ignored");
        for (fields, error) in [
            (vec![("kind", json!({})), ("operation", json!("CREATE"))], "missing field `uid`"),
            (vec![("uid", json!("1")), ("operation", json!("CREATE"))], "missing field `kind`"),
            ([head(), vec![("uid", json!("2"))]].concat(), "duplicate field `uid`"),
            ([head(), vec![("object", json!({})), ("object", json!({}))]].concat(), "duplicate field `object`"),
            ([head(), vec![("operation", json!("PATCH"))]].concat(), "unknown variant `PATCH`"),
            ([head(), vec![("object", json!([1]))]].concat(), ""),
        ] {
            match parse(&body(&fields)) {
                Err(e) => assert!(e.to_string().contains(error), "{e}"),
                Ok(r) if error.is_empty() => assert_eq!(r.object, Some(json!([1])), "anything but a map is kept as it is"),
                Ok(r) => panic!("{fields:?} parsed: {r:?}"),
            }
        }
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
        let patch =
            base64::Engine::decode(&base64::engine::general_purpose::STANDARD, patched["response"]["patch"].as_str().unwrap()).unwrap();
        assert_eq!(serde_json::from_slice::<Value>(&patch).unwrap(), json!([{"op": "add", "path": "/a", "value": 1}]));
    }
}
