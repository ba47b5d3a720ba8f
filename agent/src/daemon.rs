//! `skewer run`: the daemon. Serves health and metrics, campaigns for the Lease, builds the
//! [`Context`], serves artifacts, webhooks and the dashboard when asked, and runs every
//! controller while it leads; a leader that loses the Lease stops writing and campaigns
//! again.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, Result};

use skewer_controller::clusters::Registry;
use skewer_controller::metrics::Metrics;
use skewer_controller::runtime::Settings;
use skewer_controller::runtime::context::Context;
use skewer_controller::runtime::shutdown;

/// How the daemon runs: `skewer run`'s flags, parsed.
pub struct Daemon {
    /// Watch only this namespace (`None`: all).
    pub namespace: Option<String>,
    pub data_dir: PathBuf,
    pub concurrency: usize,
    pub max_concurrent_reconciles: u16,
    pub full_sync_interval: Option<Duration>,
    pub leader_elect: bool,
    pub leader_election_namespace: Option<String>,
    pub lease_duration: Duration,
    /// Split the work into this many shards on Leases (`None`: one leader does it all).
    pub shards: Option<u32>,
    pub allow_file_urls: bool,
    pub default_service_account: Option<String>,
    pub no_cross_namespace_refs: bool,
    pub cross_namespace_receivers: bool,
    pub watch_label_selector: Option<String>,
    pub cluster_secret_namespace: Option<String>,
    pub cluster_secrets_all_namespaces: bool,
    pub storage_addr: Option<SocketAddr>,
    pub storage_adv_addr: Option<String>,
    pub webhook_addr: Option<SocketAddr>,
    pub argocd_webhook_secret: Option<(String, String)>,
    pub ui_addr: Option<SocketAddr>,
    /// Dashboard readers authenticated by TokenReview and authorized per object.
    pub ui_kubernetes: bool,
    pub metrics_addr: SocketAddr,
}

/// How long the running reconciles have, once a stop is asked for, before the process exits
/// anyway: within Kubernetes' default grace period of 30 s, so that a Pod is never killed.
/// What a sync cut short applied is in its inventory already.
const STOP_GRACE: Duration = Duration::from_secs(25);

/// Asked to stop during start-up.
#[derive(Debug)]
struct Stopped;

impl std::fmt::Display for Stopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("stopped while starting")
    }
}

impl std::error::Error for Stopped {}

/// `step`, unless a stop is asked for first.
async fn unless_stopped<T>(step: impl std::future::Future<Output = T>) -> Result<T, Stopped> {
    tokio::select! {
        v = step => Ok(v),
        () = shutdown::requested() => Err(Stopped),
    }
}

/// Runs the daemon against the cluster of `config` until SIGTERM or SIGINT.
pub async fn run(args: Daemon, config: kube::Config) -> Result<()> {
    shutdown::listen().context("listening for SIGTERM and SIGINT")?;
    match serve(args, config).await {
        Err(e) if e.is::<Stopped>() => {
            tracing::info!("stopped");
            Ok(())
        }
        done => done,
    }
}

async fn serve(args: Daemon, config: kube::Config) -> Result<()> {
    let client = kube::Client::try_from(config.clone()).context("connecting to the cluster")?;
    let hub_server = config
        .cluster_url
        .to_string()
        .trim_end_matches('/')
        .to_string();
    let namespace = args.namespace;
    let metrics = std::sync::Arc::new(Metrics::default());
    let ready = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let listener = skewer_controller::http::listen(args.metrics_addr)
        .with_context(|| format!("listening on {} (--metrics-addr)", args.metrics_addr))?;
    tokio::spawn(skewer_controller::http::serve_health(
        listener,
        metrics.clone(),
        ready.clone(),
    ));
    unless_stopped(client.apiserver_version())
        .await?
        .with_context(|| format!("reaching the API server at {hub_server}"))?;
    unless_stopped(crds_installed(&client, &hub_server)).await?;
    ready.store(true, std::sync::atomic::Ordering::Relaxed);
    if args.shards.is_some() {
        let unreachable = match args.storage_addr {
            None => true,
            Some(addr) => addr.ip().is_unspecified() && args.storage_adv_addr.is_none(),
        };
        if unreachable {
            anyhow::bail!(
                "--shards needs --storage-addr, and --storage-adv-addr when it listens on every address (like $(POD_IP):9090): each replica fetches the sources of its own shards, and the others read those artifacts from the address it advertises"
            );
        }
    }
    let lease_ns = args
        .leader_election_namespace
        .clone()
        .or_else(|| namespace.clone())
        .unwrap_or_else(|| "default".into());
    let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
        kube::Api::namespaced(client.clone(), &lease_ns);
    let me = {
        let host = std::env::var("POD_NAME").or_else(|_| {
            std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_string())
        });
        format!(
            "{}-{}",
            host.unwrap_or_else(|_| "skewer".into()),
            std::process::id()
        )
    };
    // Without election (or with shards, where each reconcile is gated by its shard's Lease
    // instead), leadership is never lost.
    let campaign =
        (args.leader_elect && args.shards.is_none()).then(|| (leases.clone(), me.clone()));
    let mut lost = unless_stopped(lead(campaign.as_ref(), args.lease_duration)).await?;
    let shards = match args.shards {
        Some(count) => skewer_controller::shards::Shards::new(count),
        None => skewer_controller::shards::Shards::unsharded(),
    };
    let settings = Settings {
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
        skewer_api::watch::select(selector);
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
    let registry = Registry::new(secrets_ns.as_deref());
    registry.watch(&client, secrets_ns.as_deref());
    let ctx = unless_stopped(Context::new(
        config,
        client,
        registry,
        &args.data_dir,
        settings,
        metrics,
        shards.clone(),
    ))
    .await?
    .context("asking the API server its version")?;
    let mut sharded = None;
    if args.shards.is_some() {
        let settings = skewer_controller::shards::lease::Settings {
            metrics: ctx.metrics.clone(),
            group: "skewer".into(),
            me: me.clone(),
            duration: args.lease_duration,
        };
        tracing::info!(shards = shards.count(), identity = %me, namespace = %lease_ns, "sharding on Leases");
        let forget_ctx = ctx.clone();
        let keeping = tokio::spawn(skewer_controller::shards::lease::run(
            leases.clone(),
            shards,
            settings,
            move |owners| forget_ctx.forget_owners(&owners),
        ));
        sharded = Some((leases, keeping));
    }
    if let Some(addr) = args.storage_addr {
        let listener = skewer_controller::http::listen(addr)
            .with_context(|| format!("listening on {addr} (--storage-addr)"))?;
        tokio::spawn(skewer_controller::storage::serve(
            listener,
            ctx.client.clone(),
            ctx.store.clone(),
        ));
    }
    if let Some(addr) = args.webhook_addr {
        let listener = skewer_controller::http::listen(addr)
            .with_context(|| format!("listening on {addr} (--webhook-addr)"))?;
        tracing::info!(%addr, "serving webhooks");
        let argo = skewer_controller::webhook::ArgoEndpoint {
            secret: args.argocd_webhook_secret.clone(),
            scope: namespace.clone(),
        };
        tokio::spawn(skewer_controller::webhook::serve(
            listener,
            ctx.clone(),
            argo,
        ));
    }
    if let Some(addr) = args.ui_addr {
        let listener = skewer_controller::http::listen(addr)
            .with_context(|| format!("listening on {addr} (--ui-addr)"))?;
        let kubernetes = args.ui_kubernetes;
        if !addr.ip().is_loopback() && !kubernetes {
            tracing::warn!(%addr, "the dashboard is reachable beyond this machine without --ui-auth kubernetes: anyone who reaches it sees what skewer sees");
        }
        let clusters = std::sync::Arc::new(Probes {
            client: ctx.client.clone(),
            hub_server: hub_server.clone(),
            secrets_namespace: secrets_ns.clone(),
        });
        let differ = std::sync::Arc::new(AppDiffs(ctx.clone()));
        let ui = skewer_ui::Ui::start(
            ctx.client.clone(),
            differ,
            namespace.as_deref(),
            kubernetes,
            clusters,
        );
        tracing::info!(%addr, auth = kubernetes, "serving the dashboard");
        let dashboard = skewer_ui::router(ui);
        tokio::spawn(skewer_controller::http::serve(
            listener,
            dashboard,
            skewer_controller::http::Limits::default(),
        ));
    }
    tracing::info!(namespace = namespace.as_deref().unwrap_or("<all>"), data_dir = %args.data_dir.display(), "skewer running");
    tokio::spawn(trim_every(Duration::from_secs(30)));
    let overdue = async {
        shutdown::requested().await;
        tokio::time::sleep(STOP_GRACE).await;
    };
    tokio::pin!(overdue);
    loop {
        tokio::select! {
            () = skewer_controller::reconcilers::run(ctx.clone(), namespace.clone()) => {
                // Stopped by a signal, every reconcile over: hand the shards over at once.
                if let Some((leases, keeping)) = &sharded {
                    keeping.abort();
                    skewer_controller::shards::lease::release_all(leases, "skewer", &me).await;
                }
                tracing::info!("stopped");
                return Ok(());
            }
            () = &mut overdue => {
                // Leases are left to expire: a reconcile of this replica may still be writing.
                tracing::warn!(grace = ?STOP_GRACE, "reconciles still running; exiting without them");
                return Ok(());
            }
            // A leader that can no longer renew must stop writing at once: its controllers
            // and drift watches stop (dropped here), what it fetched and learnt stays (sources,
            // clients, the drift and ownership tables), and it campaigns again. An API server
            // that was away is no reason to exit.
            reason = &mut lost => {
                tracing::warn!(%reason, "no longer the leader: stopped writing; campaigning again");
                ctx.targets.retire_all();
                lost = unless_stopped(lead(campaign.as_ref(), args.lease_duration)).await?;
            }
        }
    }
}

/// Waits until the API server serves every one of skewer's resources, saying which are missing
/// and what to do (once, and again every minute), rather than letting each controller's watch
/// fail on its own.
async fn crds_installed(client: &kube::Client, server: &str) {
    let mut said: Option<std::time::Instant> = None;
    // CRDs applied a moment ago (bootstrap, install) are served within a few hundred ms: look
    // again soon, then less often.
    let mut pause = Duration::from_millis(250);
    loop {
        let missing = match skewer_api::manifests::missing_resources(client).await {
            Ok(missing) => missing,
            Err(e) => {
                tracing::warn!(error = %e, "asking the API server which of skewer's resources it serves");
                tokio::time::sleep(Duration::from_secs(2)).await;
                continue;
            }
        };
        if missing.is_empty() {
            if said.is_some() {
                tracing::info!("skewer's CRDs are installed");
            }
            return;
        }
        if said.is_none_or(|at| at.elapsed() >= Duration::from_secs(60)) {
            tracing::error!(
                missing = %missing.join(", "),
                "skewer's CRDs are not installed on {server}: run `skewer install` (or `kubectl apply -f deploy/crds.yaml`); waiting for them"
            );
            said = Some(std::time::Instant::now());
        }
        tokio::time::sleep(pause).await;
        pause = pause.saturating_mul(2).min(Duration::from_secs(2));
    }
}

/// glibc keeps what was freed in its per-thread arenas, in the middle of which it cannot
/// shrink the heap: a burst of work (a start listing every object, a thousand syncs, the
/// dashboard's first pages) leaves the process that much larger for good. Every `period`, the
/// free pages go back to the system (`malloc_trim`: a few milliseconds, off the runtime's
/// threads). Measured in the README's Performance section.
async fn trim_every(period: Duration) {
    let mut ticks = tokio::time::interval(period);
    loop {
        ticks.tick().await;
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        // SAFETY: malloc_trim only releases free memory of glibc's own arenas; it takes no
        // pointer and may be called from any thread at any time.
        let _ = tokio::task::spawn_blocking(|| unsafe { libc::malloc_trim(0) }).await;
    }
}

/// Once this process leads (at once without election, `campaign` `None`): the future that
/// ends when it no longer does.
type Lost =
    std::pin::Pin<Box<dyn std::future::Future<Output = skewer_controller::leader::Lost> + Send>>;

async fn lead(
    campaign: Option<&(kube::Api<k8s_openapi::api::coordination::v1::Lease>, String)>,
    duration: Duration,
) -> Lost {
    match campaign {
        Some((api, me)) => Box::pin(
            skewer_controller::leader::lead(
                api.clone(),
                "skewer-leader".into(),
                me.clone(),
                duration,
            )
            .await,
        ),
        None => Box::pin(std::future::pending()),
    }
}

/// The dashboard's Out of Sync diffs, through the deploy path.
struct AppDiffs(std::sync::Arc<Context>);

impl skewer_ui::Differ for AppDiffs {
    fn diff<'a>(
        &'a self,
        app: &'a skewer_api::Application,
        only: &'a [String],
    ) -> futures::future::BoxFuture<'a, Result<Vec<skewer_appliers::compare::Differs>, String>>
    {
        Box::pin(skewer_controller::reconcilers::application::diff(
            &self.0,
            app,
            Some(only),
            false,
        ))
    }
}

/// The dashboard's clusters page: the registered clusters, probed live.
struct Probes {
    client: kube::Client,
    hub_server: String,
    secrets_namespace: Option<String>,
}

impl skewer_ui::Clusters for Probes {
    fn secrets_namespace(&self) -> Option<&str> {
        self.secrets_namespace.as_deref()
    }

    fn list(
        &self,
    ) -> futures::future::BoxFuture<'_, Result<Vec<skewer_view::clusters::ClusterRow>, String>>
    {
        Box::pin(async move {
            skewer_controller::clusters::list::list(
                &self.client,
                &self.hub_server,
                self.secrets_namespace.as_deref(),
            )
            .await
            .map_err(|e| skewer_appliers::apply::api_message(&e))
        })
    }
}
