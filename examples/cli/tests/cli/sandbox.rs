//! The CLI's sandbox options: the default policy in the header, the options' validation,
//! and a denied write under `--sandbox read-only` seen in the `--json` events.

use std::process::Command;

use crate::{agentloop, run_command};

fn agent(args: &[&str], home: &std::path::Path) -> Command {
    let mut command = Command::new(agentloop());
    command
        .args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home);
    command
}

#[test]
fn the_cli_header_shows_the_default_sandbox_workspace_write_network_off() {
    let home = tempfile::tempdir().unwrap();
    let ran = run_command(agent(&[], home.path()), "");
    assert_eq!(ran.status, Some(0), "{}{}", ran.stdout, ran.stderr);
    assert!(
        ran.stdout.contains("sandbox workspace-write, network off"),
        "{}",
        ran.stdout
    );
}

#[test]
fn the_cli_header_shows_full_access_when_asked() {
    let home = tempfile::tempdir().unwrap();
    let ran = run_command(agent(&["--sandbox", "full-access"], home.path()), "");
    assert_eq!(ran.status, Some(0), "{}{}", ran.stdout, ran.stderr);
    assert!(
        ran.stdout.contains("no sandbox (full access)"),
        "{}",
        ran.stdout
    );
}

#[test]
fn unknown_sandbox_and_network_values_are_usage_errors() {
    let home = tempfile::tempdir().unwrap();
    for args in [&["--sandbox", "open"][..], &["--network", "maybe"][..]] {
        let ran = run_command(agent(args, home.path()), "");
        assert_eq!(ran.status, Some(2), "{args:?}: {}", ran.stderr);
    }
}

#[test]
fn the_demo_under_read_only_sees_its_write_refused() {
    let home = tempfile::tempdir().unwrap();
    let ran = run_command(
        agent(&["--sandbox", "read-only", "--json"], home.path()),
        "",
    );
    assert!(
        ran.stdout.contains("the sandbox is read-only"),
        "{}{}",
        ran.stdout,
        ran.stderr
    );
}
