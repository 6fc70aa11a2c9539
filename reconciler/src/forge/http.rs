//! The one place forge requests are sent: builds the client, sends a request with the forge's
//! authentication header, and turns every failure into a [`ForgeError`] that names the forge,
//! the method, the endpoint and the HTTP status.

use std::time::Duration;

use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, USER_AGENT};
use reqwest::{Client, Method};
use serde::de::DeserializeOwned;

use super::{ForgeError, ForgeKind, Token};

/// Longest error text kept from a forge's response body.
const MAX_ERROR_TEXT: usize = 300;

/// A response that came back 2xx: its headers and parsed JSON body.
pub(crate) struct Reply<T> {
    pub headers: HeaderMap,
    pub body: T,
}

/// An HTTP client bound to one forge's API root and credentials.
#[derive(Clone)]
pub(crate) struct Api {
    pub forge: ForgeKind,
    base_url: String,
    client: Client,
    auth: (HeaderName, HeaderValue),
}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Api")
            .field("forge", &self.forge)
            .field("base_url", &self.base_url)
            .finish_non_exhaustive()
    }
}

impl Api {
    /// `auth_scheme` is `None` for a raw header value (GitLab's `PRIVATE-TOKEN`) or
    /// `Some("Bearer")`.
    pub fn new(
        forge: ForgeKind,
        base_url: &str,
        auth_header: HeaderName,
        auth_scheme: Option<&str>,
        token: &Token,
    ) -> Result<Self, ForgeError> {
        let base_url = base_url.trim_end_matches('/').to_string();
        if !(base_url.starts_with("https://") || base_url.starts_with("http://")) {
            return Err(ForgeError::Config(format!(
                "{forge}: base URL {base_url:?} must start with https:// or http://"
            )));
        }
        let value = match auth_scheme {
            Some(scheme) => format!("{scheme} {}", token.expose()),
            None => token.expose().to_string(),
        };
        let mut auth_value = HeaderValue::from_str(&value).map_err(|_| {
            ForgeError::Config(format!(
                "{forge}: the token contains characters not allowed in an HTTP header"
            ))
        })?;
        // Keeps the value out of any header dump the HTTP stack may produce.
        auth_value.set_sensitive(true);
        install_crypto_provider();
        let client = Client::builder()
            .timeout(Duration::from_secs(30))
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|source| ForgeError::Config(format!("{forge}: HTTP client: {source}")))?;
        Ok(Api {
            forge,
            base_url,
            client,
            auth: (auth_header, auth_value),
        })
    }

    /// The absolute URL of an API path (`/repos/o/r/statuses/sha`).
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base_url)
    }

    /// Sends a request (with a JSON body when given) and parses the 2xx JSON reply.
    pub async fn send<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> Result<Reply<T>, ForgeError> {
        let endpoint = self.url(path);
        let mut request = self
            .client
            .request(method.clone(), &endpoint)
            .header(self.auth.0.clone(), self.auth.1.clone())
            .header(
                USER_AGENT,
                concat!("nodewright/", env!("CARGO_PKG_VERSION")),
            )
            .header(ACCEPT, accept(self.forge));
        if self.forge == ForgeKind::GitHub {
            request = request.header("X-GitHub-Api-Version", "2022-11-28");
        }
        if let Some(body) = body {
            request = request
                .header(CONTENT_TYPE, "application/json")
                .body(body.to_string());
        }
        let transport = |source| ForgeError::Transport {
            forge: self.forge,
            method: method.to_string(),
            endpoint: endpoint.clone(),
            source,
        };
        let response = request.send().await.map_err(transport)?;
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = response.bytes().await.map_err(transport)?;
        if !status.is_success() {
            return Err(ForgeError::Http {
                forge: self.forge,
                method: method.to_string(),
                endpoint,
                status: status.as_u16(),
                message: error_text(&bytes),
            });
        }
        let body = serde_json::from_slice(&bytes).map_err(|e| ForgeError::Response {
            forge: self.forge,
            method: method.to_string(),
            endpoint: endpoint.clone(),
            detail: format!("JSON body does not parse: {e}"),
        })?;
        Ok(Reply { headers, body })
    }
}

fn accept(forge: ForgeKind) -> &'static str {
    match forge {
        ForgeKind::GitHub => "application/vnd.github+json",
        ForgeKind::GitLab => "application/json",
    }
}

/// The forge's error message: the JSON `message` (GitHub, GitLab) or `error` field, else the
/// body text, cut to a readable length.
fn error_text(bytes: &[u8]) -> String {
    let text = match serde_json::from_slice::<serde_json::Value>(bytes) {
        Ok(json) => match json.get("message").or_else(|| json.get("error")) {
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
            None => json.to_string(),
        },
        Err(_) => String::from_utf8_lossy(bytes).trim().to_string(),
    };
    if text.is_empty() {
        return "(empty body)".to_string();
    }
    super::cut_chars(&text, MAX_ERROR_TEXT)
}

/// reqwest is built without a bundled crypto provider (the workspace uses rustls with `ring`);
/// install it once per process. An error means a provider is already installed, which is fine.
fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_text_prefers_the_message_field() {
        assert_eq!(
            error_text(br#"{"message":"Bad credentials","documentation_url":"x"}"#),
            "Bad credentials"
        );
        assert_eq!(
            error_text(br#"{"message":{"name":["is too long"]}}"#),
            r#"{"name":["is too long"]}"#
        );
        assert_eq!(error_text(b"<html>oops</html>"), "<html>oops</html>");
        assert_eq!(error_text(b""), "(empty body)");
    }
}
