//! kubectl's plugin completion (docs/plugin.md "Shell completion"): kubectl 1.26+ runs
//! `kubectl_complete-confighistory ARGS...`, which runs `kubectl-confighistory __complete ARGS...`;
//! the answer is cobra's: candidates for the last word, one per line, then `:4` (no file
//! completion). Names come from the cluster the words typed so far lead to (`-n`, `--context`,
//! `--kubeconfig`, `--as`, ...), and from the kubeconfig. Any failure answers `:4` alone: an
//! error text would be offered as a candidate.

use std::time::Duration;

use clap::CommandFactory as _;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::CronJob;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{Api, ListParams};
use serde_json::json;

use super::kubeconfig::{self, KubeFlags, Target};
use super::Cli;
use crate::model::names;

/// cobra's ShellCompDirectiveNoFileComp.
pub const NO_FILE: &str = ":4";

/// How long completion waits for the cluster (unless `--request-timeout` says otherwise): a
/// TAB must not hang.
pub const TIMEOUT: Duration = Duration::from_secs(5);

/// What the last word is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Want {
    /// A subcommand (no subcommand yet).
    Subcommand,
    /// A flag (the word starts with `-`).
    Flag,
    /// The value of the flag of this long name.
    Value(String),
    /// The subcommand's positional argument of this index.
    Positional(usize),
}

/// The words typed so far, parsed as the plugin's command line.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Line {
    /// The subcommand's name (an alias resolved).
    pub subcommand: Option<String>,
    /// Flags given, by long name, with their values (`""` for a flag without one).
    pub flags: Vec<(String, String)>,
    pub positionals: Vec<String>,
    /// The word to complete (after `--flag=` for a flag's value).
    pub current: String,
}

impl Line {
    /// The last value of a flag.
    pub fn flag(&self, long: &str) -> Option<&str> {
        self.flags.iter().rev().find(|(f, _)| f == long).map(|(_, v)| v.as_str())
    }
}

/// Parses the words (the last one being completed, possibly empty) with the plugin's flags:
/// `--flag VALUE`, `--flag=VALUE`, `-n VALUE`, `-nVALUE`, boolean flags, `--`.
pub fn parse(args: &[String]) -> (Line, Want) {
    let cmd = Cli::command();
    let (words, current) = match args.split_last() {
        Some((last, words)) => (words, last.as_str()),
        None => (&[][..], ""),
    };
    let mut line = Line::default();
    // A flag's long name and whether it takes the next word as its value.
    let lookup = |sub: Option<&str>, long: Option<&str>, short: Option<char>| -> Option<(String, bool)> {
        let sub = sub.and_then(|s| cmd.find_subcommand(s));
        let arg = cmd.get_arguments().chain(sub.into_iter().flat_map(|s| s.get_arguments())).find(|a| {
            long.is_some_and(|l| a.get_long() == Some(l) || a.get_all_aliases().is_some_and(|al| al.contains(&l)))
                || short.is_some_and(|c| a.get_short() == Some(c))
        })?;
        let name = arg.get_long().map(str::to_owned).unwrap_or_else(|| arg.get_id().to_string());
        // Optional values (`--dry-run`, `--insecure-skip-tls-verify`) take only `=VALUE`.
        let takes_next = arg.get_action().takes_values() && arg.get_num_args().is_none_or(|n| n.min_values() > 0);
        Some((name, takes_next))
    };
    let mut pending: Option<String> = None;
    let mut only_positionals = false;
    for word in words {
        if let Some(flag) = pending.take() {
            line.flags.push((flag, word.clone()));
            continue;
        }
        let sub = line.subcommand.as_deref();
        if only_positionals || word == "-" || !word.starts_with('-') {
            match (&line.subcommand, cmd.find_subcommand(word)) {
                (None, Some(s)) if !only_positionals => line.subcommand = Some(s.get_name().to_owned()),
                _ => line.positionals.push(word.clone()),
            }
        } else if word == "--" {
            only_positionals = true;
        } else if let Some(long) = word.strip_prefix("--") {
            let (name, value) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (long, None),
            };
            match (lookup(sub, Some(name), None), value) {
                (Some((name, _)), Some(v)) => line.flags.push((name, v.to_owned())),
                (Some((name, true)), None) => pending = Some(name),
                (Some((name, false)), None) => line.flags.push((name, String::new())),
                // Unknown: kept by its name, its value unknown.
                (None, v) => line.flags.push((name.to_owned(), v.unwrap_or_default().to_owned())),
            }
        } else {
            // Short flags, possibly grouped (`-Ao`), the first that takes a value ends the group.
            let shorts = &word[1..];
            for (i, c) in shorts.char_indices() {
                match lookup(sub, None, Some(c)) {
                    Some((name, true)) => {
                        let rest = shorts[i + c.len_utf8()..].trim_start_matches('=');
                        if rest.is_empty() {
                            pending = Some(name);
                        } else {
                            line.flags.push((name, rest.to_owned()));
                        }
                        break;
                    }
                    Some((name, false)) => line.flags.push((name, String::new())),
                    None => break,
                }
            }
        }
    }
    let want = if let Some(flag) = pending {
        line.current = current.to_owned();
        Want::Value(flag)
    } else if current.starts_with("--") && current.contains('=') && !only_positionals {
        let (name, value) = current[2..].split_once('=').unwrap_or_default();
        line.current = value.to_owned();
        Want::Value(lookup(line.subcommand.as_deref(), Some(name), None).map_or_else(|| name.to_owned(), |(n, _)| n))
    } else if current.starts_with('-') && !only_positionals {
        line.current = current.to_owned();
        Want::Flag
    } else if line.subcommand.is_none() {
        line.current = current.to_owned();
        Want::Subcommand
    } else {
        line.current = current.to_owned();
        Want::Positional(line.positionals.len())
    };
    (line, want)
}

/// What a completion needs from outside: the cluster's names and the kubeconfig's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    Namespaces,
    /// Sources with snapshots: `NAME` for a ConfigMap, `secret/NAME`.
    Sources,
    /// `deployment/NAME`, `statefulset/NAME`, `daemonset/NAME`, `cronjob/NAME`.
    Workloads,
    Contexts,
    Clusters,
    Users,
}

/// The candidates needing nothing outside, and what to look up for the others.
pub fn offline(line: &Line, want: &Want) -> (Vec<String>, Vec<Lookup>) {
    let cmd = Cli::command();
    let fixed = |c: &[&str]| (c.iter().map(|s| (*s).to_owned()).collect(), Vec::new());
    match want {
        Want::Subcommand => (cmd.get_subcommands().filter(|s| !s.is_hide_set()).map(|s| s.get_name().to_owned()).collect(), Vec::new()),
        Want::Flag => {
            let sub = line.subcommand.as_deref().and_then(|s| cmd.find_subcommand(s));
            let mut out = Vec::new();
            for a in cmd.get_arguments().chain(sub.into_iter().flat_map(|s| s.get_arguments())).filter(|a| !a.is_hide_set()) {
                out.extend(a.get_long().map(|l| format!("--{l}")));
                out.extend(a.get_short().map(|s| format!("-{s}")));
            }
            (out, Vec::new())
        }
        Want::Value(flag) => match flag.as_str() {
            "namespace" => (Vec::new(), vec![Lookup::Namespaces]),
            "context" => (Vec::new(), vec![Lookup::Contexts]),
            "cluster" => (Vec::new(), vec![Lookup::Clusters]),
            "user" => (Vec::new(), vec![Lookup::Users]),
            "output" => fixed(&["json", "yaml", "name", "jsonpath="]),
            "dry-run" => fixed(&["none", "server"]),
            "insecure-skip-tls-verify" => fixed(&["true", "false"]),
            _ => (Vec::new(), Vec::new()),
        },
        Want::Positional(i) => match (line.subcommand.as_deref().unwrap_or_default(), i) {
            ("completion", 0) => fixed(&["bash", "zsh", "fish"]),
            ("history", 0) => (Vec::new(), vec![Lookup::Sources, Lookup::Workloads]),
            ("diff", 0) => (Vec::new(), vec![Lookup::Sources]),
            ("diff", 1 | 2) => fixed(&["head"]),
            ("status" | "undo", 0) => (Vec::new(), vec![Lookup::Workloads]),
            _ => (Vec::new(), Vec::new()),
        },
    }
}

/// The answer: the candidates starting with the word, sorted, one per line, then `:4`. A
/// candidate with a control character or a blank (a hostile kubeconfig name) would break the
/// protocol: left out.
pub fn answer(candidates: Vec<String>, current: &str) -> String {
    let mut out: Vec<String> = candidates
        .into_iter()
        .filter(|c| c.starts_with(current) && !c.is_empty() && !c.chars().any(|c| c.is_control() || c.is_whitespace()))
        .collect();
    out.sort();
    out.dedup();
    out.into_iter().map(|c| c + "\n").collect::<String>() + NO_FILE + "\n"
}

/// `__complete ARGS...`: never fails.
pub async fn complete(args: &[String]) -> String {
    let (line, want) = parse(args);
    let (mut candidates, lookups) = offline(&line, &want);
    if !lookups.is_empty() {
        match look_up(&line, &lookups).await {
            Ok(found) => candidates.extend(found),
            Err(_) => return NO_FILE.to_owned() + "\n",
        }
    }
    answer(candidates, &line.current)
}

/// The connection flags of the line, as [`super::Cli`] would have parsed them.
pub fn target(line: &Line) -> Target {
    let mut flags = KubeFlags::default();
    for (name, value) in &line.flags {
        let value = value.clone();
        match name.as_str() {
            "as" => flags.as_user = Some(value),
            "as-group" => flags.as_group.push(value),
            "as-uid" => flags.as_uid = Some(value),
            "cluster" => flags.cluster = Some(value),
            "user" => flags.user = Some(value),
            "token" => flags.token = value.parse().ok(),
            "server" => flags.server = Some(value),
            "certificate-authority" => flags.certificate_authority = Some(value.into()),
            "insecure-skip-tls-verify" => flags.insecure_skip_tls_verify = value.is_empty() || value == "true",
            _ => {}
        }
    }
    Target { kubeconfig: line.flag("kubeconfig").map(Into::into), context: line.flag("context").map(str::to_owned), flags }
}

async fn look_up(line: &Line, lookups: &[Lookup]) -> anyhow::Result<Vec<String>> {
    let target = target(line);
    let mut out = Vec::new();
    let kubeconfig_names = [Lookup::Contexts, Lookup::Clusters, Lookup::Users];
    if lookups.iter().any(|l| kubeconfig_names.contains(l)) {
        let kc = match &target.kubeconfig {
            Some(path) => kube::config::Kubeconfig::read_from(path)?,
            None => kube::config::Kubeconfig::read()?,
        };
        for l in lookups {
            match l {
                Lookup::Contexts => out.extend(kc.contexts.iter().map(|c| c.name.clone())),
                Lookup::Clusters => out.extend(kc.clusters.iter().map(|c| c.name.clone())),
                Lookup::Users => out.extend(kc.auth_infos.iter().map(|u| u.name.clone())),
                _ => {}
            }
        }
    }
    if !lookups.iter().any(|l| matches!(l, Lookup::Namespaces | Lookup::Sources | Lookup::Workloads)) {
        return Ok(out);
    }
    let mut config = kubeconfig::load(&target).await?;
    let timeout = line.flag("request-timeout").and_then(|t| super::parse_timeout(t).ok()).filter(|t| !t.is_zero()).unwrap_or(TIMEOUT);
    (config.connect_timeout, config.read_timeout, config.write_timeout) = (Some(timeout), Some(timeout), Some(timeout));
    let namespace = line.flag("namespace").map_or_else(|| config.default_namespace.clone(), str::to_owned);
    if !names::is_dns_label(&namespace) {
        anyhow::bail!("not a namespace");
    }
    let client = kube::Client::try_from(config)?;
    let work = async {
        for l in lookups {
            match l {
                Lookup::Namespaces => out.extend(list_names(Api::<Namespace>::all(client.clone())).await?),
                Lookup::Sources => out.extend(sources(&client, &namespace).await?),
                Lookup::Workloads => out.extend(workloads(&client, &namespace).await?),
                _ => {}
            }
        }
        anyhow::Ok(())
    };
    tokio::time::timeout(timeout, work).await??;
    Ok(out)
}

async fn list_names<K>(api: Api<K>) -> kube::Result<Vec<String>>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let list = api.list_metadata(&ListParams::default()).await?;
    Ok(list.items.into_iter().filter_map(|o| o.metadata.name).collect())
}

/// The sources that have snapshots in the namespace, as the commands take them: `NAME` for a
/// ConfigMap, `secret/NAME`. Metadata only (no value is read); Secrets the user may not list are
/// left out.
async fn sources(client: &kube::Client, namespace: &str) -> kube::Result<Vec<String>> {
    let params = ListParams::default().labels(names::HASH_LABEL);
    let configmaps = Api::<ConfigMap>::namespaced(client.clone(), namespace).list_metadata(&params).await?;
    let secrets = Api::<Secret>::namespaced(client.clone(), namespace).list_metadata(&params).await.map(|l| l.items).unwrap_or_default();
    let snapshots = configmaps
        .items
        .into_iter()
        .map(|o| json!({"kind": "ConfigMap", "metadata": o.metadata}))
        .chain(secrets.into_iter().map(|o| json!({"kind": "Secret", "metadata": o.metadata})));
    Ok(snapshots
        .filter_map(|s| super::build::snapshot_source(&s))
        .map(|(_, entry)| entry)
        // The source name is the tenant's annotation: only a name a command takes is offered.
        .filter(|entry| super::build::parse_source(entry).is_ok_and(|id| names::is_dns_subdomain(&id.name)))
        .collect())
}

/// The namespace's workloads as `KIND/NAME`; a kind the user may not list is left out.
async fn workloads(client: &kube::Client, namespace: &str) -> kube::Result<Vec<String>> {
    let c = || client.clone();
    let (d, s, ds, cj) = futures::join!(
        list_names(Api::<Deployment>::namespaced(c(), namespace)),
        list_names(Api::<StatefulSet>::namespaced(c(), namespace)),
        list_names(Api::<DaemonSet>::namespaced(c(), namespace)),
        list_names(Api::<CronJob>::namespaced(c(), namespace)),
    );
    let mut out = Vec::new();
    let mut any = false;
    let mut last_error = None;
    for (kind, listed) in [("deployment", d), ("statefulset", s), ("daemonset", ds), ("cronjob", cj)] {
        match listed {
            Ok(names) => {
                any = true;
                out.extend(names.into_iter().map(|n| format!("{kind}/{n}")));
            }
            Err(e) => last_error = Some(e),
        }
    }
    match (any, last_error) {
        (false, Some(e)) => Err(e),
        _ => Ok(out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &[&str]) -> Vec<String> {
        s.iter().map(|w| (*w).to_owned()).collect()
    }

    fn parsed(s: &[&str]) -> (Line, Want) {
        parse(&words(s))
    }

    #[test]
    fn what_the_last_word_is() {
        assert_eq!(parsed(&[""]).1, Want::Subcommand);
        assert_eq!(parsed(&[]).1, Want::Subcommand);
        assert_eq!(parsed(&["-n", "shop", "st"]).1, Want::Subcommand);
        assert_eq!(parsed(&["-n", ""]).1, Want::Value("namespace".into()));
        assert_eq!(parsed(&["status", "--namespace", "s"]).1, Want::Value("namespace".into()));
        assert_eq!(parsed(&["-n", "shop", "status", ""]).1, Want::Positional(0));
        assert_eq!(parsed(&["diff", "cfg", ""]).1, Want::Positional(1));
        assert_eq!(parsed(&["sources", "--"]).1, Want::Flag);
        assert_eq!(parsed(&["status", "-"]).1, Want::Flag);
        assert_eq!(parsed(&["--context", ""]).1, Want::Value("context".into()));
        assert_eq!(parsed(&["--user", "x", "--cluster", ""]).1, Want::Value("cluster".into()));
        let (line, want) = parsed(&["status", "--context=ki"]);
        assert_eq!((want, line.current.as_str()), (Want::Value("context".into()), "ki"));
        // A boolean flag takes no value: the next word is the command's.
        assert_eq!(parsed(&["--insecure-skip-tls-verify", ""]).1, Want::Subcommand);
        assert_eq!(parsed(&["list", "-A", ""]).1, Want::Positional(0));
        assert_eq!(parsed(&["undo", "app", "--dry-run", ""]).1, Want::Positional(1));
        // After `--`, everything is positional.
        assert_eq!(parsed(&["history", "--", "-x", ""]).1, Want::Positional(1));
    }

    #[test]
    fn the_flags_so_far() {
        let (line, _) = parsed(&[
            "-nshop",
            "--context=kind",
            "--kubeconfig",
            "/k",
            "sources",
            "--as",
            "alice",
            "--as-group=a",
            "--as-group",
            "b",
            "-s",
            "https://h",
            "--insecure-skip-tls-verify",
            "",
        ]);
        assert_eq!(line.subcommand.as_deref(), Some("list"), "an alias is its command");
        assert_eq!(line.flag("namespace"), Some("shop"));
        let t = target(&line);
        assert_eq!((t.kubeconfig, t.context.as_deref()), (Some("/k".into()), Some("kind")));
        assert_eq!((t.flags.as_user.as_deref(), t.flags.as_group.clone()), (Some("alice"), vec!["a".to_owned(), "b".to_owned()]));
        assert_eq!(t.flags.server.as_deref(), Some("https://h"));
        assert!(t.flags.insecure_skip_tls_verify);
        // Grouped shorts: -A then -n's value.
        let (line, _) = parsed(&["list", "-An", "shop", ""]);
        assert_eq!((line.flag("all-namespaces"), line.flag("namespace")), (Some(""), Some("shop")));
        let (line, _) = parsed(&["history", "-n=shop", "cfg", ""]);
        assert_eq!((line.flag("namespace"), line.positionals.clone()), (Some("shop"), vec!["cfg".to_owned()]));
    }

    #[test]
    fn offline_candidates_and_lookups() {
        let off = |s: &[&str]| {
            let (line, want) = parsed(s);
            let (c, l) = offline(&line, &want);
            (answer(c, &line.current), l)
        };
        assert_eq!(off(&[""]).0, "completion\ndiff\nhistory\nlist\nstatus\nui\nundo\n:4\n");
        assert_eq!(off(&["undo", "app", "--d"]).0, "--dry-run\n:4\n");
        assert_eq!(off(&["completion", "z"]).0, "zsh\n:4\n");
        assert_eq!(off(&["-o", ""]).0, "json\njsonpath=\nname\nyaml\n:4\n");
        // Global flags everywhere, hidden ones never.
        let flags = off(&["status", "--"]).0;
        for f in [
            "--as",
            "--as-group",
            "--cluster",
            "--user",
            "--token",
            "--server",
            "--certificate-authority",
            "--insecure-skip-tls-verify",
            "--v",
            "--wait",
        ] {
            assert!(flags.lines().any(|l| l == f), "{f} in {flags}");
        }
        assert!(off(&["status", "-"]).0.lines().any(|l| l == "-v" || l == "-s"));
        assert_eq!(off(&["-n", ""]).1, vec![Lookup::Namespaces]);
        assert_eq!(off(&["--context", ""]).1, vec![Lookup::Contexts]);
        assert_eq!(off(&["--cluster=", ""]).1, Vec::<Lookup>::new(), "a completed --cluster= is a value, the next word the command");
        assert_eq!(off(&["--user", ""]).1, vec![Lookup::Users]);
        assert_eq!(off(&["status", ""]).1, vec![Lookup::Workloads]);
        assert_eq!(off(&["undo", "d"]).1, vec![Lookup::Workloads]);
        assert_eq!(off(&["history", ""]).1, vec![Lookup::Sources, Lookup::Workloads]);
        assert_eq!(off(&["diff", ""]).1, vec![Lookup::Sources]);
        assert_eq!(off(&["diff", "cfg", "h"]).0, "head\n:4\n");
        assert_eq!(off(&["status", "app", ""]), (":4\n".to_owned(), Vec::new()));
    }

    #[test]
    fn answers_keep_to_the_protocol() {
        let c = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(answer(c(&["b", "a", "a", "ab"]), "a"), "a\nab\n:4\n");
        assert_eq!(answer(c(&["ok", "bad\nname", "x\u{1b}[2J", "with space", ""]), ""), "ok\n:4\n");
        assert_eq!(answer(Vec::new(), "x"), ":4\n");
    }

    #[tokio::test]
    async fn a_failure_answers_no_file_completion_only() {
        // A kubeconfig that cannot be read, a server that does not answer: `:4` alone.
        assert_eq!(complete(&words(&["--kubeconfig", "/nonexistent/kubeconfig", "--context", ""])).await, ":4\n");
        let words = words(&["--server", "https://127.0.0.1:1", "--request-timeout", "1s", "-n", ""]);
        assert_eq!(complete(&words).await, ":4\n");
    }
}
