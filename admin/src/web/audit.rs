//! The audit log (admins): who did what to which object, from where and when, with the fields
//! that changed between the before and after records.

use actix_web::{HttpRequest, web};
use askama::Template;
use askama_web::WebTemplate;
use serde_json::Value;

use super::PageResult;
use super::forms::{ConsoleUser, Fields, listed};
use super::views::{Chrome, Pager, when};
use crate::error::Error;
use crate::service;
use crate::service::audit::AuditQuery;
use crate::state::AppState;

#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    pub path: String,
    pub before: String,
    pub after: String,
}

#[derive(Debug, Clone)]
pub struct AuditRow {
    pub when: String,
    pub actor: String,
    pub ip: String,
    pub action: String,
    pub object: String,
    pub changes: Vec<Change>,
}

#[derive(Template, WebTemplate)]
#[template(path = "audit.html")]
pub struct AuditPage {
    pub c: Chrome,
    pub actor: String,
    pub action: String,
    pub object_type: String,
    pub object_id: String,
    pub from: String,
    pub to: String,
    pub entries: Vec<AuditRow>,
    pub pager: Pager,
    pub error: String,
}

/// Leaves of a JSON document by dotted path (`handler.command`, `children[0]`).
fn flatten(prefix: &str, value: &Value, out: &mut Vec<(String, String)>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                let path = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&path, v, out);
            }
        }
        Value::Array(items)
            if !items.is_empty() && items.iter().any(|i| i.is_object() || i.is_array()) =>
        {
            for (i, v) in items.iter().enumerate() {
                flatten(&format!("{prefix}[{i}]"), v, out);
            }
        }
        Value::String(s) => out.push((prefix.to_owned(), s.clone())),
        other => out.push((prefix.to_owned(), other.to_string())),
    }
}

/// The fields that differ between two records; a create or delete lists every field.
pub fn changes(before: Option<&Value>, after: Option<&Value>) -> Vec<Change> {
    let mut b = Vec::new();
    let mut a = Vec::new();
    if let Some(v) = before {
        flatten("", v, &mut b);
    }
    if let Some(v) = after {
        flatten("", v, &mut a);
    }
    let b: std::collections::BTreeMap<_, _> = b.into_iter().collect();
    let a: std::collections::BTreeMap<_, _> = a.into_iter().collect();
    let mut keys: Vec<&String> = b.keys().chain(a.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        // Bookkeeping fields change on every edit and say nothing.
        .filter(|k| !matches!(k.as_str(), "updated_ms" | "next_fire_ms"))
        .filter_map(|k| {
            let (old, new) = (b.get(k), a.get(k));
            (old != new).then(|| Change {
                path: k.clone(),
                before: old.cloned().unwrap_or_default(),
                after: new.cloned().unwrap_or_default(),
            })
        })
        .collect()
}

async fn list(
    req: HttpRequest,
    state: web::Data<AppState>,
    user: ConsoleUser,
) -> PageResult<AuditPage> {
    let proof = user.actor.require_admin()?;
    let q = Fields::of_query(&req);
    let query = (|| -> Result<AuditQuery, Error> {
        Ok(AuditQuery {
            actor: q.get("actor").map(str::to_owned),
            action: q.get("action").map(str::to_owned),
            object_type: q.get("object_type").map(str::to_owned),
            object_id: q.get("object_id").map(str::to_owned),
            from_ms: q.utc_time("from")?,
            to_ms: q.utc_time("to")?,
            limit: Some(50),
            offset: q.number("offset", "offset")?,
        })
    })();
    let result = match query {
        Ok(query) => service::audit::list(&state, &proof, query).await,
        Err(e) => Err(e),
    };
    let (paged, error) = listed(result)?;
    let base = q.link_keeping(
        "/console/audit",
        &["actor", "action", "object_type", "object_id", "from", "to"],
    );
    Ok(AuditPage {
        actor: q.text("actor"),
        action: q.text("action"),
        object_type: q.text("object_type"),
        object_id: q.text("object_id"),
        from: q.text("from"),
        to: q.text("to"),
        pager: Pager::of(&base, &paged),
        entries: paged
            .items
            .into_iter()
            .map(|e| AuditRow {
                when: when(Some(e.at_ms)),
                actor: format!("{} ({})", e.actor_name, e.actor_kind),
                ip: e.ip.clone(),
                action: e.action.clone(),
                object: format!("{} {}", e.object_type, e.object_id),
                changes: changes(e.before.as_ref(), e.after.as_ref()),
            })
            .collect(),
        error,
        c: user.page("audit"),
    })
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/audit", web::get().to(list));
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_changed_fields_are_listed() {
        let before = json!({"name": "a", "schedule": {"expr": "0 * * * * ?", "timezone": "UTC"}, "updated_ms": 1});
        let after = json!({"name": "a", "schedule": {"expr": "0 0 * * * ?", "timezone": "UTC"}, "updated_ms": 2});
        assert_eq!(
            changes(Some(&before), Some(&after)),
            vec![Change {
                path: "schedule.expr".into(),
                before: "0 * * * * ?".into(),
                after: "0 0 * * * ?".into()
            }]
        );
        let created = changes(None, Some(&json!({"name": "x", "children": [1, 2]})));
        assert_eq!(created.len(), 2);
        assert_eq!(created[0].after, "[1,2]");
    }
}
