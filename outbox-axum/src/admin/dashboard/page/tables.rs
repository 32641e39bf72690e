//! The page's read-only tables: backfills, fenced receivers and the
//! operators' audit log.

use chrono::{DateTime, Utc};
use maud::{html, Markup};

use super::{ago, time, Data};

pub(super) fn backfills(data: &Data) -> Markup {
    html! {
        @if let Some(backfills) = &data.backfills {
            section #backfills {
                h2 { "Backfills" }
                @match backfills {
                    Err(error) => p.error { (error) },
                    Ok(statuses) => table {
                        thead { tr {
                            th { "table" } th { "coded version" } th { "target version" } th { "cursor" } th { "rows left" } th { "" }
                        } }
                        tbody {
                            @for status in statuses {
                                tr {
                                    td { (status.table) }
                                    td.num { (status.coded_version) }
                                    td.num { (status.target_version.map_or_else(|| "unset".to_owned(), |v| v.to_string())) }
                                    td { @match status.cursor_version { Some(v) => { "v" (v) " from id " (status.lower_bound_id) } None => "–" } }
                                    td.num { (status.rows_remaining) }
                                    td {
                                        @if status.done { span.badge { "done" } }
                                        @else if status.target_version.is_none() { span.badge.paused { "not enabled" } }
                                        @else { span.badge.warn { "running" } }
                                    }
                                }
                            }
                        }
                    },
                }
            }
        }
    }
}

pub(super) fn fences(data: &Data, now: DateTime<Utc>) -> Markup {
    html! {
        @if let Some(fences) = &data.fences {
            section #fences {
                h2 { "Fenced receivers" }
                @match fences {
                    Err(error) => p.error { (error) },
                    Ok((records, superseded)) => {
                        p {
                            strong { (superseded) }
                            " deliveries refused as superseded: sent late by a worker paused past its lease, after a newer claim of the shard was applied (nothing to do; a count that grows points to stalled or partitioned sender processes)."
                        }
                        @if records.is_empty() {
                            p { "No fenced delivery applied yet." }
                        } @else {
                            table {
                                thead { tr {
                                    th { "consumer" } th { "sender" } th { "shard" } th { "highest token" } th { "applied" } th { "superseded" } th { "last superseded" }
                                } }
                                tbody {
                                    @for record in records {
                                        tr {
                                            td { (record.consumer) }
                                            td { (record.sender) }
                                            td { code { (record.shard) } }
                                            td.num { (record.fence.get()) }
                                            td { (ago(now, record.applied_at)) }
                                            td.num {
                                                @if record.superseded > 0 { span.badge.warn { (record.superseded) } }
                                                @else { "0" }
                                            }
                                            td { @match record.superseded_at { Some(at) => (ago(now, at)), None => "–" } }
                                        }
                                    }
                                }
                            }
                        }
                    },
                }
            }
        }
    }
}

pub(super) fn audit(data: &Data, now: DateTime<Utc>) -> Markup {
    html! {
        section #audit {
            h2 { "Audit log" }
            @if data.audit.is_empty() {
                p.quiet { "No operator action recorded yet." }
            } @else {
                table {
                    thead { tr {
                        th { "when" } th { "who" } th { "action" } th { "target" } th { "reason" } th { "outcome" }
                    } }
                    tbody {
                        @for record in &data.audit {
                            @let entry = &record.entry;
                            tr #(format!("audit-{}", record.id)) {
                                td { (time(now, entry.at, ago(now, entry.at))) }
                                td { (entry.actor) " (" (entry.role) ")" }
                                td { (entry.action) }
                                td { (entry.target.as_deref().unwrap_or("")) }
                                td { (entry.reason.as_deref().unwrap_or("")) }
                                td {
                                    @if entry.outcome == "ok" { span.badge { "ok" } }
                                    @else { span.badge.warn { (entry.outcome) } }
                                    @if let Some(detail) = &entry.detail { " " span.quiet { (detail) } }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}
