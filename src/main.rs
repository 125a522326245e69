#![forbid(unsafe_code)]
use clap::Parser;
use confighistory::cli::{Cli, Command};
use std::io::IsTerminal;

fn main() -> anyhow::Result<()> {
    let runtime = tokio::runtime::Runtime::new()?;
    let result = runtime.block_on(run());
    // A thread still busy at exit (a pass over the cache, a wait for its lock: they run off the
    // runtime's workers) must not keep the process alive after it released its Lease; dropping
    // the runtime would wait for it without end.
    runtime.shutdown_timeout(std::time::Duration::from_secs(2));
    result
}

async fn run() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let filter = std::env::var("RUST_LOG").ok().filter(|f| !f.is_empty()).unwrap_or_else(|| "info".into());
    // Colours only for a person at a terminal who did not set NO_COLOR: in a pod, escape codes
    // would garble `kubectl logs` and log collectors (and cost ~10K instructions per admission).
    let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    confighistory::runtime::init_logging(&filter, cli.log_format == "json", ansi, std::io::stderr);
    match cli.command {
        Command::Serve(args) => confighistory::runtime::serve(*args).await?,
        Command::Controller(args) => confighistory::runtime::controller(args).await?,
        Command::Gc(args) => confighistory::runtime::gc(args).await?,
        Command::Selftest(args) => confighistory::runtime::selftest(args).await?,
        Command::RotateKeys(args) => confighistory::runtime::rotate_keys(args).await?,
    }
    Ok(())
}
