//! Environment filtering of commands: a base environment passed as a map (this test binary
//! never changes its own environment), checked in the output of a real `env`.

use std::collections::BTreeMap;
use std::time::Duration;

use agentloop::CancelToken;
use agentloop::exec::{CommandRequest, EnvPolicy, ExecutionEnvironment, LocalExecutionEnvironment};

const PATH: &str = "/usr/local/bin:/usr/bin:/bin";

fn ghp_token() -> String {
    format!("ghp_{}", "abcdefghijklmnopqrstuvwxyzABCDEFGHIJ")
}

fn base_env() -> BTreeMap<String, String> {
    [
        ("PATH", PATH.to_string()),
        ("HOME", "/home/agent".to_string()),
        ("LANG", "C.UTF-8".to_string()),
        (
            "ANTHROPIC_API_KEY",
            "sk-ant-api03-0123456789abcdefghij".to_string(),
        ),
        ("MY_SECRET", "hunter2".to_string()),
        ("HARMLESS", ghp_token()),
        ("EDITOR", "vi".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// The variables a command sees, parsed from `env -0`.
fn command_sees(
    env: &LocalExecutionEnvironment,
    extra: &[(&str, &str)],
) -> BTreeMap<String, String> {
    let mut request = CommandRequest::new("env -0", Duration::from_secs(10));
    for (k, v) in extra {
        request.env.insert(k.to_string(), v.to_string());
    }
    let result = env
        .exec_command(&request, &|_, _| {}, &CancelToken::new())
        .expect("env runs");
    assert_eq!(result.exit_code, Some(0), "{}", result.stderr);
    result
        .stdout
        .split('\0')
        .filter_map(|entry| entry.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn secrets_by_name_and_by_value_never_reach_a_command() {
    let dir = tempfile::tempdir().unwrap();
    let env = LocalExecutionEnvironment::new(dir.path())
        .unwrap()
        .with_base_env(base_env());
    let seen = command_sees(&env, &[]);
    for name in ["ANTHROPIC_API_KEY", "MY_SECRET", "HARMLESS"] {
        assert!(!seen.contains_key(name), "{name} leaked");
    }
    let all_values: String = seen.values().cloned().collect::<Vec<_>>().join("\n");
    assert!(!all_values.contains(&ghp_token()));
    assert!(!all_values.contains("hunter2"));
    assert_eq!(seen.get("PATH").map(String::as_str), Some(PATH));
    assert_eq!(seen.get("HOME").map(String::as_str), Some("/home/agent"));
    assert_eq!(seen.get("EDITOR").map(String::as_str), Some("vi"));
}

#[test]
fn variables_set_on_the_request_are_added_after_filtering() {
    let dir = tempfile::tempdir().unwrap();
    let env = LocalExecutionEnvironment::new(dir.path())
        .unwrap()
        .with_base_env(base_env());
    let seen = command_sees(
        &env,
        &[("GITHUB_TOKEN", "explicit"), ("HOME", "/elsewhere")],
    );
    assert_eq!(
        seen.get("GITHUB_TOKEN").map(String::as_str),
        Some("explicit")
    );
    assert_eq!(seen.get("HOME").map(String::as_str), Some("/elsewhere"));
}

#[test]
fn core_only_passes_only_the_core_variables() {
    let dir = tempfile::tempdir().unwrap();
    let env = LocalExecutionEnvironment::new(dir.path())
        .unwrap()
        .with_base_env(base_env())
        .with_env_policy(EnvPolicy::core_only());
    let seen = command_sees(&env, &[]);
    assert!(!seen.contains_key("EDITOR"));
    assert!(!seen.contains_key("MY_SECRET"));
    for name in ["PATH", "HOME", "LANG"] {
        assert!(seen.contains_key(name), "{name} missing");
    }
}

#[test]
fn inheriting_nothing_starts_from_a_clean_environment_plus_includes() {
    let dir = tempfile::tempdir().unwrap();
    let env = LocalExecutionEnvironment::new(dir.path())
        .unwrap()
        .with_base_env(base_env())
        .with_env_policy(EnvPolicy::nothing().include("LANG"));
    assert_eq!(env.command_env().keys().collect::<Vec<_>>(), ["LANG"]);
    let seen = command_sees(&env, &[]);
    assert!(!seen.contains_key("HOME"));
    assert!(!seen.contains_key("EDITOR"));
    assert_eq!(seen.get("LANG").map(String::as_str), Some("C.UTF-8"));
}

#[test]
fn an_included_secret_is_passed_and_an_excluded_name_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let policy = EnvPolicy::inherit_all()
        .include("anthropic_api_key")
        .exclude("EDIT*");
    let env = LocalExecutionEnvironment::new(dir.path())
        .unwrap()
        .with_base_env(base_env())
        .with_env_policy(policy);
    let seen = command_sees(&env, &[]);
    assert!(seen.contains_key("ANTHROPIC_API_KEY"));
    assert!(!seen.contains_key("EDITOR"));
    assert!(!seen.contains_key("MY_SECRET"));
}

#[test]
fn the_captured_process_environment_is_filtered_too() {
    let dir = tempfile::tempdir().unwrap();
    let env = LocalExecutionEnvironment::new(dir.path()).unwrap();
    for (name, value) in env.command_env() {
        // Everything passed on is really in our environment, under the same name.
        assert_eq!(std::env::var(name).ok().as_deref(), Some(value.as_str()));
        let upper = name.to_ascii_uppercase();
        assert!(
            !upper.ends_with("_API_KEY") && !upper.ends_with("_TOKEN"),
            "{name} was passed on"
        );
    }
    if let Ok(path) = std::env::var("PATH") {
        assert_eq!(env.command_env().get("PATH"), Some(&path));
    }
}

#[test]
fn debug_output_of_the_environment_shows_no_values() {
    let dir = tempfile::tempdir().unwrap();
    let env = LocalExecutionEnvironment::new(dir.path())
        .unwrap()
        .with_base_env(base_env())
        .with_env_policy(EnvPolicy::inherit_all().include("*"));
    assert!(env.command_env().contains_key("ANTHROPIC_API_KEY"));
    let shown = format!("{env:?}");
    assert!(!shown.contains("sk-ant"), "{shown}");
    assert!(!shown.contains("hunter2"), "{shown}");
}
