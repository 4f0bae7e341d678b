//! The cron engine: parses Quartz expressions as XXL-Job users write them (seconds first, `?`,
//! `L`, `W`, `LW`, `L-n`, `nL`, `n#k`, an optional year), plain 5-field crontab and the
//! `@daily`-style macros, and computes fire times in an IANA time zone. Schedules, previews and
//! API validation all go through it, so one set of rules decides both what is accepted and when
//! a job runs.
//!
//! It is our own rather than the `cron` crate because that crate parses none of `L`/`W`/`#` or
//! 5-field crontab, ANDs day-of-month with day-of-week where Quartz forbids setting both, reports
//! hour 25 as "must be less than 23", and across DST fires fixed-time jobs twice on a fall-back
//! (yielding times out of order), and not at all on a spring-forward. The tests check this engine
//! against `cron` (plain Quartz fields, in UTC and in DST zones away from transitions) and
//! `croner` (`L`/`W`/`#`, crontab, and DST transitions themselves) on thousands of generated
//! expressions.
//!
//! Syntax rules worth knowing:
//! - Quartz day-of-week numbers run 1 = Sunday … 7 = Saturday; crontab's run 0-7 with 0 and 7
//!   both Sunday. Names (`MON`, `JAN`) work in both, in any case.
//! - Quartz wants `?` in exactly one of day-of-month and day-of-week. We also accept `*` in one
//!   of them when the other is restricted (it can only mean "no constraint"), and `*` in both.
//!   Both restricted, or both `?`, is refused as Quartz refuses it.
//! - Crontab follows vixie cron: when both day fields are restricted a day matches if either
//!   does; a field that merely starts with `*` (such as `*/2`) counts as unrestricted for that
//!   decision, so `*/2` with `MON` means "odd days that are Mondays".
//! - Ranges may wrap (`22-2`, `FRI-MON`), except years. `a/n` runs from `a` to the field's end.
//! - A day-of-month that no selected month has (`31` in `FEB`) is refused; a year range wholly
//!   in the past is not an error, the expression simply never fires again.
//!
//! Daylight saving follows vixie cron. Fields match local wall-clock time; results are UTC
//! instants, always the first one strictly after the given instant (sub-second parts of it
//! ignored), and never later than the year 2199.
//! - Wall times skipped by a spring-forward: an expression whose hour field covers every hour
//!   (an "interval job") simply has no fire there; any other (a "fixed-time job") fires once at
//!   the first instant after the gap, however many of its times fell into the gap.
//! - Wall times repeated by a fall-back: an interval job fires at every matching instant (both
//!   passes); a fixed-time job fires only on the first pass.

use std::fmt;
use std::str::FromStr;

use chrono::{
    DateTime, Datelike, Duration, LocalResult, NaiveDate, NaiveDateTime, TimeZone, Timelike, Utc,
};
use chrono_tz::Tz;

/// Years beyond this are not searched: a schedule that cannot fire before it never fires.
const MAX_YEAR: i32 = 2199;
const MIN_YEAR: i32 = 1970;

/// What is wrong with an expression, and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct CronError {
    /// `expression`, `second`, `minute`, `hour`, `day_of_month`, `month`, `day_of_week` or `year`.
    pub field: &'static str,
    /// 1-based index of the field in the text as written; 0 for the whole expression.
    pub position: usize,
    pub token: String,
    pub message: String,
}

impl fmt::Display for CronError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.position == 0 {
            write!(f, "{}", self.message)
        } else {
            write!(
                f,
                "{} (field {}) `{}`: {}",
                self.field.replace('_', " "),
                self.position,
                self.token,
                self.message
            )
        }
    }
}

/// Day-of-month rule.
#[derive(Debug, Clone, PartialEq, Eq)]
enum DomRule {
    /// Bit d set = day d (1..=31).
    Days(u32),
    /// `L` (offset 0) or `L-n`.
    LastDay { offset: u32 },
    /// `LW`.
    LastWeekday,
    /// `nW`.
    NearestWeekday(u32),
}

/// Day-of-week rule; weekdays are Quartz numbers 1 = Sunday … 7 = Saturday.
#[derive(Debug, Clone, PartialEq, Eq)]
enum DowRule {
    /// Bit w set = weekday w.
    Days(u8),
    /// `nL`: the last such weekday of the month.
    Last(u8),
    /// `n#k`: the k-th such weekday of the month.
    Nth(u8, u32),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Days {
    /// `None` = unrestricted (`*` or `?`).
    dom: Option<DomRule>,
    dow: Option<DowRule>,
    /// Crontab semantics: when both are restricted, a day matches if either matches.
    either: bool,
}

/// A parsed cron expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CronExpr {
    source: String,
    seconds: u64,
    minutes: u64,
    hours: u32,
    months: u16,
    days: Days,
    /// Bit (y - 1970) set = year y allowed; `None` = every year.
    years: Option<[u64; 4]>,
}

struct FieldSpec {
    name: &'static str,
    min: u32,
    max: u32,
    names: &'static [&'static str],
    /// The first name maps to this number.
    names_start: u32,
}

const SECOND: FieldSpec = FieldSpec {
    name: "second",
    min: 0,
    max: 59,
    names: &[],
    names_start: 0,
};
const MINUTE: FieldSpec = FieldSpec {
    name: "minute",
    min: 0,
    max: 59,
    names: &[],
    names_start: 0,
};
const HOUR: FieldSpec = FieldSpec {
    name: "hour",
    min: 0,
    max: 23,
    names: &[],
    names_start: 0,
};
const DOM: FieldSpec = FieldSpec {
    name: "day_of_month",
    min: 1,
    max: 31,
    names: &[],
    names_start: 0,
};
const MONTH: FieldSpec = FieldSpec {
    name: "month",
    min: 1,
    max: 12,
    names: &[
        "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
    ],
    names_start: 1,
};
const DOW_QUARTZ: FieldSpec = FieldSpec {
    name: "day_of_week",
    min: 1,
    max: 7,
    names: &["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"],
    names_start: 1,
};
/// Crontab numbering: 0-7, 0 and 7 both Sunday; converted to Quartz numbers after parsing.
const DOW_UNIX: FieldSpec = FieldSpec {
    name: "day_of_week",
    min: 0,
    max: 7,
    names: &["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"],
    names_start: 0,
};
const YEAR: FieldSpec = FieldSpec {
    name: "year",
    min: MIN_YEAR as u32,
    max: MAX_YEAR as u32,
    names: &[],
    names_start: 0,
};

/// Parsing context of one field: its spec, its 1-based position, and its text.
struct Field<'a> {
    spec: &'a FieldSpec,
    position: usize,
    text: &'a str,
}

impl Field<'_> {
    fn err(&self, token: &str, message: impl Into<String>) -> CronError {
        CronError {
            field: self.spec.name,
            position: self.position,
            token: token.to_owned(),
            message: message.into(),
        }
    }

    fn value(&self, token: &str) -> Result<u32, CronError> {
        if token.is_empty() {
            return Err(self.err(self.text, "a value is missing"));
        }
        let upper = token.to_ascii_uppercase();
        if let Some(i) = self.spec.names.iter().position(|n| *n == upper) {
            return Ok(self.spec.names_start + i as u32);
        }
        let n: u32 = token.parse().map_err(|_| {
            let hint = if self.spec.names.is_empty() {
                String::new()
            } else {
                format!(" or a name ({})", self.spec.names.join(", "))
            };
            self.err(token, format!("`{token}` is not a number{hint}"))
        })?;
        if n < self.spec.min || n > self.spec.max {
            return Err(self.err(
                token,
                format!(
                    "value {n} is out of range {}-{}",
                    self.spec.min, self.spec.max
                ),
            ));
        }
        Ok(n)
    }

    /// Parses a list of `*`, `n`, `a-b`, with optional `/step`, into the allowed values.
    fn values(&self) -> Result<Vec<bool>, CronError> {
        let mut allowed = vec![false; self.spec.max as usize + 1];
        if self.text.is_empty() {
            return Err(self.err(self.text, "is empty"));
        }
        for item in self.text.split(',') {
            if item.is_empty() {
                return Err(self.err(self.text, "has an empty list item"));
            }
            let (range, step) = match item.split_once('/') {
                Some((r, s)) => {
                    let step: u32 = s
                        .parse()
                        .map_err(|_| self.err(item, format!("step `{s}` is not a number")))?;
                    if step == 0 {
                        return Err(self.err(item, "a step of 0 never advances; use 1 or more"));
                    }
                    if step > self.spec.max {
                        return Err(self.err(
                            item,
                            format!(
                                "step {step} is larger than the field's range {}-{}",
                                self.spec.min, self.spec.max
                            ),
                        ));
                    }
                    (r, Some(step))
                }
                None => (item, None),
            };
            if range == "?" {
                if !matches!(self.spec.name, "day_of_month" | "day_of_week") {
                    return Err(
                        self.err(item, "`?` is only allowed in day-of-month or day-of-week")
                    );
                }
                if self.text != "?" {
                    return Err(self.err(
                        self.text,
                        "`?` means \"no value\" and must stand alone in the field",
                    ));
                }
            }
            let (start, end) = if range == "*" || range == "?" {
                (self.spec.min, self.spec.max)
            } else if let Some((a, b)) = range.split_once('-') {
                (self.value(a)?, self.value(b)?)
            } else {
                let v = self.value(range)?;
                // Quartz: `a/n` runs from a to the end of the range.
                (v, if step.is_some() { self.spec.max } else { v })
            };
            let step = step.unwrap_or(1);
            let span = self.spec.max - self.spec.min + 1;
            // Wrap-around ranges (`22-2`, `FRI-MON`) are allowed, as in Quartz; years have no cycle
            // to wrap around.
            if end < start && self.spec.name == "year" {
                return Err(self.err(
                    item,
                    format!("range {start}-{end} runs backwards; years do not wrap around"),
                ));
            }
            let length = if end >= start {
                end - start
            } else {
                end + span - start
            };
            let mut offset = 0;
            while offset <= length {
                let mut v = start + offset;
                if v > self.spec.max {
                    v -= span;
                }
                allowed[v as usize] = true;
                offset += step;
            }
        }
        Ok(allowed)
    }

    fn bits(&self) -> Result<u64, CronError> {
        Ok(self
            .values()?
            .iter()
            .enumerate()
            .filter(|(_, on)| **on)
            .fold(0, |acc, (i, _)| acc | (1 << i)))
    }
}

fn is_unrestricted(text: &str) -> bool {
    text == "*" || text == "?"
}

fn parse_dom(field: &Field<'_>) -> Result<Option<DomRule>, CronError> {
    let text = field.text.to_ascii_uppercase();
    if is_unrestricted(&text) {
        return Ok(None);
    }
    if text == "L" {
        return Ok(Some(DomRule::LastDay { offset: 0 }));
    }
    if text == "LW" || text == "WL" {
        return Ok(Some(DomRule::LastWeekday));
    }
    if let Some(offset) = text.strip_prefix("L-") {
        let n: u32 = offset
            .parse()
            .map_err(|_| field.err(field.text, "`L-n` needs a number of days n"))?;
        if n > 30 {
            return Err(field.err(
                field.text,
                "`L-n` allows at most 30 days before the last day",
            ));
        }
        return Ok(Some(DomRule::LastDay { offset: n }));
    }
    if let Some(day) = text.strip_suffix('W') {
        if day.contains([',', '-', '/', '*']) {
            return Err(field.err(
                field.text,
                "`W` applies to a single day, not a list or range",
            ));
        }
        return Ok(Some(DomRule::NearestWeekday(field.value(day)?)));
    }
    if text.contains('L') || text.contains('W') || text.contains('#') {
        return Err(field.err(
            field.text,
            "`L` and `W` must stand alone (`L`, `L-3`, `LW`, `15W`); `#` belongs in day-of-week",
        ));
    }
    Ok(Some(DomRule::Days(field.bits()? as u32)))
}

fn parse_dow(field: &Field<'_>, unix: bool) -> Result<Option<DowRule>, CronError> {
    let text = field.text.to_ascii_uppercase();
    if is_unrestricted(&text) {
        return Ok(None);
    }
    let to_quartz = |v: u32| -> u8 { if unix { (v % 7 + 1) as u8 } else { v as u8 } };
    if text == "L" {
        // Quartz: a bare `L` in day-of-week is its last day, Saturday.
        return Ok(Some(DowRule::Days(1 << 7)));
    }
    if let Some((day, nth)) = text.split_once('#') {
        let k: u32 = nth.parse().map_err(|_| {
            field.err(
                field.text,
                format!("`#{nth}` needs an occurrence number 1-5"),
            )
        })?;
        if !(1..=5).contains(&k) {
            return Err(field.err(field.text, format!("occurrence #{k} is out of range 1-5")));
        }
        return Ok(Some(DowRule::Nth(to_quartz(field.value(day)?), k)));
    }
    if let Some(day) = text.strip_suffix('L') {
        if day.contains([',', '-', '/', '*']) {
            return Err(field.err(
                field.text,
                "`L` in day-of-week applies to a single weekday, e.g. `6L` or `FRIL`",
            ));
        }
        return Ok(Some(DowRule::Last(to_quartz(field.value(day)?))));
    }
    // `WED` is a name, not a `W`; any other `W` or `L` left here is misplaced.
    let without_names = field
        .spec
        .names
        .iter()
        .fold(text.clone(), |t, name| t.replace(name, ""));
    if without_names.contains(['W', 'L']) {
        return Err(field.err(
            field.text,
            "`W` is not allowed in day-of-week; `L` only as `nL`",
        ));
    }
    let values = field.values()?;
    let mut bits = 0u8;
    for (v, on) in values.iter().enumerate() {
        if *on {
            bits |= 1 << to_quartz(v as u32);
        }
    }
    Ok(Some(DowRule::Days(bits)))
}

fn macro_expansion(text: &str) -> Option<&'static str> {
    Some(match text.to_ascii_lowercase().as_str() {
        "@yearly" | "@annually" => "0 0 0 1 1 ?",
        "@monthly" => "0 0 0 1 * ?",
        "@weekly" => "0 0 0 ? * 1",
        "@daily" | "@midnight" => "0 0 0 * * ?",
        "@hourly" => "0 0 * * * ?",
        _ => return None,
    })
}

fn days_in_month(year: i32, month: u32) -> u32 {
    let (next_year, next_month) = if month == 12 {
        (year + 1, 1)
    } else {
        (year, month + 1)
    };
    NaiveDate::from_ymd_opt(next_year, next_month, 1)
        .and_then(|d| d.pred_opt())
        .map_or(28, |d| d.day())
}

/// Quartz weekday (1 = Sunday) of a date.
fn quartz_weekday(date: NaiveDate) -> u8 {
    date.weekday().num_days_from_sunday() as u8 + 1
}

fn is_weekday(date: NaiveDate) -> bool {
    !matches!(date.weekday(), chrono::Weekday::Sat | chrono::Weekday::Sun)
}

impl DomRule {
    fn matches(&self, date: NaiveDate) -> bool {
        let (year, month, day) = (date.year(), date.month(), date.day());
        let last = days_in_month(year, month);
        match self {
            DomRule::Days(bits) => bits & (1 << day) != 0,
            DomRule::LastDay { offset } => last
                .checked_sub(*offset)
                .is_some_and(|d| d >= 1 && d == day),
            DomRule::LastWeekday => {
                let mut d = last;
                while let Some(candidate) = NaiveDate::from_ymd_opt(year, month, d) {
                    if is_weekday(candidate) {
                        return d == day;
                    }
                    d -= 1;
                }
                false
            }
            DomRule::NearestWeekday(target) => {
                let Some(target_date) = NaiveDate::from_ymd_opt(year, month, *target) else {
                    return false;
                };
                // Quartz: the nearest weekday within the same month.
                let chosen = match target_date.weekday() {
                    chrono::Weekday::Sat if *target > 1 => target - 1,
                    chrono::Weekday::Sat => target + 2,
                    chrono::Weekday::Sun if *target < last => target + 1,
                    chrono::Weekday::Sun => target - 2,
                    _ => *target,
                };
                chosen == day
            }
        }
    }

    /// Whether the rule can match in some month of `months` (checked with leap-year February).
    fn possible_in(&self, months: u16) -> bool {
        let longest = (1..=12u32)
            .filter(|m| months & (1 << m) != 0)
            .map(|m| days_in_month(2000, m))
            .max()
            .unwrap_or(0);
        match self {
            DomRule::Days(bits) => (1..=longest).any(|d| bits & (1 << d) != 0),
            DomRule::LastDay { offset } => longest > *offset,
            DomRule::LastWeekday => longest > 0,
            DomRule::NearestWeekday(day) => *day <= longest,
        }
    }
}

impl DowRule {
    fn matches(&self, date: NaiveDate) -> bool {
        let weekday = quartz_weekday(date);
        match self {
            DowRule::Days(bits) => bits & (1 << weekday) != 0,
            DowRule::Last(w) => {
                *w == weekday && date.day() + 7 > days_in_month(date.year(), date.month())
            }
            DowRule::Nth(w, k) => *w == weekday && (date.day() - 1) / 7 + 1 == *k,
        }
    }
}

impl Days {
    fn matches(&self, date: NaiveDate) -> bool {
        match (&self.dom, &self.dow) {
            (None, None) => true,
            (Some(dom), None) => dom.matches(date),
            (None, Some(dow)) => dow.matches(date),
            (Some(dom), Some(dow)) => {
                if self.either {
                    dom.matches(date) || dow.matches(date)
                } else {
                    dom.matches(date) && dow.matches(date)
                }
            }
        }
    }
}

/// The next allowed value `>= from` in a bitset, if any.
fn next_bit(bits: u64, from: u32, max: u32) -> Option<u32> {
    (from..=max).find(|v| bits & (1 << v) != 0)
}

impl CronExpr {
    /// Parses Quartz 6-field (`sec min hour dom month dow`), 7-field (`… year`), 5-field crontab
    /// (`min hour dom month dow`) or a macro (`@daily`, `@hourly`, …).
    ///
    /// # Errors
    /// A [`CronError`] naming the field, its position and the offending text.
    pub fn parse(expr: &str) -> Result<CronExpr, CronError> {
        let whole = |message: String| CronError {
            field: "expression",
            position: 0,
            token: expr.to_owned(),
            message,
        };
        let trimmed = expr.trim();
        if trimmed.is_empty() {
            return Err(whole("the expression is empty".into()));
        }
        let expanded = if trimmed.starts_with('@') {
            macro_expansion(trimmed).ok_or_else(|| {
                whole(format!("unknown macro `{trimmed}`; known: @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly"))
            })?
        } else {
            trimmed
        };
        let parts: Vec<&str> = expanded.split_whitespace().collect();
        let unix = parts.len() == 5;
        // Crontab has no seconds field: pretend a `0` and shift positions so errors point at the user's text.
        let (texts, shift): (Vec<&str>, usize) = match parts.len() {
            5 => (
                std::iter::once("0").chain(parts.iter().copied()).collect(),
                0,
            ),
            6 | 7 => (parts.clone(), 1),
            n => {
                return Err(whole(format!(
                    "found {n} fields; expected 6 (sec min hour day-of-month month day-of-week), 7 (… year) or 5 (crontab: min hour day-of-month month day-of-week)"
                )));
            }
        };
        let field = |i: usize, spec: &'static FieldSpec| Field {
            spec,
            position: i + shift,
            text: texts[i],
        };
        let seconds = field(0, &SECOND);
        let seconds = if unix { 1 } else { seconds.bits()? };
        let minutes = field(1, &MINUTE).bits()?;
        let hours = field(2, &HOUR).bits()? as u32;
        let dom_field = field(3, &DOM);
        let month_field = field(4, &MONTH);
        let dow_field = field(5, if unix { &DOW_UNIX } else { &DOW_QUARTZ });
        let months = month_field.bits()? as u16;
        let dom = parse_dom(&dom_field)?;
        let dow = parse_dow(&dow_field, unix)?;
        if !unix {
            match (dom_field.text, dow_field.text) {
                ("?", "?") => {
                    return Err(dom_field.err(
                        "?",
                        "`?` may stand in day-of-month or day-of-week, not both",
                    ));
                }
                (d, w) if dom.is_some() && dow.is_some() && d != "?" && w != "?" => {
                    return Err(dow_field.err(
                        w,
                        "specifying both a day-of-month and a day-of-week is not supported; put `?` in one of them",
                    ));
                }
                _ => {}
            }
        }
        // vixie cron: a day field starting with `*` (even `*/2`) makes the two combine with AND.
        let either = unix && !dom_field.text.starts_with('*') && !dow_field.text.starts_with('*');
        // With OR the day-of-week alone can still fire, so only an AND'ed or lone day-of-month
        // can make the whole expression impossible.
        if let Some(rule) = &dom
            && !(either && dow.is_some())
            && !rule.possible_in(months)
        {
            return Err(dom_field.err(
                dom_field.text,
                "never matches any selected month: none of them has such a day",
            ));
        }
        let years = if texts.len() == 7 {
            let year_field = field(6, &YEAR);
            if year_field.text == "*" {
                None
            } else {
                let mut bits = [0u64; 4];
                for (year, on) in year_field.values()?.into_iter().enumerate() {
                    if on && let Some(i) = year.checked_sub(MIN_YEAR as usize) {
                        bits[i / 64] |= 1 << (i % 64);
                    }
                }
                Some(bits)
            }
        } else {
            None
        };
        Ok(CronExpr {
            source: trimmed.split_whitespace().collect::<Vec<_>>().join(" "),
            seconds,
            minutes,
            hours,
            months,
            days: Days { dom, dow, either },
            years,
        })
    }

    fn year_allowed(&self, year: i32) -> bool {
        match &self.years {
            None => (MIN_YEAR..=MAX_YEAR).contains(&year),
            Some(bits) => usize::try_from(year - MIN_YEAR)
                .ok()
                .and_then(|i| bits.get(i / 64).map(|word| word & (1 << (i % 64)) != 0))
                .unwrap_or(false),
        }
    }

    /// An "interval job" in vixie-cron terms: its hour field covers every hour.
    fn every_hour(&self) -> bool {
        self.hours == (1 << 24) - 1
    }

    /// The first local wall time `>= from` that matches the fields, ignoring time zones.
    fn next_local(&self, from: NaiveDateTime) -> Option<NaiveDateTime> {
        let mut t = from;
        loop {
            let year = t.year();
            if year > MAX_YEAR {
                return None;
            }
            if !self.year_allowed(year) {
                let next_year = (year + 1..=MAX_YEAR).find(|y| self.year_allowed(*y))?;
                t = NaiveDate::from_ymd_opt(next_year, 1, 1)?.and_hms_opt(0, 0, 0)?;
                continue;
            }
            if self.months & (1 << t.month()) == 0 {
                t = match next_bit(u64::from(self.months), t.month() + 1, 12) {
                    Some(m) => NaiveDate::from_ymd_opt(year, m, 1)?.and_hms_opt(0, 0, 0)?,
                    None => NaiveDate::from_ymd_opt(year + 1, 1, 1)?.and_hms_opt(0, 0, 0)?,
                };
                continue;
            }
            if !self.days.matches(t.date()) {
                t = t.date().succ_opt()?.and_hms_opt(0, 0, 0)?;
                continue;
            }
            let Some(hour) = next_bit(u64::from(self.hours), t.hour(), 23) else {
                t = t.date().succ_opt()?.and_hms_opt(0, 0, 0)?;
                continue;
            };
            if hour != t.hour() {
                t = t.date().and_hms_opt(hour, 0, 0)?;
            }
            let Some(minute) = next_bit(self.minutes, t.minute(), 59) else {
                t = t.date().and_hms_opt(t.hour(), 0, 0)? + Duration::hours(1);
                continue;
            };
            if minute != t.minute() {
                t = t.date().and_hms_opt(t.hour(), minute, 0)?;
            }
            let Some(second) = next_bit(self.seconds, t.second(), 59) else {
                t = t.date().and_hms_opt(t.hour(), t.minute(), 0)? + Duration::minutes(1);
                continue;
            };
            return t.date().and_hms_opt(t.hour(), t.minute(), second);
        }
    }

    /// The first local wall time after `gap_time` that exists in `tz` (the end of a DST gap).
    fn end_of_gap(gap_time: NaiveDateTime, tz: Tz) -> Option<DateTime<Utc>> {
        let mut probe = gap_time.with_second(0)?;
        for _ in 0..(4 * 60) {
            probe += Duration::minutes(1);
            if let Some(t) = tz.from_local_datetime(&probe).earliest() {
                return Some(t.with_timezone(&Utc));
            }
        }
        None
    }

    /// The first fire time strictly after `after`, evaluated in `tz`, as UTC; `None` if the
    /// expression never fires again (before the year 2200).
    pub fn next_after(&self, after: DateTime<Utc>, tz: Tz) -> Option<DateTime<Utc>> {
        let after = after.with_nanosecond(0)?;
        let local_after = after.with_timezone(&tz).naive_local();
        let mut best = self.next_from_local(local_after + Duration::seconds(1), after, tz);
        // After the first pass of a fall-back, an interval job's second-pass fires at wall times
        // up to `local_after` are still in the future.
        if self.every_hour()
            && let LocalResult::Ambiguous(_, second_pass) = tz.from_local_datetime(&local_after)
            && after < second_pass.with_timezone(&Utc)
        {
            let mut start = local_after;
            while matches!(
                tz.from_local_datetime(&(start - Duration::minutes(1))),
                LocalResult::Ambiguous(..)
            ) {
                start -= Duration::minutes(1);
            }
            let start = start.with_second(0)?;
            if let Some(t) = self.next_local(start).filter(|t| *t <= local_after)
                && let Some(instant) = tz
                    .from_local_datetime(&t)
                    .latest()
                    .map(|i| i.with_timezone(&Utc))
                && instant > after
            {
                best = Some(best.map_or(instant, |b| b.min(instant)));
            }
        }
        best
    }

    fn next_from_local(
        &self,
        from: NaiveDateTime,
        after: DateTime<Utc>,
        tz: Tz,
    ) -> Option<DateTime<Utc>> {
        let mut cursor = from;
        loop {
            let local = self.next_local(cursor)?;
            cursor = local + Duration::seconds(1);
            let candidate = match tz.from_local_datetime(&local) {
                LocalResult::Single(t) => Some(t.with_timezone(&Utc)),
                LocalResult::Ambiguous(first, second) => {
                    let (first, second) = (first.with_timezone(&Utc), second.with_timezone(&Utc));
                    if first > after {
                        Some(first)
                    } else if self.every_hour() && second > after {
                        Some(second)
                    } else {
                        None
                    }
                }
                LocalResult::None if self.every_hour() => None,
                LocalResult::None => Self::end_of_gap(local, tz),
            };
            if let Some(t) = candidate.filter(|t| *t > after) {
                return Some(t);
            }
        }
    }

    /// The next `count` fire times after `after`.
    pub fn upcoming(&self, after: DateTime<Utc>, tz: Tz, count: usize) -> Vec<DateTime<Utc>> {
        // `count` may come straight from a request; don't let it size an allocation.
        let mut out = Vec::with_capacity(count.min(1024));
        let mut cursor = after;
        while out.len() < count {
            match self.next_after(cursor, tz) {
                Some(t) => {
                    out.push(t);
                    cursor = t;
                }
                None => break,
            }
        }
        out
    }
}

impl fmt::Display for CronExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

impl FromStr for CronExpr {
    type Err = CronError;

    fn from_str(s: &str) -> Result<Self, CronError> {
        CronExpr::parse(s)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use chrono_tz::{America, Australia, Europe};

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn next(expr: &str, after: &str) -> String {
        CronExpr::parse(expr)
            .unwrap()
            .next_after(utc(after), Tz::UTC)
            .unwrap()
            .to_rfc3339()
    }

    fn times(expr: &str, tz: Tz, after: &str, n: usize) -> Vec<String> {
        CronExpr::parse(expr)
            .unwrap()
            .upcoming(utc(after), tz, n)
            .iter()
            .map(|t| t.with_timezone(&tz).to_rfc3339())
            .collect()
    }

    #[test]
    fn quartz_examples_xxl_job_users_write() {
        assert_eq!(
            next("0 0/5 * * * ?", "2026-03-01T10:02:00Z"),
            "2026-03-01T10:05:00+00:00"
        );
        assert_eq!(
            next("0 15 10 L * ?", "2026-02-01T00:00:00Z"),
            "2026-02-28T10:15:00+00:00"
        );
        assert_eq!(
            next("0 15 10 L * ?", "2028-02-01T00:00:00Z"),
            "2028-02-29T10:15:00+00:00"
        );
        // The third Friday of November 2026 is the 20th.
        assert_eq!(
            next("0 15 10 ? * 6#3", "2026-11-01T00:00:00Z"),
            "2026-11-20T10:15:00+00:00"
        );
        // The last weekday of January 2026 is Friday the 30th (the 31st is a Saturday).
        assert_eq!(
            next("0 0 12 LW * ?", "2026-01-01T00:00:00Z"),
            "2026-01-30T12:00:00+00:00"
        );
        // 2026-11-22 is a Sunday.
        assert_eq!(
            next("0 0 9 ? * MON-FRI", "2026-11-21T10:00:00Z"),
            "2026-11-23T09:00:00+00:00"
        );
        // The last Friday of November 2026 is the 27th; 2025 is excluded by the year field.
        assert_eq!(
            next("0 15 10 ? * 6L 2026-2030", "2025-11-01T00:00:00Z"),
            "2026-01-30T10:15:00+00:00"
        );
        assert_eq!(
            next("0 0 12 1/5 * ?", "2026-01-01T12:00:00Z"),
            "2026-01-06T12:00:00+00:00"
        );
        assert_eq!(
            next("0 11 11 11 11 ?", "2026-11-22T00:00:00Z"),
            "2027-11-11T11:11:00+00:00"
        );
        assert_eq!(
            next("0 0 0 L-2 * ?", "2026-04-01T00:00:00Z"),
            "2026-04-28T00:00:00+00:00"
        );
        assert_eq!(
            next("0 0 0 ? * FRIL", "2026-11-01T00:00:00Z"),
            "2026-11-27T00:00:00+00:00"
        );
        assert_eq!(
            next("0 0 0 ? * L", "2026-11-22T00:00:00Z"),
            "2026-11-28T00:00:00+00:00",
            "bare L = Saturday"
        );
        assert_eq!(
            next("0 0 22-2 * * ?", "2026-01-01T02:30:00Z"),
            "2026-01-01T22:00:00+00:00",
            "wrap-around hours"
        );
        assert_eq!(
            next("0 0 0 ? * FRI-MON", "2026-11-24T00:00:00Z"),
            "2026-11-27T00:00:00+00:00",
            "wrap-around days"
        );
    }

    #[test]
    fn nearest_weekday_stays_in_the_month() {
        // 2026-08-15 is a Saturday → Friday the 14th.
        assert_eq!(
            next("0 0 0 15W * ?", "2026-08-01T00:00:00Z"),
            "2026-08-14T00:00:00+00:00"
        );
        // 2026-11-01 is a Sunday → Monday the 2nd.
        assert_eq!(
            next("0 0 0 1W * ?", "2026-10-31T00:00:00Z"),
            "2026-11-02T00:00:00+00:00"
        );
        // 2026-08-01 is a Saturday → Monday the 3rd, not Friday July 31st.
        assert_eq!(
            next("0 0 0 1W * ?", "2026-07-15T00:00:00Z"),
            "2026-08-03T00:00:00+00:00"
        );
        // 2026-05-31 is a Sunday → Friday the 29th.
        assert_eq!(
            next("0 0 0 31W * ?", "2026-05-01T00:00:00Z"),
            "2026-05-29T00:00:00+00:00"
        );
        // 31W never fires in 30-day months: after May comes July.
        assert_eq!(
            next("0 0 0 31W * ?", "2026-05-30T00:00:00Z"),
            "2026-07-31T00:00:00+00:00"
        );
    }

    #[test]
    fn last_day_offsets_match_a_direct_computation() {
        // croner has no `L-n`, so this form is checked against the definition instead.
        for n in 0..=30u32 {
            let expr = format!("0 0 0 L-{n} * ?");
            let got =
                CronExpr::parse(&expr)
                    .unwrap()
                    .upcoming(utc("2025-12-31T12:00:00Z"), Tz::UTC, 24);
            let expected: Vec<DateTime<Utc>> = (0..120)
                .filter_map(|i| {
                    let (year, month) = (2026 + i / 12, i as u32 % 12 + 1);
                    let day = days_in_month(year, month)
                        .checked_sub(n)
                        .filter(|d| *d >= 1)?;
                    Some(Utc.with_ymd_and_hms(year, month, day, 0, 0, 0).unwrap())
                })
                .take(24)
                .collect();
            assert_eq!(got, expected, "{expr}");
        }
    }

    #[test]
    fn crontab_five_fields_and_macros() {
        assert_eq!(
            next("*/5 * * * *", "2026-03-01T10:02:30Z"),
            "2026-03-01T10:05:00+00:00"
        );
        // Unix numbering: 1-5 = Monday-Friday; 0 and 7 are Sunday.
        assert_eq!(
            next("0 9 * * 1-5", "2026-11-21T10:00:00Z"),
            "2026-11-23T09:00:00+00:00"
        );
        assert_eq!(
            next("0 9 * * 0", "2026-11-20T10:00:00Z"),
            "2026-11-22T09:00:00+00:00"
        );
        assert_eq!(
            next("0 9 * * 7", "2026-11-20T10:00:00Z"),
            "2026-11-22T09:00:00+00:00"
        );
        // Both restricted: either matches (the 1st, or any Monday).
        assert_eq!(
            next("0 0 1 * MON", "2026-11-02T01:00:00Z"),
            "2026-11-09T00:00:00+00:00"
        );
        assert_eq!(
            next("0 0 1 * MON", "2026-11-30T01:00:00Z"),
            "2026-12-01T00:00:00+00:00"
        );
        assert_eq!(
            next("@daily", "2026-03-01T10:00:00Z"),
            "2026-03-02T00:00:00+00:00"
        );
        assert_eq!(
            next("@hourly", "2026-03-01T10:00:00Z"),
            "2026-03-01T11:00:00+00:00"
        );
        assert_eq!(
            next("@weekly", "2026-11-20T10:00:00Z"),
            "2026-11-22T00:00:00+00:00"
        );
        assert_eq!(
            next("@yearly", "2026-03-01T10:00:00Z"),
            "2027-01-01T00:00:00+00:00"
        );
        assert_eq!(
            CronExpr::parse("  0   0/5 * *  * ? ").unwrap().to_string(),
            "0 0/5 * * * ?"
        );
    }

    #[test]
    fn results_are_strictly_after_and_past_years_never_fire() {
        assert_eq!(
            next("0 0 12 * * ?", "2026-01-01T12:00:00Z"),
            "2026-01-02T12:00:00+00:00"
        );
        assert_eq!(
            next("* * * * * ?", "2026-01-01T12:00:00.500Z"),
            "2026-01-01T12:00:01+00:00"
        );
        let past = CronExpr::parse("0 0 0 1 1 ? 2020").unwrap();
        assert_eq!(past.next_after(utc("2026-01-01T00:00:00Z"), Tz::UTC), None);
        // Leap day only: four years apart.
        assert_eq!(
            next("0 0 0 29 2 ?", "2024-03-01T00:00:00Z"),
            "2028-02-29T00:00:00+00:00"
        );
    }

    fn rejected(expr: &str) -> CronError {
        CronExpr::parse(expr).unwrap_err()
    }

    #[test]
    fn errors_read_as_sentences() {
        let e = rejected("0 0 25 * * ?");
        assert_eq!(
            e.to_string(),
            "hour (field 3) `25`: value 25 is out of range 0-23"
        );
        let e = rejected("0 0 12 31 2 ?");
        assert_eq!(
            e.to_string(),
            "day of month (field 4) `31`: never matches any selected month: none of them has such a day"
        );
        assert_eq!(
            rejected("0 0 * *").to_string(),
            "found 4 fields; expected 6 (sec min hour day-of-month month day-of-week), 7 (… year) \
             or 5 (crontab: min hour day-of-month month day-of-week)"
        );
        // A day that only some selected months have is fine.
        assert!(CronExpr::parse("0 0 0 31 1,4 ?").is_ok());
        assert!(CronExpr::parse("0 0 0 29 2 ?").is_ok());
        assert!(CronExpr::parse("0 0 0 L-28 2 ?").is_ok());
        assert!(CronExpr::parse("0 0 0 ? * WED").is_ok());
    }

    #[test]
    fn spring_forward_fixed_time_fires_once_after_the_gap() {
        // New York skips 02:00-03:00 on 2026-03-08.
        let got = times("0 30 2 * * ?", America::New_York, "2026-03-07T12:00:00Z", 3);
        assert_eq!(
            got,
            vec![
                "2026-03-08T03:00:00-04:00",
                "2026-03-09T02:30:00-04:00",
                "2026-03-10T02:30:00-04:00"
            ]
        );
        let got = times(
            "0 0/20 2 * * ?",
            America::New_York,
            "2026-03-08T06:00:00Z",
            2,
        );
        assert_eq!(
            got,
            vec!["2026-03-08T03:00:00-04:00", "2026-03-09T02:00:00-04:00"],
            "several gap times fire once"
        );
        // Berlin skips 02:00-03:00 on 2026-03-29.
        let got = times("0 30 2 * * ?", Europe::Berlin, "2026-03-28T12:00:00Z", 2);
        assert_eq!(
            got,
            vec!["2026-03-29T03:00:00+02:00", "2026-03-30T02:30:00+02:00"]
        );
    }

    #[test]
    fn spring_forward_interval_jobs_skip_the_missing_hour() {
        let got = times(
            "0 0/30 * * * ?",
            America::New_York,
            "2026-03-08T06:15:00Z",
            4,
        );
        assert_eq!(
            got,
            vec![
                "2026-03-08T01:30:00-05:00",
                "2026-03-08T03:00:00-04:00",
                "2026-03-08T03:30:00-04:00",
                "2026-03-08T04:00:00-04:00"
            ]
        );
    }

    #[test]
    fn fall_back_fixed_time_fires_once_interval_jobs_fire_in_both_passes() {
        // New York repeats 01:00-02:00 on 2026-11-01.
        let got = times("0 30 1 * * ?", America::New_York, "2026-10-31T12:00:00Z", 2);
        assert_eq!(
            got,
            vec!["2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00"]
        );
        let got = times(
            "0 0/30 * * * ?",
            America::New_York,
            "2026-11-01T04:45:00Z",
            6,
        );
        assert_eq!(
            got,
            vec![
                "2026-11-01T01:00:00-04:00",
                "2026-11-01T01:30:00-04:00",
                "2026-11-01T01:00:00-05:00",
                "2026-11-01T01:30:00-05:00",
                "2026-11-01T02:00:00-05:00",
                "2026-11-01T02:30:00-05:00",
            ]
        );
        // Starting inside the first pass still finds the second pass.
        let got = times(
            "0 0/30 * * * ?",
            America::New_York,
            "2026-11-01T05:40:00Z",
            2,
        );
        assert_eq!(
            got,
            vec!["2026-11-01T01:00:00-05:00", "2026-11-01T01:30:00-05:00"]
        );
        // Berlin repeats 02:00-03:00 on 2026-10-25.
        let got = times("0 15 2 * * ?", Europe::Berlin, "2026-10-24T12:00:00Z", 2);
        assert_eq!(
            got,
            vec!["2026-10-25T02:15:00+02:00", "2026-10-26T02:15:00+01:00"]
        );
    }

    #[test]
    fn half_hour_dst_and_strictly_increasing_results_across_transitions() {
        // Lord Howe moves by 30 minutes: 02:00 → 02:30 on 2026-10-04.
        let got = times(
            "0 15 2 * * ?",
            Australia::Lord_Howe,
            "2026-10-03T00:00:00Z",
            2,
        );
        assert_eq!(
            got,
            vec!["2026-10-04T02:30:00+11:00", "2026-10-05T02:15:00+11:00"]
        );
        for tz in [America::New_York, Europe::Berlin, Australia::Lord_Howe] {
            for expr in [
                "0 0/7 * * * ?",
                "0 30 1,2,3 * * ?",
                "0 0 * * * ?",
                "13 */11 0-4 * * ?",
            ] {
                let e = CronExpr::parse(expr).unwrap();
                for start in [
                    "2026-03-07T00:00:00Z",
                    "2026-10-03T00:00:00Z",
                    "2026-10-31T00:00:00Z",
                ] {
                    let all = e.upcoming(utc(start), tz, 400);
                    assert!(
                        all.windows(2).all(|w| w[0] < w[1]),
                        "{expr} in {tz} from {start}"
                    );
                    // No fire is lost: starting just before any fire finds that fire.
                    for t in &all {
                        assert_eq!(
                            e.next_after(*t - Duration::seconds(1), tz),
                            Some(*t),
                            "{expr} in {tz} before {t}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn every_rejection_names_field_position_token_and_problem() {
        // (expression, field, position, token, words the message must contain)
        let cases: &[(&str, &str, usize, &str, &str)] = &[
            ("", "expression", 0, "", "empty"),
            ("   ", "expression", 0, "   ", "empty"),
            (
                "* * * *",
                "expression",
                0,
                "* * * *",
                "found 4 fields; expected 6",
            ),
            (
                "0 0 0 * * ? 2026 1",
                "expression",
                0,
                "0 0 0 * * ? 2026 1",
                "found 8 fields",
            ),
            (
                "@fortnightly",
                "expression",
                0,
                "@fortnightly",
                "unknown macro",
            ),
            (
                "60 * * * * ?",
                "second",
                1,
                "60",
                "value 60 is out of range 0-59",
            ),
            (
                "0 61 * * * ?",
                "minute",
                2,
                "61",
                "value 61 is out of range 0-59",
            ),
            (
                "0 0 25 * * ?",
                "hour",
                3,
                "25",
                "value 25 is out of range 0-23",
            ),
            (
                "0 0 12 32 * ?",
                "day_of_month",
                4,
                "32",
                "value 32 is out of range 1-31",
            ),
            (
                "0 0 12 0 * ?",
                "day_of_month",
                4,
                "0",
                "value 0 is out of range 1-31",
            ),
            (
                "0 0 12 ? 13 *",
                "month",
                5,
                "13",
                "value 13 is out of range 1-12",
            ),
            (
                "0 0 12 ? * 0",
                "day_of_week",
                6,
                "0",
                "value 0 is out of range 1-7",
            ),
            (
                "0 0 12 ? * 8",
                "day_of_week",
                6,
                "8",
                "value 8 is out of range 1-7",
            ),
            ("0 0/0 * * * ?", "minute", 2, "0/0", "step of 0"),
            (
                "0 */61 * * * ?",
                "minute",
                2,
                "*/61",
                "larger than the field's range 0-59",
            ),
            ("0 */x * * * ?", "minute", 2, "*/x", "not a number"),
            ("0 L * * * ?", "minute", 2, "L", "`L` is not a number"),
            ("0 0 W * * ?", "hour", 3, "W", "`W` is not a number"),
            (
                "0 0 0 ? L *",
                "month",
                5,
                "L",
                "not a number or a name (JAN",
            ),
            (
                "0 0 0 1#2 * ?",
                "day_of_month",
                4,
                "1#2",
                "`#` belongs in day-of-week",
            ),
            (
                "0 0 0 1,L * ?",
                "day_of_month",
                4,
                "1,L",
                "must stand alone",
            ),
            ("0 0 0 1-5W * ?", "day_of_month", 4, "1-5W", "single day"),
            ("0 0 0 L-31 * ?", "day_of_month", 4, "L-31", "at most 30"),
            ("0 0 0 L-x * ?", "day_of_month", 4, "L-x", "number of days"),
            (
                "0 0 0 ? * 2W",
                "day_of_week",
                6,
                "2W",
                "`W` is not allowed in day-of-week",
            ),
            ("0 0 0 ? * 1-5L", "day_of_week", 6, "1-5L", "single weekday"),
            (
                "0 0 0 ? * MON#0",
                "day_of_week",
                6,
                "MON#0",
                "#0 is out of range 1-5",
            ),
            (
                "0 0 0 ? * MON#6",
                "day_of_week",
                6,
                "MON#6",
                "#6 is out of range 1-5",
            ),
            (
                "0 0 0 ? * 2#x",
                "day_of_week",
                6,
                "2#x",
                "occurrence number 1-5",
            ),
            (
                "0 0 0 ? * FOO",
                "day_of_week",
                6,
                "FOO",
                "not a number or a name (SUN",
            ),
            (
                "0 0 0 1,,2 * ?",
                "day_of_month",
                4,
                "1,,2",
                "empty list item",
            ),
            ("0 0 0 1-2-3 * ?", "day_of_month", 4, "2-3", "not a number"),
            ("0 0 0 a-b * ?", "day_of_month", 4, "a", "not a number"),
            (
                "0 0 0 1- * ?",
                "day_of_month",
                4,
                "1-",
                "a value is missing",
            ),
            (
                "0 ? * * * ?",
                "minute",
                2,
                "?",
                "only allowed in day-of-month or day-of-week",
            ),
            (
                "0 0 0 1,? * MON",
                "day_of_month",
                4,
                "1,?",
                "must stand alone",
            ),
            ("0 0 12 ? * ?", "day_of_month", 4, "?", "not both"),
            (
                "0 0 12 1 * MON",
                "day_of_week",
                6,
                "MON",
                "both a day-of-month and a day-of-week",
            ),
            (
                "0 0 12 L * 6#3",
                "day_of_week",
                6,
                "6#3",
                "put `?` in one of them",
            ),
            (
                "0 0 12 31 2 ?",
                "day_of_month",
                4,
                "31",
                "never matches any selected month",
            ),
            (
                "0 0 0 30 FEB ?",
                "day_of_month",
                4,
                "30",
                "never matches any selected month",
            ),
            (
                "0 0 0 31 4,6,9,11 ?",
                "day_of_month",
                4,
                "31",
                "never matches",
            ),
            ("0 0 0 30W 2 ?", "day_of_month", 4, "30W", "never matches"),
            (
                "0 0 0 L-29 FEB ?",
                "day_of_month",
                4,
                "L-29",
                "never matches",
            ),
            (
                "0 0 0 * * ? 1969",
                "year",
                7,
                "1969",
                "value 1969 is out of range 1970-2199",
            ),
            (
                "0 0 0 * * ? 2200",
                "year",
                7,
                "2200",
                "out of range 1970-2199",
            ),
            (
                "0 0 0 * * ? 2030-2026",
                "year",
                7,
                "2030-2026",
                "runs backwards",
            ),
            (
                "0 0 0 * * ? ?",
                "year",
                7,
                "?",
                "only allowed in day-of-month or day-of-week",
            ),
            // Crontab positions count from its own first field; day-of-week runs 0-7.
            ("61 * * * *", "minute", 1, "61", "out of range 0-59"),
            ("* 24 * * *", "hour", 2, "24", "out of range 0-23"),
            (
                "* * * * 8",
                "day_of_week",
                5,
                "8",
                "value 8 is out of range 0-7",
            ),
            ("0 0 31 2 *", "day_of_month", 3, "31", "never matches"),
            ("*/0 * * * *", "minute", 1, "*/0", "step of 0"),
        ];
        for (expr, field, position, token, words) in cases {
            let e = rejected(expr);
            assert_eq!(
                (e.field, e.position, e.token.as_str()),
                (*field, *position, *token),
                "{expr:?}: {e}"
            );
            assert!(e.message.contains(words), "{expr:?}: {e}");
            let shown = e.to_string();
            if *position > 0 {
                let where_ = format!("{} (field {position}) `{token}`: ", field.replace('_', " "));
                assert!(shown.starts_with(&where_), "{expr:?}: {shown}");
            }
            assert!(shown.ends_with(&e.message), "{expr:?}: {shown}");
        }
    }

    #[test]
    fn lenient_but_unambiguous_forms_are_accepted() {
        let same = |a: &str, b: &str| {
            let start = utc("2026-01-01T00:00:00Z");
            assert_eq!(
                CronExpr::parse(a).unwrap().upcoming(start, Tz::UTC, 20),
                CronExpr::parse(b).unwrap().upcoming(start, Tz::UTC, 20),
                "{a} vs {b}"
            );
        };
        // `*` in one day field beside a restricted other reads as `?`.
        same("0 0 12 * * MON", "0 0 12 ? * MON");
        same("0 0 12 1 * *", "0 0 12 1 * ?");
        same("0 0 12 * * *", "0 0 12 * * ?");
        same("0 0 12 ? jan,Feb mon-fri", "0 0 12 ? 1,2 2-6");
        same("0 0 12 ? * fril", "0 0 12 ? * 6L");
        same("0 0 12 ? * fri#2", "0 0 12 ? * 6#2");
        same("0 0 12 lw * ?", "0 0 12 LW * ?");
        same("0 0 12 * * ? *", "0 0 12 * * ?");
        same("0 0 22-2 * * ?", "0 0 22,23,0,1,2 * * ?");
        same("0 0 0 * NOV-FEB ?", "0 0 0 * 11,12,1,2 ?");
        same("0 0 0 28-3 * ?", "0 0 0 28,29,30,31,1,2,3 * ?");
        same("0 0 0 ? * SAT-MON", "0 0 0 ? * 7,1,2");
        same("0 0 0 ? * SAT-MON/2", "0 0 0 ? * 7,2");
        same("5/20 * * * * ?", "5,25,45 * * * * ?");
        same("0 0 0 ? 3/4 *", "0 0 0 ? 3,7,11 *");
        same("@midnight", "0 0 0 * * ?");
        same("@annually", "0 0 0 1 1 ?");
        same("@monthly", "0 0 0 1 * ?");
        same("0 0 * * SUN", "0 0 0 ? * 1");
        same("0 0 * * 0,7", "0 0 0 ? * 1");
        same("0 0 * * FRI-MON", "0 0 0 ? * 6,7,1,2");
        // vixie cron ORs two restricted day fields, so a day-of-month that no selected month
        // has is harmless: this fires on February's Mondays.
        assert_eq!(
            times("0 0 31 2 MON", Tz::UTC, "2026-01-01T00:00:00Z", 3),
            vec![
                "2026-02-02T00:00:00+00:00",
                "2026-02-09T00:00:00+00:00",
                "2026-02-16T00:00:00+00:00"
            ]
        );
        // ...but `*/2` counts as unrestricted, so it ANDs: odd days that are Mondays.
        assert_eq!(
            times("0 0 */2 * MON", Tz::UTC, "2026-11-01T00:00:00Z", 3),
            vec![
                "2026-11-09T00:00:00+00:00",
                "2026-11-23T00:00:00+00:00",
                "2026-12-07T00:00:00+00:00"
            ]
        );
        let parsed: CronExpr = " 0  15 10 ?  * 6L  2026-2030 ".parse().unwrap();
        assert_eq!(parsed.to_string(), "0 15 10 ? * 6L 2026-2030");
        assert_eq!(CronExpr::parse(&parsed.to_string()).unwrap(), parsed);
        assert_eq!(CronExpr::parse("@Daily").unwrap().to_string(), "@Daily");
    }

    #[test]
    fn berlin_interval_jobs_across_both_transitions() {
        // Berlin skips 02:00-03:00 on 2026-03-29 and repeats it on 2026-10-25.
        assert_eq!(
            times("0 0/30 * * * ?", Europe::Berlin, "2026-03-29T00:15:00Z", 4),
            vec![
                "2026-03-29T01:30:00+01:00",
                "2026-03-29T03:00:00+02:00",
                "2026-03-29T03:30:00+02:00",
                "2026-03-29T04:00:00+02:00"
            ]
        );
        assert_eq!(
            times("0 0/30 * * * ?", Europe::Berlin, "2026-10-24T23:45:00Z", 5),
            vec![
                "2026-10-25T02:00:00+02:00",
                "2026-10-25T02:30:00+02:00",
                "2026-10-25T02:00:00+01:00",
                "2026-10-25T02:30:00+01:00",
                "2026-10-25T03:00:00+01:00"
            ]
        );
        // A fixed-time job asked from inside the second pass has already fired today.
        assert_eq!(
            times("0 30 2 * * ?", Europe::Berlin, "2026-10-25T01:10:00Z", 1),
            vec!["2026-10-26T02:30:00+01:00"]
        );
        assert_eq!(
            times("0 30 1 * * ?", America::New_York, "2026-11-01T06:10:00Z", 1),
            vec!["2026-11-02T01:30:00-05:00"]
        );
        // An hourly job keeps a steady real-time rhythm through the fall-back: 25 fires that day.
        let day = CronExpr::parse("0 0 * * * ?").unwrap().upcoming(
            utc("2026-10-24T21:59:59Z"),
            Europe::Berlin,
            25,
        );
        assert!(day.windows(2).all(|w| w[1] - w[0] == Duration::hours(1)));
        assert_eq!(
            day[24].with_timezone(&Europe::Berlin).to_rfc3339(),
            "2026-10-25T23:00:00+01:00"
        );
    }

    #[test]
    fn speed_sanity_note() {
        // Not a timing assertion: a visible figure for humans running `cargo test -- --nocapture`.
        // Jump-ahead search keeps a typical call in the microseconds even for sparse schedules.
        let exprs = [
            "0 0/5 * * * ?",
            "0 15 10 ? * 6#3",
            "0 0 12 LW * ?",
            "0 0 0 29 2 ?",
            "0 0 0 ? 2 1#5",
            "0 0 12 * * ? 2199",
        ];
        let started = std::time::Instant::now();
        let mut calls = 0u32;
        for expr in exprs {
            let e = CronExpr::parse(expr).unwrap();
            let mut t = utc("2026-01-01T00:00:00Z");
            for _ in 0..200 {
                match e.next_after(t, America::New_York) {
                    Some(next) => t = next,
                    None => break,
                }
                calls += 1;
            }
        }
        eprintln!("{calls} next_after calls in {:?}", started.elapsed());
        assert!(calls > 0);
    }

    /// A small seeded generator so failures reproduce.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, n: u32) -> u32 {
            (self.next() % u64::from(n)) as u32
        }

        fn field(&mut self, min: u32, max: u32) -> String {
            let span = max - min + 1;
            match self.below(6) {
                0 => "*".into(),
                1 => (min + self.below(span)).to_string(),
                2 => {
                    let a = min + self.below(span);
                    let b = a + self.below(max - a + 1);
                    format!("{a}-{b}")
                }
                3 => format!("*/{}", 1 + self.below(span.min(15))),
                4 => {
                    let a = min + self.below(span);
                    format!("{a}/{}", 1 + self.below(span.min(15)))
                }
                _ => {
                    let mut items: Vec<u32> = (0..1 + self.below(4))
                        .map(|_| min + self.below(span))
                        .collect();
                    items.sort_unstable();
                    items.dedup();
                    items
                        .iter()
                        .map(u32::to_string)
                        .collect::<Vec<_>>()
                        .join(",")
                }
            }
        }
    }

    fn starts() -> Vec<DateTime<Utc>> {
        [
            "2026-01-01T00:00:00Z",
            "2026-02-27T23:59:59Z",
            "2027-06-15T12:34:56Z",
            "2028-12-31T23:00:00Z",
        ]
        .iter()
        .map(|s| utc(s))
        .collect()
    }

    /// Stretches with no offset change, as (zone, first start, end): the `cron` crate resolves
    /// DST differently from vixie cron, so in DST zones it is compared only within these.
    fn steady_windows() -> Vec<(Tz, DateTime<Utc>, DateTime<Utc>)> {
        [
            (
                Europe::Berlin,
                "2026-04-01T00:00:00Z",
                "2026-10-24T00:00:00Z",
            ),
            (
                Europe::Berlin,
                "2026-10-26T00:00:00Z",
                "2027-03-27T00:00:00Z",
            ),
            (
                America::New_York,
                "2026-03-09T12:00:00Z",
                "2026-10-31T00:00:00Z",
            ),
            (
                America::New_York,
                "2026-11-02T12:00:00Z",
                "2027-03-13T00:00:00Z",
            ),
            (
                Australia::Lord_Howe,
                "2026-04-06T00:00:00Z",
                "2026-10-03T00:00:00Z",
            ),
            (
                chrono_tz::Asia::Kolkata,
                "2026-01-01T00:00:00Z",
                "2199-01-01T00:00:00Z",
            ),
        ]
        .iter()
        .map(|(tz, from, to)| (*tz, utc(from), utc(to)))
        .collect()
    }

    #[test]
    fn agrees_with_the_cron_crate_on_generated_quartz_expressions() {
        let mut rng = Rng(0x5eed_1234_abcd_0001);
        let mut compared = 0;
        for _ in 0..2000 {
            let (dom, dow) = if rng.below(2) == 0 {
                (rng.field(1, 31), "?".to_owned())
            } else {
                ("?".to_owned(), rng.field(1, 7))
            };
            let mut expr = format!(
                "{} {} {} {dom} {} {dow}",
                rng.field(0, 59),
                rng.field(0, 59),
                rng.field(0, 23),
                rng.field(1, 12)
            );
            if rng.below(4) == 0 {
                expr.push_str(&format!(" {}", rng.field(2026, 2032)));
            }
            let reference = cron::Schedule::from_str(&expr)
                .unwrap_or_else(|e| panic!("cron crate refused {expr}: {e}"));
            let Ok(ours) = CronExpr::parse(&expr) else {
                // We refuse only statically impossible day/month pairs: the reference must never
                // fire those.
                assert!(
                    reference.after(&starts()[0]).next().is_none(),
                    "we refused {expr}, which fires"
                );
                continue;
            };
            for start in starts() {
                let theirs: Vec<DateTime<Utc>> = reference.after(&start).take(20).collect();
                assert_eq!(
                    ours.upcoming(start, Tz::UTC, 20),
                    theirs,
                    "{expr} after {start} in UTC (left: ours, right: cron crate)"
                );
                compared += 1;
            }
            for (tz, from, to) in steady_windows() {
                let start = from + Duration::seconds(i64::from(rng.below(86_400 * 30)));
                let theirs: Vec<DateTime<Utc>> = reference
                    .after(&start.with_timezone(&tz))
                    .take(20)
                    .map(|t| t.with_timezone(&Utc))
                    .take_while(|t| *t < to)
                    .collect();
                let mine: Vec<DateTime<Utc>> = ours
                    .upcoming(start, tz, 20)
                    .into_iter()
                    .take_while(|t| *t < to)
                    .collect();
                assert_eq!(
                    mine, theirs,
                    "{expr} after {start} in {tz} (left: ours, right: cron crate)"
                );
                compared += 1;
            }
        }
        assert!(compared > 15_000, "compared {compared} series");
    }

    /// `croner` follows the same DST model (the Open Cron Pattern Spec, after vixie cron) but calls
    /// a job fixed-time only when second, minute and hour are all single values, where we look at
    /// the hour alone. The generator sticks to the shapes on which both definitions agree: all
    /// three single (fixed-time) or hour `*` (interval).
    #[test]
    fn agrees_with_croner_around_dst_transitions() {
        use croner::parser::{CronParser, Seconds};
        let quartz = CronParser::builder()
            .seconds(Seconds::Required)
            .alternative_weekdays(true)
            .sloppy_ranges(true)
            .build();
        // Each zone's offset changes at these instants in 2026.
        let transitions: Vec<(Tz, DateTime<Utc>)> = [
            (America::New_York, "2026-03-08T07:00:00Z"),
            (America::New_York, "2026-11-01T06:00:00Z"),
            (Europe::Berlin, "2026-03-29T01:00:00Z"),
            (Europe::Berlin, "2026-10-25T01:00:00Z"),
            (Australia::Lord_Howe, "2026-04-04T15:00:00Z"),
            (Australia::Lord_Howe, "2026-10-03T15:30:00Z"),
        ]
        .iter()
        .map(|(tz, t)| (*tz, utc(t)))
        .collect();
        for (tz, t) in &transitions {
            let before = (*t - Duration::seconds(1))
                .with_timezone(tz)
                .offset()
                .to_string();
            let after = t.with_timezone(tz).offset().to_string();
            assert_ne!(before, after, "{tz} changes offset at {t}");
        }
        let mut rng = Rng(0x0d57_0ff5_e720_2026);
        let mut compared = 0;
        for _ in 0..600 {
            let near_transition = |rng: &mut Rng| -> u32 {
                if rng.below(2) == 0 {
                    rng.below(4)
                } else {
                    rng.below(24)
                }
            };
            let time = if rng.below(2) == 0 {
                let hour = near_transition(&mut rng);
                format!("{} {} {hour}", rng.below(60), rng.below(60))
            } else {
                format!("{} {} *", rng.below(60), rng.field(0, 59))
            };
            let days = match rng.below(4) {
                0 => format!("? * {}", rng.field(1, 7)),
                1 => format!("{} * ?", rng.field(1, 31)),
                _ => "* * ?".to_owned(),
            };
            let expr = format!("{time} {days}");
            let Ok(ours) = CronExpr::parse(&expr) else {
                continue;
            };
            let reference = quartz
                .parse(&expr)
                .unwrap_or_else(|e| panic!("croner refused {expr}: {e}"));
            for (tz, at) in &transitions {
                let offset = i64::from(rng.below(6 * 3600)) - 4 * 3600;
                for start in [*at + Duration::seconds(offset), *at - Duration::seconds(1)] {
                    let theirs: Vec<DateTime<Utc>> = reference
                        .iter_after(start.with_timezone(tz))
                        .take(12)
                        .map(|t| t.with_timezone(&Utc))
                        .collect();
                    assert_eq!(
                        ours.upcoming(start, *tz, 12),
                        theirs,
                        "{expr} after {start} in {tz} (left: ours, right: croner)"
                    );
                    compared += 1;
                }
            }
        }
        assert!(compared > 6000, "compared {compared} series");
    }

    /// Whether croner classes the job as we do for DST: it calls a job fixed-time only when
    /// second, minute and hour are single values, we when the hour is not `*` (see above).
    fn same_dst_class(minute: &str, hour: &str) -> bool {
        let single = |f: &str| f.parse::<u32>().is_ok();
        hour == "*" || (single(minute) && single(hour))
    }

    #[test]
    fn agrees_with_croner_on_l_w_hash_and_crontab() {
        use croner::parser::{CronParser, Seconds};
        let quartz = CronParser::builder()
            .seconds(Seconds::Required)
            .alternative_weekdays(true)
            .sloppy_ranges(true)
            .build();
        let crontab = CronParser::builder().sloppy_ranges(true).build();
        let crontab_and = CronParser::builder()
            .sloppy_ranges(true)
            .dom_and_dow(true)
            .build();
        let compare = |expr: &str, ours: &CronExpr, reference: &croner::Cron, dst_too: bool| {
            let mut zones = vec![Tz::UTC, chrono_tz::Asia::Kolkata];
            if dst_too {
                zones.extend([Europe::Berlin, America::New_York, Australia::Lord_Howe]);
            }
            let mut n = 0;
            for tz in zones {
                for start in starts() {
                    let theirs: Vec<DateTime<Utc>> = reference
                        .iter_after(start.with_timezone(&tz))
                        .take(12)
                        .map(|t| t.with_timezone(&Utc))
                        .collect();
                    assert_eq!(
                        ours.upcoming(start, tz, 12),
                        theirs,
                        "{expr} after {start} in {tz} (left: ours, right: croner)"
                    );
                    n += 1;
                }
            }
            n
        };
        let mut rng = Rng(0x0dd_ba11_cafe_f00d);
        let mut compared = 0;
        for _ in 0..1500 {
            let (minute, hour) = (rng.field(0, 59), rng.field(0, 23));
            let (dom, dow) = match rng.below(7) {
                0 => ("L".to_owned(), "?".to_owned()),
                1 => (format!("{}W", 1 + rng.below(31)), "?".to_owned()),
                2 => ("LW".to_owned(), "?".to_owned()),
                3 => ("?".to_owned(), format!("{}L", 1 + rng.below(7))),
                4 => (
                    "?".to_owned(),
                    format!("{}#{}", 1 + rng.below(7), 1 + rng.below(5)),
                ),
                5 => {
                    let named = ["MON-FRI", "SAT,SUN", "FRIL", "TUE#2", "sun#5"];
                    ("?".to_owned(), named[rng.below(5) as usize].to_owned())
                }
                _ => ("?".to_owned(), rng.field(1, 7)),
            };
            let days = format!("{dom} {} {dow}", rng.field(1, 12));
            let expr = format!("{} {minute} {hour} {days}", rng.below(60));
            let Ok(ours) = CronExpr::parse(&expr) else {
                // Only statically impossible days (`30W` in February) may be refused.
                assert!(
                    expr.contains('W') || expr.contains("L-"),
                    "we refused {expr}"
                );
                continue;
            };
            let reference = quartz
                .parse(&expr)
                .unwrap_or_else(|e| panic!("croner refused {expr}: {e}"));
            compared += compare(&expr, &ours, &reference, same_dst_class(&minute, &hour));
        }
        for _ in 0..1000 {
            let dom = match rng.below(6) {
                0 | 1 => rng.field(1, 31),
                2 => "L".to_owned(),
                _ => "*".to_owned(),
            };
            let dow = match rng.below(8) {
                0 | 1 => rng.field(0, 7),
                2 => format!("{}#{}", rng.below(7), 1 + rng.below(5)),
                3 => format!("{}L", rng.below(7)),
                4 => ["MON-FRI", "sat,sun", "FRI-SUN", "7"][rng.below(4) as usize].to_owned(),
                _ => "*".to_owned(),
            };
            let (minute, hour) = (rng.field(0, 59), rng.field(0, 23));
            let expr = format!("{minute} {hour} {dom} {} {dow}", rng.field(1, 12));
            let Ok(ours) = CronExpr::parse(&expr) else {
                continue;
            };
            // croner ORs the day fields unless one is exactly `*`; vixie cron (and we) also AND
            // them when one merely starts with `*` (`*/2`). croner's AND option covers that case.
            let parser =
                if dom != "*" && dow != "*" && (dom.starts_with('*') || dow.starts_with('*')) {
                    &crontab_and
                } else {
                    &crontab
                };
            let reference = parser
                .parse(&expr)
                .unwrap_or_else(|e| panic!("croner refused {expr}: {e}"));
            compared += compare(&expr, &ours, &reference, same_dst_class(&minute, &hour));
        }
        assert!(compared > 20_000, "compared {compared} series");
    }
}
