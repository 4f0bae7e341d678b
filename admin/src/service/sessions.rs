//! Console sessions: a password login opens one (random token in an HttpOnly cookie, its hash
//! in the database, a CSRF token beside it); each request resolves it to an `Actor` with the
//! user's current role and grants; logout or expiry ends it.

use crate::auth::rbac::Actor;
use crate::auth::{random_token, sha256_hex};
use crate::db::console_session::{self, ConsoleSession};
use crate::error::Error;
use crate::service::auth;
use crate::state::AppState;

/// A session ends after this long without a request...
pub const IDLE_MS: i64 = 12 * 3600 * 1000;
/// ...and this long after login in any case.
pub const MAX_AGE_MS: i64 = 7 * 24 * 3600 * 1000;
/// The idle expiry is written at most this often, so page views stay reads.
const TOUCH_EVERY_MS: i64 = 60_000;

/// A session as the console sees it.
#[derive(Debug, Clone)]
pub struct Session {
    pub actor: Actor,
    pub csrf_token: String,
}

/// Opens a session; returns the cookie's token.
///
/// # Errors
/// As `auth::check_credentials`.
pub async fn login(
    state: &AppState,
    username: &str,
    password: &str,
    ip: &str,
) -> Result<String, Error> {
    let user = auth::check_credentials(state, username, password, ip).await?;
    let now = state.clock.now_ms();
    let token = random_token(43);
    let row = ConsoleSession {
        id_hash: sha256_hex(&token),
        user_id: user.id,
        csrf_token: random_token(43),
        ip: ip.chars().take(64).collect(),
        created_ms: now,
        last_seen_ms: now,
        expires_ms: now + IDLE_MS,
    };
    state
        .db
        .run(move |conn| {
            // Logins are rare: a good moment to sweep out expired sessions.
            console_session::delete_expired(conn, now)?;
            console_session::insert(conn, &row)
        })
        .await?;
    tracing::info!(user = %user.username, ip, "Console login");
    Ok(token)
}

/// The session behind a cookie token.
///
/// # Errors
/// `Unauthenticated` for an unknown, expired or outdated session or a disabled user.
pub async fn resolve(
    state: &AppState,
    token: &str,
    ip: String,
    request_id: String,
) -> Result<Session, Error> {
    let now = state.clock.now_ms();
    let hash = sha256_hex(token);
    let row = state
        .db
        .run(move |conn| {
            let Some(row) = console_session::find(conn, &hash)? else {
                return Ok(None);
            };
            if row.expires_ms <= now || now - row.created_ms >= MAX_AGE_MS {
                console_session::delete(conn, &hash)?;
                return Ok(None);
            }
            if now - row.last_seen_ms >= TOUCH_EVERY_MS {
                console_session::touch(conn, &hash, now, now + IDLE_MS)?;
            }
            Ok(Some(row))
        })
        .await?
        .ok_or_else(|| Error::Unauthenticated("your session has ended; log in again".into()))?;
    let actor = auth::user_actor(state, row.user_id, row.created_ms, ip, request_id).await?;
    Ok(Session {
        actor,
        csrf_token: row.csrf_token,
    })
}

/// Ends the session of this cookie token (nothing happens for an unknown one).
///
/// # Errors
/// Database errors.
pub async fn logout(state: &AppState, token: &str) -> Result<(), Error> {
    let hash = sha256_hex(token);
    state
        .db
        .run(move |conn| console_session::delete(conn, &hash))
        .await
}
