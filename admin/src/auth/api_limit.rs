//! The open API's request limits: a leaky bucket per caller, sized by the caller's role, and a
//! second, smaller one for the requests that submit or start runs. A caller is an API token
//! (each token its own bucket), a user (JWT), or, for a request without a valid credential,
//! its client address (an IPv6 client counts per /64). The windows are one minute.
//!
//! A trigger counts against both of its caller's buckets, so the trigger limit is a part of the
//! request limit. A refused request is charged to neither: a client that keeps asking while it
//! is limited gets its quota back on time all the same.
//!
//! Invariant: memory is bounded: each (role, class) has its own `bucket::Table` of
//! `capacity` keys, so a flood of anonymous addresses evicts other anonymous entries only,
//! never a user's or a token's bucket.
//! Invariant: checking and charging are one step under one lock, so N parallel requests of
//! a caller with room for `k` let at most `k` through.

use std::fmt::Write;

use super::bucket::{Keyed, Table, client_bucket};
use crate::domain::role::Role;

/// Every limit counts per minute (the config keys say so).
pub const WINDOW_MS: i64 = 60_000;

/// One number per role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PerRole {
    pub admin: u32,
    pub operator: u32,
    pub viewer: u32,
}

impl PerRole {
    pub fn of(&self, role: Role) -> u32 {
        match role {
            Role::Admin => self.admin,
            Role::Operator => self.operator,
            Role::Viewer => self.viewer,
        }
    }
}

/// The limiter's settings (from the `api_*_per_minute_*` config keys); 0 means unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiLimits {
    /// Requests of any kind per minute, by the caller's (effective) role.
    pub requests: PerRole,
    /// Requests that create jobs or workflows or start runs, per minute, by role.
    pub triggers: PerRole,
    /// Requests per minute from one client address that carry no valid credential.
    pub anonymous: u32,
    /// Keys remembered per (role, class) table.
    pub capacity: usize,
}

/// Which limit a request counts against besides the general one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    General,
    /// Submits and triggers: the requests that create jobs or workflows or start runs.
    Trigger,
}

impl Class {
    /// The policy's name in the `RateLimit` fields and the metric's `class` label.
    pub fn as_str(self) -> &'static str {
        match self {
            Class::General => "general",
            Class::Trigger => "trigger",
        }
    }
}

/// Whose bucket a request is charged to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subject<'a> {
    Token {
        id: i64,
        role: Role,
    },
    User {
        id: i64,
        role: Role,
    },
    /// No valid credential: the client address.
    Client(&'a str),
}

impl Subject<'_> {
    pub fn role(&self) -> Option<Role> {
        match self {
            Subject::Token { role, .. } | Subject::User { role, .. } => Some(*role),
            Subject::Client(_) => None,
        }
    }

    /// The metric's `role` label.
    pub fn role_label(&self) -> &'static str {
        self.role().map_or("anonymous", Role::as_str)
    }
}

/// One limit's state after a request, as the `RateLimit` fields tell it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quota {
    pub class: Class,
    /// Requests per window.
    pub limit: u32,
    /// Requests that still fit now.
    pub remaining: u64,
    /// Seconds until the whole quota is back (the bucket drained).
    pub reset_s: u64,
}

/// The answer to one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// The limits that apply (none when unlimited), general first.
    pub quotas: Vec<Quota>,
    /// When refused: the class whose limit is reached and the whole seconds (≥ 1) until one
    /// more request fits.
    pub refused: Option<(Class, u64)>,
}

impl Verdict {
    /// The `RateLimit-Policy` field: `"general";q=600;w=60, "trigger";q=120;w=60`.
    pub fn policy_field(&self) -> Option<String> {
        self.field(|q, out| {
            let _ = write!(
                out,
                "\"{}\";q={};w={}",
                q.class.as_str(),
                q.limit,
                WINDOW_MS / 1000
            );
        })
    }

    /// The `RateLimit` field: `"general";r=599;t=1, "trigger";r=119;t=1`.
    pub fn limit_field(&self) -> Option<String> {
        self.field(|q, out| {
            let _ = write!(
                out,
                "\"{}\";r={};t={}",
                q.class.as_str(),
                q.remaining,
                q.reset_s
            );
        })
    }

    fn field(&self, item: impl Fn(&Quota, &mut String)) -> Option<String> {
        let mut out = String::new();
        for q in &self.quotas {
            if !out.is_empty() {
                out.push_str(", ");
            }
            item(q, &mut out);
        }
        (!out.is_empty()).then_some(out)
    }
}

/// Rows of tables by tier (admin, operator, viewer, anonymous), columns by class.
type Tables = [[Option<Table>; 2]; 4];

fn tier(role: Option<Role>) -> usize {
    match role {
        Some(Role::Admin) => 0,
        Some(Role::Operator) => 1,
        Some(Role::Viewer) => 2,
        None => 3,
    }
}

/// The limiter. One lock guards every table, so checking and charging is one step.
#[derive(Debug)]
pub struct ApiLimiter {
    limits: ApiLimits,
    tables: Keyed<Tables>,
}

impl ApiLimiter {
    pub fn new(limits: ApiLimits) -> Self {
        let table = |limit: u32| (limit > 0).then(|| Table::new(limit, WINDOW_MS));
        let row = |role: Role| {
            [
                table(limits.requests.of(role)),
                table(limits.triggers.of(role)),
            ]
        };
        Self {
            tables: Keyed::new([
                row(Role::Admin),
                row(Role::Operator),
                row(Role::Viewer),
                [table(limits.anonymous), None],
            ]),
            limits,
        }
    }

    fn key(&self, subject: &Subject<'_>) -> u64 {
        match subject {
            Subject::Token { id, .. } => self.tables.key(("token", id)),
            Subject::User { id, .. } => self.tables.key(("user", id)),
            Subject::Client(ip) => self.tables.key(("client", client_bucket(ip))),
        }
    }

    fn limit(&self, role: Option<Role>, class: Class) -> u32 {
        match (role, class) {
            (Some(role), Class::General) => self.limits.requests.of(role),
            (Some(role), Class::Trigger) => self.limits.triggers.of(role),
            (None, Class::General) => self.limits.anonymous,
            (None, Class::Trigger) => 0,
        }
    }

    /// Checks the buckets a request of `class` by `subject` counts against and, when every
    /// one has room, charges one unit to each.
    pub fn check(&self, subject: &Subject<'_>, class: Class, now_ms: i64) -> Verdict {
        let role = subject.role();
        let key = self.key(subject);
        let classes: &[Class] = match class {
            Class::General => &[Class::General],
            Class::Trigger => &[Class::General, Class::Trigger],
        };
        let capacity = self.limits.capacity.max(1);
        let mut tables = self.tables.lock();
        let row = &mut tables[tier(role)];
        let mut refused: Option<(Class, i64)> = None;
        for &c in classes {
            if let Some(wait) = row[c as usize]
                .as_ref()
                .and_then(|t| t.wait_ms(key, now_ms))
                && refused.is_none_or(|(_, longest)| wait >= longest)
            {
                refused = Some((c, wait));
            }
        }
        if refused.is_none() {
            for &c in classes {
                if let Some(t) = row[c as usize].as_mut() {
                    t.add(key, 1.0, now_ms, capacity);
                }
            }
        }
        let quotas = classes
            .iter()
            .filter_map(|&c| {
                let t = row[c as usize].as_ref()?;
                Some(Quota {
                    class: c,
                    limit: self.limit(role, c),
                    remaining: t.remaining(key, now_ms),
                    reset_s: whole_seconds(t.empty_in_ms(key, now_ms)),
                })
            })
            .collect();
        Verdict {
            quotas,
            refused: refused.map(|(c, wait)| (c, whole_seconds(wait).max(1))),
        }
    }

    /// Keys held over all tables, for tests.
    pub fn keys_held(&self) -> usize {
        self.tables
            .lock()
            .iter()
            .flatten()
            .flatten()
            .map(Table::keys_held)
            .sum()
    }
}

/// Milliseconds rounded up to whole seconds.
fn whole_seconds(ms: i64) -> u64 {
    u64::try_from(ms).unwrap_or(0).div_ceil(1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> ApiLimits {
        ApiLimits {
            requests: PerRole {
                admin: 0,
                operator: 6,
                viewer: 3,
            },
            triggers: PerRole {
                admin: 0,
                operator: 2,
                viewer: 1,
            },
            anonymous: 2,
            capacity: 100,
        }
    }

    const OPERATOR: Subject<'static> = Subject::User {
        id: 7,
        role: Role::Operator,
    };

    #[test]
    fn triggers_hit_their_own_limit_and_recover() {
        let l = ApiLimiter::new(limits());
        for remaining in [1, 0] {
            let v = l.check(&OPERATOR, Class::Trigger, 0);
            assert_eq!(v.refused, None);
            assert_eq!(v.quotas[1].remaining, remaining, "{v:?}");
        }
        let refused = l.check(&OPERATOR, Class::Trigger, 0);
        // Two triggers per minute: one drains every 30 s.
        assert_eq!(refused.refused, Some((Class::Trigger, 30)));
        assert_eq!(
            refused.quotas[0].remaining, 4,
            "the refusal was not charged"
        );
        assert_eq!(
            refused.limit_field().as_deref(),
            Some("\"general\";r=4;t=20, \"trigger\";r=0;t=60")
        );
        assert_eq!(
            refused.policy_field().as_deref(),
            Some("\"general\";q=6;w=60, \"trigger\";q=2;w=60")
        );
        assert_eq!(
            l.check(&OPERATOR, Class::General, 0).refused,
            None,
            "other requests still pass"
        );
        assert_eq!(
            l.check(&OPERATOR, Class::Trigger, 29_999)
                .refused
                .map(|r| r.0),
            Some(Class::Trigger)
        );
        assert_eq!(l.check(&OPERATOR, Class::Trigger, 30_000).refused, None);
        assert_eq!(
            l.check(&OPERATOR, Class::Trigger, 120_000).quotas[1].remaining,
            1
        );
    }

    #[test]
    fn the_general_limit_covers_triggers_and_the_longer_wait_is_told() {
        let l = ApiLimiter::new(limits());
        let viewer = Subject::Token {
            id: 1,
            role: Role::Viewer,
        };
        assert_eq!(l.check(&viewer, Class::Trigger, 0).refused, None);
        for _ in 0..2 {
            assert_eq!(l.check(&viewer, Class::General, 0).refused, None);
        }
        // Both are full: general frees a unit in 20 s, trigger in 60 s.
        assert_eq!(
            l.check(&viewer, Class::Trigger, 0).refused,
            Some((Class::Trigger, 60))
        );
        assert_eq!(
            l.check(&viewer, Class::General, 0).refused,
            Some((Class::General, 20))
        );
    }

    #[test]
    fn callers_have_their_own_buckets_and_roles_their_own_sizes() {
        let l = ApiLimiter::new(limits());
        for _ in 0..3 {
            let _ = l.check(&OPERATOR, Class::Trigger, 0);
        }
        assert!(l.check(&OPERATOR, Class::Trigger, 0).refused.is_some());
        let same_user_token = Subject::Token {
            id: 7,
            role: Role::Operator,
        };
        let other_user = Subject::User {
            id: 8,
            role: Role::Operator,
        };
        assert_eq!(l.check(&same_user_token, Class::Trigger, 0).refused, None);
        assert_eq!(l.check(&other_user, Class::Trigger, 0).refused, None);
        let admin = Subject::User {
            id: 9,
            role: Role::Admin,
        };
        for _ in 0..1000 {
            let v = l.check(&admin, Class::Trigger, 0);
            assert!(v.refused.is_none() && v.quotas.is_empty(), "0 is unlimited");
        }
        assert_eq!(l.check(&admin, Class::General, 0).limit_field(), None);
    }

    #[test]
    fn anonymous_requests_count_per_address() {
        let l = ApiLimiter::new(limits());
        for ip in ["10.0.0.1", "10.0.0.1", "2001:db8:1:2::1", "2001:db8:1:2::2"] {
            assert_eq!(
                l.check(&Subject::Client(ip), Class::General, 0).refused,
                None
            );
        }
        for ip in ["10.0.0.1", "2001:db8:1:2::3"] {
            let v = l.check(&Subject::Client(ip), Class::Trigger, 0);
            assert_eq!(v.refused, Some((Class::General, 30)), "{ip}");
            assert_eq!(
                v.quotas.len(),
                1,
                "anonymous callers have no trigger bucket"
            );
        }
        assert_eq!(
            l.check(&Subject::Client("10.0.0.2"), Class::General, 0)
                .refused,
            None
        );
        assert_eq!(Subject::Client("x").role_label(), "anonymous");
        assert_eq!(OPERATOR.role_label(), "operator");
    }

    #[test]
    fn a_flood_of_addresses_stays_bounded_and_spares_users() {
        let l = ApiLimiter::new(ApiLimits {
            capacity: 50,
            ..limits()
        });
        for _ in 0..2 {
            let _ = l.check(&OPERATOR, Class::Trigger, 0);
        }
        for n in 0..10_000 {
            let ip = format!("10.{}.{}.1", n / 256, n % 256);
            let _ = l.check(&Subject::Client(&ip), Class::General, 1);
        }
        assert!(l.keys_held() <= 50 + 2, "{}", l.keys_held());
        assert!(l.check(&OPERATOR, Class::Trigger, 2).refused.is_some());
    }
}
