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

/// A Deployment, StatefulSet or DaemonSet `name` (kind in kubectl's lowercase) running `image`,
/// mounting `source` as a volume and reading one key of it into the environment (two references
/// to one source: they must end up on the same snapshot).
pub fn workload(kind: &str, name: &str, image: &str, source: &str) -> String {
    let (kind_name, extra) = match kind {
        "deployment" => ("Deployment", "  replicas: 1\n".to_owned()),
        "statefulset" => ("StatefulSet", format!("  replicas: 1\n  serviceName: {name}\n")),
        "daemonset" => ("DaemonSet", String::new()),
        other => panic!("no manifest for {other}"),
    };
    format!(
        "apiVersion: apps/v1
kind: {kind_name}
metadata:
  name: {name}
spec:
{extra}  selector:
    matchLabels: {{app: {name}}}
  template:
    metadata:
      labels: {{app: {name}}}
    spec:
      containers:
      - name: app
        image: {image}
        envFrom:
        - configMapRef: {{name: {source}}}
        volumeMounts:
        - {{name: config, mountPath: /etc/pricing}}
      volumes:
      - name: config
        configMap: {{name: {source}}}
"
    )
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
