//! A small block-style YAML writer for `-o yaml` (JSON values only, so no new dependency).
//! Strings that could read as anything but a string are double-quoted with JSON escapes, which
//! YAML's double-quoted style accepts.

use serde_json::Value;

pub fn to_yaml(v: &Value) -> String {
    let mut out = String::new();
    match v {
        Value::Object(m) if !m.is_empty() => object(m, 0, &mut out),
        Value::Array(a) if !a.is_empty() => array(a, 0, &mut out),
        other => {
            out.push_str(&scalar(other));
            out.push('\n');
        }
    }
    out
}

fn object(m: &serde_json::Map<String, Value>, indent: usize, out: &mut String) {
    for (i, (k, v)) in m.iter().enumerate() {
        // The first key of a list item follows its `- `.
        if i > 0 || !out.ends_with("- ") {
            out.push_str(&" ".repeat(indent));
        }
        out.push_str(&string(k));
        out.push(':');
        value(v, indent, out);
    }
}

fn array(a: &[Value], indent: usize, out: &mut String) {
    for v in a {
        out.push_str(&" ".repeat(indent));
        out.push_str("- ");
        match v {
            Value::Object(m) if !m.is_empty() => object(m, indent + 2, out),
            Value::Array(inner) if !inner.is_empty() => {
                out.pop();
                out.push('\n');
                array(inner, indent + 2, out);
            }
            other => {
                out.push_str(&scalar(other));
                out.push('\n');
            }
        }
    }
}

/// After `key:`.
fn value(v: &Value, indent: usize, out: &mut String) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            out.push('\n');
            object(m, indent + 2, out);
        }
        // Lists sit at the key's indentation, as kubectl prints them.
        Value::Array(a) if !a.is_empty() => {
            out.push('\n');
            array(a, indent, out);
        }
        other => {
            out.push(' ');
            out.push_str(&scalar(other));
            out.push('\n');
        }
    }
}

fn scalar(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => string(s),
        Value::Array(_) => "[]".into(),
        Value::Object(_) => "{}".into(),
    }
}

const RESERVED: [&str; 12] = ["true", "false", "yes", "no", "on", "off", "null", "y", "n", "~", "<<", "="];

fn string(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '/' || c == '_')
        && s.chars().all(|c| c.is_ascii_alphanumeric() || "._/-() ,+".contains(c))
        && !s.ends_with(' ')
        && !RESERVED.contains(&s.to_ascii_lowercase().as_str());
    if plain {
        s.to_owned()
    } else {
        serde_json::to_string(s).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn block_style_like_kubectl() {
        let v = json!({
            "name": "app-config",
            "revision": 3,
            "head": true,
            "created": "2024-05-01T10:00:00Z",
            "tags": ["a", "yes", ""],
            "empty": [],
            "none": null,
            "items": [{"key": "k: v", "lines": ["+x", " y"]}, {"key": "b"}],
            "nested": {"x": {"y": 1}},
        });
        // serde_json's map is sorted (no preserve_order), like kubectl's output.
        let expected = r#"created: "2024-05-01T10:00:00Z"
empty: []
head: true
items:
- key: "k: v"
  lines:
  - "+x"
  - " y"
- key: b
name: app-config
nested:
  x:
    "y": 1
none: null
revision: 3
tags:
- a
- "yes"
- ""
"#;
        assert_eq!(to_yaml(&v), expected);
        assert_eq!(to_yaml(&json!([[1, 2], {}])), "-\n  - 1\n  - 2\n- {}\n");
    }
}
