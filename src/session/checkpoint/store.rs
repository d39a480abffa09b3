//! The checkpoint store on disk: one directory per checkpoint with its manifest (JSON
//! Lines, append-only) and its pre-images, a size cap that drops the oldest checkpoints
//! first, and the private git index.
//!
//! ```text
//! <store>/index                       the private git index (never the repository's)
//! <store>/tmp/                        git's outputs and staged blobs during a rewind
//! <store>/<id>/manifest.jsonl         start, pre, post, user, commands, end, dropped lines
//! <store>/<id>/blobs/<n>              pre-images: copies, or hard links for big files
//! ```
//!
//! It never follows a symlink when it captures, never reads anything but a regular file
//! (opened non-blocking, so a FIFO swapped in cannot hang it), and never deletes outside
//! its directory.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Files this size and larger are kept as hard links (when no other link exists), smaller
/// ones as copies. A copy never shares an inode with a file someone may still write in
/// place, but it is not free: on ext4 the atomic write's `fsync` that follows also writes
/// out the copy's blocks (bench `checkpoint`: 1.6 ms per 100 KB copy, against under 0.2 ms
/// on tmpfs). The atomic write replaces the path's inode, so a link keeps the old content;
/// an environment that writes in place is caught (`recorder.rs`) and the pre-image reported
/// lost, never restored wrong.
const LINK_FROM: u64 = 64 << 10;

/// What identifies a file's state without reading it: a write, chmod or rename changes
/// the change time, which no user-space call can set back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct StatPrint {
    dev: u64,
    ino: u64,
    size: u64,
    mode: u32,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl StatPrint {
    pub(crate) fn of(meta: &fs::Metadata) -> StatPrint {
        StatPrint {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mode: meta.mode(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }

    /// The print of what is at `path` now (not following a symlink); `None` when nothing is.
    pub(crate) fn at(path: &Path) -> Option<StatPrint> {
        fs::symlink_metadata(path).ok().map(|m| StatPrint::of(&m))
    }

    /// The change time.
    pub(crate) fn ctime(&self) -> FsTime {
        self.ctime
    }

    pub(crate) fn same_inode(&self, other: &StatPrint) -> bool {
        self.dev == other.dev && self.ino == other.ino
    }
}

/// A file system time: seconds and nanoseconds since the epoch.
pub(crate) type FsTime = (i64, i64);

/// What a path was before the agent first changed it in a span.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(crate) enum PreState {
    /// A regular file; its content is blob `blob` of the checkpoint.
    File { blob: String, mode: u32, size: u64 },
    /// A symbolic link.
    Symlink { target: PathBuf },
    /// Nothing; the change created `created_dirs` (shallowest first).
    Absent { created_dirs: Vec<PathBuf> },
    /// Not kept, and why.
    Lost { why: String },
}

/// One line of a manifest.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case")]
pub(crate) enum Line {
    /// The checkpoint began: before input `input` (round 0) or its tool round `round`.
    Start {
        session: String,
        input: usize,
        round: usize,
        /// The file system's clock when the checkpoint began (the manifest's mtime).
        fs_time: FsTime,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        git_tree: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        git_ref: Option<String>,
    },
    /// A pre-image. `after_commands`: a command had run in the span before it was taken;
    /// `changed_at`: the path was not as the agent last left it, and changed then (its
    /// change time; the far future when it had been removed).
    Pre {
        path: PathBuf,
        state: PreState,
        #[serde(default)]
        after_commands: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        changed_at: Option<FsTime>,
    },
    /// What the agent (or a rewind) left at `path`: `None` when it removed it.
    Post {
        path: PathBuf,
        stat: Option<StatPrint>,
    },
    /// A rewind found the user's change at `path` and left it: a conflict from now on.
    User { path: PathBuf },
    /// The span ran a shell command.
    Commands,
    /// The input ended; the working tree's git tree then.
    End {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        git_tree: Option<String>,
    },
    /// The pre-images were dropped to stay within the cap.
    Dropped { bytes: u64 },
}

/// One checkpoint as read back.
#[derive(Debug, Clone, Default)]
pub(crate) struct Span {
    pub(crate) id: u64,
    pub(crate) input: usize,
    pub(crate) round: usize,
    pub(crate) fs_time: FsTime,
    pub(crate) git_start: Option<String>,
    pub(crate) git_ref: Option<String>,
    pub(crate) git_end: Option<String>,
    pub(crate) ended: bool,
    pub(crate) commands: bool,
    /// Pre-images in the order taken: path, state, taken after a command, when it was
    /// found changed.
    pub(crate) pres: Vec<(PathBuf, PreState, bool, Option<FsTime>)>,
    pub(crate) posts: Vec<(PathBuf, Option<StatPrint>)>,
    pub(crate) users: Vec<PathBuf>,
    pub(crate) dropped: bool,
    pub(crate) bytes: u64,
}

impl Span {
    fn apply(&mut self, line: Line) {
        match line {
            Line::Start {
                input,
                round,
                fs_time,
                git_tree,
                git_ref,
                ..
            } => {
                (self.input, self.round, self.fs_time) = (input, round, fs_time);
                (self.git_start, self.git_ref) = (git_tree, git_ref);
            }
            Line::Pre {
                path,
                state,
                after_commands,
                changed_at,
            } => {
                if let PreState::File { size, .. } = &state {
                    self.bytes += size;
                }
                self.pres.push((path, state, after_commands, changed_at));
            }
            Line::Post { path, stat } => self.posts.push((path, stat)),
            Line::User { path } => self.users.push(path),
            Line::Commands => self.commands = true,
            Line::End { git_tree } => {
                self.ended = true;
                if git_tree.is_some() {
                    self.git_end = git_tree;
                }
            }
            Line::Dropped { .. } => {
                self.dropped = true;
                self.bytes = 0;
            }
        }
    }

    /// The blob file of `blob` in this checkpoint.
    pub(crate) fn blob_path(store: &Path, id: u64, blob: &str) -> PathBuf {
        store.join(id.to_string()).join("blobs").join(blob)
    }
}

/// The store: its directory, the checkpoints in it and their bytes.
#[derive(Debug)]
pub(crate) struct Store {
    dir: PathBuf,
    max_bytes: u64,
    /// Checkpoints kept (not dropped), oldest first: id and bytes.
    kept: Vec<(u64, u64)>,
    /// Every checkpoint's id, oldest first (dropped ones too).
    all: Vec<u64>,
    bytes: u64,
    next_id: u64,
    /// The last state the agent left per path, over every checkpoint.
    last_post: HashMap<PathBuf, Option<StatPrint>>,
    /// Git refs of dropped checkpoints, to delete.
    pub(crate) dropped_refs: Vec<String>,
    /// What happened that the host should hear about (a dropped checkpoint).
    pub(crate) notices: Vec<String>,
}

/// The open manifest of the checkpoint being recorded.
#[derive(Debug)]
pub(crate) struct Current {
    pub(crate) id: u64,
    manifest: File,
    next_blob: u64,
    pub(crate) fs_time: FsTime,
}

impl Store {
    /// Opens (creating) the store at `dir`, reading what is in it.
    pub(crate) fn open(dir: &Path, max_bytes: u64) -> io::Result<Store> {
        fs::create_dir_all(dir)?;
        let mut store = Store {
            dir: dir.to_path_buf(),
            max_bytes,
            kept: Vec::new(),
            all: Vec::new(),
            bytes: 0,
            next_id: 1,
            last_post: HashMap::new(),
            dropped_refs: Vec::new(),
            notices: Vec::new(),
        };
        let mut ids: Vec<u64> = fs::read_dir(dir)?
            .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
            .collect();
        ids.sort_unstable();
        for id in ids {
            let span = store.read(id)?;
            for (path, stat) in &span.posts {
                store.last_post.insert(path.clone(), *stat);
            }
            store.all.push(id);
            if !span.dropped {
                store.kept.push((id, span.bytes));
                store.bytes += span.bytes;
            }
            store.next_id = id + 1;
        }
        Ok(store)
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// The checkpoint ids from `id` on, oldest first.
    pub(crate) fn ids_from(&self, id: u64) -> Vec<u64> {
        self.all.iter().copied().filter(|&i| i >= id).collect()
    }

    /// The latest checkpoint, if any.
    pub(crate) fn last_id(&self) -> Option<u64> {
        self.all.last().copied()
    }

    /// Reads checkpoint `id`'s manifest.
    pub(crate) fn read(&self, id: u64) -> io::Result<Span> {
        let text = fs::read(self.dir.join(id.to_string()).join("manifest.jsonl"))?;
        let mut span = Span {
            id,
            ..Span::default()
        };
        for line in text.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            // A line torn by a crash is the last one; the rest is whole.
            if let Ok(line) = serde_json::from_slice::<Line>(line) {
                span.apply(line);
            }
        }
        Ok(span)
    }

    /// Creates the next checkpoint's directory and manifest; the manifest's mtime is the
    /// file system's clock at the start.
    pub(crate) fn create(&mut self) -> io::Result<Current> {
        let id = self.next_id;
        let dir = self.dir.join(id.to_string());
        fs::create_dir_all(dir.join("blobs"))?;
        let manifest = OpenOptions::new()
            .append(true)
            .create(true)
            .open(dir.join("manifest.jsonl"))?;
        let meta = manifest.metadata()?;
        self.next_id = id + 1;
        self.all.push(id);
        self.kept.push((id, 0));
        Ok(Current {
            id,
            manifest,
            next_blob: 0,
            fs_time: (meta.mtime(), meta.mtime_nsec()),
        })
    }

    /// Appends `line` to the open manifest (one write of the whole line).
    pub(crate) fn append(&mut self, current: &mut Current, line: &Line) -> io::Result<()> {
        if let Line::Post { path, stat } = line {
            self.last_post.insert(path.clone(), *stat);
        }
        append_line(&mut current.manifest, line)
    }

    /// Appends `line` to checkpoint `id`'s manifest (a closed one).
    pub(crate) fn append_to(&mut self, id: u64, line: &Line) -> io::Result<()> {
        if let Line::Post { path, stat } = line {
            self.last_post.insert(path.clone(), *stat);
        }
        let mut file = OpenOptions::new()
            .append(true)
            .open(self.dir.join(id.to_string()).join("manifest.jsonl"))?;
        append_line(&mut file, line)
    }

    /// What the agent last left at `path`: `Some(None)` when it removed it, `None` when it
    /// never changed it.
    pub(crate) fn last_post(&self, path: &Path) -> Option<Option<StatPrint>> {
        self.last_post.get(path).copied()
    }

    /// Keeps the pre-image of the regular file at `path` (already `lstat`ed as `meta`) in
    /// the current checkpoint: its state, and the blob's inode when it is a hard link.
    pub(crate) fn keep(
        &mut self,
        current: &mut Current,
        path: &Path,
        meta: &fs::Metadata,
    ) -> (PreState, Option<StatPrint>) {
        let size = meta.size();
        if !self.make_room(size, current.id) {
            let why = format!(
                "its pre-image ({size} bytes) did not fit in the checkpoint store's cap of \
                 {} bytes",
                self.max_bytes
            );
            return (PreState::Lost { why }, None);
        }
        let blob = current.next_blob.to_string();
        let target = Span::blob_path(&self.dir, current.id, &blob);
        current.next_blob += 1;
        let linked = size >= LINK_FROM && meta.nlink() == 1 && fs::hard_link(path, &target).is_ok();
        let kept = if linked {
            Ok(())
        } else {
            copy_regular(path, &target)
        };
        if let Err(err) = kept {
            let _ = fs::remove_file(&target);
            let why = format!("its pre-image could not be kept: {err}");
            return (PreState::Lost { why }, None);
        }
        self.bytes += size;
        if let Some(entry) = self.kept.iter_mut().find(|(id, _)| *id == current.id) {
            entry.1 += size;
        }
        let state = PreState::File {
            blob,
            mode: meta.mode() & 0o7777,
            size,
        };
        (state, linked.then(|| StatPrint::of(meta)))
    }

    /// Forgets a blob kept for a change that did not happen.
    pub(crate) fn forget(&mut self, current: &Current, state: &PreState) {
        if let PreState::File { blob, size, .. } = state {
            let _ = fs::remove_file(Span::blob_path(&self.dir, current.id, blob));
            self.bytes = self.bytes.saturating_sub(*size);
            if let Some(entry) = self.kept.iter_mut().find(|(id, _)| *id == current.id) {
                entry.1 = entry.1.saturating_sub(*size);
            }
        }
    }

    /// Drops the oldest checkpoints (never `current`) until `size` more bytes fit; whether
    /// they fit.
    fn make_room(&mut self, size: u64, current: u64) -> bool {
        while self.bytes + size > self.max_bytes {
            let Some(&(oldest, bytes)) = self.kept.iter().find(|(id, _)| *id != current) else {
                return false;
            };
            self.drop_checkpoint(oldest, bytes);
        }
        true
    }

    fn drop_checkpoint(&mut self, id: u64, bytes: u64) {
        let dir = self.dir.join(id.to_string());
        let _ = fs::remove_dir_all(dir.join("blobs"));
        let _ = self.append_to(id, &Line::Dropped { bytes });
        if let Ok(span) = self.read(id) {
            self.dropped_refs.extend(span.git_ref);
            self.notices.push(format!(
                "the checkpoint before input {} was dropped ({bytes} bytes of pre-images) to \
                 keep the store within its cap of {} bytes; a rewind to it is no longer \
                 possible",
                span.input, self.max_bytes
            ));
        }
        self.kept.retain(|(kept, _)| *kept != id);
        self.bytes = self.bytes.saturating_sub(bytes);
    }

    /// Deletes the checkpoints from `id` on (a rewind undid them); their git refs are
    /// returned for deletion.
    pub(crate) fn discard_from(&mut self, id: u64) -> Vec<String> {
        let mut refs = Vec::new();
        for old in self.ids_from(id) {
            if let Ok(span) = self.read(old) {
                refs.extend(span.git_ref);
            }
            let _ = fs::remove_dir_all(self.dir.join(old.to_string()));
        }
        self.all.retain(|&i| i < id);
        let gone: u64 = self
            .kept
            .iter()
            .filter(|(i, _)| *i >= id)
            .map(|(_, b)| b)
            .sum();
        self.kept.retain(|(i, _)| *i < id);
        self.bytes = self.bytes.saturating_sub(gone);
        refs
    }

    /// A scratch directory for one rewind, emptied first.
    pub(crate) fn scratch(&self) -> io::Result<PathBuf> {
        let tmp = self.dir.join("tmp");
        let _ = fs::remove_dir_all(&tmp);
        fs::create_dir_all(&tmp)?;
        Ok(tmp)
    }
}

fn append_line(file: &mut File, line: &Line) -> io::Result<()> {
    let mut bytes = serde_json::to_vec(line).map_err(io::Error::other)?;
    bytes.push(b'\n');
    file.write_all(&bytes)
}

/// Copies the regular file at `from` to the new file `to`: opened without following a
/// symlink and without blocking, checked to be a regular file, then copied by the kernel
/// (`copy_file_range`: a reflink where the file system shares extents).
fn copy_regular(from: &Path, to: &Path) -> io::Result<()> {
    let mut source = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(from)?;
    if !source.metadata()?.is_file() {
        return Err(io::Error::other("not a regular file"));
    }
    let mut target = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(to)?;
    io::copy(&mut source, &mut target)?;
    Ok(())
}
