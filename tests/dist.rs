//! dist/release end to end, with the binaries this test run built (debug, so it runs
//! in CI within a minute): plugin archive, krew manifest with its checksum, packaged chart, OCI
//! image layout with its config checked, CHANGELOG, SHA256SUMS; as a dry run of the release
//! workflow's publish, which prints each push; the tag and the chart's default image
//! checked against what is published; and the version check refusing a chart out of step with
//! Cargo.toml.

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

fn helm_found() -> bool {
    let found = std::env::var_os("HELM").is_some()
        || Command::new(repo().join("tests/e2e/tools")).output().is_ok_and(|o| o.status.success())
        || Command::new("helm").arg("version").output().is_ok_and(|o| o.status.success());
    if !found && std::env::var("CI").as_deref() != Ok("true") {
        eprintln!("skipped: no helm (tests/e2e/tools installs it)");
    }
    found || std::env::var("CI").as_deref() == Ok("true")
}

/// dist/release with this test run's binaries and `args`; the release repository as Chart.yaml's
/// home names it, whatever CI runs this (GITHUB_REPOSITORY would win).
fn release(out: &Path, args: &[&str]) -> std::process::Output {
    let bins = Path::new(env!("CARGO_BIN_EXE_kubectl-confighistory")).parent().unwrap();
    Command::new(repo().join("dist/release"))
        .arg("--binaries")
        .arg(bins)
        .arg("--out")
        .arg(out)
        .args(args)
        .env_remove("GITHUB_REPOSITORY")
        .output()
        .unwrap()
}

#[test]
fn release_dry_run_builds_every_artifact_and_prints_each_push() {
    if !helm_found() {
        return;
    }
    let out = tempdir("release");
    let run = release(&out, &["--dry-run"]);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "dist/release failed:\n{stderr}");
    assert_eq!(String::from_utf8_lossy(&run.stdout).trim(), out.to_str().unwrap());
    assert!(stderr.contains("release: image: user 65532:65532, entrypoint ['/usr/local/bin/confighistory'], 6 OCI labels"), "{stderr}");

    let version = env!("CARGO_PKG_VERSION");
    // What the release workflow would publish: the image the chart runs by default, its digest the
    // layout's; the chart beside it; the GitHub release of the tag.
    let index: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.join("image/index.json")).unwrap()).unwrap();
    let digest = index["manifests"][0]["digest"].as_str().unwrap();
    let image = format!("ghcr.io/confighistory/confighistory:{version}");
    for line in [
        format!("release: chart: its default image is {image}, the one pushed"),
        format!("release: would push image oci:{}/image:{version} to docker://{image} ({digest})", out.display()),
        format!("release: would push chart confighistory-{version}.tgz to oci://ghcr.io/confighistory/charts (as ghcr.io/confighistory/charts/confighistory:{version})"),
        format!("release: would create the GitHub release v{version} of confighistory/confighistory"),
    ] {
        assert!(stderr.contains(&line), "no '{line}' in:\n{stderr}");
    }
    let notes = std::fs::read_to_string(out.join("release-notes.md")).unwrap();
    assert!(notes.starts_with(|c: char| !c.is_whitespace()), "{notes}");
    assert!(notes.contains(&format!("Image: `{image}@{digest}`")), "{notes}");
    assert!(!notes.lines().any(|l| l.starts_with('[') && l.contains("]: ")), "link definitions in the notes:\n{notes}");

    let archive = out.join(format!("kubectl-confighistory_{version}_linux_amd64.tar.gz"));
    let list = Command::new("tar").arg("-tzf").arg(&archive).output().unwrap();
    let files = String::from_utf8_lossy(&list.stdout);
    for f in ["./kubectl-confighistory", "./kubectl_complete-confighistory", "./README.md"] {
        assert!(files.lines().any(|l| l == f), "{f} not in the archive:\n{files}");
    }
    let krew = std::fs::read_to_string(out.join("confighistory.yaml")).unwrap();
    assert!(krew.contains(&format!("sha256: {}", sha256(&archive))), "{krew}");
    assert!(krew.contains(&format!("version: v{version}")) && krew.contains("bin: kubectl-confighistory"), "{krew}");
    let url = format!(
        "https://github.com/confighistory/confighistory/releases/download/v{version}/kubectl-confighistory_{version}_linux_amd64.tar.gz"
    );
    assert!(krew.contains(&format!("uri: {url}")), "{krew}");
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
fn a_release_is_refused_for_another_tag_or_an_image_the_chart_does_not_run() {
    if !helm_found() {
        return;
    }
    let version = env!("CARGO_PKG_VERSION");
    let out = tempdir("refused");
    for (args, expected) in [
        (&["--dry-run", "--tag", "v9.9.9"][..], format!("tag v9.9.9 is not v{version}")),
        (&["--dry-run", "--tag", version][..], format!("tag {version} is not v{version}")),
        (&["--publish"][..], format!("--publish needs --tag (the git tag being released, v{version})")),
        (
            &["--dry-run", "--image-repo", "ghcr.io/someone/fork"][..],
            format!("the chart runs ghcr.io/confighistory/confighistory:{version} by default, but ghcr.io/someone/fork:{version} would be pushed"),
        ),
    ] {
        let run = release(&out, args);
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert!(!run.status.success(), "{args:?} passed:\n{stderr}");
        assert!(stderr.contains(&expected), "{args:?}: no '{expected}' in:\n{stderr}");
        assert!(!stderr.contains("would push"), "{args:?}:\n{stderr}");
    }
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
