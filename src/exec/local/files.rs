//! File operations of [`LocalExecutionEnvironment`](super::LocalExecutionEnvironment) on
//! paths that are already resolved: text reads with line windows, atomic writes, listings.
//!
//! Reads open only regular files, non-blocking ([`open_regular`]), and are bounded: it
//! never blocks on a FIFO or a device and never holds more than a capped part of a file.
//! This module never spawns processes, never changes the process's working directory and
//! never leaves a half-written file or a temporary file behind: a write goes to a temporary
//! file in the target's directory and is renamed over the target only once it is complete
//! and flushed to disk.

use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::exec::sandbox::beneath;
use crate::exec::{DirEntry, FileContent, FileStat};

/// How many leading bytes [`read_text`] inspects for a NUL byte to call a file binary. The
/// same rule as git and ripgrep: text files practically never contain NUL, and nearly every
/// binary format has one early on.
pub(crate) const BINARY_SNIFF_BYTES: usize = 8 * 1024;

/// Whether `bytes` looks binary: a NUL byte within the first [`BINARY_SNIFF_BYTES`].
pub(crate) fn looks_binary(bytes: &[u8]) -> bool {
    let head = &bytes[..bytes.len().min(BINARY_SNIFF_BYTES)];
    crate::bytes::find(0, head).is_some()
}

/// An `io::Error` of `kind` with a message, keeping the kind so that callers can match on it.
pub(crate) fn error(kind: io::ErrorKind, message: String) -> io::Error {
    io::Error::new(kind, message)
}

/// Rewords an OS error about `path` so that a model knows what failed and what to do.
pub(crate) fn describe(err: io::Error, action: &str, path: &Path) -> io::Error {
    if err.raw_os_error().is_none() && err.get_ref().is_some() {
        return err; // already our own words
    }
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

/// The most bytes [`read_bytes`] returns: a whole-file read (an image, an edit) of a larger
/// file is refused before anything is read.
pub(crate) const MAX_READ_BYTES: u64 = 64 * 1024 * 1024;

/// The most bytes of text one [`read_text`] window holds. A window that would be longer
/// (lines of many megabytes) stops here, part way through a line; the line count is still
/// exact.
pub(crate) const MAX_WINDOW_BYTES: usize = 8 * 1024 * 1024;

/// Pieces in which [`read_text`] reads a file.
const READ_CHUNK: usize = 64 * 1024;

/// Opens `path` for reading only if it is a regular file (following symlinks): a FIFO, a
/// socket, a device (`/dev/zero`, `/dev/urandom`, a terminal) or a directory is refused
/// with a message that names what it is. The open itself is non-blocking, so a FIFO
/// without a writer never waits; the type is checked on the opened descriptor (no race
/// between a check and the open), and the descriptor is made blocking again for reading.
/// Reads of paths the environment has not opened (ignore files, grep's files) go through
/// here; the environment's own reads open beneath the working directory (non-blocking too)
/// and pass the file to [`regular`].
pub(crate) fn open_regular(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;

    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| describe(e, "read", path))?;
    regular(file, path)
}

/// `file` (opened non-blocking) if it is a regular file, made blocking again for reading;
/// else the refusal naming what it is (`path` names it in messages).
pub(crate) fn regular(file: File, path: &Path) -> io::Result<File> {
    use std::os::unix::io::AsRawFd;

    let meta = file.metadata().map_err(|e| describe(e, "read", path))?;
    if !meta.is_file() {
        return Err(not_regular(path, &meta));
    }
    crate::exec::process::clear_nonblocking(file.as_raw_fd())
        .map_err(|e| describe(e, "read", path))?;
    Ok(file)
}

/// The refusal of a path that is not a regular file, naming what it is.
fn not_regular(path: &Path, meta: &fs::Metadata) -> io::Error {
    use std::os::unix::fs::FileTypeExt;

    let kind = meta.file_type();
    if kind.is_dir() {
        return error(
            io::ErrorKind::IsADirectory,
            format!(
                "cannot read `{}`: it is a directory, not a file; list it instead",
                path.display()
            ),
        );
    }
    let what = if kind.is_fifo() {
        "a FIFO (named pipe)"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else {
        "not a regular file"
    };
    error(
        io::ErrorKind::InvalidInput,
        format!(
            "refused to read `{}`: it is {what}, not a regular file; only regular files are read",
            path.display()
        ),
    )
}

/// Reads a whole regular file of at most `cap` bytes; a larger one is refused (before it is
/// read when its size says so, and if it grows past `cap` while being read).
pub(crate) fn read_regular_capped(path: &Path, cap: u64) -> io::Result<Vec<u8>> {
    read_capped(open_regular(path)?, path, cap)
}

/// Reads a whole opened regular file of at most `cap` bytes (see [`read_regular_capped`]).
fn read_capped(file: File, path: &Path, cap: u64) -> io::Result<Vec<u8>> {
    use std::io::Read;

    let size = file
        .metadata()
        .map_err(|e| describe(e, "read", path))?
        .len();
    let too_large = |size: u64| {
        error(
            io::ErrorKind::InvalidInput,
            format!(
                "refused to read `{}` whole: it is {} bytes, over the limit of {} bytes; read \
                 a part of it by lines instead",
                path.display(),
                size,
                cap
            ),
        )
    };
    if size > cap {
        return Err(too_large(size));
    }
    let mut bytes = Vec::with_capacity(size as usize);
    let mut reader = file.take(cap + 1);
    // In pieces, so that a cancelled call stops between them (`cancel::with_current`).
    loop {
        stop_if_cancelled(path)?;
        let read = (&mut reader)
            .take(CANCEL_CHECK_BYTES)
            .read_to_end(&mut bytes)
            .map_err(|e| describe(e, "read", path))?;
        if read == 0 {
            break;
        }
    }
    if bytes.len() as u64 > cap {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(bytes)
}

/// Reads all bytes of an opened file (opened non-blocking) if it is a regular file of at
/// most [`MAX_READ_BYTES`]; `path` names it in messages.
pub(crate) fn read_bytes(file: File, path: &Path) -> io::Result<Vec<u8>> {
    read_capped(regular(file, path)?, path, MAX_READ_BYTES)
}

/// Reads an opened text file (opened non-blocking; refused unless regular) and returns lines `offset..offset + limit` (1-based; `offset` 0 is
/// treated as 1; no limit means to the end). An offset past the end gives empty text, with
/// `total_lines` saying how long the file is. Invalid UTF-8 is replaced with U+FFFD; a file
/// with a NUL byte in its first 8 KiB is binary and an `InvalidData` error.
///
/// The file is streamed: memory holds the window (at most [`MAX_WINDOW_BYTES`]) and one
/// read buffer, whatever the file's size. The lines after the window are only counted, up
/// to the size the file had when it was opened (a file that keeps growing is not followed).
pub(crate) fn read_text(
    file: File,
    path: &Path,
    offset: Option<usize>,
    limit: Option<usize>,
) -> io::Result<FileContent> {
    use std::io::Read;

    let file = regular(file, path)?;
    let size = file
        .metadata()
        .map_err(|e| describe(e, "read", path))?
        .len();
    let mut reader = file.take(size);
    // No bigger than the file: a zeroed 64 KiB buffer for a 6-byte file is 16 page faults.
    let mut buffer = vec![0; (size as usize).clamp(1, READ_CHUNK)];
    let mut window = LineWindow::new(offset.unwrap_or(1), limit, MAX_WINDOW_BYTES);
    let mut first = true;
    loop {
        stop_if_cancelled(path)?;
        let (filled, eof) =
            fill(&mut reader, &mut buffer).map_err(|e| describe(e, "read", path))?;
        if first && looks_binary(&buffer[..filled]) {
            return Err(error(
                io::ErrorKind::InvalidData,
                format!(
                    "cannot read `{}` as text: it is a binary file ({size} bytes)",
                    path.display()
                ),
            ));
        }
        first = false;
        window.feed(&buffer[..filled]);
        if eof {
            break;
        }
    }
    let (text, total_lines) = window.finish();
    Ok(FileContent {
        text: String::from_utf8(text)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()),
        size,
        total_lines,
    })
}

/// How many bytes a whole-file read goes between looks at the cancel token of the call it
/// serves (a text read looks once per `READ_CHUNK`).
const CANCEL_CHECK_BYTES: u64 = 1024 * 1024;

/// An `Interrupted` error when the call this thread serves was cancelled
/// (`cancel::with_current`): a file tool run without a helper thread on local files stops
/// a long read (the line count of a huge file) instead of keeping an interrupt waiting.
fn stop_if_cancelled(path: &Path) -> io::Result<()> {
    if crate::cancel::current_cancelled() {
        return Err(error(
            io::ErrorKind::Interrupted,
            format!("the read of `{}` was cancelled", path.display()),
        ));
    }
    Ok(())
}

/// Reads until `buffer` is full or the reader is exhausted: (bytes read, reached the end).
fn fill(reader: &mut impl io::Read, buffer: &mut [u8]) -> io::Result<(usize, bool)> {
    let mut filled = 0;
    while filled < buffer.len() {
        match reader.read(&mut buffer[filled..]) {
            Ok(0) => return Ok((filled, true)),
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok((filled, false))
}

/// Lines `first..first + limit` (1-based) of a byte stream fed in pieces, and its line
/// count. A line ends after `\n`; a last line without `\n` still counts. The kept text
/// stops at `cap` bytes.
struct LineWindow {
    first: usize,
    /// The first line after the window, if the window has an end.
    end: Option<usize>,
    cap: usize,
    /// The line the next byte belongs to.
    line: usize,
    text: Vec<u8>,
    /// The last byte fed was a `\n` (or nothing was fed).
    at_line_start: bool,
    fed_any: bool,
}

impl LineWindow {
    fn new(first: usize, limit: Option<usize>, cap: usize) -> LineWindow {
        let first = first.max(1);
        LineWindow {
            first,
            end: limit.map(|n| first.saturating_add(n)),
            cap,
            line: 1,
            text: Vec::new(),
            at_line_start: true,
            fed_any: false,
        }
    }

    fn in_window(&self) -> bool {
        self.line >= self.first && self.end.is_none_or(|end| self.line < end)
    }

    fn past_window(&self) -> bool {
        self.end.is_some_and(|end| self.line >= end)
    }

    fn keep(&mut self, bytes: &[u8]) {
        let room = self.cap.saturating_sub(self.text.len());
        self.text.extend_from_slice(&bytes[..bytes.len().min(room)]);
    }

    fn feed(&mut self, mut bytes: &[u8]) {
        let Some(&last) = bytes.last() else { return };
        self.fed_any = true;
        self.at_line_start = last == b'\n';
        while !bytes.is_empty() {
            if self.past_window() || self.text.len() >= self.cap {
                // Only counting from here on.
                self.line += crate::bytes::count(b'\n', bytes);
                return;
            }
            if self.line < self.first {
                // Skip to the window's first line without keeping anything.
                let needed = self.first - self.line;
                match crate::bytes::after_nth(b'\n', bytes, needed) {
                    Ok(past) => {
                        self.line = self.first;
                        bytes = &bytes[past..];
                    }
                    Err(seen) => {
                        self.line += seen;
                        return;
                    }
                }
                continue;
            }
            debug_assert!(self.in_window());
            match crate::bytes::find(b'\n', bytes) {
                Some(i) => {
                    self.keep(&bytes[..=i]);
                    self.line += 1;
                    bytes = &bytes[i + 1..];
                }
                None => {
                    self.keep(bytes);
                    return;
                }
            }
        }
    }

    /// The kept text and the number of lines.
    fn finish(self) -> (Vec<u8>, usize) {
        let total = if self.fed_any && !self.at_line_start {
            self.line
        } else {
            self.line - 1
        };
        (self.text, total)
    }
}

/// Where a write or removal may go: the root it is resolved beneath and the check the
/// resolved path (relative to that root) must pass before anything is created.
pub(crate) struct WriteScope<'a> {
    /// The absolute, canonical directory the path is resolved beneath (`/` when the path
    /// is not confined).
    pub(crate) root: &'a Path,
    /// The path relative to `root`, as given (lexically normalised, not yet resolved).
    pub(crate) relative: &'a Path,
    /// The path as the caller named it, for messages.
    pub(crate) shown: &'a Path,
    /// Refuses a resolved relative path (protected paths); called before each directory
    /// is created and on the final path.
    pub(crate) check: &'a dyn Fn(&Path) -> io::Result<()>,
}

/// Removes a file or symlink (never what a symlink points to); a directory is an error.
pub(crate) fn remove_file(scope: &WriteScope<'_>) -> io::Result<()> {
    let path = scope.shown;
    let root_fd = beneath::open_root(scope.root).map_err(|e| describe(e, "remove", path))?;
    let resolved = beneath::resolve(scope.root, root_fd, scope.relative, false, None, path)
        .map_err(|e| describe(e, "remove", path))?;
    (scope.check)(&resolved.relative)?;
    let Some(name) = resolved.name else {
        return Err(not_a_file(path, "remove"));
    };
    match beneath::stat_at(&resolved.dir, &name).map_err(|e| describe(e, "remove", path))? {
        None => Err(describe(io::ErrorKind::NotFound.into(), "remove", path)),
        Some(st) if st.st_mode & libc::S_IFMT == libc::S_IFDIR => Err(error(
            io::ErrorKind::IsADirectory,
            format!(
                "cannot remove `{}`: it is a directory; only files can be removed",
                path.display()
            ),
        )),
        Some(_) => {
            beneath::unlink_at(&resolved.dir, &name).map_err(|e| describe(e, "remove", path))
        }
    }
}

fn not_a_file(path: &Path, action: &str) -> io::Error {
    error(
        io::ErrorKind::IsADirectory,
        format!(
            "cannot {action} `{}`: it is a directory; choose a file path inside it",
            path.display()
        ),
    )
}

/// The error edit_file gets when the file changed after it was read.
pub(crate) fn changed_error(path: &Path) -> io::Error {
    error(
        io::ErrorKind::WouldBlock,
        format!(
            "`{}` changed since it was read (another process wrote it); the file changed, read \
             it again and redo the edit",
            path.display()
        ),
    )
}

fn same_file(st: &libc::stat, expected: &FileStat) -> bool {
    let modified = SystemTime::UNIX_EPOCH.checked_add(std::time::Duration::new(
        st.st_mtime as u64,
        st.st_mtime_nsec as u32,
    ));
    st.st_mode & libc::S_IFMT == libc::S_IFREG
        && st.st_size as u64 == expected.size
        && (expected.modified.is_none() || modified == expected.modified)
}

/// Writes `content` atomically to the path of `scope`, resolved beneath its root.
///
/// The content goes to `.NAME.tmp-XXXX` in the target's directory (created with `O_EXCL`
/// through the held directory descriptor), is flushed with `fsync`, gets the permission
/// bits of the file it replaces, and is renamed over the target; the directory is then
/// synced. A reader sees the old or the new file, never a mix. A symlink is followed while
/// it stays beneath the root (the file it points to is replaced and the link stays); one
/// leading out is an error and nothing is written. Parent directories are created. On any
/// error the temporary file is removed and the target is untouched. With `expected`, the
/// target must still have that size and modification time just before the rename, or the
/// write fails with "the file changed". A replaced file's hard links and ownership are not
/// kept (the new file is a new inode owned by us).
pub(crate) fn write_atomic(
    scope: &WriteScope<'_>,
    content: &[u8],
    expected: Option<&FileStat>,
) -> io::Result<()> {
    let path = scope.shown;
    (scope.check)(scope.relative)?;
    let root_fd = beneath::open_root(scope.root).map_err(|e| describe(e, "write", path))?;
    let resolved = beneath::resolve(
        scope.root,
        root_fd,
        scope.relative,
        true,
        Some(scope.check),
        path,
    )
    .map_err(|e| describe(e, "write", path))?;
    (scope.check)(&resolved.relative)?;
    let Some(name) = resolved.name else {
        return Err(not_a_file(path, "write"));
    };
    let dir = &resolved.dir;
    let existing = beneath::stat_at(dir, &name).map_err(|e| describe(e, "write", path))?;
    if let Some(st) = &existing {
        if st.st_mode & libc::S_IFMT == libc::S_IFDIR {
            return Err(not_a_file(path, "write"));
        }
    }
    if let Some(expected) = expected {
        if !existing.as_ref().is_some_and(|st| same_file(st, expected)) {
            return Err(changed_error(path));
        }
    }
    let (tmp_name, mut file) =
        create_temp_in(dir, &name.to_string_lossy()).map_err(|e| describe(e, "write", path))?;
    let written = (|| {
        file.write_all(content)?;
        if let Some(st) = &existing {
            file.set_permissions(fs::Permissions::from_mode(st.st_mode & 0o7777))?;
        }
        file.sync_all()?;
        drop(file);
        if let Some(expected) = expected {
            // As late as possible: a writer between this check and the rename still loses
            // its write (Linux has no compare-and-rename), but the window is a few µs.
            let now = beneath::stat_at(dir, &name)?;
            if !now.as_ref().is_some_and(|st| same_file(st, expected)) {
                return Err(changed_error(path));
            }
        }
        beneath::rename_at(dir, &tmp_name, &name)
    })();
    if let Err(e) = written {
        let _ = beneath::unlink_at(dir, &tmp_name);
        return Err(if e.kind() == io::ErrorKind::WouldBlock {
            e
        } else {
            describe(e, "write", path)
        });
    }
    // Make the rename itself durable; failing to sync a directory (some filesystems refuse)
    // does not undo a write that already happened.
    beneath::sync_dir(dir);
    Ok(())
}

fn create_temp_in(dir: &OwnedFd, name: &str) -> io::Result<(OsString, File)> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut last_err = None;
    for _ in 0..16 {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let suffix = (u64::from(std::process::id()) << 40) ^ (n << 24) ^ u64::from(nanos);
        let tmp = OsString::from(format!(".{name}.tmp-{suffix:x}"));
        match beneath::create_exclusive_at(dir, &tmp, 0o666) {
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

    /// The window fed whole, and fed one byte at a time and in pieces of 2 and 3 bytes
    /// (which must all agree).
    fn window(text: &str, first: usize, limit: Option<usize>) -> (String, usize) {
        let whole = {
            let mut w = LineWindow::new(first, limit, usize::MAX);
            w.feed(text.as_bytes());
            w.finish()
        };
        for piece in [1, 2, 3] {
            let mut w = LineWindow::new(first, limit, usize::MAX);
            for chunk in text.as_bytes().chunks(piece) {
                w.feed(chunk);
            }
            assert_eq!(w.finish(), whole, "{text:?} in pieces of {piece}");
        }
        (String::from_utf8(whole.0).unwrap(), whole.1)
    }

    fn owned(pair: (&str, usize)) -> (String, usize) {
        (pair.0.to_string(), pair.1)
    }

    #[test]
    fn line_windows_keep_line_endings_and_count_a_last_unterminated_line() {
        assert_eq!(window("", 1, None), owned(("", 0)));
        assert_eq!(window("a", 1, None), owned(("a", 1)));
        assert_eq!(window("a\n", 1, None), owned(("a\n", 1)));
        assert_eq!(window("a\r\nb\r\nc", 2, Some(1)), owned(("b\r\n", 3)));
        assert_eq!(window("a\nb\nc\n", 2, None), owned(("b\nc\n", 3)));
        assert_eq!(window("a\nb\nc", 3, Some(5)), owned(("c", 3)));
        assert_eq!(window("a\nb\nc\n", 1, Some(2)), owned(("a\nb\n", 3)));
        assert_eq!(window("a\nb\n", 0, Some(1)), owned(("a\n", 2)));
    }

    #[test]
    fn line_windows_past_the_end_are_empty() {
        assert_eq!(window("a\nb\n", 3, None), owned(("", 2)));
        assert_eq!(window("a\nb", 9, Some(2)), owned(("", 2)));
        assert_eq!(window("a\nb\n", 1, Some(0)), owned(("", 2)));
    }

    #[test]
    fn a_window_stops_at_its_byte_cap_and_still_counts_every_line() {
        let mut w = LineWindow::new(1, None, 5);
        w.feed(b"abc\ndefgh\nij");
        assert_eq!(w.finish(), (b"abc\nd".to_vec(), 3));
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
