//! Runs: the list with filters, a run's page (results, attempt chain, usage) with its log
//! tailing live, and kill.

use actix_web::{HttpRequest, HttpResponse, web};
use askama::Template;
use askama_web::WebTemplate;
use serde::Serialize;

use super::forms::{ConsoleUser, CsrfForm, Fields, listed};
use super::views::{Chrome, Opt, Pager, RunRow, duration, group_options, status_label, when};
use super::{PageError, PageResult, see_other_with};
use crate::domain::ids::RunId;
use crate::domain::policy::RunStatus;
use crate::error::Error;
use crate::service;
use crate::service::runs::{RunQuery, RunView};
use crate::state::AppState;

#[derive(Template, WebTemplate)]
#[template(path = "runs.html")]
pub struct RunsPage {
    pub c: Chrome,
    pub job_id: String,
    pub from: String,
    pub to: String,
    pub groups: Vec<Opt>,
    pub statuses: Vec<Opt>,
    pub runs: Vec<RunRow>,
    pub pager: Pager,
    pub error: String,
}

#[derive(Debug, Clone)]
pub struct ChainLink {
    pub id: RunId,
    pub status: String,
    pub when: String,
}

#[derive(Template, WebTemplate)]
#[template(path = "run.html")]
pub struct RunPage {
    pub c: Chrome,
    pub run: RunView,
    pub job_name: String,
    pub status_label: &'static str,
    pub agent: String,
    pub scheduled: String,
    pub triggered: String,
    pub started: String,
    pub finished: String,
    pub trigger_msg: String,
    pub handle: String,
    pub exit: String,
    pub usage: String,
    pub chain: Vec<ChainLink>,
    pub can_kill: bool,
    /// Finished with every attempt of its chain, and the user may run the job.
    pub can_retry: bool,
    pub is_final: bool,
}

async fn list(
    req: HttpRequest,
    state: web::Data<AppState>,
    user: ConsoleUser,
) -> PageResult<RunsPage> {
    let q = Fields::of_query(&req);
    let groups = service::groups::all(&state, &user.actor).await?;
    let query = (|| -> Result<RunQuery, Error> {
        Ok(RunQuery {
            job_id: q.number("job_id", "job_id")?,
            group_id: q.number("group_id", "group_id")?,
            status: q.get("status").map(str::to_owned),
            from_ms: q.utc_time("from")?,
            to_ms: q.utc_time("to")?,
            limit: Some(50),
            offset: q.number("offset", "offset")?,
        })
    })();
    let result = match query {
        Ok(query) => service::runs::list(&state, &user.actor, query).await,
        Err(e) => Err(e),
    };
    let (paged, error) = listed(result)?;
    let names = service::runs::job_names(&state, &paged.items).await?;
    let c = user.page("runs");
    let base = q.link_keeping(
        "/console/runs",
        &["job_id", "group_id", "status", "from", "to"],
    );
    let chosen_group = q.text("group_id");
    let chosen_status = q.text("status");
    Ok(RunsPage {
        job_id: q.text("job_id"),
        from: q.text("from"),
        to: q.text("to"),
        groups: group_options(&groups, &chosen_group),
        statuses: RunStatus::ALL
            .iter()
            .map(|s| Opt::new(s.as_str(), status_label(&c, *s)).picked(s.as_str() == chosen_status))
            .collect(),
        pager: Pager::of(&base, &paged),
        runs: paged
            .items
            .iter()
            .map(|r| RunRow::new(&c, r, names.get(&r.job_id).map_or("", String::as_str)))
            .collect(),
        error,
        c,
    })
}

async fn show(
    state: web::Data<AppState>,
    user: ConsoleUser,
    id: web::Path<RunId>,
) -> PageResult<RunPage> {
    let run = service::runs::get(&state, &user.actor, *id).await?;
    let first = run.first_run_id.unwrap_or(run.id);
    let chain_query = RunQuery {
        job_id: Some(run.job_id),
        limit: Some(200),
        ..RunQuery::default()
    };
    let attempts: Vec<service::runs::RunView> =
        service::runs::list(&state, &user.actor, chain_query)
            .await?
            .items
            .into_iter()
            .filter(|r| r.id == first || r.first_run_id == Some(first))
            .collect();
    let chain_settled = attempts.iter().all(|r| r.status.is_final());
    // A workflow's step is rerun from its workflow, not retried on its own.
    let workflow_step = attempts
        .iter()
        .any(|r| r.trigger_kind == crate::domain::policy::TriggerKind::Workflow);
    let mut chain: Vec<ChainLink> = attempts
        .into_iter()
        .map(|r| ChainLink {
            id: r.id,
            status: r.status.to_string(),
            when: when(Some(r.scheduled_ms)),
        })
        .collect();
    chain.sort_by_key(|l| l.id);
    let names = service::runs::job_names(&state, [&run]).await?;
    let c = user.page("runs");
    let u = &run.usage;
    let mut usage = Vec::new();
    if let Some(cpu) = u.cpu_ms {
        usage.push(format!("CPU {}", duration(cpu)));
    }
    if let Some(kb) = u.max_rss_kb {
        usage.push(format!("peak memory {:.1} MB", kb as f64 / 1024.0));
    }
    if u.oom_killed == Some(true) {
        usage.push("killed by the OOM killer".into());
    }
    if let Some(mode) = &u.limits_mode {
        usage.push(format!("limits: {mode}"));
    }
    let handle = match (run.handle_code, &run.handle_msg) {
        (Some(code), Some(msg)) => format!("{code} · {msg}"),
        (Some(code), None) => code.to_string(),
        (None, Some(msg)) => msg.clone(),
        (None, None) => "—".into(),
    };
    let exit = match (run.exit_code, run.signal) {
        (Some(code), _) => code.to_string(),
        (None, Some(sig)) => format!("signal {sig}"),
        _ => "—".into(),
    };
    Ok(RunPage {
        job_name: names
            .get(&run.job_id)
            .cloned()
            .unwrap_or_else(|| format!("#{}", run.job_id)),
        status_label: status_label(&c, run.status),
        agent: run.agent.clone().unwrap_or_else(|| "—".into()),
        scheduled: when(Some(run.scheduled_ms)),
        triggered: when(run.triggered_ms),
        started: when(run.started_ms),
        finished: when(run.finished_ms),
        trigger_msg: run.trigger_msg.clone().unwrap_or_else(|| "—".into()),
        handle,
        exit,
        usage: if usage.is_empty() {
            "—".into()
        } else {
            usage.join(" · ")
        },
        chain,
        can_kill: run.status == RunStatus::Running && user.actor.write_group(run.group_id).is_ok(),
        can_retry: run.status.is_final()
            && chain_settled
            && !workflow_step
            && user.actor.write_group(run.group_id).is_ok(),
        is_final: run.status.is_final(),
        run,
        c,
    })
}

#[derive(Serialize)]
struct LogAnswer {
    from_line: i64,
    to_line: i64,
    content: String,
    status: String,
    status_label: &'static str,
    /// Nothing more will come: the run is final and its last line was sent.
    done: bool,
    /// The page should reload to show the final results.
    reload: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// One page of the log for the live tail, with the run's status so the page can follow it.
async fn log(
    req: HttpRequest,
    state: web::Data<AppState>,
    user: ConsoleUser,
    id: web::Path<RunId>,
) -> PageResult<HttpResponse> {
    let q = Fields::of_query(&req);
    let from_line = q.number::<i64>("from_line", "from_line")?.unwrap_or(1);
    let run = service::runs::get(&state, &user.actor, *id).await?;
    let final_now = run.status.is_final();
    let label = status_label(&user.chrome, run.status);
    let answer = match service::runs::log(&state, &user.actor, run.id, from_line).await {
        Ok(page) => LogAnswer {
            from_line: page.from_line,
            to_line: page.to_line,
            content: page.content,
            done: final_now && (page.is_end || page.to_line < from_line),
            reload: final_now,
            status: run.status.to_string(),
            status_label: label,
            error: None,
        },
        // No agent yet (pending) or the agent is gone: say so, and keep polling until final.
        Err(e) => LogAnswer {
            from_line,
            to_line: from_line - 1,
            content: String::new(),
            done: final_now,
            reload: final_now,
            status: run.status.to_string(),
            status_label: label,
            error: Some(e.public_message()),
        },
    };
    Ok(HttpResponse::Ok().json(answer))
}

async fn kill(state: web::Data<AppState>, form: CsrfForm, id: web::Path<RunId>) -> PageResult {
    let run = service::runs::kill(&state, &form.user.actor, *id)
        .await
        .map_err(PageError)?;
    Ok(see_other_with(
        &format!("/console/runs/{}", run.id),
        form.user.chrome.t("flash.kill_sent"),
    ))
}

async fn retry(state: web::Data<AppState>, form: CsrfForm, id: web::Path<RunId>) -> PageResult {
    let run = service::runs::retry(
        &state,
        &form.user.actor,
        *id,
        service::runs::TriggerRequest::default(),
    )
    .await
    .map_err(PageError)?;
    Ok(see_other_with(
        &format!("/console/runs/{}", run.id),
        form.user.chrome.t("flash.retried"),
    ))
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/runs", web::get().to(list))
        .route("/runs/{id}", web::get().to(show))
        .route("/runs/{id}/log", web::get().to(log))
        .route("/runs/{id}/kill", web::post().to(kill))
        .route("/runs/{id}/retry", web::post().to(retry));
}
