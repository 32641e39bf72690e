//! The history charts: server-rendered SVG (no script, nothing fetched),
//! one per measure, over the range the page asks for.

use chrono::{DateTime, Utc};
use maud::{html, Markup};

use outbox_core::history::Point;

use super::{kind_value, Data};

/// The ranges offered, in minutes: an hour, six, a day.
pub(in crate::admin::dashboard) const RANGES: [u32; 3] = [60, 360, 1440];

const WIDTH: f64 = 480.0;
const HEIGHT: f64 = 120.0;

/// One chart: `values` over `[from, now]`, the largest value at the top.
fn chart(
    title: &str,
    id: &str,
    from: DateTime<Utc>,
    now: DateTime<Utc>,
    values: &[(DateTime<Utc>, f64)],
) -> Markup {
    let span = (now - from).num_milliseconds().max(1) as f64;
    let top = values.iter().map(|(_, v)| *v).fold(0.0_f64, f64::max);
    let scale = if top > 0.0 { top } else { 1.0 };
    let points: Vec<String> = values
        .iter()
        .map(|(at, value)| {
            let x = ((*at - from).num_milliseconds() as f64 / span).clamp(0.0, 1.0) * WIDTH;
            let y = HEIGHT - value / scale * (HEIGHT - 4.0);
            format!("{x:.1},{y:.1}")
        })
        .collect();
    let latest = values.last().map_or(0.0, |(_, v)| *v);
    html! {
        figure.chart {
            figcaption { (title) ": " strong { (format_value(latest)) } span.quiet { " (peak " (format_value(top)) ")" } }
            svg #(id) viewBox=(format!("0 0 {WIDTH} {HEIGHT}")) width=(WIDTH) height=(HEIGHT)
                role="img" aria-label=(title) data-points=(values.len()) {
                line x1="0" y1=(HEIGHT) x2=(WIDTH) y2=(HEIGHT) stroke="#999" {}
                @if values.len() == 1 {
                    @let (x, y) = points[0].split_once(',').unwrap_or(("0", "0"));
                    circle cx=(x) cy=(y) r="3" fill="#2563eb" {}
                } @else if !values.is_empty() {
                    polyline points=(points.join(" ")) fill="none" stroke="#2563eb" stroke-width="2" {}
                }
            }
        }
    }
}

fn format_value(value: f64) -> String {
    if value.fract() == 0.0 {
        format!("{value:.0}")
    } else {
        format!("{value:.1}")
    }
}

/// The history section: pending rows, the oldest message's age,
/// deliveries and failures per sampling interval.
pub(super) fn history(data: &Data, now: DateTime<Utc>) -> Markup {
    let from = now - chrono::Duration::minutes(i64::from(data.minutes));
    let series = |f: fn(&Point) -> f64| -> Vec<(DateTime<Utc>, f64)> {
        data.history
            .iter()
            .map(|point| (point.at, f(point)))
            .collect()
    };
    let kind = kind_value(data.kind);
    html! {
        section #history {
            h2 { "History" }
            nav.ranges {
                @for minutes in RANGES {
                    @let class = if minutes == data.minutes { "tab current" } else { "tab" };
                    a class=(class) href=(format!("dashboard?kind={kind}&minutes={minutes}")) {
                        @if minutes < 120 { (minutes) " min" } @else { (minutes / 60) " h" }
                    }
                }
            }
            @if data.history.is_empty() {
                p.quiet { "No samples yet: the background workers record one with each gauge update (every 15 s by default)." }
            } @else {
                div.charts {
                    (chart("Pending rows", "chart-depth", from, now, &series(|p| p.depth as f64)))
                    (chart("Oldest pending (s)", "chart-age", from, now, &series(|p| p.oldest_age.map_or(0.0, |a| a.as_secs_f64()))))
                    (chart("Deliveries", "chart-delivered", from, now, &series(|p| p.delivered as f64)))
                    (chart("Failures", "chart-failed", from, now, &series(|p| p.failed as f64)))
                }
            }
        }
    }
}
