//! grep and glob for [`LocalExecutionEnvironment`](super::LocalExecutionEnvironment):
//! ripgrep when installed, an in-process search otherwise, same results. (Being built in
//! part 3.)

#![allow(dead_code)] // wired into LocalExecutionEnvironment as part 3 lands

use std::io;
use std::path::Path;

use super::{GrepOptions, GrepOutput};

/// Searches file contents under `path` (a file or a directory, already resolved against
/// the working directory) for the regex `pattern`. Paths in the output are relative to
/// `path` when it is a directory.
pub(crate) fn grep(pattern: &str, path: &Path, options: &GrepOptions) -> io::Result<GrepOutput> {
    let _ = (pattern, path, options);
    Err(io::Error::other("grep is not implemented yet"))
}

/// Files under `path` matching `pattern`, newest first, skipping `.git` and ignored files.
pub(crate) fn glob(pattern: &str, path: &Path) -> io::Result<Vec<String>> {
    let _ = (pattern, path);
    Err(io::Error::other("glob is not implemented yet"))
}
