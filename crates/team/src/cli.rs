//! `dsh worker` and `dsh team`: the command lines of running dsh for a team.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use dsh_store_pg::Store;
use serde_json::json;

use crate::transport::{TRANSPORT_ENV, Transport};
use crate::worker::{WorkerOptions, read_events};

/// The environment variable naming the team store when `--storage` is not given.
pub const STORAGE_ENV: &str = "DSH_STORAGE";

/// The pool input goes to, and workers take from, unless `--pool` says otherwise.
pub const DEFAULT_POOL: &str = "default";

const DEFAULT_LEASE_TTL_MS: u64 = 10_000;
const DEFAULT_POLL_MS: u64 = 250;
const DEFAULT_POLL_WITH_TRANSPORT_MS: u64 = 2000;

pub const WORKER_HELP: &str = "\
Usage: dsh worker [options]

Runs the turns of sessions kept in a PostgreSQL team store: claims a session of its pool that
has input waiting, holds its lease while one turn runs (`dsh headless` with the session's log),
records every event in the store, and takes the next one. Any number of workers may share a
pool; a session whose worker died is claimed again once its lease expires, and the open turn
is closed as after a crash.

Options:
  --storage <url>        the team store (postgres://user@host/db); default $DSH_STORAGE,
                         then team.storage in settings.yaml (team.transport and team.pool
                         likewise)
  --pool <name>          the pool to take work from (default: default)
  --owner <name>         this worker's name in leases (default: <hostname>-<pid>)
  --lease-ttl-ms <ms>    how long a lease lasts without renewal (default 10000; renewed
                         every third of it)
  --transport <url>      NATS with JetStream (nats://127.0.0.1:4222; default
                         $DSH_TRANSPORT): idle workers wake when input is queued, turns
                         publish their events live for gateways
  --poll-ms <ms>         how often an idle worker looks for input in PostgreSQL (default 250;
                         2000 with a transport, where it is the fallback)
  --until-idle           stop once the pool has no input left (waiting or being run);
                         input whose turn failed 3 times in a row before recording it
                         is left waiting, and the worker then exits 1 naming its sessions
  --sandbox <kind>       local (default: the usual per-command sandbox) or docker: each
                         session's commands run in a container of its own (workspace bound
                         read-write, no network, no capabilities), replaced at every claim,
                         so commands of an older lease die with theirs; at start and every
                         30 s it also removes this store's containers on the host whose lease
                         is over
  --docker-image <img>   the container image (default: an empty image with the host's /usr,
                         /bin, /lib and /etc bound read-only; made once, no registry needed)
  --docker-network <n>   the container's network (default none)
  --docker-memory <size> each container's memory (512m, 2g), swap included (default: no
                         limit); a command past it is killed by the kernel
  --docker-cpus <n>      each container's share of CPUs (1, 0.5; default: no limit)
";

pub const SERVE_HELP: &str = "\
Usage: dsh serve [options]

An HTTP gateway to a PostgreSQL team store. It keeps no state of its own: run as many as you
like, behind any load balancer. Requests carry `Authorization: Bearer <token>` of an account
(`dsh team user add`); an account sees only its own sessions, an admin account all of them.

  POST /v1/login {\"user\",\"password\"}  a sign-in token for an account with a password
                                       (12 hours); POST /v1/logout ends it
  GET  /                               the team page: sign in, sessions, a session's log
                                       followed live, input, stop
  GET  /v1/sessions                    the caller's sessions
  POST /v1/sessions {\"text\"}           a new session with its first input queued
  GET  /v1/sessions/<id>               head seq, lease, pending input
  POST /v1/sessions/<id>/messages {\"text\"}
                                       queue the next input
  POST /v1/sessions/<id>/cancel        stop the running turn (409: none runs)
  GET  /v1/sessions/<id>/events        server-sent events (id: seq, data: the record),
                                       resumed after Last-Event-ID (or ?after=<seq>)

Options:
  --storage <url>        the team store; default $DSH_STORAGE
  --listen <addr:port>   where to listen (default 127.0.0.1:8787; port 0 picks one); the
                         first line on stdout is `listening on http://<addr>`
  --pool <name>          the pool new input is queued on (default: default)
  --transport <url>      NATS with JetStream (default $DSH_TRANSPORT): event streams get
                         events live, de-duplicated by seq, gaps filled from PostgreSQL; new
                         input wakes the workers
  --poll-ms <ms>         how often an event stream looks in PostgreSQL (default 250; 2000
                         with a transport, where it is the fallback)
  --oidc-issuer <url>    also accept JWTs signed by this OpenID Connect provider (keys from
                         its discovery document); needs --oidc-audience
  --oidc-audience <id>   the audience (client id) those tokens must carry
  --oidc-claim <name>    the claim naming the account (default sub); the account must
                         exist (dsh team user add). Name accounts after a claim the provider
                         controls: sub is; email or preferred_username only where the
                         provider verifies them
";

pub const TEAM_HELP: &str = "\
Usage: dsh team <command> [options]

The PostgreSQL team store that `dsh worker` runs sessions from.

Commands:
  migrate                   create or update the store's tables
  submit [--session <id>] [--user <name>] [--provider <p> --model <m>] [--cwd <dir>] <text>
                            queue <text> as the next input of a session (a new one, of
                            account <name> when given, without --session); prints
                            {\"sessionId\":…,\"inboxId\":…}; --provider and --model (with
                            --reasoning-effort, --max-tokens) choose the turn's model, which
                            later input naming none keeps (default: the worker's); --cwd
                            <dir> moves the session first (against its current directory,
                            to an existing one inside the worker's workspace)
  events <id> [--after <seq>] [--meta]
                            print a session's stored events as JSON lines (the records of its
                            log); --meta wraps each as {\"seq\":…,\"epoch\":…,\"record\":…}
  cancel <id>               stop the running turn of a session, as Ctrl-C would
  sessions [--user <name>]  list sessions (of one account), newest first, as JSON lines
  show <id>                 print a session's row: head seq, lease owner and epoch, pending
                            input
  user add <name> [--admin] [--password-stdin]
                            add an account for `dsh serve`; prints its standing token once
                            (only its SHA-256 is stored); --password-stdin also sets a
                            password, the first line of standard input
  user password <name>      set an account's password from the first line of standard input
                            (at least 8 characters; stored as a PBKDF2 hash), for sign-in at
                            POST /v1/login; sign-in tokens of the old password end
  user token <name>         give an account a new standing token, printed once; the old one
                            stops working at once (sign-ins by password are not touched)
  user remove <name>        remove an account and end its sign-ins; its sessions are kept,
                            visible to admin accounts only
  user list                 the accounts as JSON lines: admin, whether a password is set,
                            live sign-ins, sessions owned

Options (every command):
  --storage <url>           the team store; default $DSH_STORAGE
  --pool <name>             the pool input is queued on (default: default)
  --transport <url>         NATS: submit wakes the pool's workers (default $DSH_TRANSPORT)
";

/// The first line of standard input as a new password, hashed. Not from a terminal: the
/// line would be echoed.
fn password_from_stdin() -> Result<String, String> {
    if std::io::IsTerminal::is_terminal(&std::io::stdin()) {
        return Err(
            "the password is read from standard input, not a terminal (it would be echoed): pipe it in, e.g. < file"
                .into(),
        );
    }
    let mut line = String::new();
    std::io::stdin()
        .read_line(&mut line)
        .map_err(|e| format!("cannot read the password from standard input: {e}"))?;
    let password = line.strip_suffix('\n').unwrap_or(&line);
    let password = password.strip_suffix('\r').unwrap_or(password);
    crate::auth::check_password(password)?;
    crate::auth::hash_password(password)
}

/// The `team` section of `$DSH_HOME/settings.yaml`: `storage`, `transport` and `pool`, each a
/// string, used when neither the flag nor the environment variable gives one.
#[derive(Default)]
struct TeamSettings {
    storage: Option<String>,
    transport: Option<String>,
    pool: Option<String>,
}

fn team_settings(home: &Path) -> Result<TeamSettings, String> {
    let settings = dsh_host::config::Settings::load(home.join("settings.yaml"))?;
    let Some(section) = settings.section("team").and_then(|v| v.as_object()) else {
        return Ok(TeamSettings::default());
    };
    let mut out = TeamSettings::default();
    for (key, value) in section {
        let slot = match key.as_str() {
            "storage" => &mut out.storage,
            "transport" => &mut out.transport,
            "pool" => &mut out.pool,
            other => {
                return Err(format!(
                    "{}: settings section \"team\" has no key \"{other}\" (it takes storage, transport and pool)",
                    settings.path.display()
                ));
            }
        };
        match value {
            serde_json::Value::String(s) if !s.is_empty() => *slot = Some(s.clone()),
            serde_json::Value::Null => {}
            _ => {
                return Err(format!(
                    "{}: settings key team.{key} must be a non-empty string",
                    settings.path.display()
                ));
            }
        }
    }
    Ok(out)
}

/// The team store `dsh sessions` reads: `flag` (`--storage`), else `$DSH_STORAGE`, else
/// `team.storage` in settings; `None` (or `--storage local`): the local logs.
pub fn storage_url(home: &Path, flag: Option<String>) -> Result<Option<String>, String> {
    let chosen = match flag {
        Some(f) => Some(f),
        None => match dsh_host::environ::secret_var(STORAGE_ENV).filter(|s| !s.is_empty()) {
            Some(env) => Some(env),
            None => team_settings(home)?.storage,
        },
    };
    Ok(chosen.filter(|s| s != "local"))
}

/// Runs `dsh worker …` (`command` = `worker`) or `dsh team …` (`team`).
pub fn run(home: &Path, command: &str, args: &[String]) -> ExitCode {
    let parsed = match Args::parse(args) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    if parsed.help {
        let help = if command == "worker" {
            WORKER_HELP
        } else {
            TEAM_HELP
        };
        print!("{help}");
        return ExitCode::SUCCESS;
    }
    let settings = match team_settings(home) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("dsh: {e}");
            return ExitCode::from(2);
        }
    };
    let mut parsed = parsed;
    if parsed.transport.is_none() && dsh_host::environ::secret_var(TRANSPORT_ENV).is_none() {
        parsed.transport = settings.transport;
    }
    if parsed.pool.is_none() {
        parsed.pool = settings.pool;
    }
    let Some(url) = parsed
        .storage
        .clone()
        .or_else(|| dsh_host::environ::secret_var(STORAGE_ENV).filter(|s| !s.is_empty()))
        .or(settings.storage)
    else {
        eprintln!(
            "error: no team store: pass --storage postgres://…, set {STORAGE_ENV}, or set team.storage in settings.yaml"
        );
        return ExitCode::from(1);
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("dsh: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let result = runtime.block_on(async {
        match command {
            "worker" => worker(home, &url, parsed).await,
            "serve" => serve(&url, parsed).await,
            _ => team(&url, parsed).await,
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("dsh {command}: {e}");
            ExitCode::from(1)
        }
    }
}

#[derive(Default)]
struct Args {
    help: bool,
    storage: Option<String>,
    pool: Option<String>,
    owner: Option<String>,
    session: Option<String>,
    lease_ttl_ms: Option<u64>,
    poll_ms: Option<u64>,
    after: Option<i64>,
    until_idle: bool,
    meta: bool,
    admin: bool,
    password_stdin: bool,
    listen: Option<String>,
    user: Option<String>,
    transport: Option<String>,
    oidc_issuer: Option<String>,
    oidc_audience: Option<String>,
    oidc_claim: Option<String>,
    sandbox: Option<String>,
    docker_image: Option<String>,
    docker_network: Option<String>,
    docker_memory: Option<String>,
    docker_cpus: Option<String>,
    /// `submit`'s model route: `--provider`, `--model`, `--reasoning-effort`, `--max-tokens`.
    route: serde_json::Map<String, serde_json::Value>,
    /// `submit --cwd`: the directory the session moves to first.
    cwd: Option<String>,
    positional: Vec<String>,
}

impl Args {
    fn parse(args: &[String]) -> Result<Self, String> {
        let mut out = Args::default();
        let mut i = 0;
        while i < args.len() {
            let arg = args[i].as_str();
            let (name, inline) = match arg.split_once('=') {
                Some((n, v)) if n.starts_with("--") => (n, Some(v.to_string())),
                _ => (arg, None),
            };
            let mut value = |what: &str| -> Result<String, String> {
                if let Some(v) = inline.clone() {
                    return Ok(v);
                }
                i += 1;
                args.get(i)
                    .cloned()
                    .ok_or_else(|| format!("option '{name} <{what}>' argument missing"))
            };
            let number = |v: String, flag: &str| -> Result<u64, String> {
                v.parse()
                    .map_err(|_| format!("{flag} takes a whole number, not {v:?}"))
            };
            match name {
                "-h" | "--help" => out.help = true,
                "--storage" => out.storage = Some(value("url")?),
                "--pool" => out.pool = Some(value("name")?),
                "--owner" => out.owner = Some(value("name")?),
                "--session" => out.session = Some(value("id")?),
                "--lease-ttl-ms" => out.lease_ttl_ms = Some(number(value("ms")?, name)?),
                "--poll-ms" => out.poll_ms = Some(number(value("ms")?, name)?),
                "--after" => {
                    let v = value("seq")?;
                    out.after = Some(
                        v.parse()
                            .map_err(|_| format!("--after takes a seq number, not {v:?}"))?,
                    );
                }
                "--until-idle" => out.until_idle = true,
                "--meta" => out.meta = true,
                "--admin" => out.admin = true,
                "--password-stdin" => out.password_stdin = true,
                "--user" => out.user = Some(value("name")?),
                "--transport" => out.transport = Some(value("url")?),
                "--listen" => out.listen = Some(value("addr:port")?),
                "--oidc-issuer" => out.oidc_issuer = Some(value("url")?),
                "--oidc-audience" => out.oidc_audience = Some(value("client id")?),
                "--oidc-claim" => out.oidc_claim = Some(value("claim")?),
                "--sandbox" => out.sandbox = Some(value("local|docker")?),
                "--docker-image" => out.docker_image = Some(value("image")?),
                "--docker-network" => out.docker_network = Some(value("network")?),
                "--docker-memory" => out.docker_memory = Some(value("size")?),
                "--docker-cpus" => out.docker_cpus = Some(value("cpus")?),
                "--provider" | "--model" | "--reasoning-effort" => {
                    let key = match name {
                        "--provider" => "provider",
                        "--model" => "model",
                        _ => "reasoningEffort",
                    };
                    out.route.insert(key.into(), json!(value("name")?));
                }
                "--cwd" => out.cwd = Some(value("dir")?),
                "--max-tokens" => {
                    let n = number(value("n")?, name)?;
                    out.route.insert("maxTokens".into(), json!(n));
                }
                "--" => {
                    out.positional.extend(args[i + 1..].iter().cloned());
                    break;
                }
                _ if arg.starts_with('-') && arg.len() > 1 => {
                    return Err(format!("unknown option {arg}"));
                }
                _ => out.positional.push(arg.to_string()),
            }
            i += 1;
        }
        Ok(out)
    }

    fn pool(&self) -> String {
        self.pool
            .clone()
            .unwrap_or_else(|| DEFAULT_POOL.to_string())
    }

    /// `--transport`, else `$DSH_TRANSPORT`.
    fn transport(&self) -> Option<String> {
        self.transport
            .clone()
            .or_else(|| dsh_host::environ::secret_var(TRANSPORT_ENV))
            .filter(|s| !s.is_empty())
    }

    /// `--poll-ms`, else PostgreSQL is looked at often without a transport and now and
    /// then with one (as a fallback for lost wake-ups and live events).
    fn poll(&self) -> Duration {
        let default = if self.transport().is_some() {
            DEFAULT_POLL_WITH_TRANSPORT_MS
        } else {
            DEFAULT_POLL_MS
        };
        Duration::from_millis(self.poll_ms.unwrap_or(default).max(1))
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "worker".into())
}

async fn worker(home: &Path, url: &str, args: Args) -> Result<(), String> {
    if let Some(extra) = args.positional.first() {
        return Err(format!(
            "unexpected argument {extra:?} (see dsh worker --help)"
        ));
    }
    let owner = args
        .owner
        .clone()
        .unwrap_or_else(|| format!("{}-{}", hostname(), std::process::id()));
    if owner.is_empty() {
        return Err("--owner must not be empty".into());
    }
    let lease_ttl = Duration::from_millis(args.lease_ttl_ms.unwrap_or(DEFAULT_LEASE_TTL_MS));
    if lease_ttl < Duration::from_millis(300) {
        return Err("--lease-ttl-ms must be at least 300".into());
    }
    let dsh = std::env::current_exe()
        .map_err(|e| format!("cannot find the dsh executable to run turns with: {e}"))?;
    let docker_flags = [
        &args.docker_image,
        &args.docker_network,
        &args.docker_memory,
        &args.docker_cpus,
    ];
    let docker = match args.sandbox.as_deref() {
        None | Some("local") if docker_flags.iter().all(|f| f.is_none()) => None,
        Some("docker") => {
            if let Some(m) = &args.docker_memory {
                crate::docker::check_memory(m)?;
            }
            if let Some(c) = &args.docker_cpus {
                crate::docker::check_cpus(c)?;
            }
            Some(crate::docker::DockerOptions {
                image: args.docker_image.clone(),
                network: args.docker_network.clone().unwrap_or_else(|| "none".into()),
                memory: args.docker_memory.clone(),
                cpus: args.docker_cpus.clone(),
            })
        }
        None | Some("local") => {
            return Err("--docker-* options need --sandbox docker".into());
        }
        Some(other) => {
            return Err(format!("--sandbox takes local or docker, not {other:?}"));
        }
    };
    let options = WorkerOptions {
        url: url.to_string(),
        pool: args.pool(),
        scratch: home.join("team").join(crate::safe_segment(&owner)),
        owner,
        lease_ttl,
        poll: args.poll(),
        until_idle: args.until_idle,
        transport: args.transport(),
        dsh,
        docker,
    };
    crate::worker::run(&options)
        .await
        .map_err(|e| e.to_string())
}

async fn serve(url: &str, args: Args) -> Result<(), String> {
    if let Some(extra) = args.positional.first() {
        return Err(format!(
            "unexpected argument {extra:?} (see dsh serve --help)"
        ));
    }
    let listen = args.listen.as_deref().unwrap_or("127.0.0.1:8787");
    let listen = listen.parse().map_err(|_| {
        format!("--listen takes an address and port (127.0.0.1:8787), not {listen:?}")
    })?;
    let oidc = match (args.oidc_issuer.clone(), args.oidc_audience.clone()) {
        (None, None) if args.oidc_claim.is_none() => None,
        (Some(issuer), Some(audience)) if !issuer.is_empty() && !audience.is_empty() => {
            Some(crate::oidc::OidcOptions {
                issuer,
                audience,
                claim: args.oidc_claim.clone().unwrap_or_else(|| "sub".into()),
            })
        }
        _ => {
            return Err(
                "OIDC sign-in needs both --oidc-issuer <url> and --oidc-audience <client id>"
                    .into(),
            );
        }
    };
    crate::serve::run(crate::serve::ServeOptions {
        oidc,
        url: url.to_string(),
        listen,
        pool: args.pool(),
        poll: args.poll(),
        transport: args.transport(),
    })
    .await
}

async fn team(url: &str, args: Args) -> Result<(), String> {
    let Some(command) = args.positional.first().cloned() else {
        return Err("a command is missing (see dsh team --help)".into());
    };
    let mut store = Store::connect(url).await.map_err(|e| e.to_string())?;
    store.migrate().await.map_err(|e| e.to_string())?;
    let rest = &args.positional[1..];
    let one = |what: &str| -> Result<&String, String> {
        match rest {
            [only] => Ok(only),
            [] => Err(format!("dsh team {command} needs {what}")),
            [_, extra, ..] => Err(format!("unexpected argument {extra:?}")),
        }
    };
    match command.as_str() {
        "migrate" => Ok(()),
        "submit" => {
            let text = one("the text to queue")?;
            let route =
                crate::route::Route::from_request(&serde_json::Value::Object(args.route.clone()))
                    .map_err(|e| {
                    format!("{e} (--provider, --model, --reasoning-effort, --max-tokens)")
                })?;
            let session = match &args.session {
                Some(id) => {
                    store.session(id).await.map_err(|e| e.to_string())?;
                    id.clone()
                }
                None => {
                    let id = format!("session-{}", uuid::Uuid::new_v4());
                    match &args.user {
                        Some(user) => store.create_owned_session(&id, user).await,
                        None => store.create_session(&id, None).await,
                    }
                    .map_err(|e| e.to_string())?;
                    id
                }
            };
            let mut body = json!({"text": text});
            if let Some(route) = route {
                body["route"] = json!(route);
            }
            if let Some(cwd) = &args.cwd {
                crate::route::directory(&json!({ "cwd": cwd }))
                    .map_err(|e| format!("--cwd: {e}"))?;
                body["cwd"] = json!(cwd);
            }
            let inbox = store
                .enqueue(&session, &args.pool(), &body)
                .await
                .map_err(|e| e.to_string())?;
            // Recorded: a failed wake-up only means workers find it on their next look.
            if let Some(url) = args.transport() {
                let wake = async {
                    match Transport::connect(&url).await {
                        Ok(t) => t.wake(&args.pool()).await,
                        Err(e) => Err(e),
                    }
                };
                let woken = tokio::time::timeout(Duration::from_secs(5), wake)
                    .await
                    .unwrap_or_else(|_| Err(format!("NATS at {url} did not answer")));
                if let Err(e) = woken {
                    eprintln!("dsh team: {e}; the workers will find the input without it");
                }
            }
            println!("{}", json!({"sessionId": session, "inboxId": inbox}));
            Ok(())
        }
        "events" => {
            let id = one("a session id")?;
            store.session(id).await.map_err(|e| e.to_string())?;
            let mut after = args.after.unwrap_or(0);
            loop {
                let page = store
                    .read(id, after, 1000)
                    .await
                    .map_err(|e| e.to_string())?;
                let Some(last) = page.last() else { break };
                after = last.seq;
                let mut out = String::new();
                for e in &page {
                    if args.meta {
                        out.push_str(&format!(
                            "{{\"seq\":{},\"epoch\":{},\"record\":{}}}\n",
                            e.seq, e.epoch, e.data
                        ));
                    } else {
                        out.push_str(&e.data);
                        out.push('\n');
                    }
                }
                print!("{out}");
            }
            Ok(())
        }
        "cancel" => {
            let id = one("a session id")?;
            let Some(epoch) = store.request_cancel(id).await.map_err(|e| e.to_string())? else {
                return Err(format!("no turn of session {id} is running"));
            };
            if let Some(url) = args.transport()
                && let Ok(Ok(t)) =
                    tokio::time::timeout(Duration::from_secs(5), Transport::connect(&url)).await
            {
                let _ = tokio::time::timeout(Duration::from_secs(5), t.cancel(id, epoch)).await;
            }
            println!("{}", json!({"sessionId": id, "epoch": epoch}));
            Ok(())
        }
        "sessions" => {
            if let Some(extra) = rest.first() {
                return Err(format!("unexpected argument {extra:?}"));
            }
            let rows = store
                .sessions(args.user.as_deref(), 10_000)
                .await
                .map_err(|e| e.to_string())?;
            let mut out = String::new();
            for r in rows {
                out.push_str(&format!(
                    "{}\n",
                    json!({
                        "sessionId": r.id,
                        "headSeq": r.head_seq,
                        "owner": r.owner_user,
                        "leased": r.leased,
                        "leaseOwner": r.lease_owner,
                        "leaseEpoch": r.lease_epoch,
                        "turnOpen": r.turn_open,
                    })
                ));
            }
            print!("{out}");
            Ok(())
        }
        "show" => {
            let id = one("a session id")?;
            let row = store.session(id).await.map_err(|e| e.to_string())?;
            let pending = store.pending(id).await.map_err(|e| e.to_string())?;
            let events = read_events(&store, id).await.map_err(|e| e.to_string())?;
            let turns = events
                .iter()
                .filter(|e| e.is(dsh_session::types::TURN_END))
                .count();
            println!(
                "{}",
                json!({
                    "sessionId": row.id,
                    "headSeq": row.head_seq,
                    "leaseOwner": row.lease_owner,
                    "leaseEpoch": row.lease_epoch,
                    "leased": row.leased,
                    "pendingInput": pending.len(),
                    "turnsEnded": turns,
                    "turnOpen": row.turn_open,
                    "failedTurns": row.failed_turns,
                    "retryInMs": row.retry_in_ms,
                })
            );
            Ok(())
        }
        "user" => user_command(&mut store, &args, rest).await,
        other => Err(format!("unknown command {other:?} (see dsh team --help)")),
    }
}

const USER_USAGE: &str = "usage: dsh team user list | add <name> [--admin] [--password-stdin] | \
password <name> | token <name> | remove <name>";

/// `dsh team user …`: the accounts of `dsh serve`.
async fn user_command(store: &mut Store, args: &Args, rest: &[String]) -> Result<(), String> {
    let Some(action) = rest.first() else {
        return Err(USER_USAGE.into());
    };
    if action == "list" {
        if let Some(extra) = rest.get(1) {
            return Err(format!("unexpected argument {extra:?}"));
        }
        let mut out = String::new();
        for a in store.accounts().await.map_err(|e| e.to_string())? {
            out.push_str(&format!(
                "{}\n",
                json!({
                    "user": a.name,
                    "admin": a.admin,
                    "password": a.has_password,
                    "signIns": a.live_sign_ins,
                    "sessions": a.sessions,
                })
            ));
        }
        print!("{out}");
        return Ok(());
    }
    let (Some(name), None) = (rest.get(1), rest.get(2)) else {
        return Err(USER_USAGE.into());
    };
    if name.is_empty() {
        return Err("an account name must not be empty".into());
    }
    let no_account = || format!("no account {name:?}");
    match action.as_str() {
        "add" => {
            let password = match args.password_stdin {
                true => Some(password_from_stdin()?),
                false => None,
            };
            let token = crate::auth::new_token()?;
            let added = store
                .add_user_with_password(
                    name,
                    &crate::auth::token_hash(&token),
                    args.admin,
                    password.as_deref(),
                )
                .await
                .map_err(|e| e.to_string())?;
            if !added {
                return Err(format!("account {name:?} exists already"));
            }
            println!(
                "{}",
                json!({"user": name, "admin": args.admin, "token": token})
            );
            Ok(())
        }
        "password" => {
            let hash = password_from_stdin()?;
            if !store
                .set_password_hash(name, Some(&hash))
                .await
                .map_err(|e| e.to_string())?
            {
                return Err(no_account());
            }
            println!("{}", json!({"user": name, "password": "set"}));
            Ok(())
        }
        "token" => {
            let token = crate::auth::new_token()?;
            if !store
                .set_token_hash(name, &crate::auth::token_hash(&token))
                .await
                .map_err(|e| e.to_string())?
            {
                return Err(no_account());
            }
            println!("{}", json!({"user": name, "token": token}));
            Ok(())
        }
        "remove" => {
            let Some(sessions) = store.remove_user(name).await.map_err(|e| e.to_string())? else {
                return Err(no_account());
            };
            println!(
                "{}",
                json!({"user": name, "removed": true, "sessionsKept": sessions})
            );
            Ok(())
        }
        other => Err(format!(
            "unknown user command {other:?} (list, add, password, token or remove)"
        )),
    }
}
