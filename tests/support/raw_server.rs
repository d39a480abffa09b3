//! A raw loopback server for broken and hostile model servers: it hands each connection,
//! its request read, to a closure that writes whatever it likes (an endless line, a
//! trickle of comments, a redirect), so that a 400 MB attack is generated as it is
//! written and costs the test nothing. It binds only 127.0.0.1.

use std::io::{BufRead, BufReader, Read};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crate::GENEROUS;

/// A loopback server that hands every connection (after reading its request) to
/// `respond`, until the returned [`Stop`] is dropped or a minute has passed.
pub fn raw_server(respond: impl Fn(TcpStream) + Send + Sync + 'static) -> (String, Stop) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let stopped = Arc::clone(&stop);
    let handle = thread::Builder::new()
        .name("raw-server".to_string())
        .spawn(move || {
            let deadline = Instant::now() + GENEROUS * 3;
            thread::scope(|scope| {
                while !stopped.load(Ordering::SeqCst) && Instant::now() < deadline {
                    match listener.accept() {
                        Ok((mut stream, _)) => {
                            stream.set_nonblocking(false).unwrap();
                            let respond = &respond;
                            scope.spawn(move || {
                                read_request(&mut stream);
                                respond(stream);
                            });
                        }
                        Err(_) => thread::sleep(Duration::from_millis(5)),
                    }
                }
            });
        })
        .unwrap();
    (url, Stop(stop, Some(handle)))
}

/// Stops a [`raw_server`] (and joins it) when dropped.
pub struct Stop(Arc<AtomicBool>, Option<thread::JoinHandle<()>>);

impl Drop for Stop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
        if let Some(handle) = self.1.take() {
            let _ = handle.join();
        }
    }
}

/// Reads one request's head and its `content-length` body.
fn read_request(stream: &mut TcpStream) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let lower = line.to_ascii_lowercase();
        if let Some(value) = lower.strip_prefix("content-length:") {
            length = value.trim().parse().unwrap_or(0);
        }
        if line == "\r\n" {
            break;
        }
    }
    let mut body = vec![0; length];
    let _ = reader.read_exact(&mut body);
}

/// The head of a `200` event stream that closes the connection after its body.
pub const SSE_HEAD: &[u8] =
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
