//! The exec-server placed automatically: a container transport with a bootstrap runs a
//! small `sh` script in the target instead of the server. The script starts the copy of
//! this exact build (named by its SHA-256 in a writable directory) when one is there;
//! otherwise it asks for the binary, which the client streams over the same stdin, checks
//! the checksum, checks that the binary runs there, moves it into place and starts it.
//! Each step answers with one `agentloop-bootstrap …` line before the protocol begins.
//! The server runs `--supervised`: a SIGKILLed server leaves nothing running.
//!
//! This file never runs anything on the local side but the upload thread, and never
//! sends a byte the script did not ask for; every wait is bounded.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, ChildStdout};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use super::RemoteError;
use crate::exec::process::child::stdout_readable;
use crate::sha256::sha256_hex;
use crate::sync::lock;

/// A file as last hashed: path, device, inode, size, modification time.
type FileKey = (PathBuf, u64, u64, u64, Option<std::time::SystemTime>);

/// Where the copy goes unless the options name another directory.
pub(crate) const DEFAULT_DIR: &str = "/tmp/agentloop";
/// The longest line the script may answer with.
const MAX_ANSWER: usize = 4096;

/// The script: `sh -c SCRIPT agentloop-bootstrap DIR SUM SIZE`. It needs only `sh`,
/// `mkdir`, `mktemp`, `head`, `sha256sum`, `chmod`, `mv` and `tr`.
const SCRIPT: &str = r#"d=$1; sum=$2; size=$3; f="$d/agentloop-exec-server-$sum"
say() { echo "agentloop-bootstrap $*"; }
if [ -x "$f" ]; then say ok; exec "$f" --supervised; fi
mkdir -p "$d" 2>/dev/null; t=$(mktemp "$d/.upload.XXXXXX" 2>/dev/null) || { say "failed: $d is not writable"; exit 1; }
say send
head -c "$size" > "$t"
got=$(sha256sum "$t"); got=${got%% *}
if [ "$got" != "$sum" ]; then rm -f "$t"; say "failed: the copy's SHA-256 is $got, not $sum"; exit 1; fi
chmod 755 "$t"
if ! out=$("$t" --version 2>&1 </dev/null); then rm -f "$t"; say "failed: it cannot run on this $(uname -m 2>/dev/null) target: $(echo "$out" | tr '\n' ' ')"; exit 1; fi
mv -f "$t" "$f" && say ok && exec "$f" --supervised"#;

/// The local exec-server binary a transport copies in, and its checksum.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Bootstrap {
    local: PathBuf,
    sum: String,
    size: u64,
}

impl Bootstrap {
    /// Names `local` by its checksum. The file is read and hashed once per process for a
    /// given inode, size and modification time: a host opening a hundred containers with
    /// the same exec-server hashes it once, and a rebuilt binary is hashed again.
    pub(crate) fn new(local: &Path) -> io::Result<Bootstrap> {
        let named = |e: io::Error| {
            io::Error::new(
                e.kind(),
                format!("the exec-server to copy in, `{}`: {e}", local.display()),
            )
        };
        let meta = std::fs::metadata(local).map_err(named)?;
        let key = (
            local.to_path_buf(),
            meta.dev(),
            meta.ino(),
            meta.len(),
            meta.modified().ok(),
        );
        static HASHED: Mutex<Vec<(FileKey, String)>> = Mutex::new(Vec::new());
        let known = lock(&HASHED)
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, sum)| sum.clone());
        let (sum, size) = match known {
            Some(sum) => (sum, meta.len()),
            None => {
                let bytes = std::fs::read(local).map_err(named)?;
                let sum = sha256_hex(&bytes);
                let mut hashed = lock(&HASHED);
                // A few binaries per process at most; the oldest goes first.
                if hashed.len() >= 8 {
                    hashed.remove(0);
                }
                hashed.push((key, sum.clone()));
                (sum, bytes.len() as u64)
            }
        };
        Ok(Bootstrap {
            local: local.to_path_buf(),
            sum,
            size,
        })
    }

    /// What the transport runs in the target instead of the server.
    pub(crate) fn argv(&self, dir: &str) -> Vec<String> {
        [
            "sh",
            "-c",
            SCRIPT,
            "agentloop-bootstrap",
            dir,
            &self.sum,
            &self.size.to_string(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }

    /// Runs the exchange on a new transport: returns once the script has started the
    /// server, with `stdin` given back for the protocol. On an error `end` has ended the
    /// transport (and so the upload, which is joined).
    pub(crate) fn run(
        &self,
        stdin: ChildStdin,
        stdout: &mut BufReader<ChildStdout>,
        wait: Duration,
        label: &str,
        end: &mut dyn FnMut(),
    ) -> Result<ChildStdin, RemoteError> {
        let fail = |detail: String| RemoteError::Bootstrap {
            transport: label.to_string(),
            detail,
        };
        let first = answer(stdout, Instant::now() + wait).map_err(fail)?;
        if first == "ok" {
            return Ok(stdin);
        }
        if first != "send" {
            return Err(fail(first));
        }
        let mut file = File::open(&self.local)
            .map_err(|e| fail(format!("cannot read `{}`: {e}", self.local.display())))?;
        // The upload runs beside the wait for the answer: a target that stops reading
        // blocks only this thread, and the transport's end (by the caller, after an
        // error) unblocks it.
        let size = self.size;
        let upload = thread::Builder::new()
            .name("agentloop-remote-upload".to_string())
            .stack_size(64 * 1024)
            .spawn(move || {
                let mut stdin = stdin;
                let sent =
                    io::copy(&mut (&mut file).take(size), &mut stdin).and_then(|_| stdin.flush());
                (stdin, sent)
            })
            .map_err(|e| fail(e.to_string()))?;
        // A slow link gets a second per 4 MiB beyond the hello timeout.
        let deadline = Instant::now() + wait + Duration::from_secs(size / (4 << 20));
        let second = answer(stdout, deadline);
        if second.as_deref() != Ok("ok") {
            // Ending the transport closes the pipe the upload may be blocked on.
            end();
        }
        let joined = upload.join();
        match (second, joined) {
            (Ok(line), Ok((stdin, sent))) if line == "ok" => {
                sent.map_err(|e| fail(format!("the upload failed: {e}")))?;
                Ok(stdin)
            }
            (Ok(line) | Err(line), _) => Err(fail(line)),
        }
    }
}

/// The script's next `agentloop-bootstrap` line (without the prefix), by `deadline`.
fn answer(stdout: &mut BufReader<ChildStdout>, deadline: Instant) -> Result<String, String> {
    let mut line = Vec::new();
    loop {
        if stdout.buffer().is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(format!(
                    "no answer from the bootstrap script in time (so far: {:?})",
                    String::from_utf8_lossy(&line)
                ));
            }
            let ms = left.as_millis().min(i32::MAX as u128) as i32;
            if !stdout_readable(stdout.get_ref(), ms.max(1)) {
                continue;
            }
        }
        let buf = stdout.fill_buf().map_err(|e| e.to_string())?;
        if buf.is_empty() {
            return Err("the transport ended before the bootstrap script answered".to_string());
        }
        let (taken, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(at) => (at + 1, true),
            None => (buf.len(), false),
        };
        line.extend_from_slice(&buf[..taken]);
        stdout.consume(taken);
        if line.len() > MAX_ANSWER {
            return Err("the bootstrap script's answer is over 4 KiB".to_string());
        }
        if done {
            let text = String::from_utf8_lossy(&line).trim_end().to_string();
            return match text.strip_prefix("agentloop-bootstrap ") {
                Some(rest) => Ok(rest.strip_prefix("failed: ").unwrap_or(rest).to_string()),
                None => Err(format!("not the bootstrap script: {text:?}")),
            };
        }
    }
}
