//! Real `harbor run -e podman` jobs with agentloop as the agent, offline: Harbor 0.25.0
//! (`target/ci/harbor-venv`, with podman-compose as its compose provider) runs the task
//! `tests/data/harbor/tasks/greeting` in a podman container of `localhost/agentloop-harbor`
//! (made from this machine's files by `.ci/harbor-image`), once through Harbor's generic
//! ACP agent (`-a acp`, a `local` registry entry running `agentloop acp` from a bind-mounted
//! binary) and once through agentloop's own agent class
//! (`examples/harbor/agentloop_agent.py`). Each job asserts reward 1.0 and no error in
//! Harbor's result files, and a trajectory Harbor's validator accepts.
//!
//! Each job runs in a private network namespace of its own with only `lo` up: the
//! scripted model server binds 127.0.0.1 there, and an `--extra-docker-compose` overlay
//! gives the container that namespace's network, so nothing can reach beyond it. The
//! agent binary is `AGENTLOOP_HARBOR_BINARY` when set (`.ci/run` sets it to the static
//! build), else the test build, which runs in the image because the image carries this
//! machine's C library. Skipped with a printed reason when podman, Harbor or a network
//! namespace is unavailable (a failure under `AGENTLOOP_CI=1`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use support::{FAKE_KEY, GENEROUS, Reply, Server};

use crate::{Wire, agentloop};

/// A whole Harbor job (its start-up, the container, the agent, the verifier) takes about a
/// minute here; twelve times the shared ceiling catches a hang without cutting a slow run.
const JOB_CEILING: Duration = Duration::from_secs(GENEROUS.as_secs() * 12);

/// The model Harbor is told to use (`-m`), as the loopback server answers for any.
const MODEL: &str = "anthropic/claude-sonnet-4-5";

/// What a job needs from the machine: Harbor's venv and the image built.
struct Harbor {
    venv: PathBuf,
}

/// Skips (printing why) or fails under `AGENTLOOP_CI=1`.
fn unavailable(reason: &str) -> Option<Harbor> {
    assert!(
        std::env::var("AGENTLOOP_CI").as_deref() != Ok("1"),
        "AGENTLOOP_CI=1 and {reason}"
    );
    eprintln!("skipped: {reason}");
    None
}

/// Harbor's venv with podman-compose and uv, podman, and the task image (built once).
fn harbor() -> Option<Harbor> {
    let venv = support::ci::dir().join("harbor-venv");
    for program in ["harbor", "podman-compose", "uv"] {
        support::ci::installed(venv.join("bin").join(program), program)?;
    }
    if Command::new("podman").arg("--version").output().is_err() {
        return unavailable("podman is not installed (apt-get install podman runc)");
    }
    // Built (or found, when this same script made it) before every job: a job needs it
    // present from its start to its end.
    let script = support::repo_root().join(".ci/harbor-image");
    let built = match Command::new("bash").arg(&script).arg(&venv).output() {
        Ok(out) if out.status.success() => Ok(()),
        Ok(out) => Err(format!(
            ".ci/harbor-image failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )),
        Err(e) => Err(format!("{}: {e}", script.display())),
    };
    if let Err(reason) = built {
        return unavailable(&reason);
    }
    Some(Harbor { venv })
}

/// The agent binary the container runs (see the module's note).
fn binary() -> PathBuf {
    std::env::var_os("AGENTLOOP_HARBOR_BINARY")
        .map(PathBuf::from)
        .unwrap_or_else(agentloop)
}

/// Runs `job` on a thread of its own in a new network namespace with `lo` up: sockets it
/// binds and processes it starts live there. `None` (with the reason) when the namespace
/// cannot be made (not root).
fn in_private_network<T: Send + 'static>(
    job: impl FnOnce() -> T + Send + 'static,
) -> Result<T, String> {
    std::thread::Builder::new()
        .name("harbor-netns".into())
        .spawn(move || {
            // SAFETY: unshare takes no pointers; CLONE_NEWNET moves only this thread (made
            // for the job, ended with it) into a new network namespace.
            if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
                return Err(format!(
                    "no private network namespace: unshare(CLONE_NEWNET): {}",
                    std::io::Error::last_os_error()
                ));
            }
            let up = Command::new("ip")
                .args(["link", "set", "lo", "up"])
                .status()
                .map_err(|e| format!("ip link set lo up: {e}"))?;
            if !up.success() {
                return Err(format!("ip link set lo up: {up}"));
            }
            Ok(job())
        })
        .expect("spawn the harbor-netns thread")
        .join()
        .expect("the harbor-netns thread")
}

/// Which agent a job runs.
#[derive(Debug, Clone, Copy)]
enum Agent {
    /// Harbor's generic ACP agent with a `local` registry entry.
    GenericAcp,
    /// `examples/harbor/agentloop_agent.py`.
    OwnClass,
}

/// What a finished job left: Harbor's output, the trial directory, the model's requests.
struct Job {
    status: Option<i32>,
    output: String,
    jobs: PathBuf,
    requests: usize,
}

impl Job {
    /// The one trial's directory.
    fn trial(&self, name: &str) -> PathBuf {
        let job = self.jobs.join(name);
        let trials: Vec<PathBuf> = std::fs::read_dir(&job)
            .unwrap_or_else(|e| panic!("{}: {e}\n{}", job.display(), self.output))
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|p| p.join("result.json").is_file())
            .collect();
        assert_eq!(trials.len(), 1, "{trials:?}\n{}", self.output);
        trials[0].clone()
    }
}

/// Reads a JSON file, with Harbor's output in the message when it is missing.
fn json_file(path: &Path, output: &str) -> Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}\n{output}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The `harbor run` command line for `agent` (the job's own options are added by the
/// caller).
fn agent_args(agent: Agent, binary: &Path, model_url: &str) -> Vec<String> {
    match agent {
        Agent::GenericAcp => {
            let entry = json!({
                "id": "agentloop",
                "name": "agentloop",
                "version": "0.1.0",
                "description": "agentloop acp from a bind-mounted static binary",
                "distribution": {"local": {
                    "cmd": "/opt/agentloop/agentloop",
                    "args": ["acp", "--sandbox", "full-access"],
                }},
            });
            let mounts = json!([{
                "type": "bind",
                "source": binary.display().to_string(),
                "target": "/opt/agentloop/agentloop",
                "read_only": true,
            }]);
            vec![
                "-a".into(),
                "acp".into(),
                "--ak".into(),
                format!("registry_entry={entry}"),
                "--mounts".into(),
                mounts.to_string(),
                "--ae".into(),
                format!("ANTHROPIC_BASE_URL={model_url}"),
                "--ae".into(),
                format!("ANTHROPIC_API_KEY={FAKE_KEY}"),
            ]
        }
        Agent::OwnClass => vec![
            "-a".into(),
            "agentloop_agent:Agentloop".into(),
            "--ak".into(),
            format!("binary_path={}", binary.display()),
        ],
    }
}

/// Runs one `harbor run -e podman` job of the greeting task with `agent` in a private
/// network namespace, the scripted model answering there; `None` when skipped.
fn run_job(agent: Agent, name: &str) -> Option<(Job, tempfile::TempDir)> {
    // One job at a time: two at once on a loaded two-core machine only slow each other.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let harbor = harbor()?;
    let dir = tempfile::tempdir().unwrap();
    // The task under a name of this job's own: Harbor names the containers after it.
    let task = dir.path().join(format!("{name}-{}", std::process::id()));
    copy_dir(&support::data_dir().join("harbor/tasks/greeting"), &task);
    std::fs::create_dir_all(task.join("environment")).unwrap();
    let conf = dir.path().join("containers.conf");
    std::fs::write(
        &conf,
        "[engine]\nruntime = \"runc\"\n\n[containers]\n\
         default_ulimits = [\"nofile=1024:1024\", \"nproc=1000:1000\"]\n",
    )
    .unwrap();
    let overlay = dir.path().join("private-network.yaml");
    std::fs::write(&overlay, "services:\n  main:\n    network_mode: host\n").unwrap();
    let jobs = dir.path().join("jobs");
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let (venv, binary, name) = (harbor.venv, binary(), name.to_string());
    let job = in_private_network(move || {
        let server = Server::start(vec![
            Reply::sse(Wire::Anthropic.turn(
                "",
                &[(
                    "c1",
                    "shell",
                    json!({"command": "echo hello > /work/greeting.txt"}),
                )],
            )),
            Reply::sse(Wire::Anthropic.turn("done: /work/greeting.txt says hello", &[])),
        ]);
        let path = format!(
            "{}:{}",
            venv.join("bin").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut command = Command::new(venv.join("bin/harbor"));
        command
            .args([
                "run",
                "-e",
                "podman",
                "-n",
                "1",
                "-y",
                "--debug",
                "--job-name",
                &name,
            ])
            .args(["-m", MODEL])
            // `--delete` (the default) ends with podman-compose's `down --rmi local`, which
            // removes the task's image too: `--no-delete` still removes the containers.
            .arg("--no-delete")
            .arg("-p")
            .arg(&task)
            .arg("-o")
            .arg(&jobs)
            .arg("--extra-docker-compose")
            .arg(&overlay)
            .args(agent_args(agent, &binary, &server.url()))
            .env_clear()
            .env("PATH", path)
            .env("HOME", &home)
            .env("CONTAINERS_CONF", &conf)
            .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
            .env("PYTHONPATH", support::repo_root().join("examples/harbor"))
            // No __pycache__ beside the agent class in the checkout.
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env("ANTHROPIC_API_KEY", FAKE_KEY)
            .env("ANTHROPIC_BASE_URL", server.url());
        let (status, output) = run_bounded(command);
        Job {
            status,
            output,
            jobs,
            requests: server.requests().len(),
        }
    });
    match job {
        Ok(job) => Some((job, dir)),
        Err(reason) => {
            unavailable(&reason);
            None
        }
    }
}

/// Runs `command` in a process group of its own, its output to a file; kills the group
/// (and the job's containers) if it outlives [`JOB_CEILING`].
fn run_bounded(mut command: Command) -> (Option<i32>, String) {
    use std::os::unix::process::CommandExt;
    let log = tempfile::NamedTempFile::new().unwrap();
    command
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(log.reopen().unwrap())
        .stderr(log.reopen().unwrap());
    let mut child = command.spawn().expect("spawn harbor");
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > JOB_CEILING {
            // SAFETY: kill takes no pointers; the group is the one made for this child.
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            let _ = child.wait();
            let output = std::fs::read_to_string(log.path()).unwrap_or_default();
            panic!("harbor run did not finish within {JOB_CEILING:?}:\n{output}");
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let output = std::fs::read_to_string(log.path()).unwrap_or_default();
    (status.code(), output)
}

/// Copies the directory tree `from` to `to` (modes kept: the task's scripts run).
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// Every file under `dir`.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        match entry.file_type() {
            Ok(kind) if kind.is_dir() => files.extend(files_under(&path)),
            Ok(_) => files.push(path),
            Err(_) => {}
        }
    }
    files
}

/// Asserts what both jobs must show: Harbor exited 0, the job's one trial completed with
/// no exception and reward 1.0, the model was asked twice (the container reached it), the
/// trajectory passes Harbor's validator and holds the shell call, and the fake key is in
/// none of the agent's logs. Returns the trial's `result.json`.
fn assert_rewarded(job: &Job, name: &str, venv: &Path) -> Value {
    assert_eq!(job.status, Some(0), "{}", job.output);
    let result = json_file(&job.jobs.join(name).join("result.json"), &job.output);
    let trial = job.trial(name);
    let exception = std::fs::read_to_string(trial.join("exception.txt")).unwrap_or_default()
        + &std::fs::read_to_string(trial.join("trial.log")).unwrap_or_default();
    assert_eq!(result["stats"]["n_completed_trials"], 1, "{result}");
    assert_eq!(
        result["stats"]["n_errored_trials"], 0,
        "{result}\n{exception}"
    );
    let trial_result = json_file(&trial.join("result.json"), &job.output);
    assert!(
        trial_result["exception_info"].is_null(),
        "{}",
        trial_result["exception_info"]
    );
    assert_eq!(
        trial_result["verifier_result"]["rewards"]["reward"], 1.0,
        "{trial_result}"
    );
    assert_eq!(job.requests, 2, "{}", job.output);
    let trajectory = trial.join("agent/trajectory.json");
    let validated = Command::new(venv.join("bin/python"))
        .args(["-m", "harbor.utils.trajectory_validator"])
        .arg(&trajectory)
        .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        .output()
        .unwrap();
    assert!(
        validated.status.success(),
        "{}{}",
        String::from_utf8_lossy(&validated.stdout),
        String::from_utf8_lossy(&validated.stderr)
    );
    let atif = json_file(&trajectory, &job.output);
    let calls: Vec<&Value> = atif["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["tool_calls"].as_array())
        .flatten()
        .collect();
    assert_eq!(calls.len(), 1, "{atif}");
    for file in files_under(&trial.join("agent")) {
        let text = String::from_utf8_lossy(&std::fs::read(&file).unwrap()).into_owned();
        assert!(!text.contains(FAKE_KEY), "the key is in {}", file.display());
    }
    trial_result
}

#[test]
fn harbor_run_on_podman_with_the_generic_acp_agent_rewards_agentloop() {
    let Some((job, _dir)) = run_job(Agent::GenericAcp, "harbor-greeting-acp") else {
        return;
    };
    let venv = support::ci::dir().join("harbor-venv");
    let result = assert_rewarded(&job, "harbor-greeting-acp", &venv);
    // Harbor's ACP agent takes the token counts from the prompt response's usage.
    let agent = &result["agent_result"];
    assert!(agent["n_input_tokens"].as_u64().unwrap_or(0) > 0, "{agent}");
    assert!(
        agent["n_output_tokens"].as_u64().unwrap_or(0) > 0,
        "{agent}"
    );
}

#[test]
fn harbor_run_on_podman_with_agentloops_own_agent_class_rewards_it() {
    let name = "harbor-greeting-own";
    let Some((job, _dir)) = run_job(Agent::OwnClass, name) else {
        return;
    };
    let venv = support::ci::dir().join("harbor-venv");
    let result = assert_rewarded(&job, name, &venv);
    // The usage comes from the CLI's final `exit` record (Anthropic's input count leaves
    // the cache out; Harbor's includes it).
    let events = std::fs::read_to_string(job.trial(name).join("agent/agentloop.jsonl")).unwrap();
    let exit: Value = serde_json::from_str(events.lines().last().unwrap()).unwrap();
    assert_eq!(exit["kind"], "exit", "{events}");
    let usage = &exit["data"]["usage"];
    let count = |key: &str| usage[key].as_u64().unwrap();
    let agent = &result["agent_result"];
    assert!(
        count("input_tokens") > 0 && count("output_tokens") > 0,
        "{usage}"
    );
    assert_eq!(
        agent["n_input_tokens"],
        count("input_tokens") + count("cache_read_tokens") + count("cache_write_tokens"),
        "{agent} {usage}"
    );
    assert_eq!(agent["n_output_tokens"], count("output_tokens"), "{agent}");
    assert_eq!(
        agent["n_cache_tokens"],
        count("cache_read_tokens"),
        "{agent}"
    );
    assert_eq!(agent["metadata"]["exit_reason"], "completed", "{agent}");
    assert_eq!(agent["metadata"]["exit_code"], 0, "{agent}");
    assert_eq!(result["agent_info"]["name"], "agentloop", "{result}");
}
