//! Container transports: `podman://`, `docker://` and `kubectl://` URLs and
//! [`Transport::container`], each the runtime's `exec -i` command line with the
//! exec-server as the program it runs. This file only builds argv and checks that the
//! runtime binary exists; it never starts the runtime (the connection does) and never
//! reads the container.

use std::collections::BTreeMap;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::bootstrap::{Bootstrap, DEFAULT_DIR};
use super::{DEFAULT_SERVER_COMMAND, Transport};
use crate::exec::process::child::{StdioChild, StdioChildSpec, stdout_readable};

/// How long a lost connection waits for the runtime to say what became of the target.
const STATUS_WAIT: Duration = Duration::from_secs(5);

/// Which container runtime a [`Transport::container`] goes through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ContainerKind {
    /// `podman exec -i`.
    Podman,
    /// `docker exec -i`.
    Docker,
    /// `kubectl exec -i` into a pod (and, optionally, one of its containers).
    Kubectl,
}

impl ContainerKind {
    /// The URL scheme and the runtime's default program name.
    pub fn name(self) -> &'static str {
        match self {
            ContainerKind::Podman => "podman",
            ContainerKind::Docker => "docker",
            ContainerKind::Kubectl => "kubectl",
        }
    }
}

/// What a container transport's `exec` is given beyond the target (all optional).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ContainerOptions {
    /// The runtime binary: a path, or a name looked up on `PATH` (the kind's name unless
    /// set).
    pub runtime: Option<PathBuf>,
    /// `--user` (podman, docker; kubectl has no such option).
    pub user: Option<String>,
    /// `--workdir` of the exec-server process (podman, docker). The session's working
    /// directory is the URL's path, set by the handshake, whatever this is.
    pub workdir: Option<String>,
    /// Variables set for the exec-server (`--env K=V`; `env K=V` before the server with
    /// kubectl). They appear on the runtime's command line: no secrets here.
    pub env: BTreeMap<String, String>,
    /// Arguments put after `exec -i` and its options, before the target.
    pub extra_args: Vec<String>,
    /// kubectl's namespace (`-n`).
    pub namespace: Option<String>,
    /// kubectl's container inside the pod (`-c`).
    pub container: Option<String>,
    /// An exec-server binary (static, built for the target) to copy in when the target
    /// has no copy of this same build: checksummed, placed in
    /// [`bootstrap_dir`](Self::bootstrap_dir), reused by later connections. The server
    /// command is then not used; the target needs `sh` and coreutils.
    pub bootstrap: Option<PathBuf>,
    /// Where the copy goes (`/tmp/agentloop` unless set); it must be writable.
    pub bootstrap_dir: Option<String>,
}

impl ContainerOptions {
    /// No options: the runtime from `PATH`, the container's default user and directory.
    pub fn new() -> ContainerOptions {
        ContainerOptions::default()
    }
}

impl Transport {
    /// `RUNTIME exec -i [options] TARGET SERVER…` for `kind` (see [`ContainerOptions`]);
    /// the server command is split on whitespace ([`DEFAULT_SERVER_COMMAND`] unless
    /// given). Fails, before anything runs, when the runtime binary is missing, the
    /// target or a name is empty or starts with `-`, or an option does not apply to
    /// the kind.
    pub fn container(
        kind: ContainerKind,
        target: &str,
        options: &ContainerOptions,
        server_command: Option<&str>,
    ) -> io::Result<Transport> {
        check_name(kind, "container", target)?;
        let bootstrap = options
            .bootstrap
            .as_deref()
            .map(Bootstrap::new)
            .transpose()?;
        let server: Vec<String> = match &bootstrap {
            Some(bootstrap) => {
                bootstrap.argv(options.bootstrap_dir.as_deref().unwrap_or(DEFAULT_DIR))
            }
            None => server_command
                .unwrap_or(DEFAULT_SERVER_COMMAND)
                .split_whitespace()
                .map(str::to_string)
                .collect(),
        };
        if server.is_empty() {
            return Err(invalid(kind, "the server command is empty".to_string()));
        }
        let runtime = options.runtime.as_deref().unwrap_or(Path::new(kind.name()));
        let mut argv = vec![
            runtime.to_string_lossy().into_owned(),
            "exec".into(),
            "-i".into(),
        ];
        let label = match kind {
            ContainerKind::Podman | ContainerKind::Docker => {
                for (flag, value) in [("--user", &options.user), ("--workdir", &options.workdir)] {
                    if let Some(value) = value {
                        argv.extend([flag.to_string(), value.clone()]);
                    }
                }
                for (key, value) in &options.env {
                    argv.extend(["--env".to_string(), format!("{key}={value}")]);
                }
                if options.namespace.is_some() || options.container.is_some() {
                    return Err(invalid(
                        kind,
                        "namespaces and pod containers are kubectl's".into(),
                    ));
                }
                argv.extend(options.extra_args.iter().cloned());
                argv.push(target.to_string());
                argv.extend(server);
                format!("{}://{target}", kind.name())
            }
            ContainerKind::Kubectl => {
                if options.user.is_some() || options.workdir.is_some() {
                    return Err(invalid(
                        kind,
                        "`kubectl exec` has no user or working-directory option (set them in \
                         the pod spec; the URL's path is the session's directory)"
                            .into(),
                    ));
                }
                let mut label = String::from("kubectl://");
                if let Some(namespace) = &options.namespace {
                    check_name(kind, "namespace", namespace)?;
                    argv.extend(["-n".to_string(), namespace.clone()]);
                    label.push_str(&format!("{namespace}/"));
                }
                label.push_str(target);
                if let Some(container) = &options.container {
                    check_name(kind, "container", container)?;
                    argv.extend(["-c".to_string(), container.clone()]);
                    label.push_str(&format!("/{container}"));
                }
                argv.extend(options.extra_args.iter().cloned());
                argv.extend([target.to_string(), "--".to_string()]);
                if !options.env.is_empty() {
                    argv.push("env".into());
                    argv.extend(options.env.iter().map(|(k, v)| format!("{k}={v}")));
                }
                argv.extend(server);
                label
            }
        };
        let mut transport = Transport::direct(argv).with_label(label);
        // Looked up on the PATH the transport process gets (this process's, filtered).
        let found = resolve_runtime(kind, runtime, transport.env.get("PATH"))?;
        let runtime = found.to_string_lossy().into_owned();
        transport.argv[0] = runtime.clone();
        transport.bootstrap = bootstrap;
        transport.status = Some(status_argv(kind, runtime, target, options));
        Ok(transport)
    }

    /// Parses `podman://CONTAINER[/dir]`, `docker://CONTAINER[/dir]` or
    /// `kubectl://[NAMESPACE/]POD[/CONTAINER][//dir]` (kubectl's names are separated by
    /// `/`, so its directory follows a `//`) into a container transport and the remote
    /// working directory (`None`: the server's own). `options`' namespace and container
    /// are replaced by the URL's.
    pub fn parse_container_url(
        url: &str,
        options: &ContainerOptions,
        server_command: Option<&str>,
    ) -> io::Result<(Transport, Option<PathBuf>)> {
        let bad = |why: &str| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("`{url}` is not a container URL: {why}"),
            )
        };
        let (kind, rest) = [
            ContainerKind::Podman,
            ContainerKind::Docker,
            ContainerKind::Kubectl,
        ]
        .into_iter()
        .find_map(|kind| Some((kind, url.strip_prefix(kind.name())?.strip_prefix("://")?)))
        .ok_or_else(|| bad("it must start with podman://, docker:// or kubectl://"))?;
        let mut options = options.clone();
        let (target, dir) = if kind == ContainerKind::Kubectl {
            let (names, dir) = match rest.split_once("//") {
                Some((names, dir)) => (names, Some(PathBuf::from(format!("/{dir}")))),
                None => (rest, None),
            };
            let names: Vec<&str> = names.split('/').collect();
            let (namespace, pod, container) = match names[..] {
                [pod] => (None, pod, None),
                [namespace, pod] => (Some(namespace), pod, None),
                [namespace, pod, container] => (Some(namespace), pod, Some(container)),
                _ => {
                    return Err(bad(
                        "more than NAMESPACE/POD/CONTAINER (a directory follows //)",
                    ));
                }
            };
            options.namespace = namespace.map(str::to_string);
            options.container = container.map(str::to_string);
            (pod, dir)
        } else {
            match rest.find('/') {
                Some(at) => (&rest[..at], Some(PathBuf::from(&rest[at..]))),
                None => (rest, None),
            }
        };
        if target.is_empty() {
            return Err(bad("it names no container"));
        }
        let transport = Transport::container(kind, target, &options, server_command)?;
        Ok((transport, dir))
    }
}

/// The runtime's command that prints the target's state: `exited`, `running (OOM-killed)`,
/// a pod's phase, or (on stderr) that there is no such container.
fn status_argv(
    kind: ContainerKind,
    runtime: String,
    target: &str,
    options: &ContainerOptions,
) -> Vec<String> {
    let mut argv = vec![runtime];
    match kind {
        ContainerKind::Podman | ContainerKind::Docker => argv.extend([
            "container".to_string(),
            "inspect".to_string(),
            "--format".to_string(),
            "{{.State.Status}}{{if .State.OOMKilled}} (OOM-killed){{end}}".to_string(),
            target.to_string(),
        ]),
        ContainerKind::Kubectl => {
            if let Some(namespace) = &options.namespace {
                argv.extend(["-n".to_string(), namespace.clone()]);
            }
            argv.extend([
                "get".to_string(),
                "pod".to_string(),
                target.to_string(),
                "-o".to_string(),
                "jsonpath={.status.phase}".to_string(),
            ]);
        }
    }
    argv
}

/// What the runtime says about the target after a lost connection (its output, else the
/// last line of its stderr), within [`STATUS_WAIT`]; `None` when it says nothing.
pub(super) fn ask_runtime(argv: &[String], env: &BTreeMap<String, String>) -> Option<String> {
    let (program, args) = argv.split_first()?;
    let spec = StdioChildSpec {
        program,
        args,
        cwd: None,
        env,
        name: "runtime-status",
    };
    let mut child = StdioChild::spawn(&spec).ok()?;
    let mut stdout = child.take_stdout()?;
    let deadline = Instant::now() + STATUS_WAIT;
    let (mut out, mut buf) = (Vec::new(), [0u8; 512]);
    while out.len() < 1024 {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        if !stdout_readable(&stdout, left.as_millis().clamp(1, 1000) as i32) {
            continue;
        }
        match stdout.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
    }
    let said = String::from_utf8_lossy(&out).trim().to_string();
    let said = if said.is_empty() {
        let tail = child.stderr_tail_after_exit(Duration::from_millis(500));
        tail.lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("")
            .trim()
            .to_string()
    } else {
        said
    };
    child.terminate(Duration::ZERO);
    (!said.is_empty()).then_some(said)
}

fn invalid(kind: ContainerKind, detail: String) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("{} transport: {detail}", kind.name()),
    )
}

/// A name that cannot be read as an option of the runtime.
fn check_name(kind: ContainerKind, what: &str, name: &str) -> io::Result<()> {
    if name.is_empty() || name.starts_with('-') || name.chars().any(char::is_whitespace) {
        return Err(invalid(kind, format!("`{name}` is not a {what} name")));
    }
    Ok(())
}

/// The runtime binary as a path: given with a `/` it must be an executable file;
/// otherwise it is looked up on `path` (the transport's `PATH`).
fn resolve_runtime(kind: ContainerKind, name: &Path, path: Option<&String>) -> io::Result<PathBuf> {
    let missing = |where_: String| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "{} transport: the runtime `{}` {where_}; install it or give its path",
                kind.name(),
                name.display()
            ),
        )
    };
    if name.components().count() > 1 || name.is_absolute() {
        return if executable(name) {
            Ok(name.to_path_buf())
        } else {
            Err(missing("is not an executable file".into()))
        };
    }
    std::env::split_paths(path.map(String::as_str).unwrap_or(""))
        .map(|dir| dir.join(name))
        .find(|candidate| executable(candidate))
        .ok_or_else(|| missing("is not on PATH".into()))
}

fn executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh() -> ContainerOptions {
        ContainerOptions {
            runtime: Some(PathBuf::from("/bin/sh")),
            ..ContainerOptions::default()
        }
    }

    #[test]
    fn urls_give_the_target_names_and_directory() {
        let (t, dir) =
            Transport::parse_container_url("podman://ctr/work/app", &sh(), None).unwrap();
        assert_eq!(dir.as_deref(), Some(Path::new("/work/app")));
        assert_eq!(t.label, "podman://ctr");
        assert_eq!(t.argv[1..], ["exec", "-i", "ctr", DEFAULT_SERVER_COMMAND]);

        let (t, dir) =
            Transport::parse_container_url("kubectl://ns/pod/tools//src", &sh(), Some("/opt/s -v"))
                .unwrap();
        assert_eq!(dir.as_deref(), Some(Path::new("/src")));
        assert_eq!(t.label, "kubectl://ns/pod/tools");
        assert_eq!(
            t.argv[1..],
            [
                "exec", "-i", "-n", "ns", "-c", "tools", "pod", "--", "/opt/s", "-v"
            ]
        );
        let (t, dir) = Transport::parse_container_url("kubectl://pod", &sh(), None).unwrap();
        assert_eq!((t.label.as_str(), dir), ("kubectl://pod", None));
    }

    #[test]
    fn bad_urls_and_options_say_why() {
        for (url, why) in [
            ("lxc://x", "podman://"),
            ("docker:///dir", "no container"),
            ("docker://-it/x", "not a container name"),
            ("kubectl://a/b/c/d", "NAMESPACE/POD/CONTAINER"),
            ("kubectl://ns/-x", "not a container name"),
        ] {
            let err = Transport::parse_container_url(url, &sh(), None).unwrap_err();
            assert!(err.to_string().contains(why), "{url}: {err}");
        }
        let mut user = sh();
        user.user = Some("1000".into());
        let err = Transport::container(ContainerKind::Kubectl, "p", &user, None).unwrap_err();
        assert!(err.to_string().contains("no user"), "{err}");
    }

    #[test]
    fn a_missing_runtime_is_an_error_naming_it() {
        let mut options = ContainerOptions::new();
        options.runtime = Some(PathBuf::from("/nonexistent/bin/docker"));
        let err = Transport::container(ContainerKind::Docker, "c", &options, None).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        assert!(err.to_string().contains("/nonexistent/bin/docker"), "{err}");
        options.runtime = Some(PathBuf::from("no-such-runtime-agentloop"));
        let err = Transport::container(ContainerKind::Podman, "c", &options, None).unwrap_err();
        assert!(err.to_string().contains("not on PATH"), "{err}");
    }
}
