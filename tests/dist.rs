//! dist/release end to end, with the binaries this test run built (debug, so it runs
//! in CI within a minute): plugin archive, krew manifest with its checksum and homepage, packaged
//! chart with the image digest and Artifact Hub annotations, OCI image layout with its config
//! checked, CycloneDX SBOMs, CHANGELOG, SHA256SUMS verified, a throwaway signature verified; as a
//! dry run of the release workflow's publish, which prints each push; the other runners' pieces
//! (`--from`: arm64 image, darwin, windows and linux/arm64 plugin archives) joined in; the tag and
//! the chart's default image checked against what is published; and the version check refusing a
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
    assert!(
        stderr.contains("release: image: linux/amd64: user 65532:65532, entrypoint ['/usr/local/bin/confighistory'], 6 OCI labels"),
        "{stderr}"
    );

    let version = env!("CARGO_PKG_VERSION");
    // What the release workflow would publish: the image the chart runs by default, its digest the
    // layout's; the chart beside it; the GitHub release of the tag.
    let index: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.join("image/index.json")).unwrap()).unwrap();
    let digest = index["manifests"][0]["digest"].as_str().unwrap();
    let image = format!("ghcr.io/confighistory/confighistory:{version}");
    for line in [
        format!("release: chart: runs ghcr.io/confighistory/confighistory@{digest} by default ({image}, the image pushed)"),
        format!("release: would push image oci:{}/image:{version} to docker://{image} ({digest}; linux/amd64)", out.display()),
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
    assert!(krew.contains("homepage: https://github.com/confighistory/confighistory"), "{krew}");

    // The chart runs the image by digest, and says so to Artifact Hub.
    let values = Command::new("tar").arg("-xzOf").arg(&chart).arg("confighistory/values.yaml").output().unwrap();
    assert!(String::from_utf8_lossy(&values.stdout).contains(&format!("digest: \"{digest}\"")));
    for want in [
        "  artifacthub.io/license: Apache-2.0".to_owned(),
        format!("      image: {image}@{digest}"),
        "        - linux/amd64".to_owned(),
        "    - kind: added".to_owned(),
    ] {
        assert!(chart_yaml.contains(&want), "no '{want}' in the packaged Chart.yaml:\n{chart_yaml}");
    }

    // The image: one static binary and a few files; no libc, loader or library to scan.
    let files = image_files(&out.join("image"), digest);
    for want in ["usr/local/bin/confighistory", "etc/passwd", "etc/group", "usr/share/doc/confighistory/LICENSE"] {
        assert!(files.iter().any(|f| f.trim_start_matches("./") == want), "{want} not in the image: {files:?}");
    }
    assert!(!files.iter().any(|f| f.contains("/lib/") || f.contains("/lib64/") || f.contains(".so")), "libraries in the image: {files:?}");
    let binary = image_file(&out.join("image"), digest, "usr/local/bin/confighistory");
    assert_eq!(&binary[..4], b"\x7fELF");
    assert!(!elf_has_interpreter(&binary), "the image's binary is not static");

    // SBOMs: the plugin's and the image's, CycloneDX 1.5, with the crates (and, in the image, the
    // C library linked in statically).
    for (file, kind) in [
        (format!("kubectl-confighistory_{version}_linux_amd64.cdx.json"), "application"),
        (format!("confighistory_{version}_image_linux_amd64.cdx.json"), "container"),
    ] {
        assert!(sums.contains(&file), "{file} not in SHA256SUMS:\n{sums}");
        let bom = sbom(&out.join(&file));
        assert_eq!(bom["metadata"]["component"]["type"], kind, "{file}");
        let purls = purls(&bom);
        assert!(purls.iter().any(|p| p.starts_with("pkg:cargo/kube-client@")), "{file}: {purls:?}");
        // Build-time only: proc macros are not in what ships.
        assert!(!purls.iter().any(|p| p.starts_with("pkg:cargo/serde_derive@")), "{file}: {purls:?}");
        if kind == "container" {
            // glibc is linked in (libc.a, from libc6-dev), not a file of the image.
            let libc = bom["components"].as_array().unwrap().iter().find(|c| c["name"] == "libc6-dev");
            let linkage = libc.map(|c| c["properties"][0]["value"].as_str().unwrap_or_default()).unwrap_or_default();
            assert!(linkage.starts_with("static ("), "{file}: no libc6-dev linked statically: {purls:?}");
            assert!(!purls.iter().any(|p| p.contains("/libc6@")), "glibc's shared library listed, though not in the image: {purls:?}");
        }
    }

    // SHA256SUMS verifies, and stops verifying when a file changes.
    let check = |dir: &Path| Command::new("sha256sum").args(["--quiet", "-c", "SHA256SUMS"]).current_dir(dir).output().unwrap();
    assert!(check(&out).status.success());
    let changelog = out.join("CHANGELOG.md");
    std::fs::write(&changelog, std::fs::read_to_string(&changelog).unwrap() + "\n").unwrap();
    assert!(!check(&out).status.success(), "sha256sum -c passed over a changed CHANGELOG.md");

    // The throwaway signatures verify over their files, and not over other bytes.
    let sigs = out.join("dry-run-signatures");
    for f in ["SHA256SUMS".to_owned(), format!("confighistory-{version}.tgz")] {
        let verify = |data: &Path| {
            Command::new("openssl")
                .args(["dgst", "-sha256", "-verify"])
                .arg(sigs.join("throwaway.pub"))
                .arg("-signature")
                .arg(sigs.join(format!("{f}.sig")))
                .arg(data)
                .output()
                .unwrap()
                .status
                .success()
        };
        assert!(verify(&out.join(&f)), "{f}.sig does not verify");
        assert!(!verify(&changelog), "{f}.sig verifies CHANGELOG.md");
    }
    let _ = std::fs::remove_dir_all(&out);
}

/// The platform manifest of the image index `digest` names (the first, linux/amd64 here): its
/// layer's gzipped tar.
fn image_layer(layout: &Path, digest: &str) -> PathBuf {
    let blob = |d: &str| layout.join("blobs").join(d.replace(':', "/"));
    let read = |d: &str| -> serde_json::Value { serde_json::from_str(&std::fs::read_to_string(blob(d)).unwrap()).unwrap() };
    let index = read(digest);
    let manifest = read(index["manifests"][0]["digest"].as_str().unwrap());
    blob(manifest["layers"][0]["digest"].as_str().unwrap())
}

fn image_files(layout: &Path, digest: &str) -> Vec<String> {
    let list = Command::new("tar").arg("-tzf").arg(image_layer(layout, digest)).output().unwrap();
    assert!(list.status.success());
    String::from_utf8_lossy(&list.stdout).lines().map(str::to_owned).collect()
}

fn image_file(layout: &Path, digest: &str, path: &str) -> Vec<u8> {
    let layer = image_layer(layout, digest);
    let names = [path.to_owned(), format!("./{path}")];
    names
        .iter()
        .map(|n| Command::new("tar").arg("-xzOf").arg(&layer).arg(n).output().unwrap())
        .find(|o| o.status.success() && !o.stdout.is_empty())
        .unwrap_or_else(|| panic!("{path} not in the layer"))
        .stdout
}

/// Whether a 64-bit little-endian ELF has a PT_INTERP program header (a dynamic loader to find).
fn elf_has_interpreter(elf: &[u8]) -> bool {
    let u16_at = |o: usize| u16::from_le_bytes([elf[o], elf[o + 1]]) as usize;
    let phoff = u64::from_le_bytes(elf[32..40].try_into().unwrap()) as usize;
    let (size, count) = (u16_at(54), u16_at(56));
    (0..count).any(|i| u32::from_le_bytes(elf[phoff + i * size..phoff + i * size + 4].try_into().unwrap()) == 3)
}

fn sbom(path: &Path) -> serde_json::Value {
    let bom: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_eq!(bom["bomFormat"], "CycloneDX", "{}", path.display());
    assert_eq!(bom["specVersion"], "1.5", "{}", path.display());
    assert!(bom["serialNumber"].as_str().unwrap().starts_with("urn:uuid:"));
    bom
}

fn purls(bom: &serde_json::Value) -> Vec<String> {
    bom["components"].as_array().unwrap().iter().map(|c| c["purl"].as_str().unwrap().to_owned()).collect()
}

/// What the release workflow's other runners hand the release job (dist/release --from): the
/// arm64 image layout with its SBOM, and the linux/arm64, darwin and windows plugin archives; made
/// here with the same scripts from stand-in files (their contents are not what is checked).
#[test]
fn release_dry_run_joins_every_platform_the_other_runners_built() {
    if !helm_found() {
        return;
    }
    let version = env!("CARGO_PKG_VERSION");
    let from = tempdir("from");
    let rootfs = from.join("rootfs/usr/local/bin");
    std::fs::create_dir_all(&rootfs).unwrap();
    std::fs::write(rootfs.join("confighistory"), "stand-in").unwrap();
    let mut layout = Command::new(repo().join("dist/oci-layout"));
    layout.arg("--rootfs").arg(from.join("rootfs")).arg("--out").arg(from.join("image-linux-arm64"));
    layout.args(["--tag", version, "--arch", "arm64", "--user", "65532:65532", "--entrypoint", "[\"/usr/local/bin/confighistory\"]"]);
    for k in ["title", "description", "licenses", "revision", "created"] {
        layout.arg("--label").arg(format!("org.opencontainers.image.{k}=stand-in"));
    }
    layout.arg("--label").arg(format!("org.opencontainers.image.version={version}"));
    let arm64 = layout.output().unwrap();
    assert!(arm64.status.success(), "{}", String::from_utf8_lossy(&arm64.stderr));
    let arm64_digest = String::from_utf8_lossy(&arm64.stdout).trim().to_owned();
    let run = Command::new(repo().join("dist/sbom"))
        .args(["--target", "aarch64-unknown-linux-gnu", "--image"])
        .arg(from.join("image-linux-arm64"))
        .arg("--image-ref")
        .arg(format!("ghcr.io/confighistory/confighistory@{arm64_digest}"))
        .arg("--out")
        .arg(from.join(format!("confighistory_{version}_image_linux_arm64.cdx.json")))
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    std::fs::write(from.join("stand-in"), "stand-in").unwrap();
    for (os, arch) in [("linux", "arm64"), ("darwin", "amd64"), ("darwin", "arm64"), ("windows", "amd64")] {
        let run = Command::new(repo().join("dist/plugin-archive"))
            .arg("--binary")
            .arg(from.join("stand-in"))
            .args(["--os", os, "--arch", arch, "--out"])
            .arg(&from)
            .output()
            .unwrap();
        assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    }

    let out = tempdir("platforms");
    let run = release(&out, &["--dry-run", "--from", from.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "dist/release failed:\n{stderr}");

    // One image index over both platforms; the chart names it and both platforms.
    let index: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.join("image/index.json")).unwrap()).unwrap();
    let digest = index["manifests"][0]["digest"].as_str().unwrap();
    let blob = |d: &str| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(out.join("image/blobs/sha256").join(d.trim_start_matches("sha256:"))).unwrap())
            .unwrap()
    };
    let platforms: Vec<String> = blob(digest)["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            format!(
                "{}/{} {}",
                m["platform"]["os"].as_str().unwrap(),
                m["platform"]["architecture"].as_str().unwrap(),
                m["digest"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(platforms.len(), 2, "{platforms:?}");
    assert!(platforms.contains(&format!("linux/arm64 {arm64_digest}")), "{platforms:?}");
    assert!(platforms.iter().any(|p| p.starts_with("linux/amd64 ")), "{platforms:?}");
    assert!(stderr.contains(&format!("({digest}; linux/amd64 linux/arm64)")), "{stderr}");
    let env = std::fs::read_to_string(out.join("release.env")).unwrap();
    assert!(
        env.contains(&format!("IMAGE_DIGEST={digest}\n")) && env.contains(&format!("IMAGE_DIGEST_linux_arm64={arm64_digest}\n")),
        "{env}"
    );
    let chart = out.join(format!("confighistory-{version}.tgz"));
    let chart_yaml = Command::new("tar").arg("-xzOf").arg(&chart).arg("confighistory/Chart.yaml").output().unwrap();
    let chart_yaml = String::from_utf8_lossy(&chart_yaml.stdout);
    assert!(chart_yaml.contains("        - linux/amd64\n        - linux/arm64\n"), "{chart_yaml}");
    assert!(chart_yaml.contains(&format!("@{digest}\n")), "{chart_yaml}");

    // The krew manifest: every platform, each with its archive's checksum and the right binary.
    let krew = std::fs::read_to_string(out.join("confighistory.yaml")).unwrap();
    let sums = std::fs::read_to_string(out.join("SHA256SUMS")).unwrap();
    for (os, arch, ext, bin) in [
        ("linux", "amd64", "tar.gz", "kubectl-confighistory"),
        ("linux", "arm64", "tar.gz", "kubectl-confighistory"),
        ("darwin", "amd64", "tar.gz", "kubectl-confighistory"),
        ("darwin", "arm64", "tar.gz", "kubectl-confighistory"),
        ("windows", "amd64", "zip", "kubectl-confighistory.exe"),
    ] {
        let archive = format!("kubectl-confighistory_{version}_{os}_{arch}.{ext}");
        let sha = sha256(&out.join(&archive));
        let entry = format!(
            "          os: {os}\n          arch: {arch}\n      uri: https://github.com/confighistory/confighistory/releases/download/v{version}/{archive}\n      sha256: {sha}\n      bin: {bin}\n"
        );
        assert!(krew.contains(&entry), "no\n{entry}in\n{krew}");
        assert!(sums.contains(&format!("{sha}  {archive}\n")), "{archive} not in SHA256SUMS:\n{sums}");
        // Each plugin SBOM lists the crates of its platform's build.
        let bom = sbom(&out.join(format!("kubectl-confighistory_{version}_{os}_{arch}.cdx.json")));
        let windows_sys = purls(&bom).iter().any(|p| p.starts_with("pkg:cargo/windows-sys@"));
        assert_eq!(windows_sys, os == "windows", "{os}/{arch}: windows-sys in the SBOM: {windows_sys}");
    }
    assert_eq!(krew.matches("- selector:").count(), 5, "{krew}");
    let image_sbom = sbom(&out.join(format!("confighistory_{version}_image_linux_arm64.cdx.json")));
    assert_eq!(image_sbom["metadata"]["component"]["hashes"][0]["content"], arm64_digest.trim_start_matches("sha256:"));
    let _ = std::fs::remove_dir_all(&out);
    let _ = std::fs::remove_dir_all(&from);
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
        (&["--platform"][..], "--platform needs --image-repo (the image its SBOM names)".to_owned()),
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

/// The helpers dist/release runs refuse, naming why, what they cannot ship: a chart that already
/// has annotations (they would be lost or doubled), a values.yaml without the image digest line,
/// the repository's own chart (only a copy is edited); an archive of another version, two archives
/// or two image layouts for one platform.
#[test]
fn the_release_helpers_refuse_what_they_cannot_ship() {
    let version = env!("CARGO_PKG_VERSION");
    let dir = tempdir("helpers");
    let run = |cmd: &mut Command| {
        let out = cmd.output().unwrap();
        (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let digest = format!("sha256:{}", "a".repeat(64));
    let chart_release = |chart: &Path| {
        let mut c = Command::new(repo().join("dist/chart-release"));
        c.arg("--chart").arg(chart).args(["--image", "ghcr.io/x/y", "--digest", &digest, "--platform", "linux/amd64"]);
        c
    };
    let copy = |name: &str| {
        let chart = dir.join(name).join("confighistory");
        std::fs::create_dir_all(&chart).unwrap();
        for f in ["Chart.yaml", "values.yaml"] {
            std::fs::copy(repo().join("charts/confighistory").join(f), chart.join(f)).unwrap();
        }
        chart
    };
    // A copy passes, and gets the digest and the annotations.
    let good = copy("good");
    let (ok, stderr) = run(&mut chart_release(&good));
    assert!(ok, "{stderr}");
    assert!(std::fs::read_to_string(good.join("values.yaml")).unwrap().contains(&format!("  digest: \"{digest}\"")));
    assert!(std::fs::read_to_string(good.join("Chart.yaml")).unwrap().contains("artifacthub.io/images"));
    // Twice: the copy has annotations now.
    let (ok, stderr) = run(&mut chart_release(&good));
    assert!(!ok && stderr.contains("already has annotations"), "{stderr}");
    let no_digest = copy("no-digest");
    let values = std::fs::read_to_string(no_digest.join("values.yaml")).unwrap();
    std::fs::write(no_digest.join("values.yaml"), values.replace("  digest: \"\"", "  # digest")).unwrap();
    let (ok, stderr) = run(&mut chart_release(&no_digest));
    assert!(!ok && stderr.contains("no single `digest: \"\"` under image: (found 0)"), "{stderr}");
    let (ok, stderr) = run(&mut chart_release(&repo().join("charts/confighistory")));
    assert!(!ok && stderr.contains("--chart is the repository's chart: give a copy"), "{stderr}");

    // krew-manifest: another version; two archives for one platform.
    std::fs::write(dir.join("stand-in"), "stand-in").unwrap();
    let archive = |os: &str, arch: &str, out: &Path| {
        let (ok, stderr) = run(Command::new(repo().join("dist/plugin-archive"))
            .arg("--binary")
            .arg(dir.join("stand-in"))
            .args(["--os", os, "--arch", arch, "--out"])
            .arg(out));
        assert!(ok, "{stderr}");
        out.join(format!("kubectl-confighistory_{version}_{os}_{arch}.{}", if os == "windows" { "zip" } else { "tar.gz" }))
    };
    let a = archive("linux", "amd64", &dir.join("a"));
    let b = archive("linux", "amd64", &dir.join("b"));
    let krew = |version: &str, files: &[&Path]| {
        run(Command::new(repo().join("dist/krew-manifest"))
            .args(["--version", version, "--url-base", "https://example/dl", "--homepage", "https://example"])
            .args(files))
    };
    let (ok, stderr) = krew(version, &[&a]);
    assert!(ok, "{stderr}");
    let (ok, stderr) = krew("9.9.9", &[&a]);
    assert!(!ok && stderr.contains(&format!("is version {version}, not 9.9.9")), "{stderr}");
    let (ok, stderr) = krew(version, &[&a, &b]);
    assert!(!ok && stderr.contains("two archives for linux/amd64"), "{stderr}");

    // image-index: two layouts of one platform.
    let rootfs = dir.join("rootfs");
    std::fs::create_dir_all(&rootfs).unwrap();
    std::fs::write(rootfs.join("f"), "f").unwrap();
    for l in ["l1", "l2"] {
        let (ok, stderr) = run(Command::new(repo().join("dist/oci-layout"))
            .arg("--rootfs")
            .arg(&rootfs)
            .arg("--out")
            .arg(dir.join(l))
            .args(["--tag", version]));
        assert!(ok, "{stderr}");
    }
    let (ok, stderr) = run(Command::new(repo().join("dist/image-index"))
        .arg("--out")
        .arg(dir.join("index"))
        .args(["--tag", version])
        .arg(dir.join("l1"))
        .arg(dir.join("l2")));
    assert!(!ok && stderr.contains("linux/amd64 twice"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}
