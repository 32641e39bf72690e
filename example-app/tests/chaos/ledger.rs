//! The ledger of acknowledged writes, and what the databases hold.
//!
//! - *Lost*: an acknowledged write whose effect is not in its silo (the
//!   region's organization, Control's user), or whose audit event never
//!   reached Control.
//! - *Stale*: a replica that differs from its source once the outboxes
//!   should have delivered (Control's organization mappings against each
//!   region's organizations, each region's user replicas against Control's
//!   users), unacknowledged writes included.
//! - *Duplicated*: an audit event recorded more than once.
//!
//! A write that got no acknowledgement (the connection broke, a 5xx) may or
//! may not have committed: either outcome is allowed, but only until the
//! next acknowledged write of the same object.

use std::collections::BTreeMap;

use sea_orm::DatabaseConnection;

use crate::postgres::query_all;

/// An organization as its writers know it.
struct Organization {
    slug: String,
    /// Its name after the last acknowledged write; `None` once deleted.
    confirmed: Option<String>,
    /// What unacknowledged writes since then may have left.
    possible: Vec<Option<String>>,
}

struct User {
    email: String,
    confirmed: String,
    possible: Vec<String>,
}

/// Every acknowledged write, and the unacknowledged ones after them.
#[derive(Default)]
pub struct Ledger {
    organizations: BTreeMap<i64, Organization>,
    users: BTreeMap<i64, User>,
    /// Acknowledged memberships: id → (organization, user).
    members: BTreeMap<i64, (i64, i64)>,
    /// Audit events that acknowledged writes made: (organization, action,
    /// detail).
    audits: Vec<(i64, &'static str, String)>,
}

impl Ledger {
    pub fn organization_created(&mut self, id: i64, slug: &str, name: &str) {
        self.organizations.insert(
            id,
            Organization {
                slug: slug.to_owned(),
                confirmed: Some(name.to_owned()),
                possible: Vec::new(),
            },
        );
        self.audits
            .push((id, "organization.create", format!("created {slug}")));
    }

    pub fn organization_renamed(&mut self, id: i64, slug: &str, name: &str, acknowledged: bool) {
        let organization = self.organizations.get_mut(&id).unwrap();
        if acknowledged {
            organization.confirmed = Some(name.to_owned());
            organization.possible.clear();
            self.audits
                .push((id, "organization.update", format!("now {name} ({slug})")));
        } else {
            organization.possible.push(Some(name.to_owned()));
        }
    }

    pub fn organization_deleted(&mut self, id: i64, slug: &str, acknowledged: bool) {
        let organization = self.organizations.get_mut(&id).unwrap();
        if acknowledged {
            organization.confirmed = None;
            organization.possible.clear();
            self.audits
                .push((id, "organization.delete", format!("deleted {slug}")));
        } else {
            organization.possible.push(None);
        }
    }

    pub fn member_added(&mut self, id: i64, organization: i64, user: i64) {
        self.members.insert(id, (organization, user));
    }

    pub fn user_created(&mut self, id: i64, email: &str, name: &str) {
        self.users.insert(
            id,
            User {
                email: email.to_owned(),
                confirmed: name.to_owned(),
                possible: Vec::new(),
            },
        );
    }

    pub fn user_renamed(&mut self, id: i64, name: &str, acknowledged: bool) {
        let user = self.users.get_mut(&id).unwrap();
        if acknowledged {
            user.confirmed = name.to_owned();
            user.possible.clear();
        } else {
            user.possible.push(name.to_owned());
        }
    }

    /// Acknowledged writes whose effect `snapshot` does not hold.
    pub fn lost(&self, snapshot: &Snapshot) -> Vec<String> {
        let mut lost = Vec::new();
        for (id, organization) in &self.organizations {
            let actual = snapshot
                .organizations
                .values()
                .find_map(|rows| rows.get(id))
                .map(|(slug, name)| {
                    assert_eq!(slug, &organization.slug, "organization {id}");
                    name.clone()
                });
            let allowed = std::iter::once(&organization.confirmed)
                .chain(&organization.possible)
                .any(|state| *state == actual);
            if !allowed {
                lost.push(format!(
                    "organization {id}: {actual:?}, acknowledged {:?}",
                    organization.confirmed
                ));
            }
        }
        for (id, user) in &self.users {
            match snapshot.users.get(id) {
                Some((email, name))
                    if *email == user.email
                        && (*name == user.confirmed || user.possible.contains(name)) => {}
                actual => lost.push(format!(
                    "user {id}: {actual:?}, acknowledged {}",
                    user.confirmed
                )),
            }
        }
        // A membership goes with its organization.
        for (id, (organization, user)) in &self.members {
            let region = snapshot
                .organizations
                .iter()
                .find(|(_, rows)| rows.contains_key(organization))
                .map(|(region, _)| region);
            if let Some(region) = region {
                let expected = (format!("{organization}/{user}"), "member".to_owned());
                if snapshot.members[region].get(id) != Some(&expected) {
                    lost.push(format!(
                        "member {id} of organization {organization} in {region}"
                    ));
                }
            }
        }
        for (id, action, detail) in &self.audits {
            let key = (*id, (*action).to_owned(), detail.clone());
            if !snapshot.audits.contains_key(&key) {
                lost.push(format!("audit event {key:?}"));
            }
        }
        lost
    }
}

type Rows = BTreeMap<i64, (String, String)>;

/// What the three databases hold.
#[derive(Debug, Default)]
pub struct Snapshot {
    /// Each region's organizations: id → (slug, name).
    pub organizations: BTreeMap<String, Rows>,
    /// Control's organization mappings of each region.
    pub mappings: BTreeMap<String, Rows>,
    /// Control's users: id → (email, name).
    pub users: Rows,
    /// Each region's user replicas.
    pub replicas: BTreeMap<String, Rows>,
    /// Each region's memberships: id → ("organization/user", role).
    pub members: BTreeMap<String, Rows>,
    /// Control's membership mappings of each region.
    pub member_mappings: BTreeMap<String, Rows>,
    /// Outbox rows not yet delivered, in all silos.
    pub pending: i64,
    /// Control's audit events, counted: (organization, action, detail).
    pub audits: BTreeMap<(i64, String, String), i64>,
}

impl Snapshot {
    /// Reads the databases, `dbs` in `silos::SILOS` order, with the audit
    /// log when `audits`.
    pub async fn take(dbs: &[DatabaseConnection], audits: bool) -> Self {
        let mut snapshot = Snapshot::default();
        let pairs = |rows: Vec<sea_orm::QueryResult>, a: &str, b: &str| -> Rows {
            rows.into_iter()
                .map(|row| {
                    (
                        row.try_get::<i64>("", "id").unwrap(),
                        (
                            row.try_get::<String>("", a).unwrap(),
                            row.try_get::<String>("", b).unwrap(),
                        ),
                    )
                })
                .collect()
        };
        let control = &dbs[0];
        snapshot.users = pairs(
            query_all(control, "SELECT id, email, name FROM users").await,
            "email",
            "name",
        );
        for row in query_all(
            control,
            "SELECT organization_id AS id, slug, name, region FROM organization_mapping",
        )
        .await
        {
            let region: String = row.try_get("", "region").unwrap();
            snapshot.mappings.entry(region).or_default().insert(
                row.try_get("", "id").unwrap(),
                (
                    row.try_get("", "slug").unwrap(),
                    row.try_get("", "name").unwrap(),
                ),
            );
        }
        for row in query_all(
            control,
            "SELECT member_id AS id, organization_id::text || '/' || user_id::text AS member, \
             role, region FROM member_mapping",
        )
        .await
        {
            let region: String = row.try_get("", "region").unwrap();
            snapshot.member_mappings.entry(region).or_default().insert(
                row.try_get("", "id").unwrap(),
                (
                    row.try_get("", "member").unwrap(),
                    row.try_get("", "role").unwrap(),
                ),
            );
        }
        for (region, db) in crate::silos::SILOS[1..].iter().zip(&dbs[1..]) {
            snapshot.members.insert(
                (*region).to_owned(),
                pairs(
                    query_all(
                        db,
                        "SELECT id, organization_id::text || '/' || user_id::text AS member, role \
                         FROM organization_member",
                    )
                    .await,
                    "member",
                    "role",
                ),
            );
            snapshot.organizations.insert(
                (*region).to_owned(),
                pairs(
                    query_all(db, "SELECT id, slug, name FROM organization").await,
                    "slug",
                    "name",
                ),
            );
            snapshot.replicas.insert(
                (*region).to_owned(),
                pairs(
                    query_all(db, "SELECT id, email, name FROM user_replica").await,
                    "email",
                    "name",
                ),
            );
        }
        for db in dbs {
            let rows = query_all(
                db,
                "SELECT (SELECT count(*) FROM region_outbox) + (SELECT count(*) FROM control_outbox) AS n",
            )
            .await;
            snapshot.pending += rows[0].try_get::<i64>("", "n").unwrap();
        }
        if audits {
            for row in query_all(
                control,
                "SELECT organization_id, action, detail, count(*) AS n FROM audit_log \
                 GROUP BY organization_id, action, detail",
            )
            .await
            {
                snapshot.audits.insert(
                    (
                        row.try_get("", "organization_id").unwrap(),
                        row.try_get("", "action").unwrap(),
                        row.try_get("", "detail").unwrap(),
                    ),
                    row.try_get("", "n").unwrap(),
                );
            }
        }
        snapshot
    }

    /// Replicas that differ from their sources, one line each.
    pub fn stale(&self) -> Vec<String> {
        let mut stale = Vec::new();
        for (region, organizations) in &self.organizations {
            let empty = Rows::new();
            let mappings = self.mappings.get(region).unwrap_or(&empty);
            differences(
                &format!("{region} organization"),
                organizations,
                mappings,
                &mut stale,
            );
        }
        for region in self.mappings.keys() {
            if !self.organizations.contains_key(region) {
                stale.push(format!("mappings of an unknown region {region}"));
            }
        }
        for (region, members) in &self.members {
            let empty = Rows::new();
            let mappings = self.member_mappings.get(region).unwrap_or(&empty);
            differences(
                &format!("{region} membership"),
                members,
                mappings,
                &mut stale,
            );
        }
        // A user is replicated to the regions of its memberships (a replica
        // left after its memberships went is not kept up to date).
        for (region, mappings) in &self.member_mappings {
            let empty = Rows::new();
            let replicas = self.replicas.get(region).unwrap_or(&empty);
            let members: std::collections::BTreeSet<i64> = mappings
                .values()
                .map(|(member, _)| member.rsplit_once('/').unwrap().1.parse().unwrap())
                .collect();
            for user in members {
                let source = self.users.get(&user);
                let replica = replicas.get(&user);
                if source != replica {
                    stale.push(format!(
                        "user {user} in {region}: source {source:?}, replica {replica:?}"
                    ));
                }
            }
        }
        stale
    }

    /// Audit events recorded more than once.
    pub fn duplicated(&self) -> Vec<String> {
        self.audits
            .iter()
            .filter(|(_, count)| **count > 1)
            .map(|(key, count)| format!("audit event {key:?} recorded {count} times"))
            .collect()
    }

    /// Every replica equals its source and every outbox is empty.
    pub fn converged(&self) -> bool {
        self.pending == 0 && self.stale().is_empty()
    }
}

fn differences(what: &str, source: &Rows, replica: &Rows, out: &mut Vec<String>) {
    for (id, row) in source {
        match replica.get(id) {
            Some(copy) if copy == row => {}
            copy => out.push(format!("{what} {id}: source {row:?}, replica {copy:?}")),
        }
    }
    for id in replica.keys() {
        if !source.contains_key(id) {
            out.push(format!(
                "{what} {id}: deleted at the source, still replicated"
            ));
        }
    }
}
