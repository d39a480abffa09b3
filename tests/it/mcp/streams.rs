//! A request's answer on another stream than its own, against a loopback Streamable HTTP
//! server of ours that sends the `tools/call` answer on the standalone GET stream (as the
//! conformance suite's `sse-retry` server does when that stream opens late): the call
//! ends with the answer at once, whether its own stream is held open or ended and resumed
//! (a resumed stream the server then holds open); and the GET stream is open before the
//! first request after the handshake goes out.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use agentloop::llm::scripted::ScriptedTurn;
use agentloop::mcp::McpServer;
use serde_json::{Value, json};

use super::{ends, mcp_harness};
use support::GENEROUS;
use support::session::collect_input;

/// What the server does with the `tools/call` POST's own event stream after its priming
/// event (an id and `retry: 50`).
#[derive(Clone, Copy, PartialEq)]
enum CallStream {
    /// Holds it open, silent.
    Held,
    /// Ends it; the answer goes out on the GET stream once the client has resumed.
    Ended,
    /// Ends it, and the answer never comes: every stream is then held open, silent.
    Unanswered,
}

struct Shared {
    /// What came and went, in order (`POST tools/list`, `GET`, `GET answered`,
    /// `GET resumed call-1`, `answer on GET`), and the `tools/call` id once it came.
    state: Mutex<(Vec<String>, Option<Value>)>,
    changed: Condvar,
    stop: AtomicBool,
    call_stream: CallStream,
    /// How long the standalone GET waits before its answer's head.
    get_delay: Duration,
}

impl Shared {
    fn note(&self, what: String) -> MutexGuard<'_, (Vec<String>, Option<Value>)> {
        let mut state = self.state.lock().unwrap();
        state.0.push(what);
        self.changed.notify_all();
        state
    }

    /// Keeps a stream open (silent) until the server stops.
    fn hold(&self) {
        let until = Instant::now() + GENEROUS * 3;
        while !self.stop.load(Ordering::SeqCst) && Instant::now() < until {
            thread::sleep(Duration::from_millis(10));
        }
    }
}

/// The server: one request per connection, each on its own thread.
struct AnswerElsewhere {
    url: String,
    shared: Arc<Shared>,
    accept: Option<thread::JoinHandle<()>>,
}

impl AnswerElsewhere {
    fn start(call_stream: CallStream, get_delay: Duration) -> AnswerElsewhere {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let url = format!("http://{}/mcp", listener.local_addr().unwrap());
        let shared = Arc::new(Shared {
            state: Mutex::new((Vec::new(), None)),
            changed: Condvar::new(),
            stop: AtomicBool::new(false),
            call_stream,
            get_delay,
        });
        let serving = shared.clone();
        let accept = thread::Builder::new()
            .name("answer-elsewhere".to_string())
            .spawn(move || {
                thread::scope(|scope| {
                    while !serving.stop.load(Ordering::SeqCst) {
                        match listener.accept() {
                            Ok((stream, _)) => {
                                stream.set_nonblocking(false).unwrap();
                                let shared = &*serving;
                                scope.spawn(move || serve(stream, shared));
                            }
                            Err(_) => thread::sleep(Duration::from_millis(5)),
                        }
                    }
                });
            })
            .unwrap();
        AnswerElsewhere {
            url,
            shared,
            accept: Some(accept),
        }
    }

    fn log(&self) -> Vec<String> {
        self.shared.state.lock().unwrap().0.clone()
    }
}

impl Drop for AnswerElsewhere {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
    }
}

const SSE: &str = "text/event-stream";

fn head(stream: &mut TcpStream, status: &str, content_type: &str, length: Option<usize>) {
    let length = length.map_or(String::new(), |n| format!("content-length: {n}\r\n"));
    let _ = write!(
        stream,
        "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\nmcp-session-id: s1\r\n\
         connection: close\r\n{length}\r\n"
    );
}

fn answer(mut stream: TcpStream, id: &Value, result: Value) {
    let body = json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string();
    head(&mut stream, "200 OK", "application/json", Some(body.len()));
    let _ = stream.write_all(body.as_bytes());
}

/// Reads one request: its method, its `Last-Event-ID` and its body.
fn read_request(stream: &TcpStream) -> Option<(String, Option<String>, Vec<u8>)> {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let method = line.split(' ').next()?.to_string();
    let (mut length, mut last_event_id) = (0, None);
    loop {
        line.clear();
        if reader.read_line(&mut line).ok()? == 0 || line == "\r\n" {
            break;
        }
        let (name, value) = line.split_once(':')?;
        match name.to_ascii_lowercase().as_str() {
            "content-length" => length = value.trim().parse().ok()?,
            "last-event-id" => last_event_id = Some(value.trim().to_string()),
            _ => {}
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some((method, last_event_id, body))
}

fn serve(mut stream: TcpStream, shared: &Shared) {
    let Some((method, last_event_id, body)) = read_request(&stream) else {
        return;
    };
    if method == "GET" {
        return get(stream, shared, last_event_id);
    }
    let message: Value = serde_json::from_slice(&body).unwrap_or_default();
    let name = message["method"].as_str().unwrap_or_default().to_string();
    let id = message["id"].clone();
    if method != "POST" || (id.is_null() && !name.is_empty()) {
        // A notification, or the session's DELETE.
        head(&mut stream, "202 Accepted", "application/json", Some(0));
        return;
    }
    drop(shared.note(format!("POST {name}")));
    match name.as_str() {
        "initialize" => answer(
            stream,
            &id,
            json!({
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "answer-elsewhere", "version": "1"},
            }),
        ),
        "tools/list" => answer(
            stream,
            &id,
            json!({"tools": [{"name": "answer", "inputSchema": {"type": "object"}}]}),
        ),
        "tools/call" => {
            head(&mut stream, "200 OK", SSE, None);
            let _ = stream.write_all(b"id: call-1\nretry: 50\ndata: \n\n");
            let _ = stream.flush();
            shared.note("call stream primed".to_string()).1 = Some(id);
            if shared.call_stream == CallStream::Held {
                shared.hold();
            }
        }
        // `server/discover` and the rest: not this era's methods.
        _ => {
            let body = json!({"jsonrpc": "2.0", "id": id,
                "error": {"code": -32601, "message": "no such method"}})
            .to_string();
            head(&mut stream, "200 OK", "application/json", Some(body.len()));
            let _ = stream.write_all(body.as_bytes());
        }
    }
}

fn get(mut stream: TcpStream, shared: &Shared, last_event_id: Option<String>) {
    if let Some(id) = last_event_id {
        drop(shared.note(format!("GET resumed {id}")));
        head(&mut stream, "200 OK", SSE, None);
        let _ = stream.write_all(b"id: resumed-1\nretry: 50\ndata: \n\n");
        return shared.hold();
    }
    drop(shared.note("GET".to_string()));
    thread::sleep(shared.get_delay);
    head(&mut stream, "200 OK", SSE, None);
    let _ = stream.flush();
    let state = shared.note("GET answered".to_string());
    if shared.call_stream == CallStream::Unanswered {
        drop(state);
        return shared.hold();
    }
    // The answer goes out here once the call came (and, when its stream ended, once the
    // client resumed that stream).
    let ready = |state: &mut (Vec<String>, Option<Value>)| {
        state.1.is_some()
            && (shared.call_stream == CallStream::Held
                || state.0.iter().any(|l| l.starts_with("GET resumed")))
    };
    let (mut state, _) = shared
        .changed
        .wait_timeout_while(state, GENEROUS, |s| !ready(s))
        .unwrap();
    if let Some(id) = state.1.clone() {
        let message = json!({"jsonrpc": "2.0", "id": id, "result": {
            "content": [{"type": "text", "text": "answered on the GET stream"}]}});
        let _ = write!(stream, "id: get-1\ndata: {message}\n\n");
        state.0.push("answer on GET".to_string());
    }
    drop(state);
    shared.hold();
}

/// Calls the server's one tool; its log, the tool's end and how long the input took.
fn call_tool(server: &AnswerElsewhere) -> (Vec<String>, (String, String, bool), Duration) {
    // A call that waited for its timeout would end past the ceiling.
    call_tool_within(server, GENEROUS * 3)
}

fn call_tool_within(
    server: &AnswerElsewhere,
    call_timeout: Duration,
) -> (Vec<String>, (String, String, bool), Duration) {
    let mcp = McpServer::http("stub", server.url.clone())
        .with_startup_timeout(GENEROUS)
        .with_call_timeout(call_timeout);
    let mut h = mcp_harness(
        vec![
            ScriptedTurn::tool_call("mcp__stub__answer", json!({})),
            ScriptedTurn::text("done"),
        ],
        vec![mcp],
    );
    let started = Instant::now();
    h.session.submit("go").unwrap();
    let events = collect_input(&mut h.events);
    let took = started.elapsed();
    let mut ends = ends(&events);
    assert_eq!(ends.len(), 1, "{ends:?}");
    (server.log(), ends.remove(0), took)
}

#[test]
fn an_answer_on_the_get_stream_ends_a_call_whose_own_stream_is_held_open() {
    let server = AnswerElsewhere::start(CallStream::Held, Duration::ZERO);
    let (log, end, took) = call_tool(&server);
    assert_eq!(
        end,
        (
            "mcp__stub__answer".to_string(),
            "answered on the GET stream".to_string(),
            false
        ),
        "{log:?}"
    );
    assert!(log.contains(&"answer on GET".to_string()), "{log:?}");
    assert!(took < GENEROUS, "{took:?}");
}

#[test]
fn an_answer_on_the_get_stream_ends_a_call_waiting_on_its_resumed_stream() {
    let server = AnswerElsewhere::start(CallStream::Ended, Duration::ZERO);
    let (log, end, took) = call_tool(&server);
    assert_eq!(end.1, "answered on the GET stream", "{log:?}");
    assert!(!end.2, "{end:?}");
    // The call's stream was resumed from its last event id, and the answer came after.
    let resumed = log.iter().position(|l| l == "GET resumed call-1");
    let answered = log.iter().position(|l| l == "answer on GET");
    assert!(
        resumed.is_some() && answered > resumed,
        "resumed, then answered elsewhere: {log:?}"
    );
    assert!(took < GENEROUS, "{took:?}");
}

#[test]
fn the_get_stream_is_open_before_the_first_request_after_the_handshake() {
    // The server takes a moment to answer the GET: a client that did not wait for it
    // would list the tools first.
    let server = AnswerElsewhere::start(CallStream::Held, Duration::from_millis(100));
    let (log, end, _) = call_tool(&server);
    assert!(!end.2, "{end:?}");
    let opened = log.iter().position(|l| l == "GET answered");
    let listed = log.iter().position(|l| l == "POST tools/list");
    assert!(
        opened.is_some() && listed > opened,
        "the GET stream first: {log:?}"
    );
}

#[test]
fn a_resumed_stream_that_stays_silent_is_bounded_by_the_call_timeout() {
    // Each resumed stream may be silent for the call's 1 s, not the startup's 20 s: the
    // five resumes end the call well within the ceiling.
    let server = AnswerElsewhere::start(CallStream::Unanswered, Duration::ZERO);
    let (log, end, took) = call_tool_within(&server, Duration::from_secs(1));
    assert!(end.2, "the call fails: {end:?} {log:?}");
    assert!(
        log.iter().any(|l| l == "GET resumed call-1"),
        "the call's stream was resumed: {log:?}"
    );
    assert!(took < GENEROUS, "{took:?}");
}
