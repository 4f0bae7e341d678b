//! Schedules and their next fire time. Fire times are UTC milliseconds; a job's time zone is
//! applied only inside cron evaluation.

use chrono::{DateTime, TimeZone, Utc};
use chrono_tz::Tz;

use super::cron::CronExpr;
use super::string_enum;
use crate::clock::UnixMillis;
use crate::error::{Code, Error};

string_enum! {
    pub enum ScheduleType {
        None => "none",
        Cron => "cron",
        FixedRate => "fixed_rate",
        Once => "once",
    }
}

/// The longest fixed-rate interval accepted: a year. Longer belongs in a cron expression.
pub const MAX_INTERVAL_S: i64 = 366 * 24 * 3600;

#[derive(Debug, Clone, PartialEq)]
pub enum Schedule {
    None,
    Cron(Box<CronExpr>),
    FixedRate { interval_s: i64 },
    Once { at_ms: UnixMillis },
}

/// Parses an IANA zone name; the error names the field so forms and the API can point at it.
///
/// # Errors
/// `invalid_timezone` for names chrono-tz does not know.
pub fn parse_timezone(field: &str, name: &str) -> Result<Tz, Error> {
    name.parse::<Tz>().map_err(|_| {
        Error::invalid_as(
            Code::InvalidTimezone,
            field,
            format!(
                "unknown time zone `{}`; use an IANA name such as UTC or Europe/Berlin",
                truncate(name, 64)
            ),
        )
    })
}

/// Parses a cron expression; the error says which field is wrong and why.
///
/// # Errors
/// `invalid_cron` with the engine's field-level message.
pub fn parse_cron(field: &str, expr: &str) -> Result<CronExpr, Error> {
    CronExpr::parse(expr).map_err(|e| Error::invalid_as(Code::InvalidCron, field, e.to_string()))
}

/// A schedule as stored in a row's columns (a job's or a workflow's), as the scheduler plans
/// it. Stored rows were validated when written; `Err` names the part that no longer parses.
///
/// # Errors
/// The name of the column that does not parse (`time zone`, `cron`, `interval`, `time`).
pub fn from_stored(
    kind: ScheduleType,
    expr: Option<&str>,
    interval_s: Option<i64>,
    once_at_ms: Option<i64>,
    timezone: &str,
) -> Result<(Schedule, Tz), &'static str> {
    let tz = parse_timezone("schedule.timezone", timezone).map_err(|_| "time zone")?;
    let schedule = match kind {
        ScheduleType::None => Schedule::None,
        ScheduleType::Cron => Schedule::Cron(Box::new(
            parse_cron("schedule.expr", expr.unwrap_or("")).map_err(|_| "cron")?,
        )),
        ScheduleType::FixedRate => Schedule::FixedRate {
            interval_s: interval_s.ok_or("interval")?,
        },
        ScheduleType::Once => Schedule::Once {
            at_ms: once_at_ms.ok_or("time")?,
        },
    };
    Ok((schedule, tz))
}

fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_owned()
    } else {
        format!("{}…", s.chars().take(max).collect::<String>())
    }
}

fn to_utc(ms: UnixMillis) -> Option<DateTime<Utc>> {
    Utc.timestamp_millis_opt(ms).single()
}

impl Schedule {
    pub fn kind(&self) -> ScheduleType {
        match self {
            Schedule::None => ScheduleType::None,
            Schedule::Cron(_) => ScheduleType::Cron,
            Schedule::FixedRate { .. } => ScheduleType::FixedRate,
            Schedule::Once { .. } => ScheduleType::Once,
        }
    }

    /// The first fire time strictly after `after_ms`, or `None` when the schedule never fires again.
    ///
    /// Fixed-rate fires are anchored at `anchor_ms` (the job's creation or last change), so they
    /// do not drift by the time a fire takes to dispatch.
    pub fn next_after(
        &self,
        after_ms: UnixMillis,
        anchor_ms: UnixMillis,
        tz: Tz,
    ) -> Option<UnixMillis> {
        match self {
            Schedule::None => None,
            Schedule::Cron(expr) => expr
                .next_after(to_utc(after_ms)?, tz)
                .map(|t| t.timestamp_millis()),
            Schedule::FixedRate { interval_s } => {
                let step = interval_s.checked_mul(1000)?;
                if step <= 0 {
                    return None;
                }
                if after_ms < anchor_ms {
                    return Some(anchor_ms);
                }
                let periods = (after_ms - anchor_ms) / step + 1;
                anchor_ms.checked_add(periods.checked_mul(step)?)
            }
            Schedule::Once { at_ms } => (*at_ms > after_ms).then_some(*at_ms),
        }
    }

    /// The next `count` fire times after `after_ms`.
    pub fn upcoming(
        &self,
        after_ms: UnixMillis,
        anchor_ms: UnixMillis,
        tz: Tz,
        count: usize,
    ) -> Vec<UnixMillis> {
        let mut out = Vec::with_capacity(count);
        let mut cursor = after_ms;
        while out.len() < count {
            match self.next_after(cursor, anchor_ms, tz) {
                Some(next) => {
                    out.push(next);
                    cursor = next;
                }
                None => break,
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_rate_is_anchored_and_strictly_after() {
        let s = Schedule::FixedRate { interval_s: 10 };
        assert_eq!(s.next_after(0, 1_000, Tz::UTC), Some(1_000));
        assert_eq!(s.next_after(1_000, 1_000, Tz::UTC), Some(11_000));
        assert_eq!(s.next_after(10_999, 1_000, Tz::UTC), Some(11_000));
        assert_eq!(
            s.upcoming(1_000, 1_000, Tz::UTC, 3),
            vec![11_000, 21_000, 31_000]
        );
    }

    #[test]
    fn once_fires_only_in_the_future() {
        let s = Schedule::Once { at_ms: 5_000 };
        assert_eq!(s.next_after(4_999, 0, Tz::UTC), Some(5_000));
        assert_eq!(s.next_after(5_000, 0, Tz::UTC), None);
        assert_eq!(Schedule::None.next_after(0, 0, Tz::UTC), None);
    }

    #[test]
    fn cron_uses_the_time_zone() {
        let expr = parse_cron("schedule.expr", "0 0 9 * * ?").unwrap();
        let tz = parse_timezone("schedule.timezone", "Asia/Shanghai").unwrap();
        // 2026-01-01T00:00:00Z is 08:00 in Shanghai; the next 09:00 there is 01:00Z.
        let start = Utc
            .with_ymd_and_hms(2026, 1, 1, 0, 0, 0)
            .unwrap()
            .timestamp_millis();
        let next = Schedule::Cron(Box::new(expr))
            .next_after(start, 0, tz)
            .unwrap();
        assert_eq!(next - start, 3_600_000);
    }

    #[test]
    fn bad_zone_and_cron_name_the_field() {
        let err = parse_timezone("schedule.timezone", "Mars/Olympus").unwrap_err();
        assert_eq!(err.code(), Code::InvalidTimezone);
        assert_eq!(err.field(), Some("schedule.timezone"));
        let err = parse_cron("schedule.expr", "0 0 25 * * ?").unwrap_err();
        assert_eq!(err.code(), Code::InvalidCron);
    }
}
