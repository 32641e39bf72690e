//! What a [`TestDatabase`] is created with: which migrations run on it.

use futures::future::BoxFuture;
use sea_orm::{DatabaseConnection, DbBackend, DbErr};
use sea_orm_migration::MigratorTrait;

use super::{admin_url, TestDatabase, TestDbError};

/// Runs a migrator's `up` on a fresh database.
type Migrate = for<'a> fn(&'a DatabaseConnection) -> BoxFuture<'a, Result<(), DbErr>>;

/// Applies all of `M`'s migrations.
fn migrate_up<M: MigratorTrait + 'static>(
    db: &DatabaseConnection,
) -> BoxFuture<'_, Result<(), DbErr>> {
    M::up(db, None)
}

/// How to create a [`TestDatabase`]: which migrations run on it before the
/// test gets it. From [`TestDatabase::options`]; ends with the backend:
/// [`sqlite`](Self::sqlite), [`postgres`](Self::postgres),
/// [`postgres_on`](Self::postgres_on) or [`of`](Self::of).
///
/// ```no_run
/// # use sea_orm_migration::prelude::*;
/// # struct Migrator;
/// # #[async_trait::async_trait]
/// # impl MigratorTrait for Migrator {
/// #     fn migrations() -> Vec<Box<dyn MigrationTrait>> { outbox_migrations::migrations() }
/// # }
/// # async fn run() -> Result<(), outbox_testing::database::TestDbError> {
/// use outbox_testing::database::TestDatabase;
///
/// // Your own migrator, with the outbox migrations embedded in it:
/// let db = TestDatabase::options().migrator::<Migrator>().sqlite("orders").await?;
/// // An empty database:
/// let empty = TestDatabase::options().no_migrations().postgres("orders").await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Copy)]
pub struct TestDatabaseOptions {
    /// `None`: no migrations.
    migrate: Option<Migrate>,
    /// The migrator's type name, for `Debug`.
    migrator: Option<&'static str>,
}

impl std::fmt::Debug for TestDatabaseOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestDatabaseOptions")
            .field("migrator", &self.migrator)
            .finish()
    }
}

impl Default for TestDatabaseOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl TestDatabaseOptions {
    /// The library's own migrations (`outbox_migrations::OutboxMigrator`),
    /// as [`TestDatabase::sqlite`] and [`TestDatabase::postgres`] apply them.
    pub fn new() -> Self {
        Self {
            migrate: Some(migrate_up::<outbox_migrations::OutboxMigrator>),
            migrator: Some("outbox_migrations::OutboxMigrator"),
        }
    }

    /// Applies `M`'s migrations (`M::up(db, None)`) instead of the library's:
    /// your application's migrator, which embeds
    /// `outbox_migrations::migrations()` among its own. Applying both would
    /// create the outbox tables twice.
    ///
    /// Default: `outbox_migrations::OutboxMigrator`.
    pub fn migrator<M: MigratorTrait + 'static>(mut self) -> Self {
        self.migrate = Some(migrate_up::<M>);
        self.migrator = Some(std::any::type_name::<M>());
        self
    }

    /// Applies no migrations: the test gets an empty database.
    pub fn no_migrations(mut self) -> Self {
        self.migrate = None;
        self.migrator = None;
        self
    }

    /// A fresh SQLite database file named after `label`, opened with
    /// [`outbox_seaorm::sqlite::configure`] (WAL, busy timeout, foreign keys).
    ///
    /// # Errors
    ///
    /// [`TestDbError`] when the file cannot be created or a migration fails
    /// (the file is removed then).
    pub async fn sqlite(self, label: &str) -> Result<TestDatabase, TestDbError> {
        TestDatabase::create_sqlite(self, label).await
    }

    /// A fresh PostgreSQL database named after `label`, on the server at
    /// `DATABASE_URL` or the throwaway test cluster (see the [module
    /// docs](super)).
    ///
    /// # Errors
    ///
    /// [`TestDbError`] when no server can be reached or started, or a
    /// migration fails (the database is dropped then).
    pub async fn postgres(self, label: &str) -> Result<TestDatabase, TestDbError> {
        self.postgres_on(&admin_url()?, label).await
    }

    /// A fresh PostgreSQL database named after `label` on the server at
    /// `admin`.
    ///
    /// # Errors
    ///
    /// [`TestDbError`] when the server cannot be reached or a migration fails
    /// (the database is dropped then).
    pub async fn postgres_on(self, admin: &str, label: &str) -> Result<TestDatabase, TestDbError> {
        TestDatabase::create_postgres(self, admin, label).await
    }

    /// A fresh database of `backend`: PostgreSQL, or SQLite for any other.
    ///
    /// # Errors
    ///
    /// See [`postgres`](Self::postgres) and [`sqlite`](Self::sqlite).
    pub async fn of(self, backend: DbBackend, label: &str) -> Result<TestDatabase, TestDbError> {
        match backend {
            DbBackend::Postgres => self.postgres(label).await,
            _ => self.sqlite(label).await,
        }
    }

    /// Runs the migrations chosen on `db`.
    pub(super) async fn migrate(&self, db: &DatabaseConnection) -> Result<(), TestDbError> {
        let Some(migrate) = self.migrate else {
            return Ok(());
        };
        migrate(db).await.map_err(|e| {
            TestDbError(format!(
                "the migrations of `{}` failed: {e}",
                self.migrator.unwrap_or("the migrator")
            ))
        })
    }
}
