//! The real agent binary: config errors, the root refusal, and bad input at every endpoint —
//! each answered in XXL-Job's envelope, with no process spawned and nothing written outside
//! the agent's own folders.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests fail by panicking"
)]

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const TOKEN: &str = "agent-test-token";

/// The agent binary with a clean environment and the test token.
fn agent() -> Command {
    agent_under(&[])
}

/// `agent()` started through `wrapper` (a program and its arguments, the agent's path after).
fn agent_under(wrapper: &[&str]) -> Command {
    let binary = env!("CARGO_BIN_EXE_jobfleet-agent");
    let mut cmd = match wrapper.split_first() {
        Some((program, args)) => {
            let mut cmd = Command::new(program);
            cmd.args(args).arg(binary);
            cmd
        }
        None => Command::new(binary),
    };
    cmd.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("JOBFLEET_AGENT_TOKEN", TOKEN)
        .env("RUST_LOG", "warn");
    cmd
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Running {
    child: Child,
    base: String,
    dir: tempfile::TempDir,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn start() -> Running {
    start_with(&[]).await
}

async fn start_with(env: &[(&str, &str)]) -> Running {
    let dir = tempfile::tempdir().unwrap();
    start_in(dir, free_port(), env).await
}

/// Starts an agent on `port` with its data in `dir` (again, after a kill, say).
async fn start_in(dir: tempfile::TempDir, port: u16, env: &[(&str, &str)]) -> Running {
    start_under(&[], dir, port, env).await
}

/// `start_in` through `wrapper` (see `agent_under`).
async fn start_under(
    wrapper: &[&str],
    dir: tempfile::TempDir,
    port: u16,
    env: &[(&str, &str)],
) -> Running {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let child = agent_under(wrapper)
        .arg("--allow-root")
        .env(
            "JOBFLEET_AGENT_ADMINS",
            format!("http://127.0.0.1:{}", free_port()),
        )
        .env("JOBFLEET_AGENT_GROUP", "endpoints")
        .env("JOBFLEET_AGENT_LISTEN", format!("127.0.0.1:{port}"))
        .env("JOBFLEET_AGENT_TOKEN", TOKEN)
        .env("JOBFLEET_AGENT_DATA_DIR", dir.path().join("data"))
        .envs(env.iter().copied())
        .current_dir(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let running = Running {
        child,
        base: format!("http://127.0.0.1:{port}"),
        dir,
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while post(&running, "beat", Some(TOKEN), "").await.is_none() {
        assert!(Instant::now() < deadline, "the agent did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    running
}

async fn post(agent: &Running, path: &str, token: Option<&str>, body: &str) -> Option<Value> {
    let mut request = reqwest::Client::new()
        .post(format!("{}/{path}", agent.base))
        .header("content-type", "application/json")
        .body(body.to_owned());
    if let Some(t) = token {
        request = request.header("XXL-JOB-ACCESS-TOKEN", t);
    }
    let response = request.send().await.ok()?;
    assert_eq!(
        response.status(),
        200,
        "XXL-Job peers expect HTTP 200 with the outcome in `code`"
    );
    Some(response.json().await.unwrap())
}

fn epoch_ms() -> i64 {
    i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

fn trigger(overrides: Value) -> String {
    let mut t = json!({"jobId": 1, "logId": 7, "logDateTime": 1_732_270_000_000_i64, "glueType": "GLUE_SHELL",
        "glueSource": "touch /tmp/jobfleet-should-not-exist-$JOBFLEET_RUN_ID", "executorTimeout": 0,
        "executorBlockStrategy": "SERIAL_EXECUTION", "broadcastIndex": 0, "broadcastTotal": 1});
    for (k, v) in overrides.as_object().unwrap() {
        t[k] = v.clone();
    }
    t.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_an_envelope_error_and_spawns_nothing() {
    let agent = start().await;
    let cases: Vec<(&str, Option<&str>, String, &str)> = vec![
        ("run", None, trigger(json!({})), "access token is wrong"),
        (
            "run",
            Some("wrong"),
            trigger(json!({})),
            "access token is wrong",
        ),
        ("run", Some(TOKEN), "{not json".into(), "malformed"),
        ("run", Some(TOKEN), r#"{"logId": 1}"#.into(), "malformed"),
        (
            "run",
            Some(TOKEN),
            trigger(json!({"glueType": "GLUE_COBOL"})),
            "unknown glueType",
        ),
        (
            "run",
            Some(TOKEN),
            trigger(json!({"glueType": "GLUE_GROOVY"})),
            "Java",
        ),
        (
            "run",
            Some(TOKEN),
            trigger(json!({"glueType": "BEAN", "executorHandler": "demoJobHandler"})),
            "no handler named `demoJobHandler`",
        ),
        (
            "run",
            Some(TOKEN),
            trigger(json!({"interpreter": "ruby"})),
            "unknown interpreter",
        ),
        (
            "run",
            Some(TOKEN),
            trigger(json!({"limits": {"memoryMb": -5}})),
            "limits.memoryMb",
        ),
        (
            "run",
            Some(TOKEN),
            trigger(json!({"limits": {"cpu": -1.0}})),
            "limits.cpu",
        ),
        (
            "run",
            Some(TOKEN),
            trigger(json!({"limits": {"pids": 0}})),
            "limits.pids",
        ),
        (
            "run",
            Some(TOKEN),
            trigger(json!({"executorTimeout": 99_999_999})),
            "executorTimeout",
        ),
        (
            "run",
            Some(TOKEN),
            trigger(json!({"executorTimeout": -1})),
            "executorTimeout",
        ),
        (
            "run",
            Some(TOKEN),
            trigger(json!({"resultLingerMs": 10_001})),
            "resultLingerMs must be between 0 and 10000",
        ),
        (
            "run",
            Some(TOKEN),
            trigger(json!({"resultLingerMs": -5})),
            "resultLingerMs must be between 0 and 10000 (got -5)",
        ),
        (
            "run",
            Some(TOKEN),
            trigger(json!({"startInMs": 10_001})),
            "startInMs must be between 0 and 10000",
        ),
        (
            "run",
            Some(TOKEN),
            trigger(json!({"startInMs": -1})),
            "startInMs must be between 0 and 10000 (got -1)",
        ),
        (
            "run",
            Some(TOKEN),
            trigger(json!({"logId": -3})),
            "invalid logId",
        ),
        (
            "run",
            Some(TOKEN),
            trigger(json!({"broadcastIndex": 5, "broadcastTotal": 2})),
            "invalid shard",
        ),
        (
            "run",
            Some(TOKEN),
            trigger(json!({"executorBlockStrategy": "SOMETIMES"})),
            "executorBlockStrategy",
        ),
        (
            "log",
            Some(TOKEN),
            r#"{"logId": "../../etc/passwd", "fromLineNum": 1, "logDateTim": 0}"#.into(),
            "malformed",
        ),
        (
            "log",
            Some(TOKEN),
            r#"{"logId": 999, "fromLineNum": 1, "logDateTim": 0}"#.into(),
            "no log for run 999",
        ),
        (
            "log",
            Some(TOKEN),
            r#"{"logId": 999, "fromLineNum": 0, "logDateTim": 0}"#.into(),
            "fromLineNum",
        ),
        (
            "kill",
            Some("wrong"),
            r#"{"jobId": 1}"#.into(),
            "access token is wrong",
        ),
        ("idleBeat", Some(TOKEN), r#"{"job": 1}"#.into(), "malformed"),
        ("nowhere", Some(TOKEN), "{}".into(), "unknown path"),
        (
            "runBatch",
            Some("wrong"),
            format!("[{}]", trigger(json!({}))),
            "access token is wrong",
        ),
        ("runBatch", Some(TOKEN), trigger(json!({})), "malformed"),
        (
            "runBatch",
            Some(TOKEN),
            format!("[{}", trigger(json!({}))),
            "malformed",
        ),
        (
            "runBatch",
            Some(TOKEN),
            format!(
                "[{}]",
                trigger(json!({"executorParams": "p".repeat(3 << 20)}))
            ),
            "larger than",
        ),
        (
            "run",
            Some(TOKEN),
            trigger(json!({"runAs": "nobody"})),
            "runAs `nobody` is not allowed",
        ),
        // Over the body cap: the envelope, not a plain-text 413.
        (
            "run",
            Some(TOKEN),
            trigger(json!({"executorParams": "p".repeat(3 << 20)})),
            "larger than",
        ),
        (
            "log",
            Some(TOKEN),
            format!(
                r#"{{"logId": 1, "fromLineNum": 1, "logDateTim": 0, "x": "{}"}}"#,
                "x".repeat(3 << 20)
            ),
            "larger than",
        ),
    ];
    for (path, token, body, expected) in cases {
        let answer = post(&agent, path, token, &body).await.unwrap();
        assert_eq!(answer["code"], 500, "{path} {body}: {answer}");
        let msg = answer["msg"].as_str().unwrap_or_default();
        assert!(
            msg.contains(expected),
            "{path} {body}: expected `{expected}` in `{msg}`"
        );
    }
    assert!(
        !std::path::Path::new("/tmp/jobfleet-should-not-exist-7").exists(),
        "no process ran"
    );
    let scripts = std::fs::read_dir(agent.dir.path().join("data/scripts"))
        .unwrap()
        .count();
    let logs = std::fs::read_dir(agent.dir.path().join("data/logs"))
        .unwrap()
        .count();
    assert_eq!(
        (scripts, logs),
        (0, 0),
        "nothing was written for rejected triggers"
    );

    // The same trigger, well-formed, runs; a line past the end of its log is an empty page.
    let page = run_to_its_end(&agent, 1, 8, "echo one; echo two").await;
    assert_eq!(page["content"]["logContent"], "one\ntwo\n");
    let past = post(
        &agent,
        "log",
        Some(TOKEN),
        r#"{"logId": 8, "fromLineNum": 100, "logDateTim": 1732270000000}"#,
    )
    .await
    .unwrap();
    assert_eq!(
        (
            past["code"].as_i64(),
            past["content"]["logContent"].as_str(),
            past["content"]["isEnd"].as_bool()
        ),
        (Some(200), Some(""), Some(true))
    );
    // A run that writes nothing leaves no file, and its log reads as empty, not missing.
    let page = run_to_its_end(&agent, 2, 9, "true").await;
    assert_eq!(
        (
            page["code"].as_i64(),
            page["content"]["logContent"].as_str()
        ),
        (Some(200), Some("")),
        "{page}"
    );
    let day_logs: Vec<String> = std::fs::read_dir(agent.dir.path().join("data/logs"))
        .unwrap()
        .flat_map(|day| std::fs::read_dir(day.unwrap().path()).unwrap())
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(day_logs, vec!["8.log"], "the silent run made no file");
    let idle = post(&agent, "idleBeat", Some(TOKEN), r#"{"jobId": 1}"#)
        .await
        .unwrap();
    assert_eq!(idle["code"], 200);
}

/// Runs `source` as job `job_id`'s run `log_id` and reads its log's first page once the run
/// is over.
async fn run_to_its_end(agent: &Running, job_id: i64, log_id: i64, source: &str) -> Value {
    let started = post(
        agent,
        "run",
        Some(TOKEN),
        &trigger(json!({"glueSource": source, "logId": log_id, "jobId": job_id})),
    )
    .await
    .unwrap();
    assert_eq!(started["code"], 200, "{started}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let page = post(
            agent,
            "log",
            Some(TOKEN),
            &format!(r#"{{"logId": {log_id}, "fromLineNum": 1, "logDateTim": 1732270000000}}"#),
        )
        .await
        .unwrap();
        if page["content"]["isEnd"] == true {
            return page;
        }
        assert!(Instant::now() < deadline, "the run did not finish: {page}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until the agent says the job has nothing running or queued (`idleBeat`).
async fn wait_until_idle(agent: &Running, job_id: i64) {
    let body = json!({"jobId": job_id}).to_string();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let idle = post(agent, "idleBeat", Some(TOKEN), &body).await.unwrap();
        if idle["code"] == 200 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "job {job_id} stayed busy: {idle}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Sends the agent SIGTERM and waits for it to exit.
async fn stop_gracefully(agent: &mut Running) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(agent.child.id()).unwrap()),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while agent.child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the agent did not stop");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Results the agent spooled (its admin is unreachable here, so they stay), by run id.
fn spooled_statuses(agent: &Running) -> std::collections::BTreeMap<i64, String> {
    spooled_field(agent, "status")
}

/// One field (a string) of each result the agent spooled, by run id.
fn spooled_field(agent: &Running, field: &str) -> std::collections::BTreeMap<i64, String> {
    let mut out = std::collections::BTreeMap::new();
    for entry in std::fs::read_dir(agent.dir.path().join("data/spool")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "json") {
            let results: Vec<Value> =
                serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
            for r in results {
                out.insert(
                    r["logId"].as_i64().unwrap(),
                    r[field].as_str().unwrap_or_default().to_owned(),
                );
            }
        }
    }
    out
}

async fn wait_for_results(agent: &Running, n: usize) -> std::collections::BTreeMap<i64, String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let statuses = spooled_statuses(agent);
        if statuses.len() >= n {
            return statuses;
        }
        assert!(Instant::now() < deadline, "results: {statuses:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The default data folder is relative (`agent-data`) and jobs run in its scripts folder: a
/// script job must still find its script file there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_jobs_run_with_a_relative_data_folder() {
    let agent = start_with(&[("JOBFLEET_AGENT_DATA_DIR", "data")]).await;
    let marker = agent.dir.path().join("ran");
    for (run_id, glue, source) in [
        (
            41,
            "GLUE_SHELL",
            format!("echo bash >> {}", marker.display()),
        ),
        (
            42,
            "GLUE_PERL",
            format!(
                "open(my $f, '>>', '{}'); print $f \"perl\\n\";",
                marker.display()
            ),
        ),
    ] {
        let body = trigger(
            json!({"logId": run_id, "jobId": run_id, "glueType": glue, "glueSource": source}),
        );
        let answer = post(&agent, "run", Some(TOKEN), &body).await.unwrap();
        assert_eq!(answer["code"], 200, "{answer}");
    }
    let statuses = wait_for_results(&agent, 2).await;
    assert_eq!(
        statuses.values().collect::<Vec<_>>(),
        vec!["succeeded", "succeeded"],
        "{statuses:?}"
    );
    // The two runs belong to different jobs and may run in either order, so both append.
    let mut ran: Vec<String> = std::fs::read_to_string(&marker)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    ran.sort();
    assert_eq!(ran, ["bash", "perl"]);
}

/// Issue 20: a trigger carries its run id as an idempotency key. A repeat while the run goes
/// is answered as accepted and runs nothing; after a kill -9 and a restart the agent still
/// knows the run (its accept journal), reports it `lost` (it was interrupted) and refuses to
/// run it again, while a run that was only queued, or whose start was journalled but whose
/// process never started, is handed back `not_started` and may come again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_run_id_runs_once_even_across_a_restart() {
    let env = [("JOBFLEET_AGENT_MAX_CONCURRENT", "1")];
    let mut agent = start_with(&env).await;
    let ran_markers = agent.dir.path().join("ran");
    std::fs::create_dir_all(&ran_markers).unwrap();
    let run = |job: i64, log: i64, then: &str| {
        trigger(json!({"jobId": job, "logId": log,
            "glueSource": format!("echo ran >> {}/{log}; {then}", ran_markers.display())}))
    };
    let ran = |log: i64| {
        std::fs::read_to_string(ran_markers.join(log.to_string()))
            .map(|s| s.lines().count())
            .unwrap_or(0)
    };
    let first = post(&agent, "run", Some(TOKEN), &run(1, 100, "sleep 30"))
        .await
        .unwrap();
    assert_eq!(
        (first["code"].as_i64(), first["msg"].as_str()),
        (Some(200), Some("started"))
    );
    // A string, as XXL-Job's admin reads a run's content (`ReturnT<String>`); the acceptance
    // is JSON text inside it.
    let content = first["content"].as_str().expect("content is a string");
    let taken: Value = serde_json::from_str(content).unwrap();
    assert!(
        taken["instanceId"].is_string() && taken["seq"].is_u64(),
        "{taken}"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while ran(100) == 0 {
        assert!(Instant::now() < deadline, "the run did not start");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The same run id again, while it goes: accepted, nothing new runs.
    let again = post(&agent, "run", Some(TOKEN), &run(1, 100, ""))
        .await
        .unwrap();
    assert_eq!(again["code"], 200, "{again}");
    assert!(
        again["msg"].as_str().unwrap().contains("already accepted"),
        "{again}"
    );
    // Another job's run waits for the only slot.
    let queued = post(&agent, "run", Some(TOKEN), &run(2, 200, ""))
        .await
        .unwrap();
    assert!(
        queued["msg"].as_str().unwrap().contains("queued"),
        "{queued}"
    );
    let held = post(&agent, "held", Some(TOKEN), "").await.unwrap();
    assert_eq!(held["content"]["heldRuns"], json!([100, 200]), "{held}");

    // kill -9 and start again with the same folder and port.
    let _ = agent.child.kill();
    let _ = agent.child.wait();
    // The running run's process left its start mark as it started.
    let data = agent.dir.path().join("data");
    let marked = || {
        std::fs::read(data.join("started.marks"))
            .unwrap()
            .chunks_exact(8)
            .map(|slot| i64::from_le_bytes(slot.try_into().unwrap()))
            .filter(|&run_id| run_id != 0)
            .collect::<Vec<_>>()
    };
    assert_eq!(marked(), vec![100]);
    // What a kill between a start landing in the journal and the process leaves: runs 300 and
    // 400 are journalled as started, and no process marked them.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    let mut journal = std::fs::OpenOptions::new()
        .append(true)
        .open(data.join("accepted.journal"))
        .unwrap();
    std::io::Write::write_all(
        &mut journal,
        format!("A 300 {now}\nA 400 {now}\n").as_bytes(),
    )
    .unwrap();
    let port: u16 = agent.base.rsplit(':').next().unwrap().parse().unwrap();
    let dir = std::mem::replace(&mut agent.dir, tempfile::tempdir().unwrap());
    let agent = start_in(dir, port, &env).await;
    let statuses = wait_for_results(&agent, 4).await;
    assert_eq!(
        statuses.get(&100).map(String::as_str),
        Some("lost"),
        "{statuses:?}"
    );
    for never_ran in [200, 300, 400] {
        assert_eq!(
            statuses.get(&never_ran).map(String::as_str),
            Some("not_started"),
            "{never_ran}: {statuses:?}"
        );
    }
    let held = post(&agent, "held", Some(TOKEN), "").await.unwrap();
    assert_eq!(
        held["content"]["heldRuns"],
        json!([100, 200, 300, 400]),
        "results wait in the spool: {held}"
    );
    assert!(
        marked().is_empty(),
        "the start marks the killed agent left are cleared once their results are spooled"
    );
    // A run handed back because its process never started may come again, and runs.
    let again = post(&agent, "run", Some(TOKEN), &run(3, 300, ""))
        .await
        .unwrap();
    assert_eq!(again["msg"], "started", "{again}");
    // The interrupted run is known: sent again, it does not run again.
    let repeat = post(&agent, "run", Some(TOKEN), &run(1, 100, ""))
        .await
        .unwrap();
    assert!(
        repeat["msg"].as_str().unwrap().contains("already accepted"),
        "{repeat}"
    );
    // The one handed back may come again, and runs (once). It is accepted, started or, while
    // run 300 still holds the one slot, queued behind it.
    let resent = post(&agent, "run", Some(TOKEN), &run(2, 200, ""))
        .await
        .unwrap();
    let msg = resent["msg"].as_str().unwrap_or_default();
    assert!(
        resent["code"] == 200 && (msg == "started" || msg.starts_with("queued for a free slot")),
        "{resent}"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while ran(200) == 0 || ran(300) == 0 {
        assert!(Instant::now() < deadline, "the resent runs did not run");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!((ran(100), ran(200), ran(300)), (1, 1, 1));
}

/// A kill that names the run (a jobfleet admin's) stops that run only: a run that already ended
/// is not confused with the job's next one, and a queued run is dropped alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_naming_the_run_stops_that_run_only() {
    let agent = start().await;
    let marks = agent.dir.path().join("marks");
    std::fs::create_dir_all(&marks).unwrap();
    let mark = |name: &str| format!("touch {}/{name}", marks.display());
    let go = marks.join("go");
    // Job 5's runs go one after the other (serial): 51 runs until the test lets it end, 52 and
    // 53 wait behind it.
    let run = |id: i64, script: String| {
        trigger(json!({"jobId": 5, "logId": id, "glueSource": script,
            "executorBlockStrategy": "SERIAL_EXECUTION"}))
    };
    for (id, script) in [
        (
            51,
            format!(
                "while [ ! -e {} ]; do sleep 0.05; done; {}",
                go.display(),
                mark("51")
            ),
        ),
        (52, mark("52")),
        (53, format!("sleep 30; {}", mark("53"))),
    ] {
        let answer = post(&agent, "run", Some(TOKEN), &run(id, script))
            .await
            .unwrap();
        assert_eq!(answer["code"], 200, "{answer}");
    }
    let kill = |body: &'static str| {
        let agent = &agent;
        async move { post(agent, "kill", Some(TOKEN), body).await.unwrap() }
    };
    let gone = kill(r#"{"jobId": 5, "logId": 50}"#).await;
    assert_eq!(gone["code"], 200, "{gone}");
    assert!(
        gone["msg"]
            .as_str()
            .unwrap()
            .contains("not running or waiting here"),
        "a run that is not here (it ended) is not confused with the running one: {gone}"
    );
    let bad = kill(r#"{"jobId": 5, "logId": 0}"#).await;
    assert_eq!(bad["code"], 500, "{bad}");
    let queued = kill(r#"{"jobId": 5, "logId": 52}"#).await;
    assert_eq!(
        (queued["code"].as_i64(), queued["msg"].as_str()),
        (Some(200), Some("killed"))
    );
    let statuses = wait_for_results(&agent, 1).await;
    assert_eq!(
        statuses.get(&52).map(String::as_str),
        Some("killed"),
        "{statuses:?}"
    );
    assert!(
        !statuses.contains_key(&51),
        "the running run goes on: {statuses:?}"
    );
    // 51 ends on its own; then 53 starts, and a kill naming it stops it.
    std::fs::write(&go, "").unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !marks.join("51").exists() {
        assert!(Instant::now() < deadline, "run 51 did not end");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let statuses = wait_for_results(&agent, 2).await;
    assert_eq!(
        statuses.get(&51).map(String::as_str),
        Some("succeeded"),
        "{statuses:?}"
    );
    // 53 has started once its log exists.
    loop {
        let log = post(
            &agent,
            "log",
            Some(TOKEN),
            r#"{"logId": 53, "fromLineNum": 1, "logDateTim": 0}"#,
        )
        .await
        .unwrap();
        if log["code"] == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "run 53 did not start: {log}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let late = kill(r#"{"jobId": 5, "logId": 51}"#).await;
    assert!(
        late["msg"]
            .as_str()
            .unwrap()
            .contains("not running or waiting here"),
        "a kill of the ended run does not reach the job's next one: {late}"
    );
    let current = kill(r#"{"jobId": 5, "logId": 53}"#).await;
    assert_eq!(current["msg"], "killed", "{current}");
    let statuses = wait_for_results(&agent, 3).await;
    assert_eq!(
        statuses.get(&53).map(String::as_str),
        Some("killed"),
        "{statuses:?}"
    );
    assert!(!marks.join("52").exists() && !marks.join("53").exists());
}

/// A run sent ahead (`startInMs`, the admin's take) is accepted at once and starts at its time,
/// not before; a kill before then ends it without starting it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_sent_ahead_starts_at_its_time_and_a_kill_before_then_ends_it_unstarted() {
    let agent = start().await;
    let marks = agent.dir.path().join("marks");
    std::fs::create_dir_all(&marks).unwrap();
    let sent_ms = epoch_ms();
    let timed = post(
        &agent,
        "run",
        Some(TOKEN),
        &trigger(json!({"jobId": 7, "logId": 71, "startInMs": 1_000,
            "glueSource": format!("date +%s%3N > {}/71", marks.display())})),
    )
    .await
    .unwrap();
    assert_eq!(
        (timed["code"].as_i64(), timed["msg"].as_str()),
        (Some(200), Some("starts in 1000 ms")),
        "{timed}"
    );
    assert!(
        epoch_ms() - sent_ms < 1_000,
        "the answer waited for the start"
    );
    let doomed = post(
        &agent,
        "run",
        Some(TOKEN),
        &trigger(json!({"jobId": 8, "logId": 81, "startInMs": 5_000,
            "glueSource": format!("touch {}/81", marks.display())})),
    )
    .await
    .unwrap();
    assert_eq!(doomed["code"], 200, "{doomed}");
    let kill = post(&agent, "kill", Some(TOKEN), r#"{"jobId": 8, "logId": 81}"#)
        .await
        .unwrap();
    assert_eq!(kill["msg"], "killed", "{kill}");
    let statuses = wait_for_results(&agent, 2).await;
    assert_eq!(
        (
            statuses.get(&71).map(String::as_str),
            statuses.get(&81).map(String::as_str)
        ),
        (Some("succeeded"), Some("killed")),
        "{statuses:?}"
    );
    let started_ms: i64 = std::fs::read_to_string(marks.join("71"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        started_ms - sent_ms >= 1_000,
        "started {} ms after it was sent, before its time",
        started_ms - sent_ms
    );
    assert!(!marks.join("81").exists(), "the killed run started");
}

/// `runBatch` by HTTP (a jobfleet admin's take for a `push` agent): each trigger is its own
/// `run`, answered in order in `content`, a bad one refused alone; the good ones start at their
/// own time, not before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_by_http_answers_each_run_and_starts_each_at_its_time() {
    let agent = start().await;
    let marks = agent.dir.path().join("marks");
    std::fs::create_dir_all(&marks).unwrap();
    let one = |job, run, start_in_ms| timed_trigger(&marks, job, run, start_in_ms);
    let sent_ms = epoch_ms();
    let batch = format!(
        "[{},{},{}]",
        one(21, 211, 300),
        one(22, 221, -5),
        one(23, 231, 600)
    );
    let answer = post(&agent, "runBatch", Some(TOKEN), &batch).await.unwrap();
    assert_eq!(answer["code"], 200, "{answer}");
    let answers = answer["content"].as_array().unwrap();
    let codes: Vec<_> = answers.iter().map(|a| a["code"].as_i64()).collect();
    assert_eq!(codes, [Some(200), Some(500), Some(200)], "{answer}");
    assert_eq!(answers[0]["msg"], "starts in 300 ms", "{answer}");
    assert!(
        answers[1]["msg"]
            .as_str()
            .is_some_and(|m| m.contains("startInMs must be between 0 and 10000")),
        "{answer}"
    );
    // A jobfleet agent says which of its instances took each run it accepted.
    assert!(answers[0]["content"].is_string(), "{answer}");
    let statuses = wait_for_results(&agent, 2).await;
    assert_eq!(
        (
            statuses.get(&211).map(String::as_str),
            statuses.get(&231).map(String::as_str),
            statuses.get(&221)
        ),
        (Some("succeeded"), Some("succeeded"), None),
        "{statuses:?}"
    );
    started_at_their_time(&marks, sent_ms, &[(211, 300), (231, 600)]);
    assert!(!marks.join("221").exists(), "the refused run started");
}

/// A trigger sent `start_in_ms` ahead whose run writes its start time (`date +%s%3N`) into
/// `marks/<run id>`.
fn timed_trigger(marks: &std::path::Path, job: i64, run: i64, start_in_ms: i64) -> String {
    trigger(json!({"jobId": job, "logId": run, "startInMs": start_in_ms,
        "glueSource": format!("date +%s%3N > {}/{run}", marks.display())}))
}

/// Each run (run id, `startInMs`) wrote its start time (`date +%s%3N`) into `marks/<run id>`: it
/// started no sooner than its time after `sent_ms`.
fn started_at_their_time(marks: &std::path::Path, sent_ms: i64, runs: &[(i64, i64)]) {
    for &(run, start_in_ms) in runs {
        let started_ms: i64 = std::fs::read_to_string(marks.join(run.to_string()))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(
            started_ms - sent_ms >= start_in_ms,
            "run {run} started {} ms after it was sent, before its time",
            started_ms - sent_ms
        );
    }
}

/// A shutdown while a run sent ahead waits for its time rejects it unstarted, as it would a
/// queued run, so that the admin sends it elsewhere; the agent does not start it on its way out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_rejects_a_run_still_waiting_for_its_time() {
    let mut agent = start().await;
    let marks = agent.dir.path().join("marks");
    std::fs::create_dir_all(&marks).unwrap();
    let sent = Instant::now();
    let waiting = post(
        &agent,
        "run",
        Some(TOKEN),
        &trigger(json!({"jobId": 9, "logId": 91, "startInMs": 1_500,
            "glueSource": format!("touch {}/91", marks.display())})),
    )
    .await
    .unwrap();
    assert_eq!(waiting["msg"], "starts in 1500 ms", "{waiting}");
    stop_gracefully(&mut agent).await;
    // The run waits here until a quarter of a second before its time, when it would go to the
    // spawner; a shutdown rejects it then at the latest.
    assert!(
        sent.elapsed() >= Duration::from_millis(1_250),
        "the agent stopped before the run's hand-over: the test shows nothing"
    );
    let statuses = spooled_statuses(&agent);
    assert_eq!(
        statuses.get(&91).map(String::as_str),
        Some("rejected"),
        "{statuses:?}"
    );
    assert!(!marks.join("91").exists(), "the run started on the way out");
}

/// A run sent less than a quarter of a second ahead is handed to the spawner at once, which starts
/// it at its time, not before; a kill or a shutdown before then withdraws it from the spawner
/// unstarted (killed, or rejected so that the admin sends it elsewhere).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_the_spawner_holds_for_its_time_starts_then_and_a_kill_or_shutdown_withdraws_it() {
    let mut agent = start().await;
    let marks = agent.dir.path().join("marks");
    std::fs::create_dir_all(&marks).unwrap();
    let run = |job, run, start_in_ms| timed_trigger(&marks, job, run, start_in_ms);
    let sent_ms = epoch_ms();
    let batch = format!(
        "[{},{},{}]",
        run(31, 311, 150),
        run(32, 321, 240),
        run(33, 331, 200)
    );
    let answer = post(&agent, "runBatch", Some(TOKEN), &batch).await.unwrap();
    let codes: Vec<_> = answer["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["code"].as_i64())
        .collect();
    assert_eq!(codes, [Some(200); 3], "{answer}");
    let kill = post(
        &agent,
        "kill",
        Some(TOKEN),
        r#"{"jobId": 32, "logId": 321}"#,
    )
    .await
    .unwrap();
    assert_eq!(kill["msg"], "killed", "{kill}");
    assert!(
        epoch_ms() - sent_ms < 240,
        "the kill came after the run's time: the test shows nothing"
    );
    let statuses = wait_for_results(&agent, 3).await;
    assert_eq!(
        (
            statuses.get(&311).map(String::as_str),
            statuses.get(&321).map(String::as_str),
            statuses.get(&331).map(String::as_str)
        ),
        (Some("succeeded"), Some("killed"), Some("succeeded")),
        "{statuses:?}"
    );
    started_at_their_time(&marks, sent_ms, &[(311, 150), (331, 200)]);
    assert!(!marks.join("321").exists(), "the killed run started");
    // Withdrawn, not started and stopped at once.
    assert_eq!(
        spooled_field(&agent, "handleMsg")
            .get(&321)
            .map(String::as_str),
        Some("killed before its start time")
    );

    let waiting = post(&agent, "run", Some(TOKEN), &run(34, 341, 240))
        .await
        .unwrap();
    assert_eq!(waiting["msg"], "starts in 240 ms", "{waiting}");
    // The run is in the spawner's hands by now (its acceptance was on disk before the answer).
    tokio::time::sleep(Duration::from_millis(30)).await;
    let stopping = Instant::now();
    stop_gracefully(&mut agent).await;
    assert!(
        stopping.elapsed() < Duration::from_millis(210),
        "the agent waited for the run's time"
    );
    assert_eq!(
        spooled_statuses(&agent).get(&341).map(String::as_str),
        Some("rejected")
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !marks.join("341").exists(),
        "the run started on the way out"
    );
}

/// A success that may linger for company frees its run's slot before its result is on disk:
/// the job's next run starts at once, the agent still lists the run as held, and a shutdown
/// writes what waits in memory before the agent exits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lingering_success_frees_its_slot_at_once_and_a_shutdown_writes_it() {
    // A second of gathering: the result is still in memory when the test looks.
    let mut agent = start_with(&[("JOBFLEET_AGENT_SPOOL_GATHER_MS", "1000")]).await;
    let marks = agent.dir.path().join("marks");
    std::fs::create_dir_all(&marks).unwrap();
    let run = |log_id: i64| {
        trigger(
            json!({"jobId": 5, "logId": log_id, "resultLingerMs": 10_000,
            "glueSource": format!("touch {}/{log_id}", marks.display())}),
        )
    };
    let wait_for = |path: std::path::PathBuf| async move {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !path.exists() {
            assert!(
                Instant::now() < deadline,
                "{} never appeared",
                path.display()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };

    let first = post(&agent, "run", Some(TOKEN), &run(51)).await.unwrap();
    assert_eq!(first["code"], 200, "{first}");
    wait_for(marks.join("51")).await;
    wait_until_idle(&agent, 5).await;
    let held = post(&agent, "held", Some(TOKEN), "").await.unwrap();
    assert_eq!(held["content"]["heldRuns"], json!([51]), "{held}");
    assert!(
        !spooled_statuses(&agent).contains_key(&51),
        "the slot came free only once the result was on disk"
    );

    let second = post(&agent, "run", Some(TOKEN), &run(52)).await.unwrap();
    assert_eq!(second["code"], 200, "{second}");
    assert!(
        !second["msg"].as_str().unwrap_or("").contains("queued"),
        "the next run waited for the first one's result: {second}"
    );
    wait_for(marks.join("52")).await;

    stop_gracefully(&mut agent).await;
    let statuses = spooled_statuses(&agent);
    assert_eq!(
        (
            statuses.get(&51).map(String::as_str),
            statuses.get(&52).map(String::as_str)
        ),
        (Some("succeeded"), Some("succeeded")),
        "{statuses:?}"
    );
}

/// The price of gathering, as README states it: a success still waiting in memory when the
/// agent is killed -9 is not on disk, and the restarted agent reports its run `lost` (its
/// process had started), never as succeeded nor as not started.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_success_still_gathering_at_a_kill_comes_back_lost() {
    let env = [("JOBFLEET_AGENT_SPOOL_GATHER_MS", "1000")];
    let mut agent = start_with(&env).await;
    let marks = agent.dir.path().join("marks");
    std::fs::create_dir_all(&marks).unwrap();
    let first = post(
        &agent,
        "run",
        Some(TOKEN),
        &trigger(json!({"jobId": 6, "logId": 61, "resultLingerMs": 10_000,
            "glueSource": format!("touch {}/61", marks.display())})),
    )
    .await
    .unwrap();
    assert_eq!(first["code"], 200, "{first}");
    wait_until_idle(&agent, 6).await;
    let _ = agent.child.kill();
    let _ = agent.child.wait();
    assert!(
        !spooled_statuses(&agent).contains_key(&61),
        "on disk before the kill: the test shows nothing"
    );

    let port: u16 = agent.base.rsplit(':').next().unwrap().parse().unwrap();
    let dir = std::mem::replace(&mut agent.dir, tempfile::tempdir().unwrap());
    let agent = start_in(dir, port, &env).await;
    let statuses = wait_for_results(&agent, 1).await;
    assert_eq!(
        statuses.get(&61).map(String::as_str),
        Some("lost"),
        "{statuses:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn triggers_beyond_the_run_limit_wait_their_turn_and_a_full_queue_refuses() {
    let agent = start_with(&[
        ("JOBFLEET_AGENT_MAX_CONCURRENT", "1"),
        ("JOBFLEET_AGENT_MAX_QUEUED", "2"),
    ])
    .await;
    let marks = agent.dir.path().join("marks");
    std::fs::create_dir_all(&marks).unwrap();
    let run = |job: i64, script: String| {
        trigger(json!({"jobId": job, "logId": job * 10, "glueSource": script}))
    };
    let mark = |name: &str| format!("touch {}/{name}", marks.display());
    // The first run holds the only slot until the test says go, however slow the requests
    // below are (for at most 30 s, so that a failed test leaves nothing behind): a fixed sleep
    // could end first on a loaded machine.
    let go = marks.join("go");
    let first = post(
        &agent,
        "run",
        Some(TOKEN),
        &run(
            1,
            format!(
                "for i in $(seq 600); do [ -e {} ] && break; sleep 0.05; done; {}",
                go.display(),
                mark("one")
            ),
        ),
    )
    .await
    .unwrap();
    assert_eq!(first["code"], 200, "{first}");
    let second = post(&agent, "run", Some(TOKEN), &run(2, mark("two")))
        .await
        .unwrap();
    assert_eq!(second["code"], 200, "{second}");
    assert!(
        second["msg"].as_str().unwrap().contains("queued"),
        "{second}"
    );
    let third = post(&agent, "run", Some(TOKEN), &run(3, mark("three")))
        .await
        .unwrap();
    assert_eq!(third["code"], 200, "{third}");
    let refused = post(&agent, "run", Some(TOKEN), &run(4, mark("four")))
        .await
        .unwrap();
    assert_eq!(refused["code"], 500, "{refused}");
    assert!(
        refused["msg"].as_str().unwrap().contains("2 queued"),
        "the refusal says which limit: {refused}"
    );
    // A queued run of a job is that job's run: idleBeat says busy, kill ends it unstarted.
    let busy = post(&agent, "idleBeat", Some(TOKEN), r#"{"jobId": 3}"#)
        .await
        .unwrap();
    assert_eq!(busy["code"], 500, "{busy}");
    let killed = post(&agent, "kill", Some(TOKEN), r#"{"jobId": 3}"#)
        .await
        .unwrap();
    assert_eq!(killed["code"], 200, "{killed}");
    // A kill naming a run waiting for a slot drops it alone; the places of both kills are free
    // again, so a new trigger waits instead of being refused, and runs.
    let killed = post(&agent, "kill", Some(TOKEN), r#"{"jobId": 2, "logId": 20}"#)
        .await
        .unwrap();
    assert_eq!(killed["msg"], "killed", "{killed}");
    let fifth = post(&agent, "run", Some(TOKEN), &run(5, mark("five")))
        .await
        .unwrap();
    assert_eq!(
        fifth["code"], 200,
        "the killed runs' places are free: {fifth}"
    );
    std::fs::write(&go, "").unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while spooled_statuses(&agent).len() < 4 {
        assert!(
            Instant::now() < deadline,
            "results: {:?}",
            spooled_statuses(&agent)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let statuses = spooled_statuses(&agent);
    assert_eq!(statuses.get(&10).map(String::as_str), Some("succeeded"));
    assert_eq!(statuses.get(&20).map(String::as_str), Some("killed"));
    assert_eq!(statuses.get(&30).map(String::as_str), Some("killed"));
    assert_eq!(statuses.get(&50).map(String::as_str), Some("succeeded"));
    assert!(
        !statuses.contains_key(&40),
        "a refused trigger has no result"
    );
    assert!(marks.join("one").exists() && marks.join("five").exists());
    assert!(
        !marks.join("two").exists()
            && !marks.join("three").exists()
            && !marks.join("four").exists()
    );
}

#[test]
fn invalid_config_exits_2_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    for (env, key) in [
        (
            vec![("JOBFLEET_AGENT_ADMINS", "http://127.0.0.1:1")],
            "group",
        ),
        (
            vec![
                ("JOBFLEET_AGENT_GROUP", "g"),
                ("JOBFLEET_AGENT_ADMINS", "not a url"),
            ],
            "admins",
        ),
        (
            vec![
                ("JOBFLEET_AGENT_GROUP", "g"),
                ("JOBFLEET_AGENT_LISTEN", "everywhere"),
            ],
            "listen",
        ),
        (
            vec![
                ("JOBFLEET_AGENT_GROUP", "g"),
                ("JOBFLEET_AGENT_MAX_CONCURRENT", "-1"),
            ],
            "max_concurrent",
        ),
        (
            vec![
                ("JOBFLEET_AGENT_GROUP", "g"),
                ("JOBFLEET_AGENT_MAX_QUEUED", "lots"),
            ],
            "max_queued",
        ),
        (
            vec![
                ("JOBFLEET_AGENT_GROUP", "g"),
                ("JOBFLEET_AGENT_SPEED", "fast"),
            ],
            "speed",
        ),
        (
            vec![("JOBFLEET_AGENT_GROUP", "g"), ("JOBFLEET_AGENT_TOKEN", "")],
            "token",
        ),
        (
            vec![
                ("JOBFLEET_AGENT_GROUP", "g"),
                ("JOBFLEET_AGENT_TOKEN", "too-short"),
            ],
            "token",
        ),
        (
            vec![
                ("JOBFLEET_AGENT_GROUP", "g"),
                ("JOBFLEET_AGENT_LOG_MAX_BYTES", "-1"),
            ],
            "log_max_bytes",
        ),
        (
            vec![
                ("JOBFLEET_AGENT_GROUP", "g"),
                ("JOBFLEET_AGENT_LOG_MIN_FREE_MB", "lots"),
            ],
            "log_min_free_mb",
        ),
    ] {
        let out = agent()
            .arg("--allow-root")
            .envs(env.clone())
            .env("JOBFLEET_AGENT_DATA_DIR", dir.path())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{env:?}: {stderr}");
        assert!(stderr.contains(&format!("`{key}`")), "{env:?}: {stderr}");
    }
}

#[test]
fn refuses_root_unless_allowed() {
    if !nix::unistd::geteuid().is_root() {
        return; // the refusal is about root; as another user there is nothing to refuse
    }
    let dir = tempfile::tempdir().unwrap();
    let out = agent()
        .env("JOBFLEET_AGENT_GROUP", "g")
        .env(
            "JOBFLEET_AGENT_LISTEN",
            format!("127.0.0.1:{}", free_port()),
        )
        .env("JOBFLEET_AGENT_DATA_DIR", dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--allow-root"));
}

/// A second agent on a data folder in use stops at its start, naming the folder, before it
/// touches the first one's journal, marks or spool; the first runs on, and the folder is free
/// again once it stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_agent_on_the_same_data_folder_is_refused() {
    let mut first = start().await;
    let data = first.dir.path().join("data");
    let second = || {
        let mut command = agent();
        command
            .arg("--allow-root")
            .env("JOBFLEET_AGENT_GROUP", "endpoints")
            .env(
                "JOBFLEET_AGENT_ADMINS",
                format!("http://127.0.0.1:{}", free_port()),
            )
            .env(
                "JOBFLEET_AGENT_LISTEN",
                format!("127.0.0.1:{}", free_port()),
            )
            .env("JOBFLEET_AGENT_DATA_DIR", &data);
        command
    };
    // What the lock guards, as the first agent left it: contents and modification times.
    let state = || {
        ["accepted.journal", "started.marks"].map(|name| {
            let path = data.join(name);
            (
                std::fs::read(&path).unwrap(),
                std::fs::metadata(&path).unwrap().modified().unwrap(),
            )
        })
    };
    let before = state();
    let mut refused = second()
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while refused.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = refused.kill();
            let _ = refused.wait();
            panic!("the second agent started on a data folder in use");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = refused.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "another agent process uses the data folder {}",
            data.display()
        )),
        "{stderr}"
    );
    assert!(state() == before, "the journal or the marks were touched");
    let page = run_to_its_end(&first, 1, 1, "echo still here").await;
    assert!(
        page["content"]["logContent"]
            .as_str()
            .is_some_and(|log| log.contains("still here")),
        "{page}"
    );
    stop_gracefully(&mut first).await;
    let mut again = second()
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let exited = again.try_wait().unwrap();
    let _ = again.kill();
    let out = again.wait_with_output().unwrap();
    assert!(
        exited.is_none(),
        "the folder was not free once the first agent stopped: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs start through the spawners, one per core up to four, taking turns: the sweep after a run
/// spares them, and one that died is replaced at its next turn, whose run runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_spawners_outlive_runs_and_one_that_died_is_replaced() {
    use jobfleet_agent::runner::spawner;
    let agent = start().await;
    let mut spawners = spawner::of_agent(agent.child.id());
    spawners.sort_unstable();
    assert_eq!(spawners.len(), spawner::count(), "{spawners:?}");
    let run = |id: i64| trigger(json!({"jobId": id, "logId": id, "glueSource": "true"}));
    let first = post(&agent, "run", Some(TOKEN), &run(51)).await.unwrap();
    assert_eq!(first["code"], 200, "{first}");
    wait_for_results(&agent, 1).await;
    let mut after_run = spawner::of_agent(agent.child.id());
    after_run.sort_unstable();
    assert_eq!(
        after_run, spawners,
        "the sweep after the run spared the spawners"
    );
    let killed = spawners[0];
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(killed),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    // One run each, in turn: every spawner's turn comes, the dead one's too.
    for n in 1..=spawners.len() {
        let id = 51 + i64::try_from(n).unwrap();
        let next = post(&agent, "run", Some(TOKEN), &run(id)).await.unwrap();
        assert_eq!(next["code"], 200, "{next}");
        wait_for_results(&agent, n + 1).await;
    }
    let statuses = wait_for_results(&agent, spawners.len() + 1).await;
    assert!(
        statuses.values().all(|status| status == "succeeded"),
        "{statuses:?}"
    );
    let replaced = spawner::of_agent(agent.child.id());
    assert_eq!(replaced.len(), spawners.len(), "{replaced:?}");
    assert!(!replaced.contains(&killed), "{replaced:?}");

    // Spawners, and so runs, are children of the forking thread, never of the main thread,
    // which the agent's look for strays reads as the orphans' alone.
    let pid = agent.child.id();
    let forks = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|t| t.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .find(|t| {
            std::fs::read_to_string(format!("/proc/{pid}/task/{t}/comm"))
                .is_ok_and(|c| c.trim() == "jobfleet-forks")
        })
        .expect("the forking thread");
    let children_of = |thread: u32| -> Vec<i32> {
        std::fs::read_to_string(format!("/proc/{pid}/task/{thread}/children"))
            .unwrap()
            .split_whitespace()
            .map(|p| p.parse().unwrap())
            .collect()
    };
    let going = post(
        &agent,
        "run",
        Some(TOKEN),
        &trigger(json!({"jobId": 90, "logId": 90, "glueSource": "sleep 2"})),
    )
    .await
    .unwrap();
    assert_eq!(going["code"], 200, "{going}");
    let deadline = Instant::now() + Duration::from_secs(5);
    while children_of(forks).len() <= replaced.len() {
        assert!(Instant::now() < deadline, "the run never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        replaced.iter().all(|s| children_of(forks).contains(s)),
        "{replaced:?}"
    );
    assert_eq!(
        children_of(pid),
        Vec::<i32>::new(),
        "the main thread's children"
    );
    assert_eq!(
        wait_for_results(&agent, spawners.len() + 2)
            .await
            .get(&90)
            .map(String::as_str),
        Some("succeeded")
    );
}

/// The scheduling policy (the 41st field of `/proc/.../stat`) of each thread of `pid`, by name.
fn thread_policies(pid: u32) -> Vec<(String, i32)> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("stat")).ok())
        .map(|stat| {
            let (open, close) = (stat.find('(').unwrap(), stat.rfind(')').unwrap());
            let policy = stat[close + 2..]
                .split(' ')
                .nth(38)
                .unwrap()
                .parse()
                .unwrap();
            (stat[open + 1..close].to_owned(), policy)
        })
        .collect()
}

/// Issue 17: an ordinary agent's spawner and the blocking threads of its main runtime are batch
/// threads, so that waking them never takes its main thread's core in the middle of its turn; its
/// other threads and its runs are ordinary. An agent an operator starts under another policy
/// (here idle) keeps it, for every thread and for its runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ordinary_agent_s_helpers_yield_to_it_and_its_runs_stay_ordinary() {
    const OTHER: i32 = 0;
    const BATCH: i32 = 3;
    const IDLE: i32 = 5;
    let ours = thread_policies(std::process::id());
    assert!(
        ours.iter().all(|(_, policy)| *policy == OTHER),
        "the test needs an ordinary process: {ours:?}"
    );
    for (wrapper, helpers, rest) in [
        (&[][..], BATCH, OTHER),
        (&["chrt", "--idle", "0"][..], IDLE, IDLE),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let agent = start_under(wrapper, dir, free_port(), &[]).await;
        let page = run_to_its_end(
            &agent,
            61,
            61,
            "echo \"policy=$(cut -d ' ' -f 41 /proc/$$/stat)\"",
        )
        .await;
        let log = page["content"]["logContent"].as_str().unwrap();
        assert!(
            log.contains(&format!("policy={rest}\n")),
            "{wrapper:?}: {log}"
        );
        // The result is spooled by a blocking thread, which lingers for a while. A thread just
        // started carries its name a moment before its policy: looked at again until settled.
        wait_for_results(&agent, 1).await;
        let wanted = |name: &str| {
            if name == "jobfleet-block" {
                helpers
            } else {
                rest
            }
        };
        let deadline = Instant::now() + Duration::from_secs(2);
        let threads = loop {
            let threads = thread_policies(agent.child.id());
            if threads.iter().all(|(name, policy)| *policy == wanted(name))
                || Instant::now() > deadline
            {
                break threads;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert!(
            threads.iter().any(|(name, _)| name == "jobfleet-block"),
            "{threads:?}"
        );
        for (name, policy) in &threads {
            assert_eq!(
                *policy,
                wanted(name),
                "{wrapper:?}: thread {name}: {threads:?}"
            );
        }
        let spawners = jobfleet_agent::runner::spawner::of_agent(agent.child.id());
        assert!(!spawners.is_empty(), "spawners beside the agent");
        for spawner in spawners {
            assert_eq!(
                thread_policies(spawner.cast_unsigned()),
                vec![("jobfleet-spawn".to_owned(), helpers)],
                "{wrapper:?}"
            );
        }
    }
}

/// An http run's request is sent once: a bad request is refused at the trigger, and a run
/// whose request was out when the agent was killed is reported lost after the restart, never
/// sent again (its log was marked started before the request left).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_run_cut_by_a_crash_is_lost_not_sent_again() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    // Takes requests and never answers.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let connections = Arc::new(AtomicUsize::new(0));
    let counted = connections.clone();
    tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            open.push(stream);
        }
    });
    let mut agent = start().await;
    let http = |log: i64, source: String| {
        trigger(json!({"jobId": 5, "logId": log, "glueType": "GLUE_HTTP", "glueSource": source}))
    };
    let refused = post(
        &agent,
        "run",
        Some(TOKEN),
        &http(899, "{\"url\": \"gopher://h/\"}".into()),
    )
    .await
    .unwrap();
    assert_eq!(refused["code"], 500, "{refused}");
    assert_eq!(
        refused["msg"],
        "GLUE_HTTP request: `url` must start with http:// or https://"
    );

    let hang = json!({"url": format!("http://{address}/hang")}).to_string();
    let started = post(&agent, "run", Some(TOKEN), &http(900, hang.clone()))
        .await
        .unwrap();
    assert_eq!(started["msg"], "started", "{started}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while connections.load(Ordering::SeqCst) == 0 {
        assert!(Instant::now() < deadline, "the request did not arrive");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = agent.child.kill();
    let _ = agent.child.wait();
    let port: u16 = agent.base.rsplit(':').next().unwrap().parse().unwrap();
    let dir = std::mem::replace(&mut agent.dir, tempfile::tempdir().unwrap());
    let agent = start_in(dir, port, &[]).await;
    let statuses = wait_for_results(&agent, 1).await;
    assert_eq!(
        statuses.get(&900).map(String::as_str),
        Some("lost"),
        "{statuses:?}"
    );
    let again = post(&agent, "run", Some(TOKEN), &http(900, hang))
        .await
        .unwrap();
    assert!(
        again["msg"].as_str().unwrap().contains("already accepted"),
        "{again}"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(connections.load(Ordering::SeqCst), 1, "sent once");
}
