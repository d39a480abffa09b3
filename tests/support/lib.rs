//! The test support crate (`support`, of the `agentloop-tests` package): a loopback HTTP
//! server and a raw one for broken servers, an OAuth authorization server and protected
//! MCP server, the conformance checker, SSE and turn builders, client builders, the
//! session helpers, the process's own sockets, the parity kit, the file-tree helpers, a private
//! sshd, and running the repository's programs. Shared by the `it` tests, the CLI's tests
//! and the bench; never part of the library.

// Test helpers, not an API: the lint the library uses for its public items would ask for a
// line on every field and variant whose name says it all.
#![allow(missing_docs)]

pub mod cancel;
pub mod ci;
pub mod conformance;
pub mod oauth;
pub mod parity_kit;
pub mod podman;
pub mod programs;
pub mod providers;
pub mod raw_server;
pub mod served;
pub mod server;
pub mod session;
pub mod session_sse;
pub mod sockets;
pub mod sshd;
pub mod tools_tree;
pub mod tree_cases;
pub mod turns;

use std::path::{Path, PathBuf};
use std::time::Duration;

use agentloop::llm::anthropic::Anthropic;
use agentloop::llm::{Client, HttpOptions, Provider, RetryPolicy};

pub use server::{Reply, Server};

/// The repository's root directory (the workspace root, holding `src/` and `Cargo.lock`).
pub fn repo_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ sits in the repository")
}

/// `tests/data`: the recorded corpus, golden files and fixtures the tests read in place.
pub fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data")
}

/// A recognisable fake API key: tests assert it never shows up anywhere.
pub const FAKE_KEY: &str = "sk-ant-test-FAKEKEY0123456789abcdefghij";

/// The ceiling for anything that should be quick: catches hangs, not slowness. It is the
/// one upper time bound the tests assert (a multiple of it where a step is long: a probe
/// reading hundreds of megabytes, a long scripted session); speed is the bench's, and
/// `.ci/size-limits` refuses a tighter bound in a test.
pub const GENEROUS: Duration = Duration::from_secs(20);

// The tests' stand-ins for "forever" (`sleep 30`, a tool that blocks 30 s) outlast the
// ceiling, so that a call ending within it was stopped rather than finished.
const _: () = assert!(GENEROUS.as_secs() < 30);

/// HTTP options for loopback servers: no environment proxy, short but not flaky timeouts.
pub fn http_options() -> HttpOptions {
    HttpOptions::default()
        .with_env_proxy(false)
        .with_connect_timeout(Duration::from_secs(5))
        .with_first_byte_timeout(Duration::from_secs(10))
        .with_stall_timeout(Duration::from_secs(10))
}

/// Retries that do not make tests wait: 2 retries, 10 ms backoff doubling, no jitter, and
/// `retry-after` honoured up to 5 s.
pub fn fast_retries() -> RetryPolicy {
    RetryPolicy::default()
        .with_max_retries(2)
        .with_base_delay(Duration::from_millis(10))
        .with_max_delay(Duration::from_secs(5))
        .with_jitter(false)
}

/// Runs the ignored test `name` (its full path) alone in a child process of this test
/// binary, for a check that changes something process-wide (a limit, the thread count);
/// asserts that it ran and passed.
pub fn run_ignored_alone(name: &str) {
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            name,
            "--exact",
            "--ignored",
            "--test-threads=1",
            "--nocapture",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("1 passed"),
        "the child failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A client with `provider` and [`fast_retries`].
pub fn client_for(provider: impl Provider + 'static) -> Client {
    Client::new()
        .with_provider(provider)
        .with_retry_policy(fast_retries())
}

/// An Anthropic provider pointed at `server`, with [`FAKE_KEY`] and [`http_options`].
pub fn anthropic(server: &Server) -> Anthropic {
    Anthropic::new(FAKE_KEY)
        .with_base_url(server.url())
        .with_http_options(http_options())
}

/// A client for [`anthropic`] with [`fast_retries`].
pub fn anthropic_client(server: &Server) -> Client {
    client_for(anthropic(server))
}
