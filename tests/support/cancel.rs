//! Cancelling a request or a stream from another thread and timing how long it takes to
//! end, for the HTTP tests of every wire format; and where a capture's n-th SSE event ends,
//! to cut a body there. Waits on channels with deadlines, never sleeps.

use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use agentloop::llm::{Client, Request, StreamEvent};
use agentloop::{CancelToken, ErrorKind};

use super::{GENEROUS, Server};

/// The byte offset just after the `n`-th SSE event (1-based), for LF or CRLF framing.
pub fn after_events(bytes: &[u8], n: usize) -> usize {
    let mut found = 0;
    let mut i = 0;
    while i < bytes.len() {
        let end = if bytes[i..].starts_with(b"\r\n\r\n") {
            Some(i + 4)
        } else if bytes[i..].starts_with(b"\n\n") {
            Some(i + 2)
        } else {
            None
        };
        if let Some(end) = end {
            found += 1;
            if found == n {
                return end;
            }
            i = end;
        } else {
            i += 1;
        }
    }
    panic!("the stream has fewer than {n} events");
}

/// Runs `work` on a named thread; the receiver gets its result and when it ended.
pub fn spawn_timed<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> (mpsc::Receiver<(T, Instant)>, JoinHandle<()>) {
    let (tx, rx) = mpsc::channel();
    let handle = std::thread::Builder::new()
        .name("test-stream-consumer".into())
        .spawn(move || {
            let result = work();
            let _ = tx.send((result, Instant::now()));
        })
        .unwrap();
    (rx, handle)
}

/// Opens a stream of `request` on another thread, waits until `server` has received the
/// request (a server that never answers), cancels, and returns how the call ended and how
/// long after the cancel.
pub fn cancel_while_waiting_for_headers(
    server: &Server,
    client: Client,
    request: Request,
) -> (agentloop::Result<()>, Duration) {
    let cancel = CancelToken::new();
    let (done, worker) = {
        let cancel = cancel.clone();
        spawn_timed(move || client.stream_with_cancel(&request, &cancel).map(|_| ()))
    };
    server.wait_for_requests(1, GENEROUS);
    let cancelled_at = Instant::now();
    cancel.cancel();
    let (result, ended_at) = done.recv_timeout(GENEROUS).expect("the request ended");
    worker.join().unwrap();
    (result, ended_at - cancelled_at)
}

/// Streams `request` on another thread until its first text delta has arrived (from a
/// server that then falls silent), cancels, and returns the error the stream ended with and
/// how long after the cancel.
pub fn cancel_after_the_first_text_delta(
    client: Client,
    request: Request,
) -> (agentloop::Result<()>, Duration) {
    let cancel = CancelToken::new();
    let (delta_tx, delta_rx) = mpsc::channel();
    let (done, worker) = {
        let cancel = cancel.clone();
        spawn_timed(move || {
            let stream = client.stream_with_cancel(&request, &cancel)?;
            let mut last = None;
            for item in stream {
                match item {
                    Ok(StreamEvent::TextDelta { .. }) => {
                        let _ = delta_tx.send(());
                    }
                    Ok(_) => {}
                    Err(err) => last = Some(err),
                }
            }
            Err::<(), _>(last.expect("the stream ended with an error"))
        })
    };
    delta_rx
        .recv_timeout(GENEROUS)
        .expect("a text delta before the stall");
    let cancelled_at = Instant::now();
    cancel.cancel();
    let (result, ended_at) = done.recv_timeout(GENEROUS).expect("the stream ended");
    worker.join().unwrap();
    (result, ended_at - cancelled_at)
}

/// Asserts that a cancelled call (`what`, for messages) ended as [`ErrorKind::Aborted`]
/// (the cancel ended it, not one of the client's timeouts) within [`GENEROUS`] of the cancel,
/// and that `server` saw the connection closed.
pub fn assert_aborted(
    what: &str,
    (result, took): (agentloop::Result<()>, Duration),
    server: &Server,
) {
    assert_eq!(result.unwrap_err().kind(), ErrorKind::Aborted, "{what}");
    assert!(took < GENEROUS, "{what}: cancel took {took:?}");
    assert!(
        server.wait_client_closed(0, GENEROUS).is_some(),
        "{what}: the server did not see the connection closed"
    );
}
