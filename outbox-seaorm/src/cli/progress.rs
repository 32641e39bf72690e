//! Progress bars on long work (`drain`, `backfill run`, `--all`).

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Where progress bars go.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Progress {
    /// Standard error, when it is a terminal (indicatif draws nothing
    /// otherwise). The default.
    #[default]
    Terminal,
    /// Nowhere (`--json`, tests).
    Hidden,
}

impl Progress {
    /// What a command with `--json` (`json = true`) or without uses.
    pub fn for_output(json: bool) -> Self {
        if json {
            Progress::Hidden
        } else {
            Progress::Terminal
        }
    }

    fn target(self) -> ProgressDrawTarget {
        match self {
            Progress::Terminal => ProgressDrawTarget::stderr(),
            Progress::Hidden => ProgressDrawTarget::hidden(),
        }
    }

    /// A bar of `len` steps, with `message` before it.
    pub fn bar(self, len: u64, message: impl Into<String>) -> ProgressBar {
        ProgressBar::with_draw_target(Some(len), self.target())
            .with_style(style())
            .with_message(message.into())
    }

    /// A group of bars drawn together (one per backfilled table).
    pub fn multi(self) -> MultiProgress {
        MultiProgress::with_draw_target(self.target())
    }
}

fn style() -> ProgressStyle {
    // A constant, valid template: `with_template` cannot fail on it; the
    // default style stands in should it ever.
    ProgressStyle::with_template(
        "{msg:>24} [{bar:30.cyan/blue}] {pos:>7}/{len:7} rows ({elapsed}, eta {eta})",
    )
    .map(|style| style.progress_chars("#>."))
    .unwrap_or_else(|_| ProgressStyle::default_bar())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_output_hides_the_bars() {
        assert_eq!(Progress::for_output(true), Progress::Hidden);
        assert_eq!(Progress::for_output(false), Progress::Terminal);
        assert!(Progress::Hidden.bar(10, "x").is_hidden());
        assert_eq!(Progress::default(), Progress::Terminal);
    }
}
