//! The `jobfleet` CLI binary against a real admin (and a real agent): login kept on disk,
//! tables and `-o json`, trigger and wait, logs followed while the run writes them, and the
//! exit codes scripts rely on, with bad input of every kind.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

use crate::support::{ADMIN_PASSWORD, TestApp, with_agent};

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Out {
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}\n{}", self.stdout, self.stderr))
    }
}

/// Runs `jobfleet args…` with its login kept in `config_dir` and none of this environment's
/// `JOBFLEET_*` settings; `stdin` is written to its standard input.
async fn jobfleet(config_dir: &Path, env: &[(&str, &str)], args: &[&str], stdin: &str) -> Out {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_jobfleet"));
    for (key, _) in std::env::vars().filter(|(k, _)| k.starts_with("JOBFLEET_")) {
        cmd.env_remove(key);
    }
    let mut child = cmd
        .env("JOBFLEET_CONFIG_DIR", config_dir)
        .envs(env.iter().copied())
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.as_bytes()).await.unwrap();
    drop(input);
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("jobfleet did not finish within 60 s")
        .unwrap();
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into(),
        stderr: String::from_utf8_lossy(&out.stderr).into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_trigger_wait_and_follow_a_live_log() {
    let (app, dir, agent, g) = with_agent("cli-e2e", &[]).await;
    let config = dir.path().join("cli");
    let cli = |args: &'static [&'static str]| jobfleet(&config, &[], args, "");

    // Logging in keeps URL and token, readable by the user alone.
    let out = jobfleet(
        &config,
        &[],
        &["login", &app.base, "-u", "admin", "--password-stdin"],
        &format!("{ADMIN_PASSWORD}\n"),
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("logged in to"), "{}", out.stdout);
    let kept = config.join("login.toml");
    let mode = std::fs::metadata(&kept).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the login file must be private");
    let me = cli(&["whoami", "-o", "json"]).await.json();
    assert_eq!(
        (me["name"].as_str(), me["role"].as_str()),
        (Some("admin"), Some("admin"))
    );

    let slow = app
        .job_from(g, json!({"name": "slow-lines", "handler": {"type": "shell", "command": "for i in 1 2 3 4; do echo line $i; sleep 0.5; done"}}))
        .await;
    let failing = app
        .job_from(
            g,
            json!({"name": "fails", "handler": {"type": "shell", "command": "echo \"bad:$1\"; exit 3"}}),
        )
        .await;

    // A table for people, the API's page for scripts.
    let table = cli(&["jobs", "list", "--group", "cli-e2e"]).await;
    assert_eq!(table.code, 0, "{}", table.stderr);
    let lines: Vec<&str> = table.stdout.lines().collect();
    assert!(lines[0].starts_with("ID  GROUP  NAME"), "{}", table.stdout);
    assert_eq!(lines.len(), 3, "{}", table.stdout);
    let page = cli(&["jobs", "list", "-o", "json"]).await.json();
    assert_eq!(page["total"], 2);
    let names: Vec<&str> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"slow-lines") && names.contains(&"fails"));

    // Trigger by name, follow the log while the run writes it: every line, in order, and the
    // command ends with the run.
    let run = cli(&["jobs", "trigger", "slow-lines", "-o", "json"])
        .await
        .json();
    assert_eq!(run["job_id"], slow);
    let run_id = run["id"].as_i64().unwrap().to_string();
    let started = Instant::now();
    let follow = jobfleet(&config, &[], &["runs", "logs", "-f", &run_id], "").await;
    assert_eq!(follow.code, 0, "{}", follow.stderr);
    assert_eq!(follow.stdout, "line 1\nline 2\nline 3\nline 4\n");
    assert!(
        started.elapsed() >= Duration::from_millis(1_000),
        "-f returned before the run had written its lines"
    );
    let done = jobfleet(&config, &[], &["runs", "get", &run_id, "-o", "json"], "")
        .await
        .json();
    assert_eq!(
        done["status"], "succeeded",
        "the log ended with the run: {done}"
    );

    // --wait: exit 0 for a success, 7 for a failure, the final run in JSON either way.
    let ok = cli(&["jobs", "trigger", "slow-lines", "--wait", "-o", "json"]).await;
    assert_eq!(
        (ok.code, ok.json()["status"].as_str()),
        (0, Some("succeeded"))
    );
    let bad = cli(&["jobs", "trigger", "fails", "--wait", "-o", "json"]).await;
    assert_eq!(bad.code, 7, "{}", bad.stderr);
    assert_eq!(bad.json()["exit_code"], 3);
    assert!(bad.stderr.contains("ended failed"), "{}", bad.stderr);
    let failed_id = bad.json()["id"].as_i64().unwrap().to_string();
    assert_eq!(
        jobfleet(&config, &[], &["runs", "wait", &failed_id], "")
            .await
            .code,
        7
    );
    let log = jobfleet(&config, &[], &["runs", "logs", &failed_id], "").await;
    assert_eq!(log.stdout, "bad:\n");

    // A retry joins the failed run's chain, here with other params.
    let retry = jobfleet(
        &config,
        &[],
        &[
            "runs", "retry", &failed_id, "--params", "again", "--wait", "-o", "json",
        ],
        "",
    )
    .await;
    assert_eq!(retry.code, 7, "{}", retry.stderr);
    let retried = retry.json();
    assert_eq!(
        (
            retried["first_run_id"].as_i64(),
            retried["attempt"].as_i64()
        ),
        (failed_id.parse().ok(), Some(2)),
        "{retried}"
    );
    let retried_id = retried["id"].as_i64().unwrap().to_string();
    let log = jobfleet(&config, &[], &["runs", "logs", &retried_id], "").await;
    assert_eq!(log.stdout, "bad:again\n");

    let runs = cli(&["runs", "list", "--job", "slow-lines", "-o", "json"])
        .await
        .json();
    assert_eq!(runs["total"], 2);
    let failed = cli(&["runs", "list", "--status", "failed", "-o", "json"])
        .await
        .json();
    assert_eq!(failed["total"], 2);
    assert_eq!(failed["items"][0]["job_id"], failing);

    // Kill a live run from the command line.
    let long = app
        .job_from(
            g,
            json!({"name": "long", "handler": {"type": "shell", "command": "sleep 30"}}),
        )
        .await;
    let run = app.trigger(long, json!({})).await;
    let long_id = run["id"].as_i64().unwrap().to_string();
    // A run still going is not retried.
    let early = jobfleet(&config, &[], &["runs", "retry", &long_id], "").await;
    assert_eq!(early.code, 5, "{}", early.stderr);
    assert!(early.stderr.contains("still running"), "{}", early.stderr);
    let kill = jobfleet(&config, &[], &["runs", "kill", &long_id], "").await;
    assert_eq!(kill.code, 0, "{}", kill.stderr);
    let killed = jobfleet(
        &config,
        &[],
        &["runs", "wait", &long_id, "--timeout", "30", "-o", "json"],
        "",
    )
    .await;
    assert_eq!(
        (killed.code, killed.json()["status"].as_str()),
        (7, Some("killed"))
    );

    // Agents and groups.
    let agents = cli(&["agents", "list", "-o", "json"]).await.json();
    assert_eq!(agents["items"][0]["address"], agent.address.as_str());
    assert_eq!(agents["total"], 1);
    let table = cli(&["agents", "list", "--group", "cli-e2e"]).await.stdout;
    assert!(
        table.contains(&agent.address) && table.contains("live"),
        "{table}"
    );
    let group = cli(&["groups", "get", "cli-e2e", "-o", "json"])
        .await
        .json();
    assert_eq!(group["id"], g);

    // Disable, enable, delete: the admin's state follows.
    assert_eq!(cli(&["jobs", "disable", "fails"]).await.code, 0);
    assert_eq!(
        app.get(&format!("/api/v1/jobs/{failing}"), &app.admin)
            .await
            .body["enabled"],
        false
    );
    assert_eq!(cli(&["jobs", "enable", "fails"]).await.code, 0);
    assert_eq!(
        app.get(&format!("/api/v1/jobs/{failing}"), &app.admin)
            .await
            .body["enabled"],
        true
    );
    assert_eq!(cli(&["jobs", "delete", "long"]).await.code, 0);
    assert_eq!(cli(&["jobs", "get", "long"]).await.code, 4);

    // Logged out, nothing is sent.
    assert_eq!(cli(&["logout"]).await.code, 0);
    assert!(!kept.exists());
    let out = cli(&["jobs", "list"]).await;
    assert_eq!(out.code, 3, "{}", out.stderr);
    assert!(out.stderr.contains("jobfleet login"), "{}", out.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_a_clear_error_and_its_exit_code() {
    let app = TestApp::sqlite().await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("cli");
    let g = app.group("cli-bad").await;
    let other = app.group("cli-other").await;
    app.job(&app.admin, g, "same-name").await;
    app.job(&app.admin, other, "same-name").await;
    let (_, viewer) = app.user("cli-viewer", "viewer", &[g]).await;
    let admin_env = [
        ("JOBFLEET_URL", app.base.as_str()),
        ("JOBFLEET_TOKEN", app.admin.as_str()),
    ];
    let run = |env: &'static [(&'static str, &'static str)], args: &'static [&'static str]| {
        jobfleet(&config, env, args, "")
    };

    // A wrong password is refused and nothing is kept.
    let out = jobfleet(
        &config,
        &[],
        &["login", &app.base, "-u", "admin", "--password-stdin"],
        "not-the-password\n",
    )
    .await;
    assert_eq!(out.code, 3, "{}", out.stderr);
    assert!(!config.join("login.toml").exists());
    // So is a made-up token, checked before it is kept.
    let out = jobfleet(
        &config,
        &[],
        &["login", &app.base, "--token-stdin"],
        "jft_madeup\n",
    )
    .await;
    assert_eq!(out.code, 3, "{}", out.stderr);
    assert!(!config.join("login.toml").exists());
    // Nothing on stdin.
    let out = jobfleet(
        &config,
        &[],
        &["login", &app.base, "-u", "admin", "--password-stdin"],
        "",
    )
    .await;
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr.contains("no password on stdin"),
        "{}",
        out.stderr
    );

    // Not a URL, not http, nobody listening.
    let out = run(
        &[("JOBFLEET_URL", "ftp://x"), ("JOBFLEET_TOKEN", "t")],
        &["jobs", "list"],
    )
    .await;
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("http:// or https://"), "{}", out.stderr);
    let out = run(
        &[
            ("JOBFLEET_URL", "http://127.0.0.1:9"),
            ("JOBFLEET_TOKEN", "t"),
        ],
        &["jobs", "list"],
    )
    .await;
    assert_eq!(out.code, 6, "{}", out.stderr);
    assert!(
        out.stderr.contains("cannot reach http://127.0.0.1:9"),
        "{}",
        out.stderr
    );

    // Bad flags are clap's usage errors.
    let out = jobfleet(&config, &admin_env, &["jobs", "list", "--limit", "0"], "").await;
    assert_eq!(out.code, 2, "{}", out.stderr);
    let out = jobfleet(&config, &admin_env, &["runs", "get", "seven"], "").await;
    assert_eq!(out.code, 2, "{}", out.stderr);

    // The admin's own refusals keep its message.
    let out = jobfleet(
        &config,
        &admin_env,
        &["runs", "list", "--status", "bogus"],
        "",
    )
    .await;
    assert_eq!(out.code, 5, "{}", out.stderr);
    assert!(
        out.stderr.contains("status: unknown value `bogus`"),
        "{}",
        out.stderr
    );
    let out = jobfleet(&config, &admin_env, &["runs", "get", "999999"], "").await;
    assert_eq!(out.code, 4, "{}", out.stderr);
    let out = jobfleet(&config, &admin_env, &["jobs", "trigger", "no-such-job"], "").await;
    assert_eq!(out.code, 4, "{}", out.stderr);
    assert!(
        out.stderr.contains("no job named `no-such-job`"),
        "{}",
        out.stderr
    );
    // A name in two groups needs the group.
    let out = jobfleet(&config, &admin_env, &["jobs", "get", "same-name"], "").await;
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("--group"), "{}", out.stderr);
    let out = jobfleet(
        &config,
        &admin_env,
        &[
            "jobs",
            "get",
            "same-name",
            "--group",
            "cli-other",
            "-o",
            "json",
        ],
        "",
    )
    .await;
    assert_eq!(
        (out.code, out.json()["group_id"].as_i64()),
        (0, Some(other))
    );
    let out = jobfleet(
        &config,
        &admin_env,
        &["jobs", "list", "--group", "no-group"],
        "",
    )
    .await;
    assert_eq!(out.code, 4, "{}", out.stderr);

    // A viewer may look, not trigger; a bad token is told to log in again.
    let viewer_env = [
        ("JOBFLEET_URL", app.base.as_str()),
        ("JOBFLEET_TOKEN", viewer.as_str()),
    ];
    let out = jobfleet(&config, &viewer_env, &["jobs", "list", "-o", "json"], "").await;
    assert_eq!((out.code, out.json()["total"].as_i64()), (0, Some(1)));
    let out = jobfleet(&config, &viewer_env, &["jobs", "trigger", "same-name"], "").await;
    assert_eq!(out.code, 3, "{}", out.stderr);
    let out = jobfleet(
        &config,
        &[
            ("JOBFLEET_URL", app.base.as_str()),
            ("JOBFLEET_TOKEN", "garbage"),
        ],
        &["jobs", "list"],
        "",
    )
    .await;
    assert_eq!(out.code, 3, "{}", out.stderr);
    assert!(out.stderr.contains("jobfleet login"), "{}", out.stderr);

    // A kept login is never sent to another admin named on the command line.
    let out = jobfleet(
        &config,
        &[],
        &["login", &app.base, "-u", "admin", "--password-stdin"],
        &format!("{ADMIN_PASSWORD}\n"),
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let out = jobfleet(
        &config,
        &[],
        &["jobs", "list", "--url", "http://127.0.0.1:9"],
        "",
    )
    .await;
    assert_eq!(out.code, 3, "{}", out.stderr);
    // A broken login file names itself.
    std::fs::write(config.join("login.toml"), "url = 3").unwrap();
    let out = run(&[], &["jobs", "list"]).await;
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(out.stderr.contains("login.toml"), "{}", out.stderr);

    // Completions come from the same definition.
    let out = run(&[], &["completions", "bash"]).await;
    assert_eq!(out.code, 0);
    assert!(out.stdout.contains("jobfleet") && out.stdout.contains("trigger"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drained_agent_gets_nothing_new_while_its_run_finishes() {
    let (app, dir, first, g) = with_agent("cli-drain", &[]).await;
    let second = crate::support::AgentProc::start_with(
        &app.base,
        "cli-drain",
        &dir.path().join("agent-2"),
        &[],
    );
    app.wait_for_agent(&second.address).await;
    let env = [
        ("JOBFLEET_URL", app.base.as_str()),
        ("JOBFLEET_TOKEN", app.admin.as_str()),
    ];
    let config = dir.path().join("cli");
    let job = app
        .job_from(g, json!({"name": "spread", "routing": "round_robin", "handler": {"type": "shell", "command": "sleep 1; echo done"}}))
        .await;
    let agent_of = |run: &Value| run["agent"].as_str().unwrap_or_default().to_owned();

    // A run is going on the first agent when it is drained.
    let mut held = app.trigger(job, json!({"address": first.address})).await;
    assert_eq!(agent_of(&held), first.address);
    let out = jobfleet(
        &config,
        &env,
        &["agents", "drain", &first.address, "-o", "json"],
        "",
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.json()["drained_ms"].is_i64(), "{}", out.stdout);
    let listed = jobfleet(&config, &env, &["agents", "list"], "")
        .await
        .stdout;
    assert!(
        listed
            .lines()
            .any(|l| l.contains(&first.address) && l.contains(" yes ")),
        "{listed}"
    );
    // Filters: the drained one alone; a bad status is refused naming it.
    let drained_only = jobfleet(
        &config,
        &env,
        &["agents", "list", "--status", "drained", "-o", "json"],
        "",
    )
    .await
    .json();
    assert_eq!(drained_only["total"], 1, "{drained_only}");
    assert_eq!(drained_only["items"][0]["address"], first.address.as_str());
    let sorted = jobfleet(
        &config,
        &env,
        &[
            "agents", "list", "--sort", "address", "--desc", "--limit", "1", "-o", "json",
        ],
        "",
    )
    .await
    .json();
    assert_eq!(sorted["items"].as_array().unwrap().len(), 1, "{sorted}");
    assert!(sorted["total"].as_i64().unwrap() >= 2, "{sorted}");
    let bad = jobfleet(&config, &env, &["agents", "list", "--status", "alive"], "").await;
    assert_eq!(bad.code, 5, "{}", bad.stderr);
    assert!(bad.stderr.contains("status"), "{}", bad.stderr);
    let summary = jobfleet(&config, &env, &["agents", "summary"], "").await;
    assert_eq!(summary.code, 0, "{}", summary.stderr);
    assert!(summary.stdout.contains("1 drained"), "{}", summary.stdout);
    let summary = jobfleet(&config, &env, &["agents", "summary", "-o", "json"], "")
        .await
        .json();
    assert_eq!(summary["drained"], 1, "{summary}");

    // Nothing new reaches it, by routing or by name; the other agent takes every run.
    for _ in 0..4 {
        let run = app.trigger(job, json!({})).await;
        assert_eq!(agent_of(&run), second.address, "{run}");
    }
    let r = app
        .post(
            &format!("/api/v1/jobs/{job}/trigger"),
            &app.admin,
            json!({"address": first.address}),
        )
        .await;
    assert_eq!(
        r.status,
        reqwest::StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        r.body
    );

    // The run it held finishes and reports as usual; the agent stays registered and live.
    held = app
        .finished_run(held["id"].as_i64().unwrap(), Duration::from_secs(30))
        .await;
    assert_eq!(held["status"], "succeeded", "{held}");
    let agents = app.get("/api/v1/agents", &app.admin).await.body["items"].clone();
    let drained = agents
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["address"] == first.address.as_str())
        .unwrap();
    assert_eq!(
        (drained["live"].as_bool(), drained["drained_ms"].is_i64()),
        (Some(true), true)
    );

    // Only an admin drains; unknown agents are named.
    let (_, operator) = app.user("drain-operator", "operator", &[g]).await;
    let r = app
        .post(
            &format!("/api/v1/agents/{}/undrain", drained["id"]),
            &operator,
            json!({}),
        )
        .await;
    assert_eq!(r.status, reqwest::StatusCode::FORBIDDEN, "{}", r.body);
    let out = jobfleet(
        &config,
        &env,
        &["agents", "drain", "http://127.0.0.1:1/"],
        "",
    )
    .await;
    assert_eq!(out.code, 4, "{}", out.stderr);
    let out = jobfleet(&config, &env, &["agents", "drain", "999999"], "").await;
    assert_eq!(out.code, 4, "{}", out.stderr);

    // Back in service, it gets its turn again.
    let out = jobfleet(&config, &env, &["agents", "undrain", &first.address], "").await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let mut agents_used = std::collections::HashSet::new();
    for _ in 0..4 {
        agents_used.insert(agent_of(&app.trigger(job, json!({})).await));
    }
    assert!(agents_used.contains(&first.address), "{agents_used:?}");
    let audit = app
        .get("/api/v1/audit?object_type=agent", &app.admin)
        .await
        .body;
    let actions: Vec<&str> = audit["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert!(
        actions.contains(&"agent.drain") && actions.contains(&"agent.undrain"),
        "{actions:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_that_require_labels_run_only_on_agents_that_carry_them() {
    let (app, dir, plain, g) = with_agent("labels", &[]).await;
    let zone_a = crate::support::AgentProc::start_with(
        &app.base,
        "labels",
        &dir.path().join("agent-a"),
        &[("JOBFLEET_AGENT_LABELS", "zone=a")],
    );
    let zone_b_gpu = crate::support::AgentProc::start_with(
        &app.base,
        "labels",
        &dir.path().join("agent-b"),
        &[("JOBFLEET_AGENT_LABELS", "zone=b, gpu=true")],
    );
    app.wait_for_agent(&zone_a.address).await;
    app.wait_for_agent(&zone_b_gpu.address).await;

    // The agents' labels are shown as they said them.
    let env = [
        ("JOBFLEET_URL", app.base.as_str()),
        ("JOBFLEET_TOKEN", app.admin.as_str()),
    ];
    let agents = jobfleet(
        &dir.path().join("cli"),
        &env,
        &["agents", "list", "-o", "json"],
        "",
    )
    .await
    .json();
    let labels_of = |address: &str| {
        agents["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["address"] == address)
            .unwrap()["labels"]
            .clone()
    };
    assert_eq!(
        labels_of(&zone_b_gpu.address),
        json!({"gpu": "true", "zone": "b"})
    );
    assert_eq!(labels_of(&plain.address), json!({}));

    let agent_of = |run: &Value| run["agent"].as_str().unwrap_or_default().to_owned();
    let in_b = app
        .job_from(g, json!({"name": "zone-b", "routing": "round_robin", "agent_labels": {"zone": "b"}, "handler": {"type": "shell", "command": "true"}}))
        .await;
    let anywhere = app
        .job_from(g, json!({"name": "anywhere", "routing": "round_robin", "handler": {"type": "shell", "command": "true"}}))
        .await;
    let nowhere = app
        .job_from(g, json!({"name": "nowhere", "agent_labels": {"zone": "c"}, "handler": {"type": "shell", "command": "true"}}))
        .await;
    assert_eq!(
        app.get(&format!("/api/v1/jobs/{in_b}"), &app.admin)
            .await
            .body["agent_labels"],
        json!({"zone": "b"})
    );
    for _ in 0..4 {
        let run = app.trigger(in_b, json!({})).await;
        assert_eq!(agent_of(&run), zone_b_gpu.address, "{run}");
    }
    let mut used = std::collections::HashSet::new();
    for _ in 0..6 {
        used.insert(agent_of(&app.trigger(anywhere, json!({})).await));
    }
    assert_eq!(
        used.len(),
        3,
        "a job without labels runs on any agent: {used:?}"
    );
    // Naming an agent that lacks the labels is refused before anything runs.
    let r = app
        .post(
            &format!("/api/v1/jobs/{in_b}/trigger"),
            &app.admin,
            json!({"address": zone_a.address}),
        )
        .await;
    assert_eq!(
        r.status,
        reqwest::StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        r.body
    );
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("lacks labels this job requires (zone=b)"),
        "{}",
        r.body
    );
    let run = app.trigger(nowhere, json!({})).await;
    assert!(run["agent"].is_null(), "{run}");
    assert!(
        run["trigger_msg"]
            .as_str()
            .unwrap_or_default()
            .contains("has the labels zone=c"),
        "{run}"
    );

    // least_loaded places a job with a memory limit only where that much was free.
    let huge = app
        .job_from(g, json!({"name": "huge", "routing": "least_loaded", "limits": {"memory_mb": 4_194_304}, "handler": {"type": "shell", "command": "true"}}))
        .await;
    let run = app.trigger(huge, json!({})).await;
    assert!(run["agent"].is_null(), "{run}");
    assert!(
        run["trigger_msg"]
            .as_str()
            .unwrap_or_default()
            .contains("has the 4194304 MB free"),
        "{run}"
    );
    let small = app
        .job_from(g, json!({"name": "small", "routing": "least_loaded", "limits": {"memory_mb": 64}, "handler": {"type": "shell", "command": "true"}}))
        .await;
    assert!(!agent_of(&app.trigger(small, json!({})).await).is_empty());

    // Bad labels are refused by name, in the API and in the console's text form.
    for labels in [
        json!({"zone": "a b"}),
        json!({"-x": "1"}),
        json!(["zone=a"]),
    ] {
        let mut body = TestApp::job_body(g, "bad-labels");
        body["agent_labels"] = labels.clone();
        let r = app.post("/api/v1/jobs", &app.admin, body).await;
        assert_eq!(
            r.status,
            reqwest::StatusCode::UNPROCESSABLE_ENTITY,
            "{labels}: {}",
            r.body
        );
    }
    let mut body = TestApp::job_body(g, "bad-labels");
    body["agent_labels"] = json!({"zone": "a b"});
    let r = app.post("/api/v1/jobs", &app.admin, body).await;
    assert_eq!(r.field(), Some("agent_labels"), "{}", r.body);
}

/// Jobs as code from the command line: export to a file, apply it (dry run, real, again as a
/// no-op), edit and prune, with the table and `-o json` answers and bad files refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_and_apply_keep_jobs_as_code() {
    let app = TestApp::sqlite().await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("cli");
    let env = [
        ("JOBFLEET_URL", app.base.as_str()),
        ("JOBFLEET_TOKEN", app.admin.as_str()),
    ];
    let cli = |args: Vec<String>| {
        let config = config.clone();
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            jobfleet(&config, &env, &args, "").await
        }
    };
    let g = app.group("etl").await;
    app.job_from(g, json!({"name": "extract", "schedule": {"type": "cron", "expr": "0 0 * * * ?", "timezone": "UTC"}, "handler": {"type": "script", "source": "echo extract", "interpreter": "bash"}}))
        .await;
    app.job_from(
        g,
        json!({"name": "load", "handler": {"type": "shell", "command": "echo load"}}),
    )
    .await;

    // Export to a file: YAML by default, every job with its script.
    let file = dir.path().join("etl.yaml");
    let out = cli(vec!["export".into(), "-g".into(), "etl".into()]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout.starts_with("kind: jobfleet.jobs"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("echo extract"), "{}", out.stdout);
    std::fs::write(&file, &out.stdout).unwrap();
    let path = file.to_str().unwrap().to_owned();

    // Applying it back changes nothing.
    let out = cli(vec!["apply".into(), "-f".into(), path.clone()]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(
        out.stdout, "0 created, 0 updated, 2 unchanged, 0 deleted\n",
        "{}",
        out.stderr
    );

    // Edited in the file: a new job, a changed schedule, `load` left out.
    let edited = out_of(&std::fs::read_to_string(&file).unwrap());
    std::fs::write(&file, &edited).unwrap();
    let dry = cli(vec![
        "apply".into(),
        "-f".into(),
        path.clone(),
        "--dry-run".into(),
        "--prune".into(),
    ])
    .await;
    assert_eq!(dry.code, 0, "{}", dry.stderr);
    let lines: Vec<&str> = dry.stdout.lines().collect();
    assert!(
        lines[0].starts_with("ACTION  KIND  GROUP  JOB"),
        "{}",
        dry.stdout
    );
    assert!(
        dry.stdout.contains("update  job   etl    extract") && dry.stdout.contains("schedule"),
        "{}",
        dry.stdout
    );
    assert!(
        dry.stdout.contains("create  job   etl    transform"),
        "{}",
        dry.stdout
    );
    assert!(
        dry.stdout.contains("delete  job   etl    load"),
        "{}",
        dry.stdout
    );
    assert!(
        dry.stdout.ends_with(
            "1 created, 1 updated, 0 unchanged, 1 deleted (dry run: nothing was written)\n"
        ),
        "{}",
        dry.stdout
    );
    let jobs = app.get("/api/v1/jobs", &app.admin).await.body;
    assert_eq!(jobs["total"], 2, "the dry run wrote nothing");

    // For real, as JSON (through `import`, the alias), then once more: a no-op.
    let real = cli(vec![
        "import".into(),
        "-f".into(),
        path.clone(),
        "--prune".into(),
        "-o".into(),
        "json".into(),
    ])
    .await;
    assert_eq!(real.code, 0, "{}", real.stderr);
    let report = real.json();
    assert_eq!(
        (&report["created"], &report["updated"], &report["deleted"]),
        (&json!(1), &json!(1), &json!(1))
    );
    let names: Vec<String> = app.get("/api/v1/jobs", &app.admin).await.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["extract", "transform"]);
    let again = cli(vec![
        "jobs".into(),
        "apply".into(),
        "-f".into(),
        path.clone(),
        "--prune".into(),
    ])
    .await;
    assert_eq!(
        again.stdout, "0 created, 0 updated, 2 unchanged, 0 deleted\n",
        "{}",
        again.stderr
    );

    // Bad files: missing, empty, not YAML, and a document the admin refuses (exit 5, field).
    let missing = cli(vec![
        "apply".into(),
        "-f".into(),
        "/nonexistent/x.yaml".into(),
    ])
    .await;
    assert_eq!(missing.code, 2, "{}", missing.stderr);
    let empty = dir.path().join("empty.yaml");
    std::fs::write(&empty, "  \n").unwrap();
    let out = cli(vec![
        "apply".into(),
        "-f".into(),
        empty.to_str().unwrap().into(),
    ])
    .await;
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("empty"), "{}", out.stderr);
    let broken = dir.path().join("broken.yaml");
    std::fs::write(&broken, "groups: [\n").unwrap();
    let out = cli(vec![
        "apply".into(),
        "-f".into(),
        broken.to_str().unwrap().into(),
    ])
    .await;
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr.contains("not readable as YAML"),
        "{}",
        out.stderr
    );
    let refused = dir.path().join("refused.yaml");
    std::fs::write(
        &refused,
        "kind: jobfleet.jobs\nversion: 1\ngroups:\n  - app_name: etl\n    jobs:\n      - {name: x, schedule: {type: cron, expr: nope}, handler: {type: shell, command: x}}\n",
    )
    .unwrap();
    let out = cli(vec![
        "apply".into(),
        "-f".into(),
        refused.to_str().unwrap().into(),
    ])
    .await;
    assert_eq!(out.code, 5, "{}", out.stderr);
    assert!(
        out.stderr.contains("groups[0].jobs[0].schedule.expr"),
        "{}",
        out.stderr
    );
    let out = cli(vec!["export".into(), "-g".into(), "nope".into()]).await;
    assert_eq!(out.code, 5, "{}", out.stderr);
}

/// The exported `etl` document edited as a person would: `extract` hourly at minute 30, a new
/// `transform` job, `load` gone.
fn out_of(exported: &str) -> String {
    let doc: Value = serde_yaml_ng::from_str(exported).unwrap();
    let mut doc = doc;
    let jobs = doc["groups"][0]["jobs"].as_array_mut().unwrap();
    jobs.retain(|j| j["name"] != "load");
    jobs[0]["schedule"]["expr"] = json!("0 30 * * * ?");
    jobs.push(json!({"name": "transform", "schedule": {"type": "none"}, "handler": {"type": "shell", "command": "echo transform"}}));
    serde_yaml_ng::to_string(&doc).unwrap()
}
