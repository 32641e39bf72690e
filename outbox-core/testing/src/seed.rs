//! The seed of a randomised test: given, to replay a run, or drawn.

/// The seed in the environment variable `var` (a `u64`), or a random one;
/// printed to standard error as `var=seed` either way, so that the output
/// of a failing test (the harness shows it) says how to replay it. Put the
/// seed in the test's failure messages too.
///
/// ```
/// use rand::{rngs::StdRng, Rng, SeedableRng};
///
/// let seed = outbox_testing::seed("OUTBOX_EXAMPLE_SEED");
/// let mut rng = StdRng::seed_from_u64(seed);
/// let kill_after: u32 = rng.random_range(1..50);
/// assert!((1..50).contains(&kill_after), "OUTBOX_EXAMPLE_SEED={seed}");
/// ```
///
/// # Panics
///
/// When `var` is set to something other than a `u64`.
pub fn seed(var: &str) -> u64 {
    let seed = match std::env::var(var) {
        Ok(given) => given
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{var}={given:?} is not a seed (a u64)")),
        Err(_) => rand::random(),
    };
    eprintln!("{var}={seed}");
    seed
}
