//! LSP base-protocol framing: `Content-Length: N\r\n\r\n<utf-8 json>` over a byte stream.
//! Only `Content-Length` is read; other headers (`Content-Type`) are ignored. Headers are
//! bounded at 64 KiB and bodies at the configured `maxMessageBytes`; anything malformed is an
//! error naming the problem (the connection then fails as a transport failure).

use std::io::{BufRead, Read};

use serde_json::Value;

/// The longest header block accepted.
pub const MAX_HEADER_BYTES: usize = 64 * 1024;

/// Encodes one message as a frame.
pub fn encode(message: &Value) -> Vec<u8> {
    let body = message.to_string();
    let mut out = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
    out.extend_from_slice(body.as_bytes());
    out
}

/// Reads one framed message. `Ok(None)` at a clean end of input (between messages).
pub fn read_message<R: BufRead>(reader: &mut R, max_body: usize) -> Result<Option<Value>, String> {
    let mut header: Vec<u8> = Vec::new();
    loop {
        let buf = reader
            .fill_buf()
            .map_err(|e| format!("cannot read from the language server: {e}"))?;
        if buf.is_empty() {
            return if header.is_empty() {
                Ok(None)
            } else {
                Err("LSP stream ended inside a message header".into())
            };
        }
        // Take bytes up to and including the terminator when it is in this buffer.
        let mut taken = buf.len();
        let mut done = false;
        for (i, b) in buf.iter().enumerate() {
            header.push(*b);
            if header.ends_with(b"\r\n\r\n") {
                taken = i + 1;
                done = true;
                break;
            }
            if header.len() > MAX_HEADER_BYTES {
                return Err(format!(
                    "LSP header exceeded {MAX_HEADER_BYTES} bytes without a terminator"
                ));
            }
        }
        reader.consume(taken);
        if done {
            break;
        }
    }
    let length = content_length(&header[..header.len() - 4])?;
    if length > max_body {
        return Err(format!(
            "LSP message length {length} exceeds the {max_body}-byte limit"
        ));
    }
    // Grow as bytes arrive rather than trusting the advertised length up front.
    let mut body = Vec::with_capacity(length.min(1 << 20));
    let read = reader
        .take(length as u64)
        .read_to_end(&mut body)
        .map_err(|e| format!("cannot read from the language server: {e}"))?;
    if read < length {
        return Err(format!(
            "LSP stream ended inside a message body ({read} of {length} bytes)"
        ));
    }
    serde_json::from_slice(&body)
        .map(Some)
        .map_err(|e| format!("LSP message body was not valid JSON: {e}"))
}

fn content_length(header: &[u8]) -> Result<usize, String> {
    let text = String::from_utf8_lossy(header);
    for line in text.split("\r\n") {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        if name.trim().eq_ignore_ascii_case("content-length") {
            let value = value.trim();
            return match value.parse::<usize>() {
                Ok(n) if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) => Ok(n),
                _ => Err(format!(
                    "invalid Content-Length header: {}",
                    Value::from(line)
                )),
            };
        }
    }
    let shown: String = text.chars().take(200).collect();
    Err(format!(
        "LSP header block missing Content-Length: {}",
        Value::from(shown)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;
    use std::io::BufReader;

    fn all(bytes: &[u8], capacity: usize, max: usize) -> Vec<Result<Value, String>> {
        let mut reader = BufReader::with_capacity(capacity, bytes);
        let mut out = Vec::new();
        loop {
            match read_message(&mut reader, max) {
                Ok(Some(v)) => out.push(Ok(v)),
                Ok(None) => break,
                Err(e) => {
                    out.push(Err(e));
                    break;
                }
            }
        }
        out
    }

    #[test]
    fn frames_round_trip_at_every_buffer_size() {
        let a = json!({"jsonrpc": "2.0", "id": 1, "result": {"x": "é"}});
        let b = json!({"jsonrpc": "2.0", "method": "m"});
        let mut bytes = encode(&a);
        bytes.extend(b"Content-Type: application/vscode-jsonrpc; charset=utf-8\r\n");
        bytes.extend(encode(&b));
        for capacity in 1..bytes.len() + 1 {
            assert_eq!(
                all(&bytes, capacity, 1000),
                vec![Ok(a.clone()), Ok(b.clone())]
            );
        }
    }

    #[test]
    fn malformed_streams_are_errors() {
        assert_eq!(
            all(b"Content-Length: 10\r\n\r\n{}", 8, 100),
            vec![Err(
                "LSP stream ended inside a message body (2 of 10 bytes)".into()
            )]
        );
        assert_eq!(
            all(b"Content-Length: 1000\r\n\r\n{}", 8, 100),
            vec![Err(
                "LSP message length 1000 exceeds the 100-byte limit".into()
            )]
        );
        assert_eq!(
            all(b"hello world\r\n\r\n", 8, 100),
            vec![Err(
                "LSP header block missing Content-Length: \"hello world\"".into()
            )]
        );
        assert_eq!(
            all(b"Content-Length: x\r\n\r\n", 8, 100),
            vec![Err(
                "invalid Content-Length header: \"Content-Length: x\"".into()
            )]
        );
        assert_eq!(
            all(b"Content-Length: 3\r\n\r\nabc", 8, 100)[0]
                .as_ref()
                .unwrap_err()
                .starts_with("LSP message body was not valid JSON"),
            true
        );
        assert_eq!(
            all(b"Content-Len", 8, 100),
            vec![Err("LSP stream ended inside a message header".into())]
        );
        let endless = vec![b'x'; MAX_HEADER_BYTES + 10];
        assert_eq!(
            all(&endless, 4096, 100),
            vec![Err(format!(
                "LSP header exceeded {MAX_HEADER_BYTES} bytes without a terminator"
            ))]
        );
    }
}
