//! The ripgrep backend: finds `rg` once, runs it with flags that make it apply the rules of
//! the in-process search (see `walk.rs` and `matcher.rs`), and parses its output. Never
//! runs `rg` through a shell and never leaves it running: it is killed once enough matches
//! are read.
//!
//! The flags, and the rule each one pins down:
//! `--no-config` (no user config file), `--hidden` (dotfiles are searched),
//! `--glob=!.git` (last, so it wins over the user's filter), `--no-ignore-global` and
//! `--no-ignore-exclude` (only `.gitignore`, `.ignore` and `.rgignore` files are read;
//! `.gitignore` inside git repositories only, ripgrep's default, which every version
//! since 0.9 applies the same way — `--no-require-git` does not: ripgrep 14 stopped
//! noticing nested repositories under it),
//! `--encoding=none` (raw bytes, no BOM sniffing), `--sort=path` (tree order, so the first
//! `max_results` matches are the same as in process), `--null` with `--line-number`,
//! `--with-filename` and `--no-heading` (one unambiguous record per line),
//! `--no-messages` (unreadable files are skipped silently).

use std::io::{self, BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::thread;
use std::time::Duration;

use super::Found;
use super::matcher::MAX_LINE;
use crate::exec::GrepMatch;
use crate::exec::process::open_files;

/// The data memory (`RLIMIT_DATA`) a ripgrep child may use.
const RG_DATA_LIMIT: u64 = 256 * 1024 * 1024;

/// Room for a record's `line number:` before its text.
const RECORD_PREFIX: usize = 32;

/// Oldest ripgrep accepted: every flag used here exists in 11, and its ignore rules are
/// the ones `walk.rs` implements.
const MIN_MAJOR_VERSION: u64 = 11;
/// How much of ripgrep's stderr is kept for an error message.
const STDERR_KEPT: usize = 4096;

/// The `rg` binary, looked up once per process.
pub(crate) fn find() -> Option<&'static Path> {
    static RIPGREP: OnceLock<Option<PathBuf>> = OnceLock::new();
    RIPGREP.get_or_init(locate).as_deref()
}

/// Searches `PATH` for an `rg` of a supported version. Reading `PATH` here is the one
/// exception to "the library reads the environment only in `from_env()`": finding the
/// optional ripgrep binary needs it, and it happens once. Relative `PATH` entries are
/// skipped so that a repository cannot plant its own `rg`.
fn locate() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join("rg"))
        .find(|candidate| is_executable(candidate) && supported(candidate))
}

#[cfg(unix)]
fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(not(unix))]
fn is_executable(path: &Path) -> bool {
    path.is_file()
}

/// Whether `rg --version` answers within a few seconds with a version we can drive.
fn supported(rg: &Path) -> bool {
    let mut command = Command::new(rg);
    command
        .arg("--version")
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    open_files::restore_for(&mut command);
    let Ok(mut child) = command.spawn() else {
        return false;
    };
    let exited =
        wait_with_deadline(&mut child, Duration::from_secs(5)).is_some_and(|s| s.success());
    if !exited {
        stop(&mut child);
        return false;
    }
    let mut text = String::new();
    if let Some(stdout) = child.stdout.take() {
        let _ = stdout.take(1024).read_to_string(&mut text);
    }
    parse_version(&text).is_some_and(|(major, _)| major >= MIN_MAJOR_VERSION)
}

/// Polls `child` until it exits or `limit` passes (no SIGCHLD handler needed).
fn wait_with_deadline(
    child: &mut std::process::Child,
    limit: Duration,
) -> Option<std::process::ExitStatus> {
    let deadline = std::time::Instant::now() + limit;
    let mut pause = Duration::from_micros(250);
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if std::time::Instant::now() < deadline => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(20));
            }
            _ => return None,
        }
    }
}

/// `(major, minor)` from `ripgrep 13.0.0 (rev ...)`.
fn parse_version(text: &str) -> Option<(u64, u64)> {
    let version = text.strip_prefix("ripgrep ")?.split_whitespace().next()?;
    let mut parts = version.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

fn stop(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// Why a ripgrep run gave no answer.
#[derive(Debug)]
pub(crate) enum Failure {
    /// ripgrep could not be run or read.
    Io(io::Error),
    /// ripgrep exited with an error; its stderr, trimmed.
    Reported(String),
}

/// What one search asks of ripgrep.
pub(crate) struct Search<'a> {
    pub(crate) pattern: &'a str,
    pub(crate) case_insensitive: bool,
    pub(crate) glob_filter: Option<&'a str>,
    /// Stop after this many matching lines.
    pub(crate) wanted: usize,
}

/// Runs `rg` over the directory `root`; up to `search.wanted` matches in tree order.
pub(crate) fn grep(rg: &Path, root: &Path, search: &Search<'_>) -> Result<Found, Failure> {
    let mut command = Command::new(rg);
    command
        .current_dir(root)
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .args([
            "--no-config",
            "--no-messages",
            "--null",
            "--line-number",
            "--with-filename",
            "--no-heading",
            "--color=never",
            "--sort=path",
            "--hidden",
            "--no-ignore-global",
            "--no-ignore-exclude",
            "--encoding=none",
        ])
        .arg(if search.case_insensitive {
            "--ignore-case"
        } else {
            "--case-sensitive"
        });
    if let Some(filter) = search.glob_filter {
        command.arg(format!("--glob={filter}"));
    }
    command
        .arg("--glob=!.git")
        .arg(format!("--regexp={}", search.pattern))
        .arg("--")
        .arg(".");
    // ripgrep holds a whole line in memory (a 300 MB line costs it over 400 MB): past the
    // cap it fails, and the in-process search, which holds at most `MAX_LINE`, takes over.
    crate::exec::process::limit_child_data(&mut command, RG_DATA_LIMIT);
    open_files::restore_for(&mut command);
    let mut child = command.spawn().map_err(Failure::Io)?;
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        stop(&mut child);
        return Err(Failure::Io(io::Error::other(
            "ripgrep pipes were not created",
        )));
    };
    let stderr_reader = thread::Builder::new()
        .name("agentloop-rg-stderr".into())
        // It copies through an 8 KiB buffer; the default 2 MiB would be address space idle.
        .stack_size(64 * 1024)
        .spawn(move || read_stderr(stderr));
    let read = read_matches(stdout, search.wanted);
    let enough = matches!(&read, Ok(found) if found.len() >= search.wanted);
    if enough || read.is_err() {
        let _ = child.kill();
    }
    let status = child.wait();
    let stderr = match stderr_reader {
        Ok(handle) => handle.join().unwrap_or_default(),
        Err(_) => String::new(),
    };
    let matches = read.map_err(Failure::Io)?;
    let found = |notes: Vec<(String, String)>| Found { matches, notes };
    if enough {
        return Ok(found(Vec::new()));
    }
    let status = status.map_err(Failure::Io)?;
    // 0: matches, 1: none, 2: an error. With --no-messages, errors about single files
    // (unreadable, vanished) leave stderr empty: the search goes on without them, and
    // the output says that some files were not searched (ripgrep does not say which).
    match status.code() {
        Some(0 | 1) => Ok(found(Vec::new())),
        Some(2) if stderr.trim().is_empty() => Ok(found(vec![(
            String::new(),
            "ripgrep could not read some files (it does not name them); they were not searched"
                .to_string(),
        )])),
        _ if stderr.contains("memory allocation of") => Err(Failure::Reported(format!(
            "{} (ripgrep runs with at most {} MiB of memory: it cannot hold a line that long)",
            stderr.trim(),
            RG_DATA_LIMIT / (1024 * 1024)
        ))),
        _ if !stderr.trim().is_empty() => Err(Failure::Reported(stderr.trim().to_owned())),
        _ => Err(Failure::Reported(format!("ripgrep ended with {status}"))),
    }
}

fn read_stderr(stderr: impl Read) -> String {
    let mut kept = Vec::new();
    let mut stderr = stderr;
    let _ = (&mut stderr)
        .take(STDERR_KEPT as u64)
        .read_to_end(&mut kept);
    let _ = io::copy(&mut stderr, &mut io::sink());
    String::from_utf8_lossy(&kept).into_owned()
}

/// Reads `path\0line:text\n` records until `wanted` are read or the output ends.
fn read_matches(stdout: impl Read, wanted: usize) -> io::Result<Vec<GrepMatch>> {
    let mut reader = BufReader::with_capacity(64 * 1024, stdout);
    let mut found = Vec::new();
    let mut path = Vec::new();
    let mut rest = Vec::new();
    while found.len() < wanted {
        path.clear();
        if reader.read_until(0, &mut path)? == 0 {
            break;
        }
        rest.clear();
        read_line_capped(&mut reader, &mut rest)?;
        found.push(parse_record(&path, &rest).ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidData, "unexpected ripgrep output")
        })?);
    }
    Ok(found)
}

/// Reads up to and including the next `\n` into `line`, keeping at most [`MAX_LINE`] bytes
/// of text after the line number and dropping the rest of a longer line (so a 300 MB
/// matching line costs `MAX_LINE` here, not 300 MB).
fn read_line_capped(reader: &mut impl BufRead, line: &mut Vec<u8>) -> io::Result<()> {
    loop {
        let available = match reader.fill_buf() {
            Ok(available) => available,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(error),
        };
        if available.is_empty() {
            return Ok(());
        }
        let (used, done) = match memchr::memchr(b'\n', available) {
            Some(i) => (i + 1, true),
            None => (available.len(), false),
        };
        let room = (MAX_LINE + RECORD_PREFIX).saturating_sub(line.len());
        line.extend_from_slice(&available[..used.min(room)]);
        reader.consume(used);
        if done {
            if line.last() != Some(&b'\n') {
                line.push(b'\n');
            }
            return Ok(());
        }
    }
}

fn parse_record(path: &[u8], rest: &[u8]) -> Option<GrepMatch> {
    let path = path.strip_suffix(b"\0")?;
    let path = path.strip_prefix(b"./").unwrap_or(path);
    let colon = memchr::memchr(b':', rest)?;
    let line_number = std::str::from_utf8(&rest[..colon]).ok()?.parse().ok()?;
    let mut line = &rest[colon + 1..];
    line = line.strip_suffix(b"\n").unwrap_or(line);
    if line.len() > MAX_LINE {
        // Cut like the in-process search cuts a line over the cap.
        line = &line[..MAX_LINE];
    }
    line = line.strip_suffix(b"\r").unwrap_or(line);
    Some(GrepMatch {
        path: String::from_utf8_lossy(path).into_owned(),
        line_number,
        line: String::from_utf8_lossy(line).into_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_read_from_the_first_line() {
        assert_eq!(parse_version("ripgrep 13.0.0\n-SIMD -AVX"), Some((13, 0)));
        assert_eq!(
            parse_version("ripgrep 14.1.1 (rev 4649aa9700)\n"),
            Some((14, 1))
        );
        assert_eq!(parse_version("grep (GNU grep) 3.7"), None);
    }

    #[test]
    fn records_are_split_at_the_nul_and_the_first_colon() {
        let record = parse_record(b"./src/a:b.rs\0", b"12:let x = a:b;\r\n").unwrap();
        assert_eq!(record.path, "src/a:b.rs");
        assert_eq!(record.line_number, 12);
        assert_eq!(record.line, "let x = a:b;");
        assert!(parse_record(b"x\0", b"nonumber\n").is_none());
    }

    #[test]
    fn reading_stops_after_the_wanted_number_of_records() {
        let output: &[u8] = b"./a\x001:x\n./a\x002:y\n./b\x001:z\n";
        let found = read_matches(output, 2).unwrap();
        assert_eq!(found.len(), 2);
        assert_eq!(read_matches(output, 10).unwrap().len(), 3);
    }
}
