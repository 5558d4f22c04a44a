//! The trust fence (DNS-rebinding and cross-site defence), checked on every request before
//! authentication: the `Host` must name this server (a loopback name, the bound address, or
//! a `--trusted-host` entry), a browser's `Origin` (when sent) must be this same authority,
//! and `sec-fetch-site: cross-site` is refused.

use std::net::IpAddr;

use hyper::HeaderMap;

/// How far a request is trusted once it passed the fence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trust {
    /// Addressed to a loopback name or address: everything is allowed.
    Loopback,
    /// Addressed to the bound non-loopback address or a `--trusted-host` entry: sessions,
    /// yes; changing credentials and browsing directories, no.
    Remote,
}

/// Why a request was refused by the fence (answered 403 `forbidden`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused(pub &'static str);

/// The fence of one listener.
#[derive(Clone, Debug)]
pub struct Fence {
    bound: IpAddr,
    /// Bare `host[:port]` entries; a port-less entry admits any port.
    trusted: Vec<String>,
    /// The advertised root's origin (`https://app.example`), admitted as `Origin` whatever
    /// `Host` a proxy forwards.
    public_origin: Option<String>,
}

/// Splits `host[:port]` (IPv6 literals in brackets). `None` when malformed.
pub fn split_authority(authority: &str) -> Option<(&str, Option<u16>)> {
    if let Some(rest) = authority.strip_prefix('[') {
        let end = rest.find(']')?;
        let host = &authority[..end + 2];
        let tail = &rest[end + 1..];
        return match tail {
            "" => Some((host, None)),
            t => Some((host, Some(t.strip_prefix(':')?.parse().ok()?))),
        };
    }
    match authority.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') => Some((host, Some(port.parse().ok()?))),
        Some(_) => None, // a bare IPv6 literal without brackets is not an authority
        None => Some((authority, None)),
    }
}

fn host_ip(host: &str) -> Option<IpAddr> {
    host.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
        .parse()
        .ok()
}

fn is_loopback_host(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost") || host_ip(host).is_some_and(|ip| ip.is_loopback())
}

impl Fence {
    pub fn new(bound: IpAddr, trusted: Vec<String>) -> Self {
        Self {
            bound,
            trusted,
            public_origin: None,
        }
    }

    /// Follows the advertised root (`--public-url`): its authority is a trusted host (as
    /// `--trusted-host` would make it) and its origin an accepted `Origin`.
    pub fn with_public_url(mut self, url: Option<&str>) -> Self {
        let Some(url) = url else { return self };
        let Some((scheme, rest)) = url.split_once("://") else {
            return self;
        };
        let authority = rest
            .split('/')
            .next()
            .unwrap_or_default()
            .to_ascii_lowercase();
        // The default port is implied: a browser's Host then carries none.
        let bare = match split_authority(&authority) {
            Some((host, Some(443))) if scheme == "https" => host.to_string(),
            Some((host, Some(80))) if scheme == "http" => host.to_string(),
            _ => authority.clone(),
        };
        if !self.trusted.contains(&bare) {
            self.trusted.push(bare.clone());
        }
        self.public_origin = Some(format!("{scheme}://{bare}"));
        self
    }

    /// Checks one request's headers.
    pub fn check(&self, headers: &HeaderMap) -> Result<Trust, Refused> {
        let host = headers
            .get(hyper::header::HOST)
            .and_then(|h| h.to_str().ok())
            .ok_or(Refused("no Host header"))?;
        let authority = host.trim().to_ascii_lowercase();
        let (hostname, port) = split_authority(&authority).ok_or(Refused("malformed Host"))?;
        let trust = if is_loopback_host(hostname) {
            Trust::Loopback
        } else if host_ip(hostname) == Some(self.bound)
            || self.trusted.iter().any(|t| match split_authority(t) {
                Some((h, None)) => h == hostname,
                Some((h, Some(p))) => h == hostname && port == Some(p),
                None => false,
            })
        {
            Trust::Remote
        } else {
            return Err(Refused("Host is not this server"));
        };
        if headers
            .get("sec-fetch-site")
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"cross-site"))
        {
            return Err(Refused("cross-site request"));
        }
        if let Some(origin) = headers.get(hyper::header::ORIGIN) {
            let origin = origin
                .to_str()
                .map_err(|_| Refused("malformed Origin"))?
                .to_ascii_lowercase();
            let same = origin
                .strip_prefix("http://")
                .or_else(|| origin.strip_prefix("https://"))
                .is_some_and(|rest| rest == authority)
                || self.public_origin.as_deref() == Some(origin.as_str());
            if !same {
                return Err(Refused("Origin is not this server"));
            }
        }
        Ok(trust)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            if let Ok(v) = v.parse() {
                h.append(*k, v);
            }
        }
        h
    }

    #[test]
    fn hosts_origins_and_fetch_sites() {
        let fence = Fence::new(
            IpAddr::from([192, 0, 2, 2]),
            vec!["dev.example:8443".into(), "box".into()],
        );
        let check = |pairs: &[(&'static str, &str)]| fence.check(&headers(pairs));
        assert_eq!(check(&[("host", "127.0.0.1:3080")]), Ok(Trust::Loopback));
        assert_eq!(check(&[("host", "localhost:3080")]), Ok(Trust::Loopback));
        assert_eq!(check(&[("host", "[::1]:3080")]), Ok(Trust::Loopback));
        assert_eq!(check(&[("host", "127.7.0.1")]), Ok(Trust::Loopback));
        assert_eq!(check(&[("host", "192.0.2.2:3080")]), Ok(Trust::Remote));
        assert_eq!(check(&[("host", "dev.example:8443")]), Ok(Trust::Remote));
        assert_eq!(check(&[("host", "box:1")]), Ok(Trust::Remote));
        assert!(check(&[("host", "dev.example:9999")]).is_err());
        assert!(check(&[("host", "evil.example:3080")]).is_err());
        assert!(check(&[("host", "127.0.0.1.evil.example")]).is_err());
        assert!(check(&[]).is_err());
        assert!(check(&[("host", "a:b:c")]).is_err());
        assert_eq!(
            check(&[
                ("host", "127.0.0.1:3080"),
                ("origin", "http://127.0.0.1:3080")
            ]),
            Ok(Trust::Loopback)
        );
        assert!(
            check(&[
                ("host", "127.0.0.1:3080"),
                ("origin", "http://evil.example")
            ])
            .is_err()
        );
        assert!(check(&[("host", "127.0.0.1:3080"), ("origin", "null")]).is_err());
        assert!(
            check(&[
                ("host", "127.0.0.1:3080"),
                ("origin", "http://127.0.0.1:3081")
            ])
            .is_err()
        );
        assert!(check(&[("host", "127.0.0.1:3080"), ("sec-fetch-site", "cross-site")]).is_err());
        assert_eq!(
            check(&[
                ("host", "127.0.0.1:3080"),
                ("sec-fetch-site", "same-origin")
            ]),
            Ok(Trust::Loopback)
        );
    }

    #[test]
    fn authorities_split() {
        assert_eq!(split_authority("a:1"), Some(("a", Some(1))));
        assert_eq!(split_authority("[::1]:2"), Some(("[::1]", Some(2))));
        assert_eq!(split_authority("[::1]"), Some(("[::1]", None)));
        assert_eq!(split_authority("a"), Some(("a", None)));
        assert_eq!(split_authority("a:x"), None);
        assert_eq!(split_authority("::1"), None);
        assert_eq!(split_authority("[::1]x"), None);
    }

    #[test]
    fn the_public_url_is_a_trusted_host_and_origin() {
        let fence = Fence::new(IpAddr::from([127, 0, 0, 1]), Vec::new())
            .with_public_url(Some("https://app.example:443/ui/"));
        let check = |pairs: &[(&'static str, &str)]| fence.check(&headers(pairs));
        // A proxy that keeps the Host.
        assert_eq!(
            check(&[("host", "app.example"), ("origin", "https://app.example")]),
            Ok(Trust::Remote)
        );
        // A proxy that rewrites the Host to the backend.
        assert_eq!(
            check(&[
                ("host", "127.0.0.1:3080"),
                ("origin", "https://app.example")
            ]),
            Ok(Trust::Loopback)
        );
        assert!(check(&[("host", "app.example"), ("origin", "https://evil.example")]).is_err());
        assert!(
            check(&[
                ("host", "app.example"),
                ("origin", "http://app.example:8080")
            ])
            .is_err()
        );
        assert!(check(&[("host", "other.example")]).is_err());
    }
}
