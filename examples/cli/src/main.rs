//! `agentloop`: the reference CLI built on the agentloop library — a coding agent in the
//! terminal, with an offline demo when no API key is set.
//!
//! ```text
//! cargo run --release                                       # the offline demo
//! ANTHROPIC_API_KEY=… cargo run --release -- "make the tests pass"
//! cargo run --release -- --json "list the files" | jq .kind
//! cargo install --path examples/cli                         # then: agentloop …
//! ```
//!
//! `agentloop --help` lists the options and exit statuses. This file wires the pieces
//! together: options (`args.rs`), provider and profile (`setup.rs`), the demo model
//! (`demo.rs`), the views (`render.rs`), signals (`signals.rs`), keeping keys out of the
//! environment (`keys.rs`) and the start-up shortcuts (`fast_start.rs`). It never writes
//! anything but events to stdout in `--json` mode.

// The C `main` in `fast_start.rs` replaces std's runtime start-up (why: there). The unit
// tests (`cargo test`) keep libtest's own `main`.
#![cfg_attr(not(test), no_main)]

/// `eprintln!` that never panics: a line for stderr, dropped (and remembered, for exit
/// status 1) once stderr cannot be written. Why: std's `eprintln!` panics on a closed pipe
/// (`agentloop … 2>&1 | head -1`), and a panic cannot unwind out of the C `main`: SIGABRT.
macro_rules! say {
    () => { $crate::std_streams::stderr(format_args!(""), true) };
    ($($arg:tt)*) => { $crate::std_streams::stderr(format_args!($($arg)*), true) };
}

/// `eprint!` that never panics (see [`say!`]).
macro_rules! say_inline {
    ($($arg:tt)*) => { $crate::std_streams::stderr(format_args!($($arg)*), false) };
}

/// `println!` that never panics: `false` once stdout cannot be written (said once on
/// stderr; exit status 1).
macro_rules! out {
    ($($arg:tt)*) => { $crate::std_streams::stdout(format_args!($($arg)*)) };
}

mod acp;
mod args;
mod control;
mod demo;
mod exit;
mod fast_start;
mod hooks;
mod keys;
mod mcp;
mod patch;
mod remote;
mod render;
mod rewind;
mod sandbox;
mod setup;
mod signals;
mod std_streams;
mod trajectory;

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentloop::exec::ExecutionEnvironment;
use agentloop::llm::ToolCall;
use agentloop::llm::pricing::PriceTable;
use agentloop::profiles::ProviderProfile;
use agentloop::session::checkpoint::{CheckpointConfig, Fork};
use agentloop::session::{
    Approval, ApprovalResponder, CloseReason, EventKind, Events, RecvError, Session, SessionConfig,
    SessionEvent, SessionState, StopReason,
};
use serde_json::Value;

use args::{ApproveMode, Command, Options};
use render::{Human, Output};
use signals::{CtrlC, Line, LineReader, Signal};

use exit::{EXIT_ERROR, EXIT_INTERRUPTED, EXIT_LIMIT, EXIT_NO_OUTPUT, EXIT_OK, EXIT_USAGE};

/// How often the live indicator is redrawn while no event arrives.
const TICK: Duration = Duration::from_millis(100);

/// How long into the session the signal watcher starts (see [`Run::next_event`]): after
/// the worker's start and first request, not beside them. A signal meanwhile waits in the
/// pipe, at most this long.
const WATCH_AFTER: Duration = Duration::from_millis(10);

/// The CLI, once `fast_start` has prepared the process.
#[cfg_attr(test, allow(dead_code))]
fn run_main() -> libc::c_int {
    // First, before any thread: the keys leave the process environment (and the block
    // `/proc/<pid>/environ` shows).
    let keys = keys::take_from_environment();
    // The signal pipes. Until the session is being started a signal ends the program the
    // default way (nothing to clean up yet); then it waits in the pipe for the watcher,
    // which starts 10 ms into the session (`WATCH_AFTER`), so that neither start-up nor
    // the worker's first request shares the machine with a thread's start.
    let control = Arc::new(Control::default());
    let signals = match CtrlC::new() {
        Ok(signals) => signals,
        Err(err) => {
            say!("agentloop: cannot handle signals: {err}");
            std::process::exit(EXIT_ERROR);
        }
    };
    // `run` returns once the session has ended (its commands ended, its transcript
    // written); the exit ends the threads left, the watcher's and the worker's end.
    let code = run(&keys, &control, &signals);
    // A closed stdout or stderr is exit status 1, whatever else happened (a signal's
    // status stays).
    let code = if std_streams::failed() && code < 128 {
        EXIT_ERROR
    } else {
        code
    };
    if let Some(record) = exit::record(code) {
        // The last line of `--json` output; nothing more to do if stdout is gone.
        let mut out = io::stdout().lock();
        let _ = out.write_all(record.as_bytes()).and_then(|()| out.flush());
    }
    signals::restore_default();
    std::process::exit(code);
}

fn run(keys: &HashMap<String, String>, control: &Arc<Control>, ctrl_c: &CtrlC) -> i32 {
    let var = |name: &str| keys.get(name).cloned().or_else(|| std::env::var(name).ok());
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    let options = match args::parse(arguments.iter().cloned()) {
        Ok(Command::Run(options)) => {
            exit::json_record(options.json);
            *options
        }
        Ok(Command::Mcp(options, action)) => return mcp::command(&options, &action, &var),
        Ok(Command::Acp(options)) => {
            let var = |name: &str| keys.get(name).cloned().or_else(|| std::env::var(name).ok());
            return acp::run(*options, &var, ctrl_c);
        }
        Ok(Command::Help) => return print_or_fail(args::USAGE),
        Ok(Command::Version) => {
            return print_or_fail(&format!("agentloop {}\n", env!("CARGO_PKG_VERSION")));
        }
        Err(err) => {
            // The flag the parser may not have reached still asks for the record.
            let json = arguments
                .iter()
                .take_while(|a| *a != "--")
                .any(|a| a == "--json");
            exit::json_record(json);
            return usage_error(&err.0);
        }
    };
    let setup = match setup::resolve(&options, &var) {
        Ok(setup) => setup,
        Err(err) => return usage_error(&err.0),
    };
    if options.approve == ApproveMode::Ask {
        if let Err(err) = std::fs::File::open("/dev/tty") {
            return usage_error(&format!(
                "--approve ask needs a terminal to ask on, and there is none ({err}); run \
                 it in a terminal, or use --approve auto"
            ));
        }
    }
    for note in &setup.notes {
        say!("agentloop: {note}");
    }
    let schema = match control::output_schema(&options) {
        Ok(schema) => schema,
        Err(err) => return usage_error(&err.0),
    };
    if let Err(err) = sandbox::check(&options) {
        return usage_error(&err);
    }
    if let Err(err) = control::check(&options, &setup.profile, &setup.fallbacks) {
        return usage_error(&err.0);
    }

    // The prompt: the demo's task, the command line, or stdin (read before Ctrl-C is
    // handled, so that a Ctrl-C while typing into a pipe ends the program as usual).
    let stdin_is_terminal = signals::is_terminal(io::stdin().as_raw_fd());
    let prompt = if setup.demo.is_some() {
        if options.prompt.is_some() {
            say!("agentloop: the offline demo runs its own task; your prompt was not sent");
        }
        Some(demo::TASK.to_string())
    } else if let Some(prompt) = &options.prompt {
        Some(prompt.clone())
    } else if stdin_is_terminal || rewind::request(&options).is_some() {
        None // a terminal asks for inputs; a rewind without a prompt stops after it
    } else {
        let mut text = String::new();
        if let Err(err) = io::stdin().read_to_string(&mut text) {
            say!("agentloop: cannot read the prompt from stdin: {err}");
            return EXIT_ERROR;
        }
        if text.trim().is_empty() {
            return usage_error("no prompt: give one as arguments or on stdin");
        }
        Some(text)
    };

    if schema.is_some() && (prompt.is_none() || setup.demo.is_some()) {
        return usage_error("--output-schema needs one task: a prompt, not the demo or a dialogue");
    }
    if setup.demo.is_some() && (options.remote.is_some() || options.remote_command.is_some()) {
        return usage_error("the offline demo runs locally; --remote needs a real provider");
    }
    let remote = match remote::environment(&options) {
        Ok(remote) => remote,
        Err(err) => {
            say!("agentloop: {err}");
            return EXIT_ERROR;
        }
    };
    let baseline = match patch_baseline(&options, &setup.cwd, remote.is_some()) {
        Ok(baseline) => baseline,
        Err(err) => return usage_error(&err),
    };
    let model_label = format!("agentloop/{}", setup.profile.model);
    // Where the tools run, and how the header names it.
    let (env, mut place): (Arc<dyn ExecutionEnvironment>, String) = match remote {
        Some((env, header)) => (env, header),
        None => match sandbox::environment(&options, &setup.cwd) {
            Ok(local) => {
                let place = format!("{} · {}", setup.cwd.display(), sandbox::describe(&local));
                (Arc::new(local), place)
            }
            Err(message) => {
                say!("agentloop: {message}");
                return EXIT_ERROR;
            }
        },
    };
    if let Some(url) = &setup.endpoint {
        place = format!("{place} · requests to {url}");
    }
    let stdout_is_terminal = signals::is_terminal(io::stdout().as_raw_fd());
    let mut output = if options.json {
        Output::Json(Vec::with_capacity(1024))
    } else {
        let colour = stdout_is_terminal && std::env::var_os("NO_COLOR").is_none();
        let indicator = signals::is_terminal(io::stderr().as_raw_fd());
        // With --output-schema, stdout holds the value alone: the view goes to stderr.
        Output::Human(Box::new(
            Human::new(colour, indicator, prompt.is_some(), place)
                .on_stderr(schema.is_some())
                .priced(PriceTable::default().price(&setup.profile.model).is_some()),
        ))
    };
    if setup.demo.is_some() {
        let banner = format!(
            "{}\nworking directory: {}",
            demo::BANNER,
            setup.cwd.display()
        );
        let shown = match &mut output {
            Output::Human(human) => human.line(&banner),
            Output::Json(_) => writeln!(io::stderr(), "{banner}"),
        };
        if let Err(err) = shown {
            return output_error(&err);
        }
    }

    control.one_shot.store(prompt.is_some(), Ordering::SeqCst);
    // From here on a signal waits in the pipe; the watcher acts on it once it starts,
    // with the session running (`Run::watch_signals`).
    if let Err(err) = ctrl_c.handle() {
        say!("agentloop: cannot handle signals: {err}");
        return EXIT_ERROR;
    }
    let mcp_tokens = mcp::token_file(&options, &var);
    // A missing or malformed --mcp-config is the user's mistake (exit 2), found before the
    // session starts any server.
    if let Some(path) = &options.mcp_config {
        if let Err(err) = mcp::servers(path, &setup.cwd, mcp_tokens.as_deref()) {
            return usage_error(&err);
        }
    }
    let trajectory = options
        .trajectory
        .as_deref()
        .map(|path| trajectory::TrajectoryFile::new(path, &setup.profile.tools()));
    let session = match start_session(
        &options,
        (&setup.cwd, mcp_tokens.as_deref()),
        (setup.profile, setup.fallbacks),
        setup.client,
        env,
    ) {
        Ok(session) => Arc::new(session),
        Err(err) => {
            say!("agentloop: {err}");
            exit::because(err.kind().as_str(), &err.to_string());
            return EXIT_ERROR;
        }
    };
    let mut events = session.events();
    for line in mcp::header(&session) {
        let shown = match &mut output {
            Output::Human(human) => human.line(&line),
            Output::Json(_) => writeln!(io::stderr(), "{line}"),
        };
        if shown.is_err() {
            return EXIT_ERROR;
        }
    }
    control.started(&session);
    let rewind_only = rewind::request(&options).is_some() && prompt.is_none();
    if let Some(request) = rewind::request(&options) {
        match session.rewind(request) {
            // The JSON view gets the rewind as its `rewound` event (a dry run has none).
            Ok(report) if options.json && report.dry_run => {
                let json = serde_json::to_string(&report).unwrap_or_default();
                if print_or_fail(&format!("{json}\n")) != EXIT_OK {
                    return EXIT_ERROR;
                }
            }
            Ok(report) if !options.json => {
                if print_or_fail(&rewind::describe(&report, &setup.cwd)) != EXIT_OK {
                    return EXIT_ERROR;
                }
            }
            Ok(_) => {}
            Err(err) => {
                eprintln!("agentloop: the rewind failed: {err}");
                return EXIT_ERROR;
            }
        }
    }

    let mut run = Run {
        session: &session,
        events: &mut events,
        output: &mut output,
        ctrl_c,
        control,
        approve: options.approve,
        last_stop: None,
        closed_by_error: false,
        output_failed: false,
        ended: false,
        watch_due: Some(Instant::now() + WATCH_AFTER),
        watch_failed: false,
        schema,
        answer: None,
        error: None,
        trajectory,
    };
    let code = match prompt {
        Some(prompt) => {
            run.submit(prompt, true);
            run.until_session_end();
            run.print_output(options.json);
            run.one_shot_status()
        }
        None if rewind_only => {
            run.session.close();
            run.until_session_end();
            run.closed_status()
        }
        None => run.interactive(),
    };
    let code = match control.terminated() {
        Some(signal) => 128 + signal,
        None if run.watch_failed => EXIT_ERROR,
        None => code,
    };
    let ended = run.ended;
    drop(events);
    *lock(&control.slot) = Slot::Early; // the watcher's handle to the session
    if ended {
        fast_start::leave_ended(session);
    } else {
        drop(session); // aborts and joins the worker
    }
    let code = match &baseline {
        Some(baseline) => emit_patch(&options, baseline, &model_label, code),
        None => code,
    };
    if code == EXIT_OK && setup.demo.as_ref().is_some_and(|d| !d.succeeded()) {
        say!("agentloop: the demo did not reach the expected result");
        return EXIT_ERROR;
    }
    code
}

/// `--emit-patch`, `--predictions`: the work tree as the run found it (`None` when neither
/// is given); an error is bad usage.
fn patch_baseline(
    options: &Options,
    cwd: &std::path::Path,
    remote: bool,
) -> Result<Option<patch::Baseline>, String> {
    if options.predictions.is_some() != options.instance_id.is_some() {
        return Err("--predictions and --instance-id go together".into());
    }
    if options.emit_patch.is_none() && options.predictions.is_none() {
        return Ok(None);
    }
    if remote {
        return Err(
            "--emit-patch and --predictions read the local work tree, not --remote's".into(),
        );
    }
    patch::Baseline::record(cwd).map(Some)
}

/// Writes the patch and the prediction line once the session has ended, whatever ended
/// it (a harness wants the changes of a stopped run too); a failure to write is exit 1
/// when the run had succeeded.
fn emit_patch(options: &Options, baseline: &patch::Baseline, model: &str, code: i32) -> i32 {
    let written = baseline.patch().and_then(|patch| {
        if let Some(path) = &options.emit_patch {
            patch::write_patch(path, &patch)?;
        }
        match (&options.predictions, &options.instance_id) {
            (Some(path), Some(id)) => patch::append_prediction(path, id, model, &patch),
            _ => Ok(()),
        }
    });
    match written {
        Ok(()) => code,
        Err(err) => {
            say!("agentloop: {err}");
            if code == EXIT_OK {
                exit::because("io", &err);
                EXIT_ERROR
            } else {
                code
            }
        }
    }
}

/// Prints `text` on stdout; a closed stdout or a full disk is a one-line error.
fn print_or_fail(text: &str) -> i32 {
    let mut out = io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => EXIT_OK,
        Err(err) => output_error(&err),
    }
}

/// Reports that stdout cannot be written (closed pipe, full disk) in one line.
fn output_error(err: &io::Error) -> i32 {
    std_streams::stdout_failed(err);
    EXIT_ERROR
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn usage_error(message: &str) -> i32 {
    exit::because("usage", message);
    say!("agentloop: {message}");
    say!("run `agentloop --help` for the options");
    EXIT_USAGE
}

impl Run<'_> {
    /// The exit status of a run of one prompt (its reason recorded for the `exit` record).
    fn one_shot_status(&self) -> i32 {
        if self.output_failed {
            return EXIT_ERROR;
        }
        if self.closed_by_error {
            return self.error_status();
        }
        if self.control.pressed() {
            return EXIT_INTERRUPTED;
        }
        if self.schema.is_some() && self.answer.is_none() {
            return match self.last_stop {
                Some(StopReason::Interrupted | StopReason::Aborted) => EXIT_INTERRUPTED,
                Some(StopReason::Error) => self.error_status(),
                _ => {
                    exit::because(
                        "structured_output_failed",
                        "no final answer valid against --output-schema",
                    );
                    EXIT_NO_OUTPUT
                }
            };
        }
        match self.last_stop {
            None | Some(StopReason::Completed) => EXIT_OK,
            Some(
                stop @ (StopReason::TurnLimit
                | StopReason::RoundLimit
                | StopReason::BudgetExhausted),
            ) => {
                let word = serde_json::to_value(stop).unwrap_or_default();
                let word = word.as_str().unwrap_or("limit");
                exit::because(word, &format!("the agent stopped at a limit ({word})"));
                EXIT_LIMIT
            }
            Some(StopReason::Interrupted | StopReason::Aborted) => EXIT_INTERRUPTED,
            Some(StopReason::Error) => self.error_status(),
            Some(_) => EXIT_ERROR,
        }
    }

    /// The status of a run an error ended: the provider's failure or refusal by the last
    /// error event's kind, else 1.
    fn error_status(&self) -> i32 {
        match &self.error {
            Some((kind, message)) => {
                exit::because(kind, message);
                exit::for_error_kind(kind)
            }
            None => EXIT_ERROR,
        }
    }
}

/// The session: the profile and client are moved in (a profile holds every tool schema, so
/// copying it costs start-up time).
fn start_session(
    options: &Options,
    (cwd, mcp_tokens): (&std::path::Path, Option<&std::path::Path>),
    (mut profile, fallbacks): (ProviderProfile, Vec<ProviderProfile>),
    client: agentloop::llm::Client,
    env: Arc<dyn ExecutionEnvironment>,
) -> agentloop::Result<Session> {
    let mut config = SessionConfig::default();
    if let Some(path) = &options.hooks {
        let hooks = hooks::load(path, env.clone())
            .map_err(|e| agentloop::Error::new(agentloop::ErrorKind::Configuration, e))?;
        config = config.with_hooks(hooks);
    }
    let mut config = config
        .with_max_turns(options.max_turns)
        .with_max_tool_rounds_per_input(options.max_rounds);
    if let Some(effort) = &options.reasoning_effort {
        config = config.with_reasoning_effort(effort.clone());
    }
    if let Some(tokens) = options.max_tokens {
        config = config.with_max_output_tokens(tokens);
    }
    if let Some(secs) = options.background_after {
        config = config.with_background_after(std::time::Duration::from_secs(secs));
    }
    if let Some(ms) = options.timeout_ms {
        config = config.with_default_command_timeout(std::time::Duration::from_millis(ms));
    }
    if options.approve == ApproveMode::Ask {
        config = config.with_approval(ask_before_changes);
    }
    if options.plan {
        config = config.with_mode(agentloop::session::SessionMode::Plan);
    }
    if let Some(path) = &options.transcript {
        config = config.with_transcript(path);
    }
    if let Some(path) = &options.mcp_config {
        for server in mcp::servers(path, cwd, mcp_tokens)
            .map_err(|e| agentloop::Error::new(agentloop::ErrorKind::Configuration, e))?
        {
            config = config.with_mcp_server(server);
        }
        // A login's address goes to the terminal, where someone can open it.
        let interactive = signals::is_terminal(io::stderr().as_raw_fd());
        config = config.with_mcp_host(Arc::new(mcp::Terminal { interactive }));
    }
    if let Some(tokens) = options.context_window {
        profile = profile.with_context_window_size(tokens);
    }
    // A saved session can be rewound: its checkpoints go beside its transcript.
    if options.transcript.is_some() || options.resume.is_some() {
        config = config.with_checkpoints(CheckpointConfig::enabled());
    }
    let fallbacks = fallbacks
        .into_iter()
        .map(|f| match options.context_window {
            Some(tokens) => f.with_context_window_size(tokens),
            None => f,
        })
        .collect();
    let config = control::configure(options, config, fallbacks);
    match &options.resume {
        Some(path) if options.fork => {
            let saved = options
                .transcript
                .clone()
                .unwrap_or_else(|| rewind::fork_path(path));
            eprintln!("agentloop: the fork is saved in {}", saved.display());
            let at = options.rewind.map_or_else(Fork::latest, Fork::at_input);
            let config = config.with_transcript(saved);
            Session::fork_from(path, at, profile, env, client, config)
        }
        Some(path) => Session::resume(path, profile, env, client, config),
        None => Session::new(profile, env, client, config),
    }
}

/// `--approve ask`: commands and writes wait for the user; reads and searches run.
fn ask_before_changes(call: &ToolCall) -> Approval {
    match call.name.as_str() {
        // Input for a background process can be commands (a shell started in the background).
        "shell"
        | "write_file"
        | "edit_file"
        | "apply_patch"
        | "write_stdin"
        | "write_background_input" => Approval::Ask,
        _ => Approval::Allow,
    }
}

/// What a signal reaches: nothing (yet, or any more), or the running session.
#[derive(Default)]
enum Slot {
    /// Nothing to clean up: a signal ends the program the default way.
    #[default]
    Early,
    Running(Arc<Session>),
}

/// What Ctrl-C, SIGTERM and SIGHUP do, shared between the main thread and the watcher.
#[derive(Default)]
struct Control {
    /// Presses while an input was processing.
    presses: AtomicUsize,
    /// The main thread waits for the user's next line (a press wakes it instead).
    prompting: AtomicBool,
    /// One prompt, then exit.
    one_shot: AtomicBool,
    /// The SIGTERM or SIGHUP received (0: none).
    terminated: AtomicI32,
    slot: Mutex<Slot>,
}

impl Control {
    /// Runs on the signal watcher thread.
    fn on_signal(&self, signal: Signal) {
        let session = {
            let slot = lock(&self.slot);
            match &*slot {
                Slot::Early => signals::die_by(signal),
                Slot::Running(session) => session.clone(),
            }
        };
        match signal {
            Signal::Interrupt => self.on_press(&session),
            Signal::Terminate(n) => {
                // Like an abort: the running command's group ends, `session_end` is
                // written; a second such signal ends the program at once.
                self.terminated.store(n, Ordering::SeqCst);
                session.abort();
                signals::restore_default();
            }
        }
    }

    /// The session exists: signals reach it from now on (the watcher starts after this).
    fn started(&self, session: &Arc<Session>) {
        *lock(&self.slot) = Slot::Running(session.clone());
    }

    /// The SIGTERM or SIGHUP that ended the session, if any.
    fn terminated(&self) -> Option<i32> {
        match self.terminated.load(Ordering::SeqCst) {
            0 => None,
            n => Some(n),
        }
    }

    /// First press: interrupt the input (or, for a single prompt that has not started
    /// yet, abort the session). Second: abort the session, and let a third end the program
    /// the default way.
    fn on_press(&self, session: &Session) {
        if self.prompting.load(Ordering::SeqCst) {
            return;
        }
        if self.presses.fetch_add(1, Ordering::SeqCst) == 0 {
            if self.one_shot.load(Ordering::SeqCst) && session.state() == SessionState::Idle {
                session.abort(); // nothing to interrupt yet: the input would still run
            } else {
                session.interrupt();
            }
        } else {
            session.abort();
            signals::restore_default();
        }
    }

    fn pressed(&self) -> bool {
        self.presses.load(Ordering::SeqCst) > 0
    }
}

/// One run of the CLI: the session, its events and how they end.
struct Run<'a> {
    session: &'a Session,
    events: &'a mut Events,
    output: &'a mut Output,
    ctrl_c: &'a CtrlC,
    control: &'a Arc<Control>,
    approve: ApproveMode,
    last_stop: Option<StopReason>,
    closed_by_error: bool,
    output_failed: bool,
    /// `SESSION_END` was seen: the session's commands are ended and its transcript is
    /// written.
    ended: bool,
    /// When the signal watcher is due to start; `None` once it was started.
    watch_due: Option<Instant>,
    /// The watcher could not start: the session was aborted.
    watch_failed: bool,
    /// `--output-schema`: the final answer's schema.
    schema: Option<Value>,
    /// The final answer's value, once an input ended with one.
    answer: Option<Value>,
    /// The last error event's kind and message.
    error: Option<(String, String)>,
    /// `--trajectory`: the ATIF file, fed every event.
    trajectory: Option<trajectory::TrajectoryFile>,
}

impl Run<'_> {
    /// Submits `prompt`; with `last`, the session closes once it is processed.
    fn submit(&mut self, prompt: String, last: bool) {
        let submitted = match &self.schema {
            Some(schema) => self.session.submit_structured(prompt, schema.clone()),
            None => self.session.submit(prompt),
        };
        if submitted.is_err() {
            return; // closed: the event stream says why
        }
        if last {
            self.session.close();
        }
    }

    /// Starts the signal watcher unless it runs already: signals that came since the
    /// handlers were installed are acted on now. Called when it is due and before the CLI
    /// waits for anything but events (a line of input, an approval), which a press must
    /// interrupt.
    fn watch_signals(&mut self) {
        if self.watch_due.take().is_none() {
            return;
        }
        let control = self.control.clone();
        if let Err(err) = self.ctrl_c.watch(move |signal| control.on_signal(signal)) {
            say!("agentloop: cannot handle signals: {err}");
            self.watch_failed = true;
            self.session.abort();
        }
    }

    /// Reads the next event, redrawing the indicator while waiting, and starts the signal
    /// watcher once it is due ([`WATCH_AFTER`]), whether events come or not.
    fn next_event(&mut self) -> Option<SessionEvent> {
        loop {
            let now = Instant::now();
            if self.watch_due.is_some_and(|due| due <= now) {
                self.watch_signals();
            }
            let watch_in = self.watch_due.map(|due| due - now);
            let ticks = self.output.wants_ticks().then_some(TICK);
            let wait = match (watch_in, ticks) {
                (None, None) => return self.events.next(),
                (Some(watch_in), Some(tick)) => watch_in.min(tick),
                (Some(wait), None) | (None, Some(wait)) => wait,
            };
            match self.events.recv_timeout(wait) {
                Ok(event) => return Some(event),
                Err(RecvError::Timeout) if watch_in == Some(wait) => self.watch_signals(),
                Err(RecvError::Timeout) => self.output.tick(),
                Err(RecvError::Ended) => return None,
            }
        }
    }

    /// Shows events until the current input ends (`true`) or the session ends (`false`).
    fn until_processing_end(&mut self) -> bool {
        while let Some(event) = self.next_event() {
            self.show(&event);
            match &event.kind {
                EventKind::ProcessingEnd {
                    stop_reason,
                    output,
                    ..
                } => {
                    self.last_stop = Some(*stop_reason);
                    self.answer.clone_from(output);
                    return true;
                }
                EventKind::SessionEnd { reason, .. } => {
                    self.closed_by_error |= *reason == CloseReason::Error;
                    return false;
                }
                _ => {}
            }
        }
        false
    }

    fn until_session_end(&mut self) {
        while self.until_processing_end() {}
    }

    /// With `--output-schema` in the human view: the final answer's value, alone on stdout
    /// (with `--json` it is in the `processing_end` event).
    fn print_output(&mut self, json: bool) {
        let Some(answer) = self.answer.as_ref().filter(|_| !json) else {
            return;
        };
        if print_or_fail(&format!("{answer}\n")) != EXIT_OK {
            self.output_failed = true;
        }
    }

    /// Shows one event (and answers it, for an approval request).
    fn show(&mut self, event: &SessionEvent) {
        self.ended |= matches!(event.kind, EventKind::SessionEnd { .. });
        if let Some(trajectory) = &mut self.trajectory {
            trajectory.event(event);
        }
        if let EventKind::SessionEnd {
            usage, cost_usd, ..
        } = &event.kind
        {
            exit::totals(usage, *cost_usd);
        }
        if let EventKind::Error {
            message,
            error_kind,
            ..
        } = &event.kind
        {
            self.error = Some((error_kind.clone(), message.clone()));
        }
        if !self.output_failed {
            if let Err(err) = self.output.event(event) {
                // Nobody reads stdout any more (or the disk is full): stop the agent
                // instead of working unseen, and say so once.
                self.output_failed = true;
                output_error(&err);
                self.session.abort();
            }
        }
        if let EventKind::ApprovalRequested {
            tool_name,
            arguments,
            responder,
            ..
        } = &event.kind
        {
            self.output.clear_indicator();
            self.ask(tool_name, arguments, responder);
        }
    }

    /// Asks the user on the terminal whether a call may run.
    fn ask(&mut self, tool: &str, arguments: &Value, responder: &ApprovalResponder) {
        if self.approve != ApproveMode::Ask {
            responder.approve();
            return;
        }
        let tty = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/tty");
        let Ok(mut tty) = tty else {
            responder.deny("there is no terminal to ask the user on");
            return;
        };
        let question = format!(
            "allow {tool} {}? [y/N] ",
            render::summarise(tool, arguments)
        );
        if tty.write_all(question.as_bytes()).is_err() {
            responder.deny("the question could not be shown on the terminal");
            return;
        }
        self.watch_signals();
        self.ctrl_c.forget_presses();
        let answer = LineReader::new(tty.as_raw_fd()).read_line(self.ctrl_c.wake_fd());
        match answer {
            Ok(Line::Text(text)) if matches!(text.trim(), "y" | "Y" | "yes") => {
                responder.approve();
            }
            Ok(Line::Interrupted) => {
                let _ = tty.write_all(b"\n");
                responder.deny("the user interrupted the session");
            }
            _ => {
                responder.deny(format!("the user declined this {tool} call"));
            }
        }
    }

    /// Reads inputs from the terminal until Ctrl-D (exit status 0) or Ctrl-C at the prompt
    /// (130); an interrupted input returns to the prompt.
    fn interactive(&mut self) -> i32 {
        let mut stdin = LineReader::new(io::stdin().as_raw_fd());
        // SESSION_START (always the first event) before the first prompt.
        if let Some(event) = self.next_event() {
            self.show(&event);
            if let EventKind::SessionEnd { reason, .. } = event.kind {
                self.closed_by_error |= reason == CloseReason::Error;
                return self.closed_status();
            }
        }
        loop {
            say_inline!("> ");
            let _ = io::stderr().flush();
            self.watch_signals();
            self.control.prompting.store(true, Ordering::SeqCst);
            self.ctrl_c.forget_presses();
            let line = stdin.read_line(self.ctrl_c.wake_fd());
            self.control.prompting.store(false, Ordering::SeqCst);
            match line {
                Ok(Line::Text(text)) if text.trim().is_empty() => continue,
                Ok(Line::Text(text)) => {
                    self.control.presses.store(0, Ordering::SeqCst);
                    self.submit(text, false);
                    if !self.until_processing_end() {
                        return self.closed_status();
                    }
                    if self.control.pressed() {
                        // Interrupted: back to the prompt.
                        self.control.presses.store(0, Ordering::SeqCst);
                    }
                }
                Ok(Line::Interrupted) => {
                    say!();
                    self.session.close();
                    self.until_session_end();
                    return EXIT_INTERRUPTED;
                }
                Ok(Line::End) | Err(_) => {
                    say!();
                    self.session.close();
                    self.until_session_end();
                    return self.closed_status();
                }
            }
        }
    }

    fn closed_status(&self) -> i32 {
        if self.output_failed {
            EXIT_ERROR
        } else if self.closed_by_error {
            self.error_status()
        } else {
            EXIT_OK
        }
    }
}
