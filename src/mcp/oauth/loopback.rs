//! The loopback redirect of a login (RFC 8252 §7.3): a listener on 127.0.0.1 that waits
//! for the browser's `GET /callback?code=…&state=…` and answers with a short page.
//!
//! It binds only to 127.0.0.1, reads at most [`MAX_REQUEST`] bytes of a request with a
//! read timeout, ignores requests for other paths and redirects whose `state` is not the
//! one it waits for, and stops at its deadline or when its cancel token fires.

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use super::discovery::form_decode;
use crate::cancel::CancelToken;

/// The most bytes of one request read.
const MAX_REQUEST: usize = 16 * 1024;
/// How long one connection may take to send its request.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// A bound listener and the redirect URI that reaches it.
pub(crate) struct Loopback {
    listener: TcpListener,
    pub(crate) redirect_uri: String,
}

/// What one request to the listener was.
enum Visit {
    /// The redirect: the code, or the authorization server's error.
    Redirect(Result<String, String>),
    /// Something else (a favicon, a stale redirect with another `state`).
    Other,
}

impl Loopback {
    /// Listens on 127.0.0.1 at `port` (an ephemeral port for `None`).
    pub(crate) fn bind(port: Option<u16>) -> io::Result<Loopback> {
        let listener = TcpListener::bind(("127.0.0.1", port.unwrap_or(0)))?;
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        Ok(Loopback {
            listener,
            redirect_uri: format!("http://127.0.0.1:{port}/callback"),
        })
    }

    /// Waits for the redirect carrying `state`; its code, or why there is none.
    pub(crate) fn wait(
        &self,
        state: &str,
        deadline: Instant,
        cancel: &CancelToken,
    ) -> Result<String, String> {
        loop {
            match self.listener.accept() {
                Ok((stream, _)) => {
                    if let Visit::Redirect(outcome) = serve(stream, state) {
                        return outcome;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err("the login was not completed in time".to_string());
                    }
                    if cancel.wait_timeout(left.min(Duration::from_millis(20))) {
                        return Err("the login was cancelled".to_string());
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("the login's redirect listener failed: {e}")),
            }
        }
    }
}

/// Reads one request and answers it.
fn serve(mut stream: TcpStream, state: &str) -> Visit {
    if stream.set_nonblocking(false).is_err()
        || stream.set_read_timeout(Some(READ_TIMEOUT)).is_err()
    {
        return Visit::Other;
    }
    let mut request = Vec::new();
    let mut buf = [0u8; 2048];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") && request.len() < MAX_REQUEST {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => request.extend_from_slice(&buf[..n]),
        }
    }
    let line = request.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let target = line.split(' ').nth(1).unwrap_or("");
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    if path != "/callback" {
        respond(&mut stream, "404 Not Found", "Not found.");
        return Visit::Other;
    }
    let param = |name: &str| {
        query.split('&').find_map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            (key == name).then(|| form_decode(value)).flatten()
        })
    };
    if param("state").as_deref() != Some(state) {
        respond(
            &mut stream,
            "400 Bad Request",
            "This sign-in link is not the one the agent is waiting for.",
        );
        return Visit::Other;
    }
    if let Some(error) = param("error") {
        respond(
            &mut stream,
            "200 OK",
            "Sign-in failed. You can close this tab.",
        );
        let description = param("error_description").unwrap_or_default();
        let why: String = format!("{error}: {description}")
            .chars()
            .filter(|c| !c.is_control())
            .take(300)
            .collect();
        return Visit::Redirect(Err(format!("the authorization server refused: {why}")));
    }
    match param("code").filter(|c| !c.is_empty() && c.len() <= 4096) {
        Some(code) => {
            respond(&mut stream, "200 OK", "Signed in. You can close this tab.");
            Visit::Redirect(Ok(code))
        }
        None => {
            respond(&mut stream, "400 Bad Request", "The redirect has no code.");
            Visit::Other
        }
    }
}

fn respond(stream: &mut TcpStream, status: &str, text: &str) {
    let body = format!("<!doctype html><html><body><p>{text}</p></body></html>");
    let _ = write!(
        stream,
        "HTTP/1.1 {status}\r\ncontent-type: text/html; charset=utf-8\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n{body}",
        body.len()
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn visit(uri: &str, path_and_query: &str) -> String {
        let address = uri
            .trim_start_matches("http://")
            .trim_end_matches("/callback");
        let mut stream = TcpStream::connect(address).unwrap();
        write!(stream, "GET {path_and_query} HTTP/1.1\r\nhost: x\r\n\r\n").unwrap();
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer);
        answer
    }

    #[test]
    fn the_code_with_the_right_state_ends_the_wait_and_others_do_not() {
        let loopback = Loopback::bind(None).unwrap();
        let uri = loopback.redirect_uri.clone();
        let browser = std::thread::spawn(move || {
            let a = visit(&uri, "/favicon.ico");
            let b = visit(&uri, "/callback?code=stale&state=other");
            let c = visit(&uri, "/callback?code=the%20code&state=s1");
            (a, b, c)
        });
        let deadline = Instant::now() + Duration::from_secs(20);
        let code = loopback.wait("s1", deadline, &CancelToken::new()).unwrap();
        assert_eq!(code, "the code");
        let (a, b, c) = browser.join().unwrap();
        assert!(a.starts_with("HTTP/1.1 404"), "{a}");
        assert!(b.starts_with("HTTP/1.1 400"), "{b}");
        assert!(c.contains("Signed in"), "{c}");
    }

    #[test]
    fn an_error_redirect_a_deadline_and_a_cancel_end_the_wait() {
        let loopback = Loopback::bind(None).unwrap();
        let uri = loopback.redirect_uri.clone();
        let browser = std::thread::spawn(move || {
            visit(
                &uri,
                "/callback?error=access_denied&error_description=no%0Athanks&state=s",
            )
        });
        let deadline = Instant::now() + Duration::from_secs(20);
        let why = loopback
            .wait("s", deadline, &CancelToken::new())
            .unwrap_err();
        assert_eq!(
            why,
            "the authorization server refused: access_denied: nothanks"
        );
        browser.join().unwrap();
        let soon = Instant::now() + Duration::from_millis(50);
        assert!(loopback.wait("s", soon, &CancelToken::new()).is_err());
        let cancel = CancelToken::new();
        cancel.cancel();
        let later = Instant::now() + Duration::from_secs(20);
        assert_eq!(
            loopback.wait("s", later, &cancel).unwrap_err(),
            "the login was cancelled"
        );
    }
}
