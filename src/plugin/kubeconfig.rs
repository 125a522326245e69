//! kubectl's connection flags (`--as`, `--cluster`, `--server`, `--token`, `-v`, ...) and how they
//! choose the cluster, the user and the credentials: client-go's precedence, flags over the
//! kubeconfig (docs/plugin.md "Connection flags").

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context as _, Result};
use axum::http::{Request, Response};
use clap::{ArgAction, Args};
use futures::future::BoxFuture;
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::json;

/// The flags kubectl users type to say who they are and which cluster they mean; global, as in
/// kubectl. `--namespace`, `--context`, `--kubeconfig` and `--request-timeout` are on [`super::Cli`].
#[derive(Args, Debug, Clone, Default)]
pub struct KubeFlags {
    /// Username to impersonate for the operation: a user or a service account
    /// (system:serviceaccount:NAMESPACE:NAME).
    #[arg(long = "as", global = true, value_name = "USER")]
    pub as_user: Option<String>,
    /// Group to impersonate for the operation; repeat it for several groups (needs --as or the
    /// kubeconfig user's `as`).
    #[arg(long = "as-group", global = true, value_name = "GROUP")]
    pub as_group: Vec<String>,
    /// UID to impersonate for the operation.
    #[arg(long = "as-uid", global = true, value_name = "UID")]
    pub as_uid: Option<String>,
    /// The name of the kubeconfig cluster to use (instead of the context's).
    #[arg(long, global = true, value_name = "NAME")]
    pub cluster: Option<String>,
    /// The name of the kubeconfig user to use (instead of the context's).
    #[arg(long, global = true, value_name = "NAME")]
    pub user: Option<String>,
    /// Bearer token for authentication to the API server (replaces the kubeconfig user's
    /// credentials other than a client certificate).
    #[arg(long, global = true, value_name = "TOKEN")]
    pub token: Option<Token>,
    /// The address and port of the Kubernetes API server (`https://` when no scheme is given).
    #[arg(short = 's', long, global = true, value_name = "URL")]
    pub server: Option<String>,
    /// Path to a cert file for the certificate authority.
    #[arg(long, global = true, value_name = "FILE")]
    pub certificate_authority: Option<PathBuf>,
    /// If true, the server's certificate will not be checked for validity. This will make your
    /// HTTPS connections insecure.
    #[arg(long, global = true, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          default_value_t = false, action = ArgAction::Set, value_name = "BOOL")]
    pub insecure_skip_tls_verify: bool,
    /// Log level, as kubectl's: 6 and more print each API request's method, URL, status and time
    /// on stderr (never a header, a token or a body).
    #[arg(short = 'v', long = "v", global = true, default_value_t = 0, value_name = "LEVEL")]
    pub verbosity: u8,
}

/// A `--token`: its `Debug` never shows it.
#[derive(Clone, Default)]
pub struct Token(pub String);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

impl std::str::FromStr for Token {
    type Err = String;
    fn from_str(s: &str) -> Result<Token, String> {
        if s.is_empty() {
            return Err("the token is empty".into());
        }
        Ok(Token(s.to_owned()))
    }
}

/// The `-v` level from which each request is logged, as kubectl's round trippers log them.
pub const LOG_REQUESTS: u8 = 6;

/// Where to find the kubeconfig and which context: the flags on [`super::Cli`].
#[derive(Debug, Clone, Default)]
pub struct Target {
    pub kubeconfig: Option<PathBuf>,
    pub context: Option<String>,
    pub flags: KubeFlags,
}

/// The client configuration the flags and the kubeconfig give, with client-go's precedence:
/// `--kubeconfig`, else `$KUBECONFIG`, else `~/.kube/config`, else (with no `--server`) the
/// in-cluster configuration; `--context`, `--cluster` and `--user` choose within the kubeconfig,
/// then [`apply`] lays the other flags over it. With `--server` no kubeconfig is needed, and with
/// `--cluster` (and `--user`) no current context.
pub async fn load(target: &Target) -> Result<kube::Config> {
    let flags = &target.flags;
    let options = KubeConfigOptions { context: target.context.clone(), cluster: flags.cluster.clone(), user: flags.user.clone() };
    let named = options.context.is_some() || options.cluster.is_some() || options.user.is_some();
    let file = match &target.kubeconfig {
        Some(path) => Some(Kubeconfig::read_from(path).with_context(|| format!("read kubeconfig {}", path.display()))?),
        // kubectl goes on without a kubeconfig when the flags name the server.
        None => match Kubeconfig::read() {
            Ok(kc) => Some(kc),
            Err(_) if flags.server.is_some() && !named => None,
            Err(e) if named => return Err(e).context("load kubeconfig (set KUBECONFIG or --kubeconfig)"),
            Err(_) => None,
        },
    };
    let mut config = match file {
        // A kubeconfig without a current context still serves a --server (kubectl's empty context).
        Some(kc) if flags.server.is_some() && !named && kc.current_context.as_deref().is_none_or(str::is_empty) => bare(flags)?,
        // kubectl's empty context too: with no context to name them, --cluster and --user do.
        Some(mut kc)
            if options.context.is_none() && options.cluster.is_some() && kc.current_context.as_deref().is_none_or(str::is_empty) =>
        {
            let context = json!({"name": FLAGS_CONTEXT, "context": {"cluster": options.cluster, "user": options.user}});
            kc.contexts.push(serde_json::from_value(context).context("--cluster")?);
            kc.current_context = Some(FLAGS_CONTEXT.into());
            kube::Config::from_custom_kubeconfig(kc, &options).await.context("load kubeconfig")?
        }
        Some(kc) => kube::Config::from_custom_kubeconfig(kc, &options).await.context("load kubeconfig")?,
        None if flags.server.is_some() => bare(flags)?,
        None => kube::Config::infer().await.context("find a kubeconfig (set KUBECONFIG or --kubeconfig, or give --server)")?,
    };
    apply(&mut config, flags)?;
    Ok(config)
}

/// The context made of `--cluster` and `--user` in a kubeconfig without a current context.
const FLAGS_CONTEXT: &str = "kubectl-confighistory:flags";

/// A configuration from the flags alone (`--server` and no kubeconfig).
fn bare(flags: &KubeFlags) -> Result<kube::Config> {
    Ok(kube::Config::new(server_url(flags.server.as_deref().unwrap_or_default())?))
}

/// `--server`: a URL, or `host:port` taken as `https://host:port` (client-go's default scheme).
pub fn server_url(s: &str) -> Result<axum::http::Uri> {
    let with_scheme = if s.contains("://") { s.to_owned() } else { format!("https://{s}") };
    let uri: axum::http::Uri = with_scheme.parse().with_context(|| format!("--server {s:?} is not a URL (e.g. https://10.0.0.1:6443)"))?;
    if !matches!(uri.scheme_str(), Some("https" | "http")) || uri.host().is_none_or(str::is_empty) {
        bail!("--server {s:?} is not an http(s) URL with a host (e.g. https://10.0.0.1:6443)");
    }
    Ok(uri)
}

/// Lays the flags over a configuration read from the kubeconfig, as client-go's
/// `DirectClientConfig` merges its overrides: `--server` replaces the server; `--certificate-authority`
/// replaces the CA and `--insecure-skip-tls-verify` (both at once are refused, as kubectl refuses
/// them); `--insecure-skip-tls-verify` alone drops the CA; `--token` replaces the user's token and
/// the other credentials it would otherwise send instead (basic auth, auth provider, exec plugin,
/// token file), a client certificate stays; `--as`, `--as-group`, `--as-uid` replace the
/// kubeconfig user's impersonation.
pub fn apply(config: &mut kube::Config, flags: &KubeFlags) -> Result<()> {
    if let Some(server) = &flags.server {
        config.cluster_url = server_url(server)?;
    }
    if let Some(path) = &flags.certificate_authority {
        if flags.insecure_skip_tls_verify {
            bail!("specifying a root certificates file with --insecure-skip-tls-verify is not allowed: give one of them");
        }
        config.root_cert = Some(read_ca(path)?);
        config.root_cert_file = None;
        config.accept_invalid_certs = false;
    } else if flags.insecure_skip_tls_verify {
        config.accept_invalid_certs = true;
        config.root_cert = None;
        config.root_cert_file = None;
    }
    if let Some(token) = &flags.token {
        let auth = &mut config.auth_info;
        auth.token = token_auth(&token.0)?.token;
        (auth.token_file, auth.username, auth.password, auth.auth_provider, auth.exec) = (None, None, None, None, None);
    }
    if let Some(user) = &flags.as_user {
        config.auth_info.impersonate = Some(user.clone());
    }
    if !flags.as_group.is_empty() {
        config.auth_info.impersonate_groups = Some(flags.as_group.clone());
    }
    if let Some(uid) = &flags.as_uid {
        config.auth_info.impersonate_uid = Some(uid.clone());
    }
    let auth = &config.auth_info;
    if auth.impersonate.is_none() && (auth.impersonate_groups.as_ref().is_some_and(|g| !g.is_empty()) || auth.impersonate_uid.is_some()) {
        bail!("--as-group and --as-uid need a user to impersonate: give --as USER too");
    }
    Ok(())
}

/// The certificates of a PEM file.
fn read_ca(path: &Path) -> Result<Vec<Vec<u8>>> {
    use rustls::pki_types::{pem::PemObject as _, CertificateDer};
    let pem = std::fs::read(path).with_context(|| format!("read --certificate-authority {}", path.display()))?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .map(|c| c.map(|c| c.to_vec()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow::anyhow!("--certificate-authority {}: not a PEM certificate file: {e}", path.display()))?;
    if certs.is_empty() {
        bail!("--certificate-authority {}: no PEM certificate (-----BEGIN CERTIFICATE-----) in it", path.display());
    }
    Ok(certs)
}

/// A kubeconfig user with just this token: kube keeps a token as a `secrecy` string, made here the
/// way kube makes it from a kubeconfig.
fn token_auth(token: &str) -> Result<kube::config::AuthInfo> {
    serde_json::from_value(json!({ "token": token })).context("--token")
}

/// The client for a configuration; from `-v 6` on, each request is logged on stderr.
pub fn client(config: kube::Config, verbosity: u8) -> Result<kube::Client> {
    if verbosity < LOG_REQUESTS {
        return kube::Client::try_from(config).context("create a Kubernetes client");
    }
    let base = config.cluster_url.to_string().trim_end_matches('/').to_owned();
    let builder = kube::client::ClientBuilder::try_from(config).context("create a Kubernetes client")?;
    Ok(builder.with_layer(&RequestLog { base }).build())
}

/// Logs each request as kubectl `-v 6` does: `GET URL 200 OK in 3 milliseconds`. Only the
/// method, URL and status: headers (the token) and bodies (Secret values) never.
#[derive(Clone)]
struct RequestLog {
    base: String,
}

impl<S> tower::Layer<S> for RequestLog {
    type Service = Logged<S>;
    fn layer(&self, inner: S) -> Logged<S> {
        Logged { inner, base: self.base.clone() }
    }
}

#[derive(Clone)]
struct Logged<S> {
    inner: S,
    base: String,
}

impl<S, B, R> tower::Service<Request<B>> for Logged<S>
where
    S: tower::Service<Request<B>, Response = Response<R>>,
    S::Future: Send + 'static,
    S::Error: std::fmt::Display,
{
    type Response = Response<R>;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Response<R>, S::Error>>;

    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let method = request.method().clone();
        let url = request_url(&self.base, request.uri());
        let started = Instant::now();
        let response = self.inner.call(request);
        Box::pin(async move {
            let result = response.await;
            let ms = started.elapsed().as_millis();
            match &result {
                Ok(r) => eprintln!("{}", request_line(method.as_str(), &url, &r.status().to_string(), ms)),
                Err(e) => eprintln!("{}", request_line(method.as_str(), &url, &format!("(no response: {e})"), ms)),
            }
            result
        })
    }
}

/// The URL a request goes to: kube's requests carry the path, the cluster URL is added below.
fn request_url(base: &str, uri: &axum::http::Uri) -> String {
    if uri.scheme().is_some() {
        return uri.to_string();
    }
    format!("{base}{}", uri.path_and_query().map_or("/", |p| p.as_str()))
}

/// One log line, kubectl's `-v 6` format (escaped: an error may quote the server).
pub fn request_line(method: &str, url: &str, status: &str, ms: u128) -> String {
    super::render::escape(&format!("{method} {url} {status} in {ms} milliseconds")).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    const KUBECONFIG: &str = "
apiVersion: v1
kind: Config
current-context: main
clusters:
- name: prod
  cluster: {server: 'https://prod.example:6443', certificate-authority-data: 'bm90IGEgY2VydA=='}
- name: staging
  cluster: {server: 'https://staging.example:6443', insecure-skip-tls-verify: true}
users:
- name: alice
  user: {token: alice-token, as: ops-bot, as-groups: [ops]}
- name: bob
  user: {username: bob, password: hunter2, client-certificate-data: Y2VydA==}
contexts:
- name: main
  context: {cluster: prod, user: alice, namespace: shop}
- name: other
  context: {cluster: staging, user: bob}
";

    fn flags(args: &[&str]) -> super::super::Cli {
        super::super::Cli::try_parse_from([&["kubectl-confighistory"], args, &["list"]].concat()).unwrap()
    }

    async fn loaded(args: &[&str]) -> Result<kube::Config> {
        let cli = flags(args);
        let kc = Kubeconfig::from_yaml(KUBECONFIG).unwrap();
        let f = &cli.conn;
        let options = KubeConfigOptions { context: cli.context.clone(), cluster: f.cluster.clone(), user: f.user.clone() };
        let mut config = kube::Config::from_custom_kubeconfig(kc, &options).await?;
        apply(&mut config, f)?;
        Ok(config)
    }

    fn token(c: &kube::Config) -> Option<String> {
        serde_json::to_value(&c.auth_info).unwrap()["token"].as_str().map(str::to_owned)
    }

    #[tokio::test]
    async fn the_kubeconfig_alone() {
        let c = loaded(&[]).await.unwrap();
        assert_eq!(c.cluster_url.to_string(), "https://prod.example:6443/");
        assert_eq!(c.default_namespace, "shop");
        assert_eq!(token(&c).as_deref(), Some("alice-token"));
        assert_eq!(c.auth_info.impersonate.as_deref(), Some("ops-bot"));
        assert_eq!(c.auth_info.impersonate_groups, Some(vec!["ops".to_owned()]));
        assert!(!c.accept_invalid_certs && c.root_cert.is_some());
    }

    #[tokio::test]
    async fn cluster_and_user_replace_the_contexts() {
        let c = loaded(&["--cluster", "staging"]).await.unwrap();
        assert_eq!(c.cluster_url.host(), Some("staging.example"));
        assert!(c.accept_invalid_certs);
        assert_eq!(token(&c).as_deref(), Some("alice-token"), "the context's user stays");
        let c = loaded(&["--user", "bob"]).await.unwrap();
        assert_eq!(c.cluster_url.host(), Some("prod.example"), "the context's cluster stays");
        assert_eq!(c.auth_info.username.as_deref(), Some("bob"));
        assert_eq!(token(&c), None);
        // The context's namespace, not the user's or cluster's.
        let c = loaded(&["--context", "other", "--user", "alice"]).await.unwrap();
        assert_eq!((c.cluster_url.host(), c.default_namespace.as_str()), (Some("staging.example"), "default"));
        assert_eq!(token(&c).as_deref(), Some("alice-token"));
        assert!(loaded(&["--cluster", "nope"]).await.is_err());
    }

    #[tokio::test]
    async fn server_token_and_impersonation_flags_win() {
        let c = loaded(&["--server", "10.0.0.1:6443", "--token", "flag-token", "--as", "carol", "--as-group", "a", "--as-group=b"])
            .await
            .unwrap();
        assert_eq!(c.cluster_url.to_string(), "https://10.0.0.1:6443/");
        assert_eq!(token(&c).as_deref(), Some("flag-token"));
        assert_eq!(c.auth_info.impersonate.as_deref(), Some("carol"));
        assert_eq!(c.auth_info.impersonate_groups, Some(vec!["a".to_owned(), "b".to_owned()]));
        assert!(c.root_cert.is_some(), "--server keeps the cluster's CA, as kubectl");
        // --token replaces basic auth (which kube would send first), a client certificate stays.
        let c = loaded(&["--user", "bob", "--token", "t", "-s", "https://x.example"]).await.unwrap();
        assert_eq!((c.auth_info.username.as_ref(), c.auth_info.password.is_none()), (None, true));
        assert_eq!(c.auth_info.client_certificate_data.as_deref(), Some("Y2VydA=="));
        // --as-group replaces the kubeconfig user's groups, with its `as`.
        let c = loaded(&["--as-group", "g"]).await.unwrap();
        assert_eq!((c.auth_info.impersonate.as_deref(), c.auth_info.impersonate_groups.clone()), (Some("ops-bot"), Some(vec!["g".into()])));
        // Groups with no user to impersonate are refused, as kubectl refuses them.
        let e = loaded(&["--user", "bob", "--as-group", "g"]).await.unwrap_err();
        assert!(e.to_string().contains("give --as USER"), "{e}");
    }

    #[tokio::test]
    async fn tls_flags() {
        let c = loaded(&["--insecure-skip-tls-verify"]).await.unwrap();
        assert!(c.accept_invalid_certs && c.root_cert.is_none());
        let c = loaded(&["--insecure-skip-tls-verify=false"]).await.unwrap();
        assert!(!c.accept_invalid_certs && c.root_cert.is_some());
        // --certificate-authority replaces the kubeconfig's CA and its insecure-skip-tls-verify.
        let dir = std::env::temp_dir().join(format!("confighistory-ca-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ca = dir.join("ca.crt");
        let cert = rcgen::generate_simple_self_signed(vec!["x.example".into()]).unwrap().cert;
        let b64 = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, cert.der());
        let lines: Vec<&str> = b64.as_bytes().chunks(64).map(|c| std::str::from_utf8(c).unwrap()).collect();
        std::fs::write(&ca, format!("-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n", lines.join("\n"))).unwrap();
        let ca = ca.to_str().unwrap();
        let c = loaded(&["--context", "other", "--certificate-authority", ca]).await.unwrap();
        assert!(!c.accept_invalid_certs);
        assert_eq!(c.root_cert, Some(vec![cert.der().to_vec()]));
        let e = loaded(&["--certificate-authority", ca, "--insecure-skip-tls-verify"]).await.unwrap_err();
        assert!(e.to_string().contains("not allowed"), "{e}");
        std::fs::write(dir.join("empty.crt"), "nothing").unwrap();
        let e = loaded(&["--certificate-authority", dir.join("empty.crt").to_str().unwrap()]).await.unwrap_err();
        assert!(e.to_string().contains("no PEM certificate"), "{e}");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[tokio::test]
    async fn cluster_and_user_serve_a_kubeconfig_without_current_context() {
        let path = std::env::temp_dir().join(format!("confighistory-kubeconfig-{}", std::process::id()));
        std::fs::write(&path, KUBECONFIG.replace("current-context: main\n", "")).unwrap();
        let target = |args: &[&str]| {
            let cli = flags(args);
            Target { kubeconfig: Some(path.clone()), context: cli.context, flags: cli.conn }
        };
        let c = load(&target(&["--cluster", "staging", "--user", "alice"])).await.unwrap();
        assert_eq!((c.cluster_url.host(), token(&c).as_deref()), (Some("staging.example"), Some("alice-token")));
        assert_eq!(c.default_namespace, "default");
        // A context named still decides; with neither, kube's own error.
        let c = load(&target(&["--context", "main", "--cluster", "staging"])).await.unwrap();
        assert_eq!((c.cluster_url.host(), c.default_namespace.as_str()), (Some("staging.example"), "shop"));
        assert!(load(&target(&[])).await.is_err());
        // --server alone needs no context either.
        let c = load(&target(&["-s", "https://s.example", "--token", "t"])).await.unwrap();
        assert_eq!((c.cluster_url.host(), token(&c).as_deref()), (Some("s.example"), Some("t")));
        std::fs::remove_file(&path).ok();
    }

    #[test]
    fn flag_forms() {
        let cli = flags(&["-v", "6", "-s", "https://a.example"]);
        assert_eq!((cli.conn.verbosity, cli.conn.server.as_deref()), (6, Some("https://a.example")));
        assert_eq!(flags(&["--v=8"]).conn.verbosity, 8);
        assert_eq!(flags(&["-v9"]).conn.verbosity, 9);
        assert_eq!(flags(&[]).conn.verbosity, 0);
        // The token never shows in Debug output.
        let cli = flags(&["--token", "s3cr3t-token"]);
        assert!(!format!("{cli:?}").contains("s3cr3t-token"));
        // The flags are global: after the subcommand too.
        let cli = super::super::Cli::try_parse_from(["kubectl-confighistory", "list", "--as", "x", "--as-group", "y"]).unwrap();
        assert_eq!((cli.conn.as_user.as_deref(), cli.conn.as_group.as_slice()), (Some("x"), &["y".to_owned()][..]));
        // --insecure-skip-tls-verify takes no separate value: the next word stays the command.
        let cli = super::super::Cli::try_parse_from(["kubectl-confighistory", "--insecure-skip-tls-verify", "list"]).unwrap();
        assert!(cli.conn.insecure_skip_tls_verify);
    }

    #[test]
    fn server_urls() {
        assert_eq!(server_url("https://a.example:6443").unwrap().to_string(), "https://a.example:6443/");
        assert_eq!(server_url("127.0.0.1:26443").unwrap().to_string(), "https://127.0.0.1:26443/");
        assert!(server_url("ftp://a.example").unwrap_err().to_string().contains("not an http(s) URL"));
        assert!(server_url("https://").is_err());
        assert!(server_url("a b").unwrap_err().to_string().contains("is not a URL"));
    }

    #[test]
    fn request_lines() {
        let uri: axum::http::Uri = "/api/v1/namespaces/shop/configmaps?labelSelector=x".parse().unwrap();
        let url = request_url("https://h:6443", &uri);
        assert_eq!(url, "https://h:6443/api/v1/namespaces/shop/configmaps?labelSelector=x");
        assert_eq!(request_line("GET", &url, "200 OK", 4), format!("GET {url} 200 OK in 4 milliseconds"));
        assert_eq!(request_line("GET", "u", "x\u{1b}[2J", 1), "GET u x\\x1b[2J in 1 milliseconds");
    }
}
