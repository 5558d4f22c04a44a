//! web_fetch's transport against loopback servers: the address guard (literals, names,
//! mixed answers, redirects), the allow list, and the limits (size, time, redirects,
//! content types, charsets). No test touches the internet.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use dsh_kernel::BoxFuture;
use dsh_web_tools::{AddressPolicy, BodyKind, FetchLimits, HostResolver, HttpFetcher, web_code};
use pretty_assertions::assert_eq;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

/// What the test server does for one request path.
#[derive(Clone)]
enum Answer {
    Bytes(Vec<u8>),
    /// Headers, then `n` bytes per write forever.
    Endless(String),
    /// Headers, then one byte per second.
    Trickle,
}

async fn server(route: impl Fn(&str) -> Answer + Send + Sync + 'static) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let route = Arc::new(route);
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let route = route.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let text = String::from_utf8_lossy(&head).to_string();
                let path = text.split_whitespace().nth(1).unwrap_or("/").to_string();
                match route(&path) {
                    Answer::Bytes(b) => {
                        let _ = s.write_all(&b).await;
                    }
                    Answer::Endless(head) => {
                        let _ = s.write_all(head.as_bytes()).await;
                        let chunk = vec![b'x'; 64 * 1024];
                        while s.write_all(&chunk).await.is_ok() {}
                    }
                    Answer::Trickle => {
                        let _ = s
                            .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\n")
                            .await;
                        loop {
                            tokio::time::sleep(Duration::from_millis(300)).await;
                            if s.write_all(b"x").await.is_err() {
                                break;
                            }
                        }
                    }
                }
            });
        }
    });
    addr
}

fn ok(ct: &str, body: &[u8]) -> Answer {
    let mut out = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: {ct}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    Answer::Bytes(out)
}

fn redirect(to: &str) -> Answer {
    Answer::Bytes(
        format!(
            "HTTP/1.1 302 Found\r\nlocation: {to}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
        )
        .into_bytes(),
    )
}

fn allowing(addr: SocketAddr) -> AddressPolicy {
    AddressPolicy {
        allow_private_network: false,
        allowed_hosts: vec![format!("127.0.0.1:{}", addr.port())],
    }
}

async fn fetch_err(f: &HttpFetcher, url: &str) -> (String, String) {
    let e = f.fetch(url, &CancellationToken::new()).await.unwrap_err();
    (web_code(&e).unwrap_or("-").to_string(), e.to_string())
}

/// Answers fixed addresses for names, counting lookups.
struct FakeDns {
    answers: Vec<(&'static str, Vec<&'static str>)>,
    lookups: AtomicUsize,
}

impl HostResolver for FakeDns {
    fn lookup(
        &self,
        host: &str,
        port: u16,
    ) -> BoxFuture<'static, std::io::Result<Vec<SocketAddr>>> {
        self.lookups.fetch_add(1, Ordering::SeqCst);
        let found: Vec<SocketAddr> = self
            .answers
            .iter()
            .find(|(h, _)| *h == host)
            .map(|(_, ips)| {
                ips.iter()
                    .map(|ip| SocketAddr::new(ip.parse().unwrap(), port))
                    .collect()
            })
            .unwrap_or_default();
        Box::pin(async move { Ok(found) })
    }
}

#[tokio::test]
async fn non_public_targets_are_refused_by_default() {
    let addr = server(|_| ok("text/plain", b"secret")).await;
    let f = HttpFetcher::new(FetchLimits::default(), AddressPolicy::default());
    let port = addr.port();
    for url in [
        format!("http://127.0.0.1:{port}/"),
        format!("http://localhost:{port}/"),
        "http://10.1.2.3/".to_string(),
        "http://169.254.169.254/latest/meta-data/".to_string(),
        "http://[::1]/".to_string(),
        "http://[::ffff:127.0.0.1]/".to_string(),
        "http://0.0.0.0/".to_string(),
        "http://192.168.0.1/".to_string(),
    ] {
        let (code, text) = fetch_err(&f, &url).await;
        assert_eq!(code, "WEB_BLOCKED_URL", "{url}: {text}");
        assert!(text.contains("non-public address"), "{text}");
    }
    let (_, text) = fetch_err(&f, &format!("http://127.0.0.1:{port}/")).await;
    assert_eq!(
        text,
        "refusing to fetch 127.0.0.1: it resolves to a non-public address (127.0.0.1); set allowPrivateNetwork or allowedHosts on web-fetch-http to permit it"
    );
}

#[tokio::test]
async fn names_resolving_to_private_addresses_are_refused_and_connections_are_pinned() {
    let dns = Arc::new(FakeDns {
        answers: vec![
            ("metadata.test", vec!["169.254.169.254"]),
            ("mixed.test", vec!["93.184.216.34", "10.0.0.7"]),
            ("internal.test", vec!["10.20.30.40"]),
        ],
        lookups: AtomicUsize::new(0),
    });
    let f = HttpFetcher::with_resolver(
        FetchLimits::default(),
        AddressPolicy::default(),
        dns.clone(),
    );
    for (url, ip) in [
        ("http://metadata.test/", "169.254.169.254"),
        ("http://mixed.test/", "10.0.0.7"),
        ("https://internal.test/x", "10.20.30.40"),
    ] {
        let (code, text) = fetch_err(&f, url).await;
        assert_eq!(code, "WEB_BLOCKED_URL");
        assert!(text.contains(&format!("({ip})")), "{text}");
    }
    assert_eq!(dns.lookups.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn the_allow_list_admits_exactly_its_entries_and_redirects_are_rechecked() {
    let target = server(|_| ok("text/plain", b"private")).await;
    let addr = server(move |path| match path {
        "/page" => ok("text/html; charset=utf-8", b"<p>hi <b>there</b></p>"),
        "/to-private" => redirect("http://10.0.0.1/"),
        "/to-localhost" => redirect(&format!("http://localhost:{}/", target.port())),
        "/hop" => redirect("/page"),
        _ => ok("text/plain", b"?"),
    })
    .await;
    let f = HttpFetcher::new(FetchLimits::default(), allowing(addr));
    let got = f
        .fetch(
            &format!("http://127.0.0.1:{}/hop", addr.port()),
            &CancellationToken::new(),
        )
        .await
        .unwrap();
    assert_eq!(
        (got.url.as_str(), got.status, got.kind, got.content.as_str()),
        (
            format!("http://127.0.0.1:{}/page", addr.port()).as_str(),
            200,
            BodyKind::Html,
            "<p>hi <b>there</b></p>"
        )
    );
    // Another port on the same host is not on the list.
    let (code, _) = fetch_err(&f, &format!("http://127.0.0.1:{}/", target.port())).await;
    assert_eq!(code, "WEB_BLOCKED_URL");
    // Redirects elsewhere are not followed.
    for path in ["/to-private", "/to-localhost"] {
        let (code, text) = fetch_err(&f, &format!("http://127.0.0.1:{}{path}", addr.port())).await;
        assert_eq!(code, "WEB_REDIRECT_BLOCKED", "{text}");
        assert!(
            text.starts_with("cross-origin redirect to http://"),
            "{text}"
        );
    }
}

#[tokio::test]
async fn limits_hold() {
    let addr = server(|path| match path {
        "/huge" => Answer::Bytes(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 1000000000\r\n\r\nxx"
                .to_vec(),
        ),
        "/endless" => Answer::Endless("HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\n".into()),
        "/slow" => Answer::Trickle,
        "/binary" => ok("application/octet-stream", b"\0\0"),
        "/latin1" => ok("text/plain; charset=ISO-8859-1", b"caf\xe9"),
        "/weird" => ok("text/plain; charset=klingon", b"x"),
        "/loop" => redirect("/loop"),
        "/nowhere" => Answer::Bytes(b"HTTP/1.1 301 Moved\r\ncontent-length: 0\r\n\r\n".to_vec()),
        _ => ok("text/plain", b"?"),
    })
    .await;
    let base = format!("http://127.0.0.1:{}", addr.port());
    let limits = FetchLimits {
        max_response_bytes: 100_000,
        timeout: Duration::from_secs(2),
        ..FetchLimits::default()
    };
    let f = HttpFetcher::new(limits, allowing(addr));
    assert_eq!(
        fetch_err(&f, &format!("{base}/huge")).await,
        (
            "WEB_FETCH_TOO_LARGE".into(),
            "response exceeds the maximum of 100000 bytes".into()
        )
    );
    let endless = f
        .fetch(&format!("{base}/endless"), &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!((endless.content.len(), endless.truncated), (100_000, true));
    let started = Instant::now();
    assert_eq!(
        fetch_err(&f, &format!("{base}/slow")).await,
        ("WEB_FETCH_TIMEOUT".into(), "web fetch timed out".into())
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(
        fetch_err(&f, &format!("{base}/binary")).await,
        (
            "WEB_UNSUPPORTED_CONTENT_TYPE".into(),
            "unsupported content type \"application/octet-stream\"".into()
        )
    );
    assert_eq!(
        f.fetch(&format!("{base}/latin1"), &CancellationToken::new())
            .await
            .unwrap()
            .content,
        "café"
    );
    assert_eq!(
        fetch_err(&f, &format!("{base}/weird")).await,
        (
            "WEB_UNSUPPORTED_CONTENT_TYPE".into(),
            "unsupported charset \"klingon\"".into()
        )
    );
    assert_eq!(
        fetch_err(&f, &format!("{base}/loop")).await,
        (
            "WEB_REDIRECT_BLOCKED".into(),
            "exceeded the maximum of 5 redirects".into()
        )
    );
    assert_eq!(
        fetch_err(&f, &format!("{base}/nowhere")).await,
        (
            "WEB_PROVIDER_ERROR".into(),
            "redirect response (HTTP 301) without a Location header".into()
        )
    );
    let cancel = CancellationToken::new();
    cancel.cancel();
    let e = f.fetch(&format!("{base}/slow"), &cancel).await.unwrap_err();
    assert_eq!(
        (web_code(&e), e.to_string().as_str()),
        (Some("WEB_ABORTED"), "web fetch aborted")
    );
}
