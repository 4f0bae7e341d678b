//! `Console`: a cookie-keeping client of the admin's console over plain HTTP. It does not follow
//! redirects, so each answer (status, `Location`, cookies) can be checked.

use std::collections::HashMap;

use reqwest::StatusCode;
use reqwest::header::{CONTENT_TYPE, COOKIE, LOCATION, RETRY_AFTER, SET_COOKIE};

use super::TestApp;

pub struct Console<'a> {
    app: &'a TestApp,
    pub client: reqwest::Client,
    cookies: HashMap<String, String>,
}

/// One answer of the console.
pub struct Page {
    pub status: StatusCode,
    /// The `Location` header, or empty.
    pub location: String,
    pub retry_after: Option<String>,
    pub set_cookies: Vec<String>,
    pub body: String,
}

impl Page {
    /// The value of the first `name="csrf"` field on the page.
    pub fn csrf(&self) -> String {
        let marker = "name=\"csrf\" value=\"";
        let at = self.body.find(marker).expect("a form with a CSRF token") + marker.len();
        let rest = &self.body[at..];
        rest[..rest.find('"').unwrap()].to_owned()
    }
}

impl<'a> Console<'a> {
    pub fn new(app: &'a TestApp) -> Self {
        Console {
            app,
            client: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap(),
            cookies: HashMap::new(),
        }
    }

    async fn send(&mut self, req: reqwest::RequestBuilder) -> Page {
        let cookie = self
            .cookies
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("; ");
        let res = req.header(COOKIE, cookie).send().await.unwrap();
        let set_cookies: Vec<String> = res
            .headers()
            .get_all(SET_COOKIE)
            .iter()
            .map(|v| v.to_str().unwrap().to_owned())
            .collect();
        for c in &set_cookies {
            let (k, v) = c.split(';').next().unwrap().split_once('=').unwrap();
            if v.is_empty() || c.contains("Max-Age=0") {
                self.cookies.remove(k);
            } else {
                self.cookies.insert(k.to_owned(), v.to_owned());
            }
        }
        let header = |name| {
            res.headers()
                .get(name)
                .map(|v: &reqwest::header::HeaderValue| v.to_str().unwrap().to_owned())
        };
        Page {
            status: res.status(),
            location: header(LOCATION).unwrap_or_default(),
            retry_after: header(RETRY_AFTER),
            set_cookies,
            body: res.text().await.unwrap(),
        }
    }

    pub async fn get(&mut self, path: &str) -> Page {
        let req = self.client.get(format!("{}{path}", self.app.base));
        self.send(req).await
    }

    /// A POST with a raw body and an optional content type (none at all is a case to test).
    pub async fn post_raw(&mut self, path: &str, content_type: Option<&str>, body: String) -> Page {
        let mut req = self
            .client
            .post(format!("{}{path}", self.app.base))
            .body(body);
        if let Some(ct) = content_type {
            req = req.header(CONTENT_TYPE, ct);
        }
        self.send(req).await
    }

    /// A form POST.
    pub async fn post(&mut self, path: &str, form: &[(&str, &str)]) -> Page {
        let body = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(form)
            .finish();
        self.post_raw(path, Some("application/x-www-form-urlencoded"), body)
            .await
    }

    /// Logs in through the login form, checks the redirect and the session cookie's flags, and
    /// returns the jobs page (which carries a CSRF token).
    pub async fn login(&mut self, user: &str, password: &str) -> Page {
        let csrf = self.get("/console/login").await.csrf();
        let done = self
            .post(
                "/console/login",
                &[
                    ("csrf", &csrf),
                    ("username", user),
                    ("password", password),
                    ("next", "/console/jobs"),
                ],
            )
            .await;
        assert_eq!(done.status, StatusCode::SEE_OTHER, "{}", done.body);
        assert_eq!(done.location, "/console/jobs");
        let session = done
            .set_cookies
            .iter()
            .find(|c| c.starts_with("jf_session="))
            .unwrap();
        assert!(
            session.contains("HttpOnly") && session.contains("SameSite=Lax"),
            "{session}"
        );
        self.get("/console/jobs").await
    }
}

/// An error page with its request id (different on every request) blanked out.
pub fn without_request_id(page: &str) -> String {
    let marker = "Request id: <code>";
    match page.find(marker) {
        Some(at) => {
            let start = at + marker.len();
            let end = start + page[start..].find('<').unwrap_or(0);
            format!("{}{}", &page[..start], &page[end..])
        }
        None => page.to_owned(),
    }
}
