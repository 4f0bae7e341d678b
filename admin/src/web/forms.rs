//! Extractors for console handlers: `ConsoleUser` (a valid session, else the login page) and
//! `CsrfForm` (a urlencoded form whose `csrf` field matches the session's token, else 403).
//! Forms are read as name/value pairs, so a form with repeated fields (checkbox lists) and
//! half-typed values can be shown again exactly as it was sent.

use std::future::Future;
use std::pin::Pin;

use actix_web::dev::Payload;
use actix_web::{FromRequest, HttpMessage, HttpRequest, web};

use super::i18n::lang_of;
use super::views::{Chrome, FormState};
use super::{FLASH_COOKIE, PageError, PageResult, SESSION_COOKIE};
use crate::auth::csrf;
use crate::auth::rbac::Actor;
use crate::error::{Code, Error};
use crate::http::request::{client_ip, request_id};
use crate::service::{self, Paged};
use crate::state::AppState;

/// Name/value pairs of a query string or a urlencoded body, in order.
#[derive(Debug, Clone, Default)]
pub struct Fields(pub Vec<(String, String)>);

impl Fields {
    pub fn parse(bytes: &[u8]) -> Self {
        Fields(url::form_urlencoded::parse(bytes).into_owned().collect())
    }

    pub fn of_query(req: &HttpRequest) -> Self {
        Self::parse(req.query_string().as_bytes())
    }

    /// The first value of `name`, trimmed; `None` when absent or blank.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.trim())
            .filter(|v| !v.is_empty())
    }

    /// The first value of `name` exactly as sent (for text areas), or "".
    pub fn raw(&self, name: &str) -> &str {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map_or("", |(_, v)| v.as_str())
    }

    pub fn text(&self, name: &str) -> String {
        self.get(name).unwrap_or("").to_owned()
    }

    pub fn all(&self, name: &str) -> Vec<&str> {
        self.0
            .iter()
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    pub fn flag(&self, name: &str) -> bool {
        matches!(self.get(name), Some("true" | "on" | "1"))
    }

    /// An optional number; the error names `field` (the API's name for it).
    pub fn number<T: std::str::FromStr>(
        &self,
        name: &str,
        field: &str,
    ) -> Result<Option<T>, Error> {
        match self.get(name) {
            None => Ok(None),
            Some(text) => text
                .parse()
                .map(Some)
                .map_err(|_| Error::invalid(field, format!("`{text}` is not a number"))),
        }
    }

    /// A named choice (a `<select>` of one of our `string_enum!` names); the error names `name`.
    pub fn choice<T: std::str::FromStr<Err = String>>(
        &self,
        name: &str,
    ) -> Result<Option<T>, Error> {
        self.get(name)
            .map(|v| v.parse().map_err(|e| Error::invalid(name, e)))
            .transpose()
    }

    /// A `datetime-local` filter value, read as UTC, in milliseconds.
    pub fn utc_time(&self, name: &str) -> Result<Option<i64>, Error> {
        let Some(text) = self.get(name) else {
            return Ok(None);
        };
        ["%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M"]
            .iter()
            .find_map(|fmt| chrono::NaiveDateTime::parse_from_str(text, fmt).ok())
            .map(|t| Some(t.and_utc().timestamp_millis()))
            .ok_or_else(|| Error::invalid(name, format!("`{text}` is not a date and time")))
    }

    /// `path?k=v&…` with the given filters that are set, for paging links that keep them.
    pub fn link_keeping(&self, path: &str, names: &[&str]) -> String {
        let kept = names.iter().filter_map(|k| self.get(k).map(|v| (*k, v)));
        let query = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(kept)
            .finish();
        format!("{path}?{query}")
    }

    /// A list of ids from checkboxes or a comma-separated text field.
    pub fn ids<T: std::str::FromStr>(&self, name: &str, field: &str) -> Result<Vec<T>, Error> {
        let mut ids = Vec::new();
        for value in self.all(name) {
            for piece in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                ids.push(piece.parse().map_err(|_| {
                    Error::invalid(
                        field,
                        format!("`{piece}` is not an id; use numbers separated by commas"),
                    )
                })?);
            }
        }
        Ok(ids)
    }
}

/// A filtered list as a page shows it: bad filters become a message above an empty list (the
/// filters stay in the form to be fixed); any other error is the page's.
///
/// # Errors
/// Errors other than `Invalid`.
pub fn listed<T>(result: Result<Paged<T>, Error>) -> Result<(Paged<T>, String), PageError> {
    match result {
        Ok(page) => Ok((page, String::new())),
        Err(e @ Error::Invalid { .. }) => Ok((
            Paged {
                items: Vec::new(),
                total: 0,
                limit: 50,
                offset: 0,
            },
            e.public_message(),
        )),
        Err(e) => Err(e.into()),
    }
}

/// Whether an error is the user's to fix in the form (shown beside the field, input kept)
/// rather than a page of its own.
fn belongs_in_form(err: &Error) -> bool {
    matches!(err, Error::Invalid { .. } | Error::Conflict { .. })
}

/// How every console form POST ends: once saved, `saved` answers (mostly a redirect with a
/// flash); an error the user can fix shows the form `again`; any other error is a page of its own.
///
/// # Errors
/// Errors that do not belong in the form, and those of `saved` and `again`.
pub async fn save_or_show_again<T>(
    result: Result<T, Error>,
    saved: impl AsyncFnOnce(T) -> PageResult,
    again: impl AsyncFnOnce(Error) -> PageResult,
) -> PageResult {
    match result {
        Ok(value) => saved(value).await,
        Err(e) if belongs_in_form(&e) => again(e).await,
        Err(e) => Err(e.into()),
    }
}

/// The heading and the action of a form under `base` that creates an object (`id` none;
/// headed by the text `new`) or edits object `id`.
pub fn heading_and_action(
    chrome: &Chrome,
    new: &'static str,
    base: &str,
    id: Option<impl std::fmt::Display>,
) -> (String, String) {
    match id {
        None => (chrome.t(new).to_owned(), base.to_owned()),
        Some(id) => (
            format!("{} #{id}", chrome.t("action.edit")),
            format!("{base}/{id}"),
        ),
    }
}

/// The form as it was sent, with `err` beside its field when the form `shows` it. The CSRF
/// token and the `withheld` fields (passwords, secrets) are never sent back to the browser.
pub fn refilled(fields: &Fields, withheld: &[&str], err: &Error, shows: &[&str]) -> FormState {
    let mut f = FormState::from_pairs(
        fields
            .0
            .iter()
            .filter(|(k, _)| k != "csrf" && !withheld.contains(&k.as_str()))
            .cloned(),
    );
    f.fail(err, shows);
    f
}

/// The logged-in user of a console request.
#[derive(Debug, Clone)]
pub struct ConsoleUser {
    pub actor: Actor,
    pub chrome: Chrome,
}

impl ConsoleUser {
    /// The page chrome with `section` highlighted in the navigation.
    pub fn page(&self, section: &'static str) -> Chrome {
        self.chrome.clone().in_section(section)
    }
}

fn resolve_user(
    req: &HttpRequest,
) -> Pin<Box<dyn Future<Output = Result<ConsoleUser, PageError>>>> {
    let state = req.app_data::<web::Data<AppState>>().cloned();
    let token = req.cookie(SESSION_COOKIE).map(|c| c.value().to_owned());
    let ip = client_ip(req);
    let rid = request_id(req);
    let lang = lang_of(req);
    let flash = req.cookie(FLASH_COOKIE).map(|c| {
        url::form_urlencoded::parse(format!("m={}", c.value()).as_bytes())
            .next()
            .map(|(_, v)| v.into_owned())
            .unwrap_or_default()
    });
    let req = req.clone();
    Box::pin(async move {
        let state = state.ok_or_else(|| Error::Internal(anyhow::anyhow!("app state missing")))?;
        let token = token
            .filter(|t| !t.is_empty() && t.len() <= 128)
            .ok_or_else(|| Error::Unauthenticated("log in to use the console".into()))?;
        let session = service::sessions::resolve(&state, &token, ip, rid).await?;
        let mut chrome = Chrome::for_actor(&session.actor, session.csrf_token, lang);
        chrome.flash = flash.filter(|f| !f.is_empty());
        // Error pages render inside the navigation too.
        req.extensions_mut().insert(chrome.clone());
        Ok(ConsoleUser {
            actor: session.actor,
            chrome,
        })
    })
}

impl FromRequest for ConsoleUser {
    type Error = PageError;
    type Future = Pin<Box<dyn Future<Output = Result<Self, PageError>>>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        resolve_user(req)
    }
}

/// A POSTed form from a logged-in user with a valid CSRF token.
#[derive(Debug)]
pub struct CsrfForm {
    pub user: ConsoleUser,
    pub fields: Fields,
}

impl FromRequest for CsrfForm {
    type Error = PageError;
    type Future = Pin<Box<dyn Future<Output = Result<Self, PageError>>>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let user = resolve_user(req);
        let body = web::Bytes::from_request(req, payload);
        let urlencoded = req.content_type() == "application/x-www-form-urlencoded";
        Box::pin(async move {
            let body = body.await.map_err(|e| Error::Invalid {
                code: Code::PayloadTooLarge,
                field: None,
                message: format!("the form could not be read: {e}"),
            })?;
            let user = user.await?;
            // No token, no write: a POST that is not a form carries no token, so it is refused
            // the same way (403), before its content is looked at.
            let fields = if urlencoded {
                Fields::parse(&body)
            } else {
                Fields::default()
            };
            match fields.get("csrf") {
                Some(given) if csrf::matches(&user.chrome.csrf, given) => Ok(CsrfForm { user, fields }),
                _ => Err(Error::Forbidden(
                    "the form's security token is missing or out of date; reload the page and try again".into(),
                )
                .into()),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_read_lists_numbers_and_flags() {
        let f = Fields::parse(
            b"name=+a%3Cb+&children=1%2C+2&alert.channels=3&alert.channels=4&n=x&on=true",
        );
        assert_eq!(f.get("name"), Some("a<b"));
        assert_eq!(f.raw("name"), " a<b ");
        assert_eq!(f.ids::<i64>("children", "children").unwrap(), vec![1, 2]);
        assert_eq!(
            f.ids::<i64>("alert.channels", "alert.channels").unwrap(),
            vec![3, 4]
        );
        assert_eq!(f.number::<i64>("n", "n").unwrap_err().field(), Some("n"));
        assert_eq!(f.number::<i64>("absent", "absent").unwrap(), None);
        assert!(f.flag("on") && !f.flag("name"));
        let choices = Fields::parse(b"routing=round_robin&misfire=sometimes");
        let routing: Option<crate::domain::routing::Routing> = choices.choice("routing").unwrap();
        assert_eq!(routing.map(|r| r.as_str()), Some("round_robin"));
        let bad = choices
            .choice::<crate::domain::policy::Misfire>("misfire")
            .unwrap_err();
        assert_eq!(bad.field(), Some("misfire"));
        assert!(
            bad.to_string().contains("do_nothing"),
            "the accepted names are listed: {bad}"
        );
    }
}
