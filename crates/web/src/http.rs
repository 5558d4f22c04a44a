//! Response bodies and helpers: a whole body or a stream of chunks (the event stream),
//! with the headers every response carries.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Frame, SizeHint};
use hyper::header::{self, HeaderValue};
use hyper::{Response, StatusCode};

/// A response body: complete, or chunks from a channel (ends when the sender is dropped).
pub enum Body {
    Full(Option<Bytes>),
    Stream(tokio::sync::mpsc::Receiver<Bytes>),
}

impl hyper::body::Body for Body {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match self.get_mut() {
            Body::Full(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            Body::Stream(rx) => rx
                .poll_recv(cx)
                .map(|chunk| chunk.map(|b| Ok(Frame::data(b)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, Body::Full(None))
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Body::Full(Some(b)) => SizeHint::with_exact(b.len() as u64),
            Body::Full(None) => SizeHint::with_exact(0),
            Body::Stream(_) => SizeHint::default(),
        }
    }
}

pub type Resp = Response<Body>;

/// Headers on every response.
pub fn secure(mut resp: Resp) -> Resp {
    let h = resp.headers_mut();
    h.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    h.insert("referrer-policy", HeaderValue::from_static("no-referrer"));
    h.insert("x-frame-options", HeaderValue::from_static("DENY"));
    h.insert(
        "cross-origin-opener-policy",
        HeaderValue::from_static("same-origin"),
    );
    h.insert(
        "cross-origin-resource-policy",
        HeaderValue::from_static("same-origin"),
    );
    resp
}

/// A response with a body of `content_type`.
pub fn with_body(status: StatusCode, content_type: &'static str, body: impl Into<Bytes>) -> Resp {
    let mut resp = Response::new(Body::Full(Some(body.into())));
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp
}

/// A plain-text response that must not be cached.
pub fn text(status: StatusCode, body: impl Into<Bytes>) -> Resp {
    let mut resp = with_body(status, "text/plain; charset=utf-8", body);
    no_store(&mut resp);
    resp
}

/// A JSON response that must not be cached.
pub fn json(status: StatusCode, value: &serde_json::Value) -> Resp {
    let mut resp = with_body(status, "application/json", value.to_string());
    no_store(&mut resp);
    resp
}

/// A response without a body.
pub fn empty(status: StatusCode) -> Resp {
    let mut resp = Response::new(Body::Full(None));
    *resp.status_mut() = status;
    resp
}

pub fn no_store(resp: &mut Resp) {
    resp.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
}

/// Drops the body (HEAD answers).
pub fn headless(mut resp: Resp) -> Resp {
    *resp.body_mut() = Body::Full(None);
    resp
}

/// Milliseconds since the epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// The values of `name` in a query string (percent-decoded).
pub fn query_values(query: Option<&str>, name: &str) -> Vec<String> {
    let Some(query) = query else {
        return Vec::new();
    };
    query
        .split('&')
        .filter_map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (percent_decode(k) == name).then(|| percent_decode(v))
        })
        .collect()
}

/// `application/x-www-form-urlencoded` decoding (`+` is a space; bad escapes kept as is).
pub fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => {
                        out.push(b);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_decode() {
        assert_eq!(
            query_values(Some("token=a%2Bb&x=1&token=c+d"), "token"),
            vec!["a+b", "c d"]
        );
        assert_eq!(query_values(Some("token"), "token"), vec![""]);
        assert_eq!(query_values(None, "token"), Vec::<String>::new());
        assert_eq!(percent_decode("%zz%4"), "%zz%4");
        assert_eq!(percent_decode("%41"), "A");
    }
}
