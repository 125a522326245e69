//! Manifests of the scenarios' example application, the pricing service of the incident
//! (docs/behaviour.md §1, §11.1): release A runs `pricing:4.11` with config key `discount_rules_path`,
//! release B runs `pricing:4.12` and renames it to `rules.discount_path`.

/// The source ConfigMap the pricing workloads mount.
pub const SOURCE: &str = "pricing-config";
/// Release A's image and config key.
pub const IMAGE_A: &str = "registry.example/pricing:4.11";
pub const KEY_A: &str = "discount_rules_path";
/// Release B's image and (renamed) config key.
pub const IMAGE_B: &str = "registry.example/pricing:4.12";
pub const KEY_B: &str = "rules.discount_path";

/// A ConfigMap with `data`.
pub fn configmap(name: &str, data: &[(&str, &str)]) -> String {
    let mut yaml = format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n");
    for (key, value) in data {
        yaml.push_str(&format!("  {key:?}: {value:?}\n"));
    }
    yaml
}

/// The pricing config of a release: `{key: /etc/rules}`.
pub fn pricing_config(key: &str) -> String {
    configmap(SOURCE, &[(key, "/etc/rules")])
}

/// A Deployment, StatefulSet or DaemonSet manifest, built up: the one shape every e2e scenario
/// applies (selector and pod labels `app: <name>`, one container `app`), in block-style YAML so
/// that a test may still patch a line of it. [`Workload::yaml`] renders it.
#[derive(Clone, Debug)]
pub struct Workload {
    kind: &'static str,
    name: String,
    image: String,
    replicas: Option<u32>,
    service_name: bool,
    annotations: Vec<(String, String)>,
    spec: Vec<String>,
    pod: Vec<String>,
    env: Vec<String>,
    env_from: Vec<String>,
    mounts: Vec<String>,
    volumes: Vec<String>,
}

impl Workload {
    /// A workload of `kind` (kubectl's lowercase: deployment, statefulset, daemonset) `name`
    /// running `image`: one replica (a StatefulSet also names its governing Service `name`; a
    /// DaemonSet has no replica count), nothing mounted.
    pub fn new(kind: &str, name: &str, image: &str) -> Self {
        let (kind, replicas, service_name) = match kind {
            "deployment" => ("Deployment", Some(1), false),
            "statefulset" => ("StatefulSet", Some(1), true),
            "daemonset" => ("DaemonSet", None, false),
            other => panic!("no manifest for {other}"),
        };
        Workload {
            kind,
            name: name.to_owned(),
            image: image.to_owned(),
            replicas,
            service_name,
            annotations: Vec::new(),
            spec: Vec::new(),
            pod: Vec::new(),
            env: Vec::new(),
            env_from: Vec::new(),
            mounts: Vec::new(),
            volumes: Vec::new(),
        }
    }

    /// A Deployment `name` running `image` with one replica.
    pub fn deployment(name: &str, image: &str) -> Self {
        Self::new("deployment", name, image)
    }

    /// `spec.replicas`.
    pub fn replicas(mut self, n: u32) -> Self {
        self.replicas = Some(n);
        self
    }

    /// No `spec.replicas` (the API server's default, 1).
    pub fn default_replicas(mut self) -> Self {
        self.replicas = None;
        self
    }

    /// A metadata annotation.
    pub fn annotation(mut self, key: &str, value: &str) -> Self {
        self.annotations.push((key.to_owned(), value.to_owned()));
        self
    }

    /// One more field of the workload's spec, one line of YAML: `revisionHistoryLimit: 1`.
    pub fn spec(mut self, field: &str) -> Self {
        self.spec.push(field.to_owned());
        self
    }

    /// One more field of the pod template's spec, one line of YAML: `terminationGracePeriodSeconds: 1`.
    pub fn pod(mut self, field: &str) -> Self {
        self.pod.push(field.to_owned());
        self
    }

    /// `$variable` from key `key` of Secret `secret` (secretKeyRef).
    pub fn env_secret_key(mut self, variable: &str, secret: &str, key: &str) -> Self {
        self.env.push(format!("- name: {variable}\n          valueFrom:\n            secretKeyRef: {{name: {secret}, key: {key:?}}}"));
        self
    }

    /// Every key of ConfigMap `source` in the environment (configMapRef).
    pub fn env_from_configmap(mut self, source: &str) -> Self {
        self.env_from.push(format!("- configMapRef: {{name: {source}}}"));
        self
    }

    /// Every key of Secret `secret` in the environment, prefixed with `prefix` (secretRef).
    pub fn env_from_secret(mut self, secret: &str, prefix: &str) -> Self {
        self.env_from.push(match prefix {
            "" => format!("- secretRef: {{name: {secret}}}"),
            prefix => format!("- prefix: {prefix}\n          secretRef: {{name: {secret}}}"),
        });
        self
    }

    /// Volume `volume` from `source` (one line of YAML: `configMap: {name: x}`), mounted at `path`.
    pub fn volume(mut self, volume: &str, path: &str, source: &str) -> Self {
        self.mounts.push(format!("- {{name: {volume}, mountPath: {path}}}"));
        self.unmounted_volume(volume, source)
    }

    /// Volume `volume` from `source` in the pod, mounted nowhere.
    pub fn unmounted_volume(mut self, volume: &str, source: &str) -> Self {
        self.volumes.push(format!("- name: {volume}\n        {source}"));
        self
    }

    /// ConfigMap `source` as volume `volume` mounted at `path`.
    pub fn configmap_volume(self, volume: &str, source: &str, path: &str) -> Self {
        self.volume(volume, path, &format!("configMap: {{name: {source}}}"))
    }

    /// Secret `secret` as volume `volume` mounted at `path`.
    pub fn secret_volume(self, volume: &str, secret: &str, path: &str) -> Self {
        self.volume(volume, path, &format!("secret: {{secretName: {secret}}}"))
    }

    /// The last volume mounted read-only.
    pub fn read_only(mut self) -> Self {
        let mount = self.mounts.last_mut().expect("a volume to make read-only");
        mount.insert_str(mount.len() - 1, ", readOnly: true");
        self
    }

    /// The manifest.
    pub fn yaml(&self) -> String {
        let name = &self.name;
        let mut yaml = format!("apiVersion: apps/v1\nkind: {}\nmetadata:\n  name: {name}\n", self.kind);
        if !self.annotations.is_empty() {
            yaml.push_str("  annotations:\n");
            for (key, value) in &self.annotations {
                yaml.push_str(&format!("    {key}: {value:?}\n"));
            }
        }
        yaml.push_str("spec:\n");
        if let Some(n) = self.replicas {
            yaml.push_str(&format!("  replicas: {n}\n"));
        }
        if self.service_name {
            yaml.push_str(&format!("  serviceName: {name}\n"));
        }
        for field in &self.spec {
            yaml.push_str(&format!("  {field}\n"));
        }
        yaml.push_str(&format!(
            "  selector:\n    matchLabels: {{app: {name}}}\n  template:\n    metadata:\n      labels: {{app: {name}}}\n    spec:\n"
        ));
        for field in &self.pod {
            yaml.push_str(&format!("      {field}\n"));
        }
        yaml.push_str(&format!("      containers:\n      - name: app\n        image: {}\n", self.image));
        for (list, items) in [("env", &self.env), ("envFrom", &self.env_from), ("volumeMounts", &self.mounts)] {
            if !items.is_empty() {
                yaml.push_str(&format!("        {list}:\n"));
                for item in items {
                    yaml.push_str(&format!("        {item}\n"));
                }
            }
        }
        if !self.volumes.is_empty() {
            yaml.push_str("      volumes:\n");
            for volume in &self.volumes {
                yaml.push_str(&format!("      {volume}\n"));
            }
        }
        yaml
    }
}

/// A Deployment, StatefulSet or DaemonSet `name` (kind in kubectl's lowercase) running `image`,
/// mounting `source` as a volume and reading one key of it into the environment (two references
/// to one source: they must end up on the same snapshot).
pub fn workload(kind: &str, name: &str, image: &str, source: &str) -> String {
    Workload::new(kind, name, image).env_from_configmap(source).configmap_volume("config", source, "/etc/pricing").yaml()
}

/// The `app` Deployment of the pinning, harness and plugin scenarios: `image`, ConfigMap
/// `app-config` mounted at /etc/app.
pub fn app(image: &str) -> Workload {
    Workload::deployment("app", image).configmap_volume("config", "app-config", "/etc/app")
}

/// The pricing Deployment running `image`.
pub fn pricing(image: &str) -> String {
    workload("deployment", "pricing", image, SOURCE)
}

/// A whole release in one `kubectl apply -f`: the ConfigMap first, then the Deployment (the
/// order Helm and kustomize use).
pub fn release(image: &str, key: &str) -> String {
    format!("{}---\n{}", pricing_config(key), pricing(image))
}
