//! Which cluster a command talks to: the kubeconfig (`--kubeconfig`, else `KUBECONFIG`, else
//! `~/.kube/config`, else the Pod's service account) and its context (`--context`, else the
//! current one); and errors said in those terms when the cluster cannot be reached or has no
//! skewer CRDs.

use std::path::PathBuf;
use std::sync::OnceLock;

use anyhow::{Context as _, Result};
use kube::config::{KubeConfigOptions, Kubeconfig};

/// `--kubeconfig` and `--context`, as given.
#[derive(Clone, Default)]
pub struct Choice {
    pub kubeconfig: Option<PathBuf>,
    pub context: Option<String>,
}

/// Where the command talks to, for messages.
struct Where {
    server: String,
    context: Option<String>,
}

static CHOICE: OnceLock<Choice> = OnceLock::new();
static WHERE: OnceLock<Where> = OnceLock::new();

/// Sets what every later [`config`] reads (once, from the command line).
pub fn choose(choice: Choice) {
    let _ = CHOICE.set(choice);
}

/// The chosen cluster's configuration.
pub async fn config() -> Result<kube::Config> {
    let choice = CHOICE.get().cloned().unwrap_or_default();
    let (config, context) = match (choice.kubeconfig, choice.context) {
        (None, None) => {
            let config = kube::Config::infer().await.context(
                "reading the cluster configuration (KUBECONFIG, ~/.kube/config, or in-cluster)",
            )?;
            let context = Kubeconfig::read().ok().and_then(|k| k.current_context);
            (config, context)
        }
        (path, context) => {
            let kubeconfig = match &path {
                Some(p) => Kubeconfig::read_from(p)
                    .with_context(|| format!("reading the kubeconfig {}", p.display()))?,
                None => Kubeconfig::read()
                    .context("reading the kubeconfig (KUBECONFIG or ~/.kube/config)")?,
            };
            if let Some(name) = &context
                && !kubeconfig.contexts.iter().any(|c| &c.name == name)
            {
                let known: Vec<&str> = kubeconfig
                    .contexts
                    .iter()
                    .map(|c| c.name.as_str())
                    .collect();
                anyhow::bail!(
                    "--context {name}: the kubeconfig has no such context (it has: {})",
                    known.join(", ")
                );
            }
            let current = context
                .clone()
                .or_else(|| kubeconfig.current_context.clone());
            let options = KubeConfigOptions {
                context,
                ..Default::default()
            };
            let config = kube::Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .with_context(|| {
                    format!(
                        "reading context {} of the kubeconfig",
                        current.as_deref().unwrap_or("<current>")
                    )
                })?;
            (config, current)
        }
    };
    let server = config.cluster_url.to_string();
    let _ = WHERE.set(Where {
        server: server.trim_end_matches('/').to_string(),
        context,
    });
    Ok(config)
}

/// The value of the last of `names` (`--namespace`, `-n`) on the command line, as
/// `--flag value` or `--flag=value`, read before the command line is parsed (or while a shell
/// asks for completions).
pub fn flag_in_args(names: &[&str]) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    let mut found = None;
    for (i, a) in args.iter().enumerate() {
        for name in names {
            if let Some(v) = a.strip_prefix(&format!("{name}=")) {
                found = Some(v.to_string());
            } else if a == name {
                found = args.get(i + 1).cloned().or(found.take());
            }
        }
    }
    found
}

/// The namespace commands act in without `-n`: the chosen context's (read before the command
/// line is parsed, from `--kubeconfig` and `--context` as given), else the Pod's when run in
/// one, else `default`, as kubectl chooses it.
pub fn default_namespace() -> String {
    static NAMESPACE: OnceLock<String> = OnceLock::new();
    NAMESPACE
        .get_or_init(|| {
            let flag = |name: &str| flag_in_args(&[name]);
            let kubeconfig = match flag("--kubeconfig") {
                Some(path) => Kubeconfig::read_from(path).ok(),
                None => Kubeconfig::read().ok(),
            };
            let of_context = kubeconfig.and_then(|k| {
                let name = flag("--context").or(k.current_context)?;
                k.contexts
                    .into_iter()
                    .find(|c| c.name == name)?
                    .context?
                    .namespace
            });
            of_context
                .or_else(|| {
                    std::fs::read_to_string(
                        "/var/run/secrets/kubernetes.io/serviceaccount/namespace",
                    )
                    .ok()
                })
                .map(|n| n.trim().to_string())
                .filter(|n| !n.is_empty())
                .unwrap_or_else(|| "default".into())
        })
        .clone()
}

/// The chosen cluster's API server (`https://host:port`), once [`config`] has read it.
pub fn server() -> Option<&'static str> {
    WHERE.get().map(|w| w.server.as_str())
}

/// A client of the chosen cluster.
pub async fn client() -> Result<kube::Client> {
    let config = config().await?;
    kube::Client::try_from(config).context("building a client of the cluster")
}

/// What went wrong, in the user's terms, when `e` is the cluster being out of reach or
/// serving none of skewer's kinds; `None` for anything else.
pub fn explain(e: &anyhow::Error) -> Option<String> {
    let at = WHERE.get()?;
    let context = at
        .context
        .as_deref()
        .map(|c| format!(" (context {c})"))
        .unwrap_or_default();
    let typed = e.chain().find_map(|c| c.downcast_ref::<kube::Error>());
    // Some commands carry the API's error as text.
    let text = format!("{e:#}");
    let no_crds = match typed {
        Some(kube::Error::Api(s)) => s.code == 404 && s.message.contains("page not found"),
        _ => text.contains("404 page not found"),
    };
    if no_crds {
        return Some(format!(
            "skewer's CRDs are not installed on {}{context}: run `skewer install`",
            at.server
        ));
    }
    let unreachable = match typed {
        Some(kube::Error::HyperError(_) | kube::Error::Service(_)) => true,
        _ => text.contains("client error (Connect)"),
    };
    // What the command was doing, when it said (`checking the cluster … (nothing was pushed)`).
    let doing = match typed {
        Some(k) if k.to_string() != e.to_string() => format!("{e}: "),
        _ => String::new(),
    };
    unreachable.then(|| {
        format!(
            "{doing}cannot reach the API server at {}{context}: {}. Is the cluster running, and is it the one you meant (--kubeconfig, --context)?",
            at.server,
            e.root_cause()
        )
    })
}
