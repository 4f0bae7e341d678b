//! The logged-in user's own page: language and password.

use actix_web::cookie::{Cookie, SameSite};
use actix_web::http::StatusCode;
use actix_web::http::header::{HeaderValue, RETRY_AFTER};
use actix_web::{HttpRequest, web};
use askama::Template;

use super::forms::{ConsoleUser, CsrfForm, save_or_show_again};
use super::i18n::Lang;
use super::views::{Chrome, FormState};
use super::{LANG_COOKIE, PageResult, render, see_other_with};
use crate::error::Error;
use crate::service;
use crate::service::users::OwnPasswordChange;
use crate::state::AppState;

const FIELDS: &[&str] = &["current_password", "new_password"];

#[derive(Template)]
#[template(path = "account.html")]
pub struct AccountPage {
    pub c: Chrome,
    pub groups: String,
    pub lang_choice: String,
    pub f: FormState,
}

async fn page(
    req: &HttpRequest,
    state: &AppState,
    user: &ConsoleUser,
    f: FormState,
) -> Result<AccountPage, Error> {
    let groups = if user.actor.is_admin() {
        user.chrome.t("account.all_groups").to_owned()
    } else {
        service::groups::all(state, &user.actor)
            .await?
            .into_iter()
            .map(|g| g.app_name)
            .collect::<Vec<_>>()
            .join(", ")
    };
    Ok(AccountPage {
        c: user.page("account"),
        groups,
        lang_choice: req
            .cookie(LANG_COOKIE)
            .and_then(|c| Lang::from_tag(c.value()))
            .map_or("auto", Lang::tag)
            .to_owned(),
        f,
    })
}

async fn show(req: HttpRequest, state: web::Data<AppState>, user: ConsoleUser) -> PageResult {
    let page = page(&req, &state, &user, FormState::default()).await?;
    render(StatusCode::OK, &page)
}

async fn set_language(req: HttpRequest, form: CsrfForm) -> PageResult {
    let choice = form.fields.text("lang");
    let mut res;
    if choice == "auto" {
        res = see_other_with("/console/account", "✓");
        let mut gone = Cookie::build(LANG_COOKIE, "").path("/").finish();
        gone.make_removal();
        res.add_cookie(&gone)
            .map_err(|e| Error::Internal(anyhow::anyhow!("cookie: {e}")))?;
    } else {
        let lang = Lang::from_tag(&choice)
            .ok_or_else(|| Error::invalid("lang", format!("unknown language `{choice}`")))?;
        res = see_other_with("/console/account", super::i18n::tr(lang, "flash.saved"));
        let cookie = Cookie::build(LANG_COOKIE, lang.tag())
            .path("/")
            .same_site(SameSite::Lax)
            .secure(req.connection_info().scheme() == "https")
            .max_age(actix_web::cookie::time::Duration::days(365))
            .finish();
        res.add_cookie(&cookie)
            .map_err(|e| Error::Internal(anyhow::anyhow!("cookie: {e}")))?;
    }
    Ok(res)
}

async fn change_password(
    req: HttpRequest,
    state: web::Data<AppState>,
    form: CsrfForm,
) -> PageResult {
    let CsrfForm { user, fields } = form;
    let change = OwnPasswordChange {
        current_password: fields.raw("current_password").to_owned(),
        new_password: fields.raw("new_password").to_owned(),
    };
    match service::users::change_own_password(&state, &user.actor, change).await {
        // Wrong current passwords are limited like logins: the page says so, with Retry-After.
        Err(e @ (Error::RateLimited { .. } | Error::Overloaded { .. })) => {
            let mut f = FormState::default();
            f.general = user
                .chrome
                .t(if matches!(e, Error::RateLimited { .. }) {
                    "login.rate_limited"
                } else {
                    "login.busy"
                })
                .to_owned();
            let page = page(&req, &state, &user, f).await?;
            let mut res = render(e.code().status(), &page)?;
            if let Some(seconds) = e.retry_after_s()
                && let Ok(value) = HeaderValue::from_str(&seconds.to_string())
            {
                res.headers_mut().insert(RETRY_AFTER, value);
            }
            Ok(res)
        }
        result => {
            save_or_show_again(
                result,
                // The session was opened before the change, so it ends with it: log in with the new one.
                async |()| {
                    Ok(see_other_with(
                        "/console/login",
                        user.chrome.t("flash.password_changed"),
                    ))
                },
                // Passwords are never sent back: the form comes back empty, the error beside its field.
                async |e| {
                    let mut f = FormState::default();
                    f.fail(&e, FIELDS);
                    let page = page(&req, &state, &user, f).await?;
                    render(e.code().status(), &page)
                },
            )
            .await
        }
    }
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/account", web::get().to(show))
        .route("/account/language", web::post().to(set_language))
        .route("/account/password", web::post().to(change_password));
}
