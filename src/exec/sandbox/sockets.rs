//! The UNIX sockets of host processes that a sandboxed command must not reach: found in the
//! parent before each command, hidden in the child's private mount namespace (`spawn.rs`
//! bind-mounts `/dev/null` over each, so `connect(2)` and `sendto(2)` get
//! `ECONNREFUSED`). It never opens a socket and never follows a link out of what it lists.
//!
//! Why a mount view: before Landlock ABI 9 (`LANDLOCK_ACCESS_FS_RESOLVE_UNIX`) no kernel
//! rule decides `connect(2)` on a path socket; a seccomp filter sees only the pointer to
//! the address, not the path in it (and reading it from the child's memory would race a
//! second thread rewriting it); a read-only mount does not stop a connect. A mount on the
//! socket itself works at every ABI: the path then names `/dev/null`, whatever link or `..`
//! leads to it, and Landlock forbids the command to unmount it.
//!
//! Where sockets are looked for: every path socket bound in this network namespace
//! (`/proc/net/unix`, which lists listeners whatever directory they are in), the runtime
//! directories (`/run`, bounded walk: sockets bound in other network namespaces and
//! bind-mounted there, as a containerised daemon's), and the sockets the command's
//! environment names (`SSH_AUTH_SOCK`, `DBUS_SESSION_BUS_ADDRESS`, `DOCKER_HOST`, under
//! `XDG_RUNTIME_DIR`). Kept reachable: sockets inside the workspace roots (the working
//! directory and the host's extra writable roots — not `/tmp`, where ssh-agent, X11 and
//! tmux put theirs) and the host's allow-list. What is not hidden: a socket bound after
//! the scan by a process outside the sandbox, and a second hard link to a host socket in a
//! directory not scanned (the command itself can make neither: Landlock refuses it sockets
//! and cross-directory links outside the roots).

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::CString;
use std::fs;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

/// The most of `/proc/net/unix` read (a busy desktop lists a few thousand sockets in a few
/// hundred KiB).
const MAX_TABLE: u64 = 16 * 1024 * 1024;
/// How deep the runtime directories are walked (`/run/user/1000/gnupg/S.gpg-agent` is 4).
const MAX_DEPTH: usize = 5;
/// The most directory entries looked at in the walks of one scan.
const MAX_ENTRIES: usize = 8192;

/// The runtime directories walked for sockets (`/var/run` is a link to `/run` on every
/// current distribution; a separate one is walked too).
const RUNTIME_DIRS: [&str; 2] = ["/run", "/var/run"];

/// The sockets to hide from one command: canonical paths of host sockets outside `keep`
/// (the workspace roots) and not in `allowed` (canonical), sorted. `env` is the command's
/// environment.
pub(crate) fn to_hide(
    keep: &[PathBuf],
    allowed: &[PathBuf],
    env: &BTreeMap<String, String>,
) -> Vec<CString> {
    // Found walking a real directory without following a link: canonical already, and
    // sockets. Most sockets of `/proc/net/unix` are among them (a runtime directory's), so
    // only the others cost a `realpath`.
    let mut walked = BTreeSet::new();
    let mut budget = MAX_ENTRIES;
    for dir in RUNTIME_DIRS {
        // `/var/run` is a link to `/run` as a rule: walked once.
        if fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir()) {
            walk(Path::new(dir), 0, &mut budget, &mut walked);
        }
    }
    let mut named = BTreeSet::new();
    bound_paths(&mut named);
    named_by(env, &mut budget, &mut named);
    let mut hidden = BTreeSet::new();
    let mut consider = |path: &Path| {
        if keep.iter().any(|root| path.starts_with(root)) || allowed.iter().any(|a| a == path) {
            return;
        }
        if let Ok(c) = CString::new(path.as_os_str().as_bytes()) {
            hidden.insert(c);
        }
    };
    for path in &walked {
        consider(path);
    }
    for candidate in named.difference(&walked) {
        let Ok(path) = fs::canonicalize(candidate) else {
            continue; // gone, or not reachable from here
        };
        if fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_socket()) {
            consider(&path);
        }
    }
    hidden.into_iter().collect()
}

/// The paths of the path sockets in `/proc/net/unix` (the last column when it starts with
/// `/`; `@` marks an abstract name, and unbound sockets have none).
fn bound_paths(out: &mut BTreeSet<PathBuf>) {
    let Ok(file) = fs::File::open("/proc/net/unix") else {
        return;
    };
    let mut table = Vec::new();
    if file.take(MAX_TABLE).read_to_end(&mut table).is_err() {
        return;
    }
    out.extend(parse_table(&table));
}

/// The path column of each row of `/proc/net/unix` text: `Num RefCount Protocol Flags Type
/// St Inode [Path]`.
fn parse_table(table: &[u8]) -> Vec<PathBuf> {
    let mut paths = Vec::new();
    for line in table.split(|&b| b == b'\n').skip(1) {
        let mut rest = line;
        for _ in 0..7 {
            let start = rest.iter().position(|b| *b != b' ').unwrap_or(rest.len());
            rest = &rest[start..];
            let end = rest.iter().position(|b| *b == b' ').unwrap_or(rest.len());
            rest = &rest[end..];
        }
        let path = rest.trim_ascii_start();
        if path.first() == Some(&b'/') {
            paths.push(PathBuf::from(std::ffi::OsStr::from_bytes(path)));
        }
    }
    paths
}

/// Sockets below `dir`, at most [`MAX_DEPTH`] levels down, never through a link.
fn walk(dir: &Path, depth: usize, budget: &mut usize, out: &mut BTreeSet<PathBuf>) {
    if depth > MAX_DEPTH || *budget == 0 {
        return;
    }
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if *budget == 0 {
            return;
        }
        *budget -= 1;
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_socket() {
            out.insert(entry.path());
        } else if kind.is_dir() {
            walk(&entry.path(), depth + 1, budget, out);
        }
    }
}

/// The sockets the command's environment points at: an agent, a bus, a daemon.
fn named_by(env: &BTreeMap<String, String>, budget: &mut usize, out: &mut BTreeSet<PathBuf>) {
    let var = |name: &str| env.get(name).map(String::as_str).filter(|v| !v.is_empty());
    if let Some(path) = var("SSH_AUTH_SOCK") {
        out.insert(PathBuf::from(path));
    }
    if let Some(address) = var("DBUS_SESSION_BUS_ADDRESS") {
        // `unix:path=/run/user/1000/bus,guid=…` (several addresses separated by `;`).
        for part in address.split(';') {
            let options = part.strip_prefix("unix:").unwrap_or("");
            for option in options.split(',') {
                if let Some(path) = option.strip_prefix("path=") {
                    out.insert(PathBuf::from(path));
                }
            }
        }
    }
    if let Some(path) = var("DOCKER_HOST").and_then(|h| h.strip_prefix("unix://")) {
        out.insert(PathBuf::from(path));
    }
    if let Some(dir) = var("XDG_RUNTIME_DIR") {
        walk(Path::new(dir), 1, budget, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_gives_path_sockets_only() {
        let table = b"Num       RefCount Protocol Flags    Type St Inode Path\n\
            0000000000000000: 00000002 00000000 00010000 0001 01 21907 /run/docker.sock\n\
            0000000000000000: 00000002 00000000 00010000 0001 01 21908 @/tmp/.X11-unix/X0\n\
            0000000000000000: 00000003 00000000 00000000 0001 03 21909\n\
            0000000000000000: 00000002 00000000 00010000 0001 01 21910 /tmp/with space/s\n";
        assert_eq!(
            parse_table(table),
            [
                PathBuf::from("/run/docker.sock"),
                PathBuf::from("/tmp/with space/s")
            ]
        );
    }

    #[test]
    fn the_environment_names_agents_buses_and_daemons() {
        let env = BTreeMap::from([
            (
                "SSH_AUTH_SOCK".to_string(),
                "/tmp/ssh-x/agent.1".to_string(),
            ),
            (
                "DBUS_SESSION_BUS_ADDRESS".to_string(),
                "unix:path=/run/user/1/bus,guid=ab;unix:abstract=/tmp/dbus-x".to_string(),
            ),
            (
                "DOCKER_HOST".to_string(),
                "unix:///home/u/.docker/run/docker.sock".to_string(),
            ),
        ]);
        let mut out = BTreeSet::new();
        named_by(&env, &mut MAX_ENTRIES.clone(), &mut out);
        let expected: BTreeSet<PathBuf> = [
            "/tmp/ssh-x/agent.1",
            "/run/user/1/bus",
            "/home/u/.docker/run/docker.sock",
        ]
        .iter()
        .map(PathBuf::from)
        .collect();
        assert_eq!(out, expected);
    }
}
