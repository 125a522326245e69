//! The admin's policy (Helm values → flags): modes, exclusions, and which sources are versioned.

use std::collections::HashSet;
use std::time::Duration;

use crate::model::ids;
use crate::model::meta::Meta;
use crate::model::names;
use crate::model::selector::Selector;
use crate::model::source;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Pin references, then validate the final object.
    Rewrite,
    /// Never rewrite; reject workloads that reference mutable config.
    Enforce,
    /// Never rewrite or reject; warnings and metrics only.
    Audit,
    Off,
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Mode, String> {
        Ok(match s.trim() {
            "rewrite" => Mode::Rewrite,
            "enforce" => Mode::Enforce,
            "audit" => Mode::Audit,
            "off" => Mode::Off,
            other => return Err(format!("unknown mode {other:?}: expected rewrite, enforce, audit or off")),
        })
    }
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Rewrite => "rewrite",
            Mode::Enforce => "enforce",
            Mode::Audit => "audit",
            Mode::Off => "off",
        }
    }
}

#[derive(Clone, Debug)]
pub struct Policy {
    /// Username of confighistory itself (its ServiceAccount).
    pub identity: String,
    /// Namespaces never acted in: the system ones, its own, and the admin's list.
    pub excluded_namespaces: HashSet<String>,
    pub default_mode: Mode,
    pub allowed_modes: Vec<Mode>,
    /// Sources matching this are not versioned (ConfigMaps that controllers rewrite often).
    pub excluded_sources: Selector,
    pub settle: Duration,
    /// Identities besides its own that may create snapshots with metadata only confighistory
    /// writes (adoption records, owners, finalizers): backup and restore tools (docs/behaviour.md §6.4).
    pub snapshot_creators: Vec<String>,
    /// Secrets as sources (docs/behaviour.md §4a): off unless the admin turns them on.
    pub secrets: Secrets,
    /// Whether sources and snapshots record the username of the write that changed their content
    /// (`changed-by`, docs/behaviour.md §6.1.1): on unless the admin turns it off (usernames may be
    /// personal data).
    pub record_authors: bool,
}

/// The admin's choice about Secrets (docs/behaviour.md §4a): off by default; on, for every
/// namespace or for the namespaces the admin's selector matches. Only the admin's flags decide:
/// no annotation or label a namespace owner writes on a Secret or workload turns it on or off.
#[derive(Clone, Debug, Default)]
pub struct Secrets {
    pub enabled: bool,
    /// Namespaces Secrets are versioned in when enabled (empty: all).
    pub namespaces: Selector,
    /// The cluster keys Secret snapshots are named under, read or made at start
    /// (`store::keys::ensure`) and read again when the keys Secret changes; empty while Secrets
    /// are off, or before they are known.
    pub keys: crate::model::keys::KeySlot,
}

impl Policy {
    /// The source kinds this server handles anywhere: what the webhook's routing, the watches and
    /// the metrics' kind label take. With Secrets off, ConfigMaps alone.
    pub fn acted_on(&self) -> ids::SourceKinds {
        ids::SourceKinds::new(self.secrets.enabled)
    }

    /// The source kinds acted on in a namespace (`obj`: its object or cache record, `None` when
    /// not seen): Secrets only when enabled and, with a namespace selector, selected by it. The
    /// off path is one load and a branch.
    #[inline]
    pub fn source_kinds<M: Meta>(&self, obj: Option<&M>) -> ids::SourceKinds {
        if !self.secrets.enabled {
            return ids::SourceKinds::CONFIGMAPS;
        }
        ids::SourceKinds::new(self.secrets.namespaces.is_empty() || obj.is_some_and(|o| self.secrets.namespaces.selects(o)))
    }
}

impl Default for Policy {
    fn default() -> Policy {
        Policy::new("system:serviceaccount:confighistory:confighistory", "confighistory", &[])
    }
}

impl Policy {
    pub fn new(identity: &str, own_namespace: &str, excluded: &[String]) -> Policy {
        let mut excluded_namespaces: HashSet<String> = names::SYSTEM_NAMESPACES.iter().map(|s| s.to_string()).collect();
        excluded_namespaces.insert(own_namespace.to_owned());
        excluded_namespaces.extend(excluded.iter().cloned());
        Policy {
            identity: identity.to_owned(),
            excluded_namespaces,
            default_mode: Mode::Rewrite,
            allowed_modes: vec![Mode::Rewrite, Mode::Enforce, Mode::Audit],
            excluded_sources: Selector::default(),
            settle: Duration::from_secs(10),
            snapshot_creators: Vec::new(),
            secrets: Secrets::default(),
            record_authors: true,
        }
    }

    /// Namespaces confighistory does not act in at all, whatever their labels say.
    pub fn excludes(&self, namespace: &str) -> bool {
        namespace.is_empty() || self.excluded_namespaces.contains(namespace)
    }

    /// The mode for a namespace, from its label when the admin allows that mode.
    /// Returns the mode and, when the label was refused, why (to log).
    pub fn mode(&self, namespace: &str, label: Option<&str>) -> (Mode, Option<String>) {
        if self.excludes(namespace) {
            return (Mode::Off, None);
        }
        match label.map(str::parse::<Mode>) {
            None => (self.default_mode, None),
            Some(Ok(m)) if self.allowed_modes.contains(&m) => (m, None),
            Some(Ok(m)) => (
                self.default_mode,
                Some(format!(
                    "namespace {namespace} asks for mode {} which the admin does not allow; using {}",
                    m.as_str(),
                    self.default_mode.as_str()
                )),
            ),
            Some(Err(e)) => (self.default_mode, Some(format!("namespace {namespace}: {e}; using {}", self.default_mode.as_str()))),
        }
    }

    /// Whether a ConfigMap is versioned ([`source::is_versioned`] with the admin's selector).
    pub fn versioned(&self, obj: &impl Meta) -> bool {
        source::is_versioned(obj, &self.excluded_sources)
    }

    /// The mode of a namespace, from its object or cache record (`None`: not seen), as [`Self::mode`].
    pub fn namespace_mode<M: Meta>(&self, namespace: &str, obj: Option<&M>) -> (Mode, Option<String>) {
        self.mode(namespace, obj.and_then(|o| o.label(names::MODE_LABEL)))
    }

    /// The controller loops' scope (docs/behaviour.md §7-9): the mode of a namespace that is not being deleted
    /// and, when the controller is restricted to some namespaces (`selector`), is selected.
    pub fn in_scope<M: Meta>(&self, selector: &Selector, namespace: &str, obj: Option<&M>) -> Option<Mode> {
        if obj.is_some_and(|o| o.deleting()) || (!selector.is_empty() && !obj.is_some_and(|o| selector.selects(o))) {
            return None;
        }
        Some(self.namespace_mode(namespace, obj).0)
    }
}

/// A workload annotated `confighistory.io/ignore: "true"`: left alone in rewrite and audit mode,
/// and no user of its ConfigMaps there; enforce mode does not exempt it.
pub fn ignored(obj: &impl Meta) -> bool {
    obj.annotation(names::IGNORE) == Some("true")
}

/// Parses `10`, `10s`, `2m`, `1h` into a duration; an error says why not. The number is a
/// tenant's annotation: one whose seconds do not fit in 64 bits is refused, never wrapped into a
/// short window (or a panic). The syntax is docs/behaviour.md §7.2's, so not jiff's (in the tree
/// through k8s-openapi), which refuses bare seconds and takes more (`1 hour`, `PT1M`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let (num, mult) = match t.char_indices().last() {
        Some((i, 's')) => (&t[..i], 1),
        Some((i, 'm')) => (&t[..i], 60),
        Some((i, 'h')) => (&t[..i], 3600),
        _ => (t, 1),
    };
    let n: u64 = num.trim().parse().map_err(|_| format!("{s:?} is not a duration: expected seconds, or a number followed by s, m or h"))?;
    n.checked_mul(mult).map(Duration::from_secs).ok_or_else(|| format!("{s:?} is too long a duration: at most {} seconds", u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_namespace_cannot_label_itself_out_of_enforcement() {
        let p = Policy { default_mode: Mode::Enforce, allowed_modes: vec![Mode::Enforce], ..Policy::default() };
        let (mode, why) = p.mode("team-a", Some("off"));
        assert_eq!(mode, Mode::Enforce);
        assert!(why.unwrap().contains("does not allow"));
        assert_eq!(p.mode("team-a", Some("enforce")).0, Mode::Enforce);
        assert_eq!(p.mode("kube-system", None).0, Mode::Off);
        assert_eq!(p.mode("confighistory", None).0, Mode::Off);
        assert_eq!(p.mode("team-a", Some("bogus")).0, Mode::Enforce);
    }

    #[test]
    fn versioned_opt_outs() {
        let p = Policy { excluded_sources: "ca-bundle=true".parse().unwrap(), ..Policy::default() };
        let cm =
            |labels: serde_json::Value, annotations: serde_json::Value| json!({"metadata": {"labels": labels, "annotations": annotations}});
        assert!(p.versioned(&cm(json!({}), json!({}))));
        assert!(!p.versioned(&cm(json!({}), json!({names::VERSIONED: "false"}))));
        assert!(!p.versioned(&cm(json!({"ca-bundle": "true"}), json!({}))));
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("x").unwrap_err().contains("not a duration"));
        // At the limits: the largest of each unit, and one more (it overflowed: a panic in debug
        // builds, a wrapped short window in release).
        let max = u64::MAX;
        assert_eq!(parse_duration(&format!("{max}")), Ok(Duration::from_secs(max)));
        assert_eq!(parse_duration(&format!("{max}s")), Ok(Duration::from_secs(max)));
        assert_eq!(parse_duration(&format!("{}m", max / 60)), Ok(Duration::from_secs(max / 60 * 60)));
        assert_eq!(parse_duration(&format!("{}h", max / 3600)), Ok(Duration::from_secs(max / 3600 * 3600)));
        for over in [format!("{}m", max / 60 + 1), format!("{}h", max / 3600 + 1), format!("{max}h")] {
            assert!(parse_duration(&over).unwrap_err().contains("too long"), "{over}");
        }
        assert!(parse_duration(&format!("{max}0")).unwrap_err().contains("not a duration"), "over u64");
        assert!(parse_duration("-1m").is_err() && parse_duration("").is_err() && parse_duration("h").is_err());
    }
}
