//! The local execution environment on real files, processes and trees: file operations,
//! symlinks, commands and their stdin, environment filtering, how commands start, search,
//! the sandbox's escape suite, hostile files and the descriptor limit.

pub mod background;
pub mod env;
pub mod files;
pub mod hostile_files;
pub mod launch;
pub mod open_files;
pub mod per_call_policy;
pub mod process;
pub mod sandbox;
pub mod search;
pub mod stdin;
pub mod symlinks;
