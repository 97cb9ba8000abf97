//! The Secret and ConfigMap keys an object needs, so the controller can read exactly those (in
//! the object's namespace) before translating it.

use std::collections::BTreeSet;

use crate::monitors::{
    BasicAuth, OAuth2, ProxyConfig, SafeAuthorization, SafeTlsConfig, SecretKeySelector,
    SecretOrConfigMap,
};
use crate::resolve::KeyRef;

/// Collects references, deduplicated and sorted.
pub(crate) struct Refs<'a> {
    namespace: &'a str,
    keys: BTreeSet<KeyRef>,
}

impl<'a> Refs<'a> {
    pub fn new(namespace: &'a str) -> Self {
        Refs {
            namespace,
            keys: BTreeSet::new(),
        }
    }

    pub fn into_vec(self) -> Vec<KeyRef> {
        self.keys.into_iter().collect()
    }

    pub fn secret(&mut self, selector: &SecretKeySelector) {
        self.keys.insert(KeyRef::secret(self.namespace, selector));
    }

    pub fn secret_or_config_map(&mut self, source: &SecretOrConfigMap) {
        if let Some(secret) = &source.secret {
            self.secret(secret);
        }
        if let Some(config_map) = &source.config_map {
            self.keys
                .insert(KeyRef::config_map(self.namespace, config_map));
        }
    }

    /// Every credential of one HTTP client (a job, an endpoint or an SD config).
    pub fn client(
        &mut self,
        basic: Option<&BasicAuth>,
        authorization: Option<&SafeAuthorization>,
        oauth2: Option<&OAuth2>,
        tls: Option<&SafeTlsConfig>,
        proxy: &ProxyConfig,
    ) {
        self.basic_auth(basic);
        self.authorization(authorization);
        self.oauth2(oauth2);
        self.tls(tls);
        self.proxy(proxy);
    }

    /// A `bearerTokenSecret`, unless it names no Secret (upstream's empty default).
    pub fn bearer_token(&mut self, secret: Option<&SecretKeySelector>) {
        if let Some(secret) = secret.filter(|s| !s.name.is_empty()) {
            self.secret(secret);
        }
    }

    pub fn basic_auth(&mut self, auth: Option<&BasicAuth>) {
        if let Some(auth) = auth {
            self.secret(&auth.username);
            self.secret(&auth.password);
        }
    }

    pub fn authorization(&mut self, auth: Option<&SafeAuthorization>) {
        if let Some(credentials) = auth.and_then(|auth| auth.credentials.as_ref()) {
            self.secret(credentials);
        }
    }

    pub fn oauth2(&mut self, oauth: Option<&OAuth2>) {
        if let Some(oauth) = oauth {
            self.secret_or_config_map(&oauth.client_id);
            self.secret(&oauth.client_secret);
            self.proxy(&oauth.proxy);
            self.tls(oauth.tls_config.as_ref());
        }
    }

    pub fn proxy(&mut self, proxy: &ProxyConfig) {
        for selector in proxy.proxy_connect_header.values().flatten() {
            self.secret(selector);
        }
    }

    pub fn tls(&mut self, tls: Option<&SafeTlsConfig>) {
        if let Some(tls) = tls {
            self.secret_or_config_map(&tls.ca);
            self.secret_or_config_map(&tls.cert);
            if let Some(key) = &tls.key_secret {
                self.secret(key);
            }
        }
    }
}
