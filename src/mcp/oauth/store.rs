//! The token file: per server URL, the client registration, the tokens and the endpoints
//! needed to refresh them, as JSON in one file with owner-only permissions.
//!
//! Every write replaces the file atomically (a new 0600 file in the same directory,
//! synced, then renamed over the old one), under a process-wide lock so that servers
//! starting in parallel never lose each other's entries. A file that is too large or not
//! JSON reads as empty. Nothing here prints or formats a token.

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

/// The largest token file read.
const MAX_FILE: u64 = 4 * 1024 * 1024;

/// Serialises read-modify-write cycles within the process.
static WRITES: Mutex<()> = Mutex::new(());

/// What is kept for one server. No `Debug`: it holds secrets.
#[derive(Clone, Default, Serialize, Deserialize, PartialEq)]
pub(crate) struct Entry {
    /// The client id in use (registered, pre-registered or a metadata document URL).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) client_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) client_secret: Option<String>,
    /// `none`, `client_secret_basic` or `client_secret_post`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) auth_method: Option<String>,
    /// The redirect URI the client was registered with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) redirect_uri: Option<String>,
    /// Whether the client came from dynamic registration (so it may be registered again).
    #[serde(default)]
    pub(crate) registered: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) access_token: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) refresh_token: Option<String>,
    /// Seconds since the epoch after which the access token is expired.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) expires_at: Option<u64>,
    /// The scopes granted (or asked for).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) scope: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) token_endpoint: Option<String>,
    /// The `resource` indicator the tokens were asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) resource: Option<String>,
}

#[derive(Default, Serialize, Deserialize)]
struct TokenFile {
    #[serde(default)]
    servers: BTreeMap<String, Entry>,
}

fn read(path: &Path) -> TokenFile {
    let Ok(file) = fs::File::open(path) else {
        return TokenFile::default();
    };
    let mut text = String::new();
    if file.take(MAX_FILE + 1).read_to_string(&mut text).is_err() || text.len() as u64 > MAX_FILE {
        return TokenFile::default();
    }
    serde_json::from_str(&text).unwrap_or_default()
}

/// The entry kept for `key` (a canonical server URL).
pub(crate) fn get(path: &Path, key: &str) -> Option<Entry> {
    read(path).servers.remove(key)
}

/// Sets (or, with `None`, removes) the entry for `key`; whether one was there before.
pub(crate) fn put(path: &Path, key: &str, entry: Option<&Entry>) -> io::Result<bool> {
    let _guard = WRITES.lock().unwrap_or_else(|e| e.into_inner());
    let mut file = read(path);
    let had = match entry {
        Some(entry) => file
            .servers
            .insert(key.to_string(), entry.clone())
            .is_some(),
        None => file.servers.remove(key).is_some(),
    };
    let text = serde_json::to_vec_pretty(&file).map_err(io::Error::other)?;
    write_atomically(path, &text)?;
    Ok(had)
}

/// Writes `bytes` to a new owner-only file beside `path` and renames it over `path`.
fn write_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::other("the token file path has no file name"))?;
    let temp = dir.join(format!(
        ".{}.{}-{}.tmp",
        name.to_string_lossy(),
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let written = (|| {
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        fs::rename(&temp, path)
    })();
    if written.is_err() {
        let _ = fs::remove_file(&temp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn entries_round_trip_in_an_owner_only_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/tokens.json");
        let entry = Entry {
            client_id: Some("c".into()),
            access_token: Some("a".into()),
            ..Entry::default()
        };
        assert!(!put(&path, "https://s/mcp", Some(&entry)).unwrap());
        assert!(get(&path, "https://s/mcp") == Some(entry.clone()));
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        put(&path, "https://t/mcp", Some(&entry)).unwrap();
        assert!(put(&path, "https://s/mcp", None).unwrap());
        assert!(get(&path, "https://s/mcp").is_none());
        assert!(get(&path, "https://t/mcp").is_some());
        // No temporary file is left behind.
        let names: Vec<_> = fs::read_dir(path.parent().unwrap()).unwrap().collect();
        assert_eq!(names.len(), 1);
    }

    #[test]
    fn a_broken_or_huge_file_reads_as_empty() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens.json");
        fs::write(&path, "{not json").unwrap();
        assert!(get(&path, "k").is_none());
        fs::write(&path, vec![b' '; (MAX_FILE + 10) as usize]).unwrap();
        assert!(get(&path, "k").is_none());
    }
}
