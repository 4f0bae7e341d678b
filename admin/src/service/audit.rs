//! Reading the audit log (admins only).

use serde::{Deserialize, Serialize};

use crate::auth::rbac::AdminProof;
use crate::db::{Page, audit_log};
use crate::error::Error;
use crate::service::Paged;
use crate::state::AppState;

#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct AuditView {
    pub id: i64,
    pub at_ms: i64,
    pub actor_kind: String,
    pub actor_id: Option<i64>,
    pub actor_name: String,
    pub ip: String,
    pub action: String,
    pub object_type: String,
    pub object_id: String,
    #[schema(value_type = Option<Object>)]
    pub before: Option<serde_json::Value>,
    #[schema(value_type = Option<Object>)]
    pub after: Option<serde_json::Value>,
    pub request_id: String,
}

#[derive(Debug, Default, Clone, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct AuditQuery {
    pub actor: Option<String>,
    pub action: Option<String>,
    pub object_type: Option<String>,
    pub object_id: Option<String>,
    pub from_ms: Option<i64>,
    pub to_ms: Option<i64>,
    pub limit: Option<i64>,
    pub offset: Option<i64>,
}

fn parse_json(text: Option<String>) -> Option<serde_json::Value> {
    text.and_then(|t| serde_json::from_str(&t).ok())
}

pub async fn list(
    state: &AppState,
    _: &AdminProof,
    query: AuditQuery,
) -> Result<Paged<AuditView>, Error> {
    let page = Page::new(query.limit, query.offset)?;
    let filter = audit_log::AuditFilter {
        actor_name: query.actor,
        action: query.action,
        object_type: query.object_type,
        object_id: query.object_id,
        from_ms: query.from_ms,
        to_ms: query.to_ms,
    };
    state
        .db
        .run(move |conn| {
            let items = audit_log::list(conn, &filter, page)?
                .into_iter()
                .map(|row| AuditView {
                    id: row.id,
                    at_ms: row.at_ms,
                    actor_kind: row.actor_kind,
                    actor_id: row.actor_id,
                    actor_name: row.actor_name,
                    ip: row.ip,
                    action: row.action,
                    object_type: row.object_type,
                    object_id: row.object_id,
                    before: parse_json(row.before_json),
                    after: parse_json(row.after_json),
                    request_id: row.request_id,
                })
                .collect();
            Ok(Paged {
                items,
                total: audit_log::count(conn, &filter)?,
                limit: page.limit,
                offset: page.offset,
            })
        })
        .await
}
