//! `@deepseek-ai/dsh-test-web-fetch-fixture-server` the loopback page
//! server of upstream's web-fetch scenario, on 127.0.0.1:43117 while the row is loaded.

use dsh_kernel::{BoxError, Context, Plugin, PluginConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The scenario's fixed port (the fetched URL is part of the recording).
pub const FIXTURE_PORT: u16 = 43117;

/// The scenario's page (test data of upstream's scenario).
pub const FIXTURE_PAGE: &str = "<!doctype html>
<html><head><title>Menu</title><style>.x{color:red}</style><script>ignored()</script></head>
<body>
<h1>Caf&eacute; menu</h1>
<p>Prices include <strong>service &amp; <em>tax</em></strong> &mdash; updated daily.</p>
<ul><li>Espresso</li><li>Flat white</li></ul>
<table><thead><tr><th>Drink</th><th>Price</th></tr></thead><tbody><tr><td>Espresso</td><td>&euro;2</td></tr><tr><td>Flat white</td><td>&euro;3</td></tr></tbody></table>
<p>See <a href=\"https://fixture.invalid/specials\">today&rsquo;s specials</a>.</p>
</body></html>
";

pub struct WebFetchFixturePlugin;

async fn serve(mut stream: tokio::net::TcpStream) {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let line = String::from_utf8_lossy(&head);
    let path = line.split_whitespace().nth(1).unwrap_or("");
    let (status, ct, body) = if path == "/menu.html" {
        ("200 OK", "text/html; charset=utf-8", FIXTURE_PAGE)
    } else {
        ("404 Not Found", "text/plain; charset=utf-8", "not found")
    };
    let response = format!(
        "HTTP/1.1 {status}\r\ncontent-type: {ct}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}

impl Plugin for WebFetchFixturePlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-test-web-fetch-fixture-server"
    }

    fn apply(&self, ctx: &Context, _config: &PluginConfig) -> Result<(), BoxError> {
        let listener = std::net::TcpListener::bind(("127.0.0.1", FIXTURE_PORT)).map_err(|e| {
            format!("web-fetch-fixture-server: cannot listen on 127.0.0.1:{FIXTURE_PORT}: {e}")
        })?;
        listener.set_nonblocking(true)?;
        ctx.spawn(async move {
            let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                return;
            };
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream));
            }
        })?;
        Ok(())
    }
}
