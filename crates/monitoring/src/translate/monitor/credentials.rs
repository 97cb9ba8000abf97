//! The credentials of a monitor's endpoint (`basicAuth`, `oauth2`, `authorization`,
//! `bearerTokenSecret`, a ServiceMonitor's `bearerTokenFile`), of which at most one may be set.

use super::ScrapeEndpoint;
use crate::monitors::{BasicAuth, OAuth2, SafeAuthorization, SecretKeySelector};
use crate::translate::Job;
use crate::translate::auth::{self, AuthUse, Ctx};
use crate::translate::common::set;

/// The credentials of an endpoint, of which at most one may be set.
pub(crate) struct Credentials<'a> {
    basic_auth: Option<&'a BasicAuth>,
    oauth2: Option<&'a OAuth2>,
    authorization: Option<&'a SafeAuthorization>,
    bearer_secret: Option<&'a SecretKeySelector>,
    /// A ServiceMonitor's `bearerTokenFile`, when non-empty.
    pub bearer_file: Option<&'a str>,
}

impl<'a> Credentials<'a> {
    pub(crate) fn of(scrape: &ScrapeEndpoint<'a>, bearer_file: Option<&'a str>) -> Self {
        Credentials {
            basic_auth: scrape.basic_auth,
            oauth2: scrape.oauth2,
            // An empty `authorization: {}` is no authorization at all, as upstream reads it.
            authorization: scrape.authorization.filter(|a| !a.is_empty()),
            bearer_secret: scrape.bearer_token_secret.filter(|s| !s.name.is_empty()),
            bearer_file: bearer_file.filter(|file| !file.is_empty()),
        }
    }

    pub(crate) fn check_exclusive(&self) -> Result<(), String> {
        auth::check_exclusive(
            "authentication",
            &AuthUse {
                basic_auth: self.basic_auth.is_some(),
                oauth2: self.oauth2.is_some(),
                authorization: self.authorization.is_some(),
                bearer_token_secret: self.bearer_secret.is_some(),
                bearer_token_file: self.bearer_file.is_some(),
            },
        )
    }

    pub(crate) fn add_oauth2(&self, ctx: Ctx<'_>, job: &mut Job) -> Result<(), String> {
        if let Some(oauth) = self.oauth2 {
            set(job, "oauth2", auth::oauth2(ctx, "oauth2", oauth)?);
        }
        Ok(())
    }

    /// `bearerTokenSecret` (as an `authorization` of type Bearer) and `basicAuth`.
    pub(crate) fn add_bearer_and_basic(&self, ctx: Ctx<'_>, job: &mut Job) -> Result<(), String> {
        if let Some(secret) = self.bearer_secret {
            let value = auth::bearer_token(ctx, "bearerTokenSecret", secret)?;
            set(job, "authorization", value);
        }
        if let Some(basic) = self.basic_auth {
            set(
                job,
                "basic_auth",
                auth::basic_auth(ctx, "basicAuth", basic)?,
            );
        }
        Ok(())
    }

    pub(crate) fn add_authorization(&self, ctx: Ctx<'_>, job: &mut Job) -> Result<(), String> {
        if let Some(authorization) = self.authorization {
            let value = auth::authorization(ctx, "authorization", authorization)?;
            set(job, "authorization", value);
        }
        Ok(())
    }
}
