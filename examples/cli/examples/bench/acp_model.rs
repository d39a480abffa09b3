//! The loopback model of the `acp` bench: one model for every agent, answering by what a
//! request holds rather than by its order, so that agents that send side requests (titles,
//! token counts) or name their tools differently run the same task. It speaks Anthropic
//! Messages and OpenAI Responses (the adapters' own formats) on 127.0.0.1 only.
//!
//! The task of a prompt is a word in it: `TASK` (a command writes a file, a read reads it
//! back, an answer), `SLEEP` (a command that sleeps until it is cancelled). The round is
//! the number of tool results after the last user message. A request without tools (a
//! title, a summary) gets a one-word answer.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use serde_json::{Value, json};
use support::turns::{self, Call};

/// A running model server; dropping it stops and joins its thread.
pub struct Model {
    pub url: String,
    pub requests: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Model {
    pub fn start() -> Model {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
        listener.set_nonblocking(true).unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (stop, requests) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicUsize::new(0)),
        );
        let (stop_, requests_) = (stop.clone(), requests.clone());
        let thread = thread::Builder::new()
            .name("bench-acp-model".to_string())
            .spawn(move || {
                let mut connections = Vec::new();
                while !stop_.load(Ordering::SeqCst) {
                    match listener.accept() {
                        Ok((stream, _)) => {
                            let (stop, requests) = (stop_.clone(), requests_.clone());
                            connections.push(
                                thread::Builder::new()
                                    .name("bench-acp-conn".to_string())
                                    .spawn(move || serve(stream, &stop, &requests))
                                    .unwrap(),
                            );
                        }
                        Err(_) => thread::sleep(Duration::from_millis(2)),
                    }
                }
                for connection in connections {
                    let _ = connection.join();
                }
            })
            .unwrap();
        Model {
            url,
            requests,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Model {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Answers the requests of one connection until it closes or the server stops.
fn serve(stream: TcpStream, stop: &AtomicBool, requests: &AtomicUsize) {
    stream
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let _ = stream.set_nodelay(true);
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    loop {
        let mut head = String::new();
        let mut length = 0usize;
        let mut chunked = false;
        let mut line = String::new();
        // The request line and headers.
        loop {
            line.clear();
            match reader.read_line(&mut line) {
                Ok(0) => return,
                Ok(_) => {}
                Err(_) if stop.load(Ordering::SeqCst) => return,
                Err(_) => continue,
            }
            if line == "\r\n" || line == "\n" {
                break;
            }
            let lower = line.to_ascii_lowercase();
            if let Some(v) = lower.strip_prefix("content-length:") {
                length = v.trim().parse().unwrap_or(0);
            }
            if lower.starts_with("transfer-encoding:") && lower.contains("chunked") {
                chunked = true;
            }
            if head.is_empty() {
                head = line.clone();
            }
        }
        let body = if chunked {
            read_chunked(&mut reader)
        } else {
            let mut body = vec![0; length];
            if read_all(&mut reader, &mut body, stop).is_err() {
                return;
            }
            body
        };
        requests.fetch_add(1, Ordering::SeqCst);
        let (status, content_type, answer) = respond(&head, &body);
        // Head and body in one write: two small writes would wait on Nagle's algorithm and
        // the client's delayed ACK (about 40 ms a response on Linux loopback).
        let response = format!(
            "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n\r\n{answer}",
            answer.len()
        );
        if writer.write_all(response.as_bytes()).is_err() {
            return;
        }
    }
}

fn read_all(reader: &mut impl Read, body: &mut [u8], stop: &AtomicBool) -> Result<(), ()> {
    let mut at = 0;
    while at < body.len() {
        match reader.read(&mut body[at..]) {
            Ok(0) => return Err(()),
            Ok(n) => at += n,
            Err(_) if stop.load(Ordering::SeqCst) => return Err(()),
            Err(_) => {}
        }
    }
    Ok(())
}

fn read_chunked(reader: &mut impl BufRead) -> Vec<u8> {
    let mut body = Vec::new();
    loop {
        let mut size = String::new();
        if reader.read_line(&mut size).unwrap_or(0) == 0 {
            return body;
        }
        let n =
            usize::from_str_radix(size.trim().split(';').next().unwrap_or("0"), 16).unwrap_or(0);
        let mut chunk = vec![0; n + 2];
        if reader.read_exact(&mut chunk).is_err() || n == 0 {
            return body;
        }
        body.extend_from_slice(&chunk[..n]);
    }
}

/// Status, content type and body of the answer to one request.
fn respond(head: &str, body: &[u8]) -> (&'static str, &'static str, String) {
    let path = head.split_whitespace().nth(1).unwrap_or("");
    if path.contains("count_tokens") {
        return (
            "200 OK",
            "application/json",
            json!({"input_tokens": 100}).to_string(),
        );
    }
    let Ok(request) = serde_json::from_slice::<Value>(body) else {
        return ("404 Not Found", "application/json", "{}".to_string());
    };
    let sse = "text/event-stream";
    if std::env::var_os("ACP_BENCH_VERBOSE").is_some() {
        let names: Vec<&str> = request["tools"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| t["name"].as_str().or(t["type"].as_str()))
            .collect();
        let format = if path.contains("/responses") {
            Format::Responses
        } else {
            Format::Messages
        };
        let (prompt, round) = prompt_and_round(&request, format);
        eprintln!(
            "model: {path} tools={names:?} round={round} prompt={:?}",
            prompt.chars().take(60).collect::<String>()
        );
    }
    if path.contains("/responses") {
        let (text, calls) = turn(&request, Format::Responses);
        ("200 OK", sse, turns::responses_sse(&text, &calls))
    } else if path.contains("/messages") {
        let (text, calls) = turn(&request, Format::Messages);
        ("200 OK", sse, turns::anthropic_sse(&text, &calls))
    } else {
        ("404 Not Found", "application/json", "{}".to_string())
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Format {
    Messages,
    Responses,
}

/// The last prompt (the last text part naming a task) and the tool results after it.
/// Claude Code sends a new prompt in the same user message as the last tool results, so
/// this goes part by part, not message by message.
fn prompt_and_round(request: &Value, format: Format) -> (String, usize) {
    let items = match format {
        Format::Messages => request["messages"].as_array(),
        Format::Responses => request["input"].as_array(),
    };
    let mut prompt = String::new();
    let mut round = 0;
    for item in items.into_iter().flatten() {
        if item["type"]
            .as_str()
            .is_some_and(|t| t.ends_with("call_output"))
        {
            round += 1;
        }
        if item["role"] != "user" {
            continue;
        }
        let parts = match &item["content"] {
            Value::String(text) => vec![json!({"type": "text", "text": text})],
            Value::Array(parts) => parts.clone(),
            _ => Vec::new(),
        };
        for part in parts {
            if part["type"] == "tool_result" {
                round += 1;
            } else if let Some(text) = part["text"].as_str()
                && (text.contains("TASK") || text.contains("SLEEP"))
            {
                prompt = text.to_string();
                round = 0;
            }
        }
    }
    (prompt, round)
}

/// The tool named `name` among those the request offers (Messages: `name` and
/// `input_schema`; Responses: `name` and `parameters`), as its parameters' schema.
fn tool<'a>(request: &'a Value, name: &str) -> Option<&'a Value> {
    let tool = request["tools"]
        .as_array()?
        .iter()
        .find(|t| t["name"] == name)?;
    Some(
        tool.get("input_schema")
            .or(tool.get("parameters"))
            .unwrap_or(&Value::Null),
    )
}

/// The agent's own shell and read tools, by the names its request offers.
fn shell(request: &Value, command: &str, id: &str) -> Call {
    if tool(request, "Bash").is_some() {
        turns::function(
            id,
            "Bash",
            json!({"command": command, "description": "run it"}),
        )
    } else if tool(request, "exec_command").is_some() {
        turns::function(id, "exec_command", json!({"cmd": command}))
    } else if tool(request, "shell_command").is_some() {
        turns::function(id, "shell_command", json!({"command": command}))
    } else if tool(request, "shell")
        .is_some_and(|schema| schema["properties"]["command"]["type"] == "array")
    {
        turns::function(id, "shell", json!({"command": ["bash", "-lc", command]}))
    } else {
        turns::function(id, "shell", json!({"command": command}))
    }
}

fn read(request: &Value, path: &str, id: &str) -> Call {
    if tool(request, "Read").is_some() {
        turns::function(id, "Read", json!({"file_path": path}))
    } else if tool(request, "read_file").is_some() {
        turns::function(id, "read_file", json!({"file_path": path}))
    } else {
        shell(request, &format!("cat {path}"), id)
    }
}

fn turn(request: &Value, format: Format) -> (String, Vec<Call>) {
    let tools = request["tools"].as_array().is_some_and(|t| !t.is_empty());
    let (prompt, round) = prompt_and_round(request, format);
    if !tools {
        return ("ok".to_string(), Vec::new());
    }
    // The adapters work in the bench's directory; paths are absolute for Claude's Read.
    let dir = prompt
        .split("DIR=")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or(".");
    let file = format!("{dir}/out.txt");
    match (prompt.contains("SLEEP"), round) {
        (false, 0) => (
            String::new(),
            vec![shell(request, &format!("echo hello > {file}"), "call_1")],
        ),
        (false, 1) => (String::new(), vec![read(request, &file, "call_2")]),
        (false, _) => ("done".to_string(), Vec::new()),
        (true, 0) => (
            String::new(),
            vec![shell(
                request,
                &format!("touch {dir}/started; sleep 30"),
                "call_3",
            )],
        ),
        (true, _) => ("stopped".to_string(), Vec::new()),
    }
}
