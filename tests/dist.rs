//! dist/release end to end (issue 16), with the binaries this test run built (debug, so it runs
//! in CI within a minute): plugin archive, krew manifest with its checksum, packaged chart, OCI
//! image layout with its config checked, CHANGELOG, SHA256SUMS; and the version check refusing a
//! chart out of step with Cargo.toml.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn tempdir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("confighistory-dist-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn sha256(path: &Path) -> String {
    let out = Command::new("sha256sum").arg(path).output().unwrap();
    String::from_utf8_lossy(&out.stdout).split_whitespace().next().unwrap().to_owned()
}

#[test]
fn release_builds_every_artifact_and_checks_the_image() {
    let helm_found = std::env::var_os("HELM").is_some()
        || Command::new(repo().join("tests/e2e/tools")).output().is_ok_and(|o| o.status.success())
        || Command::new("helm").arg("version").output().is_ok_and(|o| o.status.success());
    if !helm_found && std::env::var("CI").as_deref() != Ok("true") {
        eprintln!("skipped: no helm (tests/e2e/tools installs it)");
        return;
    }
    let bins = Path::new(env!("CARGO_BIN_EXE_kubectl-confighistory")).parent().unwrap();
    let out = tempdir("release");
    let run = Command::new(repo().join("dist/release")).arg("--binaries").arg(bins).arg("--out").arg(&out).output().unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "dist/release failed:\n{stderr}");
    assert_eq!(String::from_utf8_lossy(&run.stdout).trim(), out.to_str().unwrap());
    assert!(stderr.contains("release: image: user 65532:65532, entrypoint ['/usr/local/bin/confighistory'], 6 OCI labels"), "{stderr}");

    let version = env!("CARGO_PKG_VERSION");
    let archive = out.join(format!("kubectl-confighistory_{version}_linux_amd64.tar.gz"));
    let list = Command::new("tar").arg("-tzf").arg(&archive).output().unwrap();
    let files = String::from_utf8_lossy(&list.stdout);
    for f in ["./kubectl-confighistory", "./kubectl_complete-confighistory", "./README.md"] {
        assert!(files.lines().any(|l| l == f), "{f} not in the archive:\n{files}");
    }
    let krew = std::fs::read_to_string(out.join("confighistory.yaml")).unwrap();
    assert!(krew.contains(&format!("sha256: {}", sha256(&archive))), "{krew}");
    assert!(krew.contains(&format!("version: v{version}")) && krew.contains("bin: kubectl-confighistory"), "{krew}");
    let chart = out.join(format!("confighistory-{version}.tgz"));
    let chart_yaml = Command::new("tar").arg("-xzOf").arg(&chart).arg("confighistory/Chart.yaml").output().unwrap();
    let chart_yaml = String::from_utf8_lossy(&chart_yaml.stdout);
    assert!(
        chart_yaml.contains(&format!("appVersion: {version}")) || chart_yaml.contains(&format!("appVersion: \"{version}\"")),
        "{chart_yaml}"
    );
    assert!(out.join("image/index.json").is_file() && out.join("image/oci-layout").is_file());
    let sums = std::fs::read_to_string(out.join("SHA256SUMS")).unwrap();
    assert!(sums.contains(&sha256(&chart)) && sums.contains(&sha256(&archive)), "{sums}");
    assert!(std::fs::read_to_string(out.join("CHANGELOG.md")).unwrap().contains(&format!("## [{version}]")));
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn a_chart_out_of_step_with_cargo_toml_is_refused() {
    let tree = tempdir("versions");
    std::fs::create_dir_all(tree.join("dist")).unwrap();
    std::fs::create_dir_all(tree.join("charts/confighistory")).unwrap();
    std::fs::copy(repo().join("dist/check-versions"), tree.join("dist/check-versions")).unwrap();
    std::fs::copy(repo().join("Cargo.toml"), tree.join("Cargo.toml")).unwrap();
    let chart = std::fs::read_to_string(repo().join("charts/confighistory/Chart.yaml")).unwrap();
    let check = || Command::new(tree.join("dist/check-versions")).output().unwrap();
    std::fs::write(tree.join("charts/confighistory/Chart.yaml"), &chart).unwrap();
    assert!(check().status.success(), "{}", String::from_utf8_lossy(&check().stderr));
    let bumped = chart.replace(&format!("appVersion: \"{}\"", env!("CARGO_PKG_VERSION")), "appVersion: \"9.9.9\"");
    assert_ne!(bumped, chart);
    std::fs::write(tree.join("charts/confighistory/Chart.yaml"), bumped).unwrap();
    let out = check();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("appVersion (9.9.9) must agree"));
    let _ = std::fs::remove_dir_all(&tree);
}
