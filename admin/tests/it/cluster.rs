//! Several admins on one MariaDB, and the scheduler through a database outage. MariaDB only:
//! a SQLite admin is a single process by design.
#![cfg(feature = "mysql")]

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::admin_proc::{AdminProc, call, http_client};
use crate::support::{AgentProc, Opts, TestApp, free_port, wait_for};

/// Two admin processes fire ten every-second jobs; one is killed -9 mid-stream. Every slot
/// from the first fire to the stop exists exactly once in the run table and was sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_admins_one_killed_no_duplicate_and_no_missing_slots() {
    let db = crate::support::mysql_db().await;
    let url = db.url_string();
    let client = http_client();
    let mut first = AdminProc::start(&url);
    first.ready(&client).await;
    let second = AdminProc::start(&url);
    second.ready(&client).await;
    let token = second.login(&client).await;
    let group = first.group(&client, &token, "cluster").await;
    let dir = tempfile::tempdir().unwrap();
    let admins = format!("{}/,{}/", first.base, second.base);
    let agents: Vec<AgentProc> = (0..2)
        .map(|i| AgentProc::start(&admins, "cluster", &dir.path().join(format!("a{i}"))))
        .collect();
    for agent in &agents {
        second.wait_for_agent(&client, &token, &agent.address).await;
    }
    let mut jobs = Vec::new();
    for i in 0..10 {
        let job = call(
            &client,
            "POST",
            format!("{}/api/v1/jobs", first.base),
            &token,
            json!({
            "group_id": group, "name": format!("tick-{i}"), "routing": "round_robin",
            "schedule": {"type": "fixed_rate", "interval_s": 1},
            "handler": {"type": "shell", "command": "true"}}),
        )
        .await;
        jobs.push(job["id"].as_i64().unwrap());
    }
    let runs_per_job = || async {
        let mut per_job: BTreeMap<i64, Vec<Value>> = BTreeMap::new();
        for job in &jobs {
            let mut runs = Vec::new();
            let mut offset = 0;
            loop {
                let page = call(
                    &client,
                    "GET",
                    format!(
                        "{}/api/v1/runs?job_id={job}&limit=500&offset={offset}",
                        second.base
                    ),
                    &token,
                    Value::Null,
                )
                .await;
                let items = page["items"].as_array().unwrap().clone();
                offset += items.len();
                let done = items.len() < 500;
                runs.extend(items);
                if done {
                    break;
                }
            }
            per_job.insert(*job, runs);
        }
        per_job
    };
    let now_ms = || chrono::Utc::now().timestamp_millis();
    let succeeded = |runs: &[Value], after_ms: i64| {
        runs.iter()
            .filter(|r| {
                r["status"] == "succeeded" && r["scheduled_ms"].as_i64().unwrap() > after_ms
            })
            .count()
    };
    // Both admins firing: every job has run a few times.
    wait_for(Duration::from_secs(60), "every job to fire", || async {
        runs_per_job()
            .await
            .values()
            .all(|runs| succeeded(runs, 0) >= 4)
            .then_some(())
    })
    .await;
    first.kill9();
    let killed_ms = now_ms();
    // The survivor has sent what the dead admin had stored (up to 5 s ahead) and fires on by
    // itself, before the jobs are disabled (which would skip what is still stored).
    let dead_horizon_ms = killed_ms + 5_500;
    wait_for(
        Duration::from_secs(90),
        "the survivor to take over",
        || async {
            if now_ms() < dead_horizon_ms {
                return None;
            }
            let per_job = runs_per_job().await;
            let unsent = per_job.values().flatten().any(|r| {
                r["scheduled_ms"].as_i64().unwrap() < dead_horizon_ms
                    && r["status"] == "pending"
                    && r["triggered_ms"].is_null()
            });
            let firing_on = per_job
                .values()
                .all(|runs| succeeded(runs, dead_horizon_ms) >= 3);
            (!unsent && firing_on).then_some(())
        },
    )
    .await;
    let stop_ms = now_ms();
    for job in &jobs {
        call(
            &client,
            "POST",
            format!("{}/api/v1/jobs/{job}/disable", second.base),
            &token,
            json!({}),
        )
        .await;
    }
    // Fires the dead admin stored but never sent are recovered by the survivor.
    let check_before = stop_ms - 1_000;
    let outcome = wait_for(Duration::from_secs(45), "every slot sent", || async {
        let per_job = runs_per_job().await;
        let unsent: Vec<&Value> = per_job
            .values()
            .flatten()
            .filter(|r| {
                r["scheduled_ms"].as_i64().unwrap() < check_before
                    && (r["status"] == "pending" && r["triggered_ms"].is_null()
                        || r["status"] == "skipped")
            })
            .collect();
        if !unsent.is_empty() {
            eprintln!("not sent yet: {unsent:?}");
        }
        unsent.is_empty().then_some(per_job)
    })
    .await;
    for (job, runs) in &outcome {
        let mut slots: BTreeMap<i64, usize> = BTreeMap::new();
        for run in runs.iter().filter(|r| r["trigger_kind"] == "schedule") {
            *slots
                .entry(run["fire_slot_ms"].as_i64().unwrap())
                .or_insert(0) += 1;
        }
        assert!(
            slots.values().all(|n| *n == 1),
            "job {job}: a slot fired twice: {slots:?}"
        );
        let in_range: Vec<i64> = slots
            .keys()
            .copied()
            .filter(|s| *s < check_before)
            .collect();
        assert!(
            in_range
                .first()
                .is_some_and(|first| *first < killed_ms - 2_000)
                && in_range
                    .last()
                    .is_some_and(|last| *last > dead_horizon_ms + 1_000),
            "job {job} fired through the kill: {in_range:?}"
        );
        assert!(
            in_range.windows(2).all(|w| w[1] - w[0] == 1000),
            "job {job}: a slot is missing: {in_range:?}"
        );
        for run in runs
            .iter()
            .filter(|r| r["scheduled_ms"].as_i64().unwrap() < check_before)
        {
            let status = run["status"].as_str().unwrap();
            // A trigger in flight inside the killed admin is reported lost by the survivor.
            assert!(
                matches!(status, "succeeded" | "running" | "lost" | "pending"),
                "job {job}: {run}"
            );
        }
    }
}

/// The database goes away for longer than the pre-read window and the misfire threshold
/// together: the scheduler logs and backs off, serves 503s, and when the database returns it
/// resumes on the job's phase, applying the misfire policy to what passed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scheduler_survives_a_database_outage() {
    use jobfleet_admin::scheduler::tick::PRE_READ_MS;
    use jobfleet_admin::worker::WorkerState;
    // The least threshold the config takes keeps the outage short: fires are stored up to
    // PRE_READ_MS + 1 s past the cut, slots within the threshold of the return still fire as
    // themselves, and between the two lie slots that misfired (about 3 with 11 s).
    const THRESHOLD_MS: i64 = 1_000;
    const OUTAGE_MS: i64 = 11_000;
    let threshold = THRESHOLD_MS.to_string();
    let (db, proxy, via_proxy) = crate::support::proxy::mariadb().await;
    let app = TestApp::start_opts(
        db,
        &[
            ("JOBFLEET_DATABASE_URL", via_proxy.as_str()),
            ("JOBFLEET_DB_CONNECT_TIMEOUT_MS", "1000"),
            ("JOBFLEET_MISFIRE_THRESHOLD_MS", threshold.as_str()),
        ],
        Opts {
            system_clock: true,
            scheduler: true,
        },
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let g = app.group("outage-sched").await;
    let agent = AgentProc::start(&app.base, "outage-sched", &dir.path().join("a"));
    app.wait_for_agent(&agent.address).await;
    let job = app
        .job_from(
            g,
            json!({"name": "tick", "misfire": "fire_once_now",
            "schedule": {"type": "fixed_rate", "interval_s": 1},
            "handler": {"type": "shell", "command": "true"}}),
        )
        .await;
    let succeeded_after = |after_ms: i64| {
        let app = &app;
        async move {
            let r = app
                .get(&format!("/api/v1/runs?job_id={job}&limit=500"), &app.admin)
                .await;
            let items = r.body["items"].as_array().unwrap().clone();
            let n = items
                .iter()
                .filter(|r| {
                    r["scheduled_ms"].as_i64().unwrap() > after_ms && r["status"] == "succeeded"
                })
                .count();
            (n, items)
        }
    };
    wait_for(
        Duration::from_secs(30),
        "fires before the outage",
        || async { (succeeded_after(0).await.0 >= 2).then_some(()) },
    )
    .await;
    let plan = || app.state.metrics.workers.snapshot()["plan"].clone();
    let failures_before = plan().failures;
    proxy.cut();
    let cut_at = chrono::Utc::now().timestamp_millis();
    // The outage is noticed: readiness answers 503 and the plan loop backs off.
    wait_for(
        Duration::from_secs(20),
        "the outage to be noticed",
        || async {
            let ready = app
                .client
                .get(format!("{}/readyz", app.base))
                .send()
                .await
                .ok()?
                .status();
            let plan = plan();
            (ready == reqwest::StatusCode::SERVICE_UNAVAILABLE
                && plan.failures > failures_before
                && plan.state == WorkerState::BackingOff)
                .then_some(())
        },
    )
    .await;
    // A signed-in caller whose account cannot be read is told the database is away (503), not
    // charged to its address's anonymous bucket: more requests than that bucket holds (120 a
    // minute) all answer `unavailable`, none `rate_limited`.
    let answers = futures_util::future::join_all(
        (0..130).map(|_| app.get("/api/v1/jobs?limit=1", &app.admin)),
    )
    .await;
    for r in &answers {
        assert_eq!(
            r.status,
            reqwest::StatusCode::SERVICE_UNAVAILABLE,
            "{}",
            r.body
        );
        assert_eq!(r.code(), "unavailable", "{}", r.body);
    }
    let left = cut_at + OUTAGE_MS - chrono::Utc::now().timestamp_millis();
    // The outage's length is what is tested: the scheduler sees real time pass without a pass.
    tokio::time::sleep(Duration::from_millis(left.max(0).unsigned_abs())).await;
    proxy.restore();
    let back_at = chrono::Utc::now().timestamp_millis();
    let runs = wait_for(
        Duration::from_secs(30),
        "fires after the outage",
        || async {
            let (after, items) = succeeded_after(back_at + 2_000).await;
            (after >= 3).then_some(items)
        },
    )
    .await;
    let mut slots: Vec<i64> = runs
        .iter()
        .filter_map(|r| r["fire_slot_ms"].as_i64())
        .collect();
    slots.sort_unstable();
    let n = slots.len();
    slots.dedup();
    assert_eq!(slots.len(), n, "no slot twice");
    // Fires stored before the cut and the ones after the return keep the 1 s phase.
    let phase = slots[0].rem_euclid(1000);
    assert!(
        slots.iter().all(|s| s.rem_euclid(1000) == phase),
        "{slots:?}"
    );
    // The outage's missed slots became one catch-up fire, as the policy says.
    let misfires = runs
        .iter()
        .filter(|r| r["trigger_kind"] == "misfire")
        .count();
    assert_eq!(misfires, 1, "{runs:?}");
    // Slots after the last one stored before the cut and before the threshold of the return
    // (1 s of margin each side) are not replayed.
    let (gap_from, gap_to) = (cut_at + PRE_READ_MS + 1_000, back_at - THRESHOLD_MS - 1_000);
    let gap: Vec<i64> = slots
        .iter()
        .copied()
        .filter(|s| *s > gap_from && *s < gap_to)
        .collect();
    assert!(
        gap.is_empty() || gap.len() == 1,
        "slots inside the outage are not replayed: {gap:?}"
    );
    // Every slot of the gap misfired (the catch-up fire stands for one slot before it).
    let at_least = u64::try_from((gap_to - gap_from) / 1000 - 1).unwrap();
    assert!(at_least >= 2, "the outage is too short to show a gap");
    let misfired = app.state.metrics.misfired_slots.get("fire_once_now");
    assert!(misfired >= at_least, "{misfired} < {at_least}");
}

/// Issue 20: 2,000 one-shot jobs due at one instant on two admins and two agents; the admin
/// sending them is killed -9 mid-dispatch (and restarted 10 s later), and an agent holding
/// queued runs is killed -9 (and restarted). From the jobs' own records: every job ran exactly
/// once, no run ended `lost` without having started, and every run names its agent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_survives_its_admin_and_an_agent_killed_mid_dispatch() {
    use diesel::connection::SimpleConnection;
    const JOBS: usize = 2_000;
    let db = crate::support::mysql_db().await;
    let url = db.url_string();
    let client = http_client();
    // A short trigger timeout keeps the wait for a dead admin's hand-overs short.
    let fast = [("JOBFLEET_TRIGGER_TIMEOUT_MS", "1000")];
    let mut sender = AdminProc::start_with(&url, &fast);
    sender.ready(&client).await;
    let token = sender.login(&client).await;
    let group = sender.group(&client, &token, "burst").await;
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("ran");
    let survivor_base = format!("http://127.0.0.1:{}", free_port());
    // Both admins from the start, so results and heartbeats fail over to the survivor.
    let admins = format!("{}/,{}/", sender.base, survivor_base);
    // Few slots, so the agents' queues fill even when this machine dispatches slowly.
    let busy = [("JOBFLEET_AGENT_MAX_CONCURRENT", "8")];
    let steady = AgentProc::start_with(&admins, "burst", &dir.path().join("steady"), &busy);
    let mut victim = AgentProc::start_with(&admins, "burst", &dir.path().join("victim"), &busy);
    for agent in [&steady, &victim] {
        sender.wait_for_agent(&client, &token, &agent.address).await;
    }
    // Each job notes its own execution: "job run" per line (appends this small are atomic).
    let command = format!(
        "echo \"$JOBFLEET_JOB_ID $JOBFLEET_RUN_ID\" >> {}; sleep 0.3",
        ran.display()
    );
    let mut conn = db.conn();
    let now = chrono::Utc::now().timestamp_millis();
    for chunk in (0..JOBS).collect::<Vec<_>>().chunks(500) {
        let values: Vec<String> = chunk
            .iter()
            .map(|i| {
                format!(
                    "({group}, 'burst-{i}', '', 'none', NULL, NULL, NULL, 'UTC', 'shell', '{}', '', 'round_robin', 0, 0, 0, 10, 'do_nothing', 'allow', 'serial', 0, 0, 0, {now}, {now})",
                    command.replace('\'', "''")
                )
            })
            .collect();
        conn.batch_execute(&format!(
            "INSERT INTO job (group_id, name, description, schedule_type, schedule_expr, interval_s, once_at_ms, timezone, handler_type, command, params, routing, enabled, timeout_s, retry_count, retry_backoff_s, misfire, concurrency, block_strategy, alert_on_failure, alert_on_timeout, alert_on_lost, created_ms, updated_ms) VALUES {}",
            values.join(",")
        ))
        .unwrap();
    }
    let due = chrono::Utc::now().timestamp_millis() + 7_000;
    conn.batch_execute(&format!(
        "UPDATE job SET enabled = 1, schedule_type = 'once', once_at_ms = {due}, next_fire_ms = {due}"
    ))
    .unwrap();
    // The sender plans every fire (the other admin starts only after that), then dies
    // 400 ms into sending them.
    wait_for(Duration::from_secs(60), "every fire planned", || async {
        (count(&db, "SELECT COUNT(*) AS n FROM job_run") == JOBS as i64).then_some(())
    })
    .await;
    let survivor = AdminProc::start_on(&url, &survivor_base, &fast);
    survivor.ready(&client).await;
    let wait_until = |at_ms: i64| async move {
        let left = at_ms - chrono::Utc::now().timestamp_millis();
        if left > 0 {
            tokio::time::sleep(Duration::from_millis(left as u64)).await;
        }
    };
    let progress = |db: &jobfleet_admin::testing::TestDb, when: &str| {
        eprintln!(
            "{when}: unclaimed {}, claimed {}, running {}, done {}",
            count(
                db,
                "SELECT COUNT(*) AS n FROM job_run WHERE status = 'pending' AND triggered_ms IS NULL"
            ),
            count(
                db,
                "SELECT COUNT(*) AS n FROM job_run WHERE status = 'pending' AND triggered_ms IS NOT NULL"
            ),
            count(
                db,
                "SELECT COUNT(*) AS n FROM job_run WHERE status = 'running'"
            ),
            count(
                db,
                "SELECT COUNT(*) AS n FROM job_run WHERE status NOT IN ('pending', 'running')"
            ),
        );
    };
    // Mid-dispatch: some sent, some taken and not yet answered, the rest not taken yet.
    wait_for(
        Duration::from_secs(60),
        "the sender to be sending",
        || async {
            (count(
                &db,
                "SELECT COUNT(*) AS n FROM job_run WHERE triggered_ms IS NOT NULL",
            ) >= 300)
                .then_some(())
        },
    )
    .await;
    sender.kill9();
    let killed_at = chrono::Utc::now().timestamp_millis();
    progress(&db, "sender killed");
    // The survivor sends the dead admin's runs; the agents queue them (8 at a time, 0.3 s
    // each), and the victim is killed holding a queue.
    wait_for(
        Duration::from_secs(90),
        "runs queued on the agents",
        || async {
            (count(
                &db,
                "SELECT COUNT(*) AS n FROM job_run WHERE status = 'running'",
            ) >= 100)
                .then_some(())
        },
    )
    .await;
    victim.kill9();
    progress(&db, "victim killed");
    tokio::time::sleep(Duration::from_secs(2)).await;
    victim.restart();
    wait_until(killed_at + 10_000).await;
    let _sender_again = AdminProc::start_on(&url, &sender.base, &fast);
    wait_for(Duration::from_secs(300), "every run to end", || async {
        (count(
            &db,
            "SELECT COUNT(*) AS n FROM job_run WHERE status IN ('pending', 'running')",
        ) == 0)
            .then_some(())
    })
    .await;
    let executed = std::fs::read_to_string(&ran).unwrap();
    let mut per_job: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
    for line in executed.lines() {
        let (job, run) = line.split_once(' ').unwrap();
        per_job
            .entry(job.parse().unwrap())
            .or_default()
            .push(run.parse().unwrap());
    }
    let twice: Vec<_> = per_job.iter().filter(|(_, runs)| runs.len() > 1).collect();
    assert!(twice.is_empty(), "jobs that ran twice: {twice:?}");
    let started: std::collections::HashSet<i64> = per_job.values().flatten().copied().collect();
    let rows: Vec<(i64, i64, String, Option<String>)> = {
        use diesel::prelude::*;
        use jobfleet_admin::db::schema::job_run;
        job_run::table
            .select((
                job_run::id,
                job_run::job_id,
                job_run::status,
                job_run::agent_address,
            ))
            .load(&mut conn)
            .unwrap()
    };
    let never: Vec<_> = rows
        .iter()
        .filter(|(_, job, _, _)| !per_job.contains_key(job))
        .collect();
    assert!(
        never.is_empty(),
        "jobs that never ran: {} e.g. {:?}",
        never.len(),
        never.first()
    );
    let lost_unstarted: Vec<_> = rows
        .iter()
        .filter(|(id, _, status, _)| status == "lost" && !started.contains(id))
        .collect();
    assert!(
        lost_unstarted.is_empty(),
        "lost without having started: {lost_unstarted:?}"
    );
    let nameless: Vec<_> = rows
        .iter()
        .filter(|(_, _, _, agent)| agent.is_none())
        .collect();
    assert!(
        nameless.is_empty(),
        "runs without their agent: {nameless:?}"
    );
    let mut statuses: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, _, status, _) in &rows {
        *statuses.entry(status.as_str()).or_default() += 1;
    }
    eprintln!("burst outcome: {statuses:?}, {} jobs ran", per_job.len());
}

#[derive(diesel::QueryableByName)]
struct Count {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    n: i64,
}

/// `SELECT COUNT(*) AS n …` on a connection of its own.
fn count(db: &jobfleet_admin::testing::TestDb, sql: &str) -> i64 {
    use diesel::RunQueryDsl;
    diesel::sql_query(sql)
        .get_result::<Count>(&mut db.conn())
        .unwrap()
        .n
}

/// Containers and pods start a new cluster's admins beside its database, often before the
/// database accepts connections, and on an empty schema: both admins wait for it, one migrates
/// and creates the first user while the other waits for the migration lock, and both serve.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_clusters_admins_wait_for_their_database_and_start_together() {
    let db = tokio::task::spawn_blocking(jobfleet_admin::testing::TestDb::mysql_unmigrated)
        .await
        .unwrap();
    let server = jobfleet_admin::testing::mysql_server_url();
    let (credentials, mariadb) = server
        .trim_start_matches("mysql://")
        .rsplit_once('@')
        .unwrap();
    let mariadb = mariadb.to_owned();
    let database = db.url_string().rsplit('/').next().unwrap().to_owned();
    let port = free_port();
    let url = format!("mysql://{credentials}@127.0.0.1:{port}/{database}");
    let client = http_client();
    let mut first = AdminProc::start(&url);
    let mut second = AdminProc::start(&url);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        first.running() && second.running(),
        "an admin gave up on a database that is not up yet"
    );
    // The database comes up: its port now leads to MariaDB.
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .unwrap();
    let forwarder = tokio::spawn(async move {
        loop {
            let Ok((mut inbound, _)) = listener.accept().await else {
                return;
            };
            let mariadb = mariadb.clone();
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(&mariadb).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    first.ready(&client).await;
    second.ready(&client).await;
    let token = first.login(&client).await;
    second.login(&client).await;
    let users = call(
        &client,
        "GET",
        format!("{}/api/v1/users", second.base),
        &token,
        Value::Null,
    )
    .await;
    assert_eq!(users["total"], 1, "exactly one first admin: {users}");
    forwarder.abort();
}

/// Issue 16: two scheduling admins on MariaDB, two agents, two 30-node workflows (five layers
/// of six, each node joining all six of the layer before) running at once; the admin that
/// receives the agents' results is killed -9 in the middle. The other finishes both runs, and
/// every node ran exactly once: from the nodes' own output file, and from the run table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workflow_survives_its_admin_killed_mid_run_and_runs_every_node_once() {
    let db = crate::support::mysql_db().await;
    let url = db.url_string();
    let client = http_client();
    let mut first = AdminProc::start(&url);
    first.ready(&client).await;
    let second = AdminProc::start(&url);
    second.ready(&client).await;
    let token = second.login(&client).await;
    let group = second.group(&client, &token, "wf-cluster").await;
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("ran.txt");
    // The first admin is the agents' first choice: it gets their results, and so takes the
    // workflow's steps, until it dies.
    let admins = format!("{}/,{}/", first.base, second.base);
    let agents: Vec<AgentProc> = (0..2)
        .map(|i| AgentProc::start(&admins, "wf-cluster", &dir.path().join(format!("a{i}"))))
        .collect();
    for agent in &agents {
        second.wait_for_agent(&client, &token, &agent.address).await;
    }
    let job = call(
        &client,
        "POST",
        format!("{}/api/v1/jobs", second.base),
        &token,
        json!({"group_id": group, "name": "step", "routing": "round_robin",
               "schedule": {"type": "none"},
               "handler": {"type": "shell", "command": format!(
                   "echo \"$JOBFLEET_WORKFLOW_RUN_ID $JOBFLEET_WORKFLOW_NODE\" >> {}; sleep 0.3",
                   ran.display())}}),
    )
    .await["id"]
        .as_i64()
        .unwrap();
    let key = |layer: usize, i: usize| format!("l{layer}n{i}");
    let mut nodes = Vec::new();
    let mut edges = Vec::new();
    for layer in 0..5 {
        for i in 0..6 {
            nodes.push(json!({"key": key(layer, i), "job_id": job}));
            if layer > 0 {
                for j in 0..6 {
                    edges.push(json!({"from": key(layer - 1, j), "to": key(layer, i)}));
                }
            }
        }
    }
    let workflow = call(
        &client,
        "POST",
        format!("{}/api/v1/workflows", second.base),
        &token,
        json!({"group_id": group, "name": "layers", "nodes": nodes, "edges": edges}),
    )
    .await["id"]
        .as_i64()
        .unwrap();
    let mut runs = Vec::new();
    for _ in 0..2 {
        let run = call(
            &client,
            "POST",
            format!("{}/api/v1/workflows/{workflow}/trigger", first.base),
            &token,
            json!({}),
        )
        .await;
        runs.push(run["id"].as_i64().expect("a workflow run"));
    }
    let run_of = |id: i64| {
        let client = client.clone();
        let (base, token) = (second.base.clone(), token.clone());
        async move {
            call(
                &client,
                "GET",
                format!("{base}/api/v1/workflow-runs/{id}"),
                &token,
                Value::Null,
            )
            .await
        }
    };
    let done_nodes = |run: &Value| {
        run["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|n| n["status"] == "succeeded")
            .count()
    };
    wait_for(
        Duration::from_secs(60),
        "a third of the nodes done",
        || async { (done_nodes(&run_of(runs[0]).await) >= 10).then_some(()) },
    )
    .await;
    first.kill9();
    for &id in &runs {
        let run = wait_for(
            Duration::from_secs(120),
            "the workflow run to end",
            || async {
                let run = run_of(id).await;
                (run["status"] != "running").then_some(run)
            },
        )
        .await;
        assert_eq!(run["status"], "succeeded", "{run}");
        for node in run["nodes"].as_array().unwrap() {
            assert_eq!(node["status"], "succeeded", "{node}");
            assert_eq!(
                node["run_ids"].as_array().unwrap().len(),
                1,
                "one job run per node: {node}"
            );
        }
    }
    let text = std::fs::read_to_string(&ran).unwrap();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for line in text.lines() {
        *seen.entry(line.to_owned()).or_default() += 1;
    }
    assert_eq!(seen.len(), 60, "every node of both runs ran: {text}");
    assert!(
        seen.values().all(|&n| n == 1),
        "a node ran twice: {:?}",
        seen.iter().filter(|(_, n)| **n > 1).collect::<Vec<_>>()
    );
    drop(agents);
}

/// Two admin processes schedule one every-second workflow; the first is killed -9 mid-stream.
/// Each slot has exactly one workflow run in the table (the pending slot is taken by one
/// admin, and the slot is a unique key), and the survivor fires on by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_admins_start_each_workflow_slot_once() {
    use jobfleet_admin::db::Page;
    use jobfleet_admin::db::workflow_run::{self, RunFilter};
    use jobfleet_admin::domain::ids::WorkflowId;

    let db = crate::support::mysql_db().await;
    let url = db.url_string();
    let client = http_client();
    let mut first = AdminProc::start(&url);
    first.ready(&client).await;
    let second = AdminProc::start(&url);
    second.ready(&client).await;
    let token = second.login(&client).await;
    let group = first.group(&client, &token, "wfcluster").await;
    let dir = tempfile::tempdir().unwrap();
    let admins = format!("{}/,{}/", first.base, second.base);
    let agent = AgentProc::start(&admins, "wfcluster", &dir.path().join("a"));
    second.wait_for_agent(&client, &token, &agent.address).await;
    let job = call(
        &client,
        "POST",
        format!("{}/api/v1/jobs", first.base),
        &token,
        json!({"group_id": group, "name": "step", "schedule": {"type": "none"},
            "handler": {"type": "shell", "command": "true"}}),
    )
    .await["id"]
        .as_i64()
        .unwrap();
    let body = json!({"group_id": group, "name": "every-second",
        "schedule": {"type": "fixed_rate", "interval_s": 1},
        "nodes": [{"key": "a", "job_id": job}]});
    let wf = call(
        &client,
        "POST",
        format!("{}/api/v1/workflows", first.base),
        &token,
        body.clone(),
    )
    .await["id"]
        .as_i64()
        .unwrap();
    let runs = || {
        let mut conn = db.conn();
        workflow_run::list(
            &mut conn,
            &RunFilter {
                workflow_id: Some(WorkflowId(wf)),
                ..RunFilter::default()
            },
            Page {
                limit: 500,
                offset: 0,
            },
        )
        .unwrap()
        .0
    };
    let succeeded_after = |after_ms: i64| {
        runs()
            .iter()
            .filter(|r| {
                r.status.as_str() == "succeeded" && r.fire_slot_ms.is_some_and(|s| s > after_ms)
            })
            .count()
    };
    let now_ms = || chrono::Utc::now().timestamp_millis();
    wait_for(Duration::from_secs(60), "both admins to fire", || async {
        (succeeded_after(0) >= 5).then_some(())
    })
    .await;
    first.kill9();
    let killed_ms = now_ms();
    wait_for(
        Duration::from_secs(60),
        "the survivor to fire on",
        || async { (succeeded_after(killed_ms + 6_000) >= 3).then_some(()) },
    )
    .await;
    let mut disabled = body;
    disabled["enabled"] = json!(false);
    call(
        &client,
        "PUT",
        format!("{}/api/v1/workflows/{wf}", second.base),
        &token,
        disabled,
    )
    .await;
    let all = runs();
    let mut slots: BTreeMap<i64, usize> = BTreeMap::new();
    for run in &all {
        let slot = run
            .fire_slot_ms
            .unwrap_or_else(|| panic!("a scheduled run without its slot: {run:?}"));
        *slots.entry(slot).or_insert(0) += 1;
    }
    assert!(
        slots.values().all(|n| *n == 1),
        "a slot started twice: {slots:?}"
    );
    let keys: Vec<i64> = slots.keys().copied().collect();
    assert!(
        keys.windows(2).all(|w| (w[1] - w[0]) % 1000 == 0),
        "slots keep the fixed-rate phase: {keys:?}"
    );
    assert!(
        keys.first().is_some_and(|s| *s < killed_ms)
            && keys.last().is_some_and(|s| *s > killed_ms + 6_000),
        "fired through the kill: {keys:?}"
    );
}

/// Edits of jobs that fire every second, on MariaDB: the scheduler's run insert takes a shared
/// lock on the job row and its plan then updates the row, so an edit that updates the same row
/// can be chosen as a deadlock's victim. The admin runs the victim's transaction again; every
/// edit answers 2xx (it answered 500 before), and what the last edit said is what is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_edits_while_the_jobs_fire_all_succeed() {
    // Four editors go past an admin's default request rate.
    let app = TestApp::scheduling(true, &[("JOBFLEET_API_REQUESTS_PER_MINUTE_ADMIN", "0")]).await;
    let dir = tempfile::tempdir().unwrap();
    let g = app.group("busy-edits").await;
    let agent = AgentProc::start(&app.base, "busy-edits", &dir.path().join("agent"));
    app.wait_for_agent(&agent.address).await;
    let mut jobs = Vec::new();
    for i in 0..12 {
        let job = app
            .job_from(
                g,
                json!({"name": format!("busy-{i}"), "routing": "round_robin",
                    "schedule": {"type": "fixed_rate", "interval_s": 1},
                    "handler": {"type": "shell", "command": "true"}}),
            )
            .await;
        jobs.push(job);
    }
    let deadlocks_before = innodb_deadlocks(&app).await;
    let until = std::time::Instant::now() + Duration::from_secs(10);
    // Four editors at once, each over every job, while the twelve jobs fire.
    let editor = |shift: usize| {
        let app = &app;
        let jobs = &jobs;
        async move {
            let mut edits = 0;
            while std::time::Instant::now() < until {
                for (i, job) in jobs.iter().enumerate() {
                    let action = if (i + shift + edits).is_multiple_of(2) {
                        "disable"
                    } else {
                        "enable"
                    };
                    let r = app
                        .post(
                            &format!("/api/v1/jobs/{job}/{action}"),
                            &app.admin,
                            json!({}),
                        )
                        .await;
                    assert!(
                        r.status.is_success(),
                        "{action} of job {job} while it fires: {} {}",
                        r.status,
                        r.body
                    );
                }
                edits += 1;
            }
            edits
        }
    };
    let rounds = futures_util::future::join_all((0..4).map(editor)).await;
    eprintln!(
        "edit rounds per editor {rounds:?}; InnoDB deadlocks during them: {}",
        innodb_deadlocks(&app).await - deadlocks_before
    );
    for job in &jobs {
        let r = app
            .post(&format!("/api/v1/jobs/{job}/enable"), &app.admin, json!({}))
            .await;
        assert!(r.status.is_success(), "{}", r.body);
        let stored = app.get(&format!("/api/v1/jobs/{job}"), &app.admin).await;
        assert_eq!(stored.body["enabled"], true, "{}", stored.body);
    }
    // Still firing after the storm: every job runs again. A job's newest runs are the ones its
    // plan passes stored ahead (up to 5 s of them): the page must reach past those.
    let since_ms = chrono::Utc::now().timestamp_millis();
    wait_for(
        Duration::from_secs(20),
        "every job to fire again",
        || async {
            for job in &jobs {
                let runs = app
                    .get(&format!("/api/v1/runs?job_id={job}&limit=50"), &app.admin)
                    .await;
                let fired = runs.body["items"].as_array().is_some_and(|items| {
                    items.iter().any(|r| {
                        r["status"] == "succeeded" && r["scheduled_ms"].as_i64().unwrap() > since_ms
                    })
                });
                if !fired {
                    return None;
                }
            }
            Some(())
        },
    )
    .await;
}

/// The server's count of deadlocks it broke, for the test's report: whether the run had any
/// to retry depends on timing.
async fn innodb_deadlocks(app: &TestApp) -> i64 {
    use diesel::prelude::*;
    let jobfleet_admin::db::DbUrl::Mysql(url) = app.state.db.url().clone() else {
        unreachable!("a MariaDB test")
    };
    tokio::task::spawn_blocking(move || {
        #[derive(QueryableByName)]
        struct Status {
            #[diesel(sql_type = diesel::sql_types::Text)]
            #[diesel(column_name = Value)]
            value: String,
        }
        let mut conn = diesel::MysqlConnection::establish(&url).unwrap();
        let rows: Vec<Status> = diesel::sql_query("SHOW GLOBAL STATUS LIKE 'Innodb_deadlocks'")
            .load(&mut conn)
            .unwrap();
        rows.first().and_then(|s| s.value.parse().ok()).unwrap_or(0)
    })
    .await
    .unwrap()
}
