//! Reading validated tool arguments, resolving the paths they name, and the first look at
//! those paths (does it exist, is it a directory) that several tools share. Helpers for the
//! executors; they reach files only through the execution environment and never write.

use std::io;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::{ToolContext, ToolInput};

/// The JSON arguments of `input`, or an error for a freeform call to a JSON tool.
pub(crate) fn json(input: &ToolInput) -> Result<&Map<String, Value>, String> {
    match input {
        ToolInput::Json(map) => Ok(map),
        ToolInput::Freeform(_) => {
            Err("this tool takes JSON arguments, not free text; call it as a function".into())
        }
    }
}

/// A required string argument (validation has already checked that it is one).
pub(crate) fn required_str<'a>(
    args: &'a Map<String, Value>,
    name: &str,
) -> Result<&'a str, String> {
    args.get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| format!("the argument \"{name}\" is required and must be a string"))
}

/// An optional string argument.
pub(crate) fn optional_str<'a>(args: &'a Map<String, Value>, name: &str) -> Option<&'a str> {
    args.get(name).and_then(Value::as_str)
}

/// An optional non-negative integer argument (`3` or `3.0`).
pub(crate) fn optional_u64(args: &Map<String, Value>, name: &str) -> Option<u64> {
    let value = args.get(name)?;
    value.as_u64().or_else(|| {
        value
            .as_f64()
            .filter(|f| *f >= 0.0 && f.fract() == 0.0 && *f <= u64::MAX as f64)
            .map(|f| f as u64)
    })
}

/// An optional boolean argument.
pub(crate) fn optional_bool(args: &Map<String, Value>, name: &str) -> Option<bool> {
    args.get(name).and_then(Value::as_bool)
}

/// Resolves `raw` against the working directory, removing `.` and `..` lexically.
/// A path that ends up outside the working directory is an error unless the context
/// allows it.
pub(crate) fn resolve_path(ctx: &ToolContext<'_>, raw: &str) -> Result<PathBuf, String> {
    if raw.trim().is_empty() {
        return Err("the path is empty; give a file path relative to the working directory".into());
    }
    let working_dir = normalize(ctx.env.working_directory());
    let given = Path::new(raw);
    let full = if given.is_absolute() {
        normalize(given)
    } else {
        normalize(&working_dir.join(given))
    };
    if !ctx.allow_outside_working_dir && !full.starts_with(&working_dir) {
        return Err(format!(
            "{raw} is outside the working directory {}; use a path inside the working directory",
            working_dir.display()
        ));
    }
    Ok(full)
}

/// Where a search tool (`grep`, `glob`) looks: its optional `path` argument.
pub(crate) struct SearchRoot<'a> {
    /// The argument as given (`.` when absent), for messages.
    pub(crate) raw: &'a str,
    /// The resolved path.
    pub(crate) path: PathBuf,
    /// Whether it is a directory.
    pub(crate) is_dir: bool,
}

/// Resolves the optional `path` argument of a search tool (the working directory when
/// absent) and checks that it exists; `expected` says what it should be ("a directory")
/// in the error for a missing one.
pub(crate) fn search_root<'a>(
    ctx: &ToolContext<'_>,
    args: &'a Map<String, Value>,
    expected: &str,
) -> Result<SearchRoot<'a>, String> {
    let raw = optional_str(args, "path").unwrap_or(".");
    let path = resolve_path(ctx, raw)?;
    match ctx.env.stat(&path) {
        Ok(stat) => Ok(SearchRoot {
            raw,
            path,
            is_dir: stat.is_dir,
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err(format!(
            "{raw} does not exist; give {expected} inside the working directory"
        )),
        Err(e) => Err(format!("could not search {raw}: {e}")),
    }
}

/// The bytes of the file at `path` (`shown` in messages), `None` when nothing is there;
/// a directory is the error "`shown` is a directory; `on_directory`".
pub(crate) fn read_existing(
    ctx: &ToolContext<'_>,
    path: &Path,
    shown: &str,
    on_directory: &str,
) -> Result<Option<Vec<u8>>, String> {
    match ctx.env.stat(path) {
        Ok(stat) if stat.is_dir => Err(format!("{shown} is a directory; {on_directory}")),
        Ok(_) => ctx
            .env
            .read_bytes(path)
            .map(Some)
            .map_err(|e| format!("could not read {shown}: {e}")),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("could not read {shown}: {e}")),
    }
}

/// Like [`read_existing`], with the file's stat taken before the read (for a write that
/// must not replace a file changed in the meantime).
pub(crate) fn read_existing_with_stat(
    ctx: &ToolContext<'_>,
    path: &Path,
    shown: &str,
    on_directory: &str,
) -> Result<Option<(Vec<u8>, crate::exec::FileStat)>, String> {
    match ctx.env.stat(path) {
        Ok(stat) if stat.is_dir => Err(format!("{shown} is a directory; {on_directory}")),
        Ok(stat) => ctx
            .env
            .read_bytes(path)
            .map(|bytes| Some((bytes, stat)))
            .map_err(|e| format!("could not read {shown}: {e}")),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("could not read {shown}: {e}")),
    }
}

/// A path a search found, `relative` to a directory shown as `base` (from
/// [`display_path`]), as the model sees it.
pub(crate) fn join_display(base: &str, relative: &str) -> String {
    if base == "." {
        relative.to_string()
    } else {
        format!("{base}/{relative}")
    }
}

/// `path` relative to the working directory when it is inside it, else as is.
pub(crate) fn display_path(ctx: &ToolContext<'_>, path: &Path) -> String {
    let working_dir = normalize(ctx.env.working_directory());
    match path.strip_prefix(&working_dir) {
        Ok(relative) if relative.as_os_str().is_empty() => ".".to_string(),
        Ok(relative) => relative.display().to_string(),
        Err(_) => path.display().to_string(),
    }
}

pub(crate) use crate::exec::normalize;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_removes_dots_lexically() {
        assert_eq!(normalize(Path::new("/a/./b/../c")), PathBuf::from("/a/c"));
        assert_eq!(normalize(Path::new("/a/../../b")), PathBuf::from("/b"));
        assert_eq!(normalize(Path::new("a/../../b")), PathBuf::from("../b"));
        assert_eq!(normalize(Path::new("../../b")), PathBuf::from("../../b"));
    }
}
