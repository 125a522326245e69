//! The effective configuration a server publishes (docs/operations.md, "What the server does"):
//! the settings it really runs with, so that the plugin shows what the server will do instead of
//! defaults of its own.
//!
//! The server writes it as JSON into the annotation [`EFFECTIVE_CONFIG`] of a ConfigMap the chart
//! creates in the server's namespace (`<release>-effective-config`), readable by every
//! authenticated user; `cli::ServeArgs::effective_config` builds it from the parsed flags.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::model::meta::Meta;
use crate::model::names::EFFECTIVE_CONFIG;
use crate::model::policy::{Mode, Policy};

/// Namespace and name of the ConfigMap for a release named `confighistory` in namespace
/// `confighistory` (the chart's documented install).
pub const DEFAULT_LOCATION: &str = "confighistory/confighistory-effective-config";
/// Version of the document's shape; a reader refuses a newer one rather than misread it.
pub const FORMAT: u32 = 1;

/// What the server runs with. Field names are camelCase like Kubernetes objects.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EffectiveConfig {
    pub format: u32,
    /// The server's version (Cargo package version).
    pub server_version: String,
    /// Mode of a namespace without a (permitted) `confighistory.io/mode` label.
    pub default_mode: String,
    /// Modes a namespace may choose with its label; a label asking for another is ignored.
    pub allowed_modes: Vec<String>,
    /// Namespaces never acted in: the system ones, the server's own, and the admin's (sorted).
    pub excluded_namespaces: Vec<String>,
    /// The admin's label selector of ConfigMaps that are never versioned (empty: none).
    pub excluded_sources_selector: String,
    /// The admin's label selector of the namespaces the controller loops act in (empty: all).
    pub controller_namespace_selector: String,
    /// Default settle window between a config-only edit and its propagation.
    pub settle_seconds: u64,
    /// Whether this server runs the controller loops (propagation, adoption, repair, GC).
    pub controllers: bool,
    pub gc: Gc,
    pub propagation: Propagation,
    /// Whether Secrets are versioned too (`--secrets`, docs/behaviour.md §4a).
    pub secrets: bool,
    /// With `secrets`: the admin's label selector of the namespaces they are versioned in (empty: all).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub secrets_namespace_selector: String,
    /// Workload kinds whose pod templates are pinned.
    pub workload_kinds: Vec<String>,
    /// The entries of the kinds the admin registered (`--extra-workload-kinds`), so the plugin
    /// reads their objects and histories as the server does.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_workload_kinds: Vec<crate::model::kinds::Entry>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Gc {
    /// Newest snapshots kept per source regardless of use (`confighistory.io/keep` overrides).
    pub keep: u32,
    pub grace_seconds: u64,
    pub interval_seconds: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Propagation {
    /// Workloads moved per second, cluster-wide, and the burst above it.
    pub qps: f64,
    pub burst: u32,
    /// Workloads moved per second within one namespace, and the burst above it.
    pub namespace_qps: f64,
    pub namespace_burst: u32,
}

impl EffectiveConfig {
    /// The policy part of the document, as the rules in [`Policy`] take it (for the plugin, so
    /// it decides a namespace's mode and a source's versioning with the server's own rules).
    pub fn policy(&self) -> Result<Policy, String> {
        let mode = |m: &String| m.parse::<Mode>();
        Ok(Policy {
            excluded_namespaces: self.excluded_namespaces.iter().cloned().collect(),
            default_mode: mode(&self.default_mode)?,
            allowed_modes: self.allowed_modes.iter().map(mode).collect::<Result<_, _>>()?,
            excluded_sources: self.excluded_sources_selector.parse()?,
            settle: std::time::Duration::from_secs(self.settle_seconds),
            secrets: crate::model::policy::Secrets {
                enabled: self.secrets,
                namespaces: self.secrets_namespace_selector.parse()?,
                keys: Default::default(),
            },
            ..Policy::default()
        })
    }

    /// The namespaces of `policy` excluded, sorted (the document's form).
    pub fn excluded(policy: &Policy) -> Vec<String> {
        policy.excluded_namespaces.iter().cloned().collect::<BTreeSet<_>>().into_iter().collect()
    }
}

/// Reads the document from the ConfigMap `cm`; the error says what is wrong with it.
pub fn parse(cm: &impl Meta) -> Result<EffectiveConfig, String> {
    let text =
        cm.annotation(EFFECTIVE_CONFIG).ok_or_else(|| format!("it has no {EFFECTIVE_CONFIG} annotation (no server has published yet)"))?;
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("its {EFFECTIVE_CONFIG} annotation is not JSON: {e}"))?;
    match v.get("format").and_then(serde_json::Value::as_u64) {
        Some(f) if f > u64::from(FORMAT) => {
            return Err(format!("it is in format {f}, newer than this plugin reads ({FORMAT}): upgrade kubectl-confighistory"))
        }
        _ => {}
    }
    let doc: EffectiveConfig =
        serde_json::from_value(v).map_err(|e| format!("its {EFFECTIVE_CONFIG} annotation is not an effective configuration: {e}"))?;
    doc.policy().map_err(|e| format!("its {EFFECTIVE_CONFIG} annotation: {e}"))?;
    Ok(doc)
}

/// `NAMESPACE/NAME` of the ConfigMap, as the plugin's `--server-config` takes it.
pub fn parse_location(s: &str) -> Result<(String, String), String> {
    match s.split_once('/') {
        Some((ns, name)) if crate::model::names::is_dns_label(ns) && crate::model::names::is_dns_subdomain(name) => {
            Ok((ns.to_owned(), name.to_owned()))
        }
        _ => Err(format!("{s:?} is not NAMESPACE/NAME of a ConfigMap (e.g. {DEFAULT_LOCATION})")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    pub fn doc() -> EffectiveConfig {
        EffectiveConfig {
            format: FORMAT,
            server_version: "0.0.0".into(),
            default_mode: "enforce".into(),
            allowed_modes: vec!["enforce".into(), "audit".into()],
            excluded_namespaces: vec!["confighistory".into(), "kube-system".into(), "legacy".into()],
            excluded_sources_selector: "ca-bundle=true".into(),
            controller_namespace_selector: String::new(),
            settle_seconds: 30,
            controllers: true,
            gc: Gc { keep: 3, grace_seconds: 60, interval_seconds: 120 },
            propagation: Propagation { qps: 1.5, burst: 2, namespace_qps: 0.5, namespace_burst: 1 },
            secrets: false,
            secrets_namespace_selector: String::new(),
            workload_kinds: vec!["Deployment".into()],
            extra_workload_kinds: Vec::new(),
        }
    }

    fn cm(text: &str) -> serde_json::Value {
        json!({"metadata": {"annotations": {EFFECTIVE_CONFIG: text}}})
    }

    #[test]
    fn the_document_reads_back_and_gives_the_servers_policy() {
        let d = doc();
        let back = parse(&cm(&serde_json::to_string(&d).unwrap())).unwrap();
        assert_eq!(back, d);
        let p = back.policy().unwrap();
        assert_eq!(p.mode("team", Some("off")).0, Mode::Enforce, "a refused label gets the default");
        assert_eq!(p.mode("team", Some("audit")).0, Mode::Audit);
        assert_eq!(p.mode("legacy", None).0, Mode::Off);
        assert!(!p.versioned(&json!({"metadata": {"labels": {"ca-bundle": "true"}}})));
    }

    #[test]
    fn a_document_that_cannot_be_used_says_why() {
        let no = |v: serde_json::Value| parse(&v).unwrap_err();
        assert!(no(json!({"metadata": {}})).contains("no server has published"));
        assert!(no(cm("{")).contains("not JSON"));
        assert!(no(cm(r#"{"format": 2}"#)).contains("upgrade kubectl-confighistory"));
        assert!(no(cm(r#"{"format": 1}"#)).contains("not an effective configuration"));
        let mut bad = doc();
        bad.default_mode = "lax".into();
        assert!(no(cm(&serde_json::to_string(&bad).unwrap())).contains("unknown mode \"lax\""));
    }

    #[test]
    fn locations() {
        assert_eq!(parse_location(DEFAULT_LOCATION).unwrap(), ("confighistory".into(), "confighistory-effective-config".into()));
        assert!(parse_location("just-a-name").unwrap_err().contains("NAMESPACE/NAME"));
        assert!(parse_location("a/b/c").is_err());
    }
}
