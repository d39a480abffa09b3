//! Applying an [`Active`] sandbox to one command: everything is prepared in the parent
//! before the child is cloned ([`Prepared`]: the Landlock ruleset as a descriptor, the BPF
//! program, the paths to mount read-only as C strings), and the child, between the clone
//! and `exec` (`exec/process/launch.rs`), makes only raw syscalls (async-signal-safe: no
//! allocation, no lock).
//!
//! Order in the child: read-only bind mounts of the protected paths and `/dev/null` over
//! each host socket to hide (`sockets.rs`) in the private mount namespace the clone made
//! ([`Hook::clone_flags`]; before Landlock, which forbids mounting), `PR_SET_NO_NEW_PRIVS`,
//! every descriptor but stdio marked close-on-exec, seccomp, `landlock_restrict_self`.
//!
//! A background process is also cloned into a PID namespace of its own where the kernel
//! allows one (root, or an unprivileged user namespace): it is the namespace's init, so
//! that when it ends (stopped, its session over, or with the agent: it has the
//! parent-death signal) the kernel ends every process it started, also one that left its
//! process group with `setsid`.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::OnceLock;

use super::{Active, Network, landlock, seccomp, sockets};

/// What the child needs, ready before the clone.
pub(crate) struct Prepared {
    ruleset: Option<OwnedFd>,
    filter: Vec<libc::sock_filter>,
    /// Protected paths that exist, to bind-mount read-only.
    mounts: Vec<CString>,
    /// Host sockets to hide under `/dev/null`.
    sockets: Vec<CString>,
    network_off: bool,
    /// Namespace flags for the clone: a mount namespace, in a user namespace unless root
    /// (0: none).
    namespace_flags: libc::c_int,
    /// `uid_map`/`gid_map` lines for an unprivileged user namespace.
    maps: Option<(CString, CString)>,
}

/// The raw values the child uses: plain integers and pointers into a [`Prepared`] that
/// outlives the spawn.
#[derive(Clone, Copy)]
pub(crate) struct Hook {
    ruleset: libc::c_int,
    filter: *const libc::sock_filter,
    filter_len: u16,
    mounts: *const CString,
    mounts_len: usize,
    sockets: *const CString,
    sockets_len: usize,
    network_off: bool,
    namespace_flags: libc::c_int,
    uid_map: *const libc::c_char,
    gid_map: *const libc::c_char,
}

// SAFETY: the pointers are only read, and only in the cloned child, while the `Prepared`
// they point into is alive (the parent holds it until the launch returned).
unsafe impl Send for Hook {}
// SAFETY: as above; nothing is ever written through them.
unsafe impl Sync for Hook {}

impl Hook {
    /// The namespace flags the child must be cloned with (`CLONE_NEWNS` and maybe
    /// `CLONE_NEWNET`, with `CLONE_NEWUSER` unless root; 0 when none is needed).
    pub(crate) fn clone_flags(&self) -> libc::c_int {
        self.namespace_flags
    }

    /// Whether a refused connection is a sign of the sandbox: host sockets were hidden
    /// (they refuse connections) and the network is off (so no TCP port refused it).
    pub(crate) fn refusal_is_denial(&self) -> bool {
        self.sockets_len > 0 && self.network_off
    }
}

impl Prepared {
    /// Builds the ruleset and filter for `active`, and finds the host sockets to hide from
    /// a command whose environment is `env`; for a `background` process, a PID namespace
    /// too when one can be made.
    pub(crate) fn new(
        active: &Active,
        env: &BTreeMap<String, String>,
        background: bool,
    ) -> io::Result<Prepared> {
        let ruleset = if active.abi > 0 {
            // Above 2: the child puts its standard descriptors on 0–2 before it applies the
            // ruleset (a host with closed stdio would get it on one of them).
            Some(crate::exec::process::clone::above_stdio(landlock::build(
                &landlock::Rules {
                    abi: active.abi,
                    writable: &active.writable,
                    deny_tcp: active.sandbox.network == Network::Off,
                    socket_roots: &active.socket_roots,
                    allowed_sockets: &active.allowed_sockets,
                },
            )?)?)
        } else {
            None
        };
        let sockets = if active.hide_sockets {
            sockets::to_hide(&active.socket_roots, &active.allowed_sockets, env)
        } else {
            Vec::new()
        };
        let mut mounts = Vec::new();
        if active.mounts {
            for p in active.protected.iter().filter(|p| p.exists()) {
                if active.writable.iter().any(|r| p.starts_with(r)) {
                    mounts.push(CString::new(p.as_os_str().as_bytes()).map_err(|_| {
                        io::Error::new(io::ErrorKind::InvalidInput, "NUL in a protected path")
                    })?);
                }
            }
        }
        let network = if active.own_network {
            libc::CLONE_NEWNET
        } else {
            0
        };
        let pid_namespace = background && pid_namespace_available();
        let unshared = !mounts.is_empty() || !sockets.is_empty() || network != 0;
        let (namespace_flags, maps) = if !unshared && !pid_namespace {
            (0, None)
        } else {
            let (mut flags, maps) = namespace_flags();
            if !unshared {
                flags &= !libc::CLONE_NEWNS;
            }
            if pid_namespace {
                flags |= libc::CLONE_NEWPID;
            }
            (flags | network, maps)
        };
        Ok(Prepared {
            ruleset,
            filter: seccomp::program(active.sandbox.network == Network::Off),
            mounts,
            sockets,
            network_off: active.sandbox.network == Network::Off,
            namespace_flags,
            maps,
        })
    }

    /// The values for [`apply`].
    pub(crate) fn hook(&self) -> Hook {
        Hook {
            ruleset: self.ruleset.as_ref().map_or(-1, |fd| fd.as_raw_fd()),
            filter: self.filter.as_ptr(),
            filter_len: self.filter.len() as u16,
            mounts: self.mounts.as_ptr(),
            mounts_len: self.mounts.len(),
            sockets: self.sockets.as_ptr(),
            sockets_len: self.sockets.len(),
            network_off: self.network_off,
            namespace_flags: self.namespace_flags,
            uid_map: self
                .maps
                .as_ref()
                .map_or(std::ptr::null(), |m| m.0.as_ptr()),
            gid_map: self
                .maps
                .as_ref()
                .map_or(std::ptr::null(), |m| m.1.as_ptr()),
        }
    }
}

/// Root unshares a mount namespace alone; anyone else a user namespace with it, mapping
/// its own ids. So does a root without `CAP_SYS_ADMIN`: root in a podman or Docker
/// container, where a user namespace may still be made (podman's default seccomp profile
/// allows one) although a bare mount namespace is refused.
fn namespace_flags() -> (libc::c_int, Option<(CString, CString)>) {
    // SAFETY: getuid/getgid cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    if uid == 0 && root_unshares_alone() {
        return (libc::CLONE_NEWNS, None);
    }
    let maps = (
        CString::new(format!("{uid} {uid} 1")).unwrap_or_default(),
        CString::new(format!("{gid} {gid} 1")).unwrap_or_default(),
    );
    (libc::CLONE_NEWNS | libc::CLONE_NEWUSER, Some(maps))
}

/// Whether this root process can clone a child into a mount namespace without a user
/// namespace (probed once per process).
fn root_unshares_alone() -> bool {
    static ALONE: OnceLock<bool> = OnceLock::new();
    *ALONE.get_or_init(|| crate::exec::process::clone::namespaces_available(libc::CLONE_NEWNS))
}

/// Whether a child can be cloned into a PID namespace of its own (probed once per process).
pub(crate) fn pid_namespace_available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        let user = namespace_flags().0 & libc::CLONE_NEWUSER;
        crate::exec::process::clone::clone_succeeds(libc::CLONE_NEWPID | user)
    })
}

/// Whether a child can be cloned into a private mount namespace (probed once per process).
pub(crate) fn mount_namespace_available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE
        .get_or_init(|| crate::exec::process::clone::namespaces_available(namespace_flags().0))
}

/// Whether a child can be cloned into a network namespace of its own as well (probed once
/// per process).
pub(crate) fn network_namespace_available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        crate::exec::process::clone::namespaces_available(namespace_flags().0 | libc::CLONE_NEWNET)
    })
}

fn check(r: libc::c_long) -> io::Result<()> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Writes a NUL-terminated string to a `/proc/self` file (child side, raw syscalls only).
///
/// # Safety
/// `path` and `text` must be NUL-terminated strings alive for the call.
unsafe fn write_proc(path: &std::ffi::CStr, text: *const libc::c_char) -> io::Result<()> {
    // SAFETY: per the function's contract.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        check(fd as libc::c_long)?;
        let len = libc::strlen(text);
        let n = libc::write(fd, text.cast(), len);
        libc::close(fd);
        check(n as libc::c_long)
    }
}

/// Applies the sandbox in the cloned child, which the clone put in the namespaces
/// [`Hook::clone_flags`] names. Async-signal-safe: raw syscalls only.
///
/// # Safety
/// Call only in the child between the clone and `exec`, with a `hook` from a [`Prepared`]
/// still alive in the parent.
pub(crate) unsafe fn apply(hook: Hook) -> io::Result<()> {
    // SAFETY: per the function's contract every pointer is valid; the calls are syscalls.
    unsafe {
        if !hook.uid_map.is_null() {
            write_proc(c"/proc/self/setgroups", c"deny".as_ptr())?;
            write_proc(c"/proc/self/uid_map", hook.uid_map)?;
            write_proc(c"/proc/self/gid_map", hook.gid_map)?;
        }
        // Only in a mount namespace of its own: in the agent's, this would change the
        // agent's mounts.
        if hook.namespace_flags & libc::CLONE_NEWNS != 0 {
            let null = std::ptr::null();
            check(libc::mount(
                null,
                c"/".as_ptr(),
                null,
                libc::MS_REC | libc::MS_PRIVATE,
                null.cast(),
            ) as libc::c_long)?;
            for i in 0..hook.mounts_len {
                let p = (*hook.mounts.add(i)).as_ptr();
                check(
                    libc::mount(p, p, null, libc::MS_BIND | libc::MS_REC, null.cast())
                        as libc::c_long,
                )?;
                let flags = libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY;
                check(libc::mount(null, p, null, flags, null.cast()) as libc::c_long)?;
            }
            for i in 0..hook.sockets_len {
                let p = (*hook.sockets.add(i)).as_ptr();
                let r = libc::mount(c"/dev/null".as_ptr(), p, null, libc::MS_BIND, null.cast());
                match check(r as libc::c_long) {
                    // A socket removed since the scan has nothing left to hide.
                    Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
                    other => other?,
                }
            }
        }
        check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) as libc::c_long)?;
        // Descriptors a host leaked without close-on-exec must not reach the command
        // (a leaked inet socket would bypass the network rule).
        let _ = libc::syscall(
            libc::SYS_close_range,
            3u32,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        );
        let prog = libc::sock_fprog {
            len: hook.filter_len,
            filter: hook.filter.cast_mut(),
        };
        check(libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            0u32,
            &prog as *const libc::sock_fprog,
        ))?;
        if hook.ruleset >= 0 {
            check(libc::syscall(
                libc::SYS_landlock_restrict_self,
                hook.ruleset,
                0u32,
            ))?;
        }
    }
    Ok(())
}
