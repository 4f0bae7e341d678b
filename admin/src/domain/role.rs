//! Roles and what each may do. The checks that produce proofs live in `auth::rbac`.

use super::string_enum;

string_enum! {
    /// `admin` does everything; `operator` manages jobs of granted groups; `viewer` reads granted groups.
    pub enum Role {
        Admin => "admin",
        Operator => "operator",
        Viewer => "viewer",
    }
}

impl Role {
    fn rank(self) -> u8 {
        match self {
            Role::Viewer => 0,
            Role::Operator => 1,
            Role::Admin => 2,
        }
    }

    /// The weaker of two roles: an API token never holds more than its owner.
    pub fn min(self, other: Role) -> Role {
        if self.rank() <= other.rank() {
            self
        } else {
            other
        }
    }

    pub fn at_least(self, other: Role) -> bool {
        self.rank() >= other.rank()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_order_and_parse() {
        assert_eq!(Role::Admin.min(Role::Viewer), Role::Viewer);
        assert_eq!(Role::Operator.min(Role::Admin), Role::Operator);
        assert!(Role::Admin.at_least(Role::Operator));
        assert!(!Role::Viewer.at_least(Role::Operator));
        assert_eq!("operator".parse::<Role>(), Ok(Role::Operator));
        assert!(
            "root"
                .parse::<Role>()
                .unwrap_err()
                .contains("admin, operator, viewer")
        );
    }
}
