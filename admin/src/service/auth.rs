//! Turning credentials into an `Actor`: password logins that issue JWTs (rate-limited), and
//! bearer credentials (JWT or API token) checked against the database on every request.

use std::future::Future;

use crate::auth::rate_limit::Charge;
use crate::auth::rbac::{Actor, ActorKind};
use crate::auth::{api_token, password, sha256_hex};
use crate::db::{api_token as api_token_db, user, user_group_grant};
use crate::domain::role::Role;
use crate::error::Error;
use crate::state::AppState;

/// API tokens' last-use time is written at most this often, so reads stay reads.
const TOUCH_EVERY_MS: i64 = 60_000;

/// Checks a username and password and issues a JWT with its expiry (ms).
///
/// # Errors
/// `RateLimited` after too many failures at this name or from this client; `Overloaded` when
/// password hashing is busy past its queue deadline; `Unauthenticated` for a wrong name or password or a disabled user (one message for all, so names cannot be probed).
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

/// The longest account name a login accepts: names are at most 64 bytes when created.
pub const MAX_USERNAME_BYTES: usize = 64;

/// Refuses a username or password too long to be a real credential, before the limiter
/// remembers anything or a hash is computed.
///
/// # Errors
/// `invalid_field` naming `username` or `password_field`.
pub fn check_input_sizes(
    username: &str,
    password_field: &str,
    password_text: &str,
) -> Result<(), Error> {
    if username.len() > MAX_USERNAME_BYTES {
        return Err(Error::invalid(
            "username",
            format!("must be at most {MAX_USERNAME_BYTES} bytes"),
        ));
    }
    if password_text.len() > password::MAX_LEN {
        return Err(Error::invalid(
            password_field,
            format!("must be at most {} bytes", password::MAX_LEN),
        ));
    }
    Ok(())
}

/// Charges one guess at `account` from `ip`, or says how long to wait.
fn charge(state: &AppState, account: &str, ip: &str) -> Result<Charge, Error> {
    state
        .login_limiter
        .try_charge(account, ip, state.clock.now_ms())
        .map_err(|wait_ms| Error::RateLimited {
            retry_after_s: u64::try_from(wait_ms).unwrap_or(1000).div_ceil(1000).max(1),
        })
}

/// Verifies `candidate` against `stored` (the dummy hash when there is no such user, so an
/// unknown name costs the same hash as a wrong password) as one charged guess at `account`
/// from `ip`. A right password forgives the account's failures; an attempt that could not be
/// evaluated (hashing overloaded, database down) is refunded; a wrong one stays charged.
///
/// # Errors
/// `RateLimited` before hashing when a limit is reached; `Overloaded` when no hashing slot
/// frees in time; database errors from `stored`.
async fn guarded_verify<T, F>(
    state: &AppState,
    account: &str,
    ip: &str,
    candidate: &str,
    stored: F,
) -> Result<(Option<T>, bool), Error>
where
    F: Future<Output = Result<Option<(T, String)>, Error>>,
{
    let charge = charge(state, account, ip)?;
    let outcome = async {
        let (found, hash) = match stored.await? {
            Some((found, hash)) => (Some(found), hash),
            None => (None, password::dummy_hash().to_owned()),
        };
        let ok = state
            .password_gate
            .verify(hash, candidate.to_owned())
            .await?;
        Ok((found, ok))
    }
    .await;
    let now = state.clock.now_ms();
    match &outcome {
        Err(_) => state.login_limiter.refund(charge, now),
        Ok((Some(_), true)) => state.login_limiter.succeeded(charge, now),
        Ok(_) => {}
    }
    outcome
}

/// Checks a username and password (rate-limited per name and per client).
///
/// # Errors
/// As `issue_token`, plus `invalid_field` for oversized input and `Overloaded`.
pub async fn check_credentials(
    state: &AppState,
    username: &str,
    password_text: &str,
    ip: &str,
) -> Result<user::User, Error> {
    check_input_sizes(username, "password", password_text)?;
    let name = username.to_owned();
    let lookup = state.db.run(move |conn| {
        Ok(user::find_by_username(conn, &name)?.map(|u| {
            let hash = u.password_hash.clone();
            (u, hash)
        }))
    });
    let (found, ok) = guarded_verify(state, username, ip, password_text, lookup).await?;
    match found {
        // A disabled user's right password still counts as a failure: nothing tells them apart.
        Some(user) if ok && !user.disabled => Ok(user),
        _ => Err(Error::Unauthenticated(
            "wrong username or password, or the user is disabled".into(),
        )),
    }
}

/// Checks the current password of a logged-in user, limited like a login under their name
/// and client, so the password-change form is no unlimited oracle.
///
/// # Errors
/// `RateLimited`, `Overloaded`, database errors.
pub async fn check_own_password(
    state: &AppState,
    actor: &Actor,
    user_id: i64,
    candidate: &str,
) -> Result<bool, Error> {
    let lookup = state.db.run(move |conn| {
        let u = user::get(conn, user_id)?;
        Ok(Some(((), u.password_hash)))
    });
    let (_, ok) = guarded_verify(state, &actor.name, &actor.ip, candidate, lookup).await?;
    Ok(ok)
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
        let owner_role: Role = owner.role;
        let token_role: Role = token.role;
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
        role: user.role,
        name: user.username,
        groups,
        ip,
        request_id,
    })
}
