//! `skewer`'s arguments: every command and flag, parsed and checked by clap; `main.rs`
//! dispatches them.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, Result};
use clap::{Args, Parser, Subcommand, ValueEnum};
use skewer_api::manifests;
use skewer_cli::push::{self, Address};
use skewer_view::named::Named;

#[derive(Parser)]
#[command(
    name = "skewer",
    version,
    about = "GitOps reconciler: keeps clusters in step with Git.",
    after_help = AFTER_HELP,
)]
pub struct Cli {
    /// The kubeconfig to read (default: $KUBECONFIG, then ~/.kube/config, then the Pod's
    /// service account).
    #[arg(long, global = true, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (default: its current context).
    #[arg(long, global = true, value_name = "NAME")]
    pub context: Option<String>,
    /// Log format.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "SKEWER_LOG_FORMAT")]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

const AFTER_HELP: &str = "Start here:
  skewer bootstrap git --url https://git.example.com/fleet.git --path clusters/prod --username git
  skewer get kustomizations -A
  skewer tree ks/skewer-system -n skewer-system

Exit codes: 0 done (in sync, Ready); 1 differences found, or the object ended not Ready;
2 wrong command line; 3 could not do the work (unreachable, refused, missing); 4 timed out.
Colour only on a terminal, never with NO_COLOR set.";

#[derive(Clone, Copy, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
pub enum Command {
    /// Run the reconciler daemon against the cluster of the current kubeconfig.
    #[command(
        after_help = "Examples:\n  skewer run --namespace flux-system\n  skewer run --ui-addr 127.0.0.1:9393 --webhook-addr 0.0.0.0:9292 --log-format json"
    )]
    Run(RunArgs),
    /// Render what a Kustomization of PATH would apply, offline, as YAML: its
    /// kustomization.yaml built (or the manifests under it), then, with --kustomization, that
    /// Kustomization's patches, targetNamespace, commonMetadata and owner labels. Given
    /// `app/NAME` (and no such directory), what that Application's source renders, fetched
    /// at its revision (Argo CD's `app manifests`).
    #[command(
        after_help = "Examples:\n  skewer build ./apps/web --kustomization web.yaml\n  skewer build app/guestbook -n argocd"
    )]
    Build {
        /// The directory to render, or `app/NAME`.
        path: PathBuf,
        /// The Application's namespace, with `app/NAME` (default: the kubeconfig context's).
        #[arg(long, short = 'n', default_value_t = crate::connect::default_namespace(), hide_default_value = true)]
        namespace: String,
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
    /// Move over from Flux or Argo CD: write their objects as skewer's, naming every field
    /// that does not come along; with --apply, hand the objects they applied to skewer.
    ///
    /// Reads Flux's Kustomizations, GitRepositories, OCIRepositories and Receivers and Argo
    /// CD's Applications from the cluster (or from files) and prints them as skewer's; what
    /// does not come along, and why, goes to standard error. With --apply, the originals are
    /// stopped (Flux's suspended; Argo CD's without automated sync or the finalizer that
    /// deletes their objects) and the objects they applied are handed to skewer in place: the
    /// old managers' field ownership and marks removed, skewer's owner labels set, nothing
    /// deleted or created again. Exit code 1 when anything did not come along.
    #[command(
        after_help = "Examples:\n  skewer migrate -n flux-system > skewer.yaml\n  skewer migrate -f ./clusters/prod --out ./clusters/prod-skewer\n  skewer migrate -n argocd --apply"
    )]
    Migrate {
        /// Read these YAML files or directories instead of the cluster.
        #[arg(long = "file", short = 'f')]
        files: Vec<PathBuf>,
        /// Read only this namespace (default: every namespace).
        #[arg(long, short = 'n')]
        namespace: Option<String>,
        /// Write one file per object under this directory instead of standard output.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Stop the originals and hand their objects over to skewer (refused, changing
        /// nothing, when any object would not come along whole).
        #[arg(long)]
        apply: bool,
        /// Judge the objects as a daemon run with this --default-service-account would.
        #[arg(long)]
        default_service_account: Option<String>,
        /// Judge the objects as a daemon run with --no-cross-namespace-refs would.
        #[arg(long)]
        no_cross_namespace_refs: bool,
    },
    /// Show what a local directory would change if a Kustomization applied it: a server-side
    /// dry run of each object (nothing is written), field by field, Secrets masked. Exit code
    /// 1 when anything differs, 0 when nothing does.
    ///
    /// Given `app/NAME` (and no such directory): what syncing that Application would change,
    /// its source fetched at its revision, dry-run on its cluster as its identity, with what
    /// a sync would prune.
    #[command(
        after_help = "Examples:\n  skewer diff ./apps/web --kustomization web -n apps\n  skewer diff app/guestbook -n argocd"
    )]
    Diff {
        /// The directory to compare (as the Kustomization's spec.path would be), or `app/NAME`.
        path: PathBuf,
        /// The Kustomization whose patches, labels and inventory apply (with a directory).
        #[arg(long, short = 'k')]
        kustomization: Option<String>,
        /// The namespace (default: the kubeconfig context's, else `default`).
        #[arg(long, short = 'n', default_value_t = crate::connect::default_namespace(), hide_default_value = true)]
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
        /// The namespace of objects that name none, and of the owner (default: the kubeconfig
        /// context's, else `default`).
        #[arg(long, short = 'n', default_value_t = crate::connect::default_namespace(), hide_default_value = true)]
        namespace: String,
        /// Keep objects whose files were deleted.
        #[arg(long)]
        no_prune: bool,
        /// Apply objects another owner (a Kustomization, an Application) applies; without it
        /// they are refused, naming the owner.
        #[arg(long)]
        take_over: bool,
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
    /// Write a source, Kustomization or Application from flags, as `flux create` and `argocd
    /// app create` do: checked as the daemon would check it, then applied (server-side, as
    /// skewer-cli), or with --export printed as YAML to keep in Git.
    #[command(
        after_help = "Examples:\n  skewer create source git fleet --url https://git.example.com/fleet.git --branch main --export > fleet.yaml\n  skewer create ks apps --source GitRepository/fleet --path ./apps --prune -n flux-system\n  skewer create app guestbook --repo https://github.com/argoproj/argocd-example-apps.git --path guestbook \\\n      --dest-namespace guestbook --auto-prune --self-heal -n argocd"
    )]
    Create {
        #[command(subcommand)]
        what: CreateWhat,
    },
    /// Delete one of skewer's objects. A Kustomization with spec.prune (an Application with
    /// syncPolicy.automated.prune) takes what it applied with it; the question says which.
    /// Asks first; without a terminal, refuses unless --yes.
    #[command(
        after_help = "Examples:\n  skewer delete ks/web -n apps\n  skewer delete app/guestbook -n argocd --yes --wait"
    )]
    Delete {
        /// `<kind>/<name>`: `ks/<name>`, `app/<name>`, `gitrepository/<name>`, …
        #[arg(add = clap_complete::engine::ArgValueCompleter::new(crate::complete::named))]
        target: Named,
        /// The namespace (default: the kubeconfig context's, else `default`).
        #[arg(long, short = 'n', default_value_t = crate::connect::default_namespace(), hide_default_value = true)]
        namespace: String,
        /// Do not ask.
        #[arg(long, short = 'y')]
        yes: bool,
        /// Wait until it is gone (what it prunes pruned), at most this long (default 5m).
        #[arg(long, num_args = 0..=1, default_missing_value = "5m", value_parser = parse_duration)]
        wait: Option<Duration>,
    },
    /// skewer's own log lines, from the pods of its Deployment, or from a file (`-`: standard
    /// input) for a `skewer run` beside the cluster; with an object, only the lines about it.
    /// JSON lines are printed as text.
    #[command(
        after_help = "Examples:\n  skewer logs ks/web -n apps --since 1h\n  skewer logs --level error -f\n  skewer run 2>&1 | skewer logs app/guestbook -n argocd --file -"
    )]
    Logs {
        /// Only the lines about this object: `ks/<name>`, `app/<name>`, `gitrepository/<name>`, …
        #[arg(add = clap_complete::engine::ArgValueCompleter::new(crate::complete::named))]
        target: Option<Named>,
        /// The object's namespace (default: the kubeconfig context's, else `default`).
        #[arg(long, short = 'n', default_value_t = crate::connect::default_namespace(), hide_default_value = true)]
        namespace: String,
        /// Only lines at least this severe: error, warn, info, debug.
        #[arg(long, value_parser = parse_level)]
        level: Option<skewer_view::logs::Level>,
        /// Keep printing lines as they come.
        #[arg(long, short = 'f')]
        follow: bool,
        /// The last this many lines of each pod.
        #[arg(long)]
        tail: Option<i64>,
        /// Only lines newer than this (of the pods).
        #[arg(long, value_parser = parse_duration)]
        since: Option<Duration>,
        /// Read this file (`-`: standard input) instead of the pods.
        #[arg(long)]
        file: Option<PathBuf>,
        /// Where skewer's pods run.
        #[arg(long, default_value = "skewer-system")]
        skewer_namespace: String,
    },
    /// What a Kustomization or Application deployed, newest last: each revision, its
    /// artifact's digest, when, and how it ended (`status.history`: the last 10, or an
    /// Application's spec.revisionHistoryLimit).
    #[command(
        after_help = "Examples:\n  skewer history app/guestbook -n argocd\n  skewer history ks/web -o yaml"
    )]
    History {
        /// `ks/<name>` or `app/<name>`.
        #[arg(add = clap_complete::engine::ArgValueCompleter::new(crate::complete::named))]
        target: Named,
        /// The namespace (default: the kubeconfig context's, else `default`).
        #[arg(long, short = 'n', default_value_t = crate::connect::default_namespace(), hide_default_value = true)]
        namespace: String,
        #[arg(long, short = 'o', value_enum, default_value_t = Output::Table)]
        output: Output,
    },
    /// Roll an Application back to deployment ID of its history (default: the newest that
    /// succeeded with another revision) and sync it now. It stays pinned to that revision,
    /// automated sync or not, until its spec.source or spec.syncPolicy changes (or --undo
    /// ends the pin). A Kustomization is rolled back in its
    /// source; for one, this prints how.
    #[command(
        after_help = "Examples:\n  skewer history app/guestbook -n argocd\n  skewer rollback app/guestbook 3 -n argocd --wait\n  skewer rollback app/guestbook --undo -n argocd   # follow the source again"
    )]
    Rollback {
        /// `app/<name>` (or `ks/<name>`, to be told how).
        #[arg(add = clap_complete::engine::ArgValueCompleter::new(crate::complete::named))]
        target: Named,
        /// The ID `skewer history` shows.
        id: Option<i64>,
        /// The namespace (default: the kubeconfig context's, else `default`).
        #[arg(long, short = 'n', default_value_t = crate::connect::default_namespace(), hide_default_value = true)]
        namespace: String,
        /// Wait until it is Synced and Healthy at that revision, at most this long (default 5m).
        #[arg(long, num_args = 0..=1, default_missing_value = "5m", value_parser = parse_duration)]
        wait: Option<Duration>,
        /// End the pin a rollback left: the Application follows its source again, and syncs now.
        #[arg(long, conflicts_with = "id")]
        undo: bool,
    },
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
        /// The namespace (default: the kubeconfig context's, else `default`).
        #[arg(long, short = 'n', default_value_t = crate::connect::default_namespace(), hide_default_value = true)]
        namespace: String,
        #[arg(long, short = 'o', value_enum, default_value_t = Output::Table)]
        output: Output,
    },
    /// skewer's objects as YAML one can apply again or keep in Git: no status, nothing the
    /// server set. Name objects (`ks/web`) or kinds (`ks`: every Kustomization).
    #[command(
        after_help = "Examples:\n  skewer export ks/web gitrepository/web -n apps > web.yaml\n  skewer export ks alerts providers -A"
    )]
    Export {
        /// `<kind>/<name>`, or a kind alone for every object of it.
        #[arg(required = true)]
        targets: Vec<skewer_view::export::Exported>,
        /// The namespace (default: the kubeconfig context's, else `default`).
        #[arg(long, short = 'n', default_value_t = crate::connect::default_namespace(), hide_default_value = true)]
        namespace: String,
        /// Every namespace.
        #[arg(long, short = 'A')]
        all_namespaces: bool,
    },
    /// The Events skewer recorded, oldest first.
    #[command(after_help = "Example:\n  skewer events --for ks/web -n apps")]
    Events {
        /// Only the Events about this object (`ks/<name>`, `app/<name>`, …).
        #[arg(long = "for", add = clap_complete::engine::ArgValueCompleter::new(crate::complete::named))]
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
    /// Check the cluster: with --pre, before installing (it answers, is Kubernetes 1.22 or
    /// newer, and this user may create what skewer installs); without, skewer itself (its CRDs
    /// served, its Deployment ready, a leader renewing its Lease). Every check runs; exit
    /// code 1 when any failed.
    #[command(after_help = "Examples:\n  skewer check --pre\n  skewer check --context prod")]
    Check {
        /// Check what installing needs, not the install.
        #[arg(long)]
        pre: bool,
    },
    /// This command line's version, the cluster's, and the skewer installed there (its
    /// Deployment's image and ready replicas).
    #[command(after_help = "Example:\n  skewer version --context prod")]
    Version,
    /// Print the shell hook that completes commands, flags and object names (read from the
    /// cluster at each <TAB>).
    #[command(
        after_help = "Examples:\n  echo 'source <(skewer completion bash)' >> ~/.bashrc\n  echo 'source <(skewer completion zsh)' >> ~/.zshrc\n  skewer completion fish > ~/.config/fish/completions/skewer.fish"
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
    #[command(
        after_help = "Example:\n  skewer sign oci://ghcr.io/acme/platform:v1.4.0 --key cosign.key"
    )]
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
    #[command(after_help = "Example:\n  skewer generate-key-pair --output-key-prefix release")]
    GenerateKeyPair {
        #[arg(long, default_value = "cosign")]
        output_key_prefix: PathBuf,
    },
    /// Write skewer's install manifests (CRDs, RBAC, Deployment) generated from its types.
    #[command(
        after_help = "Examples:\n  skewer manifests --out deploy\n  skewer manifests --image registry.example.com/skewer:v0.1.0 | kubectl apply -f -"
    )]
    Manifests {
        /// Directory to write into; prints to stdout when absent.
        #[arg(long)]
        out: Option<PathBuf>,
        #[arg(long, default_value = manifests::DEFAULT_IMAGE)]
        image: String,
    },
}

#[derive(Subcommand)]
pub enum BootstrapHow {
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
pub struct BootstrapGit {
    /// The repository (https://, http:// or ssh://).
    #[arg(long)]
    pub url: String,
    #[arg(long, default_value = "main")]
    pub branch: String,
    /// This cluster's directory in the repository.
    #[arg(long)]
    pub path: String,
    /// Basic-auth user; the password or token is read from SKEWER_GIT_PASSWORD.
    #[arg(long, conflicts_with = "private_key_file")]
    pub username: Option<String>,
    /// SSH private key for ssh:// URLs.
    #[arg(long, requires = "known_hosts_file")]
    pub private_key_file: Option<PathBuf>,
    /// known_hosts holding the Git server's host key (for ssh:// URLs).
    #[arg(long)]
    pub known_hosts_file: Option<PathBuf>,
    /// PEM bundle of the CA the Git server's certificate chains to.
    #[arg(long)]
    pub ca_file: Option<PathBuf>,
    /// How often skewer fetches its own repository.
    #[arg(long, default_value = "1m", value_parser = parse_interval)]
    pub interval: String,
    #[arg(long, default_value = "skewer")]
    pub author_name: String,
    #[arg(long, default_value = "skewer@localhost")]
    pub author_email: String,
    /// How long to wait for skewer to apply itself.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub timeout: Duration,
    #[command(flatten)]
    pub image: ImageArgs,
}

/// Which image of skewer to run.
#[derive(Args)]
pub struct ImageArgs {
    /// skewer's version (the image tag).
    #[arg(long = "version", default_value = concat!("v", env!("CARGO_PKG_VERSION")))]
    pub release: String,
    /// The whole image reference; overrides --version.
    #[arg(long)]
    pub image: Option<String>,
}

impl ImageArgs {
    pub fn image(&self) -> String {
        self.image
            .clone()
            .unwrap_or_else(|| format!("{}:{}", manifests::IMAGE_REPOSITORY, self.release))
    }
}

/// One object named as `<kind>/<name>` in a namespace.
#[derive(Args)]
pub struct TargetArgs {
    /// `ks/<name>`, `app/<name>`, `gitrepository/<name>`, `ocirepository/<name>` or
    /// `receiver/<name>`.
    #[arg(add = clap_complete::engine::ArgValueCompleter::new(crate::complete::named))]
    pub target: Named,
    /// The namespace (default: the kubeconfig context's, else `default`).
    #[arg(long, short = 'n', default_value_t = crate::connect::default_namespace(), hide_default_value = true)]
    pub namespace: String,
}

#[derive(Args)]
pub struct ReconcileArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    /// Reconcile the Kustomization's source first, and wait for it.
    #[arg(long)]
    pub with_source: bool,
    /// Wait until it is done (Ready, or Synced and Healthy), at most this long (default 5m).
    #[arg(long, num_args = 0..=1, default_missing_value = "5m", value_parser = parse_duration)]
    pub wait: Option<Duration>,
    /// An Application: show what the sync would change (as `skewer diff app/NAME`), and ask
    /// nothing.
    #[arg(long, conflicts_with_all = ["wait", "with_source"])]
    pub dry_run: bool,
}

fn parse_level(s: &str) -> Result<skewer_view::logs::Level, String> {
    skewer_view::logs::Level::parse(s)
        .ok_or_else(|| format!("'{s}': one of error, warn, info, debug, trace"))
}

#[derive(Subcommand)]
pub enum CreateWhat {
    /// A GitRepository or OCIRepository.
    #[command(
        after_help = "Examples:\n  skewer create source git fleet --url https://git.example.com/fleet.git --branch main\n  skewer create source oci platform --url oci://ghcr.io/acme/platform --semver '>=1.0.0'"
    )]
    Source {
        #[command(subcommand)]
        kind: CreateSource,
    },
    /// A Kustomization of a source's path.
    #[command(
        alias = "ks",
        after_help = "Examples:\n  skewer create ks apps --source GitRepository/fleet --path ./clusters/prod/apps --prune -n flux-system\n  skewer create ks web --source OCIRepository/platform --target-namespace web --service-account deployer --export"
    )]
    Kustomization {
        name: String,
        #[command(flatten)]
        ks: skewer_cli::create::Ks,
        #[command(flatten)]
        out: CreateOut,
    },
    /// An Application (Argo CD's shape).
    #[command(
        alias = "app",
        after_help = "Example:\n  skewer create app guestbook --repo https://github.com/argoproj/argocd-example-apps.git --path guestbook --dest-namespace guestbook --auto-prune --self-heal --sync-option CreateNamespace=true -n argocd"
    )]
    Application {
        name: String,
        #[command(flatten)]
        app: skewer_cli::create::App,
        #[command(flatten)]
        out: CreateOut,
    },
}

#[derive(Subcommand)]
pub enum CreateSource {
    /// A GitRepository: one of --branch (default main), --tag, --semver, --commit.
    #[command(
        after_help = "Examples:\n  skewer create source git fleet --url ssh://git@git.example.com/fleet.git --secret-ref fleet-key -n flux-system\n  skewer create source git app --url https://git.example.com/app.git --tag v1.4.0 --export"
    )]
    Git {
        name: String,
        #[command(flatten)]
        git: skewer_cli::create::GitSource,
        #[command(flatten)]
        out: CreateOut,
    },
    /// An OCIRepository: one of --tag (default latest), --semver, --digest.
    #[command(
        after_help = "Example:\n  skewer create source oci platform --url oci://ghcr.io/acme/platform --semver '>=1.0.0 <2.0.0' -n flux-system"
    )]
    Oci {
        name: String,
        #[command(flatten)]
        oci: skewer_cli::create::OciSource,
        #[command(flatten)]
        out: CreateOut,
    },
}

/// Where `create` puts the object.
#[derive(Args)]
pub struct CreateOut {
    /// The namespace (default: the kubeconfig context's, else `default`).
    #[arg(long, short = 'n', default_value_t = crate::connect::default_namespace(), hide_default_value = true)]
    pub namespace: String,
    /// Print the object as YAML instead of applying it.
    #[arg(long)]
    pub export: bool,
}

#[derive(Subcommand)]
pub enum PushWhat {
    /// Build DIR into an artifact in Flux's format (config
    /// application/vnd.cncf.flux.config.v1+json, one tar+gzip layer, source/revision/created
    /// annotations) and push it to ADDRESS (oci://<registry>/<repository>:<tag>). The same
    /// files, source, revision and creation time give the same digest. Prints the digest.
    #[command(
        after_help = "Example:\n  skewer push artifact oci://ghcr.io/acme/platform:v1.4.0 --path ./clusters/prod --source https://github.com/acme/platform --revision \"main@sha1:$(git rev-parse HEAD)\" --sign-key cosign.key"
    )]
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
pub enum PullWhat {
    /// Pull the artifact at ADDRESS (oci://…:<tag> or @sha256:…) as an OCIRepository does
    /// (its first layer read within limits, hostile entries refused) and write its files to
    /// --output, if given. Prints the revision.
    #[command(
        after_help = "Example:\n  skewer pull artifact oci://ghcr.io/acme/platform:v1.4.0 --verify-key release.pub -o ./out"
    )]
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
pub struct RegistryArgs {
    /// `<user>:<password>` for the registry (default: its entry in ~/.docker/config.json).
    #[arg(long, env = "SKEWER_REGISTRY_CREDS", hide_env_values = true)]
    pub creds: Option<String>,
    /// Plain HTTP, for registries without TLS.
    #[arg(long)]
    pub insecure: bool,
}

impl RegistryArgs {
    pub fn access(&self, address: &Address) -> Result<skewer_sources::oci::registry::Access> {
        Ok(skewer_sources::oci::registry::Access {
            login: push::login(self.creds.as_deref(), &address.repo.registry)?,
            insecure: self.insecure,
        })
    }
}

/// The creation time of a pushed artifact when none is given: SOURCE_DATE_EPOCH (the
/// reproducible-builds convention), else the Unix epoch.
pub fn created_default() -> Result<String> {
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
pub enum Get {
    /// Everything skewer reconciles, kind by kind: Kustomizations, sources, Receivers,
    /// Providers and Alerts in one table, then Applications and ApplicationSets.
    #[command(after_help = "Example:\n  skewer get all -A")]
    All {
        /// The namespace (default: the kubeconfig context's, else `default`).
        #[arg(long, short = 'n', default_value_t = crate::connect::default_namespace(), hide_default_value = true)]
        namespace: String,
        /// Every namespace.
        #[arg(long, short = 'A')]
        all_namespaces: bool,
        #[arg(long, short = 'o', value_enum, default_value_t = Output::Table)]
        output: Output,
    },
    /// Kustomizations: ready, applied revision, age, and why they are not Ready.
    #[command(
        alias = "ks",
        alias = "kustomization",
        after_help = "Examples:\n  skewer get ks -A\n  skewer get ks web -n apps -o wide"
    )]
    Kustomizations(ListArgs),
    /// GitRepositories and OCIRepositories: ready, stored revision, age, message.
    #[command(
        alias = "source",
        after_help = "Example:\n  skewer get sources -n flux-system"
    )]
    Sources(ListArgs),
    /// Receivers: ready, webhook path, age, message.
    #[command(alias = "receiver", after_help = "Example:\n  skewer get receivers -A")]
    Receivers(ListArgs),
    /// Providers: ready, the last delivery (its result and the event it carried), age,
    /// message.
    #[command(
        alias = "provider",
        after_help = "Example:\n  skewer get providers -n flux-system"
    )]
    Providers(ListArgs),
    /// Alerts: ready, the Provider their events go to, age, message.
    #[command(
        alias = "alert",
        after_help = "Example:\n  skewer get alerts -n flux-system -o yaml"
    )]
    Alerts(ListArgs),
    /// Applications: sync status, health, revision, and why they are not Ready.
    #[command(
        alias = "apps",
        alias = "app",
        alias = "application",
        after_help = "Examples:\n  skewer get apps -A\n  skewer get app guestbook -n argocd --watch"
    )]
    Applications(ListArgs),
    /// ApplicationSets: how many Applications each generated, how many are synced and
    /// healthy, where a RollingSync stands, and why they are not Ready.
    #[command(
        alias = "appsets",
        alias = "appset",
        alias = "applicationset",
        after_help = "Example:\n  skewer get appsets -n argocd"
    )]
    Applicationsets(ListArgs),
    /// The Leases of `skewer run --shards`: each replica and how many shards it holds, each
    /// shard and who holds it.
    #[command(
        alias = "shard",
        after_help = "Examples:\n  skewer get shards -n skewer-system\n  skewer get shards -o json"
    )]
    Shards {
        /// Namespace of the Leases (skewer's --leader-election-namespace).
        #[arg(
            long,
            short = 'n',
            default_value = "skewer-system",
            env = "SKEWER_LEADER_ELECTION_NAMESPACE"
        )]
        namespace: String,
        #[arg(long, short = 'o', value_enum, default_value_t = Output::Table)]
        output: Output,
        /// Print changed rows every 2 s.
        #[arg(long, short = 'w')]
        watch: bool,
    },
    /// The hub and every registered cluster: server, version, reachable, how many
    /// Kustomizations target it, last error.
    #[command(after_help = "Examples:\n  skewer get clusters\n  skewer get clusters -A -o json")]
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
pub struct ListArgs {
    /// Only the object of this name.
    #[arg(add = clap_complete::engine::ArgValueCompleter::new(crate::complete::listed))]
    pub name: Option<String>,
    /// The namespace (default: the kubeconfig context's, else `default`).
    #[arg(long, short = 'n', default_value_t = crate::connect::default_namespace(), hide_default_value = true)]
    pub namespace: String,
    /// Every namespace.
    #[arg(long, short = 'A')]
    pub all_namespaces: bool,
    #[arg(long, short = 'o', value_enum, default_value_t = Output::Table)]
    pub output: Output,
    /// After the list, print each object again when it changes (Ctrl-C stops).
    #[arg(long, short = 'w')]
    pub watch: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum UiAuth {
    None,
    Kubernetes,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum Output {
    Table,
    /// The table with messages and revisions whole.
    Wide,
    Yaml,
    Json,
}

#[derive(Args)]
pub struct RunArgs {
    /// Watch only this namespace (default: all; an empty value is refused, not taken for
    /// all).
    #[arg(long, env = "SKEWER_NAMESPACE", value_parser = parse_namespace)]
    pub namespace: Option<String>,
    /// Where Git working repositories and artifacts are kept.
    #[arg(long, default_value = "/tmp/skewer", env = "SKEWER_DATA_DIR")]
    pub data_dir: PathBuf,
    /// Server-side apply requests in flight per Kustomization.
    #[arg(long, default_value_t = 16)]
    pub concurrency: usize,
    /// Objects of one kind reconciled at once.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..))]
    pub max_concurrent_reconciles: u16,
    /// Re-apply every Kustomization in full this often (like `6h`) even when its revision and
    /// spec are unchanged and no drift was seen. Off by default: drift is corrected from watches.
    #[arg(long, value_parser = parse_duration)]
    pub full_sync_interval: Option<Duration>,
    /// Elect a leader through a Lease, so that only one replica writes.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    /// Namespace of the Lease (default: --namespace, else `default`).
    #[arg(long, env = "SKEWER_LEADER_ELECTION_NAMESPACE", value_parser = parse_namespace)]
    pub leader_election_namespace: Option<String>,
    /// How long a lease lasts without renewal; a follower takes over after it.
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    pub lease_duration: Duration,
    /// Split the work between replicas instead of electing one leader: `auto` (16 shards) or
    /// a number of shards (1 to 1024). Each replica holds a Lease per shard it reconciles;
    /// replicas find each other through Leases, and a replica that dies has its shards taken
    /// over within --lease-duration. Needs --storage-addr and --storage-adv-addr reachable by
    /// the other replicas: they read each other's artifacts, as Flux's controllers do.
    /// Example: `skewer run --shards auto --storage-addr 0.0.0.0:9090 --storage-adv-addr $(POD_IP):9090`
    #[arg(long, value_parser = parse_shards)]
    pub shards: Option<u32>,
    /// Let GitRepositories use local paths (`file://`) when running in a cluster, where they
    /// are the pod's own files. Outside a cluster they are allowed; skewer's data directory
    /// never is.
    #[arg(long)]
    pub allow_file_urls: bool,
    /// Impersonate this ServiceAccount (of the Kustomization's own namespace) for every
    /// Kustomization without `serviceAccountName` (multi-tenancy lockdown).
    #[arg(long)]
    pub default_service_account: Option<String>,
    /// Refuse sources and dependencies in another namespace than the Kustomization's.
    #[arg(long)]
    pub no_cross_namespace_refs: bool,
    /// Let a Receiver ask objects in other namespaces than its own to reconcile (by default
    /// it reaches only its own namespace; never with --no-cross-namespace-refs).
    #[arg(long, conflicts_with = "no_cross_namespace_refs")]
    pub cross_namespace_receivers: bool,
    /// Reconcile only objects with these labels (like `shard=a`), so several skewers can share
    /// one hub.
    #[arg(long)]
    pub watch_label_selector: Option<String>,
    /// Namespace of the cluster Secrets (default: --namespace, else the pod's namespace, else
    /// `skewer-system`).
    #[arg(long, env = "SKEWER_CLUSTER_SECRET_NAMESPACE", value_parser = parse_namespace)]
    pub cluster_secret_namespace: Option<String>,
    /// Read cluster Secrets from every namespace.
    #[arg(long, conflicts_with = "cluster_secret_namespace")]
    pub cluster_secrets_all_namespaces: bool,
    /// Serve sources' artifacts over HTTP on this address (like `0.0.0.0:9090`), as Flux's
    /// source-controller does, for controllers that consume Flux sources; each source reports
    /// its URL in `status.artifact.url`. Off when absent.
    #[arg(long, env = "SKEWER_STORAGE_ADDR")]
    pub storage_addr: Option<std::net::SocketAddr>,
    /// The host[:port] other controllers reach --storage-addr at (like
    /// `skewer.skewer-system.svc.cluster.local.`); default: --storage-addr itself.
    #[arg(long, env = "SKEWER_STORAGE_ADV_ADDR")]
    pub storage_adv_addr: Option<String>,
    /// Serve Receivers' webhooks on this address (like `0.0.0.0:9292`); off when absent.
    #[arg(long, env = "SKEWER_WEBHOOK_ADDR")]
    pub webhook_addr: Option<std::net::SocketAddr>,
    /// Argo CD's webhook endpoint (`POST /api/webhook` on --webhook-addr) reads the hosts'
    /// secrets from this Secret (`namespace/name`), keys `webhook.github.secret`,
    /// `webhook.gitlab.secret`, `webhook.gogs.secret`, `webhook.bitbucketserver.secret`, as
    /// Argo CD keeps them in `argocd-secret`. Off when absent.
    #[arg(long, env = "SKEWER_ARGOCD_WEBHOOK_SECRET", value_parser = parse_secret_name)]
    pub argocd_webhook_secret: Option<(String, String)>,
    /// Serve the read-only dashboard on this address (like `127.0.0.1:9393`; keep it on
    /// loopback unless --ui-auth kubernetes); off when absent.
    #[arg(long, env = "SKEWER_UI_ADDR")]
    pub ui_addr: Option<std::net::SocketAddr>,
    /// Who may read the dashboard: `none` (whoever reaches it sees what skewer sees) or
    /// `kubernetes` (a bearer token checked with a TokenReview; each user sees only what they
    /// may `get`, checked with SubjectAccessReviews).
    #[arg(long, value_enum, default_value_t = UiAuth::None, env = "SKEWER_UI_AUTH")]
    pub ui_auth: UiAuth,
    /// Address for /metrics, /healthz and /readyz.
    #[arg(long, default_value = "0.0.0.0:8080", env = "SKEWER_METRICS_ADDR")]
    pub metrics_addr: std::net::SocketAddr,
}

impl RunArgs {
    pub fn into_daemon(self) -> skewer_agent::daemon::Daemon {
        skewer_agent::daemon::Daemon {
            namespace: self.namespace,
            data_dir: self.data_dir,
            concurrency: self.concurrency,
            max_concurrent_reconciles: self.max_concurrent_reconciles,
            full_sync_interval: self.full_sync_interval,
            leader_elect: self.leader_elect,
            leader_election_namespace: self.leader_election_namespace,
            lease_duration: self.lease_duration,
            shards: self.shards,
            allow_file_urls: self.allow_file_urls,
            default_service_account: self.default_service_account,
            no_cross_namespace_refs: self.no_cross_namespace_refs,
            cross_namespace_receivers: self.cross_namespace_receivers,
            watch_label_selector: self.watch_label_selector,
            cluster_secret_namespace: self.cluster_secret_namespace,
            cluster_secrets_all_namespaces: self.cluster_secrets_all_namespaces,
            storage_addr: self.storage_addr,
            storage_adv_addr: self.storage_adv_addr,
            webhook_addr: self.webhook_addr,
            argocd_webhook_secret: self.argocd_webhook_secret,
            ui_addr: self.ui_addr,
            ui_kubernetes: self.ui_auth == UiAuth::Kubernetes,
            metrics_addr: self.metrics_addr,
        }
    }
}

/// A namespace's name. An empty one (`SKEWER_NAMESPACE=""`, as manifests often set it) is
/// refused: taken as given, every namespaced request would fail.
pub fn parse_namespace(s: &str) -> Result<String, String> {
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

pub fn parse_secret_name(s: &str) -> Result<(String, String), String> {
    match s.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() => Ok((ns.into(), name.into())),
        _ => Err(format!("'{s}': give it as <namespace>/<name>")),
    }
}

/// A duration kept as written (for a manifest), checked as skewer will parse it.
pub fn parse_interval(s: &str) -> Result<String, String> {
    parse_duration(s).map(|_| s.to_string())
}

pub fn parse_duration(s: &str) -> Result<Duration, String> {
    skewer_api::duration::parse(s).map_err(|e| e.to_string())
}

/// `auto` (16) or a number of shards from 1 to 1024.
fn parse_shards(s: &str) -> Result<u32, String> {
    if s == "auto" {
        return Ok(16);
    }
    match s.parse::<u32>() {
        Ok(n) if (1..=1024).contains(&n) => Ok(n),
        _ => Err(format!(
            "'{s}': give `auto` or a number of shards from 1 to 1024"
        )),
    }
}
