//! The dashboard's HTML (maud: escaped by construction).

use chrono::{DateTime, Utc};
use maud::{html, Markup, PreEscaped, DOCTYPE};

use outbox_core::store::{AdminSnapshot, DeadLetterRow, FailingShard};
use outbox_core::{
    Backlog, Category, ControlTarget, Count, OutboxKind, RuntimeControl, Scope, ShardKey,
};
use outbox_seaorm::backfill::BackfillStatus;
use outbox_seaorm::inbox::FenceRecord;

use super::super::auth::Principal;
use super::super::error::AdminError;
use super::super::labels::{category_label, describe, scope_label};
use super::super::model::{Action, Kind, TargetRef};
use super::super::AdminState;
use outbox_core::audit::AuditRecord;

mod charts;
mod tables;
mod words;

use words::{ago, kind_value, span, until};

const STYLE: &str = include_str!("style.css");

/// What the page says of a failed read: the cause goes to the log, under
/// the correlation id the message names.
fn logged(what: &str, error: &dyn std::fmt::Display) -> String {
    AdminError::logged(
        axum::http::StatusCode::SERVICE_UNAVAILABLE,
        "store_unavailable",
        what,
        error,
    )
    .message
}

pub(super) use charts::RANGES;

/// How far back the history charts go unless the page asks: an hour.
pub(super) const DEFAULT_MINUTES: u32 = 60;

/// How many failing shards the page shows the head message of.
const HEADS: usize = 20;

/// The head messages of the first [`HEADS`] failing shards.
async fn heads<C: Category>(
    view: &outbox_core::DrainView<C>,
    snapshot: &AdminSnapshot,
) -> Result<Vec<outbox_core::HeadMessage>, AdminError> {
    let mut heads = Vec::new();
    for failing in snapshot.failing.iter().take(HEADS) {
        heads.extend(view.head(&failing.shard).await?);
    }
    Ok(heads)
}

/// How many audit records the page lists.
const AUDIT_ROWS: usize = 20;

/// What one page shows.
pub(super) struct Data {
    /// Who looks: a viewer sees no forms.
    actor: Principal,
    /// Whether the router has a login (and so a logout).
    login: bool,
    /// The head messages of the first failing shards.
    heads: Vec<outbox_core::HeadMessage>,
    /// The table's history over the last `minutes`, merged per time.
    history: Vec<outbox_core::history::Point>,
    minutes: u32,
    /// The newest records of the audit log.
    audit: Vec<AuditRecord>,
    kind: OutboxKind,
    now: DateTime<Utc>,
    backlogs: Vec<Backlog>,
    /// Counts, deepest and failing shards: one transaction.
    snapshot: AdminSnapshot,
    dead_letters: Vec<DeadLetterRow>,
    controls: Vec<RuntimeControl>,
    /// `None`: no backfill configured; `Some(Err)`: it could not be read.
    backfills: Option<Result<Vec<BackfillStatus>, String>>,
    /// `None`: no receivers' database configured; `Some(Err)`: it could
    /// not be read.
    fences: Option<Result<(Vec<FenceRecord>, u64), String>>,
    scopes: Vec<(i32, &'static str)>,
    categories: Vec<(i32, &'static str)>,
}

impl Data {
    pub(super) async fn read<C: Category>(
        state: &AdminState<C>,
        actor: &Principal,
        kind: OutboxKind,
        minutes: u32,
        rows: usize,
    ) -> Result<Self, AdminError> {
        let view = &state.view;
        let mut backlogs = Vec::new();
        for kind in OutboxKind::ALL {
            backlogs.push(view.backlog(kind).await?);
        }
        let snapshot = view.snapshot(kind, rows).await?;
        let dead_letters = view.dead_letters(kind, rows).await?;
        let controls = view.controls().await?;
        let backfills = match &state.backfill {
            Some(backfill) => Some(
                backfill
                    .status()
                    .await
                    .map_err(|error| logged("the backfill cursors could not be read", &error)),
            ),
            None => None,
        };
        let fences = match &state.inbox {
            Some(db) => Some(
                outbox_seaorm::inbox::fences(db, rows as u64)
                    .await
                    .map_err(|error| logged("the fence records could not be read", &error)),
            ),
            None => None,
        };
        Ok(Self {
            actor: actor.clone(),
            login: state.login,
            heads: heads(view, &snapshot).await?,
            history: outbox_core::history::points(
                &view
                    .history(
                        kind,
                        std::time::Duration::from_secs(u64::from(minutes) * 60),
                    )
                    .await?,
                kind,
            ),
            minutes,
            audit: view.audit_log(AUDIT_ROWS).await?,
            kind,
            now: view.now(),
            backlogs,
            snapshot,
            dead_letters,
            controls,
            backfills,
            fences,
            scopes: C::Scope::ALL
                .iter()
                .map(|s| (s.value(), s.name()))
                .collect(),
            categories: C::ALL.iter().map(|c| (c.value(), c.name())).collect(),
        })
    }

    fn can_act(&self) -> bool {
        self.actor.role().can_act()
    }

    fn scope_label(&self, value: i32) -> String {
        let name = self.scopes.iter().find(|(v, _)| *v == value);
        scope_label(value, name.map(|(_, name)| *name))
    }

    fn category_label(&self, value: i32) -> String {
        let name = self.categories.iter().find(|(v, _)| *v == value);
        category_label(value, name.map(|(_, name)| *name))
    }

    fn shard_label(&self, shard: &ShardKey) -> String {
        let region = shard
            .region_name()
            .map(|region| format!(" → {region}"))
            .unwrap_or_default();
        format!(
            "{} {}{region}",
            self.scope_label(shard.scope()),
            shard.identifier()
        )
    }

    /// The control in force on exactly this shard, if any.
    fn shard_control(&self, shard: &ShardKey) -> Option<&RuntimeControl> {
        self.controls.iter().find(
            |control| matches!(&control.target, outbox_core::ControlTarget::Shard(s) if s == shard),
        )
    }
}

fn time(now: DateTime<Utc>, at: DateTime<Utc>, text: String) -> Markup {
    let _ = now;
    html! { time datetime=(at.to_rfc3339()) title=(at.to_rfc3339()) { (text) } }
}

fn layout(title: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) }
                style { (PreEscaped(STYLE)) }
            }
            body { (body) }
        }
    }
}

/// The hidden fields naming a shard or scope.
fn target_fields(target: &TargetRef) -> Markup {
    html! {
        input type="hidden" name="kind" value=(kind_name_value(target.kind));
        @if let Some(region) = &target.region { input type="hidden" name="region" value=(region); }
        input type="hidden" name="scope" value=(target.scope);
        @if let Some(identifier) = target.identifier { input type="hidden" name="identifier" value=(identifier); }
    }
}

fn kind_name_value(kind: Kind) -> &'static str {
    kind_value(kind)
}

/// A shard as its forms' hidden fields name it (by number: the page's
/// labels name it).
fn shard_target(shard: &ShardKey) -> TargetRef {
    TargetRef {
        kind: shard.kind(),
        region: shard.region_name().map(str::to_owned),
        scope: shard.scope(),
        scope_name: None,
        identifier: Some(shard.identifier()),
    }
}

/// A control's target likewise.
fn control_target(target: &ControlTarget) -> TargetRef {
    match target {
        ControlTarget::Shard(shard) => shard_target(shard),
        ControlTarget::Scope {
            kind,
            region,
            scope,
        } => TargetRef {
            kind: *kind,
            region: region.clone(),
            scope: *scope,
            scope_name: None,
            identifier: None,
        },
    }
}

/// A one-button form.
fn button(action: &str, target: &TargetRef, label: &str, class: &str) -> Markup {
    html! {
        form method="post" action=(format!("actions/{action}")) {
            (target_fields(target))
            button type="submit" class=(class) { (label) }
        }
    }
}

/// Pause, or resume when a control is set on the shard.
fn pause_or_resume(data: &Data, shard: &ShardKey) -> Markup {
    let target = shard_target(shard);
    match data.shard_control(shard) {
        Some(_) => button("resume", &target, "Resume", "resume"),
        None => button("pause", &target, "Pause", "pause"),
    }
}

/// The page; `notice`: what the last form did, worded by the server.
pub(super) fn dashboard(data: &Data, notice: Option<String>) -> Markup {
    let kind = data.kind;
    let now = data.now;
    layout(
        "Outbox",
        html! {
            header {
                h1 { "Outbox" }
                nav {
                    @for other in OutboxKind::ALL {
                        @let class = if other == kind { "tab current" } else { "tab" };
                        a class=(class) href=(format!("dashboard?kind={}", kind_value(other))) {
                            (kind_value(other)) " outbox"
                        }
                    }
                    a class="tab" href=(format!("dashboard?kind={}", kind_value(kind))) { "Refresh" }
                    span #principal.quiet { (data.actor.name()) " (" (data.actor.role().as_str()) ")" }
                    @if data.login {
                        form method="post" action="logout" class="inline" {
                            button type="submit" { "Log out" }
                        }
                    }
                }
            }
            @if let Some(done) = &notice { p.notice role="status" { (done) } }
            @if !data.can_act() { p.notice #read-only { "Read-only: a viewer sees everything and changes nothing." } }
            (health(data))
            (charts::history(data, now))
            (failing(data, now, false))
            (failing(data, now, true))
            (shards(data, now))
            (scopes(data))
            (controls(data, now))
            (dead_letters(data, now))
            (tables::backfills(data))
            (tables::fences(data, now))
            (tables::audit(data, now))
            footer { "Read at " (now.to_rfc3339()) "." }
        },
    )
}

fn health(data: &Data) -> Markup {
    html! {
        section #health {
            h2 { "Health" }
            table {
                thead { tr {
                    th { "table" } th { "pending" } th { "oldest" } th { "dead letters" }
                    th { "failing" } th { "quarantined" } th { "paused" }
                    th { "dead tuples" } th { "oldest transaction" }
                } }
                tbody {
                    @for backlog in &data.backlogs {
                        tr {
                            td { (kind_value(backlog.kind)) "_outbox" }
                            td.num { (count(backlog.depth)) }
                            td { (backlog.oldest_age.map_or_else(|| "–".to_owned(), |age| span(i64::try_from(age.as_secs()).unwrap_or(i64::MAX)))) }
                            td.num { (count(backlog.dead_letters)) }
                            td.num.(if backlog.failing_shards > 0 { "bad" } else { "" }) { (backlog.failing_shards) }
                            td.num.(if backlog.quarantined_shards > 0 { "bad" } else { "" }) { (backlog.quarantined_shards) }
                            td.num { (backlog.paused_shards) }
                            td.num { (backlog.dead_tuples.map_or_else(|| "–".to_owned(), |n| n.to_string())) }
                            td { (backlog.oldest_transaction_age.map_or_else(|| "–".to_owned(), |age| span(i64::try_from(age.as_secs()).unwrap_or(i64::MAX)))) }
                        }
                    }
                }
            }
            @if let Some(holder) = data.backlogs.iter().find_map(|backlog| backlog.horizon.as_ref()) {
                p.horizon {
                    "Vacuum is held back by " (horizon_holder(holder)) ". "
                    "Until it ends, the rows the drain deletes stay as dead tuples. End it: "
                    code { (crate::admin::model::remedy(holder)) }
                }
            }
        }
    }
}

/// "session 4242 (report-job, user app, idle in transaction for 2h 3m),
/// 1,234 transactions behind".
fn horizon_holder(holder: &outbox_core::store::HorizonHolder) -> String {
    let mut about = vec![holder.name.clone()];
    if let Some(user) = &holder.user {
        about.push(format!("user {user}"));
    }
    if let Some(state) = &holder.state {
        about.push(match holder.age {
            Some(age) => format!(
                "{state} for {}",
                span(i64::try_from(age.as_secs()).unwrap_or(i64::MAX))
            ),
            None => state.clone(),
        });
    }
    let pid = holder.pid.map(|pid| format!(" {pid}")).unwrap_or_default();
    format!(
        "{}{pid} ({}), {} transactions behind",
        holder.kind.as_str(),
        about.join(", "),
        holder.xid_age
    )
}

fn state_label(failing: &FailingShard) -> (&'static str, &'static str) {
    if failing.state.is_paused() {
        ("paused", "paused")
    } else if failing.state.is_quarantined() {
        ("quarantined", "bad")
    } else if failing.state.is_parked() {
        ("parked: deploy the receiver", "warn")
    } else {
        ("backing off", "warn")
    }
}

/// The shards with a failure state, `paused` ones or the others.
fn failing(data: &Data, now: DateTime<Utc>, paused: bool) -> Markup {
    let rows: Vec<&FailingShard> = data
        .snapshot
        .failing
        .iter()
        .filter(|failing| failing.state.is_paused() == paused)
        .collect();
    let (section, title, none, prefix) = if paused {
        ("paused", "Paused shards", "No shard is paused.", "paused")
    } else {
        (
            "failing",
            "Failing shards",
            "No shard is failing or quarantined.",
            "failing",
        )
    };
    html! {
        section id=(section) {
            h2 { (title) " (" (rows.len()) ")" }
            @if rows.is_empty() {
                p.quiet { (none) }
            } @else {
                table {
                    thead { tr {
                        th { "shard" } th { "state" } th { "attempts" } th { "last error" }
                        th { "failed" } th { "next attempt" } th { "head message" } th { "" }
                    } }
                    tbody {
                        @for failing in &rows {
                            @let (label, class) = state_label(failing);
                            @let id = match failing.shard.region_name() {
                                Some(region) => format!("{prefix}-{region}-{}-{}", failing.shard.scope(), failing.shard.identifier()),
                                None => format!("{prefix}-{}-{}", failing.shard.scope(), failing.shard.identifier()),
                            };
                            tr #(id) .failing {
                                td { (data.shard_label(&failing.shard)) }
                                td { span.badge.(class) { (label) } }
                                td.num { (failing.state.attempts) }
                                td { code.error-text { (failing.state.last_error.as_deref().unwrap_or("–")) } }
                                td { (time(now, failing.state.failed_at, ago(now, failing.state.failed_at))) }
                                td { @match failing.state.next_attempt() {
                                    Some(at) => (time(now, at, until(now, at))),
                                    None => "when an operator acts",
                                } }
                                @let head = data.heads.iter().find(|head| head.row.shard == failing.shard);
                                td.head {
                                    @if let Some(head) = head {
                                        "#" (head.row.id) " " (data.category_label(head.row.category))
                                        " object " (head.row.object_identifier) ", " (head.payload_size()) " bytes"
                                        @if head.group.len() > 1 { " (+" (head.group.len() - 1) " coalesced)" }
                                    }
                                }
                                td.actions {
                                    @if data.can_act() {
                                        (button("retry", &shard_target(&failing.shard), "Retry now", "retry"))
                                        (pause_or_resume(data, &failing.shard))
                                        @if head.is_some() {
                                            form method="post" action="actions/set-aside" {
                                                (target_fields(&shard_target(&failing.shard)))
                                                button type="submit" class="set-aside" onclick="return confirm('Move this head message to the dead letters so that the rest of the shard flows? A replay brings it back.')" { "Set head aside" }
                                            }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn shards(data: &Data, now: DateTime<Utc>) -> Markup {
    html! {
        section #shards {
            h2 { "Backlog: " (count(data.snapshot.pending)) " pending in " (kind_value(data.kind)) "_outbox" }
            @if data.snapshot.deepest.is_empty() {
                p.quiet { "Nothing pending." }
            } @else {
                table {
                    thead { tr {
                        th { "shard" } th { "pending" } th { "lag" } th { "next due" } th { "state" } th { "" }
                    } }
                    tbody {
                        @for depth in &data.snapshot.deepest {
                            @let failing = data.snapshot.failing.iter().find(|f| f.shard == depth.shard);
                            tr {
                                td { (data.shard_label(&depth.shard)) }
                                td.num { (count(depth.depth)) }
                                td { (time(now, depth.oldest_date_added, span((now - depth.oldest_date_added).num_seconds()))) }
                                td { (time(now, depth.next_scheduled_for, until(now, depth.next_scheduled_for))) }
                                td {
                                    @match failing {
                                        Some(failing) => { @let (label, class) = state_label(failing); span.badge.(class) { (label) } }
                                        None => span.badge { "ok" },
                                    }
                                }
                                td.actions { @if data.can_act() { (pause_or_resume(data, &depth.shard)) } }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn scopes(data: &Data) -> Markup {
    let kind = data.kind;
    html! {
        section #scopes {
            h2 { "Scopes" }
            p.quiet { "Pause keeps a scope's messages and skips them; cull drops them as they come due. Both hold in every process within a second." }
            table {
                thead { tr { th { "scope" } th { "pending" } th { "oldest" } th { "control" } th { "" } } }
                tbody {
                    @for (value, name) in &data.scopes {
                        @let backlog = data.backlogs.iter().find(|b| b.kind == kind).and_then(|b| b.scopes.iter().find(|s| s.scope == *value));
                        @let controls: Vec<&RuntimeControl> = data.controls.iter().filter(|c| matches!(&c.target, outbox_core::ControlTarget::Scope { kind: k, scope, .. } if *k == kind && scope == value)).collect();
                        tr {
                            td { (scope_label(*value, Some(name))) }
                            td.num { (count(backlog.map_or(Count::Exact(0), |b| b.depth))) }
                            td { (backlog.and_then(|b| b.oldest_age).map_or_else(|| "–".to_owned(), |age| span(i64::try_from(age.as_secs()).unwrap_or(i64::MAX)))) }
                            td {
                                @for control in &controls {
                                    span.badge.paused { (action_name(control.action.into())) @if let outbox_core::ControlTarget::Scope { region: Some(region), .. } = &control.target { " → " (region) } }
                                    " "
                                }
                            }
                            td.actions { @if data.can_act() {
                                @for control in &controls {
                                    (button("resume", &control_target(&control.target), "Resume", "resume"))
                                }
                                form method="post" action="actions/pause" {
                                    input type="hidden" name="kind" value=(kind_value(kind));
                                    input type="hidden" name="scope" value=(value);
                                    @if kind == OutboxKind::Control { input name="region" placeholder="region" required size="6"; }
                                    input name="reason" placeholder="reason" size="14";
                                    button type="submit" class="pause" { "Pause" }
                                    button type="submit" class="cull" formaction="actions/cull" onclick="return confirm('Cull drops this scope\\'s messages as they come due. Cull?')" { "Cull" }
                                }
                            } }
                        }
                    }
                }
            }
        }
    }
}

fn action_name(action: Action) -> &'static str {
    match action {
        Action::Pause => "paused",
        Action::Cull => "culling",
    }
}

fn controls(data: &Data, now: DateTime<Utc>) -> Markup {
    html! {
        section #controls {
            h2 { "Runtime controls (" (data.controls.len()) ")" }
            @if data.controls.is_empty() {
                p.quiet { "None: every shard is delivered." }
            } @else {
                table {
                    thead { tr { th { "target" } th { "action" } th { "reason" } th { "since" } th { "" } } }
                    tbody {
                        @for control in &data.controls {
                            @let target = control_target(&control.target);
                            tr {
                                td { (describe(&target, |value| data.scope_label(value))) }
                                td { span.badge.paused { (action_name(control.action.into())) } }
                                td { (control.reason.as_deref().unwrap_or("")) }
                                td { (time(now, control.created_at, ago(now, control.created_at))) }
                                td.actions { @if data.can_act() { (button("resume", &target, "Lift", "resume")) } }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// A count as `12`, `≥ 10,000` or `~2.4M`, with a tooltip that says which.
fn count(count: Count) -> Markup {
    match count {
        Count::Exact(_) => html! { (count) },
        Count::AtLeast(_) => html! {
            span title="at least: the count stopped at its cap (DrainConfig::count_cap)" { (count) }
        },
        Count::Estimated(_) => html! {
            span title="estimated from PostgreSQL's statistics: above the count cap" { (count) }
        },
    }
}

fn dead_letters(data: &Data, now: DateTime<Utc>) -> Markup {
    let kind = kind_value(data.kind);
    html! {
        section #dead-letters {
            h2 { "Dead letters (" (count(data.snapshot.dead_letters)) ")" }
            @if data.dead_letters.is_empty() {
                p.quiet { "No dead letters in " (kind) "_outbox." }
            } @else {
                @if data.can_act() { form #bulk method="post" action="actions/replay" class="bulk" {
                    input type="hidden" name="kind" value=(kind);
                    "Selected: "
                    button type="submit" class="replay" { "Replay" }
                    button type="submit" class="discard" formaction="actions/discard" onclick="return confirm('Discard the selected dead letters for good?')" { "Discard" }
                } }
                table {
                    thead { tr {
                        th { "" } th { "id" } th { "shard" } th { "category" } th { "object" }
                        th { "error" } th { "dead-lettered" } th { "payload" } th { "" }
                    } }
                    tbody {
                        @for dead in &data.dead_letters {
                            tr #(format!("dead-letter-{}", dead.row.id)) {
                                td { @if data.can_act() { input type="checkbox" name="ids" value=(dead.row.id) form="bulk" aria-label=(format!("select dead letter {}", dead.row.id)); } }
                                td.num { (dead.row.id) }
                                td { (data.shard_label(&dead.row.shard)) }
                                td { (data.category_label(dead.row.category)) }
                                td.num { (dead.row.object_identifier) }
                                td { code.error-text { (dead.error) } }
                                td { (time(now, dead.dead_lettered_at, ago(now, dead.dead_lettered_at))) }
                                td {
                                    details {
                                        summary { "show" }
                                        p { "message id " code.message-id { (dead.row.message_id) } }
                                        pre { (dead.row.payload.as_ref().map_or_else(|| "null".to_owned(), |p| serde_json::to_string_pretty(p).unwrap_or_default())) }
                                    }
                                }
                                td.actions { @if data.can_act() {
                                    form method="post" action="actions/replay" {
                                        input type="hidden" name="kind" value=(kind);
                                        input type="hidden" name="ids" value=(dead.row.id);
                                        button type="submit" class="replay" id=(format!("replay-{}", dead.row.id)) { "Replay" }
                                    }
                                    form method="post" action="actions/discard" {
                                        input type="hidden" name="kind" value=(kind);
                                        input type="hidden" name="ids" value=(dead.row.id);
                                        button type="submit" class="discard" id=(format!("discard-{}", dead.row.id)) onclick="return confirm('Discard this dead letter for good?')" { "Discard" }
                                    }
                                } }
                            }
                        }
                    }
                }
            }
        }
    }
}

pub(super) fn login(error: Option<&str>) -> Markup {
    layout(
        "Outbox: log in",
        html! {
            header { h1 { "Outbox" } }
            @if let Some(error) = error { p.error role="alert" { (error) } }
            form method="post" action="login" class="login" {
                label for="token" { "Admin token" }
                input #token type="password" name="token" autocomplete="current-password" required autofocus;
                button type="submit" { "Log in" }
            }
        },
    )
}

/// What went wrong, with a link to `dashboard` (the page's address from
/// where this one is served).
pub(super) fn failure(error: &AdminError, kind: Kind, dashboard: &str) -> Markup {
    layout(
        "Outbox: unavailable",
        html! {
            header { h1 { "Outbox" } }
            p.error role="alert" { (error.message) }
            p { a href=(format!("{dashboard}?kind={}", kind_name_value(kind))) { "Back to the dashboard" } }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_read_as_people_say_them() {
        assert_eq!(span(-4), "0 s");
        assert_eq!(span(59), "59 s");
        assert_eq!(span(61), "1 min");
        assert_eq!(span(3_720), "1 h 2 min");
        assert_eq!(span(90_000), "1 d 1 h");
        let now = Utc::now();
        assert_eq!(until(now, now), "now");
        assert_eq!(
            until(now, now + chrono::Duration::days(400)),
            "never (waits for an operator)"
        );
    }
}
