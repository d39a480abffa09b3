//! File operations of [`LocalExecutionEnvironment`](super::LocalExecutionEnvironment) on
//! paths that are already resolved: text reads with line windows, atomic writes, listings.
//!
//! This module never spawns processes, never changes the process's working directory and
//! never leaves a half-written file or a temporary file behind: a write goes to a temporary
//! file in the target's directory and is renamed over the target only once it is complete
//! and flushed to disk.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use super::{DirEntry, FileContent, FileStat};

/// How many leading bytes [`read_text`] inspects for a NUL byte to call a file binary. The
/// same rule as git and ripgrep: text files practically never contain NUL, and nearly every
/// binary format has one early on.
pub(crate) const BINARY_SNIFF_BYTES: usize = 8 * 1024;

/// Whether `bytes` looks binary: a NUL byte within the first [`BINARY_SNIFF_BYTES`].
pub(crate) fn looks_binary(bytes: &[u8]) -> bool {
    let head = &bytes[..bytes.len().min(BINARY_SNIFF_BYTES)];
    memchr::memchr(0, head).is_some()
}

/// An `io::Error` of `kind` with a message, keeping the kind so that callers can match on it.
pub(crate) fn error(kind: io::ErrorKind, message: String) -> io::Error {
    io::Error::new(kind, message)
}

/// Rewords an OS error about `path` so that a model knows what failed and what to do.
pub(crate) fn describe(err: io::Error, action: &str, path: &Path) -> io::Error {
    let shown = path.display();
    let message = match err.kind() {
        io::ErrorKind::NotFound => {
            format!("cannot {action} `{shown}`: no such file or directory; check the path")
        }
        io::ErrorKind::PermissionDenied => {
            format!("cannot {action} `{shown}`: permission denied")
        }
        io::ErrorKind::IsADirectory => {
            format!("cannot {action} `{shown}`: it is a directory, not a file")
        }
        io::ErrorKind::NotADirectory => {
            format!("cannot {action} `{shown}`: a parent of this path is a file, not a directory")
        }
        _ => format!("cannot {action} `{shown}`: {err}"),
    };
    io::Error::new(err.kind(), message)
}

fn ensure_not_dir(path: &Path, action: &str) -> io::Result<()> {
    match fs::metadata(path) {
        Ok(meta) if meta.is_dir() => Err(error(
            io::ErrorKind::IsADirectory,
            format!(
                "cannot {action} `{}`: it is a directory, not a file; list it instead",
                path.display()
            ),
        )),
        _ => Ok(()),
    }
}

/// Reads all bytes of a regular file.
pub(crate) fn read_bytes(path: &Path) -> io::Result<Vec<u8>> {
    ensure_not_dir(path, "read")?;
    fs::read(path).map_err(|e| describe(e, "read", path))
}

/// Reads a text file and returns lines `offset..offset + limit` (1-based; `offset` 0 is
/// treated as 1; no limit means to the end). An offset past the end gives empty text, with
/// `total_lines` saying how long the file is. Invalid UTF-8 is replaced with U+FFFD; a file
/// with a NUL byte in its first 8 KiB is binary and an `InvalidData` error.
pub(crate) fn read_text(
    path: &Path,
    offset: Option<usize>,
    limit: Option<usize>,
) -> io::Result<FileContent> {
    let bytes = read_bytes(path)?;
    if looks_binary(&bytes) {
        return Err(error(
            io::ErrorKind::InvalidData,
            format!(
                "cannot read `{}` as text: it is a binary file ({} bytes)",
                path.display(),
                bytes.len()
            ),
        ));
    }
    let (start, end, total_lines) = line_window(&bytes, offset.unwrap_or(1), limit);
    Ok(FileContent {
        text: String::from_utf8_lossy(&bytes[start..end]).into_owned(),
        size: bytes.len() as u64,
        total_lines,
    })
}

/// Byte range of lines `first..first + limit` (1-based) and the file's line count. A line
/// ends after `\n`; a last line without `\n` still counts.
fn line_window(bytes: &[u8], first: usize, limit: Option<usize>) -> (usize, usize, usize) {
    let first = first.max(1);
    let last = limit.map(|n| first.saturating_add(n));
    let mut line = 1; // the line that starts at `line_start`
    let mut line_start = 0;
    let mut start = if first == 1 { Some(0) } else { None };
    let mut end = if last == Some(1) { Some(0) } else { None };
    for nl in memchr::memchr_iter(b'\n', bytes) {
        line += 1;
        line_start = nl + 1;
        if line == first {
            start = Some(line_start);
        }
        if Some(line) == last {
            end = Some(line_start);
        }
    }
    let total_lines = if line_start < bytes.len() {
        line
    } else {
        line - 1
    };
    let start = start.unwrap_or(bytes.len()).min(bytes.len());
    let end = end.unwrap_or(bytes.len()).max(start);
    (start, end, total_lines)
}

/// Metadata of `path`, following symlinks.
pub(crate) fn stat(path: &Path) -> io::Result<FileStat> {
    let meta = fs::metadata(path).map_err(|e| describe(e, "stat", path))?;
    Ok(FileStat {
        is_dir: meta.is_dir(),
        size: meta.len(),
        modified: meta.modified().ok(),
    })
}

/// Removes a file or symlink; a directory is an error.
pub(crate) fn remove_file(path: &Path) -> io::Result<()> {
    let meta = fs::symlink_metadata(path).map_err(|e| describe(e, "remove", path))?;
    if meta.is_dir() {
        return Err(error(
            io::ErrorKind::IsADirectory,
            format!(
                "cannot remove `{}`: it is a directory; only files can be removed",
                path.display()
            ),
        ));
    }
    fs::remove_file(path).map_err(|e| describe(e, "remove", path))
}

/// Writes `content` to `path` atomically.
///
/// The content goes to `.NAME.tmp-XXXX` beside the target (created with `O_EXCL`), is
/// flushed with `fsync`, gets the permission bits of the file it replaces, and is renamed
/// over the target; the directory is then synced. A reader sees the old or the new file,
/// never a mix. A symlink target is followed: the file it points to is replaced and the
/// link stays. Parent directories are created. On any error the temporary file is removed
/// and the target is untouched. A replaced file's hard links and ownership are not kept
/// (the new file is a new inode owned by us).
pub(crate) fn write_atomic(path: &Path, content: &[u8]) -> io::Result<()> {
    let target = follow_symlink(path)?;
    let existing = match fs::metadata(&target) {
        Ok(meta) if meta.is_dir() => {
            return Err(error(
                io::ErrorKind::IsADirectory,
                format!(
                    "cannot write `{}`: it is a directory; choose a file path inside it",
                    path.display()
                ),
            ));
        }
        Ok(meta) => Some(meta.permissions()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(describe(e, "write", path)),
    };
    let (dir, name) = match (target.parent(), target.file_name()) {
        (Some(dir), Some(name)) => (dir, name),
        _ => {
            return Err(error(
                io::ErrorKind::InvalidInput,
                format!("cannot write `{}`: not a file path", path.display()),
            ));
        }
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    fs::create_dir_all(dir).map_err(|e| describe(e, "create the parent directory of", path))?;

    let (tmp_path, mut file) =
        create_temp_beside(dir, &name.to_string_lossy()).map_err(|e| describe(e, "write", path))?;
    let written = (|| {
        file.write_all(content)?;
        if let Some(permissions) = existing {
            file.set_permissions(permissions)?;
        }
        file.sync_all()?;
        drop(file);
        fs::rename(&tmp_path, &target)
    })();
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp_path);
        return Err(describe(e, "write", path));
    }
    // Make the rename itself durable; failing to sync a directory (some filesystems refuse)
    // does not undo a write that already happened.
    if let Ok(dir_handle) = File::open(dir) {
        let _ = dir_handle.sync_all();
    }
    Ok(())
}

/// The final target of `path` when it is a symlink (resolved relative to its directory, to
/// any depth); `path` itself otherwise, including when the symlink dangles.
fn follow_symlink(path: &Path) -> io::Result<PathBuf> {
    let mut current = path.to_path_buf();
    for _ in 0..40 {
        match fs::symlink_metadata(&current) {
            Ok(meta) if meta.file_type().is_symlink() => {
                let link = fs::read_link(&current).map_err(|e| describe(e, "write", path))?;
                current = match current.parent() {
                    Some(parent) if link.is_relative() => parent.join(link),
                    _ => link,
                };
            }
            _ => return Ok(current),
        }
    }
    Err(error(
        io::ErrorKind::InvalidInput,
        format!(
            "cannot write `{}`: too many levels of symbolic links",
            path.display()
        ),
    ))
}

fn create_temp_beside(dir: &Path, name: &str) -> io::Result<(PathBuf, File)> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut last_err = None;
    for _ in 0..16 {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let suffix = (u64::from(std::process::id()) << 40) ^ (n << 24) ^ u64::from(nanos);
        let tmp = dir.join(format!(".{name}.tmp-{suffix:x}"));
        match OpenOptions::new().write(true).create_new(true).open(&tmp) {
            Ok(file) => return Ok((tmp, file)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last_err = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last_err.unwrap_or_else(|| io::Error::other("no free temporary file name")))
}

/// Lists `root` to `depth` levels (0 is treated as 1), sorted by relative path with a
/// directory's entries right after it. `.git` directories are listed but never descended
/// into; symlinks are listed (a link to a directory has `is_dir`) but not followed.
/// Entries that cannot be read below the root are skipped.
pub(crate) fn list_directory(root: &Path, depth: usize) -> io::Result<Vec<DirEntry>> {
    let meta = fs::metadata(root).map_err(|e| describe(e, "list", root))?;
    if !meta.is_dir() {
        return Err(error(
            io::ErrorKind::NotADirectory,
            format!(
                "cannot list `{}`: it is a file, not a directory; read it instead",
                root.display()
            ),
        ));
    }
    // Surface a permission error on the root itself instead of an empty listing.
    fs::read_dir(root).map_err(|e| describe(e, "list", root))?;

    let walker = walkdir::WalkDir::new(root)
        .min_depth(1)
        .max_depth(depth.max(1))
        .sort_by_file_name();
    let mut entries = Vec::new();
    let mut iter = walker.into_iter();
    while let Some(item) = iter.next() {
        let Ok(item) = item else { continue };
        let file_type = item.file_type();
        let (is_dir, size) = if file_type.is_symlink() {
            match fs::metadata(item.path()) {
                Ok(target) if target.is_dir() => (true, None),
                Ok(target) => (false, Some(target.len())),
                Err(_) => (false, None),
            }
        } else if file_type.is_dir() {
            (true, None)
        } else {
            (false, item.metadata().ok().map(|m| m.len()))
        };
        if file_type.is_dir() && item.file_name() == ".git" {
            iter.skip_current_dir();
        }
        let relative = item.path().strip_prefix(root).unwrap_or(item.path());
        let name = relative
            .components()
            .map(|c| c.as_os_str().to_string_lossy())
            .collect::<Vec<_>>()
            .join("/");
        entries.push(DirEntry { name, is_dir, size });
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(text: &str, first: usize, limit: Option<usize>) -> (&str, usize) {
        let (start, end, total) = line_window(text.as_bytes(), first, limit);
        (&text[start..end], total)
    }

    #[test]
    fn line_windows_keep_line_endings_and_count_a_last_unterminated_line() {
        assert_eq!(window("", 1, None), ("", 0));
        assert_eq!(window("a", 1, None), ("a", 1));
        assert_eq!(window("a\n", 1, None), ("a\n", 1));
        assert_eq!(window("a\r\nb\r\nc", 2, Some(1)), ("b\r\n", 3));
        assert_eq!(window("a\nb\nc\n", 2, None), ("b\nc\n", 3));
        assert_eq!(window("a\nb\nc", 3, Some(5)), ("c", 3));
        assert_eq!(window("a\nb\nc\n", 1, Some(2)), ("a\nb\n", 3));
        assert_eq!(window("a\nb\n", 0, Some(1)), ("a\n", 2));
    }

    #[test]
    fn line_windows_past_the_end_are_empty() {
        assert_eq!(window("a\nb\n", 3, None), ("", 2));
        assert_eq!(window("a\nb", 9, Some(2)), ("", 2));
        assert_eq!(window("a\nb\n", 1, Some(0)), ("", 2));
    }

    #[test]
    fn a_nul_byte_in_the_first_block_means_binary() {
        assert!(looks_binary(b"PK\x03\x04\x00"));
        assert!(!looks_binary("plain text ünïcode".as_bytes()));
        let mut late = vec![b'a'; BINARY_SNIFF_BYTES];
        late.push(0);
        assert!(!looks_binary(&late), "only the first block is inspected");
    }
}
