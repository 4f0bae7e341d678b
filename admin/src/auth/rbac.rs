//! Who is calling and what they may do. Only a successful check here produces a proof
//! (`AdminProof`, `GroupWrite`). The writes of a group's jobs (`db::job::insert`, `update`,
//! `delete`) take a `GroupWrite` for that group, so the compiler refuses a path that would
//! change a job without the grant having been checked.

use crate::domain::ids::GroupId;
use crate::domain::role::Role;
use crate::error::Error;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ActorKind {
    User,
    /// An API token acting for its owner, with at most the owner's role.
    Token {
        token_id: i64,
    },
    /// The process itself: CLI bootstrap, background workers.
    System,
}

impl ActorKind {
    pub fn as_str(&self) -> &'static str {
        match self {
            ActorKind::User => "user",
            ActorKind::Token { .. } => "token",
            ActorKind::System => "system",
        }
    }
}

/// An authenticated caller with its effective role and group grants.
#[derive(Debug, Clone)]
pub struct Actor {
    pub kind: ActorKind,
    pub user_id: Option<i64>,
    pub name: String,
    pub role: Role,
    /// Groups granted to a non-admin; ignored for admins, who see everything.
    pub groups: Vec<GroupId>,
    pub ip: String,
    pub request_id: String,
}

/// Proof that the caller is an admin.
#[derive(Debug, Clone)]
pub struct AdminProof(());

/// Proof that the caller may change jobs (including commands and scripts) of one group.
#[derive(Debug)]
pub struct GroupWrite {
    group_id: GroupId,
}

impl GroupWrite {
    pub fn group_id(&self) -> GroupId {
        self.group_id
    }
}

impl Actor {
    pub fn system(name: &str) -> Self {
        Self {
            kind: ActorKind::System,
            user_id: None,
            name: name.to_owned(),
            role: Role::Admin,
            groups: Vec::new(),
            ip: "local".into(),
            request_id: String::new(),
        }
    }

    pub fn is_admin(&self) -> bool {
        self.role == Role::Admin
    }

    /// # Errors
    /// `Forbidden` unless the caller is an admin.
    pub fn require_admin(&self) -> Result<AdminProof, Error> {
        if self.is_admin() {
            Ok(AdminProof(()))
        } else {
            Err(Error::Forbidden("this action needs the admin role".into()))
        }
    }

    /// The groups this caller may read: `None` means all of them.
    pub fn visible_groups(&self) -> Option<Vec<GroupId>> {
        if self.is_admin() {
            None
        } else {
            Some(self.groups.clone())
        }
    }

    /// Whether anything of the group may be shown to this caller. Objects of a group it cannot
    /// see must answer exactly like objects that do not exist (services turn `false` into their
    /// `NotFound`), so a 403 never confirms that someone else's job or run exists.
    pub fn sees_group(&self, group_id: GroupId) -> bool {
        self.is_admin() || self.groups.contains(&group_id)
    }

    /// The right to make something of the caller's refer to an object of `group_id` so that the
    /// object is acted on later without the caller (a child job today, a workflow node later):
    /// it is write access to the referenced group, because the reference runs that group's
    /// jobs on that group's agents. Callers must first hide objects the caller cannot see
    /// (`sees_group`), since this check's `Forbidden` confirms that the object exists.
    ///
    /// # Errors
    /// `Forbidden` as [`Actor::write_group`].
    pub fn reference_group(&self, group_id: GroupId) -> Result<GroupWrite, Error> {
        self.write_group(group_id)
    }

    /// # Errors
    /// `Forbidden` when the group is not granted to a non-admin.
    pub fn read_group(&self, group_id: GroupId) -> Result<(), Error> {
        if self.is_admin() || self.groups.contains(&group_id) {
            Ok(())
        } else {
            Err(Error::Forbidden(format!(
                "no access to executor group {group_id}"
            )))
        }
    }

    /// # Errors
    /// `Forbidden` for viewers, and for operators without a grant on the group.
    pub fn write_group(&self, group_id: GroupId) -> Result<GroupWrite, Error> {
        match self.role {
            Role::Admin => Ok(GroupWrite { group_id }),
            Role::Operator if self.groups.contains(&group_id) => Ok(GroupWrite { group_id }),
            Role::Operator => Err(Error::Forbidden(format!(
                "no write access to executor group {group_id}"
            ))),
            Role::Viewer => Err(Error::Forbidden("the viewer role is read-only".into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn actor(role: Role, groups: &[GroupId]) -> Actor {
        Actor {
            role,
            groups: groups.to_vec(),
            ..Actor::system("t")
        }
    }

    #[test]
    fn the_role_matrix() {
        let admin = actor(Role::Admin, &[]);
        let operator = actor(Role::Operator, &[GroupId(1)]);
        let viewer = actor(Role::Viewer, &[GroupId(1)]);
        assert!(admin.require_admin().is_ok());
        assert!(operator.require_admin().is_err());
        assert!(admin.write_group(GroupId(9)).is_ok());
        assert_eq!(
            operator.write_group(GroupId(1)).unwrap().group_id(),
            GroupId(1)
        );
        assert!(operator.write_group(GroupId(2)).is_err());
        assert!(viewer.write_group(GroupId(1)).is_err());
        assert!(viewer.read_group(GroupId(1)).is_ok());
        assert!(viewer.read_group(GroupId(2)).is_err());
        assert!(
            admin.sees_group(GroupId(9))
                && viewer.sees_group(GroupId(1))
                && operator.sees_group(GroupId(1))
        );
        assert!(!viewer.sees_group(GroupId(2)) && !operator.sees_group(GroupId(2)));
        assert!(admin.reference_group(GroupId(9)).is_ok());
        assert!(operator.reference_group(GroupId(1)).is_ok());
        assert!(operator.reference_group(GroupId(2)).is_err());
        assert!(
            viewer.reference_group(GroupId(1)).is_err(),
            "seeing is not referencing"
        );
        assert_eq!(admin.visible_groups(), None);
        assert_eq!(viewer.visible_groups(), Some(vec![GroupId(1)]));
    }
}
