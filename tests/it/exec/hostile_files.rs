//! Hostile files: links to devices, FIFOs, huge and sparse files, a 300 MB line, as a file
//! to read, as project instructions and as ignore files, and a command reading the agent's
//! own environment. Each operation runs in `hostile_probe` (a binary of this package), a
//! process of its own, so that a read that blocks is killed after a generous time and the
//! memory a read costs is that process's peak (`VmHWM`), asserted against a generous
//! ceiling.

use std::fs::{self, File};
use std::io::{Read, Write};
use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::GENEROUS;

/// What a probe printed, and its peak memory.
struct Probe {
    stdout: String,
    peak_mib: u64,
    children_peak_mib: u64,
}

/// Longest a probe may run (it reads hundreds of megabytes: three times the ceiling): a
/// read that blocks on a FIFO would never end.
const PROBE_DEADLINE: Duration = GENEROUS.saturating_mul(3);
/// The ceiling on a probe's peak memory where the input is hundreds of megabytes.
const CEILING_MIB: u64 = 64;

fn probe(args: &[&str]) -> Probe {
    probe_with_env(args, &[])
}

/// One probe at a time: each reads hundreds of megabytes, and running them all at once
/// loads the machine enough to disturb the memory ceilings of other tests.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn probe_with_env(args: &[&str], vars: &[(&str, &str)]) -> Probe {
    let _turn = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut child = Command::new(env!("CARGO_BIN_EXE_hostile_probe"))
        .args(args)
        .envs(vars.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the probe");
    let started = Instant::now();
    loop {
        if child.try_wait().expect("wait for the probe").is_some() {
            break;
        }
        if started.elapsed() > PROBE_DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the probe {args:?} was still running after {PROBE_DEADLINE:?}: it blocked");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut stdout = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    let number = |key: &str| {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|n| n.trim().parse::<u64>().ok())
            .unwrap_or_else(|| panic!("no {key} in the probe's output:\n{stdout}"))
    };
    let peak_mib = number("peak_rss_kib ") / 1024;
    let children_peak_mib = number("children_peak_rss_kib ") / 1024;
    Probe {
        stdout,
        peak_mib,
        children_peak_mib,
    }
}

fn path_str(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 temporary path")
}

/// A file of `head` followed by a hole up to `size` bytes: huge, but costing no disk.
fn sparse_file(path: &Path, head: &[u8], size: u64) {
    let mut file = File::create(path).unwrap();
    file.write_all(head).unwrap();
    file.set_len(size).unwrap();
}

fn numbered_lines(count: usize) -> String {
    (1..=count).map(|n| format!("line {n}\n")).collect()
}

#[test]
fn read_file_of_a_symlink_to_dev_zero_is_refused_in_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    symlink("/dev/zero", dir.path().join("zero.txt")).unwrap();
    symlink("/dev/urandom", dir.path().join("random.bin")).unwrap();
    let root = path_str(dir.path());
    // A link in the working directory to a device outside it is refused by the resolution
    // beneath the directory; the device itself, named directly, by its type.
    for (operation, name) in [
        ("read_file", "zero.txt"),
        ("read_bytes", "zero.txt"),
        ("read_file", "random.bin"),
        ("read_bytes", "random.bin"),
        ("read_file", "/dev/zero"),
        ("read_bytes", "/dev/zero"),
        ("read_file", "/dev/urandom"),
        ("read_bytes", "/dev/urandom"),
    ] {
        let run = probe(&[operation, root, name]);
        let refused = if name.starts_with('/') {
            run.stdout.contains("err refused to read")
                && run
                    .stdout
                    .contains("it is a character device, not a regular file")
        } else {
            run.stdout.contains("resolves outside")
        };
        assert!(refused, "{operation} {name}: {}", run.stdout);
        assert!(
            run.peak_mib < CEILING_MIB,
            "{operation} {name}: {} MiB",
            run.peak_mib
        );
    }
}

#[test]
fn read_file_of_a_fifo_is_refused_without_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("pipe.txt");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let root = path_str(dir.path());
    symlink("pipe.txt", dir.path().join("link-to-pipe.txt")).unwrap();
    for operation in ["read_file", "read_bytes"] {
        for name in ["pipe.txt", "link-to-pipe.txt"] {
            let run = probe(&[operation, root, name]);
            assert!(
                run.stdout
                    .contains("it is a FIFO (named pipe), not a regular file"),
                "{operation} {name}: {}",
                run.stdout
            );
        }
    }
}

#[test]
fn read_file_with_a_small_limit_on_a_huge_file_stays_in_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    // 1,000 text lines, then a 400 MB hole (zeros past the first 8 KiB still count as
    // text): one more line, 400 MB long.
    sparse_file(
        &dir.path().join("huge.log"),
        numbered_lines(1000).as_bytes(),
        400 << 20,
    );
    let root = path_str(dir.path());
    let run = probe(&["read_file", root, "huge.log", "2", "3"]);
    assert!(
        run.stdout
            .contains("ok size=419430400 total_lines=1001 text_bytes=21\n"),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains(r#"text "line 2\nline 3\nline 4\n""#));
    assert!(run.peak_mib < CEILING_MIB, "{} MiB", run.peak_mib);

    // A window that holds the 400 MB line keeps its first 8 MiB only.
    let run = probe(&["read_file", root, "huge.log", "1000", "5"]);
    assert!(
        run.stdout
            .contains("ok size=419430400 total_lines=1001 text_bytes=8388608\n"),
        "{}",
        run.stdout
    );
    assert!(run.peak_mib < CEILING_MIB, "{} MiB", run.peak_mib);
}

#[test]
fn read_file_of_a_2_gib_sparse_file_stays_in_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    sparse_file(&dir.path().join("sparse.dat"), b"", 2 << 30);
    let root = path_str(dir.path());
    let run = probe(&["read_file", root, "sparse.dat"]);
    assert!(
        run.stdout.contains("err cannot read")
            && run
                .stdout
                .contains("it is a binary file (2147483648 bytes)"),
        "{}",
        run.stdout
    );
    assert!(run.peak_mib < CEILING_MIB, "{} MiB", run.peak_mib);
    let run = probe(&["read_bytes", root, "sparse.dat"]);
    assert!(
        run.stdout.contains("err refused to read")
            && run
                .stdout
                .contains("it is 2147483648 bytes, over the limit of 67108864 bytes"),
        "{}",
        run.stdout
    );
    assert!(run.peak_mib < CEILING_MIB, "{} MiB", run.peak_mib);
}

#[test]
fn a_fifo_named_agents_md_does_not_block_the_session() {
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir(dir.path().join(".git")).unwrap();
    assert!(
        Command::new("mkfifo")
            .arg(dir.path().join("AGENTS.md"))
            .status()
            .unwrap()
            .success()
    );
    symlink("/dev/zero", dir.path().join("CLAUDE.md")).unwrap();
    let run = probe(&["docs", path_str(dir.path()), "anthropic"]);
    assert!(
        run.stdout.contains("ok files=0 text_bytes=0"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("AGENTS.md: refused to read")
            && run.stdout.contains("it is a FIFO (named pipe)"),
        "{}",
        run.stdout
    );
    // The link leads outside the working directory: refused by the resolution beneath it.
    assert!(
        run.stdout.contains("CLAUDE.md: ") && run.stdout.contains("CLAUDE.md` resolves outside"),
        "{}",
        run.stdout
    );
    assert!(run.peak_mib < CEILING_MIB, "{} MiB", run.peak_mib);
}

#[test]
fn a_huge_claude_md_is_read_only_to_the_budget_in_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    // 400 MB of text lines (a hole of newlines is not possible, so: one real 1 MiB block of
    // short lines, then a hole; the budget ends inside the real lines).
    sparse_file(
        &dir.path().join("CLAUDE.md"),
        numbered_lines(100_000).as_bytes(),
        400 << 20,
    );
    let run = probe(&["docs", path_str(dir.path()), "anthropic"]);
    assert!(
        run.stdout.contains("ok files=1 text_bytes="),
        "{}",
        run.stdout
    );
    let text_bytes: usize = run
        .stdout
        .split("text_bytes=")
        .nth(1)
        .and_then(|rest| rest.lines().next())
        .and_then(|n| n.parse().ok())
        .unwrap();
    assert!(text_bytes <= agentloop::unstable::PROJECT_DOCS_BUDGET + 64);
    assert!(run.peak_mib < CEILING_MIB, "{} MiB", run.peak_mib);
}

#[test]
fn ignore_files_that_are_fifos_or_links_to_dev_zero_do_not_block_grep_or_glob() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    fs::create_dir(root.join(".git")).unwrap();
    assert!(
        Command::new("mkfifo")
            .arg(root.join(".gitignore"))
            .status()
            .unwrap()
            .success()
    );
    fs::create_dir(root.join("sub")).unwrap();
    symlink("/dev/zero", root.join("sub/.ignore")).unwrap();
    fs::write(root.join("a.txt"), "needle\n").unwrap();
    fs::write(root.join("sub/b.txt"), "needle\n").unwrap();
    let run = probe(&["grep", path_str(root), "needle", "in-process"]);
    assert!(run.stdout.contains("ok matches=2"), "{}", run.stdout);
    assert!(run.peak_mib < CEILING_MIB, "{} MiB", run.peak_mib);
    let run = probe(&["glob", path_str(root), "**/*.txt"]);
    assert!(run.stdout.starts_with("ok "), "{}", run.stdout);
    assert!(run.stdout.contains("a.txt") && run.stdout.contains("sub/b.txt"));
    assert!(run.peak_mib < CEILING_MIB, "{} MiB", run.peak_mib);
    if have_ripgrep() {
        // ripgrep itself would wait on the FIFO for ever: the search goes on in process.
        let run = probe(&["grep", path_str(root), "needle", "auto"]);
        assert!(run.stdout.contains("ok matches=2"), "{}", run.stdout);
        let run = probe(&["grep", path_str(root), "needle", "ripgrep"]);
        assert!(
            run.stdout
                .contains("err refused to run ripgrep: an ignore file"),
            "{}",
            run.stdout
        );
        // With the hostile ignore files gone, ripgrep runs.
        fs::remove_file(root.join(".gitignore")).unwrap();
        fs::remove_file(root.join("sub/.ignore")).unwrap();
        let run = probe(&["grep", path_str(root), "needle", "ripgrep"]);
        assert!(run.stdout.contains("ok matches=2"), "{}", run.stdout);
        assert!(run.children_peak_mib > 0, "ripgrep ran");
    }
}

/// Whether ripgrep is installed (CI installs it; a bare machine may not have it).
fn have_ripgrep() -> bool {
    let found = Command::new("rg")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        assert!(
            std::env::var("AGENTLOOP_CI").as_deref() != Ok("1"),
            "ripgrep is missing in CI"
        );
        eprintln!("skipping the ripgrep half: `rg` is not installed");
    }
    found
}

#[test]
fn grep_on_a_huge_single_line_file_stays_in_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    {
        // A real 300 MB file (a hole would make it binary): one line, a match at its start.
        let mut file = std::io::BufWriter::new(File::create(root.join("one-line.txt")).unwrap());
        file.write_all(b"x needle ").unwrap();
        let block = vec![b'a'; 1 << 20];
        for _ in 0..300 {
            file.write_all(&block).unwrap();
        }
        file.write_all(b"\nneedle again\n").unwrap();
        file.flush().unwrap();
    }
    let run = probe(&["grep", path_str(root), "needle", "in-process"]);
    assert!(
        run.stdout
            .contains("ok one-line.txt:1:x needle aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa (8388608 bytes)"),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("ok one-line.txt:2:needle again"));
    assert!(
        run.peak_mib < CEILING_MIB,
        "in process: {} MiB",
        run.peak_mib
    );
    if have_ripgrep() {
        // ripgrep holds the whole line (over 400 MB): its memory is capped, it fails, and
        // the search goes on in process.
        let run = probe(&["grep", path_str(root), "needle", "auto"]);
        assert!(run.stdout.contains("ok matches=2"), "{}", run.stdout);
        assert!(run.peak_mib < CEILING_MIB, "auto: {} MiB", run.peak_mib);
        assert!(
            (1..300).contains(&run.children_peak_mib),
            "ripgrep ran, within its limit: {} MiB",
            run.children_peak_mib
        );
    }
    fs::remove_file(root.join("one-line.txt")).unwrap();
}

#[test]
fn grep_on_a_300_mb_line_ending_in_the_match_finds_it_or_names_the_cut() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    {
        // One line of 300 MB whose only match is at its very end.
        let mut file = std::io::BufWriter::new(File::create(root.join("one-line.txt")).unwrap());
        let block = vec![b'a'; 1 << 20];
        for _ in 0..300 {
            file.write_all(&block).unwrap();
        }
        file.write_all(b" needle-at-the-end\n").unwrap();
        file.flush().unwrap();
    }
    // Either the match, or the file named as not searched whole; never a bare absence.
    let found_or_cut = |run: &Probe| {
        let found = run.stdout.contains("ok one-line.txt:1:");
        let cut = run.stdout.contains(
            "cut one-line.txt: line 1 is longer than 8 MiB; only its first 8 MiB were searched",
        );
        found || cut
    };
    let run = probe(&["grep", path_str(root), "needle-at-the-end", "in-process"]);
    assert!(found_or_cut(&run), "in process:\n{}", run.stdout);
    assert!(
        run.peak_mib < CEILING_MIB,
        "in process: {} MiB",
        run.peak_mib
    );
    if have_ripgrep() {
        let run = probe(&["grep", path_str(root), "needle-at-the-end", "auto"]);
        assert!(found_or_cut(&run), "auto:\n{}", run.stdout);
        assert!(run.peak_mib < CEILING_MIB, "auto: {} MiB", run.peak_mib);
        // ripgrep alone: it finds the match, or fails saying why (its memory is capped
        // below the line) — an error, never "no matches".
        let run = probe(&["grep", path_str(root), "needle-at-the-end", "ripgrep"]);
        let failed_saying_why = run.stdout.contains("err ripgrep failed")
            && run.stdout.contains("cannot hold a line that long");
        assert!(
            found_or_cut(&run) || failed_saying_why,
            "ripgrep:\n{}",
            run.stdout
        );
        assert!(!run.stdout.contains("ok matches=0") || found_or_cut(&run));
    }
    fs::remove_file(root.join("one-line.txt")).unwrap();
}

#[test]
fn a_command_reading_proc_ppid_environ_sees_no_key() {
    let dir = tempfile::tempdir().unwrap();
    let key = "sk-test-0123456789abcdefghijklmnopqrstuvwxyz";
    let token = "not-shaped-like-a-key-but-named-as-one";
    // The probe builds its environment from its own process environment, which holds the
    // keys; the command reads that process's environment through /proc.
    let run = probe_with_env(
        &[
            "exec",
            path_str(dir.path()),
            "tr '\\0' '\\n' < /proc/$PPID/environ; cat /proc/$PPID/environ >&2",
        ],
        &[
            ("AGENTLOOP_PROBE_API_KEY", key),
            ("AGENTLOOP_PROBE_TOKEN", token),
        ],
    );
    assert!(run.stdout.starts_with("ok stdout"), "{}", run.stdout);
    assert!(!run.stdout.contains(key), "{}", run.stdout);
    assert!(!run.stdout.contains(token), "{}", run.stdout);
    let live = run.stdout.lines().find(|l| l.starts_with("live ")).unwrap();
    let stdout = run
        .stdout
        .lines()
        .find(|l| l.starts_with("ok stdout "))
        .unwrap();
    for shown in [live, stdout] {
        assert!(
            shown.contains("AGENTLOOP_PROBE_API_KEY=[REDACTED:AGENTLOOP_PROBE_API_KEY]")
                && shown.contains("AGENTLOOP_PROBE_TOKEN=[REDACTED:AGENTLOOP_PROBE_TOKEN]"),
            "{shown}"
        );
    }
}

#[test]
fn a_file_holding_a_key_reads_redacted_and_the_marker_is_never_written_back() {
    use agentloop::exec::{ExecutionEnvironment, LocalExecutionEnvironment};
    use std::collections::BTreeMap;

    let dir = tempfile::tempdir().unwrap();
    let key = "sk-test-abcdefghijklmnopqrstuvwxyz0123456789";
    let base = BTreeMap::from([("PROBE_API_KEY".to_string(), key.to_string())]);
    let env = LocalExecutionEnvironment::new(dir.path())
        .unwrap()
        .with_base_env(base)
        .with_secret("HOST_HELD", "held-outside-the-environment-42");
    let text = format!("KEY={key}\nOTHER=held-outside-the-environment-42\n");
    fs::write(dir.path().join(".env"), &text).unwrap();

    let read = env.read_file(Path::new(".env"), None, None).unwrap();
    assert_eq!(
        read.text,
        "KEY=[REDACTED:PROBE_API_KEY]\nOTHER=[REDACTED:HOST_HELD]\n"
    );
    let bytes = env.read_bytes(Path::new(".env")).unwrap();
    assert_eq!(bytes, read.text.as_bytes());
    let found = env
        .grep("KEY=", Path::new("."), &Default::default())
        .unwrap();
    assert_eq!(found.matches[0].line, "KEY=[REDACTED:PROBE_API_KEY]");

    // An edit that writes the redacted content back would replace the key: refused.
    let edited = read.text.replace("OTHER", "RENAMED");
    let error = env
        .write_file(Path::new(".env"), edited.as_bytes())
        .unwrap_err();
    assert!(error.to_string().contains("holds `[REDACTED:"), "{error}");
    assert_eq!(fs::read_to_string(dir.path().join(".env")).unwrap(), text);
}
