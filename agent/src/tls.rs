//! TLS toward the admins: which CAs an https:// admin must chain to, and the client
//! certificate this agent presents (mutual TLS). [`client_config`] builds the one rustls
//! configuration every connection to an admin uses: the admin client's HTTP calls and the
//! outbound connection of `connect` mode.
//!
//! Without `admin_ca_file` the host's trust store is used (`rustls-native-certs`: the system's
//! PEM bundle, which `update-ca-certificates` and configuration management keep current, and
//! where an organisation's internal CA is usually installed), not a bundle compiled into the
//! binary (`webpki-roots`), which would go stale between agent upgrades and ignore internal CAs.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore};

use crate::error::Error;

/// The agent's TLS settings (config keys `admin_ca_file`, `client_cert`, `client_key`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsSettings {
    /// Trust only the CAs in this PEM file; `None`: the host's trust store.
    pub admin_ca_file: Option<PathBuf>,
    /// The client certificate chain and its key (PEM): mutual TLS.
    pub client_cert: Option<(PathBuf, PathBuf)>,
}

fn refused(key: &str, path: &Path, message: impl std::fmt::Display) -> Error {
    Error::Refused(format!("config key `{key}`: {}: {message}", path.display()))
}

fn read(key: &str, path: &Path) -> Result<Vec<u8>, Error> {
    std::fs::read(path).map_err(|e| refused(key, path, format!("cannot read the file: {e}")))
}

fn read_certs(key: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, Error> {
    let bytes = read(key, path)?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| refused(key, path, format!("not a PEM certificate file: {e}")))?;
    if certs.is_empty() {
        return Err(refused(
            key,
            path,
            "holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
        ));
    }
    Ok(certs)
}

fn read_key(key: &str, path: &Path) -> Result<PrivateKeyDer<'static>, Error> {
    let bytes = read(key, path)?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| {
        refused(
            key,
            path,
            format!("holds no usable PEM private key (PKCS#8, PKCS#1 or SEC1): {e}"),
        )
    })
}

/// The CAs admins are verified against.
fn roots(settings: &TlsSettings) -> Result<Arc<RootCertStore>, Error> {
    let mut roots = RootCertStore::empty();
    if let Some(path) = &settings.admin_ca_file {
        for cert in read_certs("admin_ca_file", path)? {
            roots.add(cert).map_err(|e| {
                refused(
                    "admin_ca_file",
                    path,
                    format!("not a usable CA certificate: {e}"),
                )
            })?;
        }
        return Ok(Arc::new(roots));
    }
    let roots = system_roots();
    if roots.is_empty() {
        // Plain http:// admins need none; an https:// admin will be refused, saying why.
        tracing::warn!(
            "The system trust store holds no CA certificate: https:// admins cannot be verified \
             (install ca-certificates or set admin_ca_file)"
        );
    }
    Ok(roots)
}

/// The host's trust store, what `update-ca-certificates` manages: read once, and shared by the
/// admin client and the http jobs' client (each copy of its ~140 anchors held about 85 kB of an
/// idle agent's 550 kB of heap). Like any TLS setting, a change is taken at the next start.
fn system_roots() -> Arc<RootCertStore> {
    static ROOTS: std::sync::OnceLock<Arc<RootCertStore>> = std::sync::OnceLock::new();
    ROOTS.get_or_init(|| Arc::new(read_system_roots())).clone()
}

fn read_system_roots() -> RootCertStore {
    let mut roots = RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    for error in &native.errors {
        tracing::warn!(error = %error, "Skipping part of the system trust store");
    }
    let (_, ignored) = roots.add_parsable_certificates(native.certs);
    if ignored > 0 {
        tracing::warn!(
            ignored,
            "Skipping unusable certificates of the system trust store"
        );
    }
    roots
}

/// The TLS client configuration for http jobs: the host's trust store, as `curl` in a shell
/// job would verify with, never the admins' own CA or the agent's client certificate.
///
/// # Errors
/// The ring provider refuses the default protocol versions (it does not).
pub fn jobs_client_config() -> Result<ClientConfig, Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Refused(format!("TLS: {e}")))?
        .with_root_certificates(system_roots())
        .with_no_client_auth())
}

/// Builds the TLS client configuration for talking to the admins, with the ring provider.
///
/// # Errors
/// A file named by the settings cannot be read or used; the error names the key and the file.
pub fn client_config(settings: &TlsSettings) -> Result<Arc<ClientConfig>, Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Refused(format!("TLS: {e}")))?
        .with_root_certificates(roots(settings)?);
    let config = match &settings.client_cert {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let chain = read_certs("client_cert", cert)?;
            let private = read_key("client_key", key)?;
            builder.with_client_auth_cert(chain, private).map_err(|e| {
                refused(
                    "client_key",
                    key,
                    format!(
                        "cannot be used with the certificate in {}: {e}",
                        cert.display()
                    ),
                )
            })?
        }
    };
    Ok(Arc::new(config))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn unusable_files_name_their_key_and_file() {
        let dir = tempfile::tempdir().unwrap();
        let garbage = dir.path().join("garbage.pem");
        std::fs::write(&garbage, "not a certificate\n").unwrap();
        let missing = dir.path().join("missing.pem");
        for (settings, key, path, says) in [
            (
                TlsSettings {
                    admin_ca_file: Some(missing.clone()),
                    client_cert: None,
                },
                "admin_ca_file",
                &missing,
                "cannot read",
            ),
            (
                TlsSettings {
                    admin_ca_file: Some(garbage.clone()),
                    client_cert: None,
                },
                "admin_ca_file",
                &garbage,
                "no PEM certificate",
            ),
            (
                TlsSettings {
                    admin_ca_file: None,
                    client_cert: Some((garbage.clone(), missing.clone())),
                },
                "client_cert",
                &garbage,
                "no PEM certificate",
            ),
        ] {
            let err = client_config(&settings).unwrap_err().to_string();
            assert!(
                err.contains(&format!("`{key}`")) && err.contains(&path.display().to_string()),
                "{err}"
            );
            assert!(err.contains(says), "{err}");
        }
    }

    #[test]
    fn without_files_the_system_store_is_used() {
        // Whatever the host holds (possibly nothing): building must not fail for http:// admins.
        client_config(&TlsSettings::default()).unwrap();
    }
}
