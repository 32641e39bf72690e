//! Drain everything, as Sentry's `outbox_runner()` does.

use outbox_core::drain::{DrainReport, Drainer, FlushError};
use outbox_core::registry::Category;
use outbox_core::shard::OutboxKind;
use outbox_core::store::StoreError;

/// Rounds [`drain_until_idle`] runs before it gives up: 10.
pub const MAX_ROUNDS: usize = 10;

/// Why [`drain_until_idle`] stopped before the outbox was empty of due rows.
/// Its `Debug` writes the variant and the message, so that a test's
/// `unwrap()` shows what went wrong.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum RunnerError {
    /// Receivers kept writing new outbox rows for [`MAX_ROUNDS`] rounds.
    #[error(
        "outbox rows were still due after {rounds} drain rounds: receivers keep writing \
         outboxes (a cascade that does not end?)"
    )]
    RecursionLimit {
        /// Rounds run.
        rounds: usize,
    },
    /// A delivery failed.
    #[error(transparent)]
    Flush(#[from] FlushError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl std::fmt::Debug for RunnerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let variant = match self {
            Self::RecursionLimit { .. } => "RecursionLimit",
            Self::Flush(_) => "Flush",
            Self::Store(_) => "Store",
        };
        write!(f, "RunnerError::{variant}: {self}")
    }
}

/// Drains every due row of `kinds`, round after round, until nothing is due.
///
/// Each round delivers the rows that existed when it started; rows written by
/// receivers during a round (a cascade) are delivered by the next. After
/// [`MAX_ROUNDS`] rounds with rows still due it returns
/// [`RunnerError::RecursionLimit`]. The first failed delivery is returned as a
/// [`FlushError`] naming the category, the shard and the receiver's error.
///
/// # Errors
///
/// See [`RunnerError`].
pub async fn drain_until_idle<C: Category>(
    drainer: &Drainer<C>,
    kinds: &[OutboxKind],
) -> Result<DrainReport, RunnerError> {
    let mut total = DrainReport::default();
    for _round in 0..MAX_ROUNDS {
        let mut worked = false;
        for &kind in kinds {
            let Some(bound) = drainer.view().max_id(kind).await? else {
                continue;
            };
            loop {
                let mut report = drainer.drain_due_up_to(kind, Some(bound)).await?;
                if let Some(failure) = report.failures.pop() {
                    return Err(FlushError::from_failure(failure).into());
                }
                if report.is_empty() {
                    break;
                }
                worked = true;
                total.absorb(report);
            }
        }
        if !worked {
            return Ok(total);
        }
    }
    for &kind in kinds {
        if drainer.view().has_due(kind).await? {
            return Err(RunnerError::RecursionLimit { rounds: MAX_ROUNDS });
        }
    }
    Ok(total)
}
