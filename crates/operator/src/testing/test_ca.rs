//! A test CA and the certificates it signs (serving and client), PEM: the HTTPS of
//! [`super::FakePrometheus`], and the TLS files of the tests that read them.
// A test fixture: a certificate that cannot be made fails the test that asked for it.
#![allow(clippy::expect_used)]

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
};

/// A test CA, and the certificates it signs.
pub struct TestCa {
    /// The CA certificate, PEM.
    pub pem: String,
    issuer: Issuer<'static, KeyPair>,
}

/// A certificate and its key, PEM.
pub struct Issued {
    pub cert: String,
    pub key: String,
}

impl TestCa {
    pub fn new(name: &str) -> Self {
        let key = KeyPair::generate().expect("a key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let cert = params.self_signed(&key).expect("a self-signed CA");
        Self {
            pem: cert.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    /// A serving certificate for `names` (DNS names or IP addresses).
    pub fn serving(&self, names: &[&str]) -> Issued {
        let names = names.iter().map(|n| (*n).to_string()).collect::<Vec<_>>();
        self.sign(CertificateParams::new(names).expect("serving names"))
    }

    /// A client certificate for `name`.
    pub fn client(&self, name: &str) -> Issued {
        self.client_in(name, None)
    }

    /// A client certificate for `name`, in the organization `group` when given (the group the
    /// API server reads from a client certificate).
    pub fn client_in(&self, name: &str, group: Option<&str>) -> Issued {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("client parameters");
        params.distinguished_name.push(DnType::CommonName, name);
        if let Some(group) = group {
            params
                .distinguished_name
                .push(DnType::OrganizationName, group);
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.sign(params)
    }

    fn sign(&self, params: CertificateParams) -> Issued {
        let key = KeyPair::generate().expect("a key");
        let cert = params
            .signed_by(&key, &self.issuer)
            .expect("a signed certificate");
        Issued {
            cert: cert.pem(),
            key: key.serialize_pem(),
        }
    }
}
