//! Bulk actions on jobs: enable, disable, trigger or delete the jobs chosen by id or by a filter
//! (a group, a tag, a name), each job through the same service call, checks and audit row as
//! its single action, so a bulk action can do nothing a caller could not do job by job.

use serde::{Deserialize, Serialize};

use crate::auth::rbac::Actor;
use crate::db::{Page, job};
use crate::domain::ids::JobId;
use crate::error::{Error, ErrorDetail};
use crate::service::jobs::{self, JobQuery};
use crate::service::runs::{self, TriggerRequest};
use crate::state::AppState;

/// At most this many jobs per bulk action: a filter matching more must be narrowed.
pub const MAX_BULK_JOBS: usize = 1_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum BulkAction {
    Enable,
    Disable,
    Trigger,
    Delete,
}

impl BulkAction {
    pub fn as_str(self) -> &'static str {
        match self {
            BulkAction::Enable => "enable",
            BulkAction::Disable => "disable",
            BulkAction::Trigger => "trigger",
            BulkAction::Delete => "delete",
        }
    }
}

/// Which jobs: `ids`, or every job the caller sees that matches `filter`; exactly one of them.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BulkRequest {
    pub action: BulkAction,
    pub ids: Option<Vec<JobId>>,
    /// The job list's filters: `group_id`, `tag`, `q` (name contains), `enabled`,
    /// `schedule_type`.
    pub filter: Option<BulkFilter>,
    /// `trigger`: params for every run instead of each job's own.
    pub params: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BulkFilter {
    pub group_id: Option<crate::domain::ids::GroupId>,
    pub tag: Option<String>,
    pub q: Option<String>,
    pub enabled: Option<bool>,
    pub schedule_type: Option<String>,
}

/// What happened to one job.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct BulkItem {
    pub id: JobId,
    /// Absent for an id that names no job the caller can see.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub ok: bool,
    /// `trigger`: the run it started.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorDetail>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct BulkOutcome {
    pub action: BulkAction,
    /// Jobs chosen.
    pub matched: usize,
    /// Jobs the action was done to.
    pub done: usize,
    /// Jobs it was refused for (each item says why).
    pub failed: usize,
    pub items: Vec<BulkItem>,
}

fn detail(e: &Error) -> ErrorDetail {
    ErrorDetail {
        code: e.code().as_str(),
        message: e.public_message(),
        field: e.field().map(str::to_owned),
    }
}

/// The jobs a request chooses, as (id, name) for those the caller sees; ids it does not see
/// come back with no name.
async fn chosen(
    state: &AppState,
    actor: &Actor,
    request: &BulkRequest,
) -> Result<Vec<(JobId, Option<String>)>, Error> {
    match (&request.ids, &request.filter) {
        (Some(_), Some(_)) => Err(Error::invalid("filter", "give `ids` or `filter`, not both")),
        (None, None) => Err(Error::invalid(
            "ids",
            "give the jobs: `ids`, or a `filter` such as {\"group_id\": 3}",
        )),
        (Some(ids), None) => {
            if ids.is_empty() {
                return Err(Error::invalid("ids", "must name at least one job"));
            }
            if ids.len() > MAX_BULK_JOBS {
                return Err(Error::invalid(
                    "ids",
                    format!("at most {MAX_BULK_JOBS} jobs at a time"),
                ));
            }
            let mut unique = ids.clone();
            unique.sort_unstable();
            if let Some(pair) = unique.windows(2).find(|w| w[0] == w[1]) {
                return Err(Error::invalid(
                    "ids",
                    format!("job {} is listed twice", pair[0]),
                ));
            }
            let filter = job::JobFilter {
                visible_groups: actor.visible_groups(),
                ids: Some(ids.clone()),
                ..Default::default()
            };
            let limit = i64::try_from(ids.len()).unwrap_or(i64::MAX);
            let rows = state
                .db
                .run(move |conn| job::list(conn, &filter, Page { limit, offset: 0 }))
                .await?;
            Ok(ids
                .iter()
                .map(|id| {
                    let name = rows.iter().find(|r| r.id == *id).map(|r| r.name.clone());
                    (*id, name)
                })
                .collect())
        }
        (None, Some(f)) => {
            let filter = JobQuery {
                group_id: f.group_id,
                enabled: f.enabled,
                schedule_type: f.schedule_type.clone(),
                q: f.q.clone(),
                tag: f.tag.clone(),
                limit: None,
                offset: None,
            }
            .filter(actor)
            .map_err(|e| e.within("filter"))?;
            let rows = state
                .db
                .run(move |conn| {
                    let total = job::count(conn, &filter)?;
                    if usize::try_from(total).unwrap_or(usize::MAX) > MAX_BULK_JOBS {
                        return Err(Error::invalid(
                            "filter",
                            format!(
                                "matches {total} jobs; a bulk action takes at most \
                                 {MAX_BULK_JOBS}: narrow the filter"
                            ),
                        ));
                    }
                    job::list(
                        conn,
                        &filter,
                        Page {
                            limit: total.max(1),
                            offset: 0,
                        },
                    )
                })
                .await?;
            Ok(rows.into_iter().map(|r| (r.id, Some(r.name))).collect())
        }
    }
}

/// `POST /api/v1/jobs/bulk`: the action on every chosen job, one by one, each in its own
/// transaction with its own audit row; a job it is refused for is reported and the rest go on.
pub async fn apply(
    state: &AppState,
    actor: &Actor,
    request: BulkRequest,
) -> Result<BulkOutcome, Error> {
    if request.params.is_some() && request.action != BulkAction::Trigger {
        return Err(Error::invalid("params", "only a `trigger` takes params"));
    }
    let jobs = chosen(state, actor, &request).await?;
    let mut items = Vec::with_capacity(jobs.len());
    let mut stopped: Option<Error> = None;
    for (id, name) in jobs {
        if let Some(cause) = &stopped {
            // The database went away mid-way: what is left is reported, not tried.
            items.push(BulkItem {
                id,
                name,
                ok: false,
                run_id: None,
                error: Some(detail(&Error::Unavailable(format!(
                    "not attempted after an earlier failure: {}",
                    cause.public_message()
                )))),
            });
            continue;
        }
        if name.is_none() {
            // Hidden and missing jobs look the same, as a single action's 404 does.
            items.push(BulkItem {
                id,
                name,
                ok: false,
                run_id: None,
                error: Some(detail(&Error::NotFound("job"))),
            });
            continue;
        }
        let outcome = match request.action {
            BulkAction::Enable => jobs::set_enabled(state, actor, id, true)
                .await
                .map(|_| None),
            BulkAction::Disable => jobs::set_enabled(state, actor, id, false)
                .await
                .map(|_| None),
            BulkAction::Delete => jobs::delete(state, actor, id).await.map(|()| None),
            BulkAction::Trigger => runs::trigger(
                state,
                actor,
                id,
                TriggerRequest {
                    params: request.params.clone(),
                    address: None,
                },
            )
            .await
            .map(|run| Some(run.id.0)),
        };
        items.push(match outcome {
            Ok(run_id) => BulkItem {
                id,
                name,
                ok: true,
                run_id,
                error: None,
            },
            Err(e) => {
                let item = BulkItem {
                    id,
                    name,
                    ok: false,
                    run_id: None,
                    error: Some(detail(&e)),
                };
                match e {
                    // The database is away: the rest would fail the same way, slowly.
                    Error::Unavailable(_) => stopped = Some(e),
                    Error::Internal(ref cause) => {
                        tracing::error!(job_id = %id, error = %cause, "A bulk action failed on a job");
                    }
                    _ => {}
                }
                item
            }
        });
    }
    let done = items.iter().filter(|i| i.ok).count();
    Ok(BulkOutcome {
        action: request.action,
        matched: items.len(),
        done,
        failed: items.len() - done,
        items,
    })
}
