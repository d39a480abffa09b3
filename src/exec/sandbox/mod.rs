//! The OS sandbox of [`LocalExecutionEnvironment`](super::LocalExecutionEnvironment): the
//! policy a host chooses ([`Sandbox`]), what this kernel can enforce of it, and the same
//! policy for the file tools. It never weakens a policy silently: what cannot be enforced
//! is an error ([`Enforcement::Required`]) or a named warning ([`Enforcement::BestEffort`]).
//!
//! # What enforces what (Linux)
//!
//! | Rule | Commands | File tools |
//! |---|---|---|
//! | write only in writable roots, `/dev/null` & co. | Landlock (ABI ≥ 1) | resolution beneath a root (`beneath.rs`) |
//! | no symlink out of a root | Landlock checks the real target | `openat2(RESOLVE_BENEATH)` / descriptor walk |
//! | protected paths read-only | read-only bind mounts in a private mount namespace | refused by resolved path |
//! | network off | seccomp: `socket`/`socketpair` only `AF_UNIX`; Landlock TCP bind/connect (ABI ≥ 4) | – |
//! | no host UNIX socket outside the workspace roots (path sockets) | `/dev/null` bind-mounted over each in the private mount namespace (`sockets.rs`); Landlock `RESOLVE_UNIX` (ABI ≥ 9) | – |
//! | no host abstract UNIX socket | Landlock scope (ABI ≥ 6); below, with the network off, a network namespace of its own | – |
//! | no `ptrace`, `process_vm_*`, `io_uring_*` | seccomp (`EPERM`) | – |
//! | no privilege gain through setuid/file caps | `PR_SET_NO_NEW_PRIVS` | – |
//! | foreign syscall ABIs (i386, x32) | seccomp: other arch killed, x32 `EPERM` | – |
//!
//! Protected paths: Landlock has no deny rule, so a write grant on a root also covers its
//! `.git/config`. Commands therefore run in a private mount namespace (the child is cloned
//! with `CLONE_NEWNS`, which needs `CAP_SYS_ADMIN`: the agent runs as root, or the clone
//! also makes an unprivileged user namespace) where each protected path that EXISTS when the command starts is bind-mounted
//! read-only over itself: writes give `EROFS`, rename/unlink of the path itself `EBUSY`,
//! and Landlock forbids the sandboxed command to unmount it. A protected path that does not
//! exist yet (no `AGENTS.md` in the root) cannot be covered by a mount: a command may create
//! it (the file tools may not). Where no mount namespace can be made, protected paths are
//! not enforced for commands: `Required` fails, `BestEffort` warns naming them.
//!
//! Host UNIX sockets (`/var/run/docker.sock`, ssh-agent, D-Bus, X11, tmux): a command
//! cannot `connect(2)` to one outside the workspace roots — the working directory and
//! `writable_roots`; not the temporary directories, where ssh-agent, X11 and tmux keep
//! theirs — unless the host allow-lists it ([`Sandbox::with_allowed_socket`]). The
//! workspace's sockets keep working, and so does one a command makes in `/tmp` for as long
//! as that command runs (a later command, like any host process, finds it hidden). Path sockets
//! are hidden by a mount each (see `sockets.rs` for how they are found and why a mount);
//! abstract ones are scoped by Landlock. What the kernel cannot enforce is named the same
//! way as above.

// unsafe: openat2, descriptor walks and renameat are raw syscalls.
#[allow(unsafe_code)]
pub(crate) mod beneath;
// unsafe: Landlock has no libc wrapper, only raw syscalls.
#[allow(unsafe_code)]
mod landlock;
pub(crate) mod per_call;
mod seccomp;
mod sockets;
// unsafe: the cloned child applies mounts, prctl, seccomp and Landlock by raw syscalls.
#[allow(unsafe_code)]
pub(crate) mod spawn;

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// What commands and the file tools may write (the file tools' reads stay limited to the
/// working directory as before).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SandboxPolicy {
    /// Nothing may be written (but `/dev/null` and the like).
    ReadOnly,
    /// The working directory and `writable_roots` may be written, except protected paths;
    /// `include_tmp` adds `/tmp` and `$TMPDIR`.
    WorkspaceWrite {
        /// More directories (absolute) that may be written.
        writable_roots: Vec<PathBuf>,
        /// Whether `/tmp` and `$TMPDIR` may be written.
        include_tmp: bool,
    },
    /// No sandbox: commands and tools may do anything the agent's user may.
    FullAccess,
}

impl SandboxPolicy {
    /// `WorkspaceWrite` of the working directory alone, with `/tmp`.
    pub fn workspace_write() -> SandboxPolicy {
        SandboxPolicy::WorkspaceWrite {
            writable_roots: Vec::new(),
            include_tmp: true,
        }
    }

    /// The CLI's spelling: `read-only`, `workspace-write`, `full-access`.
    pub fn name(&self) -> &'static str {
        match self {
            SandboxPolicy::ReadOnly => "read-only",
            SandboxPolicy::WorkspaceWrite { .. } => "workspace-write",
            SandboxPolicy::FullAccess => "full-access",
        }
    }
}

/// Whether commands may use the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Network {
    /// Only `AF_UNIX` sockets.
    Off,
    /// Any socket.
    On,
}

/// What happens when the kernel cannot enforce part of the policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Enforcement {
    /// Fail closed: building the environment is a [`SandboxError`].
    Required,
    /// Run with what can be enforced; [`LocalExecutionEnvironment::sandbox_warnings`]
    /// (and a `WARNING` event at session start) name what is not.
    ///
    /// [`LocalExecutionEnvironment::sandbox_warnings`]: super::LocalExecutionEnvironment::sandbox_warnings
    BestEffort,
}

/// A sandbox for [`LocalExecutionEnvironment::with_sandbox`](super::LocalExecutionEnvironment::with_sandbox),
/// or for an exec-server to apply on its side
/// ([`RemoteExecutionEnvironment::connect_sandboxed`](super::remote::RemoteExecutionEnvironment::connect_sandboxed)).
///
/// The library's default is no sandbox ([`SandboxPolicy::FullAccess`]): an embedding host
/// knows its roots and its network needs, and a default that silently broke its builds
/// (network off) or its writes would be worse than an explicit choice. The CLI defaults to
/// `WorkspaceWrite` with the network off, and so does
/// [`LocalExecutionEnvironment::sandboxed`](super::LocalExecutionEnvironment::sandboxed), the
/// README quick start's choice.
///
/// ```
/// use agentloop::exec::{Enforcement, Network, Sandbox, SandboxPolicy};
///
/// let sandbox = Sandbox::new(SandboxPolicy::workspace_write())
///     .with_network(Network::Off)
///     .with_enforcement(Enforcement::BestEffort)
///     .with_protected_path("secrets.toml");
/// assert_eq!(sandbox.policy().name(), "workspace-write");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sandbox {
    // Crate-visible for the exec-server protocol, which carries a sandbox whole.
    pub(crate) policy: SandboxPolicy,
    pub(crate) network: Network,
    pub(crate) enforcement: Enforcement,
    pub(crate) extra_protected: Vec<PathBuf>,
    pub(crate) assumed_abi: Option<u32>,
    pub(crate) allowed_sockets: Vec<PathBuf>,
}

impl Sandbox {
    /// `policy` with the network off (on for `FullAccess`), enforcement `Required`.
    pub fn new(policy: SandboxPolicy) -> Sandbox {
        let network = if policy == SandboxPolicy::FullAccess {
            Network::On
        } else {
            Network::Off
        };
        Sandbox {
            policy,
            network,
            enforcement: Enforcement::Required,
            extra_protected: Vec::new(),
            assumed_abi: None,
            allowed_sockets: Vec::new(),
        }
    }

    /// Sets the network rule.
    pub fn with_network(mut self, network: Network) -> Sandbox {
        self.network = network;
        self
    }

    /// Sets what happens when the kernel cannot enforce the policy.
    pub fn with_enforcement(mut self, enforcement: Enforcement) -> Sandbox {
        self.enforcement = enforcement;
        self
    }

    /// Adds a protected path (relative to the working directory, or absolute) besides the
    /// defaults `.git` (and its resolved `gitdir:`), `AGENTS.md`, `CLAUDE.md`, `GEMINI.md`.
    pub fn with_protected_path(mut self, path: impl Into<PathBuf>) -> Sandbox {
        self.extra_protected.push(path.into());
        self
    }

    /// Lets commands reach the UNIX socket at `path` (absolute, or relative to the working
    /// directory; links resolved when the sandbox is made) although it lies outside the
    /// workspace roots: a build that needs the host's Docker, say. Every other host socket
    /// stays hidden. Abstract sockets have no allow-list.
    pub fn with_allowed_socket(mut self, path: impl Into<PathBuf>) -> Sandbox {
        self.allowed_sockets.push(path.into());
        self
    }

    /// Treats the kernel as offering at most Landlock ABI `abi` (0: no Landlock), whatever
    /// the probe says: for hosts that must not depend on newer kernel features, and to see
    /// what `Required` and `BestEffort` do on an older kernel.
    pub fn with_landlock_abi_at_most(mut self, abi: u32) -> Sandbox {
        self.assumed_abi = Some(abi);
        self
    }

    /// The policy.
    pub fn policy(&self) -> &SandboxPolicy {
        &self.policy
    }

    /// The network rule.
    pub fn network(&self) -> Network {
        self.network
    }

    /// The enforcement mode.
    pub fn enforcement(&self) -> Enforcement {
        self.enforcement
    }

    /// Whether this sandbox is at least as strict as `parent` (for subagents, which may
    /// only narrow their parent's policy).
    pub fn narrows(&self, parent: &Sandbox) -> bool {
        let policy_ok = match (&parent.policy, &self.policy) {
            (SandboxPolicy::FullAccess, _) => true,
            (_, SandboxPolicy::ReadOnly) => true,
            (
                SandboxPolicy::WorkspaceWrite {
                    writable_roots: p,
                    include_tmp: pt,
                },
                SandboxPolicy::WorkspaceWrite {
                    writable_roots: c,
                    include_tmp: ct,
                },
            ) => (*pt || !*ct) && c.iter().all(|r| p.iter().any(|q| r.starts_with(q))),
            _ => false,
        };
        let network_ok = parent.network == Network::On || self.network == Network::Off;
        let sockets_ok = parent.policy == SandboxPolicy::FullAccess
            || self
                .allowed_sockets
                .iter()
                .all(|s| parent.allowed_sockets.contains(s));
        policy_ok && network_ok && sockets_ok
    }
}

impl fmt::Display for Sandbox {
    /// `workspace-write, network off` — the CLI's header.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let network = match self.network {
            Network::Off => "off",
            Network::On => "on",
        };
        write!(f, "{}, network {network}", self.policy.name())
    }
}

/// The kernel cannot enforce a [`Sandbox`] whose enforcement is `Required`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SandboxError {
    /// What is not enforced, one item per rule.
    pub missing: Vec<String>,
}

impl fmt::Display for SandboxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the sandbox cannot be enforced on this system: {}",
            self.missing.join("; ")
        )
    }
}

impl std::error::Error for SandboxError {}

impl From<SandboxError> for io::Error {
    fn from(e: SandboxError) -> io::Error {
        io::Error::new(io::ErrorKind::Unsupported, e.to_string())
    }
}

/// A [`Sandbox`] resolved for one working directory: canonical roots, protected paths,
/// and what this kernel enforces.
#[derive(Debug, Clone)]
pub(crate) struct Active {
    pub(crate) sandbox: Sandbox,
    /// Canonical writable roots (the working directory first); empty for `ReadOnly`.
    pub(crate) writable: Vec<PathBuf>,
    /// Canonical absolute protected paths (existing or not).
    pub(crate) protected: Vec<PathBuf>,
    /// Where host sockets stay reachable: the canonical workspace roots (the working
    /// directory and `writable_roots`; not the temporary directories).
    pub(crate) socket_roots: Vec<PathBuf>,
    /// The allow-listed sockets, canonical.
    pub(crate) allowed_sockets: Vec<PathBuf>,
    /// Whether host path sockets are hidden by mounts in each command's namespace.
    pub(crate) hide_sockets: bool,
    /// Whether each command gets a network namespace of its own (abstract sockets, below
    /// Landlock ABI 6, with the network off).
    pub(crate) own_network: bool,
    /// The Landlock ABI used (0: none).
    pub(crate) abi: u32,
    /// Whether protected paths get read-only bind mounts.
    pub(crate) mounts: bool,
    /// What is not enforced (empty when everything is).
    pub(crate) warnings: Vec<String>,
}

/// The protected names inside every writable root.
const PROTECTED_NAMES: [&str; 4] = [".git", "AGENTS.md", "CLAUDE.md", "GEMINI.md"];

impl Active {
    /// Resolves `sandbox` for `working_dir`; `Err` when enforcement is `Required` and the
    /// kernel falls short.
    /// `tmpdir` is the `TMPDIR` commands get.
    pub(crate) fn new(
        sandbox: Sandbox,
        working_dir: &Path,
        tmpdir: Option<&Path>,
    ) -> Result<Active, SandboxError> {
        let canonical = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| super::normalize(p));
        let wd = canonical(working_dir);
        let mut writable = Vec::new();
        let mut protected = Vec::new();
        let mut socket_roots = Vec::new();
        if let SandboxPolicy::WorkspaceWrite {
            writable_roots,
            include_tmp,
        } = &sandbox.policy
        {
            writable.push(wd.clone());
            writable.extend(writable_roots.iter().map(|r| canonical(&wd.join(r))));
            // Protected names live in the workspace roots, not in the temporary directories.
            for root in &writable {
                for name in PROTECTED_NAMES {
                    protected.push(root.join(name));
                }
                if let Some(gitdir) = gitdir_target(&root.join(".git")) {
                    protected.push(canonical(&gitdir));
                }
            }
            // So do reachable host sockets: a shared temporary directory holds the
            // ssh-agent's, X11's and tmux's.
            socket_roots.clone_from(&writable);
            if *include_tmp {
                writable.push(canonical(Path::new("/tmp")));
                writable.extend(tmpdir.map(canonical));
            }
            writable.sort();
            writable.dedup();
        }
        protected.extend(sandbox.extra_protected.iter().map(|p| {
            let p = wd.join(p);
            canonical(&p)
        }));
        let allowed_sockets = sandbox
            .allowed_sockets
            .iter()
            .map(|p| canonical(&wd.join(p)))
            .collect();
        let probed = landlock::abi();
        let abi = sandbox.assumed_abi.map_or(probed, |a| a.min(probed));
        let gaps = if sandbox.policy == SandboxPolicy::FullAccess {
            Gaps::default()
        } else {
            Gaps::of(&sandbox, abi, &protected, !writable.is_empty())
        };
        // The TCP layer is only a second layer, and abstract sockets with the network on are
        // as reachable as local TCP ports: their absence alone is no failure.
        let fatal: Vec<String> = gaps
            .warnings
            .iter()
            .filter(|w| !w.starts_with("Landlock ABI"))
            .cloned()
            .collect();
        if sandbox.enforcement == Enforcement::Required && !fatal.is_empty() {
            return Err(SandboxError { missing: fatal });
        }
        Ok(Active {
            sandbox,
            writable,
            protected,
            socket_roots,
            allowed_sockets,
            hide_sockets: gaps.hide_sockets,
            own_network: gaps.own_network,
            abi,
            mounts: gaps.mounts,
            warnings: gaps.warnings,
        })
    }

    /// Whether commands run under Landlock and seccomp at all.
    pub(crate) fn restricts(&self) -> bool {
        self.sandbox.policy != SandboxPolicy::FullAccess
    }

    /// The writable root `path` (absolute, lexically normal) lies under, and the rest of
    /// it; an error naming the roots when none.
    pub(crate) fn writable_root_of<'a>(
        &'a self,
        path: &'a Path,
    ) -> io::Result<(&'a Path, &'a Path)> {
        self.writable
            .iter()
            .filter_map(|root| Some((root.as_path(), path.strip_prefix(root).ok()?)))
            .max_by_key(|(root, _)| root.as_os_str().len())
            .ok_or_else(|| {
                let roots = self
                    .writable
                    .iter()
                    .map(|r| r.display().to_string())
                    .collect::<Vec<_>>();
                io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    if roots.is_empty() {
                        format!(
                            "cannot write `{}`: the sandbox is read-only",
                            path.display()
                        )
                    } else {
                        format!(
                            "cannot write `{}`: outside the writable roots: {}",
                            path.display(),
                            roots.join(", ")
                        )
                    },
                )
            })
    }

    /// Refuses `root/relative` when it is or lies under a protected path.
    pub(crate) fn check_protected(&self, root: &Path, relative: &Path) -> io::Result<()> {
        let full = root.join(relative);
        match self.protected.iter().find(|p| full.starts_with(p)) {
            Some(p) => Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "cannot write `{}`: `{}` is protected (read-only) under the sandbox",
                    full.display(),
                    p.display()
                ),
            )),
            None => Ok(()),
        }
    }
}

/// How a restricting sandbox is enforced on this kernel, and what it cannot enforce.
#[derive(Default)]
struct Gaps {
    /// Protected paths get read-only bind mounts.
    mounts: bool,
    /// Host path sockets are hidden by mounts.
    hide_sockets: bool,
    /// Commands get a network namespace of their own.
    own_network: bool,
    /// What is not enforced, one sentence each.
    warnings: Vec<String>,
}

impl Gaps {
    fn of(sandbox: &Sandbox, abi: u32, protected: &[PathBuf], writes: bool) -> Gaps {
        let mut gaps = Gaps::default();
        let warn = |gaps: &mut Gaps, warning: String| gaps.warnings.push(warning);
        if abi == 0 {
            warn(
                &mut gaps,
                "Landlock is not available: commands can write anywhere the agent's user \
                 can (and a root command can unmount what hides protected paths and host \
                 sockets)"
                    .to_string(),
            );
        } else if sandbox.network == Network::Off && abi < 4 {
            warn(
                &mut gaps,
                format!("Landlock ABI {abi} < 4: TCP is blocked by seccomp alone"),
            );
        }
        let namespace = spawn::mount_namespace_available();
        let existing: Vec<&PathBuf> = protected.iter().filter(|p| p.exists()).collect();
        if !existing.is_empty() && writes {
            gaps.mounts = namespace;
            if !namespace {
                let names: Vec<String> = existing.iter().map(|p| p.display().to_string()).collect();
                warn(
                    &mut gaps,
                    format!(
                        "no mount namespace: protected paths are writable by commands: {}",
                        names.join(", ")
                    ),
                );
            }
        }
        gaps.hide_sockets = namespace;
        if !namespace && abi < landlock::RESOLVE_UNIX_ABI {
            warn(
                &mut gaps,
                format!(
                    "no mount namespace and Landlock ABI {abi} < {}: commands can connect to \
                     the UNIX sockets of host processes outside the workspace (Docker, \
                     ssh-agent, D-Bus)",
                    landlock::RESOLVE_UNIX_ABI
                ),
            );
        }
        if abi < landlock::SCOPE_ABI {
            if sandbox.network == Network::Off {
                gaps.own_network = spawn::network_namespace_available();
                if !gaps.own_network {
                    warn(
                        &mut gaps,
                        format!(
                            "no network namespace and Landlock ABI {abi} < 6: commands can \
                             connect to the abstract UNIX sockets of host processes (D-Bus, X11)"
                        ),
                    );
                }
            } else {
                warn(
                    &mut gaps,
                    format!(
                        "Landlock ABI {abi} < 6: with the network on, commands can connect to \
                         the abstract UNIX sockets of host processes (D-Bus, X11), as to local \
                         TCP ports"
                    ),
                );
            }
        }
        gaps
    }
}

/// Where a `.git` file (a worktree or submodule) points: `gitdir: PATH`.
fn gitdir_target(dot_git: &Path) -> Option<PathBuf> {
    let meta = std::fs::symlink_metadata(dot_git).ok()?;
    if !meta.is_file() || meta.len() > 4096 {
        return None;
    }
    let text = std::fs::read_to_string(dot_git).ok()?;
    let target = text.lines().next()?.strip_prefix("gitdir:")?.trim();
    let parent = dot_git.parent()?;
    Some(parent.join(target))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ww(roots: &[&str], tmp: bool) -> Sandbox {
        Sandbox::new(SandboxPolicy::WorkspaceWrite {
            writable_roots: roots.iter().map(PathBuf::from).collect(),
            include_tmp: tmp,
        })
    }

    #[test]
    fn a_child_policy_narrows_only_when_it_allows_no_more() {
        let parent = ww(&["/a"], false);
        assert!(ww(&["/a/b"], false).narrows(&parent));
        assert!(Sandbox::new(SandboxPolicy::ReadOnly).narrows(&parent));
        assert!(!ww(&["/c"], false).narrows(&parent));
        assert!(!ww(&[], true).narrows(&parent), "adding /tmp widens");
        assert!(!Sandbox::new(SandboxPolicy::FullAccess).narrows(&parent));
        assert!(!ww(&[], false).with_network(Network::On).narrows(&parent));
        let open = Sandbox::new(SandboxPolicy::FullAccess);
        assert!(ww(&[], true).with_network(Network::On).narrows(&open));
    }

    #[test]
    fn the_display_is_the_cli_header() {
        assert_eq!(
            Sandbox::new(SandboxPolicy::workspace_write()).to_string(),
            "workspace-write, network off"
        );
        assert_eq!(
            Sandbox::new(SandboxPolicy::FullAccess).to_string(),
            "full-access, network on"
        );
    }

    #[test]
    fn protected_paths_are_refused_by_resolved_path() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(".git"),
            "gitdir: ../elsewhere/.git/worktrees/x\n",
        )
        .unwrap();
        let active = Active::new(ww(&[], false), dir.path(), None).unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        assert!(active.check_protected(&root, Path::new(".git")).is_err());
        assert!(
            active
                .check_protected(&root, Path::new("AGENTS.md"))
                .is_err()
        );
        assert!(
            active
                .check_protected(&root, Path::new("src/AGENTS.md"))
                .is_ok()
        );
        assert!(
            active
                .check_protected(&root, Path::new(".github/x"))
                .is_ok()
        );
        let gitdir = root.parent().unwrap().join("elsewhere/.git/worktrees/x");
        assert!(active.protected.contains(&gitdir), "{:?}", active.protected);
    }

    #[test]
    fn every_seccomp_jump_lands_inside_the_program() {
        for network_off in [false, true] {
            let program = seccomp::program(network_off);
            assert!(program.len() < 64);
            for (i, insn) in program.iter().enumerate() {
                if insn.code & 0x07 == 0x05 {
                    let far = i + 1 + usize::from(insn.jt.max(insn.jf));
                    assert!(far < program.len(), "jump at {i} leaves the program");
                }
            }
            let last = program.last().unwrap();
            assert_eq!((last.code, last.k), (0x06, 0x7fff_0000), "ends in allow");
        }
    }
}
