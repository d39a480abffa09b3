//! The editor's files: an [`ExecutionEnvironment`] layer that reads and writes text files
//! through the client (`fs/read_text_file`, `fs/write_text_file`) when it offers them, so
//! the model sees unsaved buffers and the editor sees every edit as it happens. Everything
//! else (metadata, listings, search, commands, binary files, removal) goes to the
//! environment below, unchanged.
//!
//! It writes only inside the working directory (with its symlinks resolved) and never under
//! a `.git` directory: the client writes wherever it is told, so this layer keeps the
//! bounds the local environment keeps for its own writes. In the editor, the buffer is the
//! file: a write replaces it without comparing it with what was read.

use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::rpc::Connection;
use crate::cancel::CancelToken;
use crate::exec::{
    CommandRequest, ExecResult, ExecutionEnvironment, FileContent, FileStat, OutputCallback,
};

/// Which of the client's file methods to use.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ClientFs {
    pub(crate) read: bool,
    pub(crate) write: bool,
}

/// Files through the client, the rest through `inner`.
pub(crate) struct ClientFiles {
    pub(crate) inner: Arc<dyn ExecutionEnvironment>,
    pub(crate) connection: Arc<Connection>,
    pub(crate) session_id: String,
    pub(crate) fs: ClientFs,
}

/// File types read as bytes from the disk, never as an editor's text.
const BINARY: [&str; 9] = [
    "png", "jpg", "jpeg", "gif", "webp", "bmp", "ico", "pdf", "zip",
];

impl ClientFiles {
    fn absolute(&self, path: &Path) -> PathBuf {
        crate::exec::normalize(&self.inner.working_directory().join(path))
    }

    fn binary(path: &Path) -> bool {
        path.extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| BINARY.contains(&e.to_ascii_lowercase().as_str()))
    }

    /// The whole text of `path` as the editor has it.
    fn read_text(&self, path: &Path) -> io::Result<String> {
        let params = json!({"sessionId": self.session_id, "path": self.absolute(path)});
        let result = self
            .connection
            .call(
                "fs/read_text_file",
                params,
                crate::cancel::current_cancelled,
            )
            .map_err(|e| client_error("read", path, &e.message))?;
        match result.get("content").and_then(Value::as_str) {
            Some(content) => Ok(content.to_string()),
            None => Err(client_error("read", path, "the answer holds no content")),
        }
    }

    /// Refuses a write the local environment would not make: outside the working
    /// directory (its symlinks resolved) or under `.git`.
    fn check_write(&self, path: &Path) -> io::Result<PathBuf> {
        let absolute = self.absolute(path);
        let root = canonical(self.inner.working_directory());
        let mut existing = absolute.as_path();
        while !existing.exists() {
            existing = existing.parent().unwrap_or(Path::new("/"));
        }
        let resolved =
            canonical(existing).join(absolute.strip_prefix(existing).unwrap_or(Path::new("")));
        let inside = resolved.starts_with(&root);
        let git = resolved
            .components()
            .any(|c| matches!(c, Component::Normal(name) if name == ".git"));
        if !inside || git {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "cannot write `{}`: the editor's files are written only inside the \
                     working directory and never under .git",
                    path.display()
                ),
            ));
        }
        Ok(absolute)
    }

    fn write_text(&self, path: &Path, content: &[u8]) -> io::Result<()> {
        let absolute = self.check_write(path)?;
        let Ok(text) = std::str::from_utf8(content) else {
            return self.inner.write_file(path, content);
        };
        let params = json!({"sessionId": self.session_id, "path": absolute, "content": text});
        self.connection
            .call("fs/write_text_file", params, || false)
            .map(|_| ())
            .map_err(|e| client_error("write", path, &e.message))
    }
}

fn canonical(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

fn client_error(action: &str, path: &Path, message: &str) -> io::Error {
    io::Error::other(format!(
        "the editor could not {action} `{}`: {message}",
        path.display()
    ))
}

/// The lines `offset` (1-based) to `offset + limit` of `text`, as the trait's `read_file`
/// returns them.
fn window(text: String, offset: Option<usize>, limit: Option<usize>) -> FileContent {
    let size = text.len() as u64;
    let total_lines = text.split_inclusive('\n').count();
    if offset.is_none() && limit.is_none() {
        return FileContent {
            text,
            size,
            total_lines,
        };
    }
    let start = offset.unwrap_or(1).saturating_sub(1);
    let lines = text.split_inclusive('\n').skip(start);
    let text: String = match limit {
        Some(limit) => lines.take(limit).collect(),
        None => lines.collect(),
    };
    FileContent {
        text,
        size,
        total_lines,
    }
}

impl ExecutionEnvironment for ClientFiles {
    fn read_file(
        &self,
        path: &Path,
        offset: Option<usize>,
        limit: Option<usize>,
    ) -> io::Result<FileContent> {
        if !self.fs.read || Self::binary(path) {
            return self.inner.read_file(path, offset, limit);
        }
        let text = self.read_text(path)?;
        if text.as_bytes().iter().take(8192).any(|&b| b == 0) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("`{}` is a binary file", path.display()),
            ));
        }
        Ok(window(text, offset, limit))
    }

    fn read_bytes(&self, path: &Path) -> io::Result<Vec<u8>> {
        if !self.fs.read || Self::binary(path) {
            return self.inner.read_bytes(path);
        }
        self.read_text(path).map(String::into_bytes)
    }

    fn write_file(&self, path: &Path, content: &[u8]) -> io::Result<()> {
        if !self.fs.write {
            return self.inner.write_file(path, content);
        }
        self.write_text(path, content)
    }

    fn write_file_if_unchanged(
        &self,
        path: &Path,
        content: &[u8],
        expected: &FileStat,
    ) -> io::Result<()> {
        if !self.fs.write {
            return self.inner.write_file_if_unchanged(path, content, expected);
        }
        // The editor's buffer is the file: what was read came from it a moment ago.
        self.write_text(path, content)
    }

    fn exec_command(
        &self,
        request: &CommandRequest,
        on_output: OutputCallback<'_>,
        cancel: &CancelToken,
    ) -> io::Result<ExecResult> {
        self.inner.exec_command(request, on_output, cancel)
    }

    /// A read waits for the editor: the session runs file tools on a helper thread it can
    /// give up on.
    fn files_are_local(&self) -> bool {
        false
    }

    fn max_command_timeout(&self) -> Duration {
        self.inner.max_command_timeout()
    }

    crate::forward_execution_environment!(self.inner =>
        remove_file, file_exists, start_background, stat, list_directory, grep, glob, initialize, warnings,
        cleanup, working_directory, platform, os_version);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_counts_the_whole_file() {
        let text = "a\nb\nc\n".to_string();
        let part = window(text.clone(), Some(2), Some(1));
        assert_eq!(
            (part.text.as_str(), part.total_lines, part.size),
            ("b\n", 3, 6)
        );
        assert_eq!(window(text, None, None).text, "a\nb\nc\n");
    }
}
