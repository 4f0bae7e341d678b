//! Agents that dial out (issue 14): a real admin and real `jobfleet-agent` processes whose
//! calls travel over the agent's own WebSocket (`GET /api/agent/connect`).

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::support::agent::{Executor, fake_executor_heard};
use crate::support::{AgentProc, TestApp, both_backends, free_port, mysql_db, wait_for};

const RUN_WITHIN: Duration = Duration::from_secs(30);

async fn app(mysql: bool) -> TestApp {
    if mysql {
        TestApp::start(mysql_db().await).await
    } else {
        TestApp::sqlite().await
    }
}

/// Waits for the live agent of `app_name` that registered in `mode`; returns its row.
async fn agent_row(app: &TestApp, app_name: &str, mode: &str) -> Value {
    wait_for(
        Duration::from_secs(20),
        &format!("a {mode} agent of {app_name} to connect"),
        || async {
            let agents = app.get("/api/v1/agents", &app.admin).await.body;
            connected_row(&agents, app_name, mode)
        },
    )
    .await
}

/// In the agents list `agents` (as `/api/v1/agents` answers), the live agent of `app_name`
/// that registered in `mode` and holds a connection.
pub fn connected_row(agents: &Value, app_name: &str, mode: &str) -> Option<Value> {
    agents["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| {
            a["app_name"] == app_name
                && a["mode"] == mode
                && a["live"] == true
                && a["connection"].is_object()
        })
        .cloned()
}

/// The inodes of the TCP sockets `pid` listens on, as its own network namespace sees them.
pub fn listening_sockets(pid: u32) -> HashSet<String> {
    let mut mine = HashSet::new();
    for fd in std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
    {
        if let Ok(target) = std::fs::read_link(fd.path()) {
            let target = target.to_string_lossy().into_owned();
            if let Some(inode) = target
                .strip_prefix("socket:[")
                .and_then(|s| s.strip_suffix(']'))
            {
                mine.insert(inode.to_owned());
            }
        }
    }
    let mut listening = HashSet::new();
    for table in ["tcp", "tcp6"] {
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let cols: Vec<&str> = line.split_whitespace().collect();
            // st 0A is LISTEN; column 9 is the inode.
            if cols.get(3) == Some(&"0A") && cols.get(9).is_some_and(|i| mine.contains(*i)) {
                listening.insert(cols[9].to_owned());
            }
        }
    }
    listening
}

async fn connect_mode_runs_logs_and_kills(mysql: bool) {
    let app = app(mysql).await;
    let g = app.group("conn-basic").await;
    let dir = tempfile::tempdir().unwrap();
    let agent = AgentProc::start_with(
        &app.base,
        "conn-basic",
        &dir.path().join("agent"),
        &[("JOBFLEET_AGENT_MODE", "connect")],
    );
    let row = agent_row(&app, "conn-basic", "connect").await;
    let address = row["address"].as_str().unwrap().to_owned();
    assert!(address.starts_with("conn://"), "{row}");
    assert_eq!(
        row["connection"]["admin"],
        app.state.scheduler.holder.as_str()
    );
    assert_eq!(row["connection"]["url"], app.base.as_str(), "{row}");
    // The console names the admin holding the connection and where the others relay to it.
    let mut console = crate::support::console::Console::new(&app);
    console.login("admin", crate::support::ADMIN_PASSWORD).await;
    let page = console.get("/console/agents").await.body;
    assert!(
        page.contains(&format!("{} ({})", app.state.scheduler.holder, app.base)),
        "{page}"
    );
    assert!(
        listening_sockets(agent.pid()).is_empty(),
        "a connect-mode agent listens on nothing"
    );

    let shell = app
        .job_from(g, json!({"name": "shell", "handler": {"type": "shell", "command": "echo \"run=$JOBFLEET_RUN_ID\""}}))
        .await;
    let run = app.trigger(shell, json!({})).await;
    // Succeeded already, should the answer be read after a slow machine's linger.
    assert!(
        matches!(run["status"].as_str(), Some("running" | "succeeded"))
            && run["agent"].as_str() == Some(address.as_str()),
        "{run}"
    );
    let id = run["id"].as_i64().unwrap();
    let done = app.finished_run(id, RUN_WITHIN).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    assert_eq!(app.full_log(id).await, format!("run={id}\n"));

    let script = app
        .job_from(g, json!({"name": "script", "handler": {"type": "script", "source": "#!/bin/bash\nfor i in 1 2; do echo line $i; done\necho \"arg $1\""}}))
        .await;
    let id = app.trigger(script, json!({"params": "p"})).await["id"]
        .as_i64()
        .unwrap();
    assert_eq!(
        app.finished_run(id, RUN_WITHIN).await["status"],
        "succeeded"
    );
    assert_eq!(app.full_log(id).await, "line 1\nline 2\narg p\n");

    // A trigger several times the connection's read buffer (16 KiB) arrives whole: a script
    // of 60 KiB (the test admin's body cap is 64 KiB), most of it a comment.
    let padding = "#".repeat(60 * 1024);
    let big = app
        .job_from(g, json!({"name": "big script", "handler": {"type": "script", "source": format!("#!/bin/sh\n{padding}\necho \"big $1\"")}}))
        .await;
    let id = app.trigger(big, json!({"params": "p"})).await["id"]
        .as_i64()
        .unwrap();
    assert_eq!(
        app.finished_run(id, RUN_WITHIN).await["status"],
        "succeeded"
    );
    assert_eq!(app.full_log(id).await, "big p\n");

    // A running job's log is read through the admin, then it is killed through the admin.
    let endless = app
        .job_from(g, json!({"name": "endless", "handler": {"type": "shell", "command": "echo started; sleep 300"}}))
        .await;
    let id = app.trigger(endless, json!({})).await["id"]
        .as_i64()
        .unwrap();
    wait_for(Duration::from_secs(10), "the live log", || async {
        (app.full_log(id).await == "started\n").then_some(())
    })
    .await;
    assert_eq!(app.run(id).await["status"], "running");
    let killed = app
        .call(
            "POST",
            &format!("/api/v1/runs/{id}/kill"),
            Some(&app.admin),
            None,
        )
        .await;
    assert_eq!(killed.status, StatusCode::ACCEPTED, "{}", killed.body);
    assert_eq!(app.finished_run(id, RUN_WITHIN).await["status"], "killed");
}
both_backends!(connect_mode_runs_logs_and_kills);

async fn an_auto_agent_behind_an_unreachable_address_still_gets_its_runs(mysql: bool) {
    let app = app(mysql).await;
    let g = app.group("conn-auto").await;
    let dir = tempfile::tempdir().unwrap();
    // Nothing listens there: the admin can reach the agent only over its connection.
    let unreachable = format!("http://127.0.0.1:{}/", free_port());
    let _agent = AgentProc::start_with(
        &app.base,
        "conn-auto",
        &dir.path().join("agent"),
        &[("JOBFLEET_AGENT_ADVERTISE", &unreachable)],
    );
    let row = agent_row(&app, "conn-auto", "auto").await;
    assert_eq!(row["address"], unreachable.as_str());
    let job = app
        .job_from(g, json!({"name": "auto", "handler": {"type": "shell", "command": "echo via the connection"}}))
        .await;
    let run = app.trigger(job, json!({})).await;
    assert!(
        matches!(run["status"].as_str(), Some("running" | "succeeded")),
        "{run}"
    );
    let id = run["id"].as_i64().unwrap();
    assert_eq!(
        app.finished_run(id, RUN_WITHIN).await["status"],
        "succeeded"
    );
    assert_eq!(app.full_log(id).await, "via the connection\n");
}
both_backends!(an_auto_agent_behind_an_unreachable_address_still_gets_its_runs);

fn trigger_msg(run: &Value) -> &str {
    run["trigger_msg"].as_str().unwrap_or_default()
}

/// Waits for three succeeded runs of `job`, one of which waited for its time at the agent
/// ("starts in"; a take that ran late on a busy machine sends with no time to wait, "started"),
/// and checks that none started before its time. Returns the succeeded runs.
async fn went_ahead(app: &TestApp, job: i64) -> Vec<Value> {
    let runs = wait_for(
        RUN_WITHIN,
        "three succeeded runs, one sent ahead",
        || async {
            let done: Vec<Value> = app
                .runs_of(job)
                .await
                .into_iter()
                .filter(|r| r["status"] == "succeeded")
                .collect();
            (done.len() >= 3
                && done
                    .iter()
                    .any(|run| trigger_msg(run).contains(": starts in ")))
            .then_some(done)
        },
    )
    .await;
    for run in &runs {
        assert_started_in_time(run);
    }
    runs
}

fn assert_started_in_time(run: &Value) {
    assert!(
        run["started_ms"].as_i64().unwrap() >= run["scheduled_ms"].as_i64().unwrap(),
        "started before its time: {run}"
    );
}

/// The scheduled runs a take finds for an agent connected to the admin go down together ahead
/// of their time (`startInMs`) and start at it, never before; a failover job's runs (which try
/// the next agent on a refusal) still go one by one at their time.
async fn scheduled_runs_go_ahead_over_the_connection_and_start_at_their_time(mysql: bool) {
    let app = TestApp::scheduling(mysql, &[]).await;
    let g = app.group("conn-ahead").await;
    let dir = tempfile::tempdir().unwrap();
    let _agent = AgentProc::start(&app.base, "conn-ahead", &dir.path().join("agent"));
    agent_row(&app, "conn-ahead", "auto").await;
    let every_second = |name: &str, routing: &str| {
        json!({"name": name, "routing": routing, "handler": {"type": "shell", "command": "true"},
            "schedule": {"type": "fixed_rate", "interval_s": 1}})
    };
    let ahead = app.job_from(g, every_second("ahead", "first")).await;
    let one_by_one = app
        .job_from(g, every_second("one-by-one", "failover"))
        .await;
    went_ahead(&app, ahead).await;
    for run in app.runs_reaching(one_by_one, "succeeded", 3).await {
        assert!(trigger_msg(&run).ends_with(": started"), "{run}");
    }
}
both_backends!(scheduled_runs_go_ahead_over_the_connection_and_start_at_their_time);

/// A `push` agent, dialled at its address, gets a take's runs ahead too, in one `runBatch` by
/// HTTP, and starts each at its time; an executor that does not answer `runBatch` (XXL-Job's
/// knows no such call) still gets every run, one by one at its time.
async fn scheduled_runs_go_ahead_by_http_to_a_push_agent_and_one_by_one_to_an_executor(
    mysql: bool,
) {
    let app = TestApp::scheduling(mysql, &[]).await;
    let g = app.group("push-ahead").await;
    let dir = tempfile::tempdir().unwrap();
    let agent = AgentProc::start_with(
        &app.base,
        "push-ahead",
        &dir.path().join("agent"),
        &[("JOBFLEET_AGENT_MODE", "push")],
    );
    app.wait_for_agent(&agent.address).await;
    let (executor, heard) = fake_executor_heard(Executor::Accepting).await;
    let r = app
        .post(
            "/api/v1/groups",
            &app.admin,
            json!({"app_name": "push-ahead-xxl", "title": "xxl",
                "address_mode": "manual", "addresses": [executor]}),
        )
        .await;
    assert!(r.status.is_success(), "{}", r.body);
    let xxl = r.body["id"].as_i64().unwrap();
    let every_second = |name: &str| {
        json!({"name": name, "routing": "first", "handler": {"type": "shell", "command": "true"},
            "schedule": {"type": "fixed_rate", "interval_s": 1}})
    };
    let ahead = app.job_from(g, every_second("push-ahead")).await;
    let to_executor = app.job_from(xxl, every_second("to-executor")).await;
    for run in &went_ahead(&app, ahead).await {
        assert_eq!(run["agent"].as_str(), Some(agent.address.as_str()), "{run}");
    }
    // The executor never answers with results, so its runs stay running once it took them.
    let taken = app.runs_reaching(to_executor, "running", 3).await;
    let heard = heard.lock().unwrap().clone();
    let asked = |path: &str| {
        heard
            .iter()
            .filter(|h| h.line.starts_with(&format!("POST /{path} ")))
            .collect::<Vec<_>>()
    };
    // Asked for a batch once, and then not again for a minute (twice should two takes have
    // overlapped on a busy machine).
    assert!((1..=2).contains(&asked("runBatch").len()), "{heard:?}");
    // Each run went by itself, at its time: never before it, and without `startInMs`.
    let runs_sent: Vec<(i64, Value)> = asked("run")
        .iter()
        .map(|h| (h.at_ms, serde_json::from_str(&h.body).unwrap()))
        .collect();
    for run in &taken {
        assert_eq!(run["agent"].as_str(), Some(executor.as_str()), "{run}");
        assert!(!trigger_msg(run).contains("starts in"), "{run}");
        let sent: Vec<&(i64, Value)> = runs_sent
            .iter()
            .filter(|(_, trigger)| trigger["logId"] == run["id"])
            .collect();
        let [(arrived_ms, trigger)] = sent.as_slice() else {
            panic!("run {} was sent {} times: {heard:?}", run["id"], sent.len());
        };
        assert!(trigger.get("startInMs").is_none(), "{trigger}");
        assert!(
            *arrived_ms >= run["scheduled_ms"].as_i64().unwrap(),
            "sent before its time: {run} arrived at {arrived_ms}"
        );
    }
}
both_backends!(scheduled_runs_go_ahead_by_http_to_a_push_agent_and_one_by_one_to_an_executor);

/// A TCP proxy that cuts the first connection through which a trigger frame passes toward
/// the agent, right after passing it on; every other byte and connection goes through.
async fn trigger_cutting_proxy(target: String) -> (u16, Arc<AtomicBool>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let cut = Arc::new(AtomicBool::new(false));
    let cut2 = cut.clone();
    tokio::spawn(async move {
        while let Ok((inbound, _)) = listener.accept().await {
            let Ok(outbound) = TcpStream::connect(&target).await else {
                continue;
            };
            let cut = cut2.clone();
            tokio::spawn(async move {
                let (mut agent_rx, mut agent_tx) = inbound.into_split();
                let (mut admin_rx, mut admin_tx) = outbound.into_split();
                // Set once this connection carried the trigger: from then on nothing the agent
                // sends reaches the admin, so its answer to the trigger is lost.
                let severed = Arc::new(AtomicBool::new(false));
                let severed_up = severed.clone();
                let up = tokio::spawn(async move {
                    let mut buf = vec![0u8; 64 * 1024];
                    loop {
                        let n = match agent_rx.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => n,
                        };
                        if severed_up.load(Ordering::SeqCst)
                            || admin_tx.write_all(&buf[..n]).await.is_err()
                        {
                            break;
                        }
                    }
                });
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    let n = match admin_rx.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    let trigger = String::from_utf8_lossy(&buf[..n]).contains(r#""call":"run""#)
                        && !cut.swap(true, Ordering::SeqCst);
                    if trigger {
                        severed.store(true, Ordering::SeqCst);
                    }
                    if agent_tx.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                    if trigger {
                        // Let the frame land and the agent take the trigger, then cut.
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        break;
                    }
                }
                up.abort();
            });
        }
    });
    (port, cut)
}

async fn a_connection_cut_after_the_trigger_runs_it_once(mysql: bool) {
    let app = app(mysql).await;
    let g = app.group("conn-cut").await;
    let dir = tempfile::tempdir().unwrap();
    let admin = app.base.trim_start_matches("http://").to_owned();
    let (port, cut) = trigger_cutting_proxy(admin).await;
    let _agent = AgentProc::start_with(
        &format!("http://127.0.0.1:{port}/"),
        "conn-cut",
        &dir.path().join("agent"),
        &[("JOBFLEET_AGENT_MODE", "connect")],
    );
    agent_row(&app, "conn-cut", "connect").await;
    let count = dir.path().join("executions");
    let job = app
        .job_from(g, json!({"name": "once", "handler": {"type": "shell", "command": format!("echo ran >> {}", count.display())}}))
        .await;
    let run = app.trigger(job, json!({})).await;
    assert!(cut.load(Ordering::SeqCst), "the proxy cut the connection");
    // The answer to the first trigger was lost with the connection; the same trigger went
    // again over the agent's next connection, and the agent's journal knew it.
    assert!(
        run["trigger_msg"]
            .as_str()
            .is_some_and(|m| m.contains("already accepted here")),
        "the trigger was re-sent and acknowledged without running again: {run}"
    );
    assert!(
        matches!(run["status"].as_str(), Some("running" | "succeeded")),
        "{run}"
    );
    let id = run["id"].as_i64().unwrap();
    assert_eq!(
        app.finished_run(id, RUN_WITHIN).await["status"],
        "succeeded"
    );
    // The job ran exactly once, and its result was stored once.
    assert_eq!(std::fs::read_to_string(&count).unwrap(), "ran\n");
    let runs = app
        .get(&format!("/api/v1/runs?job_id={job}"), &app.admin)
        .await
        .body;
    let items = runs["items"].as_array().unwrap_or_else(|| panic!("{runs}"));
    assert_eq!(items.len(), 1, "no retry or second run: {runs}");
}
both_backends!(a_connection_cut_after_the_trigger_runs_it_once);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_connect_endpoint_refuses_bad_tokens_and_unknown_keys() {
    let app = TestApp::sqlite().await;
    app.group("conn-refuse").await;
    let url = format!("{}/api/agent/connect", app.base);
    let attempt = |token: &str, key: &str| {
        app.client
            .get(&url)
            .header("XXL-JOB-ACCESS-TOKEN", token)
            .header("X-Jobfleet-Agent-Key", key)
            .header("X-Jobfleet-Agent-Group", "conn-refuse")
            .header("X-Jobfleet-Agent-Address", "conn://h/0123456789abcdef/")
            .header("Connection", "Upgrade")
            .header("Upgrade", "websocket")
            .header("Sec-WebSocket-Version", "13")
            .header("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
            .send()
    };
    let key = "k".repeat(64);
    let wrong = attempt("wrong-token", &key).await.unwrap();
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    assert!(
        wrong
            .text()
            .await
            .unwrap()
            .contains("access token is wrong")
    );
    let unknown = attempt("test-agent-token", &key).await.unwrap();
    assert_eq!(unknown.status(), StatusCode::FORBIDDEN);
    assert!(
        unknown.text().await.unwrap().contains("register"),
        "the refusal says why"
    );
    let short = attempt("test-agent-token", "short").await.unwrap();
    assert_eq!(short.status(), StatusCode::UNPROCESSABLE_ENTITY);
}

/// Pull: a `connect` agent with `pull = 16` takes the due runs no admin pushes (this admin runs
/// no scheduler) in batches of at most 16 over its connection, and runs each once. Runs of a
/// job whose routing names the agent (`first`) are left for their push.
async fn an_agent_with_free_slots_takes_due_runs_in_batches(mysql: bool) {
    use jobfleet_admin::db::job_run;
    const RUNS: usize = 40;
    let app = TestApp::start_opts(
        crate::support::test_db(mysql).await,
        &[],
        crate::support::Opts {
            system_clock: true,
            scheduler: false,
        },
    )
    .await;
    let g = app.group("pull").await;
    let dir = tempfile::tempdir().unwrap();
    let _agent = AgentProc::start_with(
        &app.base,
        "pull",
        &dir.path().join("agent"),
        &[
            ("JOBFLEET_AGENT_MODE", "connect"),
            ("JOBFLEET_AGENT_PULL", "16"),
        ],
    );
    agent_row(&app, "pull", "connect").await;
    let any = app
        .job_from(g, json!({"name": "any", "routing": "round_robin", "handler": {"type": "shell", "command": "echo pulled $JOBFLEET_RUN_ID"}}))
        .await;
    let pinned = app
        .job_from(g, json!({"name": "pinned", "routing": "first", "handler": {"type": "shell", "command": "true"}}))
        .await;
    let now = app.now_ms();
    let new_run = move |job: i64| crate::support::pending_api_run(job, g, now, now);
    // In one transaction: the agent pulls on its own, and a take landing between the inserts
    // would split the batches differently.
    let (taken, left): (Vec<i64>, Vec<i64>) = app
        .state
        .db
        .transaction(move |conn| {
            let mut taken = Vec::new();
            for _ in 0..RUNS {
                taken.push(job_run::insert(conn, &new_run(any))?.0);
            }
            let mut left = Vec::new();
            for _ in 0..3 {
                left.push(job_run::insert(conn, &new_run(pinned))?.0);
            }
            Ok((taken, left))
        })
        .await
        .unwrap();
    let mut claims: std::collections::BTreeMap<i64, usize> = std::collections::BTreeMap::new();
    for id in &taken {
        let run = app.finished_run(*id, RUN_WITHIN).await;
        assert_eq!(run["status"], "succeeded", "{run}");
        assert!(
            run["trigger_msg"]
                .as_str()
                .unwrap()
                .starts_with("taken by conn://"),
            "{run}"
        );
        assert_eq!(app.full_log(*id).await, format!("pulled {id}\n"));
        *claims
            .entry(run["triggered_ms"].as_i64().unwrap())
            .or_default() += 1;
    }
    // One claim time per take (each take waits for the one before): 40 runs are three takes
    // of at most 16.
    assert_eq!(
        claims.values().copied().collect::<Vec<_>>(),
        [16, 16, 8],
        "runs per take"
    );
    // The agent keeps asking while idle; the pinned runs are still nobody's.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    for id in left {
        let run = app.run(id).await;
        assert_eq!(
            (run["status"].as_str(), run["triggered_ms"].as_i64()),
            (Some("pending"), None),
            "{run}"
        );
    }
}
both_backends!(an_agent_with_free_slots_takes_due_runs_in_batches);

/// An enrolled agent's connection that sends garbage, unknown and wrong-way calls, bad bodies
/// and an oversized call gets an error reply for each one with an id, and the connection
/// stays up: a good `take` afterwards is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agents_connection_answers_bad_frames_and_stays_up() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let app = TestApp::sqlite().await;
    app.group("conn-frames").await;
    let (address, key) = ("conn://h/0123456789abcdef/", "k".repeat(64));
    let enrolled = app
        .client
        .post(format!("{}/api/registry", app.base))
        .header("XXL-JOB-ACCESS-TOKEN", "test-agent-token")
        .header("X-Jobfleet-Agent-Key", &key)
        .json(&json!({"registryGroup": "EXECUTOR", "registryKey": "conn-frames", "registryValue": address, "mode": "connect"}))
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap();
    assert_eq!(enrolled["code"], 200, "{enrolled}");
    let mut request = format!("{}/api/agent/connect", app.base.replacen("http", "ws", 1))
        .into_client_request()
        .unwrap();
    for (name, value) in [
        ("XXL-JOB-ACCESS-TOKEN", "test-agent-token"),
        ("X-Jobfleet-Agent-Key", key.as_str()),
        ("X-Jobfleet-Agent-Group", "conn-frames"),
        ("X-Jobfleet-Agent-Address", address),
    ] {
        request.headers_mut().insert(name, value.parse().unwrap());
    }
    let (mut ws, _) = tokio_tungstenite::connect_async(request).await.unwrap();
    // The admin's body cap in tests is 64 KiB: this callback is over it.
    let oversized = format!(
        r#"{{"id":4,"call":"callback","body":"{}"}}"#,
        "x".repeat(70 * 1024)
    );
    let frames = [
        "garbage".to_owned(),
        r#"{"id":1,"call":"launch","body":{}}"#.to_owned(),
        r#"{"id":2,"call":"run","body":{}}"#.to_owned(),
        r#"{"id":3,"call":"take","body":{"max":"lots"}}"#.to_owned(),
        oversized,
        r#"{"id":5,"call":"registry","body":{"registryGroup":"EXECUTOR","registryKey":"conn-frames","registryValue":"conn://h/fedcba9876543210/"}}"#.to_owned(),
        r#"{"id":6,"call":"take","body":{"max":4}}"#.to_owned(),
    ];
    for frame in frames {
        ws.send(Message::text(frame)).await.unwrap();
    }
    let mut replies = std::collections::BTreeMap::new();
    while replies.len() < 6 {
        let message = tokio::time::timeout(Duration::from_secs(10), ws.next())
            .await
            .expect("a reply to every call with an id")
            .unwrap()
            .unwrap();
        if let Message::Text(text) = message {
            let frame: Value = serde_json::from_str(text.as_str()).unwrap();
            replies.insert(frame["id"].as_u64().unwrap(), frame["reply"].clone());
        }
    }
    let msg = |id: u64| replies[&id]["msg"].as_str().unwrap_or_default().to_owned();
    for id in 1..=5 {
        assert_eq!(replies[&id]["code"], 500, "{id}: {}", replies[&id]);
    }
    assert!(msg(1).contains("unknown call `launch`"), "{}", msg(1));
    assert!(msg(2).contains("not a call an admin serves"), "{}", msg(2));
    assert!(msg(3).contains("malformed"), "{}", msg(3));
    assert!(msg(4).contains("larger than"), "{}", msg(4));
    assert!(msg(5).contains("only for the address"), "{}", msg(5));
    assert_eq!(replies[&6]["code"], 200, "{}", replies[&6]);
    assert_eq!(
        replies[&6]["content"],
        json!({"sent": 0, "accepted": 0}),
        "nothing is due"
    );
}
