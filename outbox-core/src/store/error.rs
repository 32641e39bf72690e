/// A boxed error from the database driver.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A failure of the store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The database refused or could not run a statement (connection lost,
    /// timeout, constraint). Rows are untouched by a failed statement; the
    /// drain retries on its next round.
    #[error("outbox store could not {operation}: {source}")]
    Database {
        /// What the store was doing.
        operation: &'static str,
        /// The driver's error.
        #[source]
        source: BoxError,
    },
    /// A stored value could not be decoded.
    #[error("outbox store read a malformed {what}: {detail}")]
    Malformed {
        /// The column or value.
        what: &'static str,
        /// What was wrong.
        detail: String,
    },
}

impl StoreError {
    /// Wraps a driver error.
    pub fn database(operation: &'static str, source: impl Into<BoxError>) -> Self {
        StoreError::Database {
            operation,
            source: source.into(),
        }
    }
}
