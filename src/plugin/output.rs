//! `-o` formats beyond json and yaml, as kubectl spells them: `-o name` and
//! `-o jsonpath=TEMPLATE` (kubectl's template subset: `{.a.b}`, `{.items[*].name}`, `{.a[0]}`,
//! `{.a['b.c']}`, `{"\n"}` and plain text; several results of one expression joined by spaces).

use std::fmt;

use serde_json::Value;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    Json,
    Yaml,
    /// `kind/name` of what the command is about, one per line.
    Name,
    JsonPath(String),
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    #[error("unknown output format {0:?}: use json, yaml, name or jsonpath=TEMPLATE")]
    Format(String),
    #[error("jsonpath template {template:?}: {why}")]
    Template { template: String, why: String },
    #[error("write YAML: {0}")]
    Yaml(String),
}

/// Parses `-o`'s argument (clap value parser).
pub fn parse(s: &str) -> Result<Output, Error> {
    match s {
        "json" => Ok(Output::Json),
        "yaml" => Ok(Output::Yaml),
        "name" => Ok(Output::Name),
        _ => match s.split_once('=') {
            Some(("jsonpath", t)) => {
                parse_template(t)?;
                Ok(Output::JsonPath(t.to_owned()))
            }
            _ => Err(Error::Format(s.to_owned())),
        },
    }
}

impl fmt::Display for Output {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Output::Json => f.write_str("json"),
            Output::Yaml => f.write_str("yaml"),
            Output::Name => f.write_str("name"),
            Output::JsonPath(t) => write!(f, "jsonpath={t}"),
        }
    }
}

#[derive(Debug, PartialEq)]
enum Part {
    Text(String),
    Path(Vec<Step>),
}

#[derive(Debug, PartialEq)]
enum Step {
    Field(String),
    Index(usize),
    All,
}

fn parse_template(t: &str) -> Result<Vec<Part>, Error> {
    let err = |why: &str| Error::Template { template: t.to_owned(), why: why.to_owned() };
    let mut parts = Vec::new();
    let mut rest = t;
    while !rest.is_empty() {
        let Some(open) = rest.find('{') else {
            parts.push(Part::Text(rest.to_owned()));
            break;
        };
        if open > 0 {
            parts.push(Part::Text(rest[..open].to_owned()));
        }
        let close = rest[open..].find('}').ok_or_else(|| err("unclosed {"))? + open;
        let expr = rest[open + 1..close].trim();
        rest = &rest[close + 1..];
        if let Some(lit) = expr.strip_prefix('"').and_then(|e| e.strip_suffix('"')) {
            parts.push(Part::Text(lit.replace("\\n", "\n").replace("\\t", "\t")));
            continue;
        }
        if expr.starts_with("range") || expr == "end" {
            return Err(err("{range} is not supported; use [*], e.g. {.items[*].name}"));
        }
        parts.push(Part::Path(parse_path(expr).map_err(|w| err(&w))?));
    }
    Ok(parts)
}

fn parse_path(expr: &str) -> Result<Vec<Step>, String> {
    let expr = expr.strip_prefix('$').unwrap_or(expr);
    let mut steps = Vec::new();
    let mut rest = expr;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            if end > 0 {
                steps.push(Step::Field(r[..end].to_owned()));
            }
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let end = r.find(']').ok_or("unclosed [")?;
            let inner = r[..end].trim();
            steps.push(match inner {
                "*" => Step::All,
                _ if inner.starts_with('\'') && inner.ends_with('\'') && inner.len() >= 2 => {
                    Step::Field(inner[1..inner.len() - 1].to_owned())
                }
                _ => Step::Index(inner.parse().map_err(|_| format!("[{inner}]: an index, '*' or 'field' expected"))?),
            });
            rest = &r[end + 1..];
        } else {
            return Err(format!("{expr:?}: a path starts with '.'"));
        }
    }
    Ok(steps)
}

/// Renders `value` through a kubectl-style jsonpath template.
pub fn jsonpath(template: &str, value: &Value) -> Result<String, Error> {
    let mut out = String::new();
    for part in parse_template(template)? {
        match part {
            Part::Text(t) => out.push_str(&t),
            Part::Path(steps) => {
                let mut found = vec![value];
                for step in &steps {
                    found = found
                        .into_iter()
                        .flat_map(|v| -> Vec<&Value> {
                            match (step, v) {
                                (Step::Field(f), Value::Object(m)) => m.get(f).into_iter().collect(),
                                (Step::Index(i), Value::Array(a)) => a.get(*i).into_iter().collect(),
                                (Step::All, Value::Array(a)) => a.iter().collect(),
                                (Step::All, Value::Object(m)) => m.values().collect(),
                                _ => Vec::new(),
                            }
                        })
                        .collect();
                }
                let texts: Vec<String> = found
                    .into_iter()
                    .map(|v| match v {
                        Value::String(s) => s.clone(),
                        Value::Null => String::new(),
                        other => other.to_string(),
                    })
                    .collect();
                out.push_str(&texts.join(" "));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn formats_parse_like_kubectl() {
        assert_eq!(parse("json"), Ok(Output::Json));
        assert_eq!(parse("name"), Ok(Output::Name));
        assert_eq!(parse("jsonpath={.a}"), Ok(Output::JsonPath("{.a}".into())));
        assert!(matches!(parse("wide"), Err(Error::Format(_))));
        assert!(matches!(parse("jsonpath={.a"), Err(Error::Template { .. })));
        assert!(parse("jsonpath={range .items[*]}{.name}{end}").unwrap_err().to_string().contains("[*]"));
    }

    #[test]
    fn templates_select_like_kubectl() {
        let v = json!({"source": "pricing-config", "head": "abc", "snapshots": [{"name": "a", "n": 1}, {"name": "b", "n": 2}],
            "m": {"rules.discount_path": "/r"}});
        assert_eq!(jsonpath("{.source}", &v).unwrap(), "pricing-config");
        assert_eq!(jsonpath("{.snapshots[*].name}", &v).unwrap(), "a b");
        assert_eq!(jsonpath("{.snapshots[1].n}{\"\\n\"}", &v).unwrap(), "2\n");
        assert_eq!(jsonpath("head={.head} {.m['rules.discount_path']}", &v).unwrap(), "head=abc /r");
        assert_eq!(jsonpath("{.missing}", &v).unwrap(), "");
        assert_eq!(jsonpath("{$.snapshots[0]}", &v).unwrap(), r#"{"n":1,"name":"a"}"#);
    }
}
