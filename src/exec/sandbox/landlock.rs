//! Landlock through its three raw syscalls: the ABI probe (once per process) and a ruleset
//! built in the parent, before the clone, as a descriptor the child only has to enforce. It
//! never restricts the calling process itself.
//!
//! Constants are from the kernel UAPI header `include/uapi/linux/landlock.h`
//! (`LANDLOCK_ACCESS_FS_*`, `LANDLOCK_ACCESS_NET_*`, `LANDLOCK_SCOPE_*`,
//! `LANDLOCK_CREATE_RULESET_VERSION`, `LANDLOCK_RULE_PATH_BENEATH`, `LANDLOCK_RULE_NET_PORT`).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::OnceLock;

const CREATE_RULESET_VERSION: u32 = 1 << 0;
const RULE_PATH_BENEATH: libc::c_int = 1;

pub(crate) const FS_EXECUTE: u64 = 1 << 0;
const FS_WRITE_FILE: u64 = 1 << 1;
const FS_READ_FILE: u64 = 1 << 2;
const FS_READ_DIR: u64 = 1 << 3;
const FS_REMOVE_DIR: u64 = 1 << 4;
const FS_REMOVE_FILE: u64 = 1 << 5;
const FS_MAKE_CHAR: u64 = 1 << 6;
const FS_MAKE_DIR: u64 = 1 << 7;
const FS_MAKE_REG: u64 = 1 << 8;
const FS_MAKE_SOCK: u64 = 1 << 9;
const FS_MAKE_FIFO: u64 = 1 << 10;
const FS_MAKE_BLOCK: u64 = 1 << 11;
const FS_MAKE_SYM: u64 = 1 << 12;
/// ABI 2.
const FS_REFER: u64 = 1 << 13;
/// ABI 3.
const FS_TRUNCATE: u64 = 1 << 14;
/// ABI 5.
const FS_IOCTL_DEV: u64 = 1 << 15;
/// ABI 9 (Linux 7.1): resolving a path socket for `connect(2)` or `sendmsg(2)`, allowed
/// beneath a rule granting it or to a socket made in the same domain.
const FS_RESOLVE_UNIX: u64 = 1 << 16;
/// The first ABI with [`FS_RESOLVE_UNIX`].
pub(crate) const RESOLVE_UNIX_ABI: u32 = 9;
/// The first ABI with scopes (abstract UNIX sockets, signals).
pub(crate) const SCOPE_ABI: u32 = 6;
/// ABI 4.
const NET_BIND_TCP: u64 = 1 << 0;
const NET_CONNECT_TCP: u64 = 1 << 1;
/// ABI 6.
const SCOPE_ABSTRACT_UNIX_SOCKET: u64 = 1 << 0;
const SCOPE_SIGNAL: u64 = 1 << 1;

/// `struct landlock_ruleset_attr` (its size grew with the ABI; the kernel takes any size
/// it knows).
#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
    handled_access_net: u64,
    scoped: u64,
}

/// `struct landlock_path_beneath_attr` (packed in the UAPI header).
#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

/// The Landlock ABI of the running kernel (0 when absent or disabled), probed once.
pub(crate) fn abi() -> u32 {
    static ABI: OnceLock<u32> = OnceLock::new();
    *ABI.get_or_init(|| {
        // SAFETY: a NULL attribute with size 0 and the VERSION flag only queries the ABI.
        let v = unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                std::ptr::null::<RulesetAttr>(),
                0usize,
                CREATE_RULESET_VERSION,
            )
        };
        u32::try_from(v).unwrap_or(0)
    })
}

/// Every filesystem right `abi` knows.
fn fs_rights(abi: u32) -> u64 {
    let mut all = (FS_MAKE_SYM << 1) - 1;
    if abi >= 2 {
        all |= FS_REFER;
    }
    if abi >= 3 {
        all |= FS_TRUNCATE;
    }
    if abi >= 5 {
        all |= FS_IOCTL_DEV;
    }
    if abi >= RESOLVE_UNIX_ABI {
        all |= FS_RESOLVE_UNIX;
    }
    all
}

const READ: u64 = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR;

/// What a ruleset allows.
pub(crate) struct Rules<'a> {
    pub(crate) abi: u32,
    /// Directories (or files) with every right.
    pub(crate) writable: &'a [std::path::PathBuf],
    /// Whether TCP bind/connect are denied (ABI ≥ 4).
    pub(crate) deny_tcp: bool,
    /// Where path sockets may be connected to (ABI ≥ 9): the workspace roots.
    pub(crate) socket_roots: &'a [std::path::PathBuf],
    /// Sockets outside them the host allows.
    pub(crate) allowed_sockets: &'a [std::path::PathBuf],
}

/// Builds the ruleset: read and execute everywhere, everything in `writable`, write to the
/// tty-less device essentials; signals and abstract unix sockets scoped to the sandbox
/// (ABI ≥ 6). Returns the ruleset descriptor for `landlock_restrict_self` in the child.
pub(crate) fn build(rules: &Rules<'_>) -> io::Result<OwnedFd> {
    let abi = rules.abi;
    let handled = fs_rights(abi);
    let attr = RulesetAttr {
        handled_access_fs: handled,
        handled_access_net: if rules.deny_tcp && abi >= 4 {
            NET_BIND_TCP | NET_CONNECT_TCP
        } else {
            0
        },
        scoped: if abi >= SCOPE_ABI {
            SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
        } else {
            0
        },
    };
    let size = match abi {
        0..=3 => 8,
        4 | 5 => 16,
        _ => std::mem::size_of::<RulesetAttr>(),
    };
    // SAFETY: `attr` outlives the call and `size` does not exceed it.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            &attr as *const RulesetAttr,
            size,
            0u32,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel returned a new descriptor that nobody else owns.
    let ruleset = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    add(&ruleset, Path::new("/"), READ)?;
    let dev_write = FS_WRITE_FILE | FS_READ_FILE | (handled & (FS_TRUNCATE | FS_IOCTL_DEV));
    for dev in ["/dev/null", "/dev/zero", "/dev/full", "/dev/tty"] {
        // A missing device is no reason to fail.
        let _ = add(&ruleset, Path::new(dev), dev_write);
    }
    let _ = add(&ruleset, Path::new("/dev/pts"), dev_write);
    let write_all = handled
        & (FS_WRITE_FILE
            | FS_REMOVE_DIR
            | FS_REMOVE_FILE
            | FS_MAKE_CHAR
            | FS_MAKE_DIR
            | FS_MAKE_REG
            | FS_MAKE_SOCK
            | FS_MAKE_FIFO
            | FS_MAKE_BLOCK
            | FS_MAKE_SYM
            | FS_REFER
            | FS_TRUNCATE)
        | READ;
    for root in rules.writable {
        add(&ruleset, root, write_all)?;
    }
    if handled & FS_RESOLVE_UNIX != 0 {
        // Not on the temporary roots: a host's sockets there (ssh-agent, X11) stay out of
        // reach, while those a command makes there are its domain's own.
        for root in rules.socket_roots {
            add(&ruleset, root, FS_RESOLVE_UNIX)?;
        }
        for socket in rules.allowed_sockets {
            // An allow-listed socket that is not there yet has no rule.
            let _ = add(&ruleset, socket, FS_RESOLVE_UNIX);
        }
    }
    Ok(ruleset)
}

/// Adds a path-beneath rule; rights a file cannot have are dropped for a file.
fn add(ruleset: &OwnedFd, path: &Path, mut access: u64) -> io::Result<()> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in a sandbox path"))?;
    // SAFETY: `c` is NUL-terminated; the descriptor is closed by OwnedFd.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a new descriptor owned here.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    if !path.is_dir() {
        access &= FS_EXECUTE
            | FS_WRITE_FILE
            | FS_READ_FILE
            | FS_TRUNCATE
            | FS_IOCTL_DEV
            | FS_RESOLVE_UNIX;
    }
    let rule = PathBeneathAttr {
        allowed_access: access,
        parent_fd: fd.as_raw_fd(),
    };
    // SAFETY: `rule` outlives the call; both descriptors are open.
    let r = unsafe {
        libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset.as_raw_fd(),
            RULE_PATH_BENEATH,
            &rule as *const PathBeneathAttr,
            0u32,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolve_unix_is_handled_from_abi_9_only() {
        // Asking an older kernel for a right it does not know fails the whole ruleset.
        assert_eq!(fs_rights(8) & FS_RESOLVE_UNIX, 0);
        assert_ne!(fs_rights(RESOLVE_UNIX_ABI) & FS_RESOLVE_UNIX, 0);
        assert_eq!(fs_rights(RESOLVE_UNIX_ABI) & !fs_rights(8), FS_RESOLVE_UNIX);
    }
}
