//! The browser UI: hand-written ES modules, one stylesheet, an icon and the vendored
//! markdown lexer (`assets/js/vendor/`, kept zstd-compressed in the repository and unpacked
//! once at first use), embedded in the binary (no build step, no toolchain). Served with a strong `ETag` and `no-cache`
//! (a reload revalidates with a 304); the index page carries the content security policy
//! (no inline script or style anywhere).

use std::sync::OnceLock;

use base64::Engine as _;
use hyper::header::{self, HeaderValue};
use hyper::{HeaderMap, StatusCode};

use crate::http::{Body, Resp, with_body};

/// One embedded file.
pub struct Asset {
    pub path: &'static str,
    pub content_type: &'static str,
    embedded: &'static [u8],
    /// `embedded` is a zstd frame of the served bytes.
    packed: bool,
}

impl Asset {
    /// The bytes served for this path.
    pub fn bytes(&self) -> &'static [u8] {
        if !self.packed {
            return self.embedded;
        }
        static UNPACKED: OnceLock<Vec<&'static [u8]>> = OnceLock::new();
        let all = UNPACKED.get_or_init(|| {
            ASSETS
                .iter()
                .map(|a| {
                    if !a.packed {
                        return a.embedded;
                    }
                    match zstd::decode_all(a.embedded) {
                        Ok(v) => &*Box::leak(v.into_boxed_slice()),
                        Err(e) => {
                            tracing::error!("web: the embedded {} cannot be unpacked: {e}", a.path);
                            &[]
                        }
                    }
                })
                .collect()
        });
        ASSETS
            .iter()
            .position(|a| std::ptr::eq(a, self))
            .and_then(|i| all.get(i).copied())
            .unwrap_or_default()
    }
}

macro_rules! packed {
    () => {
        false
    };
    (zstd) => {
        true
    };
}

macro_rules! assets {
    ($($path:literal => $file:literal, $ct:literal $(, $z:ident)?;)*) => {
        /// Every embedded file (the index is served at `/`).
        pub static ASSETS: &[Asset] = &[
            $(Asset { path: $path, content_type: $ct, embedded: include_bytes!(concat!("../assets/", $file)), packed: packed!($($z)?) },)*
        ];
    };
}

assets! {
    "/" => "index.html", "text/html; charset=utf-8";
    "/app.css" => "app.css", "text/css; charset=utf-8";
    "/favicon.svg" => "favicon.svg", "image/svg+xml";
    "/favicon.ico" => "favicon.svg", "image/svg+xml";
    "/js/app.js" => "js/app.js", "text/javascript; charset=utf-8";
    "/js/api.js" => "js/api.js", "text/javascript; charset=utf-8";
    "/js/util.js" => "js/util.js", "text/javascript; charset=utf-8";
    "/js/store.js" => "js/store.js", "text/javascript; charset=utf-8";
    "/js/conv.js" => "js/conv.js", "text/javascript; charset=utf-8";
    "/js/md.js" => "js/md.js", "text/javascript; charset=utf-8";
    "/js/hl.js" => "js/hl.js", "text/javascript; charset=utf-8";
    "/js/sidebar.js" => "js/sidebar.js", "text/javascript; charset=utf-8";
    "/js/settings.js" => "js/settings.js", "text/javascript; charset=utf-8";
    "/js/memory.js" => "js/memory.js", "text/javascript; charset=utf-8";
    "/js/images.js" => "js/images.js", "text/javascript; charset=utf-8";
    "/js/vendor/marked.js" => "js/vendor/marked.js.zst", "text/javascript; charset=utf-8", zstd;
}

/// The index page's content security policy.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

fn etags() -> &'static Vec<String> {
    static TAGS: OnceLock<Vec<String>> = OnceLock::new();
    TAGS.get_or_init(|| {
        ASSETS
            .iter()
            .map(|a| {
                let digest = ring::digest::digest(&ring::digest::SHA256, a.bytes());
                format!(
                    "\"{}\"",
                    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&digest.as_ref()[..12])
                )
            })
            .collect()
    })
}

/// The asset at `path`, honouring `If-None-Match`.
pub fn serve(path: &str, request_headers: &HeaderMap) -> Option<Resp> {
    let index = ASSETS.iter().position(|a| a.path == path)?;
    let asset = &ASSETS[index];
    let etag = &etags()[index];
    let fresh = request_headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag));
    let mut resp = if fresh {
        let mut r = hyper::Response::new(Body::Full(None));
        *r.status_mut() = StatusCode::NOT_MODIFIED;
        r
    } else {
        with_body(StatusCode::OK, asset.content_type, asset.bytes())
    };
    let h = resp.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if let Ok(v) = HeaderValue::from_str(etag) {
        h.insert(header::ETAG, v);
    }
    if path == "/" {
        h.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CSP),
        );
    }
    Some(resp)
}

/// Total bytes of the first page (every asset once; the `.ico` alias excluded).
pub fn first_page_bytes() -> usize {
    ASSETS
        .iter()
        .filter(|a| a.path != "/favicon.ico")
        .map(|a| a.bytes().len())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_page_stays_within_300_kb() {
        let total = first_page_bytes();
        assert!(total <= 300 * 1024, "first page is {total} bytes");
    }

    #[test]
    fn no_inline_script_or_style_and_every_module_is_served() {
        let index = String::from_utf8_lossy(ASSETS[0].bytes());
        assert!(!index.contains("<script>") && !index.contains("style="));
        assert!(!index.contains("<style"));
        for a in ASSETS.iter().filter(|a| a.path.ends_with(".js")) {
            let text = String::from_utf8_lossy(a.bytes());
            // Every relative import names an embedded module.
            for line in text.lines().filter(|l| l.starts_with("import ")) {
                let Some(from) = line.split(['\'', '"']).nth(1) else {
                    continue;
                };
                let target = format!("/js/{}", from.trim_start_matches("./"));
                assert!(
                    ASSETS.iter().any(|b| b.path == target),
                    "{} imports {from}, which is not embedded",
                    a.path
                );
            }
            assert!(
                a.path.starts_with("/js/vendor/") || !text.contains("innerHTML ="),
                "{} assigns innerHTML",
                a.path
            );
        }
    }

    /// The vendored libraries are the files their registries publish (see
    /// `assets/js/vendor/README.md`), not edited copies.
    #[test]
    fn vendored_files_are_the_published_ones() {
        let marked = ASSETS
            .iter()
            .find(|a| a.path == "/js/vendor/marked.js")
            .expect("marked is embedded");
        let digest = ring::digest::digest(&ring::digest::SHA256, marked.bytes());
        let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex, "4d2d824f3035e79b6887380d88c6c9ca0958215d1f4f6c053c562d60babc7172",
            "npm marked@18.3.0 lib/marked.esm.js"
        );
    }
}
