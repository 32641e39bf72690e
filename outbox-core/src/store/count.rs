//! Counts that say how much they are worth: exact, a lower bound, or the
//! database's estimate.

/// How many rows the admin reads counted, and how sure that is.
///
/// Counting every row of a table is what makes an admin page slow on a large
/// backlog (and what slows the drain while it runs), so the admin reads
/// count at most up to a cap ([`DrainConfig::count_cap`], default
/// [`DEFAULT_COUNT_CAP`]): below it a count is [`Exact`](Count::Exact);
/// above it it is the planner's statistics ([`Estimated`](Count::Estimated),
/// PostgreSQL) or, where there are none, [`AtLeast`](Count::AtLeast) the cap.
///
/// [`Display`](std::fmt::Display) writes `12`, `≥ 10,000` or `~2.4M`:
///
/// ```
/// use outbox_core::store::Count;
///
/// assert_eq!(Count::Exact(12).to_string(), "12");
/// assert_eq!(Count::AtLeast(10_000).to_string(), "≥ 10,000");
/// assert_eq!(Count::Estimated(2_412_345).to_string(), "~2.4M");
/// assert_eq!(Count::up_to(10_001, 10_000), Count::AtLeast(10_000));
/// ```
///
/// In JSON (serde) it is `{"precision": "exact", "value": 12}`, the
/// precision one of `exact`, `at_least` and `estimated`.
///
/// [`DrainConfig::count_cap`]: crate::DrainConfig::count_cap
/// [`DEFAULT_COUNT_CAP`]: crate::drain::DEFAULT_COUNT_CAP
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(tag = "precision", content = "value", rename_all = "snake_case")]
pub enum Count {
    /// Exactly this many.
    Exact(u64),
    /// This many were counted and there are more: the count stopped at its
    /// cap.
    AtLeast(u64),
    /// About this many, from the database's statistics (PostgreSQL's
    /// `pg_stat_user_tables` and `pg_stats`): more than the cap.
    Estimated(u64),
}

impl Count {
    /// `n` rows counted by a read that stops after `cap + 1`: exact when
    /// `n ≤ cap`, else at least `cap`.
    pub fn up_to(n: u64, cap: u64) -> Self {
        if n <= cap {
            Count::Exact(n)
        } else {
            Count::AtLeast(cap)
        }
    }

    /// The number, whatever its precision: what a gauge shows.
    pub fn value(self) -> u64 {
        match self {
            Count::Exact(n) | Count::AtLeast(n) | Count::Estimated(n) => n,
        }
    }

    /// Whether it is [`Exact`](Count::Exact).
    pub fn is_exact(self) -> bool {
        matches!(self, Count::Exact(_))
    }

    /// `exact`, `at_least` or `estimated`: how the JSON views name it.
    pub fn precision(self) -> &'static str {
        match self {
            Count::Exact(_) => "exact",
            Count::AtLeast(_) => "at_least",
            Count::Estimated(_) => "estimated",
        }
    }
}

/// The sum of two counts: exact only when both are, an estimate when either
/// is, else at least the sum.
impl std::ops::Add for Count {
    type Output = Count;

    fn add(self, other: Count) -> Count {
        let n = self.value().saturating_add(other.value());
        match (self, other) {
            (Count::Exact(_), Count::Exact(_)) => Count::Exact(n),
            (Count::Estimated(_), _) | (_, Count::Estimated(_)) => Count::Estimated(n),
            _ => Count::AtLeast(n),
        }
    }
}

impl Default for Count {
    fn default() -> Self {
        Count::Exact(0)
    }
}

impl std::fmt::Display for Count {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Count::Exact(n) => write!(f, "{n}"),
            Count::AtLeast(n) => write!(f, "≥ {}", thousands(n)),
            Count::Estimated(n) => write!(f, "~{}", compact(n)),
        }
    }
}

/// `10000` as `10,000`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (at, digit) in digits.chars().enumerate() {
        if at > 0 && (digits.len() - at).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

/// `2412345` as `2.4M`, `12800` as `12.8k`, below 1,000 as it is.
fn compact(n: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1_000_000_000, "G"), (1_000_000, "M"), (1_000, "k")];
    for (size, unit) in UNITS {
        // In tenths of the unit, rounded: 999,960 is 1.0M, not 1000.0k
        // (but 999 stays 999).
        let tenths = (u128::from(n) * 10 + u128::from(size) / 2) / u128::from(size);
        if n >= size || (tenths >= 10 && size > 1_000) {
            return if tenths % 10 == 0 {
                format!("{}{unit}", tenths / 10)
            } else {
                format!("{}.{}{unit}", tenths / 10, tenths % 10)
            };
        }
    }
    n.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_say_how_sure_they_are() {
        assert_eq!(Count::up_to(0, 3), Count::Exact(0));
        assert_eq!(Count::up_to(3, 3), Count::Exact(3));
        assert_eq!(Count::up_to(4, 3), Count::AtLeast(3));
        assert_eq!(Count::Exact(1_234_567).to_string(), "1234567");
        assert_eq!(Count::AtLeast(999).to_string(), "≥ 999");
        assert_eq!(Count::AtLeast(1_000_000).to_string(), "≥ 1,000,000");
        assert_eq!(Count::Estimated(950).to_string(), "~950");
        assert_eq!(Count::Estimated(12_800).to_string(), "~12.8k");
        assert_eq!(Count::Estimated(10_000_000).to_string(), "~10M");
        assert_eq!(Count::Estimated(999_960).to_string(), "~1M");
        assert_eq!(Count::Estimated(999).to_string(), "~999");
        assert_eq!(Count::Exact(2) + Count::Exact(3), Count::Exact(5));
        assert_eq!(Count::Exact(2) + Count::AtLeast(3), Count::AtLeast(5));
        assert_eq!(
            Count::AtLeast(2) + Count::Estimated(30),
            Count::Estimated(32)
        );
        assert_eq!(Count::AtLeast(7).precision(), "at_least");
        assert_eq!(
            serde_json::to_value(Count::Estimated(9)).unwrap(),
            serde_json::json!({"precision": "estimated", "value": 9})
        );
        for count in [Count::Exact(1), Count::AtLeast(2), Count::Estimated(3)] {
            let json = serde_json::to_value(count).unwrap();
            assert_eq!(json["precision"], count.precision());
            assert_eq!(serde_json::from_value::<Count>(json).unwrap(), count);
        }
    }
}
