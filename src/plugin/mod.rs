//! `kubectl confighistory`: a kubectl plugin to read a source's snapshot history, diff snapshots,
//! see a workload's pins and undo a rollout with its config (docs/plugin.md).
//!
//! - [`gather`]: kube I/O into an [`build::Inventory`] of plain JSON objects;
//! - [`build`]: pure construction of the [`model`] shown for each command;
//! - [`render`]: pure human formatting; [`yaml`]: `-o yaml`; [`linediff`]: line diffs.
//! - [`kubeconfig`]: kubectl's connection flags into a client; [`complete`]: kubectl's plugin
//!   completion (`__complete`).

pub mod build;
pub mod complete;
pub mod gather;
pub mod kubeconfig;
pub mod linediff;
pub mod model;
pub mod output;
pub mod render;
pub mod timeline;
pub mod ui;
pub mod yaml;

use std::io::IsTerminal as _;
use std::path::PathBuf;

use anyhow::{Context as _, Result};
use clap::{CommandFactory as _, Parser, Subcommand};
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;

use crate::model::ids::SourceKind;

pub use output::Output;
use render::Style;

#[derive(Parser, Debug)]
#[command(
    name = "kubectl-confighistory",
    bin_name = "kubectl confighistory",
    version,
    about = "Rollout history of ConfigMaps and Secrets versioned by confighistory",
    after_help = "Examples:\n  \
        kubectl confighistory history pricing-config\n  \
        kubectl confighistory history deployment/pricing     # the workload's revisions, oldest first\n  \
        kubectl confighistory history deployment/pricing --revision 2\n  \
        kubectl confighistory diff pricing-config 3          # revision 3 against the head\n  \
        kubectl confighistory diff pricing-config deployment/pricing@3 head\n  \
        kubectl confighistory diff secret/db                 # keys and sizes, never values\n  \
        kubectl confighistory diff deployment/pricing --from-revision 1 --to-revision 2\n  \
        kubectl confighistory status deployment/pricing\n  \
        kubectl confighistory undo deployment/pricing --to-revision 2 --dry-run"
)]
pub struct Cli {
    /// Namespace (default: the kubeconfig context's namespace).
    #[arg(short = 'n', long, global = true)]
    pub namespace: Option<String>,
    /// Kubeconfig context to use.
    #[arg(long, global = true)]
    pub context: Option<String>,
    /// Path to the kubeconfig file (default: $KUBECONFIG, then ~/.kube/config).
    #[arg(long, global = true)]
    pub kubeconfig: Option<PathBuf>,
    /// Output format: human text (default), json, yaml, name or jsonpath=TEMPLATE.
    #[arg(short = 'o', long, global = true, value_parser = output::parse)]
    pub output: Option<Output>,
    /// How long to wait for each call to the API server, as kubectl takes it (`30s`, `1m`, a
    /// number of seconds; `0`: no limit).
    #[arg(long, global = true, value_parser = parse_timeout)]
    pub request_timeout: Option<std::time::Duration>,
    /// NAMESPACE/NAME of the ConfigMap where confighistory publishes the configuration it runs
    /// with (the chart's `<release>-effective-config` in the release namespace).
    #[arg(long, global = true, env = "CONFIGHISTORY_SERVER_CONFIG", default_value = crate::model::published::DEFAULT_LOCATION,
          value_parser = |s: &str| crate::model::published::parse_location(s).map(|_| s.to_owned()))]
    pub server_config: String,
    /// `--as`, `--cluster`, `--server`, `--token`, `-v`, ...: kubectl's (docs/plugin.md "Connection flags").
    #[command(flatten)]
    pub conn: kubeconfig::KubeFlags,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// The versioned sources of the namespace: snapshot count, head, and how many workloads are
    /// pinned to them, behind the head (waiting for propagation) and held.
    #[command(visible_alias = "sources")]
    List {
        /// Every namespace.
        #[arg(short = 'A', long)]
        all_namespaces: bool,
    },
    /// Snapshots of a source, newest first: revision, hash, age, size, key changes, users, why
    /// kept. Of a workload (TYPE/NAME): its rollout revisions, oldest first, with images, config,
    /// who wrote that config, the change-cause, and which revision runs (docs/plugin.md,
    /// "Timeline").
    History {
        /// The source: a ConfigMap's NAME (or configmap/NAME), secret/NAME for a Secret, or one
        /// of its snapshots; or a workload: deployment/NAME, statefulset/NAME, daemonset/NAME, or
        /// a kind the server registers (rollout/NAME).
        source: String,
        /// With a workload: this revision in full (every source with its snapshot and keys,
        /// images, author, cause, created time).
        #[arg(long)]
        revision: Option<i64>,
    },
    /// Key- and line-level diff between two snapshots of a source (default: the one before the
    /// head against the head; with one argument: it against the head).
    ///
    /// A and B are `head`, a revision number from `history`, a hash (or unique prefix), a
    /// snapshot name, or WORKLOAD@REVISION (the snapshot a rollout revision ran with). A
    /// Secret's keys are shown with their sizes and whether they changed, never its values
    /// unless --show-values.
    ///
    /// With a workload (TYPE/NAME): its images and each source's content between two rollout
    /// revisions (default: the one before the running revision against it).
    Diff {
        /// NAME (a ConfigMap), configmap/NAME or secret/NAME; or a workload: deployment/NAME,
        /// statefulset/NAME, daemonset/NAME, rollout/NAME.
        source: String,
        a: Option<String>,
        b: Option<String>,
        /// Print a Secret's values in the diff (read with your own credentials). Without it no
        /// value of a Secret, nor its base64, nor a hash of it is printed.
        #[arg(long)]
        show_values: bool,
        /// With a workload: the revision to compare from (default: the one before --to-revision).
        #[arg(long)]
        from_revision: Option<i64>,
        /// With a workload: the revision to compare to (default: the running one).
        #[arg(long)]
        to_revision: Option<i64>,
    },
    /// A workload's pins, whether each is the head, pending propagation, the namespace's mode, and
    /// what an undo would restore.
    Status {
        /// deployment/NAME, statefulset/NAME, daemonset/NAME, cronjob/NAME, or NAME (a Deployment).
        workload: String,
        /// Wait until every reference is on its source's head (or held by an undo): exit 0 then,
        /// 1 when something still waits at --timeout (saying what and for what), 2 on an error.
        #[arg(long)]
        wait: bool,
        /// With --wait: how long to wait (a Go duration such as `5m`, `90s`; a whole number is
        /// seconds).
        #[arg(long, default_value = "5m", value_parser = parse_timeout, requires = "wait")]
        timeout: std::time::Duration,
    },
    /// `kubectl rollout undo`, printing the image and config snapshot it goes back to. Refuses
    /// when the target revision's snapshot is gone.
    Undo {
        workload: String,
        /// The revision to roll back to (default 0: the previous revision).
        #[arg(long, default_value_t = 0)]
        to_revision: i64,
        /// `server`: ask the API server (and confighistory's webhook) what would happen, change
        /// nothing. `client` is refused: what an undo restores is decided in the API server.
        #[arg(long, num_args = 0..=1, default_missing_value = "server", value_parser = ["none", "server", "client"])]
        dry_run: Option<String>,
        /// Print a Secret's values in what the undo brings back (read with your own credentials).
        #[arg(long)]
        show_values: bool,
    },
    /// A local, read-only web view (docs/plugin.md "Web view"): namespaces, workloads, their
    /// timelines and diffs, read with your credentials. Prints its URL and serves until Ctrl-C.
    Ui {
        /// Loopback address to listen on (127.0.0.1 or ::1).
        #[arg(long, default_value = "127.0.0.1")]
        address: std::net::IpAddr,
        /// Port to listen on (0: any free port; the URL printed says which).
        #[arg(long, default_value_t = 0)]
        port: u16,
    },
    /// Shell completion script: `source <(kubectl confighistory completion bash)`.
    Completion { shell: clap_complete::Shell },
    /// Completions for kubectl's plugin completion (`kubectl_complete-confighistory` calls it).
    #[command(name = "__complete", hide = true)]
    Complete {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

/// A kubectl `--request-timeout`, read as kubectl reads it: a whole number of seconds (`0`: no
/// limit), else a duration in Go's `time.ParseDuration` syntax, units `ns`, `us` (`µs`), `ms`, `s`,
/// `m`, `h`, combined and with fractions (`1m30s`, `1.5h`, `500ms`). Negative timeouts are refused.
/// Written here because the duration parser already in the tree, jiff's (through k8s-openapi),
/// reads another syntax: it refuses `.5s`, `1.5h30m` and `1500μs`, and takes `1 hour`, `PT1M`.
pub fn parse_timeout(s: &str) -> Result<std::time::Duration, String> {
    let invalid = |why: &str| format!("invalid timeout {s:?}: {why}; use e.g. 30s, 1m30s, 500ms or 0");
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        return s.parse::<u64>().map(std::time::Duration::from_secs).map_err(|_| invalid("too large"));
    }
    let mut rest = s.strip_prefix('+').unwrap_or(s);
    if rest.starts_with('-') {
        return Err(invalid("negative"));
    }
    if rest == "0" {
        return Ok(std::time::Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(invalid("empty"));
    }
    // Go's limit: an i64 of nanoseconds (about 292 years).
    const MAX_NANOS: u128 = i64::MAX as u128;
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let digits = |t: &str| t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
        let whole_len = digits(rest);
        let (whole, after) = rest.split_at(whole_len);
        let (fraction, after) = match after.strip_prefix('.') {
            Some(f) => f.split_at(digits(f)),
            None => ("", after),
        };
        if whole.is_empty() && fraction.is_empty() {
            return Err(invalid("a number is missing"));
        }
        let unit_len = after.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_len);
        let unit_nanos: u128 = match unit {
            "ns" => 1,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            "" => return Err(invalid("a unit is missing")),
            _ => return Err(invalid("unknown unit")),
        };
        let too_large = || invalid("too large");
        let whole: u128 = if whole.is_empty() { 0 } else { whole.parse().map_err(|_| too_large())? };
        let mut nanos = whole.checked_mul(unit_nanos).ok_or_else(too_large)?;
        // Digits past the nanosecond do not count (Go truncates them too).
        let mut scale = unit_nanos;
        for d in fraction.bytes() {
            if scale < 10 {
                break;
            }
            scale /= 10;
            nanos += u128::from(d - b'0') * scale;
        }
        total = total.checked_add(nanos).filter(|t| *t <= MAX_NANOS).ok_or_else(too_large)?;
        rest = next;
    }
    Ok(std::time::Duration::from_nanos(total as u64))
}

/// What a run prints and its exit code (kubectl's: `diff` exits 1 when there are differences).
pub struct Done {
    pub out: String,
    pub code: u8,
}

impl From<String> for Done {
    fn from(out: String) -> Done {
        Done { out, code: 0 }
    }
}

/// The style for human output on stdout: color on a terminal unless `NO_COLOR` is set.
pub fn stdout_style() -> Style {
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    Style { color: std::io::stdout().is_terminal() && !no_color && std::env::var("TERM").as_deref() != Ok("dumb") }
}

/// Machine output: the model with a `kind` field, as JSON or YAML (or through a jsonpath
/// template); `-o name` prints `names`, one per line.
pub fn machine<T: Serialize>(kind: &str, value: &T, output: Output) -> String {
    emit(kind, value, &[], output).unwrap_or_else(|e| e.to_string())
}

/// [`machine`], with the names `-o name` prints and a template's error reported.
pub fn emit<T: Serialize>(kind: &str, value: &T, names: &[String], output: Output) -> Result<String, output::Error> {
    let mut v = serde_json::to_value(value).unwrap_or_default();
    if let Some(m) = v.as_object_mut() {
        m.insert("kind".into(), kind.into());
    }
    Ok(match output {
        Output::Json => serde_json::to_string_pretty(&v).unwrap_or_default() + "\n",
        Output::Yaml => yaml::to_yaml(&v).map_err(output::Error::Yaml)?,
        Output::Name => names.iter().map(|n| format!("{n}\n")).collect(),
        Output::JsonPath(t) => output::jsonpath(&t, &v)?,
    })
}

/// `kind.group/name` of a workload, as `kubectl get -o name` prints it.
fn workload_name(w: &model::WorkloadRef) -> String {
    // A registered kind is named `Kind.group` already.
    let (kind, group) = match w.kind.split_once('.') {
        Some((kind, group)) => (kind, group),
        None => {
            let group = crate::model::kinds::Kind::BUILTIN.into_iter().find(|k| k.as_str() == w.kind).map_or("apps", |k| k.group());
            (w.kind.as_str(), group)
        }
    };
    format!("{}.{group}/{}", kind.to_lowercase(), w.name)
}

/// Names go into request paths: anything that is not a Kubernetes name (`../secrets/x`,
/// `a%2Fb`, a control character) is refused before any connection.
fn check_names(cli: &Cli) -> Result<()> {
    if let Some(ns) = &cli.namespace {
        check_namespace(ns)?;
    }
    match &cli.command {
        Command::History { source, .. } | Command::Diff { source, .. } if names_workload(source) => build::parse_workload(source).map(drop),
        Command::History { source, .. } | Command::Diff { source, .. } => build::parse_source(source).map(drop),
        Command::Status { workload, .. } | Command::Undo { workload, .. } => build::parse_workload(workload).map(drop),
        _ => Ok(()),
    }
}

/// Whether `history`'s or `diff`'s argument names a workload: TYPE/NAME whose TYPE is no source
/// kind (a bare NAME is a ConfigMap, as before; docs/plugin.md, "Timeline").
pub fn names_workload(arg: &str) -> bool {
    arg.split_once('/').is_some_and(|(kind, _)| {
        // A kind's name (`deploy`, `rollouts.argoproj.io`); anything else (`..`) is a bad source.
        let kind_shaped =
            kind.starts_with(|c: char| c.is_ascii_alphabetic()) && kind.chars().all(|c| c.is_ascii_alphanumeric() || c == '.');
        let lower = kind.to_ascii_lowercase();
        kind_shaped && !SourceKind::ALL.into_iter().any(|k| k.def().typed.contains(&lower.as_str()))
    })
}

/// Refuses the flags of one form of `history`/`diff` given to the other, before any connection.
fn check_forms(command: &Command) -> Result<()> {
    match command {
        Command::History { source, revision: Some(_) } if !names_workload(source) => {
            anyhow::bail!("--revision is for a workload's timeline (e.g. `history deployment/NAME --revision 2`); {source:?} is a source")
        }
        Command::Diff { source, from_revision, to_revision, .. }
            if !names_workload(source) && (from_revision.is_some() || to_revision.is_some()) =>
        {
            anyhow::bail!("--from-revision and --to-revision compare a workload's revisions (e.g. `diff deployment/NAME --from-revision 1`); for a source {source:?} give A and B: `diff {source} A B`")
        }
        Command::Diff { source, a, b, .. } if names_workload(source) && (a.is_some() || b.is_some()) => {
            anyhow::bail!("{source:?} is a workload: compare its revisions with --from-revision A --to-revision B")
        }
        _ => Ok(()),
    }
}

fn check_namespace(ns: &str) -> Result<()> {
    if !crate::model::names::is_dns_label(ns) {
        anyhow::bail!("{ns:?} is not a valid namespace name");
    }
    Ok(())
}

/// (client, namespace, API server URL).
async fn client(cli: &Cli) -> Result<(kube::Client, String, String)> {
    let target = kubeconfig::Target { kubeconfig: cli.kubeconfig.clone(), context: cli.context.clone(), flags: cli.conn.clone() };
    let mut config = kubeconfig::load(&target).await?;
    if let Some(t) = cli.request_timeout {
        let t = (!t.is_zero()).then_some(t);
        (config.connect_timeout, config.read_timeout, config.write_timeout) = (t, t, t);
    }
    let namespace = cli.namespace.clone().unwrap_or_else(|| config.default_namespace.clone());
    check_namespace(&namespace).context("the kubeconfig's namespace")?;
    let url = config.cluster_url.to_string();
    Ok((kubeconfig::client(config, cli.conn.verbosity)?, namespace, url))
}

/// Runs the command and returns what to print on stdout, with the exit code.
pub async fn run(cli: Cli) -> Result<Done> {
    // Commands that need no cluster, and refusals, before any connection.
    match &cli.command {
        Command::Completion { shell } => {
            let mut out = Vec::new();
            clap_complete::generate(*shell, &mut Cli::command(), "kubectl-confighistory", &mut out);
            return Ok(String::from_utf8_lossy(&out).into_owned().into());
        }
        Command::Complete { args } => return Ok(complete::complete(args).await.into()),
        Command::Undo { dry_run: Some(d), .. } if d == "client" => anyhow::bail!(
            "--dry-run=client is not supported: what an undo restores is decided by confighistory's webhook in the API server; use --dry-run=server"
        ),
        _ => {}
    }
    check_forms(&cli.command)?;
    check_names(&cli)?;
    let (client, namespace, url) = client(&cli).await?;
    // The first call tells whether the kubeconfig leads anywhere: say where it led.
    gather::check_installed(&client).await.with_context(|| format!("cluster at {url}"))?;
    let ctx = gather::Ctx { client, namespace, server_config: cli.server_config.clone() };
    let now = Timestamp::now();
    let style = stdout_style();
    match &cli.command {
        Command::List { all_namespaces } => {
            let s = gather::sources(&ctx, *all_namespaces).await?;
            let names: Vec<String> = s
                .sources
                .iter()
                .map(|r| {
                    let id = build::source_id(&r.name);
                    build::object_name(id.kind, &id.name)
                })
                .collect();
            Ok(match cli.output.clone() {
                Some(o) => emit("Sources", &s, &names, o)?,
                None => render::sources(&s, style),
            }
            .into())
        }
        Command::History { source, revision } if names_workload(source) => {
            let inv = gather::inventory(&ctx, &[]).await?;
            let wanted = inv.resolve(build::parse_workload(source)?)?;
            let t = timeline::timeline(&inv, &wanted)?;
            let names = [workload_name(&t.workload)];
            let Some(n) = revision else {
                return Ok(match cli.output.clone() {
                    Some(o) => emit("Timeline", &t, &names, o)?,
                    None => render::timeline(&t, now, style),
                }
                .into());
            };
            let Some(r) = t.revisions.iter().find(|r| r.revision == *n) else {
                let have: Vec<String> = t.revisions.iter().map(|r| r.revision.to_string()).collect();
                anyhow::bail!(
                    "{wanted} has no revision {n} (its revisions: {}); see `kubectl confighistory history {wanted}`",
                    if have.is_empty() { "none yet".to_owned() } else { have.join(", ") }
                );
            };
            let view = model::TimelineRevisionView { namespace: t.namespace.clone(), workload: t.workload.clone(), revision: r.clone() };
            Ok(match cli.output.clone() {
                Some(o) => emit("TimelineRevision", &view, &names, o)?,
                None => render::timeline_revision(&view, now, style),
            }
            .into())
        }
        Command::Diff { source, show_values, from_revision, to_revision, .. } if names_workload(source) => {
            let inv = gather::inventory(&ctx, &[]).await?;
            let wanted = inv.resolve(build::parse_workload(source)?)?;
            let d = timeline::revision_diff(&inv, &wanted, *from_revision, *to_revision, *show_values)?;
            let out = match cli.output.clone() {
                Some(o) => emit("RevisionDiff", &d, &[workload_name(&d.workload)], o)?,
                None => render::revision_diff(&d, now, style),
            };
            Ok(Done { out, code: u8::from(d.differs()) })
        }
        Command::History { source, .. } => {
            let id = build::parse_source(source)?;
            let inv = gather::inventory(&ctx, std::slice::from_ref(&id)).await?;
            let source = resolve_source(&inv, &id);
            let h = build::history(&inv, &source)?;
            let kind = build::source_id(&source).kind;
            let names: Vec<String> = h.snapshots.iter().map(|s| build::object_name(kind, &s.name)).collect();
            Ok(match cli.output.clone() {
                Some(o) => emit("History", &h, &names, o)?,
                None => render::history(&h, now, style),
            }
            .into())
        }
        Command::Diff { source, a, b, show_values, .. } => {
            let id = build::parse_source(source)?;
            let inv = gather::inventory(&ctx, std::slice::from_ref(&id)).await?;
            let source = resolve_source(&inv, &id);
            let d = build::diff(&inv, &source, a.as_deref(), b.as_deref(), *show_values)?;
            let kind = build::source_id(&source).kind;
            let names = [build::object_name(kind, &d.from.name), build::object_name(kind, &d.to.name)];
            let out = match cli.output.clone() {
                Some(o) => emit("Diff", &d, &names, o)?,
                None => render::diff(&d, now, style),
            };
            Ok(Done { out, code: u8::from(!d.keys.is_empty() || d.type_changed.is_some()) })
        }
        Command::Status { workload, wait, timeout } => {
            let parsed = build::parse_workload(workload)?;
            let fetch = || async {
                let inv = gather::inventory(&ctx, &[]).await?;
                let wanted = inv.resolve(parsed.clone())?;
                Ok((build::status(&inv, &wanted)?, wanted))
            };
            let (s, wanted, still) = if *wait {
                wait_for(fetch, *timeout, WAIT_INTERVAL).await?
            } else {
                let (s, wanted) = fetch().await?;
                (s, wanted, Vec::new())
            };
            let out = match cli.output.clone() {
                Some(o) => emit("Status", &s, &[workload_name(&wanted)], o)?,
                None => render::status(&s, Timestamp::now(), style),
            };
            if !still.is_empty() {
                // On stderr, so -o json stays one document.
                eprintln!("{}", waiting_message(&wanted.to_string(), *timeout, &still));
            }
            Ok(Done { out, code: u8::from(!still.is_empty()) })
        }
        Command::Undo { workload, to_revision, dry_run, show_values } => {
            let dry_run = dry_run.as_deref().is_some_and(|d| d != "none");
            let inv = gather::inventory(&ctx, &[]).await?;
            let wanted = inv.resolve(build::parse_workload(workload)?)?;
            let w = inv.workload(&wanted).ok_or_else(|| anyhow::anyhow!("{wanted} not found in namespace {}", inv.namespace))?;
            let (rev, template) = build::undo_target(&w, *to_revision)?;
            let before = build::revision_config(&inv, w.kind, w.current_revision(), w.template());
            let target = build::revision_config(&inv, w.kind, Some(rev), &template);
            build::check_secrets_readable(&inv, &target)?;
            build::check_target(&wanted, &target)?;
            let skipped = w.kind.template_hash(&template) == w.kind.template_hash(w.template());
            let live = timeline::Side { revision: before.revision, template: w.template(), live: true };
            let (after, held, preview) = if skipped {
                (before.clone(), w.held().into_iter().collect(), timeline::compare_templates(&inv, &w, live, live, *show_values))
            } else {
                let stored = gather::rollback(&ctx, &inv, &w, rev, dry_run).await?;
                let inv = gather::reread_snapshots(&ctx, &inv).await?;
                let after_w = build::Workload { object: stored, ..w.clone() };
                // What runs after the undo against what ran before it (docs/plugin.md, "Undo preview").
                let stored = timeline::Side { revision: None, template: after_w.template(), live: true };
                let preview = timeline::compare_templates(&inv, &w, live, stored, *show_values);
                (build::revision_config(&inv, w.kind, None, after_w.template()), after_w.held().into_iter().collect(), preview)
            };
            let (preview, preview_unavailable) = match preview {
                Ok(p) => (Some(p), None),
                Err(e) => (None, Some(e.to_string())),
            };
            let u = model::Undo {
                namespace: inv.namespace.clone(),
                workload: wanted,
                dry_run,
                skipped,
                before,
                target,
                after,
                held,
                preview,
                preview_unavailable,
            };
            Ok(match cli.output.clone() {
                Some(o) => emit("Undo", &u, &[workload_name(&u.workload)], o)?,
                None => render::undo(&u, style),
            }
            .into())
        }
        Command::Ui { address, port } => {
            let ui = ui::Ui { client: ctx.client, namespace: ctx.namespace, server_config: ctx.server_config };
            ui::serve(ui, *address, *port).await?;
            Ok(String::new().into())
        }
        Command::Completion { .. } | Command::Complete { .. } => unreachable!("answered before connecting"),
    }
}

/// How often `status --wait` looks again (bounded by what is left of its timeout).
pub const WAIT_INTERVAL: std::time::Duration = std::time::Duration::from_secs(2);

/// `status --wait`: fetches the status until nothing waits ([`build::waiting`]) or `timeout` has
/// passed, looking again every `interval` (never past the deadline). Returns the last status,
/// what it names, and what still waits (empty: settled). An error of a fetch ends the wait.
pub async fn wait_for<W, F, Fut>(
    mut fetch: F,
    timeout: std::time::Duration,
    interval: std::time::Duration,
) -> Result<(model::Status, W, Vec<String>)>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(model::Status, W)>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let (s, w) = fetch().await?;
        let still = build::waiting(&s);
        let now = tokio::time::Instant::now();
        if still.is_empty() || now >= deadline {
            return Ok((s, w, still));
        }
        tokio::time::sleep(interval.max(std::time::Duration::from_millis(50)).min(deadline - now)).await;
    }
}

/// What `status --wait` says when it gives up: what waits, and for what.
pub fn waiting_message(workload: &str, timeout: std::time::Duration, still: &[String]) -> String {
    let mut out = format!("timed out after {}s: {workload} still waits for:", timeout.as_secs_f64());
    for line in still {
        out.push_str("\n  ");
        out.push_str(&render::escape(line));
    }
    out
}

/// The source's entry (`cfg`, `secret/db`); a snapshot's name given where a source is expected
/// means its source.
fn resolve_source(inv: &build::Inventory, given: &crate::model::ids::SourceId) -> String {
    let entry = given.to_string();
    if inv.snaps_of(&entry).is_empty() {
        if let Some(s) = inv.snaps().into_iter().find(|s| s.kind == given.kind && s.name == given.name) {
            return s.source;
        }
    }
    entry
}

/// The exit code of every error, as of a bad command line (clap's): 1 is an answer, not an error
/// (`diff` found differences, as `kubectl diff` says; `status --wait` still waits at its timeout),
/// so a script tells "not yet" or "different" from "broken" whatever the command (docs/plugin.md).
pub const ERROR_CODE: u8 = 2;

/// Entry point of the `kubectl-confighistory` binary: prints the result, or `error: ...` on
/// stderr with exit code [`ERROR_CODE`].
pub fn main() -> std::process::ExitCode {
    // kubectl's plugin completion: answered before clap, whose errors on a half-typed line would
    // reach the shell as candidates (cobra's protocol, docs/plugin.md "Shell completion").
    let args: Vec<String> = std::env::args_os().map(|a| a.to_string_lossy().into_owned()).collect();
    if args.get(1).is_some_and(|a| a == "__complete") {
        let answer = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
            Ok(rt) => rt.block_on(complete::complete(&args[2..])),
            Err(_) => format!("{}\n", complete::NO_FILE),
        };
        print!("{answer}");
        return std::process::ExitCode::SUCCESS;
    }
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: {e}");
            return std::process::ExitCode::from(ERROR_CODE);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(done) => {
            print!("{}", done.out);
            std::process::ExitCode::from(done.code)
        }
        Err(e) => {
            eprintln!("error: {}", describe(&e));
            std::process::ExitCode::from(ERROR_CODE)
        }
    }
}

/// The error and its causes on one line, like `{:#}`, without the causes that a message
/// already quotes (kube's errors include their source in their own text).
pub fn describe(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    // Errors quote names and messages from the cluster and the command line.
    render::escape(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::{check_forms, describe, names_workload, Cli};
    use clap::Parser as _;

    #[test]
    fn type_slash_name_is_a_workload_and_a_bare_name_a_source() {
        for w in ["deploy/pricing", "deployment/pricing", "sts/db", "rollout/x", "rollouts.argoproj.io/x", "Deployment/x"] {
            assert!(names_workload(w), "{w}");
        }
        for s in ["pricing-config", "configmap/x", "cm/x", "CM/x", "secret/db", "secrets/db", "../secrets/db", "/x"] {
            assert!(!names_workload(s), "{s}");
        }
        let refused = |args: &[&str]| {
            let cli = Cli::try_parse_from([&["kubectl-confighistory"], args].concat()).unwrap();
            check_forms(&cli.command).map_err(|e| e.to_string())
        };
        assert!(refused(&["history", "pricing-config", "--revision", "2"])
            .unwrap_err()
            .contains("--revision is for a workload's timeline"));
        assert!(refused(&["diff", "secret/db", "--from-revision", "1"]).unwrap_err().contains("give A and B"));
        assert!(refused(&["diff", "deploy/app", "1", "2"]).unwrap_err().contains("--from-revision A --to-revision B"));
        assert!(refused(&["diff", "deploy/app", "--from-revision", "1"]).is_ok());
        assert!(refused(&["history", "deploy/app", "--revision", "1"]).is_ok());
        assert!(refused(&["diff", "cfg", "1", "2"]).is_ok());
    }

    #[test]
    fn describe_skips_causes_the_message_already_quotes() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "No such file or directory (os error 2)");
        let e = anyhow::Error::new(io)
            .context("failed to read kubeconfig from 'x': No such file or directory (os error 2)")
            .context("read kubeconfig x");
        assert_eq!(describe(&e), "read kubeconfig x: failed to read kubeconfig from 'x': No such file or directory (os error 2)");
        let e = anyhow::anyhow!("root cause").context("outer");
        assert_eq!(describe(&e), "outer: root cause");
    }
}
