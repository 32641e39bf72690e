//! The fencing token itself: a number that only grows per shard (what it
//! means, and what a receiver does with it: [`crate::fence`]).
//!
//! A leaf: messages carry a token and `fence` reads messages, so the token
//! is defined apart from both.

use std::fmt;

/// The fencing token of a claim: grows with every claim of a shard, across
/// processes and database restarts. See [`crate::fence`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FencingToken(i64);

impl FencingToken {
    /// A token read from a store.
    pub const fn new(value: i64) -> Self {
        Self(value)
    }

    /// Its value, as stored and sent (e.g. in a header).
    pub const fn get(self) -> i64 {
        self.0
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl std::str::FromStr for FencingToken {
    type Err = std::num::ParseIntError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.trim().parse().map(Self)
    }
}

impl From<FencingToken> for i64 {
    fn from(token: FencingToken) -> Self {
        token.0
    }
}
