//! TEMPORARY shim with the agreed API until the Quartz engine lands (being written now).
use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use std::str::FromStr;

#[derive(Debug, Clone, PartialEq)]
pub struct CronExpr {
    source: String,
    inner: cron::Schedule,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field} (field {position}) `{token}`: {message}")]
pub struct CronError {
    pub field: &'static str,
    pub position: usize,
    pub token: String,
    pub message: String,
}

impl CronExpr {
    pub fn parse(expr: &str) -> Result<CronExpr, CronError> {
        let inner = cron::Schedule::from_str(expr).map_err(|e| CronError {
            field: "expression",
            position: 0,
            token: expr.to_owned(),
            message: e.to_string(),
        })?;
        Ok(CronExpr {
            source: expr.trim().to_owned(),
            inner,
        })
    }

    pub fn next_after(&self, after: DateTime<Utc>, tz: Tz) -> Option<DateTime<Utc>> {
        self.inner
            .after(&after.with_timezone(&tz))
            .next()
            .map(|t| t.with_timezone(&Utc))
    }

    pub fn upcoming(&self, after: DateTime<Utc>, tz: Tz, count: usize) -> Vec<DateTime<Utc>> {
        let mut out = Vec::with_capacity(count);
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

impl std::fmt::Display for CronExpr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.source)
    }
}
