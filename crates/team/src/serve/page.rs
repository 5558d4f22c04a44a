//! The team page the gateway serves at `/`: a static client of the API.

use hyper::header::{self, HeaderValue};
use hyper::{Response, StatusCode};

use super::{Body, full};

/// The team page (`/`, its script and style): static, the same for everyone; it signs in
/// and calls the API like any other client.
pub(super) fn page(path: &str) -> Option<Response<Body>> {
    let (content_type, body): (&'static str, &'static str) = match path {
        "/" | "/index.html" => (
            "text/html; charset=utf-8",
            include_str!("../../assets/index.html"),
        ),
        "/app.js" => (
            "text/javascript; charset=utf-8",
            include_str!("../../assets/app.js"),
        ),
        "/app.css" => (
            "text/css; charset=utf-8",
            include_str!("../../assets/app.css"),
        ),
        _ => return None,
    };
    let mut resp = full(StatusCode::OK, content_type, body);
    let headers = resp.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
        ),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    Some(resp)
}
