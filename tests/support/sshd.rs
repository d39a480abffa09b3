//! A private `sshd` on 127.0.0.1 for tests and the bench: throwaway host and user keys
//! made with `ssh-keygen` in a temp dir, a free high port, its own config (`-f`), `-D -e`,
//! `StrictModes no`, `UsePAM no`, the current user, the authorized key in the temp dir.
//! When sshd is missing it prints why and gives `None`, unless `AGENTLOOP_CI=1` (then the
//! test fails). Killed on drop.

use std::fs;
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::GENEROUS;

/// Whether CI requires every tool (`AGENTLOOP_CI=1`).
fn ci() -> bool {
    std::env::var("AGENTLOOP_CI").is_ok_and(|v| v == "1")
}

/// Skips (returns `None` after a printed reason) or, under CI, fails.
fn missing(reason: &str) -> Option<Sshd> {
    assert!(!ci(), "AGENTLOOP_CI=1 and {reason}");
    eprintln!("skipped: {reason}");
    None
}

/// A private sshd on 127.0.0.1, killed on drop.
pub struct Sshd {
    child: Child,
    pub port: u16,
    pub dir: tempfile::TempDir,
    pub user: String,
}

impl Sshd {
    /// Starts one, or `None` (with a printed reason) when sshd is not installed.
    pub fn start() -> Option<Sshd> {
        let sshd = Path::new("/usr/sbin/sshd");
        if !sshd.is_file() {
            return missing("/usr/sbin/sshd is missing (apt-get install openssh-server)");
        }
        if Command::new("ssh").arg("-V").output().is_err() {
            return missing("the ssh client is missing (apt-get install openssh-client)");
        }
        // sshd insists on its privilege separation directory.
        let _ = fs::create_dir_all("/run/sshd");
        let dir = tempfile::tempdir().expect("temp dir");
        for key in ["host_key", "id"] {
            let made = Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-f"])
                .arg(dir.path().join(key))
                .status()
                .expect("ssh-keygen runs");
            assert!(made.success(), "ssh-keygen failed");
        }
        fs::copy(
            dir.path().join("id.pub"),
            dir.path().join("authorized_keys"),
        )
        .unwrap();
        let port = free_port();
        let d = dir.path().display();
        let config = format!(
            "Port {port}\nListenAddress 127.0.0.1\nHostKey {d}/host_key\nPidFile {d}/sshd.pid\n\
             AuthorizedKeysFile {d}/authorized_keys\nStrictModes no\nUsePAM no\n\
             PasswordAuthentication no\nKbdInteractiveAuthentication no\n\
             PubkeyAuthentication yes\nPermitRootLogin prohibit-password\nLogLevel ERROR\n\
             MaxStartups 100:30:200\nMaxSessions 100\n"
        );
        fs::write(dir.path().join("sshd_config"), config).unwrap();
        let child = Command::new(sshd)
            .args(["-D", "-e", "-f"])
            .arg(dir.path().join("sshd_config"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(fs::File::create(dir.path().join("sshd.log")).unwrap())
            .spawn()
            .expect("sshd starts");
        let user = std::env::var("USER").unwrap_or_else(|_| "root".to_string());
        let mut sshd = Sshd {
            child,
            port,
            dir,
            user,
        };
        let deadline = Instant::now() + GENEROUS;
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(status)) = sshd.child.try_wait() {
                let log = fs::read_to_string(sshd.dir.path().join("sshd.log")).unwrap_or_default();
                panic!("sshd exited with {status}: {log}");
            }
            assert!(Instant::now() < deadline, "sshd never listened on {port}");
            thread::sleep(Duration::from_millis(20));
        }
        Some(sshd)
    }

    /// The ssh client options: our key, no known-hosts file, no user config.
    pub fn options(&self) -> Vec<String> {
        let d = self.dir.path().display();
        [
            "-F",
            "/dev/null",
            "-i",
            &format!("{d}/id"),
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "LogLevel=ERROR",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }

    /// `user@127.0.0.1`.
    pub fn destination(&self) -> String {
        format!("{}@127.0.0.1", self.user)
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().unwrap().port()
}
