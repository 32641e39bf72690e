//! What the code `#[outbox_testing::test]` generates calls: not public API,
//! may change in any release.

use std::fmt::Debug;
use std::future::Future;
use std::pin::Pin;

use sea_orm::DbBackend;

use super::{TestDatabase, TestDatabaseOptions};

/// The outcome of a test body, as a message when it failed.
type Outcome = Result<(), String>;

/// A test body, run once per backend.
type Body = Box<dyn FnOnce(TestDatabase) -> Pin<Box<dyn Future<Output = Outcome>>>>;

/// One `#[outbox_testing::test]` function: its name, its database options and
/// its body.
pub struct TestCase {
    name: &'static str,
    options: TestDatabaseOptions,
    body: Body,
}

impl TestCase {
    /// The test `name`, whose `body` gets a database made with `options`.
    pub fn new<F, Fut>(name: &'static str, options: TestDatabaseOptions, body: F) -> Self
    where
        F: FnOnce(TestDatabase) -> Fut + 'static,
        Fut: Future + 'static,
        Fut::Output: TestOutcome,
    {
        Self {
            name,
            options,
            body: Box::new(move |db| Box::pin(async move { body(db).await.into_outcome() })),
        }
    }

    /// Runs the test on a fresh database of `backend`, in a multi-thread
    /// Tokio runtime of its own; panics when it fails.
    ///
    /// # Panics
    ///
    /// When the database cannot be created or the test fails. The database
    /// stays then (see the [module docs](super)): a clone of it is held here
    /// until the test has passed.
    pub fn run(self, backend: DbBackend) {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(4)
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("cannot start the test's Tokio runtime: {e}"));
        let Self {
            name,
            options,
            body,
        } = self;
        runtime.block_on(async move {
            let db = options
                .of(backend, name)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            // The last clone, dropped after the test passed or during the
            // panic that fails it (then the database is kept).
            let held = db.clone();
            if let Err(message) = body(db).await {
                panic!("{message}");
            }
            drop(held);
        });
    }
}

/// What an `#[outbox_testing::test]` function may return: `()`, or a
/// `Result<(), E>` whose error fails the test.
#[diagnostic::on_unimplemented(
    message = "`#[outbox_testing::test]` functions return `()` or `Result<(), E>` with `E: Debug`, not `{Self}`",
    label = "returns `{Self}`"
)]
pub trait TestOutcome {
    /// `Err` with a message when the test failed.
    fn into_outcome(self) -> Outcome;
}

impl TestOutcome for () {
    fn into_outcome(self) -> Outcome {
        Ok(())
    }
}

impl<E: Debug> TestOutcome for Result<(), E> {
    fn into_outcome(self) -> Outcome {
        self.map_err(|error| format!("the test returned an error: {error:?}"))
    }
}
