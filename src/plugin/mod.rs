//! `kubectl confighistory`: a kubectl plugin to read a source's snapshot history, diff snapshots,
//! see a workload's pins and undo a rollout with its config (issue 6, docs/plugin.md).
//!
//! - [`gather`]: kube I/O into an [`build::Inventory`] of plain JSON objects;
//! - [`build`]: pure construction of the [`model`] shown for each command;
//! - [`render`]: pure human formatting; [`yaml`]: `-o yaml`; [`linediff`]: line diffs.

pub mod build;
pub mod gather;
pub mod linediff;
pub mod model;
pub mod render;
pub mod yaml;

use std::io::IsTerminal as _;
use std::path::PathBuf;

use anyhow::{Context as _, Result};
use clap::{Parser, Subcommand, ValueEnum};
use k8s_openapi::jiff::Timestamp;
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde::Serialize;

use render::Style;

#[derive(Parser, Debug)]
#[command(
    name = "kubectl-confighistory",
    bin_name = "kubectl confighistory",
    version,
    about = "Rollout history of ConfigMaps versioned by confighistory",
    after_help = "Examples:\n  \
        kubectl confighistory history pricing-config\n  \
        kubectl confighistory diff pricing-config 3          # revision 3 against the head\n  \
        kubectl confighistory diff pricing-config deployment/pricing@3 head\n  \
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
    /// Output format: human text (default), json or yaml.
    #[arg(short = 'o', long, global = true, value_enum)]
    pub output: Option<Output>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Json,
    Yaml,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Snapshots of a source, newest first: revision, hash, age, size, key changes, users, why kept.
    History {
        /// The source ConfigMap (or one of its snapshots).
        source: String,
    },
    /// Key- and line-level diff between two snapshots of a source (default: the one before the
    /// head against the head; with one argument: it against the head).
    ///
    /// A and B are `head`, a revision number from `history`, a hash (or unique prefix), a
    /// snapshot name, or WORKLOAD@REVISION (the snapshot a rollout revision ran with).
    Diff { source: String, a: Option<String>, b: Option<String> },
    /// A workload's pins, whether each is the head, pending propagation, the namespace's mode, and
    /// what an undo would restore.
    Status {
        /// deployment/NAME, statefulset/NAME, daemonset/NAME, cronjob/NAME, or NAME (a Deployment).
        workload: String,
    },
    /// `kubectl rollout undo`, printing the image and config snapshot it goes back to. Refuses
    /// when the target revision's snapshot is gone.
    Undo {
        workload: String,
        /// The revision to roll back to (default 0: the previous revision).
        #[arg(long, default_value_t = 0)]
        to_revision: i64,
        /// `server` (or `client`): ask the API server what would happen, change nothing.
        #[arg(long, num_args = 0..=1, default_missing_value = "server", value_parser = ["none", "server", "client"])]
        dry_run: Option<String>,
    },
}

/// The style for human output on stdout: color on a terminal unless `NO_COLOR` is set.
pub fn stdout_style() -> Style {
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    Style { color: std::io::stdout().is_terminal() && !no_color && std::env::var("TERM").as_deref() != Ok("dumb") }
}

/// Machine output: the model with a `kind` field, as JSON or YAML.
pub fn machine<T: Serialize>(kind: &str, value: &T, output: Output) -> String {
    let mut v = serde_json::to_value(value).unwrap_or_default();
    if let Some(m) = v.as_object_mut() {
        m.insert("kind".into(), kind.into());
    }
    match output {
        Output::Json => serde_json::to_string_pretty(&v).unwrap_or_default() + "\n",
        Output::Yaml => yaml::to_yaml(&v),
    }
}

/// (client, namespace, API server URL).
async fn client(cli: &Cli) -> Result<(kube::Client, String, String)> {
    let options = KubeConfigOptions { context: cli.context.clone(), ..Default::default() };
    let config = match &cli.kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path).with_context(|| format!("read kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &options).await.context("load kubeconfig")?
        }
        None if cli.context.is_some() => kube::Config::from_kubeconfig(&options).await.context("load kubeconfig")?,
        None => kube::Config::infer().await.context("find a kubeconfig (set KUBECONFIG or --kubeconfig)")?,
    };
    let namespace = cli.namespace.clone().unwrap_or_else(|| config.default_namespace.clone());
    let url = config.cluster_url.to_string();
    Ok((kube::Client::try_from(config).context("create a Kubernetes client")?, namespace, url))
}

/// Runs the command and returns what to print on stdout.
pub async fn run(cli: Cli) -> Result<String> {
    let (client, namespace, url) = client(&cli).await?;
    // The first call tells whether the kubeconfig leads anywhere: say where it led.
    gather::check_installed(&client).await.with_context(|| format!("cluster at {url}"))?;
    let ctx = gather::Ctx { client, namespace };
    let now = Timestamp::now();
    let style = stdout_style();
    match &cli.command {
        Command::History { source } => {
            let inv = gather::inventory(&ctx, &[source]).await?;
            let source = resolve_source(&inv, source);
            let h = build::history(&inv, &source)?;
            Ok(match cli.output {
                Some(o) => machine("History", &h, o),
                None => render::history(&h, now, style),
            })
        }
        Command::Diff { source, a, b } => {
            let inv = gather::inventory(&ctx, &[source]).await?;
            let source = resolve_source(&inv, source);
            let d = build::diff(&inv, &source, a.as_deref(), b.as_deref())?;
            Ok(match cli.output {
                Some(o) => machine("Diff", &d, o),
                None => render::diff(&d, now, style),
            })
        }
        Command::Status { workload } => {
            let wanted = build::parse_workload(workload)?;
            let inv = gather::inventory(&ctx, &[]).await?;
            let s = build::status(&inv, &wanted)?;
            Ok(match cli.output {
                Some(o) => machine("Status", &s, o),
                None => render::status(&s, now, style),
            })
        }
        Command::Undo { workload, to_revision, dry_run } => {
            let dry_run = dry_run.as_deref().is_some_and(|d| d != "none");
            let wanted = build::parse_workload(workload)?;
            let inv = gather::inventory(&ctx, &[]).await?;
            let w = inv.workload(&wanted).ok_or_else(|| anyhow::anyhow!("{wanted} not found in namespace {}", inv.namespace))?;
            let (rev, template) = build::undo_target(&w, *to_revision)?;
            let before = build::revision_config(&inv, w.current_revision(), w.template());
            let target = build::revision_config(&inv, Some(rev), &template);
            build::check_target(&wanted, &target)?;
            let skipped = crate::template::template_hash(&template) == crate::template::template_hash(w.template());
            let (after, held) = if skipped {
                (before.clone(), w.held().into_iter().collect())
            } else {
                let stored = gather::rollback(&ctx, &inv, &w, rev, dry_run).await?;
                let mut inv = inv.clone();
                inv.snapshots = gather::snapshots(&ctx).await?;
                let after_w = build::Workload { object: stored, ..w.clone() };
                (build::revision_config(&inv, None, after_w.template()), after_w.held().into_iter().collect())
            };
            let u = model::Undo { namespace: inv.namespace.clone(), workload: wanted, dry_run, skipped, before, target, after, held };
            Ok(match cli.output {
                Some(o) => machine("Undo", &u, o),
                None => render::undo(&u, style),
            })
        }
    }
}

/// A snapshot name given where a source is expected means its source.
fn resolve_source(inv: &build::Inventory, given: &str) -> String {
    if inv.snaps_of(given).is_empty() {
        if let Some(s) = inv.snaps().into_iter().find(|s| s.name == given) {
            return s.source;
        }
    }
    given.to_owned()
}

/// Entry point of the `kubectl-confighistory` binary: prints the result, or `error: ...` on
/// stderr with exit code 1, like kubectl.
pub fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(out) => {
            print!("{out}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {}", describe(&e));
            std::process::ExitCode::FAILURE
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
    out
}

#[cfg(test)]
mod tests {
    use super::describe;

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
