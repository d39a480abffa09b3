//! The sandbox of one command when its request carries a policy of its own
//! ([`CommandRequest::sandbox`](crate::exec::CommandRequest::sandbox)): clamped to what the
//! host allowed, resolved once per policy and kept. It never loosens beyond the host's
//! ceiling and never swallows a policy the kernel cannot enforce.
//!
//! A session's mode switches per input between the environment's own policy, read-only and
//! full access; resolving a policy (canonical roots, protected paths, the Landlock probe, the
//! mount-namespace probe) costs a few syscalls, so each policy is resolved the first time a
//! command asks for it and the result reused by every later command.

use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use super::{Active, Network, Sandbox, SandboxError, SandboxPolicy};

/// A policy resolved for commands: its sandbox (`None`: full access), or why the kernel
/// cannot enforce it.
type Resolved = Result<Option<Arc<Active>>, SandboxError>;

/// The host's ceiling for per-call policies and the policies resolved so far.
#[derive(Debug)]
pub(crate) struct PerCall {
    /// The loosest policy a command may ask for; `None`: the environment's own policy.
    pub(crate) loosest: Option<SandboxPolicy>,
    /// The host's sandbox (network, enforcement, protected paths, assumed ABI) that a
    /// per-call policy keeps: without one of the host's, the network on and enforcement
    /// `Required`, so that a read-only mode that cannot be enforced fails, never runs open.
    pub(crate) base: Sandbox,
    resolved: Mutex<Vec<(SandboxPolicy, Resolved)>>,
}

impl Default for PerCall {
    fn default() -> PerCall {
        PerCall::new(
            None,
            Sandbox::new(SandboxPolicy::FullAccess).with_network(Network::On),
        )
    }
}

impl PerCall {
    /// No policy resolved yet; commands may loosen `base` up to `loosest`.
    pub(crate) fn new(loosest: Option<SandboxPolicy>, base: Sandbox) -> PerCall {
        PerCall {
            loosest,
            base,
            resolved: Mutex::new(Vec::new()),
        }
    }

    /// The sandbox a command runs under: the environment's own (`configured`, `None` for
    /// full access) when it asks for none, else the policy it asks for, clamped to the
    /// ceiling. An error when the kernel cannot enforce that policy and the environment's
    /// enforcement is `Required` (the default when the host set no sandbox at all).
    pub(crate) fn active(
        &self,
        configured: Option<&Arc<Active>>,
        requested: Option<&SandboxPolicy>,
        working_dir: &Path,
        tmpdir: Option<&Path>,
    ) -> io::Result<Option<Arc<Active>>> {
        let Some(requested) = requested else {
            return Ok(configured.cloned());
        };
        let own = &self.base.policy;
        let ceiling = self.loosest.as_ref().unwrap_or(own);
        let effective = if within(requested, ceiling) {
            requested
        } else {
            ceiling
        };
        if effective == own {
            return Ok(configured.cloned());
        }
        let mut resolved = self.resolved.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, known)) = resolved.iter().find(|(p, _)| p == effective) {
            return known.clone().map_err(io::Error::from);
        }
        // Network and enforcement stay the host's: a per-call policy is about writes.
        let sandbox = Sandbox {
            policy: effective.clone(),
            network: if *effective == SandboxPolicy::FullAccess {
                Network::On
            } else {
                self.base.network
            },
            ..self.base.clone()
        };
        let active = Active::new(sandbox, working_dir, tmpdir)
            .map(|active| active.restricts().then(|| Arc::new(active)));
        resolved.push((effective.clone(), active.clone()));
        active.map_err(io::Error::from)
    }
}

/// Whether `policy` allows nothing that `ceiling` does not: read-only is within everything,
/// full access only within full access, and a workspace-write policy within one whose roots
/// cover its roots (and whose `/tmp` grant covers its own).
pub(crate) fn within(policy: &SandboxPolicy, ceiling: &SandboxPolicy) -> bool {
    match (ceiling, policy) {
        (SandboxPolicy::FullAccess, _) | (_, SandboxPolicy::ReadOnly) => true,
        (
            SandboxPolicy::WorkspaceWrite {
                writable_roots: outer,
                include_tmp: outer_tmp,
            },
            SandboxPolicy::WorkspaceWrite {
                writable_roots: inner,
                include_tmp: inner_tmp,
            },
        ) => {
            (*outer_tmp || !*inner_tmp)
                && inner
                    .iter()
                    .all(|root| outer.iter().any(|o| root.starts_with(o)))
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_only_is_within_everything_and_full_access_only_within_itself() {
        let ww = SandboxPolicy::workspace_write();
        for ceiling in [
            SandboxPolicy::ReadOnly,
            ww.clone(),
            SandboxPolicy::FullAccess,
        ] {
            assert!(within(&SandboxPolicy::ReadOnly, &ceiling));
        }
        assert!(within(&ww, &SandboxPolicy::FullAccess));
        assert!(!within(&ww, &SandboxPolicy::ReadOnly));
        assert!(!within(&SandboxPolicy::FullAccess, &ww));
        let no_tmp = SandboxPolicy::WorkspaceWrite {
            writable_roots: Vec::new(),
            include_tmp: false,
        };
        assert!(within(&no_tmp, &ww));
        assert!(!within(&ww, &no_tmp), "adding /tmp loosens");
    }
}
