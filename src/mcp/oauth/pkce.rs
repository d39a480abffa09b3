//! PKCE (RFC 7636) with the `S256` method, and the random `state` of an authorization
//! request: SHA-256 (`crate::sha256`) and base64url without padding, with RFC 7636's
//! test vector below.
//!
//! Nothing here keeps a secret longer than its caller does, or prints one.

use crate::sha256::sha256;

/// A PKCE pair: the verifier stays with the client until the token request; the
/// challenge goes into the authorization URL.
pub(crate) struct Pkce {
    pub(crate) verifier: String,
    pub(crate) challenge: String,
}

impl Pkce {
    /// A new pair from 32 random bytes (a 43-character verifier).
    pub(crate) fn new() -> std::io::Result<Pkce> {
        let verifier = random_token(32)?;
        let challenge = base64url(&sha256(verifier.as_bytes()));
        Ok(Pkce {
            verifier,
            challenge,
        })
    }
}

/// `bytes` random bytes as base64url text (the `state`, the PKCE verifier).
pub(crate) fn random_token(bytes: usize) -> std::io::Result<String> {
    let mut buf = vec![0u8; bytes];
    crate::exec::random::fill(&mut buf)?;
    Ok(base64url(&buf))
}

/// Base64url without padding (RFC 4648 §5).
pub(crate) fn base64url(data: &[u8]) -> String {
    crate::base64::encode(data)
        .trim_end_matches('=')
        .chars()
        .map(|c| match c {
            '+' => '-',
            '/' => '_',
            other => other,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_s256_challenge_of_rfc_7636_appendix_b() {
        let verifier = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
        assert_eq!(
            base64url(&sha256(verifier.as_bytes())),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
        let pair = Pkce::new().unwrap();
        assert_eq!(pair.verifier.len(), 43);
        assert!(
            pair.verifier
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        );
        assert_eq!(pair.challenge, base64url(&sha256(pair.verifier.as_bytes())));
    }
}
