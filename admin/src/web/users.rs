//! Users (admins only): create, role, group grants, disable, reset password. API tokens: every
//! user creates and revokes their own (the secret is shown once); admins see all.

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, web};
use askama::Template;
use askama_web::WebTemplate;

use super::forms::{
    ConsoleUser, CsrfForm, Fields, heading_and_action, refilled, save_or_show_again,
};
use super::views::{Chrome, FormState, Opt, Pager, when};
use super::{PageResult, render, see_other_with};
use crate::domain::ids::GroupId;
use crate::domain::role::Role;
use crate::error::Error;
use crate::service;
use crate::service::tokens::NewTokenRequest;
use crate::service::users::{NewUserRequest, PasswordReset, UserUpdate, UserView};
use crate::state::AppState;

const USER_FIELDS: &[&str] = &["username", "password", "role", "groups", "reset.password"];
const TOKEN_FIELDS: &[&str] = &["name", "role", "expires_in_s"];

#[derive(Debug, Clone)]
pub struct UserRow {
    pub id: i64,
    pub username: String,
    pub role: String,
    pub groups: String,
    pub disabled: bool,
}

#[derive(Template, WebTemplate)]
#[template(path = "users.html")]
pub struct UsersPage {
    pub c: Chrome,
    pub users: Vec<UserRow>,
    pub pager: Pager,
}

#[derive(Template)]
#[template(path = "user_form.html")]
pub struct UserFormPage {
    pub c: Chrome,
    pub heading: String,
    pub action: String,
    pub editing: bool,
    pub roles: Vec<Opt>,
    pub groups: Vec<Opt>,
    pub f: FormState,
}

#[derive(Debug, Clone)]
pub struct TokenRow {
    pub id: i64,
    pub name: String,
    pub prefix: String,
    pub role: String,
    pub owner: String,
    pub expires: String,
    pub last_used: String,
    pub revoked: bool,
}

#[derive(Template)]
#[template(path = "tokens.html")]
pub struct TokensPage {
    pub c: Chrome,
    pub created: String,
    pub roles: Vec<Opt>,
    pub tokens: Vec<TokenRow>,
    pub f: FormState,
}

fn role_opts(c: &Chrome, up_to: Role) -> Vec<Opt> {
    [Role::Viewer, Role::Operator, Role::Admin]
        .into_iter()
        .filter(|r| {
            up_to == Role::Admin
                || *r != Role::Admin && (up_to == Role::Operator || *r == Role::Viewer)
        })
        .map(|r| {
            let key = match r {
                Role::Admin => "role.admin",
                Role::Operator => "role.operator",
                Role::Viewer => "role.viewer",
            };
            Opt::new(r.as_str(), c.t(key))
        })
        .collect()
}

async fn group_opts(state: &AppState, user: &ConsoleUser) -> Result<Vec<Opt>, Error> {
    Ok(service::groups::all(state, &user.actor)
        .await?
        .into_iter()
        .map(|g| Opt::new(g.id.to_string(), format!("{} ({})", g.title, g.app_name)))
        .collect())
}

async fn list(
    req: HttpRequest,
    state: web::Data<AppState>,
    user: ConsoleUser,
) -> PageResult<UsersPage> {
    let proof = user.actor.require_admin()?;
    let q = Fields::of_query(&req);
    let page = service::Page::new(Some(50), q.number("offset", "offset")?)?;
    let users = service::users::list(&state, &proof, page).await?;
    let groups = group_opts(&state, &user).await?;
    let name_of = |id: &GroupId| {
        groups
            .iter()
            .find(|g| g.value == id.to_string())
            .map_or_else(|| format!("#{id}"), |g| g.label.clone())
    };
    Ok(UsersPage {
        pager: Pager::of("/console/users", &users),
        users: users
            .items
            .into_iter()
            .map(|u| UserRow {
                id: u.id,
                role: u.role.to_string(),
                groups: u.groups.iter().map(name_of).collect::<Vec<_>>().join(", "),
                disabled: u.disabled,
                username: u.username,
            })
            .collect(),
        c: user.page("users"),
    })
}

async fn form_page(
    state: &AppState,
    user: &ConsoleUser,
    heading: String,
    action: String,
    editing: bool,
    f: FormState,
) -> Result<UserFormPage, Error> {
    Ok(UserFormPage {
        roles: role_opts(&user.chrome, Role::Admin),
        groups: group_opts(state, user).await?,
        c: user.page("users"),
        heading,
        action,
        editing,
        f,
    })
}

async fn new(state: web::Data<AppState>, user: ConsoleUser) -> PageResult {
    user.actor.require_admin()?;
    let f = FormState::from_pairs([("role", "operator")]);
    let page = form_page(
        &state,
        &user,
        user.chrome.t("users.new").into(),
        "/console/users".into(),
        false,
        f,
    )
    .await?;
    render(StatusCode::OK, &page)
}

fn role_of(f: &Fields) -> Result<Role, Error> {
    f.choice("role")?
        .ok_or_else(|| Error::invalid("role", "choose a role"))
}

/// The form again, as sent but for the password, with `err` beside its field; `id` is the
/// user being edited (none: a new one).
async fn again(
    state: &AppState,
    user: &ConsoleUser,
    fields: &Fields,
    err: &Error,
    id: Option<i64>,
) -> PageResult {
    let (heading, action) = heading_and_action(&user.chrome, "users.new", "/console/users", id);
    let f = refilled(fields, &["password"], err, USER_FIELDS);
    let page = form_page(state, user, heading, action, id.is_some(), f).await?;
    render(err.code().status(), &page)
}

fn saved(user: &ConsoleUser, id: i64, flash: &'static str) -> actix_web::HttpResponse {
    see_other_with(&format!("/console/users/{id}/edit"), user.chrome.t(flash))
}

async fn create(state: web::Data<AppState>, form: CsrfForm) -> PageResult {
    let CsrfForm { user, fields } = form;
    let proof = user.actor.require_admin()?;
    let result = match (role_of(&fields), fields.ids("groups", "groups")) {
        (Ok(role), Ok(groups)) => {
            let request = NewUserRequest {
                username: fields.text("username"),
                password: fields.raw("password").to_owned(),
                role,
                groups: Some(groups),
            };
            service::users::create(&state, &user.actor, &proof, request).await
        }
        (Err(e), _) | (_, Err(e)) => Err(e),
    };
    save_or_show_again(
        result,
        async |created| Ok(saved(&user, created.id, "flash.saved")),
        async |e| again(&state, &user, &fields, &e, None).await,
    )
    .await
}

/// The form's values for an existing user.
fn form_of(u: &UserView) -> FormState {
    let mut pairs = vec![
        ("username", u.username.clone()),
        ("role", u.role.to_string()),
        ("disabled", u.disabled.to_string()),
    ];
    pairs.extend(u.groups.iter().map(|g| ("groups", g.to_string())));
    FormState::from_pairs(pairs)
}

async fn edit(state: web::Data<AppState>, user: ConsoleUser, id: web::Path<i64>) -> PageResult {
    user.actor.require_admin()?;
    let u = service::users::get(&state, &user.actor, *id).await?;
    let heading = format!("{} {}", user.chrome.t("action.edit"), u.username);
    let page = form_page(
        &state,
        &user,
        heading,
        format!("/console/users/{}", u.id),
        true,
        form_of(&u),
    )
    .await?;
    render(StatusCode::OK, &page)
}

async fn update(state: web::Data<AppState>, form: CsrfForm, id: web::Path<i64>) -> PageResult {
    let CsrfForm { user, fields } = form;
    let proof = user.actor.require_admin()?;
    let id = id.into_inner();
    let result = match (role_of(&fields), fields.ids("groups", "groups")) {
        (Ok(role), Ok(groups)) => {
            let change = UserUpdate {
                role: Some(role),
                groups: Some(groups),
                disabled: Some(fields.flag("disabled")),
            };
            service::users::update(&state, &user.actor, &proof, id, change).await
        }
        (Err(e), _) | (_, Err(e)) => Err(e),
    };
    save_or_show_again(
        result,
        async |_| Ok(saved(&user, id, "flash.saved")),
        async |e| again(&state, &user, &fields, &e, Some(id)).await,
    )
    .await
}

async fn reset_password(
    state: web::Data<AppState>,
    form: CsrfForm,
    id: web::Path<i64>,
) -> PageResult {
    let CsrfForm { user, fields } = form;
    let proof = user.actor.require_admin()?;
    let id = id.into_inner();
    let reset = PasswordReset {
        password: fields.raw("password").to_owned(),
    };
    let result = service::users::reset_password(&state, &user.actor, &proof, id, reset).await;
    save_or_show_again(
        result,
        async |()| Ok(saved(&user, id, "flash.password_reset")),
        async |err| {
            // The policy names `password`; on this page that is the reset box, and the rest of
            // the form shows the user as stored.
            let err = match err {
                Error::Invalid { code, message, .. } => Error::Invalid {
                    code,
                    field: Some("reset.password".into()),
                    message,
                },
                other => other,
            };
            let u = service::users::get(&state, &user.actor, id).await?;
            let mut f = form_of(&u);
            f.fail(&err, USER_FIELDS);
            let heading = format!("{} {}", user.chrome.t("action.edit"), u.username);
            let page = form_page(
                &state,
                &user,
                heading,
                format!("/console/users/{id}"),
                true,
                f,
            )
            .await?;
            render(err.code().status(), &page)
        },
    )
    .await
}

async fn tokens_page(
    state: &AppState,
    user: &ConsoleUser,
    created: String,
    f: FormState,
) -> Result<TokensPage, Error> {
    let tokens = service::tokens::list(state, &user.actor).await?;
    let owners: std::collections::HashMap<i64, String> = if user.actor.is_admin() {
        let proof = user.actor.require_admin()?;
        service::users::list(state, &proof, service::Page::LARGEST)
            .await?
            .items
            .into_iter()
            .map(|u| (u.id, u.username))
            .collect()
    } else {
        user.actor
            .user_id
            .map(|id| (id, user.actor.name.clone()))
            .into_iter()
            .collect()
    };
    Ok(TokensPage {
        roles: role_opts(&user.chrome, user.actor.role),
        tokens: tokens
            .into_iter()
            .map(|t| TokenRow {
                id: t.id,
                owner: owners
                    .get(&t.user_id)
                    .cloned()
                    .unwrap_or_else(|| format!("#{}", t.user_id)),
                role: t.role.to_string(),
                expires: t.expires_ms.map_or_else(
                    || user.chrome.t("tokens.never").to_owned(),
                    |ms| when(Some(ms)),
                ),
                last_used: when(t.last_used_ms),
                revoked: t.revoked_ms.is_some(),
                name: t.name,
                prefix: t.prefix,
            })
            .collect(),
        c: user.page("tokens"),
        created,
        f,
    })
}

async fn tokens(state: web::Data<AppState>, user: ConsoleUser) -> PageResult {
    let f = FormState::from_pairs([("role", user.actor.role.as_str())]);
    let page = tokens_page(&state, &user, String::new(), f).await?;
    render(StatusCode::OK, &page)
}

async fn create_token(state: web::Data<AppState>, form: CsrfForm) -> PageResult {
    let CsrfForm { user, fields } = form;
    let request = (|| -> Result<NewTokenRequest, Error> {
        let days: Option<i64> = fields.number("expires_in_days", "expires_in_s")?;
        Ok(NewTokenRequest {
            name: fields.text("name"),
            role: Some(role_of(&fields)?),
            expires_in_s: days.map(|d| d.saturating_mul(86_400)),
        })
    })();
    let result = match request {
        Ok(request) => service::tokens::create(&state, &user.actor, request).await,
        Err(e) => Err(e),
    };
    save_or_show_again(
        result,
        // The secret goes straight into this response and nowhere else: no redirect, no cookie.
        async |created| {
            let f = FormState::from_pairs([("role", user.actor.role.as_str())]);
            let page = tokens_page(&state, &user, created.token, f).await?;
            render(StatusCode::OK, &page)
        },
        async |e| {
            let f = refilled(&fields, &[], &e, TOKEN_FIELDS);
            let page = tokens_page(&state, &user, String::new(), f).await?;
            render(e.code().status(), &page)
        },
    )
    .await
}

async fn revoke_token(
    state: web::Data<AppState>,
    form: CsrfForm,
    id: web::Path<i64>,
) -> PageResult {
    service::tokens::revoke(&state, &form.user.actor, *id).await?;
    Ok(see_other_with(
        "/console/tokens",
        form.user.chrome.t("flash.revoked"),
    ))
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/users", web::get().to(list))
        .route("/users", web::post().to(create))
        .route("/users/new", web::get().to(new))
        .route("/users/{id}/edit", web::get().to(edit))
        .route("/users/{id}", web::post().to(update))
        .route("/users/{id}/password", web::post().to(reset_password))
        .route("/tokens", web::get().to(tokens))
        .route("/tokens", web::post().to(create_token))
        .route("/tokens/{id}/revoke", web::post().to(revoke_token));
}
