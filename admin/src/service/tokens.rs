//! API tokens: minted for the caller, shown once, listed, revoked.

use serde::{Deserialize, Serialize};

use crate::audit::{self, Entry};
use crate::auth::api_token::mint;
use crate::auth::rbac::{Actor, ActorKind};
use crate::db::api_token;
use crate::domain::job::check_name;
use crate::domain::role::Role;
use crate::error::Error;
use crate::state::AppState;

#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct TokenView {
    pub id: i64,
    pub user_id: i64,
    pub name: String,
    /// The first characters of the token, to tell tokens apart.
    pub prefix: String,
    #[schema(value_type = String)]
    pub role: Role,
    pub created_ms: i64,
    pub expires_ms: Option<i64>,
    pub revoked_ms: Option<i64>,
    pub last_used_ms: Option<i64>,
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct CreatedToken {
    /// The secret: shown this once, stored only as a hash.
    pub token: String,
    #[serde(flatten)]
    pub info: TokenView,
}

#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewTokenRequest {
    pub name: String,
    /// At most the creator's role; default the creator's role.
    #[schema(value_type = Option<String>)]
    pub role: Option<Role>,
    /// Lifetime in seconds; omit for a token that lasts until revoked.
    pub expires_in_s: Option<i64>,
}

fn view(row: api_token::ApiToken) -> Result<TokenView, Error> {
    Ok(TokenView {
        id: row.id,
        user_id: row.user_id,
        role: row.role,
        name: row.name,
        prefix: row.prefix,
        created_ms: row.created_ms,
        expires_ms: row.expires_ms,
        revoked_ms: row.revoked_ms,
        last_used_ms: row.last_used_ms,
    })
}

pub async fn create(
    state: &AppState,
    actor: &Actor,
    request: NewTokenRequest,
) -> Result<CreatedToken, Error> {
    let user_id = actor
        .user_id
        .ok_or_else(|| Error::Forbidden("only users own tokens".into()))?;
    if matches!(actor.kind, ActorKind::Token { .. }) {
        return Err(Error::Forbidden(
            "an API token cannot mint further tokens; log in as the user".into(),
        ));
    }
    let name = check_name("name", &request.name, 100)?;
    let role = request.role.unwrap_or(actor.role);
    if !actor.role.at_least(role) {
        return Err(Error::invalid(
            "role",
            format!("cannot exceed your own role `{}`", actor.role),
        ));
    }
    let now = state.clock.now_ms();
    let expires_ms = match request.expires_in_s {
        None => None,
        Some(s) if (60..=10 * 366 * 24 * 3600).contains(&s) => Some(now + s * 1000),
        Some(_) => {
            return Err(Error::invalid(
                "expires_in_s",
                "must be between 60 seconds and 10 years",
            ));
        }
    };
    let minted = mint();
    let actor = actor.clone();
    state
        .db
        .transaction(move |conn| {
            let id = api_token::insert(
                conn,
                &api_token::NewApiToken {
                    user_id,
                    name: &name,
                    token_hash: &minted.hash,
                    prefix: &minted.display_prefix,
                    role,
                    created_ms: now,
                    expires_ms,
                },
            )?;
            let info = view(api_token::get(conn, id)?)?;
            audit::record(
                conn,
                &actor,
                now,
                Entry::new("token.create", "token", id).after(&info)?,
            )?;
            Ok(CreatedToken {
                token: minted.secret.clone(),
                info,
            })
        })
        .await
}

/// The caller's own tokens; admins see everyone's.
pub async fn list(state: &AppState, actor: &Actor) -> Result<Vec<TokenView>, Error> {
    let owner = if actor.is_admin() {
        None
    } else {
        Some(
            actor
                .user_id
                .ok_or_else(|| Error::Forbidden("only users own tokens".into()))?,
        )
    };
    state
        .db
        .run(move |conn| {
            api_token::list(conn, owner)?
                .into_iter()
                .map(view)
                .collect()
        })
        .await
}

/// Revokes a token at once; owners revoke their own, admins any.
pub async fn revoke(state: &AppState, actor: &Actor, id: i64) -> Result<TokenView, Error> {
    let now = state.clock.now_ms();
    let actor = actor.clone();
    state
        .db
        .transaction(move |conn| {
            let before = view(api_token::get(conn, id)?)?;
            if !actor.is_admin() && actor.user_id != Some(before.user_id) {
                return Err(Error::Forbidden(
                    "you can revoke only your own tokens".into(),
                ));
            }
            api_token::revoke(conn, id, now)?;
            let after = view(api_token::get(conn, id)?)?;
            audit::record(
                conn,
                &actor,
                now,
                Entry::new("token.revoke", "token", id)
                    .before(&before)?
                    .after(&after)?,
            )?;
            Ok(after)
        })
        .await
}
