//! The admin's label selectors (excluded sources, the namespaces Secrets are versioned in, the
//! controller's namespaces), in the string form Kubernetes writes them: matched against an
//! object's labels through [`Meta`].

use std::collections::BTreeMap;

use super::meta::Meta;

/// A Kubernetes label selector in its string form (`a=b,c!=d,e,!f,g in (x,y),h notin (z)`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Selector(Vec<Requirement>);

#[derive(Clone, Debug, PartialEq)]
enum Requirement {
    Exists(String),
    NotExists(String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
}

impl std::str::FromStr for Selector {
    type Err = String;
    fn from_str(s: &str) -> Result<Selector, String> {
        let mut reqs = Vec::new();
        // Split on commas outside parentheses.
        let (mut depth, mut start, mut parts) = (0, 0, Vec::new());
        for (i, c) in s.char_indices() {
            match c {
                '(' => depth += 1,
                ')' => depth -= 1,
                ',' if depth == 0 => {
                    parts.push(&s[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        parts.push(&s[start..]);
        for part in parts.into_iter().map(str::trim).filter(|p| !p.is_empty()) {
            let set = |rest: &str| -> Result<Vec<String>, String> {
                let rest = rest.trim();
                let inner = rest
                    .strip_prefix('(')
                    .and_then(|r| r.strip_suffix(')'))
                    .ok_or_else(|| format!("expected (values) in selector term {part:?}"))?;
                Ok(inner.split(',').map(|v| v.trim().to_owned()).filter(|v| !v.is_empty()).collect())
            };
            let req = if let Some((k, v)) = part.split_once("!=") {
                Requirement::NotIn(k.trim().into(), vec![v.trim().into()])
            } else if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                Requirement::In(k.trim().into(), vec![v.trim().into()])
            } else if let Some((k, rest)) = part.split_once(" notin ") {
                Requirement::NotIn(k.trim().into(), set(rest)?)
            } else if let Some((k, rest)) = part.split_once(" in ") {
                Requirement::In(k.trim().into(), set(rest)?)
            } else if let Some(k) = part.strip_prefix('!') {
                Requirement::NotExists(k.trim().into())
            } else if part.chars().all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c)) {
                Requirement::Exists(part.into())
            } else {
                return Err(format!("cannot parse label selector term {part:?}"));
            };
            reqs.push(req);
        }
        Ok(Selector(reqs))
    }
}

/// The selector in the string form it parses from (`a=b,c!=d,e,!f,g in (x,y),h notin (z)`), so
/// the server can publish the selector it really uses.
impl std::fmt::Display for Selector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, r) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            match r {
                Requirement::Exists(k) => write!(f, "{k}")?,
                Requirement::NotExists(k) => write!(f, "!{k}")?,
                Requirement::In(k, vs) if vs.len() == 1 => write!(f, "{k}={}", vs[0])?,
                Requirement::NotIn(k, vs) if vs.len() == 1 => write!(f, "{k}!={}", vs[0])?,
                Requirement::In(k, vs) => write!(f, "{k} in ({})", vs.join(","))?,
                Requirement::NotIn(k, vs) => write!(f, "{k} notin ({})", vs.join(","))?,
            }
        }
        Ok(())
    }
}

impl Selector {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The label keys the selector reads.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|r| match r {
            Requirement::Exists(k) | Requirement::NotExists(k) | Requirement::In(k, _) | Requirement::NotIn(k, _) => k.as_str(),
        })
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.matches_with(|k| labels.get(k).map(String::as_str))
    }

    /// Whether the object's labels match (an empty selector matches nothing).
    pub fn selects(&self, obj: &impl Meta) -> bool {
        self.matches_with(|k| obj.label(k))
    }

    fn matches_with<'a>(&self, label: impl Fn(&str) -> Option<&'a str>) -> bool {
        !self.0.is_empty()
            && self.0.iter().all(|r| match r {
                Requirement::Exists(k) => label(k).is_some(),
                Requirement::NotExists(k) => label(k).is_none(),
                Requirement::In(k, vs) => label(k).is_some_and(|v| vs.iter().any(|x| x == v)),
                Requirement::NotIn(k, vs) => label(k).is_none_or(|v| !vs.iter().any(|x| x == v)),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn selectors_match_like_kubernetes() {
        let s: Selector = "app.kubernetes.io/component=ca-bundle,tier in (a, b),!skip".parse().unwrap();
        assert!(s.matches(&labels(&[("app.kubernetes.io/component", "ca-bundle"), ("tier", "b")])));
        assert!(!s.matches(&labels(&[("app.kubernetes.io/component", "ca-bundle"), ("tier", "c")])));
        assert!(!s.matches(&labels(&[("app.kubernetes.io/component", "ca-bundle"), ("tier", "a"), ("skip", "")])));
        let e: Selector = "".parse().unwrap();
        assert!(!e.matches(&labels(&[("a", "b")])), "an empty selector excludes nothing");
        assert!("a in b".parse::<Selector>().is_err());
        // Written as it parses, so a published selector means what the server's does.
        for text in ["a=b,c!=d,e,!f,g in (x,y),h notin (y,z)", ""] {
            assert_eq!(text.parse::<Selector>().unwrap().to_string(), text);
        }
        assert_eq!(" a == b , tier in ( x, y ) ".parse::<Selector>().unwrap().to_string(), "a=b,tier in (x,y)");
    }
}
