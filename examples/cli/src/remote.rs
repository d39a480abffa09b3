//! `--remote` (ssh and container URLs) and `--remote-command`: the execution environment
//! of the `agentloop` CLI when the tools run elsewhere, under the `--sandbox` the
//! exec-server applies on its side, and what the header shows for it. It never starts
//! anything but the transport (through the library) and never reads the remote side itself.

use std::sync::Arc;

use agentloop::exec::ExecutionEnvironment;
use agentloop::exec::remote::{
    ContainerOptions, RemoteError, RemoteExecutionEnvironment, Transport,
};

use crate::args::Options;

/// A remote environment and the header's text for it.
pub type Remote = (Arc<dyn ExecutionEnvironment>, String);

/// The remote environment the options ask for (`None`: tools run locally) and the
/// header's text for it (`ssh://user@host:2222 /src`).
pub fn environment(options: &Options) -> Result<Option<Remote>, String> {
    let server = options.remote_server.as_deref();
    let (transport, dir) = match (&options.remote, &options.remote_command) {
        (Some(url), _) if url.starts_with("ssh://") => {
            Transport::parse_ssh_url(url, &[], server).map_err(|e| e.to_string())?
        }
        (Some(url), _) => {
            let mut container = ContainerOptions::new();
            container.runtime = options.remote_runtime.clone();
            container.extra_args = options.remote_args.clone();
            if server.is_none() {
                container.bootstrap = sibling_server();
            }
            Transport::parse_container_url(url, &container, server).map_err(|e| {
                let schemes = ["podman://", "docker://", "kubectl://"];
                if schemes.iter().any(|scheme| url.starts_with(scheme)) {
                    e.to_string()
                } else {
                    format!("`{url}` is not an ssh://, podman://, docker:// or kubectl:// URL")
                }
            })?
        }
        (None, Some(command)) => {
            let argv: Vec<String> = command.split_whitespace().map(str::to_string).collect();
            (Transport::command(argv, server), None)
        }
        (None, None) => return Ok(None),
    };
    let sandbox = crate::sandbox::sandbox(options);
    let env = RemoteExecutionEnvironment::connect_sandboxed(transport, dir.as_deref(), sandbox)
        .map_err(|e| match RemoteError::of(&e) {
            Some(RemoteError::Sandbox { .. }) => format!("{e}; {}", crate::sandbox::RETRY),
            _ => format!("cannot reach the remote exec-server: {e}"),
        })?;
    // The header names the sandbox the remote side applied, in its words.
    let sandbox = match env.applied_sandbox() {
        Some(applied) => format!("sandbox {applied} (remote)"),
        None => "no sandbox (full access)".to_string(),
    };
    let header = format!(
        "{} {} · {sandbox}",
        env.label(),
        env.working_directory().display()
    );
    Ok(Some((Arc::new(env), header)))
}

/// The `agentloop-exec-server` installed beside this program, which a container URL
/// copies in when the container has no copy of it (`--remote-server` names one instead).
fn sibling_server() -> Option<std::path::PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let server = exe.with_file_name("agentloop-exec-server");
    server.is_file().then_some(server)
}
