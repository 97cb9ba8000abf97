//! HTTP client settings of a job or an SD config: basic auth, the `Authorization` header,
//! OAuth2, proxy and TLS, with every Secret/ConfigMap reference resolved and inlined.
//!
//! Upstream writes TLS material to files under `/etc/prometheus/certs` and references them;
//! here the controller ships the configuration as a Secret, so CA, certificate and key are
//! inlined (`ca`, `cert`, `key`), like prometheus-operator's own inline-TLS mode. Paths the user
//! wrote (`caFile`, `certFile`, `keyFile`) pass through unchanged.

use serde_json::{Map, Value, json};

use crate::monitors::{
    BasicAuth, OAuth2, ProxyConfig, SafeAuthorization, SafeTlsConfig, SecretKeySelector,
    SecretOrConfigMap, TlsConfig,
};
use crate::resolve::{KeyRef, Resolver};

pub(crate) type Json = Map<String, Value>;

/// Where references resolve: the object's namespace, through the controller's reads.
#[derive(Clone, Copy)]
pub(crate) struct Ctx<'a> {
    pub namespace: &'a str,
    pub values: &'a dyn Resolver,
}

impl Ctx<'_> {
    /// The value of a Secret key; the error names `field` and the reference, never a value.
    pub fn secret(&self, field: &str, selector: &SecretKeySelector) -> Result<String, String> {
        let key = KeyRef::secret(self.namespace, selector);
        self.values
            .resolve(&key)
            .map_err(|error| format!("{field}: {error}"))
    }

    /// The value of a Secret or ConfigMap key; `None` when neither is set.
    pub fn secret_or_config_map(
        &self,
        field: &str,
        source: &SecretOrConfigMap,
    ) -> Result<Option<String>, String> {
        let key = match (&source.secret, &source.config_map) {
            (Some(_), Some(_)) => {
                return Err(format!("{field}: cannot specify both secret and configMap"));
            }
            (Some(secret), None) => KeyRef::secret(self.namespace, secret),
            (None, Some(config_map)) => KeyRef::config_map(self.namespace, config_map),
            (None, None) => return Ok(None),
        };
        self.values
            .resolve(&key)
            .map(Some)
            .map_err(|error| format!("{field}: {error}"))
    }
}

/// `basic_auth` with the username and password inlined.
pub(crate) fn basic_auth(ctx: Ctx<'_>, field: &str, auth: &BasicAuth) -> Result<Value, String> {
    let username = ctx.secret(&format!("{field}.username"), &auth.username)?;
    let password = ctx.secret(&format!("{field}.password"), &auth.password)?;
    Ok(json!({ "username": username, "password": password }))
}

/// `authorization`: the type (trimmed, `Bearer` when empty) and the inlined credentials.
/// `Basic` is refused as upstream does (Prometheus wants `basic_auth` for that).
pub(crate) fn authorization(
    ctx: Ctx<'_>,
    field: &str,
    auth: &SafeAuthorization,
) -> Result<Value, String> {
    let kind = auth.type_.as_deref().unwrap_or("").trim();
    let kind = if kind.is_empty() { "Bearer" } else { kind };
    if kind.eq_ignore_ascii_case("basic") {
        return Err(format!(
            "{field}.type: \"Basic\" is not allowed, use basicAuth instead"
        ));
    }
    let mut out = Json::new();
    out.insert("type".into(), json!(kind));
    if let Some(credentials) = &auth.credentials {
        let value = ctx.secret(&format!("{field}.credentials"), credentials)?;
        out.insert("credentials".into(), json!(value));
    }
    Ok(Value::Object(out))
}

/// `bearerTokenSecret` (deprecated upstream, which writes `bearer_token: <value>`): emitted as
/// the equivalent `authorization: {type: Bearer, credentials: <value>}`, which is exactly what
/// Prometheus turns `bearer_token` into when it loads the configuration.
pub(crate) fn bearer_token(
    ctx: Ctx<'_>,
    field: &str,
    secret: &SecretKeySelector,
) -> Result<Value, String> {
    let token = ctx.secret(field, secret)?;
    Ok(json!({ "type": "Bearer", "credentials": token }))
}

/// `oauth2` with the client id and secret inlined, validated as upstream does.
pub(crate) fn oauth2(ctx: Ctx<'_>, field: &str, oauth: &OAuth2) -> Result<Value, String> {
    if oauth.token_url.is_empty() {
        return Err(format!("{field}.tokenUrl: must be specified"));
    }
    let client_id = ctx
        .secret_or_config_map(&format!("{field}.clientId"), &oauth.client_id)?
        .ok_or_else(|| format!("{field}.clientId: must be specified"))?;
    let client_secret = ctx.secret(&format!("{field}.clientSecret"), &oauth.client_secret)?;
    let mut out = Json::new();
    out.insert("client_id".into(), json!(client_id));
    out.insert("client_secret".into(), json!(client_secret));
    out.insert("token_url".into(), json!(oauth.token_url));
    if !oauth.scopes.is_empty() {
        out.insert("scopes".into(), json!(oauth.scopes));
    }
    if !oauth.endpoint_params.is_empty() {
        out.insert("endpoint_params".into(), json!(oauth.endpoint_params));
    }
    proxy(ctx, field, &oauth.proxy, &mut out)?;
    if let Some(tls) = &oauth.tls_config {
        let tls = safe_tls(ctx, &format!("{field}.tlsConfig"), tls)?;
        out.insert("tls_config".into(), Value::Object(tls));
    }
    Ok(Value::Object(out))
}

/// Adds the proxy fields to `out`, after upstream's consistency checks.
pub(crate) fn proxy(
    ctx: Ctx<'_>,
    field: &str,
    proxy: &ProxyConfig,
    out: &mut Json,
) -> Result<(), String> {
    let from_environment = proxy.proxy_from_environment == Some(true);
    let url = proxy
        .proxy_url
        .as_deref()
        .is_some_and(|url| !url.is_empty());
    let no_proxy = proxy.no_proxy.as_deref().is_some_and(|no| !no.is_empty());
    let problem = if !proxy.proxy_connect_header.is_empty() && !from_environment && !url {
        Some("proxyConnectHeader needs proxyUrl or proxyFromEnvironment")
    } else if from_environment && url {
        Some("proxyFromEnvironment and proxyUrl are mutually exclusive")
    } else if from_environment && no_proxy {
        Some("proxyFromEnvironment and noProxy are mutually exclusive")
    } else if !url && no_proxy {
        Some("noProxy needs proxyUrl")
    } else {
        None
    };
    if let Some(problem) = problem {
        return Err(format!("{field}: {problem}"));
    }
    if let Some(url) = &proxy.proxy_url {
        out.insert("proxy_url".into(), json!(url));
    }
    if let Some(no_proxy) = &proxy.no_proxy {
        out.insert("no_proxy".into(), json!(no_proxy));
    }
    if let Some(from_environment) = proxy.proxy_from_environment {
        out.insert("proxy_from_environment".into(), json!(from_environment));
    }
    if !proxy.proxy_connect_header.is_empty() {
        let mut headers = Json::new();
        for (name, selectors) in &proxy.proxy_connect_header {
            if selectors.is_empty() {
                return Err(format!(
                    "{field}.proxyConnectHeader[{name}]: must not be empty"
                ));
            }
            let values = selectors
                .iter()
                .enumerate()
                .map(|(index, selector)| {
                    ctx.secret(
                        &format!("{field}.proxyConnectHeader[{name}][{index}]"),
                        selector,
                    )
                })
                .collect::<Result<Vec<_>, _>>()?;
            headers.insert(name.clone(), json!(values));
        }
        out.insert("proxy_connect_header".into(), Value::Object(headers));
    }
    Ok(())
}

/// A `tls_config` from the restricted TLS settings (no file paths).
pub(crate) fn safe_tls(ctx: Ctx<'_>, field: &str, tls: &SafeTlsConfig) -> Result<Json, String> {
    if !tls.cert.is_empty() && tls.key_secret.is_none() {
        return Err(format!("{field}: client cert specified without client key"));
    }
    if tls.key_secret.is_some() && tls.cert.is_empty() {
        return Err(format!("{field}: client key specified without client cert"));
    }
    tls_common(ctx, field, tls)
}

/// A `tls_config` from the ServiceMonitor TLS settings, which may also name files.
pub(crate) fn tls(ctx: Ctx<'_>, field: &str, tls: &TlsConfig) -> Result<Json, String> {
    let set = |path: &Option<String>| path.as_deref().is_some_and(|path| !path.is_empty());
    if !tls.safe.ca.is_empty() && set(&tls.ca_file) {
        return Err(format!("{field}: cannot specify both caFile and ca"));
    }
    if !tls.safe.cert.is_empty() && set(&tls.cert_file) {
        return Err(format!("{field}: cannot specify both certFile and cert"));
    }
    if tls.safe.key_secret.is_some() && set(&tls.key_file) {
        return Err(format!(
            "{field}: cannot specify both keyFile and keySecret"
        ));
    }
    let has_cert = !tls.safe.cert.is_empty() || set(&tls.cert_file);
    let has_key = tls.safe.key_secret.is_some() || set(&tls.key_file);
    if has_cert != has_key {
        return Err(format!(
            "{field}: a client cert and a client key go together (one is missing)"
        ));
    }
    let mut out = tls_common(ctx, field, &tls.safe)?;
    for (key, path) in [
        ("ca_file", &tls.ca_file),
        ("cert_file", &tls.cert_file),
        ("key_file", &tls.key_file),
    ] {
        if let Some(path) = path.as_deref().filter(|path| !path.is_empty()) {
            out.insert(key.into(), json!(path));
        }
    }
    Ok(out)
}

fn tls_common(ctx: Ctx<'_>, field: &str, tls: &SafeTlsConfig) -> Result<Json, String> {
    if let (Some(min), Some(max)) = (&tls.min_version, &tls.max_version)
        && max < min
    {
        return Err(format!("{field}: maxVersion must be at least minVersion"));
    }
    let mut out = Json::new();
    if let Some(skip) = tls.insecure_skip_verify {
        out.insert("insecure_skip_verify".into(), json!(skip));
    }
    let ca = ctx.secret_or_config_map(&format!("{field}.ca"), &tls.ca)?;
    if let Some(ca) = ca {
        out.insert("ca".into(), json!(pem(&format!("{field}.ca"), ca)?));
    }
    let cert = ctx.secret_or_config_map(&format!("{field}.cert"), &tls.cert)?;
    if let Some(cert) = cert {
        out.insert("cert".into(), json!(pem(&format!("{field}.cert"), cert)?));
    }
    if let Some(key) = &tls.key_secret {
        let key = ctx.secret(&format!("{field}.keySecret"), key)?;
        out.insert(
            "key".into(),
            json!(pem(&format!("{field}.keySecret"), key)?),
        );
    }
    if let Some(name) = tls.server_name.as_deref().filter(|name| !name.is_empty()) {
        out.insert("server_name".into(), json!(name));
    }
    if let Some(min) = &tls.min_version {
        out.insert("min_version".into(), json!(min));
    }
    if let Some(max) = &tls.max_version {
        out.insert("max_version".into(), json!(max));
    }
    Ok(out)
}

/// Upstream refuses material that does not decode as PEM; Prometheus would fail on it later
/// (and take the whole configuration down with it).
fn pem(field: &str, value: String) -> Result<String, String> {
    if value.contains("-----BEGIN ") {
        Ok(value)
    } else {
        Err(format!("{field}: the value is not PEM-encoded"))
    }
}

/// Which credential mechanisms a job's HTTP client uses.
#[derive(Default)]
pub(crate) struct AuthUse {
    pub basic_auth: bool,
    pub oauth2: bool,
    pub authorization: bool,
    pub bearer_token_secret: bool,
    pub bearer_token_file: bool,
}

/// Prometheus refuses a job mixing credential mechanisms, and one refused job fails the whole
/// reload. Upstream emits such a job anyway; here the object is rejected instead, naming the
/// fields (a deliberate difference).
pub(crate) fn check_exclusive(field: &str, used: &AuthUse) -> Result<(), String> {
    let mut names = Vec::new();
    if used.basic_auth {
        names.push("basicAuth");
    }
    if used.oauth2 {
        names.push("oauth2");
    }
    if used.authorization {
        names.push("authorization");
    }
    if used.bearer_token_secret {
        names.push("bearerTokenSecret");
    }
    if used.bearer_token_file {
        names.push("bearerTokenFile");
    }
    if names.len() > 1 {
        return Err(format!(
            "{field}: at most one of basicAuth, oauth2, authorization, bearerTokenSecret and \
             bearerTokenFile may be set, found {}",
            names.join(", ")
        ));
    }
    Ok(())
}
