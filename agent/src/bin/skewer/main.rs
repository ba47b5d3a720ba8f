//! `skewer`: the command line. `run` is the daemon; the other commands are in `cli/`.

use std::time::Duration;

use anyhow::{Context as _, Result};
use clap::Parser;
use skewer_api::manifests;
use skewer_cli::control;
use skewer_cli::term::{Ended, Exit, Paint, Progress, paint};
use skewer_cli::{bootstrap, push};
use skewer_controller::clusters;
use skewer_view::named::ControlError;
use std::process::ExitCode;

mod args;
mod complete;
mod connect;

use args::*;
use tracing_subscriber::EnvFilter;

/// Prints `rows` as `output` asks; with `watch`, lists again every two seconds and prints the
/// rows that changed, until interrupted.
async fn print_rows<R, F, Fut>(
    output: Output,
    watch: bool,
    table: impl Fn(&[R]) -> String,
    list: F,
) -> Result<()>
where
    R: serde::Serialize + Clone,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Vec<R>>>,
{
    print_named(output, watch, None, table, list).await
}

/// `-o wide`: the tables this command prints show messages and revisions whole.
fn widen_if(output: Output) {
    if matches!(output, Output::Wide) {
        skewer_view::table::widen();
    }
}

/// What `get KIND NAME` looked for: `name` of `kind`, in `args`' namespace or any.
struct Looked<'a> {
    kind: &'a str,
    name: &'a str,
    namespace: Option<&'a str>,
}

impl<'a> Looked<'a> {
    fn of(kind: &'a str, args: &'a ListArgs) -> Option<Self> {
        Some(Self {
            kind,
            name: args.name.as_deref()?,
            namespace: (!args.all_namespaces).then_some(args.namespace.as_str()),
        })
    }
}

/// [`print_rows`] of the rows named `name` only (all when `None`); none is an error naming
/// what was looked for.
async fn print_named<R, F, Fut>(
    output: Output,
    watch: bool,
    looked: Option<Looked<'_>>,
    table: impl Fn(&[R]) -> String,
    mut list: F,
) -> Result<()>
where
    R: serde::Serialize + Clone,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Vec<R>>>,
{
    widen_if(output);
    let name = looked.as_ref().map(|l| l.name);
    let mut list = || {
        let rows = list();
        async move {
            let rows = rows.await?;
            Ok::<_, anyhow::Error>(match name {
                None => rows,
                Some(name) => rows
                    .into_iter()
                    .filter(|r| serde_json::to_value(r).is_ok_and(|v| v["name"] == name))
                    .collect(),
            })
        }
    };
    let mut rows = list().await?;
    if let (Some(l), true) = (&looked, rows.is_empty()) {
        let place = match l.namespace {
            Some(ns) => format!("in namespace {ns} (-A looks in every namespace)"),
            None => "in any namespace".into(),
        };
        let message = format!("no {} named {} {place}", l.kind, l.name);
        return Err(Ended::new(Exit::Failed, message).into());
    }
    match output {
        Output::Table | Output::Wide => print!("{}", table(&rows)),
        Output::Json => println!("{}", serde_json::to_string_pretty(&rows)?),
        Output::Yaml => print!("{}", serde_saphyr::to_string(&rows)?),
    }
    if !watch {
        return Ok(());
    }
    loop {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let now = list().await?;
        let changed = skewer_view::table::changed(&rows, &now);
        let picked: Vec<R> = changed
            .iter()
            .filter_map(|&i| now.get(i).cloned())
            .collect();
        if !picked.is_empty() {
            match output {
                Output::Table | Output::Wide => {
                    table(&picked).lines().skip(1).for_each(|l| println!("{l}"))
                }
                Output::Json => println!("{}", serde_json::to_string_pretty(&picked)?),
                Output::Yaml => print!("{}", serde_saphyr::to_string(&picked)?),
            }
        }
        rows = now;
    }
}

/// A client of the hub from KUBECONFIG (or in-cluster), for the commands that read it.
/// `skewer migrate`: read, convert with the daemon's own judgement, report; write or hand
/// over.
async fn migrate(
    files: Vec<std::path::PathBuf>,
    namespace: Option<String>,
    out: Option<std::path::PathBuf>,
    apply: bool,
    default_service_account: Option<String>,
    cross_namespace_refs: bool,
) -> Result<Exit> {
    use skewer_cli::migrate;
    let settings = skewer_controller::runtime::Settings::judging(
        default_service_account,
        cross_namespace_refs,
    );
    let judge =
        |o: &serde_json::Value| skewer_controller::reconcilers::verdict::refusal(o, &settings);
    let objects = match files.is_empty() {
        true => migrate::read_cluster(&hub_client().await?, namespace.as_deref()).await?,
        false => {
            let mut objects = migrate::read_files(&files)?;
            if let Some(ns) = &namespace {
                objects.retain(|o| o.pointer("/metadata/namespace") == Some(&ns.as_str().into()));
            }
            objects
        }
    };
    let plan = migrate::convert(objects, &judge);
    eprint!("{}", migrate::report(&plan));
    match &out {
        Some(dir) => {
            for f in migrate::write(&plan, dir)? {
                println!("{}", f.display());
            }
        }
        None if !apply => print!("{}", migrate::yaml(&plan)?),
        None => {}
    }
    if apply {
        if let Some(why) = migrate::handover::blocked(&plan) {
            return Err(Ended::new(Exit::Failed, why).into());
        }
        let client = hub_client().await?;
        for line in migrate::handover::apply(&client, &plan)
            .await
            .map_err(|e| Ended::new(Exit::Failed, format!("{e:#}")))?
        {
            eprintln!("{line}");
        }
    }
    Ok(if plan.whole() {
        Exit::Ok
    } else {
        Exit::Differs
    })
}

async fn hub_client() -> Result<kube::Client> {
    connect::client().await
}

fn main() -> ExitCode {
    // kube uses rustls with ring; install it as the process-wide provider explicitly.
    let _ = rustls::crypto::ring::default_provider().install_default();
    // A shell asking for completions (`COMPLETE=bash skewer -- …`) is answered, and the
    // process ends, before anything else.
    clap_complete::CompleteEnv::with_factory(<Cli as clap::CommandFactory>::command).complete();
    match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime.block_on(start()),
        Err(e) => {
            eprintln!("error: starting the runtime: {e}");
            ExitCode::from(Exit::Failed as u8)
        }
    }
}

async fn start() -> ExitCode {
    let cli = Cli::parse();
    // The daemon logs; a command says what went wrong itself, once, so kube's client does
    // not repeat it as a log line, nor the daemon's code a command borrows (`diff app/NAME`)
    // what it did.
    let quiet = if matches!(cli.command, Command::Run(_)) {
        "info,kube=warn"
    } else {
        "info,kube=warn,kube_client=off,skewer_controller=warn"
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(quiet));
    // Colour only on a terminal, and never with NO_COLOR: logs in files and pipes stay plain.
    let fmt = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(skewer_cli::term::colour_on_stderr())
        .with_writer(std::io::stderr);
    match cli.log_format {
        LogFormat::Json => fmt.json().init(),
        LogFormat::Text => fmt.init(),
    }
    connect::choose(connect::Choice {
        kubeconfig: cli.kubeconfig,
        context: cli.context,
    });
    match dispatch(cli.command).await {
        Ok(Exit::Ok) => ExitCode::SUCCESS,
        Ok(code) => ExitCode::from(code as u8),
        Err(e) => {
            let red = skewer_cli::term::colour_on_stderr();
            let error = paint(red, Paint::Red, "error:");
            // Out of reach, or no CRDs: said in the user's terms, with what to do.
            if let Some(said) = connect::explain(&e) {
                eprintln!("{error} {said}");
                return ExitCode::from(Exit::Failed as u8);
            }
            let code = e.downcast_ref::<Ended>().map_or(Exit::Failed, |e| e.code);
            eprintln!("{error} {e:#}");
            ExitCode::from(code as u8)
        }
    }
}

/// Runs one command; `Ok` carries the exit code of a command that worked but has something
/// to say (`diff` found differences).
async fn dispatch(command: Command) -> Result<Exit> {
    match command {
        Command::Run(args) => {
            let config = connect::config().await?;
            skewer_agent::daemon::run(args.into_daemon(), config).await?
        }
        Command::Build {
            path,
            namespace,
            source_root,
            kustomization,
        } => {
            if let Some(app) = application_named(&path) {
                let (_dir, ctx, app) = one_off(&namespace, &app).await?;
                let (_, manifests) =
                    skewer_controller::reconcilers::application::render(&ctx, &app)
                        .await
                        .map_err(|e| Ended::new(Exit::Failed, e))?;
                print!("{}", skewer_cli::build::yaml(&manifests)?);
                return Ok(Exit::Ok);
            }
            let yaml =
                skewer_cli::build::render(&path, source_root.as_deref(), kustomization.as_deref())?;
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
            skewer_cli::install::install(&client, &image.image()).await?;
        }
        Command::Uninstall { yes, prune_managed } => {
            let client = hub_client().await?;
            let u = skewer_cli::install::Uninstall { yes, prune_managed };
            for line in skewer_cli::install::uninstall(&client, &u).await? {
                println!("{line}");
            }
        }
        Command::Migrate {
            files,
            namespace,
            out,
            apply,
            default_service_account,
            no_cross_namespace_refs,
        } => {
            return migrate(
                files,
                namespace,
                out,
                apply,
                default_service_account,
                !no_cross_namespace_refs,
            )
            .await;
        }
        Command::Diff {
            path,
            kustomization,
            namespace,
            source_root,
        } => {
            if let Some(app) = application_named(&path) {
                return app_diff(&namespace, &app).await;
            }
            let Some(kustomization) = kustomization else {
                let message = format!(
                    "{}: name the Kustomization whose patches and inventory apply (--kustomization NAME), or an Application (app/NAME)",
                    path.display()
                );
                return Err(Ended::new(Exit::Usage, message).into());
            };
            let client = hub_client().await?;
            let (text, differs) = skewer_cli::diff::run(
                &client,
                &path,
                source_root.as_deref(),
                &kustomization,
                &namespace,
                skewer_cli::term::colour(),
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
            take_over,
        } => {
            let client = hub_client().await?;
            let name = match name {
                Some(n) => n,
                None => dev_name(&dir)?,
            };
            let dev = skewer_cli::dev::Dev {
                dir,
                source_root,
                owner: skewer_appliers::transform::Owner { name, namespace },
                prune: !no_prune,
                wait,
                take_over,
            };
            skewer_cli::dev::run_dev(client, dev).await?;
        }
        Command::Reconcile(args) | Command::Sync(args) if args.dry_run => {
            let t = &args.target;
            if t.target.kind != skewer_view::named::Kind::Application {
                let message = format!(
                    "{}: --dry-run shows an Application's sync; for a Kustomization, `skewer diff <its path in a checkout> --kustomization {} -n {}`",
                    t.target, t.target.name, t.namespace
                );
                return Err(Ended::new(Exit::Usage, message).into());
            }
            return app_diff(&t.namespace, &t.target.name).await;
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
            let root = skewer_view::tree::tree(&client, &t.namespace, &t.target)
                .await
                .map_err(ended)?;
            print!("{}", skewer_view::tree::render(&root));
        }
        Command::Create { what } => create(what).await?,
        Command::Logs {
            target,
            namespace,
            level,
            follow,
            tail,
            since,
            file,
            skewer_namespace,
        } => {
            let filter = skewer_view::logs::Filter {
                object: target
                    .as_ref()
                    .map(|t| (t.kind.resource().kind, namespace.clone(), t.name.clone())),
                level,
            };
            let printed = match file {
                Some(path) => skewer_cli::logs::from_file(&path, &filter)?,
                None => {
                    let client = hub_client().await?;
                    let reading = skewer_cli::logs::Reading {
                        follow,
                        tail,
                        since,
                    };
                    skewer_cli::logs::from_pods(&client, &skewer_namespace, &filter, &reading)
                        .await?
                }
            };
            if printed == 0 {
                let about = target.map_or(String::new(), |t| format!(" about {t} in {namespace}"));
                eprintln!("no log lines{about}");
            }
        }

        Command::Delete {
            target,
            namespace,
            yes,
            wait,
        } => {
            let client = hub_client().await?;
            let confirm = |deed: &str| {
                if yes {
                    return Ok(());
                }
                skewer_cli::term::confirm("delete", deed).map_err(|e| e.message)
            };
            let line = control::delete(&client, &namespace, &target, wait, confirm)
                .await
                .map_err(ended)?;
            println!("{line}");
        }
        Command::History {
            target,
            namespace,
            output,
        } => {
            let client = hub_client().await?;
            let (history, pinned) = control::history(&client, &namespace, &target)
                .await
                .map_err(ended)?;
            widen_if(output);
            match output {
                Output::Table | Output::Wide if history.is_empty() => {
                    eprintln!("{target}: nothing deployed yet")
                }
                Output::Table | Output::Wide => print!(
                    "{}",
                    skewer_view::history::table(&history, pinned, jiff::Timestamp::now())
                ),
                Output::Json => println!("{}", serde_json::to_string_pretty(&history)?),
                Output::Yaml => print!("{}", serde_saphyr::to_string(&history)?),
            }
        }
        Command::Rollback {
            target,
            id,
            namespace,
            wait,
            undo,
        } => {
            let client = hub_client().await?;
            let line = match undo {
                true => control::unpin(&client, &namespace, &target, wait).await,
                false => control::rollback(&client, &namespace, &target, id, wait).await,
            }
            .map_err(ended)?;
            println!("{line}");
        }
        Command::Why {
            target,
            namespace,
            output,
        } => {
            let client = hub_client().await?;
            let answer = skewer_view::why::why(&client, &namespace, &target)
                .await
                .map_err(ended)?;
            match output {
                Output::Table | Output::Wide => print!("{}", skewer_view::why::render(&answer)),
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
                |rows| skewer_view::events::table(rows, all, jiff::Timestamp::now()),
                || async {
                    Ok(
                        skewer_view::events::list(&client, namespace.as_deref(), only.as_ref())
                            .await?,
                    )
                },
            )
            .await?;
        }
        Command::Get { what } => get(what).await?,
        Command::Version => version().await?,
        Command::Check { pre } => {
            let client = hub_client().await?;
            let checks = if pre {
                skewer_cli::check::pre(&client).await?
            } else {
                skewer_cli::check::installed(&client, Duration::from_secs(15)).await?
            };
            print!("{}", skewer_cli::check::render(&checks));
            if !skewer_cli::check::passed(&checks) {
                return Err(Ended::new(Exit::Differs, "some checks failed").into());
            }
        }

        Command::Export {
            targets,
            namespace,
            all_namespaces,
        } => {
            let client = hub_client().await?;
            let namespace = (!all_namespaces).then_some(namespace);
            let objects = skewer_view::export::export(&client, namespace.as_deref(), &targets)
                .await
                .map_err(ended)?;
            for obj in objects {
                print!("---\n{}", serde_saphyr::to_string(&obj)?);
            }
        }
        Command::Completion { shell } => {
            // The hook that asks skewer itself at each <TAB>, so that object names come
            // from the cluster.
            use clap_complete::env::{Bash, Elvish, EnvCompleter, Fish, Powershell, Zsh};
            let completer: &dyn EnvCompleter = match shell {
                clap_complete::Shell::Bash => &Bash,
                clap_complete::Shell::Zsh => &Zsh,
                clap_complete::Shell::Fish => &Fish,
                clap_complete::Shell::Elvish => &Elvish,
                _ => &Powershell,
            };
            completer.write_registration(
                "COMPLETE",
                "skewer",
                "skewer",
                "skewer",
                &mut std::io::stdout(),
            )?;
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
                    for (name, content) in files.into_iter().chain(manifests::variants(&image)?) {
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

/// `skewer version`: the client's line first, so that it prints even when the cluster is out
/// of reach.
async fn version() -> Result<()> {
    println!("client   skewer {}", env!("CARGO_PKG_VERSION"));
    let client = hub_client().await?;
    let server = client.apiserver_version().await?;
    println!(
        "cluster  Kubernetes {} at {}",
        server.git_version,
        connect::server().unwrap_or_default()
    );
    let deployments: kube::Api<k8s_openapi::api::apps::v1::Deployment> =
        kube::Api::namespaced(client, manifests::NAMESPACE);
    let line = match deployments.get_opt("skewer").await? {
        None => format!(
            "not installed (no Deployment {}/skewer; `skewer install` or `skewer bootstrap`)",
            manifests::NAMESPACE
        ),
        Some(d) => {
            let image = d
                .spec
                .as_ref()
                .and_then(|s| s.template.spec.as_ref())
                .and_then(|s| s.containers.first())
                .and_then(|c| c.image.clone())
                .unwrap_or_default();
            let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
            let ready = d.status.and_then(|s| s.ready_replicas).unwrap_or(0);
            format!("{image} ({ready}/{want} ready)")
        }
    };
    println!("skewer   {line}");
    Ok(())
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
    use skewer_view::{apps, appsets, table as get};
    let client = hub_client().await?;
    let (args, which) = match what {
        Get::All {
            namespace,
            all_namespaces,
            output,
        } => {
            let namespace = (!all_namespaces).then_some(namespace);
            return get_all(&client, namespace.as_deref(), output).await;
        }
        Get::Kustomizations(a) => (a, Listed::Kustomizations),
        Get::Sources(a) => (a, Listed::Sources),
        Get::Receivers(a) => (a, Listed::Receivers),
        Get::Providers(a) => (a, Listed::Providers),
        Get::Alerts(a) => (a, Listed::Alerts),
        Get::Applications(args) => {
            let namespace = (!args.all_namespaces).then_some(args.namespace.clone());
            let all = args.all_namespaces;
            return print_named(
                args.output,
                args.watch,
                Looked::of("Application", &args),
                |rows| apps::table(rows, all),
                || async { Ok(apps::list(&client, namespace.as_deref()).await?) },
            )
            .await;
        }
        Get::Applicationsets(args) => {
            let namespace = (!args.all_namespaces).then_some(args.namespace.clone());
            let all = args.all_namespaces;
            return print_named(
                args.output,
                args.watch,
                Looked::of("ApplicationSet", &args),
                |rows| appsets::table(rows, all),
                || async { Ok(appsets::list(&client, namespace.as_deref()).await?) },
            )
            .await;
        }
        Get::Shards {
            namespace,
            output,
            watch,
        } => {
            let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
                kube::Api::namespaced(client.clone(), &namespace);
            return print_rows(output, watch, skewer_view::shards::table, || async {
                let selector = format!("{}=skewer", skewer_view::shards::GROUP_LABEL);
                let list = leases
                    .list(&kube::api::ListParams::default().labels(&selector))
                    .await?;
                Ok(skewer_view::shards::rows(
                    &list.items,
                    jiff::Timestamp::now(),
                ))
            })
            .await;
        }
        Get::Clusters {
            namespace,
            all_namespaces,
            output,
        } => {
            let server = connect::server().unwrap_or_default();
            let namespace = (!all_namespaces).then_some(namespace);
            return print_rows(output, false, clusters::list::table, || async {
                Ok(clusters::list::list(&client, server, namespace.as_deref()).await?)
            })
            .await;
        }
    };
    let namespace = (!args.all_namespaces).then_some(args.namespace.clone());
    let all = args.all_namespaces;
    let kind = match which {
        Listed::Kustomizations => "Kustomization",
        Listed::Sources => "GitRepository or OCIRepository",
        Listed::Receivers => "Receiver",
        Listed::Providers => "Provider",
        Listed::Alerts => "Alert",
    };
    print_named(
        args.output,
        args.watch,
        Looked::of(kind, &args),
        |rows| get::table(rows, all, which == Listed::Sources),
        || async {
            let ns = namespace.as_deref();
            Ok(match which {
                Listed::Kustomizations => get::kustomizations(&client, ns).await,
                Listed::Sources => get::sources(&client, ns).await,
                Listed::Receivers => get::receivers(&client, ns).await,
                Listed::Providers => get::providers(&client, ns).await,
                Listed::Alerts => get::alerts(&client, ns).await,
            }?)
        },
    )
    .await
}

/// The Application `path` names as `app/NAME` (or `application/NAME`), when no such local
/// directory exists.
fn application_named(path: &std::path::Path) -> Option<String> {
    if path.exists() {
        return None;
    }
    let text = path.to_str()?;
    let named: skewer_view::named::Named = text.parse().ok()?;
    (named.kind == skewer_view::named::Kind::Application).then_some(named.name)
}

/// A context of the daemon's for one question about Application `namespace/name`: its
/// artifacts in a temporary directory (kept as long as the first value), its repository
/// credentials read as the daemon reads them.
async fn one_off(
    namespace: &str,
    name: &str,
) -> Result<(
    tempfile::TempDir,
    std::sync::Arc<skewer_controller::runtime::context::Context>,
    skewer_api::Application,
)> {
    let config = connect::config().await?;
    let client = kube::Client::try_from(config.clone())?;
    let api: kube::Api<skewer_api::Application> = kube::Api::namespaced(client.clone(), namespace);
    let app = api.get_opt(name).await?.ok_or_else(|| {
        Ended::new(
            Exit::Failed,
            format!("application/{name} does not exist in namespace {namespace}"),
        )
    })?;
    let dir = tempfile::tempdir()?;
    let clusters = std::env::var("SKEWER_CLUSTER_SECRET_NAMESPACE")
        .unwrap_or_else(|_| skewer_api::manifests::NAMESPACE.into());
    let ctx = skewer_controller::runtime::context::Context::one_off(
        config,
        client,
        &clusters,
        dir.path(),
    )
    .await?;
    let follow = ctx
        .app_sources
        .follow_credentials(&ctx.client, Some(namespace));
    let listed = ctx.app_sources.credentials_listed();
    if tokio::time::timeout(Duration::from_secs(10), listed)
        .await
        .is_err()
    {
        eprintln!(
            "could not list the repository Secrets of namespace {namespace}: reading the repository without credentials"
        );
    }
    // The caches stay filled once listed; the followers may stop.
    drop(follow);
    Ok((dir, ctx, app))
}

/// `skewer diff app/NAME` and `sync app/NAME --dry-run`: what a sync would change.
async fn app_diff(namespace: &str, name: &str) -> Result<Exit> {
    let (_dir, ctx, app) = one_off(namespace, name).await?;
    let diffs = skewer_controller::reconcilers::application::diff(&ctx, &app, None, true)
        .await
        .map_err(|e| Ended::new(Exit::Failed, format!("application/{name}: {e}")))?;
    print!(
        "{}",
        skewer_cli::diff::report(&diffs, skewer_cli::term::colour())
    );
    Ok(if diffs.is_empty() {
        Exit::Ok
    } else {
        Exit::Differs
    })
}

/// `skewer create`: the object from flags, judged as the daemon would, then printed or applied.
async fn create(what: CreateWhat) -> Result<()> {
    use skewer_cli::create::{self, What};
    let (name, out, what) = match what {
        CreateWhat::Source {
            kind: CreateSource::Git { name, git, out },
        } => (name, out, What::Git(git)),
        CreateWhat::Source {
            kind: CreateSource::Oci { name, oci, out },
        } => (name, out, What::Oci(oci)),
        CreateWhat::Kustomization { name, ks, out } => (name, out, What::Kustomization(ks)),
        CreateWhat::Application { name, app, out } => (name, out, What::Application(app)),
    };
    let object =
        create::object(&what, &name, &out.namespace).map_err(|e| Ended::new(Exit::Usage, e))?;
    // As a daemon with its default flags would judge it.
    let settings = skewer_controller::runtime::Settings::judging(None, true);
    if let Some(refused) = skewer_controller::reconcilers::verdict::refusal(&object, &settings) {
        return Err(Ended::new(Exit::Failed, format!("skewer would refuse it: {refused}")).into());
    }
    if out.export {
        print!("---\n{}", serde_saphyr::to_string(&object)?);
        return Ok(());
    }
    let client = hub_client().await?;
    let line = create::apply(&client, &object).await.map_err(ended)?;
    println!("{line}");
    Ok(())
}

/// `get all`: one table of the kinds `get::table` shows, then Applications and
/// ApplicationSets, each only when there are some.
async fn get_all(client: &kube::Client, ns: Option<&str>, output: Output) -> Result<()> {
    widen_if(output);
    use skewer_view::{apps, appsets, table as get};
    let mut rows = get::kustomizations(client, ns).await?;
    rows.extend(get::sources(client, ns).await?);
    rows.extend(get::receivers(client, ns).await?);
    rows.extend(get::providers(client, ns).await?);
    rows.extend(get::alerts(client, ns).await?);
    let (applications, sets) = (
        apps::list(client, ns).await?,
        appsets::list(client, ns).await?,
    );
    let all = ns.is_none();
    match output {
        Output::Table | Output::Wide => {
            let tables = [
                (!rows.is_empty()).then(|| get::table(&rows, all, true)),
                (!applications.is_empty()).then(|| apps::table(&applications, all)),
                (!sets.is_empty()).then(|| appsets::table(&sets, all)),
            ];
            let tables: Vec<String> = tables.into_iter().flatten().collect();
            if tables.is_empty() {
                eprintln!("nothing of skewer's here (see the namespace, or -A)");
            }
            print!("{}", tables.join("\n"));
        }
        Output::Json | Output::Yaml => {
            let all = serde_json::json!({"objects": rows, "applications": applications, "applicationSets": sets});
            match output {
                Output::Json => println!("{}", serde_json::to_string_pretty(&all)?),
                _ => print!("{}", serde_saphyr::to_string(&all)?),
            }
        }
    }
    Ok(())
}

/// What `get` lists through [`get::table`].
#[derive(Clone, Copy, PartialEq, Eq)]
enum Listed {
    Kustomizations,
    Sources,
    Receivers,
    Providers,
    Alerts,
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

    /// Every command a person runs shows an example in its `--help`.
    #[test]
    fn every_command_has_an_example() {
        fn leaves(cmd: &clap::Command, path: String, out: &mut Vec<String>) {
            let subs: Vec<&clap::Command> = cmd
                .get_subcommands()
                .filter(|c| c.get_name() != "help")
                .collect();
            if subs.is_empty() {
                let example = cmd
                    .get_after_help()
                    .is_some_and(|h| h.to_string().contains("Example"));
                if !example {
                    out.push(path);
                }
                return;
            }
            for sub in subs {
                leaves(sub, format!("{path} {}", sub.get_name()), out);
            }
        }
        let mut missing = Vec::new();
        leaves(&Cli::command(), "skewer".into(), &mut missing);
        assert!(missing.is_empty(), "without an example: {missing:#?}");
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
        skewer_view::golden!("help.txt", &text);
    }
}
