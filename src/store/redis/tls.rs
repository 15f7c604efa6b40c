//! What a `rediss://` connection trusts and presents (docs/redis.md#tls).
//!
//! - Roots: the system's (rustls-native-certs: the OS store, or `SSL_CERT_FILE` /
//!   `SSL_CERT_DIR` when set), plus every certificate in the files named by
//!   `NODE_EXTRA_CA_CERTS` (as Node users give extra CAs) and `QUOTA_STORE_REDIS_CA_FILE`
//!   (the engine's own setting). The extra files add to the system roots; they never
//!   replace them.
//! - A client certificate (`tls-auth-clients yes` servers): `QUOTA_STORE_REDIS_TLS_CERT_FILE`
//!   and `QUOTA_STORE_REDIS_TLS_KEY_FILE`, PEM, both or neither.
//!
//! The files are read when a backend first connects (not on the JS thread's hot path), so
//! a file that cannot be read fails that connection with a message naming the variable.

use crate::error::{QuotaError, Result};
use redis::{ClientTlsConfig, TlsCertificates};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;

/// A file as the configuration names it: `(variable, path)`.
pub type NamedFile = (&'static str, String);

/// The TLS files a backend uses, as the configuration names them: `(variable, path)`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsFiles {
  /// Extra CA bundles (PEM), each with the variable that named it.
  pub ca: Vec<NamedFile>,
  /// The client certificate chain and key (PEM), for mutual TLS, each with the variable
  /// that named it.
  pub client: Option<(NamedFile, NamedFile)>,
}

fn read(variable: &str, path: &str) -> Result<Vec<u8>> {
  std::fs::read(path)
    .map_err(|e| QuotaError::Store(format!("{variable}={path:?}: cannot read it: {e}")))
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// One DER certificate as a PEM block (the redis crate takes its roots as PEM).
fn pem_of(der: &[u8]) -> String {
  let mut encoded = String::with_capacity(der.len() * 4 / 3 + 4);
  for chunk in der.chunks(3) {
    let b = [
      chunk[0],
      *chunk.get(1).unwrap_or(&0),
      *chunk.get(2).unwrap_or(&0),
    ];
    let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
    for (i, shift) in [18, 12, 6, 0].into_iter().enumerate() {
      if i <= chunk.len() {
        encoded.push(B64[((n >> shift) & 63) as usize] as char);
      } else {
        encoded.push('=');
      }
    }
  }
  let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
  for line in encoded.as_bytes().chunks(64) {
    out.push_str(std::str::from_utf8(line).unwrap_or_default());
    out.push('\n');
  }
  out.push_str("-----END CERTIFICATE-----\n");
  out
}

/// The roots and client identity for a TLS connection: the system roots plus `files.ca`,
/// and `files.client` when set. A CA file without one certificate is an error naming its
/// variable.
pub fn certificates(files: &TlsFiles) -> Result<TlsCertificates> {
  let mut bundle = String::new();
  let mut count = 0usize;
  // Errors reading single system certificates are skipped: the store is the OS's.
  for cert in rustls_native_certs::load_native_certs().certs {
    bundle.push_str(&pem_of(cert.as_ref()));
    count += 1;
  }
  for (variable, path) in &files.ca {
    let bytes = read(variable, path)?;
    let mut found = 0usize;
    for cert in CertificateDer::pem_slice_iter(&bytes) {
      let cert = cert.map_err(|e| {
        QuotaError::Store(format!("{variable}={path:?}: not a PEM certificate: {e}"))
      })?;
      bundle.push_str(&pem_of(cert.as_ref()));
      found += 1;
    }
    if found == 0 {
      return Err(QuotaError::Store(format!(
        "{variable}={path:?}: no PEM certificate in the file"
      )));
    }
    count += found;
  }
  let client_tls = match &files.client {
    None => None,
    Some(((cert_variable, cert), (key_variable, key))) => Some(ClientTlsConfig {
      client_cert: read(cert_variable, cert)?,
      client_key: read(key_variable, key)?,
    }),
  };
  Ok(TlsCertificates {
    client_tls,
    // No root at all (no system store, no extra file): the crate's own loading reports it.
    root_cert: (count > 0).then(|| bundle.into_bytes()),
  })
}

/// What to do about a TLS failure the user can fix, in plain words, by what rustls said.
pub fn explain(error: &str) -> Option<&'static str> {
  error.contains("CaUsedAsEndEntity").then_some(
    "the Redis server presents a CA certificate (a self-signed certificate made with \
     `openssl req -x509`) as its own server certificate. Node's TLS accepts that when the \
     certificate is trusted; the engine's TLS (rustls) does not accept a CA certificate as a \
     server certificate, even when trusted. Fix: keep that certificate as the CA, issue the \
     server a certificate signed by it (`openssl req -new` + `openssl x509 -req -CA ca.crt \
     -CAkey ca.key`), configure Redis with the server certificate, and trust ca.crt through \
     NODE_EXTRA_CA_CERTS or QUOTA_STORE_REDIS_CA_FILE",
  )
}

#[cfg(test)]
mod tests {
  #[test]
  fn a_ca_used_as_the_server_certificate_is_explained_with_the_fix() {
    let said = super::explain("invalid peer certificate: CaUsedAsEndEntity").unwrap();
    assert!(said.contains("QUOTA_STORE_REDIS_CA_FILE") && said.contains("signed by it"));
    assert!(super::explain("Connection refused").is_none());
  }

  use super::*;

  #[test]
  fn der_to_pem_round_trips() {
    for der in [
      vec![0x30u8],
      vec![0x30, 0x82],
      vec![0x30, 0x82, 0x01],
      (0..=255u8).collect(),
    ] {
      let pem = pem_of(&der);
      let back: Vec<_> = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<std::result::Result<_, _>>()
        .unwrap();
      assert_eq!(back.len(), 1);
      assert_eq!(back[0].as_ref(), &der[..]);
    }
  }

  #[test]
  fn unreadable_or_empty_ca_files_name_their_variable() {
    let files = TlsFiles {
      ca: vec![("QUOTA_STORE_REDIS_CA_FILE", "/nonexistent/ca.pem".into())],
      client: None,
    };
    let err = certificates(&files).unwrap_err().to_string();
    assert!(
      err.contains("QUOTA_STORE_REDIS_CA_FILE=\"/nonexistent/ca.pem\""),
      "{err}"
    );
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.pem");
    std::fs::write(&empty, "not a certificate\n").unwrap();
    let files = TlsFiles {
      ca: vec![("NODE_EXTRA_CA_CERTS", empty.to_string_lossy().into_owned())],
      client: None,
    };
    let err = certificates(&files).unwrap_err().to_string();
    assert!(
      err.contains("NODE_EXTRA_CA_CERTS") && err.contains("no PEM certificate"),
      "{err}"
    );
  }
}
