//! Where an ACP agent keeps its sessions: one transcript per session, `DIR/<sessionId>.jsonl`
//! (the library's transcript format), which `session/load` and `session/resume` continue
//! and `session/list` lists. It reads and lists files; it never starts a session.
//!
//! Session ids are made here (UUID-shaped) and checked before they become file names, so a
//! client cannot name a file outside the directory.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

/// The directory of one agent's transcripts.
#[derive(Debug, Clone)]
pub(crate) struct Store {
    pub(crate) dir: PathBuf,
}

/// Most sessions `session/list` returns (the newest).
const MAX_LISTED: usize = 1000;
/// Most bytes of a transcript read to list it (its header and first input).
const LIST_READ: u64 = 256 * 1024;

/// Whether `id` can be one of our session ids (and so a file name in the directory).
pub(crate) fn valid_id(id: &str) -> bool {
    (1..=64).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

impl Store {
    /// The transcript of session `id` (a checked id).
    pub(crate) fn path(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.jsonl"))
    }

    /// Creates the directory if it is missing.
    pub(crate) fn ensure(&self) -> std::io::Result<()> {
        std::fs::create_dir_all(&self.dir)
    }

    /// `SessionInfo`s of the sessions recorded here, newest first, those of `cwd` only when
    /// given.
    pub(crate) fn list(&self, cwd: Option<&str>) -> Vec<Value> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut found: Vec<(std::time::SystemTime, Value)> = entries
            .filter_map(Result::ok)
            .filter_map(|entry| {
                let path = entry.path();
                let id = path
                    .file_name()?
                    .to_str()?
                    .strip_suffix(".jsonl")?
                    .to_string();
                if !valid_id(&id) {
                    return None;
                }
                let modified = entry.metadata().ok()?.modified().ok()?;
                let (dir, title) = summary(&path)?;
                if cwd.is_some_and(|cwd| cwd != dir) {
                    return None;
                }
                let mut info = json!({
                    "sessionId": id,
                    "cwd": dir,
                    "updatedAt": crate::time::format_rfc3339(modified),
                });
                if let Some(title) = title {
                    info["title"] = json!(title);
                }
                Some((modified, info))
            })
            .collect();
        found.sort_by_key(|(modified, _)| std::cmp::Reverse(*modified));
        found.into_iter().take(MAX_LISTED).map(|(_, v)| v).collect()
    }
}

/// The working directory a transcript's header names, and its first input as a title
/// (cut to 100 characters), from the first [`LIST_READ`] bytes.
fn summary(path: &Path) -> Option<(String, Option<String>)> {
    let file = std::fs::File::open(path).ok()?;
    let mut lines = BufReader::new(file.take(LIST_READ)).lines();
    let header: Value = serde_json::from_str(&lines.next()?.ok()?).ok()?;
    let dir = header.get("working_directory")?.as_str()?.to_string();
    let title = lines.map_while(Result::ok).find_map(|line| {
        let record: Value = serde_json::from_str(&line).ok()?;
        let turn = record.get("turn")?;
        (turn.get("type")? == "user")
            .then(|| turn.get("content")?.as_str().map(title_of))
            .flatten()
    });
    Some((dir, title))
}

fn title_of(text: &str) -> String {
    let line = text
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    match line.char_indices().nth(100) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None => line.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_ids_become_file_names() {
        assert!(valid_id("8c1e6c0e-1b7a-4c1f-9d8e-2f0a6b5c4d3e"));
        for bad in ["", "../x", "a/b", "a.jsonl", &"x".repeat(65)] {
            assert!(!valid_id(bad), "{bad}");
        }
    }
}
