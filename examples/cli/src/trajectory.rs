//! `--trajectory FILE`: the run as an ATIF trajectory (Harbor's format), kept by the
//! library's [`TrajectoryWriter`] from every event the CLI shows; the file is replaced
//! atomically after each step, so a killed trial leaves a valid one. This file only names
//! the agent and says a failed write once on stderr; it never stops the run for one.

use std::path::Path;

use agentloop::llm::ToolDefinition;
use agentloop::session::{SessionEvent, TrajectoryWriter};

/// The trajectory file of a run.
pub struct TrajectoryFile {
    writer: TrajectoryWriter,
    /// A write failed (said once on stderr).
    failed: bool,
}

impl TrajectoryFile {
    /// A trajectory for `path` with the session's tools; nothing is written before the
    /// first event.
    pub fn new(path: &Path, tools: &[ToolDefinition]) -> TrajectoryFile {
        TrajectoryFile {
            writer: TrajectoryWriter::create(path, "agentloop", env!("CARGO_PKG_VERSION"), tools),
            failed: false,
        }
    }

    /// Takes one event into the trajectory.
    pub fn event(&mut self, event: &SessionEvent) {
        if let Err(err) = self.writer.record(event) {
            if !self.failed {
                say!("agentloop: {err}");
            }
            self.failed = true;
        }
    }
}
