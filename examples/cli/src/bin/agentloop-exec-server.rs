//! The exec-server: serves this machine's files and commands to a
//! `RemoteExecutionEnvironment` over newline-delimited JSON-RPC on stdin/stdout (the
//! protocol is specified in `src/exec/remote/protocol.rs`). It never reads a terminal
//! and never writes anything but protocol lines to stdout.
//!
//! ```text
//! agentloop-exec-server [--version | --supervised]
//! ```
//!
//! `--supervised` runs the server beneath a child subreaper that ends whatever a killed
//! server leaves running (the container bootstrap starts it so). The working directory is
//! the one the client's `hello` names (this process's own when it
//! names none). Install it on a remote host on the login shell's `PATH` (`cargo install
//! --path examples/cli` installs it beside `agentloop`), or give its path to `agentloop
//! --remote … --remote-server PATH`. Build it static to copy it anywhere:
//! `RUSTFLAGS='-C target-feature=+crt-static' cargo build --profile min-size -p
//! agentloop-cli --bin agentloop-exec-server --target x86_64-unknown-linux-gnu`.

use std::io::Write;
use std::process::ExitCode;

use agentloop::exec::LocalExecutionEnvironment;
use agentloop::exec::remote::{
    RemoteExecutionEnvironment, SERVER_NAME, protocol::PROTOCOL_VERSION,
};

fn main() -> ExitCode {
    if std::env::args().nth(1).as_deref() == Some("--version") {
        // A closed stdout is a failure, not a panic.
        let shown = writeln!(
            std::io::stdout(),
            "{SERVER_NAME} (protocol {PROTOCOL_VERSION})"
        );
        return if shown.is_ok() {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        };
    }
    if std::env::args().nth(1).as_deref() == Some("--supervised") {
        // This same program, beneath a supervisor that ends what a killed server leaves.
        let code = std::env::current_exe()
            .and_then(|exe| RemoteExecutionEnvironment::serve_supervised(&exe));
        return match code {
            Ok(code) => ExitCode::from(code.clamp(0, 255) as u8),
            Err(e) => {
                let _ = writeln!(std::io::stderr(), "agentloop-exec-server: supervisor: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let cwd = match std::env::current_dir() {
        Ok(cwd) => cwd,
        Err(e) => {
            let _ = writeln!(
                std::io::stderr(),
                "agentloop-exec-server: no working directory: {e}"
            );
            return ExitCode::from(2);
        }
    };
    // Behind sshd, SSH_CLIENT makes Debian's bash source ~/.bashrc even for `bash -c`
    // (its SSH_SOURCE_BASHRC heuristic): measured, 330 ms per command with pyenv's init
    // there, against 2 ms locally. Commands run as they would locally: without it.
    let base = std::env::vars()
        .filter(|(name, _)| name != "SSH_CLIENT" && name != "SSH2_CLIENT")
        .collect();
    let env = match LocalExecutionEnvironment::new(cwd) {
        Ok(env) => env.with_base_env(base),
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "agentloop-exec-server: {e}");
            return ExitCode::from(2);
        }
    };
    // SIGTERM, SIGHUP and SIGINT end the running commands' groups before the server exits.
    match RemoteExecutionEnvironment::serve_stdio(env) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "agentloop-exec-server: {e}");
            ExitCode::FAILURE
        }
    }
}
