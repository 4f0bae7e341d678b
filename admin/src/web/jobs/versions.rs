//! Script versions: one version's source with its line diff against another (the current one
//! unless `?against=N`), and rolling back to it.

use actix_web::{HttpRequest, web};
use askama::Template;
use askama_web::WebTemplate;

use crate::domain::ids::JobId;
use crate::service;
use crate::state::AppState;
use crate::web::forms::{ConsoleUser, CsrfForm, Fields};
use crate::web::views::{Chrome, Opt, when};
use crate::web::{PageResult, see_other_with};

/// A version in the list on the job's page.
#[derive(Debug, Clone)]
pub struct VersionRow {
    pub version: i32,
    pub interpreter: String,
    pub note: String,
    pub by: String,
    pub when: String,
    pub current: bool,
}

#[derive(Debug, Clone)]
pub struct DiffLine {
    pub kind: &'static str,
    pub sign: &'static str,
    pub text: String,
}

#[derive(Template, WebTemplate)]
#[template(path = "script_version.html")]
pub struct ScriptVersionPage {
    pub c: Chrome,
    pub job_id: JobId,
    pub job_name: String,
    pub version: i32,
    pub current: i32,
    pub interpreter: String,
    pub by: String,
    pub when: String,
    pub note: String,
    pub source: String,
    /// The version the diff goes to (the current one unless another was chosen).
    pub against: i32,
    pub others: Vec<Opt>,
    pub diff: Vec<DiffLine>,
    pub can_rollback: bool,
}

fn line_diff(old: &str, new: &str) -> Vec<DiffLine> {
    similar::TextDiff::from_lines(old, new)
        .iter_all_changes()
        .map(|change| {
            let (kind, sign) = match change.tag() {
                similar::ChangeTag::Delete => ("del", "-"),
                similar::ChangeTag::Insert => ("add", "+"),
                similar::ChangeTag::Equal => ("same", " "),
            };
            DiffLine {
                kind,
                sign,
                text: change.value().trim_end_matches('\n').to_owned(),
            }
        })
        .collect()
}

pub(super) async fn version(
    req: HttpRequest,
    state: web::Data<AppState>,
    user: ConsoleUser,
    path: web::Path<(JobId, i32)>,
) -> PageResult<ScriptVersionPage> {
    let (job_id, version) = path.into_inner();
    let job = service::jobs::get(&state, &user.actor, job_id).await?;
    let old = service::jobs::script_version(&state, &user.actor, job_id, version).await?;
    let against = Fields::of_query(&req)
        .number::<i32>("against", "against")?
        .unwrap_or(job.handler.script_version);
    let target_source = service::jobs::script_version(&state, &user.actor, job_id, against)
        .await?
        .source
        .unwrap_or_default();
    let others = service::jobs::script_versions(&state, &user.actor, job_id)
        .await?
        .into_iter()
        .map(|v| {
            Opt::new(v.version.to_string(), format!("v{}", v.version)).picked(v.version == against)
        })
        .collect();
    let old_source = old.source.clone().unwrap_or_default();
    Ok(ScriptVersionPage {
        job_id,
        job_name: job.name.clone(),
        version,
        current: job.handler.script_version,
        interpreter: old.interpreter,
        by: old.created_by,
        when: when(Some(old.created_ms)),
        note: old.note,
        diff: line_diff(&old_source, &target_source),
        source: old_source,
        against,
        others,
        can_rollback: !old.current && user.actor.write_group(job.group_id).is_ok(),
        c: user.page("jobs"),
    })
}

pub(super) async fn rollback(
    state: web::Data<AppState>,
    form: CsrfForm,
    path: web::Path<(JobId, i32)>,
) -> PageResult {
    let (job_id, version) = path.into_inner();
    service::jobs::rollback_script(&state, &form.user.actor, job_id, version).await?;
    Ok(see_other_with(
        &format!("/console/jobs/{job_id}"),
        form.user.chrome.t("flash.rolled_back"),
    ))
}
