//! A test helper (a binary of the `agentloop-tests` package): runs one operation of the
//! local execution environment in its own process, prints its result, then the process's
//! peak memory, so that `tests/it/exec/hostile_files.rs` can bound the memory of reads of
//! hostile files (a link to `/dev/zero`, a huge sparse file, a 300 MB line) and kill a run
//! that blocks.
//!
//! Usage (the paths and the working directory are the test's temporary directory):
//!
//! ```text
//! hostile_probe read_file DIR PATH [OFFSET LIMIT]
//! hostile_probe read_bytes DIR PATH
//! hostile_probe grep DIR PATTERN in-process|ripgrep|auto
//! hostile_probe glob DIR PATTERN
//! hostile_probe docs DIR PROFILE
//! hostile_probe exec DIR COMMAND
//! ```
//!
//! Output: `ok ...` or `err MESSAGE` lines (for grep also `cut NOTE`: what was not searched
//! whole), then `peak_rss_kib N` (this process's `VmHWM`)
//! and `children_peak_rss_kib N` (the largest child waited for, such as `rg`).

use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use agentloop::CancelToken;
use agentloop::exec::{
    CommandRequest, ExecutionEnvironment, GrepBackend, GrepOptions, LocalExecutionEnvironment,
};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize| args.get(i).map(String::as_str).unwrap_or("");
    let env = LocalExecutionEnvironment::new(arg(1)).expect("the probe directory");
    match arg(0) {
        "read_file" => {
            let number = |i: usize| args.get(i).map(|n| n.parse().expect("a number"));
            match env.read_file(Path::new(arg(2)), number(3), number(4)) {
                Ok(content) => {
                    println!(
                        "ok size={} total_lines={} text_bytes={}",
                        content.size,
                        content.total_lines,
                        content.text.len()
                    );
                    let head: String = content.text.chars().take(200).collect();
                    println!("text {head:?}");
                }
                Err(e) => println!("err {e}"),
            }
        }
        "read_bytes" => match env.read_bytes(Path::new(arg(2))) {
            Ok(bytes) => println!("ok bytes={}", bytes.len()),
            Err(e) => println!("err {e}"),
        },
        "grep" => {
            let mut options = GrepOptions::default();
            options.backend = match arg(3) {
                "in-process" => GrepBackend::InProcess,
                "ripgrep" => GrepBackend::Ripgrep,
                _ => GrepBackend::Auto,
            };
            match env.grep(arg(2), Path::new("."), &options) {
                Ok(output) => {
                    for m in &output.matches {
                        let head: String = m.line.chars().take(40).collect();
                        println!(
                            "ok {}:{}:{head} ({} bytes)",
                            m.path,
                            m.line_number,
                            m.line.len()
                        );
                    }
                    println!("ok matches={}", output.matches.len());
                    for (path, what) in &output.cut_short {
                        println!("cut {path}: {what}");
                    }
                }
                Err(e) => println!("err {e}"),
            }
        }
        "glob" => match env.glob(arg(2), Path::new(".")) {
            Ok(found) => println!("ok {}", found.join(",")),
            Err(e) => println!("err {e}"),
        },
        "docs" => {
            let docs = agentloop::unstable::discover_project_docs(&env, arg(2));
            println!(
                "ok files={} text_bytes={}",
                docs.files.len(),
                docs.text.len()
            );
            for (path, why) in &docs.skipped {
                println!("skipped {}: {why}", path.display());
            }
        }
        "exec" => {
            let live = Mutex::new(Vec::new());
            let on_output = |_, piece: &[u8]| live.lock().unwrap().extend_from_slice(piece);
            let request = CommandRequest::new(arg(2), Duration::from_secs(30));
            match env.exec_command(&request, &on_output, &CancelToken::new()) {
                Ok(result) => {
                    println!("ok stdout {:?}", result.stdout);
                    let live = live.into_inner().unwrap();
                    println!("live {:?}", String::from_utf8_lossy(&live));
                }
                Err(e) => println!("err {e}"),
            }
        }
        other => {
            eprintln!("unknown operation {other:?}");
            std::process::exit(2);
        }
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let peak = status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
        .unwrap_or(0);
    println!("peak_rss_kib {peak}");
    // SAFETY: getrusage only writes the struct it is given, which lives across the call.
    let children = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage);
        usage.ru_maxrss
    };
    println!("children_peak_rss_kib {children}");
}
