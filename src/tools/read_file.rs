//! The `read_file` tool: a text file as numbered lines, or an image for multimodal models.
//! It reads only through the execution environment and never writes.
//!
//! Output format: one line per file line, `NNNNNN | text`, the 1-based line number
//! right-aligned to six columns (the width stays the same for files up to 999,999 lines, so
//! the text column lines up). Line endings and a BOM are not shown. A line longer than
//! 2,000 characters is cut, with a marker saying how much was left out. When the file goes
//! on past the lines shown, a last line says how to read the next part.
//!
//! Images (PNG, JPEG, GIF, WebP, recognised by their first bytes, not by the extension) up to
//! 5 MB come back as an image with a one-line description.

use crate::llm::tool_schema::tool_schema;
use std::io;
use std::path::Path;

use super::text::{self, BOM};
use super::{RegisteredTool, ToolContext, ToolDefinition, ToolInput, ToolOutput, args};
use crate::llm::ImageData;

/// The tool's name.
pub const NAME: &str = "read_file";

/// What the model reads about the tool.
pub const DESCRIPTION: &str = "\
Read a file from the filesystem. Text comes back with line numbers, one line per file line \
as `NNN | text`; the numbers are not part of the file. By default up to 2000 lines from the \
start are returned: use `offset` (1-based first line) and `limit` (number of lines) to read \
a specific part of a long file. Images (PNG, JPEG, GIF, WebP) are returned as images. Read \
a file before editing it.";

/// Lines returned when the call gives no `limit`.
pub const DEFAULT_LIMIT: usize = 2000;

/// Longest line shown in full, in characters.
pub const MAX_LINE_CHARS: usize = 2000;

/// Largest image returned, in bytes.
pub const MAX_IMAGE_BYTES: u64 = 5 * 1024 * 1024;

/// The tool's definition.
pub fn definition() -> ToolDefinition {
    ToolDefinition {
        name: NAME.to_string(),
        description: DESCRIPTION.to_string(),
        parameters: tool_schema!({
            "type": "object",
            "properties": {
                "file_path": {
                    "type": "string",
                    "description": "Path of the file, absolute or relative to the working directory."
                },
                "offset": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "1-based line number to start reading from."
                },
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "Maximum number of lines to read (default 2000)."
                }
            },
            "required": ["file_path"],
            "additionalProperties": false
        }),
        freeform: None,
    }
}

/// The `read_file` tool.
pub fn tool() -> RegisteredTool {
    RegisteredTool::new(definition(), execute).doing_bounded_file_io()
}

fn execute(input: ToolInput, ctx: &ToolContext<'_>) -> Result<ToolOutput, String> {
    let args = args::json(&input)?;
    let raw_path = args::required_str(args, "file_path")?;
    // Line counts past usize::MAX (on 32-bit targets) mean "to the end", not a wrapped number.
    let line_count = |n: u64| usize::try_from(n.max(1)).unwrap_or(usize::MAX);
    let offset = args::optional_u64(args, "offset").map(line_count);
    let limit = args::optional_u64(args, "limit").map_or(DEFAULT_LIMIT, line_count);
    let path = args::resolve_path(ctx, raw_path)?;
    let stat = match ctx.env.stat(&path) {
        Ok(stat) => stat,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(missing_file_message(ctx, &path, raw_path));
        }
        Err(e) => return Err(format!("could not read {raw_path}: {e}")),
    };
    if stat.is_dir {
        return Err(format!(
            "{raw_path} is a directory, not a file; use list_dir or glob to see what it contains"
        ));
    }
    if has_image_extension(&path) {
        if let Some(output) = read_image(ctx, &path, raw_path, stat.size)? {
            return Ok(output);
        }
    }
    let content = match ctx.env.read_file(&path, offset, Some(limit)) {
        Ok(content) => content,
        Err(e) if e.kind() == io::ErrorKind::InvalidData => {
            if let Some(output) = read_image(ctx, &path, raw_path, stat.size)? {
                return Ok(output);
            }
            return Err(not_text_message(ctx, &path, raw_path, stat.size));
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(missing_file_message(ctx, &path, raw_path));
        }
        Err(e) => return Err(format!("could not read {raw_path}: {e}")),
    };
    if content.size == 0 || (content.total_lines == 0 && content.text.is_empty()) {
        return Ok(ToolOutput::text(format!("{raw_path} is empty (0 bytes).")));
    }
    let first = offset.unwrap_or(1);
    if first > content.total_lines {
        return Err(format!(
            "offset {first} is past the end of {raw_path}, which has {} line{}; use an offset \
             from 1 to {}",
            content.total_lines,
            if content.total_lines == 1 { "" } else { "s" },
            content.total_lines
        ));
    }
    let body = content.text.strip_prefix(BOM).unwrap_or(&content.text);
    let file = text::TextFile::parse(body);
    let mut out = String::with_capacity(body.len() + file.lines.len() * 9);
    for (i, line) in file.lines.iter().take(limit).enumerate() {
        push_numbered_line(&mut out, first + i, line.text);
    }
    let shown = file.lines.len().min(limit);
    let last = first + shown.saturating_sub(1);
    if last < content.total_lines {
        out.push_str(&format!(
            "[Showing lines {first}-{last} of {}. To read more, call read_file with offset={}.]",
            content.total_lines,
            last + 1
        ));
    } else if out.ends_with('\n') {
        out.pop();
    }
    Ok(ToolOutput::text(out))
}

fn push_numbered_line(out: &mut String, number: usize, line: &str) {
    use std::fmt::Write as _;
    let _ = write!(out, "{number:>6} | ");
    // Byte length bounds the char count: only long lines need counting.
    if line.len() > MAX_LINE_CHARS {
        if let Some((cut, _)) = line.char_indices().nth(MAX_LINE_CHARS) {
            let rest = line[cut..].chars().count();
            out.push_str(&line[..cut]);
            let _ = writeln!(out, " [... line cut: {rest} more characters]");
            return;
        }
    }
    out.push_str(line);
    out.push('\n');
}

fn has_image_extension(path: &Path) -> bool {
    path.extension().and_then(|e| e.to_str()).is_some_and(|e| {
        matches!(
            e.to_ascii_lowercase().as_str(),
            "png" | "jpg" | "jpeg" | "gif" | "webp"
        )
    })
}

/// The image media type of `bytes` by their magic numbers.
pub(crate) fn image_media_type(bytes: &[u8]) -> Option<&'static str> {
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if bytes.starts_with(&[0xFF, 0xD8, 0xFF]) {
        Some("image/jpeg")
    } else if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
        Some("image/gif")
    } else if bytes.len() >= 12 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WEBP" {
        Some("image/webp")
    } else {
        None
    }
}

/// The file as an image, if its bytes are one; `None` for anything else.
fn read_image(
    ctx: &ToolContext<'_>,
    path: &Path,
    raw_path: &str,
    size: u64,
) -> Result<Option<ToolOutput>, String> {
    if size > MAX_IMAGE_BYTES {
        // Not read: a file this large is refused when its name says image, and otherwise
        // handled as text or binary.
        if has_image_extension(path) {
            return Err(format!(
                "{raw_path} is {size} bytes, more than the {MAX_IMAGE_BYTES} bytes read_file \
                 returns for an image; make a smaller copy with a shell command if you need to \
                 see it"
            ));
        }
        return Ok(None);
    }
    let bytes = ctx
        .env
        .read_bytes(path)
        .map_err(|e| format!("could not read {raw_path}: {e}"))?;
    Ok(image_media_type(&bytes).map(|media_type| ToolOutput {
        text: format!(
            "Image file {raw_path} ({media_type}, {} bytes).",
            bytes.len()
        ),
        image: Some(ImageData::from_bytes(bytes, media_type)),
    }))
}

fn not_text_message(ctx: &ToolContext<'_>, path: &Path, raw_path: &str, size: u64) -> String {
    let has_nul = ctx
        .env
        .read_bytes(path)
        .map(|bytes| bytes.iter().take(8192).any(|&b| b == 0))
        .unwrap_or(true);
    if has_nul {
        format!(
            "{raw_path} is a binary file ({size} bytes) and read_file shows text only; inspect \
             it with a shell command such as `file`, `xxd | head` or `strings` instead"
        )
    } else {
        format!(
            "{raw_path} ({size} bytes) is not valid UTF-8 text; inspect it with a shell \
             command such as `iconv` or `xxd | head` instead"
        )
    }
}

/// The message for a path that does not exist: names close to it in its directory, or a
/// note that the directory is missing too.
pub(crate) fn missing_file_message(ctx: &ToolContext<'_>, path: &Path, raw_path: &str) -> String {
    let mut message = format!("{raw_path} does not exist.");
    let (Some(parent), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str()))
    else {
        return message;
    };
    match ctx.env.list_directory(parent, 1) {
        Ok(entries) => {
            let stem = Path::new(name)
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or(name);
            let close: Vec<String> = entries
                .iter()
                .filter(|entry| {
                    let entry_stem = Path::new(&entry.name)
                        .file_stem()
                        .and_then(|s| s.to_str())
                        .unwrap_or(&entry.name);
                    text::names_are_close(&entry.name, name) || entry_stem == stem
                })
                .take(5)
                .map(|entry| args::display_path(ctx, &parent.join(&entry.name)))
                .collect();
            if !close.is_empty() {
                message.push_str(&format!(" Did you mean {}?", close.join(", ")));
            }
        }
        Err(_) => message.push_str(&format!(
            " Its directory {} does not exist either.",
            args::display_path(ctx, parent)
        )),
    }
    message.push_str(" Check the path, or find the file with glob.");
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_are_recognised_by_their_first_bytes() {
        assert_eq!(
            image_media_type(b"\x89PNG\r\n\x1a\n...."),
            Some("image/png")
        );
        assert_eq!(
            image_media_type(&[0xFF, 0xD8, 0xFF, 0xE0]),
            Some("image/jpeg")
        );
        assert_eq!(image_media_type(b"GIF89a.."), Some("image/gif"));
        assert_eq!(
            image_media_type(b"RIFF\x10\0\0\0WEBPVP8 "),
            Some("image/webp")
        );
        assert_eq!(image_media_type(b"PNG but text"), None);
    }

    #[test]
    fn long_lines_are_cut_with_a_marker() {
        let mut out = String::new();
        push_numbered_line(&mut out, 7, &"é".repeat(MAX_LINE_CHARS + 5));
        assert!(out.starts_with("     7 | éé"));
        assert!(
            out.ends_with(" [... line cut: 5 more characters]\n"),
            "{out}"
        );
        assert_eq!(out.chars().filter(|&c| c == 'é').count(), MAX_LINE_CHARS);
    }
}
