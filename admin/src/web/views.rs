//! Template structs (`…Page`) and the display-ready values they hold. Templates only loop and
//! branch; every string a page shows is computed here or in the handler.

use std::collections::HashMap;

use askama::Template;
use askama_web::WebTemplate;

use super::i18n::{Lang, tr};
use crate::auth::rbac::Actor;
use crate::domain::ids::{JobId, RunId};
use crate::domain::policy::RunStatus;
use crate::domain::role::Role;
use crate::error::Error;

/// What every page around its content needs: who is logged in, their language, the CSRF token
/// for forms, the current section and a one-time message.
#[derive(Debug, Clone)]
pub struct Chrome {
    pub lang: Lang,
    pub user: String,
    pub role: Option<Role>,
    pub csrf: String,
    pub section: &'static str,
    pub flash: Option<String>,
    pub is_admin: bool,
    /// May change jobs of at least one group (admin, or an operator with a grant).
    pub can_write: bool,
    pub css: String,
    pub js: String,
}

impl Chrome {
    pub fn for_actor(actor: &Actor, csrf: String, lang: Lang) -> Self {
        Chrome {
            lang,
            user: actor.name.clone(),
            role: Some(actor.role),
            csrf,
            section: "",
            flash: None,
            is_admin: actor.is_admin(),
            can_write: actor.is_admin()
                || (actor.role == Role::Operator && !actor.groups.is_empty()),
            css: crate::assets::url("app.css"),
            js: crate::assets::url("app.js"),
        }
    }

    /// For pages shown without a session (errors before login).
    pub fn anonymous(lang: Lang) -> Self {
        Chrome {
            lang,
            user: String::new(),
            role: None,
            csrf: String::new(),
            section: "",
            flash: None,
            is_admin: false,
            can_write: false,
            css: crate::assets::url("app.css"),
            js: crate::assets::url("app.js"),
        }
    }

    pub fn in_section(mut self, section: &'static str) -> Self {
        self.section = section;
        self
    }

    pub fn t(&self, key: &'static str) -> &'static str {
        tr(self.lang, key)
    }

    pub fn lang_tag(&self) -> &'static str {
        self.lang.tag()
    }

    pub fn active(&self, section: &str) -> &'static str {
        if self.section == section {
            "active"
        } else {
            ""
        }
    }

    pub fn role_label(&self) -> &'static str {
        match self.role {
            Some(Role::Admin) => self.t("role.admin"),
            Some(Role::Operator) => self.t("role.operator"),
            Some(Role::Viewer) => self.t("role.viewer"),
            None => "",
        }
    }
}

/// An option of a `<select>` or a checkbox list.
#[derive(Debug, Clone)]
pub struct Opt {
    pub value: String,
    pub label: String,
    pub selected: bool,
}

impl Opt {
    pub fn new(value: impl Into<String>, label: impl Into<String>) -> Self {
        Opt {
            value: value.into(),
            label: label.into(),
            selected: false,
        }
    }

    pub fn picked(mut self, selected: bool) -> Self {
        self.selected = selected;
        self
    }
}

/// A form as the user filled it, with the errors to show beside the fields.
#[derive(Debug, Clone, Default)]
pub struct FormState {
    values: HashMap<String, Vec<String>>,
    errors: HashMap<String, String>,
    /// An error that belongs to no field shown.
    pub general: String,
}

impl FormState {
    pub fn from_pairs<K: Into<String>, V: Into<String>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        let mut values: HashMap<String, Vec<String>> = HashMap::new();
        for (k, v) in pairs {
            values.entry(k.into()).or_default().push(v.into());
        }
        FormState {
            values,
            ..FormState::default()
        }
    }

    /// Puts `err` beside its field when the form shows that field, else above the form.
    pub fn fail(&mut self, err: &Error, shown: &[&str]) {
        let message = err.public_message();
        match err.field() {
            Some(field) if shown.contains(&field) => {
                self.errors.insert(field.to_owned(), message);
            }
            Some(field) => self.general = format!("{field}: {message}"),
            None => self.general = message,
        }
    }

    pub fn set(&mut self, name: &str, value: impl Into<String>) {
        self.values.insert(name.to_owned(), vec![value.into()]);
    }

    pub fn v(&self, name: &str) -> &str {
        self.values
            .get(name)
            .and_then(|v| v.first())
            .map_or("", String::as_str)
    }

    pub fn err(&self, name: &str) -> &str {
        self.errors.get(name).map_or("", String::as_str)
    }

    pub fn has_errors(&self) -> bool {
        !self.errors.is_empty() || !self.general.is_empty()
    }

    pub fn checked(&self, name: &str) -> bool {
        matches!(self.v(name), "true" | "on" | "1")
    }

    pub fn sel(&self, name: &str, value: &str) -> bool {
        self.v(name) == value
    }

    pub fn has(&self, name: &str, value: &str) -> bool {
        self.values
            .get(name)
            .is_some_and(|all| all.iter().any(|v| v == value))
    }
}

/// Paging links that keep the page's filters.
#[derive(Debug, Clone, Default)]
pub struct Pager {
    pub total: i64,
    pub first: i64,
    pub last: i64,
    pub prev: Option<String>,
    pub next: Option<String>,
}

impl Pager {
    /// The links of a listed page of results; `base` as for [`Pager::new`].
    pub fn of<T>(base: &str, page: &crate::service::Paged<T>) -> Self {
        Self::new(base, page.total, page.limit, page.offset, page.items.len())
    }

    /// `base` is the page's path with its filters, without `offset`.
    pub fn new(base: &str, total: i64, limit: i64, offset: i64, shown: usize) -> Self {
        let sep = if base.contains('?') { '&' } else { '?' };
        let link = |offset: i64| format!("{base}{sep}offset={offset}");
        Pager {
            total,
            first: if shown == 0 { 0 } else { offset + 1 },
            last: offset + i64::try_from(shown).unwrap_or(0),
            prev: (offset > 0).then(|| link((offset - limit).max(0))),
            next: (offset + limit < total).then(|| link(offset + limit)),
        }
    }
}

/// A filter's group choices, `title (app_name)`, with `chosen` (a group id as the query gave it)
/// picked.
pub fn group_options(groups: &[crate::service::groups::GroupView], chosen: &str) -> Vec<Opt> {
    groups
        .iter()
        .map(|g| {
            Opt::new(g.id.to_string(), format!("{} ({})", g.title, g.app_name))
                .picked(g.id.to_string() == chosen)
        })
        .collect()
}

/// `YYYY-MM-DD HH:MM:SS` in UTC, or a dash.
pub fn when(ms: Option<i64>) -> String {
    ms.and_then(chrono::DateTime::from_timestamp_millis)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string())
        .unwrap_or_else(|| "—".into())
}

/// A duration for people: `850 ms`, `12.4 s`, `3 min 5 s`, `2 h 1 min`.
pub fn duration(ms: i64) -> String {
    match ms {
        ms if ms < 1000 => format!("{ms} ms"),
        ms if ms < 60_000 => format!("{:.1} s", ms as f64 / 1000.0),
        ms if ms < 3_600_000 => format!("{} min {} s", ms / 60_000, (ms % 60_000) / 1000),
        ms => format!("{} h {} min", ms / 3_600_000, (ms % 3_600_000) / 60_000),
    }
}

#[derive(Template, WebTemplate)]
#[template(path = "error.html")]
pub struct ErrorPage {
    pub c: Chrome,
    pub title: &'static str,
    pub status: u16,
    pub message: String,
    pub request_id: String,
}

#[derive(Template)]
#[template(path = "login.html")]
pub struct LoginPage {
    pub lang_tag: &'static str,
    pub css: String,
    pub t_title: &'static str,
    pub t_username: &'static str,
    pub t_password: &'static str,
    pub t_submit: &'static str,
    pub csrf: String,
    pub next: String,
    pub username: String,
    pub error: String,
}

/// A run as a row of a table.
#[derive(Debug, Clone)]
pub struct RunRow {
    pub id: RunId,
    pub job_id: JobId,
    pub job_name: String,
    pub status: String,
    pub status_label: &'static str,
    pub attempt: i32,
    pub trigger_kind: String,
    pub scheduled: String,
    pub duration: String,
    pub agent: String,
    pub message: String,
}

/// The label of a run status in the page's language.
pub fn status_label(c: &Chrome, status: RunStatus) -> &'static str {
    c.t(match status {
        RunStatus::Pending => "status.pending",
        RunStatus::Running => "status.running",
        RunStatus::Succeeded => "status.succeeded",
        RunStatus::Failed => "status.failed",
        RunStatus::TimedOut => "status.timed_out",
        RunStatus::Killed => "status.killed",
        RunStatus::Lost => "status.lost",
        RunStatus::Skipped => "status.skipped",
    })
}

impl RunRow {
    pub fn new(c: &Chrome, run: &crate::service::runs::RunView, job_name: &str) -> Self {
        let duration = match (run.started_ms, run.finished_ms) {
            (Some(s), Some(f)) => duration((f - s).max(0)),
            _ => String::new(),
        };
        let message = run
            .handle_msg
            .clone()
            .or_else(|| run.trigger_msg.clone())
            .unwrap_or_default();
        RunRow {
            id: run.id,
            job_id: run.job_id,
            job_name: job_name.to_owned(),
            status: run.status.to_string(),
            status_label: status_label(c, run.status),
            attempt: run.attempt,
            trigger_kind: run.trigger_kind.to_string(),
            scheduled: when(Some(run.scheduled_ms)),
            duration,
            agent: run.agent.clone().unwrap_or_default(),
            message: message.chars().take(200).collect(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct StatusCount {
    pub status: &'static str,
    pub label: &'static str,
    pub count: i64,
}

#[derive(Debug, Clone)]
pub struct ChartDay {
    pub day: String,
    pub label: String,
    pub ok: i64,
    pub bad: i64,
    pub x_ok: i64,
    pub x_bad: i64,
    pub y_ok: i64,
    pub y_bad: i64,
    pub h_ok: i64,
    pub h_bad: i64,
}

/// A server-drawn bar chart: no script, no library, and it prints.
#[derive(Debug, Clone)]
pub struct Chart {
    pub width: i64,
    pub height: i64,
    pub base_y: i64,
    pub label_y: i64,
    pub bar_w: i64,
    pub max: i64,
    pub days: Vec<ChartDay>,
}

impl Chart {
    pub fn new(days: &[crate::service::dashboard::DayOutcomes]) -> Self {
        let (width, height, base_y, left, plot_h, bar_w) = (700, 220, 190, 40, 170, 30);
        let max = days
            .iter()
            .map(|d| d.succeeded.max(d.failed))
            .max()
            .unwrap_or(0)
            .max(1);
        let slot = (width - left) / i64::try_from(days.len().max(1)).unwrap_or(1);
        let scale = |n: i64| if n == 0 { 0 } else { (n * plot_h / max).max(1) };
        let days = days
            .iter()
            .enumerate()
            .map(|(i, d)| {
                let x = left + i64::try_from(i).unwrap_or(0) * slot + (slot - 2 * bar_w) / 2;
                let (h_ok, h_bad) = (scale(d.succeeded), scale(d.failed));
                ChartDay {
                    label: d.day.get(5..).unwrap_or(&d.day).to_owned(),
                    day: d.day.clone(),
                    ok: d.succeeded,
                    bad: d.failed,
                    x_ok: x,
                    x_bad: x + bar_w,
                    y_ok: base_y - h_ok,
                    y_bad: base_y - h_bad,
                    h_ok,
                    h_bad,
                }
            })
            .collect();
        Chart {
            width,
            height,
            base_y,
            label_y: base_y + 18,
            bar_w,
            max,
            days,
        }
    }
}

#[derive(Template, WebTemplate)]
#[template(path = "dashboard.html")]
pub struct DashboardPage {
    pub c: Chrome,
    pub jobs_enabled: i64,
    pub jobs_total: i64,
    pub agents_live: usize,
    pub agents_total: usize,
    pub fleet: crate::service::fleet::FleetView,
    pub in_flight: i64,
    pub today_start: String,
    pub today: Vec<StatusCount>,
    pub chart: Chart,
    pub runs: Vec<RunRow>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pager_links_keep_filters() {
        let p = Pager::new("/console/runs?status=failed", 120, 50, 50, 50);
        assert_eq!(
            p.prev.as_deref(),
            Some("/console/runs?status=failed&offset=0")
        );
        assert_eq!(
            p.next.as_deref(),
            Some("/console/runs?status=failed&offset=100")
        );
        assert_eq!((p.first, p.last), (51, 100));
        let end = Pager::new("/console/jobs", 3, 50, 0, 3);
        assert_eq!((end.prev, end.next), (None, None));
    }

    #[test]
    fn form_errors_go_beside_shown_fields() {
        let mut f = FormState::from_pairs([
            ("name", "<b>x</b>"),
            ("alert.channels", "1"),
            ("alert.channels", "3"),
        ]);
        f.fail(&Error::invalid("name", "bad"), &["name"]);
        assert_eq!(f.err("name"), "bad");
        assert!(f.has("alert.channels", "3") && !f.has("alert.channels", "2"));
        f.fail(&Error::invalid("hidden", "oops"), &["name"]);
        assert_eq!(f.general, "hidden: oops");
        assert_eq!(
            f.v("name"),
            "<b>x</b>",
            "kept as typed; the template escapes it"
        );
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(duration(850), "850 ms");
        assert_eq!(duration(12_400), "12.4 s");
        assert_eq!(duration(185_000), "3 min 5 s");
        assert_eq!(duration(7_260_000), "2 h 1 min");
    }
}
