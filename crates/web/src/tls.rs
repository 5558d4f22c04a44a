//! HTTPS for `dsh web --tls-cert … --tls-key …`: rustls (the TLS stack the model clients
//! already use, ring provider) with a PEM certificate chain and private key.

use std::path::Path;
use std::sync::Arc;

use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::rustls::crypto::ring;

use crate::plugins::TlsFiles;

/// The acceptor for `files`; the error is one line naming the file and what is wrong.
pub fn acceptor(files: &TlsFiles) -> Result<TlsAcceptor, String> {
    let certs = read_certs(&files.cert)?;
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|e| {
        format!(
            "dsh web: --tls-key {}: no usable PEM private key ({})",
            files.key.display(),
            pem_error(&e)
        )
    })?;
    let config = ServerConfig::builder_with_provider(Arc::new(ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("dsh web: TLS setup failed: {e}"))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| {
            format!(
                "dsh web: --tls-cert {} and --tls-key {} are not a usable certificate and key pair: {e}",
                files.cert.display(),
                files.key.display()
            )
        })?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let bad = |why: String| format!("dsh web: --tls-cert {}: {why}", path.display());
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| bad(pem_error(&e)))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(pem_error(&e)))?;
    if certs.is_empty() {
        return Err(bad("holds no PEM certificate".into()));
    }
    Ok(certs)
}

fn pem_error(e: &rustls_pki_types::pem::Error) -> String {
    match e {
        rustls_pki_types::pem::Error::Io(io) => io.to_string(),
        rustls_pki_types::pem::Error::NoItemsFound => "no PEM item of that kind found".into(),
        other => format!("{other:?}"),
    }
}
