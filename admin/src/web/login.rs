//! Log in and out. The login form has no session yet, so its CSRF token is a double-submit
//! cookie: a random value set with the form and required back in the POST.

use actix_web::cookie::{Cookie, SameSite};
use actix_web::http::StatusCode;
use actix_web::http::header::{HeaderValue, RETRY_AFTER};
use actix_web::{HttpRequest, web};

use super::forms::{CsrfForm, Fields};
use super::i18n::{Lang, lang_of, tr};
use super::views::LoginPage;
use super::{PageResult, SESSION_COOKIE, render, safe_next, see_other};
use crate::auth::extract::{LOGIN_BODY_LIMIT, bounded_body};
use crate::auth::{csrf, random_token};
use crate::error::Error;
use crate::http::request::client_ip;
use crate::service;
use crate::state::AppState;

const LOGIN_CSRF_COOKIE: &str = "jf_login";

fn secure(req: &HttpRequest) -> bool {
    req.connection_info().scheme() == "https"
}

fn login_page(lang: Lang, csrf: String, next: &str, username: &str, error: String) -> LoginPage {
    LoginPage {
        lang_tag: lang.tag(),
        css: crate::assets::url("app.css"),
        t_title: tr(lang, "login.title"),
        t_username: tr(lang, "field.username"),
        t_password: tr(lang, "field.password"),
        t_submit: tr(lang, "login.submit"),
        csrf,
        next: safe_next(next).to_owned(),
        username: username.to_owned(),
        error,
    }
}

/// Renders the form with a fresh double-submit token.
fn form_response(
    req: &HttpRequest,
    status: StatusCode,
    next: &str,
    username: &str,
    error: String,
) -> PageResult {
    let token = random_token(32);
    let mut res = render(
        status,
        &login_page(lang_of(req), token.clone(), next, username, error),
    )?;
    let cookie = Cookie::build(LOGIN_CSRF_COOKIE, token)
        .path("/console/login")
        .http_only(true)
        .secure(secure(req))
        .same_site(SameSite::Strict)
        .finish();
    res.add_cookie(&cookie)
        .map_err(|e| Error::Internal(anyhow::anyhow!("login cookie: {e}")))?;
    Ok(res)
}

async fn show(req: HttpRequest, state: web::Data<AppState>) -> PageResult {
    let query = Fields::of_query(&req);
    let next = query.text("next");
    // Already logged in: no need to see the form again.
    if let Some(token) = req.cookie(SESSION_COOKIE)
        && service::sessions::resolve(&state, token.value(), client_ip(&req), String::new())
            .await
            .is_ok()
    {
        return Ok(see_other(safe_next(&next)));
    }
    form_response(&req, StatusCode::OK, &next, "", String::new())
}

/// The login page again with `status`, a message, and `Retry-After` when the error has one.
fn refused(
    req: &HttpRequest,
    status: StatusCode,
    next: &str,
    username: &str,
    message: &str,
    retry_after_s: Option<u64>,
) -> PageResult {
    let mut res = form_response(req, status, next, username, message.to_owned())?;
    if let Some(seconds) = retry_after_s
        && let Ok(value) = HeaderValue::from_str(&seconds.to_string())
    {
        res.headers_mut().insert(RETRY_AFTER, value);
    }
    Ok(res)
}

async fn submit(req: HttpRequest, state: web::Data<AppState>, payload: web::Payload) -> PageResult {
    let lang = lang_of(&req);
    // Sizes first: nothing of an oversized login is kept, echoed or hashed.
    let body =
        match bounded_body(&req, payload, LOGIN_BODY_LIMIT, state.config.max_body_bytes).await {
            Ok(body) => body,
            Err(e) => {
                let status = e.code().status();
                return refused(&req, status, "", "", tr(lang, "login.too_large"), None);
            }
        };
    let fields = Fields::parse(&body);
    let next = fields.text("next");
    let username = fields.text("username");
    let cookie_token = req
        .cookie(LOGIN_CSRF_COOKIE)
        .map(|c| c.value().to_owned())
        .unwrap_or_default();
    let shown_name = if username.len() <= service::auth::MAX_USERNAME_BYTES {
        username.as_str()
    } else {
        ""
    };
    if !csrf::matches(&cookie_token, fields.get("csrf").unwrap_or("")) {
        return refused(
            &req,
            StatusCode::FORBIDDEN,
            &next,
            shown_name,
            tr(lang, "login.stale"),
            None,
        );
    }
    let password = fields.raw("password");
    if username.is_empty() || password.is_empty() {
        return refused(
            &req,
            StatusCode::UNPROCESSABLE_ENTITY,
            &next,
            shown_name,
            tr(lang, "login.missing"),
            None,
        );
    }
    match service::sessions::login(&state, &username, password, &client_ip(&req)).await {
        Ok(token) => {
            let mut res = see_other(safe_next(&next));
            let session = Cookie::build(SESSION_COOKIE, token)
                .path("/")
                .http_only(true)
                .secure(secure(&req))
                .same_site(SameSite::Lax)
                .finish();
            res.add_cookie(&session)
                .map_err(|e| Error::Internal(anyhow::anyhow!("session cookie: {e}")))?;
            Ok(res)
        }
        Err(e) => {
            let key = match &e {
                Error::RateLimited { .. } => "login.rate_limited",
                Error::Overloaded { .. } => "login.busy",
                Error::Unauthenticated(_) => "login.failed",
                Error::Invalid { .. } => "login.too_long",
                _ => return Err(e.into()),
            };
            refused(
                &req,
                e.code().status(),
                &next,
                shown_name,
                tr(lang, key),
                e.retry_after_s(),
            )
        }
    }
}

async fn logout(req: HttpRequest, state: web::Data<AppState>, form: CsrfForm) -> PageResult {
    let _ = form.user;
    if let Some(token) = req.cookie(SESSION_COOKIE) {
        service::sessions::logout(&state, token.value()).await?;
    }
    let mut res = see_other("/console/login");
    let mut gone = Cookie::build(SESSION_COOKIE, "")
        .path("/")
        .http_only(true)
        .finish();
    gone.make_removal();
    res.add_cookie(&gone)
        .map_err(|e| Error::Internal(anyhow::anyhow!("session cookie: {e}")))?;
    Ok(res)
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/login", web::get().to(show))
        .route("/login", web::post().to(submit))
        .route("/logout", web::post().to(logout));
}
