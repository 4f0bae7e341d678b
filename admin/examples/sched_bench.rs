//! Scheduler benchmark: a real `jobfleet-admin` process and real `jobfleet-agent` processes on
//! loopback, jobs running `true`; figures read back from the run table.
//!
//! ```sh
//! cargo build --release --workspace --bins --features jobfleet-admin/mysql
//! cargo run --release -p jobfleet-admin --features mysql --example sched_bench -- lateness [--mysql] [--jobs 1000] [--agents 4]
//! cargo run --release -p jobfleet-admin --features mysql --example sched_bench -- http [--mysql] [--jobs 5000]
//! cargo run --release -p jobfleet-admin --features mysql --example sched_bench -- burst [--mysql] [--jobs 50000] [--agents 4]
//! cargo run --release -p jobfleet-admin --features mysql --example sched_bench -- rss [--jobs 100000]
//! cargo run --release -p jobfleet-admin --features mysql --example sched_bench -- idle
//! cargo run --release -p jobfleet-admin --features mysql --example sched_bench -- day2 [--mysql] [--jobs 1000000]
//! cargo run --release -p jobfleet-admin --features mysql --example sched_bench -- spawn
//! cargo run --release -p jobfleet-admin --features mysql --example sched_bench -- modes [--mysql] [--jobs N]
//! cargo run --release -p jobfleet-admin --features mysql --example sched_bench -- fleet [--mysql] [--agents 10000] [--jobs 100] [--connections 64]
//! cargo run --release -p jobfleet-admin --features mysql --example sched_bench -- workflows [--mysql] \
//!     [--chains 100] [--length 10] [--sleep-ms 0] [--fan 1000] [--steps-only | --fan-only]
//! ```
//! `lateness`: N (1,000) fixed-rate jobs of 1 s spread over the second (N fires/s) on 4 agents (`--agents`)
//! for 20 s; agent process start − scheduled time, p50/p99; the paced spawn floor (`spawn`'s
//! second figure) is read just before and just after, and the CPU per fire given as a multiple
//! of each, and of a job's own process (the CPU of the runs the agents reaped in the measured
//! window, a fire's share; "their jobs" in the CPU line is every run of the bench's 20-odd
//! seconds, warm-up included, so it is no per-fire figure); the agents' main threads and
//! spawners are reported apart (share of a core, voluntary
//! and involuntary context switches a run). Agent CPU figures (all but `idle`'s)
//! count each agent's spawner too (the process that starts its runs: agent overhead, not the
//! jobs'); before 2026-11-29 they did not. `http`: the same with http jobs
//! (N = 5,000) that GET a loopback endpoint this program serves: no process per run, so it
//! measures the scheduler and the agents themselves. `burst`: N one-shot jobs due at the
//! same instant; time until every run is sent and every result is back, lost and duplicated.
//! `rss`: the admin's resident memory with N enabled jobs.
//! `idle`: the quick start's shape (admin on SQLite, one agent) after three logins, two of them
//! at once: CPU over 60 s with nothing scheduled, and the resident memory of the admin, the agent
//! and its spawner, split into anonymous and file-backed (the binary's own pages).
//! `day2`: a database as a day of work leaves it, N (1,000,000) ended runs spread over yesterday
//! and N over today until five minutes ago, and the admin alone on it for 440 s: its CPU each
//! second (the seconds over 30 ms printed: the minute passes, the report's count, the log
//! keeper's sweep), the start-up's first 130 s apart from the steady rest.
//! `spawn`: the machine's ceiling, `sh -c true` processes per second with nothing else running;
//! then a reference floor for the per-fire figures: the CPU per process of one thread doing
//! nothing but start 1,000 a second, each at its millisecond, and reap each at its exit.
//! `modes`: `lateness` at 100 and 500 fires/s with the agents in `push` mode and in `connect`
//! mode (issue 14), each over a fresh admin and database, as one table (`--jobs N`: at N only).
//! `workflows` (issue 16), over real agents whose jobs write their own start time (`date +%s%N`
//! into a file named after `$JOBFLEET_RUN_ID`): first a floor, 100 single-job triggers one after
//! the other (process start − run created); then `--chains` chain workflows of `--length` nodes,
//! each node its own job, triggered at once: step latency = a node's process start − the end of
//! its upstream node as the admin stored it (the node's `finished_ms`, the callback transaction's
//! clock), p50/p99, split into its parts; `--sleep-ms N` makes each job sleep 0 to N − 1 ms after
//! its stamp so that the chains drift apart instead of stepping together. Then, on a fresh admin,
//! one workflow of `--fan` nodes (an entry, `--fan` − 2 parallel nodes, a join): wall time, the
//! admin's peak RSS (`VmHWM`) and CPU. `SCHED_BENCH_DUMP=file` keeps the fan-out's SQLite database.
//! `SCHED_BENCH_AGENT_DIR=folder` puts the agents' folders there instead of beside the admin's
//! database (another file system: as on hosts of their own, no shared ext4 journal).
//! `fleet` (issue 19): a fleet simulator, `--agents` (10,000) simulated agents speaking the agent
//! protocol from this process (POST `/api/registry` with the shared token, a key of their own
//! and a real agent's heartbeat body; loopback addresses `http://127.0.0.1:<20000 + i>/` in 20
//! groups without jobs, so the admin never calls them), beating every 10 s spread evenly over
//! the period, at most `--connections` (64) requests in flight on keep-alive connections (a
//! beat waits for a free one; the report says how far behind schedule that put it); on one
//! admin that also
//! has `--jobs` (100) fixed-rate jobs of 1 s on 4 real agents. In order: the admin's idle CPU
//! (the floor), the fleet alone for 60 s (admin CPU per heartbeat = its CPU in the minute /
//! the beats due in it; heartbeat latency p50/p99; errors), 20 s of the jobs' fires with the
//! fleet beating, then 20 s without it (trigger lateness of both, as `lateness` measures it),
//! and the admin's VmRSS/VmHWM.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    reason = "a benchmark program fails by panicking and reports on stdout"
)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Text};
use jobfleet_admin::db::{self, AnyConnection, DbUrl};

const TOKEN: &str = "bench-agent-token";

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().to_owned()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Proc(Child);

/// CPU time a process used, and its reaped children (the agents' jobs), in ms.
fn cpu_ms(proc: &Proc) -> (i64, i64) {
    cpu_ms_and_children(proc.0.id())
}

/// CPU time process `pid` used itself, in ms.
fn cpu_ms_of(pid: u32) -> i64 {
    cpu_ms_and_children(pid).0
}

fn cpu_ms_and_children(pid: u32) -> (i64, i64) {
    let ms = stat_ms(&format!("/proc/{pid}/stat"));
    (ms(14) + ms(15), ms(16) + ms(17))
}

/// Field `i` of a `stat` file (as stat(5) numbers them: utime, stime, cutime and cstime are
/// 14-17) read as ticks, in ms; ticks are 10 ms here.
fn stat_ms(path: &str) -> impl Fn(usize) -> i64 + use<> {
    let stat = std::fs::read_to_string(path).unwrap_or_default();
    // The fields after the command name, which may hold spaces, start after its closing ')'.
    let fields: Vec<i64> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .unwrap_or_default()
        .split_whitespace()
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    move |i| fields.get(i - 3).copied().unwrap_or(0) * 10
}

/// CPU time of an agent's spawners (the processes that start its runs for it, so part of the
/// agent's overhead, not the jobs'), in ms; 0 when it has none.
fn spawner_cpu_ms(agent: &Proc) -> i64 {
    jobfleet_agent::runner::spawner::of_agent(agent.0.id())
        .into_iter()
        .map(|pid| cpu_ms_of(pid.cast_unsigned()))
        .sum()
}

/// CPU time the agents used, their spawners' included, in ms.
fn agents_cpu_ms(agents: &[Proc]) -> i64 {
    agents.iter().map(|a| cpu_ms(a).0 + spawner_cpu_ms(a)).sum()
}

/// CPU time of the runs' processes the agents reaped so far, in ms: a run is the agent's child
/// (the spawner clones it as such), counted when the agent waits for it.
fn jobs_cpu_ms(agents: &[Proc]) -> i64 {
    agents.iter().map(|a| cpu_ms(a).1).sum()
}

/// CPU and context switches of one thread, from `/proc/<pid>/task/<tid>/{stat,status}`.
#[derive(Debug, Default, Clone, Copy)]
struct ThreadUse {
    cpu_ms: i64,
    voluntary: i64,
    involuntary: i64,
}

impl ThreadUse {
    fn of(pid: u32, tid: u32) -> Self {
        let task = format!("/proc/{pid}/task/{tid}");
        let ms = stat_ms(&format!("{task}/stat"));
        let status = std::fs::read_to_string(format!("{task}/status")).unwrap_or_default();
        let count = |key: &str| {
            status
                .lines()
                .find_map(|line| line.strip_prefix(key))
                .and_then(|rest| rest.trim().parse().ok())
                .unwrap_or(0)
        };
        Self {
            cpu_ms: ms(14) + ms(15),
            voluntary: count("voluntary_ctxt_switches:"),
            involuntary: count("nonvoluntary_ctxt_switches:"),
        }
    }

    fn add(self, other: Self) -> Self {
        Self {
            cpu_ms: self.cpu_ms + other.cpu_ms,
            voluntary: self.voluntary + other.voluntary,
            involuntary: self.involuntary + other.involuntary,
        }
    }

    fn since(self, before: Self) -> Self {
        Self {
            cpu_ms: self.cpu_ms - before.cpu_ms,
            voluntary: self.voluntary - before.voluntary,
            involuntary: self.involuntary - before.involuntary,
        }
    }
}

/// The agents' main threads and their spawners, each summed over the agents: the threads
/// that live as long as their agent and do a run's work (the blocking threads come and go, and a
/// thread's counts leave with it).
fn agents_thread_use(agents: &[Proc]) -> (ThreadUse, ThreadUse) {
    agents.iter().fold(
        (ThreadUse::default(), ThreadUse::default()),
        |(main, spawners), agent| {
            let pid = agent.0.id();
            let own = jobfleet_agent::runner::spawner::of_agent(pid)
                .into_iter()
                .fold(ThreadUse::default(), |sum, spawner| {
                    sum.add(ThreadUse::of(
                        spawner.cast_unsigned(),
                        spawner.cast_unsigned(),
                    ))
                });
            (main.add(ThreadUse::of(pid, pid)), spawners.add(own))
        },
    )
}

/// How the agents' main threads and spawners spent a window of `ms` with `fires` runs: share of a
/// core, and voluntary and involuntary context switches a run. An involuntary switch is a thread
/// preempted mid-turn (the spawner's wake-up took the core from the agent, as before the spawner
/// was `SCHED_BATCH`); a voluntary one is a sleep, so the wake-ups a run costs.
fn thread_report(main: ThreadUse, spawners: ThreadUse, ms: i64, fires: i64) -> String {
    let describe = |name: &str, used: ThreadUse| {
        format!(
            "{name} {:.1} % of a core, {:.2} voluntary and {:.2} involuntary switches a run",
            used.cpu_ms as f64 / ms.max(1) as f64 * 100.0,
            used.voluntary as f64 / fires.max(1) as f64,
            used.involuntary as f64 / fires.max(1) as f64
        )
    };
    format!(
        "{}; {}",
        describe("the agents' main threads", main),
        describe("their spawners", spawners)
    )
}

fn cpu_report(admin: &Proc, agents: &[Proc]) -> String {
    let (admin_own, _) = cpu_ms(admin);
    let (mut agents_own, mut spawners, mut jobs) = (0, 0, 0);
    for agent in agents {
        let (own, children) = cpu_ms(agent);
        let spawner = spawner_cpu_ms(agent);
        agents_own += own + spawner;
        spawners += spawner;
        jobs += children;
    }
    format!(
        "CPU: admin {:.1} s, agents {:.1} s (their spawners {:.1} s of it), their jobs {:.1} s over the whole run",
        admin_own as f64 / 1000.0,
        agents_own as f64 / 1000.0,
        spawners as f64 / 1000.0,
        jobs as f64 / 1000.0
    )
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

struct Bench {
    url: DbUrl,
    url_text: String,
    _dir: tempfile::TempDir,
    /// `SCHED_BENCH_AGENT_DIR=path`: the agents' folders in a temporary folder there, on
    /// another file system than the admin's database, as on hosts of their own (the two then
    /// share no ext4 journal); else beside the database.
    agents_dir: Option<tempfile::TempDir>,
    mysql_name: Option<String>,
}

impl Bench {
    fn new(mysql: bool) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let (url, url_text, mysql_name) = if mysql {
            let server = std::env::var("JOBFLEET_TEST_MYSQL_URL")
                .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306".into());
            let name = format!("jf_bench_{}", std::process::id());
            let mut admin = db::establish(&DbUrl::Mysql(format!("{server}/mysql"))).unwrap();
            admin
                .batch_execute(&format!(
                    "DROP DATABASE IF EXISTS `{name}`; CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
                ))
                .unwrap();
            let text = format!("{server}/{name}");
            (DbUrl::Mysql(text.clone()), text, Some(name))
        } else {
            let path = dir.path().join("bench.db");
            (
                DbUrl::Sqlite(path.clone()),
                format!("sqlite://{}", path.display()),
                None,
            )
        };
        let agents_dir = std::env::var_os("SCHED_BENCH_AGENT_DIR").map(|path| {
            tempfile::tempdir_in(&path)
                .unwrap_or_else(|e| panic!("SCHED_BENCH_AGENT_DIR {path:?}: {e}"))
        });
        let bench = Self {
            url,
            url_text,
            _dir: dir,
            agents_dir,
            mysql_name,
        };
        db::migrate::run_pending(&mut bench.conn()).unwrap();
        bench
    }

    fn conn(&self) -> AnyConnection {
        db::establish(&self.url).unwrap()
    }

    fn admin(&self) -> (Proc, String) {
        let port = free_port();
        // `SCHED_BENCH_ADMIN=path` runs another admin binary (an A/B of two builds).
        let binary = std::env::var_os("SCHED_BENCH_ADMIN")
            .map_or_else(|| bin_dir().join("jobfleet-admin"), PathBuf::from);
        let child = Command::new(binary)
            .arg("serve")
            .env("JOBFLEET_LISTEN", format!("127.0.0.1:{port}"))
            .env("JOBFLEET_DATABASE_URL", &self.url_text)
            .env(
                "JOBFLEET_JWT_SECRET",
                "bench-secret-bench-secret-bench-secret-00",
            )
            .env("JOBFLEET_ACCESS_TOKEN", TOKEN)
            .env("JOBFLEET_APPROVE_AGENTS", "auto")
            .env("JOBFLEET_ADMIN_PASSWORD", "bench-password-1")
            .env("JOBFLEET_DB_POOL_SIZE", "16")
            .env("JOBFLEET_LOG", "warn")
            // `SCHED_BENCH_ADMIN_LOG=file`: the admin's log goes there.
            .stdout(std::env::var("SCHED_BENCH_ADMIN_LOG").map_or_else(
                |_| Stdio::null(),
                |path| std::fs::File::create(path).unwrap().into(),
            ))
            .spawn()
            .expect("build the binaries first: cargo build --release --workspace --bins");
        let base = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "the admin did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        (Proc(child), base)
    }

    /// Starts `n` agents of group `bench` in their default mode (`auto`) or in `mode`, and
    /// waits until all are registered and, when they connect, hold their connection.
    fn agents(&self, admin: &str, n: usize, mode: Option<Mode>) -> Vec<Proc> {
        let mut agents = Vec::new();
        for i in 0..n {
            let data = self
                .agents_dir
                .as_ref()
                .unwrap_or(&self._dir)
                .path()
                .join(format!("agent-{i}"));
            // `SCHED_BENCH_AGENT=path` runs another agent binary (an A/B of two builds).
            let binary = std::env::var_os("SCHED_BENCH_AGENT")
                .map_or_else(|| bin_dir().join("jobfleet-agent"), PathBuf::from);
            let mut command = Command::new(binary);
            if let Some(mode) = mode {
                command.env("JOBFLEET_AGENT_MODE", mode.as_str());
            }
            let child = command
                .arg("--allow-root")
                .env("JOBFLEET_AGENT_ADMINS", admin)
                .env("JOBFLEET_AGENT_GROUP", "bench")
                .env(
                    "JOBFLEET_AGENT_LISTEN",
                    format!("127.0.0.1:{}", free_port()),
                )
                .env("JOBFLEET_AGENT_TOKEN", TOKEN)
                .env("JOBFLEET_AGENT_DATA_DIR", &data)
                .env("JOBFLEET_AGENT_MAX_CONCURRENT", "256")
                .env("RUST_LOG", "warn")
                .stdout(Stdio::null())
                .spawn()
                .unwrap();
            agents.push(Proc(child));
        }
        // A connect agent registers, then connects: the admin can send it nothing until then.
        let ready = if mode == Some(Mode::Connect) {
            "SELECT COUNT(*) AS n FROM agent WHERE link_admin <> ''"
        } else {
            "SELECT COUNT(*) AS n FROM agent"
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let live = self.scalar(ready);
            if live as usize >= n {
                return agents;
            }
            assert!(Instant::now() < deadline, "agents did not register");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn scalar(&self, sql: &str) -> i64 {
        scalar_on(&mut self.conn(), sql)
    }

    fn column(&self, sql: &str) -> Vec<i64> {
        #[derive(QueryableByName)]
        struct N {
            #[diesel(sql_type = BigInt)]
            n: i64,
        }
        diesel::sql_query(sql)
            .load::<N>(&mut self.conn())
            .unwrap()
            .into_iter()
            .map(|r| r.n)
            .collect()
    }

    /// Inserts `n` disabled jobs of group `bench` with a schedule given as SQL column values.
    fn jobs(&self, n: usize, schedule: &str) {
        self.jobs_running(n, schedule, "true");
    }

    /// Inserts `n` disabled jobs of group `bench` (ids 1 to `n`) with a schedule given as SQL
    /// column values, each running the shell `command` (a SQL string literal's contents).
    fn jobs_running(&self, n: usize, schedule: &str, command: &str) {
        let now = now_ms();
        let mut conn = self.conn();
        conn.batch_execute(&format!(
            "INSERT INTO executor_group (app_name, title, address_mode, addresses, created_ms, updated_ms) VALUES ('bench', 'bench', 'auto', '', {now}, {now})"
        ))
        .unwrap();
        for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
            let values: Vec<String> = chunk
                .iter()
                .map(|i| {
                    format!(
                        "(1, 'job-{i}', '', 'none', {schedule}, 'UTC', 'shell', '{command}', '', 'round_robin', 0, 0, 0, 10, 'do_nothing', 'allow', 'serial', 0, 0, 0, {now}, {now})"
                    )
                })
                .collect();
            conn.batch_execute(&format!(
                "INSERT INTO job (group_id, name, description, schedule_type, schedule_expr, interval_s, once_at_ms, timezone, handler_type, command, params, routing, enabled, timeout_s, retry_count, retry_backoff_s, misfire, concurrency, block_strategy, alert_on_failure, alert_on_timeout, alert_on_lost, created_ms, updated_ms) VALUES {}",
                values.join(",")
            ))
            .unwrap();
        }
    }
}

impl Drop for Bench {
    fn drop(&mut self) {
        if let Some(name) = &self.mysql_name
            && let Ok(mut conn) = db::establish(&DbUrl::Mysql(
                self.url_text.rsplit_once('/').unwrap().0.to_owned() + "/mysql",
            ))
        {
            let _ = conn.batch_execute(&format!("DROP DATABASE IF EXISTS `{name}`"));
        }
    }
}

fn bench_db_path(bench: &Bench) -> PathBuf {
    bench._dir.path().join("bench.db")
}

fn percentile(sorted: &[i64], p: f64) -> i64 {
    if sorted.is_empty() {
        return -1;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

/// How the admin reaches the agents (`JOBFLEET_AGENT_MODE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Push,
    Connect,
}

impl Mode {
    fn as_str(self) -> &'static str {
        match self {
            Mode::Push => "push",
            Mode::Connect => "connect",
        }
    }
}

/// What one `lateness` measurement found, in ms from the scheduled time.
struct Lateness {
    fires: i64,
    failed: i64,
    /// Taken for dispatch (run sent, `triggered_ms`), sorted.
    sent: Vec<i64>,
    /// Agent process start (`started_ms`) of the succeeded runs, sorted.
    started: Vec<i64>,
    seconds: i64,
    cpu: String,
    /// Admin and agent CPU per fire in the measured window, ms.
    per_fire_ms: f64,
    /// CPU of the runs' own processes reaped in the measured window, per fire, ms.
    job_ms: f64,
    /// The agents' main threads and spawners in the measured window (`thread_report`).
    threads: String,
}

/// How many agents `lateness` runs unless `--agents` says otherwise, and `modes` and `http`
/// always: more than the host's cores, as a small fleet's agents share an admin.
const LATENESS_AGENTS: usize = 4;

/// `per_second` fixed-rate jobs of 1 s spread over the second on `agents` agents (in `mode`, or
/// their default) for 20 s, over a fresh database and admin; the first 3 s are not counted.
fn measure_lateness(mysql: bool, per_second: usize, agents: usize, mode: Option<Mode>) -> Lateness {
    measure_lateness_of(mysql, per_second, agents, mode, None)
}

/// `measure_lateness`, with http jobs that GET `http_url` when given.
fn measure_lateness_of(
    mysql: bool,
    per_second: usize,
    agents: usize,
    mode: Option<Mode>,
    http_url: Option<&str>,
) -> Lateness {
    let bench = Bench::new(mysql);
    bench.jobs(per_second, "NULL, 1, NULL");
    if let Some(url) = http_url {
        bench
            .conn()
            .batch_execute(&format!(
                "UPDATE job SET handler_type = 'http', command = NULL, http_request = '{{\"method\":\"GET\",\"url\":\"{url}\",\"statuses\":\"200-299\"}}'"
            ))
            .unwrap();
    }
    let (admin, base) = bench.admin();
    let agents = bench.agents(&base, agents, mode);
    let l = lateness_window(&bench, &admin, &agents, per_second, 20);
    if let Ok(dump) = std::env::var("SCHED_BENCH_DUMP") {
        // `modes` keeps one file per measurement.
        let dump = match mode {
            Some(mode) => format!("{dump}.{}.{per_second}", mode.as_str()),
            None => dump,
        };
        std::fs::copy(bench_db_path(&bench), dump).ok();
    }
    l
}

/// Enables the `per_second` fixed-rate jobs of `bench` (spread over the second, first fires
/// 3 s from now) for `seconds`, disables them again and reads back the fires of the window
/// after the first 3 s. The same database may be measured again later: each window counts the
/// runs scheduled within it only.
fn lateness_window(
    bench: &Bench,
    admin: &Proc,
    agents: &[Proc],
    per_second: usize,
    seconds: i64,
) -> Lateness {
    let start = now_ms() + 3_000;
    // Spread the jobs evenly over the second: `per_second` fires every second. Job i fires at
    // ms ⌊i · 1000 / per_second⌋ of each second (over 1,000/s several share a millisecond); the
    // floor is spelled out because `/` is exact division on MariaDB.
    let per_second = per_second.max(1);
    bench
        .conn()
        .batch_execute(&format!(
            "UPDATE job SET enabled = 1, schedule_type = 'fixed_rate', next_fire_ms = {start} + ((id * 1000) % ({per_second} * 1000) - (id * 1000) % {per_second}) / {per_second}"
        ))
        .unwrap();
    // The first 3 s warm up (connections, agent caches).
    let from = start + 3_000;
    let to = start + seconds * 1000;
    let sleep_until = |ms: i64| {
        std::thread::sleep(Duration::from_millis(
            u64::try_from(ms - now_ms()).unwrap_or(0),
        ));
    };
    sleep_until(from);
    let window_start = (cpu_ms(admin).0, agents_cpu_ms(agents), jobs_cpu_ms(agents));
    let threads_start = agents_thread_use(agents);
    sleep_until(to);
    let window_cpu = (
        cpu_ms(admin).0 - window_start.0,
        agents_cpu_ms(agents) - window_start.1,
        jobs_cpu_ms(agents) - window_start.2,
    );
    let threads_end = agents_thread_use(agents);
    // Disabled only once every run of the window was taken: a take that waited for the write
    // turn past `to` would find its job disabled and skip runs of the window (seen at 1,000/s).
    sleep_until(to + 1_000);
    // The scheduler updates these rows too: MariaDB may pick this statement as a deadlock victim.
    let mut attempts = 0;
    while let Err(e) = bench
        .conn()
        .batch_execute("UPDATE job SET enabled = 0, next_fire_ms = NULL")
    {
        attempts += 1;
        assert!(attempts < 20, "cannot disable the jobs: {e}");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(5));
    let mut started = bench.column(&format!(
        "SELECT started_ms - scheduled_ms AS n FROM job_run WHERE status = 'succeeded' AND scheduled_ms >= {from} AND scheduled_ms < {to}"
    ));
    let mut sent = bench.column(&format!(
        "SELECT triggered_ms - scheduled_ms AS n FROM job_run WHERE triggered_ms IS NOT NULL AND scheduled_ms >= {from} AND scheduled_ms < {to}"
    ));
    let fires = bench.scalar(&format!(
        "SELECT COUNT(*) AS n FROM job_run WHERE scheduled_ms >= {from} AND scheduled_ms < {to}"
    ));
    let failed = bench.scalar(&format!(
        "SELECT COUNT(*) AS n FROM job_run WHERE status <> 'succeeded' AND scheduled_ms >= {from} AND scheduled_ms < {to}"
    ));
    if failed > 0 {
        print_not_succeeded(bench, from, to);
    }
    started.sort_unstable();
    sent.sort_unstable();
    Lateness {
        fires,
        failed,
        sent,
        started,
        seconds: (to - from) / 1000,
        cpu: format!(
            "{}; in the measured {} s: admin {:.1} % of a core, admin + agents {:.2} ms per fire",
            cpu_report(admin, agents),
            (to - from) / 1000,
            window_cpu.0 as f64 / (to - from) as f64 * 100.0,
            (window_cpu.0 + window_cpu.1) as f64 / fires.max(1) as f64
        ),
        per_fire_ms: (window_cpu.0 + window_cpu.1) as f64 / fires.max(1) as f64,
        job_ms: window_cpu.2 as f64 / fires.max(1) as f64,
        threads: thread_report(
            threads_end.0.since(threads_start.0),
            threads_end.1.since(threads_start.1),
            to - from,
            fires,
        ),
    }
}

/// What became of the runs that did not succeed: a figure of "not succeeded" says nothing of why.
fn print_not_succeeded(bench: &Bench, from: i64, to: i64) {
    #[derive(QueryableByName)]
    struct Row {
        #[diesel(sql_type = BigInt)]
        id: i64,
        #[diesel(sql_type = Text)]
        status: String,
        #[diesel(sql_type = diesel::sql_types::Nullable<BigInt>)]
        late_ms: Option<i64>,
        #[diesel(sql_type = Text)]
        why: String,
    }
    let rows = diesel::sql_query(format!(
        "SELECT id, status, triggered_ms - scheduled_ms AS late_ms, \
         COALESCE(NULLIF(handle_msg, ''), trigger_msg, '') AS why FROM job_run \
         WHERE status <> 'succeeded' AND scheduled_ms >= {from} AND scheduled_ms < {to} \
         ORDER BY id LIMIT 20"
    ))
    .load::<Row>(&mut bench.conn())
    .unwrap();
    for row in rows {
        let taken = row.late_ms.map_or_else(
            || "never taken".to_owned(),
            |ms| format!("taken {ms} ms from its time"),
        );
        println!(
            "  not succeeded: run {} {} ({taken}): {}",
            row.id, row.status, row.why
        );
    }
}

fn backend(mysql: bool) -> &'static str {
    if mysql { "MariaDB" } else { "SQLite" }
}

fn lateness(mysql: bool, per_second: usize, agents: usize) {
    // A host's pace drifts within minutes (BENCHMARKS.md), so the per-fire target, a multiple
    // of the paced floor, is read against floors taken on each side of the run, on a quiet
    // machine: the admin and agents are not running yet, or any more.
    let floor_before = paced_spawn_floor(1000, 10);
    let l = measure_lateness(mysql, per_second, agents, None);
    let floor_after = paced_spawn_floor(1000, 10);
    println!(
        "lateness at {per_second}/s on {} with {agents} agent(s): {}",
        backend(mysql),
        l.summary("agent process start")
    );
    println!("{}", l.cpu);
    println!("in the measured window: {}", l.threads);
    println!(
        "per fire {:.2} ms: {:.1} × the paced floor read before the run ({:.3} ms), {:.1} × the one after ({:.3} ms)",
        l.per_fire_ms,
        l.per_fire_ms / floor_before,
        floor_before,
        l.per_fire_ms / floor_after,
        floor_after
    );
    // The run's own process is the other reference: the issue's 0.25 ms was 0.28-0.29 of it.
    println!(
        "a job's own process {:.2} ms of CPU a fire in the measured window (reaped then); per fire {:.2} of it",
        l.job_ms,
        l.per_fire_ms / l.job_ms.max(f64::MIN_POSITIVE)
    );
}

impl Lateness {
    /// Fires, failures and the lateness percentiles, `start` naming what started.
    fn summary(&self, start: &str) -> String {
        format!(
            "{} fires in {} s ({} not succeeded); taken for dispatch p50 {} ms p99 {} ms; {start} p50 {} ms p99 {} ms, max {} ms",
            self.fires,
            self.seconds,
            self.failed,
            percentile(&self.sent, 0.5),
            percentile(&self.sent, 0.99),
            percentile(&self.started, 0.5),
            percentile(&self.started, 0.99),
            self.started.last().copied().unwrap_or(-1)
        )
    }
}

/// `lateness` at 100 and 500 fires/s (or at `rate` only), agents in `push` then in `connect`
/// mode, as one table (agent process start − scheduled time).
fn modes(mysql: bool, rate: Option<usize>) {
    let rates = rate.map_or_else(|| vec![100, 500], |r| vec![r]);
    let mut rows = Vec::new();
    for per_second in rates {
        for mode in [Mode::Push, Mode::Connect] {
            let l = measure_lateness(mysql, per_second, LATENESS_AGENTS, Some(mode));
            eprintln!("{} at {per_second}/s: {}", mode.as_str(), l.cpu);
            rows.push((mode, per_second, l));
        }
    }
    println!(
        "lateness on {}, agent process start − scheduled time, ms:",
        backend(mysql)
    );
    println!("| mode | fires/s | p50 | p99 | max | succeeded/total |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    for (mode, per_second, l) in &rows {
        println!(
            "| {} | {per_second} | {} | {} | {} | {}/{} |",
            mode.as_str(),
            percentile(&l.started, 0.5),
            percentile(&l.started, 0.99),
            l.started.last().copied().unwrap_or(-1),
            l.fires - l.failed,
            l.fires
        );
    }
}

/// A loopback endpoint for http jobs, on its own thread (one actix worker): answers every
/// request with 200 and a short body. Returns its URL.
fn http_endpoint() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/ok", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        actix_web::rt::System::new().block_on(async move {
            actix_web::HttpServer::new(|| {
                actix_web::App::new().default_service(actix_web::web::to(|| async {
                    actix_web::HttpResponse::Ok().body("ok")
                }))
            })
            .workers(1)
            .disable_signals()
            .listen(listener)
            .unwrap()
            .run()
            .await
            .unwrap();
        });
    });
    url
}

/// `lateness` with http jobs against a loopback endpoint: the scheduler's own cost, no process
/// per run. Prints the start lateness and the CPU of admin, agents and the endpoint.
fn http_lateness(mysql: bool, per_second: usize) {
    let url = http_endpoint();
    let own_before = cpu_ms_of(std::process::id());
    let l = measure_lateness_of(mysql, per_second, LATENESS_AGENTS, None, Some(&url));
    let endpoint_ms = cpu_ms_of(std::process::id()) - own_before;
    println!(
        "http jobs at {per_second}/s on {}: {}",
        backend(mysql),
        l.summary("request start")
    );
    println!(
        "{}; the endpoint and this program {:.1} s",
        l.cpu,
        endpoint_ms as f64 / 1000.0
    );
}

/// One heartbeat of the fleet simulator: when it was due, when it was sent and how long the
/// admin took to answer it (µs), and whether the envelope said `code` 200.
#[derive(Clone, Copy)]
struct Beat {
    due_ms: i64,
    lag_us: i64,
    took_us: i64,
    ok: bool,
}

/// `n` simulated jobfleet agents speaking the agent protocol to `base` from one small tokio
/// runtime (two threads): each POSTs `/api/registry` every `period` with the shared token, its
/// own agent key and the body a real agent sends, its beats spread evenly over the period.
/// Addresses are `http://127.0.0.1:<20000 + i>/` in groups `fleet-0` … `fleet-19`, which have no
/// jobs, so nothing ever calls them. At most `connections` requests are in flight (keep-alive
/// connections, reused). Runs until `stop` is set; every beat lands in `beats`.
struct Fleet {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    beats: std::sync::Arc<std::sync::Mutex<Vec<Beat>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

const FLEET_GROUPS: usize = 20;

impl Fleet {
    fn start(base: &str, n: usize, period: Duration, connections: usize) -> Self {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let beats = std::sync::Arc::new(std::sync::Mutex::new(Vec::with_capacity(n * 20)));
        let base = format!("{base}/api/registry");
        let (stop_in, beats_in) = (stop.clone(), beats.clone());
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(run_fleet(base, n, period, connections, stop_in, beats_in));
        });
        Self {
            stop,
            beats,
            thread: Some(thread),
        }
    }

    /// The beats due in `[from, to)` so far.
    fn beats_between(&self, from: i64, to: i64) -> Vec<Beat> {
        self.beats
            .lock()
            .unwrap()
            .iter()
            .filter(|b| b.due_ms >= from && b.due_ms < to)
            .copied()
            .collect()
    }

    fn stop(mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            thread.join().unwrap();
        }
    }
}

/// The heartbeat body of simulated agent `i`, as `jobfleet_agent::registry` sends it; the
/// metrics move from beat to beat like a real host's.
fn fleet_body(i: usize, instance: &str, round: u64) -> Vec<u8> {
    use jobfleet_agent::protocol::{HostMetrics, REGISTRY_GROUP_EXECUTOR, RegistryParam};
    let param = RegistryParam {
        registry_group: REGISTRY_GROUP_EXECUTOR.into(),
        registry_key: format!("fleet-{}", i % FLEET_GROUPS),
        registry_value: format!("http://127.0.0.1:{}/", 20_000 + i),
        agent_version: Some(env!("CARGO_PKG_VERSION").into()),
        hostname: Some(format!("fleet-host-{i}")),
        metrics: Some(HostMetrics {
            cpu_pct: ((i as u64 * 7 + round * 13) % 1000) as f64 / 10.0,
            load1: ((i as u64 + round) % 400) as f64 / 100.0,
            mem_used_mb: 1024 + (i as u64 * 31 + round * 17) % 2048,
            mem_total_mb: 8192,
            disk_free_mb: 50_000 + round % 100,
            running: 0,
        }),
        labels: Some(
            [
                ("rack".to_owned(), format!("r{}", i % 40)),
                ("zone".to_owned(), format!("z{}", i % 3)),
            ]
            .into(),
        ),
        limits_mode: Some("cgroup_v1".into()),
        instance_id: Some(instance.to_owned()),
        held_runs: Some(Vec::new()),
        accepted_through: Some(0),
        run_as: Some("nobody".into()),
        mode: Some("push".into()),
    };
    serde_json::to_vec(&param).unwrap()
}

async fn run_fleet(
    url: String,
    n: usize,
    period: Duration,
    connections: usize,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    beats: std::sync::Arc<std::sync::Mutex<Vec<Beat>>>,
) {
    use jobfleet_agent::protocol::{ACCESS_TOKEN_HEADER, AGENT_KEY_HEADER};
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(connections)
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let gate = std::sync::Arc::new(tokio::sync::Semaphore::new(connections));
    let period_ms = i64::try_from(period.as_millis()).unwrap();
    let start = now_ms() + 200;
    let mut k: u64 = 0;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        // Beat k is agent k mod n's beat of round k / n, at its offset in the period.
        let i = (k % n as u64) as usize;
        let round = k / n as u64;
        let due =
            start + i64::try_from(round).unwrap() * period_ms + (i as i64 * period_ms) / n as i64;
        let wait = due - now_ms();
        if wait > 0 {
            tokio::time::sleep(Duration::from_millis(wait.cast_unsigned())).await;
        }
        let permit = gate.clone().acquire_owned().await.unwrap();
        let (client, url, beats) = (client.clone(), url.clone(), beats.clone());
        tokio::spawn(async move {
            let _permit = permit;
            let key = format!("fleet-simulated-agent-key-{i:010}-abcdef");
            let body = fleet_body(i, &format!("fleet-instance-{i}"), round);
            let sent = Instant::now();
            let lag_us = (now_ms() - due) * 1000;
            let answer = client
                .post(&url)
                .header(ACCESS_TOKEN_HEADER, TOKEN)
                .header(AGENT_KEY_HEADER, key)
                .header("Content-Type", "application/json")
                .body(body)
                .send()
                .await;
            let ok = match answer {
                Ok(answer) => answer
                    .bytes()
                    .await
                    .is_ok_and(|b| String::from_utf8_lossy(&b).contains("\"code\":200")),
                Err(_) => false,
            };
            let took_us = i64::try_from(sent.elapsed().as_micros()).unwrap();
            beats.lock().unwrap().push(Beat {
                due_ms: due,
                lag_us,
                took_us,
                ok,
            });
        });
        k += 1;
    }
    // The beats in flight finish.
    let _ = gate.acquire_many(u32::try_from(connections).unwrap()).await;
}

/// Issue 19: `agents` simulated agents (`Fleet`) heartbeating every 10 s against one admin
/// that also has `per_second` fixed-rate jobs on 4 real agents. Measures, on one admin: its
/// idle CPU (the floor, 10 s), then the fleet alone for a minute (admin CPU per heartbeat,
/// heartbeat latency, errors), then 20 s of `per_second` fires/s with the fleet beating, then
/// the same without the fleet (trigger lateness p99 of both), and the admin's VmRSS/VmHWM.
fn fleet(mysql: bool, agents_n: usize, per_second: usize, connections: usize) {
    let bench = Bench::new(mysql);
    bench.jobs(per_second, "NULL, 1, NULL");
    let now = now_ms();
    let groups: Vec<String> = (0..FLEET_GROUPS)
        .map(|g| format!("('fleet-{g}', 'fleet {g}', 'auto', '', {now}, {now})"))
        .collect();
    bench
        .conn()
        .batch_execute(&format!(
            "INSERT INTO executor_group (app_name, title, address_mode, addresses, created_ms, updated_ms) VALUES {}",
            groups.join(",")
        ))
        .unwrap();
    let (admin, base) = bench.admin();
    let agents = bench.agents(&base, 4, None);
    let pid = admin.0.id();
    std::thread::sleep(Duration::from_secs(2));
    let idle_from = (now_ms(), cpu_ms_of(pid));
    std::thread::sleep(Duration::from_secs(10));
    let floor_ms_per_s =
        (cpu_ms_of(pid) - idle_from.1) as f64 / ((now_ms() - idle_from.0) as f64 / 1000.0);

    let period = Duration::from_secs(10);
    let fleet = Fleet::start(&base, agents_n, period, connections);
    // One period registers every agent (the inserts); the next ones are the steady state.
    std::thread::sleep(period + Duration::from_secs(3));
    let from = (now_ms(), cpu_ms_of(pid));
    std::thread::sleep(Duration::from_secs(60));
    let to = (now_ms(), cpu_ms_of(pid));
    // Beats due within the minute that have been answered (the last few may be in flight).
    std::thread::sleep(Duration::from_secs(1));
    let minute = fleet.beats_between(from.0, to.0);
    let registered = bench.scalar("SELECT COUNT(*) AS n FROM agent WHERE app_name LIKE 'fleet-%'");
    let live_floor = now_ms() - 30_000;
    let live = bench.scalar(&format!(
        "SELECT COUNT(*) AS n FROM agent WHERE app_name LIKE 'fleet-%' AND last_seen_ms >= {live_floor}"
    ));
    let rss_fleet = (status_kb(&admin, "VmRSS:"), status_kb(&admin, "VmHWM:"));
    let with = lateness_window(&bench, &admin, &agents, per_second, 20);
    fleet.stop();
    let rss_after = (status_kb(&admin, "VmRSS:"), status_kb(&admin, "VmHWM:"));
    std::thread::sleep(Duration::from_secs(2));
    let without = lateness_window(&bench, &admin, &agents, per_second, 20);

    let cpu_ms = (to.1 - from.1) as f64;
    let seconds = (to.0 - from.0) as f64 / 1000.0;
    let errors = minute.iter().filter(|b| !b.ok).count();
    let mut took: Vec<i64> = minute.iter().map(|b| b.took_us).collect();
    took.sort_unstable();
    let max_lag_ms = minute.iter().map(|b| b.lag_us).max().unwrap_or(0) as f64 / 1000.0;
    let beats = minute.len().max(1) as f64;
    println!(
        "fleet on {}: {agents_n} simulated agents beating every {} s, {} real agents with {per_second} jobs/s",
        backend(mysql),
        period.as_secs(),
        agents.len()
    );
    println!(
        "  admin idle floor: {floor_ms_per_s:.1} ms of CPU per second (4 agents, nothing due)"
    );
    println!(
        "  fleet alone, {seconds:.0} s, {connections} connections: {} beats ({:.0}/s), {errors} errors; admin CPU {:.2} s = {:.3} ms per heartbeat ({:.3} ms above the floor), {:.1} % of a core",
        minute.len(),
        beats / seconds,
        cpu_ms / 1000.0,
        cpu_ms / beats,
        (cpu_ms - floor_ms_per_s * seconds) / beats,
        cpu_ms / seconds / 10.0
    );
    println!(
        "  heartbeat latency: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms; the simulator's worst lag behind schedule {max_lag_ms:.1} ms",
        percentile(&took, 0.5) as f64 / 1000.0,
        percentile(&took, 0.99) as f64 / 1000.0,
        took.last().copied().unwrap_or(0) as f64 / 1000.0
    );
    println!("  fleet rows: {registered} registered, {live} live at the end of the minute");
    println!(
        "  trigger lateness at {per_second}/s with the fleet:    {}",
        with.summary("agent process start")
    );
    println!(
        "  trigger lateness at {per_second}/s without the fleet: {}",
        without.summary("agent process start")
    );
    println!(
        "  p99 (agent process start) with − without: {} ms",
        percentile(&with.started, 0.99) - percentile(&without.started, 0.99)
    );
    println!(
        "  admin memory: with the fleet VmRSS {} kB, VmHWM {} kB; after the fleet's lateness window VmRSS {} kB, VmHWM {} kB",
        rss_fleet.0, rss_fleet.1, rss_after.0, rss_after.1
    );
    println!("  with the fleet: {}", with.cpu);
    println!("  without:        {}", without.cpu);
}

/// Whether `rows` (a table and its `WHERE`) has a row. The burst's polls ask this, not how many:
/// a count walks every index entry it counts, tens of thousands early in a burst, four times a
/// second, on the server being measured.
fn any(conn: &mut AnyConnection, rows: &str) -> bool {
    scalar_on(
        conn,
        &format!("SELECT COUNT(*) AS n FROM (SELECT 1 FROM {rows} LIMIT 1) AS any_row"),
    ) > 0
}

fn scalar_on(conn: &mut AnyConnection, sql: &str) -> i64 {
    #[derive(QueryableByName)]
    struct N {
        #[diesel(sql_type = BigInt)]
        n: i64,
    }
    diesel::sql_query(sql).get_result::<N>(conn).unwrap().n
}

fn burst(mysql: bool, jobs: usize, agents: usize) {
    let bench = Bench::new(mysql);
    bench.jobs(jobs, "NULL, NULL, 0");
    let (admin, base) = bench.admin();
    let agents = bench.agents(&base, agents, None);
    let due = now_ms() + 2_000;
    bench
        .conn()
        .batch_execute(&format!(
            "UPDATE job SET enabled = 1, schedule_type = 'once', once_at_ms = {due}, next_fire_ms = {due}"
        ))
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(600);
    let (mut all_sent_ms, mut done_ms) = (None, None);
    // One connection for the polls, asking only whether anything is still in flight: a new connection
    // each time, and counts of the finished runs, cost the database server as much as some of
    // what is measured (on MariaDB, 4.5 of 6 s of its CPU in a burst of 20,000).
    let mut poll = bench.conn();
    let mut unplanned = true;
    while Instant::now() < deadline && done_ms.is_none() {
        std::thread::sleep(Duration::from_millis(250));
        if unplanned {
            unplanned = any(
                &mut poll,
                "job WHERE enabled = 1 AND next_fire_ms IS NOT NULL",
            );
        }
        if unplanned || now_ms() <= due || any(&mut poll, "job_run WHERE status = 'pending'") {
            continue;
        }
        all_sent_ms.get_or_insert_with(now_ms);
        // One look at both: a run may go from pending to running between two.
        if !any(&mut poll, "job_run WHERE status IN ('pending', 'running')") {
            done_ms = Some(now_ms());
        }
    }
    let rows = bench.scalar("SELECT COUNT(*) AS n FROM job_run");
    let distinct = bench.scalar("SELECT COUNT(DISTINCT job_id) AS n FROM job_run");
    let succeeded = bench.scalar("SELECT COUNT(*) AS n FROM job_run WHERE status = 'succeeded'");
    let last_result = bench.scalar("SELECT COALESCE(MAX(finished_ms), 0) AS n FROM job_run");
    println!(
        "burst of {jobs} on {}: all sent {} ms after due, all results back {} ms after due (last finished_ms +{} ms); runs {rows}, jobs fired {distinct}, succeeded {succeeded}, lost {}, duplicated {}",
        if mysql { "MariaDB" } else { "SQLite" },
        all_sent_ms.map_or(-1, |t| t - due),
        done_ms.map_or(-1, |t| t - due),
        last_result - due,
        jobs as i64 - distinct,
        rows - distinct
    );
    println!("{}", cpu_report(&admin, &agents));
    if succeeded < rows {
        print_not_succeeded(&bench, 0, i64::MAX);
    }
}

fn rss(mysql: bool, jobs: usize) {
    let bench = Bench::new(mysql);
    bench.jobs(jobs, "'0 0 3 * * ?', NULL, NULL");
    // Enabled, next fire tomorrow at 03:00 UTC: the scheduler keeps all of them, fires none now.
    let tomorrow_3am = (now_ms() / 86_400_000 + 1) * 86_400_000 + 3 * 3_600_000;
    bench
        .conn()
        .batch_execute(&format!(
            "UPDATE job SET enabled = 1, schedule_type = 'cron', next_fire_ms = {tomorrow_3am}"
        ))
        .unwrap();
    let (admin, base) = bench.admin();
    let _agents = bench.agents(&base, 1, None);
    std::thread::sleep(Duration::from_secs(10));
    // Exercise the job list once, as the console would.
    let _ = std::process::Command::new("curl")
        .args(["-s", "-o", "/dev/null", &format!("{base}/readyz")])
        .status();
    println!(
        "admin with {jobs} enabled jobs on {}: VmRSS {} kB, VmHWM {} kB",
        if mysql { "MariaDB" } else { "SQLite" },
        status_kb(&admin, "VmRSS:"),
        status_kb(&admin, "VmHWM:")
    );
}

/// `VmRSS`, `RssAnon` and `RssFile` of `pid`, in kB.
fn rss_split_kb(pid: u32) -> (i64, i64, i64) {
    (
        status_kb_of(pid, "VmRSS:"),
        status_kb_of(pid, "RssAnon:"),
        status_kb_of(pid, "RssFile:"),
    )
}

fn idle() {
    let bench = Bench::new(false);
    let (admin, base) = bench.admin();
    let agents = bench.agents(&base, 1, None);
    login(&base);
    let at_once: Vec<_> = (0..2)
        .map(|_| {
            let base = base.clone();
            std::thread::spawn(move || login(&base))
        })
        .collect();
    for login in at_once {
        login.join().unwrap();
    }
    std::thread::sleep(Duration::from_secs(20));
    let agent_pid = agents[0].0.id();
    let spawners: Vec<u32> = jobfleet_agent::runner::spawner::of_agent(agent_pid)
        .into_iter()
        .map(i32::cast_unsigned)
        .collect();
    let cpu_before = [cpu_ms_of(admin.0.id()), cpu_ms_of(agent_pid)];
    std::thread::sleep(Duration::from_secs(60));
    let cpu_after = [cpu_ms_of(admin.0.id()), cpu_ms_of(agent_pid)];
    let line = |name: &str, pid: u32, cpu_ms: Option<i64>| {
        let (rss, anon, file) = rss_split_kb(pid);
        println!(
            "{name}: CPU over 60 s idle {}, VmRSS {:.1} MB (anonymous {:.1} MB, file-backed {:.1} MB)",
            cpu_ms.map_or_else(|| "-".to_owned(), |ms| format!("{ms} ms")),
            rss as f64 / 1000.0,
            anon as f64 / 1000.0,
            file as f64 / 1000.0
        );
    };
    line(
        "jobfleet-admin",
        admin.0.id(),
        Some(cpu_after[0] - cpu_before[0]),
    );
    line(
        "jobfleet-agent",
        agent_pid,
        Some(cpu_after[1] - cpu_before[1]),
    );
    for pid in spawners {
        line("jobfleet-spawn", pid, None);
    }
}

/// The admin alone on a database holding a day's runs of yesterday and today: what its passes
/// cost once the run table is large.
fn day2(mysql: bool, per_day: usize) {
    const DAY_MS: i64 = 86_400_000;
    let now = now_ms();
    let today = now - now.rem_euclid(DAY_MS);
    // Today must hold runs, and no new UTC day may start while it runs (a new day's count).
    assert!(
        (900_000..DAY_MS - 900_000).contains(&(now - today)),
        "run day2 at least 15 minutes from midnight UTC"
    );
    let bench = Bench::new(mysql);
    let mut conn = bench.conn();
    let started = Instant::now();
    for (from, to) in [(today - DAY_MS, today), (today, now - 300_000)] {
        let step = (to - from) as f64 / per_day as f64;
        for chunk in (0..per_day).collect::<Vec<_>>().chunks(1000) {
            let values: Vec<String> = chunk
                .iter()
                .map(|&i| {
                    let t = from + (i as f64 * step) as i64;
                    let status = if i % 10 == 0 { "failed" } else { "succeeded" };
                    format!(
                        "({}, 1, 1, 'schedule', {t}, '{status}', '', 0, 1, {}, {}, {}, {t})",
                        1 + i % 100,
                        t + 1,
                        t + 2,
                        t + 2 + (i % 50) as i64
                    )
                })
                .collect();
            conn.batch_execute(&format!(
                "INSERT INTO job_run (job_id, group_id, attempt, trigger_kind, scheduled_ms, status, params, shard_index, shard_total, triggered_ms, started_ms, finished_ms, created_ms) VALUES {}",
                values.join(",")
            ))
            .unwrap();
        }
    }
    println!(
        "{} ended runs stored in {:.1} s ({})",
        2 * per_day,
        started.elapsed().as_secs_f64(),
        backend(mysql)
    );
    let (admin, _base) = bench.admin();
    let seconds = 440;
    let steady_from = 130;
    let start = Instant::now();
    let first = cpu_ms_of(admin.0.id());
    let (mut last, mut at_steady) = (first, first);
    for second in 1..=seconds {
        let due = start + Duration::from_secs(second);
        std::thread::sleep(due.saturating_duration_since(Instant::now()));
        let cpu = cpu_ms_of(admin.0.id());
        if cpu - last > 30 {
            println!("  {second:>3} s: {} ms", cpu - last);
        }
        if second == steady_from {
            at_steady = cpu;
        }
        last = cpu;
    }
    println!(
        "admin CPU over {seconds} s: {} ms; first {steady_from} s {} ms; from {steady_from} s on {} ms ({:.0} ms a minute)",
        last - first,
        at_steady - first,
        last - at_steady,
        (last - at_steady) as f64 * 60.0 / (seconds - steady_from) as f64
    );
}

/// The machine's own ceiling: how many `sh -c true` processes two threads (one per core) can
/// start and reap per second with nothing else running. No scheduler can run jobs faster.
fn spawn_ceiling() {
    let seconds = 5;
    let until = Instant::now() + Duration::from_secs(seconds);
    let threads: Vec<_> = (0..2)
        .map(|_| {
            std::thread::spawn(move || {
                let mut n = 0u64;
                while Instant::now() < until {
                    Command::new("/bin/sh")
                        .args(["-c", "true"])
                        .stdin(Stdio::null())
                        .stdout(Stdio::null())
                        .status()
                        .unwrap();
                    n += 1;
                }
                n
            })
        })
        .collect();
    let total: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    println!(
        "spawn ceiling: {} `sh -c true` processes started and reaped per second on 2 threads",
        total / seconds
    );
}

/// CPU time the calling thread has used, in µs.
fn thread_cpu_us() -> u64 {
    cpu_us_of(nix::sys::resource::UsageWho::RUSAGE_THREAD)
}

/// CPU time `who` has used, in µs.
fn cpu_us_of(who: nix::sys::resource::UsageWho) -> u64 {
    let usage = nix::sys::resource::getrusage(who).expect("getrusage");
    let us = |t: nix::sys::time::TimeVal| t.tv_sec() as u64 * 1_000_000 + t.tv_usec() as u64;
    us(usage.user_time()) + us(usage.system_time())
}

/// A reference floor for the per-fire figures: one thread doing nothing but start
/// `sh -c true` at its millisecond, `rate` a second spread evenly, and reap each one when it
/// ends. It waits in `ppoll` for the next start or a `SIGCHLD` (a signalfd), spawns each process
/// at its time (`posix_spawn`: a vfork, as the agents' spawners clone) and reaps whatever ended
/// (`waitpid` without blocking). Its CPU per process is the timer's wake-up, the spawn and the
/// exit's wake-up, before anything has been decided, journalled, logged or reported. How late
/// each start was is kept: back-to-back starts after a delay skip wake-ups (and understate the
/// CPU floor), and their lateness is the floor of the lateness targets.
#[allow(
    clippy::zombie_processes,
    reason = "every child is reaped by `waitpid(-1)`, not through its handle"
)]
/// Returns the thread's CPU per process, ms.
fn paced_spawn_floor(rate: u32, seconds: u32) -> f64 {
    use nix::errno::Errno;
    use nix::poll::{PollFd, PollFlags, ppoll};
    use nix::sys::resource::UsageWho;
    use nix::sys::signal::{SigSet, Signal};
    use nix::sys::signalfd::{SfdFlags, SignalFd};
    use nix::sys::time::TimeSpec;
    use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
    use std::os::fd::AsFd;

    let count = rate * seconds;
    let period = Duration::from_secs(1) / rate;
    // Only this thread runs now; with SIGCHLD blocked here the signal waits for the signalfd.
    // `Command` clears the mask in the child.
    let mut chld = SigSet::empty();
    chld.add(Signal::SIGCHLD);
    chld.thread_block().expect("block SIGCHLD");
    let exits = SignalFd::with_flags(&chld, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)
        .expect("signalfd");
    let before = thread_cpu_us();
    let children_before = cpu_us_of(UsageWho::RUSAGE_CHILDREN);
    let (mut spawned, mut reaped) = (0, 0);
    let mut lateness_us: Vec<u128> = Vec::with_capacity(count as usize);
    let mut next = Instant::now() + period;
    while reaped < count {
        let now = Instant::now();
        if spawned < count && now >= next {
            lateness_us.push((now - next).as_micros());
            Command::new("/bin/sh")
                .args(["-c", "true"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .spawn()
                .unwrap();
            spawned += 1;
            next += period;
            continue;
        }
        let wait = if spawned < count {
            next - now
        } else {
            Duration::from_secs(1)
        };
        let mut fds = [PollFd::new(exits.as_fd(), PollFlags::POLLIN)];
        match ppoll(&mut fds, Some(TimeSpec::from_duration(wait)), None) {
            Ok(_) | Err(Errno::EINTR) => {}
            Err(e) => panic!("ppoll: {e}"),
        }
        while exits.read_signal().expect("signalfd read").is_some() {}
        loop {
            match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) | Err(Errno::ECHILD) => break,
                Ok(_) => reaped += 1,
                Err(e) => panic!("waitpid: {e}"),
            }
        }
    }
    let spent = thread_cpu_us() - before;
    let processes = cpu_us_of(UsageWho::RUSAGE_CHILDREN) - children_before;
    chld.thread_unblock().expect("unblock SIGCHLD");
    let per = |us: u64| us as f64 / 1000.0 / f64::from(count);
    let late = lateness_us
        .iter()
        .filter(|&&us| us > period.as_micros())
        .count();
    lateness_us.sort_unstable();
    let at = |q: usize| lateness_us[(lateness_us.len() - 1) * q / 100] as f64 / 1000.0;
    println!(
        "paced floor: {count} `sh -c true` at {rate}/s, each started at its time and reaped at \
         its exit by one thread: {:.3} ms of that thread's CPU per process (the processes \
         themselves {:.3} ms each); start lateness p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms \
         ({late} over a period)",
        per(spent),
        per(processes),
        at(50),
        at(99),
        at(100)
    );
    per(spent)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mysql = args.iter().any(|a| a == "--mysql");
    let jobs = args
        .iter()
        .position(|a| a == "--jobs")
        .and_then(|i| args.get(i + 1))
        .map(|n| n.parse::<usize>().expect("--jobs takes a number"));
    let agents = args
        .iter()
        .position(|a| a == "--agents")
        .and_then(|i| args.get(i + 1))
        .map(|n| n.parse::<usize>().expect("--agents takes a number"));
    assert!(agents != Some(0), "--agents takes a number of at least 1");
    match args.first().map(String::as_str) {
        Some("lateness") => lateness(
            mysql,
            jobs.unwrap_or(1000),
            agents.unwrap_or(LATENESS_AGENTS),
        ),
        Some("http") => http_lateness(mysql, jobs.unwrap_or(5000)),
        Some("burst") => burst(mysql, jobs.unwrap_or(50_000), agents.unwrap_or(4)),
        Some("rss") => rss(mysql, jobs.unwrap_or(100_000)),
        Some("idle") => idle(),
        Some("day2") => day2(mysql, jobs.unwrap_or(1_000_000)),
        Some("spawn") => {
            spawn_ceiling();
            paced_spawn_floor(1000, 10);
        }
        Some("modes") => modes(mysql, jobs),
        Some("fleet") => {
            let agents = agents.unwrap_or(10_000);
            let connections = args
                .iter()
                .position(|a| a == "--connections")
                .and_then(|i| args.get(i + 1))
                .map_or(64, |n| n.parse().expect("--connections takes a number"));
            fleet(mysql, agents, jobs.unwrap_or(100), connections);
        }
        Some("workflows") => {
            let number = |flag: &str, default: usize| {
                args.iter()
                    .position(|a| a == flag)
                    .and_then(|i| args.get(i + 1))
                    .map_or(default, |n| n.parse().expect("a number"))
            };
            let (chains, length, sleep_ms, fan) = (
                number("--chains", 100),
                number("--length", 10),
                number("--sleep-ms", 0),
                number("--fan", 1000),
            );
            if args.iter().any(|a| a == "--fan-only") {
                fan_out(mysql, fan);
            } else if args.iter().any(|a| a == "--steps-only") {
                steps(mysql, chains, length, sleep_ms);
            } else {
                workflows(mysql, chains, length, sleep_ms, fan);
            }
        }
        _ => {
            eprintln!(
                "usage: sched_bench lateness|http|burst|rss|idle|day2|spawn|modes|workflows|fleet [--mysql] [--jobs N] \
                 [--agents N (lateness, burst, fleet)] [--connections N] [--chains N --length N --sleep-ms N --fan N --steps-only --fan-only]"
            );
            std::process::exit(2);
        }
    }
}

/// Calls the admin's open API with `curl` (a bearer `token`, a JSON `body`); returns the
/// status and the JSON answer.
fn api(base: &str, token: &str, method: &str, path: &str, body: &str) -> (u16, serde_json::Value) {
    use std::io::Write;
    let mut child = Command::new("curl")
        .args(["-s", "-X", method, "-H", "Content-Type: application/json"])
        .args(["-H", &format!("Authorization: Bearer {token}")])
        .args(["--data-binary", "@-", "-w", "\n%{http_code}"])
        .arg(format!("{base}{path}"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("curl");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let (json, code) = text.trim_end().rsplit_once('\n').unwrap_or(("", &text));
    (
        code.trim().parse().unwrap_or(0),
        serde_json::from_str(json).unwrap_or(serde_json::Value::Null),
    )
}

/// The bootstrap admin's API token.
fn login(base: &str) -> String {
    let (code, body) = api(
        base,
        "",
        "POST",
        "/api/v1/auth/token",
        r#"{"username": "admin", "password": "bench-password-1"}"#,
    );
    assert_eq!(code, 200, "login: {body}");
    body["token"].as_str().unwrap().to_owned()
}

/// Creates a workflow of group 1 from its nodes and edges (as JSON arrays); returns its id.
fn create_workflow(base: &str, token: &str, name: &str, nodes: &str, edges: &str) -> i64 {
    let body =
        format!(r#"{{"group_id": 1, "name": "{name}", "nodes": {nodes}, "edges": {edges}}}"#);
    let (code, answer) = api(base, token, "POST", "/api/v1/workflows", &body);
    assert_eq!(code, 201, "create workflow {name}: {answer}");
    answer["id"].as_i64().unwrap()
}

/// A field of the admin's `/proc/<pid>/status` in kB (`VmHWM:`, `VmRSS:`).
fn status_kb(proc: &Proc, field: &str) -> i64 {
    status_kb_of(proc.0.id(), field)
}

/// A field of `/proc/<pid>/status` in kB.
fn status_kb_of(pid: u32, field: &str) -> i64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1).map(|n| n.parse().unwrap_or(-1)))
        .unwrap_or(-1)
}

/// The admin's own CPU time so far, ms.
fn admin_cpu_ms(admin: &Proc) -> i64 {
    cpu_ms(admin).0
}

/// What a stamping job writes: the wall clock at its start, in ns, in a file named after its
/// run (`$JOBFLEET_RUN_ID`), in `dir`.
/// With `sleep_ms` > 0 the job then sleeps 0 to `sleep_ms` − 1 ms, spread by its run id, so
/// that chains started together drift apart.
fn stamp_command(dir: &std::path::Path, sleep_ms: usize) -> String {
    let stamp = format!("date +%s%N > {}/$JOBFLEET_RUN_ID", dir.display());
    if sleep_ms == 0 {
        return stamp;
    }
    // A shell builtin's arithmetic spreads the sleeps over 0 to `sleep_ms` by run id.
    format!(
        "{stamp}; s=$((JOBFLEET_RUN_ID * 7919 % {})); sleep $((s / 1000)).$(printf %03d $((s % 1000)))",
        sleep_ms.clamp(1, 60_000)
    )
}

/// The stamps the jobs wrote: run id → process start, in µs since the epoch.
fn read_stamps(dir: &std::path::Path) -> std::collections::HashMap<i64, i64> {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let e = e.ok()?;
            let run: i64 = e.file_name().to_str()?.parse().ok()?;
            let ns: i64 = std::fs::read_to_string(e.path())
                .ok()?
                .trim()
                .parse()
                .ok()?;
            Some((run, ns / 1000))
        })
        .collect()
}

/// One node of a workflow run and its job run, as the tables hold them.
#[derive(QueryableByName, Debug)]
struct NodeRun {
    #[diesel(sql_type = BigInt)]
    wf_run: i64,
    #[diesel(sql_type = diesel::sql_types::Text)]
    node_key: String,
    /// When the admin stored the node's end (the callback's transaction), ms.
    #[diesel(sql_type = diesel::sql_types::Nullable<BigInt>)]
    node_finished: Option<i64>,
    #[diesel(sql_type = BigInt)]
    run_id: i64,
    /// When the admin created the job run (the upstream end's transaction, or the trigger), ms.
    #[diesel(sql_type = BigInt)]
    created: i64,
    /// When the admin took the run for dispatch, ms.
    #[diesel(sql_type = diesel::sql_types::Nullable<BigInt>)]
    triggered: Option<i64>,
    /// When the agent started the process (its own clock, the same machine), ms.
    #[diesel(sql_type = diesel::sql_types::Nullable<BigInt>)]
    started: Option<i64>,
    /// When the process ended, by the agent, ms.
    #[diesel(sql_type = diesel::sql_types::Nullable<BigInt>)]
    finished: Option<i64>,
    #[diesel(sql_type = diesel::sql_types::Text)]
    status: String,
}

fn node_runs(bench: &Bench) -> Vec<NodeRun> {
    diesel::sql_query(
        "SELECT n.workflow_run_id AS wf_run, n.node_key, n.finished_ms AS node_finished, r.id AS run_id, \
         r.created_ms AS created, r.triggered_ms AS triggered, r.started_ms AS started, r.finished_ms AS finished, r.status \
         FROM workflow_node n JOIN job_run r ON r.workflow_node_id = n.id",
    )
    .load::<NodeRun>(&mut bench.conn())
    .unwrap()
}

/// Waits until no workflow run is running; returns when the last one ended (admin clock, ms).
fn wait_workflows(bench: &Bench, within: Duration) -> i64 {
    let deadline = Instant::now() + within;
    loop {
        let open = bench
            .scalar("SELECT COUNT(*) AS n FROM workflow_run WHERE status IN ('running', 'paused')");
        if open == 0 {
            return bench.scalar("SELECT COALESCE(MAX(finished_ms), 0) AS n FROM workflow_run");
        }
        assert!(
            Instant::now() < deadline,
            "{open} workflow run(s) still running"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// p50/p99/max of a list of µs, as ms with one decimal.
fn summary(name: &str, mut us: Vec<i64>) -> String {
    us.sort_unstable();
    let ms = |v: i64| v as f64 / 1000.0;
    format!(
        "{name}: n {}, p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        us.len(),
        ms(percentile(&us, 0.5)),
        ms(percentile(&us, 0.99)),
        ms(us.last().copied().unwrap_or(-1))
    )
}

/// Issue 16. Part 1, step latency: `chains` chain workflows of `length` nodes (each node its
/// own job, which stamps its start) triggered at once; for every node with an upstream node,
/// its process start − the upstream node's end as stored by the admin. The floor, measured
/// first on the same admin and agents: a single job triggered through the API, its process
/// start − its run's creation. Part 2: one workflow of `fan` nodes (an entry, `fan` − 2
/// parallel nodes, a join) on a fresh admin: wall time and the admin's peak RSS.
fn workflows(mysql: bool, chains: usize, length: usize, sleep_ms: usize, fan: usize) {
    steps(mysql, chains, length, sleep_ms);
    fan_out(mysql, fan);
}

fn steps(mysql: bool, chains: usize, length: usize, sleep_ms: usize) {
    let bench = Bench::new(mysql);
    let stamps = bench._dir.path().join("stamps");
    std::fs::create_dir(&stamps).unwrap();
    // Jobs 1 to chains × length: the nodes; the last one: the floor's single job.
    let jobs = chains * length + 1;
    bench.jobs_running(jobs, "NULL, NULL, NULL", &stamp_command(&stamps, sleep_ms));
    // The floor's job never sleeps: its runs follow each other on one agent.
    bench
        .conn()
        .batch_execute(&format!(
            "UPDATE job SET command = '{}' WHERE id = {jobs}",
            stamp_command(&stamps, 0)
        ))
        .unwrap();
    let (admin, base) = bench.admin();
    let agents = bench.agents(&base, 4, None);
    let token = login(&base);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();

    // The floor: the same path (a pending run stored, handed to the timer, sent, spawned)
    // without a workflow, one run at a time.
    let single = jobs;
    for _ in 0..100 {
        let (code, answer) = api(
            &base,
            &token,
            "POST",
            &format!("/api/v1/jobs/{single}/trigger"),
            "{}",
        );
        assert_eq!(code, 201, "trigger: {answer}");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(500));

    let ids: Vec<i64> = (0..chains)
        .map(|c| {
            let keys: Vec<String> = (0..length).map(|k| format!("n{k}")).collect();
            let nodes: Vec<String> = keys
                .iter()
                .enumerate()
                .map(|(k, key)| format!(r#"{{"key": "{key}", "job_id": {}}}"#, c * length + k + 1))
                .collect();
            let edges: Vec<String> = keys
                .windows(2)
                .map(|w| format!(r#"{{"from": "{}", "to": "{}"}}"#, w[0], w[1]))
                .collect();
            create_workflow(
                &base,
                &token,
                &format!("chain-{c}"),
                &format!("[{}]", nodes.join(",")),
                &format!("[{}]", edges.join(",")),
            )
        })
        .collect();
    let cpu_before = admin_cpu_ms(&admin);
    let triggered = now_ms();
    // All at once: one thread (one curl) per workflow.
    let threads: Vec<_> = ids
        .iter()
        .map(|&id| {
            let (base, token) = (base.clone(), token.clone());
            std::thread::spawn(move || {
                let (code, answer) = api(
                    &base,
                    &token,
                    "POST",
                    &format!("/api/v1/workflows/{id}/trigger"),
                    "{}",
                );
                assert_eq!(code, 201, "trigger workflow {id}: {answer}");
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let last_end = wait_workflows(&bench, Duration::from_secs(300));
    let cpu = admin_cpu_ms(&admin) - cpu_before;
    let load_end = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    std::thread::sleep(Duration::from_millis(200));
    let stamp = read_stamps(&stamps);

    // The floor's runs.
    #[derive(QueryableByName)]
    struct Single {
        #[diesel(sql_type = BigInt)]
        id: i64,
        #[diesel(sql_type = BigInt)]
        created_ms: i64,
        #[diesel(sql_type = diesel::sql_types::Nullable<BigInt>)]
        started_ms: Option<i64>,
    }
    let singles: Vec<Single> = diesel::sql_query(format!(
        "SELECT id, created_ms, started_ms FROM job_run WHERE job_id = {single}"
    ))
    .load(&mut bench.conn())
    .unwrap();
    let floor: Vec<i64> = singles
        .iter()
        .filter_map(|r| stamp.get(&r.id).map(|s| s - r.created_ms * 1000))
        .collect();
    let floor_agent: Vec<i64> = singles
        .iter()
        .filter_map(|r| r.started_ms.map(|s| (s - r.created_ms) * 1000))
        .collect();

    let rows = node_runs(&bench);
    let by_node: std::collections::HashMap<(i64, usize), &NodeRun> = rows
        .iter()
        .map(|r| ((r.wf_run, r.node_key[1..].parse().unwrap()), r))
        .collect();
    let (mut step, mut step_agent, mut callback, mut end_to_end, mut entry) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut to_sent, mut sent_to_spawn) = (Vec::new(), Vec::new());
    let mut missing = 0;
    for r in &rows {
        let k: usize = r.node_key[1..].parse().unwrap();
        let Some(&start) = stamp.get(&r.run_id) else {
            missing += 1;
            continue;
        };
        if k == 0 {
            entry.push(start - r.created * 1000);
            continue;
        }
        let up = by_node[&(r.wf_run, k - 1)];
        let stored = up.node_finished.unwrap();
        step.push(start - stored * 1000);
        if let Some(s) = r.started {
            step_agent.push((s - stored) * 1000);
        }
        if let (Some(t), Some(s)) = (r.triggered, r.started) {
            to_sent.push((t - stored) * 1000);
            sent_to_spawn.push((s - t) * 1000);
        }
        if let Some(f) = up.finished {
            callback.push((stored - f) * 1000);
            end_to_end.push(start - f * 1000);
        }
    }
    let not_succeeded = rows.iter().filter(|r| r.status != "succeeded").count();
    let wf_ok = bench.scalar("SELECT COUNT(*) AS n FROM workflow_run WHERE status = 'succeeded'");
    println!(
        "workflow steps on {}: {chains} chains of {length} nodes triggered at once, jobs sleeping 0 to {sleep_ms} ms after their stamp; {wf_ok}/{chains} workflow runs succeeded, {} node runs ({not_succeeded} not succeeded, {missing} without a stamp); all ended {} ms after the trigger; admin CPU {:.1} s",
        backend(mysql),
        rows.len(),
        last_end - triggered,
        cpu as f64 / 1000.0
    );
    println!(
        "load average at start {}, at end {}",
        load.trim(),
        load_end.trim()
    );
    println!(
        "{}",
        summary(
            "step: downstream process start − upstream end stored by the admin",
            step.clone()
        )
    );
    println!(
        "{}",
        summary(
            "  the same, by the agent's spawn time (ms clock)",
            step_agent
        )
    );
    println!(
        "{}",
        summary("    of which end stored → run taken for dispatch", to_sent)
    );
    println!(
        "{}",
        summary("    and taken for dispatch → agent spawn", sent_to_spawn)
    );
    println!(
        "{}",
        summary(
            "  upstream process end (agent) → end stored by the admin (the callback)",
            callback
        )
    );
    println!(
        "{}",
        summary(
            "  upstream process end → downstream process start",
            end_to_end
        )
    );
    println!(
        "{}",
        summary(
            "entry nodes: process start − workflow trigger stored",
            entry
        )
    );
    println!(
        "{}",
        summary(
            "floor: single job, process start − run created by the trigger",
            floor.clone()
        )
    );
    println!(
        "{}",
        summary(
            "  the same, by the agent's spawn time (ms clock)",
            floor_agent
        )
    );
    let (mut step, mut floor) = (step, floor);
    step.sort_unstable();
    floor.sort_unstable();
    println!(
        "ratio step/floor: p50 {:.1}, p99 {:.1}",
        percentile(&step, 0.5) as f64 / percentile(&floor, 0.5).max(1) as f64,
        percentile(&step, 0.99) as f64 / percentile(&floor, 0.99).max(1) as f64
    );
    println!("{}", cpu_report(&admin, &agents));
}

fn fan_out(mysql: bool, fan: usize) {
    assert!(fan >= 3, "--fan takes at least 3 nodes");
    let bench = Bench::new(mysql);
    let stamps = bench._dir.path().join("stamps");
    std::fs::create_dir(&stamps).unwrap();
    bench.jobs_running(fan, "NULL, NULL, NULL", &stamp_command(&stamps, 0));
    let (admin, base) = bench.admin();
    let agents = bench.agents(&base, 4, None);
    let token = login(&base);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let key = |i: usize| match i {
        0 => "entry".to_owned(),
        i if i == fan - 1 => "join".to_owned(),
        i => format!("p{i}"),
    };
    let nodes: Vec<String> = (0..fan)
        .map(|i| format!(r#"{{"key": "{}", "job_id": {}}}"#, key(i), i + 1))
        .collect();
    let mut edges = Vec::new();
    for i in 1..fan - 1 {
        edges.push(format!(r#"{{"from": "entry", "to": "{}"}}"#, key(i)));
        edges.push(format!(r#"{{"from": "{}", "to": "join"}}"#, key(i)));
    }
    let id = create_workflow(
        &base,
        &token,
        "fan",
        &format!("[{}]", nodes.join(",")),
        &format!("[{}]", edges.join(",")),
    );
    let hwm_before = status_kb(&admin, "VmHWM:");
    let cpu_before = admin_cpu_ms(&admin);
    let sent = Instant::now();
    let (code, answer) = api(
        &base,
        &token,
        "POST",
        &format!("/api/v1/workflows/{id}/trigger"),
        "{}",
    );
    assert_eq!(code, 201, "trigger: {answer}");
    wait_workflows(&bench, Duration::from_secs(600));
    let wall = sent.elapsed();
    let cpu = admin_cpu_ms(&admin) - cpu_before;
    let hwm = status_kb(&admin, "VmHWM:");
    let rss = status_kb(&admin, "VmRSS:");
    let load_end = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    std::thread::sleep(Duration::from_millis(200));
    let stamp = read_stamps(&stamps);
    let rows = node_runs(&bench);
    let status = bench.scalar("SELECT COUNT(*) AS n FROM workflow_run WHERE status = 'succeeded'");
    let run_ms = bench.scalar("SELECT finished_ms - created_ms AS n FROM workflow_run");
    #[derive(QueryableByName)]
    struct Count {
        #[diesel(sql_type = diesel::sql_types::Text)]
        status: String,
        #[diesel(sql_type = BigInt)]
        n: i64,
    }
    let by_status: Vec<String> = diesel::sql_query(
        "SELECT status, COUNT(*) AS n FROM workflow_node GROUP BY status ORDER BY status",
    )
    .load::<Count>(&mut bench.conn())
    .unwrap()
    .into_iter()
    .map(|c| format!("{} {}", c.n, c.status))
    .collect();
    let runs_by_status: Vec<String> = diesel::sql_query(
        "SELECT status, COUNT(*) AS n FROM job_run GROUP BY status ORDER BY status",
    )
    .load::<Count>(&mut bench.conn())
    .unwrap()
    .into_iter()
    .map(|c| format!("{} {}", c.n, c.status))
    .collect();
    println!(
        "  nodes: {}; job runs: {}",
        by_status.join(", "),
        runs_by_status.join(", ")
    );
    if let Ok(dump) = std::env::var("SCHED_BENCH_DUMP") {
        std::fs::copy(bench_db_path(&bench), dump).ok();
    }
    let node = |k: &str| {
        rows.iter()
            .find(|r| r.node_key == k)
            .expect("the node has a run")
    };
    let (entry, join) = (node("entry"), node("join"));
    let middle: Vec<&NodeRun> = rows
        .iter()
        .filter(|r| r.node_key.starts_with('p'))
        .collect();
    let entry_end = entry.node_finished.unwrap();
    let last_start = middle
        .iter()
        .filter_map(|r| stamp.get(&r.run_id))
        .max()
        .copied()
        .unwrap_or(0);
    let last_stored = middle
        .iter()
        .filter_map(|r| r.node_finished)
        .max()
        .unwrap_or(0);
    let join_start = stamp.get(&join.run_id).copied().unwrap_or(0);
    println!(
        "fan-out/fan-in of {fan} nodes on {}: {} (1 = succeeded), {} node runs ({} not succeeded); wall time from the trigger request {} ms, run created → ended {run_ms} ms",
        backend(mysql),
        status,
        rows.len(),
        rows.iter().filter(|r| r.status != "succeeded").count(),
        wall.as_millis()
    );
    println!(
        "  entry end stored → last of {} parallel processes started {:.1} ms; last parallel end stored → join process start {:.1} ms",
        middle.len(),
        (last_start - entry_end * 1000) as f64 / 1000.0,
        (join_start - last_stored * 1000) as f64 / 1000.0
    );
    println!(
        "  join run created +{} ms, sent +{} ms, agent spawn +{} ms after the last parallel end stored",
        join.created - last_stored,
        bench.scalar(&format!(
            "SELECT COALESCE(triggered_ms, 0) AS n FROM job_run WHERE id = {}",
            join.run_id
        )) - last_stored,
        join.started.unwrap_or(0) - last_stored
    );
    println!(
        "  admin: VmHWM {hwm_before} kB before the trigger, {hwm} kB after (VmRSS {rss} kB); CPU {:.1} s during the run",
        cpu as f64 / 1000.0
    );
    println!(
        "load average at start {}, at end {}",
        load.trim(),
        load_end.trim()
    );
    println!("{}", cpu_report(&admin, &agents));
}
