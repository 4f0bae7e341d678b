//! Lists stored as comma-separated text (`job.children`, `job.alert_channels`,
//! `executor_group.addresses`). The row holds the parsed list; a stored part that does not
//! parse is one deserialization error naming the column's type and the part (see
//! `db::column_types`), never silently dropped.

use std::fmt::Display;
use std::str::FromStr;

use super::ids::{ChannelId, JobId};

/// A list kept in one text column, its items separated by commas.
#[derive(
    Debug,
    Clone,
    PartialEq,
    Eq,
    Default,
    serde::Serialize,
    diesel::expression::AsExpression,
    diesel::deserialize::FromSqlRow,
)]
#[diesel(sql_type = diesel::sql_types::Text)]
#[serde(transparent)]
pub struct CommaList<T>(pub Vec<T>);

/// `job.children`.
pub type JobIds = CommaList<JobId>;
/// `job.alert_channels`.
pub type ChannelIds = CommaList<ChannelId>;
/// `executor_group.addresses` (manual mode).
pub type Addresses = CommaList<String>;

impl<T: Display> CommaList<T> {
    /// The stored form.
    pub fn to_text(&self) -> String {
        self.0
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(",")
    }
}

impl<T: FromStr> CommaList<T> {
    /// Parses the stored form; the error names the part that is not a `T`.
    ///
    /// # Errors
    /// When a non-empty part does not parse.
    pub fn parse(text: &str) -> Result<Self, String> {
        text.split(',')
            .map(str::trim)
            .filter(|part| !part.is_empty())
            .map(|part| part.parse().map_err(|_| format!("`{part}` in `{text}`")))
            .collect::<Result<Vec<T>, String>>()
            .map(CommaList)
    }
}

impl<T> From<Vec<T>> for CommaList<T> {
    fn from(items: Vec<T>) -> Self {
        CommaList(items)
    }
}

impl<T> std::ops::Deref for CommaList<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_names_junk() {
        let ids = JobIds::from(vec![JobId(3), JobId(1), JobId(2)]);
        assert_eq!(JobIds::parse(&ids.to_text()).unwrap(), ids);
        assert_eq!(
            JobIds::parse(" 4, 5 ,").unwrap().0,
            vec![JobId(4), JobId(5)]
        );
        assert!(JobIds::parse("").unwrap().is_empty());
        let err = JobIds::parse("4,x,5").unwrap_err();
        assert!(err.contains("`x`"), "{err}");
        let urls = Addresses::parse("http://a:1/,http://b:2/").unwrap();
        assert_eq!(urls.to_text(), "http://a:1/,http://b:2/");
    }
}
