//! The receiving side of one MCP connection: responses matched to waiting requests by id,
//! progress by token, change notifications as flags, and the server's own requests
//! (`elicitation/create`, `roots/list`, `ping`, …) answered on one named request thread,
//! so that a host taking its time to answer never stalls the reader.
//!
//! It never blocks the thread that feeds it: a server that floods requests gets "busy"
//! errors once [`MAX_QUEUED`] wait, and every answer goes out through the transport's
//! non-blocking send.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::thread::{self, JoinHandle};

use crossbeam_channel::{Sender, TrySendError};
use serde_json::{Map, Value, json};

use super::host::ClientContext;
use super::rpc::{Outbound, Reply, RpcFailure};
use crate::cancel::CancelToken;
use crate::sync::lock;

/// Server requests and host notices waiting for the request thread.
const MAX_QUEUED: usize = 32;

/// What the request thread does next.
enum Job {
    /// Answer the server's request `id`.
    Request {
        id: Value,
        method: String,
        params: Value,
    },
    /// Tell the host that a list changed (`"tools"`, `"resources"`, `"prompts"`).
    ListChanged(&'static str),
    /// Tell the host that a subscribed resource changed.
    ResourceUpdated(String),
}

/// Which lists the server said changed since they were last read.
#[derive(Default)]
pub(crate) struct Changed {
    pub(crate) tools: AtomicBool,
    pub(crate) resources: AtomicBool,
    pub(crate) prompts: AtomicBool,
}

/// The side of a connection that handles what the server sends.
pub(crate) struct Inbound {
    /// The configured server name (shown to the host with its questions).
    server: String,
    context: Arc<ClientContext>,
    pub(crate) pending: Mutex<HashMap<u64, Sender<Reply>>>,
    pub(crate) progress: Mutex<HashMap<u64, Sender<()>>>,
    pub(crate) changed: Changed,
    closed: Mutex<Option<String>>,
    /// Where answers go: the transport, which owns this (hence weak).
    responder: OnceLock<Weak<dyn Outbound>>,
    /// The request thread's queue and handle, started by the first server request.
    worker: Mutex<Option<(Sender<Job>, JoinHandle<()>)>>,
    /// Fired when the connection closes: ends a host's elicitation in progress.
    closing: CancelToken,
    /// Set once the connection closed for good: no request thread starts after it.
    finished: AtomicBool,
    /// The id of a request whose answer is kept even when it comes after its timeout
    /// (the `server/discover` probe: its late answer still tells the capabilities).
    pub(crate) keep_late: AtomicU64,
    pub(crate) late: Mutex<Option<Value>>,
}

impl Inbound {
    pub(crate) fn new(server: &str, context: Arc<ClientContext>) -> Inbound {
        Inbound {
            server: server.to_string(),
            context,
            pending: Mutex::new(HashMap::new()),
            progress: Mutex::new(HashMap::new()),
            changed: Changed::default(),
            closed: Mutex::new(None),
            responder: OnceLock::new(),
            worker: Mutex::new(None),
            closing: CancelToken::new(),
            finished: AtomicBool::new(false),
            keep_late: AtomicU64::new(0),
            late: Mutex::new(None),
        }
    }

    /// The configured name of the server.
    pub(crate) fn server(&self) -> &str {
        &self.server
    }

    /// The client side (host, roots) this connection answers with.
    pub(crate) fn context(&self) -> &Arc<ClientContext> {
        &self.context
    }

    pub(crate) fn set_responder(&self, out: Weak<dyn Outbound>) {
        let _ = self.responder.set(out);
    }

    /// Handles one message from the server.
    pub(crate) fn dispatch(&self, message: Value) {
        let Value::Object(mut message) = message else {
            return;
        };
        let method = message
            .get("method")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let id = message.remove("id");
        match (method, id) {
            (None, Some(id)) => self.response(id, message),
            (Some(method), Some(id)) => {
                let params = message.remove("params").unwrap_or(Value::Null);
                self.queue(Job::Request { id, method, params });
            }
            (Some(method), None) => self.notification(&method, message.get("params")),
            (None, None) => {}
        }
    }

    fn response(&self, id: Value, mut message: Map<String, Value>) {
        let Some(id) = id.as_u64() else { return };
        let reply = match message.remove("error") {
            Some(error) => Err(RpcFailure::Error {
                code: error.get("code").and_then(Value::as_i64).unwrap_or(0),
                message: error
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .chars()
                    .take(2000)
                    .collect(),
            }),
            None => Ok(message.remove("result").unwrap_or(Value::Null)),
        };
        match lock(&self.pending).remove(&id) {
            Some(waiter) => {
                let _ = waiter.send(reply);
            }
            None if id == self.keep_late.load(Ordering::SeqCst) => {
                if let Ok(result) = reply {
                    *lock(&self.late) = Some(result);
                }
            }
            None => {}
        }
    }

    fn notification(&self, method: &str, params: Option<&Value>) {
        let param = |key: &str| params.and_then(|p| p.get(key));
        match method {
            "notifications/progress" => {
                if let Some(token) = param("progressToken").and_then(Value::as_u64) {
                    if let Some(bump) = lock(&self.progress).get(&token) {
                        let _ = bump.try_send(());
                    }
                }
            }
            "notifications/tools/list_changed" => {
                self.changed.tools.store(true, Ordering::SeqCst);
                self.notify_host(Job::ListChanged("tools"));
            }
            "notifications/resources/list_changed" => {
                self.changed.resources.store(true, Ordering::SeqCst);
                self.notify_host(Job::ListChanged("resources"));
            }
            "notifications/prompts/list_changed" => {
                self.changed.prompts.store(true, Ordering::SeqCst);
                self.notify_host(Job::ListChanged("prompts"));
            }
            "notifications/resources/updated" => {
                if let Some(uri) = param("uri").and_then(Value::as_str) {
                    if uri.len() <= 4096 {
                        self.notify_host(Job::ResourceUpdated(uri.to_string()));
                    }
                }
            }
            _ => {}
        }
    }

    /// Notices for the host go through the request thread (a slow host never blocks the
    /// reader); without a host there is nobody to tell.
    fn notify_host(&self, job: Job) {
        if self.context.host.is_some() {
            self.queue(job);
        }
    }

    /// Queues `job` for the request thread, starting it if needed; a request that cannot
    /// be queued is answered with an error at once.
    fn queue(&self, job: Job) {
        let refused = {
            let mut worker = lock(&self.worker);
            if worker.is_none() && !self.finished.load(Ordering::SeqCst) {
                *worker = self.start_worker();
            }
            match worker.as_ref().map(|(queue, _)| queue.try_send(job)) {
                Some(Ok(())) => None,
                Some(Err(TrySendError::Full(job) | TrySendError::Disconnected(job))) => Some(job),
                None => None,
            }
        };
        if let Some(Job::Request { id, .. }) = refused {
            self.send_error(id, -32603, "the client is busy with earlier requests");
        }
    }

    fn start_worker(&self) -> Option<(Sender<Job>, JoinHandle<()>)> {
        let (queue, jobs) = crossbeam_channel::bounded::<Job>(MAX_QUEUED);
        let server = self.server.clone();
        let context = Arc::clone(&self.context);
        let responder = self.responder.get().cloned();
        let closing = self.closing.clone();
        // The default stack: the host's own code runs here.
        let handle = thread::Builder::new()
            .name(format!("agentloop-mcp-req-{}", self.server))
            .spawn(move || {
                for job in jobs {
                    match job {
                        Job::Request { id, method, params } => {
                            let answer = context.answer(&server, &method, &params, &closing);
                            let message = match answer {
                                Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
                                Err((code, message)) => json!({"jsonrpc": "2.0", "id": id,
                                    "error": {"code": code, "message": message}}),
                            };
                            if let Some(out) = responder.as_ref().and_then(Weak::upgrade) {
                                let _ = out.send(&message, None);
                            }
                        }
                        Job::ListChanged(list) => {
                            if let Some(host) = &context.host {
                                host.list_changed(&server, list);
                            }
                        }
                        Job::ResourceUpdated(uri) => {
                            if let Some(host) = &context.host {
                                host.resource_updated(&server, &uri);
                            }
                        }
                    }
                }
            })
            .ok()?;
        Some((queue, handle))
    }

    fn send_error(&self, id: Value, code: i64, message: &str) {
        if let Some(out) = self.responder.get().and_then(Weak::upgrade) {
            let error = json!({"jsonrpc": "2.0", "id": id,
                               "error": {"code": code, "message": message}});
            let _ = out.send(&error, None);
        }
    }

    /// The connection is gone: every waiting request fails with `why`.
    pub(crate) fn close(&self, why: String) {
        let mut closed = lock(&self.closed);
        if closed.is_none() {
            *closed = Some(why.clone());
        }
        drop(closed);
        for (_, waiter) in lock(&self.pending).drain() {
            let _ = waiter.send(Err(RpcFailure::Closed(why.clone())));
        }
    }

    pub(crate) fn closed(&self) -> Option<String> {
        lock(&self.closed).clone()
    }

    /// Ends the request thread: a host question in progress is cancelled, queued ones
    /// are dropped, and the thread is joined (unless this is that thread).
    pub(crate) fn stop_worker(&self) {
        self.finished.store(true, Ordering::SeqCst);
        self.closing.cancel();
        let worker = lock(&self.worker).take();
        if let Some((queue, handle)) = worker {
            drop(queue);
            if handle.thread().id() != thread::current().id() {
                let _ = handle.join();
            }
        }
    }
}
