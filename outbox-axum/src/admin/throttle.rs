//! Failed credentials, counted per client: after too many in a window the
//! client's next attempts are refused with `429` before they are checked,
//! so that a token cannot be guessed at the speed of the network.
//!
//! A client is an IPv4 address or an IPv6 /64 (one host's allocation: a
//! client that rotates through its own /64 stays one client). The table
//! holds at most [`TRACKED_CLIENTS`] clients, and a failure costs O(1)
//! amortised: windows are kept in the order they opened, so that the ended
//! ones are dropped from the front, and at the ceiling the oldest window
//! makes room. One client's failures never refuse another client.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::connect_info::MockConnectInfo;
use axum::extract::ConnectInfo;
use axum::http::request::Parts;
use axum::http::HeaderName;

/// Failed attempts a client may make in a window: 10.
pub const DEFAULT_FAILURES: u32 = 10;
/// The window: one minute.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(60);
/// Clients tracked at most: past it, a new client's window replaces the
/// oldest one.
pub const TRACKED_CLIENTS: usize = 16_384;

/// Where the admin router finds the address of the client that sent a
/// request: what its login throttle counts wrong credentials by
/// ([`Admin::client_address`](super::Admin::client_address)).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClientAddress {
    /// The connection's peer, `ConnectInfo<SocketAddr>`: serve the router
    /// with `into_make_service_with_connect_info::<SocketAddr>()` (or
    /// insert it yourself, or `MockConnectInfo` in tests). A request
    /// without it is refused with `500 no_client_address`, and the log
    /// says how to fix it: without an address, every client would share
    /// one allowance, and one guesser would lock every operator out. The
    /// default.
    #[default]
    ConnectInfo,
    /// The last address in this header, which a reverse proxy in front of
    /// the service sets or appends (`X-Forwarded-For`, `X-Real-IP`): for a
    /// service that every request reaches through that proxy. Reachable
    /// directly, a client would write any address it likes there. A
    /// request without a readable address in it is refused with `400
    /// no_client_address`.
    TrustedHeader(HeaderName),
}

impl ClientAddress {
    /// [`ClientAddress::TrustedHeader`] of `name` (e.g.
    /// `"x-forwarded-for"`).
    ///
    /// # Panics
    ///
    /// If `name` is not a valid header name: it is a constant of your
    /// configuration.
    pub fn trusted_header(name: &str) -> Self {
        match HeaderName::from_str(name) {
            Ok(name) => Self::TrustedHeader(name),
            Err(_) => panic!("{name:?} is not an HTTP header name"),
        }
    }

    /// The client's address in `parts`.
    pub(crate) fn of(&self, parts: &Parts) -> Result<IpAddr, NoClientAddress> {
        match self {
            ClientAddress::ConnectInfo => parts
                .extensions
                .get::<ConnectInfo<SocketAddr>>()
                .map(|info| info.0.ip())
                .or_else(|| {
                    parts
                        .extensions
                        .get::<MockConnectInfo<SocketAddr>>()
                        .map(|info| info.0.ip())
                })
                .ok_or(NoClientAddress::NoConnectInfo),
            ClientAddress::TrustedHeader(name) => parts
                .headers
                .get_all(name)
                .iter()
                .next_back()
                .and_then(|value| value.to_str().ok())
                .and_then(|value| value.rsplit(',').next())
                .and_then(|last| parse_address(last.trim()))
                .ok_or_else(|| NoClientAddress::NoHeader(name.clone())),
        }
    }
}

/// An address as proxies write it: `192.0.2.1`, `2001:db8::1`,
/// `[2001:db8::1]:443` or `192.0.2.1:443`.
fn parse_address(text: &str) -> Option<IpAddr> {
    text.parse::<IpAddr>()
        .ok()
        .or_else(|| text.parse::<SocketAddr>().ok().map(|addr| addr.ip()))
}

/// A request whose client cannot be told apart from others.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum NoClientAddress {
    /// `ClientAddress::ConnectInfo`, and the server inserts none.
    NoConnectInfo,
    /// `ClientAddress::TrustedHeader`, and the request has no address in it.
    NoHeader(HeaderName),
}

/// Whom failures are counted for: an IPv4 address, or an IPv6 /64.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Client {
    V4(u32),
    V6(u64),
}

impl From<IpAddr> for Client {
    fn from(address: IpAddr) -> Self {
        match address {
            IpAddr::V4(v4) => Client::V4(v4.into()),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Client::V4(v4.into()),
                // The top 64 bits: the network a host's addresses share.
                None => Client::V6((u128::from(v6) >> 64) as u64),
            },
        }
    }
}

/// One client's current window.
#[derive(Clone, Copy, Debug)]
struct Window {
    failures: u32,
    opened: Instant,
}

/// The clients' windows, and the order they opened in.
#[derive(Debug, Default)]
struct Clients {
    windows: HashMap<Client, Window>,
    /// `(client, opened)` for every window opened, oldest first; an entry
    /// whose window has been replaced since is skipped when it comes up.
    opened: VecDeque<(Client, Instant)>,
}

impl Clients {
    /// Drops the front window: ended ones, or at the ceiling the oldest.
    fn pop_front(&mut self) {
        if let Some((client, opened)) = self.opened.pop_front() {
            if let Entry::Occupied(window) = self.windows.entry(client) {
                if window.get().opened == opened {
                    window.remove();
                }
            }
        }
    }

    /// Drops every window that ended by `now`.
    fn prune(&mut self, now: Instant, window: Duration) {
        while let Some(&(_, opened)) = self.opened.front() {
            if now.saturating_duration_since(opened) < window {
                break;
            }
            self.pop_front();
        }
    }
}

/// The failures of each client in its current window; clones share them.
#[derive(Clone, Debug)]
pub(crate) struct Throttle {
    failures: u32,
    window: Duration,
    ceiling: usize,
    clients: Arc<Mutex<Clients>>,
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
            ceiling: TRACKED_CLIENTS,
            clients: Arc::default(),
        }
    }

    #[cfg(test)]
    fn with_ceiling(self, ceiling: usize) -> Self {
        Self {
            ceiling: ceiling.max(1),
            ..self
        }
    }

    fn clients(&self) -> std::sync::MutexGuard<'_, Clients> {
        self.clients
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `Err(retry_after)` while `client` has used up its failures.
    pub(crate) fn check(&self, client: IpAddr) -> Result<(), Duration> {
        self.check_at(client.into(), Instant::now())
    }

    fn check_at(&self, client: Client, now: Instant) -> Result<(), Duration> {
        let clients = self.clients();
        match clients.windows.get(&client) {
            Some(window) if window.failures >= self.failures => {
                let left = self
                    .window
                    .saturating_sub(now.saturating_duration_since(window.opened));
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
        self.failed_at(client.into(), Instant::now());
    }

    fn failed_at(&self, client: Client, now: Instant) {
        let mut clients = self.clients();
        clients.prune(now, self.window);
        if let Some(window) = clients.windows.get_mut(&client) {
            window.failures = window.failures.saturating_add(1);
            return;
        }
        while clients.windows.len() >= self.ceiling {
            clients.pop_front();
        }
        clients.windows.insert(
            client,
            Window {
                failures: 1,
                opened: now,
            },
        );
        clients.opened.push_back((client, now));
    }

    /// How many clients are tracked now.
    #[cfg(test)]
    fn tracked(&self) -> (usize, usize) {
        let clients = self.clients();
        (clients.windows.len(), clients.opened.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

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

    #[test]
    fn an_ipv6_client_is_its_64_and_a_mapped_ipv4_its_address() {
        let throttle = Throttle::new(2, Duration::from_secs(60));
        let host = |last: u16| IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 1, 2, 0, 0, 0, last));
        throttle.failed(host(1));
        throttle.failed(host(0xffff));
        assert!(throttle.check(host(7)).is_err(), "the same /64");
        let next_64 = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 1, 3, 0, 0, 0, 1));
        assert!(throttle.check(next_64).is_ok(), "another /64");

        let v4 = Ipv4Addr::new(192, 0, 2, 1);
        throttle.failed(IpAddr::V4(v4));
        throttle.failed(IpAddr::V6(v4.to_ipv6_mapped()));
        assert!(throttle.check(IpAddr::V4(v4)).is_err());
    }

    #[test]
    fn the_table_has_a_ceiling_and_ended_windows_leave_it() {
        let window = Duration::from_secs(60);
        let throttle = Throttle::new(3, window).with_ceiling(100);
        let start = Instant::now();
        // 10,000 rotating addresses: never more than the ceiling.
        for i in 0..10_000u32 {
            throttle.failed_at(Client::V4(i), start);
            let (windows, opened) = throttle.tracked();
            assert!(windows <= 100 && opened <= 100, "{windows} {opened}");
        }
        // The newest are kept, the oldest made room.
        assert!(throttle.clients().windows.contains_key(&Client::V4(9_999)));
        assert!(!throttle.clients().windows.contains_key(&Client::V4(0)));
        // Once their windows end, one more failure clears them all.
        throttle.failed_at(Client::V4(1), start + window);
        assert_eq!(throttle.tracked(), (1, 1));
    }

    #[test]
    fn a_flood_from_one_client_refuses_only_it_at_any_table_size() {
        let throttle = Throttle::new(10, Duration::from_secs(60)).with_ceiling(1_000);
        let start = Instant::now();
        let operator = Client::V4(u32::from(Ipv4Addr::new(10, 0, 0, 9)));
        // 999 clients, 20 failures each.
        for i in 0..19_980u32 {
            throttle.failed_at(Client::V4(i % 999), start);
        }
        assert!(throttle.check_at(Client::V4(3), start).is_err());
        assert!(throttle.check_at(operator, start).is_ok());
    }

    #[test]
    fn the_client_comes_from_connect_info_or_the_trusted_header_only() {
        let parts = |headers: &[(&str, &str)], peer: Option<SocketAddr>| {
            let mut request = axum::http::Request::builder();
            for (name, value) in headers {
                request = request.header(*name, *value);
            }
            let mut parts = request.body(()).unwrap().into_parts().0;
            if let Some(peer) = peer {
                parts.extensions.insert(ConnectInfo(peer));
            }
            parts
        };
        let peer: SocketAddr = "192.0.2.7:5000".parse().unwrap();
        let forwarded = [("x-forwarded-for", "203.0.113.9, 198.51.100.3")];

        let direct = ClientAddress::ConnectInfo;
        assert_eq!(direct.of(&parts(&forwarded, Some(peer))), Ok(peer.ip()));
        assert_eq!(
            direct.of(&parts(&forwarded, None)),
            Err(NoClientAddress::NoConnectInfo)
        );
        let mut mocked = parts(&[], None);
        mocked.extensions.insert(MockConnectInfo(peer));
        assert_eq!(direct.of(&mocked), Ok(peer.ip()));

        let proxied = ClientAddress::trusted_header("x-forwarded-for");
        // The proxy appends the address it saw: the last one.
        assert_eq!(
            proxied.of(&parts(&forwarded, Some(peer))),
            Ok("198.51.100.3".parse().unwrap())
        );
        assert_eq!(
            proxied.of(&parts(&[("x-forwarded-for", "[2001:db8::1]:443")], None)),
            Ok("2001:db8::1".parse().unwrap())
        );
        for missing in [&[][..], &[("x-forwarded-for", "unknown")][..]] {
            assert!(matches!(
                proxied.of(&parts(missing, Some(peer))),
                Err(NoClientAddress::NoHeader(_))
            ));
        }
    }
}
