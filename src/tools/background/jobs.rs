//! The background processes of one session ([`BackgroundJobs`]): started through the
//! session's execution environment, numbered 1, 2, 3 … for the model, each with the model's
//! read position in its output; capped (live processes, and with them the bytes buffered);
//! their exits noted for the model's next turn and told to the session at once. It never
//! spawns anything itself (the environment does) and never decides when the session ends:
//! the session calls [`BackgroundJobs::end_all`].

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant, SystemTime};

use crate::cancel::CancelToken;
use crate::exec::{BackgroundProcess, CommandRequest, ExecResult, ExecutionEnvironment};
use crate::sync::lock;

/// A session's limits on its background processes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Most processes running at once (and kept: an exited one is forgotten, oldest first,
    /// to make room).
    pub(crate) max_processes: usize,
    /// Bytes each output stream of a process keeps.
    pub(crate) output_limit: usize,
    /// A foreground command still running after this is moved to the background instead
    /// of running on to its timeout; `None`: never.
    pub(crate) move_after: Option<Duration>,
}

/// What the registry tells its owner as it happens (the session: events, transcript).
pub(crate) enum JobEvent<'a> {
    /// A background process started (not a foreground command started this way).
    Started { id: u64, pid: u32, command: &'a str },
    /// A background process exited.
    Exited {
        id: u64,
        pid: u32,
        command: &'a str,
        result: &'a ExecResult,
    },
    /// The model read a process's output up to these offsets (stdout, stderr).
    Read { id: u64, ends: [u64; 2] },
}

/// Receives the registry's [`JobEvent`]s, on whichever thread they happen (an exit on the
/// thread that waits for the process).
pub(crate) type Observer = Arc<dyn Fn(JobEvent<'_>) + Send + Sync>;

/// How the model names a process: by the registry's id, or (gemini-cli's tools) by pid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Key {
    Id(u64),
    Pid(u32),
}

/// One process the session started.
#[derive(Clone)]
pub(crate) struct Job {
    pub(crate) id: u64,
    pub(crate) pid: u32,
    pub(crate) command: String,
    pub(crate) started: SystemTime,
    pub(crate) since: Instant,
    pub(crate) process: Arc<dyn BackgroundProcess>,
    /// Where the model's next read starts (stdout, stderr).
    pub(crate) cursor: [u64; 2],
    pub(crate) exit: Option<ExecResult>,
    /// The call that started it still runs it as a foreground command: its exit is that
    /// call's result, not news for the model.
    pub(crate) foreground: bool,
    /// Its exit has been told to the observer (or needs no telling).
    reported: bool,
    /// The model has seen its exit (in a read or a kill): no note about it.
    seen_exit: bool,
}

struct Inner {
    jobs: BTreeMap<u64, Job>,
    next_id: u64,
    /// Exits of processes whose start has not returned yet.
    early: HashMap<u64, ExecResult>,
    /// Exited processes the model has not heard of, in order of exit.
    unseen: Vec<u64>,
    /// The session is ending: nothing starts any more.
    closed: bool,
}

/// The background processes of one session.
pub(crate) struct BackgroundJobs {
    limits: Limits,
    inner: Mutex<Inner>,
    /// Signalled when an exit has been told.
    reported: Condvar,
    /// Dropped when the session ends: it holds the session's event sender.
    observer: Mutex<Option<Observer>>,
    me: Weak<BackgroundJobs>,
}

/// How long [`BackgroundJobs::end_all`] waits for the exits of the processes it killed to
/// be told (a remote one's arrives as a notification after the kill's answer).
const REPORT_WAIT: Duration = Duration::from_secs(5);

impl BackgroundJobs {
    /// An empty registry; ids start at `first_id` (after a resumed session's).
    pub(crate) fn new(limits: Limits, first_id: u64) -> Arc<BackgroundJobs> {
        Arc::new_cyclic(|me| BackgroundJobs {
            limits,
            inner: Mutex::new(Inner {
                jobs: BTreeMap::new(),
                next_id: first_id.max(1),
                early: HashMap::new(),
                unseen: Vec::new(),
                closed: false,
            }),
            reported: Condvar::new(),
            observer: Mutex::new(None),
            me: me.clone(),
        })
    }

    /// Sets who hears of starts, exits and reads.
    pub(crate) fn observe(&self, observer: Observer) {
        *lock(&self.observer) = Some(observer);
    }

    fn tell(&self, event: JobEvent<'_>) {
        let observer = lock(&self.observer).clone();
        if let Some(observer) = observer {
            observer(event);
        }
    }

    pub(crate) fn limits(&self) -> Limits {
        self.limits
    }

    /// Starts `request` in `env`; `foreground` while the calling tool still runs it as a
    /// foreground command (see [`adopt`](Self::adopt)). Errors are messages for the model.
    pub(crate) fn start(
        &self,
        env: &dyn ExecutionEnvironment,
        request: &CommandRequest,
        foreground: bool,
    ) -> Result<Job, String> {
        let (id, evicted) = {
            let mut inner = lock(&self.inner);
            if inner.closed {
                return Err("the session is ending; no process can start".to_string());
            }
            let live = inner.jobs.values().filter(|j| j.exit.is_none()).count();
            if live >= self.limits.max_processes {
                return Err(format!(
                    "{live} background processes are running, the most this session allows; \
                     stop one you no longer need (see the list of background processes) \
                     before starting another, or run this command in the foreground"
                ));
            }
            let mut evicted = Vec::new();
            while inner.jobs.len() >= self.limits.max_processes {
                let Some(oldest) = inner.jobs.values().find(|j| j.exit.is_some()).map(|j| j.id)
                else {
                    break;
                };
                evicted.extend(inner.jobs.remove(&oldest));
                inner.unseen.retain(|&id| id != oldest);
            }
            let id = inner.next_id;
            inner.next_id += 1;
            (id, evicted)
        };
        // Their buffers go now; dropped outside the lock (a drop joins a thread).
        drop(evicted);
        let me = self.me.clone();
        let on_exit = Box::new(move |result: &ExecResult| {
            if let Some(jobs) = me.upgrade() {
                jobs.exited(id, result);
            }
        });
        let process: Arc<dyn BackgroundProcess> = Arc::from(
            env.start_background(request, self.limits.output_limit, on_exit)
                .map_err(|e| format!("the command could not be started: {e}"))?,
        );
        let job = Job {
            id,
            pid: process.pid(),
            command: request.command.clone(),
            started: SystemTime::now(),
            since: Instant::now(),
            process,
            cursor: [0, 0],
            exit: None,
            foreground,
            reported: false,
            seen_exit: false,
        };
        let (early, closed) = {
            let mut inner = lock(&self.inner);
            let mut job = job.clone();
            job.exit = inner.early.remove(&id);
            let early = job.exit.clone();
            if early.is_some() && !foreground {
                inner.unseen.push(id);
            }
            // A background process's exit is still to be told (now, for an early one).
            job.reported = foreground;
            inner.jobs.insert(id, job);
            (early, inner.closed)
        };
        if closed {
            let _ = job.process.kill();
        }
        if !foreground {
            self.tell(JobEvent::Started {
                id,
                pid: job.pid,
                command: &job.command,
            });
            if let Some(result) = &early {
                self.tell_exit(&job, result);
            }
        }
        if early.is_some() {
            self.mark_reported(id);
        }
        Ok(job)
    }

    /// The exit of process `id` (called on the thread that waited for it, which for a
    /// remote process is its connection's reader: so no handle is held or dropped here).
    fn exited(&self, id: u64, result: &ExecResult) {
        let (pid, command) = {
            let mut inner = lock(&self.inner);
            let Some(job) = inner.jobs.get_mut(&id) else {
                inner.early.insert(id, result.clone());
                return;
            };
            job.exit = Some(result.clone());
            if job.foreground {
                job.reported = true;
                self.reported.notify_all();
                return;
            }
            let told = (job.pid, job.command.clone());
            if !job.seen_exit {
                inner.unseen.push(id);
            }
            told
        };
        self.tell(JobEvent::Exited {
            id,
            pid,
            command: &command,
            result,
        });
        self.mark_reported(id);
    }

    /// Kills `job` and returns once its exit is recorded here and told (bounded), so that
    /// what follows (a tool's result, the next start) sees it ended.
    pub(crate) fn kill_job(&self, job: &Job) -> io::Result<ExecResult> {
        let result = job.process.kill()?;
        let deadline = Instant::now() + REPORT_WAIT;
        let mut inner = lock(&self.inner);
        while inner
            .jobs
            .get(&job.id)
            .is_some_and(|j| j.exit.is_none() || !j.reported)
        {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            inner = self
                .reported
                .wait_timeout(inner, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        Ok(result)
    }

    fn mark_reported(&self, id: u64) {
        if let Some(job) = lock(&self.inner).jobs.get_mut(&id) {
            job.reported = true;
        }
        self.reported.notify_all();
    }

    fn tell_exit(&self, job: &Job, result: &ExecResult) {
        self.tell(JobEvent::Exited {
            id: job.id,
            pid: job.pid,
            command: &job.command,
            result,
        });
    }

    /// Makes a process the calling tool ran in the foreground a background one; `false`
    /// (and nothing changes) when it has exited meanwhile: then its result is the call's.
    pub(crate) fn adopt(&self, id: u64, cursor: [u64; 2]) -> bool {
        let job = {
            let mut inner = lock(&self.inner);
            let Some(job) = inner.jobs.get_mut(&id) else {
                return false;
            };
            if job.exit.is_some() {
                return false;
            }
            job.foreground = false;
            job.cursor = cursor;
            job.clone()
        };
        self.tell(JobEvent::Started {
            id,
            pid: job.pid,
            command: &job.command,
        });
        true
    }

    /// Forgets process `id` (a foreground command that ended in its call).
    pub(crate) fn forget(&self, id: u64) {
        let job = lock(&self.inner).jobs.remove(&id);
        drop(job);
    }

    /// The process `key` names; an error for the model when none does.
    pub(crate) fn find(&self, key: Key) -> Result<Job, String> {
        let inner = lock(&self.inner);
        let found = inner.jobs.values().find(|job| match key {
            Key::Id(id) => job.id == id,
            Key::Pid(pid) => job.pid == pid,
        });
        match found {
            Some(job) if !job.foreground => Ok(job.clone()),
            _ => {
                let what = match key {
                    Key::Id(id) => format!("id {id}"),
                    Key::Pid(pid) => format!("pid {pid}"),
                };
                let known: Vec<String> = inner
                    .jobs
                    .values()
                    .filter(|j| !j.foreground)
                    .map(|j| match key {
                        Key::Id(_) => j.id.to_string(),
                        Key::Pid(_) => j.pid.to_string(),
                    })
                    .collect();
                Err(if known.is_empty() {
                    format!("no background process has {what}: none were started in this session")
                } else {
                    format!(
                        "no background process has {what}; the known ones: {}",
                        known.join(", ")
                    )
                })
            }
        }
    }

    /// Moves the model's read position of `id` to `cursor`; when the model has now seen its
    /// exit too, it gets no note about it.
    pub(crate) fn advance(&self, id: u64, cursor: [u64; 2], saw_exit: bool) {
        {
            let mut inner = lock(&self.inner);
            if let Some(job) = inner.jobs.get_mut(&id) {
                job.cursor = cursor;
                job.seen_exit |= saw_exit;
            }
            if saw_exit {
                inner.unseen.retain(|&unseen| unseen != id);
            }
        }
        self.tell(JobEvent::Read { id, ends: cursor });
    }

    /// The processes the model knows of, in the order they started.
    pub(crate) fn jobs(&self) -> Vec<Job> {
        lock(&self.inner)
            .jobs
            .values()
            .filter(|j| !j.foreground)
            .cloned()
            .collect()
    }

    /// The exited processes the model has not heard of (each once), oldest exit first.
    pub(crate) fn take_unseen(&self) -> Vec<Job> {
        let mut inner = lock(&self.inner);
        let ids = std::mem::take(&mut inner.unseen);
        ids.iter()
            .filter_map(|id| inner.jobs.get(id).cloned())
            .collect()
    }

    /// Kills process `key` for the host; the model hears of it at its next turn.
    pub(crate) fn kill(&self, key: Key) -> io::Result<ExecResult> {
        let job = self
            .find(key)
            .map_err(|message| io::Error::new(io::ErrorKind::NotFound, message))?;
        self.kill_job(&job)
    }

    /// Ends every process (their groups, several at once) and starts no more: when the
    /// session ends. Their exits are told before this returns.
    pub(crate) fn end_all(&self) {
        let jobs: Vec<Job> = {
            let mut inner = lock(&self.inner);
            inner.closed = true;
            inner.jobs.values().cloned().collect()
        };
        crate::exec::background::kill_all(jobs.iter().map(|j| j.process.clone()).collect());
        drop(jobs);
        let deadline = Instant::now() + REPORT_WAIT;
        let mut inner = lock(&self.inner);
        while inner.jobs.values().any(|j| !j.reported) {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            inner = self
                .reported
                .wait_timeout(inner, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        let jobs = std::mem::take(&mut inner.jobs);
        drop(inner);
        // Dropped outside the lock: a drop joins the process's waiting thread.
        drop(jobs);
        // Nothing is left to tell, and the observer holds the session's event sender,
        // whose end ends the host's event iterators.
        lock(&self.observer).take();
    }
}

impl Job {
    /// Waits up to `wait` for the process to exit (a cancel ends the wait); its result.
    pub(crate) fn wait(&self, wait: Duration, cancel: &CancelToken) -> Option<ExecResult> {
        self.process.wait(wait, cancel).ok().flatten()
    }
}
