//! Failed credentials, counted per client: after too many in a window the
//! client's next attempts are refused with `429` before they are checked,
//! so that a token cannot be guessed at the speed of the network.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::ConnectInfo;
use axum::http::request::Parts;

/// Failed attempts a client may make in a window: 10.
pub const DEFAULT_FAILURES: u32 = 10;
/// The window: one minute.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(60);
/// Clients tracked at most; beyond, the oldest windows are forgotten.
const TRACKED: usize = 10_000;

/// The failures of each client in its current window.
#[derive(Clone, Debug)]
pub(crate) struct Throttle {
    failures: u32,
    window: Duration,
    clients: Arc<Mutex<HashMap<IpAddr, (u32, Instant)>>>,
}

impl Default for Throttle {
    fn default() -> Self {
        Self::new(DEFAULT_FAILURES, DEFAULT_WINDOW)
    }
}

impl Throttle {
    pub(crate) fn new(failures: u32, window: Duration) -> Self {
        Self {
            failures: failures.max(1),
            window,
            clients: Arc::default(),
        }
    }

    /// The client's address: the connection's peer when the server was
    /// started with `into_make_service_with_connect_info::<SocketAddr>()`,
    /// else one address for every client (then failures anywhere throttle
    /// everyone, which still stops guessing).
    pub(crate) fn client(parts: &Parts) -> IpAddr {
        parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |info| info.0.ip())
    }

    fn clients(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, (u32, Instant)>> {
        self.clients
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `Err(retry_after)` while `client` has used up its failures.
    pub(crate) fn check(&self, client: IpAddr) -> Result<(), Duration> {
        let clients = self.clients();
        match clients.get(&client) {
            Some(&(count, since)) if count >= self.failures => {
                let left = self.window.saturating_sub(since.elapsed());
                if left.is_zero() {
                    Ok(())
                } else {
                    Err(left)
                }
            }
            _ => Ok(()),
        }
    }

    /// Counts a failed attempt of `client`.
    pub(crate) fn failed(&self, client: IpAddr) {
        let mut clients = self.clients();
        let now = Instant::now();
        if clients.len() >= TRACKED {
            let window = self.window;
            clients.retain(|_, (_, since)| now.duration_since(*since) < window);
        }
        let entry = clients.entry(client).or_insert((0, now));
        if now.duration_since(entry.1) >= self.window {
            *entry = (0, now);
        }
        entry.0 += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_is_refused_after_its_failures_and_others_are_not() {
        let throttle = Throttle::new(3, Duration::from_secs(3600));
        let (guesser, other) = ([10, 0, 0, 1].into(), [10, 0, 0, 2].into());
        for _ in 0..3 {
            assert!(throttle.check(guesser).is_ok());
            throttle.failed(guesser);
        }
        let retry_after = throttle.check(guesser).unwrap_err();
        assert!(retry_after > Duration::from_secs(3500), "{retry_after:?}");
        assert!(throttle.check(other).is_ok());
        let expired = Throttle::new(1, Duration::ZERO);
        expired.failed(guesser);
        assert!(expired.check(guesser).is_ok(), "a window that ended");
    }
}
