//! The listener: one HTTP/1.1 connection task per client (keep-alive, a header read
//! timeout; over TLS when configured), stopped by the shutdown token.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::state::WebState;

/// Binds `addr`; the error is one line for the terminal.
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, String> {
    TcpListener::bind(addr).await.map_err(|e| {
        let hint = if e.kind() == std::io::ErrorKind::AddrInUse {
            " (is another dsh web running? pass --port 0 for a free port)"
        } else {
            ""
        };
        format!("dsh web: cannot listen on {addr}: {e}{hint}")
    })
}

/// Accepts connections until shutdown (TLS ones when `tls` is set).
pub async fn serve(listener: TcpListener, state: Arc<WebState>, tls: Option<TlsAcceptor>) {
    let shutdown = state.shutdown.clone();
    loop {
        let accepted = tokio::select! {
            () = shutdown.cancelled() => return,
            a = listener.accept() => a,
        };
        let (stream, _) = match accepted {
            Ok(s) => s,
            Err(e) => {
                // Out of descriptors and similar: keep serving the others.
                tracing::warn!("web: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let state = state.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            match tls {
                None => connection(stream, state).await,
                Some(acceptor) => {
                    // A client that never finishes its handshake does not hold a task.
                    match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(stream))
                        .await
                    {
                        Ok(Ok(stream)) => connection(stream, state).await,
                        Ok(Err(e)) => tracing::debug!("web: TLS handshake failed: {e}"),
                        Err(_) => tracing::debug!("web: TLS handshake timed out"),
                    }
                }
            }
        });
    }
}

/// Serves one connection until it ends or the server shuts down.
async fn connection<I>(io: I, state: Arc<WebState>)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let shutdown = state.shutdown.clone();
    let service = service_fn(move |req| {
        let state = state.clone();
        async move { Ok::<_, Infallible>(crate::routes::handle(state, req).await) }
    });
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(Duration::from_secs(30))
        .keep_alive(true)
        .serve_connection(TokioIo::new(io), service);
    tokio::pin!(conn);
    tokio::select! {
        r = conn.as_mut() => {
            if let Err(e) = r {
                tracing::debug!("web: connection ended: {e}");
            }
        }
        () = shutdown.cancelled() => {
            conn.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(Duration::from_secs(1), conn).await;
        }
    }
}
