//! The Markdown tables the workspace's benches print on stdout, in the form
//! of their sections in `docs/benchmarks.md`: refreshing a section is
//! pasting them (progress goes to stderr).
//!
//! ```
//! use outbox_testing::bench::{ratio, thousands, Table};
//! let mut table = Table::new(&["case", "msgs/s", "÷ floor"]);
//! table.row(["(a)".to_owned(), thousands(52_000.0), ratio(0.41)]);
//! assert_eq!(
//!     table.to_string(),
//!     "| case | msgs/s | ÷ floor |\n|---|---:|---:|\n| (a) | 52,000 | 0.41× |\n"
//! );
//! ```

use std::fmt;
use std::time::Duration;

/// A Markdown table: labels in the first column, figures right-aligned in
/// the others.
#[derive(Clone, Debug)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table of these column headers.
    pub fn new(header: &[&str]) -> Self {
        Table {
            header: header.iter().map(|&cell| cell.to_owned()).collect(),
            rows: Vec::new(),
        }
    }

    /// A row; an empty cell is a figure this run did not measure.
    ///
    /// # Panics
    ///
    /// When the row has another number of cells than the header.
    pub fn row<I, S>(&mut self, cells: I)
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let row: Vec<String> = cells.into_iter().map(Into::into).collect();
        assert_eq!(row.len(), self.header.len(), "a row of {row:?}");
        self.rows.push(row);
    }
}

fn line(f: &mut fmt::Formatter<'_>, cells: &[String]) -> fmt::Result {
    for cell in cells {
        if cell.is_empty() {
            write!(f, "| ")?;
        } else {
            write!(f, "| {cell} ")?;
        }
    }
    writeln!(f, "|")
}

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        line(f, &self.header)?;
        let rule: Vec<String> = (0..self.header.len())
            .map(|column| if column == 0 { "---" } else { "---:" }.to_owned())
            .collect();
        writeln!(f, "|{}|", rule.join("|"))?;
        for row in &self.rows {
            line(f, row)?;
        }
        Ok(())
    }
}

/// A whole number with thousands separators: `11,089`.
pub fn thousands(value: f64) -> String {
    if !value.is_finite() {
        return String::new();
    }
    let digits = format!("{:.0}", value.abs());
    let mut grouped = String::new();
    for (at, digit) in digits.chars().enumerate() {
        if at > 0 && (digits.len() - at) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(digit);
    }
    if value < -0.5 {
        grouped.insert(0, '-');
    }
    grouped
}

/// A ratio, two decimals and a `×` (empty if not measured).
pub fn ratio(value: f64) -> String {
    if value.is_finite() {
        format!("{value:.2}×")
    } else {
        String::new()
    }
}

/// Milliseconds: `1.25 ms`.
pub fn ms(duration: Duration) -> String {
    format!("{:.2} ms", duration.as_secs_f64() * 1e3)
}
