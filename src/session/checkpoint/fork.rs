//! [`Fork`]: what a fork of a session starts from. Values only; the fork itself is in
//! `lifecycle.rs`.

use std::sync::Arc;

use crate::exec::ExecutionEnvironment;
use crate::llm::Client;
use crate::profiles::ProviderProfile;
use crate::session::SessionConfig;

/// What [`Session::fork`](crate::session::Session::fork) starts from: a point in the parent's
/// history, and optionally another profile, environment, client or configuration.
///
/// ```
/// use agentloop::session::SessionConfig;
/// use agentloop::session::checkpoint::Fork;
///
/// let fork = Fork::at_input(3).with_config(SessionConfig::default().with_max_turns(10));
/// # let _ = fork;
/// ```
#[derive(Clone, Default)]
#[must_use]
pub struct Fork {
    pub(crate) at: Option<usize>,
    pub(crate) profile: Option<ProviderProfile>,
    pub(crate) env: Option<Arc<dyn ExecutionEnvironment>>,
    pub(crate) client: Option<Client>,
    pub(crate) config: Option<SessionConfig>,
}

impl std::fmt::Debug for Fork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fork")
            .field("at", &self.at)
            .field("profile", &self.profile.as_ref().map(|p| &p.id))
            .field("env", &self.env.as_ref().map(|e| e.working_directory()))
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Fork {
    /// The whole history of the inputs completed so far.
    pub fn latest() -> Fork {
        Fork::default()
    }

    /// The history before input `input` (1-based): the child starts where that input was
    /// submitted, without it.
    pub fn at_input(input: usize) -> Fork {
        Fork {
            at: Some(input),
            ..Fork::default()
        }
    }

    /// Another profile for the child.
    pub fn with_profile(mut self, profile: ProviderProfile) -> Fork {
        self.profile = Some(profile);
        self
    }

    /// Another environment for the child (by default it shares the parent's).
    pub fn with_env(mut self, env: Arc<dyn ExecutionEnvironment>) -> Fork {
        self.env = Some(env);
        self
    }

    /// Another client for the child.
    pub fn with_client(mut self, client: Client) -> Fork {
        self.client = Some(client);
        self
    }

    /// Another configuration for the child. By default it gets the parent's, with its own
    /// transcript `<parent transcript stem>.fork-<child id prefix>.jsonl` beside the
    /// parent's when the parent writes one.
    pub fn with_config(mut self, config: SessionConfig) -> Fork {
        self.config = Some(config);
        self
    }
}
