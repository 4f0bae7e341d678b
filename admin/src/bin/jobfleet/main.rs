//! `jobfleet`: the command line client of the open API (like `kubectl` for a cluster).
//! Tables for people, `-o json` (the API's own JSON) for scripts, exit codes scripts can rely
//! on (`failure::Failure`).

mod api;
mod code;
mod failure;
mod fleet;
mod jobs;
mod login;
mod runs;
mod table;

use std::io::{BufRead, IsTerminal, Write};
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand, ValueEnum};
use serde_json::{Value, json};

use api::Api;
use failure::Failure;

#[derive(Debug, Parser)]
#[command(
    name = "jobfleet",
    version,
    about = "Drive a jobfleet admin from the command line",
    after_help = "Exit codes: 0 done, 1 failed, 2 bad usage, 3 not logged in or not allowed, \
                  4 not found, 5 refused by the admin (bad input, conflict, rate limit), \
                  6 admin unreachable, 7 the waited-for run did not succeed."
)]
struct Cli {
    /// The admin's URL; default: the one `jobfleet login` stored.
    #[arg(long, global = true, env = "JOBFLEET_URL", value_name = "URL")]
    url: Option<String>,
    /// A JWT or API token (`jft_…`); default: the one `jobfleet login` stored.
    #[arg(
        long,
        global = true,
        env = "JOBFLEET_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    token: Option<String>,
    /// A PEM file of CA certificates to trust beside the system's, for an admin on HTTPS with
    /// a private CA.
    #[arg(long, global = true, env = "JOBFLEET_CA_CERT", value_name = "PATH")]
    ca_cert: Option<String>,
    /// Output format.
    #[arg(short, long, global = true, value_enum, default_value_t = Output::Table)]
    output: Output,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum BulkActionArg {
    Enable,
    Disable,
    Trigger,
    Delete,
}

impl BulkActionArg {
    fn as_str(self) -> &'static str {
        match self {
            Self::Enable => "enable",
            Self::Disable => "disable",
            Self::Trigger => "trigger",
            Self::Delete => "delete",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// Aligned columns for people.
    Table,
    /// The admin's JSON, unchanged.
    Json,
}

impl Output {
    /// A `{items, total, limit, offset}` page.
    fn page(self, page: &Value, columns: &[table::Column]) {
        let items = page["items"].as_array().map_or(&[][..], Vec::as_slice);
        self.list(page, items, columns);
        if self == Self::Table
            && let (Some(total), Some(offset)) = (page["total"].as_i64(), page["offset"].as_i64())
        {
            let shown = items.len() as i64;
            if offset > 0 || shown < total {
                eprintln!(
                    "{}–{} of {total}",
                    if shown == 0 { offset } else { offset + 1 },
                    offset + shown
                );
            }
        }
    }

    fn list(self, whole: &Value, items: &[Value], columns: &[table::Column]) {
        match self {
            Self::Json => print_json(whole),
            Self::Table => print!("{}", table::render(columns, items)),
        }
    }

    fn object(self, value: &Value, text: impl FnOnce() -> String) {
        match self {
            Self::Json => print_json(value),
            Self::Table => print!("{}", text()),
        }
    }
}

fn print_json(value: &Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
    );
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Log in to an admin and keep the token (in ~/.config/jobfleet/login.toml, mode 0600).
    Login {
        /// The admin's URL, e.g. http://127.0.0.1:8080 (also --url / JOBFLEET_URL).
        url_arg: Option<String>,
        /// User name; asked for when missing and stdin is a terminal.
        #[arg(short, long)]
        username: Option<String>,
        /// Read the password from stdin (one line) instead of asking.
        #[arg(long, conflicts_with = "token_stdin")]
        password_stdin: bool,
        /// Keep an API token (`jft_…`, from the console or `POST /api/v1/tokens`) read from
        /// stdin instead of logging in with a password.
        #[arg(long)]
        token_stdin: bool,
    },
    /// Forget the stored login.
    Logout,
    /// Who the current login is.
    Whoami,
    /// Jobs.
    #[command(subcommand)]
    Jobs(JobsCommand),
    /// Runs of jobs.
    #[command(subcommand)]
    Runs(RunsCommand),
    /// Agents (and XXL-Job executors) registered with the admin.
    #[command(subcommand)]
    Agents(AgentsCommand),
    /// Executor groups.
    #[command(subcommand)]
    Groups(GroupsCommand),
    /// Print groups and all their jobs (scripts included) as one YAML document for version
    /// control (`-o json` for JSON); `jobfleet apply -f` takes it back.
    Export {
        /// Only these groups (app names); default every group this login sees.
        #[arg(short, long = "group", value_name = "APP_NAME")]
        groups: Vec<String>,
    },
    /// Make the admin's groups and jobs match a document (YAML or JSON): jobs are matched by
    /// group and name, created or updated, all or nothing; a second apply changes nothing.
    #[command(visible_alias = "import")]
    Apply(ApplyArgs),
    /// Print a shell completion script, e.g. `jobfleet completions bash > /etc/bash_completion.d/jobfleet`.
    Completions { shell: clap_complete::Shell },
}

/// `jobfleet apply` and `jobfleet jobs apply`.
#[derive(Debug, clap::Args)]
struct ApplyArgs {
    /// The document; `-` reads stdin.
    #[arg(short, long, value_name = "FILE")]
    file: String,
    /// Show what would change and write nothing.
    #[arg(long)]
    dry_run: bool,
    /// Also delete the jobs of the document's groups that it does not list.
    #[arg(long)]
    prune: bool,
}

#[derive(Debug, clap::Args)]
pub(crate) struct Paging {
    /// At most this many (1–500).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(i64).range(1..=500))]
    pub(crate) limit: i64,
    /// Skip this many.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(i64).range(0..))]
    pub(crate) offset: i64,
}

#[derive(Debug, Subcommand)]
enum JobsCommand {
    /// List jobs.
    List {
        /// Only this group (id or name).
        #[arg(short, long)]
        group: Option<String>,
        /// Only enabled (true) or disabled (false) jobs.
        #[arg(long)]
        enabled: Option<bool>,
        /// Only jobs whose name contains this.
        #[arg(short = 'q', long = "name-contains")]
        name_contains: Option<String>,
        /// Only jobs carrying this tag.
        #[arg(short, long)]
        tag: Option<String>,
        #[command(flatten)]
        paging: Paging,
    },
    /// Enable, disable, trigger or delete many jobs: by id, or every job matching the filters
    /// (`--group` pauses a whole group with `disable`); at most 1,000.
    Bulk {
        action: BulkActionArg,
        /// Job ids; without them, the filters choose.
        ids: Vec<i64>,
        /// Every job of this group (id or name).
        #[arg(short, long, conflicts_with = "ids")]
        group: Option<String>,
        /// Every job carrying this tag.
        #[arg(short, long, conflicts_with = "ids")]
        tag: Option<String>,
        /// Every job whose name contains this.
        #[arg(short = 'q', long = "name-contains", conflicts_with = "ids")]
        name_contains: Option<String>,
        /// Only enabled (true) or disabled (false) jobs.
        #[arg(long, conflicts_with = "ids")]
        enabled: Option<bool>,
        /// `trigger`: params for every run instead of each job's own.
        #[arg(long)]
        params: Option<String>,
    },
    /// Show a job.
    Get(JobRef),
    /// Run a job now.
    Trigger {
        #[command(flatten)]
        job: JobRef,
        #[command(flatten)]
        start: Start,
    },
    /// Enable a job (it fires on its schedule again).
    Enable(JobRef),
    /// Disable a job (no more scheduled fires).
    Disable(JobRef),
    /// Delete a job.
    Delete(JobRef),
    /// The same as `jobfleet apply`.
    Apply(ApplyArgs),
}

/// How a run started from the command line goes.
#[derive(Debug, clap::Args)]
struct Start {
    /// Params for this run instead of the job's (or the retried run's).
    #[arg(long)]
    params: Option<String>,
    /// Send it to this agent of the group (its address).
    #[arg(long)]
    agent: Option<String>,
    /// Wait until the run ends and exit 0 only if it succeeded (7 if not).
    #[arg(long)]
    wait: bool,
    /// With --wait: give up after this many seconds (exit 1).
    #[arg(long, default_value_t = 3600, requires = "wait")]
    timeout: u64,
}

impl Start {
    fn into_trigger(self) -> jobs::Trigger {
        jobs::Trigger {
            params: self.params,
            agent: self.agent,
            wait_s: self.wait.then_some(self.timeout),
        }
    }
}

#[derive(Debug, clap::Args)]
struct JobRef {
    /// The job: its id or its name.
    job: String,
    /// The job's group (id or name), when its name is not unique.
    #[arg(short, long)]
    group: Option<String>,
}

#[derive(Debug, Subcommand)]
enum RunsCommand {
    /// List runs, newest first.
    List {
        /// Only runs of this job (id or name).
        #[arg(short, long)]
        job: Option<String>,
        /// Only this group (id or name).
        #[arg(short, long)]
        group: Option<String>,
        /// Only runs in this status (pending, running, succeeded, failed, timed_out, killed,
        /// lost, skipped).
        #[arg(short, long)]
        status: Option<String>,
        #[command(flatten)]
        paging: Paging,
    },
    /// Show a run.
    Get { run: i64 },
    /// Print a run's log.
    Logs {
        run: i64,
        /// Keep printing what the run writes until it ends.
        #[arg(short, long)]
        follow: bool,
    },
    /// Kill a running run (its whole process tree).
    Kill { run: i64 },
    /// Run a finished run again now, as the next attempt of its chain.
    Retry {
        run: i64,
        #[command(flatten)]
        start: Start,
    },
    /// Wait until a run ends; exit 0 only if it succeeded (7 if not).
    Wait {
        run: i64,
        /// Give up after this many seconds (exit 1).
        #[arg(long, default_value_t = 3600)]
        timeout: u64,
    },
}

#[derive(Debug, Subcommand)]
enum AgentsCommand {
    /// List agents, by group then address unless `--sort` says otherwise.
    List(Box<fleet::AgentFilter>),
    /// The fleet at a glance: agents by status and group, versions, modes, recent deaths.
    Summary,
    /// Take an agent out of service (id or address): no new runs; the runs it holds finish.
    Drain { agent: String },
    /// Put a drained agent back in service.
    Undrain { agent: String },
    /// Forget an agent (its row and key); it may enroll again.
    Forget { agent: String },
}

#[derive(Debug, Subcommand)]
enum GroupsCommand {
    /// List groups.
    List {
        #[command(flatten)]
        paging: Paging,
    },
    /// Show a group (id or name).
    Get { group: String },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("jobfleet: error: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("jobfleet: error: {failure}");
            failure.exit_code()
        }
    }
}

async fn run(cli: Cli) -> Result<(), Failure> {
    let out = cli.output;
    match cli.command {
        Command::Completions { shell } => {
            clap_complete::generate(
                shell,
                &mut Cli::command(),
                "jobfleet",
                &mut std::io::stdout(),
            );
            Ok(())
        }
        Command::Login {
            url_arg,
            username,
            password_stdin,
            token_stdin,
        } => {
            let stored = login::load().ok().flatten();
            let url = url_arg
                .or(cli.url)
                .or_else(|| stored.map(|s| s.url))
                .ok_or_else(|| {
                    Failure::Usage("which admin? `jobfleet login http://HOST:PORT`".into())
                })?;
            log_in(
                &url,
                cli.ca_cert.as_deref(),
                out,
                username,
                password_stdin,
                token_stdin,
            )
            .await
        }
        Command::Logout => {
            let had = login::forget()?;
            out.object(&json!({"logged_out": had}), || {
                if had {
                    "logged out\n".into()
                } else {
                    "no stored login\n".into()
                }
            });
            Ok(())
        }
        command => {
            let api = connect(cli.url, cli.token, cli.ca_cert.as_deref())?;
            match command {
                Command::Whoami => {
                    let me = api.get("/me", &[]).await?;
                    out.object(&me, || {
                        format!(
                            "{} ({}) on {}\n",
                            table::text(&me["name"]),
                            table::text(&me["role"]),
                            api.base()
                        )
                    });
                    Ok(())
                }
                Command::Jobs(command) => jobs_command(&api, out, command).await,
                Command::Runs(command) => runs_command(&api, out, command).await,
                Command::Agents(AgentsCommand::List(filter)) => {
                    fleet::agents(&api, out, *filter).await
                }
                Command::Agents(AgentsCommand::Summary) => fleet::summary(&api, out).await,
                Command::Agents(AgentsCommand::Drain { agent }) => {
                    fleet::act_on_agent(&api, out, &agent, fleet::AgentAction::Drain).await
                }
                Command::Agents(AgentsCommand::Undrain { agent }) => {
                    fleet::act_on_agent(&api, out, &agent, fleet::AgentAction::Undrain).await
                }
                Command::Agents(AgentsCommand::Forget { agent }) => {
                    fleet::act_on_agent(&api, out, &agent, fleet::AgentAction::Forget).await
                }
                Command::Groups(GroupsCommand::List { paging }) => {
                    fleet::groups(&api, out, paging.limit, paging.offset).await
                }
                Command::Groups(GroupsCommand::Get { group }) => {
                    fleet::group(&api, out, &group).await
                }
                Command::Export { groups } => code::export(&api, out, &groups).await,
                Command::Apply(args) => code::apply(&api, out, &args).await,
                Command::Login { .. } | Command::Logout | Command::Completions { .. } => {
                    unreachable!("answered above")
                }
            }
        }
    }
}

async fn jobs_command(api: &Api, out: Output, command: JobsCommand) -> Result<(), Failure> {
    match command {
        JobsCommand::List {
            group,
            enabled,
            name_contains,
            tag,
            paging,
        } => {
            jobs::list(
                api,
                out,
                jobs::ListFilter {
                    group,
                    enabled,
                    query: name_contains,
                    tag,
                    limit: paging.limit,
                    offset: paging.offset,
                },
            )
            .await
        }
        JobsCommand::Bulk {
            action,
            ids,
            group,
            tag,
            name_contains,
            enabled,
            params,
        } => {
            jobs::bulk(
                api,
                out,
                action.as_str(),
                jobs::BulkChoice {
                    ids,
                    group,
                    tag,
                    query: name_contains,
                    enabled,
                },
                params,
            )
            .await
        }
        JobsCommand::Get(job) => jobs::get(api, out, id_of(api, &job).await?).await,
        JobsCommand::Trigger { job, start } => {
            jobs::trigger(api, out, id_of(api, &job).await?, start.into_trigger()).await
        }
        JobsCommand::Enable(job) => {
            jobs::set_enabled(api, out, id_of(api, &job).await?, true).await
        }
        JobsCommand::Disable(job) => {
            jobs::set_enabled(api, out, id_of(api, &job).await?, false).await
        }
        JobsCommand::Delete(job) => jobs::delete(api, out, id_of(api, &job).await?).await,
        JobsCommand::Apply(args) => code::apply(api, out, &args).await,
    }
}

async fn runs_command(api: &Api, out: Output, command: RunsCommand) -> Result<(), Failure> {
    match command {
        RunsCommand::List {
            job,
            group,
            status,
            paging,
        } => {
            runs::list(
                api,
                out,
                runs::ListFilter {
                    job,
                    group,
                    status,
                    limit: paging.limit,
                    offset: paging.offset,
                },
            )
            .await
        }
        RunsCommand::Get { run } => runs::get(api, out, run).await,
        RunsCommand::Logs { run, follow } => runs::logs(api, run, follow).await,
        RunsCommand::Kill { run } => runs::kill(api, out, run).await,
        RunsCommand::Retry { run, start } => runs::retry(api, out, run, start.into_trigger()).await,
        RunsCommand::Wait { run, timeout } => runs::wait(api, out, run, timeout).await,
    }
}

async fn id_of(api: &Api, job: &JobRef) -> Result<i64, Failure> {
    jobs::job_id(api, &job.job, job.group.as_deref()).await
}

/// The API client with the flags' or environment's URL and token, else the stored login's.
fn connect(
    url: Option<String>,
    token: Option<String>,
    ca_cert: Option<&str>,
) -> Result<Api, Failure> {
    let stored = if url.is_none() || token.is_none() {
        login::load()?
    } else {
        None
    };
    let url = url
        .or_else(|| stored.as_ref().map(|s| s.url.clone()))
        .ok_or_else(|| {
            Failure::Auth(
                "not logged in: run `jobfleet login URL`, or set JOBFLEET_URL and JOBFLEET_TOKEN"
                    .into(),
            )
        })?;
    // A stored token belongs to the stored URL only: never send it to another admin.
    let token = token
        .or_else(|| {
            stored
                .filter(|s| s.url.trim_end_matches('/') == url.trim_end_matches('/'))
                .map(|s| s.token)
        })
        .filter(|t| !t.is_empty())
        .ok_or_else(|| {
            Failure::Auth(format!(
                "not logged in to {url}: run `jobfleet login {url}`, or set JOBFLEET_TOKEN"
            ))
        })?;
    Api::new(&url, Some(token), ca_cert)
}

async fn log_in(
    url: &str,
    ca_cert: Option<&str>,
    out: Output,
    username: Option<String>,
    password_stdin: bool,
    token_stdin: bool,
) -> Result<(), Failure> {
    let anonymous = Api::new(url, None, ca_cert)?;
    let (token, expires_at) = if token_stdin {
        (read_stdin_line("token")?, None)
    } else {
        let username = match username {
            Some(name) => name,
            None if std::io::stdin().is_terminal() => prompt("Username: ")?,
            None => {
                return Err(Failure::Usage(
                    "give the user name with --username (stdin is not a terminal)".into(),
                ));
            }
        };
        let password = if password_stdin {
            read_stdin_line("password")?
        } else if std::io::stdin().is_terminal() {
            rpassword::prompt_password("Password: ")?
        } else {
            return Err(Failure::Usage(
                "stdin is not a terminal: pass the password with --password-stdin".into(),
            ));
        };
        let issued = anonymous
            .post(
                "/auth/token",
                Some(json!({"username": username, "password": password})),
            )
            .await?;
        let token = issued["token"]
            .as_str()
            .ok_or_else(|| Failure::Other("the admin's answer has no token".into()))?
            .to_owned();
        (token, issued["expires_at"].as_i64())
    };
    // Checked before it is kept: a mistyped token is refused here, not at the next command.
    let api = Api::new(url, Some(token.clone()), ca_cert)?;
    let me = api.get("/me", &[]).await?;
    let path = login::save(&login::Stored {
        url: api.base().to_owned(),
        token,
        expires_at,
    })?;
    out.object(&me, || {
        format!(
            "logged in to {} as {} ({}){}; login kept in {}\n",
            api.base(),
            table::text(&me["name"]),
            table::text(&me["role"]),
            expires_at.map_or_else(String::new, |at| format!(
                ", until {} UTC",
                table::time(&json!(at))
            )),
            path.display()
        )
    });
    Ok(())
}

fn prompt(question: &str) -> Result<String, Failure> {
    let mut stderr = std::io::stderr();
    stderr.write_all(question.as_bytes())?;
    stderr.flush()?;
    read_stdin_line("answer")
}

fn read_stdin_line(what: &str) -> Result<String, Failure> {
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    let line = line.trim_end_matches(['\r', '\n']).to_owned();
    if line.is_empty() {
        return Err(Failure::Usage(format!("no {what} on stdin")));
    }
    Ok(line)
}
