//! The stdio transport: one JSON-RPC message per line. Unlike the SDK's, a line that is not
//! a message (a server printing a banner or debug text to stdout) is logged and skipped
//! rather than ending the connection, as upstream's TypeScript client does, and a line is
//! bounded: a longer one is discarded whole.

use std::sync::Arc;

use rmcp::RoleClient;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{ChildStdin, ChildStdout};
use tokio::sync::Mutex;

/// The longest line accepted from a server (the bound ACP frames have too).
pub(crate) const MAX_LINE_BYTES: usize = 64 << 20;

pub(crate) struct LineTransport {
    reader: BufReader<ChildStdout>,
    writer: Arc<Mutex<Option<ChildStdin>>>,
    label: String,
}

impl LineTransport {
    pub(crate) fn new(stdout: ChildStdout, stdin: ChildStdin, label: String) -> Self {
        Self {
            reader: BufReader::new(stdout),
            writer: Arc::new(Mutex::new(Some(stdin))),
            label,
        }
    }
}

/// Reads one line of at most `max` bytes (without its newline). `None` at end of input;
/// `Some(Err(n))` for a line of `n` bytes that was too long and skipped.
async fn read_line<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    max: usize,
) -> Option<Result<Vec<u8>, usize>> {
    let mut line = Vec::new();
    let mut skipped = 0usize;
    loop {
        let buf = match reader.fill_buf().await {
            Ok(b) => b,
            Err(_) => return None,
        };
        if buf.is_empty() {
            // End of input: a final unterminated line still counts.
            return match (line.is_empty(), skipped) {
                (true, 0) => None,
                (_, 0) => Some(Ok(line)),
                (_, n) => Some(Err(n)),
            };
        }
        let (chunk, done) = match buf.iter().position(|b| *b == b'\n') {
            Some(i) => (&buf[..i], Some(i + 1)),
            None => (buf, None),
        };
        if skipped == 0 && line.len() + chunk.len() <= max {
            line.extend_from_slice(chunk);
        } else {
            skipped += line.len() + chunk.len();
            line.clear();
        }
        let consumed = done.unwrap_or(chunk.len());
        reader.consume(consumed);
        if done.is_some() {
            return Some(if skipped == 0 { Ok(line) } else { Err(skipped) });
        }
    }
}

impl Transport<RoleClient> for LineTransport {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let writer = self.writer.clone();
        async move {
            let mut bytes = serde_json::to_vec(&item).map_err(std::io::Error::other)?;
            bytes.push(b'\n');
            let mut guard = writer.lock().await;
            let Some(stdin) = guard.as_mut() else {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::NotConnected,
                    "the server's stdin is closed",
                ));
            };
            stdin.write_all(&bytes).await?;
            stdin.flush().await
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        {
            loop {
                match read_line(&mut self.reader, MAX_LINE_BYTES).await? {
                    Ok(line) => {
                        let trimmed = line.strip_suffix(b"\r").unwrap_or(&line);
                        if trimmed.iter().all(u8::is_ascii_whitespace) {
                            continue;
                        }
                        match serde_json::from_slice::<RxJsonRpcMessage<RoleClient>>(trimmed) {
                            Ok(message) => return Some(message),
                            Err(e) => {
                                let shown =
                                    String::from_utf8_lossy(&trimmed[..trimmed.len().min(200)]);
                                tracing::warn!(
                                    "{}: skipped a line on stdout that is not an MCP message ({e}): {shown}",
                                    self.label
                                );
                            }
                        }
                    }
                    Err(n) => tracing::warn!(
                        "{}: skipped a {n}-byte line on stdout (longer than {MAX_LINE_BYTES} bytes)",
                        self.label
                    ),
                }
            }
        }
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        let writer = self.writer.clone();
        async move {
            drop(writer.lock().await.take());
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[tokio::test]
    async fn lines_are_bounded_and_the_last_may_be_unterminated() {
        let input: &[u8] = b"short\n0123456789abc\nok\r\ntail";
        let mut reader = BufReader::with_capacity(4, input);
        let mut got = Vec::new();
        while let Some(line) = read_line(&mut reader, 8).await {
            got.push(line.map(|l| String::from_utf8(l).unwrap()));
        }
        assert_eq!(
            got,
            vec![
                Ok("short".into()),
                Err(13),
                Ok("ok\r".into()),
                Ok("tail".into())
            ]
        );
    }
}
