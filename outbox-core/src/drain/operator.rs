//! Operating a drain: runtime controls (pause, cull, resume), the shards
//! they park, an operator's retry, dead letters put back or thrown away.
//! What the admin API, the dashboard and the CLI change; the engine only
//! reads the controls ([`DrainOperator::refresh_controls_if_stale`]).

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::clock::Clock;
use crate::control::{ControlAction, ControlTarget, Controls, RuntimeControl};
use crate::shard::{OutboxKind, ShardKey};
use crate::store::{StoreAdmin, StoreError};

/// The operator's handle on a drain ([`Drainer::operator`](super::Drainer::operator)):
/// what it changes holds in every process (stored), and this process's
/// drainer sees it at once (its cache of controls is shared).
///
/// Cheap to clone.
#[derive(Clone)]
pub struct DrainOperator {
    admin: Arc<dyn StoreAdmin>,
    controls: Controls,
    clock: Arc<dyn Clock>,
    controls_refresh: Duration,
}

impl std::fmt::Debug for DrainOperator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DrainOperator")
            .field("controls", &self.controls)
            .finish_non_exhaustive()
    }
}

impl DrainOperator {
    pub(super) fn new(
        admin: Arc<dyn StoreAdmin>,
        controls: Controls,
        clock: Arc<dyn Clock>,
        controls_refresh: Duration,
    ) -> Self {
        Self {
            admin,
            controls,
            clock,
            controls_refresh,
        }
    }

    /// The cache of runtime controls this process's drain applies (see
    /// [`crate::control`]).
    pub fn controls(&self) -> &Controls {
        &self.controls
    }

    fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    /// Moves the rows `ids` of `shard` (its head message's group, from
    /// [`DrainView::head`](super::DrainView::head)) to the dead letters,
    /// whatever the scope's policy, with `error`, and makes the rest of the
    /// shard due at once with its failure state forgotten. `None`,
    /// changing nothing, while a worker holds the shard: try again. A
    /// replay of the dead letters brings them back.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the database fails.
    pub async fn set_aside(
        &self,
        shard: &ShardKey,
        ids: &[i64],
        error: &str,
    ) -> Result<Option<u64>, StoreError> {
        self.admin.set_aside(shard, ids, error, self.now()).await
    }

    /// Records an operator's action in the audit log (see
    /// [`crate::audit`]) and removes records older than `retention`
    /// (by this drainer's clock). The admin API, its dashboard and the CLI
    /// record every change they make, and every one they refuse.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the database fails.
    pub async fn record(
        &self,
        entry: &crate::audit::AuditEntry,
        retention: Duration,
    ) -> Result<(), StoreError> {
        let keep_after = chrono::Duration::from_std(retention)
            .ok()
            .and_then(|retention| self.now().checked_sub_signed(retention))
            .unwrap_or(DateTime::<Utc>::MIN_UTC);
        self.admin.record_audit(entry, keep_after).await
    }

    /// Pauses `target` in every process (keep and skip; see
    /// [`crate::control`]): stored, then this drainer's cache is read again.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the database fails.
    pub async fn pause(
        &self,
        target: ControlTarget,
        reason: Option<String>,
    ) -> Result<(), StoreError> {
        self.set_control(target, ControlAction::Pause, reason).await
    }

    /// Culls `target` in every process (drop; see [`crate::control`]); a
    /// pause it replaces is resumed.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the database fails.
    pub async fn cull(
        &self,
        target: ControlTarget,
        reason: Option<String>,
    ) -> Result<(), StoreError> {
        self.set_control(target.clone(), ControlAction::Cull, reason)
            .await?;
        self.release_parked(&[target]).await
    }

    /// Lifts the control of `target`, in every process; the shards a pause
    /// parked are due at once. Returns whether there was a control.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the database fails.
    pub async fn resume(&self, target: &ControlTarget) -> Result<bool, StoreError> {
        let cleared = self.admin.clear_control(target).await?;
        self.refresh_controls().await?;
        self.release_parked(std::slice::from_ref(target)).await?;
        Ok(cleared)
    }

    /// An operator's retry: makes `shards` (failing, paused or quarantined)
    /// due at once, and returns those it released. A worker may hold a
    /// shard's bucket for a moment (it met the quarantined shard, leaves
    /// it, releases the bucket), so the shards still held are asked for
    /// again, every 50 ms for up to a second; those held after that are
    /// left out of the answer (ask again).
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the database fails.
    pub async fn retry_now(&self, shards: &[ShardKey]) -> Result<Vec<ShardKey>, StoreError> {
        const ASKS: u32 = 20;
        const PAUSE: Duration = Duration::from_millis(50);
        let mut released = Vec::new();
        let mut left = shards.to_vec();
        for attempt in 0..ASKS {
            if attempt > 0 {
                tokio::time::sleep(PAUSE).await;
            }
            let now_released = self.admin.retry_now(&left, self.now()).await?;
            left.retain(|shard| !now_released.contains(shard));
            released.extend(now_released);
            if left.is_empty() {
                break;
            }
        }
        Ok(released)
    }

    /// Puts dead letters of `kind` back in the outbox (each at the end of
    /// its shard); returns how many.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the database fails.
    pub async fn replay_dead_letters(
        &self,
        kind: OutboxKind,
        ids: &[i64],
    ) -> Result<u64, StoreError> {
        self.admin.replay_dead_letters(kind, ids).await
    }

    /// Deletes dead letters of `kind` for good; returns how many.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the database fails.
    pub async fn discard_dead_letters(
        &self,
        kind: OutboxKind,
        ids: &[i64],
    ) -> Result<u64, StoreError> {
        self.admin.discard_dead_letters(kind, ids).await
    }

    /// Makes due the parked shards no pause covers: those parked by a
    /// process that stopped before it read the resume. The background
    /// worker calls it as it starts.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the database fails.
    pub async fn release_orphaned_pauses(&self) -> Result<(), StoreError> {
        self.refresh_controls().await?;
        for kind in OutboxKind::ALL {
            let release: Vec<ShardKey> = self
                .parked_shards(kind)
                .await?
                .into_iter()
                .filter(|shard| self.controls.action_for(shard) != Some(ControlAction::Pause))
                .collect();
            self.retry_parked(&release).await?;
        }
        Ok(())
    }

    async fn set_control(
        &self,
        target: ControlTarget,
        action: ControlAction,
        reason: Option<String>,
    ) -> Result<(), StoreError> {
        let control = RuntimeControl {
            target,
            action,
            reason,
            created_at: self.now(),
        };
        self.admin.set_control(&control).await?;
        tracing::info!(target = ?control.target, action = action.as_str(), reason = ?control.reason, "outbox runtime control set");
        self.refresh_controls().await
    }

    /// Reads the controls again; releases the shards parked under pauses
    /// that are gone.
    pub(crate) async fn refresh_controls(&self) -> Result<(), StoreError> {
        let controls = self.admin.controls().await?;
        let gone = self.controls.replace(controls, self.now());
        let unreleased: Vec<ShardKey> = self
            .controls
            .take_unreleased()
            .into_iter()
            .filter(|shard| self.controls.action_for(shard) != Some(ControlAction::Pause))
            .collect();
        self.retry_parked(&unreleased).await?;
        if !gone.is_empty() {
            self.release_parked(&gone).await?;
        }
        Ok(())
    }

    /// Reads the controls again if the cache is older than
    /// `controls_refresh`. A failed read keeps the cache (and is retried at
    /// the next call).
    pub(crate) async fn refresh_controls_if_stale(&self) {
        let stale_before = self.now()
            - chrono::Duration::from_std(self.controls_refresh).unwrap_or(chrono::Duration::MAX);
        if self.controls.is_fresh(stale_before) {
            return;
        }
        if let Err(error) = self.refresh_controls().await {
            tracing::warn!(%error, "could not read the outbox runtime controls; the last ones read hold");
        }
    }

    /// Makes due the parked shards of `targets` that no pause covers now.
    async fn release_parked(&self, targets: &[ControlTarget]) -> Result<(), StoreError> {
        let mut kinds: Vec<OutboxKind> = targets.iter().map(ControlTarget::kind).collect();
        kinds.dedup();
        for kind in kinds {
            let parked = self.parked_shards(kind).await?;
            let release: Vec<ShardKey> = parked
                .into_iter()
                .filter(|shard| targets.iter().any(|target| target.covers(shard)))
                .filter(|shard| self.controls.action_for(shard) != Some(ControlAction::Pause))
                .collect();
            self.retry_parked(&release).await?;
        }
        Ok(())
    }

    async fn parked_shards(&self, kind: OutboxKind) -> Result<Vec<ShardKey>, StoreError> {
        const AT_MOST: usize = 10_000;
        Ok(self
            .admin
            .failing_shards(kind, AT_MOST)
            .await?
            .into_iter()
            .filter(|failing| failing.state.is_paused())
            .map(|failing| failing.shard)
            .collect())
    }

    async fn retry_parked(&self, shards: &[ShardKey]) -> Result<(), StoreError> {
        if shards.is_empty() {
            return Ok(());
        }
        let released = match self.admin.retry_now(shards, self.now()).await {
            Ok(released) => released,
            Err(error) => {
                self.controls.add_unreleased(shards.iter().cloned());
                return Err(error);
            }
        };
        if released.len() < shards.len() {
            // Their buckets are held: tried again at the next read of the
            // controls.
            tracing::debug!(
                parked = shards.len(),
                released = released.len(),
                "some parked outbox shards are in held buckets; released later"
            );
            self.controls.add_unreleased(
                shards
                    .iter()
                    .filter(|shard| !released.contains(shard))
                    .cloned(),
            );
        }
        Ok(())
    }
}
