//! What a `rediss://` connection trusts and presents (docs/redis.md#tls): the system roots
//! plus the extra CA files (`NODE_EXTRA_CA_CERTS`, `QUOTA_STORE_REDIS_CA_FILE`), and the
//! client certificate of `tls-auth-clients yes` servers. The redis crate takes roots as one
//! PEM bundle that replaces the system's, so the system roots go in the bundle too. The
//! files are read when a backend first connects (not on the hot path), so a file that
//! cannot be read fails that connection with a message naming its variable.

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
    let n = (chunk.iter().enumerate()).fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
    for i in 0..4 {
      let sextet = (n >> (18 - 6 * i)) & 63;
      let digit = B64[sextet as usize] as char;
      encoded.push(if i <= chunk.len() { digit } else { '=' });
    }
  }
  let lines: Vec<&str> = (encoded.as_bytes().chunks(64))
    .map(|line| std::str::from_utf8(line).unwrap_or_default())
    .collect();
  format!(
    "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
    lines.join("\n")
  )
}

/// The roots and client identity for a TLS connection: the system roots plus `files.ca`,
/// and `files.client` when set. A CA file without one certificate is an error naming its
/// variable.
pub fn certificates(files: &TlsFiles) -> Result<TlsCertificates> {
  let mut bundle = String::new();
  // Errors reading single system certificates are skipped: the store is the OS's.
  for cert in rustls_native_certs::load_native_certs().certs {
    bundle.push_str(&pem_of(cert.as_ref()));
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
    root_cert: (!bundle.is_empty()).then(|| bundle.into_bytes()),
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
  // Against a TLS server, `__test__/redis-tls.test.mjs`: each CA route, a CA file that
  // cannot be read, a client certificate, and the explained `CaUsedAsEndEntity`.
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
  fn a_ca_file_without_a_certificate_names_its_variable() {
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
