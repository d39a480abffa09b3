//! The session's sandbox on a remote connection, client side: what a `hello` answer must
//! say for a sandboxed session (the server applied it, or why not) and the policy a
//! command of its own carries. It never weakens a sandbox: a server that does not say it
//! applied one is refused, never used open; and it never passes a server's words on
//! unbounded or with control characters.

use serde_json::{Value, json};

use super::codec::{str_field, strings_from_json};
use super::protocol::{FULL_ACCESS, sandbox_policy_to_json};
use super::{RemoteError, Transport};
use crate::exec::{CommandRequest, Sandbox, SandboxPolicy};

/// Whether a failed `hello` (its error `data`) is the server refusing the sandbox: its
/// kernel cannot enforce a required one, or it would loosen the server's own.
pub(super) fn refused_by_server(data: &Value) -> bool {
    matches!(
        data["kind"].as_str(),
        Some("Unsupported" | "PermissionDenied")
    )
}

/// The error of a sandbox that cannot run through `transport`.
pub(super) fn refused(transport: &Transport, detail: String) -> RemoteError {
    RemoteError::Sandbox {
        transport: transport.label.clone(),
        detail,
    }
}

/// What the `hello` `result` of `server` says of the `sandbox` asked for: the header's
/// description (`workspace-write, network off; Landlock ABI 7`) and the warnings, nothing
/// when none was asked, an error when the server applied none.
pub(super) fn applied(
    sandbox: Option<&Sandbox>,
    result: &Value,
    server: &str,
    transport: &Transport,
) -> Result<(Option<String>, Vec<String>), RemoteError> {
    let Some(sandbox) = sandbox else {
        return Ok((None, Vec::new()));
    };
    // A server from before sandboxes travelled ignores the request: never run open.
    let Some(applied) = result.get("sandbox_applied") else {
        return Err(refused(
            transport,
            format!(
                "`{server}` applies no sandbox policies (it knows only `{FULL_ACCESS}`) and the \
                 session asks for `{sandbox}`: let agentloop place its own exec-server (a \
                 container URL without a server command), install the exec-server of this \
                 release, or choose full access"
            ),
        ));
    };
    let malformed = |detail: String| RemoteError::Malformed {
        detail: format!("hello: sandbox_applied: {detail}"),
    };
    let description = str_field(applied, "description").map_err(malformed)?;
    // Another sandbox than the one asked for (a connection set up before) is none of ours.
    let asked = sandbox.to_string();
    if !description.starts_with(&asked) {
        let detail = format!(
            "`{server}` applied `{}`, not `{asked}`",
            printable(description)
        );
        return Err(refused(transport, detail));
    }
    let abi = applied["landlock_abi"].as_u64().unwrap_or(0);
    let warnings = strings_from_json(applied, "warnings").map_err(malformed)?;
    // Shown in the header and as events: a hostile server's words stay printable and short.
    let warnings = warnings
        .iter()
        .take(MAX_WARNINGS)
        .map(|w| printable(w))
        .collect();
    Ok((
        Some(format!("{}; Landlock ABI {abi}", printable(description))),
        warnings,
    ))
}

/// The most warnings kept from a server (the local sandbox gives at most five).
const MAX_WARNINGS: usize = 16;
/// The longest description or warning kept, in characters.
const MAX_TEXT: usize = 1000;

/// `text` without control characters, cut at [`MAX_TEXT`] characters.
fn printable(text: &str) -> String {
    text.chars()
        .filter(|c| !c.is_control())
        .take(MAX_TEXT)
        .collect()
}

/// A command's own policy (a session's mode) on its call: the name, which a server that
/// cannot enforce it refuses, and the whole policy; `full-access` when it has none (the
/// connection's sandbox, which a per-call policy may only narrow on the server).
pub(super) fn per_call_policy(params: &mut Value, request: &CommandRequest) {
    match &request.sandbox {
        Some(policy) if *policy != SandboxPolicy::FullAccess => {
            params["sandbox"] = json!(policy.name());
            params["sandbox_policy"] = sandbox_policy_to_json(policy);
        }
        _ => params["sandbox"] = json!(FULL_ACCESS),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hostile_servers_description_and_warnings_are_printable_and_bounded() {
        let transport = Transport::direct(vec!["x".into()]);
        let sandbox = Sandbox::new(SandboxPolicy::workspace_write());
        let result = json!({"sandbox_applied": {
            "description": "workspace-write, network off\u{1b}[2J",
            "landlock_abi": 7,
            "warnings": vec!["x".repeat(5000); 100],
        }});
        let (applied, warnings) = applied(Some(&sandbox), &result, "s", &transport).unwrap();
        assert_eq!(
            applied.as_deref(),
            Some("workspace-write, network off[2J; Landlock ABI 7")
        );
        assert_eq!(warnings.len(), MAX_WARNINGS);
        assert!(warnings.iter().all(|w| w.len() == MAX_TEXT));
        let other = json!({"sandbox_applied": {
            "description": "full-access, network on", "landlock_abi": 0, "warnings": []}});
        let refused = applied_err(&sandbox, &other, &transport);
        assert!(
            refused.contains("not `workspace-write, network off`"),
            "{refused}"
        );
        let old = json!({"sandbox": [FULL_ACCESS]});
        let refused = applied_err(&sandbox, &old, &transport);
        assert!(refused.contains("`s` applies no sandbox"), "{refused}");
    }

    fn applied_err(sandbox: &Sandbox, result: &Value, transport: &Transport) -> String {
        applied(Some(sandbox), result, "s", transport)
            .unwrap_err()
            .to_string()
    }
}
