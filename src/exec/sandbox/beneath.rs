//! Path resolution beneath a root directory that no symlink, `..` or concurrent rename can
//! escape: the file tools' containment. It never follows a path by name twice: every step
//! is an `*at()` call on a directory descriptor already held.
//!
//! Reads open the target with `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)` from the
//! root's descriptor where the kernel has it (Linux ≥ 5.6), and otherwise with the same
//! walk the writes use. Writes walk the path one component at a time from the root's
//! descriptor: `readlinkat` on each component, a symlink's target is spliced into the rest
//! of the path (an absolute target must lie under the root and restarts from it), `..`
//! pops the stack of held descriptors (never past the root), and a directory is entered
//! with `openat(O_NOFOLLOW | O_DIRECTORY)`, so a link swapped in after the `readlinkat`
//! makes the open fail instead of leading outside. The walk ends with a held descriptor of
//! the final directory and the final name; the write then goes to a temporary file created
//! in that directory with `O_EXCL` and `renameat` over the name, which replaces whatever
//! is there (a file, or a symlink swapped in meanwhile) without following it. The result
//! also carries the resolved path relative to the root, for the protected-path check.

use std::ffi::{CString, OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Component, Path, PathBuf};

/// Accepts or refuses a resolved path relative to the root.
pub(crate) type PathCheck<'a> = &'a dyn Fn(&Path) -> io::Result<()>;

/// How many symlinks one resolution may expand (the kernel's own limit).
const MAX_LINKS: usize = 40;

/// A path resolved beneath a root: the directory that holds it (a held descriptor) and the
/// final name in it.
pub(crate) struct Resolved {
    /// The directory holding the final entry.
    pub(crate) dir: OwnedFd,
    /// The final component; `None` when the path names the root itself.
    pub(crate) name: Option<OsString>,
    /// The resolved path relative to the root (symlinks expanded), for policy checks.
    pub(crate) relative: PathBuf,
}

/// The error for a path whose resolution leaves the root.
pub(crate) fn escape_error(shown: &Path, root: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!(
            "`{}` resolves outside `{}` (through a symlink or `..`); use a path inside it",
            shown.display(),
            root.display()
        ),
    )
}

fn cstring(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "a path component contains a NUL byte",
        )
    })
}

/// Opens a directory (`O_PATH`) by path: the root of a resolution.
pub(crate) fn open_root(root: &Path) -> io::Result<OwnedFd> {
    let c = cstring(root.as_os_str())?;
    // SAFETY: `c` is a valid NUL-terminated string; the returned descriptor is owned below.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    owned(fd)
}

fn owned(fd: RawFd) -> io::Result<OwnedFd> {
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by the kernel and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `readlinkat(dir, name)`: `Some(target)` for a symlink, `None` for anything else
/// (including nothing there).
fn read_link_at(dir: &OwnedFd, name: &CString) -> io::Result<Option<PathBuf>> {
    let mut buf = vec![0u8; libc::PATH_MAX as usize];
    // SAFETY: `buf` is writable for its length; `name` is NUL-terminated.
    let n = unsafe {
        libc::readlinkat(
            dir.as_raw_fd(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if n < 0 {
        let err = io::Error::last_os_error();
        return match err.raw_os_error() {
            Some(libc::EINVAL) | Some(libc::ENOENT) => Ok(None),
            _ => Err(err),
        };
    }
    buf.truncate(n as usize);
    Ok(Some(PathBuf::from(OsString::from_vec(buf))))
}

/// `openat(dir, name, O_PATH | O_DIRECTORY | O_NOFOLLOW)`.
fn open_dir_at(dir: &OwnedFd, name: &CString) -> io::Result<OwnedFd> {
    // SAFETY: `name` is NUL-terminated; the descriptor is owned by `owned`.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    owned(fd)
}

/// Walks `relative` beneath the directory `root` (an absolute, canonical path whose
/// descriptor is `root_fd`). A final symlink is followed when `follow_final`; missing
/// directories are created when `create_dirs` is given, after it accepted the relative
/// path of each directory to create. `shown` names the path in errors.
pub(crate) fn resolve(
    root: &Path,
    root_fd: OwnedFd,
    relative: &Path,
    follow_final: bool,
    create_dirs: Option<PathCheck<'_>>,
    shown: &Path,
) -> io::Result<Resolved> {
    let mut stack: Vec<(OwnedFd, OsString)> = vec![(root_fd, OsString::new())];
    let mut pending: Vec<OsString> = Vec::new(); // reversed: the next component is last
    push_components(&mut pending, relative, root, shown)?;
    let mut links = 0;
    let mut final_name = None;
    while let Some(name) = pending.pop() {
        if name == "." || name.is_empty() {
            continue;
        }
        if name == ".." {
            if stack.len() == 1 {
                if root == Path::new("/") {
                    continue; // `/..` is `/`, as for the kernel
                }
                return Err(escape_error(shown, root));
            }
            stack.pop();
            continue;
        }
        let is_last = pending.is_empty();
        let c = cstring(&name)?;
        let top = &stack[stack.len() - 1].0;
        if let Some(target) = read_link_at(top, &c)? {
            if is_last && !follow_final {
                final_name = Some(name);
                break;
            }
            links += 1;
            if links > MAX_LINKS {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("`{}`: too many levels of symbolic links", shown.display()),
                ));
            }
            if target.is_absolute() {
                stack.truncate(1);
            }
            push_components(&mut pending, &target, root, shown)?;
            continue;
        }
        if is_last {
            final_name = Some(name);
            break;
        }
        let next = match open_dir_at(top, &c) {
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) && create_dirs.is_some() => {
                if let Some(check) = create_dirs {
                    let mut new_dir: PathBuf =
                        stack.iter().skip(1).map(|(_, n)| n.as_os_str()).collect();
                    new_dir.push(&name);
                    check(&new_dir)?;
                }
                // SAFETY: `c` is NUL-terminated; mkdirat only creates a directory entry.
                let made = unsafe { libc::mkdirat(top.as_raw_fd(), c.as_ptr(), 0o777) };
                if made != 0 {
                    let err = io::Error::last_os_error();
                    if err.raw_os_error() != Some(libc::EEXIST) {
                        return Err(err);
                    }
                }
                open_dir_at(top, &c)?
            }
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                // A symlink appeared after `readlinkat`: someone is racing us.
                return Err(io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    format!(
                        "`{}` changed while it was being resolved (a symlink appeared); try again",
                        shown.display()
                    ),
                ));
            }
            other => other?,
        };
        stack.push((next, name));
    }
    let relative: PathBuf = stack
        .iter()
        .skip(1)
        .map(|(_, n)| n.as_os_str())
        .chain(final_name.as_deref())
        .collect();
    let (dir, _) = stack.pop().expect("the root is never popped");
    Ok(Resolved {
        dir,
        name: final_name,
        relative,
    })
}

/// Pushes the components of `path` (a path relative to the current directory of the walk,
/// or an absolute path that must lie under `root`) onto `pending`, first component last.
fn push_components(
    pending: &mut Vec<OsString>,
    path: &Path,
    root: &Path,
    shown: &Path,
) -> io::Result<()> {
    let path = if path.is_absolute() {
        path.strip_prefix(root)
            .map_err(|_| escape_error(shown, root))?
    } else {
        path
    };
    let mut parts = Vec::new();
    for component in path.components() {
        match component {
            Component::Normal(n) => parts.push(n.to_os_string()),
            Component::ParentDir => parts.push(OsString::from("..")),
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => return Err(escape_error(shown, root)),
        }
    }
    pending.extend(parts.into_iter().rev());
    Ok(())
}

/// Opens `relative` beneath `root` for reading (following symlinks that stay inside), as a
/// non-blocking regular-file-or-anything descriptor; the caller checks the type.
pub(crate) fn open_read(root: &Path, relative: &Path, shown: &Path) -> io::Result<File> {
    let flags = libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NONBLOCK | libc::O_NOCTTY;
    open_beneath(root, relative, shown, flags)
}

/// Opens `relative` beneath `root` as an `O_PATH` descriptor (for `fstat`, or to check
/// that a directory to list or search lies beneath the root); needs no read permission.
pub(crate) fn open_path(root: &Path, relative: &Path, shown: &Path) -> io::Result<File> {
    open_beneath(root, relative, shown, libc::O_PATH | libc::O_CLOEXEC)
}

fn open_beneath(
    root: &Path,
    relative: &Path,
    shown: &Path,
    flags: libc::c_int,
) -> io::Result<File> {
    let root_fd = open_root(root)?;
    match openat2(&root_fd, relative, flags) {
        Ok(file) => return Ok(file),
        Err(e) if e.raw_os_error() == Some(libc::EXDEV) => return Err(escape_error(shown, root)),
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOSYS) | Some(libc::EPERM)) => {}
        Err(e) => return Err(e),
    }
    // No openat2 (or a seccomp filter refusing it): the walk, then an open of the final
    // name that refuses a symlink swapped in after the walk looked.
    let resolved = resolve(root, root_fd, relative, true, None, shown)?;
    let name = resolved.name.unwrap_or_else(|| OsString::from("."));
    let c = cstring(&name)?;
    // SAFETY: `c` is NUL-terminated; the descriptor is owned by `owned`.
    let fd = unsafe {
        libc::openat(
            resolved.dir.as_raw_fd(),
            c.as_ptr(),
            flags | libc::O_NOFOLLOW,
        )
    };
    owned(fd).map(File::from)
}

/// `openat2(dir, path, { flags, resolve: BENEATH | NO_MAGICLINKS })`.
fn openat2(dir: &OwnedFd, path: &Path, flags: libc::c_int) -> io::Result<File> {
    let path = if path.as_os_str().is_empty() {
        Path::new(".")
    } else {
        path
    };
    let c = cstring(path.as_os_str())?;
    // SAFETY: an all-zero open_how is valid; the fields are set below.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = flags as u64;
    how.resolve = libc::RESOLVE_BENEATH | libc::RESOLVE_NO_MAGICLINKS;
    // SAFETY: `how` lives across the call and its size is passed; `c` is NUL-terminated.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir.as_raw_fd(),
            c.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    owned(fd as RawFd).map(File::from)
}

/// `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)`; `None` when nothing is there.
pub(crate) fn stat_at(dir: &OwnedFd, name: &OsStr) -> io::Result<Option<libc::stat>> {
    let c = cstring(name)?;
    // SAFETY: an all-zero stat is valid output space.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is NUL-terminated and `st` is writable.
    let r = unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            c.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if r != 0 {
        let err = io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::ENOENT) {
            return Ok(None);
        }
        return Err(err);
    }
    Ok(Some(st))
}

/// Creates `name` exclusively in `dir` for writing, with `mode`.
pub(crate) fn create_exclusive_at(dir: &OwnedFd, name: &OsStr, mode: u32) -> io::Result<File> {
    let c = cstring(name)?;
    // SAFETY: `c` is NUL-terminated; the descriptor is owned by `owned`.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            c.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            mode as libc::c_uint,
        )
    };
    owned(fd).map(File::from)
}

/// `renameat(dir, from, dir, to)`: replaces `to` (never following it).
pub(crate) fn rename_at(dir: &OwnedFd, from: &OsStr, to: &OsStr) -> io::Result<()> {
    let (from, to) = (cstring(from)?, cstring(to)?);
    // SAFETY: both names are NUL-terminated; renameat touches no memory of ours.
    let r = unsafe { libc::renameat(dir.as_raw_fd(), from.as_ptr(), dir.as_raw_fd(), to.as_ptr()) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `unlinkat(dir, name, 0)`.
pub(crate) fn unlink_at(dir: &OwnedFd, name: &OsStr) -> io::Result<()> {
    let c = cstring(name)?;
    // SAFETY: `c` is NUL-terminated.
    if unsafe { libc::unlinkat(dir.as_raw_fd(), c.as_ptr(), 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `fsync` of a directory descriptor opened with `O_PATH` (reopened read-only through it).
pub(crate) fn sync_dir(dir: &OwnedFd) {
    let dot = c".";
    // SAFETY: "." is NUL-terminated; the descriptor is closed by `owned`'s drop.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            dot.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if let Ok(fd) = owned(fd) {
        let _ = File::from(fd).sync_all();
    }
}
