//! Scheduler benchmark: a real `jobfleet-admin` process and real `jobfleet-agent` processes on
//! loopback, jobs running `true`; figures read back from the run table.
//!
//! ```sh
//! cargo build --release --workspace --bins --features jobfleet-admin/mysql
//! cargo run --release -p jobfleet-admin --features mysql --example sched_bench -- lateness [--mysql] [--jobs 1000]
//! cargo run --release -p jobfleet-admin --features mysql --example sched_bench -- burst [--mysql] [--jobs 50000]
//! cargo run --release -p jobfleet-admin --features mysql --example sched_bench -- rss [--jobs 100000]
//! cargo run --release -p jobfleet-admin --features mysql --example sched_bench -- spawn
//! cargo run --release -p jobfleet-admin --features mysql --example sched_bench -- modes [--mysql] [--jobs N]
//! ```
//! `lateness`: N (1,000) fixed-rate jobs of 1 s spread over the second (N fires/s) on 4 agents
//! for 20 s; agent process start − scheduled time, p50/p99. `burst`: N one-shot jobs due at the
//! same instant; time until every run is sent and every result is back, lost and duplicated.
//! `rss`: the admin's resident memory with N enabled jobs.
//! `spawn`: the machine's ceiling, `sh -c true` processes per second with nothing else running.
//! `modes`: `lateness` at 100 and 500 fires/s with the agents in `push` mode and in `connect`
//! mode (issue 14), each over a fresh admin and database, as one table (`--jobs N`: at N only).
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
use diesel::sql_types::BigInt;
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
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", proc.0.id())).unwrap_or_default();
    // The fields after the command name, which may hold spaces, start after its closing ')'.
    let fields: Vec<i64> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .unwrap_or_default()
        .split_whitespace()
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    // utime, stime, cutime, cstime are fields 14-17 of stat(5); ticks are 10 ms here.
    let tick = |i: usize| fields.get(i - 3).copied().unwrap_or(0) * 10;
    (tick(14) + tick(15), tick(16) + tick(17))
}

fn cpu_report(admin: &Proc, agents: &[Proc]) -> String {
    let (admin_own, _) = cpu_ms(admin);
    let (mut agents_own, mut jobs) = (0, 0);
    for agent in agents {
        let (own, children) = cpu_ms(agent);
        agents_own += own;
        jobs += children;
    }
    format!(
        "CPU: admin {:.1} s, agents {:.1} s, their jobs {:.1} s",
        admin_own as f64 / 1000.0,
        agents_own as f64 / 1000.0,
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
        let bench = Self {
            url,
            url_text,
            _dir: dir,
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
        let child = Command::new(bin_dir().join("jobfleet-admin"))
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
            .stdout(Stdio::null())
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
            let data = self._dir.path().join(format!("agent-{i}"));
            let mut command = Command::new(bin_dir().join("jobfleet-agent"));
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
        #[derive(QueryableByName)]
        struct N {
            #[diesel(sql_type = BigInt)]
            n: i64,
        }
        diesel::sql_query(sql)
            .get_result::<N>(&mut self.conn())
            .unwrap()
            .n
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
                        "(1, 'job-{i}', '', 'none', {schedule}, 'UTC', 'shell', 'true', '', 'round_robin', 0, 0, 0, 10, 'do_nothing', 'allow', 'serial', 0, 0, 0, {now}, {now})"
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
}

/// `per_second` fixed-rate jobs of 1 s spread over the second on 4 agents (in `mode`, or their
/// default) for 20 s, over a fresh database and admin; the first 3 s are not counted.
fn measure_lateness(mysql: bool, per_second: usize, mode: Option<Mode>) -> Lateness {
    let bench = Bench::new(mysql);
    bench.jobs(per_second, "NULL, 1, NULL");
    let (admin, base) = bench.admin();
    let agents = bench.agents(&base, 4, mode);
    let start = now_ms() + 3_000;
    // Spread the jobs evenly over the second: `per_second` fires every second.
    let step = 1000 / per_second.max(1);
    bench
        .conn()
        .batch_execute(&format!(
            "UPDATE job SET enabled = 1, schedule_type = 'fixed_rate', next_fire_ms = {start} + (id * {step}) % 1000"
        ))
        .unwrap();
    let seconds = 20;
    std::thread::sleep(Duration::from_millis(3_000 + seconds * 1000));
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
    // The first 3 s warm up (connections, agent caches).
    let from = start + 3_000;
    let to = start + (seconds as i64) * 1000;
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
    started.sort_unstable();
    sent.sort_unstable();
    if let Ok(dump) = std::env::var("SCHED_BENCH_DUMP") {
        // `modes` keeps one file per measurement.
        let dump = match mode {
            Some(mode) => format!("{dump}.{}.{per_second}", mode.as_str()),
            None => dump,
        };
        std::fs::copy(bench_db_path(&bench), dump).ok();
    }
    Lateness {
        fires,
        failed,
        sent,
        started,
        seconds: (to - from) / 1000,
        cpu: cpu_report(&admin, &agents),
    }
}

fn backend(mysql: bool) -> &'static str {
    if mysql { "MariaDB" } else { "SQLite" }
}

fn lateness(mysql: bool, per_second: usize) {
    let l = measure_lateness(mysql, per_second, None);
    println!(
        "lateness at {per_second}/s on {}: {} fires in {} s ({} not succeeded); taken for dispatch p50 {} ms p99 {} ms; agent process start p50 {} ms p99 {} ms, max {} ms",
        backend(mysql),
        l.fires,
        l.seconds,
        l.failed,
        percentile(&l.sent, 0.5),
        percentile(&l.sent, 0.99),
        percentile(&l.started, 0.5),
        percentile(&l.started, 0.99),
        l.started.last().copied().unwrap_or(-1)
    );
    println!("{}", l.cpu);
}

/// `lateness` at 100 and 500 fires/s (or at `rate` only), agents in `push` then in `connect`
/// mode, as one table (agent process start − scheduled time).
fn modes(mysql: bool, rate: Option<usize>) {
    let rates = rate.map_or_else(|| vec![100, 500], |r| vec![r]);
    let mut rows = Vec::new();
    for per_second in rates {
        for mode in [Mode::Push, Mode::Connect] {
            let l = measure_lateness(mysql, per_second, Some(mode));
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

fn burst(mysql: bool, jobs: usize) {
    let bench = Bench::new(mysql);
    bench.jobs(jobs, "NULL, NULL, 0");
    let (admin, base) = bench.admin();
    let agents = bench.agents(&base, 4, None);
    let due = now_ms() + 2_000;
    bench
        .conn()
        .batch_execute(&format!(
            "UPDATE job SET enabled = 1, schedule_type = 'once', once_at_ms = {due}, next_fire_ms = {due}"
        ))
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(600);
    let (mut all_sent_ms, mut done_ms) = (None, None);
    while Instant::now() < deadline && done_ms.is_none() {
        std::thread::sleep(Duration::from_millis(200));
        let unsent = bench.scalar("SELECT COUNT(*) AS n FROM job WHERE next_fire_ms IS NOT NULL")
            + bench.scalar("SELECT COUNT(*) AS n FROM job_run WHERE status = 'pending'");
        let finished = bench
            .scalar("SELECT COUNT(*) AS n FROM job_run WHERE status NOT IN ('pending', 'running')");
        if all_sent_ms.is_none() && unsent == 0 && now_ms() > due {
            all_sent_ms = Some(now_ms());
        }
        if finished >= jobs as i64 {
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
    let status = std::fs::read_to_string(format!("/proc/{}/status", admin.0.id())).unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .map(|l| l.split_whitespace().nth(1).unwrap_or("?").to_owned())
            .unwrap_or_default()
    };
    println!(
        "admin with {jobs} enabled jobs on {}: VmRSS {} kB, VmHWM {} kB",
        if mysql { "MariaDB" } else { "SQLite" },
        field("VmRSS:"),
        field("VmHWM:")
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

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mysql = args.iter().any(|a| a == "--mysql");
    let jobs = args
        .iter()
        .position(|a| a == "--jobs")
        .and_then(|i| args.get(i + 1))
        .map(|n| n.parse::<usize>().expect("--jobs takes a number"));
    match args.first().map(String::as_str) {
        Some("lateness") => lateness(mysql, jobs.unwrap_or(1000)),
        Some("burst") => burst(mysql, jobs.unwrap_or(50_000)),
        Some("rss") => rss(mysql, jobs.unwrap_or(100_000)),
        Some("spawn") => spawn_ceiling(),
        Some("modes") => modes(mysql, jobs),
        _ => {
            eprintln!("usage: sched_bench lateness|burst|rss|spawn|modes [--mysql] [--jobs N]");
            std::process::exit(2);
        }
    }
}
