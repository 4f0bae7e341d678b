//! Reports: a range of UTC days and a group (a GET form), a stacked chart of runs by outcome per
//! day drawn here as SVG (no script, like the dashboard's), the per-job table with success rate
//! and p50/p95, the most failing jobs, per group rows, and a CSV download of the per-job table
//! that keeps the filters. A bad range is shown above the form, the input kept.

use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse, web};
use askama::Template;
use askama_web::WebTemplate;

use super::PageResult;
use super::forms::{ConsoleUser, Fields};
use super::views::{Chrome, Opt, duration, group_options};
use crate::error::Error;
use crate::service;
use crate::service::reports::{Figures, Report, ReportQuery};
use crate::state::AppState;

/// The filters a report page and its CSV link carry.
const FILTERS: [&str; 4] = ["from", "to", "group_id", "job_id"];

/// One row of a report table, display-ready.
#[derive(Debug, Clone)]
pub struct FigureRow {
    /// The job's or group's name (or `#id` when it was deleted).
    pub name: String,
    /// Link to the job or the group's runs, empty for deleted ones.
    pub href: String,
    pub group: String,
    pub runs: i64,
    pub succeeded: i64,
    pub failures: i64,
    pub killed: i64,
    pub skipped: i64,
    pub in_flight: i64,
    pub success_rate: String,
    pub p50: String,
    pub p95: String,
}

impl FigureRow {
    fn new(name: String, href: String, group: String, f: &Figures) -> Self {
        let dash = || "—".to_owned();
        FigureRow {
            name,
            href,
            group,
            runs: f.runs,
            succeeded: f.succeeded,
            failures: f.failures,
            killed: f.killed,
            skipped: f.skipped,
            in_flight: f.in_flight,
            success_rate: f
                .success_rate
                .map_or_else(dash, |r| format!("{:.1}%", r * 100.0)),
            p50: f.p50_ms.map_or_else(dash, duration),
            p95: f.p95_ms.map_or_else(dash, duration),
        }
    }
}

/// An outcome's CSS class, label key and count.
type Outcome = (&'static str, &'static str, fn(&Figures) -> i64);

/// One outcome's part of a day's bar.
#[derive(Debug, Clone)]
pub struct Segment {
    pub class: &'static str,
    pub label: &'static str,
    pub count: i64,
    pub y: String,
    pub h: String,
}

#[derive(Debug, Clone)]
pub struct Bar {
    pub day: String,
    pub runs: i64,
    pub x: String,
    /// The day under the bar, on every few bars so labels never overlap.
    pub label: Option<String>,
    pub segments: Vec<Segment>,
}

/// A server-drawn stacked bar chart of runs per day by outcome.
#[derive(Debug, Clone)]
pub struct StackChart {
    pub width: i64,
    pub height: i64,
    pub left: i64,
    pub base_y: i64,
    pub label_y: i64,
    pub bar_w: String,
    pub max: i64,
    pub bars: Vec<Bar>,
    /// The legend: class and label of each outcome, bottom first.
    pub keys: Vec<(&'static str, &'static str)>,
}

impl StackChart {
    fn new(c: &Chrome, report: &Report) -> Self {
        let (width, height, left, top, base_y) = (720_i64, 240_i64, 40_i64, 8_i64, 210_i64);
        let outcomes: [Outcome; 7] = [
            ("seg-succeeded", "status.succeeded", |f| f.succeeded),
            ("seg-failed", "status.failed", |f| f.failed),
            ("seg-timed_out", "status.timed_out", |f| f.timed_out),
            ("seg-lost", "status.lost", |f| f.lost),
            ("seg-killed", "status.killed", |f| f.killed),
            ("seg-skipped", "status.skipped", |f| f.skipped),
            ("seg-in_flight", "reports.in_flight", |f| f.in_flight),
        ];
        let max = report
            .days
            .iter()
            .map(|d| d.figures.runs)
            .max()
            .unwrap_or(0)
            .max(1);
        let count = report.days.len().max(1);
        let (slot, plot_h, scale) = {
            let slot = (width - left - 4) as f64 / count as f64;
            let plot_h = (base_y - top) as f64;
            (slot, plot_h, plot_h / max as f64)
        };
        let bar_w = (slot * 0.7).max(1.0);
        let every = count.div_ceil(10);
        let bars = report
            .days
            .iter()
            .enumerate()
            .map(|(i, d)| {
                let x = left as f64 + i as f64 * slot + (slot - bar_w) / 2.0;
                let mut y = base_y as f64;
                let segments = outcomes
                    .iter()
                    .filter_map(|(class, label, of)| {
                        let n = of(&d.figures);
                        let h = (n as f64 * scale).min(plot_h);
                        (n > 0).then(|| {
                            y -= h;
                            Segment {
                                class,
                                label: c.t(label),
                                count: n,
                                y: format!("{y:.1}"),
                                h: format!("{h:.1}"),
                            }
                        })
                    })
                    .collect();
                Bar {
                    day: d.day.clone(),
                    runs: d.figures.runs,
                    x: format!("{x:.1}"),
                    label: (i % every == 0).then(|| d.day.get(5..).unwrap_or(&d.day).to_owned()),
                    segments,
                }
            })
            .collect();
        StackChart {
            width,
            height,
            left,
            base_y,
            label_y: base_y + 16,
            bar_w: format!("{bar_w:.1}"),
            max,
            bars,
            keys: outcomes
                .iter()
                .map(|(class, label, _)| (*class, c.t(label)))
                .collect(),
        }
    }
}

#[derive(Template, WebTemplate)]
#[template(path = "reports.html")]
pub struct ReportsPage {
    pub c: Chrome,
    pub from: String,
    pub to: String,
    pub job_id: String,
    pub groups: Vec<Opt>,
    pub error: String,
    /// Empty when there is no report to show (a bad range).
    pub has_report: bool,
    pub oldest_day: String,
    pub updated: String,
    pub csv_href: String,
    pub totals: Option<FigureRow>,
    pub chart: Option<StackChart>,
    pub jobs: Vec<FigureRow>,
    pub most_failing: Vec<FigureRow>,
    pub group_rows: Vec<FigureRow>,
}

fn query_of(q: &Fields) -> Result<ReportQuery, Error> {
    Ok(ReportQuery {
        from: q.get("from").map(str::to_owned),
        to: q.get("to").map(str::to_owned),
        group_id: q.number("group_id", "group_id")?,
        job_id: q.number("job_id", "job_id")?,
    })
}

fn job_row(j: &service::reports::JobReport) -> FigureRow {
    let (name, href) = match &j.job_name {
        Some(name) => (name.clone(), format!("/console/jobs/{}", j.job_id)),
        None => (format!("#{}", j.job_id), String::new()),
    };
    let group = j
        .group_name
        .clone()
        .unwrap_or_else(|| format!("#{}", j.group_id));
    FigureRow::new(name, href, group, &j.figures)
}

async fn show(
    req: HttpRequest,
    state: web::Data<AppState>,
    user: ConsoleUser,
) -> PageResult<ReportsPage> {
    let q = Fields::of_query(&req);
    let groups = service::groups::all(&state, &user.actor).await?;
    let result = match query_of(&q) {
        Ok(query) => service::reports::report(&state, &user.actor, query).await,
        Err(e) => Err(e),
    };
    // A bad range, or a group or job that is not there, is the form's to fix.
    let (report, error) = match result {
        Ok(report) => (Some(report), String::new()),
        Err(e @ (Error::Invalid { .. } | Error::NotFound(_))) => (None, e.public_message()),
        Err(e) => return Err(e.into()),
    };
    let c = user.page("reports");
    let chosen_group = q.text("group_id");
    let mut page = ReportsPage {
        from: q.text("from"),
        to: q.text("to"),
        job_id: q.text("job_id"),
        groups: group_options(&groups, &chosen_group),
        error,
        has_report: report.is_some(),
        oldest_day: String::new(),
        updated: String::new(),
        csv_href: String::new(),
        totals: None,
        chart: None,
        jobs: Vec::new(),
        most_failing: Vec::new(),
        group_rows: Vec::new(),
        c,
    };
    if let Some(report) = report {
        // The form shows the range the report covers (the defaults filled in).
        page.from.clone_from(&report.from);
        page.to.clone_from(&report.to);
        let mut kept = q.clone();
        kept.0.retain(|(k, _)| k != "from" && k != "to");
        kept.0.push(("from".into(), report.from.clone()));
        kept.0.push(("to".into(), report.to.clone()));
        page.csv_href = kept.link_keeping("/console/reports/csv", &FILTERS);
        page.oldest_day.clone_from(&report.oldest_day);
        page.updated = super::views::when(report.updated_ms);
        page.totals = Some(FigureRow::new(
            String::new(),
            String::new(),
            String::new(),
            &report.totals,
        ));
        page.chart = Some(StackChart::new(&page.c, &report));
        page.jobs = report.jobs.iter().map(job_row).collect();
        page.most_failing = report.most_failing.iter().map(job_row).collect();
        page.group_rows = report
            .groups
            .iter()
            .map(|g| {
                let name = g
                    .group_name
                    .clone()
                    .unwrap_or_else(|| format!("#{}", g.group_id));
                FigureRow::new(
                    name,
                    format!("/console/runs?group_id={}", g.group_id),
                    String::new(),
                    &g.figures,
                )
            })
            .collect();
    }
    Ok(page)
}

/// The per-job table as CSV, for the filters of the page that links here.
async fn csv(
    req: HttpRequest,
    state: web::Data<AppState>,
    user: ConsoleUser,
) -> PageResult<HttpResponse> {
    let q = Fields::of_query(&req);
    let report = service::reports::report(&state, &user.actor, query_of(&q)?).await?;
    Ok(HttpResponse::Ok()
        .content_type("text/csv; charset=utf-8")
        .insert_header((
            header::CONTENT_DISPOSITION,
            format!(
                "attachment; filename=\"{}\"",
                service::reports::csv_file_name(&report)
            ),
        ))
        .body(service::reports::csv(&report)))
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/reports", web::get().to(show))
        .route("/reports/csv", web::get().to(csv));
}
