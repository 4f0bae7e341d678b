//! The admin's own HTTPS: reads the `tls_*` files, builds the rustls server configuration, and
//! swaps in a new certificate when its files change or on SIGHUP, without a restart and
//! without dropping a connection (a handshake takes whatever certificate is current; an open
//! connection keeps the one it started with). Also the client side of
//! `jobfleet-admin healthcheck` against an HTTPS admin.
//!
//! A leaf: it knows the config's paths and rustls, nothing of the app.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, SystemTime};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};

use crate::config::TlsConfig;

/// How often the certificate files' modification times are compared: a renewal is served
/// within this long without anyone sending SIGHUP.
pub const RELOAD_CHECK: Duration = Duration::from_secs(2);

/// A `tls_*` file that cannot be used: names the key and the file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("config key `{key}`: {}: {message}", path.display())]
pub struct TlsError {
    pub key: &'static str,
    pub path: PathBuf,
    pub message: String,
}

impl TlsError {
    fn new(key: &'static str, path: &Path, message: impl Into<String>) -> Self {
        Self {
            key,
            path: path.to_owned(),
            message: message.into(),
        }
    }
}

/// The one crypto provider of the workspace (ring), passed explicitly so nothing depends on
/// which process-wide default was installed first.
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read(key: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|e| TlsError::new(key, path, format!("cannot read the file: {e}")))
}

/// Every certificate in a PEM file, in order; at least one.
///
/// # Errors
/// The file cannot be read, is not PEM, or holds no certificate.
pub fn read_certs(
    key: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = read(key, path)?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::new(key, path, format!("not a PEM certificate file: {e}")))?;
    if certs.is_empty() {
        return Err(TlsError::new(
            key,
            path,
            "holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
        ));
    }
    Ok(certs)
}

/// The private key in a PEM file.
///
/// # Errors
/// The file cannot be read or holds no PEM private key.
pub fn read_key(key: &'static str, path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let bytes = read(key, path)?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| {
        TlsError::new(
            key,
            path,
            format!("holds no usable PEM private key (PKCS#8, PKCS#1 or SEC1): {e}"),
        )
    })
}

/// The certificate chain and its key, checked to belong together.
fn load_certified_key(
    cert: &Path,
    key: &Path,
    provider: &CryptoProvider,
) -> Result<CertifiedKey, TlsError> {
    let chain = read_certs("tls_cert", cert)?;
    let private = read_key("tls_key", key)?;
    CertifiedKey::from_der(chain, private, provider).map_err(|e| {
        TlsError::new(
            "tls_key",
            key,
            format!(
                "cannot be used with the certificate in {}: {e}",
                cert.display()
            ),
        )
    })
}

/// What identifies a version of a file: a replacement by rename changes the inode, an
/// in-place write the modification time or length.
type Stamp = Option<(u64, SystemTime, u64)>;

fn stamp(path: &Path) -> Stamp {
    let meta = std::fs::metadata(path).ok()?;
    Some((
        std::os::unix::fs::MetadataExt::ino(&meta),
        meta.modified().ok()?,
        meta.len(),
    ))
}

/// The certificate being served, swapped whole when the files change.
pub struct CertStore {
    cert: PathBuf,
    key: PathBuf,
    provider: Arc<CryptoProvider>,
    current: RwLock<Arc<CertifiedKey>>,
    /// The files' stamps when last read, so a poll reloads only after a change, and a bad
    /// file is reported once, not at every poll.
    seen: Mutex<[Stamp; 2]>,
}

impl std::fmt::Debug for CertStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertStore")
            .field("cert", &self.cert)
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl CertStore {
    fn open(cert: &Path, key: &Path, provider: Arc<CryptoProvider>) -> Result<Self, TlsError> {
        let seen = [stamp(cert), stamp(key)];
        let current = load_certified_key(cert, key, &provider)?;
        Ok(Self {
            cert: cert.to_owned(),
            key: key.to_owned(),
            provider,
            current: RwLock::new(Arc::new(current)),
            seen: Mutex::new(seen),
        })
    }

    /// Reads the files again and serves them from the next handshake on.
    ///
    /// # Errors
    /// The new files cannot be used; the current certificate stays.
    pub fn reload(&self) -> Result<(), TlsError> {
        let stamps = [stamp(&self.cert), stamp(&self.key)];
        *self.seen.lock().unwrap_or_else(PoisonError::into_inner) = stamps;
        let fresh = load_certified_key(&self.cert, &self.key, &self.provider)?;
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(fresh);
        Ok(())
    }

    /// Reloads when a file changed since it was last read; `None` when none did.
    pub fn reload_if_changed(&self) -> Option<Result<(), TlsError>> {
        let stamps = [stamp(&self.cert), stamp(&self.key)];
        if *self.seen.lock().unwrap_or_else(PoisonError::into_inner) == stamps {
            return None;
        }
        Some(self.reload())
    }
}

impl ResolvesServerCert for CertStore {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(
            self.current
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
        )
    }
}

/// The server side: the rustls configuration to serve with and the store to reload.
pub struct ServerTls {
    pub config: rustls::ServerConfig,
    pub certs: Arc<CertStore>,
}

/// Reads the `tls_*` files and builds the server configuration.
///
/// # Errors
/// A file that cannot be read or used, named with its key.
pub fn server(tls: &TlsConfig) -> Result<ServerTls, TlsError> {
    let provider = provider();
    let certs = Arc::new(CertStore::open(&tls.cert, &tls.key, provider.clone())?);
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::new("tls_cert", &tls.cert, e.to_string()))?;
    let builder = match &tls.client_auth {
        None => builder.with_no_client_auth(),
        Some(auth) => {
            let mut roots = RootCertStore::empty();
            for cert in read_certs("tls_client_ca", &auth.ca)? {
                roots.add(cert).map_err(|e| {
                    TlsError::new(
                        "tls_client_ca",
                        &auth.ca,
                        format!("not a usable CA certificate: {e}"),
                    )
                })?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier = if auth.required {
                verifier
            } else {
                verifier.allow_unauthenticated()
            };
            let verifier = verifier.build().map_err(|e| {
                TlsError::new(
                    "tls_client_ca",
                    &auth.ca,
                    format!("cannot verify clients with it: {e}"),
                )
            })?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let config = builder.with_cert_resolver(certs.clone());
    Ok(ServerTls { config, certs })
}

/// Reloads the certificate when its files change (checked every [`RELOAD_CHECK`]) and on
/// SIGHUP. A file that cannot be used is logged and the current certificate kept, so a
/// half-written renewal never takes HTTPS down; it is read again at its next change.
///
/// Not a `worker::Worker`: it runs whether or not this admin schedules, and no pass can fail
/// in a way that needs backing off.
///
/// # Errors
/// SIGHUP cannot be watched.
pub fn watch(certs: Arc<CertStore>) -> std::io::Result<tokio::task::JoinHandle<()>> {
    let mut hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
    Ok(tokio::spawn(async move {
        let mut tick = tokio::time::interval(RELOAD_CHECK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let (why, outcome) = tokio::select! {
                _ = tick.tick() => match certs.reload_if_changed() {
                    Some(outcome) => ("the files changed", outcome),
                    None => continue,
                },
                Some(()) = hangup.recv() => ("SIGHUP", certs.reload()),
            };
            match outcome {
                Ok(()) => tracing::info!(
                    reason = why,
                    cert = %certs.cert.display(),
                    "Reloaded the TLS certificate"
                ),
                Err(e) => tracing::error!(
                    reason = why,
                    error = %e,
                    "Keeping the current TLS certificate: the new one cannot be used"
                ),
            }
        }
    }))
}

/// The client configuration of `jobfleet-admin healthcheck` against this admin's HTTPS: it
/// accepts exactly the leaf certificate in `tls_cert` (the check runs beside the admin, with
/// its config), so it needs no CA and also fails while the admin serves anything else. With
/// `tls_client_auth = required` it presents that same certificate and key as its client
/// certificate, which the admin accepts when `tls_client_ca` signed it for client use.
///
/// # Errors
/// The `tls_*` files cannot be used.
pub fn healthcheck_client(tls: &TlsConfig) -> Result<rustls::ClientConfig, TlsError> {
    let provider = provider();
    let chain = read_certs("tls_cert", &tls.cert)?;
    let leaf = chain
        .first()
        .cloned()
        .ok_or_else(|| TlsError::new("tls_cert", &tls.cert, "holds no certificate"))?;
    let pinned = PinnedLeaf {
        leaf,
        algorithms: provider.signature_verification_algorithms,
    };
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::new("tls_cert", &tls.cert, e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(pinned));
    match &tls.client_auth {
        Some(auth) if auth.required => builder
            .with_client_auth_cert(chain, read_key("tls_key", &tls.key)?)
            .map_err(|e| TlsError::new("tls_key", &tls.key, e.to_string())),
        _ => Ok(builder.with_no_client_auth()),
    }
}

/// Trusts one end-entity certificate, byte for byte; the handshake signatures are still
/// verified, so the peer must hold its key.
#[derive(Debug)]
struct PinnedLeaf {
    leaf: CertificateDer<'static>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for PinnedLeaf {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if end_entity.as_ref() == self.leaf.as_ref() {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::General(
                "the admin serves another certificate than the one in tls_cert".into(),
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}
