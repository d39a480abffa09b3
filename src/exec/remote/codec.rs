//! The exec-server protocol's values (see `protocol.rs`) to and from the crate's types:
//! command results, file contents, metadata, listings, search results and env policies.
//! Pure conversions; it never performs I/O.

use std::time::{Duration, UNIX_EPOCH};

use serde_json::{Map, Value, json};

use crate::base64::{decode as decode_base64, encode as encode_base64};
use crate::exec::{
    DirEntry, EnvInherit, EnvPolicy, ExecResult, FileContent, FileStat, GrepMatch, GrepOutput,
};

/// A missing or mistyped field.
pub(crate) type Invalid = String;

pub(crate) fn str_field<'a>(params: &'a Value, name: &str) -> Result<&'a str, Invalid> {
    params
        .get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| format!("`{name}` must be a string"))
}

pub(crate) fn u64_field(params: &Value, name: &str) -> Result<u64, Invalid> {
    params
        .get(name)
        .and_then(Value::as_u64)
        .ok_or_else(|| format!("`{name}` must be a non-negative integer"))
}

pub(crate) fn opt_u64(params: &Value, name: &str) -> Result<Option<u64>, Invalid> {
    match params.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .map(Some)
            .ok_or_else(|| format!("`{name}` must be a non-negative integer")),
    }
}

pub(crate) fn bool_field(params: &Value, name: &str) -> bool {
    params.get(name).and_then(Value::as_bool).unwrap_or(false)
}

pub(crate) fn bytes_field(params: &Value, name: &str) -> Result<Vec<u8>, Invalid> {
    decode_base64(str_field(params, name)?).ok_or_else(|| format!("`{name}` is not base64"))
}

pub(crate) fn exec_result_to_json(r: &ExecResult) -> Value {
    json!({
        "stdout": r.stdout,
        "stderr": r.stderr,
        "exit_code": r.exit_code,
        "signal": r.signal,
        "timed_out": r.timed_out,
        "cancelled": r.cancelled,
        "duration_us": r.duration.as_micros() as u64,
        "stdout_bytes": r.stdout_bytes,
        "stderr_bytes": r.stderr_bytes,
        "capture_truncated": r.capture_truncated,
        "escaped_processes": r.escaped_processes,
        "sandbox_denied": r.sandbox_denied,
    })
}

fn opt_i32(v: &Value, name: &str) -> Option<i32> {
    v.get(name)
        .and_then(Value::as_i64)
        .and_then(|n| i32::try_from(n).ok())
}

pub(crate) fn exec_result_from_json(v: &Value) -> Result<ExecResult, Invalid> {
    Ok(ExecResult {
        stdout: str_field(v, "stdout")?.to_string(),
        stderr: str_field(v, "stderr")?.to_string(),
        exit_code: opt_i32(v, "exit_code"),
        signal: opt_i32(v, "signal"),
        timed_out: bool_field(v, "timed_out"),
        cancelled: bool_field(v, "cancelled"),
        duration: Duration::from_micros(u64_field(v, "duration_us")?),
        stdout_bytes: u64_field(v, "stdout_bytes")?,
        stderr_bytes: u64_field(v, "stderr_bytes")?,
        capture_truncated: bool_field(v, "capture_truncated"),
        escaped_processes: bool_field(v, "escaped_processes"),
        sandbox_denied: bool_field(v, "sandbox_denied"),
    })
}

pub(crate) fn file_content_to_json(c: &FileContent) -> Value {
    json!({"text": c.text, "size": c.size, "total_lines": c.total_lines})
}

pub(crate) fn file_content_from_json(v: &Value) -> Result<FileContent, Invalid> {
    Ok(FileContent {
        text: str_field(v, "text")?.to_string(),
        size: u64_field(v, "size")?,
        total_lines: u64_field(v, "total_lines")? as usize,
    })
}

pub(crate) fn stat_to_json(s: &FileStat) -> Value {
    let modified = s
        .modified
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map(|d| d.as_millis() as u64);
    json!({"is_dir": s.is_dir, "size": s.size, "modified_ms": modified})
}

pub(crate) fn stat_from_json(v: &Value) -> Result<FileStat, Invalid> {
    Ok(FileStat {
        is_dir: bool_field(v, "is_dir"),
        size: u64_field(v, "size")?,
        modified: opt_u64(v, "modified_ms")?.map(|ms| UNIX_EPOCH + Duration::from_millis(ms)),
    })
}

pub(crate) fn entries_to_json(entries: &[DirEntry]) -> Value {
    let list: Vec<Value> = entries
        .iter()
        .map(|e| json!({"name": e.name, "is_dir": e.is_dir, "size": e.size}))
        .collect();
    json!({ "entries": list })
}

pub(crate) fn entries_from_json(v: &Value) -> Result<Vec<DirEntry>, Invalid> {
    let list = v
        .get("entries")
        .and_then(Value::as_array)
        .ok_or("`entries` must be a list")?;
    list.iter()
        .map(|e| {
            Ok(DirEntry {
                name: str_field(e, "name")?.to_string(),
                is_dir: bool_field(e, "is_dir"),
                size: opt_u64(e, "size")?,
            })
        })
        .collect()
}

pub(crate) fn grep_to_json(g: &GrepOutput) -> Value {
    let matches: Vec<Value> = g
        .matches
        .iter()
        .map(|m| json!({"path": m.path, "line_number": m.line_number, "line": m.line}))
        .collect();
    let cut_short: Vec<Value> = g
        .cut_short
        .iter()
        .map(|(path, what)| json!({"path": path, "what": what}))
        .collect();
    json!({"matches": matches, "truncated": g.truncated, "cut_short": cut_short})
}

pub(crate) fn grep_from_json(v: &Value) -> Result<GrepOutput, Invalid> {
    let list = v
        .get("matches")
        .and_then(Value::as_array)
        .ok_or("`matches` must be a list")?;
    let matches = list
        .iter()
        .map(|m| {
            Ok(GrepMatch {
                path: str_field(m, "path")?.to_string(),
                line_number: u64_field(m, "line_number")?,
                line: str_field(m, "line")?.to_string(),
            })
        })
        .collect::<Result<_, Invalid>>()?;
    // Added within version 1: a server without it reports nothing cut short.
    let mut cut_short = Vec::new();
    if let Some(list) = v.get("cut_short").filter(|c| !c.is_null()) {
        let list = list.as_array().ok_or("`cut_short` must be a list")?;
        cut_short = list
            .iter()
            .map(|c| {
                Ok((
                    str_field(c, "path")?.to_string(),
                    str_field(c, "what")?.to_string(),
                ))
            })
            .collect::<Result<_, Invalid>>()?;
    }
    Ok(GrepOutput {
        matches,
        truncated: bool_field(v, "truncated"),
        cut_short,
    })
}

pub(crate) fn strings_from_json(v: &Value, name: &str) -> Result<Vec<String>, Invalid> {
    v.get(name)
        .and_then(Value::as_array)
        .ok_or_else(|| format!("`{name}` must be a list of strings"))?
        .iter()
        .map(|s| {
            s.as_str()
                .map(str::to_string)
                .ok_or_else(|| format!("`{name}` must be a list of strings"))
        })
        .collect()
}

pub(crate) fn policy_to_json(p: &EnvPolicy) -> Value {
    let inherit = match p.inherit {
        EnvInherit::CoreOnly => "core",
        EnvInherit::Nothing => "nothing",
        _ => "all",
    };
    json!({"inherit": inherit, "include": p.include, "exclude": p.exclude})
}

pub(crate) fn policy_from_json(v: &Value) -> Result<EnvPolicy, Invalid> {
    let mut policy = match str_field(v, "inherit")? {
        "all" => EnvPolicy::inherit_all(),
        "core" => EnvPolicy::core_only(),
        "nothing" => EnvPolicy::nothing(),
        other => return Err(format!("unknown env inherit mode `{other}`")),
    };
    policy.include = strings_from_json(v, "include")?;
    policy.exclude = strings_from_json(v, "exclude")?;
    Ok(policy)
}

pub(crate) fn env_map_from_json(
    v: Option<&Value>,
) -> Result<std::collections::BTreeMap<String, String>, Invalid> {
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return Ok(Default::default());
    };
    let object: &Map<String, Value> = v.as_object().ok_or("`env` must be an object")?;
    object
        .iter()
        .map(|(k, v)| {
            v.as_str()
                .map(|v| (k.clone(), v.to_string()))
                .ok_or_else(|| "`env` values must be strings".to_string())
        })
        .collect()
}

pub(crate) fn bytes_to_json(bytes: &[u8]) -> Value {
    json!({ "data": encode_base64(bytes) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grep_results_carry_what_was_not_searched_whole_and_older_servers_parse() {
        let mut output = GrepOutput::default();
        output.matches.push(GrepMatch {
            path: "a.rs".to_string(),
            line_number: 3,
            line: "x".to_string(),
        });
        output.cut_short.push((
            "big.log".to_string(),
            "line 1 is longer than 8 MiB".to_string(),
        ));
        let json = grep_to_json(&output);
        assert_eq!(grep_from_json(&json).unwrap(), output);
        // A server of the same version that predates the field.
        let older = json!({"matches": [], "truncated": false});
        assert!(grep_from_json(&older).unwrap().cut_short.is_empty());
        assert!(grep_from_json(&json!({"matches": [], "cut_short": "x"})).is_err());
    }
}
