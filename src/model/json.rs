//! JSON access for the admission hot path.
//!
//! `serde_json::Value::pointer` allocates two `String`s per segment to unescape it (`~1`, `~0`),
//! whether or not the segment has a `~`: on a steady-state admission that was 5% of all
//! instructions (benches/instructions). [`At::at`] is the same lookup, allocating only for a
//! segment that really is escaped.

use std::borrow::Cow;

use serde_json::Value;

pub trait At {
    /// The value at an RFC 6901 JSON pointer (`""` is the whole value), as `Value::pointer`.
    fn at(&self, pointer: &str) -> Option<&Value>;
}

impl At for Value {
    fn at(&self, pointer: &str) -> Option<&Value> {
        if pointer.is_empty() {
            return Some(self);
        }
        pointer.strip_prefix('/')?.split('/').try_fold(self, |v, segment| {
            let key: Cow<str> =
                if segment.contains('~') { Cow::Owned(segment.replace("~1", "/").replace("~0", "~")) } else { Cow::Borrowed(segment) };
            match v {
                Value::Object(map) => map.get(key.as_ref()),
                Value::Array(list) => index(&key).and_then(|i| list.get(i)),
                _ => None,
            }
        })
    }
}

/// Escapes one JSON-pointer segment (RFC 6901): `~` as `~0`, `/` as `~1`.
pub fn escape(segment: &str) -> String {
    segment.replace('~', "~0").replace('/', "~1")
}

/// An array index as RFC 6901 spells it: digits, no leading zero, no sign.
fn index(s: &str) -> Option<usize> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) || (s.len() > 1 && s.starts_with('0')) {
        return None;
    }
    s.parse().ok()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{escape, At};

    #[test]
    fn agrees_with_serde_json_pointer() {
        let v = json!({"a": {"b/c": [1, {"d~e": 2}], "": 3, "01": 4}, "x": null});
        for p in [
            "",
            "/a",
            "/a/b~1c",
            "/a/b~1c/0",
            "/a/b~1c/1/d~0e",
            "/a/",
            "/a/01",
            "/a/b~1c/01",
            "/a/b~1c/-1",
            "/a/b~1c/+1",
            "/a/b~1c/2",
            "/x",
            "/x/y",
            "a",
            "/nope",
            "/a/b~1c/1/d~0e/z",
        ] {
            assert_eq!(v.at(p), v.pointer(p), "{p}");
        }
        // escape builds the segments those pointers spell by hand.
        assert_eq!(v.at(&format!("/a/{}/1/{}", escape("b/c"), escape("d~e"))), Some(&json!(2)));
    }
}
