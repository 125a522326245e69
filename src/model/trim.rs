//! Kubernetes objects parsed into JSON with the parts no rule reads left out while parsing, rather
//! than built and dropped: parsing is most of what an admission costs (docs/performance.md,
//! "Where the time goes") and most of what a replica does before it is ready at scale
//! (docs/architecture.md, "Lists streamed, objects parsed once"). The one place that says what
//! may be left out; each reader says, with a [`Leave`], what it leaves out.

use std::fmt;

use serde::de::value::SeqAccessDeserializer;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::model::fold;
use crate::model::json::Key;
use crate::model::names;

/// The scalar `visit_*` methods of a visitor that keeps a scalar as the `Value` it is (a
/// trimming visitor reshapes maps only).
macro_rules! scalars_as_values {
    () => {
        fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<serde_json::Value, E> {
            Ok(serde_json::Value::Bool(v))
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<serde_json::Value, E> {
            Ok(serde_json::Value::from(v))
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<serde_json::Value, E> {
            Ok(serde_json::Value::from(v))
        }
        fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<serde_json::Value, E> {
            Ok(serde_json::Value::from(v))
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<serde_json::Value, E> {
            Ok(serde_json::Value::from(v))
        }
        fn visit_string<E: serde::de::Error>(self, v: String) -> Result<serde_json::Value, E> {
            Ok(serde_json::Value::String(v))
        }
    };
}
pub(crate) use scalars_as_values;

/// kubectl's annotation holding the whole object it last applied: for a Secret, its values in
/// base64.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// What a parse leaves out of an object. `metadata.managedFields` (the server's record of field
/// ownership, often larger than the rest of the metadata) is always left out: nothing reads it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Leave {
    /// The object's `status`.
    pub status: bool,
    /// Which of `metadata.annotations`.
    pub annotations: Annotations,
    /// The JSON pointer of a pod template whose unread parts are folded ([`fold`]): a workload
    /// request's, by its kind.
    pub fold: Option<&'static str>,
}

/// Which annotations a parse leaves out.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Annotations {
    /// None.
    None,
    /// kubectl's last-applied copy ([`LAST_APPLIED`]).
    LastApplied,
    /// Every annotation but confighistory's own and the change-cause, which a release may carry
    /// over from confighistory's revision (docs/behaviour.md §7.9).
    AllButOwn,
}

/// Where in the object a map is.
#[derive(Clone, Copy, PartialEq)]
enum Part {
    Object,
    Metadata,
    Annotations,
    /// On the way to the template to fold: the rest of its pointer.
    Path(&'static str),
}

/// How a member is read.
enum How {
    Skip,
    Whole,
    Trim(Trim),
    Template,
}

/// A seed parsing an object (or its `metadata`) as `Value` does, less what its [`Leave`] says.
/// Only maps at those places are reshaped: anything else (an array, a string, `null`) is kept as
/// it is, for the caller to judge. Only the object's own metadata is trimmed: the same names
/// elsewhere (a pod template's metadata) are content.
#[derive(Clone, Copy)]
pub struct Trim {
    part: Part,
    leave: Leave,
}

impl Trim {
    /// A whole object.
    pub fn object(leave: Leave) -> Trim {
        Trim { part: Part::Object, leave }
    }
    /// An object's `metadata`.
    pub fn metadata(leave: Leave) -> Trim {
        Trim { part: Part::Metadata, leave }
    }

    /// The value of `key`, the map's next, as this reader keeps it: `None` when it is left out
    /// (skipped unparsed). For parsers that read some of an object's fields themselves (the
    /// admission's `oldObject` takes `data` apart) and leave the rest to this one rule.
    pub fn value<'de, A: MapAccess<'de>>(self, key: &str, map: &mut A) -> Result<Option<Value>, A::Error> {
        Ok(match self.key(key) {
            How::Skip => {
                map.next_value::<IgnoredAny>()?;
                None
            }
            How::Trim(inner) => Some(map.next_value_seed(inner)?),
            How::Template => Some(map.next_value_seed(fold::Template)?),
            How::Whole => Some(map.next_value::<Value>()?),
        })
    }

    /// Whether `key` of this map is left out; and how its value is parsed when it is kept.
    fn key(self, key: &str) -> How {
        let leave = self.leave;
        match (self.part, key) {
            (Part::Object, "status") if leave.status => How::Skip,
            (Part::Object, "metadata") => How::Trim(Trim { part: Part::Metadata, leave }),
            (Part::Object, k) => match leave.fold.and_then(|p| p.strip_prefix('/')) {
                Some(path) => self.toward(path, k),
                None => How::Whole,
            },
            (Part::Path(path), k) => self.toward(path, k),
            (Part::Metadata, "managedFields") => How::Skip,
            (Part::Metadata, "annotations") if leave.annotations != Annotations::None => How::Trim(Trim { part: Part::Annotations, leave }),
            (Part::Annotations, k) => match leave.annotations {
                Annotations::LastApplied if k == LAST_APPLIED => How::Skip,
                Annotations::AllButOwn if !k.starts_with(names::PREFIX) && k != names::CHANGE_CAUSE => How::Skip,
                _ => How::Whole,
            },
            _ => How::Whole,
        }
    }

    /// `key` on the way along `path` (the template's pointer, less its leading `/`): the next step,
    /// the template itself, or a member off the way, read whole.
    fn toward(self, path: &'static str, key: &str) -> How {
        let (step, rest) = path.split_once('/').unwrap_or((path, ""));
        match (step == key, rest) {
            (false, _) => How::Whole,
            (true, "") => How::Template,
            (true, rest) => How::Trim(Trim { part: Part::Path(rest), leave: self.leave }),
        }
    }
}

impl<'de> DeserializeSeed<'de> for Trim {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Trim {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a Kubernetes object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(Key(key)) = map.next_key::<Key>()? {
            if let Some(value) = self.value(&key, &mut map)? {
                out.insert(key.into_owned(), value);
            }
        }
        Ok(Value::Object(out))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Value, A::Error> {
        Value::deserialize(SeqAccessDeserializer::new(seq))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    scalars_as_values!();
}

/// What a value is, for an error that must not quote it (it may be a Secret's).
pub fn described(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const WATCHED: Leave = Leave { status: false, annotations: Annotations::LastApplied, fold: None };
    const WORKLOAD: Leave = Leave { status: true, annotations: Annotations::AllButOwn, fold: None };
    const SOURCE: Leave = Leave { status: true, annotations: Annotations::None, fold: None };

    fn object() -> Value {
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": "web",
                "annotations": {LAST_APPLIED: "{\"data\":{\"password\":\"canary\"}}", "confighistory.io/pins": "cfg", "team": "a"},
                "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}],
                "labels": {"status": "x", "managedFields": "y"},
            },
            "spec": {"status": 1, "template": {"metadata": {"managedFields": 2, "annotations": {LAST_APPLIED: "content"}}}},
            "status": {"replicas": 1},
        })
    }

    fn trimmed(leave: Leave, text: &str) -> Value {
        Trim::object(leave).deserialize(&mut serde_json::Deserializer::from_str(text)).unwrap()
    }

    /// `object()` parsed whole, with `f` applied.
    fn whole(f: impl FnOnce(&mut Map<String, Value>)) -> Value {
        let mut v = object();
        f(v.as_object_mut().unwrap());
        v
    }

    #[test]
    fn each_reader_leaves_out_what_it_says_and_nothing_else() {
        let text = object().to_string();
        let no_managed = |o: &mut Map<String, Value>| drop(o["metadata"].as_object_mut().unwrap().remove("managedFields"));
        let annotations = |o: &mut Map<String, Value>| o["metadata"]["annotations"].as_object_mut().unwrap().clone();
        assert_eq!(
            trimmed(WATCHED, &text),
            whole(|o| {
                no_managed(o);
                o["metadata"]["annotations"].as_object_mut().unwrap().remove(LAST_APPLIED);
            })
        );
        assert_eq!(
            trimmed(WORKLOAD, &text),
            whole(|o| {
                no_managed(o);
                o.remove("status");
                let own: Map<String, Value> = annotations(o).into_iter().filter(|(k, _)| k.starts_with(names::PREFIX)).collect();
                o["metadata"]["annotations"] = Value::Object(own);
            })
        );
        assert_eq!(
            trimmed(SOURCE, &text),
            whole(|o| {
                no_managed(o);
                o.remove("status");
            })
        );
    }

    #[test]
    fn anything_but_a_map_is_kept_as_it_is() {
        for text in [r#"["a", {"status": 1}]"#, "null", "7", r#""text""#, r#"{"metadata": "m"}"#, r#"{"metadata": {"annotations": null}}"#]
        {
            assert_eq!(trimmed(WORKLOAD, text), serde_json::from_str::<Value>(text).unwrap(), "{text}");
        }
    }

    #[test]
    fn metadata_alone_is_trimmed_as_an_objects_metadata() {
        let m = object()["metadata"].to_string();
        let v = Trim::metadata(WATCHED).deserialize(&mut serde_json::Deserializer::from_str(&m)).unwrap();
        assert!(v.get("managedFields").is_none() && v["annotations"].get(LAST_APPLIED).is_none());
        assert_eq!(v["labels"], json!({"status": "x", "managedFields": "y"}));
    }

    #[test]
    fn escaped_keys_are_unescaped() {
        let v = trimmed(SOURCE, r#"{"metadata": {"na\u006de": "a", "managed\u0046ields": 1}}"#);
        assert_eq!(v, json!({"metadata": {"name": "a"}}));
    }
}
