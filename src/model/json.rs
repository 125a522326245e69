//! JSON access for the admission hot path.
//!
//! `serde_json::Value::pointer` allocates two `String`s per segment to unescape it (`~1`, `~0`),
//! whether or not the segment has a `~`: on a steady-state admission that was 5% of all
//! instructions (benches/instructions). [`At::at`] is the same lookup, allocating only for a
//! segment that really is escaped.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, Visitor};
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

/// The most heap memory parsing `body` into a `serde_json::Value` tree can take, from one scan of
/// its bytes without building anything (docs/reliability.md, "The memory model"): a body's bytes
/// on the wire say little about its tree (a map of one short key is 9 bytes of JSON and a 648-byte
/// B-tree node once parsed), so admission charges this before it parses, never the body's length.
///
/// An upper bound, by construction:
/// - a string (key or value): its raw bytes (escapes only shrink when decoded) plus the
///   allocator's header, rounded up, at least one 32-byte chunk;
/// - an array of n values: a `Vec<Value>` grown by doubling (capacity up to 2n), and the old
///   buffer beside the new while it moves: 48 bytes a slot;
/// - a map of n entries: a `BTreeMap` of 11-slot nodes, none with fewer than 4 entries but the
///   first: leaf nodes of 648 bytes, internal ones of 744;
/// - numbers, `true`, `false` and `null` live in their container's slot.
///
/// Malformed JSON is scanned as far as it goes: parsing stops at the first error, so it can take
/// no more than the prefix before it.
pub fn parse_cost(body: &[u8]) -> usize {
    // One frame per open container: a map counts its entries by their ':', an array its values
    // by its ',' (plus the first).
    struct Frame {
        map: bool,
        entries: usize,
        any: bool,
    }
    fn closed(frame: &Frame) -> usize {
        if frame.map {
            map_cost(frame.entries)
        } else {
            let n = if frame.any { frame.entries + 1 } else { 0 };
            array_cost(n)
        }
    }
    let mut stack: Vec<Frame> = Vec::new();
    let mut cost = 0usize;
    let mut i = 0;
    while i < body.len() {
        let b = body[i];
        match b {
            b'"' => {
                let start = i + 1;
                i = start;
                // To the closing quote, a quote or backslash at a time (SIMD): most of a review's
                // bytes are inside strings.
                while let Some(at) = memchr::memchr2(b'"', b'\\', &body[i.min(body.len())..]) {
                    i += at;
                    if body[i] == b'"' {
                        break;
                    }
                    i += 2;
                }
                if i >= body.len() || body[i] != b'"' {
                    i = body.len();
                }
                cost = cost.saturating_add(string_cost(i.min(body.len()) - start));
                if let Some(f) = stack.last_mut() {
                    f.any = true;
                }
            }
            b'{' | b'[' => {
                if let Some(f) = stack.last_mut() {
                    f.any = true;
                }
                stack.push(Frame { map: b == b'{', entries: 0, any: false });
            }
            b'}' | b']' => {
                if let Some(f) = stack.pop() {
                    cost = cost.saturating_add(closed(&f));
                }
            }
            b':' => {
                if let Some(f) = stack.last_mut().filter(|f| f.map) {
                    f.entries += 1;
                }
            }
            b',' => {
                if let Some(f) = stack.last_mut().filter(|f| !f.map) {
                    f.entries += 1;
                }
            }
            b' ' | b'\t' | b'\n' | b'\r' => {}
            _ => {
                if let Some(f) = stack.last_mut() {
                    f.any = true;
                }
            }
        }
        i += 1;
    }
    // Containers left open (a cut-off body) were built as far as they went.
    stack.iter().fold(cost, |c, f| c.saturating_add(closed(f)))
}

/// The heap a parsed `Value` holds, by the rules of [`parse_cost`] (an upper bound of what it took
/// to build): what a source read for an admission is charged once its size is known.
pub fn heap_size(v: &Value) -> usize {
    match v {
        Value::String(s) => string_cost(s.len()),
        Value::Array(items) => items.iter().fold(array_cost(items.len()), |c, i| c.saturating_add(heap_size(i))),
        Value::Object(map) => {
            map.iter().fold(map_cost(map.len()), |c, (k, v)| c.saturating_add(string_cost(k.len())).saturating_add(heap_size(v)))
        }
        _ => 0,
    }
}

/// An upper bound of [`parse_cost`] from a body's length alone, without reading it: the densest
/// shapes (one-entry maps, one-element arrays: about 113 bytes of tree per byte) stay under 120
/// times the length, and nesting, denser still per byte (136 times), is bounded by `serde_json`'s
/// depth limit of 128 to a fixed amount. For small bodies, where one scan would cost as much as
/// a third of the parse itself.
pub fn parse_bound(len: usize) -> usize {
    len.saturating_mul(120).saturating_add(128 * 1024)
}

/// A string of `len` bytes on the heap: the allocator's 8-byte header, 16-byte granules, at least
/// 32 bytes.
fn string_cost(len: usize) -> usize {
    (len.saturating_add(8 + 15) & !15).max(32)
}

/// A `Vec<Value>` of `n` (32-byte values): capacity up to 2n, old and new buffers side by side
/// while it grows.
fn array_cost(n: usize) -> usize {
    if n == 0 {
        0
    } else {
        n.next_power_of_two().max(4).saturating_mul(48).saturating_add(32)
    }
}

/// A `BTreeMap<String, Value>` of `n` entries: 11 slots a node, at least 4 entries in every node
/// but the first.
fn map_cost(n: usize) -> usize {
    const LEAF: usize = 648;
    const INTERNAL: usize = 744;
    if n == 0 {
        return 0;
    }
    let leaves = 1 + n.saturating_sub(11).div_ceil(4);
    let internal = if leaves > 1 { 1 + leaves.div_ceil(3) } else { 0 };
    leaves.saturating_mul(LEAF).saturating_add(internal.saturating_mul(INTERNAL))
}

/// A map key, borrowed from the body unless it has escapes: a key that is left out costs no
/// allocation.
pub struct Key<'de>(pub Cow<'de, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Key<'de>, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(v.into()))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(v.to_owned().into()))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key(v.into()))
            }
        }
        d.deserialize_str(V)
    }
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

    /// The densest shapes per byte, nesting to serde_json's depth limit included, stay under the
    /// length's bound that small bodies are charged instead of a scan.
    #[test]
    fn the_length_bound_covers_the_densest_shapes() {
        let nested = |open: &str, close: &str, depth: usize| format!("{}1{}", open.repeat(depth), close.repeat(depth));
        let repeated = |item: &str, n: usize| format!("[{}]", vec![item; n].join(","));
        let bodies = [
            nested("{\"\":", "}", 127),
            nested("{\"\":[", "]}", 63),
            nested("[", "]", 127),
            repeated("{\"\":0}", 2000),
            repeated("[0]", 2000),
            repeated("{\"\":{}}", 2000),
            repeated("\"\"", 2000),
            format!("{{{}}}", (0..2000).map(|i| format!("\"{i}\":0")).collect::<Vec<_>>().join(",")),
            "{\"\":0}".to_owned(),
            String::new(),
        ];
        for body in bodies {
            let (cost, bound) = (super::parse_cost(body.as_bytes()), super::parse_bound(body.len()));
            assert!(cost <= bound, "{} bytes ({}...): scanned {cost}, bound {bound}", body.len(), &body[..body.len().min(20)]);
        }
    }
}
