#![forbid(unsafe_code)]
//! `kubectl confighistory`: see docs/plugin.md.

fn main() -> std::process::ExitCode {
    confighistory::plugin::main()
}
