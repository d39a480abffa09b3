//! ATIF trajectories (Agent Trajectory Interchange Format, `ATIF-v1.7`: the version
//! Harbor's models accept) written from a session's event stream by [`TrajectoryWriter`].
//! One step per user input or steer, one agent step per model call (its tool calls, their
//! results as the step's observation, its token metrics and cost), a system step per
//! compaction (a context-management step); subagents as embedded trajectories referenced
//! from the `spawn_agent` result; final metrics.
//!
//! The file is replaced atomically (a temporary file beside it, renamed), so a run killed
//! at any moment leaves a whole, valid file: before every tool call runs and when an input
//! or the session ends, and otherwise at most every [`EVERY`] (each write is the whole
//! document: writing it on every event of a long session would cost its square). It never
//! holds a key: only what the events hold, and they hold none. It never reads the file
//! back and never runs anything.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

use crate::error::{Error, ErrorKind, Result};
use crate::llm::{ToolDefinition, Usage};
use crate::session::events::{EventKind, SessionEvent};

/// How long a change may wait for the next write (see the module's note).
const EVERY: Duration = Duration::from_millis(200);

/// The ATIF version written (the newest Harbor 0.25 accepts).
const SCHEMA_VERSION: &str = "ATIF-v1.7";

/// Keeps a session's ATIF trajectory in a file, fed every event the host receives.
///
/// ```
/// # use agentloop::session::{SessionEvent, TrajectoryWriter};
/// # fn feed(events: impl Iterator<Item = SessionEvent>, dir: &std::path::Path) -> agentloop::Result<()> {
/// let mut trajectory =
///     TrajectoryWriter::create(dir.join("trajectory.json"), "my-agent", "1.0.0", &[]);
/// for event in events {
///     trajectory.record(&event)?;
/// }
/// # Ok(())
/// # }
/// ```
///
/// A write that fails is reported by the `record` that made it; the next due write tries
/// again. Dropping the writer writes what changed since the last write.
pub struct TrajectoryWriter {
    path: PathBuf,
    /// The agent's name and version, as the trajectory names them.
    agent: (String, String),
    root: Doc,
    /// When the file was last written, and whether something changed since.
    written: Option<Instant>,
    dirty: bool,
}

impl TrajectoryWriter {
    /// A trajectory at `path` for the agent `name` at `version`, whose session offers
    /// `tools` (the profile's definitions). Nothing is written before the first event
    /// that makes a step.
    pub fn create(
        path: impl Into<PathBuf>,
        name: &str,
        version: &str,
        tools: &[ToolDefinition],
    ) -> TrajectoryWriter {
        let tools = tools
            .iter()
            .map(|t| {
                json!({"type": "function", "function": {
                    "name": t.name, "description": t.description, "parameters": t.parameters,
                }})
            })
            .collect();
        TrajectoryWriter {
            path: path.into(),
            agent: (name.to_string(), version.to_string()),
            root: Doc::new(None, tools),
            written: None,
            dirty: false,
        }
    }

    /// Takes one event into the trajectory; replaces the file when it changed and a write
    /// is due (see the module's note). The error is that write's.
    pub fn record(&mut self, event: &SessionEvent) -> Result<()> {
        self.dirty |= self.root.apply(event);
        let now = matches!(
            event.kind,
            EventKind::ToolCallStart { .. }
                | EventKind::ProcessingEnd { .. }
                | EventKind::SessionEnd { .. }
        );
        let due = self.written.is_none_or(|at| at.elapsed() >= EVERY);
        if self.dirty && (now || due) {
            return self.flush();
        }
        Ok(())
    }

    /// Replaces the file now when the trajectory changed since the last write.
    pub fn flush(&mut self) -> Result<()> {
        if !self.dirty {
            return Ok(());
        }
        self.dirty = false;
        self.written = Some(Instant::now());
        let text = self.root.to_json(&self.agent.0, &self.agent.1).to_string();
        replace(&self.path, text.as_bytes()).map_err(|err| {
            // Still to write: the next due write tries again.
            self.dirty = true;
            let message = format!("cannot write the trajectory {}: {err}", self.path.display());
            Error::new(ErrorKind::Io, message).with_source(err)
        })
    }
}

impl Drop for TrajectoryWriter {
    /// Writes what changed since the last write (an error has no one to go to here).
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

/// Writes `bytes` to a temporary file beside `path` and renames it over `path`.
fn replace(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let name = path
        .file_name()
        .map_or_else(|| "trajectory".into(), |n| n.to_string_lossy().into_owned());
    let tmp = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    let mut file = std::fs::File::create(&tmp)?;
    // No fsync: a killed process loses nothing the kernel has; the rename is atomic.
    file.write_all(bytes)?;
    drop(file);
    std::fs::rename(&tmp, path)
}

/// One trajectory: the root's or a subagent's.
struct Doc {
    /// `agent-1`, … for a subagent (its `trajectory_id`).
    id: Option<String>,
    session_id: String,
    model: Option<String>,
    /// The model answering now (another after a `--fallback-model` switch).
    current_model: Option<String>,
    provider: Option<String>,
    tools: Vec<Value>,
    steps: Vec<Map<String, Value>>,
    /// The step index of each tool call.
    calls: HashMap<String, usize>,
    /// `spawn_agent` calls started and not yet matched with a subagent.
    spawns: Vec<String>,
    /// The subagents, in the order they started, and the call that spawned each.
    subagents: Vec<(Doc, Option<String>)>,
    totals: Usage,
    cost: Option<f64>,
    ended: bool,
}

impl Doc {
    fn new(id: Option<String>, tools: Vec<Value>) -> Doc {
        Doc {
            id,
            session_id: String::new(),
            model: None,
            current_model: None,
            provider: None,
            tools,
            steps: Vec::new(),
            calls: HashMap::new(),
            spawns: Vec::new(),
            subagents: Vec::new(),
            totals: Usage::default(),
            cost: None,
            ended: false,
        }
    }

    /// A new step of `source` with `message`; returns its index.
    fn step(&mut self, event: &SessionEvent, source: &str, message: &str) -> usize {
        let mut step = Map::new();
        step.insert("step_id".into(), json!(self.steps.len() + 1));
        step.insert("timestamp".into(), json!(event.timestamp_rfc3339()));
        step.insert("source".into(), json!(source));
        step.insert("message".into(), json!(message));
        self.steps.push(step);
        self.steps.len() - 1
    }

    /// Applies one event; `true` when the trajectory changed.
    fn apply(&mut self, event: &SessionEvent) -> bool {
        if self.session_id.is_empty() {
            self.session_id.clone_from(&event.session_id);
        }
        match &event.kind {
            EventKind::SessionStart { provider, model } => {
                self.provider = Some(provider.clone());
                self.model = Some(model.clone());
                self.current_model = Some(model.clone());
            }
            EventKind::ModelFallback { to_model, .. } => {
                self.current_model = Some(to_model.clone());
                return false;
            }
            EventKind::UserInput { content } => {
                self.step(event, "user", content);
            }
            EventKind::SteeringInjected { content } => {
                self.step(event, "user", content);
            }
            EventKind::AssistantTextEnd {
                text,
                reasoning,
                usage,
                cost_usd,
                ..
            } => self.model_call(event, text, reasoning.as_deref(), usage, *cost_usd),
            EventKind::ToolCallStart {
                call_id,
                tool_name,
                arguments,
            } => self.call_started(call_id, tool_name, arguments),
            EventKind::ToolCallEnd {
                call_id,
                output,
                error,
                is_error,
                ..
            } => {
                let content = output.as_deref().or(error.as_deref()).unwrap_or("");
                self.call_ended(call_id, content, *is_error);
            }
            EventKind::ContextCompactionEnd {
                tokens_before,
                tokens_after,
                turns_summarised,
                summary,
                ..
            } => {
                let at = self.step(event, "system", "the context was compacted");
                self.steps[at].insert(
                    "extra".into(),
                    json!({"context_management": "compaction", "tokens_before": tokens_before,
                           "tokens_after": tokens_after, "turns_summarised": turns_summarised,
                           "summary": summary}),
                );
            }
            EventKind::SessionEnd { .. } => self.ended = true,
            EventKind::SubagentEvent { agent_id, event } => return self.subagent(agent_id, event),
            _ => return false,
        }
        true
    }

    fn model_call(
        &mut self,
        event: &SessionEvent,
        text: &str,
        reasoning: Option<&str>,
        usage: &Usage,
        cost: Option<f64>,
    ) {
        let at = self.step(event, "agent", text);
        let step = &mut self.steps[at];
        if let Some(model) = &self.current_model {
            step.insert("model_name".into(), json!(model));
        }
        if let Some(reasoning) = reasoning.filter(|r| !r.is_empty()) {
            step.insert("reasoning_content".into(), json!(reasoning));
        }
        let mut metrics = json!({
            "prompt_tokens": usage.input_tokens,
            "completion_tokens": usage.output_tokens,
            "cached_tokens": usage.cache_read_tokens.unwrap_or(0),
            "extra": {"cache_write_tokens": usage.cache_write_tokens.unwrap_or(0),
                      "reasoning_tokens": usage.reasoning_tokens.unwrap_or(0)},
        });
        if let Some(cost) = cost {
            metrics["cost_usd"] = json!(cost);
            *self.cost.get_or_insert(0.0) += cost;
        }
        step.insert("metrics".into(), metrics);
        step.insert("llm_call_count".into(), json!(1));
        self.totals += *usage;
    }

    /// A call belongs to the last agent step (the model call that made it).
    fn call_started(&mut self, call_id: &str, tool: &str, arguments: &Value) {
        let Some(at) = self.steps.iter().rposition(|s| s["source"] == "agent") else {
            return;
        };
        // ATIF's arguments are an object; a model's non-object arguments are kept whole.
        let arguments = match arguments {
            Value::Object(_) => arguments.clone(),
            other => json!({"input": other}),
        };
        let calls = self.steps[at]
            .entry("tool_calls")
            .or_insert_with(|| json!([]));
        if let Some(calls) = calls.as_array_mut() {
            calls.push(json!({"tool_call_id": call_id, "function_name": tool,
                              "arguments": arguments}));
        }
        self.calls.insert(call_id.to_string(), at);
        if tool == "spawn_agent" {
            self.spawns.push(call_id.to_string());
        }
    }

    fn call_ended(&mut self, call_id: &str, content: &str, is_error: bool) {
        let Some(&at) = self.calls.get(call_id) else {
            return;
        };
        let mut result = json!({"source_call_id": call_id, "content": content});
        if is_error {
            result["extra"] = json!({"is_error": true});
        }
        let refs: Vec<Value> = self
            .subagents
            .iter()
            .filter(|(_, call)| call.as_deref() == Some(call_id))
            .filter_map(|(doc, _)| doc.id.as_ref())
            .map(|id| json!({"trajectory_id": id}))
            .collect();
        if !refs.is_empty() {
            result["subagent_trajectory_ref"] = Value::Array(refs);
        }
        let observation = self.steps[at]
            .entry("observation")
            .or_insert_with(|| json!({"results": []}));
        if let Some(results) = observation["results"].as_array_mut() {
            results.push(result);
        }
    }

    /// A subagent's event: into its embedded trajectory (made on its first event and
    /// matched with the oldest `spawn_agent` call not matched yet).
    fn subagent(&mut self, agent_id: &str, event: &SessionEvent) -> bool {
        let known = self
            .subagents
            .iter()
            .position(|(doc, _)| doc.id.as_deref() == Some(agent_id));
        let at = match known {
            Some(at) => at,
            None => {
                let call = (!self.spawns.is_empty()).then(|| self.spawns.remove(0));
                let doc = Doc::new(Some(agent_id.to_string()), Vec::new());
                if let Some(call) = &call {
                    self.link(call, agent_id);
                }
                self.subagents.push((doc, call));
                self.subagents.len() - 1
            }
        };
        self.subagents[at].0.apply(event)
    }

    /// Adds the subagent's reference to the spawning call's result, when that result came
    /// before the subagent's first event.
    fn link(&mut self, call_id: &str, agent_id: &str) {
        let Some(&at) = self.calls.get(call_id) else {
            return;
        };
        let Some(results) = self.steps[at]
            .get_mut("observation")
            .and_then(|o| o["results"].as_array_mut())
        else {
            return;
        };
        for result in results
            .iter_mut()
            .filter(|r| r["source_call_id"] == call_id)
        {
            let reference = json!({"trajectory_id": agent_id});
            match result
                .get_mut("subagent_trajectory_ref")
                .and_then(Value::as_array_mut)
            {
                Some(refs) => refs.push(reference),
                None => result["subagent_trajectory_ref"] = json!([reference]),
            }
        }
    }

    fn to_json(&self, name: &str, version: &str) -> Value {
        let mut agent = json!({"name": name, "version": version});
        if let Some(model) = &self.model {
            agent["model_name"] = json!(model);
        }
        if !self.tools.is_empty() {
            agent["tool_definitions"] = json!(self.tools);
        }
        if let Some(provider) = &self.provider {
            agent["extra"] = json!({"provider": provider});
        }
        let mut doc = json!({
            "schema_version": SCHEMA_VERSION,
            "session_id": self.session_id,
            "agent": agent,
            "steps": self.steps,
            "final_metrics": {
                "total_prompt_tokens": self.totals.input_tokens,
                "total_completion_tokens": self.totals.output_tokens,
                "total_cached_tokens": self.totals.cache_read_tokens.unwrap_or(0),
                "total_steps": self.steps.len(),
                "extra": {"ended": self.ended},
            },
        });
        if let Some(cost) = self.cost {
            doc["final_metrics"]["total_cost_usd"] = json!(cost);
        }
        if let Some(id) = &self.id {
            doc["trajectory_id"] = json!(id);
        }
        if !self.subagents.is_empty() {
            let subs: Vec<Value> = self
                .subagents
                .iter()
                .map(|(d, _)| d.to_json(name, version))
                .collect();
            doc["subagent_trajectories"] = Value::Array(subs);
        }
        doc
    }
}
