//! A workload request's pod template parsed with the parts no rule reads folded: kept as their
//! canonical text (what the template hash hashes, `model::template`) in one string, not built as a
//! tree (docs/reliability.md, "The memory model"). Rules read a template's references (volumes,
//! `env[].valueFrom`, `envFrom`, container names), its metadata, and its hash; everything else (a
//! container's image, command, probes, resources, a pod's affinity, an env entry without
//! `valueFrom`) is only hashed and compared. A JSON tree costs tens of bytes per byte of dense
//! input; a folded part costs its text.
//!
//! A folded part is a string beginning with [`MARK`]. Hashing a template read this way
//! ([`text_of`] with `folded`) writes a folded part's text where the part was, so the hash is the
//! one of the whole tree. A string of the request's own that begins with [`MARK`] is folded too
//! (as its own JSON text), so every such string in a folded template is one this parser made.

use std::collections::BTreeMap;
use std::fmt;
use std::io::Write;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use crate::model::json::Key;

/// How a folded part begins. Request strings beginning with it are folded as their JSON text.
pub const MARK: &str = "\u{0}folded:";

/// A folded part's canonical text, when `s` is one.
pub fn unfold(s: &str) -> Option<&str> {
    s.strip_prefix(MARK)
}

/// A string as kept: folded as its JSON text when it could pass for a folded part.
fn kept_string(s: String) -> Value {
    if s.starts_with(MARK) {
        let mut out = MARK.as_bytes().to_vec();
        serde_json::to_writer(&mut out, &s).unwrap_or_default();
        folded_text(out)
    } else {
        Value::String(s)
    }
}

/// The scalar `visit_*` methods of a visitor that keeps scalars as values (strings through
/// [`kept_string`]).
macro_rules! kept_scalars {
    () => {
        fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
            Ok(Value::Null)
        }
        fn visit_none<E: de::Error>(self) -> Result<Value, E> {
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
            Ok(kept_string(v.to_owned()))
        }
        fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
            Ok(kept_string(v))
        }
    };
}

/// Writes the canonical text of `v` below a template's labels (docs/behaviour.md §6.2.0, "what
/// counts as a change", and `model::template::template_hash`): keys sorted, null members and
/// `$patch` markers left out. With `folded`, a folded part is written as the text it holds.
pub fn text_of(v: &Value, folded: bool, out: &mut dyn FnMut(&[u8])) {
    match v {
        Value::Object(m) => {
            out(b"{");
            for (k, v) in content_members(m, |_| true) {
                out(serde_json::to_string(k).unwrap_or_default().as_bytes());
                out(b":");
                text_of(v, folded, out);
                out(b",");
            }
            out(b"}");
        }
        Value::Array(a) => {
            out(b"[");
            for x in a {
                text_of(x, folded, out);
                out(b",");
            }
            out(b"]");
        }
        Value::String(s) if folded && unfold(s).is_some() => out(unfold(s).unwrap_or_default().as_bytes()),
        other => out(other.to_string().as_bytes()),
    }
}

/// The members of an object its canonical text holds, in key order: a null member and a `$patch`
/// marker are no content (docs/behaviour.md §6.2.0); of the rest, those `keep` keeps.
pub fn content_members(m: &Map<String, Value>, keep: impl Fn(&str) -> bool) -> Vec<(&String, &Value)> {
    let mut members: Vec<(&String, &Value)> = m.iter().filter(|(k, v)| !v.is_null() && k.as_str() != "$patch" && keep(k)).collect();
    members.sort_by(|a, b| a.0.cmp(b.0));
    members
}

/// A seed parsing a pod template, folding what no rule reads.
#[derive(Clone, Copy)]
pub struct Template;

impl<'de> DeserializeSeed<'de> for Template {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(At::Template)
    }
}

/// Where in a template a value is, and so what of it is kept.
#[derive(Clone, Copy, PartialEq)]
enum At {
    Template,
    Spec,
    Containers,
    Container,
    Env,
    EnvVar,
    /// Kept whole, as a tree (strings that could pass for folded parts folded).
    Kept,
    /// Folded, unless it is a scalar or empty (a string or `[]` costs no more as a value).
    Folded,
}

impl At {
    /// How the member `key` of a map here is read.
    fn member(self, key: &str) -> At {
        match (self, key) {
            (At::Template, "spec") => At::Spec,
            (At::Template, "metadata") => At::Kept,
            (At::Spec, "volumes") => At::Kept,
            (At::Spec, "containers" | "initContainers" | "ephemeralContainers") => At::Containers,
            (At::Container, "env") => At::Env,
            (At::Container, "envFrom" | "name") => At::Kept,
            (At::Kept, _) => At::Kept,
            _ => At::Folded,
        }
    }
    fn element(self) -> At {
        match self {
            At::Containers => At::Container,
            At::Env => At::EnvVar,
            _ => At::Kept,
        }
    }
}

impl<'de> DeserializeSeed<'de> for At {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        match self {
            At::Folded => d.deserialize_any(FoldPoint),
            _ => d.deserialize_any(self),
        }
    }
}

impl<'de> Visitor<'de> for At {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a pod template")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        if self == At::EnvVar {
            return env_var(map);
        }
        let mut out = Map::new();
        while let Some(Key(key)) = map.next_key::<Key>()? {
            let value = map.next_value_seed(self.member(&key))?;
            out.insert(key.into_owned(), value);
        }
        Ok(Value::Object(out))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(v) = seq.next_element_seed(self.element())? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }

    kept_scalars!();
}

/// An env entry: kept as a tree when it has a `valueFrom` (a reference may be in it), its other
/// members folded; folded whole when it has none (most entries: a name and a value).
fn env_var<'de, A: MapAccess<'de>>(mut map: A) -> Result<Value, A::Error> {
    let mut value_from = None;
    let mut members: BTreeMap<String, Option<Vec<u8>>> = BTreeMap::new();
    let mut any = false;
    while let Some(Key(key)) = map.next_key::<Key>()? {
        any = true;
        match key.as_ref() {
            "valueFrom" => value_from = Some(map.next_value_seed(At::Kept)?),
            "$patch" => {
                map.next_value::<IgnoredAny>()?;
            }
            _ => {
                let mut text = MARK.as_bytes().to_vec();
                let some = map.next_value_seed(Canon(&mut text))?;
                members.insert(key.into_owned(), some.then_some(text));
            }
        }
    }
    match value_from {
        Some(from) if !from.is_null() => {
            let mut out = Map::new();
            for (k, text) in members {
                out.insert(k, text.map_or(Value::Null, folded_text));
            }
            out.insert("valueFrom".into(), from);
            Ok(Value::Object(out))
        }
        _ if !any => Ok(Value::Object(Map::new())),
        _ => {
            let mut out = MARK.as_bytes().to_vec();
            write_object(members.iter().filter_map(|(k, t)| Some((k.as_str(), &t.as_ref()?[MARK.len()..]))), &mut out);
            Ok(folded_text(out))
        }
    }
}

/// A folded part from its bytes: [`MARK`], then the canonical text (UTF-8: serde_json wrote it
/// from strings).
fn folded_text(bytes: Vec<u8>) -> Value {
    Value::String(String::from_utf8(bytes).unwrap_or_default())
}

/// The canonical text of an object whose members' texts are given in key order, appended to `out`.
fn write_object<'k>(members: impl Iterator<Item = (&'k str, &'k [u8])>, out: &mut Vec<u8>) {
    out.push(b'{');
    for (k, text) in members {
        serde_json::to_writer(&mut *out, k).unwrap_or_default();
        out.push(b':');
        out.extend_from_slice(text);
        out.push(b',');
    }
    out.push(b'}');
}

/// A value where rules read nothing: a scalar kept as its value (a string or a number costs no
/// more so), an empty array or object too (it costs nothing); anything else folded.
struct FoldPoint;

impl FoldPoint {
    fn folded(out: Vec<u8>) -> Value {
        match &out[MARK.len()..] {
            b"[]" => Value::Array(Vec::new()),
            b"{}" => Value::Object(Map::new()),
            _ => folded_text(out),
        }
    }
}

impl<'de> Visitor<'de> for FoldPoint {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Value, A::Error> {
        let mut out = MARK.as_bytes().to_vec();
        Canon(&mut out).visit_map(map)?;
        Ok(FoldPoint::folded(out))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Value, A::Error> {
        let mut out = MARK.as_bytes().to_vec();
        Canon(&mut out).visit_seq(seq)?;
        Ok(FoldPoint::folded(out))
    }
    kept_scalars!();
}

/// Appends a value's canonical text to its buffer, building no tree; `false` (nothing written)
/// for null. Arrays are written in place; an object's members each into a buffer of their own,
/// to be written in key order once the object is read.
struct Canon<'a>(&'a mut Vec<u8>);

impl<'de> DeserializeSeed<'de> for Canon<'_> {
    type Value = bool;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Canon<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
        // The members' texts one after the other in one buffer, then written in key order: the
        // keys stay borrowed from the body, and no member has a buffer or a tree node of its own.
        let mut texts = Vec::new();
        let mut members: Vec<(std::borrow::Cow<'de, str>, Option<std::ops::Range<usize>>)> = Vec::new();
        while let Some(Key(key)) = map.next_key::<Key>()? {
            if key == "$patch" {
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            let at = texts.len();
            let some = map.next_value_seed(Canon(&mut texts))?;
            members.push((key, some.then_some(at..texts.len())));
        }
        // A member given twice keeps its last value, as a parsed map does (a stable sort keeps
        // them in order); a null one is no member.
        members.sort_by(|a, b| a.0.cmp(&b.0));
        let last = |i: usize| members.get(i + 1).is_none_or(|next| next.0 != members[i].0);
        let kept = members.iter().enumerate().filter(|&(i, _)| last(i));
        write_object(kept.filter_map(|(_, (k, text))| Some((k.as_ref(), &texts[text.clone()?]))), self.0);
        Ok(true)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<bool, A::Error> {
        let out = self.0;
        out.push(b'[');
        loop {
            let at = out.len();
            match seq.next_element_seed(Canon(&mut *out))? {
                None => break,
                Some(true) => {}
                Some(false) => {
                    out.truncate(at);
                    out.extend_from_slice(b"null");
                }
            }
            out.push(b',');
        }
        out.push(b']');
        Ok(true)
    }

    fn visit_unit<E: de::Error>(self) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_none<E: de::Error>(self) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<bool, E> {
        self.0.extend_from_slice(if v { b"true" } else { b"false" });
        Ok(true)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<bool, E> {
        write!(self.0, "{v}").map_err(E::custom)?;
        Ok(true)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<bool, E> {
        write!(self.0, "{v}").map_err(E::custom)?;
        Ok(true)
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<bool, E> {
        // As a parsed value writes it.
        self.0.extend_from_slice(Value::from(v).to_string().as_bytes());
        Ok(true)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<bool, E> {
        serde_json::to_writer(&mut *self.0, v).map_err(E::custom)?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn folded(text: &str) -> Value {
        Template.deserialize(&mut serde_json::Deserializer::from_str(text)).unwrap()
    }

    /// The whole template's canonical text, and the folded one's.
    fn texts(text: &str) -> (String, String) {
        let (mut whole, mut fold) = (Vec::new(), Vec::new());
        text_of(&serde_json::from_str(text).unwrap(), false, &mut |b| whole.extend_from_slice(b));
        text_of(&folded(text), true, &mut |b| fold.extend_from_slice(b));
        (String::from_utf8(whole).unwrap(), String::from_utf8(fold).unwrap())
    }

    #[test]
    fn what_rules_read_stays_a_tree_and_the_rest_is_folded() {
        let t = folded(
            r#"{"metadata": {"labels": {"app": "a"}}, "spec": {
                "volumes": [{"name": "v", "configMap": {"name": "cfg"}}],
                "affinity": {"nodeAffinity": {"x": [1, 2]}}, "hostNetwork": true, "tolerations": [],
                "containers": [{"name": "app", "image": "i", "args": ["a", "b"],
                    "env": [{"name": "A", "value": "1"}, {"name": "B", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "b"}}}, {}],
                    "envFrom": [{"configMapRef": {"name": "cfg"}}]}]}}"#,
        );
        assert_eq!(t["metadata"], json!({"labels": {"app": "a"}}));
        assert_eq!(t["spec"]["volumes"], json!([{"name": "v", "configMap": {"name": "cfg"}}]));
        assert_eq!(t["spec"]["affinity"], json!("\u{0}folded:{\"nodeAffinity\":{\"x\":[1,2,],},}"));
        // Scalars and empty values cost no more kept than folded.
        assert_eq!((&t["spec"]["hostNetwork"], &t["spec"]["tolerations"]), (&json!(true), &json!([])));
        let c = &t["spec"]["containers"][0];
        assert_eq!((&c["name"], &c["image"], &c["args"]), (&json!("app"), &json!("i"), &json!("\u{0}folded:[\"a\",\"b\",]")));
        assert_eq!(c["env"][0], json!("\u{0}folded:{\"name\":\"A\",\"value\":\"1\",}"));
        assert_eq!(c["env"][1]["valueFrom"], json!({"configMapKeyRef": {"name": "cfg", "key": "b"}}));
        assert_eq!(c["env"][1]["name"], json!("\u{0}folded:\"B\""));
        assert_eq!((&c["env"][2], &c["envFrom"]), (&json!({}), &json!([{"configMapRef": {"name": "cfg"}}])));
    }

    #[test]
    fn a_folded_template_has_the_whole_ones_text() {
        for text in [
            // A member given twice keeps its last value; a null one is no member; `$patch` is none.
            r#"{"spec": {"x": {"a": 1, "a": 2, "b": null, "$patch": "replace"}, "containers": [{"env": [{"name": "A", "name": "B"}]}]}}"#,
            r#"{"spec": {"x": {"a": 1, "a": null}, "containers": [{"env": [{"valueFrom": {"configMapKeyRef": {"name": "c"}}, "valueFrom": null, "n": 1}]}]}}"#,
            // Numbers as a parsed value writes them.
            r#"{"spec": {"x": [1e3, -0.5, 18446744073709551615, -9223372036854775808, 1.0E-7]}}"#,
            // Escapes, non-ASCII, and strings that could pass for folded parts, kept or folded.
            r#"{"metadata": {"labels": {"a": "\u0000folded:[1,]"}}, "spec": {"x": ["\u0000folded:{}", "\u00e9\"\\\n"], "containers": [{"name": "\u0000folded:1", "env": [{"name": "\u0000folded:"}]}]}}"#,
            r#"[{"spec": 1}]"#,
            r#"{"spec": {"containers": "c", "volumes": 3}, "metadata": null}"#,
        ] {
            let (whole, fold) = texts(text);
            assert_eq!(fold, whole, "{text}");
        }
    }

    #[test]
    fn a_request_string_cannot_pass_for_a_folded_part() {
        // Kept where rules read it, a string that begins like a folded part is folded as its own
        // JSON text: its hash is a string's, not the text it holds.
        let t = folded(r#"{"metadata": {"labels": {"a": "\u0000folded:[1,]"}}}"#);
        let mut text = Vec::new();
        text_of(&t, true, &mut |b| text.extend_from_slice(b));
        assert_eq!(String::from_utf8(text).unwrap(), r#"{"metadata":{"labels":{"a":"\u0000folded:[1,]",},},}"#);
    }
}
