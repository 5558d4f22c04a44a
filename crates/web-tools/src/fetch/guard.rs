//! The address guard (upstream deferred it): a fetch may reach only public addresses unless
//! the configuration allows private networks or names the host. Every address a host
//! resolves to is checked (one private answer refuses the host), and the connection is
//! pinned to exactly the addresses that were checked, so a second resolution cannot swap
//! them (DNS rebinding). Runs for the first request and for every redirect hop.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use dsh_kernel::{BoxError, BoxFuture};

use crate::error::web_error;

/// Resolves host names (a seam so tests can answer for names they do not own).
pub trait HostResolver: Send + Sync + 'static {
    fn lookup(&self, host: &str, port: u16)
    -> BoxFuture<'static, std::io::Result<Vec<SocketAddr>>>;
}

/// The system resolver (`getaddrinfo` through tokio).
pub struct SystemResolver;

impl HostResolver for SystemResolver {
    fn lookup(
        &self,
        host: &str,
        port: u16,
    ) -> BoxFuture<'static, std::io::Result<Vec<SocketAddr>>> {
        let host = host.to_string();
        Box::pin(async move {
            Ok(tokio::net::lookup_host((host.as_str(), port))
                .await?
                .collect())
        })
    }
}

/// Who may be reached besides public addresses.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AddressPolicy {
    /// Allow every address (the guard is off).
    pub allow_private_network: bool,
    /// Exact `host` or `host:port` entries reachable whatever they resolve to.
    pub allowed_hosts: Vec<String>,
}

impl AddressPolicy {
    fn allows_host(&self, host: &str, port: u16) -> bool {
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase();
        self.allowed_hosts.iter().any(|entry| {
            let entry = entry.to_ascii_lowercase();
            entry == host
                || entry == format!("{host}:{port}")
                || entry == format!("[{host}]:{port}")
        })
    }
}

/// Whether `ip` is outside the public internet (loopback, private, link-local, shared,
/// documentation, benchmarking, multicast, reserved, unspecified, and IPv4 embedded in
/// IPv6 forms that reach those).
pub fn is_blocked(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => blocked_v4(v4),
        IpAddr::V6(v6) => blocked_v6(v6),
    }
}

fn blocked_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    a == 0
        || a == 10
        || (a == 100 && (64..128).contains(&b))
        || a == 127
        || (a == 169 && b == 254)
        || (a == 172 && (16..32).contains(&b))
        || (a == 192 && b == 0 && c == 0)
        || (a == 192 && b == 0 && c == 2)
        || (a == 192 && b == 168)
        || (a == 198 && (b == 18 || b == 19))
        || (a == 198 && b == 51 && c == 100)
        || (a == 203 && b == 0 && c == 113)
        || a >= 224
}

fn blocked_v6(ip: Ipv6Addr) -> bool {
    let s = ip.segments();
    if ip.is_unspecified() || ip.is_loopback() {
        return true;
    }
    // IPv4-mapped (::ffff:a.b.c.d), IPv4-compatible (::a.b.c.d) and NAT64 (64:ff9b::/96).
    let embedded = |hi: &[u16]| {
        Ipv4Addr::new(
            (hi[0] >> 8) as u8,
            hi[0] as u8,
            (hi[1] >> 8) as u8,
            hi[1] as u8,
        )
    };
    if s[..5] == [0, 0, 0, 0, 0] && (s[5] == 0xffff || s[5] == 0) {
        return blocked_v4(embedded(&s[6..]));
    }
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return blocked_v4(embedded(&s[6..]));
    }
    (s[0] & 0xfe00) == 0xfc00 // unique local fc00::/7
        || (s[0] & 0xffc0) == 0xfe80 // link-local fe80::/10
        || (s[0] & 0xff00) == 0xff00 // multicast
        || (s[0] == 0x0100 && s[1] == 0 && s[2] == 0 && s[3] == 0) // discard 100::/64
        || (s[0] == 0x2001 && s[1] == 0x0db8) // documentation
}

fn refusal(host: &str, ip: IpAddr) -> BoxError {
    web_error(
        "WEB_BLOCKED_URL",
        format!(
            "refusing to fetch {host}: it resolves to a non-public address ({ip}); set allowPrivateNetwork or allowedHosts on web-fetch-http to permit it"
        ),
    )
}

/// The addresses a request to `host:port` may connect to, after the policy check. For a
/// name, these are what the connection is pinned to.
pub async fn vet(
    host: &url::Host<&str>,
    port: u16,
    policy: &AddressPolicy,
    resolver: &Arc<dyn HostResolver>,
    timeout: Duration,
) -> Result<Vec<SocketAddr>, BoxError> {
    let (name, addrs) = match host {
        url::Host::Ipv4(ip) => (ip.to_string(), vec![SocketAddr::new(IpAddr::V4(*ip), port)]),
        url::Host::Ipv6(ip) => (
            format!("[{ip}]"),
            vec![SocketAddr::new(IpAddr::V6(*ip), port)],
        ),
        url::Host::Domain(d) => {
            let found = tokio::time::timeout(timeout, resolver.lookup(d, port))
                .await
                .map_err(|_| {
                    web_error(
                        "WEB_PROVIDER_ERROR",
                        format!("web fetch failed: resolving {d} timed out"),
                    )
                })?
                .map_err(|e| {
                    web_error(
                        "WEB_PROVIDER_ERROR",
                        format!("web fetch failed: cannot resolve {d}: {e}"),
                    )
                })?;
            if found.is_empty() {
                return Err(web_error(
                    "WEB_PROVIDER_ERROR",
                    format!("web fetch failed: {d} has no addresses"),
                ));
            }
            (d.to_string(), found)
        }
    };
    if policy.allow_private_network || policy.allows_host(&name, port) {
        return Ok(addrs);
    }
    if let Some(bad) = addrs.iter().find(|a| is_blocked(a.ip())) {
        return Err(refusal(&name, bad.ip()));
    }
    Ok(addrs)
}

/// The resolver reqwest is given: it refuses every name, so a connection can only use the
/// addresses pinned after vetting (never a fresh, unchecked resolution).
pub struct PinnedOnly;

impl reqwest::dns::Resolve for PinnedOnly {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let host = name.as_str().to_string();
        Box::pin(async move { Err(format!("{host} was not vetted by the address guard").into()) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_public_addresses_are_blocked() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "169.254.169.254",
            "172.16.0.1",
            "192.168.1.1",
            "0.0.0.0",
            "100.64.0.1",
            "224.0.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fe80::1",
            "fc00::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "64:ff9b::a00:1",
            "2001:db8::1",
        ] {
            assert!(is_blocked(ip.parse().unwrap()), "{ip}");
        }
        for ip in [
            "93.184.216.34",
            "1.1.1.1",
            "2606:4700:4700::1111",
            "::ffff:8.8.8.8",
            "172.32.0.1",
        ] {
            assert!(!is_blocked(ip.parse().unwrap()), "{ip}");
        }
    }

    #[test]
    fn allowed_hosts_match_exactly() {
        let p = AddressPolicy {
            allow_private_network: false,
            allowed_hosts: vec!["127.0.0.1:43117".into(), "intranet".into()],
        };
        assert!(p.allows_host("127.0.0.1", 43117));
        assert!(!p.allows_host("127.0.0.1", 80));
        assert!(p.allows_host("INTRANET", 8080));
    }
}
