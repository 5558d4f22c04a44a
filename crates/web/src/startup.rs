//! The web app's command line (`dsh web [options]`): parsed before any row is evaluated,
//! exposed to the composition as `ctx.webStartup`.

use std::net::IpAddr;

use serde_json::{Value, json};

pub const HELP: &str = "\
Usage: dsh web [options]
       dsh --profile web [options]

Serve the browser UI: sessions, workspaces, settings and the conversation, for every
session of this machine, from this one process.

Options:
  --host <address>             the address to listen on (default 127.0.0.1); one concrete
                               IPv4 or IPv6 address, `localhost` means 127.0.0.1
  --port <port>                the port (default 3080; 0 picks a free one)
  --no-open                    do not open the default browser
  --trusted-host <authority>   also accept requests addressed to this host[:port]
                               (repeatable), e.g. behind a reverse proxy
  --public-url <url>           the address browsers reach this server at through a proxy,
                               http(s)://host[:port][/prefix/]: the printed sign-in URL
                               uses it and requests addressed to it are accepted
  --tls-cert <file>            serve HTTPS with this PEM certificate chain ...
  --tls-key <file>             ... and this PEM private key (both or neither)
  -h, --help                   show this help

The URL printed at startup carries a one-time token; opening it signs the browser in
(an HttpOnly cookie). Requests without it are refused.
";

/// Default port (upstream's).
pub const DEFAULT_PORT: u16 = 3080;

/// Parsed `dsh web` arguments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebStartup {
    pub host: IpAddr,
    pub port: u16,
    pub open_browser: bool,
    /// Bare canonical `host[:port]` authorities.
    pub trusted_hosts: Vec<String>,
    /// The advertised root (`http(s)://host[:port]/prefix/`, ending in `/`).
    pub public_url: Option<String>,
    /// PEM certificate chain and private key files, as given.
    pub tls: Option<(String, String)>,
}

impl Default for WebStartup {
    fn default() -> Self {
        Self {
            host: IpAddr::from([127, 0, 0, 1]),
            port: DEFAULT_PORT,
            open_browser: true,
            trusted_hosts: Vec::new(),
            public_url: None,
            tls: None,
        }
    }
}

impl WebStartup {
    /// The `ctx.webStartup` object rows read.
    pub fn to_ctx_value(&self) -> Value {
        let mut value = json!({
            "host": self.host.to_string(),
            "port": self.port,
            "openBrowser": self.open_browser,
            "trustedHosts": self.trusted_hosts,
        });
        if let Some(url) = &self.public_url {
            value["publicUrl"] = json!(url);
        }
        if let Some((cert, key)) = &self.tls {
            value["tls"] = json!({"certFile": cert, "keyFile": key});
        }
        value
    }
}

/// What the command line asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Startup {
    Help,
    Run(WebStartup),
}

/// Parses the app arguments. `Err` is a usage error line (`error: …`, exit 1).
pub fn parse_args(args: &[String]) -> Result<Startup, String> {
    let mut startup = WebStartup::default();
    let (mut cert, mut key) = (None, None);
    let mut i = 0;
    while i < args.len() {
        let arg = args[i].as_str();
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n, Some(v.to_string())),
            _ => (arg, None),
        };
        let mut value = |flag: &str| -> Result<String, String> {
            match &inline {
                Some(v) => Ok(v.clone()),
                None => {
                    i += 1;
                    args.get(i)
                        .cloned()
                        .ok_or_else(|| format!("error: option '{flag}' argument missing"))
                }
            }
        };
        match name {
            "-h" | "--help" => return Ok(Startup::Help),
            "--no-open" => startup.open_browser = false,
            "--host" => startup.host = parse_host(&value("--host <host>")?)?,
            "--port" => startup.port = parse_port(&value("--port <port>")?)?,
            "--trusted-host" => {
                let v = value("--trusted-host <authority...>")?;
                startup.trusted_hosts.push(parse_authority(&v)?);
            }
            "--public-url" => {
                let v = value("--public-url <url>")?;
                startup.public_url = Some(parse_public_url(&v, "--public-url")?);
            }
            "--tls-cert" => cert = Some(value("--tls-cert <file>")?),
            "--tls-key" => key = Some(value("--tls-key <file>")?),
            other if other.starts_with('-') => {
                return Err(format!("error: unknown option '{other}'"));
            }
            other => {
                return Err(format!(
                    "error: dsh web takes no arguments, got \"{other}\" (see dsh web --help)"
                ));
            }
        }
        i += 1;
    }
    startup.tls = match (cert, key) {
        (Some(c), Some(k)) => Some((c, k)),
        (None, None) => None,
        (Some(_), None) => {
            return Err("error: --tls-cert needs --tls-key (the certificate's private key)".into());
        }
        (None, Some(_)) => {
            return Err("error: --tls-key needs --tls-cert (the certificate chain)".into());
        }
    };
    Ok(Startup::Run(startup))
}

/// The advertised root of a (possibly prefix-stripping) proxy: an absolute http(s) URL
/// with a host, no credentials, query or fragment; the path gets a trailing `/`. `label`
/// names the flag or key in the error.
pub fn parse_public_url(text: &str, label: &str) -> Result<String, String> {
    let bad = |why: &str| format!("error: {label} \"{text}\" {why}");
    if text.chars().any(|c| c.is_ascii_control() || c == ' ') {
        return Err(bad("contains spaces or control characters"));
    }
    let lower = text.to_ascii_lowercase();
    let (scheme, rest) = if let Some(r) = lower.strip_prefix("https://") {
        ("https", &text[8..8 + r.len()])
    } else if let Some(r) = lower.strip_prefix("http://") {
        ("http", &text[7..7 + r.len()])
    } else {
        return Err(bad("is not an absolute http:// or https:// URL"));
    };
    if rest.contains(['?', '#']) {
        return Err(bad("has a query or fragment; give the root only"));
    }
    let (authority, path) = match rest.find(['/', '\\']) {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    if authority.contains('@') {
        return Err(bad("carries credentials (user@); leave them out"));
    }
    if path.contains('\\') {
        return Err(bad("has a backslash in its path"));
    }
    let authority = parse_authority(authority)
        .map_err(|_| bad("does not name a host[:port] after the scheme"))?;
    let path = if path.ends_with('/') {
        path.to_string()
    } else {
        format!("{path}/")
    };
    Ok(format!("{scheme}://{authority}{path}"))
}

fn parse_host(text: &str) -> Result<IpAddr, String> {
    if text.eq_ignore_ascii_case("localhost") {
        return Ok(IpAddr::from([127, 0, 0, 1]));
    }
    let bare = text
        .strip_prefix('[')
        .and_then(|t| t.strip_suffix(']'))
        .unwrap_or(text);
    let ip: IpAddr = bare.parse().map_err(|_| {
        format!("error: --host must be an IPv4 or IPv6 address (or localhost), got \"{text}\"")
    })?;
    if ip.is_unspecified() {
        return Err(format!(
            "error: --host {text} is a wildcard address, which is not supported: listening on every interface would expose remote code execution to the network; bind one concrete address (127.0.0.1 is the default)"
        ));
    }
    if ip.is_multicast() {
        return Err(format!(
            "error: --host {text} is a multicast address; bind one concrete address"
        ));
    }
    Ok(ip)
}

fn parse_port(text: &str) -> Result<u16, String> {
    text.parse::<u16>().map_err(|_| {
        if text.chars().all(|c| c.is_ascii_digit()) && !text.is_empty() {
            format!("error: --port must be between 0 and 65535, got {text}")
        } else {
            format!("error: --port must be a number, got \"{text}\"")
        }
    })
}

/// A bare canonical `host[:port]` authority (lower-cased host, no scheme, path or userinfo).
pub fn parse_authority(text: &str) -> Result<String, String> {
    let bad = || format!("error: --trusted-host \"{text}\" is not a bare host[:port] authority");
    if text.is_empty() || text.contains(['/', '@', '?', '#', ' ']) || text.contains("://") {
        return Err(bad());
    }
    let (host, port) = crate::fence::split_authority(text).ok_or_else(bad)?;
    if host.is_empty() {
        return Err(bad());
    }
    let host_ok = host.starts_with('[')
        || host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.');
    if !host_ok {
        return Err(bad());
    }
    Ok(match port {
        Some(p) => format!("{}:{p}", host.to_ascii_lowercase()),
        None => host.to_ascii_lowercase(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn p(a: &[&str]) -> Result<Startup, String> {
        parse_args(&a.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn flags_parse_with_upstream_defaults() {
        assert_eq!(p(&[]), Ok(Startup::Run(WebStartup::default())));
        assert_eq!(p(&["--port", "x", "-h"]).is_err(), true, "left to right");
        assert_eq!(p(&["-h"]), Ok(Startup::Help));
        assert_eq!(
            p(&[
                "--host=::1",
                "--port",
                "0",
                "--no-open",
                "--trusted-host",
                "Dev.Example:8443",
                "--trusted-host=box"
            ]),
            Ok(Startup::Run(WebStartup {
                host: "::1".parse().unwrap_or(IpAddr::from([0u8; 4])),
                port: 0,
                open_browser: false,
                trusted_hosts: vec!["dev.example:8443".into(), "box".into()],
                public_url: None,
                tls: None,
            }))
        );
        assert_eq!(
            p(&["--host", "localhost"]).map(|s| match s {
                Startup::Run(w) => w.host.to_string(),
                Startup::Help => String::new(),
            }),
            Ok("127.0.0.1".into())
        );
    }

    #[test]
    fn usage_errors_are_one_clear_line() {
        assert_eq!(
            p(&["--port", "abc"]),
            Err("error: --port must be a number, got \"abc\"".into())
        );
        assert_eq!(
            p(&["--port", "99999"]),
            Err("error: --port must be between 0 and 65535, got 99999".into())
        );
        assert!(p(&["--host", "0.0.0.0"]).is_err_and(|e| e.contains("wildcard")));
        assert!(p(&["--host", "::"]).is_err_and(|e| e.contains("wildcard")));
        assert!(p(&["--host", "example.com"]).is_err());
        assert_eq!(
            p(&["--bogus"]),
            Err("error: unknown option '--bogus'".into())
        );
        assert_eq!(
            p(&["--port"]),
            Err("error: option '--port <port>' argument missing".into())
        );
        assert!(p(&["--trusted-host", "http://x"]).is_err());
        assert!(p(&["--trusted-host", "a/b"]).is_err());
        assert_eq!(
            p(&["--tls-cert", "c.pem"]),
            Err("error: --tls-cert needs --tls-key (the certificate's private key)".into())
        );
        assert!(p(&["--tls-key", "k.pem"]).is_err_and(|e| e.contains("--tls-cert")));
        for bad in [
            "app.example",
            "ftp://app.example/",
            "https://",
            "https://user@app.example/",
            "https://app.example/?q=1",
            "https://app.example/#x",
            "https://app example/",
        ] {
            assert!(p(&["--public-url", bad]).is_err(), "{bad}");
        }
        assert!(p(&["task"]).is_err());
    }

    #[test]
    fn public_url_and_tls_flags() {
        let run = |a: &[&str]| match p(a) {
            Ok(Startup::Run(w)) => w,
            other => panic!("{other:?}"),
        };
        let w = run(&[
            "--public-url",
            "HTTPS://App.Example/ui",
            "--tls-cert=c.pem",
            "--tls-key",
            "k.pem",
        ]);
        assert_eq!(w.public_url.as_deref(), Some("https://app.example/ui/"));
        assert_eq!(w.tls, Some(("c.pem".into(), "k.pem".into())));
        let ctx = w.to_ctx_value();
        assert_eq!(ctx["publicUrl"], "https://app.example/ui/");
        assert_eq!(ctx["tls"], json!({"certFile": "c.pem", "keyFile": "k.pem"}));
        let plain = run(&["--public-url", "http://10.0.0.7:8080"]);
        assert_eq!(plain.public_url.as_deref(), Some("http://10.0.0.7:8080/"));
        assert!(run(&[]).to_ctx_value().get("tls").is_none());
    }
}
