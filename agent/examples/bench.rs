//! Agent benchmark: idle RSS (agent and spawner), RSS with 50 runs in flight, trigger →
//! process-start latency, agent CPU per run and the peak RSS a `true` run reports.
//!
//! Run: `cargo build --release -p jobfleet-agent && cargo run --release -p jobfleet-agent --example bench`
//! It starts the release agent binary on loopback (no admin needed: results stay spooled),
//! and reports figures for the README. Start latency is reported twice: as the agent measures
//! it (trigger received → `spawn` returned, i.e. the process exec'd; carried in each result as
//! `startLatencyUs`), and end to end from just before the `/run` request is sent to the job's
//! first instruction (`date +%s%N` in `sh`), which adds the HTTP round trip, the shell's start
//! and a fork of `date`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a benchmark fails by panicking"
)]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn rss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// utime + stime of `pid` in ms (the kernel counts in clock ticks, 10 ms here).
fn cpu_ms(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // The fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    // Linux reports times to user space in USER_HZ, 100 a second.
    ticks * 10.0
}

/// Results in the spool (the admin is unreachable, so they all stay).
fn spooled(dir: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_dir(dir.join("spool"))
        .unwrap()
        .filter_map(|e| std::fs::read(e.unwrap().path()).ok())
        .filter_map(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        // A spool file holds one result or, since group commit, an array of them.
        .flat_map(|v| match v {
            serde_json::Value::Array(items) => items,
            one => vec![one],
        })
        .collect()
}

fn now_ns() -> i128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i128
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

const TOKEN: &str = "bench-token-0123456789";

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    // `BENCH_AGENT=path`: another agent binary, to compare two builds in one session.
    let bin = std::env::var_os("BENCH_AGENT").map_or_else(
        || {
            let exe = std::env::current_exe().unwrap();
            exe.parent()
                .and_then(|d| d.parent())
                .unwrap()
                .join("jobfleet-agent")
        },
        std::path::PathBuf::from,
    );
    assert!(
        bin.exists(),
        "build the agent first: cargo build --release -p jobfleet-agent"
    );
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = Command::new(&bin)
        .arg("--allow-root")
        .env("JOBFLEET_AGENT_ADMINS", "http://127.0.0.1:9/")
        .env("JOBFLEET_AGENT_GROUP", "bench")
        .env("JOBFLEET_AGENT_LISTEN", format!("127.0.0.1:{port}"))
        .env("JOBFLEET_AGENT_DATA_DIR", dir.path())
        .env("JOBFLEET_AGENT_TOKEN", TOKEN)
        .env("JOBFLEET_AGENT_MAX_CONCURRENT", "200")
        .env("RUST_LOG", "error")
        .envs(
            std::env::var("BENCH_CGROUP_PARENT")
                .ok()
                .map(|p| ("JOBFLEET_AGENT_CGROUP_PARENT", p)),
        )
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::builder()
        .default_headers(
            [(
                reqwest::header::HeaderName::from_static("xxl-job-access-token"),
                reqwest::header::HeaderValue::from_static(TOKEN),
            )]
            .into_iter()
            .collect(),
        )
        .build()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while client.post(format!("{base}/beat")).send().await.is_err() {
        assert!(Instant::now() < deadline, "agent did not start");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle = rss_kb(child.id());
    // None with an agent built before the spawners, for comparison.
    let spawners: Vec<u32> = jobfleet_agent::runner::spawner::of_agent(child.id())
        .into_iter()
        .filter_map(|pid| u32::try_from(pid).ok())
        .collect();
    let spawner_idle = spawners.first().copied().map_or(0, rss_kb);

    let mut next_id = 1;
    let mut trigger = |job: i64, source: &str, limited: bool| {
        next_id += 1;
        let mut t = serde_json::json!({"jobId": job, "logId": next_id, "logDateTime": 0, "glueType": "GLUE_SHELL", "interpreter": "sh",
            "glueSource": source, "executorBlockStrategy": "SERIAL_EXECUTION", "broadcastIndex": 0, "broadcastTotal": 1});
        if limited {
            t["limits"] = serde_json::json!({"memoryMb": 256});
        }
        t
    };
    // Latency: one run at a time, each its own job; the first 300 without limits, then 300 with
    // a memory limit (their own cgroup).
    let mut latencies_ms = Vec::new();
    let mut limited_ms = Vec::new();
    for i in 0..600 {
        let limited = i >= 300;
        let body = trigger(10_000 + i, "date +%s%N", limited);
        let sent = now_ns();
        let answer: serde_json::Value = client
            .post(format!("{base}/run"))
            .json(&body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(answer["code"], 200, "{answer}");
        let run_id = body["logId"].as_i64().unwrap();
        let started_ns: i128 = loop {
            let page: serde_json::Value = client
                .post(format!("{base}/log"))
                .json(&serde_json::json!({"logId": run_id, "fromLineNum": 1, "logDateTim": 0}))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            if let Some(n) = page["content"]["logContent"]
                .as_str()
                .and_then(|c| c.trim().parse().ok())
            {
                break n;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        };
        if limited {
            &mut limited_ms
        } else {
            &mut latencies_ms
        }
        .push((started_ns - sent) as f64 / 1e6);
    }
    latencies_ms.sort_by(f64::total_cmp);
    limited_ms.sort_by(f64::total_cmp);

    // The agent's own measure: receive → process running, from the results it spooled.
    let results = spooled(dir.path());
    let series = |unlimited: bool| {
        let mut v: Vec<f64> = results
            .iter()
            .filter(|r| (r["limitsMode"] == "none") == unlimited)
            .filter_map(|r| r["startLatencyUs"].as_f64())
            .map(|us| us / 1000.0)
            .collect();
        v.sort_by(f64::total_cmp);
        v
    };
    let (internal_ms, internal_limited_ms) = (series(true), series(false));
    assert!(
        internal_ms.len() >= 290 && internal_limited_ms.len() >= 290,
        "results were spooled"
    );
    let limited_mode = results
        .iter()
        .find(|r| r["limitsMode"] != "none")
        .and_then(|r| r["limitsMode"].as_str())
        .unwrap_or_default()
        .to_owned();

    // CPU per run: 1,000 `true` runs, 100 at a time, and the agent's and its spawner's CPU time
    // (without the runs' own, which the kernel counts to the agent's children) around them.
    const BURSTS: i64 = 10;
    const PER_BURST: i64 = 100;
    let agent_cpu = || cpu_ms(child.id()) + spawners.iter().copied().map(cpu_ms).sum::<f64>();
    let cpu_before = agent_cpu();
    for burst in 0..BURSTS {
        let sends = (0..PER_BURST).map(|i| {
            let body = trigger(30_000 + burst * PER_BURST + i, "true", false);
            let (client, base) = (&client, &base);
            async move {
                let answer: serde_json::Value = client
                    .post(format!("{base}/run"))
                    .json(&body)
                    .send()
                    .await
                    .unwrap()
                    .json()
                    .await
                    .unwrap();
                assert_eq!(answer["code"], 200, "{answer}");
            }
        });
        futures_util::future::join_all(sends).await;
    }
    let want = results.len() + (BURSTS * PER_BURST) as usize;
    let deadline = Instant::now() + Duration::from_secs(60);
    let after_bursts = loop {
        let now = spooled(dir.path());
        if now.len() >= want {
            break now;
        }
        assert!(Instant::now() < deadline, "{} of {want} results", now.len());
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let cpu_per_run = (agent_cpu() - cpu_before) / (BURSTS * PER_BURST) as f64;
    let before: std::collections::HashSet<i64> =
        results.iter().filter_map(|r| r["logId"].as_i64()).collect();
    let mut true_rss: Vec<f64> = after_bursts
        .iter()
        .filter(|r| r["logId"].as_i64().is_some_and(|id| !before.contains(&id)))
        .filter_map(|r| r["usage"]["maxRssKb"].as_f64())
        .collect();
    true_rss.sort_by(f64::total_cmp);

    // 50 runs in flight.
    for i in 0..50 {
        let body = trigger(20_000 + i, "sleep 5", false);
        let answer: serde_json::Value = client
            .post(format!("{base}/run"))
            .json(&body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(answer["code"], 200, "{answer}");
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let busy = rss_kb(child.id());
    child.kill().unwrap();
    child.wait().unwrap();

    println!(
        "agent idle RSS:                 {:.1} MB",
        idle as f64 / 1024.0
    );
    println!(
        "spawner idle RSS:               {:.1} MB each, {} of them",
        spawner_idle as f64 / 1024.0,
        spawners.len()
    );
    println!(
        "agent RSS with 50 runs running: {:.1} MB",
        busy as f64 / 1024.0
    );
    println!("agent + spawner CPU per run, 1,000 `true` runs 100 at a time: {cpu_per_run:.3} ms");
    if !true_rss.is_empty() {
        println!(
            "max_rss_kb a `true` run reports (n={}): median {} kB, max {} kB",
            true_rss.len(),
            percentile(&true_rss, 0.5),
            true_rss[true_rss.len() - 1]
        );
    }
    let line = |what: &str, v: &[f64]| {
        println!(
            "{what} (n={}): median {:.2} ms, p99 {:.2} ms, max {:.2} ms",
            v.len(),
            percentile(v, 0.5),
            percentile(v, 0.99),
            v[v.len() - 1]
        );
    };
    line(
        "trigger received -> process running, in the agent, no limits",
        &internal_ms,
    );
    line(
        &format!(
            "trigger received -> process running, in the agent, 256 MB limit ({limited_mode})"
        ),
        &internal_limited_ms,
    );
    line(
        "request sent -> job's first instruction, end to end, no limits",
        &latencies_ms,
    );
    line(
        "request sent -> job's first instruction, end to end, 256 MB limit",
        &limited_ms,
    );
}
