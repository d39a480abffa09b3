//! Keeps API keys out of the CLI's own process environment: read once at start, removed
//! from the environment, and wiped from the environment block the kernel shows.
//!
//! Why: any command the agent runs can read its parent's initial environment
//! (`tr '\0' '\n' < /proc/$PPID/environ`), and `unsetenv` does not change what
//! `/proc/<pid>/environ` shows: the kernel reads it from the process's own memory, the
//! block of `NAME=value` strings the exec left at the top of the main stack. So the values
//! entries are overwritten there, in place (what `setproctitle` does to `argv`), before any
//! thread or child exists. This module never prints a key and never passes one on.
//!
//! An earlier version re-executed the program without the keys and passed them through a
//! pipe; wiping in place gives the same guarantee without a second exec (1.5 ms of start-up
//! on the 2-core VM).

use std::collections::HashMap;
use std::ffi::CStr;

/// The variables holding keys the CLI reads.
pub const KEY_VARS: &[&str] = &[
    "ANTHROPIC_API_KEY",
    "OPENAI_API_KEY",
    "OPENAI_COMPATIBLE_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
];

unsafe extern "C" {
    /// The C library's `char **environ`: a NULL-terminated array of `NAME=value` strings.
    /// At the start of `main` its entries point into the block the kernel set up at exec,
    /// the memory `/proc/<pid>/environ` reads.
    static mut environ: *mut *mut libc::c_char;
}

/// The keys, taken out of the process environment. Call first thing in `main`, before any
/// thread starts.
pub fn take_from_environment() -> HashMap<String, String> {
    let keys: HashMap<String, String> = KEY_VARS
        .iter()
        .filter_map(|name| Some((name.to_string(), std::env::var(name).ok()?)))
        .collect();
    if keys.is_empty() {
        return keys;
    }
    // The entries' memory first, then the entries: `remove_var` takes them out of
    // `environ` (children and `getenv` no longer see them) but leaves their bytes where
    // they were, so they are wiped afterwards, whole, names included.
    let entries = entries_named(KEY_VARS);
    for name in KEY_VARS {
        // SAFETY: single-threaded start of main: nothing else reads or writes the
        // environment while it changes.
        unsafe { std::env::remove_var(name) };
    }
    for (start, len) in entries {
        // SAFETY: single-threaded start of main; `start` points at an entry of `environ`
        // found just above: a NUL-terminated string of `len` bytes in the exec's
        // environment block (writable stack memory; nothing has called `setenv` yet, so
        // no entry is the C library's allocation), which `remove_var` leaves in place.
        // The write stays within those bytes.
        unsafe { std::ptr::write_bytes(start, 0, len) };
    }
    keys
}

/// The `environ` entries named in `names`: where each string starts and its length
/// (without the NUL).
fn entries_named(names: &[&str]) -> Vec<(*mut libc::c_char, usize)> {
    let mut found = Vec::new();
    // SAFETY: called at the single-threaded start of main, so nothing changes the
    // environment meanwhile; `environ` is a NULL-terminated array of NUL-terminated
    // strings, only read here.
    unsafe {
        let mut entry = environ;
        while !entry.is_null() && !(*entry).is_null() {
            let text = CStr::from_ptr(*entry).to_bytes();
            let name = text.split(|&b| b == b'=').next().unwrap_or(text);
            if names.iter().any(|wanted| wanted.as_bytes() == name) {
                found.push((*entry, text.len()));
            }
            entry = entry.add(1);
        }
    }
    found
}
