//! Redaction of secret values from tool output: every occurrence of a value the environment
//! filter withheld from commands (an API key, a token) becomes `[REDACTED:NAME]`, in whole
//! texts and in live output that arrives in pieces (a value split across two pieces is
//! still found). Pure: this module never reads the process environment or any file.
//!
//! It replaces the literal value only: a command that encodes a secret (base64, reversed,
//! one character per line) defeats it. It is a second line of defence behind keeping keys
//! out of the process environment altogether.

use std::borrow::Cow;
use std::collections::BTreeMap;

use super::env;
use crate::exec::EnvPolicy;

/// Values shorter than this are not redacted: replacing every `true` or `1234` in the
/// output would garble it and hide nothing worth hiding.
pub(crate) const MIN_SECRET_LEN: usize = 8;

/// The secrets one environment hides, longest value first (so that a value containing
/// another is replaced whole).
#[derive(Clone, Default)]
pub(crate) struct Redactor {
    /// `(marker, value)`.
    secrets: Vec<(String, String)>,
}

impl Redactor {
    /// The secrets of `base` that `policy` withholds from commands: variables whose name
    /// says they hold a secret or whose value looks like a credential, and that a command
    /// does not inherit (an explicitly included variable is the host's choice to share).
    pub(crate) fn for_environment(
        base: &BTreeMap<String, String>,
        policy: &EnvPolicy,
        extra: &[(String, String)],
    ) -> Redactor {
        let withheld = base.iter().filter(|(name, value)| {
            (env::is_secret_name(name) || env::looks_like_credential(value))
                && !env::keeps(policy, name, value)
        });
        let mut secrets: Vec<(String, String)> = withheld
            .chain(extra.iter().map(|(name, value)| (name, value)))
            .filter(|(_, value)| value.len() >= MIN_SECRET_LEN)
            .map(|(name, value)| (format!("[REDACTED:{name}]"), value.clone()))
            .collect();
        secrets.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then_with(|| a.cmp(b)));
        secrets.dedup_by(|a, b| a.1 == b.1);
        Redactor { secrets }
    }

    /// How many values are redacted.
    pub(crate) fn len(&self) -> usize {
        self.secrets.len()
    }

    /// Whether there is nothing to redact.
    pub(crate) fn is_empty(&self) -> bool {
        self.secrets.is_empty()
    }

    /// The marker of a secret that `text` contains, if any (to refuse writing a marker
    /// back over the secret it stands for).
    pub(crate) fn marker_in<'a>(&'a self, text: &[u8]) -> Option<&'a str> {
        self.secrets
            .iter()
            .map(|(marker, _)| marker.as_str())
            .find(|marker| crate::bytes::find_slice(text, marker.as_bytes()).is_some())
    }

    /// `bytes` with every secret replaced by its marker.
    pub(crate) fn bytes<'a>(&self, bytes: &'a [u8]) -> Cow<'a, [u8]> {
        let mut out: Option<Vec<u8>> = None;
        let mut from = 0;
        while let Some((at, index)) = self.next_secret(bytes, from) {
            let (marker, value) = &self.secrets[index];
            let out = out.get_or_insert_with(|| Vec::with_capacity(bytes.len()));
            out.extend_from_slice(&bytes[from..at]);
            out.extend_from_slice(marker.as_bytes());
            from = at + value.len();
        }
        match out {
            None => Cow::Borrowed(bytes),
            Some(mut out) => {
                out.extend_from_slice(&bytes[from..]);
                Cow::Owned(out)
            }
        }
    }

    /// `text` with every secret replaced by its marker.
    pub(crate) fn text(&self, text: &str) -> String {
        match self.bytes(text.as_bytes()) {
            // Values and markers are whole UTF-8 strings, so the result is UTF-8 too.
            Cow::Owned(bytes) => String::from_utf8(bytes)
                .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()),
            Cow::Borrowed(_) => text.to_string(),
        }
    }

    /// Redacts `text` in place.
    pub(crate) fn in_place(&self, text: &mut String) {
        if !self.is_empty() && self.next_secret(text.as_bytes(), 0).is_some() {
            *text = self.text(text);
        }
    }

    /// The earliest secret in `bytes` at or after `from`: (position, index).
    fn next_secret(&self, bytes: &[u8], from: usize) -> Option<(usize, usize)> {
        let rest = &bytes[from..];
        self.secrets
            .iter()
            .enumerate()
            .filter_map(|(i, (_, value))| {
                crate::bytes::find_slice(rest, value.as_bytes()).map(|at| (from + at, i))
            })
            .min()
    }

    /// The length of the longest end of `bytes` that is the start of a secret (but not a
    /// whole one): what a stream holds back until the next piece shows whether it is one.
    fn partial_tail(&self, bytes: &[u8]) -> usize {
        self.secrets
            .iter()
            .filter_map(|(_, value)| {
                let value = value.as_bytes();
                (1..value.len().min(bytes.len() + 1))
                    .rev()
                    .find(|&n| bytes.ends_with(&value[..n]))
            })
            .max()
            .unwrap_or(0)
    }
}

/// Redacts one output stream that arrives in pieces.
#[derive(Default)]
pub(crate) struct StreamRedactor {
    /// Bytes held back: they may be the start of a secret that the next piece completes.
    pending: Vec<u8>,
}

impl StreamRedactor {
    /// Takes the next piece and returns what can be shown now, redacted.
    pub(crate) fn push(&mut self, redactor: &Redactor, piece: &[u8]) -> Vec<u8> {
        if redactor.is_empty() {
            return piece.to_vec();
        }
        self.pending.extend_from_slice(piece);
        let mut out = Vec::with_capacity(self.pending.len());
        let mut from = 0;
        while let Some((at, index)) = redactor.next_secret(&self.pending, from) {
            let (marker, value) = &redactor.secrets[index];
            out.extend_from_slice(&self.pending[from..at]);
            out.extend_from_slice(marker.as_bytes());
            from = at + value.len();
        }
        let held = redactor.partial_tail(&self.pending[from..]);
        let shown_to = self.pending.len() - held;
        out.extend_from_slice(&self.pending[from..shown_to]);
        self.pending.drain(..shown_to);
        out
    }

    /// What is still held back, at the end of the stream (never a whole secret).
    pub(crate) fn finish(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.pending)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redactor() -> Redactor {
        let base: BTreeMap<String, String> = [
            ("OPENAI_API_KEY", "sk-proj-abcdefghijklmnopqrstuvwxyz"),
            ("PLAIN", "ghp_0123456789abcdefghijklmnopqrstuvwxyz"),
            ("HOME", "/home/someone"),
            ("SHORT_TOKEN", "abc"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        Redactor::for_environment(&base, &EnvPolicy::default(), &[])
    }

    #[test]
    fn secrets_by_name_and_by_value_are_replaced_by_their_marker() {
        let text = "key=sk-proj-abcdefghijklmnopqrstuvwxyz gh=ghp_0123456789abcdefghijklmnopqrstuvwxyz \
                    home=/home/someone short=abc";
        assert_eq!(
            redactor().text(text),
            "key=[REDACTED:OPENAI_API_KEY] gh=[REDACTED:PLAIN] home=/home/someone short=abc"
        );
    }

    #[test]
    fn a_secret_split_across_pieces_is_still_redacted() {
        let r = redactor();
        let text = b"a sk-proj-abcdefghijklmnopqrstuvwxyz b sk-proj-abc";
        for size in 1..text.len() {
            let mut stream = StreamRedactor::default();
            let mut shown = Vec::new();
            for piece in text.chunks(size) {
                shown.extend(stream.push(&r, piece));
            }
            shown.extend(stream.finish());
            assert_eq!(
                String::from_utf8(shown).unwrap(),
                "a [REDACTED:OPENAI_API_KEY] b sk-proj-abc",
                "pieces of {size}"
            );
        }
    }

    #[test]
    fn an_included_secret_is_the_hosts_choice_and_not_redacted() {
        let base: BTreeMap<String, String> =
            [("GH_TOKEN".to_string(), "token-value-123".to_string())].into();
        let shared =
            Redactor::for_environment(&base, &EnvPolicy::default().include("GH_TOKEN"), &[]);
        assert!(shared.is_empty());
        let hidden = Redactor::for_environment(&base, &EnvPolicy::default(), &[]);
        assert_eq!(hidden.text("token-value-123"), "[REDACTED:GH_TOKEN]");
    }
}
