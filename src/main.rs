#![forbid(unsafe_code)]
use clap::Parser;
use confighistory::cli::{Cli, Command};
use std::io::IsTerminal;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    // Colours only for a person at a terminal who did not set NO_COLOR: in a pod, escape codes
    // would garble `kubectl logs` and log collectors (and cost ~10K instructions per admission).
    let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let fmt = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi);
    if cli.log_format == "json" {
        fmt.json().init();
    } else {
        fmt.init();
    }
    match cli.command {
        Command::Serve(args) => confighistory::runtime::serve(args).await?,
        Command::Controller(args) => confighistory::runtime::controller(args).await?,
        Command::Gc(args) => confighistory::runtime::gc(args).await?,
    }
    Ok(())
}
