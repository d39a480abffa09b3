//! The exec-server protocol, version 2: its whole specification (this comment) and its
//! encoding (JSON values, base64, bounded line reads). It never performs I/O on anything
//! but the reader it is given and never spawns.
//!
//! # Transport and framing
//!
//! The client starts a child process whose stdin and stdout reach an exec-server: the
//! server itself, `ssh host agentloop-exec-server`, `podman exec -i ctr
//! agentloop-exec-server`, `kubectl exec -i pod -- agentloop-exec-server`. Messages are
//! JSON-RPC 2.0 objects, one per line (UTF-8, `\n`-terminated, no embedded newlines).
//! A line longer than 32 MiB is a protocol error on either side: the
//! server answers it with error `-32700` and skips it; the client treats the connection as
//! broken. Binary data (file contents, command output) is standard base64 with padding.
//! The server's stderr is not part of the protocol; the client keeps its tail for errors.
//!
//! # Calls
//!
//! Every request has an integer `id` chosen by the client; responses carry the same `id`
//! and may arrive in any order: one connection carries many calls at once, and the server
//! runs each call on its own thread. Paths are strings, relative ones resolved against
//! the working directory the `hello` call set. Each call may carry `"sandbox"`, a policy
//! name (see "Sandbox" below); a server refuses a name it does not know with `-32602`, so
//! a policy is never silently dropped.
//!
//! | method | params | result |
//! |---|---|---|
//! | `hello` | `protocol_version` (2), `client` (name), `working_directory` (optional, absolute), `sandbox` (a sandbox object, below)? | `protocol_version`, `server`, `working_directory`, `platform`, `os_version`, `max_command_timeout_ms`, `max_line_bytes`, `sandbox` (list of known policies), `sandbox_applied`? |
//! | `process/start` | `command`, `timeout_ms`, `working_dir`?, `env` (object)?, `env_policy` {`inherit`: `all`/`core`/`nothing`, `include`, `exclude`}?, `kill_grace_ms`?, `sandbox_policy` (a policy object, below)? | the command's result once it has ended: `stdout`, `stderr`, `exit_code`, `signal`, `timed_out`, `cancelled`, `duration_us`, `stdout_bytes`, `stderr_bytes`, `capture_truncated`, `escaped_processes`, `sandbox_denied` |
//! | `fs/readFile` | `path`, `offset`?, `limit`? | `text`, `size`, `total_lines` |
//! | `fs/readBytes` | `path` | `data` (base64) |
//! | `fs/writeFile` | `path`, `data` (base64) | `{}` (atomic, as the local environment) |
//! | `fs/remove` | `path` | `{}` |
//! | `fs/exists` | `path` | `exists` |
//! | `fs/stat` | `path` | `is_dir`, `size`, `modified_ms`? |
//! | `fs/list` | `path`, `depth` | `entries`: [{`name`, `is_dir`, `size`?}] |
//! | `search/grep` | `pattern`, `path`, `case_insensitive`, `glob`?, `max_results` | `matches`: [{`path`, `line_number`, `line`}], `truncated`, `cut_short`?: [{`path`, `what`}] (what was not searched whole) |
//! | `search/glob` | `pattern`, `path` | `paths` |
//!
//! The server refuses every call but `hello` until `hello` has succeeded.
//!
//! While a `process/start` call runs, the server sends notifications
//! `process/output` {`call`: the request id, `stream`: `stdout`/`stderr`, `data`: base64},
//! all before the call's response. The client cancels a running command with the
//! notification `process/cancel` {`call`}: the server terminates the command's process
//! group (SIGTERM, the grace, SIGKILL) and answers the call with `cancelled: true`.
//! Timeouts are enforced by the server, on the remote side, exactly as locally.
//!
//! # Background processes (new in version 2)
//!
//! A background process is started by `background/start` and named from then on by that
//! request's `id` (`"id"` in the calls below); the server ends it when asked, and all of
//! them when its input ends or it gets SIGTERM, SIGHUP or SIGINT.
//!
//! | method | params | result |
//! |---|---|---|
//! | `background/start` | as `process/start` without `timeout_ms` (none applies), plus `output_limit` (bytes each stream keeps) and `stdin` (base64)? | `pid` (once it runs) |
//! | `background/read` | `id`, `stream` (`stdout`/`stderr`), `from`, `max_bytes`, `wait_ms` | `data` (base64), `dropped`, `dropped_at`, `end`, `total` |
//! | `background/write` | `id`, `data` (base64) | `{}` |
//! | `background/close_stdin` | `id` | `{}` |
//! | `background/wait` | `id`, `timeout_ms` | `exit`: the result as `process/start` gives it (empty `stdout`/`stderr`), or null while it runs |
//! | `background/signal` | `id`, `signal` (a number) | `{}` |
//! | `background/kill` | `id`, `release` (forget it afterwards) | `exit` |
//!
//! As soon as a background process has exited the server sends the notification
//! `background/exit` {`id`, `exit`}. A `background/read` or `background/wait` that waits
//! is cancelled like a command, with `process/cancel` {`call`}. An unknown `id` is error
//! `-32000` with kind `NotFound`.
//!
//! # Sandbox
//!
//! A client whose session has a sandbox sends it in `hello` as `sandbox`: {`policy`:
//! `read-only`/`workspace-write`/`full-access`, `writable_roots` (paths on the server's
//! side), `include_tmp`, `network`: `on`/`off`, `enforcement`: `required`/`best-effort`,
//! `protected` (paths), `allowed_sockets` (paths), `landlock_abi_at_most`?}. The server
//! runs every later call of the connection under it, exactly as the local sandbox does
//! (the working directory is the writable root; commands under Landlock, seccomp and
//! their mount namespace, file writes beneath the roots). A sandbox the server's kernel
//! cannot enforce fails `hello` with `-32000` (kind `Unsupported`) when `required`, and
//! is named in `sandbox_applied` when `best-effort`: {`description` (`workspace-write,
//! network off`), `landlock_abi`, `warnings` (what is not enforced)}. A server that
//! answers without `sandbox_applied` applies none: the client refuses it. A server whose
//! own sandbox the client's would loosen refuses `hello`.
//!
//! A command's own policy (a session's mode) is the call's `sandbox` name, with the whole
//! policy {`policy`, `writable_roots`, `include_tmp`} as `sandbox_policy`: it may only
//! narrow the connection's sandbox. `full-access`, or none, is the connection's sandbox.
//! Version 2 servers before sandboxes know only `full-access` and answer `hello` with
//! `sandbox: ["full-access"]`.
//!
//! # Errors
//!
//! | code | meaning |
//! |---|---|
//! | `-32700` | the line is not JSON or is too long (`id` null) |
//! | `-32600` | not a JSON-RPC request |
//! | `-32601` | unknown method |
//! | `-32602` | missing or invalid params, unknown sandbox policy |
//! | `-32000` | the operation failed; `data.kind` names the `std::io::ErrorKind` (`NotFound`, `PermissionDenied`, `InvalidData`, …) and `message` says what happened |
//! | `-32001` | unsupported protocol version (`data.supported`: the server's version) |
//! | `-32002` | `hello` has not succeeded yet |
//! | `-32003` | too many calls in flight (the server runs at most 64 at once) |
//!
//! # Versioning and lifetime
//!
//! `hello` is the first call. Its `protocol_version` is the only version this client
//! speaks; a server answering with another version, or not knowing `hello`, is refused with
//! a message naming both versions (install the exec-server built from the same agentloop
//! release). Additive changes (new optional params, new result fields, new methods) keep
//! the version; anything else increments it. End-of-file on the server's stdin ends the
//! session: the server cancels every running command (their process groups are ended as
//! on a timeout), answers them, and exits.

use std::io::{self, BufRead};
use std::path::PathBuf;

use serde_json::{Value, json};

use crate::exec::{Enforcement, Network, Sandbox, SandboxPolicy};

/// The protocol version this crate speaks (client and server).
pub const PROTOCOL_VERSION: u64 = 2;
/// The longest line either side accepts, in bytes.
pub(crate) const MAX_LINE: usize = 32 * 1024 * 1024;
/// The most calls the server runs at once; more are refused with `-32003`.
pub(crate) const MAX_IN_FLIGHT: usize = 64;
/// The policy name a call carries when it asks for no policy of its own.
pub(crate) const FULL_ACCESS: &str = "full-access";
/// The policies a server that applies sandboxes knows, as `hello` lists them.
pub(crate) const POLICIES: [&str; 3] = [FULL_ACCESS, "read-only", "workspace-write"];

pub(crate) const PARSE_ERROR: i64 = -32700;
pub(crate) const INVALID_REQUEST: i64 = -32600;
pub(crate) const METHOD_NOT_FOUND: i64 = -32601;
pub(crate) const INVALID_PARAMS: i64 = -32602;
pub(crate) const IO_ERROR: i64 = -32000;
pub(crate) const VERSION_MISMATCH: i64 = -32001;
pub(crate) const NOT_INITIALIZED: i64 = -32002;
pub(crate) const BUSY: i64 = -32003;

/// A failed call: a JSON-RPC error code, message and optional data.
pub(crate) type Failure = (i64, String, Option<Value>);

/// A call with missing or invalid params.
pub(crate) fn invalid(message: String) -> Failure {
    (INVALID_PARAMS, message, None)
}

/// A call whose operation failed, with the error's kind.
pub(crate) fn io_failure(e: io::Error) -> Failure {
    (
        IO_ERROR,
        e.to_string(),
        Some(json!({"kind": kind_name(e.kind())})),
    )
}

/// What one bounded line read produced.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Line {
    /// A complete line (without its `\n`) is in the buffer.
    Complete,
    /// The line passed the cap: it was returned at once, the buffer cleared and the rest
    /// of the line left unread ([`skip_line`] drops it).
    TooLong,
    /// End of input (a partial last line without `\n` is dropped).
    Eof,
}

/// Reads one `\n`-terminated line into `buf` (cleared first), never holding more than
/// `cap` bytes of it: a longer line is [`Line::TooLong`] as soon as its first `cap + 1`
/// bytes arrived, so that a peer writing without end is found out at the cap, not when it
/// stops.
pub(crate) fn read_line(
    reader: &mut impl BufRead,
    buf: &mut Vec<u8>,
    cap: usize,
) -> io::Result<Line> {
    buf.clear();
    loop {
        let available = match reader.fill_buf() {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            return Ok(Line::Eof);
        }
        let (chunk, done) = match crate::bytes::find(b'\n', available) {
            Some(at) => (&available[..at], Some(at + 1)),
            None => (available, None),
        };
        if buf.len() + chunk.len() > cap {
            buf.clear();
            return Ok(Line::TooLong);
        }
        buf.extend_from_slice(chunk);
        let used = done.unwrap_or(available.len());
        reader.consume(used);
        if done.is_some() {
            return Ok(Line::Complete);
        }
    }
}

/// Drops input up to and including the next `\n`: what follows a [`Line::TooLong`] for a
/// reader that goes on. `false` at end of input.
pub(crate) fn skip_line(reader: &mut impl BufRead) -> io::Result<bool> {
    loop {
        let available = match reader.fill_buf() {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            return Ok(false);
        }
        match crate::bytes::find(b'\n', available) {
            Some(at) => {
                reader.consume(at + 1);
                return Ok(true);
            }
            None => {
                let all = available.len();
                reader.consume(all);
            }
        }
    }
}

/// A request line (without the `\n`).
pub(crate) fn request(id: u64, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

/// A notification line.
pub(crate) fn notification(method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "method": method, "params": params})
}

/// A success response.
pub(crate) fn response(id: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

/// An error response.
pub(crate) fn error_response(id: &Value, code: i64, message: &str, data: Option<Value>) -> Value {
    let mut error = json!({"code": code, "message": message});
    if let Some(data) = data {
        error["data"] = data;
    }
    json!({"jsonrpc": "2.0", "id": id, "error": error})
}

/// The `data.kind` name of an error kind (its `Debug` name).
pub(crate) fn kind_name(kind: io::ErrorKind) -> String {
    format!("{kind:?}")
}

/// The error kind a `data.kind` name stands for; `Other` for names this build does not know.
pub(crate) fn kind_from_name(name: &str) -> io::ErrorKind {
    use io::ErrorKind::*;
    const KINDS: [io::ErrorKind; 16] = [
        NotFound,
        PermissionDenied,
        AlreadyExists,
        InvalidInput,
        InvalidData,
        TimedOut,
        Unsupported,
        IsADirectory,
        NotADirectory,
        DirectoryNotEmpty,
        ReadOnlyFilesystem,
        StorageFull,
        FileTooLarge,
        Interrupted,
        UnexpectedEof,
        WouldBlock,
    ];
    KINDS
        .into_iter()
        .find(|kind| kind_name(*kind) == name)
        .unwrap_or(Other)
}

/// A policy as the protocol carries it: {`policy`, `writable_roots`, `include_tmp`}.
pub(crate) fn sandbox_policy_to_json(policy: &SandboxPolicy) -> Value {
    let mut value = json!({"policy": policy.name()});
    if let SandboxPolicy::WorkspaceWrite {
        writable_roots,
        include_tmp,
    } = policy
    {
        value["writable_roots"] = json!(paths_to_json(writable_roots));
        value["include_tmp"] = json!(include_tmp);
    }
    value
}

/// The policy of a [`sandbox_policy_to_json`] value.
pub(crate) fn sandbox_policy_from_json(value: &Value) -> Result<SandboxPolicy, String> {
    match value.get("policy").and_then(Value::as_str) {
        Some("read-only") => Ok(SandboxPolicy::ReadOnly),
        Some("full-access") => Ok(SandboxPolicy::FullAccess),
        Some("workspace-write") => Ok(SandboxPolicy::WorkspaceWrite {
            writable_roots: paths_from_json(value, "writable_roots")?,
            include_tmp: value
                .get("include_tmp")
                .and_then(Value::as_bool)
                .unwrap_or(true),
        }),
        Some(other) => Err(format!("unknown sandbox policy `{other}`")),
        None => Err("a sandbox needs `policy`".to_string()),
    }
}

/// A whole sandbox as `hello` carries it (see "Sandbox" in the module docs).
pub(crate) fn sandbox_to_json(sandbox: &Sandbox) -> Value {
    let mut value = sandbox_policy_to_json(&sandbox.policy);
    value["network"] = json!(match sandbox.network {
        Network::On => "on",
        Network::Off => "off",
    });
    value["enforcement"] = json!(match sandbox.enforcement {
        Enforcement::Required => "required",
        Enforcement::BestEffort => "best-effort",
    });
    value["protected"] = json!(paths_to_json(&sandbox.extra_protected));
    value["allowed_sockets"] = json!(paths_to_json(&sandbox.allowed_sockets));
    value["landlock_abi_at_most"] = json!(sandbox.assumed_abi);
    value
}

/// The sandbox of a [`sandbox_to_json`] value; unknown words are errors, never defaults.
pub(crate) fn sandbox_from_json(value: &Value) -> Result<Sandbox, String> {
    let mut sandbox = Sandbox::new(sandbox_policy_from_json(value)?);
    sandbox.network = match value.get("network").and_then(Value::as_str) {
        Some("on") => Network::On,
        Some("off") => Network::Off,
        other => {
            return Err(format!(
                "sandbox `network` must be on or off, not {other:?}"
            ));
        }
    };
    sandbox.enforcement = match value.get("enforcement").and_then(Value::as_str) {
        Some("required") => Enforcement::Required,
        Some("best-effort") => Enforcement::BestEffort,
        other => {
            return Err(format!(
                "sandbox `enforcement` must be required or best-effort, not {other:?}"
            ));
        }
    };
    sandbox.extra_protected = paths_from_json(value, "protected")?;
    sandbox.allowed_sockets = paths_from_json(value, "allowed_sockets")?;
    sandbox.assumed_abi = match value.get("landlock_abi_at_most") {
        None | Some(Value::Null) => None,
        Some(abi) => Some(
            abi.as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or("sandbox `landlock_abi_at_most` must be a small integer")?,
        ),
    };
    Ok(sandbox)
}

fn paths_to_json(paths: &[PathBuf]) -> Vec<String> {
    paths
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect()
}

fn paths_from_json(value: &Value, name: &str) -> Result<Vec<PathBuf>, String> {
    match value.get(name) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| {
                item.as_str()
                    .map(PathBuf::from)
                    .ok_or_else(|| format!("sandbox `{name}` must hold path strings"))
            })
            .collect(),
        Some(_) => Err(format!("sandbox `{name}` must be a list of paths")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trips_every_length_and_byte() {
        let bytes: Vec<u8> = (0..=255u8).collect();
        for len in 0..40 {
            let encoded = crate::base64::encode(&bytes[..len]);
            assert_eq!(crate::base64::decode(&encoded).unwrap(), &bytes[..len]);
        }
        assert_eq!(crate::base64::encode(b"foobar"), "Zm9vYmFy");
        assert_eq!(crate::base64::encode(b"fo"), "Zm8=");
        assert_eq!(crate::base64::decode("Zm8"), Some(b"fo".to_vec()));
        assert_eq!(crate::base64::decode("Zm8!"), None);
    }

    #[test]
    fn a_line_over_the_cap_is_found_at_the_cap_and_can_be_skipped() {
        let input = format!("{}\nshort\npartial", "x".repeat(100));
        let mut reader = io::BufReader::with_capacity(7, input.as_bytes());
        let mut buf = Vec::new();
        assert_eq!(read_line(&mut reader, &mut buf, 10).unwrap(), Line::TooLong);
        assert!(buf.is_empty());
        assert!(skip_line(&mut reader).unwrap());
        assert_eq!(
            read_line(&mut reader, &mut buf, 10).unwrap(),
            Line::Complete
        );
        assert_eq!(buf, b"short");
        assert_eq!(read_line(&mut reader, &mut buf, 10).unwrap(), Line::Eof);
    }

    #[test]
    fn a_line_without_end_is_too_long_before_its_end_arrives() {
        // An endless line: the read returns at the cap, having consumed no more than that.
        let mut reader = io::Cursor::new(vec![b'x'; 1000]);
        let mut buf = Vec::new();
        assert_eq!(read_line(&mut reader, &mut buf, 10).unwrap(), Line::TooLong);
        assert!(reader.position() <= 10, "{}", reader.position());
        assert!(!skip_line(&mut reader).unwrap(), "no newline: end of input");
    }

    #[test]
    fn a_sandbox_travels_whole_and_a_bad_one_is_an_error() {
        let sandbox = Sandbox::new(SandboxPolicy::WorkspaceWrite {
            writable_roots: vec![PathBuf::from("/srv/cache")],
            include_tmp: false,
        })
        .with_network(Network::On)
        .with_enforcement(Enforcement::BestEffort)
        .with_protected_path("secrets.toml")
        .with_allowed_socket("/run/docker.sock")
        .with_landlock_abi_at_most(3);
        let value = sandbox_to_json(&sandbox);
        assert_eq!(sandbox_from_json(&value).unwrap(), sandbox);
        let read_only = Sandbox::new(SandboxPolicy::ReadOnly);
        let value = sandbox_to_json(&read_only);
        assert_eq!(sandbox_from_json(&value).unwrap(), read_only);
        for (field, bad) in [
            ("policy", json!("root")),
            ("network", json!("maybe")),
            ("enforcement", Value::Null),
            ("protected", json!([1])),
            ("landlock_abi_at_most", json!(-1)),
        ] {
            let mut value = sandbox_to_json(&read_only);
            value[field] = bad;
            assert!(sandbox_from_json(&value).is_err(), "{field}");
        }
    }

    #[test]
    fn error_kinds_travel_by_name() {
        for kind in [io::ErrorKind::NotFound, io::ErrorKind::InvalidData] {
            assert_eq!(kind_from_name(&kind_name(kind)), kind);
        }
        assert_eq!(kind_from_name("SomethingNew"), io::ErrorKind::Other);
    }
}
