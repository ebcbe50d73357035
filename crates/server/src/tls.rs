//! TLS without a proxy: the certificate chain and private key from PEM
//! files (`--tls-cert`, `--tls-key`), one handshake per connection, and
//! reloading both files in place (SIGHUP; see `serve`).
//!
//! Only HTTP/1.1 is offered by ALPN, as on plain TCP. A client that speaks
//! plain HTTP to the TLS port gets a plain-text 400 saying to use
//! `https://` (nginx does the same) instead of a bare connection reset.

use crate::error::Error;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

/// The server's certificate, reloadable while connections use the old one.
pub struct Tls {
    cert: PathBuf,
    key: PathBuf,
    current: RwLock<Arc<rustls::ServerConfig>>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("cert", &self.cert)
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl Tls {
    /// Reads and checks the PEM certificate chain and key (PKCS#8, PKCS#1
    /// or SEC1), refusing a key that does not belong to the certificate.
    pub fn load(cert: &Path, key: &Path) -> Result<Tls, Error> {
        Ok(Tls {
            current: RwLock::new(Arc::new(server_config(cert, key)?)),
            cert: cert.to_owned(),
            key: key.to_owned(),
        })
    }

    /// Reads both files again. On any error the old certificate stays in
    /// use; new connections get the new one, open ones keep theirs.
    pub fn reload(&self) -> Result<(), Error> {
        let fresh = Arc::new(server_config(&self.cert, &self.key)?);
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = fresh;
        Ok(())
    }

    /// The certificate file, for log lines.
    pub fn cert_path(&self) -> &Path {
        &self.cert
    }

    fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(
            self.current
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
        )
    }
}

fn read(path: &Path, what: &str) -> Result<Vec<u8>, Error> {
    std::fs::read(path)
        .map_err(|e| Error::Tls(format!("reading the TLS {what} {}: {e}", path.display())))
}

fn server_config(cert: &Path, key: &Path) -> Result<rustls::ServerConfig, Error> {
    let pem = read(cert, "certificate")?;
    let chain = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| {
            Error::Tls(format!(
                "{}: not a PEM certificate chain: {e}",
                cert.display()
            ))
        })?;
    if chain.is_empty() {
        return Err(Error::Tls(format!(
            "{}: no PEM `CERTIFICATE` block (expected the certificate chain, leaf first)",
            cert.display()
        )));
    }
    let pem = read(key, "key")?;
    let private = PrivateKeyDer::from_pem_slice(&pem).map_err(|e| {
        Error::Tls(format!(
            "{}: no PEM private key (PKCS#8, RSA or EC): {e}",
            key.display()
        ))
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut c = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Tls(format!("TLS set-up: {e}")))?
        .with_no_client_auth()
        .with_single_cert(chain, private)
        .map_err(|e| {
            Error::Tls(format!(
                "the key {} does not fit the certificate {}: {e}",
                key.display(),
                cert.display()
            ))
        })?;
    c.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(c)
}

/// Why a connection never got to HTTP.
#[derive(Debug)]
pub(crate) enum Refusal {
    /// Plain HTTP on the TLS port (answered with a 400).
    PlainHttp,
    /// A failed handshake (bad client hello, untrusted certificate on the
    /// client's side, a closed socket).
    Handshake(std::io::Error),
}

const PLAIN_HTTP_REPLY: &[u8] = b"HTTP/1.1 400 Bad Request\r\n\
Content-Type: text/plain; charset=utf-8\r\n\
Connection: close\r\n\
Content-Length: 66\r\n\r\n\
This server speaks HTTPS on this port: use an https:// URL to it.\n";

/// Runs the server side of the handshake (the caller bounds its time).
pub(crate) async fn accept(tls: &Tls, io: TcpStream) -> Result<TlsStream<TcpStream>, Refusal> {
    let mut first = [0u8; 1];
    let n = io.peek(&mut first).await.map_err(Refusal::Handshake)?;
    // Every TLS connection opens with a handshake record (content type 22).
    if n == 1 && first[0] != 0x16 {
        plain_http_reply(io).await;
        return Err(Refusal::PlainHttp);
    }
    tls.acceptor().accept(io).await.map_err(Refusal::Handshake)
}

/// Reads the request head (so closing does not reset the connection before
/// the client reads the reply), answers 400 and closes.
async fn plain_http_reply(mut io: TcpStream) {
    let mut buf = vec![0u8; 8192];
    let mut got = 0;
    let read_head = async {
        while got < buf.len() {
            match io.read(&mut buf[got..]).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got += n,
            }
            if buf[..got].windows(4).any(|w| w == b"\r\n\r\n") {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), read_head).await;
    let _ = io.write_all(PLAIN_HTTP_REPLY).await;
    let _ = io.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plain_http_reply_has_the_right_length() {
        let s = std::str::from_utf8(PLAIN_HTTP_REPLY).unwrap();
        let (head, body) = s.split_once("\r\n\r\n").unwrap();
        assert!(head.contains(&format!("Content-Length: {}", body.len())));
    }
}
