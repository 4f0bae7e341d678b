//! The agent's host (issue 12, items 1, 6, 7 and the run's own peak memory): no agent without
//! a sane token, bounded logs that still page, runs whose escapees die with them.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::{agent_binary, free_port, pid_alive, proc_status_kb, wait_for, with_agent};

const RUN_WITHIN: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_without_a_sane_token_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    for token in [None, Some(""), Some("   "), Some("short-token")] {
        let mut command = std::process::Command::new(agent_binary());
        command
            .arg("--allow-root")
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("JOBFLEET_AGENT_ADMINS", "http://127.0.0.1:9/")
            .env("JOBFLEET_AGENT_GROUP", "tokenless")
            .env(
                "JOBFLEET_AGENT_LISTEN",
                format!("127.0.0.1:{}", free_port()),
            )
            .env("JOBFLEET_AGENT_DATA_DIR", dir.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
        if let Some(t) = token {
            command.env("JOBFLEET_AGENT_TOKEN", t);
        }
        let mut child = command.spawn().unwrap();
        // A tokenless agent used to start and serve /run to anyone: it must exit by itself.
        let exited = wait_for(
            Duration::from_secs(10),
            &format!("the agent with token {token:?} to exit"),
            || {
                let status = child.try_wait().unwrap();
                async move { status }
            },
        )
        .await;
        let mut stderr = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
        assert_eq!(exited.code(), Some(2), "{token:?}: {stderr}");
        assert!(
            stderr.contains("`token`") && stderr.contains("JOBFLEET_AGENT_TOKEN"),
            "{token:?}: {stderr}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_50_mb_log_is_capped_and_a_50_mb_line_pages() {
    let (app, _dir, agent, g) = with_agent("host-logs", &[]).await;
    // 5,000 lines of 9,999 bytes: 50 MB, each line numbered at its start.
    let many = app
        .job_from(g, json!({"name": "many", "handler": {"type": "shell", "command":
            "awk 'BEGIN { s = sprintf(\"%9990s\", \"\"); for (i = 1; i <= 5000; i++) printf \"%08d%s\\n\", i, s }'"}}))
        .await;
    let id = app.trigger(many, json!({})).await["id"].as_i64().unwrap();
    let done = app.finished_run(id, RUN_WITHIN).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    assert!(
        done["handle_msg"]
            .as_str()
            .is_some_and(|m| m.contains("log capped")),
        "{done}"
    );
    let log = app.full_log(id).await;
    assert!(log.len() <= (16 << 20) + 4096, "{} bytes kept", log.len());
    assert!(log.starts_with("00000001 "), "the head is kept");
    assert!(
        log.lines().last().unwrap().starts_with("00005000 "),
        "the tail is kept"
    );
    let cut = 49_995_000 - (16 << 20);
    assert!(
        log.contains(&format!("{cut} bytes cut here")),
        "the cut is said: {:?}",
        log.lines()
            .filter(|l| l.starts_with("[jobfleet-agent]"))
            .collect::<Vec<_>>()
    );

    // One 50 MB line, no newline at all: pages of slices, never an empty finished log.
    let line = app
        .job_from(
            g,
            json!({"name": "one-line", "handler": {"type": "shell", "command":
            "head -c 50000000 /dev/zero | tr '\\0' 'y'"}}),
        )
        .await;
    let id = app.trigger(line, json!({})).await["id"].as_i64().unwrap();
    assert_eq!(
        app.finished_run(id, RUN_WITHIN).await["status"],
        "succeeded"
    );
    let mut pages = 0;
    let mut from = 1;
    let mut joined = String::new();
    loop {
        let page = app
            .get(
                &format!("/api/v1/runs/{id}/log?from_line={from}"),
                &app.admin,
            )
            .await;
        assert_eq!(page.status, StatusCode::OK, "{}", page.body);
        let content = page.body["content"].as_str().unwrap();
        assert!(content.len() <= 1 << 20, "a page holds at most 1 MiB");
        let to = page.body["to_line"].as_i64().unwrap();
        assert!(to >= from, "every page makes progress (page {pages})");
        joined.push_str(content);
        pages += 1;
        if page.body["is_end"].as_bool().unwrap() {
            break;
        }
        from = to + 1;
    }
    let kept: usize = joined
        .lines()
        .filter(|l| !l.starts_with("[jobfleet-agent]"))
        .map(|l| l.bytes().filter(|b| *b == b'y').count())
        .sum();
    assert_eq!(
        kept,
        16 << 20,
        "head and tail of the line, in {pages} pages"
    );
    assert!(joined.contains("bytes cut here"), "the cut is said");
    // Paging read one slice at a time: the agent never held the line.
    let peak_kb = proc_status_kb(agent.pid(), "VmHWM:");
    assert!(peak_kb < 48 * 1024, "agent peak RSS {peak_kb} kB");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logging_stops_when_the_disk_is_nearly_full_and_the_run_goes_on() {
    let (app, _dir, _agent, g) = with_agent(
        "host-disk",
        &[("JOBFLEET_AGENT_LOG_MIN_FREE_MB", "100000000")],
    )
    .await;
    let job = app
        .job_from(g, json!({"name": "chatty", "handler": {"type": "shell", "command": "echo hello; echo done > /dev/null"}}))
        .await;
    let id = app.trigger(job, json!({})).await["id"].as_i64().unwrap();
    let done = app.finished_run(id, RUN_WITHIN).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    assert!(
        done["handle_msg"]
            .as_str()
            .is_some_and(|m| m.contains("logging stopped")),
        "{done}"
    );
    let log = app.full_log(id).await;
    assert!(
        log.contains("logging stopped") && !log.contains("hello"),
        "{log}"
    );
}

/// Waits for the pid a job wrote into `file`.
async fn pid_from(file: &std::path::Path) -> i64 {
    wait_for(Duration::from_secs(20), "the escapee's pid", || async {
        std::fs::read_to_string(file)
            .ok()
            .and_then(|s| s.trim().parse().ok())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_setsid_escapee_dies_with_its_run() {
    let (app, dir, _agent, g) = with_agent("host-contain", &[]).await;
    let escape = |file: &std::path::Path, then: &str| {
        format!("setsid sleep 41 & echo $! > {}; {then}", file.display())
    };

    // Timeout.
    let file = dir.path().join("timeout.pid");
    let job = app
        .job_from(
            g,
            json!({"name": "escape-timeout", "timeout_s": 1,
            "handler": {"type": "shell", "command": escape(&file, "sleep 300")}}),
        )
        .await;
    let id = app.trigger(job, json!({})).await["id"].as_i64().unwrap();
    let pid = pid_from(&file).await;
    assert_eq!(
        app.finished_run(id, RUN_WITHIN).await["status"],
        "timed_out"
    );
    wait_for(
        Duration::from_secs(5),
        "the escapee to die after the timeout",
        || async { (!pid_alive(pid)).then_some(()) },
    )
    .await;

    // Kill.
    let file = dir.path().join("kill.pid");
    let job = app
        .job_from(
            g,
            json!({"name": "escape-kill",
            "handler": {"type": "shell", "command": escape(&file, "sleep 300")}}),
        )
        .await;
    let id = app.trigger(job, json!({})).await["id"].as_i64().unwrap();
    let pid = pid_from(&file).await;
    let killed = app.kill_run(id).await;
    assert_eq!(killed.status, StatusCode::ACCEPTED, "{}", killed.body);
    assert_eq!(app.finished_run(id, RUN_WITHIN).await["status"], "killed");
    wait_for(
        Duration::from_secs(5),
        "the escapee to die after the kill",
        || async { (!pid_alive(pid)).then_some(()) },
    )
    .await;

    // A run that ends normally takes its leftovers with it, and says so in its log.
    let file = dir.path().join("done.pid");
    let job = app
        .job_from(
            g,
            json!({"name": "escape-done",
            "handler": {"type": "shell", "command": escape(&file, "echo leaving")}}),
        )
        .await;
    let id = app.trigger(job, json!({})).await["id"].as_i64().unwrap();
    let pid = pid_from(&file).await;
    assert_eq!(
        app.finished_run(id, RUN_WITHIN).await["status"],
        "succeeded"
    );
    wait_for(
        Duration::from_secs(5),
        "the leftover to die after the run",
        || async { (!pid_alive(pid)).then_some(()) },
    )
    .await;
    assert!(
        app.full_log(id)
            .await
            .contains("left running after it finished"),
        "the log says leftovers were ended"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_rss_of_a_run_without_limits_is_the_runs_own() {
    let (app, _dir, agent, g) = with_agent("host-rss", &[]).await;
    let run_usage = |body: Value| {
        let app = &app;
        async move {
            let job = app.job_from(g, body).await;
            let id = app.trigger(job, json!({})).await["id"].as_i64().unwrap();
            let done = app.finished_run(id, RUN_WITHIN).await;
            assert_eq!(done["status"], "succeeded", "{done}");
            done["usage"]["max_rss_kb"].as_i64().unwrap()
        }
    };
    // dd fills a 100 MiB buffer: about 102,400 kB.
    let big = run_usage(json!({"name": "big", "handler": {"type": "shell",
        "command": "dd if=/dev/zero of=/dev/null bs=100M count=1 2>/dev/null"}}))
    .await;
    assert!((95 * 1024..=140 * 1024).contains(&big), "{big} kB");
    let small =
        run_usage(json!({"name": "small", "handler": {"type": "shell", "command": "true"}})).await;
    let agent_peak = proc_status_kb(agent.pid(), "VmHWM:") as i64;
    assert!(
        small * 2 < agent_peak,
        "a tiny run reports {small} kB; the agent's own peak is {agent_peak} kB"
    );
}
