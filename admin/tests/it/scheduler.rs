//! The scheduler end to end: fires stored and sent on time to real agents, misfire and clock
//! jumps with a manual clock, routing strategies across real agents, failover past bad agents,
//! concurrency policies, retries, child jobs, lost runs, and a database outage.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use jobfleet_admin::dispatch::send;
use jobfleet_admin::scheduler::{monitors, tick};
use serde_json::{Value, json};

use crate::support::agent::{Executor, fake_executor};
use crate::support::both_backends;
use crate::support::{AgentProc, Opts, TestApp, wait_for};

const WITHIN: Duration = Duration::from_secs(30);
/// The most before its time the timer takes a run.
const TAKEN_EARLY_MS: i64 = send::TAKE_AHEAD_MS + send::TAKE_SPAN_MS;

async fn finished_runs(app: &TestApp, job: i64, at_least: usize) -> Vec<Value> {
    wait_for(
        WITHIN,
        &format!("{at_least} finished runs of job {job}"),
        || async {
            let runs = app.runs_of(job).await;
            let done: Vec<Value> = runs
                .into_iter()
                .filter(|r| !matches!(r["status"].as_str(), Some("pending" | "running")))
                .collect();
            (done.len() >= at_least).then_some(done)
        },
    )
    .await
}

async fn agents(app: &TestApp, name: &str, n: usize, dir: &tempfile::TempDir) -> Vec<AgentProc> {
    let mut out = Vec::new();
    for i in 0..n {
        let agent = AgentProc::start(&app.base, name, &dir.path().join(format!("{name}-{i}")));
        app.wait_for_agent(&agent.address).await;
        out.push(agent);
    }
    out
}

/// Two pending runs of `job` due `lead_ms` from now, a fifth of a take apart, handed to the timer:
/// one take holds both.
async fn two_runs_in_one_take(
    app: &TestApp,
    job: i64,
    g: i64,
    lead_ms: i64,
) -> (
    jobfleet_admin::domain::ids::RunId,
    jobfleet_admin::domain::ids::RunId,
) {
    use jobfleet_admin::db::job_run;
    use jobfleet_admin::scheduler::Due;
    let at = app.now_ms() + lead_ms;
    let new_run = move |scheduled_ms: i64| {
        crate::support::pending_api_run(job, g, scheduled_ms, at - lead_ms)
    };
    let (earlier, later) = app
        .state
        .db
        .run(move |conn| {
            Ok((
                job_run::insert(conn, &new_run(at))?,
                job_run::insert(conn, &new_run(at + send::TAKE_SPAN_MS / 5))?,
            ))
        })
        .await
        .unwrap();
    app.state.scheduler.enqueue([
        Due {
            at_ms: at,
            run_id: earlier,
        },
        Due {
            at_ms: at + send::TAKE_SPAN_MS / 5,
            run_id: later,
        },
    ]);
    (earlier, later)
}

/// The `done-<run id>` files that runs of the replace tests' job leave when they finish.
fn done_files(dir: &tempfile::TempDir) -> Vec<String> {
    std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|name| name.starts_with("done-"))
        .collect()
}

async fn scheduled_jobs_fire_on_time_on_a_real_agent(mysql: bool) {
    let app = TestApp::scheduling(mysql, &[]).await;
    let dir = tempfile::tempdir().unwrap();
    let g = app.group("sched-basic").await;
    let _agents = agents(&app, "sched-basic", 1, &dir).await;
    let before = app.now_ms();
    let every_second = app
        .job_from(
            g,
            json!({"name": "rate", "enabled": true,
            "schedule": {"type": "fixed_rate", "interval_s": 1},
            "handler": {"type": "shell", "command": "true"}}),
        )
        .await;
    let cron = app
        .job_from(
            g,
            json!({"name": "cron", "enabled": true,
            "schedule": {"type": "cron", "expr": "* * * * * ?", "timezone": "Asia/Shanghai"},
            "handler": {"type": "shell", "command": "true"}}),
        )
        .await;
    let once_at = app.now_ms() + 1500;
    let once = app
        .job_from(
            g,
            json!({"name": "once", "enabled": true,
            "schedule": {"type": "once", "at_ms": once_at},
            "handler": {"type": "shell", "command": "true"}}),
        )
        .await;
    for job in [every_second, cron] {
        let runs = finished_runs(&app, job, 3).await;
        let slots: Vec<i64> = runs
            .iter()
            .map(|r| r["scheduled_ms"].as_i64().unwrap())
            .collect();
        assert!(
            slots.windows(2).all(|w| w[1] - w[0] == 1000),
            "one fire per second: {slots:?}"
        );
        for run in &runs {
            assert_eq!(
                (run["status"].as_str(), run["trigger_kind"].as_str()),
                (Some("succeeded"), Some("schedule")),
                "{run}"
            );
            // Started at its millisecond, not at the next whole second: the timer holds stored
            // fires, takes them a moment ahead and hands each over at its time, never before.
            let scheduled = run["scheduled_ms"].as_i64().unwrap();
            let late = run["started_ms"].as_i64().unwrap() - scheduled;
            assert!(
                (0..900).contains(&late),
                "started {late} ms after its time: {run}"
            );
            let taken = run["triggered_ms"].as_i64().unwrap() - scheduled;
            assert!(
                (-TAKEN_EARLY_MS..900).contains(&taken),
                "taken {taken} ms after its time: {run}"
            );
        }
        // Created and planned at once, without waiting for a poll.
        assert!(
            slots[0] - before <= 2000,
            "first fire {} ms after creation",
            slots[0] - before
        );
    }
    let once_runs = finished_runs(&app, once, 1).await;
    assert_eq!(once_runs[0]["scheduled_ms"], json!(once_at));
    let job = app
        .get(&format!("/api/v1/jobs/{once}"), &app.admin)
        .await
        .body;
    assert!(
        job["next_fire_ms"].is_null(),
        "a one-shot has no next fire: {job}"
    );

    // Disabling stops firing at once; what was already stored is skipped, not sent.
    let r = app
        .post(
            &format!("/api/v1/jobs/{every_second}/disable"),
            &app.admin,
            json!({}),
        )
        .await;
    assert!(r.status.is_success(), "{}", r.body);
    let disabled_at = app.now_ms();
    let plan_passes = || app.state.metrics.workers.snapshot()["plan"].passes;
    // A pass begun before the disable may still store fires: count once two have ended since.
    let passes = plan_passes();
    wait_for(WITHIN, "two plan passes after the disable", || async {
        (plan_passes() >= passes + 2).then_some(())
    })
    .await;
    let stored = app.runs_of(every_second).await;
    let count = stored.len();
    // What was stored lies within the pre-read window; the timer meets each at its time.
    let last_stored = stored
        .iter()
        .filter_map(|r| r["scheduled_ms"].as_i64())
        .max()
        .unwrap();
    assert!(
        last_stored <= disabled_at + tick::PRE_READ_MS + 1_000,
        "stored {} ms ahead",
        last_stored - disabled_at
    );
    // Done when every stored fire has met the timer, and a plan pass has begun more than an
    // interval after the disable (a still enabled job would have stored a further slot).
    let interval_later = std::cell::Cell::new(None);
    let after = wait_for(WITHIN, "the stored fires to end", || async {
        if interval_later.get().is_none() && app.now_ms() > disabled_at + 1_000 {
            interval_later.set(Some(plan_passes()));
        }
        let runs = app.runs_of(every_second).await;
        let ended = runs
            .iter()
            .all(|r| !matches!(r["status"].as_str(), Some("pending" | "running")));
        let planned_since = interval_later.get().is_some_and(|p| plan_passes() >= p + 2);
        // A new fire fails at once, below.
        (runs.len() > count || (ended && planned_since)).then_some(runs)
    })
    .await;
    assert!(
        after.len() <= count,
        "no new fires after disable: {} > {count}",
        after.len()
    );
    // A fire the timer took a moment ahead, before the disable, was sent.
    let sent: Vec<&Value> = after
        .iter()
        .filter(|r| {
            r["scheduled_ms"].as_i64().unwrap() > disabled_at + TAKEN_EARLY_MS
                && r["status"] != "skipped"
        })
        .collect();
    assert!(
        sent.is_empty(),
        "stored fires of a disabled job end as skipped: {sent:?}"
    );

    let metrics = app.metrics_text().await;
    let fires: u64 = metrics
        .lines()
        .find(|l| l.starts_with("jobfleet_fires_total{kind=\"schedule\"}"))
        .and_then(|l| l.rsplit(' ').next())
        .unwrap()
        .parse()
        .unwrap();
    assert!(fires >= 7, "{metrics}");
    assert!(
        metrics.contains(
            "
jobfleet_agents_alive 1
"
        ),
        "the liveness monitor counts the one agent: {metrics}"
    );
    assert!(
        metrics.contains("jobfleet_fire_lateness_seconds_count"),
        "{metrics}"
    );
}
both_backends!(scheduled_jobs_fire_on_time_on_a_real_agent);

/// Runs due within moments of each other are taken in one transaction ahead of their time, and
/// each is still handed over at its own millisecond, never before it.
async fn runs_due_moments_apart_are_taken_together_and_started_on_time(mysql: bool) {
    let app = TestApp::scheduling(mysql, &[]).await;
    let dir = tempfile::tempdir().unwrap();
    let g = app.group("sched-ahead").await;
    let _agents = agents(&app, "sched-ahead", 1, &dir).await;
    // Far enough ahead that every run is planned and with the timer before the first is due.
    let first_at = app.now_ms() + 3_000;
    let step = send::TAKE_SPAN_MS / 5;
    let mut jobs = Vec::new();
    for i in 0..5 {
        jobs.push(
            app.job_from(
                g,
                json!({"name": format!("ahead-{i}"), "enabled": true,
                "schedule": {"type": "once", "at_ms": first_at + i * step},
                "handler": {"type": "shell", "command": "true"}}),
            )
            .await,
        );
    }
    let mut taken_at = std::collections::BTreeSet::new();
    for job in jobs {
        let run = finished_runs(&app, job, 1).await.remove(0);
        assert_eq!(run["status"], "succeeded", "{run}");
        let scheduled = run["scheduled_ms"].as_i64().unwrap();
        let started = run["started_ms"].as_i64().unwrap();
        assert!(
            started >= scheduled,
            "started {} ms before its time: {run}",
            scheduled - started
        );
        let triggered = run["triggered_ms"].as_i64().unwrap();
        assert!(
            (-TAKEN_EARLY_MS..900).contains(&(triggered - scheduled)),
            "taken {} ms after its time: {run}",
            triggered - scheduled
        );
        taken_at.insert(triggered);
    }
    assert_eq!(
        taken_at.len(),
        1,
        "one take for the five runs: {taken_at:?}"
    );
}
both_backends!(runs_due_moments_apart_are_taken_together_and_started_on_time);

/// A timed run's acceptance is held back for a short run's result to store it; a kill in that
/// moment, while the run still reads as pending without an agent, stores it first and kills the
/// run on its agent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_killed_while_its_acceptance_is_held_back_is_killed_on_its_agent() {
    let app = TestApp::scheduling(false, &[]).await;
    let dir = tempfile::tempdir().unwrap();
    let g = app.group("sched-held").await;
    let agent = agents(&app, "sched-held", 1, &dir).await.remove(0);
    let at = app.now_ms() + 2_000;
    let job = app
        .job_from(
            g,
            json!({"name": "long", "enabled": true,
            "schedule": {"type": "once", "at_ms": at},
            "handler": {"type": "shell", "command": "sleep 30"}}),
        )
        .await;
    let id = wait_for(WITHIN, "the run to be stored", || async {
        app.runs_of(job)
            .await
            .first()
            .and_then(|r| r["id"].as_i64())
    })
    .await;
    let mut killed_while_held = None;
    while killed_while_held.is_none() {
        let run = app.run(id).await;
        assert!(app.now_ms() < at + 5_000, "never killed: {run}");
        if run["status"] == "running" {
            // Too slow to catch the held moment: the kill must still work.
            killed_while_held = Some(false);
        } else if run["status"] == "pending" && !run["triggered_ms"].is_null() && app.now_ms() > at
        {
            let r = app
                .post(&format!("/api/v1/runs/{id}/kill"), &app.admin, json!({}))
                .await;
            if r.status.is_success() {
                killed_while_held = Some(true);
            } else {
                // The hand-over itself may still be going.
                assert_eq!(r.status, 409, "{}", r.body);
            }
            continue;
        } else {
            tokio::time::sleep(Duration::from_millis(2)).await;
            continue;
        }
        let r = app
            .post(&format!("/api/v1/runs/{id}/kill"), &app.admin, json!({}))
            .await;
        assert!(r.status.is_success(), "{}", r.body);
    }
    assert_eq!(
        killed_while_held,
        Some(true),
        "the kill came too late to test"
    );
    let run = app.finished_run(id, WITHIN).await;
    assert_eq!(
        (run["status"].as_str(), run["agent"].as_str()),
        (Some("killed"), Some(agent.address.as_str())),
        "{run}"
    );
    assert!(
        run["trigger_msg"]
            .as_str()
            .unwrap()
            .starts_with("accepted by"),
        "{run}"
    );
}

/// A manual-clock admin without workers: passes are run by hand.
async fn manual(mysql: bool) -> TestApp {
    TestApp::start_opts(crate::support::test_db(mysql).await, &[], Opts::default()).await
}

fn slot_counts(runs: &[Value]) -> BTreeMap<i64, usize> {
    let mut counts = BTreeMap::new();
    for r in runs {
        if let Some(slot) = r["fire_slot_ms"].as_i64() {
            *counts.entry(slot).or_insert(0) += 1;
        }
    }
    counts
}

async fn misfire_policies_and_clock_jumps_with_a_manual_clock(mysql: bool) {
    let app = manual(mysql).await;
    let g = app.group("sched-manual").await;
    let t0 = app.now_ms();
    let body = |name: &str, misfire: &str| {
        json!({"name": name, "enabled": true, "misfire": misfire,
            "schedule": {"type": "fixed_rate", "interval_s": 10},
            "handler": {"type": "shell", "command": "true"}})
    };
    let skip = app.job_from(g, body("skip", "do_nothing")).await;
    let catch_up = app.job_from(g, body("catch-up", "fire_once_now")).await;
    // Nothing is due yet: the first fire is 10 s after creation, beyond the 5 s pre-read.
    let first = tick::tick(&app.state).await.unwrap();
    assert!(first.dues.is_empty());
    // 6 s later both jobs' first fire is inside the pre-read window: stored, due at its time.
    app.clock.advance(6_000);
    let second = tick::tick(&app.state).await.unwrap();
    assert_eq!(second.dues.len(), 2, "{second:?}");
    assert!(second.dues.iter().all(|d| d.at_ms == t0 + 10_000));
    // A second pass at the same moment stores nothing twice.
    assert!(tick::tick(&app.state).await.unwrap().dues.is_empty());

    // The admin is down for half an hour: the clock jumps forward.
    app.clock.advance(1_800_000);
    let after_outage = tick::tick(&app.state).await.unwrap();
    let by_job = |job: i64, runs: &[Value]| -> Vec<Value> {
        runs.iter()
            .filter(|r| r["job_id"] == job)
            .cloned()
            .collect()
    };
    let skip_runs = by_job(skip, &app.runs_of(skip).await);
    let catch_runs = by_job(catch_up, &app.runs_of(catch_up).await);
    assert!(
        skip_runs.iter().all(|r| r["trigger_kind"] == "schedule"),
        "do_nothing adds no catch-up fire: {skip_runs:?}"
    );
    let misfires: Vec<&Value> = catch_runs
        .iter()
        .filter(|r| r["trigger_kind"] == "misfire")
        .collect();
    assert_eq!(
        misfires.len(),
        1,
        "fire_once_now fires one catch-up: {catch_runs:?}"
    );
    assert_eq!(misfires[0]["scheduled_ms"].as_i64(), Some(app.now_ms()));
    // Both resume on their fixed-rate phase (every 10 s from creation).
    for d in &after_outage.dues {
        let run = app.run(d.run_id.0).await;
        if run["trigger_kind"] == "schedule" {
            assert_eq!((d.at_ms - (t0 + 10_000)) % 10_000, 0, "{run}");
            assert!(d.at_ms >= app.now_ms() - 5_000);
        }
    }
    let missed = app.state.metrics.misfired_slots.get("do_nothing");
    assert!(missed >= 170, "misfired slots are counted: {missed}");

    // The clock jumps back half an hour: nothing fires twice, nothing fires early.
    let stored_before = app.runs_of(skip).await.len() + app.runs_of(catch_up).await.len();
    app.clock.advance(-1_800_000);
    for _ in 0..3 {
        assert!(tick::tick(&app.state).await.unwrap().dues.is_empty());
        app.clock.advance(1_000);
    }
    assert_eq!(
        app.runs_of(skip).await.len() + app.runs_of(catch_up).await.len(),
        stored_before
    );
    for job in [skip, catch_up] {
        assert!(
            slot_counts(&app.runs_of(job).await)
                .values()
                .all(|n| *n == 1),
            "one run per slot"
        );
    }

    // Editing the schedule takes effect in the next pass: a job moved to a 1 s rate is planned
    // from now, and its stored slots are never duplicated.
    app.clock.advance(1_800_000);
    let mut edited = body("skip", "do_nothing");
    edited["group_id"] = json!(g);
    edited["schedule"] = json!({"type": "fixed_rate", "interval_s": 1});
    let r = app
        .call(
            "PUT",
            &format!("/api/v1/jobs/{skip}"),
            Some(&app.admin),
            Some(edited),
        )
        .await;
    assert!(r.status.is_success(), "{}", r.body);
    let planned = tick::tick(&app.state).await.unwrap();
    let fresh: Vec<_> = planned
        .dues
        .iter()
        .filter(|d| d.at_ms > app.now_ms())
        .collect();
    assert!(fresh.len() >= 4, "{planned:?}");
}
both_backends!(misfire_policies_and_clock_jumps_with_a_manual_clock);

/// A job's starting deadline replaces the admin's misfire threshold for its slots: after a
/// three-minute outage, a job allowed ten minutes still starts every late slot, while one on
/// the admin's 5 s threshold skips them (`do_nothing`).
async fn a_jobs_starting_deadline_decides_what_has_misfired(mysql: bool) {
    let app = manual(mysql).await;
    let g = app.group("sched-deadline").await;
    let t0 = app.now_ms();
    let body = |name: &str, deadline: Option<i64>| {
        json!({"name": name, "misfire": "do_nothing", "start_deadline_s": deadline,
            "schedule": {"type": "fixed_rate", "interval_s": 60},
            "handler": {"type": "shell", "command": "true"}})
    };
    let patient = app.job_from(g, body("patient", Some(600))).await;
    let strict = app.job_from(g, body("strict", None)).await;
    assert!(tick::tick(&app.state).await.unwrap().dues.is_empty());
    app.clock.advance(180_000);
    tick::tick(&app.state).await.unwrap();
    let slots = |runs: Vec<Value>| -> Vec<i64> {
        let mut slots: Vec<i64> = runs
            .iter()
            .filter_map(|r| r["fire_slot_ms"].as_i64())
            .map(|s| s - t0)
            .collect();
        slots.sort_unstable();
        slots
    };
    assert_eq!(
        slots(app.runs_of(patient).await),
        [60_000, 120_000, 180_000],
        "every slot within the deadline starts late"
    );
    assert_eq!(
        slots(app.runs_of(strict).await),
        [180_000],
        "slots older than the threshold misfired"
    );
}
both_backends!(a_jobs_starting_deadline_decides_what_has_misfired);

/// A burst is planned with a few statements per pass, in passes of 500 jobs on SQLite (MySQL
/// plans the 520 in one pass, whose statements are chunked beyond 500 rows); when a stored slot
/// is met again the pass is redone job by job and nothing is stored twice.
async fn a_burst_is_planned_in_batches_and_a_met_slot_falls_back(mysql: bool) {
    let app = manual(mysql).await;
    let g = app.group("sched-burst").await;
    let due = app.now_ms() + 3_000;
    let mut jobs = Vec::new();
    for i in 0..520 {
        jobs.push(
            app.job_from(
                g,
                json!({"name": format!("burst-{i}"), "enabled": true,
                    "schedule": {"type": "once", "at_ms": due},
                    "handler": {"type": "shell", "command": "true"}}),
            )
            .await,
        );
    }
    // SQLite plans 500 jobs a pass, so that a pass holds the write turn briefly, and says
    // there is more; MySQL plans 2,000.
    let mut dues = Vec::new();
    let mut passes = Vec::new();
    loop {
        let planned = tick::tick(&app.state).await.unwrap();
        passes.push(planned.dues.len());
        dues.extend(planned.dues);
        if !planned.more {
            break;
        }
        assert!(passes.len() < 5, "{passes:?}");
    }
    assert_eq!(passes, if mysql { vec![520] } else { vec![500, 20] });
    assert!(dues.iter().all(|d| d.at_ms == due));
    let mut run_ids: Vec<i64> = dues.iter().map(|d| d.run_id.0).collect();
    run_ids.sort_unstable();
    run_ids.dedup();
    assert_eq!(run_ids.len(), 520, "one run id per fire");
    for d in dues.iter().step_by(97) {
        let run = app.run(d.run_id.0).await;
        assert_eq!(run["scheduled_ms"].as_i64(), Some(due), "{run}");
        assert!(jobs.contains(&run["job_id"].as_i64().unwrap()));
    }
    // An edit that puts a job back on its stored slot: the batched insert meets the unique
    // key, the pass is redone job by job, and the slot keeps its one run.
    let edited = jobs[7];
    app.state
        .db
        .run(move |conn| {
            use diesel::RunQueryDsl;
            diesel::sql_query(format!(
                "UPDATE job SET next_fire_ms = {due} WHERE id = {edited}"
            ))
            .execute(conn)?;
            Ok(())
        })
        .await
        .unwrap();
    let again = tick::tick(&app.state).await.unwrap();
    assert!(again.dues.is_empty(), "{again:?}");
    assert_eq!(app.runs_of(edited).await.len(), 1);
    let job = app.get(&format!("/api/v1/jobs/{edited}"), &app.admin).await;
    assert!(job.body["next_fire_ms"].is_null(), "{}", job.body);
}
both_backends!(a_burst_is_planned_in_batches_and_a_met_slot_falls_back);

fn agent_counts(runs: &[Value]) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for r in runs {
        *counts
            .entry(r["agent"].as_str().unwrap_or("none").to_owned())
            .or_insert(0) += 1;
    }
    counts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routing_strategies_across_three_real_agents() {
    let app = TestApp::scheduling(false, &[]).await;
    let dir = tempfile::tempdir().unwrap();
    let g = app.group("sched-route").await;
    let agents = agents(&app, "sched-route", 3, &dir).await;
    let mut addresses: Vec<String> = agents.iter().map(|a| a.address.clone()).collect();
    addresses.sort();
    let job = |name: &str, routing: &str| json!({"name": name, "routing": routing, "handler": {"type": "shell", "command": "true"}});
    let trigger_n = async |id: i64, n: usize| -> Vec<Value> {
        let mut runs = Vec::new();
        for _ in 0..n {
            let run = app.trigger(id, json!({})).await;
            assert!(
                matches!(run["status"].as_str(), Some("running" | "succeeded")),
                "{run}"
            );
            runs.push(run);
        }
        runs
    };
    let rr = app.job_from(g, job("rr", "round_robin")).await;
    let counts = agent_counts(&trigger_n(rr, 6).await);
    assert_eq!(counts.len(), 3, "{counts:?}");
    assert!(counts.values().all(|n| *n == 2), "{counts:?}");

    let first = app.job_from(g, job("first", "first")).await;
    assert_eq!(agent_counts(&trigger_n(first, 3).await)[&addresses[0]], 3);
    let last = app.job_from(g, job("last", "last")).await;
    assert_eq!(agent_counts(&trigger_n(last, 3).await)[&addresses[2]], 3);

    let hash = app.job_from(g, job("hash", "consistent_hash")).await;
    assert_eq!(
        agent_counts(&trigger_n(hash, 4).await).len(),
        1,
        "a job keeps its agent"
    );

    let lfu = app.job_from(g, job("lfu", "least_frequently_used")).await;
    assert!(
        agent_counts(&trigger_n(lfu, 6).await)
            .values()
            .all(|n| *n == 2)
    );
    let lru = app.job_from(g, job("lru", "least_recently_used")).await;
    assert!(
        agent_counts(&trigger_n(lru, 3).await)
            .values()
            .all(|n| *n == 1)
    );

    let random = app.job_from(g, job("random", "random")).await;
    assert!(agent_counts(&trigger_n(random, 12).await).len() >= 2);
    let loaded = app.job_from(g, job("loaded", "least_loaded")).await;
    assert!(
        trigger_n(loaded, 2)
            .await
            .iter()
            .all(|r| r["agent"].is_string())
    );
    let busy = app.job_from(g, job("busy", "busyover")).await;
    assert!(
        trigger_n(busy, 2)
            .await
            .iter()
            .all(|r| r["agent"].is_string())
    );

    // Sharding: every live agent gets its own shard of one fire.
    let shards = app
        .job_from(g, json!({"name": "shards", "routing": "sharding_broadcast",
            "handler": {"type": "shell", "command": "echo shard=$JOBFLEET_SHARD_INDEX/$JOBFLEET_SHARD_TOTAL"}}))
        .await;
    app.trigger(shards, json!({})).await;
    let runs = finished_runs(&app, shards, 3).await;
    assert_eq!(runs.len(), 3, "{runs:?}");
    let mut seen: Vec<(i64, String)> = Vec::new();
    for run in &runs {
        assert_eq!(
            (run["status"].as_str(), run["shard_total"].as_i64()),
            (Some("succeeded"), Some(3)),
            "{run}"
        );
        let index = run["shard_index"].as_i64().unwrap();
        assert_eq!(
            app.full_log(run["id"].as_i64().unwrap()).await,
            format!("shard={index}/3\n")
        );
        seen.push((index, run["agent"].as_str().unwrap().to_owned()));
    }
    seen.sort();
    assert_eq!(seen.iter().map(|s| s.0).collect::<Vec<_>>(), vec![0, 1, 2]);
    let mut on: Vec<&String> = seen.iter().map(|s| &s.1).collect();
    on.sort();
    on.dedup();
    assert_eq!(on.len(), 3, "each shard on its own agent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_passes_dead_refusing_silent_and_garbage_agents() {
    let app = TestApp::scheduling(false, &[("JOBFLEET_TRIGGER_TIMEOUT_MS", "500")]).await;
    let dir = tempfile::tempdir().unwrap();
    let real = AgentProc::start(&app.base, "sched-fo-real", &dir.path().join("real"));
    app.wait_for_agent(&real.address).await;
    let dead = format!("http://127.0.0.1:{}/", crate::support::free_port());
    let refuse = fake_executor(Executor::Refusing).await;
    let silent = fake_executor(Executor::Silent).await;
    let garbage = fake_executor(Executor::Garbage).await;
    let r = app
        .post(
            "/api/v1/groups",
            &app.admin,
            json!({"app_name": "sched-fo", "title": "fo",
            "address_mode": "manual", "addresses": [dead, refuse, silent, garbage, real.address]}),
        )
        .await;
    assert!(r.status.is_success(), "{}", r.body);
    let g = r.body["id"].as_i64().unwrap();
    let failover = app
        .job_from(g, json!({"name": "fo", "routing": "failover", "handler": {"type": "shell", "command": "true"}}))
        .await;
    let run = app.trigger(failover, json!({})).await;
    assert_eq!(run["agent"].as_str(), Some(real.address.as_str()), "{run}");
    let msg = run["trigger_msg"].as_str().unwrap();
    for (address, why) in [
        (&dead, "unreachable"),
        (&refuse, "refused by test"),
        (&silent, "unreachable"),
        (&garbage, "not an executor answer"),
    ] {
        assert!(
            msg.contains(&format!("{address} ")) && msg.contains(why),
            "{address} {why}: {msg}"
        );
    }
    // The next run, within the 10 s, spares the address nobody listens at: it goes last.
    let next = app.trigger(failover, json!({})).await;
    assert_eq!(
        next["agent"].as_str(),
        Some(real.address.as_str()),
        "{next}"
    );
    let msg = next["trigger_msg"].as_str().unwrap();
    assert!(!msg.contains(&dead), "{msg}");
    for address in [&refuse, &silent, &garbage] {
        assert!(msg.contains(&format!("{address} ")), "{address}: {msg}");
    }
    for run in [&run, &next] {
        assert_eq!(
            app.finished_run(run["id"].as_i64().unwrap(), WITHIN).await["status"],
            "succeeded"
        );
    }

    // `first` moves past an agent it cannot reach (the one nobody listens at is tried last
    // still), but a refusal is that agent's answer.
    let first = app
        .job_from(g, json!({"name": "first", "routing": "first", "handler": {"type": "shell", "command": "true"}}))
        .await;
    let run = app.trigger(first, json!({})).await;
    assert_eq!(
        (run["status"].as_str(), run["agent"].as_str()),
        (Some("failed"), Some(refuse.as_str())),
        "{run}"
    );
}

/// The runs of a call sent ahead that got no answer go one by one to their first agent first,
/// even when its address has meanwhile failed a connect (which puts it last for runs just
/// taken): the call may have reached it, and it knows a run it already holds by its id, where
/// another agent would run it a second time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_batch_goes_back_to_its_first_agent_first() {
    use tokio::io::AsyncWriteExt;
    let app = TestApp::scheduling(false, &[("JOBFLEET_TRIGGER_TIMEOUT_MS", "5000")]).await;
    let port = crate::support::free_port();
    let first = format!("http://127.0.0.1:{port}/");
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .unwrap();
    let (second, second_heard) =
        crate::support::agent::fake_executor_heard(Executor::Accepting).await;
    let r = app
        .post(
            "/api/v1/groups",
            &app.admin,
            json!({"app_name": "sched-batch-back", "title": "batch back",
            "address_mode": "manual", "addresses": [first, second]}),
        )
        .await;
    assert!(r.status.is_success(), "{}", r.body);
    let g = r.body["id"].as_i64().unwrap();
    let ahead = app
        .job_from(
            g,
            json!({"name": "ahead", "enabled": true, "routing": "first",
            "schedule": {"type": "once", "at_ms": app.now_ms() + 3_000},
            "handler": {"type": "shell", "command": "true"}}),
        )
        .await;
    let manual = app
        .job_from(g, json!({"name": "manual", "routing": "first", "handler": {"type": "shell", "command": "true"}}))
        .await;

    // The timed run goes ahead to the first agent, which holds the call unanswered.
    let (mut batch_call, _) = tokio::time::timeout(WITHIN, listener.accept())
        .await
        .expect("the timed run's call sent ahead")
        .unwrap();
    let (line, _) = crate::support::agent::read_request(&mut batch_call)
        .await
        .unwrap();
    assert!(line.starts_with("POST /runBatch "), "{line}");
    // Meanwhile nobody listens at its address: a run taken now fails to connect there, which
    // marks the address, and goes to the second agent.
    drop(listener);
    let other = app.trigger(manual, json!({})).await;
    assert_eq!(other["agent"].as_str(), Some(second.as_str()), "{other}");
    assert!(
        other["trigger_msg"].as_str().unwrap().contains(&first),
        "{other}"
    );
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .unwrap();
    // The call ends without an answer: its run goes one by one, to the first agent first.
    drop(batch_call);
    let (mut again, _) = tokio::time::timeout(WITHIN, listener.accept())
        .await
        .expect("the run offered to its first agent again")
        .unwrap();
    let (line, body) = crate::support::agent::read_request(&mut again)
        .await
        .unwrap();
    assert!(line.starts_with("POST /run "), "{line}");
    let answer = r#"{"code":200,"msg":null}"#;
    again
        .write_all(
            format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{answer}",
                answer.len()
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    let run = wait_for(WITHIN, "the timed run accepted", || async {
        app.runs_of(ahead)
            .await
            .into_iter()
            .find(|run| run["agent"].is_string())
    })
    .await;
    assert_eq!(run["agent"].as_str(), Some(first.as_str()), "{run}");
    let sent: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(sent["logId"], run["id"], "{body}");
    let heard = second_heard.lock().unwrap().clone();
    assert_eq!(
        heard.len(),
        1,
        "the second agent got the manual run only: {heard:?}"
    );
}

async fn forbid_skips_and_replace_kills_the_running_run(mysql: bool) {
    let app = TestApp::scheduling(mysql, &[]).await;
    let dir = tempfile::tempdir().unwrap();
    let g = app.group("sched-conc").await;
    let _agents = agents(&app, "sched-conc", 2, &dir).await;
    let body = |name: &str, policy: &str| {
        json!({"name": name, "concurrency": policy, "routing": "round_robin",
            "handler": {"type": "shell", "command": "sleep 20"}})
    };
    let forbid = app.job_from(g, body("forbid", "forbid")).await;
    let a = app.trigger(forbid, json!({})).await;
    assert_eq!(a["status"], "running", "{a}");
    let b = app.trigger(forbid, json!({})).await;
    assert_eq!(b["status"], "skipped", "{b}");
    assert!(
        b["trigger_msg"]
            .as_str()
            .unwrap()
            .contains(&format!("run {} of this job is still running", a["id"])),
        "{b}"
    );

    let replace = app.job_from(g, body("replace", "replace")).await;
    let old = app.trigger(replace, json!({})).await;
    assert_eq!(old["status"], "running", "{old}");
    let new = app.trigger(replace, json!({})).await;
    assert_eq!(new["status"], "running", "{new}");
    let old = app.run(old["id"].as_i64().unwrap()).await;
    assert_eq!(old["status"], "killed", "{old}");
    assert!(
        old["handle_msg"]
            .as_str()
            .unwrap()
            .contains("replaced by run"),
        "{old}"
    );
    // The old process is really gone from its agent: the agent reports it killed, which the
    // admin acknowledges without changing the recorded outcome.
    let usage_done = app.finished_run(old["id"].as_i64().unwrap(), WITHIN).await;
    assert_eq!(usage_done["status"], "killed");
    app.post(
        &format!("/api/v1/runs/{}/kill", a["id"]),
        &app.admin,
        json!({}),
    )
    .await;
    app.post(
        &format!("/api/v1/runs/{}/kill", new["id"]),
        &app.admin,
        json!({}),
    )
    .await;
}

both_backends!(forbid_skips_and_replace_kills_the_running_run);

/// Two runs of a `replace` job due within one take while a third runs: the earlier of the two
/// replaces the running one, which is killed on its agent, and the later replaces the earlier in
/// the take's transaction, so the earlier never goes out (sent, it would start on its agent after
/// the kill meant for it had passed) and the later runs.
async fn a_run_replaced_within_its_own_take_is_never_sent(mysql: bool) {
    use jobfleet_admin::domain::ids::RunId;
    let app = TestApp::scheduling(mysql, &[]).await;
    let dir = tempfile::tempdir().unwrap();
    let g = app.group("sched-replace-take").await;
    let _agents = agents(&app, "sched-replace-take", 1, &dir).await;
    let job = app
        .job_from(
            g,
            json!({"name": "replace", "concurrency": "replace",
                "handler": {"type": "shell", "command": format!(
                    "sleep 3; touch {}/done-$JOBFLEET_RUN_ID", dir.path().display())}}),
        )
        .await;
    let running_before = app.trigger(job, json!({})).await;
    assert_eq!(running_before["status"], "running", "{running_before}");
    let (earlier, later) = two_runs_in_one_take(&app, job, g, 1_500).await;
    let running = wait_for(WITHIN, "the later run running", || async {
        let run = app.run(later.0).await;
        (run["status"] == "running").then_some(run)
    })
    .await;
    let RunId(earlier) = earlier;
    // Long enough for a hand-over of the earlier run, had there been one, to be answered.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let replaced = app.run(earlier).await;
    assert_eq!(
        (
            replaced["status"].as_str(),
            replaced["agent"].as_str(),
            replaced["started_ms"].as_i64()
        ),
        (Some("killed"), None, None),
        "{replaced}"
    );
    assert_eq!(
        replaced["triggered_ms"], running["triggered_ms"],
        "one take: {replaced} {running}"
    );
    let killed = app.run(running_before["id"].as_i64().unwrap()).await;
    assert_eq!(killed["status"], "killed", "{killed}");
    app.post(
        &format!("/api/v1/runs/{}/kill", later.0),
        &app.admin,
        json!({}),
    )
    .await;
    // Had either the run that was running or the replaced one been left on the agent, it would
    // have finished by now.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let done = done_files(&dir);
    assert!(done.is_empty(), "runs left running: {done:?}");
}

both_backends!(a_run_replaced_within_its_own_take_is_never_sent);

/// A `replace` job whose new run finds no agent (its labels were changed to ones no agent has)
/// still kills the run it replaces on that run's agent: no later trigger reaches the agent to
/// cover the old run, so the kill is the only thing that stops it.
async fn a_replacing_run_with_no_agent_still_kills_the_run_it_replaces(mysql: bool) {
    let app = TestApp::scheduling(mysql, &[]).await;
    let dir = tempfile::tempdir().unwrap();
    let g = app.group("sched-replace-none").await;
    let agent = AgentProc::start_with(
        &app.base,
        "sched-replace-none",
        &dir.path().join("agent"),
        &[("JOBFLEET_AGENT_LABELS", "zone=a")],
    );
    app.wait_for_agent(&agent.address).await;
    let body = |zone: &str| {
        json!({"name": "replace", "concurrency": "replace", "group_id": g,
            "schedule": {"type": "none"}, "agent_labels": {"zone": zone},
            "handler": {"type": "shell", "command": format!(
                "sleep 3; touch {}/done-$JOBFLEET_RUN_ID", dir.path().display())}})
    };
    let job = app.job_from(g, body("a")).await;
    let old = app.trigger(job, json!({})).await;
    assert_eq!(old["status"], "running", "{old}");
    let moved = app
        .call(
            "PUT",
            &format!("/api/v1/jobs/{job}"),
            Some(&app.admin),
            Some(body("nowhere")),
        )
        .await;
    assert!(moved.status.is_success(), "{}", moved.body);
    let new = app.trigger(job, json!({})).await;
    assert!(new["agent"].is_null(), "{new}");
    assert!(
        new["trigger_msg"]
            .as_str()
            .unwrap_or_default()
            .contains("has the labels zone=nowhere"),
        "{new}"
    );
    let old = app.run(old["id"].as_i64().unwrap()).await;
    assert_eq!(old["status"], "killed", "{old}");
    // Left on its agent, the old run would have finished by now.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let done = done_files(&dir);
    assert!(done.is_empty(), "the replaced run kept running: {done:?}");

    // Two runs within one take, neither with an agent, while a third runs: the earlier kills the
    // running one and is replaced by the later, so only the later answers `no_agent` (the earlier
    // is killed already: its refusal would store nothing).
    let no_agent_outcomes = || async {
        let metrics = app.metrics_text().await;
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(r#"jobfleet_trigger_outcomes_total{outcome="no_agent"} "#))
            .map_or(0, |n| n.trim().parse::<i64>().unwrap())
    };
    let back = app
        .call(
            "PUT",
            &format!("/api/v1/jobs/{job}"),
            Some(&app.admin),
            Some(body("a")),
        )
        .await;
    assert!(back.status.is_success(), "{}", back.body);
    let running = app.trigger(job, json!({})).await;
    assert_eq!(running["status"], "running", "{running}");
    app.call(
        "PUT",
        &format!("/api/v1/jobs/{job}"),
        Some(&app.admin),
        Some(body("nowhere")),
    )
    .await;
    let before = no_agent_outcomes().await;
    let (earlier, later) = two_runs_in_one_take(&app, job, g, 1_000).await;
    let failed = app.finished_run(later.0, WITHIN).await;
    assert_eq!(failed["status"], "failed", "{failed}");
    let replaced = app.run(earlier.0).await;
    assert_eq!(replaced["status"], "killed", "{replaced}");
    assert_eq!(replaced["triggered_ms"], failed["triggered_ms"], "one take");
    let killed = app.run(running["id"].as_i64().unwrap()).await;
    assert_eq!(killed["status"], "killed", "{killed}");
    assert_eq!(no_agent_outcomes().await - before, 1);
    tokio::time::sleep(Duration::from_secs(4)).await;
    let done = done_files(&dir);
    assert!(done.is_empty(), "the replaced run kept running: {done:?}");
}

both_backends!(a_replacing_run_with_no_agent_still_kills_the_run_it_replaces);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_runs_are_retried_with_growing_backoff_and_children_follow_success() {
    let app = TestApp::scheduling(false, &[]).await;
    let dir = tempfile::tempdir().unwrap();
    let g = app.group("sched-retry").await;
    let _agents = agents(&app, "sched-retry", 1, &dir).await;
    let flaky = app
        .job_from(
            g,
            json!({"name": "flaky", "retry": {"count": 2, "backoff_s": 1},
            "handler": {"type": "shell", "command": "exit 3"}}),
        )
        .await;
    let first = app.trigger(flaky, json!({})).await;
    let runs = wait_for(WITHIN, "three attempts", || async {
        let runs = app.runs_of(flaky).await;
        (runs.len() == 3 && runs.iter().all(|r| r["status"] == "failed")).then_some(runs)
    })
    .await;
    for (i, run) in runs.iter().enumerate() {
        assert_eq!(run["attempt"].as_i64(), Some(i as i64 + 1), "{run}");
        if i > 0 {
            assert_eq!(run["first_run_id"], first["id"], "{run}");
            assert_eq!(run["trigger_kind"], "retry");
        }
    }
    let gap = |a: &Value, b: &Value| {
        b["scheduled_ms"].as_i64().unwrap() - a["finished_ms"].as_i64().unwrap()
    };
    assert!(
        gap(&runs[0], &runs[1]) >= 1000,
        "first retry after the 1 s backoff"
    );
    assert!(
        gap(&runs[1], &runs[2]) >= 3000,
        "second retry after 3 s: the backoff grows"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        app.runs_of(flaky).await.len(),
        3,
        "no retry beyond retry_count"
    );

    // A trigger no agent accepts is retried too.
    let empty = app.group("sched-retry-empty").await;
    let orphan = app
        .job_from(
            empty,
            json!({"name": "orphan", "retry": {"count": 1, "backoff_s": 0},
            "handler": {"type": "shell", "command": "true"}}),
        )
        .await;
    app.trigger(orphan, json!({})).await;
    let runs = wait_for(WITHIN, "the retry of an unsent trigger", || async {
        let runs = app.runs_of(orphan).await;
        (runs.len() == 2 && runs[1]["status"] == "failed").then_some(runs)
    })
    .await;
    assert!(
        runs[1]["trigger_msg"]
            .as_str()
            .unwrap()
            .contains("no live agent"),
        "{runs:?}"
    );

    // A chain: c ← b ← a, each fired when its parent succeeds.
    let c = app
        .job_from(
            g,
            json!({"name": "c", "handler": {"type": "shell", "command": "echo c"}}),
        )
        .await;
    let b = app.job_from(g, json!({"name": "b", "children": [c], "handler": {"type": "shell", "command": "echo b"}})).await;
    let a = app.job_from(g, json!({"name": "a", "children": [b], "handler": {"type": "shell", "command": "echo a"}})).await;
    app.trigger(a, json!({})).await;
    for child in [b, c] {
        let runs = finished_runs(&app, child, 1).await;
        assert_eq!(
            (runs[0]["status"].as_str(), runs[0]["trigger_kind"].as_str()),
            (Some("succeeded"), Some("child")),
            "{runs:?}"
        );
    }
    // A failing parent fires no children.
    let after_fail = app
        .job_from(
            g,
            json!({"name": "after-fail", "handler": {"type": "shell", "command": "true"}}),
        )
        .await;
    let failing = app.job_from(g, json!({"name": "failing", "children": [after_fail], "handler": {"type": "shell", "command": "false"}})).await;
    let run = app.trigger(failing, json!({})).await;
    app.finished_run(run["id"].as_i64().unwrap(), WITHIN).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(app.runs_of(after_fail).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_on_an_agent_killed_mid_run_is_lost_and_retried_elsewhere() {
    // Manual clock: heartbeats are stamped with it, so moving it past the dead limit kills
    // every agent that does not beat again; the survivor beats within a second.
    let db = jobfleet_admin::testing::TestDb::sqlite();
    let app = TestApp::start_opts(
        db,
        &[],
        Opts {
            system_clock: false,
            scheduler: true,
        },
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let g = app.group("sched-lost").await;
    let mut victim = AgentProc::start(&app.base, "sched-lost", &dir.path().join("victim"));
    app.wait_for_agent(&victim.address).await;
    let job = app
        .job_from(
            g,
            json!({"name": "long", "retry": {"count": 1, "backoff_s": 0},
            "handler": {"type": "shell", "command": "sleep 2"}}),
        )
        .await;
    let run = app.trigger(job, json!({})).await;
    assert_eq!(
        run["agent"].as_str(),
        Some(victim.address.as_str()),
        "{run}"
    );
    victim.kill9();
    let survivor = AgentProc::start(&app.base, "sched-lost", &dir.path().join("survivor"));
    app.wait_for_agent(&survivor.address).await;
    app.clock.advance(31_000);
    wait_for(WITHIN, "the survivor to beat again", || async {
        let agents = app.get("/api/v1/agents", &app.admin).await.body["items"].clone();
        let live: Vec<&str> = agents
            .as_array()
            .unwrap()
            .iter()
            .filter(|a| a["live"] == true)
            .map(|a| a["address"].as_str().unwrap())
            .collect();
        (live == vec![survivor.address.as_str()]).then_some(())
    })
    .await;
    let recovered = monitors::recover(&app.state).await.unwrap();
    assert_eq!(recovered.dead_agent_lost, 1, "{recovered:?}");
    let lost = app.run(run["id"].as_i64().unwrap()).await;
    assert_eq!(lost["status"], "lost", "{lost}");
    assert!(
        lost["handle_msg"]
            .as_str()
            .unwrap()
            .contains("stopped sending heartbeats")
    );
    app.state.scheduler.nudge();
    let retry = wait_for(WITHIN, "the retry on the survivor", || async {
        let runs = app.runs_of(job).await;
        runs.iter()
            .find(|r| r["attempt"] == 2 && r["status"] == "succeeded")
            .cloned()
    })
    .await;
    assert_eq!(retry["agent"].as_str(), Some(survivor.address.as_str()));
    // A second pass finds nothing more to do.
    assert_eq!(
        monitors::recover(&app.state).await.unwrap(),
        monitors::Recovered::default()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphaned_and_overdue_runs_are_recovered() {
    let app = manual(false).await;
    let g = app.group("sched-orphan").await;
    let dir = tempfile::tempdir().unwrap();
    let agent = AgentProc::start(&app.base, "sched-orphan", &dir.path().join("a"));
    app.wait_for_agent(&agent.address).await;
    app.job_from(
        g,
        json!({"name": "orphan", "enabled": true, "timeout_s": 1,
            "schedule": {"type": "fixed_rate", "interval_s": 600},
            "handler": {"type": "shell", "command": "true"}}),
    )
    .await;
    // Stored by a pass whose admin then "died": nobody's timer holds it.
    app.clock.advance(596_000);
    let planned = tick::tick(&app.state).await.unwrap();
    assert_eq!(planned.dues.len(), 1);
    app.clock.advance(4_000 + monitors::ORPHAN_AFTER_MS);
    // Agents beat with the manual clock; let one beat land after the jump.
    app.wait_for_agent(&agent.address).await;
    let recovered = monitors::recover(&app.state).await.unwrap();
    assert_eq!(recovered.orphans_sent, 1, "{recovered:?}");
    let run = app.finished_run(planned.dues[0].run_id.0, WITHIN).await;
    assert_eq!(run["status"], "succeeded", "{run}");

    // A run the agent never reports on past its timeout is ended by the admin.
    let stuck = app
        .job_from(g, json!({"name": "stuck", "timeout_s": 1, "handler": {"type": "shell", "command": "true"}}))
        .await;
    let run = app.trigger(stuck, json!({})).await;
    let run_id = run["id"].as_i64().unwrap();
    app.finished_run(run_id, WITHIN).await;
    // Simulate a lost report: force the row back to running. Without the accepting agent
    // process on the row (as for an XXL-Job executor), heartbeats cannot judge it, so only the
    // timeout monitor can end it; with it, the next heartbeat would end it `lost` (see
    // security::agent_identity).
    app.state
        .db
        .run(move |conn| {
            use diesel::prelude::*;
            diesel::sql_query(format!(
                "UPDATE job_run SET status = 'running', finished_ms = NULL, agent_instance = NULL, agent_seq = NULL WHERE id = {run_id}"
            ))
            .execute(conn)?;
            Ok(())
        })
        .await
        .unwrap();
    app.clock
        .advance(1_000 + monitors::TIMEOUT_GRACE_MS + 1_000);
    app.wait_for_agent(&agent.address).await;
    let recovered = monitors::recover(&app.state).await.unwrap();
    assert_eq!(recovered.timed_out, 1, "{recovered:?}");
    assert_eq!(app.run(run_id).await["status"], "timed_out");

    // The daily report counts both days' outcomes per job.
    monitors::report(&app.state).await.unwrap();
    // Yesterday and today: the test may cross midnight UTC.
    let day = |ms: i64| {
        chrono::DateTime::from_timestamp_millis(ms)
            .unwrap()
            .format("%Y-%m-%d")
            .to_string()
    };
    let (from, to) = (day(app.now_ms() - 86_400_000), day(app.now_ms()));
    let rows = app
        .state
        .db
        .run(move |conn| jobfleet_admin::db::run_report_daily::list(conn, &from, &to, None))
        .await
        .unwrap();
    let total = |job_id: i64, field: fn(&jobfleet_admin::db::run_report_daily::DailyRow) -> i64| {
        rows.iter()
            .filter(|r| r.job_id.0 == job_id)
            .map(field)
            .sum::<i64>()
    };
    assert_eq!(total(stuck, |r| r.timed_out), 1, "{rows:?}");
    let orphan = rows.iter().find(|r| r.job_id.0 != stuck).unwrap().job_id.0;
    assert_eq!(total(orphan, |r| r.succeeded), 1, "{rows:?}");
    assert_eq!(total(orphan, |r| r.in_flight), 0, "{rows:?}");
}
