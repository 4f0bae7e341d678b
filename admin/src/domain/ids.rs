//! Row ids as their own types, so a run id can never be passed where a job id belongs: the
//! compiler refuses `db::job::get(conn, run.id)`. On the wire and in the database each is the
//! plain integer it wraps (`serde(transparent)`, a `BigInt` column; conversions in
//! `db::column_types`).

macro_rules! id_type {
    ($($(#[$meta:meta])* $name:ident;)+) => {$(
        $(#[$meta])*
        #[derive(
            Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash,
            serde::Serialize, serde::Deserialize, utoipa::ToSchema,
            diesel::expression::AsExpression, diesel::deserialize::FromSqlRow,
        )]
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        #[serde(transparent)]
        pub struct $name(pub i64);

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                self.0.fmt(f)
            }
        }

        impl std::str::FromStr for $name {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                s.trim()
                    .parse()
                    .map($name)
                    .map_err(|_| format!("`{s}` is not an id"))
            }
        }

        impl From<$name> for i64 {
            fn from(id: $name) -> i64 {
                id.0
            }
        }
    )+};
}

id_type! {
    /// `job.id`.
    JobId;
    /// `job_run.id`; the agent protocol calls it `logId`.
    RunId;
    /// `executor_group.id`.
    GroupId;
    /// `alert_channel.id`.
    ChannelId;
    /// `workflow.id`.
    WorkflowId;
    /// `workflow_run.id`.
    WorkflowRunId;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_plain_integers_on_the_wire() {
        assert_eq!(serde_json::to_string(&JobId(7)).unwrap(), "7");
        assert_eq!(serde_json::from_str::<RunId>("42").unwrap(), RunId(42));
        assert!(serde_json::from_str::<GroupId>("\"x\"").is_err());
        assert_eq!(" 9 ".parse::<JobId>(), Ok(JobId(9)));
        assert!("nine".parse::<JobId>().unwrap_err().contains("nine"));
    }
}
