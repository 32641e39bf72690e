//! Globally unique ids for what a region creates.
//!
//! Each region numbers its objects from its own database, so two regions
//! would hand out the same ids, and the control silo, which keys
//! organization mappings by id, would let one overwrite the other: an
//! acknowledged write lost by design. (Sentry allocates ids globally for
//! this reason.) Here an id is `sequence × 64 + region code`: the sequence
//! comes from the region's own database (a row per table, bumped in the
//! transaction that inserts, so any number of processes of a region agree),
//! and the low six bits name the region, so no two regions can produce the
//! same id.
//!
//! On PostgreSQL the sequence is a database sequence (`id_sequence_<table>`):
//! `nextval` is not transactional and takes no lock that the request's
//! transaction keeps, so a request frozen half-way (its process paused, its
//! client stalled) delays only itself. (A counter row bumped in the request's
//! transaction, as SQLite still does, is locked until that transaction ends:
//! every other create of the region would wait for the frozen one.) An id
//! drawn by a transaction that rolls back is simply skipped.

use sea_orm::{ConnectionTrait, DbBackend, DbErr, Statement};

/// The tables whose ids [`next_id`] allocates.
pub const TABLES: [&str; 2] = ["organization", "organization_member"];

/// How far above the counter rows the PostgreSQL sequences start (see the
/// migration `m20261125_000003_region_id_sequence_objects`): more ids than
/// a previous version's processes allocate during a rolling deploy.
pub const SEQUENCE_HEADROOM: i64 = 1_000_000;

/// Region codes fill the low bits of an id: at most this many regions.
pub const REGION_STRIDE: i64 = 64;

/// The code of each region this example knows (1 to 63).
pub const REGION_CODES: &[(&str, i64)] = &[("us", 1), ("de", 2)];

/// The code of region `name`, if it is one this example knows.
pub fn region_code(name: &str) -> Option<i64> {
    REGION_CODES
        .iter()
        .find(|(known, _)| *known == name)
        .map(|(_, code)| *code)
}

/// The region code of an id allocated by [`next_id`].
pub fn region_of(id: i64) -> i64 {
    id.rem_euclid(REGION_STRIDE)
}

/// The next id of `table` (one of [`TABLES`]) in the region with `code`:
/// from its sequence on PostgreSQL (taken at once, whatever happens to the
/// caller's transaction), from its counter row in the caller's transaction
/// on SQLite.
///
/// # Errors
///
/// The database's error; [`DbErr::Custom`] for a table not in [`TABLES`].
pub async fn next_id(db: &impl ConnectionTrait, table: &str, code: i64) -> Result<i64, DbErr> {
    if !TABLES.contains(&table) {
        return Err(DbErr::Custom(format!("no id sequence for table {table:?}")));
    }
    let backend = db.get_database_backend();
    let sql = match backend {
        DbBackend::Postgres => "SELECT nextval(('id_sequence_' || $1)::regclass) AS last",
        _ => {
            "INSERT INTO id_sequence (name, last) VALUES ($1, 1) \
             ON CONFLICT (name) DO UPDATE SET last = id_sequence.last + 1 \
             RETURNING last"
        }
    };
    let row = db
        .query_one_raw(Statement::from_sql_and_values(backend, sql, [table.into()]))
        .await?
        .ok_or_else(|| DbErr::RecordNotFound("id_sequence".into()))?;
    let sequence: i64 = row.try_get("", "last")?;
    Ok(sequence * REGION_STRIDE + code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_fit_the_stride_and_differ() {
        let mut codes: Vec<i64> = REGION_CODES.iter().map(|(_, code)| *code).collect();
        assert!(codes.iter().all(|code| (1..REGION_STRIDE).contains(code)));
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), REGION_CODES.len());
        for (name, code) in REGION_CODES {
            assert_eq!(region_of(7 * REGION_STRIDE + code), *code, "{name}");
        }
    }
}
