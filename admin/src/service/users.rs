//! Users: create, change role, grant groups, disable, reset password; the first admin.

use serde::{Deserialize, Serialize};

use crate::audit::{self, Entry};
use crate::auth::{
    password, random_token,
    rbac::{Actor, AdminProof},
};
use crate::db::{
    AnyConnection, Page, api_token, console_session, executor_group, user, user_group_grant,
};
use crate::domain::ids::GroupId;
use crate::domain::role::Role;
use crate::error::Error;
use crate::service::Paged;
use crate::state::AppState;

#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct UserView {
    pub id: i64,
    pub username: String,
    #[schema(value_type = String)]
    pub role: Role,
    pub disabled: bool,
    pub groups: Vec<GroupId>,
    pub created_ms: i64,
    pub updated_ms: i64,
}

#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewUserRequest {
    pub username: String,
    pub password: String,
    #[schema(value_type = String, example = "operator")]
    pub role: Role,
    /// Executor groups granted to an operator or viewer.
    pub groups: Option<Vec<GroupId>>,
}

#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UserUpdate {
    #[schema(value_type = Option<String>)]
    pub role: Option<Role>,
    pub groups: Option<Vec<GroupId>>,
    pub disabled: Option<bool>,
}

#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PasswordReset {
    pub password: String,
}

#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OwnPasswordChange {
    pub current_password: String,
    pub new_password: String,
}

fn load_view(conn: &mut AnyConnection, id: i64) -> Result<UserView, Error> {
    let row = user::get(conn, id)?;
    Ok(UserView {
        id: row.id,
        role: row.role,
        disabled: row.disabled,
        groups: user_group_grant::group_ids_for_user(conn, row.id)?,
        username: row.username,
        created_ms: row.created_ms,
        updated_ms: row.updated_ms,
    })
}

pub fn check_username(value: &str) -> Result<String, Error> {
    let value = value.trim();
    if value.is_empty() || value.len() > 64 {
        return Err(Error::invalid("username", "must be 1 to 64 characters"));
    }
    if !value
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "-_.@".contains(c))
    {
        return Err(Error::invalid(
            "username",
            "may contain only letters, digits, `-`, `_`, `.` and `@`",
        ));
    }
    Ok(value.to_owned())
}

fn check_groups(conn: &mut AnyConnection, groups: &[GroupId]) -> Result<(), Error> {
    if groups.len() > 1000 {
        return Err(Error::invalid("groups", "too many groups"));
    }
    for id in groups {
        if executor_group::find(conn, *id)?.is_none() {
            return Err(Error::invalid_as(
                crate::error::Code::UnknownGroup,
                "groups",
                format!("executor group {id} does not exist"),
            ));
        }
    }
    Ok(())
}

/// Inserts a user with its grants and audit row; the caller holds the transaction.
fn insert_audited(
    conn: &mut AnyConnection,
    actor: &Actor,
    now: i64,
    username: &str,
    hash: &str,
    role: Role,
    groups: &[GroupId],
) -> Result<UserView, Error> {
    let id = user::insert(
        conn,
        &user::NewUser {
            username,
            password_hash: hash,
            role,
            disabled: false,
            password_changed_ms: now,
            created_ms: now,
            updated_ms: now,
        },
    )?;
    user_group_grant::replace_for_user(conn, id, groups)?;
    let created = load_view(conn, id)?;
    audit::record(
        conn,
        actor,
        now,
        Entry::new("user.create", "user", id).after(&created)?,
    )?;
    Ok(created)
}

/// What ending a user's credentials ended, for the audit row: console sessions deleted, API
/// tokens revoked, and the instant before which every JWT of the user is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CredentialsEnded {
    pub sessions_ended: usize,
    pub api_tokens_revoked: usize,
    pub jwts_issued_before_ms: i64,
}

/// Ends every console session and JWT of user `id`, and its API tokens when `tokens`; the
/// caller holds the transaction.
fn end_credentials(
    conn: &mut AnyConnection,
    id: i64,
    now: i64,
    tokens: bool,
) -> Result<CredentialsEnded, Error> {
    user::set_credentials_epoch(conn, id, now)?;
    Ok(CredentialsEnded {
        sessions_ended: console_session::delete_for_user(conn, id)?,
        api_tokens_revoked: if tokens {
            api_token::revoke_all_for_user(conn, id, now)?
        } else {
            0
        },
        jwts_issued_before_ms: now,
    })
}

/// A user update's audit `after`: the user, plus what disabling ended.
#[derive(Serialize)]
struct UpdatedUser<'a> {
    #[serde(flatten)]
    user: &'a UserView,
    #[serde(skip_serializing_if = "Option::is_none")]
    credentials_ended: Option<CredentialsEnded>,
}

pub async fn create(
    state: &AppState,
    actor: &Actor,
    _: &AdminProof,
    request: NewUserRequest,
) -> Result<UserView, Error> {
    let username = check_username(&request.username)?;
    password::check_policy("password", &request.password)?;
    let hash = state.password_gate.hash(request.password).await?;
    let groups = request.groups.unwrap_or_default();
    let now = state.clock.now_ms();
    let actor = actor.clone();
    state
        .db
        .transaction(move |conn| {
            check_groups(conn, &groups)?;
            insert_audited(conn, &actor, now, &username, &hash, request.role, &groups)
        })
        .await
}

/// Changes role, grants and/or the disabled flag. The last active admin cannot be demoted or
/// disabled: that would lock everyone out of user management.
pub async fn update(
    state: &AppState,
    actor: &Actor,
    _: &AdminProof,
    id: i64,
    change: UserUpdate,
) -> Result<UserView, Error> {
    let now = state.clock.now_ms();
    let actor = actor.clone();
    state
        .db
        .transaction(move |conn| {
            let before = load_view(conn, id)?;
            if let Some(role) = change.role {
                user::set_role(conn, id, role.as_str(), now)?;
            }
            let mut ended = None;
            if let Some(disabled) = change.disabled {
                user::set_disabled(conn, id, disabled, now)?;
                if disabled && !before.disabled {
                    // Re-enabling must not revive what was out there when it was disabled.
                    ended = Some(end_credentials(conn, id, now, true)?);
                }
            }
            if let Some(groups) = &change.groups {
                check_groups(conn, groups)?;
                user_group_grant::replace_for_user(conn, id, groups)?;
            }
            if before.role == Role::Admin
                && !before.disabled
                && user::count_active_admins(conn)? == 0
            {
                return Err(Error::Conflict {
                    field: Some("role".into()),
                    message: "this is the last active admin; keep at least one".into(),
                });
            }
            let after = load_view(conn, id)?;
            audit::record(
                conn,
                &actor,
                now,
                Entry::new("user.update", "user", id)
                    .before(&before)?
                    .after(&UpdatedUser {
                        user: &after,
                        credentials_ended: ended,
                    })?,
            )?;
            Ok(after)
        })
        .await
}

/// Sets a new password and ends everything the old one opened: console sessions, JWTs and
/// API tokens (revoked). The audit row says how many sessions and tokens ended.
pub async fn reset_password(
    state: &AppState,
    actor: &Actor,
    _: &AdminProof,
    id: i64,
    reset: PasswordReset,
) -> Result<(), Error> {
    password::check_policy("password", &reset.password)?;
    let hash = state.password_gate.hash(reset.password).await?;
    let now = state.clock.now_ms();
    let actor = actor.clone();
    state
        .db
        .transaction(move |conn| {
            user::set_password_hash(conn, id, &hash, now)?;
            let ended = end_credentials(conn, id, now, true)?;
            // The audit row records what ended, never the password or its hash.
            audit::record(
                conn,
                &actor,
                now,
                Entry::new("user.reset_password", "user", id).after(&ended)?,
            )
        })
        .await
}

/// A user changes their own password, giving the current one (a limited guess, like a login).
///
/// # Errors
/// `invalid_field` for a wrong current password or a weak new one; `RateLimited`; `Overloaded`.
pub async fn change_own_password(
    state: &AppState,
    actor: &Actor,
    change: OwnPasswordChange,
) -> Result<(), Error> {
    let id = actor
        .user_id
        .ok_or_else(|| Error::Forbidden("only users have passwords".into()))?;
    if !matches!(actor.kind, crate::auth::rbac::ActorKind::User) {
        return Err(Error::Forbidden(
            "API tokens cannot change passwords".into(),
        ));
    }
    crate::service::auth::check_input_sizes(
        &actor.name,
        "current_password",
        &change.current_password,
    )?;
    password::check_policy("new_password", &change.new_password)?;
    if !crate::service::auth::check_own_password(state, actor, id, &change.current_password).await?
    {
        return Err(Error::invalid(
            "current_password",
            "is not your current password",
        ));
    }
    let hash = state.password_gate.hash(change.new_password).await?;
    let now = state.clock.now_ms();
    let actor = actor.clone();
    state
        .db
        .transaction(move |conn| {
            user::set_password_hash(conn, id, &hash, now)?;
            // Every session and JWT ends, this one's too; API tokens are separate credentials
            // made on purpose (automation), so they stay until revoked one by one.
            let ended = end_credentials(conn, id, now, false)?;
            audit::record(
                conn,
                &actor,
                now,
                Entry::new("user.change_password", "user", id).after(&ended)?,
            )
        })
        .await
}

pub async fn get(state: &AppState, actor: &Actor, id: i64) -> Result<UserView, Error> {
    if actor.user_id != Some(id) {
        actor.require_admin()?;
    }
    state.db.run(move |conn| load_view(conn, id)).await
}

pub async fn list(state: &AppState, _: &AdminProof, page: Page) -> Result<Paged<UserView>, Error> {
    state
        .db
        .run(move |conn| {
            let rows = user::list(conn, page)?;
            let items = rows
                .iter()
                .map(|u| load_view(conn, u.id))
                .collect::<Result<_, _>>()?;
            Ok(Paged {
                items,
                total: user::count(conn)?,
                limit: page.limit,
                offset: page.offset,
            })
        })
        .await
}

/// What first start did about the admin account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Bootstrap {
    /// Users exist already; nothing was done.
    Existing,
    /// Created `admin` with the password from the environment.
    CreatedWithGivenPassword,
    /// Created `admin` with this random password, to be printed once.
    CreatedWithRandomPassword(String),
}

/// Creates user `admin` when there are no users at all.
///
/// # Errors
/// `invalid_field` when the given password breaks the policy; database errors.
pub async fn bootstrap_admin(
    state: &AppState,
    given_password: Option<String>,
) -> Result<Bootstrap, Error> {
    if state.db.run(user::count).await? > 0 {
        return Ok(Bootstrap::Existing);
    }
    let (password_text, outcome) = match given_password.filter(|p| !p.is_empty()) {
        Some(p) => {
            password::check_policy("JOBFLEET_ADMIN_PASSWORD", &p)?;
            (p, Bootstrap::CreatedWithGivenPassword)
        }
        None => {
            let p = random_token(20);
            (p.clone(), Bootstrap::CreatedWithRandomPassword(p))
        }
    };
    let hash = state.password_gate.hash(password_text).await?;
    let now = state.clock.now_ms();
    let system = Actor::system("bootstrap");
    let created = state
        .db
        .transaction(move |conn| {
            // Re-checked inside the transaction: two admins starting at once must not both create it.
            if user::count(conn)? > 0 {
                return Ok(Bootstrap::Existing);
            }
            insert_audited(conn, &system, now, "admin", &hash, Role::Admin, &[])?;
            Ok(outcome.clone())
        })
        .await;
    match created {
        // Under MySQL's repeatable read both admins of a cluster starting together (a Deployment's
        // replicas) can count no users; the unique name makes the slower one's insert fail, and
        // that admin then starts with the user the other created.
        Err(Error::Conflict { .. }) => Ok(Bootstrap::Existing),
        other => other,
    }
}

/// CLI `user add`: create a user without an HTTP caller.
pub async fn add_from_cli(
    state: &AppState,
    username: &str,
    password_text: &str,
    role: Role,
) -> Result<UserView, Error> {
    let system = Actor::system("cli");
    let proof = system.require_admin()?;
    create(
        state,
        &system,
        &proof,
        NewUserRequest {
            username: username.into(),
            password: password_text.into(),
            role,
            groups: None,
        },
    )
    .await
}

/// CLI `user passwd`: set a user's password by name.
pub async fn passwd_from_cli(
    state: &AppState,
    username: &str,
    password_text: &str,
) -> Result<(), Error> {
    let name = username.to_owned();
    let found = state
        .db
        .run(move |conn| user::find_by_username(conn, &name))
        .await?
        .ok_or(Error::NotFound("user"))?;
    let system = Actor::system("cli");
    let proof = system.require_admin()?;
    reset_password(
        state,
        &system,
        &proof,
        found.id,
        PasswordReset {
            password: password_text.into(),
        },
    )
    .await
}

#[cfg(test)]
mod tests {
    #[test]
    fn usernames_are_restricted() {
        assert!(super::check_username("alice.o-k_1@corp").is_ok());
        assert!(super::check_username("<script>").is_err());
        assert!(super::check_username("a b").is_err());
        assert!(super::check_username(&"a".repeat(65)).is_err());
    }
}
