//! Links the CLI's binaries with its hot-function list, and nothing else. This is the CLI
//! package's script: the library package has none, so a crate depending on the library
//! never runs it.
//!
//! `hot-functions.txt` names the functions the `agentloop` CLI runs on its way through a
//! task (`.ci/hot-functions` records it). Given to lld as its symbol ordering file, they
//! are laid out together, so that a start of the CLI faults in about 15 runs of 64 KiB of
//! code instead of about 55 scattered over the binary's 4.7 MiB of text (BENCHMARKS.md,
//! `e2e`).
//!
//! Where the C library that will load them is glibc 2.36 or later (the build host's, when
//! it is the target), the binaries' relative relocations are also packed (`-z
//! pack-relative-relocs`, `DT_RELR`): the dynamic CLI's 10 571 relocation entries (251 KiB
//! that `ld.so` reads and applies at every start) become a 3.4 KiB bitmap, and `agentloop
//! --version` starts 25–30 µs sooner. An older glibc refuses such a binary by name
//! (`GLIBC_ABI_DT_RELR`), which is why the check.
//!
//! Only where the linker is certainly rustc's bundled lld: x86_64 Linux (GNU), rustc 1.90
//! or later (its default linker there), and no linker chosen by the build's flags or
//! environment. Elsewhere the binaries link as before.

use std::env;
use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-changed=hot-functions.txt");
    println!("cargo::rerun-if-env-changed=CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER");
    if env::var("TARGET").as_deref() != Ok("x86_64-unknown-linux-gnu") || !links_with_lld() {
        return;
    }
    let (Ok(dir), Ok(out)) = (env::var("CARGO_MANIFEST_DIR"), env::var("OUT_DIR")) else {
        return;
    };
    // The linker reads a copy in OUT_DIR: cargo may reuse this script's output for another
    // checkout sharing the target directory, where a path into this checkout would dangle.
    let list = Path::new(&out).join("hot-functions.txt");
    let copied = std::fs::copy(Path::new(&dir).join("hot-functions.txt"), &list);
    let Some(path) = list.to_str() else {
        return;
    };
    // `-Wl,` splits its argument at commas.
    if copied.is_err() || path.contains(',') {
        return;
    }
    println!("cargo::rustc-link-arg-bins=-Wl,--symbol-ordering-file={path}");
    // Functions the list names that a build does not have (another profile, code that
    // moved on) are skipped quietly.
    println!("cargo::rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
    let native = env::var("HOST").as_deref() == Ok("x86_64-unknown-linux-gnu");
    if native && host_glibc_at_least(2, 36) {
        println!("cargo::rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}

/// Whether the build host's glibc (`getconf GNU_LIBC_VERSION`: `glibc 2.36`) is at least
/// `major.minor`.
fn host_glibc_at_least(major: u32, minor: u32) -> bool {
    let Ok(output) = Command::new("getconf").arg("GNU_LIBC_VERSION").output() else {
        return false;
    };
    let text = String::from_utf8_lossy(&output.stdout);
    let Some(version) = text.trim().strip_prefix("glibc ") else {
        return false;
    };
    at_least(version, (major, minor))
}

/// Whether `version` (`1.90.0-nightly`, `2.36`) is at least `major.minor`.
fn at_least(version: &str, (major, minor): (u32, u32)) -> bool {
    let mut numbers = version.split(['.', '-']).map(|n| n.parse::<u32>().ok());
    match (numbers.next().flatten(), numbers.next().flatten()) {
        (Some(a), Some(b)) => (a, b) >= (major, minor),
        _ => false,
    }
}

/// Whether rustc links with its bundled lld: release 1.90 or later with `gcc-ld/ld.lld`
/// in its sysroot, and no linker (or linker flavour, or self-contained linking choice)
/// set by the flags or the environment.
fn links_with_lld() -> bool {
    let flags = env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    let chosen = ["linker", "link-self-contained", "fuse-ld"];
    if chosen.iter().any(|c| flags.contains(c))
        || env::var_os("CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER").is_some()
    {
        return false;
    }
    let rustc = env::var("RUSTC").unwrap_or_else(|_| "rustc".to_string());
    let ask = |arg: &str| {
        Command::new(&rustc)
            .arg(arg)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let Some(version) = ask("-vV") else {
        return false;
    };
    let Some(release) = version.lines().find_map(|l| l.strip_prefix("release: ")) else {
        return false;
    };
    at_least(release, (1, 90))
        && ask("--print=sysroot").is_some_and(|sysroot| {
            Path::new(&sysroot)
                .join("lib/rustlib/x86_64-unknown-linux-gnu/bin/gcc-ld/ld.lld")
                .is_file()
        })
}
