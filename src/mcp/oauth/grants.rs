//! OAuth grants without a user: `client_credentials` with the configured client (SEP-1046;
//! its secret, or a client assertion signed with its key: RFC 7523 `private_key_jwt`,
//! ES256), and an enterprise identity assertion (SEP-990): the IdP's ID token exchanged at
//! the IdP for an identity assertion grant (RFC 8693 token exchange, ID-JAG), which the
//! authorization server takes as a JWT bearer grant (RFC 7523).
//!
//! Each step is one capped, bounded request (`discovery.rs`); no token or secret goes into
//! an error.

use serde_json::Value;

use super::Authorizer;
use super::discovery::{self, Url, excerpt};
use super::flow::{self, Client, Metadata};
use crate::cancel::CancelToken;
use crate::sync::lock;

const TOKEN_EXCHANGE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
const JWT_BEARER: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";
const ID_JAG: &str = "urn:ietf:params:oauth:token-type:id-jag";
const ID_TOKEN: &str = "urn:ietf:params:oauth:token-type:id_token";

impl Authorizer {
    /// The configured client id and secret, which both grants need.
    fn machine_client(&self, grant: &str) -> Result<(String, String), String> {
        match (&self.config.client_id, &self.config.client_secret) {
            (Some(id), Some(secret)) => Ok((id.clone(), secret.clone())),
            _ => Err(format!(
                "the MCP server `{}` is configured for {grant} but has no client id and secret",
                self.name
            )),
        }
    }

    /// Gets tokens with `form` from the token endpoint, as the configured client.
    fn machine_tokens(
        &self,
        metadata: &Metadata,
        form: &[(&str, &str)],
        scope: Option<String>,
        (id, secret): (String, String),
        cancel: &CancelToken,
    ) -> Result<(), String> {
        let method = flow::auth_method(true, metadata);
        let client = Client {
            id: &id,
            secret: Some(&secret),
            method,
        };
        let tokens =
            flow::token_request(&metadata.token_endpoint, form, &client, cancel).map_err(|e| {
                format!(
                    "the MCP server `{}`'s grant failed: {}",
                    self.name, e.message
                )
            })?;
        {
            let mut state = lock(&self.state);
            state.entry.client_id = Some(id);
            state.entry.client_secret = Some(secret);
            state.entry.auth_method = Some(method.to_string());
        }
        self.keep_tokens(tokens, scope, Some(metadata))
    }

    /// The `client_credentials` grant with the configured client.
    pub(super) fn client_credentials(
        &self,
        metadata: &Metadata,
        scope: Option<String>,
        cancel: &CancelToken,
    ) -> Result<(), String> {
        let mut form = vec![
            ("grant_type", "client_credentials"),
            ("resource", metadata.resource.as_str()),
        ];
        if let Some(scope) = scope.as_deref() {
            form.push(("scope", scope));
        }
        let Some(key) = &self.config.client_key else {
            let client = self.machine_client("client credentials")?;
            return self.machine_tokens(metadata, &form, scope.clone(), client, cancel);
        };
        let id = self.config.client_id.as_deref().ok_or_else(|| {
            format!(
                "the MCP server `{}` has a client key but no client id",
                self.name
            )
        })?;
        let audience = metadata
            .issuer
            .as_deref()
            .unwrap_or(&metadata.token_endpoint);
        let assertion = client_assertion(key, id, audience).map_err(|why| {
            format!(
                "signing the client assertion of `{}` failed: {why}",
                self.name
            )
        })?;
        form.extend([
            ("client_id", id),
            (
                "client_assertion_type",
                "urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
            ),
            ("client_assertion", assertion.as_str()),
        ]);
        let answer = discovery::post_form(&metadata.token_endpoint, &form, None, cancel)?;
        let tokens = flow::read_tokens(&answer).map_err(|e| {
            format!(
                "the MCP server `{}`'s grant failed: {}",
                self.name, e.message
            )
        })?;
        lock(&self.state).entry.client_id = Some(id.to_string());
        self.keep_tokens(tokens, scope, Some(metadata))
    }

    /// SEP-990: the ID token exchanged at the IdP for an ID-JAG naming this server's
    /// authorization server (audience) and resource, then the ID-JAG as a JWT bearer grant.
    pub(super) fn identity_assertion(
        &self,
        metadata: &Metadata,
        scope: Option<String>,
        cancel: &CancelToken,
    ) -> Result<(), String> {
        let Some(jag) = &self.config.id_jag else {
            return Err("no identity assertion is configured".to_string());
        };
        let client = self.machine_client("an identity assertion")?;
        let issuer = metadata.issuer.as_deref().ok_or_else(|| {
            format!(
                "the MCP server `{}`'s authorization server names no issuer",
                self.name
            )
        })?;
        Url::parse(&jag.idp_token_endpoint)?.require_secure()?;
        let mut exchange = vec![
            ("grant_type", TOKEN_EXCHANGE),
            ("requested_token_type", ID_JAG),
            ("audience", issuer),
            ("resource", metadata.resource.as_str()),
            ("subject_token", jag.id_token.as_str()),
            ("subject_token_type", ID_TOKEN),
            ("client_id", jag.idp_client_id.as_str()),
        ];
        if let Some(scope) = scope.as_deref() {
            exchange.push(("scope", scope));
        }
        let answer = discovery::post_form(&jag.idp_token_endpoint, &exchange, None, cancel)?;
        let assertion = answer
            .body
            .get("access_token")
            .and_then(Value::as_str)
            .filter(|t| answer.status == 200 && !t.is_empty() && t.len() <= 16 * 1024)
            .ok_or_else(|| {
                let error = answer
                    .body
                    .get("error")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                format!(
                    "the identity provider refused the token exchange for the MCP server `{}` \
                     (HTTP {}{})",
                    self.name,
                    answer.status,
                    if error.is_empty() {
                        String::new()
                    } else {
                        format!(": {}", excerpt(error))
                    }
                )
            })?;
        let mut form = vec![("grant_type", JWT_BEARER), ("assertion", assertion)];
        if let Some(scope) = scope.as_deref() {
            form.push(("scope", scope));
        }
        self.machine_tokens(metadata, &form, scope.clone(), client, cancel)
    }
}

/// A client assertion (RFC 7523 §3): a JWT naming the client as issuer and subject and the
/// authorization server as audience, valid five minutes, signed ES256 with `pem`.
fn client_assertion(pem: &str, client_id: &str, audience: &str) -> Result<String, String> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let jti = super::pkce::random_token(16).map_err(|e| e.to_string())?;
    let header = super::pkce::base64url(br#"{"alg":"ES256","typ":"JWT"}"#);
    let claims = serde_json::json!({"iss": client_id, "sub": client_id, "aud": audience,
                                    "iat": now, "exp": now + 300, "jti": jti});
    let claims = super::pkce::base64url(claims.to_string().as_bytes());
    let signed = format!("{header}.{claims}");
    let der = pem_body(pem).ok_or("the key is not a PEM private key")?;
    let signature = sign_es256(&der, signed.as_bytes())?;
    Ok(format!("{signed}.{}", super::pkce::base64url(&signature)))
}

/// The DER bytes of a PEM `PRIVATE KEY` block.
fn pem_body(pem: &str) -> Option<Vec<u8>> {
    let start = pem.find("-----BEGIN PRIVATE KEY-----")? + "-----BEGIN PRIVATE KEY-----".len();
    let end = pem[start..].find("-----END PRIVATE KEY-----")? + start;
    let base64: String = pem[start..end].split_whitespace().collect();
    crate::base64::decode(&base64)
}

/// ECDSA P-256 with SHA-256 in the fixed `r ‖ s` form JWS uses.
#[cfg(feature = "tls")]
fn sign_es256(pkcs8: &[u8], message: &[u8]) -> Result<Vec<u8>, String> {
    use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair};
    let random = ring::rand::SystemRandom::new();
    let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8, &random)
        .map_err(|e| format!("the key is not a PKCS#8 EC P-256 key ({e})"))?;
    let signature = key
        .sign(&random, message)
        .map_err(|_| "the signature failed".to_string())?;
    Ok(signature.as_ref().to_vec())
}

#[cfg(not(feature = "tls"))]
fn sign_es256(_pkcs8: &[u8], _message: &[u8]) -> Result<Vec<u8>, String> {
    Err("signing client assertions needs agentloop's `tls` feature".to_string())
}

#[cfg(all(test, feature = "tls"))]
mod tests {
    use ring::signature::{ECDSA_P256_SHA256_FIXED, EcdsaKeyPair, KeyPair, UnparsedPublicKey};

    #[test]
    fn a_client_assertion_is_an_es256_jwt_the_public_key_verifies() {
        let random = ring::rand::SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(
            &ring::signature::ECDSA_P256_SHA256_FIXED_SIGNING,
            &random,
        )
        .unwrap();
        let pem = format!(
            "-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n",
            crate::base64::encode(pkcs8.as_ref())
        );
        let jwt = super::client_assertion(&pem, "client-1", "https://as.example").unwrap();
        let parts: Vec<&str> = jwt.split('.').collect();
        assert_eq!(parts.len(), 3);
        let decode = |part: &str| {
            let standard: String = part
                .chars()
                .map(|c| match c {
                    '-' => '+',
                    '_' => '/',
                    c => c,
                })
                .collect();
            let padded = format!("{standard}{}", "=".repeat((4 - standard.len() % 4) % 4));
            crate::base64::decode(&padded).unwrap()
        };
        let claims: serde_json::Value = serde_json::from_slice(&decode(parts[1])).unwrap();
        assert_eq!(claims["iss"], "client-1");
        assert_eq!(claims["sub"], "client-1");
        assert_eq!(claims["aud"], "https://as.example");
        let key = EcdsaKeyPair::from_pkcs8(
            &ring::signature::ECDSA_P256_SHA256_FIXED_SIGNING,
            pkcs8.as_ref(),
            &random,
        )
        .unwrap();
        let public = UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, key.public_key().as_ref());
        let signed = format!("{}.{}", parts[0], parts[1]);
        assert!(public.verify(signed.as_bytes(), &decode(parts[2])).is_ok());
        assert!(public.verify(b"other", &decode(parts[2])).is_err());
    }
}
