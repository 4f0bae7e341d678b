//! The real admin and real `jobfleet-agent` processes on loopback: registration, shell and
//! script jobs, limits, timeouts, kills, block strategies, and results that survive outages.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::{AgentProc, TestApp, pid_alive, wait_for, with_agent};

const RUN_WITHIN: Duration = Duration::from_secs(30);

fn cgroups_enforced(run: &Value) -> bool {
    run["usage"]["limits_mode"]
        .as_str()
        .is_some_and(|m| m.starts_with("cgroup"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shell_and_script_jobs_run_with_their_context_and_log() {
    let (app, _dir, agent, g) = with_agent("e2e-basic", &[]).await;
    let agents = app.get("/api/v1/agents", &app.admin).await.body["items"].clone();
    let me = &agents.as_array().unwrap()[0];
    assert!(
        me["metrics"]["memTotalMb"].as_u64().unwrap() > 0,
        "heartbeats carry host metrics: {me}"
    );
    assert_eq!(me["version"], env!("CARGO_PKG_VERSION"));

    let shell = app
        .job_from(g, json!({"name": "shell", "params": "--full", "handler": {"type": "shell", "command": "echo \"run=$JOBFLEET_RUN_ID job=$JOBFLEET_JOB_ID params=$JOBFLEET_PARAMS shard=$JOBFLEET_SHARD_INDEX/$JOBFLEET_SHARD_TOTAL attempt=$JOBFLEET_ATTEMPT arg1=$1\""}}))
        .await;
    let run = app.trigger(shell, json!({})).await;
    // Succeeded already, should the answer be read after a slow machine's linger.
    assert!(
        matches!(run["status"].as_str(), Some("running" | "succeeded"))
            && run["agent"].as_str() == Some(agent.address.as_str()),
        "{run}"
    );
    let id = run["id"].as_i64().unwrap();
    let done = app.finished_run(id, RUN_WITHIN).await;
    assert_eq!(
        (done["status"].as_str(), done["exit_code"].as_i64()),
        (Some("succeeded"), Some(0)),
        "{done}"
    );
    assert!(done["usage"]["cpu_ms"].is_number() && done["started_ms"].is_number());
    assert_eq!(
        app.full_log(id).await,
        format!("run={id} job={shell} params=--full shard=0/1 attempt=1 arg1=--full\n")
    );
    // The run answer said which agent process took the run (a string content holding its
    // JSON, as XXL-Job admins read a run's content), and the run keeps it.
    let (instance, seq) = app
        .state
        .db
        .run(move |conn| {
            use diesel::prelude::*;
            use jobfleet_admin::db::schema::job_run;
            Ok(job_run::table
                .find(id)
                .select((job_run::agent_instance, job_run::agent_seq))
                .first::<(Option<String>, Option<i64>)>(conn)?)
        })
        .await
        .unwrap();
    assert!(
        instance.is_some_and(|i| !i.is_empty()) && seq.is_some(),
        "the acceptance was stored"
    );

    let bash = app.job_from(g, json!({"name": "bash", "handler": {"type": "script", "source": "#!/bin/bash\nfor i in 1 2 3; do echo line $i; done\necho \"args: $1 $2 $3\""}})).await;
    let id = app.trigger(bash, json!({"params": "custom"})).await["id"]
        .as_i64()
        .unwrap();
    assert_eq!(
        app.finished_run(id, RUN_WITHIN).await["status"],
        "succeeded"
    );
    assert_eq!(
        app.full_log(id).await,
        "line 1\nline 2\nline 3\nargs: custom 0 1\n"
    );

    let python = app.job_from(g, json!({"name": "python", "handler": {"type": "script", "interpreter": "python3", "source": "import os, sys\nprint('py', sys.argv[1], os.environ['JOBFLEET_RUN_ID'])\nsys.exit(3)"}})).await;
    let id = app.trigger(python, json!({"params": "p"})).await["id"]
        .as_i64()
        .unwrap();
    let done = app.finished_run(id, RUN_WITHIN).await;
    assert_eq!(
        (done["status"].as_str(), done["exit_code"].as_i64()),
        (Some("failed"), Some(3))
    );
    assert_eq!(app.full_log(id).await, format!("py p {id}\n"));

    // Perl travels as jobfleet's own glue type; a jobfleet agent runs it with perl.
    let perl = app.job_from(g, json!({"name": "perl", "handler": {"type": "script", "interpreter": "perl", "source": "print \"pl $ARGV[0] $ENV{JOBFLEET_RUN_ID}\\n\";"}})).await;
    let run = app.trigger(perl, json!({"params": "q"})).await;
    let done = app
        .finished_run(run["id"].as_i64().unwrap(), RUN_WITHIN)
        .await;
    let log = app.full_log(run["id"].as_i64().unwrap()).await;
    assert_eq!(
        (done["status"].as_str(), log),
        (Some("succeeded"), format!("pl q {}\n", run["id"]))
    );

    // pwsh is not installed on these machines: a clear failed result, not a hang.
    let pwsh = app.job_from(g, json!({"name": "pwsh", "handler": {"type": "script", "interpreter": "pwsh", "source": "Write-Output hi"}})).await;
    let id = app.trigger(pwsh, json!({})).await["id"].as_i64().unwrap();
    let done = app.finished_run(id, RUN_WITHIN).await;
    assert_eq!(done["status"], "failed");
    assert!(
        done["handle_msg"]
            .as_str()
            .unwrap()
            .contains("`pwsh` is not installed"),
        "{done}"
    );
    assert!(
        std::fs::read_dir(agent.data_dir.join("scripts"))
            .unwrap()
            .next()
            .is_none(),
        "script files are removed after runs"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_are_enforced_and_reported() {
    let (app, _dir, _agent, g) = with_agent("e2e-limits", &[]).await;
    let oom = app
        .job_from(g, json!({"name": "oom", "limits": {"memory_mb": 64}, "handler": {"type": "script", "interpreter": "python3", "source": "x = bytearray(300 * 1024 * 1024)\nprint('allocated')"}}))
        .await;
    let id = app.trigger(oom, json!({})).await["id"].as_i64().unwrap();
    let done = app.finished_run(id, RUN_WITHIN).await;
    assert_eq!(done["status"], "failed", "{done}");
    assert!(!app.full_log(id).await.contains("allocated"));
    if cgroups_enforced(&done) {
        assert_eq!(done["usage"]["oom_killed"], true, "{done}");
        assert!(
            done["usage"]["max_rss_kb"].as_i64().unwrap() <= 64 * 1024 + 1024,
            "{done}"
        );
    }

    let forks = app
        .job_from(g, json!({"name": "forks", "limits": {"pids": 8}, "handler": {"type": "shell", "command": "n=0; for i in $(seq 1 40); do sleep 3 & n=$((n+1)); done; wait; echo forked $n"}}))
        .await;
    let id = app.trigger(forks, json!({})).await["id"].as_i64().unwrap();
    let done = app.finished_run(id, RUN_WITHIN).await;
    let log = app.full_log(id).await;
    if cgroups_enforced(&done) {
        assert!(
            log.contains("fork") || log.contains("Resource temporarily unavailable"),
            "the fork loop hit the pids limit: {log}"
        );
    }

    let busy = app
        .job_from(g, json!({"name": "busy", "limits": {"cpu": 0.2}, "handler": {"type": "script", "interpreter": "python3", "source": "import time\nt = time.time()\nwhile time.time() - t < 2.0:\n    pass\nprint('spun')"}}))
        .await;
    let id = app.trigger(busy, json!({})).await["id"].as_i64().unwrap();
    let done = app.finished_run(id, RUN_WITHIN).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    if cgroups_enforced(&done) {
        let cpu_ms = done["usage"]["cpu_ms"].as_i64().unwrap();
        let wall_ms = done["finished_ms"].as_i64().unwrap() - done["started_ms"].as_i64().unwrap();
        // 20% of a core; unthrottled it would be close to 100%. Generous bound for busy machines.
        assert!(
            cpu_ms * 100 < wall_ms * 50,
            "cpu {cpu_ms} ms over {wall_ms} ms wall is not throttled"
        );
    }
}

/// A run's exit is looked for when its output ends: a leader that closes its output and goes
/// on is still waited for to its exit, and one whose output a background process keeps open is
/// still seen to exit, its leftover ended with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_is_waited_for_to_its_exit_whenever_its_output_ends() {
    let (app, _dir, _agent, g) = with_agent("e2e-output-end", &[]).await;
    let closes_early = app
        .job_from(
            g,
            json!({"name": "closes-early", "handler": {"type": "shell",
            "command": "echo before; exec >/dev/null 2>&1; sleep 5; exit 7"}}),
        )
        .await;
    let quick = app
        .job_from(
            g,
            json!({"name": "quick", "handler": {"type": "shell",
            "command": "echo quick"}}),
        )
        .await;
    let id = app.trigger(closes_early, json!({})).await["id"]
        .as_i64()
        .unwrap();
    // Another run goes from start to result meanwhile: looking for the first one's exit when its
    // output ended did not hold up the agent's thread until that exit.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let quick_id = app.trigger(quick, json!({})).await["id"].as_i64().unwrap();
    let quick_done = app.finished_run(quick_id, RUN_WITHIN).await;
    let done = app.finished_run(id, RUN_WITHIN).await;
    assert_eq!(
        (done["status"].as_str(), done["exit_code"].as_i64()),
        (Some("failed"), Some(7)),
        "{done}"
    );
    let finished = done["finished_ms"].as_i64().unwrap();
    let wall_ms = finished - done["started_ms"].as_i64().unwrap();
    assert!(
        wall_ms >= 5_000,
        "ended at its exit, not its output's end: {done}"
    );
    assert_eq!(app.full_log(id).await, "before\n");
    assert_eq!(quick_done["status"], "succeeded", "{quick_done}");
    assert!(
        // A margin of seconds: the quick run's whole way, from trigger to result, fits in it
        // on a loaded machine too.
        quick_done["finished_ms"].as_i64().unwrap() < finished - 3_000,
        "the other run was not held up: {quick_done} {done}"
    );

    let kept_open = app
        .job_from(
            g,
            json!({"name": "kept-open", "handler": {"type": "shell",
            "command": "sleep 30 & echo left"}}),
        )
        .await;
    let id = app.trigger(kept_open, json!({})).await["id"]
        .as_i64()
        .unwrap();
    let done = app.finished_run(id, RUN_WITHIN).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    let wall_ms = done["finished_ms"].as_i64().unwrap() - done["started_ms"].as_i64().unwrap();
    assert!(
        wall_ms < 10_000,
        "ended at its leader's exit, not the sleep's: {done}"
    );
    let log = app.full_log(id).await;
    assert!(
        log.starts_with("left\n") && log.contains("left running after it finished"),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeouts_and_kills_stop_the_whole_tree() {
    let (app, _dir, _agent, g) = with_agent("e2e-kill", &[]).await;
    let tree = "sleep 300 & echo grandchild $!; sleep 300";
    let slow = app
        .job_from(
            g,
            json!({"name": "slow", "timeout_s": 1, "handler": {"type": "shell", "command": tree}}),
        )
        .await;
    let id = app.trigger(slow, json!({})).await["id"].as_i64().unwrap();
    let done = app.finished_run(id, RUN_WITHIN).await;
    assert_eq!(done["status"], "timed_out", "{done}");
    let log = app.full_log(id).await;
    let grandchild: i64 = log
        .lines()
        .find_map(|l| l.strip_prefix("grandchild "))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    wait_for(Duration::from_secs(5), "the grandchild to die", || async {
        (!pid_alive(grandchild)).then_some(())
    })
    .await;

    let endless = app
        .job_from(
            g,
            json!({"name": "endless", "handler": {"type": "shell", "command": tree}}),
        )
        .await;
    let id = app.trigger(endless, json!({})).await["id"]
        .as_i64()
        .unwrap();
    let grandchild: i64 = wait_for(
        Duration::from_secs(10),
        "the grandchild to start",
        || async {
            let log = app.full_log(id).await;
            log.lines()
                .find_map(|l| l.strip_prefix("grandchild "))
                .and_then(|p| p.trim().parse().ok())
        },
    )
    .await;
    let killed = app.kill_run(id).await;
    assert_eq!(killed.status, StatusCode::ACCEPTED, "{}", killed.body);
    assert_eq!(app.finished_run(id, RUN_WITHIN).await["status"], "killed");
    wait_for(Duration::from_secs(5), "the grandchild to die", || async {
        (!pid_alive(grandchild)).then_some(())
    })
    .await;
    let again = app.kill_run(id).await;
    assert_eq!(
        again.status,
        StatusCode::CONFLICT,
        "a finished run cannot be killed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn block_strategies_serial_discard_and_cover() {
    let (app, dir, _agent, g) = with_agent("e2e-block", &[]).await;
    let body = |name: &str, strategy: &str| json!({"name": name, "block_strategy": strategy, "handler": {"type": "shell", "command": "echo start; sleep 1; echo end"}});
    // A first run that must still be going when the second trigger arrives waits for the test
    // to say go (for at most 30 s, so that a failed test leaves nothing behind): a fixed sleep
    // could end first on a loaded machine.
    let go = |name: &str| dir.path().join(format!("go-{name}"));
    let held = |name: &str, strategy: &str| {
        let command = format!(
            "echo start; for i in $(seq 600); do [ -e {} ] && break; sleep 0.05; done; echo end",
            go(name).display()
        );
        json!({"name": name, "block_strategy": strategy, "handler": {"type": "shell", "command": command}})
    };

    let serial = app.job_from(g, body("serial", "serial")).await;
    let first = app.trigger(serial, json!({})).await["id"].as_i64().unwrap();
    let second = app.trigger(serial, json!({})).await;
    assert_eq!(
        second["status"], "running",
        "queued runs are accepted: {second}"
    );
    let (a, b) = (
        app.finished_run(first, RUN_WITHIN).await,
        app.finished_run(second["id"].as_i64().unwrap(), RUN_WITHIN)
            .await,
    );
    assert_eq!(
        (a["status"].as_str(), b["status"].as_str()),
        (Some("succeeded"), Some("succeeded"))
    );
    assert!(
        b["started_ms"].as_i64().unwrap() >= a["finished_ms"].as_i64().unwrap() - 50,
        "serial runs do not overlap: {a} {b}"
    );

    let discard = app.job_from(g, held("discard", "discard_later")).await;
    let first = app.trigger(discard, json!({})).await["id"]
        .as_i64()
        .unwrap();
    let rejected = app.trigger(discard, json!({})).await;
    assert_eq!(rejected["status"], "failed", "{rejected}");
    assert!(
        rejected["trigger_msg"]
            .as_str()
            .unwrap()
            .contains("Discard Later"),
        "{rejected}"
    );
    std::fs::write(go("discard"), "").unwrap();
    assert_eq!(
        app.finished_run(first, RUN_WITHIN).await["status"],
        "succeeded"
    );

    let cover = app.job_from(g, held("cover", "cover_early")).await;
    let first = app.trigger(cover, json!({})).await["id"].as_i64().unwrap();
    wait_for(
        Duration::from_secs(10),
        "the first run to start",
        || async { app.full_log(first).await.contains("start").then_some(()) },
    )
    .await;
    let second = app.trigger(cover, json!({})).await["id"].as_i64().unwrap();
    assert_eq!(
        app.finished_run(first, RUN_WITHIN).await["status"],
        "killed"
    );
    std::fs::write(go("cover"), "").unwrap();
    assert_eq!(
        app.finished_run(second, RUN_WITHIN).await["status"],
        "succeeded"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_survive_an_admin_outage_and_an_agent_crash() {
    let (mut app, _dir, mut agent, g) = with_agent("e2e-durable", &[]).await;
    let job = app.job_from(g, json!({"name": "short", "handler": {"type": "shell", "command": "sleep 1; echo finished"}})).await;

    // The admin goes away while the run finishes; the result waits in the spool.
    let id = app.trigger(job, json!({})).await["id"].as_i64().unwrap();
    app.stop_server().await;
    wait_for(
        Duration::from_secs(15),
        "the result to be spooled",
        || async { (agent.spool_files() > 0).then_some(()) },
    )
    .await;
    // Failed deliveries while the admin is down: the one as the run ended and a retry (the
    // admin was up until now, so every one the agent logged is of this outage).
    wait_for(
        Duration::from_secs(15),
        "failed deliveries to the stopped admin",
        || async { (agent.logged("Results not delivered yet") >= 2).then_some(()) },
    )
    .await;
    app.restart_server().await;
    assert_eq!(
        app.finished_run(id, RUN_WITHIN).await["status"],
        "succeeded"
    );
    wait_for(Duration::from_secs(10), "the spool to drain", || async {
        (agent.spool_files() == 0).then_some(())
    })
    .await;

    // The agent is killed -9 after the run ended but before it could report, then restarted.
    let id = app.trigger(job, json!({})).await["id"].as_i64().unwrap();
    app.stop_server().await;
    wait_for(
        Duration::from_secs(15),
        "the result to be spooled",
        || async { (agent.spool_files() > 0).then_some(()) },
    )
    .await;
    agent.kill9();
    agent.restart();
    app.restart_server().await;
    let done = app.finished_run(id, RUN_WITHIN).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    wait_for(Duration::from_secs(10), "the spool to drain", || async {
        (agent.spool_files() == 0).then_some(())
    })
    .await;
    assert_eq!(app.full_log(id).await, "finished\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_first_admin_fails_over_to_the_second() {
    let app = TestApp::sqlite().await;
    let g = app.group("e2e-failover").await;
    let dead = format!("http://127.0.0.1:{}", crate::support::free_port());
    let dir = tempfile::tempdir().unwrap();
    let agent = AgentProc::start(
        &format!("{dead},{}", app.base),
        "e2e-failover",
        &dir.path().join("agent"),
    );
    app.wait_for_agent(&agent.address).await;
    let job = app
        .job_from(
            g,
            json!({"name": "via second", "handler": {"type": "shell", "command": "echo ok"}}),
        )
        .await;
    let id = app.trigger(job, json!({})).await["id"].as_i64().unwrap();
    assert_eq!(
        app.finished_run(id, RUN_WITHIN).await["status"],
        "succeeded"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_the_running_job_finish_and_deregisters() {
    let (app, _dir, mut agent, g) = with_agent("e2e-term", &[]).await;
    let job = app.job_from(g, json!({"name": "finishing", "handler": {"type": "shell", "command": "sleep 2; echo graceful"}})).await;
    let id = app.trigger(job, json!({})).await["id"].as_i64().unwrap();
    wait_for(Duration::from_secs(10), "the run to start", || async {
        (app.run(id).await["started_ms"].is_number() || agent.spool_files() == 0).then_some(())
    })
    .await;
    let queued = app.trigger(job, json!({})).await["id"].as_i64().unwrap();
    let status = tokio::task::spawn_blocking(move || {
        let status = agent.terminate();
        (status, agent)
    })
    .await
    .unwrap();
    let (status, agent) = status;
    assert!(status.success(), "{status:?}");
    // Both runs' `F` lines, held back for company, are on disk once the agent stopped
    // (`Journal::flush`): its next start finds them finished, not interrupted.
    let journal =
        std::fs::read_to_string(agent.data_dir.join(jobfleet_agent::journal::FILE)).unwrap();
    for run in [id, queued] {
        assert!(
            journal.lines().any(|line| line == format!("F {run}")),
            "run {run}: {journal}"
        );
    }
    let done = app.finished_run(id, RUN_WITHIN).await;
    assert_eq!(
        done["status"], "succeeded",
        "the running job finished within the grace period: {done}"
    );
    // Deregistered: no longer live at once; the row (key, approval) stays for the next start.
    let agents = app.get("/api/v1/agents", &app.admin).await.body["items"].clone();
    let agents = agents.as_array().unwrap();
    assert_eq!(agents.len(), 1, "{agents:?}");
    assert_eq!(agents[0]["live"], false, "deregistered: {agents:?}");
    // The run queued behind it never started; its result says so instead of vanishing.
    let dropped = app.finished_run(queued, RUN_WITHIN).await;
    assert_eq!(dropped["status"], "failed", "{dropped}");
    assert!(
        dropped["handle_msg"]
            .as_str()
            .unwrap()
            .contains("shut down"),
        "{dropped}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trigger_errors_are_clear() {
    let (app, _dir, agent, g) = with_agent("e2e-errors", &[]).await;
    let job = app
        .job_from(
            g,
            json!({"name": "x", "handler": {"type": "shell", "command": "true"}}),
        )
        .await;
    let r = app
        .post(
            &format!("/api/v1/jobs/{job}/trigger"),
            &app.admin,
            json!({"address": "http://10.9.9.9:1/"}),
        )
        .await;
    assert_eq!(
        (r.status, r.field()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("address"))
    );
    let r = app
        .post(
            &format!("/api/v1/jobs/{job}/trigger"),
            &app.admin,
            json!({"params": 5}),
        )
        .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    let r = app
        .raw(
            "POST",
            &format!("/api/v1/jobs/{job}/trigger"),
            &app.admin,
            "application/json",
            "{oops",
        )
        .await;
    assert_eq!(r.code(), "invalid_json");
    let r = app
        .post(
            &format!("/api/v1/jobs/{job}/trigger"),
            &app.admin,
            json!({"address": agent.address}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED);
    let (_, viewer) = app.user("viewer-e2e", "viewer", &[g]).await;
    assert_eq!(
        app.post(&format!("/api/v1/jobs/{job}/trigger"), &viewer, json!({}))
            .await
            .status,
        StatusCode::FORBIDDEN
    );
    let r = app.get("/api/v1/runs/1/log?from_line=0", &app.admin).await;
    assert_eq!(r.field(), Some("from_line"));
    // A group without live agents: the run is recorded as failed, with the reason.
    let empty = app.group("e2e-empty").await;
    let orphan = app
        .job_from(
            empty,
            json!({"name": "orphan", "handler": {"type": "shell", "command": "true"}}),
        )
        .await;
    let run = app.trigger(orphan, json!({})).await;
    assert_eq!(run["status"], "failed");
    assert!(
        run["trigger_msg"]
            .as_str()
            .unwrap()
            .contains("no live agent"),
        "{run}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_run_as_the_configured_user() {
    if !nix::unistd::geteuid().is_root() {
        return; // switching users needs root; CI runs as root
    }
    let app = TestApp::sqlite().await;
    let g = app.group("e2e-runas").await;
    let dir = tempfile::tempdir().unwrap();
    // The run-as user must be able to walk to the agent's folder, as on a real host.
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let agent = AgentProc::start_with(
        &app.base,
        "e2e-runas",
        &dir.path().join("agent"),
        &[("JOBFLEET_AGENT_RUN_AS", "nobody")],
    );
    app.wait_for_agent(&agent.address).await;
    let job = app
        .job_from(
            g,
            json!({"name": "whoami", "handler": {"type": "shell", "command": "id -un"}}),
        )
        .await;
    let id = app.trigger(job, json!({})).await["id"].as_i64().unwrap();
    assert_eq!(
        app.finished_run(id, RUN_WITHIN).await["status"],
        "succeeded"
    );
    assert_eq!(app.full_log(id).await, "nobody\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_cgroups_rlimits_hold_the_memory_limit() {
    let app = TestApp::sqlite().await;
    let g = app.group("e2e-rlimit").await;
    let dir = tempfile::tempdir().unwrap();
    let agent = AgentProc::start_with(
        &app.base,
        "e2e-rlimit",
        &dir.path().join("agent"),
        &[("JOBFLEET_AGENT_LIMITS", "rlimit")],
    );
    app.wait_for_agent(&agent.address).await;
    let hog = app
        .job_from(g, json!({"name": "hog", "limits": {"memory_mb": 64}, "handler": {"type": "script", "interpreter": "python3", "source": "x = bytearray(300 * 1024 * 1024)\nprint('allocated')"}}))
        .await;
    let id = app.trigger(hog, json!({})).await["id"].as_i64().unwrap();
    let done = app.finished_run(id, RUN_WITHIN).await;
    assert_eq!(
        (
            done["status"].as_str(),
            done["usage"]["limits_mode"].as_str()
        ),
        (Some("failed"), Some("rlimit")),
        "{done}"
    );
    assert!(app.full_log(id).await.contains("MemoryError"));
    let small = app.job_from(g, json!({"name": "small", "limits": {"memory_mb": 64}, "handler": {"type": "shell", "command": "echo fits"}})).await;
    let id = app.trigger(small, json!({})).await["id"].as_i64().unwrap();
    assert_eq!(
        app.finished_run(id, RUN_WITHIN).await["status"],
        "succeeded"
    );
}

/// Milliseconds since the epoch, as the agent's clock on this host reads them.
fn wall_ms() -> i64 {
    i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

/// Returns just after the wall clock passed a multiple of `period_ms`: a run triggered then ends
/// well before the next one, where its lingering success is sent.
async fn just_after_a_multiple_of(period_ms: i64) {
    let into = wall_ms().rem_euclid(period_ms);
    tokio::time::sleep(Duration::from_millis(
        u64::try_from(period_ms - into).unwrap() + 5,
    ))
    .await;
}

/// A success nothing waits for lingers in the agent's spool (`result_linger_ms`) until the next
/// multiple of the linger on the wall clock, so that results share a request and a transaction
/// and agents send together; a parent's success (its child starts from it) and a failure (its
/// retry starts from it) go at once, and take a lingering success along. The prompt ones are
/// timed by the runs' own clocks: a child or an immediate retry is scheduled for the moment the
/// transaction storing the result ran, `finished_ms` is when the agent saw the process end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_success_nothing_waits_for_lingers_and_one_due_sooner_takes_it_along() {
    const LINGER_MS: i64 = 1000;
    // Scheduling: child runs and retries are sent by the timer.
    let app = TestApp::scheduling(false, &[("JOBFLEET_RESULT_LINGER_MS", "1000")]).await;
    let g = app.group("e2e-linger").await;
    let dir = tempfile::tempdir().unwrap();
    let agent = AgentProc::start(&app.base, "e2e-linger", &dir.path().join("agent"));
    app.wait_for_agent(&agent.address).await;
    let shell = |name: &str, command: &str| json!({"name": name, "handler": {"type": "shell", "command": command}});
    let plain = app.job_from(g, shell("plain", "echo plain")).await;
    let child = app.job_from(g, shell("child", "true")).await;
    let mut parent_body = shell("parent", "true");
    parent_body["children"] = json!([child]);
    let parent = app.job_from(g, parent_body).await;
    let mut failing_body = shell("failing", "exit 3");
    failing_body["retry"] = json!({"count": 1, "backoff_s": 0});
    let failing = app.job_from(g, failing_body).await;
    let spool_holds = |n: usize| {
        let agent = &agent;
        async move {
            wait_for(
                RUN_WITHIN,
                &format!("{n} result file(s) in the spool"),
                || async { (agent.spool_files() == n).then_some(()) },
            )
            .await;
        }
    };
    let final_status = |run: &Value| !matches!(run["status"].as_str(), Some("pending" | "running"));
    let ms = |run: &Value, field: &str| {
        run[field]
            .as_i64()
            .unwrap_or_else(|| panic!("{field}: {run}"))
    };

    // Alone, a plain success waits on the agent, durable in its spool.
    just_after_a_multiple_of(LINGER_MS).await;
    let id = app.trigger(plain, json!({})).await["id"].as_i64().unwrap();
    spool_holds(1).await;
    let held = app.run(id).await;
    assert!(!final_status(&held), "held on the agent: {held}");
    // Ended there, not stored yet: a kill finds nothing, says so, and is not audited.
    let kill = app
        .post(&format!("/api/v1/runs/{id}/kill"), &app.admin, json!({}))
        .await;
    assert_eq!(kill.status, 409, "{}", kill.body);
    assert!(
        kill.body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains(&format!("nothing of run {id} to kill"))
                && m.contains("not running or waiting here")),
        "{}",
        kill.body
    );
    let audited = app
        .get(
            &format!("/api/v1/audit?object_type=run&object_id={id}"),
            &app.admin,
        )
        .await
        .body;
    assert_eq!(audited["items"], json!([]), "{audited}");
    let stored = app.finished_run(id, RUN_WITHIN).await;
    let stored_by = wall_ms();
    assert_eq!(stored["status"], "succeeded");
    // Sent at the first multiple of the linger that leaves the agent 20 ms for its spool write
    // after the run's end, not before.
    let end = ms(&stored, "finished_ms");
    let send_at = (end + 20 + LINGER_MS - 1).div_euclid(LINGER_MS) * LINGER_MS;
    assert!(
        stored_by >= send_at,
        "ended at {end}, stored by {stored_by}, before the linger's instant {send_at}"
    );
    spool_holds(0).await;

    // A parent's success goes at once: its child starts from it.
    let id = app.trigger(parent, json!({})).await["id"].as_i64().unwrap();
    let first_child = wait_for(RUN_WITHIN, "the child run", || async {
        app.runs_of(child).await.first().cloned()
    })
    .await;
    let parent_run = app.run(id).await;
    assert_eq!(parent_run["status"], "succeeded");
    let waited = ms(&first_child, "scheduled_ms") - ms(&parent_run, "finished_ms");
    assert!(
        waited < LINGER_MS,
        "the parent's success waited {waited} ms"
    );
    let first_child = ms(&first_child, "id");
    assert_eq!(
        app.finished_run(first_child, RUN_WITHIN).await["status"],
        "succeeded"
    );
    spool_holds(0).await;

    // A failure goes at once: its retry starts from it.
    let failed = app.trigger(failing, json!({})).await["id"]
        .as_i64()
        .unwrap();
    let retry = wait_for(RUN_WITHIN, "the retry", || async {
        app.runs_of(failing).await.get(1).cloned()
    })
    .await;
    let failed = app.run(failed).await;
    assert_eq!(failed["status"], "failed");
    let waited = ms(&retry, "scheduled_ms") - ms(&failed, "finished_ms");
    assert!(waited < LINGER_MS, "the failure waited {waited} ms");
    assert_eq!(
        app.finished_run(ms(&retry, "id"), RUN_WITHIN).await["status"],
        "failed"
    );
    spool_holds(0).await;

    // A parent's success takes a lingering success along: both are stored when the child starts.
    just_after_a_multiple_of(LINGER_MS).await;
    let lingering = app.trigger(plain, json!({})).await["id"].as_i64().unwrap();
    spool_holds(1).await;
    app.trigger(parent, json!({})).await;
    wait_for(RUN_WITHIN, "the second child run", || async {
        (app.runs_of(child).await.len() == 2).then_some(())
    })
    .await;
    let lingering = app.run(lingering).await;
    assert_eq!(
        lingering["status"], "succeeded",
        "the lingering success travelled with the parent's: {lingering}"
    );
}
