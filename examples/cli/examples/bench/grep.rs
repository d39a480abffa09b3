//! Bench section `grep`: the in-process search against the ripgrep backend, through
//! `LocalExecutionEnvironment::grep`, on a generated tree of 5,000 source-like files.
//! Measures the median wall time of each call and checks that both backends return the
//! same matches; never asserts on time.

use std::fmt::Write as _;
use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agentloop::exec::{ExecutionEnvironment, GrepBackend, GrepOptions, LocalExecutionEnvironment};

use crate::{Row, ms};

const RUNS: usize = 7;
const DIRS: usize = 20;
const SUBDIRS: usize = 25;
const FILES_PER_DIR: usize = 10;

/// The benchmark patterns of the issue: a common literal, a literal-led regex with an
/// inner literal, a class-led regex, a rare literal.
const PATTERNS: [&str; 4] = [
    "self",
    r"fn\s+[a-z_]+_mut\s*\(",
    r"\w+Error\b",
    "zebra_quokka_marker",
];

fn row(name: impl Into<String>, value: String, target: &str) -> Row {
    Row {
        section: "grep",
        name: name.into(),
        value,
        target: target.to_string(),
    }
}

/// xorshift64: the same tree on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

const WORDS: [&str; 20] = [
    "alpha", "beta", "gamma", "delta", "value", "index", "buffer", "count", "state", "config",
    "handler", "result", "error", "token", "parse", "write", "read", "flush", "len", "data",
];

fn capitalized(word: &str) -> String {
    let mut chars = word.chars();
    chars
        .next()
        .map(|c| c.to_ascii_uppercase().to_string() + chars.as_str())
        .unwrap_or_default()
}

/// One Rust-like file of 60 to 220 lines.
fn source_file(rng: &mut Rng) -> String {
    let mut text = String::new();
    for _ in 0..60 + rng.below(160) {
        let (a, b) = (rng.pick(&WORDS), rng.pick(&WORDS));
        let _ = match rng.below(20) {
            0 | 1 => writeln!(
                text,
                "pub fn {a}_{b}_mut(&mut self, x: usize) -> Result<(), {}Error> {{",
                capitalized(a)
            ),
            2 | 3 => writeln!(
                text,
                "    let {a} = self.{b}.get(x).ok_or(ParseError::Missing)?;"
            ),
            4 | 5 => writeln!(
                text,
                "fn {a}_{b}(input: &str) -> Option<{}> {{",
                capitalized(b)
            ),
            6 => writeln!(text, "    // TODO: handle the {a} case for {b}"),
            7 => writeln!(text, "}}"),
            _ => writeln!(
                text,
                "    self.{a} = self.{b}.wrapping_add({});",
                rng.below(1000)
            ),
        };
    }
    if rng.below(500) == 0 {
        text.push_str("    let zebra_quokka_marker = 1;\n");
    }
    text
}

/// Writes the tree: 5,000 files in 500 directories, a `.git` directory and an ignored
/// `target/` that both backends skip.
fn generate(root: &Path) -> u64 {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut bytes = 0;
    fs::create_dir_all(root.join(".git/objects")).unwrap();
    fs::write(root.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
    fs::write(root.join(".gitignore"), "target/\n*.log\n").unwrap();
    fs::create_dir_all(root.join("target/debug")).unwrap();
    for i in 0..50 {
        fs::write(
            root.join(format!("target/debug/out{i}.rs")),
            source_file(&mut rng),
        )
        .unwrap();
    }
    for d in 0..DIRS {
        for s in 0..SUBDIRS {
            let dir = root.join(format!("crate_{d:02}/src/module_{s:02}"));
            fs::create_dir_all(&dir).unwrap();
            for f in 0..FILES_PER_DIR {
                let text = source_file(&mut rng);
                bytes += text.len() as u64;
                fs::write(dir.join(format!("file_{f}.rs")), text).unwrap();
            }
        }
    }
    bytes
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// Median time of `run` over RUNS runs after one warm-up, and the last value.
fn timed<T>(mut run: impl FnMut() -> T) -> (Duration, T) {
    let mut last = run();
    let mut samples = Vec::with_capacity(RUNS);
    for _ in 0..RUNS {
        let start = Instant::now();
        last = run();
        samples.push(start.elapsed());
    }
    (median(samples), last)
}

fn ratio(ours: Duration, theirs: Duration) -> String {
    format!("{:.2}x", ours.as_secs_f64() / theirs.as_secs_f64())
}

pub fn run() -> Vec<Row> {
    let dir = tempfile::tempdir().expect("temp dir");
    let start = Instant::now();
    let bytes = generate(dir.path());
    eprintln!(
        "bench grep: generated {} files, {:.1} MB in {:.1} s",
        DIRS * SUBDIRS * FILES_PER_DIR,
        bytes as f64 / 1e6,
        start.elapsed().as_secs_f64()
    );
    let env = LocalExecutionEnvironment::new(dir.path()).unwrap();
    let rg_installed = has_ripgrep(dir.path());
    let mut rows = vec![row(
        "tree: files / MB",
        format!(
            "{} / {:.1}",
            DIRS * SUBDIRS * FILES_PER_DIR,
            bytes as f64 / 1e6
        ),
        "≥ 5,000 files",
    )];
    if !rg_installed {
        rows.push(row("ripgrep", "not installed".into(), ""));
    }
    for pattern in PATTERNS {
        for (mode, max_results) in [("all", usize::MAX), ("first 100", 100)] {
            let grep = |backend: GrepBackend| {
                let mut options = GrepOptions::default();
                options.max_results = max_results;
                options.backend = backend;
                env.grep(pattern, Path::new("."), &options)
                    .expect("grep runs")
            };
            let (ours, found) = timed(|| grep(GrepBackend::InProcess));
            let name = format!("`{pattern}` {mode}");
            rows.push(row(
                format!("{name}: in-process ({} matches)", found.matches.len()),
                ms(ours),
                "",
            ));
            if rg_installed {
                let (theirs, rg_found) = timed(|| grep(GrepBackend::Ripgrep));
                assert_eq!(rg_found, found, "the backends disagree on {pattern}");
                rows.push(row(format!("{name}: ripgrep backend"), ms(theirs), ""));
                rows.push(row(
                    format!("{name}: in-process / ripgrep"),
                    ratio(ours, theirs),
                    "≤ 2x",
                ));
            }
        }
        if rg_installed {
            // For reference: plain ripgrep, multi-threaded, unsorted, counting only.
            let (raw, _) = timed(|| raw_rg_count(dir.path(), pattern));
            rows.push(row(
                format!("`{pattern}`: plain `rg --count` (reference)"),
                ms(raw),
                "",
            ));
        }
    }
    rows
}

fn has_ripgrep(dir: &Path) -> bool {
    let env = LocalExecutionEnvironment::new(dir).unwrap();
    let mut options = GrepOptions::default();
    options.backend = GrepBackend::Ripgrep;
    env.grep("x", Path::new("."), &options).is_ok()
}

fn raw_rg_count(dir: &Path, pattern: &str) {
    let _ = Command::new("rg")
        .args([
            "--no-config",
            "--hidden",
            "--count",
            "--glob=!.git",
            "--regexp",
            pattern,
        ])
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}
