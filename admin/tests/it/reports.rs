//! Reports: the figures of `/api/v1/reports` (counts per day, job and group, success rates,
//! the most failing jobs, p50/p95) checked against the run table after the report monitor's
//! recount; what an operator may see; bad ranges; the CSV; the console page.

use std::collections::HashMap;

use jobfleet_admin::db::Page as DbPage;
use jobfleet_admin::db::job_run::{self, JobRun, NewJobRun, RunFilter};
use jobfleet_admin::db::run_report_daily::{self, DailyRow};
use jobfleet_admin::domain::duration_histogram::bucket_of;
use jobfleet_admin::domain::ids::{GroupId, JobId, RunId};
use jobfleet_admin::domain::policy::{RunStatus, TriggerKind};
use jobfleet_admin::scheduler::monitors;
use jobfleet_admin::scheduler::report_tally::{self, DayCounts, add_counts};
use jobfleet_admin::testing::run_result;
use reqwest::StatusCode;
use serde_json::Value;

use crate::support::console::Console;
use crate::support::{ADMIN_PASSWORD, TestApp, api_test};

const DAY_MS: i64 = 86_400_000;

/// A run to insert: job, group, created this many days before today, how it ended, and its
/// start and end offsets (ms after creation).
struct Planned {
    job: i64,
    group: i64,
    days_ago: i64,
    status: RunStatus,
    started: Option<i64>,
    finished: Option<i64>,
}

fn plan(job: i64, group: i64, days_ago: i64, status: RunStatus, took: Option<i64>) -> Planned {
    Planned {
        job,
        group,
        days_ago,
        status,
        started: took.map(|_| 1_000),
        finished: took.map(|ms| 1_000 + ms),
    }
}

fn day_of(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap()
        .format("%Y-%m-%d")
        .to_string()
}

/// Inserts the runs straight into `job_run`, as the dispatcher and callbacks would leave them.
async fn insert(app: &TestApp, today_start: i64, runs: Vec<Planned>) {
    app.state
        .db
        .run(move |conn| {
            for (i, p) in runs.into_iter().enumerate() {
                let created = today_start - p.days_ago * DAY_MS + 3_600_000 + i as i64 * 10;
                let pending = matches!(p.status, RunStatus::Pending);
                let id: RunId = job_run::insert(
                    conn,
                    &NewJobRun {
                        job_id: JobId(p.job),
                        group_id: GroupId(p.group),
                        first_run_id: None,
                        attempt: 1,
                        trigger_kind: TriggerKind::Manual,
                        fire_slot_ms: None,
                        scheduled_ms: created,
                        status: if pending {
                            RunStatus::Pending
                        } else {
                            RunStatus::Running
                        },
                        params: String::new(),
                        shard_index: 0,
                        shard_total: 1,
                        created_ms: created,
                        workflow_node_id: None,
                        node_attempt: None,
                        timeout_s: None,
                        env: None,
                    },
                )?;
                if pending {
                    continue;
                }
                let finished = p.finished.map(|ms| created + ms);
                match (p.status, p.started) {
                    // Still running, started: no end time, so no duration.
                    (RunStatus::Running, started) => {
                        job_run::record_result(
                            conn,
                            id,
                            &run_result(RunStatus::Running, started.map(|ms| created + ms), None),
                        )?;
                    }
                    // Ended without ever starting (lost before the agent took it, skipped).
                    (status, None) => {
                        job_run::finish(conn, id, status.as_str(), "test", created + 5)?;
                    }
                    (status, Some(started)) => {
                        job_run::record_result(
                            conn,
                            id,
                            &run_result(status, Some(created + started), finished),
                        )?;
                    }
                }
            }
            Ok(())
        })
        .await
        .unwrap();
}

/// Runs the report monitor as it runs once a minute, on each day from `first_day_ms` to today
/// (each pass recounts its day and the one before).
async fn recount(app: &TestApp, from_ms: i64) {
    let now = app.now_ms();
    let mut at = from_ms;
    while at < now {
        app.clock.set(at);
        monitors::report(&app.state).await.unwrap();
        at += DAY_MS;
    }
    app.clock.set(now);
    monitors::report(&app.state).await.unwrap();
}

/// What the run table says, summed the way a report defines it.
#[derive(Debug, Default, Clone)]
struct Expected {
    counts: HashMap<&'static str, i64>,
    durations: Vec<i64>,
}

impl Expected {
    fn add(&mut self, run: &JobRun) {
        let key = match run.status {
            RunStatus::Pending | RunStatus::Running => "in_flight",
            other => other.as_str(),
        };
        *self.counts.entry(key).or_default() += 1;
        *self.counts.entry("runs").or_default() += 1;
        if let (Some(s), Some(f)) = (run.started_ms, run.finished_ms) {
            self.durations.push(f - s);
        }
    }

    fn n(&self, key: &str) -> i64 {
        self.counts.get(key).copied().unwrap_or(0)
    }

    fn failures(&self) -> i64 {
        self.n("failed") + self.n("timed_out") + self.n("lost")
    }

    /// Checks one report entry (a day, job or group) against these runs.
    fn check(&self, what: &str, got: &Value) {
        for key in [
            "runs",
            "succeeded",
            "failed",
            "timed_out",
            "killed",
            "lost",
            "skipped",
            "in_flight",
        ] {
            assert_eq!(
                got[key].as_i64(),
                Some(self.n(key)),
                "{what}: {key} in {got}"
            );
        }
        assert_eq!(got["failures"].as_i64(), Some(self.failures()), "{what}");
        let judged = self.n("succeeded") + self.failures();
        if judged == 0 {
            assert!(got["success_rate"].is_null(), "{what}");
        } else {
            let rate = self.n("succeeded") as f64 / judged as f64;
            let got_rate = got["success_rate"].as_f64().unwrap();
            assert!(
                (got_rate - rate).abs() < 1e-9,
                "{what}: rate {got_rate} vs {rate}"
            );
        }
        assert_eq!(
            got["timed_runs"].as_u64(),
            Some(self.durations.len() as u64),
            "{what}"
        );
        let mut sorted = self.durations.clone();
        sorted.sort_unstable();
        for (percent, key) in [(50, "p50_ms"), (95, "p95_ms")] {
            if sorted.is_empty() {
                assert!(got[key].is_null(), "{what}: {key}");
                continue;
            }
            // Nearest rank, exactly; the report's value lies in the same histogram bucket.
            let exact = sorted[(percent * sorted.len()).div_ceil(100) - 1];
            let reported = got[key].as_i64().unwrap();
            assert_eq!(
                bucket_of(reported),
                bucket_of(exact),
                "{what}: {key} {reported} vs exact {exact}"
            );
            assert!(
                (reported - exact).abs() * 8 <= exact.max(8),
                "{what}: {key} {reported} vs {exact}"
            );
        }
    }
}

async fn all_runs(app: &TestApp) -> Vec<JobRun> {
    app.state
        .db
        .run(|conn| {
            job_run::list(
                conn,
                &RunFilter::default(),
                DbPage {
                    limit: 10_000,
                    offset: 0,
                },
            )
        })
        .await
        .unwrap()
}

fn entry<'a>(list: &'a Value, key: &str, id: i64) -> &'a Value {
    list.as_array()
        .unwrap()
        .iter()
        .find(|e| e[key].as_i64() == Some(id))
        .unwrap_or_else(|| panic!("no {key} {id} in {list}"))
}

struct Fixture {
    a: i64,
    b: i64,
    job_a: i64,
    job_b: i64,
    job_c: i64,
    today_start: i64,
}

async fn fixture(app: &TestApp) -> Fixture {
    let (a, b) = (app.group("report-a").await, app.group("report-b").await);
    // Names a CSV must quote, and one a spreadsheet would take for a formula.
    let job_a = app.job(&app.admin, a, "load, then (re)index").await;
    let job_b = app.job(&app.admin, b, "billing").await;
    let job_c = app.job(&app.admin, a, "+cleanup").await;
    let now = app.now_ms();
    let today_start = now - now.rem_euclid(DAY_MS);
    use RunStatus::*;
    let runs = vec![
        // Two days ago.
        plan(job_a, a, 2, Succeeded, Some(120)),
        plan(job_a, a, 2, Succeeded, Some(250)),
        plan(job_a, a, 2, Succeeded, Some(400)),
        plan(job_a, a, 2, Succeeded, Some(90_000)),
        plan(job_a, a, 2, Failed, Some(5_000)),
        // Yesterday.
        plan(job_a, a, 1, Succeeded, Some(300)),
        plan(job_a, a, 1, Succeeded, Some(310)),
        plan(job_a, a, 1, TimedOut, Some(60_000)),
        plan(job_a, a, 1, Lost, None),
        plan(job_b, b, 1, Failed, Some(10)),
        plan(job_b, b, 1, Failed, Some(20)),
        plan(job_b, b, 1, Failed, Some(30)),
        plan(job_b, b, 1, Succeeded, Some(50)),
        // Today.
        plan(job_a, a, 0, Succeeded, Some(7)),
        plan(job_a, a, 0, Succeeded, Some(1_000_000)),
        plan(job_a, a, 0, Killed, Some(2_000)),
        plan(job_a, a, 0, Skipped, None),
        Planned {
            started: Some(1_000),
            ..plan(job_a, a, 0, Running, None)
        },
        plan(job_a, a, 0, Pending, None),
        plan(job_c, a, 0, Failed, Some(0)),
        plan(job_c, a, 0, Lost, None),
    ];
    insert(app, today_start, runs).await;
    // A run before the range must not count.
    insert(app, today_start, vec![plan(job_a, a, 5, Failed, Some(1))]).await;
    recount(app, today_start - 6 * DAY_MS).await;
    Fixture {
        a,
        b,
        job_a,
        job_b,
        job_c,
        today_start,
    }
}

api_test!(report_figures_match_the_run_table);
async fn report_figures_match_the_run_table(app: &TestApp) {
    let f = fixture(app).await;
    let (from, to) = (day_of(f.today_start - 2 * DAY_MS), day_of(f.today_start));
    let r = app
        .get(&format!("/api/v1/reports?from={from}&to={to}"), &app.admin)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let report = r.body;
    assert_eq!(
        (report["from"].as_str(), report["to"].as_str()),
        (Some(from.as_str()), Some(to.as_str()))
    );

    // The expectations come from the run table itself.
    let mut days: HashMap<String, Expected> = HashMap::new();
    let mut jobs: HashMap<(i64, i64), Expected> = HashMap::new();
    let mut groups: HashMap<i64, Expected> = HashMap::new();
    let mut totals = Expected::default();
    for run in all_runs(app).await {
        let day = day_of(run.created_ms);
        if day < from || day > to {
            continue;
        }
        days.entry(day).or_default().add(&run);
        jobs.entry((run.job_id.0, run.group_id.0))
            .or_default()
            .add(&run);
        groups.entry(run.group_id.0).or_default().add(&run);
        totals.add(&run);
    }
    assert_eq!(totals.n("runs"), 21, "the fixture's runs in range");
    totals.check("totals", &report["totals"]);
    let listed_days = report["days"].as_array().unwrap();
    assert_eq!(listed_days.len(), 3);
    for day in listed_days {
        let name = day["day"].as_str().unwrap();
        days[name].check(name, day);
    }
    assert_eq!(report["jobs"].as_array().unwrap().len(), 3);
    for ((job, group), expected) in &jobs {
        let got = entry(&report["jobs"], "job_id", *job);
        assert_eq!(got["group_id"].as_i64(), Some(*group));
        expected.check(&format!("job {job}"), got);
    }
    assert_eq!(
        entry(&report["jobs"], "job_id", f.job_a)["job_name"],
        "load, then (re)index"
    );
    for (group, expected) in &groups {
        expected.check(
            &format!("group {group}"),
            entry(&report["groups"], "group_id", *group),
        );
    }
    // Most failing: billing and the loader both have 3 failures, billing at the higher rate
    // (3 of 4 against 3 of 11); then the cleanup's 2.
    let failing: Vec<i64> = report["most_failing"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["job_id"].as_i64().unwrap())
        .collect();
    assert_eq!(failing, [f.job_b, f.job_a, f.job_c]);

    // Filters: one group, one job.
    let only_a = app
        .get(
            &format!("/api/v1/reports?from={from}&to={to}&group_id={}", f.a),
            &app.admin,
        )
        .await
        .body;
    groups[&f.a].check("group a alone", &only_a["totals"]);
    assert_eq!(only_a["groups"].as_array().unwrap().len(), 1);
    let only_c = app
        .get(
            &format!("/api/v1/reports?from={from}&to={to}&job_id={}", f.job_c),
            &app.admin,
        )
        .await
        .body;
    jobs[&(f.job_c, f.a)].check("job c alone", &only_c["totals"]);

    // The default range is the last seven days, today included: the older failure counts.
    let week = app.get("/api/v1/reports", &app.admin).await.body;
    assert_eq!(week["days"].as_array().unwrap().len(), 7);
    assert_eq!(week["to"].as_str(), Some(to.as_str()));
    assert_eq!(week["totals"]["runs"].as_i64(), Some(22));
}

api_test!(an_operator_reports_on_its_groups_only);
async fn an_operator_reports_on_its_groups_only(app: &TestApp) {
    let f = fixture(app).await;
    let (_, operator) = app.user("report-op", "operator", &[f.a]).await;
    let (_, viewer) = app.user("report-viewer", "viewer", &[f.b]).await;
    let report = app.get("/api/v1/reports", &operator).await.body;
    let jobs: Vec<i64> = report["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["job_id"].as_i64().unwrap())
        .collect();
    assert!(jobs.contains(&f.job_a) && jobs.contains(&f.job_c) && !jobs.contains(&f.job_b));
    assert_eq!(report["groups"].as_array().unwrap().len(), 1);
    assert_eq!(report["groups"][0]["group_id"].as_i64(), Some(f.a));
    // Another group or its job answers like a missing one.
    for path in [
        format!("/api/v1/reports?group_id={}", f.b),
        "/api/v1/reports?group_id=999999".to_owned(),
        format!("/api/v1/reports?job_id={}", f.job_b),
        "/api/v1/reports?job_id=999999".to_owned(),
    ] {
        let r = app.get(&path, &operator).await;
        assert_eq!(
            (r.status, r.code()),
            (StatusCode::NOT_FOUND, "not_found"),
            "{path}: {}",
            r.body
        );
    }
    let billing = app.get("/api/v1/reports", &viewer).await.body;
    assert_eq!(billing["totals"]["runs"].as_i64(), Some(4));
    assert_eq!(billing["most_failing"][0]["job_id"].as_i64(), Some(f.job_b));
    let csv = csv_of(
        app,
        &format!("/api/v1/reports?format=csv&group_id={}", f.b),
        &operator,
        None,
    )
    .await;
    assert_eq!(csv.0, StatusCode::NOT_FOUND);
}

api_test!(bad_ranges_are_refused_naming_the_field);
async fn bad_ranges_are_refused_naming_the_field(app: &TestApp) {
    let now = app.now_ms();
    let today = now - now.rem_euclid(DAY_MS);
    let day = |days: i64| day_of(today + days * DAY_MS);
    for (query, field) in [
        ("from=2026-13-01".to_owned(), "from"),
        ("from=yesterday".to_owned(), "from"),
        ("to=2026-1-5".to_owned(), "to"),
        (format!("from={}&to={}", day(-1), day(-2)), "from"),
        (format!("to={}", day(1)), "to"),
        // Older than retention_days (30): those runs are gone.
        (format!("from={}", day(-31)), "from"),
        ("format=xml".to_owned(), "format"),
    ] {
        let r = app
            .get(&format!("/api/v1/reports?{query}"), &app.admin)
            .await;
        assert_eq!(
            r.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{query}: {}",
            r.body
        );
        assert_eq!(r.field(), Some(field), "{query}: {}", r.body);
    }
    let r = app
        .get(&format!("/api/v1/reports?from={}", day(-30)), &app.admin)
        .await;
    assert_eq!(r.status, StatusCode::OK, "the oldest day kept: {}", r.body);
    assert_eq!(r.body["days"].as_array().unwrap().len(), 31);
    let r = app.get("/api/v1/reports?group_id=x", &app.admin).await;
    assert!(r.status.is_client_error(), "{}", r.body);
    let r = app.get("/api/v1/reports?colour=red", &app.admin).await;
    assert!(r.status.is_client_error(), "{}", r.body);
}

/// GET `path` with `accept`; status, headers and body text.
async fn csv_of(
    app: &TestApp,
    path: &str,
    token: &str,
    accept: Option<&str>,
) -> (StatusCode, reqwest::header::HeaderMap, String) {
    let mut request = app
        .client
        .get(format!("{}{path}", app.base))
        .bearer_auth(token);
    if let Some(accept) = accept {
        request = request.header("accept", accept);
    }
    let res = request.send().await.unwrap();
    let (status, headers) = (res.status(), res.headers().clone());
    (status, headers, res.text().await.unwrap())
}

api_test!(the_per_job_table_downloads_as_csv);
async fn the_per_job_table_downloads_as_csv(app: &TestApp) {
    let f = fixture(app).await;
    let (from, to) = (day_of(f.today_start - 2 * DAY_MS), day_of(f.today_start));
    let json = app
        .get(&format!("/api/v1/reports?from={from}&to={to}"), &app.admin)
        .await
        .body;
    for (path, accept) in [
        (
            format!("/api/v1/reports?from={from}&to={to}&format=csv"),
            None,
        ),
        (
            format!("/api/v1/reports?from={from}&to={to}"),
            Some("text/csv"),
        ),
    ] {
        let (status, headers, text) = csv_of(app, &path, &app.admin, accept).await;
        assert_eq!(status, StatusCode::OK, "{text}");
        assert!(
            headers["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/csv")
        );
        assert_eq!(
            headers["content-disposition"].to_str().unwrap(),
            format!("attachment; filename=\"jobfleet-report-{from}-to-{to}.csv\"")
        );
        let lines: Vec<&str> = text.split("\r\n").filter(|l| !l.is_empty()).collect();
        assert_eq!(
            lines[0],
            "job_id,job_name,group_id,group_name,runs,succeeded,failed,timed_out,killed,lost,skipped,in_flight,failures,success_rate,timed_runs,p50_ms,p95_ms"
        );
        assert_eq!(lines.len(), 1 + json["jobs"].as_array().unwrap().len());
        let row_a = lines
            .iter()
            .find(|l| l.starts_with(&format!("{},", f.job_a)))
            .unwrap();
        let a = entry(&json["jobs"], "job_id", f.job_a);
        assert_eq!(
            *row_a,
            format!(
                "{},\"load, then (re)index\",{},report-a,{},{},{},{},{},{},{},{},{},{:.4},{},{},{}",
                f.job_a,
                f.a,
                a["runs"],
                a["succeeded"],
                a["failed"],
                a["timed_out"],
                a["killed"],
                a["lost"],
                a["skipped"],
                a["in_flight"],
                a["failures"],
                a["success_rate"].as_f64().unwrap(),
                a["timed_runs"],
                a["p50_ms"],
                a["p95_ms"],
            )
        );
        // A name a spreadsheet would evaluate is defused.
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with(&format!("{},'+cleanup,", f.job_c))),
            "{text}"
        );
    }
    let (status, _, text) =
        csv_of(app, "/api/v1/reports?format=csv&from=bad", &app.admin, None).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{text}");
}

api_test!(the_console_page_shows_the_report_and_its_errors);
async fn the_console_page_shows_the_report_and_its_errors(app: &TestApp) {
    let f = fixture(app).await;
    let mut console = Console::new(app);
    console.login("admin", ADMIN_PASSWORD).await;
    let from = day_of(f.today_start - 2 * DAY_MS);
    let page = console
        .get(&format!("/console/reports?from={from}&group_id={}", f.b))
        .await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.body.contains("id=\"report-chart\""), "{}", page.body);
    assert!(page.body.contains("billing"));
    assert!(!page.body.contains("(re)index"), "another group's job");
    let csv_link = format!(
        "/console/reports/csv?from={from}&#38;to={}&#38;group_id={}",
        day_of(f.today_start),
        f.b
    );
    assert!(page.body.contains(&csv_link), "{}", page.body);
    let csv = console.get(&csv_link.replace("&#38;", "&")).await;
    assert_eq!(csv.status, StatusCode::OK);
    assert!(csv.body.starts_with("job_id,job_name,"));
    assert_eq!(csv.body.trim_end().lines().count(), 2, "{}", csv.body);
    // A bad range is shown on the page, the input kept.
    let bad = console.get("/console/reports?from=2026-02-30").await;
    assert_eq!(bad.status, StatusCode::OK);
    assert!(bad.body.contains("id=\"filter-error\""), "{}", bad.body);
    assert!(bad.body.contains("value=\"2026-02-30\""));
    assert!(!bad.body.contains("id=\"report-chart\""));
}

/// The stored rows of yesterday and today next to a recount of the run table by the database,
/// both without their update time and in one order.
async fn stored_and_recounted(app: &TestApp, today_start: i64) -> (Vec<DailyRow>, Vec<DailyRow>) {
    let (mut stored, mut recounted) = app
        .state
        .db
        .run(move |conn| {
            let (mut stored, mut recounted) = (Vec::new(), Vec::new());
            for start in [today_start - DAY_MS, today_start] {
                let day = day_of(start);
                stored.extend(run_report_daily::list(conn, &day, &day, None)?);
                let mut counts = DayCounts::new();
                add_counts(
                    &mut counts,
                    job_run::report_counts(conn, start, start + DAY_MS, None)?,
                );
                recounted.extend(
                    counts
                        .into_iter()
                        .map(|((job, group), c)| DailyRow::of(day.clone(), job, group, &c, 0)),
                );
            }
            Ok((stored, recounted))
        })
        .await
        .unwrap();
    for rows in [&mut stored, &mut recounted] {
        for row in rows.iter_mut() {
            row.updated_ms = 0;
        }
        rows.sort_by(|a, b| (&a.day, a.group_id, a.job_id).cmp(&(&b.day, b.group_id, b.job_id)));
    }
    (stored, recounted)
}

/// Runs the report pass at `at` and checks its rows against a recount.
async fn pass_matches_a_recount(app: &TestApp, at: i64, today_start: i64) -> Vec<DailyRow> {
    app.clock.set(at);
    monitors::report(&app.state).await.unwrap();
    let (stored, recounted) = stored_and_recounted(app, today_start).await;
    assert_eq!(stored, recounted, "at {at}");
    stored
}

/// Ends every run still pending or running as succeeded after 25 ms.
async fn end_in_flight(app: &TestApp) {
    let open: Vec<JobRun> = all_runs(app)
        .await
        .into_iter()
        .filter(|r| matches!(r.status, RunStatus::Pending | RunStatus::Running))
        .collect();
    assert!(!open.is_empty());
    app.state
        .db
        .run(move |conn| {
            for run in open {
                let started = run.created_ms + 100;
                job_run::record_result(
                    conn,
                    run.id,
                    &run_result(RunStatus::Succeeded, Some(started), Some(started + 25)),
                )?;
            }
            Ok(())
        })
        .await
        .unwrap();
}

// The report monitor goes on from its last pass: it reads the runs new since then and those it
// saw in flight, not two days of runs. Whatever it counts that way must be what a recount of
// the run table says, as runs arrive and end between passes; and what it settled stays settled
// until its hourly recount (a run deleted behind its back shows that the pass did not recount).
api_test!(the_running_count_matches_a_recount_pass_after_pass);
async fn the_running_count_matches_a_recount_pass_after_pass(app: &TestApp) {
    use RunStatus::*;
    let group = app.group("tally").await;
    let job = app.job(&app.admin, group, "tallied").await;
    let other = app.job(&app.admin, group, "tallied too").await;
    let now = app.now_ms();
    let today_start = now - now.rem_euclid(DAY_MS);
    let mut at = today_start + 2 * 3_600_000;
    insert(
        app,
        today_start,
        vec![
            plan(job, group, 1, Succeeded, Some(40)),
            plan(job, group, 1, Pending, None),
            plan(job, group, 0, Pending, None),
            Planned {
                started: Some(1_000),
                ..plan(job, group, 0, Running, None)
            },
            plan(other, group, 0, Failed, Some(3)),
        ],
    )
    .await;
    // Nothing is settled yet: the first pass counts everything.
    pass_matches_a_recount(app, at, today_start).await;
    // Two minutes on, the first pass's runs settle: final ones counted once, the others open.
    at += report_tally::SETTLE_MS;
    insert(
        app,
        today_start,
        vec![plan(other, group, 0, Succeeded, Some(9))],
    )
    .await;
    pass_matches_a_recount(app, at, today_start).await;
    for _ in 0..3 {
        end_in_flight(app).await;
        insert(
            app,
            today_start,
            vec![
                plan(job, group, 0, Pending, None),
                plan(other, group, 0, Lost, None),
                plan(other, group, 1, Killed, Some(70)),
            ],
        )
        .await;
        at += 60_000;
        pass_matches_a_recount(app, at, today_start).await;
    }
    at += report_tally::SETTLE_MS;
    let settled = pass_matches_a_recount(app, at, today_start).await;
    let yesterday_succeeded = |rows: &[DailyRow]| -> i64 {
        rows.iter()
            .filter(|r| r.day == day_of(today_start - DAY_MS))
            .map(|r| r.succeeded)
            .sum()
    };
    let before = yesterday_succeeded(&settled);
    let deleted = app
        .state
        .db
        .run(move |conn| job_run::delete_finished_before(conn, today_start, 100))
        .await
        .unwrap();
    assert!(deleted > 0);
    at += 60_000;
    app.clock.set(at);
    monitors::report(&app.state).await.unwrap();
    let (stored, recounted) = stored_and_recounted(app, today_start).await;
    assert_eq!(
        yesterday_succeeded(&stored),
        before,
        "settled, not recounted"
    );
    assert_eq!(yesterday_succeeded(&recounted), 0);
    // The hourly recount catches up.
    at += report_tally::REBUILD_EVERY_MS;
    pass_matches_a_recount(app, at, today_start).await;
    // The next day: today's runs are yesterday's, counted anew, and the count goes on.
    let tomorrow = today_start + DAY_MS;
    insert(
        app,
        tomorrow,
        vec![plan(job, group, 0, Succeeded, Some(12))],
    )
    .await;
    at = tomorrow + 2 * 3_600_000;
    pass_matches_a_recount(app, at, tomorrow).await;
    insert(
        app,
        tomorrow,
        vec![
            plan(job, group, 0, Pending, None),
            plan(other, group, 1, Failed, Some(4)),
        ],
    )
    .await;
    for _ in 0..3 {
        at += 60_000;
        pass_matches_a_recount(app, at, tomorrow).await;
    }
}
