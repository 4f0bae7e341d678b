//! The browser console: server-rendered pages under `/console`, one handler file per area.
//! Handlers are thin: they read a form or a query, call the same `service` functions as the
//! open API, and render a template from `views`. Sessions live in an HttpOnly cookie; every
//! POST carries the session's CSRF token; errors render as HTML pages (or as the same form
//! again, with the field messages and what the user typed).

pub mod dag;
pub mod forms;
pub mod i18n;
pub mod views;

mod account;
mod alerts;
mod audit;
mod dashboard;
mod groups;
mod jobs;
mod login;
mod reports;
mod runs;
mod users;
mod workflows;

use actix_web::cookie::{Cookie, SameSite};
use actix_web::dev::{Service, ServiceResponse};
use actix_web::http::StatusCode;
use actix_web::http::header::{self, HeaderValue};
use actix_web::{HttpMessage, HttpRequest, HttpResponse, ResponseError, web};
use askama::Template;
use futures_util::FutureExt;

use crate::error::{Code, Error};
use crate::http::request::request_id;
use views::{Chrome, ErrorPage};

/// The session cookie; its value is the session token, stored only hashed.
pub const SESSION_COOKIE: &str = "jf_session";
/// A message for the next page after a redirect ("Job saved").
pub const FLASH_COOKIE: &str = "jf_flash";
/// The language chosen on the account page; absent means "follow the browser".
pub const LANG_COOKIE: &str = "jf_lang";

/// What console handlers return; the error renders as an HTML page, never as API JSON.
pub type PageResult<T = HttpResponse> = Result<T, PageError>;

/// The console's rendering of [`Error`]; the scope middleware turns it into a full page.
#[derive(Debug)]
pub struct PageError(pub Error);

impl<E: Into<Error>> From<E> for PageError {
    fn from(err: E) -> Self {
        PageError(err.into())
    }
}

impl std::fmt::Display for PageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Error::Internal(cause) => write!(f, "internal: {cause:#}"),
            Error::Unavailable(cause) => write!(f, "unavailable: {cause}"),
            Error::Contended(cause) => write!(f, "contended: {cause}"),
            other => write!(f, "{other}"),
        }
    }
}

impl ResponseError for PageError {
    fn status_code(&self) -> StatusCode {
        self.0.code().status()
    }

    /// A bare fallback; `page_for_error` replaces it with the full page where the request is known.
    fn error_response(&self) -> HttpResponse {
        HttpResponse::build(self.status_code())
            .content_type("text/plain; charset=utf-8")
            .body(self.0.public_message())
    }
}

/// A redirect after a successful POST (303, so the browser follows with GET).
pub fn see_other(location: &str) -> HttpResponse {
    HttpResponse::SeeOther()
        .insert_header((header::LOCATION, location.to_owned()))
        .finish()
}

/// A redirect that shows `message` on the next page.
pub fn see_other_with(location: &str, message: &str) -> HttpResponse {
    let mut res = see_other(location);
    let cookie = Cookie::build(
        FLASH_COOKIE,
        url::form_urlencoded::byte_serialize(message.as_bytes()).collect::<String>(),
    )
    .path("/console")
    .http_only(true)
    .same_site(SameSite::Lax)
    .finish();
    // A cookie built from our own encoded text always forms a valid header.
    let _ = res.add_cookie(&cookie);
    res
}

/// Renders a template into a response with `status`.
///
/// # Errors
/// `Internal` when the template fails to render (a bug, not bad input).
pub fn render<T: Template>(status: StatusCode, page: &T) -> PageResult {
    let html = page
        .render()
        .map_err(|e| Error::Internal(anyhow::anyhow!("rendering a page: {e}")))?;
    Ok(HttpResponse::build(status)
        .content_type("text/html; charset=utf-8")
        .body(html))
}

/// Only our own console paths may be a post-login destination (no `//evil.example`).
pub fn safe_next(next: &str) -> &str {
    if next.starts_with("/console") && !next.starts_with("//") && !next.contains('\\') {
        next
    } else {
        "/console"
    }
}

fn login_redirect(req: &HttpRequest) -> HttpResponse {
    let next = if req.method() == actix_web::http::Method::GET {
        let path = match req.query_string() {
            "" => req.path().to_owned(),
            q => format!("{}?{q}", req.path()),
        };
        url::form_urlencoded::byte_serialize(path.as_bytes()).collect::<String>()
    } else {
        "%2Fconsole".into()
    };
    see_other(&format!("/console/login?next={next}"))
}

/// The page a person should see for an error: the login form when the session is gone, else an
/// error page in the user's language, inside the usual navigation when we know who it is.
fn page_for_error(req: &HttpRequest, code: Code, message: String) -> HttpResponse {
    if code == Code::Unauthenticated {
        return login_redirect(req);
    }
    let status = code.status();
    let chrome = req
        .extensions()
        .get::<Chrome>()
        .cloned()
        .unwrap_or_else(|| Chrome::anonymous(i18n::lang_of(req)));
    let page = ErrorPage {
        title: chrome.t(error_title(code)),
        status: status.as_u16(),
        message: message.clone(),
        request_id: request_id(req),
        c: chrome,
    };
    match page.render() {
        Ok(html) => HttpResponse::build(status)
            .content_type("text/html; charset=utf-8")
            .body(html),
        Err(_) => HttpResponse::build(status)
            .content_type("text/plain; charset=utf-8")
            .body(message),
    }
}

fn error_title(code: Code) -> &'static str {
    match code.status().as_u16() {
        403 => "error.forbidden",
        404 => "error.not_found",
        409 => "error.conflict",
        429 => "error.rate_limited",
        400 | 413 | 422 => "error.invalid",
        502 => "error.agent",
        503 => "error.unavailable",
        _ => "error.internal",
    }
}

/// The alert channels a job may notify, as checkbox options.
///
/// # Errors
/// Database errors.
pub async fn alert_channel_opts(
    state: &crate::state::AppState,
    actor: &crate::auth::rbac::Actor,
) -> Result<Vec<views::Opt>, Error> {
    Ok(crate::service::alerts::list_channels(state, actor)
        .await?
        .into_iter()
        .map(|c| {
            let label = format!("{} ({})", c.name, c.format.unwrap_or(c.kind));
            views::Opt::new(c.id.to_string(), label)
        })
        .collect())
}

const CSP: &str = "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; \
    connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'; object-src 'none'";

/// Registers the console under `/console` with its middleware.
pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/", web::get().to(|| async { see_other("/console") }))
        .service(
            web::scope("/console")
                .app_data(web::PathConfig::default().error_handler(|_, _| {
                    PageError(Error::NotFound("page (the id in the address is not a number)")).into()
                }))
                .wrap_fn(|req, srv| {
                    let had_flash = req.cookie(FLASH_COOKIE).is_some();
                    srv.call(req).map(move |result| {
                        let res = result?;
                        let failure = res.response().error().and_then(|e| e.as_error::<PageError>()).map(|e| {
                            if e.status_code().is_server_error() {
                                // The outer access log no longer sees the error once the page replaces it.
                                tracing::error!(request_id = %request_id(res.request()), path = %res.request().path(), error = %e, "Console request failed");
                            }
                            (e.0.code(), e.0.public_message())
                        });
                        let mut res = match failure {
                            Some((code, message)) => {
                                let (req, _) = res.into_parts();
                                let page = page_for_error(&req, code, message);
                                ServiceResponse::new(req, page)
                            }
                            None => res,
                        };
                        let headers = res.headers_mut();
                        headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
                        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
                        if had_flash && res.status() == StatusCode::OK {
                            let gone = Cookie::build(FLASH_COOKIE, "").path("/console").max_age(actix_web::cookie::time::Duration::ZERO).finish();
                            let _ = res.response_mut().add_cookie(&gone);
                        }
                        Ok(res)
                    })
                })
                .configure(login::configure)
                .configure(dashboard::configure)
                .configure(account::configure)
                .configure(jobs::configure)
                .configure(runs::configure)
                .configure(workflows::configure)
                .configure(groups::configure)
                .configure(users::configure)
                .configure(audit::configure)
                .configure(alerts::configure)
                .configure(reports::configure)
                .default_service(web::to(|| async { Err::<HttpResponse, _>(PageError(Error::NotFound("page"))) })),
        );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_console_paths_are_followed_after_login() {
        assert_eq!(safe_next("/console/jobs?q=a"), "/console/jobs?q=a");
        assert_eq!(safe_next("//evil.example/console"), "/console");
        assert_eq!(safe_next("https://evil.example"), "/console");
        assert_eq!(safe_next("/console\\..\\x"), "/console");
    }
}
