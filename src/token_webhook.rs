//! kube-apiserver's webhook token authentication flags, on `server` and `apiserver`.

use std::path::PathBuf;

use clap::Args;
use kustos_apiserver::authn::webhook;

#[derive(Args, Clone)]
pub struct TokenWebhookArgs {
    /// File with webhook configuration for token authentication in kubeconfig format. The
    /// API server will query the remote service to determine authentication for bearer
    /// tokens.
    #[arg(long = "authentication-token-webhook-config-file")]
    authentication_token_webhook_config_file: Option<PathBuf>,
    /// The API version of the authentication.k8s.io TokenReview to send to and expect from
    /// the webhook (v1 or v1beta1).
    #[arg(long = "authentication-token-webhook-version", default_value = webhook::DEFAULT_VERSION)]
    authentication_token_webhook_version: String,
    /// The duration to cache responses from the webhook token authenticator.
    #[arg(long = "authentication-token-webhook-cache-ttl", default_value = "2m", value_parser = crate::parse_duration)]
    authentication_token_webhook_cache_ttl: std::time::Duration,
}

impl TokenWebhookArgs {
    /// The settings when a config file is given (the other two flags alone do nothing, as
    /// upstream).
    pub fn settings(&self) -> Option<webhook::Settings> {
        let file = self.authentication_token_webhook_config_file.clone().filter(|f| !f.as_os_str().is_empty())?;
        Some(webhook::Settings {
            config_file: file,
            version: self.authentication_token_webhook_version.clone(),
            cache_ttl: self.authentication_token_webhook_cache_ttl,
        })
    }
}
