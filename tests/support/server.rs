//! A scripted loopback HTTP/1.1 server for the provider tests; it never reaches beyond
//! 127.0.0.1 and never outlives its `Server` value.
//!
//! ```ignore
//! let server = Server::start(vec![
//!     Reply::json(429, r#"{"error":{"type":"rate_limit_error","message":"slow"}}"#)
//!         .header("retry-after", "1"),
//!     Reply::sse_file(conformance::dir().join("anthropic/text_basic.sse")).chunk(1),
//! ]);
//! let client = support::anthropic_client(&server);
//! // … run requests against server.url() …
//! let recorded = server.requests();
//! ```
//!
//! Each incoming request takes the next scripted [`Reply`], in order (across connections);
//! when the script runs out the server answers 500. SSE bodies are sent with chunked
//! transfer encoding, in HTTP chunks of a chosen size, optionally with a delay between
//! chunks; a reply can instead stall (hold the connection silently), hang up after some
//! body bytes, or hang up before sending anything. Every request is recorded (method,
//! path, lower-cased headers, raw and parsed body), and the server notes when the client
//! closes a connection it is holding. Dropping the server stops and joins every thread.

use std::collections::VecDeque;
use std::io::{ErrorKind as IoKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::Value;

/// How often a connection thread that waits on the client checks for shutdown.
const POLL: Duration = Duration::from_millis(10);

/// A receive stamp further back than this is not the request's own (a stale one): the
/// request is then stamped when it was read.
const STAMP_TRUSTED: Duration = Duration::from_secs(1);

/// What happens after the status line, headers and (part of) the body are written.
#[derive(Debug, Clone, PartialEq)]
enum Ending {
    /// Finish the body and keep the connection open for the next request.
    Complete,
    /// Write nothing more and hold the connection open until the client closes it or the
    /// server stops.
    Stall,
    /// Close the connection after this many body bytes.
    HangUpAfter(usize),
    /// Close the connection without writing a single byte.
    HangUpAtOnce,
    /// Finish the body, then close the connection (an idle timeout, at once).
    CompleteThenClose,
    /// Write nothing at all and hold the connection open.
    Silent,
}

/// One scripted answer.
#[derive(Debug, Clone)]
pub struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    chunked: bool,
    chunk_size: Option<usize>,
    delay: Duration,
    gzip: bool,
    ending: Ending,
}

impl Reply {
    fn new(status: u16, body: Vec<u8>, chunked: bool) -> Reply {
        Reply {
            status,
            headers: Vec::new(),
            body,
            chunked,
            chunk_size: None,
            delay: Duration::ZERO,
            gzip: false,
            ending: Ending::Complete,
        }
    }

    /// A 200 `text/event-stream` reply with `body`, sent with chunked encoding.
    pub fn sse(body: impl Into<Vec<u8>>) -> Reply {
        Reply::new(200, body.into(), true).header("content-type", "text/event-stream")
    }

    /// [`Reply::sse`] with the bytes of a file.
    pub fn sse_file(path: impl AsRef<Path>) -> Reply {
        let path = path.as_ref();
        let body =
            std::fs::read(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        Reply::sse(body)
    }

    /// A reply with `status` and a JSON body (with `content-length`).
    pub fn json(status: u16, body: impl Into<Vec<u8>>) -> Reply {
        Reply::new(status, body.into(), false).header("content-type", "application/json")
    }

    /// A reply with `status`, `content-type` and body, exactly as given.
    pub fn body(status: u16, content_type: &str, body: impl Into<Vec<u8>>) -> Reply {
        Reply::new(status, body.into(), false).header("content-type", content_type)
    }

    /// Reads the request, then holds the connection open without writing a byte until the
    /// client closes it or the server is dropped.
    pub fn stall() -> Reply {
        let mut reply = Reply::new(200, Vec::new(), false);
        reply.ending = Ending::Silent;
        reply
    }

    /// Reads the request, then closes the connection without writing a byte.
    pub fn hang_up() -> Reply {
        let mut reply = Reply::new(200, Vec::new(), false);
        reply.ending = Ending::HangUpAtOnce;
        reply
    }

    /// Adds a response header.
    pub fn header(mut self, name: &str, value: &str) -> Reply {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }

    /// Sends the body in HTTP chunks of `size` bytes (chunked encoding), flushing each.
    pub fn chunk(mut self, size: usize) -> Reply {
        self.chunked = true;
        self.chunk_size = Some(size.max(1));
        self
    }

    /// Waits `delay` between two chunks.
    pub fn delay(mut self, delay: Duration) -> Reply {
        self.delay = delay;
        self
    }

    /// Sends the body gzip-encoded (`content-encoding: gzip`, stored deflate blocks).
    pub fn gzip(mut self) -> Reply {
        self.gzip = true;
        self
    }

    /// After the body, sends nothing more (not even the final chunk) and holds the
    /// connection open until the client closes it or the server is dropped.
    pub fn then_stall(mut self) -> Reply {
        self.chunked = true;
        self.ending = Ending::Stall;
        self
    }

    /// Finishes the body, then closes the connection, as a server does whose keep-alive
    /// timeout has run out. The reply counts as answered once the connection is shut.
    pub fn then_close(mut self) -> Reply {
        self.ending = Ending::CompleteThenClose;
        self
    }

    /// Closes the connection after `bytes` bytes of the body, without the final chunk.
    pub fn hang_up_after(mut self, bytes: usize) -> Reply {
        self.chunked = true;
        self.ending = Ending::HangUpAfter(bytes);
        self
    }
}

/// A request the server received.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    /// `GET`, `POST`, …
    pub method: String,
    /// The request target (`/v1/messages?x=y`).
    pub path: String,
    /// Headers with lower-cased names, in order.
    pub headers: Vec<(String, String)>,
    /// The raw body.
    pub body: Vec<u8>,
    /// The body parsed as JSON, if it is JSON.
    pub json: Option<Value>,
    /// When the request was complete: the server had read its last byte.
    pub at: Instant,
    /// When its last byte had reached the server's socket (the kernel's receive stamp of
    /// that segment, `SO_TIMESTAMPNS`); `at` minus this is the server thread's wake-up
    /// and reading. `at` where the kernel gave no stamp.
    pub arrived: Instant,
}

impl RecordedRequest {
    /// The first header called `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as text.
    pub fn body_text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The parsed JSON body; panics when the body is not JSON.
    pub fn json(&self) -> &Value {
        self.json.as_ref().expect("the request body is JSON")
    }
}

#[derive(Default)]
struct State {
    replies: VecDeque<Reply>,
    /// Routed scripts: a request whose body contains a route's marker takes that route's
    /// next reply (the first matching route wins); other requests take from `replies`.
    routes: Vec<(String, VecDeque<Reply>)>,
    requests: Vec<RecordedRequest>,
    /// Per request index: when the client was seen closing the connection.
    closed: Vec<Option<Instant>>,
    /// Per request index: when its reply was completely written (complete replies only).
    answered: Vec<Option<Instant>>,
    connections: usize,
    stop: bool,
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn stopped(&self) -> bool {
        self.lock().stop
    }

    /// Waits up to `timeout`; returns `true` if the server is stopping.
    fn wait_stop(&self, timeout: Duration) -> bool {
        self.wait_until(timeout, |state| state.stop.then_some(()))
            .is_some()
    }

    /// Waits up to `timeout` for `seen` to find something in the state; `None` if it did
    /// not in time.
    fn wait_until<T>(&self, timeout: Duration, seen: impl Fn(&State) -> Option<T>) -> Option<T> {
        let deadline = Instant::now() + timeout;
        let mut state = self.lock();
        loop {
            if let Some(found) = seen(&state) {
                return Some(found);
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            state = self
                .changed
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    fn mark_closed(&self, index: usize) {
        self.mark(index, |state| &mut state.closed);
    }

    fn mark(&self, index: usize, times: fn(&mut State) -> &mut Vec<Option<Instant>>) {
        let mut state = self.lock();
        let at = &mut times(&mut state)[index];
        if at.is_none() {
            *at = Some(Instant::now());
        }
        self.changed.notify_all();
    }

    /// Waits up to `timeout` for the time `times` holds for request `index`.
    fn wait_mark(
        &self,
        index: usize,
        timeout: Duration,
        times: fn(&State) -> &Vec<Option<Instant>>,
    ) -> Option<Instant> {
        self.wait_until(timeout, |state| times(state).get(index).copied().flatten())
    }
}

/// The loopback server. Stops and joins its threads when dropped.
pub struct Server {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl Server {
    /// Starts a server on 127.0.0.1 (a free port) that answers with `replies`, in order.
    pub fn start(replies: Vec<Reply>) -> Server {
        keep_stamping_on();
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local addr");
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                replies: replies.into(),
                ..State::default()
            }),
            changed: Condvar::new(),
        });
        let accept = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name(format!("loopback-accept-{}", addr.port()))
                .spawn(move || accept_loop(listener, shared))
                .expect("spawn the accept thread")
        };
        Server {
            addr,
            shared,
            accept: Some(accept),
        }
    }

    /// Starts a server whose requests are routed by body content: a request whose body
    /// contains a route's marker gets that route's next reply (routes are tried in order);
    /// any other request gets the next of `fallback`. For concurrent conversations (a
    /// session and its subagents) whose requests arrive in no fixed order.
    pub fn start_routed(routes: Vec<(&str, Vec<Reply>)>, fallback: Vec<Reply>) -> Server {
        let server = Server::start(fallback);
        server.shared.lock().routes = routes
            .into_iter()
            .map(|(marker, replies)| (marker.to_string(), replies.into()))
            .collect();
        server
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The port the server listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.lock().requests.clone()
    }

    /// How many connections were accepted.
    pub fn connection_count(&self) -> usize {
        self.shared.lock().connections
    }

    /// Waits until at least `n` requests have arrived; panics after `timeout`.
    pub fn wait_for_requests(&self, n: usize, timeout: Duration) -> Vec<RecordedRequest> {
        let arrived = self.shared.wait_until(timeout, |state| {
            (state.requests.len() >= n).then(|| state.requests.clone())
        });
        arrived.unwrap_or_else(|| {
            panic!(
                "only {} of {n} requests arrived within {timeout:?}",
                self.shared.lock().requests.len()
            )
        })
    }

    /// Waits until the client has closed the connection that carried request `index`;
    /// returns when that was seen, or `None` if it was not seen within `timeout`.
    ///
    /// Only connections the server is holding (stalls, kept-alive connections after a
    /// complete reply) are watched.
    pub fn wait_client_closed(&self, index: usize, timeout: Duration) -> Option<Instant> {
        self.shared.wait_mark(index, timeout, |state| &state.closed)
    }

    /// Waits until the reply to request `index` was completely written (the terminating
    /// chunk sent and flushed); `None` if it was not within `timeout`, or if the reply was
    /// not a complete one (a stall, a hang-up).
    pub fn wait_answered(&self, index: usize, timeout: Duration) -> Option<Instant> {
        self.shared
            .wait_mark(index, timeout, |state| &state.answered)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shared.lock().stop = true;
        self.shared.changed.notify_all();
        // Wake the blocking accept().
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
    }
}

/// Accepts connections and reads each one's first request on this thread, so that the
/// request is stamped when its last byte arrives rather than after a thread was started
/// for it (the e2e bench counts the time to that stamp as the client's); the reply and any
/// further requests on the connection are served on a thread of their own.
fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    let mut workers: Vec<JoinHandle<()>> = Vec::new();
    for (n, stream) in listener.incoming().enumerate() {
        if shared.stopped() {
            break;
        }
        let Ok(mut stream) = stream else { continue };
        shared.lock().connections += 1;
        let _ = stream.set_read_timeout(Some(POLL));
        let _ = stream.set_nodelay(true);
        stamp_arrivals(&stream);
        let mut buffered = Vec::new();
        let first = read_request(&mut stream, &mut buffered, &shared);
        if matches!(first, Incoming::Stop) {
            break;
        }
        let shared = shared.clone();
        let worker = std::thread::Builder::new()
            .name(format!("loopback-conn-{n}"))
            .spawn(move || serve_connection(stream, &shared, first, buffered))
            .expect("spawn a connection thread");
        workers.push(worker);
    }
    for worker in workers {
        let _ = worker.join();
    }
}

/// What reading from the client gave.
enum Incoming {
    Request(RecordedRequest),
    /// The client closed (or reset) the connection.
    Closed,
    /// The server is stopping.
    Stop,
}

fn serve_connection(
    mut stream: TcpStream,
    shared: &Shared,
    first: Incoming,
    mut buffered: Vec<u8>,
) {
    let mut last_index: Option<usize> = None;
    let mut next = Some(first);
    loop {
        let incoming = match next.take() {
            Some(incoming) => incoming,
            None => read_request(&mut stream, &mut buffered, shared),
        };
        let request = match incoming {
            Incoming::Request(request) => request,
            Incoming::Closed => {
                if let Some(index) = last_index {
                    shared.mark_closed(index);
                }
                return;
            }
            Incoming::Stop => return,
        };
        let (index, reply) = {
            let mut state = shared.lock();
            let body = String::from_utf8_lossy(&request.body).into_owned();
            let route = state
                .routes
                .iter()
                .position(|(marker, _)| body.contains(marker.as_str()));
            state.requests.push(request);
            state.closed.push(None);
            state.answered.push(None);
            let reply = match route {
                Some(route) => state.routes[route].1.pop_front(),
                None => state.replies.pop_front(),
            };
            shared.changed.notify_all();
            (state.requests.len() - 1, reply)
        };
        last_index = Some(index);
        let reply = reply.unwrap_or_else(|| {
            Reply::json(
                500,
                r#"{"error":{"message":"the loopback script has no reply left"}}"#,
            )
        });
        match write_reply(&mut stream, &reply, shared) {
            Written::KeepAlive if reply.ending == Ending::CompleteThenClose => {
                let _ = stream.shutdown(Shutdown::Both);
                shared.mark(index, |state| &mut state.answered);
                return;
            }
            Written::KeepAlive => shared.mark(index, |state| &mut state.answered),
            Written::Hold => {
                hold(&mut stream, shared, index);
                return;
            }
            Written::Closed => {
                let _ = stream.shutdown(Shutdown::Both);
                return;
            }
        }
    }
}

/// Holds a connection open without writing until the client closes it or the server stops.
fn hold(stream: &mut TcpStream, shared: &Shared, index: usize) {
    let mut scratch = [0u8; 1024];
    loop {
        if shared.stopped() {
            return;
        }
        match stream.read(&mut scratch) {
            Ok(0) => {
                shared.mark_closed(index);
                return;
            }
            Ok(_) => {} // a pipelined request while stalled: ignored
            Err(e) if matches!(e.kind(), IoKind::WouldBlock | IoKind::TimedOut) => {}
            Err(e) if e.kind() == IoKind::Interrupted => {}
            Err(_) => {
                shared.mark_closed(index);
                return;
            }
        }
    }
}

fn read_request(stream: &mut TcpStream, buffered: &mut Vec<u8>, shared: &Shared) -> Incoming {
    let mut scratch = [0u8; 8192];
    LAST_ARRIVAL.set(None);
    let header_end = loop {
        if let Some(end) = find(buffered, b"\r\n\r\n") {
            break end;
        }
        match read_some(stream, &mut scratch, shared) {
            Some(0) | None if shared.stopped() => return Incoming::Stop,
            Some(0) | None => return Incoming::Closed,
            Some(n) => buffered.extend_from_slice(&scratch[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buffered[..header_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next().unwrap_or_default().split(' ');
    let method = request_line.next().unwrap_or_default().to_string();
    let path = request_line.next().unwrap_or_default().to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    buffered.drain(..header_end + 4);
    let get = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    };
    let body = if get("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        match read_chunked(stream, buffered, shared) {
            Some(body) => body,
            None => return Incoming::Closed,
        }
    } else {
        let length: usize = get("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        while buffered.len() < length {
            match read_some(stream, &mut scratch, shared) {
                Some(0) | None => return Incoming::Closed,
                Some(n) => buffered.extend_from_slice(&scratch[..n]),
            }
        }
        buffered.drain(..length).collect()
    };
    // Stamped before the server parses anything: parsing is the server's time.
    let at = Instant::now();
    let arrived = LAST_ARRIVAL
        .get()
        .and_then(|stamp| {
            Duration::try_from_secs_f64((clock_ns(libc::CLOCK_REALTIME) - stamp) as f64 / 1e9).ok()
        })
        .filter(|waited| *waited < STAMP_TRUSTED)
        .and_then(|waited| at.checked_sub(waited))
        .unwrap_or(at);
    let json = serde_json::from_slice(&body).ok();
    Incoming::Request(RecordedRequest {
        method,
        path,
        headers,
        body,
        json,
        at,
        arrived,
    })
}

fn read_chunked(
    stream: &mut TcpStream,
    buffered: &mut Vec<u8>,
    shared: &Shared,
) -> Option<Vec<u8>> {
    let mut scratch = [0u8; 8192];
    let mut body = Vec::new();
    loop {
        while find(buffered, b"\r\n").is_none() {
            let n = read_some(stream, &mut scratch, shared).filter(|&n| n > 0)?;
            buffered.extend_from_slice(&scratch[..n]);
        }
        let line_end = find(buffered, b"\r\n")?;
        let size_text = String::from_utf8_lossy(&buffered[..line_end]).into_owned();
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        buffered.drain(..line_end + 2);
        while buffered.len() < size + 2 {
            let n = read_some(stream, &mut scratch, shared).filter(|&n| n > 0)?;
            buffered.extend_from_slice(&scratch[..n]);
        }
        body.extend_from_slice(&buffered[..size]);
        buffered.drain(..size + 2);
        if size == 0 {
            return Some(body);
        }
    }
}

std::thread_local! {
    /// The kernel's receive stamp (CLOCK_REALTIME ns) of the last segment this thread read.
    static LAST_ARRIVAL: std::cell::Cell<Option<i64>> = const { std::cell::Cell::new(None) };
}

/// `clock` (a `CLOCK_*` id) now, in ns: the receive stamps are CLOCK_REALTIME; the bench
/// also reads CLOCK_MONOTONIC, what [`Instant`] reads on Linux, across processes.
pub fn clock_ns(clock: libc::clockid_t) -> i64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid, writable timespec for the call.
    unsafe { libc::clock_gettime(clock, &mut now) };
    now.tv_sec * 1_000_000_000 + now.tv_nsec
}

/// Asks the kernel to stamp what arrives on `socket` (read back by [`recv_stamped`]).
fn stamp_arrivals(socket: &impl std::os::fd::AsRawFd) -> bool {
    let on: libc::c_int = 1;
    // SAFETY: a valid socket descriptor and an int option of the size given.
    let set = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPNS,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    set == 0
}

/// Keeps the kernel's receive stamping on for the rest of the process: one socket that
/// asks for stamps, never closed. The kernel switches stamping on with the first socket
/// that asks and off after the last one closes, each time by patching its code on every
/// CPU; a server per run of a bench did that twice per run, during the runs measured
/// (abort → `SESSION_END` of a stalled stream measured 0.14–0.17 ms with it, 0.10 ms
/// without). Left on, it costs a clock read per packet received. The switch takes effect
/// a moment after the socket asks (the kernel patches its code from a worker): this
/// returns once it has, so that the first request a server reads is stamped too.
fn keep_stamping_on() {
    static KEEP: std::sync::OnceLock<Option<std::net::UdpSocket>> = std::sync::OnceLock::new();
    KEEP.get_or_init(|| {
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").ok()?;
        if !stamp_arrivals(&socket) {
            return None;
        }
        let deadline = Instant::now() + crate::GENEROUS;
        while !stamped_on_arrival(&socket) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        Some(socket)
    });
}

/// Whether a datagram `socket` sends itself is stamped when it arrives: before the read
/// that returns it began (a packet that arrived unstamped is stamped when it is read).
fn stamped_on_arrival(socket: &std::net::UdpSocket) -> bool {
    let Ok(to) = socket.local_addr() else {
        return false;
    };
    if socket.send_to(b"x", to).is_err() {
        return false;
    }
    let read_from = clock_ns(libc::CLOCK_REALTIME);
    LAST_ARRIVAL.set(None);
    let stamped = recv_stamped(socket, &mut [0; 1]).is_ok()
        && LAST_ARRIVAL.get().is_some_and(|stamp| stamp < read_from);
    LAST_ARRIVAL.set(None);
    stamped
}

/// `read` through `recvmsg`, noting the receive stamp of what it read in [`LAST_ARRIVAL`].
fn recv_stamped(socket: &impl std::os::fd::AsRawFd, buf: &mut [u8]) -> std::io::Result<usize> {
    // Room for one cmsghdr and a timespec, 8-byte aligned.
    let mut control = [0u64; 8];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: an all-zero msghdr is valid; the pointers set below outlive the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    // SAFETY: `msg` describes valid, writable buffers for the call.
    let n = unsafe { libc::recvmsg(socket.as_raw_fd(), &mut msg, 0) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the CMSG macros walk the control buffer the kernel just filled, within
    // `msg_controllen`; a timespec is read unaligned from a cmsg of that type.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SO_TIMESTAMPNS {
                let stamp: libc::timespec = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast());
                LAST_ARRIVAL.set(Some(stamp.tv_sec * 1_000_000_000 + stamp.tv_nsec));
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    Ok(n as usize)
}

/// One read that retries on timeouts until data, EOF (`Some(0)`), an error or a stop
/// (`None`).
fn read_some(stream: &mut TcpStream, buf: &mut [u8], shared: &Shared) -> Option<usize> {
    loop {
        match recv_stamped(stream, buf) {
            Ok(n) => return Some(n),
            Err(e) if matches!(e.kind(), IoKind::WouldBlock | IoKind::TimedOut) => {
                if shared.stopped() {
                    return None;
                }
            }
            Err(e) if e.kind() == IoKind::Interrupted => {}
            Err(_) => return None,
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

enum Written {
    KeepAlive,
    Hold,
    Closed,
}

fn write_reply(stream: &mut TcpStream, reply: &Reply, shared: &Shared) -> Written {
    match reply.ending {
        Ending::HangUpAtOnce => return Written::Closed,
        Ending::Silent => return Written::Hold,
        _ => {}
    }
    let body = if reply.gzip {
        gzip_stored(&reply.body)
    } else {
        reply.body.clone()
    };
    let mut head = format!("HTTP/1.1 {} {}\r\n", reply.status, reason(reply.status));
    for (name, value) in &reply.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    if reply.gzip {
        head.push_str("content-encoding: gzip\r\n");
    }
    if reply.chunked {
        head.push_str("transfer-encoding: chunked\r\n\r\n");
    } else {
        head.push_str(&format!("content-length: {}\r\n\r\n", body.len()));
    }
    if stream.write_all(head.as_bytes()).is_err() {
        return Written::Closed;
    }
    let limit = match reply.ending {
        Ending::HangUpAfter(n) => n.min(body.len()),
        _ => body.len(),
    };
    let body = &body[..limit];
    if !reply.chunked {
        return match stream.write_all(body).and_then(|_| stream.flush()) {
            Ok(()) => Written::KeepAlive,
            Err(_) => Written::Closed,
        };
    }
    let size = reply.chunk_size.unwrap_or(body.len().max(1));
    for (i, piece) in body.chunks(size).enumerate() {
        if i > 0 && !reply.delay.is_zero() && shared.wait_stop(reply.delay) {
            return Written::Closed;
        }
        let mut frame = format!("{:x}\r\n", piece.len()).into_bytes();
        frame.extend_from_slice(piece);
        frame.extend_from_slice(b"\r\n");
        if stream
            .write_all(&frame)
            .and_then(|_| stream.flush())
            .is_err()
        {
            return Written::Closed;
        }
    }
    match reply.ending {
        Ending::Stall => Written::Hold,
        Ending::HangUpAfter(_) => Written::Closed,
        _ => match stream.write_all(b"0\r\n\r\n").and_then(|_| stream.flush()) {
            Ok(()) => Written::KeepAlive,
            Err(_) => Written::Closed,
        },
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        413 => "Payload Too Large",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        529 => "Overloaded",
        _ => "Status",
    }
}

/// A gzip member holding `data` in stored (uncompressed) deflate blocks: real gzip framing
/// that any decoder accepts, without a compression library.
fn gzip_stored(data: &[u8]) -> Vec<u8> {
    let mut out = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];
    let mut blocks = data.chunks(0xffff).peekable();
    if blocks.peek().is_none() {
        out.extend_from_slice(&[1, 0, 0, 0xff, 0xff]);
    }
    while let Some(block) = blocks.next() {
        out.push(u8::from(blocks.peek().is_none()));
        let len = block.len() as u16;
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&(!len).to_le_bytes());
        out.extend_from_slice(block);
    }
    out.extend_from_slice(&crc32(data).to_le_bytes());
    out.extend_from_slice(&(data.len() as u32).to_le_bytes());
    out
}

fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &byte in data {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

#[test]
fn crc32_matches_the_check_value() {
    assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
}

/// `arrived` is the kernel's receive stamp, not the server's read: a request that waits in
/// the socket while the server's one accepting thread is busy with another connection
/// arrived long before it was read. Without the stamp, `arrived` would be `at`.
#[test]
fn a_request_is_stamped_when_its_last_byte_arrived_not_when_it_was_read() {
    let wait_until = |what: &str, done: &dyn Fn() -> bool| {
        let deadline = Instant::now() + crate::GENEROUS;
        while !done() {
            assert!(Instant::now() < deadline, "never: {what}");
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    let server = Server::start(vec![Reply::json(200, "{}"), Reply::json(200, "{}")]);
    let addr = server.url().trim_start_matches("http://").to_string();
    // The first connection sends half a body: the accepting thread takes it and waits on it.
    let mut slow = TcpStream::connect(&addr).unwrap();
    slow.write_all(b"POST /a HTTP/1.1\r\nhost: x\r\ncontent-length: 4\r\n\r\n{}")
        .unwrap();
    wait_until("the server took the first connection", &|| {
        server.connection_count() == 1
    });
    // The second request, complete, reaches the server's socket and waits there, unread:
    // the server's kernel has acknowledged every byte of it.
    let sent = Instant::now();
    let mut waiting = TcpStream::connect(&addr).unwrap();
    waiting
        .write_all(b"POST /b HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}")
        .unwrap();
    wait_until("the second request arrived", &|| {
        unacknowledged(&waiting) == 0
    });
    // Only now can the server read it: once the first request is complete.
    let released = Instant::now();
    slow.write_all(b"  ").unwrap();
    wait_until("the server read both requests", &|| {
        server.requests().len() == 2
    });
    let requests = server.requests();
    let second = requests.iter().find(|r| r.path == "/b").unwrap();
    assert!(
        second.at > released,
        "read before the first request was complete"
    );
    assert!(
        second.arrived <= released,
        "stamped {:?} after the server could first read it",
        second.arrived - released
    );
    assert!(
        second.arrived >= sent,
        "stamped {:?} before the client sent it",
        sent - second.arrived
    );
    drop((slow, waiting));
}

/// The bytes `stream` sent that its peer has not acknowledged yet (`SIOCOUTQ`).
#[cfg(test)]
fn unacknowledged(stream: &TcpStream) -> i32 {
    use std::os::fd::AsRawFd;
    let mut queued: libc::c_int = 0;
    // SAFETY: SIOCOUTQ (TIOCOUTQ) writes one c_int through the pointer, which points at
    // `queued`; `stream` is an open socket.
    let rc = unsafe { libc::ioctl(stream.as_raw_fd(), libc::TIOCOUTQ, &mut queued) };
    assert_eq!(rc, 0, "SIOCOUTQ: {}", std::io::Error::last_os_error());
    queued
}
