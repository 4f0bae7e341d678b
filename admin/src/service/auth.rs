//! Turning credentials into an `Actor`: password logins that issue JWTs (rate-limited), and
//! bearer credentials (JWT or API token) checked against the database on every request.

use crate::auth::rbac::{Actor, ActorKind};
use crate::auth::{api_token, password, sha256_hex};
use crate::db::{api_token as api_token_db, user, user_group_grant};
use crate::domain::role::Role;
use crate::error::Error;
use crate::startup::AppState;

/// API tokens' last-use time is written at most this often, so reads stay reads.
const TOUCH_EVERY_MS: i64 = 60_000;

/// Checks a username and password and issues a JWT with its expiry (ms).
///
/// # Errors
/// `RateLimited` after too many failures from this client for this name; `Unauthenticated`
/// for a wrong name or password or a disabled user (one message for all, so names cannot be probed).
pub async fn issue_token(
    state: &AppState,
    username: &str,
    password_text: &str,
    ip: &str,
) -> Result<(String, i64), Error> {
    let user = check_credentials(state, username, password_text, ip).await?;
    state.jwt.issue(
        user.id,
        &user.username,
        state.clock.now_ms(),
        state.jwt_ttl_ms,
    )
}

/// Checks a username and password (rate-limited per client and name).
///
/// # Errors
/// As `issue_token`.
pub async fn check_credentials(
    state: &AppState,
    username: &str,
    password_text: &str,
    ip: &str,
) -> Result<user::User, Error> {
    let now = state.clock.now_ms();
    let limit_key = format!("{ip}|{username}");
    if !state.login_limiter.allowed(&limit_key, now) {
        return Err(Error::RateLimited);
    }
    let name = username.to_owned();
    let found = state
        .db
        .run(move |conn| user::find_by_username(conn, &name))
        .await?;
    let candidate = password_text.to_owned();
    // Hashing is deliberately slow: keep it off the async workers.
    let (found, ok) = tokio::task::spawn_blocking(move || {
        let ok = match &found {
            Some(u) => password::verify(&u.password_hash, &candidate) && !u.disabled,
            None => {
                password::verify(password::dummy_hash(), &candidate);
                false
            }
        };
        (found, ok)
    })
    .await
    .map_err(|e| Error::Internal(anyhow::anyhow!("password check task: {e}")))?;
    let user = match (found, ok) {
        (Some(user), true) => user,
        _ => {
            state.login_limiter.record_failure(&limit_key, now);
            return Err(Error::Unauthenticated(
                "wrong username or password, or the user is disabled".into(),
            ));
        }
    };
    state.login_limiter.clear(&limit_key);
    Ok(user)
}

/// Resolves an `Authorization: Bearer` credential into an actor.
///
/// # Errors
/// `Unauthenticated` for anything expired, revoked, tampered, or belonging to a disabled user.
pub async fn resolve_bearer(
    state: &AppState,
    bearer: &str,
    ip: String,
    request_id: String,
) -> Result<Actor, Error> {
    let now = state.clock.now_ms();
    let denied = |why: &str| Error::Unauthenticated(why.to_owned());
    if api_token::looks_like_api_token(bearer) {
        let hash = sha256_hex(bearer);
        let (token, owner, groups) = state
            .db
            .run(move |conn| {
                let token = api_token_db::find_by_hash(conn, &hash)?
                    .ok_or_else(|| denied("invalid token"))?;
                if token.revoked_ms.is_some() {
                    return Err(denied("token revoked"));
                }
                if token.expires_ms.is_some_and(|exp| exp <= now) {
                    return Err(denied("token expired"));
                }
                let owner =
                    user::find(conn, token.user_id)?.ok_or_else(|| denied("invalid token"))?;
                if owner.disabled {
                    return Err(denied("the token's user is disabled"));
                }
                if token.last_used_ms.is_none_or(|t| now - t > TOUCH_EVERY_MS) {
                    api_token_db::touch(conn, token.id, now)?;
                }
                let groups = user_group_grant::group_ids_for_user(conn, owner.id)?;
                Ok((token, owner, groups))
            })
            .await?;
        let owner_role: Role = owner
            .role
            .parse()
            .map_err(|e: String| Error::Internal(anyhow::anyhow!(e)))?;
        let token_role: Role = token
            .role
            .parse()
            .map_err(|e: String| Error::Internal(anyhow::anyhow!(e)))?;
        return Ok(Actor {
            kind: ActorKind::Token { token_id: token.id },
            user_id: Some(owner.id),
            name: format!("{} (token {})", owner.username, token.name),
            role: owner_role.min(token_role),
            groups,
            ip,
            request_id,
        });
    }
    let claims = state.jwt.verify(bearer, now)?;
    let user_id: i64 = claims.sub.parse().map_err(|_| denied("invalid token"))?;
    user_actor(state, user_id, claims.iat_ms, ip, request_id).await
}

/// The actor of a user whose credential was issued at `issued_ms`.
///
/// # Errors
/// `Unauthenticated` when the user is gone or disabled, or changed password since.
pub async fn user_actor(
    state: &AppState,
    user_id: i64,
    issued_ms: i64,
    ip: String,
    request_id: String,
) -> Result<Actor, Error> {
    let denied = |why: &str| Error::Unauthenticated(why.to_owned());
    let (user, groups) = state
        .db
        .run(move |conn| {
            let user = user::find(conn, user_id)?.ok_or_else(|| denied("invalid token"))?;
            let groups = user_group_grant::group_ids_for_user(conn, user.id)?;
            Ok((user, groups))
        })
        .await?;
    if user.disabled {
        return Err(denied("the user is disabled"));
    }
    if issued_ms < user.password_changed_ms {
        return Err(denied(
            "logged in before the last password change; log in again",
        ));
    }
    Ok(Actor {
        kind: ActorKind::User,
        user_id: Some(user.id),
        role: user
            .role
            .parse()
            .map_err(|e: String| Error::Internal(anyhow::anyhow!(e)))?,
        name: user.username,
        groups,
        ip,
        request_id,
    })
}
