//! Helpers for the session tests: a small real-filesystem environment, tool builders, and
//! event collection with deadlines.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentloop::CancelToken;
use agentloop::exec::{
    CommandRequest, DirEntry, ExecResult, ExecutionEnvironment, FileContent, FileStat, GrepOptions,
    GrepOutput, OutputCallback,
};
use agentloop::llm::ToolDefinition;
use agentloop::llm::scripted::{ScriptedModel, ScriptedTurn};
use agentloop::profiles::ProviderProfile;
use agentloop::session::{
    EventKind, Events, RecvError, Session, SessionConfig, SessionEvent, StopReason,
};
use agentloop::tools::{RegisteredTool, ToolContext, ToolInput, ToolOutput};
use serde_json::{Value, json};

use crate::GENEROUS;

/// An environment over a real temporary directory. File operations use std::fs; commands
/// are not supported (the shell tests use the real local environment).
pub struct DirEnv {
    root: PathBuf,
    pub cleanups: std::sync::atomic::AtomicUsize,
    /// Make `initialize` fail (for the start-up error path).
    pub fail_init: bool,
}

impl DirEnv {
    pub fn new(root: &Path) -> DirEnv {
        DirEnv {
            root: root.to_path_buf(),
            cleanups: Default::default(),
            fail_init: false,
        }
    }

    fn resolve(&self, path: &Path) -> PathBuf {
        self.root.join(path)
    }
}

impl ExecutionEnvironment for DirEnv {
    fn read_file(
        &self,
        path: &Path,
        offset: Option<usize>,
        limit: Option<usize>,
    ) -> io::Result<FileContent> {
        let text = std::fs::read_to_string(self.resolve(path))?;
        let lines: Vec<&str> = text.split_inclusive('\n').collect();
        let start = offset.unwrap_or(1).saturating_sub(1);
        let end = limit.map_or(lines.len(), |l| (start + l).min(lines.len()));
        Ok(FileContent {
            text: lines[start.min(lines.len())..end].concat(),
            size: text.len() as u64,
            total_lines: lines.len(),
        })
    }

    fn read_bytes(&self, path: &Path) -> io::Result<Vec<u8>> {
        std::fs::read(self.resolve(path))
    }

    fn write_file(&self, path: &Path, content: &[u8]) -> io::Result<()> {
        let path = self.resolve(path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(path, content)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(self.resolve(path))
    }

    fn file_exists(&self, path: &Path) -> bool {
        self.resolve(path).exists()
    }

    fn stat(&self, path: &Path) -> io::Result<FileStat> {
        let meta = std::fs::metadata(self.resolve(path))?;
        Ok(FileStat {
            is_dir: meta.is_dir(),
            size: meta.len(),
            modified: meta.modified().ok(),
        })
    }

    fn list_directory(&self, path: &Path, _depth: usize) -> io::Result<Vec<DirEntry>> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(self.resolve(path))? {
            let entry = entry?;
            let meta = entry.metadata()?;
            out.push(DirEntry {
                name: entry.file_name().to_string_lossy().into_owned(),
                is_dir: meta.is_dir(),
                size: meta.is_file().then_some(meta.len()),
            });
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    fn exec_command(
        &self,
        _request: &CommandRequest,
        _on_output: OutputCallback<'_>,
        _cancel: &CancelToken,
    ) -> io::Result<ExecResult> {
        Err(io::Error::other("commands are not supported by DirEnv"))
    }

    fn grep(&self, _pattern: &str, _path: &Path, _options: &GrepOptions) -> io::Result<GrepOutput> {
        Err(io::Error::other("grep is not supported by DirEnv"))
    }

    fn glob(&self, _pattern: &str, _path: &Path) -> io::Result<Vec<String>> {
        Err(io::Error::other("glob is not supported by DirEnv"))
    }

    fn initialize(&self) -> io::Result<()> {
        if self.fail_init {
            return Err(io::Error::other("the sandbox image is missing"));
        }
        Ok(())
    }

    fn cleanup(&self) -> io::Result<()> {
        self.cleanups
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }

    fn working_directory(&self) -> &Path {
        &self.root
    }

    fn platform(&self) -> String {
        "linux".to_string()
    }

    fn os_version(&self) -> String {
        "test".to_string()
    }
}

/// A tool named `name` that accepts any object and runs `run`.
pub fn tool(
    name: &str,
    run: impl Fn(ToolInput, &ToolContext<'_>) -> Result<ToolOutput, String> + Send + Sync + 'static,
) -> RegisteredTool {
    RegisteredTool::new(
        ToolDefinition {
            name: name.to_string(),
            description: format!("the {name} test tool"),
            parameters: json!({"type": "object"}).into(),
            freeform: None,
        },
        run,
    )
}

/// A tool that echoes its `text` argument.
pub fn echo_tool() -> RegisteredTool {
    tool("echo", |input, _ctx| match input {
        ToolInput::Json(args) => Ok(ToolOutput::text(
            args.get("text")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
        )),
        ToolInput::Freeform(text) => Ok(ToolOutput::text(text)),
    })
}

/// A tool that blocks until its call is cancelled (or 30 s pass), then reports which.
pub fn blocking_tool(name: &str) -> RegisteredTool {
    tool(name, |_input, ctx| {
        if ctx.cancel.wait_timeout(Duration::from_secs(30)) {
            Ok(ToolOutput::text("stopped by cancellation"))
        } else {
            Ok(ToolOutput::text("ran for 30 s"))
        }
    })
}

/// A session over a scripted model and a temporary directory, with its event iterator.
pub struct Harness {
    pub session: Session,
    pub model: ScriptedModel,
    pub events: Events,
    pub env: Arc<DirEnv>,
    pub dir: tempfile::TempDir,
}

pub fn profile() -> ProviderProfile {
    ProviderProfile::new("scripted", "scripted-model")
        .with_base_instructions("You are a test agent.")
        .with_tool(echo_tool())
}

pub fn harness(turns: Vec<ScriptedTurn>) -> Harness {
    harness_with(
        ScriptedModel::new(turns),
        profile(),
        SessionConfig::default(),
    )
}

pub fn harness_with(
    model: ScriptedModel,
    profile: ProviderProfile,
    config: SessionConfig,
) -> Harness {
    let dir = tempfile::tempdir().expect("temp dir");
    let env = Arc::new(DirEnv::new(dir.path()));
    let client = crate::client_for(model.clone());
    let session = Session::new(profile, env.clone(), client, config).expect("session starts");
    let events = session.events();
    Harness {
        session,
        model,
        events,
        env,
        dir,
    }
}

/// Collects events until `stop` matches (inclusive); panics after [`GENEROUS`].
pub fn collect_until(
    events: &mut Events,
    stop: impl Fn(&SessionEvent) -> bool,
) -> Vec<SessionEvent> {
    let deadline = Instant::now() + GENEROUS;
    let mut out = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match events.recv_timeout(left) {
            Ok(event) => {
                let done = stop(&event);
                out.push(event);
                if done {
                    return out;
                }
            }
            Err(RecvError::Timeout) => panic!(
                "no matching event within {GENEROUS:?}; got {}",
                names(&out).join(",")
            ),
            Err(RecvError::Ended) => {
                panic!("event stream ended early; got {}", names(&out).join(","))
            }
        }
    }
}

/// Collects one input's events, up to and including its `PROCESSING_END`.
pub fn collect_input(events: &mut Events) -> Vec<SessionEvent> {
    collect_until(events, |e| {
        matches!(e.kind, EventKind::ProcessingEnd { .. })
    })
}

/// Collects everything up to and including `SESSION_END`.
pub fn collect_to_end(events: &mut Events) -> Vec<SessionEvent> {
    collect_until(events, |e| matches!(e.kind, EventKind::SessionEnd { .. }))
}

pub fn names(events: &[SessionEvent]) -> Vec<&'static str> {
    events.iter().map(|e| e.kind.name()).collect()
}

/// The stop reason of the `PROCESSING_END` among `events`.
pub fn stop_reason(events: &[SessionEvent]) -> StopReason {
    events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::ProcessingEnd { stop_reason, .. } => Some(*stop_reason),
            _ => None,
        })
        .expect("a PROCESSING_END event")
}

/// Position of the first event of kind `name`.
pub fn position(events: &[SessionEvent], name: &str) -> usize {
    events
        .iter()
        .position(|e| e.kind.name() == name)
        .unwrap_or_else(|| panic!("no {name} event in {:?}", names(events)))
}

/// Texts of the user-role messages of a request.
pub fn user_texts(request: &agentloop::llm::Request) -> Vec<String> {
    request
        .messages
        .iter()
        .filter(|m| m.role == agentloop::llm::Role::User)
        .map(|m| m.text())
        .collect()
}

/// A tool that blocks until the test sends on the returned channel (or its call is
/// cancelled), then answers "released" (or "cancelled").
pub fn gate_tool(name: &str) -> (RegisteredTool, crossbeam_channel::Sender<()>) {
    let (release, gate) = crossbeam_channel::unbounded::<()>();
    let tool = tool(name, move |_input, ctx| {
        let (cancelled_tx, cancelled) = crossbeam_channel::bounded::<()>(1);
        let _guard = ctx.cancel.on_cancel(move || {
            let _ = cancelled_tx.try_send(());
        });
        crossbeam_channel::select! {
            recv(gate) -> _ => Ok(ToolOutput::text("released")),
            recv(cancelled) -> _ => Ok(ToolOutput::text("cancelled")),
            default(GENEROUS) => Err("the test never released the gate".to_string()),
        }
    });
    (tool, release)
}

/// A provider that streams like `inner` but holds back the `Finish` event of the requests
/// whose 0-based index is in `gated` until the test sends on the returned channel.
pub struct GatedModel {
    inner: ScriptedModel,
    gated: Vec<usize>,
    gate: crossbeam_channel::Receiver<()>,
    count: std::sync::atomic::AtomicUsize,
}

impl GatedModel {
    pub fn new(
        inner: ScriptedModel,
        gated: Vec<usize>,
    ) -> (GatedModel, crossbeam_channel::Sender<()>) {
        let (release, gate) = crossbeam_channel::unbounded();
        let model = GatedModel {
            inner,
            gated,
            gate,
            count: Default::default(),
        };
        (model, release)
    }
}

impl agentloop::llm::Provider for GatedModel {
    fn id(&self) -> &str {
        self.inner.id()
    }

    fn open(
        &self,
        request: &agentloop::llm::Request,
        cancel: &CancelToken,
    ) -> agentloop::Result<
        Box<dyn Iterator<Item = agentloop::Result<agentloop::llm::StreamEvent>> + Send>,
    > {
        let index = self.count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let stream = self.inner.open(request, cancel)?;
        if !self.gated.contains(&index) {
            return Ok(stream);
        }
        let gate = self.gate.clone();
        Ok(Box::new(stream.map(move |event| {
            if matches!(event, Ok(agentloop::llm::StreamEvent::Finish { .. })) {
                let _ = gate.recv_timeout(GENEROUS);
            }
            event
        })))
    }
}

/// A harness whose model is a [`GatedModel`] over `turns`.
pub fn gated_harness(
    turns: Vec<ScriptedTurn>,
    gated: Vec<usize>,
    profile: ProviderProfile,
    config: SessionConfig,
) -> (Harness, crossbeam_channel::Sender<()>) {
    let model = ScriptedModel::new(turns);
    let (gated_model, release) = GatedModel::new(model.clone(), gated);
    let dir = tempfile::tempdir().expect("temp dir");
    let env = Arc::new(DirEnv::new(dir.path()));
    let client = crate::client_for(gated_model);
    let session = Session::new(profile, env.clone(), client, config).expect("session starts");
    let events = session.events();
    let h = Harness {
        session,
        model,
        events,
        env,
        dir,
    };
    (h, release)
}
