//! grep and glob of LocalExecutionEnvironment on real directory trees: ripgrep and the
//! in-process search give the same answers.

use std::fs::{self, File};
use std::io::ErrorKind;
use std::path::Path;
use std::time::{Duration, SystemTime};

use agentloop::exec::{
    ExecutionEnvironment, GrepBackend, GrepOptions, GrepOutput, LocalExecutionEnvironment,
};

/// A workspace holding `files` (path, contents), and an environment working in it.
fn workspace(files: &[(&str, &[u8])]) -> (tempfile::TempDir, LocalExecutionEnvironment) {
    let dir = tempfile::tempdir().expect("temp dir");
    for (path, contents) in files {
        let path = dir.path().join(path);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, contents).unwrap();
    }
    let env = LocalExecutionEnvironment::new(dir.path()).unwrap();
    (dir, env)
}

fn options(backend: GrepBackend) -> GrepOptions {
    let mut options = GrepOptions::default();
    options.backend = backend;
    options
}

/// Whether the ripgrep backend can run here; says so when it cannot.
fn ripgrep_available(env: &LocalExecutionEnvironment) -> bool {
    match env.grep("x", Path::new("."), &options(GrepBackend::Ripgrep)) {
        Err(error) if error.kind() == ErrorKind::NotFound => {
            eprintln!("ripgrep is not installed: skipping the ripgrep half of this test");
            false
        }
        _ => true,
    }
}

fn lines(output: &GrepOutput) -> Vec<String> {
    output
        .matches
        .iter()
        .map(|m| format!("{}:{}:{}", m.path, m.line_number, m.line))
        .collect()
}

#[test]
fn grep_resolves_paths_against_the_working_directory() {
    let (_dir, env) = workspace(&[
        (
            "src/lib.rs",
            b"pub fn parse() -> Result<(), ParseError> {}\n",
        ),
        ("README.md", b"ParseError is documented here\n"),
    ]);
    for backend in [GrepBackend::Auto, GrepBackend::InProcess] {
        let output = env
            .grep(r"\w+Error\b", Path::new("src"), &options(backend))
            .unwrap();
        assert_eq!(
            lines(&output),
            ["lib.rs:1:pub fn parse() -> Result<(), ParseError> {}"]
        );
        let everywhere = env
            .grep("ParseError", Path::new("."), &options(backend))
            .unwrap();
        assert_eq!(everywhere.matches.len(), 2);
        assert!(!everywhere.truncated);
    }
}

#[test]
fn an_invalid_regex_is_the_same_invalid_input_error_through_every_backend() {
    let (_dir, env) = workspace(&[("a.rs", b"fn main() {}\n")]);
    let errors: Vec<String> = [
        GrepBackend::Auto,
        GrepBackend::InProcess,
        GrepBackend::Ripgrep,
    ]
    .into_iter()
    .map(|backend| {
        let error = env
            .grep("main(", Path::new("."), &options(backend))
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::InvalidInput);
        error.to_string()
    })
    .collect();
    assert!(
        errors[0].starts_with("invalid regex `main(`: unclosed group"),
        "{}",
        errors[0]
    );
    assert!(errors.iter().all(|e| *e == errors[0]), "{errors:?}");
}

#[test]
fn grep_of_a_missing_path_is_not_found() {
    let (_dir, env) = workspace(&[]);
    let error = env
        .grep("x", Path::new("nope"), &GrepOptions::default())
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::NotFound);
}

#[test]
fn glob_lists_matching_files_newest_first_relative_to_the_given_directory() {
    let (dir, env) = workspace(&[
        ("src/old.rs", b""),
        ("src/new.rs", b""),
        ("src/deep/mid.rs", b""),
        ("src/notes.md", b""),
        ("target/ignored.rs", b""),
        (".gitignore", b"target/\n"),
        (".git/HEAD", b""),
    ]);
    for (file, seconds) in [
        ("src/old.rs", 1_000),
        ("src/new.rs", 3_000),
        ("src/deep/mid.rs", 2_000),
    ] {
        File::options()
            .write(true)
            .open(dir.path().join(file))
            .unwrap()
            .set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(seconds))
            .unwrap();
    }
    assert_eq!(
        env.glob("**/*.rs", Path::new("src")).unwrap(),
        ["new.rs", "deep/mid.rs", "old.rs"]
    );
    assert_eq!(env.glob("**/*.rs", Path::new(".")).unwrap().len(), 3);
    let error = env.glob("src/[", Path::new(".")).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidInput);
}

// ---- item 8: ripgrep and the in-process search agree ----

/// xorshift64, so the generated tree is the same on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[(self.next() % items.len() as u64) as usize]
    }
}

/// A repository with ignore rules of every kind (root and nested `.gitignore`, negation,
/// directory-only, anchored, `**`, classes, `.ignore`, `.rgignore`), a nested repository,
/// binary files, a `.git` directory, hidden files, CRLF lines, a symlink and tricky names,
/// plus 120 generated files.
fn parity_tree() -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = [
        (".git/HEAD", &b"ref: refs/heads/main\n"[..]),
        (".git/config", b"needle = ParseError\n"),
        (".git/objects/ab/cdef", b"fn get_mut(x) Error\n"),
        (
            ".gitignore",
            b"# build output\n*.log\n!keep.log\nbuild/\n/top_only.txt\nfile[0-9].dat\n\
              docs/**/*.tmp\n**/generated\ncache/**\n",
        ),
        (".ignore", b"!special.log\nvendor/\n"),
        (".rgignore", b"!vendor/keep/\n"),
        ("src/.gitignore", b"*.txt\n!important.txt\n/local.rs\n"),
        ("src/deep/.gitignore", b"!*.txt\n"),
        ("sub/.git", b"gitdir: ../.git/worktrees/sub\nneedle\n"),
        (".github/workflows/ci.yml", b"run: cargo test # needle\n"),
        ("bin/tool.bin", b"\x7fELF\0\0needle fn get_mut(\n"),
        ("crlf.txt", b"needle\r\nfn a_mut (x)\r\nend"),
        ("empty.txt", b""),
        ("a-b.rs", b"let needle = 1;\n"),
        ("a.rs", b"impl Error for IoError {}\n"),
        ("a/b.rs", b"fn b_mut(&mut self)\n"),
        ("top_only.txt", b"needle\n"),
        ("keep.log", b"needle\n"),
        ("drop.log", b"needle\n"),
        ("special.log", b"needle\n"),
        ("vendor/lib.rs", b"needle\n"),
        ("vendor/keep/lib.rs", b"needle\n"),
        ("file7.dat", b"needle\n"),
        ("fileX.dat", b"needle\n"),
        ("docs/a/b/c.tmp", b"needle\n"),
        ("docs/c.md", b"NEEDLE in docs\n"),
        ("x/generated/g.rs", b"needle\n"),
        ("cache/x/y.rs", b"needle\n"),
        ("src/notes.txt", b"needle\n"),
        ("src/important.txt", b"needle\n"),
        ("src/local.rs", b"needle\n"),
        ("src/deep/local.rs", b"needle\n"),
        ("src/deep/back.txt", b"needle\n"),
        ("sub/top_only.txt", b"needle\n"),
        ("sub/inner.log", b"needle in a nested repository\n"),
        ("unicode/ünï.txt", "nëedle needle\n".as_bytes()),
    ]
    .into_iter()
    .map(|(path, contents)| (path.to_owned(), contents.to_vec()))
    .collect();
    let words = [
        "needle",
        "Error",
        "ParseError",
        "value",
        "self",
        "mut",
        "x",
        "  ",
        "(",
        "_",
    ];
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for i in 0..120 {
        let dir = rng.pick(&[
            "src",
            "src/deep",
            "lib",
            "lib/inner",
            "tests",
            "sub",
            "build",
        ]);
        let ext = rng.pick(&["rs", "txt", "log", "md"]);
        let mut text = String::new();
        for _ in 0..(rng.next() % 40) {
            match rng.next() % 5 {
                0 => text.push_str(&format!("fn {}_mut(&mut self) {{", rng.pick(&words))),
                1 => text.push_str(&format!(
                    "Err({}Error::Bad)",
                    rng.pick(&["Parse", "Io", ""])
                )),
                _ => {
                    for _ in 0..(rng.next() % 6) {
                        text.push_str(rng.pick(&words));
                        text.push(' ');
                    }
                }
            }
            text.push_str(if rng.next() % 9 == 0 { "\r\n" } else { "\n" });
        }
        files.push((format!("{dir}/gen_{i:03}.{ext}"), text.into_bytes()));
    }
    files
}

#[test]
fn ripgrep_and_the_in_process_search_give_identical_results() {
    let tree = parity_tree();
    let refs: Vec<(&str, &[u8])> = tree
        .iter()
        .map(|(p, c)| (p.as_str(), c.as_slice()))
        .collect();
    let (dir, env) = workspace(&refs);
    std::os::unix::fs::symlink(dir.path().join("a.rs"), dir.path().join("link.rs")).unwrap();
    if !ripgrep_available(&env) {
        return;
    }
    let patterns = [
        "needle",
        r"\w+Error\b",
        r"fn\s+[a-z_]+_mut\s*\(",
        "^",
        "needle$",
        r"(?i)NEEDLE",
        r"Parse|Io",
        r"\bx\b",
        r"[0-9]{3}",
        r"ë",
        r"\Aneedle",
        r"\s+\(",
    ];
    let filters = [
        None,
        Some("*.rs"),
        Some("!*.rs"),
        Some("src/**"),
        Some("*.{log,md}"),
    ];
    let mut with_matches = 0;
    for root in [".", "src", "sub"] {
        for pattern in patterns {
            for filter in filters {
                for (case_insensitive, max_results) in [(false, 100_000), (true, 7), (false, 1)] {
                    let mut rg = options(GrepBackend::Ripgrep);
                    rg.glob_filter = filter.map(str::to_owned);
                    rg.case_insensitive = case_insensitive;
                    rg.max_results = max_results;
                    let mut ours = rg.clone();
                    ours.backend = GrepBackend::InProcess;
                    let expected = env.grep(pattern, Path::new(root), &rg).unwrap();
                    let actual = env.grep(pattern, Path::new(root), &ours).unwrap();
                    if actual != expected {
                        let (a, e) = (lines(&actual), lines(&expected));
                        panic!(
                            "pattern {pattern:?}, filter {filter:?}, case_insensitive \
                             {case_insensitive}, max {max_results}, root {root}\n\
                             only in process: {:?}\nonly ripgrep: {:?}\ntruncated {} vs {}",
                            a.iter().filter(|l| !e.contains(l)).collect::<Vec<_>>(),
                            e.iter().filter(|l| !a.contains(l)).collect::<Vec<_>>(),
                            actual.truncated,
                            expected.truncated
                        );
                    }
                    with_matches += usize::from(!expected.matches.is_empty());
                }
            }
        }
    }
    assert!(
        with_matches > 300,
        "too few comparisons found anything: {with_matches}"
    );
}

/// Files and rules chosen to trip a reimplementation: odd line endings and encodings,
/// invalid UTF-8, a BOM, UTF-16, long lines, tricky ignore lines.
fn edge_tree() -> Vec<(String, Vec<u8>)> {
    let mut long = "word ".repeat(40_000);
    long.push_str("needle\n");
    [
        (".git/HEAD", &b"ref: refs/heads/main\n"[..]),
        (
            ".gitignore",
            b"*\n!*/\n!*.rs\n!*.txt\n!.gitignore\n\\!bang.txt\n\\#hash.txt\ntrailing.txt   \n\
              a/**/b.txt\n**/deep/**\n/root_only.rs\n[xy]*.txt\n",
        ),
        ("keep.md", b"needle in an ignored markdown file\n"),
        ("code.rs", b"needle\n\nfn x() {}\n   \n"),
        ("cr_only.txt", b"needle\rneedle\rend\n"),
        ("bom.txt", b"\xef\xbb\xbfneedle at the start\nneedle\n"),
        ("utf16.txt", b"\xff\xfen\0e\0e\0d\0l\0e\0\n\0"),
        ("latin1.txt", b"caf\xe9 needle\n\xff\xfe\n"),
        ("no_newline.txt", b"last needle"),
        ("long.txt", long.as_bytes()),
        ("!bang.txt", b"needle\n"),
        ("#hash.txt", b"needle\n"),
        ("trailing.txt", b"needle\n"),
        ("a/b.txt", b"needle\n"),
        ("a/x/y/b.txt", b"needle\n"),
        ("a/c.txt", b"needle\n"),
        ("p/deep/q/r.rs", b"needle\n"),
        ("root_only.rs", b"needle\n"),
        ("nested/root_only.rs", b"needle\n"),
        ("x1.txt", b"needle\n"),
        ("z1.txt", b"needle\n"),
        ("UPPER.RS", b"needle\n"),
        ("sp ace/tab\tname.rs", b"needle\n"),
        (
            "late_nul.txt",
            b"needle one\nneedle two\n\0binary tail needle\n",
        ),
    ]
    .into_iter()
    .map(|(path, contents)| (path.to_owned(), contents.to_vec()))
    .collect()
}

#[test]
fn ripgrep_and_the_in_process_search_agree_on_edge_cases() {
    let tree = edge_tree();
    let refs: Vec<(&str, &[u8])> = tree
        .iter()
        .map(|(p, c)| (p.as_str(), c.as_slice()))
        .collect();
    let (_dir, env) = workspace(&refs);
    let mut all = options(GrepBackend::InProcess);
    all.max_results = usize::MAX;
    let files: Vec<String> = env
        .grep("needle", Path::new("."), &all)
        .unwrap()
        .matches
        .iter()
        .map(|m| format!("{}:{}", m.path, m.line_number))
        .collect();
    assert_eq!(
        files,
        [
            "a/c.txt:1",
            "bom.txt:1",
            "bom.txt:2",
            "code.rs:1",
            "cr_only.txt:1",
            "latin1.txt:1",
            "long.txt:1",
            "nested/root_only.rs:1",
            "no_newline.txt:1",
            "sp ace/tab\tname.rs:1",
            "z1.txt:1",
        ]
    );
    if !ripgrep_available(&env) {
        return;
    }
    let patterns = [
        "needle",
        ".",
        "$",
        "^$",
        r"^\s*$",
        r"\W",
        r"(?s).",
        "x?",
        r"\p{Greek}",
        "caf.",
        r"\xff",
        r"(?-u:\xff)",
        "end$",
        r"needle\z",
        "ord word",
        r"(?i)NEEDLE",
    ];
    let filters = [
        None,
        Some("*"),
        Some("!*"),
        Some("*.RS"),
        Some("**/*.rs"),
        Some("a/"),
        Some("/a/**"),
    ];
    for pattern in patterns {
        for filter in filters {
            for max_results in [usize::MAX, 3] {
                let mut rg = options(GrepBackend::Ripgrep);
                rg.glob_filter = filter.map(str::to_owned);
                rg.max_results = max_results;
                let mut ours = rg.clone();
                ours.backend = GrepBackend::InProcess;
                let expected = env.grep(pattern, Path::new("."), &rg).unwrap();
                let actual = env.grep(pattern, Path::new("."), &ours).unwrap();
                if actual != expected {
                    let (a, e) = (lines(&actual), lines(&expected));
                    let short = |v: Vec<&String>| -> Vec<String> {
                        v.into_iter()
                            .map(|l| l.chars().take(80).collect())
                            .collect()
                    };
                    panic!(
                        "pattern {pattern:?}, filter {filter:?}, max {max_results}\n\
                         only in process: {:?}\nonly ripgrep: {:?}\ntruncated {} vs {}",
                        short(a.iter().filter(|l| !e.contains(l)).collect()),
                        short(e.iter().filter(|l| !a.contains(l)).collect()),
                        actual.truncated,
                        expected.truncated
                    );
                }
            }
        }
    }
}
