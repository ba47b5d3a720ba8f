//! `skewer`: the command line. `run` is the daemon; the other commands are in `cli/`.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, Result};
use clap::{Args, Parser, Subcommand, ValueEnum};
use skewer_agent::cli::control;
use skewer_agent::cli::push::Address;
use skewer_agent::cli::term::{Ended, Exit, Paint, Progress, paint};
use skewer_agent::cli::{bootstrap, push};
use skewer_agent::view::named::{ControlError, Named};
use skewer_agent::{api, clusters, http, leader, manifests, metrics, reconcilers, runtime};
use std::process::ExitCode;
use tracing_subscriber::EnvFilter;

#[derive(Parser)]
#[command(
    name = "skewer",
    version,
    about = "GitOps reconciler: keeps clusters in step with Git.",
    after_help = AFTER_HELP,
)]
struct Cli {
    /// Log format.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "SKEWER_LOG_FORMAT")]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

const AFTER_HELP: &str = "Start here:
  skewer bootstrap git --url https://git.example.com/fleet.git --path clusters/prod --username git
  skewer get kustomizations -A
  skewer tree ks/skewer-system -n skewer-system

Exit codes: 0 done (in sync, Ready); 1 differences found, or the object ended not Ready;
2 wrong command line; 3 could not do the work (unreachable, refused, missing); 4 timed out.
Colour only on a terminal, never with NO_COLOR set.";

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
    /// Install skewer from a Git repository that it then manages: commit its manifests,
    /// apply them, wait until it applies itself.
    Bootstrap {
        #[command(subcommand)]
        how: BootstrapHow,
    },
    /// Apply skewer's install manifests (CRDs, namespace skewer-system, RBAC, Deployment) to
    /// the cluster of the current kubeconfig, without Git; only what differs is sent.
    #[command(after_help = "Example:\n  skewer install --version v0.1.0")]
    Install(ImageArgs),
    /// Remove skewer and its CRDs. The workloads it applied stay (their Kustomizations and
    /// Applications are released first) unless --prune-managed. Asks first; without a
    /// terminal, refuses unless --yes.
    #[command(after_help = "Example:\n  skewer uninstall --yes")]
    Uninstall {
        /// Do not ask.
        #[arg(long, short = 'y')]
        yes: bool,
        /// Also delete every object the Kustomizations and Applications applied.
        #[arg(long)]
        prune_managed: bool,
    },
    /// Show what a local directory would change if a Kustomization applied it: a server-side
    /// dry run of each object (nothing is written), field by field, Secrets masked. Exit code
    /// 1 when anything differs, 0 when nothing does.
    #[command(after_help = "Example:\n  skewer diff ./apps/web --kustomization web -n apps")]
    Diff {
        /// The directory to compare (as the Kustomization's spec.path would be).
        path: PathBuf,
        /// The Kustomization whose patches, labels and inventory apply.
        #[arg(long, short = 'k')]
        kustomization: String,
        #[arg(long, short = 'n', default_value = "default")]
        namespace: String,
        /// The root of the source (default: the Git work tree PATH is in, else PATH).
        #[arg(long)]
        source_root: Option<PathBuf>,
    },
    /// Apply a local directory, then again within milliseconds of every saved change, pruning
    /// what you delete: the inner loop of writing manifests. Ctrl-C stops.
    #[command(after_help = "Example:\n  skewer dev ./apps/web -n dev")]
    Dev {
        dir: PathBuf,
        /// The owner the objects are labeled with (default: dev-<directory name>).
        #[arg(long)]
        name: Option<String>,
        #[arg(long, short = 'n', default_value = "default")]
        namespace: String,
        /// Keep objects whose files were deleted.
        #[arg(long)]
        no_prune: bool,
        /// Wait for the applied objects to be healthy after each apply, at most this long.
        #[arg(long, value_parser = parse_duration)]
        wait: Option<Duration>,
        /// The root of the source (default: the Git work tree DIR is in, else DIR).
        #[arg(long)]
        source_root: Option<PathBuf>,
    },
    /// Ask an object to reconcile now (an Application to sync, even without automation).
    #[command(
        after_help = "Examples:\n  skewer reconcile ks/web --with-source --wait\n  skewer reconcile gitrepository/fleet -n skewer-system\n  skewer reconcile app/guestbook -n argocd --wait=2m"
    )]
    Reconcile(ReconcileArgs),
    /// Ask an Application to sync now, or a Kustomization to reconcile (as `reconcile`).
    #[command(after_help = "Example:\n  skewer sync app/guestbook -n argocd --wait")]
    Sync(ReconcileArgs),
    /// Stop reconciling an object (spec.suspend: true): Kustomizations, sources, Receivers.
    #[command(after_help = "Example:\n  skewer suspend ks/web -n apps")]
    Suspend(TargetArgs),
    /// Reconcile a suspended object again.
    #[command(after_help = "Example:\n  skewer resume ks/web -n apps")]
    Resume(TargetArgs),
    /// What a Kustomization or Application applied, as a tree with each object's health;
    /// nested Kustomizations are expanded.
    #[command(after_help = "Example:\n  skewer tree ks/skewer-system -n skewer-system")]
    Tree(TargetArgs),
    /// Where an object came from: the Kustomization or Application that applied it, its
    /// source and the revision applied, the commit's author and message (Git), and the file
    /// and document within the source.
    #[command(
        after_help = "Examples:\n  skewer why configmap/settings -n team-a\n  skewer why deployment.apps/web -n shop -o json"
    )]
    Why {
        /// `<kind>/<name>`: a kind (`ConfigMap`), its plural, `plural.group`, or a short name
        /// (`cm`, `deploy`, `svc`, …).
        target: String,
        #[arg(long, short = 'n', default_value = "default")]
        namespace: String,
        #[arg(long, short = 'o', value_enum, default_value_t = Output::Table)]
        output: Output,
    },
    /// The Events skewer recorded, oldest first.
    #[command(after_help = "Example:\n  skewer events --for ks/web -n apps")]
    Events {
        /// Only the Events about this object (`ks/<name>`, `app/<name>`, …).
        #[arg(long = "for")]
        only: Option<Named>,
        #[command(flatten)]
        list: ListArgs,
    },
    /// Show what skewer manages.
    #[command(
        after_help = "Examples:\n  skewer get ks -A\n  skewer get sources -n skewer-system -o yaml\n  skewer get apps -A --watch"
    )]
    Get {
        #[command(subcommand)]
        what: Get,
    },
    /// Print a shell completion script.
    #[command(
        after_help = "Examples:\n  skewer completion bash > /etc/bash_completion.d/skewer\n  skewer completion zsh > \"${fpath[1]}/_skewer\"\n  skewer completion fish > ~/.config/fish/completions/skewer.fish"
    )]
    Completion { shell: clap_complete::Shell },
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
enum BootstrapHow {
    /// Bootstrap from a Git repository: commit skewer's install and sync manifests under
    /// <PATH>/skewer-system, push them, store the credentials in a Secret (never in Git),
    /// apply, and wait until skewer's own Kustomization is Ready. Running it again changes
    /// nothing; with another --version it upgrades skewer through Git.
    #[command(
        after_help = "Examples:\n  SKEWER_GIT_PASSWORD=$TOKEN skewer bootstrap git --url https://git.example.com/fleet.git \\\n      --branch main --path clusters/prod --username git\n  skewer bootstrap git --url ssh://git@git.example.com/fleet.git --path clusters/prod \\\n      --private-key-file ~/.ssh/fleet --known-hosts-file ~/.ssh/known_hosts"
    )]
    Git(BootstrapGit),
}

#[derive(Args)]
struct BootstrapGit {
    /// The repository (https://, http:// or ssh://).
    #[arg(long)]
    url: String,
    #[arg(long, default_value = "main")]
    branch: String,
    /// This cluster's directory in the repository.
    #[arg(long)]
    path: String,
    /// Basic-auth user; the password or token is read from SKEWER_GIT_PASSWORD.
    #[arg(long, conflicts_with = "private_key_file")]
    username: Option<String>,
    /// SSH private key for ssh:// URLs.
    #[arg(long, requires = "known_hosts_file")]
    private_key_file: Option<PathBuf>,
    /// known_hosts holding the Git server's host key (for ssh:// URLs).
    #[arg(long)]
    known_hosts_file: Option<PathBuf>,
    /// PEM bundle of the CA the Git server's certificate chains to.
    #[arg(long)]
    ca_file: Option<PathBuf>,
    /// How often skewer fetches its own repository.
    #[arg(long, default_value = "1m", value_parser = parse_interval)]
    interval: String,
    #[arg(long, default_value = "skewer")]
    author_name: String,
    #[arg(long, default_value = "skewer@localhost")]
    author_email: String,
    /// How long to wait for skewer to apply itself.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    timeout: Duration,
    #[command(flatten)]
    image: ImageArgs,
}

/// Which image of skewer to run.
#[derive(Args)]
struct ImageArgs {
    /// skewer's version (the image tag).
    #[arg(long = "version", default_value = concat!("v", env!("CARGO_PKG_VERSION")))]
    release: String,
    /// The whole image reference; overrides --version.
    #[arg(long)]
    image: Option<String>,
}

impl ImageArgs {
    fn image(&self) -> String {
        self.image
            .clone()
            .unwrap_or_else(|| format!("{}:{}", manifests::IMAGE_REPOSITORY, self.release))
    }
}

/// One object named as `<kind>/<name>` in a namespace.
#[derive(Args)]
struct TargetArgs {
    /// `ks/<name>`, `app/<name>`, `gitrepository/<name>`, `ocirepository/<name>` or
    /// `receiver/<name>`.
    target: Named,
    #[arg(long, short = 'n', default_value = "default")]
    namespace: String,
}

#[derive(Args)]
struct ReconcileArgs {
    #[command(flatten)]
    target: TargetArgs,
    /// Reconcile the Kustomization's source first, and wait for it.
    #[arg(long)]
    with_source: bool,
    /// Wait until it is done (Ready, or Synced and Healthy), at most this long (default 5m).
    #[arg(long, num_args = 0..=1, default_missing_value = "5m", value_parser = parse_duration)]
    wait: Option<Duration>,
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
    /// After the list, print each object again when it changes (Ctrl-C stops).
    #[arg(long, short = 'w')]
    watch: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum UiAuth {
    None,
    Kubernetes,
}

#[derive(Clone, Copy, ValueEnum)]
enum Output {
    Table,
    Yaml,
    Json,
}

#[derive(Args)]
struct RunArgs {
    /// Watch only this namespace (default: all; an empty value is refused, not taken for
    /// all).
    #[arg(long, env = "SKEWER_NAMESPACE", value_parser = parse_namespace)]
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
    #[arg(long, env = "SKEWER_LEADER_ELECTION_NAMESPACE", value_parser = parse_namespace)]
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
    /// Let a Receiver ask objects in other namespaces than its own to reconcile (by default
    /// it reaches only its own namespace; never with --no-cross-namespace-refs).
    #[arg(long, conflicts_with = "no_cross_namespace_refs")]
    cross_namespace_receivers: bool,
    /// Reconcile only objects with these labels (like `shard=a`), so several skewers can share
    /// one hub.
    #[arg(long)]
    watch_label_selector: Option<String>,
    /// Namespace of the cluster Secrets (default: --namespace, else the pod's namespace, else
    /// `skewer-system`).
    #[arg(long, env = "SKEWER_CLUSTER_SECRET_NAMESPACE", value_parser = parse_namespace)]
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
    /// Serve the read-only dashboard on this address (like `127.0.0.1:9393`; keep it on
    /// loopback unless --ui-auth kubernetes); off when absent.
    #[arg(long, env = "SKEWER_UI_ADDR")]
    ui_addr: Option<std::net::SocketAddr>,
    /// Who may read the dashboard: `none` (whoever reaches it sees what skewer sees) or
    /// `kubernetes` (a bearer token checked with a TokenReview; each user sees only what they
    /// may `get`, checked with SubjectAccessReviews).
    #[arg(long, value_enum, default_value_t = UiAuth::None, env = "SKEWER_UI_AUTH")]
    ui_auth: UiAuth,
    /// Address for /metrics, /healthz and /readyz.
    #[arg(long, default_value = "0.0.0.0:8080", env = "SKEWER_METRICS_ADDR")]
    metrics_addr: std::net::SocketAddr,
}

/// Prints `rows` as `output` asks; with `watch`, lists again every two seconds and prints the
/// rows that changed, until interrupted.
async fn print_rows<R, F, Fut>(
    output: Output,
    watch: bool,
    table: impl Fn(&[R]) -> String,
    mut list: F,
) -> Result<()>
where
    R: serde::Serialize + Clone,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Vec<R>>>,
{
    let mut rows = list().await?;
    match output {
        Output::Table => print!("{}", table(&rows)),
        Output::Json => println!("{}", serde_json::to_string_pretty(&rows)?),
        Output::Yaml => print!("{}", serde_saphyr::to_string(&rows)?),
    }
    if !watch {
        return Ok(());
    }
    loop {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let now = list().await?;
        let changed = skewer_agent::view::table::changed(&rows, &now);
        let picked: Vec<R> = changed
            .iter()
            .filter_map(|&i| now.get(i).cloned())
            .collect();
        if !picked.is_empty() {
            match output {
                Output::Table => table(&picked).lines().skip(1).for_each(|l| println!("{l}")),
                Output::Json => println!("{}", serde_json::to_string_pretty(&picked)?),
                Output::Yaml => print!("{}", serde_saphyr::to_string(&picked)?),
            }
        }
        rows = now;
    }
}

/// A client of the hub from KUBECONFIG (or in-cluster), for the commands that read it.
async fn hub_client() -> Result<kube::Client> {
    let config = kube::Config::infer()
        .await
        .context("reading the cluster configuration (KUBECONFIG or in-cluster)")?;
    kube::Client::try_from(config).context("connecting to the hub")
}

/// Once this process leads (at once without election, `campaign` `None`): the future that
/// ends when it no longer does.
type Lost = std::pin::Pin<Box<dyn std::future::Future<Output = leader::Lost> + Send>>;

async fn lead(
    campaign: Option<&(kube::Api<k8s_openapi::api::coordination::v1::Lease>, String)>,
    duration: Duration,
) -> Lost {
    match campaign {
        Some((api, me)) => {
            Box::pin(leader::lead(api.clone(), "skewer-leader".into(), me.clone(), duration).await)
        }
        None => Box::pin(std::future::pending()),
    }
}

/// A namespace's name. An empty one (`SKEWER_NAMESPACE=""`, as manifests often set it) is
/// refused: taken as given, every namespaced request would fail.
fn parse_namespace(s: &str) -> Result<String, String> {
    if s.is_empty() {
        return Err(
            "an empty namespace: name one, or leave the flag (and its environment variable) unset for all namespaces".into(),
        );
    }
    let label = s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-');
    if !label {
        return Err(format!(
            "'{s}' is not a namespace name (lower-case letters, digits and '-', at most 63)"
        ));
    }
    Ok(s.to_string())
}

fn parse_secret_name(s: &str) -> Result<(String, String), String> {
    match s.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() => Ok((ns.into(), name.into())),
        _ => Err(format!("'{s}': give it as <namespace>/<name>")),
    }
}

/// A duration kept as written (for a manifest), checked as skewer will parse it.
fn parse_interval(s: &str) -> Result<String, String> {
    parse_duration(s).map(|_| s.to_string())
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    api::duration::parse(s).map_err(|e| e.to_string())
}

#[tokio::main]
async fn main() -> ExitCode {
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
    match dispatch(cli.command).await {
        Ok(Exit::Ok) => ExitCode::SUCCESS,
        Ok(code) => ExitCode::from(code as u8),
        Err(e) => {
            let code = e.downcast_ref::<Ended>().map_or(Exit::Failed, |e| e.code);
            let red = skewer_agent::cli::term::colour_on_stderr();
            eprintln!("{} {e:#}", paint(red, Paint::Red, "error:"));
            ExitCode::from(code as u8)
        }
    }
}

/// Runs one command; `Ok` carries the exit code of a command that worked but has something
/// to say (`diff` found differences).
async fn dispatch(command: Command) -> Result<Exit> {
    match command {
        Command::Run(args) => run(args).await?,
        Command::Build {
            path,
            source_root,
            kustomization,
        } => {
            let yaml = skewer_agent::cli::build::render(
                &path,
                source_root.as_deref(),
                kustomization.as_deref(),
            )?;
            print!("{yaml}");
        }
        Command::Bootstrap {
            how: BootstrapHow::Git(args),
        } => {
            let client = hub_client().await?;
            let b = bootstrap_of(args)?;
            let done = bootstrap::bootstrap(&client, &b).await?;
            println!(
                "skewer manages itself from {} ({}, {}) at {}",
                b.url, b.branch, b.path, done.commit
            );
        }
        Command::Install(image) => {
            let client = hub_client().await?;
            skewer_agent::cli::install::install(&client, &image.image()).await?;
        }
        Command::Uninstall { yes, prune_managed } => {
            let client = hub_client().await?;
            let u = skewer_agent::cli::install::Uninstall { yes, prune_managed };
            for line in skewer_agent::cli::install::uninstall(&client, &u).await? {
                println!("{line}");
            }
        }
        Command::Diff {
            path,
            kustomization,
            namespace,
            source_root,
        } => {
            let client = hub_client().await?;
            let (text, differs) = skewer_agent::cli::diff::run(
                &client,
                &path,
                source_root.as_deref(),
                &kustomization,
                &namespace,
                skewer_agent::cli::term::colour(),
            )
            .await?;
            print!("{text}");
            return Ok(if differs { Exit::Differs } else { Exit::Ok });
        }
        Command::Dev {
            dir,
            name,
            namespace,
            no_prune,
            wait,
            source_root,
        } => {
            let client = hub_client().await?;
            let name = match name {
                Some(n) => n,
                None => dev_name(&dir)?,
            };
            let dev = skewer_agent::cli::dev::Dev {
                dir,
                source_root,
                owner: skewer_appliers::transform::Owner { name, namespace },
                prune: !no_prune,
                wait,
            };
            skewer_agent::cli::dev::run_dev(client, dev).await?;
        }
        Command::Reconcile(args) | Command::Sync(args) => {
            let client = hub_client().await?;
            let t = &args.target;
            let line = control::reconcile(
                &client,
                &t.namespace,
                &t.target,
                args.with_source,
                args.wait,
            )
            .await
            .map_err(ended)?;
            println!("{line}");
        }
        Command::Suspend(t) => suspend(&t, true).await?,
        Command::Resume(t) => suspend(&t, false).await?,
        Command::Tree(t) => {
            let client = hub_client().await?;
            let root = skewer_agent::view::tree::tree(&client, &t.namespace, &t.target)
                .await
                .map_err(ended)?;
            print!("{}", skewer_agent::view::tree::render(&root));
        }
        Command::Why {
            target,
            namespace,
            output,
        } => {
            let client = hub_client().await?;
            let answer = skewer_agent::view::why::why(&client, &namespace, &target)
                .await
                .map_err(ended)?;
            match output {
                Output::Table => print!("{}", skewer_agent::view::why::render(&answer)),
                Output::Json => println!("{}", serde_json::to_string_pretty(&answer)?),
                Output::Yaml => print!("{}", serde_saphyr::to_string(&answer)?),
            }
        }
        Command::Events { only, list } => {
            let client = hub_client().await?;
            let namespace = (!list.all_namespaces).then_some(list.namespace.clone());
            let all = list.all_namespaces;
            print_rows(
                list.output,
                list.watch,
                |rows| skewer_agent::view::events::table(rows, all, jiff::Timestamp::now()),
                || async {
                    Ok(skewer_agent::view::events::list(
                        &client,
                        namespace.as_deref(),
                        only.as_ref(),
                    )
                    .await?)
                },
            )
            .await?;
        }
        Command::Get { what } => get(what).await?,
        Command::Completion { shell } => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut cmd, "skewer", &mut std::io::stdout());
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
            let progress = Progress::start(&format!("pushing {}", path.display()));
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
            progress.done(true, "pushed");
            println!("{digest}");
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
        }
        Command::Sign {
            address,
            key,
            registry,
        } => {
            let digest = push::sign(&address, &key, registry.access(&address)?).await?;
            println!("{digest}");
        }
        Command::GenerateKeyPair { output_key_prefix } => {
            push::generate_key_pair(&output_key_prefix)?;
            eprintln!(
                "wrote {} and {}",
                output_key_prefix.with_extension("key").display(),
                output_key_prefix.with_extension("pub").display()
            );
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
        }
    }
    Ok(Exit::Ok)
}

/// `skewer suspend` (`suspend: true`) and `skewer resume`.
async fn suspend(t: &TargetArgs, suspend: bool) -> Result<()> {
    let client = hub_client().await?;
    let line = control::suspend(&client, &t.namespace, &t.target, suspend)
        .await
        .map_err(ended)?;
    println!("{line}");
    Ok(())
}

/// A control error as the error that ends the command with its exit code.
fn ended(e: ControlError) -> anyhow::Error {
    Ended::new(control::exit_of(&e), e.to_string()).into()
}

/// `dev-<the directory's name>`, as a Kubernetes name.
fn dev_name(dir: &std::path::Path) -> Result<String> {
    let full = dir
        .canonicalize()
        .with_context(|| format!("{} does not exist", dir.display()))?;
    let base: String = full
        .file_name()
        .map(|n| n.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let name = format!("dev-{}", base.trim_matches('-'));
    Ok(name
        .chars()
        .take(63)
        .collect::<String>()
        .trim_end_matches('-')
        .to_string())
}

/// The bootstrap as asked on the command line; the password comes from the environment.
fn bootstrap_of(args: BootstrapGit) -> Result<bootstrap::Bootstrap> {
    let credentials = match (args.username, args.private_key_file, args.known_hosts_file) {
        (Some(username), None, _) => {
            let password = std::env::var("SKEWER_GIT_PASSWORD").map_err(|_| {
                Ended::new(
                    Exit::Usage,
                    "--username needs the password or token in the environment variable SKEWER_GIT_PASSWORD",
                )
            })?;
            bootstrap::Credentials::Basic { username, password }
        }
        (None, Some(private_key), Some(known_hosts)) => bootstrap::Credentials::Ssh {
            private_key,
            known_hosts,
        },
        _ => bootstrap::Credentials::None,
    };
    Ok(bootstrap::Bootstrap {
        url: args.url,
        branch: args.branch,
        path: args
            .path
            .trim_matches('/')
            .trim_start_matches("./")
            .to_string(),
        credentials,
        ca_file: args.ca_file,
        image: args.image.image(),
        interval: args.interval,
        author: (args.author_name, args.author_email),
        timeout: args.timeout,
    })
}

/// `skewer get …`.
async fn get(what: Get) -> Result<()> {
    use skewer_agent::view::{apps, table as get};
    let client = hub_client().await?;
    let (args, which) = match what {
        Get::Kustomizations(a) => (a, Listed::Kustomizations),
        Get::Sources(a) => (a, Listed::Sources),
        Get::Receivers(a) => (a, Listed::Receivers),
        Get::Applications(args) => {
            let namespace = (!args.all_namespaces).then_some(args.namespace.clone());
            let all = args.all_namespaces;
            return print_rows(
                args.output,
                args.watch,
                |rows| apps::table(rows, all),
                || async { Ok(apps::list(&client, namespace.as_deref()).await?) },
            )
            .await;
        }
        Get::Clusters {
            namespace,
            all_namespaces,
            output,
        } => {
            let config = kube::Config::infer()
                .await
                .context("reading the cluster configuration (KUBECONFIG or in-cluster)")?;
            let server = config.cluster_url.to_string();
            let namespace = (!all_namespaces).then_some(namespace);
            return print_rows(output, false, clusters::list::table, || async {
                Ok(clusters::list::list(
                    &client,
                    server.trim_end_matches('/'),
                    namespace.as_deref(),
                )
                .await?)
            })
            .await;
        }
    };
    let namespace = (!args.all_namespaces).then_some(args.namespace.clone());
    let all = args.all_namespaces;
    print_rows(
        args.output,
        args.watch,
        |rows| get::table(rows, all, which == Listed::Sources),
        || async {
            let ns = namespace.as_deref();
            Ok(match which {
                Listed::Kustomizations => get::kustomizations(&client, ns).await,
                Listed::Sources => get::sources(&client, ns).await,
                Listed::Receivers => get::receivers(&client, ns).await,
            }?)
        },
    )
    .await
}

/// What `get` lists through [`get::table`].
#[derive(Clone, Copy, PartialEq, Eq)]
enum Listed {
    Kustomizations,
    Sources,
    Receivers,
}

async fn run(args: RunArgs) -> Result<()> {
    let config = kube::Config::infer()
        .await
        .context("reading the cluster configuration (KUBECONFIG or in-cluster)")?;
    let client = kube::Client::try_from(config.clone()).context("connecting to the cluster")?;
    let hub_server = config
        .cluster_url
        .to_string()
        .trim_end_matches('/')
        .to_string();
    let namespace = args.namespace;
    let metrics = std::sync::Arc::new(metrics::Metrics::default());
    let ready = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let listener = tokio::net::TcpListener::bind(args.metrics_addr)
        .await
        .with_context(|| format!("listening on {} (--metrics-addr)", args.metrics_addr))?;
    tokio::spawn(http::serve_health(listener, metrics.clone(), ready.clone()));
    client
        .apiserver_version()
        .await
        .context("reaching the API server")?;
    ready.store(true, std::sync::atomic::Ordering::Relaxed);
    // Without election, leadership is never lost.
    let campaign: Option<(kube::Api<k8s_openapi::api::coordination::v1::Lease>, String)> =
        args.leader_elect.then(|| {
            let lease_ns = args
                .leader_election_namespace
                .clone()
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
            (kube::Api::namespaced(client.clone(), &lease_ns), me)
        });
    let mut lost = lead(campaign.as_ref(), args.lease_duration).await;
    let settings = runtime::Settings {
        concurrency: args.concurrency,
        full_sync: args.full_sync_interval,
        max_concurrent_reconciles: args.max_concurrent_reconciles,
        data_dir: args.data_dir.clone(),
        local_sources: args.allow_file_urls
            || std::env::var_os("KUBERNETES_SERVICE_HOST").is_none(),
        default_service_account: args.default_service_account,
        cross_namespace_refs: !args.no_cross_namespace_refs,
        cross_namespace_receivers: args.cross_namespace_receivers,
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
    let ctx =
        runtime::context::Context::new(config, client, registry, &args.data_dir, settings, metrics)
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
    if let Some(addr) = args.ui_addr {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("listening on {addr} (--ui-addr)"))?;
        let kubernetes = args.ui_auth == UiAuth::Kubernetes;
        if !addr.ip().is_loopback() && !kubernetes {
            tracing::warn!(%addr, "the dashboard is reachable beyond this machine without --ui-auth kubernetes: anyone who reaches it sees what skewer sees");
        }
        let clusters = skewer_agent::ui::Clusters {
            hub_server: hub_server.clone(),
            secrets_namespace: secrets_ns.clone(),
        };
        let ui =
            skewer_agent::ui::Ui::start(ctx.clone(), namespace.as_deref(), kubernetes, clusters);
        tracing::info!(%addr, auth = kubernetes, "serving the dashboard");
        tokio::spawn(skewer_agent::ui::serve(listener, ui));
    }
    tracing::info!(namespace = namespace.as_deref().unwrap_or("<all>"), data_dir = %args.data_dir.display(), "skewer running");
    loop {
        tokio::select! {
            () = reconcilers::run(ctx.clone(), namespace.clone()) => return Ok(()),
            // A leader that can no longer renew must stop writing at once: its controllers
            // and drift watches stop (dropped here), what it fetched and learnt stays (sources,
            // clients, the drift and ownership tables), and it campaigns again. An API server
            // that was away is no reason to exit.
            reason = &mut lost => {
                tracing::warn!(%reason, "no longer the leader: stopped writing; campaigning again");
                ctx.targets.retire_all();
                lost = lead(campaign.as_ref(), args.lease_duration).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory as _;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn an_empty_namespace_is_refused_not_taken_for_all() {
        let run = |ns: &str| Cli::try_parse_from(["skewer", "run", "--namespace", ns]);
        let e = run("").err().expect("refused").to_string();
        assert!(e.contains("an empty namespace"), "{e}");
        assert!(run("Team_A").is_err());
        assert!(run("team-a").is_ok());
    }

    /// What a newcomer reads first: `skewer --help`, and the help of the commands they run
    /// on day one.
    #[test]
    fn help_reads_as_written() {
        let mut cmd = Cli::command().term_width(100);
        let mut text = cmd.render_long_help().to_string();
        for path in [
            &["bootstrap", "git"][..],
            &["diff"],
            &["reconcile"],
            &["uninstall"],
        ] {
            let mut sub = &mut cmd;
            for name in path {
                sub = sub.find_subcommand_mut(name).expect("a subcommand");
            }
            text.push_str(&format!("\n===== skewer {} --help\n", path.join(" ")));
            text.push_str(&sub.render_long_help().to_string());
        }
        skewer_agent::golden::golden("help.txt", &text);
    }
}
