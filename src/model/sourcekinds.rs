//! Source kinds as data (docs/behaviour.md §4, §4a): what tells a ConfigMap source from a Secret
//! one, one entry per kind, as [`super::kinds`] does for workloads. Rules, ports, the plugin and
//! metrics read a kind's entry here ([`super::ids::SourceKind::def`]) instead of matching on the
//! kind; where the kinds differ in behaviour rather than in data, a field selects the behaviour
//! ([`Content`], [`Naming`], [`Never`]), so that a kind is said once. Adding a kind is an entry
//! here, its variant of `SourceKind`, and its tests.
//!
//! The bottom of model's ladder with the leaves (docs/architecture.md "model/ ladder"): it uses
//! no other file, so [`super::ids`] can name its kinds by these entries.

/// The root CA bundle Kubernetes publishes into every namespace as a ConfigMap: never a source.
pub const ROOT_CA: &str = "kube-root-ca.crt";

/// Where a pod template names a source of a kind (docs/behaviour.md §4, §4a): the field of each
/// place a reference may be, and the field of the name inside it. `imagePullSecrets` are not
/// config, so no kind has them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RefFields {
    /// A volume's field (`spec.volumes[i].configMap`) and the name's field in it.
    pub volume: (&'static str, &'static str),
    /// A projected volume source's field (`spec.volumes[i].projected.sources[j].configMap`),
    /// naming by `name`.
    pub projected: &'static str,
    /// An env var's `valueFrom` field (`configMapKeyRef`), naming by `name`.
    pub key_ref: &'static str,
    /// An `envFrom` item's field (`configMapRef`), naming by `name`.
    pub env_from: &'static str,
}

/// How a kind's content is read and compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Content {
    /// `data` (strings) and `binaryData`, as [`super::snapshot::Content`] holds them: hashed, and
    /// readable by the settings parser for warnings.
    Data,
    /// `type` and `data` as bytes, as [`super::secret::SecretContent`] holds them: values never
    /// shown, parsed or hashed without a key.
    TypedBytes,
}

/// How a kind's snapshots and heads are named.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Naming {
    /// By a hash of the content ([`super::snapshot::name`]), checked by
    /// [`super::snapshot::validate`].
    Hash,
    /// By a MAC under the namespace's key ([`super::secret::snapshot_name`]), checked by
    /// [`super::secret::validate`] under the cluster keys.
    KeyedMac,
}

/// Which objects of a kind are never sources, and which rule says so.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Never {
    /// Only the root CA bundle ([`ROOT_CA`]): [`super::source::is_tracked`].
    RootCaBundle,
    /// Tokens, Helm release records, certificates an issuer manages and the admin's selector of
    /// excluded Secrets: [`super::secret::never_source`], through [`super::secret::is_tracked`].
    SecretRules,
}

/// One source kind, as data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SourceKindDef {
    /// The kind's name (`ConfigMap`), as objects, messages and metric labels name it.
    pub kind: &'static str,
    /// API group (`""` for the core group).
    pub group: &'static str,
    /// API version its objects are read and written as.
    pub version: &'static str,
    /// The plural API resource its objects are served as.
    pub resource: &'static str,
    /// The prefix of its entries in workload annotations (`secret/db`), `None` for a bare name:
    /// ConfigMaps, the one kind entries named before there were others
    /// ([`super::ids::parse_source`]).
    pub entry_prefix: Option<&'static str>,
    /// The types (kubectl's names) the plugin takes before `/NAME` (`cm/cfg`), lower case.
    pub typed: &'static [&'static str],
    /// Whether the admin must turn the kind on (`--secrets`, docs/behaviour.md §4a); the others
    /// are always acted on ([`super::ids::SourceKinds`]).
    pub opt_in: bool,
    /// Where pod templates name it.
    pub refs: RefFields,
    pub content: Content,
    pub naming: Naming,
    pub never: Never,
    /// Whether its values are confidential (docs/behaviour.md §4a): never printed, logged or put
    /// in an error (an error that could quote one is described instead), a metadata list of them
    /// holds no `last-applied-configuration`, and the plugin's user may be forbidden to read
    /// them (shown as unreadable, not as an error).
    pub confidential: bool,
}

/// ConfigMaps (docs/behaviour.md §4).
pub const CONFIGMAP: SourceKindDef = SourceKindDef {
    kind: "ConfigMap",
    group: "",
    version: "v1",
    resource: "configmaps",
    entry_prefix: None,
    typed: &["configmap", "configmaps", "cm"],
    opt_in: false,
    refs: RefFields { volume: ("configMap", "name"), projected: "configMap", key_ref: "configMapKeyRef", env_from: "configMapRef" },
    content: Content::Data,
    naming: Naming::Hash,
    never: Never::RootCaBundle,
    confidential: false,
};

/// Secrets, where the admin turns them on (docs/behaviour.md §4a).
pub const SECRET: SourceKindDef = SourceKindDef {
    kind: "Secret",
    group: "",
    version: "v1",
    resource: "secrets",
    entry_prefix: Some("secret"),
    typed: &["secret", "secrets"],
    opt_in: true,
    refs: RefFields { volume: ("secret", "secretName"), projected: "secret", key_ref: "secretKeyRef", env_from: "secretRef" },
    content: Content::TypedBytes,
    naming: Naming::KeyedMac,
    never: Never::SecretRules,
    confidential: true,
};

impl SourceKindDef {
    /// `apiVersion` of its objects (`v1` in the core group, `group/version` otherwise).
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_owned()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_entries_say_what_each_kind_always_was() {
        assert_eq!(
            (CONFIGMAP.kind, CONFIGMAP.group, CONFIGMAP.resource, CONFIGMAP.api_version()),
            ("ConfigMap", "", "configmaps", "v1".into())
        );
        assert_eq!((SECRET.kind, SECRET.group, SECRET.resource, SECRET.api_version()), ("Secret", "", "secrets", "v1".into()));
        assert_eq!((CONFIGMAP.entry_prefix, SECRET.entry_prefix), (None, Some("secret")));
        assert_eq!((CONFIGMAP.opt_in, SECRET.opt_in), (false, true), "ConfigMaps always, Secrets where the admin turns them on");
        assert_eq!((CONFIGMAP.content, CONFIGMAP.naming, CONFIGMAP.never), (Content::Data, Naming::Hash, Never::RootCaBundle));
        assert_eq!((SECRET.content, SECRET.naming, SECRET.never), (Content::TypedBytes, Naming::KeyedMac, Never::SecretRules));
        assert_eq!((CONFIGMAP.confidential, SECRET.confidential), (false, true));
        assert_eq!(SECRET.refs.volume, ("secret", "secretName"), "a secret volume names by secretName");
    }
}
