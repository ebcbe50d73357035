//! A private CA and a server certificate for `127.0.0.1` and `localhost`
//! signed by it, made fresh in each test with `rcgen` (also used by the
//! `test_certs` example for the Python tests and by the CLI's tests).

use std::path::{Path, PathBuf};

pub struct TestPki {
    pub ca_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
}

/// A new CA named `ca_name` and a leaf certificate it signed.
pub fn make(ca_name: &str) -> TestPki {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.distinguished_name.push(DnType::CommonName, ca_name);
    let ca = p.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let mut p =
        CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()]).unwrap();
    p.distinguished_name
        .push(DnType::CommonName, "hasten test server");
    let cert = p.signed_by(&key, &ca, &ca_key).unwrap();
    TestPki {
        ca_pem: ca.pem(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    }
}

/// Writes `ca.pem`, `cert.pem` and `key.pem` into `dir`; returns their paths.
pub fn write(pki: &TestPki, dir: &Path) -> [PathBuf; 3] {
    let paths = ["ca.pem", "cert.pem", "key.pem"].map(|f| dir.join(f));
    for (p, text) in paths.iter().zip([&pki.ca_pem, &pki.cert_pem, &pki.key_pem]) {
        std::fs::write(p, text).unwrap();
    }
    paths
}
