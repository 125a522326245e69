//! `-o yaml`: the model written by serde-saphyr's serializer (the YAML crate kube already
//! brings), in kubectl's block style (lists at their key's indentation, keys sorted as
//! serde_json's map keeps them). Strings another reader could take for a number, a boolean, a
//! null, a date or YAML syntax are quoted (YAML 1.1 spellings such as `yes` and `on` too), and
//! control characters escaped. The text is printed as the model holds it: only human output
//! escapes what a terminal would interpret (`render::escape`).
//!
//! Block scalars are off: multi-line strings are double-quoted with `\n`, long lines stay on one
//! line (a diff's hunk line prints as one line, as `-o json` has it). With them on, the crate
//! writes a string whose first line starts with a tab as a literal block without an indentation
//! indicator, which libyaml-based readers (PyYAML, Go's yaml.v3 and sigs.k8s.io/yaml, so
//! kubectl's own tooling) refuse: "found a tab character where an indentation space is expected".

use serde_json::Value;

/// `v` as a YAML document, or why the serializer refused it.
pub fn to_yaml(v: &Value) -> Result<String, String> {
    let mut options = serde_saphyr::SerializerOptions::default();
    options.prefer_block_scalars = false;
    serde_saphyr::to_string_with_options(v, options).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Reads YAML back as the plugin's reader would see it (the same crate's parser, default
    /// options).
    fn read(yaml: &str) -> Value {
        serde_saphyr::from_str(yaml).unwrap_or_else(|e| panic!("{e}\n{yaml}"))
    }

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
  - +x
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
        assert_eq!(to_yaml(&v).unwrap(), expected);
        assert_eq!(to_yaml(&json!([[1, 2], {}])).unwrap(), "- - 1\n  - 2\n- {}\n");
    }

    /// Each awkward case by name: what it must look like, and that it reads back as it was.
    #[test]
    fn awkward_strings_are_quoted_and_read_back() {
        let cases: &[(&str, &str)] = &[
            // Would read as another type (YAML 1.2 or 1.1).
            ("yes", r#""yes""#),
            ("off", r#""off""#),
            ("y", r#""y""#),
            ("~", r#""~""#),
            ("null", r#""null""#),
            ("1", r#""1""#),
            ("1.5", r#""1.5""#),
            ("0x1f", r#""0x1f""#),
            ("0777", r#""0777""#),
            ("1_000", r#""1_000""#),
            (".inf", r#"".inf""#),
            ("12:30", r#""12:30""#),
            ("2024-01-01", r#""2024-01-01""#),
            // YAML syntax.
            ("- x", r#""- x""#),
            ("a #b", r#""a #b""#),
            ("a: b", r#""a: b""#),
            ("*x", r#""*x""#),
            ("<<", r#""<<""#),
            (" lead", r#"" lead""#),
            ("trail ", r#""trail ""#),
            // Control characters: escaped, never raw (a terminal escape, NUL, NEL, the line
            // and paragraph separators, a byte-order mark).
            ("a\u{1b}[31mb\u{7}\u{0}", r#""a\e[31mb\a\0""#),
            ("a\u{85}b\u{2028}c\u{2029}d\u{feff}", r#""a\Nb\Lc\Pd\uFEFF""#),
            ("a\r\nb", r#""a\r\nb""#),
            ("a\u{9b}b", r#""a\x9Bb""#),
            // Plain where nothing is ambiguous, unicode as is.
            ("héllo 日本 🎉", "héllo 日本 🎉"),
            ("a,b", "a,b"),
        ];
        for (s, want) in cases {
            let v = json!({ "k": s });
            let got = to_yaml(&v).unwrap();
            assert_eq!(got, format!("k: {want}\n"), "{s:?}");
            assert_eq!(read(&got), v, "{s:?}");
        }
        // Multi-line strings are double-quoted (a first line starting with a tab included: as a
        // literal block, libyaml would refuse it); long lines are not folded.
        let long = "word  ".repeat(30);
        let lines = json!({"a": "one\ntwo\n", "b": "\tone\n\ttwo", "c": long});
        let got = to_yaml(&lines).unwrap();
        assert_eq!(got, format!("a: \"one\\ntwo\\n\"\nb: \"\\tone\\n\\ttwo\"\nc: \"{long}\"\n"), "{got}");
        assert_eq!(read(&got), lines);
        // Keys that need quoting, and one too long for a simple key.
        let keys = json!({"": 1, "true": 2, "a: b": 3, "multi\nline": 4, "\u{1b}k": 5, "k".repeat(2000): 6, "-x": 7});
        let got = to_yaml(&keys).unwrap();
        assert_eq!(read(&got), keys, "{got}");
        // Numbers keep their type and value.
        let numbers = json!({"big": u64::MAX, "neg": i64::MIN, "float": 1.5, "whole_float": 2.0, "tiny": 1e-300});
        let got = to_yaml(&numbers).unwrap();
        assert_eq!(read(&got), numbers, "{got}");
    }
}
