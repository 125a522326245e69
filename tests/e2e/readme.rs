//! README.md's "Worked example", run as written (its shell block, through bash, against the
//! cluster): if the README stops being true, this fails.

use std::path::Path;
use std::process::Command;

use confighistory::model::names::HELD;

use crate::support::confighistory::webhook;
use crate::support::{cluster, repo_root, TestNamespace};

/// The first ```sh block after the "## Worked example" heading.
fn worked_example() -> String {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).expect("read README.md");
    let section = &readme[readme.find("## Worked example").expect("README.md has a \"## Worked example\" section")..];
    let start = section.find("```sh\n").expect("a ```sh block in the worked example") + "```sh\n".len();
    let end = section[start..].find("\n```").expect("the block ends") + start;
    section[start..end].to_owned()
}

/// Runs `script` with bash (`-euo pipefail`), kubectl on PATH and the admin kubeconfig; returns
/// stdout.
fn bash(script: &str, kubectl: &Path, kubeconfig: &Path) -> String {
    let path = format!("{}:{}", kubectl.parent().unwrap_or(Path::new(".")).display(), std::env::var("PATH").unwrap_or_default());
    let output = Command::new("bash")
        .args(["-euo", "pipefail", "-c", script])
        .env("PATH", path)
        .env("KUBECONFIG", kubeconfig)
        .output()
        .expect("run bash");
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "the README's commands failed:\n{script}\n--- stdout\n{stdout}\n--- stderr\n{stderr}");
    stdout.into_owned()
}

#[test]
fn the_readme_worked_example_brings_back_image_and_config() {
    let Some(cluster) = cluster() else { return };
    webhook(cluster);
    let block = worked_example();

    // The namespace comes from the harness (it must carry this run's label), under a name of its
    // own; everything else runs as written.
    let create = "kubectl create namespace shop\n";
    assert!(block.starts_with(create), "the example starts by creating its namespace:\n{block}");
    let ns = TestNamespace::new(cluster, "shop");
    let script = block[create.len()..].replace("-n shop", &format!("-n {}", ns.name));
    assert!(!script.contains("shop "), "every use of the namespace is `-n shop`:\n{script}");

    // Before the undo, wait until the Deployment controller has recorded release 4.12 (a person
    // pasting the block is never that fast; a test on a loaded machine can be).
    let undo_at = script.find("# The incident's rollback").expect("the rollback part of the example");
    let (releases, rollback) = script.split_at(undo_at);
    bash(releases, &cluster.kubectl, &cluster.kubeconfig);
    ns.wait_observed("deployment", "pricing");
    assert_eq!(ns.history_of("pricing").len(), 2);
    let printed = bash(rollback, &cluster.kubectl, &cluster.kubeconfig);

    // The output the README shows in comments right after the commands that print it.
    let lines: Vec<&str> = rollback.lines().collect();
    let expected: Vec<&str> = lines
        .windows(2)
        .filter(|w| w[0].starts_with("kubectl ") && w[0].contains(" get ") && w[1].starts_with("# "))
        .map(|w| &w[1][2..])
        .collect();
    assert_eq!(expected, ["pricing:4.11", "discount_rules_path: /etc/rules"], "the README's shown output");
    // (`kubectl rollout undo` says "deployment.apps/pricing rolled back" first.)
    let printed: Vec<&str> = printed.lines().collect();
    assert_eq!(printed[printed.len().saturating_sub(expected.len())..], expected, "what the commands printed: {printed:#?}");

    // "The pin is now held".
    assert_eq!(ns.annotation_of("deployment", "pricing", HELD).as_deref(), Some("pricing-config"));

    // "`kubectl confighistory history pricing-config -n shop` lists the snapshots".
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    assert!(readme.contains("`kubectl confighistory history pricing-config -n shop`"));
    let out = Command::new(env!("CARGO_BIN_EXE_kubectl-confighistory"))
        .args(["history", "pricing-config", "-n", &ns.name])
        .env("KUBECONFIG", &cluster.kubeconfig)
        .output()
        .expect("run kubectl-confighistory");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    let snapshots = ns.snapshots();
    assert_eq!(snapshots.len(), 2);
    for snapshot in snapshots {
        let hash = snapshot.rsplit('-').next().unwrap();
        assert!(text.contains(hash), "the history lists {snapshot}:\n{text}");
    }
}
