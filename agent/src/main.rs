//! `skewer`: the command line. `run` is the daemon; `manifests` writes the install manifests.

use std::path::PathBuf;

use anyhow::{Context as _, Result};
use clap::{Parser, Subcommand, ValueEnum};
use skewer_agent::{controllers, manifests};
use tracing_subscriber::EnvFilter;

#[derive(Parser)]
#[command(
    name = "skewer",
    version,
    about = "GitOps reconciler: keeps clusters in step with Git."
)]
struct Cli {
    /// Log format.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "SKEWER_LOG_FORMAT")]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Run the reconciler daemon against the cluster of the current kubeconfig.
    Run {
        /// Watch only this namespace (default: all).
        #[arg(long, env = "SKEWER_NAMESPACE")]
        namespace: Option<String>,
        /// Where Git working repositories and artifacts are kept.
        #[arg(long, default_value = "/tmp/skewer", env = "SKEWER_DATA_DIR")]
        data_dir: PathBuf,
        /// Server-side apply requests in flight per Kustomization.
        #[arg(long, default_value_t = 16)]
        concurrency: usize,
        /// Re-apply every Kustomization in full this often (like `6h`) even when its revision
        /// and spec are unchanged and no drift was seen. Off by default: drift is corrected
        /// from watches.
        #[arg(long, value_parser = parse_duration)]
        full_sync_interval: Option<std::time::Duration>,
    },
    /// Write skewer's install manifests (CRDs, RBAC, Deployment) generated from its types.
    Manifests {
        /// Directory to write into; prints to stdout when absent.
        #[arg(long)]
        out: Option<PathBuf>,
        #[arg(long, default_value = manifests::DEFAULT_IMAGE)]
        image: String,
    },
}

#[tokio::main]
async fn main() -> Result<()> {
    let cli = Cli::parse();
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,kube=warn"));
    let fmt = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match cli.log_format {
        LogFormat::Json => fmt.json().init(),
        LogFormat::Text => fmt.init(),
    }
    // kube uses rustls with ring; install it as the process-wide provider explicitly.
    let _ = rustls::crypto::ring::default_provider().install_default();

    match cli.command {
        Command::Run {
            namespace,
            data_dir,
            concurrency,
            full_sync_interval,
        } => run(namespace, data_dir, concurrency, full_sync_interval).await,
        Command::Manifests { out, image } => {
            let files = manifests::files(&image)?;
            match out {
                Some(dir) => {
                    std::fs::create_dir_all(&dir)
                        .with_context(|| format!("creating {}", dir.display()))?;
                    for (name, content) in files {
                        let path = dir.join(name);
                        std::fs::write(&path, content)
                            .with_context(|| format!("writing {}", path.display()))?;
                    }
                }
                None => files.iter().for_each(|(_, c)| print!("{c}")),
            }
            Ok(())
        }
    }
}

fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    skewer_sources::duration::parse(s)
}

async fn run(
    namespace: Option<String>,
    data_dir: PathBuf,
    concurrency: usize,
    full_sync: Option<std::time::Duration>,
) -> Result<()> {
    let client = kube::Client::try_default()
        .await
        .context("connecting to the cluster (KUBECONFIG or in-cluster)")?;
    let ctx = controllers::Context::new(client, &data_dir, concurrency, full_sync)
        .await
        .context("asking the API server its version")?;
    tracing::info!(namespace = namespace.as_deref().unwrap_or("<all>"), data_dir = %data_dir.display(), "skewer running");
    tokio::join!(
        controllers::gitrepository::run(ctx.clone(), namespace.clone()),
        controllers::kustomization::run(ctx, namespace),
    );
    Ok(())
}
