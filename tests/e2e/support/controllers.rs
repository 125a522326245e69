//! Other projects' controllers a test process runs for real (`tests/e2e/controllers`: Flux's, Argo
//! CD's), shared by tests/e2e/gitops.rs and tests/e2e/argocd.rs: whether they can run here, their
//! CRDs, one set of processes per test process kept alive by a pipe from it, and a Git server on
//! loopback with a repository per test.

use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use super::{ci, repo_root, wait_for_value, Cluster, Kubectl};

/// `tests/e2e/controllers`, which builds, starts and stops them.
pub fn controllers() -> PathBuf {
    repo_root().join("tests/e2e/controllers")
}

/// Whether the controllers `set` (`flux`, `argo-cd`) can run here for the tests of `group`: pods
/// that run (the current lane, or an external cluster) and the build cached. Otherwise it says
/// why and the tests skip; under CI a missing build is a failure.
pub fn can_run(cluster: &Cluster, group: &str, set: &str) -> bool {
    let lane = std::env::var("CONFIGHISTORY_LANE").unwrap_or_default();
    if lane != "current" && !cluster.external {
        eprintln!("e2e: {group}: skipping: these scenarios need running pods (the current lane), not lane {lane:?}");
        return false;
    }
    let built = Command::new(controllers()).args(["built", set]).output().expect("run tests/e2e/controllers built");
    if !built.status.success() {
        let why = String::from_utf8_lossy(&built.stderr);
        assert!(!ci(), "e2e: {group}: {set} is not built (CI=true): {why}");
        eprintln!("e2e: {group}: skipping: {}", why.trim());
        return false;
    }
    true
}

/// The CRDs of `set`, created where missing (never replaced or deleted: other runs may use them),
/// and waited for.
pub fn install_crds(cluster: &Cluster, set: &str) {
    let out = Command::new(controllers()).args(["crds", set]).output().expect("run tests/e2e/controllers crds");
    assert!(out.status.success(), "tests/e2e/controllers crds {set}: {}", String::from_utf8_lossy(&out.stderr));
    let mut names = Vec::new();
    for file in String::from_utf8_lossy(&out.stdout).lines() {
        let created = cluster.kubectl(&["create", "-f", file]);
        assert!(created.success || created.stderr.contains("AlreadyExists"), "creating the CRDs in {file}:\n{}", created.describe());
        let name = cluster.kubectl(&["get", "-f", file, "-o", "jsonpath={.metadata.name}"]).expect_success().stdout;
        names.push(format!("crd/{}", name.trim()));
    }
    let mut args = vec!["wait", "--for=condition=established", "--timeout=60s"];
    args.extend(names.iter().map(String::as_str));
    cluster.kubectl(&args).expect_success();
}

/// `PATH` with the suite's kubectl first (the controllers' scripts call `kubectl`).
pub fn path_with_kubectl(cluster: &Cluster) -> std::ffi::OsString {
    let mut dirs = vec![cluster.kubectl.parent().map(Path::to_path_buf).unwrap_or_default()];
    dirs.extend(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()));
    std::env::join_paths(dirs).expect("PATH")
}

/// `git ARGS` in `dir`, as a fixed identity; its stdout, trimmed. A failure panics with stderr.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.email=e2e@confighistory.invalid", "-c", "user.name=e2e", "-c", "commit.gpgsign=false"])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run git");
    assert!(out.status.success(), "git {args:?} in {} failed:\n{}", dir.display(), String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The controllers of this test process, with git-serve: they keep their objects in `namespace`
/// (of no run, so no confighistory server acts on it) and apply into each test's namespace.
pub struct Running {
    pub cluster: &'static Cluster,
    pub namespace: String,
    /// Their state dir: repositories, logs.
    pub state: PathBuf,
    pub git_url: String,
    // Kept open for the life of the process: closing it stops the controllers.
    _lifeline: Mutex<(Child, ChildStdin)>,
}

/// How [`Running::start`] starts one set.
pub struct Start<'a> {
    /// The set (`tests/e2e/controllers start SET`) and the prefix of its namespace and state dir
    /// (`<name>-<run id>`).
    pub set: &'a str,
    pub name: &'a str,
    /// Objects (`kubectl delete` resources) deleted first when the process exits: those whose
    /// finalizers need the controllers.
    pub delete_first: &'a str,
    /// The variable whose value adds flags to every controller (`CONFIGHISTORY_E2E_FLUX_ARGS`).
    pub args_variable: &'a str,
    /// More environment for the controllers.
    pub env: &'a [(&'a str, &'a str)],
}

impl Running {
    /// Makes the namespace, then `before(namespace)` (settings the controllers read at start),
    /// then starts git-serve and the controllers through a shell that holds a pipe from this
    /// process: when the pipe closes, however this process exits, it deletes `delete_first`, stops
    /// the processes and deletes the namespace (as `tests/e2e/run-webhook` does for the server).
    pub fn start(cluster: &'static Cluster, how: Start, before: impl FnOnce(&str)) -> Running {
        install_crds(cluster, how.set);
        let run = super::run_id();
        let namespace = format!("e2e-{}-{run}", how.name);
        cluster.apply_cluster_scoped(&format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {namespace}\n"));
        before(&namespace);
        let state = cluster.state_dir.join(format!("run/{}-{run}", how.name));
        let _ = std::fs::remove_dir_all(&state);
        std::fs::create_dir_all(state.join("repos")).expect("create the controllers' state dir");
        let script = r#"
            set -u
            C="$1" S="$2" NS="$3" SET="$4" FIRST="$5"
            stop() {
              trap - TERM INT HUP
              timeout 60 kubectl delete "$FIRST" --all -n "$NS" --wait=true --timeout=50s >&2 || true
              "$C" stop "$SET" --state-dir "$S" || true
              "$C" stop git-serve --state-dir "$S" || true
              kubectl delete namespace "$NS" --wait=false --ignore-not-found >&2 || true
              exit 0
            }
            trap stop TERM INT HUP
            "$C" git-serve --root "$S/repos" --state-dir "$S" >"$S/git-url" || { echo failed >"$S/ready"; exit 1; }
            "$C" start "$SET" --kubeconfig "$KUBECONFIG" --state-dir "$S" --namespace "$NS" -- ${CONTROLLER_ARGS:-} >"$S/env" || { echo failed >"$S/ready"; stop; }
            echo ok >"$S/ready"
            cat >/dev/null
            stop
        "#;
        let log = std::fs::File::create(state.join("lifeline.log")).expect("create lifeline.log");
        let mut child = Command::new("bash")
            .args(["-c", script, &format!("{}-lifeline", how.name)])
            .arg(controllers())
            .arg(&state)
            .args([namespace.as_str(), how.set, how.delete_first])
            .env("KUBECONFIG", &cluster.kubeconfig)
            .env("CONTROLLER_ARGS", std::env::var(how.args_variable).unwrap_or_default())
            .envs(how.env.iter().copied())
            .env("PATH", path_with_kubectl(cluster))
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start the controllers' lifeline");
        let stdin = child.stdin.take().expect("piped stdin");
        let ready = wait_for_value(&format!("{} to start", how.set), Duration::from_secs(180), || {
            std::fs::read_to_string(state.join("ready")).ok().filter(|s| s.ends_with('\n'))
        });
        let lifeline = std::fs::read_to_string(state.join("lifeline.log")).unwrap_or_default();
        assert_eq!(ready.trim(), "ok", "{} did not start:\n{lifeline}", how.set);
        let git_url = std::fs::read_to_string(state.join("git-url")).expect("git-serve's URL").trim().to_owned();
        eprintln!("e2e: {}: {} in {namespace}, Git at {git_url}, logs in {}", how.name, how.set, state.join("logs").display());
        Running { cluster, namespace, state, git_url, _lifeline: Mutex::new((child, stdin)) }
    }

    /// kubectl in the controllers' namespace.
    pub fn kubectl(&self, args: &[&str]) -> Kubectl {
        let mut all = args.to_vec();
        all.extend(["-n", &self.namespace]);
        self.cluster.kubectl(&all)
    }

    /// A bare repository `name` that git-serve serves and a work tree on branch `main` for it.
    pub fn repository(&self, name: &str) -> WorkTree {
        let bare = self.state.join(format!("repos/{name}.git"));
        let work = self.state.join(format!("work/{name}"));
        std::fs::create_dir_all(&work).expect("create the work tree");
        git(&self.state, &["init", "-q", "--bare", bare.to_str().unwrap()]);
        git(&work, &["init", "-q", "-b", "main"]);
        WorkTree { work, url: format!("{}/{name}.git", self.git_url) }
    }
}

/// A test's work tree on branch `main` and the URL of the git-serve repository it pushes to
/// ([`Running::repository`]): what the Flux and Argo CD scenarios commit their manifests to.
pub struct WorkTree {
    pub work: PathBuf,
    pub url: String,
}

impl WorkTree {
    /// Writes `content` to `path` in the work tree, its directories made.
    pub fn write(&self, path: &str, content: &str) {
        let file = self.work.join(path);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(file, content).unwrap();
    }

    /// Commits everything and pushes; the commit's sha.
    pub fn commit(&self, message: &str) -> String {
        git(&self.work, &["add", "-A"]);
        git(&self.work, &["commit", "-q", "-m", message]);
        self.push()
    }

    /// `git revert` of the last commit, pushed; the new commit's sha.
    pub fn revert(&self) -> String {
        git(&self.work, &["revert", "--no-edit", "HEAD"]);
        self.push()
    }

    fn push(&self) -> String {
        git(&self.work, &["push", "-q", &self.url, "main"]);
        git(&self.work, &["rev-parse", "HEAD"])
    }
}
