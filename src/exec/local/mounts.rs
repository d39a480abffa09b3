//! Which file systems lie at and below a directory, from the mount table
//! (`/proc/self/mountinfo`): whether file operations there finish in the time of local
//! storage, with no network file system or FUSE daemon that could leave them waiting
//! forever. A session runs its single-file tools without a helper thread only then.
//!
//! The table is read once per process, and again only after it changed: the kernel marks
//! the open file with `POLLPRI` on every mount and unmount, so a check between reads is one
//! `poll(2)` with no timeout. The one descriptor stays open for the process's life.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::sync::lock;

/// Whether a file system type is backed by local storage or memory, never waiting on a
/// network or on another process. Anything else (`nfs`, `cifs`, `fuse.*`, `9p`,
/// `virtiofs`, `ceph`, `autofs`, …) may.
fn is_local_type(kind: &[u8]) -> bool {
    matches!(
        kind,
        b"ext2"
            | b"ext3"
            | b"ext4"
            | b"xfs"
            | b"btrfs"
            | b"bcachefs"
            | b"zfs"
            | b"f2fs"
            | b"jfs"
            | b"reiserfs"
            | b"nilfs2"
            | b"tmpfs"
            | b"ramfs"
            | b"overlay"
            | b"squashfs"
            | b"erofs"
            | b"iso9660"
            | b"udf"
            | b"vfat"
            | b"msdos"
            | b"exfat"
            | b"ntfs"
            | b"ntfs3"
            | b"hfsplus"
    )
}

/// A table larger than this is not read (it would take milliseconds); its directories
/// count as not local.
const MAX_TABLE: u64 = 4 << 20;

/// The mount table as last read, and the open file that says when it changed.
struct Table {
    file: File,
    /// Mount points and whether their file system is local.
    mounts: Vec<(PathBuf, bool)>,
}

static TABLE: Mutex<Option<Table>> = Mutex::new(None);

/// Whether `dir` (absolute, symlinks resolved) and everything mounted below it are on local
/// file systems. `false` when the mount table cannot be read.
pub(crate) fn local_at_and_below(dir: &Path) -> bool {
    let mut table = lock(&TABLE);
    if table.is_none() {
        *table = Table::open().ok();
    }
    let Some(current) = table.as_mut() else {
        return false;
    };
    if current.changed() && current.reread().is_err() {
        *table = None;
        return false;
    }
    local_in(&current.mounts, dir)
}

/// Whether every mount that holds `dir` (at it or above it: a file system mounted over
/// another hides it, and the table's order is not a promise to rely on) and every mount
/// below it is local.
fn local_in(mounts: &[(PathBuf, bool)], dir: &Path) -> bool {
    mounts
        .iter()
        .filter(|(point, _)| dir.starts_with(point) || point.starts_with(dir))
        .all(|(_, local)| *local)
}

impl Table {
    fn open() -> io::Result<Table> {
        let file = File::open("/proc/self/mountinfo")?;
        let mut table = Table {
            file,
            mounts: Vec::new(),
        };
        table.reread()?;
        Ok(table)
    }

    fn reread(&mut self) -> io::Result<()> {
        self.file.seek(SeekFrom::Start(0))?;
        // Room for a typical table at once: one read and the one that says it ended.
        let mut text = Vec::with_capacity(16 * 1024);
        (&mut self.file)
            .take(MAX_TABLE + 1)
            .read_to_end(&mut text)?;
        if text.len() as u64 > MAX_TABLE {
            return Err(io::Error::other("the mount table is too large"));
        }
        self.mounts = parse(&text);
        Ok(())
    }

    /// Whether a mount or unmount happened since the last look (`POLLPRI`; `POLLERR` too).
    fn changed(&self) -> bool {
        let mut poll = libc::pollfd {
            fd: self.file.as_raw_fd(),
            events: libc::POLLPRI,
            revents: 0,
        };
        // SAFETY: one valid pollfd, a zero timeout.
        let ready = unsafe { libc::poll(&mut poll, 1, 0) };
        ready != 0 // an error counts as a change: the table is read again
    }
}

/// The mount points of a `mountinfo` text and whether each file system is local. A line
/// is `id parent major:minor root mount-point options [optional…] - type source super`;
/// the mount point escapes space, tab, newline and backslash as octal (`\040`).
fn parse(text: &[u8]) -> Vec<(PathBuf, bool)> {
    let mut mounts = Vec::new();
    for line in text.split(|&b| b == b'\n') {
        let mut fields = line.split(|&b| b == b' ');
        let Some(point) = fields.nth(4) else {
            continue;
        };
        // The optional fields end at a lone `-`; the type follows it.
        let Some(kind) = fields.skip_while(|f| *f != b"-").nth(1) else {
            continue;
        };
        mounts.push((
            PathBuf::from(std::ffi::OsString::from_vec(unescape(point))),
            is_local_type(kind),
        ));
    }
    mounts
}

/// `\NNN` (three octal digits) to its byte; anything else as it is.
fn unescape(field: &[u8]) -> Vec<u8> {
    if !field.contains(&b'\\') {
        return field.to_vec();
    }
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        let octal = field
            .get(i + 1..i + 4)
            .filter(|d| field[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal {
            Some(d) => {
                out.push((d[0] - b'0') << 6 | (d[1] - b'0') << 3 | (d[2] - b'0'));
                i += 4;
            }
            None => {
                out.push(field[i]);
                i += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
23 22 0:21 / /proc rw,nosuid shared:12 - proc proc rw
24 22 0:22 / /tmp rw shared:2 - tmpfs tmpfs rw
30 22 0:40 / /home/me/proj/data rw shared:9 - nfs4 server:/export rw,vers=4.2
31 22 0:41 / /home/me/other\\040dir rw - fuse.sshfs me@host:/ rw
32 22 8:2 / /home/me/work rw - xfs /dev/sdb1 rw
33 32 0:42 / /home/me/work/cache rw master:3 - overlay overlay rw,lowerdir=/a
";

    fn table() -> Vec<(PathBuf, bool)> {
        parse(TABLE.as_bytes())
    }

    #[test]
    fn a_mountinfo_line_gives_its_unescaped_mount_point_and_whether_its_type_is_local() {
        let mounts = table();
        assert_eq!(mounts.len(), 7);
        assert_eq!(mounts[0], (PathBuf::from("/"), true));
        assert_eq!(mounts[1], (PathBuf::from("/proc"), false));
        assert_eq!(mounts[3], (PathBuf::from("/home/me/proj/data"), false));
        assert_eq!(mounts[4], (PathBuf::from("/home/me/other dir"), false));
        assert_eq!(mounts[6], (PathBuf::from("/home/me/work/cache"), true));
        assert_eq!(unescape(br"a\134b\011c\0"), b"a\\b\tc\\0");
    }

    #[test]
    fn a_directory_is_local_only_when_its_mounts_and_every_mount_below_it_are() {
        let mounts = table();
        let local = |dir: &str| local_in(&mounts, Path::new(dir));
        assert!(local("/home/me/work"));
        assert!(local("/home/me/work/cache/deep"));
        assert!(local("/tmp/agent"));
        assert!(!local("/home/me/proj"), "an NFS mount below it");
        assert!(!local("/home/me/proj/data/sub"), "on NFS");
        assert!(!local("/home/me/other dir/x"), "on FUSE");
        assert!(!local("/"), "everything is below the root");
        assert!(!local("/proc/1"));
        // A path that only shares a prefix of characters with a mount point is not in it.
        assert!(local("/home/me/proj2"));
    }

    #[test]
    fn this_processs_table_is_read_and_its_temporary_directory_judged() {
        // The answer depends on the machine; the table must be readable and stable.
        let dir = std::fs::canonicalize(std::env::temp_dir()).unwrap();
        let first = local_at_and_below(&dir);
        assert_eq!(local_at_and_below(&dir), first);
        assert!(
            lock(&super::TABLE)
                .as_ref()
                .is_some_and(|t| !t.mounts.is_empty())
        );
    }
}
