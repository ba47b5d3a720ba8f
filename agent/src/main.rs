//! `skewer`: the command line. `run` is the daemon; `manifests` writes the install manifests.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, Result};
use clap::{Args, Parser, Subcommand, ValueEnum};
use skewer_agent::push::Address;
use skewer_agent::{api, clusters, http, leader, manifests, metrics, push, reconcilers, runtime};
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
    Run(RunArgs),
    /// Render what a Kustomization of PATH would apply, offline, as YAML: its
    /// kustomization.yaml built (or the manifests under it), then, with --kustomization, that
    /// Kustomization's patches, targetNamespace, commonMetadata and owner labels.
    Build {
        /// The directory to render.
        path: PathBuf,
        /// The root of the source (default: the Git work tree PATH is in, else PATH).
        #[arg(long)]
        source_root: Option<PathBuf>,
        /// A Kustomization (YAML file) whose own patches and metadata to apply.
        #[arg(long)]
        kustomization: Option<PathBuf>,
    },
    /// Ask an Application to sync now (`app/<name>`; even without automation), or a
    /// Kustomization to reconcile in full (`ks/<name>`).
    Sync {
        target: skewer_agent::apps::Target,
        #[arg(long, short = 'n', default_value = "default")]
        namespace: String,
        /// Wait until the sync is done (Synced and Healthy, or failed), at most this long.
        #[arg(long, num_args = 0..=1, default_missing_value = "5m", value_parser = parse_duration)]
        wait: Option<Duration>,
    },
    /// Show what skewer manages: `skewer get clusters`, `skewer get applications`.
    Get {
        #[command(subcommand)]
        what: Get,
    },
    /// Pull from an OCI registry: `skewer pull artifact`.
    Pull {
        #[command(subcommand)]
        what: PullWhat,
    },
    /// Push to an OCI registry: `skewer push artifact`.
    Push {
        #[command(subcommand)]
        what: PushWhat,
    },
    /// Sign the artifact at ADDRESS (oci://…:<tag> or oci://…@sha256:…) with a cosign key; the
    /// signature is stored beside it as cosign stores signatures.
    Sign {
        address: Address,
        /// Private key: PKCS#8 PEM, or cosign's encrypted key (password in COSIGN_PASSWORD).
        #[arg(long)]
        key: PathBuf,
        #[command(flatten)]
        registry: RegistryArgs,
    },
    /// Write a new ECDSA P-256 key pair for `sign` and `push artifact --sign-key`:
    /// <PREFIX>.key (unencrypted PKCS#8, mode 0600) and <PREFIX>.pub (for a Secret's `*.pub`).
    GenerateKeyPair {
        #[arg(long, default_value = "cosign")]
        output_key_prefix: PathBuf,
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

#[derive(Subcommand)]
enum PushWhat {
    /// Build DIR into an artifact in Flux's format (config
    /// application/vnd.cncf.flux.config.v1+json, one tar+gzip layer, source/revision/created
    /// annotations) and push it to ADDRESS (oci://<registry>/<repository>:<tag>). The same
    /// files, source, revision and creation time give the same digest. Prints the digest.
    Artifact {
        address: Address,
        /// The directory to push (in a Git work tree, the files Git would commit).
        #[arg(long)]
        path: PathBuf,
        /// Where the files come from (org.opencontainers.image.source), like a repository URL.
        #[arg(long)]
        source: String,
        /// Which revision (org.opencontainers.image.revision), like `main@sha1:<hex>`.
        #[arg(long)]
        revision: String,
        /// org.opencontainers.image.created, RFC 3339 (default: SOURCE_DATE_EPOCH, else the
        /// Unix epoch, so that pushes are reproducible).
        #[arg(long)]
        created: Option<String>,
        /// Sign the pushed artifact with this cosign key.
        #[arg(long)]
        sign_key: Option<PathBuf>,
        #[command(flatten)]
        registry: RegistryArgs,
    },
}

#[derive(Subcommand)]
enum PullWhat {
    /// Pull the artifact at ADDRESS (oci://…:<tag> or @sha256:…) as an OCIRepository does
    /// (its first layer read within limits, hostile entries refused) and write its files to
    /// --output, if given. Prints the revision.
    Artifact {
        address: Address,
        /// A directory that does not exist yet or is empty; without it nothing is written
        /// (the artifact is only checked: limits, entries, signatures).
        #[arg(long, short = 'o')]
        output: Option<PathBuf>,
        /// Refuse the artifact unless a cosign signature by one of these public keys names it.
        #[arg(long, conflicts_with = "trusted_root")]
        verify_key: Vec<PathBuf>,
        /// Refuse the artifact unless a keyless cosign signature names it, checked offline
        /// against this Sigstore trusted root (trusted_root.json).
        #[arg(long, requires_all = ["certificate_identity_regexp", "certificate_oidc_issuer_regexp"])]
        trusted_root: Option<PathBuf>,
        /// With --trusted-root: the signer's certificate subject (email or URI) must match.
        #[arg(long, requires = "trusted_root")]
        certificate_identity_regexp: Option<String>,
        /// With --trusted-root: the signer's OIDC issuer must match.
        #[arg(long, requires = "trusted_root")]
        certificate_oidc_issuer_regexp: Option<String>,
        #[command(flatten)]
        registry: RegistryArgs,
    },
}

#[derive(Args)]
struct RegistryArgs {
    /// `<user>:<password>` for the registry (default: its entry in ~/.docker/config.json).
    #[arg(long, env = "SKEWER_REGISTRY_CREDS", hide_env_values = true)]
    creds: Option<String>,
    /// Plain HTTP, for registries without TLS.
    #[arg(long)]
    insecure: bool,
}

impl RegistryArgs {
    fn access(&self, address: &Address) -> Result<skewer_sources::oci::registry::Access> {
        Ok(skewer_sources::oci::registry::Access {
            login: push::login(self.creds.as_deref(), &address.repo.registry)?,
            insecure: self.insecure,
        })
    }
}

/// The creation time of a pushed artifact when none is given: SOURCE_DATE_EPOCH (the
/// reproducible-builds convention), else the Unix epoch.
fn created_default() -> Result<String> {
    let seconds = match std::env::var("SOURCE_DATE_EPOCH") {
        Ok(s) => s
            .trim()
            .parse::<i64>()
            .context("SOURCE_DATE_EPOCH: not a number of seconds")?,
        Err(_) => 0,
    };
    let t = jiff::Timestamp::from_second(seconds).context("SOURCE_DATE_EPOCH: out of range")?;
    Ok(t.to_string())
}

#[derive(Subcommand)]
enum Get {
    /// Kustomizations: ready, applied revision, age, and why they are not Ready.
    #[command(alias = "ks", alias = "kustomization")]
    Kustomizations(ListArgs),
    /// GitRepositories and OCIRepositories: ready, stored revision, age, message.
    #[command(alias = "source")]
    Sources(ListArgs),
    /// Receivers: ready, webhook path, age, message.
    #[command(alias = "receiver")]
    Receivers(ListArgs),
    /// Applications: sync status, health, revision, and why they are not Ready.
    #[command(alias = "apps", alias = "app", alias = "application")]
    Applications(ListArgs),
    /// The hub and every registered cluster: server, version, reachable, how many
    /// Kustomizations target it, last error.
    Clusters {
        /// Namespace of the cluster Secrets.
        #[arg(
            long,
            short = 'n',
            default_value = "skewer-system",
            env = "SKEWER_CLUSTER_SECRET_NAMESPACE"
        )]
        namespace: String,
        /// Read cluster Secrets from every namespace.
        #[arg(long, short = 'A')]
        all_namespaces: bool,
        /// Output format.
        #[arg(long, short = 'o', value_enum, default_value_t = Output::Table)]
        output: Output,
    },
}

/// Which objects `get` lists, and how it prints them.
#[derive(Args)]
struct ListArgs {
    #[arg(long, short = 'n', default_value = "default")]
    namespace: String,
    /// Every namespace.
    #[arg(long, short = 'A')]
    all_namespaces: bool,
    #[arg(long, short = 'o', value_enum, default_value_t = Output::Table)]
    output: Output,
}

#[derive(Clone, Copy, ValueEnum)]
enum Output {
    Table,
    Yaml,
    Json,
}

#[derive(Args)]
struct RunArgs {
    /// Watch only this namespace (default: all).
    #[arg(long, env = "SKEWER_NAMESPACE")]
    namespace: Option<String>,
    /// Where Git working repositories and artifacts are kept.
    #[arg(long, default_value = "/tmp/skewer", env = "SKEWER_DATA_DIR")]
    data_dir: PathBuf,
    /// Server-side apply requests in flight per Kustomization.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Objects of one kind reconciled at once.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..))]
    max_concurrent_reconciles: u16,
    /// Re-apply every Kustomization in full this often (like `6h`) even when its revision and
    /// spec are unchanged and no drift was seen. Off by default: drift is corrected from watches.
    #[arg(long, value_parser = parse_duration)]
    full_sync_interval: Option<Duration>,
    /// Elect a leader through a Lease, so that only one replica writes.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    leader_elect: bool,
    /// Namespace of the Lease (default: --namespace, else `default`).
    #[arg(long, env = "SKEWER_LEADER_ELECTION_NAMESPACE")]
    leader_election_namespace: Option<String>,
    /// How long a lease lasts without renewal; a follower takes over after it.
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    lease_duration: Duration,
    /// Let GitRepositories use local paths (`file://`) when running in a cluster, where they
    /// are the pod's own files. Outside a cluster they are allowed; skewer's data directory
    /// never is.
    #[arg(long)]
    allow_file_urls: bool,
    /// Impersonate this ServiceAccount (of the Kustomization's own namespace) for every
    /// Kustomization without `serviceAccountName` (multi-tenancy lockdown).
    #[arg(long)]
    default_service_account: Option<String>,
    /// Refuse sources and dependencies in another namespace than the Kustomization's.
    #[arg(long)]
    no_cross_namespace_refs: bool,
    /// Reconcile only objects with these labels (like `shard=a`), so several skewers can share
    /// one hub.
    #[arg(long)]
    watch_label_selector: Option<String>,
    /// Namespace of the cluster Secrets (default: --namespace, else the pod's namespace, else
    /// `skewer-system`).
    #[arg(long, env = "SKEWER_CLUSTER_SECRET_NAMESPACE")]
    cluster_secret_namespace: Option<String>,
    /// Read cluster Secrets from every namespace.
    #[arg(long, conflicts_with = "cluster_secret_namespace")]
    cluster_secrets_all_namespaces: bool,
    /// Serve sources' artifacts over HTTP on this address (like `0.0.0.0:9090`), as Flux's
    /// source-controller does, for controllers that consume Flux sources; each source reports
    /// its URL in `status.artifact.url`. Off when absent.
    #[arg(long, env = "SKEWER_STORAGE_ADDR")]
    storage_addr: Option<std::net::SocketAddr>,
    /// The host[:port] other controllers reach --storage-addr at (like
    /// `skewer.skewer-system.svc.cluster.local.`); default: --storage-addr itself.
    #[arg(long, env = "SKEWER_STORAGE_ADV_ADDR")]
    storage_adv_addr: Option<String>,
    /// Serve Receivers' webhooks on this address (like `0.0.0.0:9292`); off when absent.
    #[arg(long, env = "SKEWER_WEBHOOK_ADDR")]
    webhook_addr: Option<std::net::SocketAddr>,
    /// Argo CD's webhook endpoint (`POST /api/webhook` on --webhook-addr) reads the hosts'
    /// secrets from this Secret (`namespace/name`), keys `webhook.github.secret`,
    /// `webhook.gitlab.secret`, `webhook.gogs.secret`, `webhook.bitbucketserver.secret`, as
    /// Argo CD keeps them in `argocd-secret`. Off when absent.
    #[arg(long, env = "SKEWER_ARGOCD_WEBHOOK_SECRET", value_parser = parse_secret_name)]
    argocd_webhook_secret: Option<(String, String)>,
    /// Address for /metrics, /healthz and /readyz.
    #[arg(long, default_value = "0.0.0.0:8080", env = "SKEWER_METRICS_ADDR")]
    metrics_addr: std::net::SocketAddr,
}

/// What `get` lists with [`get_rows`].
#[derive(Clone, Copy, PartialEq, Eq)]
enum Listed {
    Kustomizations,
    Sources,
    Receivers,
}

/// Prints the objects `which` names as `args` asks.
async fn get_rows(which: Listed, args: &ListArgs) -> Result<()> {
    let client = hub_client().await?;
    let namespace = (!args.all_namespaces).then_some(args.namespace.as_str());
    let rows = match which {
        Listed::Kustomizations => skewer_agent::get::kustomizations(&client, namespace).await,
        Listed::Sources => skewer_agent::get::sources(&client, namespace).await,
        Listed::Receivers => skewer_agent::get::receivers(&client, namespace).await,
    }
    .context("listing")?;
    match args.output {
        Output::Table => {
            let kinds = which == Listed::Sources;
            print!(
                "{}",
                skewer_agent::get::table(&rows, args.all_namespaces, kinds)
            );
        }
        Output::Json => println!("{}", serde_json::to_string_pretty(&rows)?),
        Output::Yaml => print!("{}", serde_saphyr::to_string(&rows)?),
    }
    Ok(())
}

/// A client of the hub from KUBECONFIG (or in-cluster), for the commands that read it.
async fn hub_client() -> Result<kube::Client> {
    let config = kube::Config::infer()
        .await
        .context("reading the cluster configuration (KUBECONFIG or in-cluster)")?;
    kube::Client::try_from(config).context("connecting to the hub")
}

fn parse_secret_name(s: &str) -> Result<(String, String), String> {
    match s.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() => Ok((ns.into(), name.into())),
        _ => Err(format!("'{s}': give it as <namespace>/<name>")),
    }
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    api::duration::parse(s).map_err(|e| e.to_string())
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
        Command::Run(args) => run(args).await,
        Command::Build {
            path,
            source_root,
            kustomization,
        } => {
            let yaml = skewer_agent::build::render(
                &path,
                source_root.as_deref(),
                kustomization.as_deref(),
            )?;
            print!("{yaml}");
            Ok(())
        }
        Command::Get {
            what: Get::Kustomizations(args),
        } => get_rows(Listed::Kustomizations, &args).await,
        Command::Get {
            what: Get::Sources(args),
        } => get_rows(Listed::Sources, &args).await,
        Command::Get {
            what: Get::Receivers(args),
        } => get_rows(Listed::Receivers, &args).await,
        Command::Get {
            what: Get::Applications(args),
        } => {
            let client = hub_client().await?;
            let namespace = (!args.all_namespaces).then_some(args.namespace.as_str());
            let rows = skewer_agent::apps::list(&client, namespace)
                .await
                .context("listing Applications")?;
            match args.output {
                Output::Table => {
                    print!("{}", skewer_agent::apps::table(&rows, args.all_namespaces))
                }
                Output::Json => println!("{}", serde_json::to_string_pretty(&rows)?),
                Output::Yaml => print!("{}", serde_saphyr::to_string(&rows)?),
            }
            Ok(())
        }
        Command::Sync {
            target,
            namespace,
            wait,
        } => {
            let client = hub_client().await?;
            let line = skewer_agent::apps::sync(&client, &namespace, &target, wait).await?;
            println!("{line}");
            Ok(())
        }
        Command::Get {
            what:
                Get::Clusters {
                    namespace,
                    all_namespaces,
                    output,
                },
        } => {
            let config = kube::Config::infer()
                .await
                .context("reading the cluster configuration (KUBECONFIG or in-cluster)")?;
            let server = config.cluster_url.to_string();
            let client = kube::Client::try_from(config).context("connecting to the hub")?;
            let namespace = (!all_namespaces).then_some(namespace.as_str());
            let rows = clusters::list::list(&client, server.trim_end_matches('/'), namespace)
                .await
                .context("listing cluster Secrets")?;
            match output {
                Output::Table => print!("{}", clusters::list::table(&rows)),
                Output::Json => println!("{}", serde_json::to_string_pretty(&rows)?),
                Output::Yaml => print!("{}", serde_saphyr::to_string(&rows)?),
            }
            Ok(())
        }
        Command::Push {
            what:
                PushWhat::Artifact {
                    address,
                    path,
                    source,
                    revision,
                    created,
                    sign_key,
                    registry,
                },
        } => {
            let created = match created {
                Some(c) => c,
                None => created_default()?,
            };
            let digest = push::push(push::Push {
                address: &address,
                path: &path,
                source: &source,
                revision: &revision,
                created: &created,
                access: registry.access(&address)?,
                sign_key: sign_key.as_deref(),
            })
            .await?;
            println!("{digest}");
            Ok(())
        }
        Command::Pull {
            what:
                PullWhat::Artifact {
                    address,
                    output,
                    verify_key,
                    trusted_root,
                    certificate_identity_regexp,
                    certificate_oidc_issuer_regexp,
                    registry,
                },
        } => {
            let keyless = trusted_root.map(|root| {
                let identity = (
                    certificate_oidc_issuer_regexp.unwrap_or_default(),
                    certificate_identity_regexp.unwrap_or_default(),
                );
                (root, identity)
            });
            let trust = push::trust(&verify_key, keyless)?;
            let revision = push::pull(
                &address,
                output.as_deref(),
                trust.as_ref(),
                registry.access(&address)?,
            )
            .await?;
            println!("{revision}");
            Ok(())
        }
        Command::Sign {
            address,
            key,
            registry,
        } => {
            let digest = push::sign(&address, &key, registry.access(&address)?).await?;
            println!("{digest}");
            Ok(())
        }
        Command::GenerateKeyPair { output_key_prefix } => {
            push::generate_key_pair(&output_key_prefix)?;
            eprintln!(
                "wrote {} and {}",
                output_key_prefix.with_extension("key").display(),
                output_key_prefix.with_extension("pub").display()
            );
            Ok(())
        }
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

async fn run(args: RunArgs) -> Result<()> {
    let config = kube::Config::infer()
        .await
        .context("reading the cluster configuration (KUBECONFIG or in-cluster)")?;
    let client = kube::Client::try_from(config.clone()).context("connecting to the cluster")?;
    let namespace = args.namespace;
    let metrics = std::sync::Arc::new(metrics::Metrics::default());
    let ready = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let listener = tokio::net::TcpListener::bind(args.metrics_addr)
        .await
        .with_context(|| format!("listening on {} (--metrics-addr)", args.metrics_addr))?;
    tokio::spawn(http::serve(listener, metrics.clone(), ready.clone()));
    client
        .apiserver_version()
        .await
        .context("reaching the API server")?;
    ready.store(true, std::sync::atomic::Ordering::Relaxed);
    // Without election, leadership is never lost.
    let lost: std::pin::Pin<Box<dyn std::future::Future<Output = leader::Lost> + Send>> =
        if args.leader_elect {
            let lease_ns = args
                .leader_election_namespace
                .or_else(|| namespace.clone())
                .unwrap_or_else(|| "default".into());
            let host = std::env::var("POD_NAME").or_else(|_| {
                std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_string())
            });
            let me = format!(
                "{}-{}",
                host.unwrap_or_else(|_| "skewer".into()),
                std::process::id()
            );
            let api = kube::Api::namespaced(client.clone(), &lease_ns);
            Box::pin(leader::lead(api, "skewer-leader".into(), me, args.lease_duration).await)
        } else {
            Box::pin(std::future::pending())
        };
    let settings = runtime::Settings {
        concurrency: args.concurrency,
        full_sync: args.full_sync_interval,
        max_concurrent_reconciles: args.max_concurrent_reconciles,
        data_dir: args.data_dir.clone(),
        local_sources: args.allow_file_urls
            || std::env::var_os("KUBERNETES_SERVICE_HOST").is_none(),
        default_service_account: args.default_service_account,
        cross_namespace_refs: !args.no_cross_namespace_refs,
        storage_url: args.storage_addr.map(|addr| {
            let host = args
                .storage_adv_addr
                .clone()
                .unwrap_or_else(|| addr.to_string());
            format!("http://{host}")
        }),
    };
    if let Some(selector) = args.watch_label_selector {
        runtime::watch::select(selector);
    }
    let secrets_ns = if args.cluster_secrets_all_namespaces {
        None
    } else {
        Some(
            args.cluster_secret_namespace
                .or_else(|| namespace.clone())
                .or_else(|| std::env::var("POD_NAMESPACE").ok())
                .unwrap_or_else(|| "skewer-system".into()),
        )
    };
    let registry = clusters::Registry::new(secrets_ns.as_deref());
    registry.watch(&client, secrets_ns.as_deref());
    let ctx = runtime::Context::new(config, client, registry, &args.data_dir, settings, metrics)
        .await
        .context("asking the API server its version")?;
    if let Some(addr) = args.storage_addr {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("listening on {addr} (--storage-addr)"))?;
        tokio::spawn(skewer_agent::storage::serve(
            listener,
            ctx.client.clone(),
            ctx.store.clone(),
        ));
    }
    if let Some(addr) = args.webhook_addr {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("listening on {addr} (--webhook-addr)"))?;
        tracing::info!(%addr, "serving webhooks");
        let argo = skewer_agent::webhook::ArgoEndpoint {
            secret: args.argocd_webhook_secret.clone(),
            scope: namespace.clone(),
        };
        tokio::spawn(skewer_agent::webhook::serve(listener, ctx.clone(), argo));
    }
    tracing::info!(namespace = namespace.as_deref().unwrap_or("<all>"), data_dir = %args.data_dir.display(), "skewer running");
    tokio::select! {
        () = reconcilers::run(ctx, namespace) => Ok(()),
        // A leader that can no longer renew must stop writing: exit, and let a replica (or
        // the restarted process) take over.
        lost = lost => {
            tracing::error!(reason = %lost, "no longer the leader; exiting");
            Err(anyhow::anyhow!("{lost}"))
        }
    }
}
