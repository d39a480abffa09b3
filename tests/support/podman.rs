//! Real podman containers for tests and the bench: the local test image
//! (`localhost/agentloop-test`, built from this machine's bash and coreutils by
//! `.ci/container-image`; it holds no exec-server), run with `--runtime runc` and the
//! rlimits this machine allows, removed (`rm -f -t 0`) on drop. Without podman a test
//! skips with a printed reason, or fails under `AGENTLOOP_CI=1`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

/// The test image's name.
pub const IMAGE: &str = "localhost/agentloop-test:latest";

/// Where the test containers see a mounted exec-server.
pub const SERVER_IN_CONTAINER: &str = "/opt/agentloop/agentloop-exec-server";

/// The exec-server without its debug sections (about a tenth of the debug build), beside
/// it in the target directory, made again when the build is newer: what a release would
/// copy into a container, to keep the tests' uploads short.
pub fn stripped_server() -> PathBuf {
    static MADE: OnceLock<PathBuf> = OnceLock::new();
    MADE.get_or_init(|| {
        let server = crate::programs::exec_server();
        let out = server.with_file_name("agentloop-exec-server.stripped");
        let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
        if modified(&out).is_some() && modified(&out) >= modified(&server) {
            return out;
        }
        // Another test process may be making it too: each writes its own, then renames.
        let part = out.with_extension(format!("part-{}", std::process::id()));
        let stripped = Command::new("strip")
            .arg("-o")
            .arg(&part)
            .arg(&server)
            .status();
        if !stripped.is_ok_and(|s| s.success()) {
            std::fs::copy(&server, &part).expect("copy the exec-server");
        }
        std::fs::rename(&part, &out).expect("rename the stripped exec-server");
        out
    })
    .clone()
}

/// `podman ARGS`, its output (stdin closed). It runs in the temporary directory: a
/// container's monitor (conmon) marks an OOM kill with a file `oom` in the directory it
/// started in, which would otherwise be the test package's.
pub fn podman(args: &[&str]) -> Output {
    Command::new("podman")
        .args(args)
        .current_dir(std::env::temp_dir())
        .stdin(Stdio::null())
        .output()
        .expect("podman runs")
}

/// Builds the image once per process; the reason when podman or the image is unusable.
fn image() -> Result<(), String> {
    static BUILT: OnceLock<Result<(), String>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            if Command::new("podman").arg("--version").output().is_err() {
                return Err("podman is not installed (apt-get install podman runc)".into());
            }
            let script = crate::repo_root().join(".ci/container-image");
            let built = Command::new("bash")
                .arg(&script)
                .output()
                .map_err(|e| format!("{}: {e}", script.display()))?;
            if !built.status.success() {
                return Err(format!(
                    "{} failed: {}",
                    script.display(),
                    String::from_utf8_lossy(&built.stderr)
                ));
            }
            Ok(())
        })
        .clone()
}

/// A running container of the test image, removed on drop.
#[derive(Debug)]
pub struct Container {
    pub name: String,
}

impl Container {
    /// Starts one with `options` added to `podman run` (mounts, `--pid host`); `None`
    /// (with a printed reason) when podman is missing, outside CI.
    pub fn start(options: &[&str]) -> Option<Container> {
        if let Err(reason) = image() {
            assert!(
                std::env::var("AGENTLOOP_CI").as_deref() != Ok("1"),
                "AGENTLOOP_CI=1 and {reason}"
            );
            eprintln!("skipped: {reason}");
            return None;
        }
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "agentloop-test-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let mut args = vec![
            "run",
            "-d",
            "--name",
            &name,
            "--runtime",
            "runc",
            "--ulimit",
            "nofile=1024:1024",
            "--ulimit",
            "nproc=1000:1000",
        ];
        args.extend_from_slice(options);
        args.push(IMAGE);
        let started = podman(&args);
        assert!(
            started.status.success(),
            "podman run failed: {}",
            String::from_utf8_lossy(&started.stderr)
        );
        Some(Container { name })
    }

    /// Starts one with `server` mounted read-only at [`SERVER_IN_CONTAINER`] and
    /// `options` added.
    pub fn with_server(server: &Path, options: &[&str]) -> Option<Container> {
        let mount = format!("{}:{SERVER_IN_CONTAINER}:ro", server.display());
        let mut all = vec!["-v", &mount];
        all.extend_from_slice(options);
        Container::start(&all)
    }

    /// `podman exec NAME sh -c SCRIPT`: its stdout (panics when it fails).
    pub fn sh(&self, script: &str) -> String {
        let ran = podman(&["exec", &self.name, "sh", "-c", script]);
        assert!(
            ran.status.success(),
            "`{script}` failed in {}: {}",
            self.name,
            String::from_utf8_lossy(&ran.stderr)
        );
        String::from_utf8_lossy(&ran.stdout).into_owned()
    }

    /// The container's live processes other than its init (`sleep infinity`), as `podman
    /// top` lists them: `pid args` lines (zombies, which its init never reaps, left out).
    pub fn processes(&self) -> Vec<String> {
        let top = podman(&["top", &self.name, "pid", "state", "args"]);
        assert!(
            top.status.success(),
            "podman top failed: {}",
            String::from_utf8_lossy(&top.stderr)
        );
        String::from_utf8_lossy(&top.stdout)
            .lines()
            .skip(1)
            .filter_map(|l| {
                let words: Vec<&str> = l.split_whitespace().collect();
                let (pid, state, args) = (words.first()?, words.get(1)?, words.get(2..)?);
                (!state.starts_with('Z')).then(|| format!("{pid} {}", args.join(" ")))
            })
            .filter(|l| !l.ends_with("sleep infinity"))
            .collect()
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = podman(&["rm", "-f", "-t", "0", &self.name]);
    }
}
