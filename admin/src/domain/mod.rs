//! Validated value types and pure rules: no actix, no I/O, and of diesel only the derives that
//! declare a named-value enum a text column (its conversions are `db::column_types`). Everything
//! here is unit-tested in place.

pub mod agent;
pub mod alert;
pub mod cron;
pub mod document;
pub mod duration_histogram;
pub mod graph_cache;
pub mod id_list;
pub mod ids;
pub mod job;
pub mod policy;
pub mod role;
pub mod routing;
pub mod run_counts;
pub mod schedule;
pub mod workflow;

/// Declares a closed set of names stored as short strings in the DB and spoken in the API.
/// One mapping per enum, here, so the DB and the API can never disagree.
macro_rules! string_enum {
    ($(#[$meta:meta])* $vis:vis enum $name:ident { $($variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
        #[derive(diesel::expression::AsExpression, diesel::deserialize::FromSqlRow)]
        #[diesel(sql_type = diesel::sql_types::Text)]
        $vis enum $name {
            $(#[serde(rename = $text)] $variant),+
        }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }

            /// The accepted names, for error messages.
            pub fn names() -> String {
                [$($text),+].join(", ")
            }
        }

        impl std::str::FromStr for $name {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                match s {
                    $($text => Ok($name::$variant),)+
                    other => Err(format!("unknown value `{}`; expected one of: {}", other, Self::names())),
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}
pub(crate) use string_enum;
