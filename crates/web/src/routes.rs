//! Every request, in this order: the trust fence (403), the token exchange on `/?token=`,
//! the auth cookie (401 — assets and the favicon included), then the route table.
//! Handlers run in their own task: a failing handler answers 500 and the connection and
//! every other request keep working.

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, StatusCode};

use crate::auth::Exchange;
use crate::fence::Trust;
use crate::http::{
    Body, Resp, empty, headless, json, no_store, now_ms, query_values, secure, text,
};
use crate::state::WebState;

/// The 401 text of pages.
pub const AUTH_REQUIRED: &str =
    "dsh web authentication required; reopen the URL printed by dsh web.";

/// The page for a sign-in link that was already used.
pub const TOKEN_SPENT: &str = "This dsh web sign-in link has already been used. Each link \
signs in one browser, once, and the browser that opened it first is signed in. To sign in \
here, stop dsh web and start it again: it prints a new link. Browsers already signed in \
stay signed in.";

/// Largest request body.
pub const MAX_BODY_BYTES: usize = 8 << 20;

/// Largest `session.prompt` body: base64 images ride inside it (the attachment store's own
/// count and byte limits still apply to what it carries).
pub const MAX_PROMPT_BODY_BYTES: usize = 64 << 20;

/// Answers one request.
pub async fn handle(state: Arc<WebState>, req: Request<Incoming>) -> Resp {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let resp = route(state, req).await;
    if resp.status().is_server_error() || resp.status() == StatusCode::FORBIDDEN {
        tracing::warn!("web: {method} {path} answered {}", resp.status());
    }
    secure(resp)
}

fn authority(req: &Request<Incoming>) -> String {
    req.headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase()
}

fn authenticated(state: &WebState, req: &Request<Incoming>) -> bool {
    let cookies = req
        .headers()
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok());
    state
        .auth
        .verify_cookies(cookies, &authority(req), now_ms())
}

async fn route(state: Arc<WebState>, req: Request<Incoming>) -> Resp {
    let trust = match state.fence.check(req.headers()) {
        Ok(t) => t,
        Err(refused) => {
            tracing::warn!("web: refused a request: {}", refused.0);
            return text(StatusCode::FORBIDDEN, "forbidden");
        }
    };
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let is_read = method == Method::GET || method == Method::HEAD;
    let tokens = query_values(req.uri().query(), "token");
    if path == "/" && is_read && !tokens.is_empty() {
        // A signed-in browser reopening the link is sent on without spending the token; a
        // HEAD (link previews, prefetchers) never spends it either.
        let exchange = if authenticated(&state, &req) {
            match state.auth.peek(&tokens) {
                Exchange::Refuse => Exchange::Refuse,
                Exchange::Grant(_) | Exchange::Unspent | Exchange::Spent => Exchange::Unspent,
            }
        } else if method == Method::HEAD {
            state.auth.peek(&tokens)
        } else {
            state.auth.exchange(&tokens, &authority(&req), now_ms())
        };
        let resp = match exchange {
            Exchange::Grant(_) | Exchange::Unspent => {
                let mut r = empty(StatusCode::SEE_OTHER);
                let h = r.headers_mut();
                h.insert(header::LOCATION, HeaderValue::from_static("./"));
                if let Exchange::Grant(cookie) = &exchange
                    && let Ok(v) = HeaderValue::from_str(cookie)
                {
                    h.insert(header::SET_COOKIE, v);
                }
                no_store(&mut r);
                r
            }
            Exchange::Spent => {
                tracing::warn!("web: refused a second use of the launch token");
                text(StatusCode::UNAUTHORIZED, TOKEN_SPENT)
            }
            Exchange::Refuse => text(StatusCode::UNAUTHORIZED, AUTH_REQUIRED),
        };
        return if method == Method::HEAD {
            headless(resp)
        } else {
            resp
        };
    }
    let api = path.starts_with("/api/");
    if !authenticated(&state, &req) {
        let resp = text(
            StatusCode::UNAUTHORIZED,
            if api { "unauthorized" } else { AUTH_REQUIRED },
        );
        return if method == Method::HEAD {
            headless(resp)
        } else {
            resp
        };
    }
    if is_read && !api {
        return match crate::assets::serve(&path, req.headers()) {
            Some(r) if method == Method::HEAD => headless(r),
            Some(r) => r,
            None => text(StatusCode::NOT_FOUND, "not found"),
        };
    }
    match (method, path.as_str()) {
        (Method::GET, "/api/events") => events(state, &req),
        (Method::GET, "/api/deliverable") => deliverable(state, &req).await,
        (Method::POST, "/api/respond") => match read_json(req, MAX_BODY_BYTES).await {
            Ok(body) => {
                let answer = match &state.remote {
                    Some(remote) => crate::remote::respond(remote, &body).await,
                    None => crate::api::respond(&state, &body),
                };
                json(StatusCode::OK, &answer)
            }
            Err(resp) => resp,
        },
        (Method::POST, p) if crate::api::known(&p["/api/".len()..]) => {
            let name = p["/api/".len()..].to_string();
            rpc(state, trust, name, req).await
        }
        _ => text(StatusCode::NOT_FOUND, "not found"),
    }
}

/// The JSON body of a POST (415, 413 or 400 answers otherwise).
async fn read_json(req: Request<Incoming>, limit: usize) -> Result<serde_json::Value, Resp> {
    let is_json = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"));
    if !is_json {
        return Err(text(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "content type must be application/json",
        ));
    }
    let limited = http_body_util::Limited::new(req.into_body(), limit);
    let bytes: Bytes = match limited.collect().await {
        Ok(c) => c.to_bytes(),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            return Err(text(
                StatusCode::PAYLOAD_TOO_LARGE,
                "request body too large",
            ));
        }
        Err(_) => return Err(text(StatusCode::BAD_REQUEST, "request body unreadable")),
    };
    serde_json::from_slice(&bytes).map_err(|_| text(StatusCode::BAD_REQUEST, "body is not JSON"))
}

async fn rpc(state: Arc<WebState>, trust: Trust, method: String, req: Request<Incoming>) -> Resp {
    let limit = if method == "session.prompt" {
        MAX_PROMPT_BODY_BYTES
    } else {
        MAX_BODY_BYTES
    };
    let body = match read_json(req, limit).await {
        Ok(b) => b,
        Err(resp) => return resp,
    };
    let call = match crate::rpc::decode(&body, &method) {
        Ok(c) => c,
        Err(answer) => {
            tracing::warn!(
                "web: malformed request to {method}: {}",
                answer["result"]["error"]["message"]
            );
            return json(StatusCode::OK, &answer);
        }
    };
    let task = tokio::spawn({
        let method = method.clone();
        async move { crate::api::dispatch(state, trust, &method, call.payload).await }
    });
    match task.await {
        Ok(result) => {
            if let Err(e) = &result {
                tracing::info!("web: {method} failed ({}): {}", e.code.as_str(), e.message);
            }
            json(StatusCode::OK, &crate::rpc::respond(&call.rpc_id, result))
        }
        Err(e) => {
            tracing::error!("web: {method} handler failed: {e}");
            text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("handler failure: {method}"),
            )
        }
    }
}

fn events(state: Arc<WebState>, req: &Request<Incoming>) -> Resp {
    let query = req.uri().query();
    let session = query_values(query, "session")
        .into_iter()
        .next()
        .filter(|s| !s.is_empty());
    let resume = req
        .headers()
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or_else(|| query_values(query, "since").into_iter().next())
        .and_then(|t| crate::stream::Resume::parse(&t));
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    match state.remote.clone() {
        Some(remote) => crate::remote::spawn(state, remote, session, resume, tx),
        None => crate::stream::spawn(state, session, resume, tx),
    }
    let mut resp = hyper::Response::new(Body::Stream(rx));
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    resp
}

/// Largest deliverable served (a bigger file is refused with 413, not streamed).
const MAX_DELIVERABLE_BYTES: u64 = 256 * 1024 * 1024;

/// `GET /api/deliverable?session=ID&path=P`: a file the session presented (its
/// `deliverables/presented` events name it), always as a download — never rendered in
/// this origin, so a presented HTML file cannot script the page.
async fn deliverable(state: Arc<WebState>, req: &Request<Incoming>) -> Resp {
    let query = req.uri().query();
    let (Some(session), Some(path)) = (
        query_values(query, "session").into_iter().next(),
        query_values(query, "path").into_iter().next(),
    ) else {
        return text(StatusCode::BAD_REQUEST, "session and path are required");
    };
    let events = match crate::api::export::events_of(&state, &session).await {
        Ok((_, events)) => events,
        Err(e) => return text(StatusCode::NOT_FOUND, e.message),
    };
    let presented = events.iter().any(|e| {
        e.is(crate::present::PRESENTED)
            && e.data
                .get("files")
                .and_then(serde_json::Value::as_array)
                .is_some_and(|files| files.iter().any(|f| f["path"] == path.as_str()))
    });
    if !presented {
        return text(StatusCode::NOT_FOUND, "this session presented no such file");
    }
    match tokio::fs::metadata(&path).await {
        Ok(m) if m.is_file() && m.len() > MAX_DELIVERABLE_BYTES => {
            return text(
                StatusCode::PAYLOAD_TOO_LARGE,
                "the file is larger than 256 MiB; open it on disk",
            );
        }
        Ok(m) if m.is_file() => {}
        _ => return text(StatusCode::GONE, "the presented file is no longer on disk"),
    }
    let bytes = match tokio::fs::read(&path).await {
        Ok(b) => b,
        Err(e) => {
            return text(
                StatusCode::GONE,
                format!("the presented file cannot be read: {e}"),
            );
        }
    };
    let name: String = std::path::Path::new(&path)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "deliverable".into())
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() && c != '"' && c != '\\' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let mut resp = crate::http::with_body(StatusCode::OK, "application/octet-stream", bytes);
    let h = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&format!("attachment; filename=\"{name}\"")) {
        h.insert(header::CONTENT_DISPOSITION, v);
    }
    h.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("sandbox; default-src 'none'"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}
