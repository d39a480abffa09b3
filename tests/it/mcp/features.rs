//! The MCP client's features beyond tools, against the fake server with `--resources`:
//! resources (paged listings, reads by the model and the host, the 60 MB resource),
//! prompts, elicitation in both eras (the host callback, defaults, no host), roots and
//! their change notice, declined sampling, and change notices reaching the host.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentloop::CancelToken;
use agentloop::llm::scripted::ScriptedTurn;
use agentloop::llm::{ContentPart, Role};
use agentloop::mcp::{Elicitation, ElicitationResponse, McpHost, McpServerState};
use agentloop::session::SessionConfig;
use serde_json::{Map, Value, json};

use super::*;

/// A host that records what reaches it and answers elicitations with `answer`.
#[derive(Default)]
pub struct RecordingHost {
    pub answer: Option<Map<String, Value>>,
    pub asked: Mutex<Vec<Elicitation>>,
    pub changes: Mutex<Vec<String>>,
}

impl McpHost for RecordingHost {
    fn elicit(&self, request: &Elicitation, _: &CancelToken) -> ElicitationResponse {
        self.asked.lock().unwrap().push(request.clone());
        match &self.answer {
            Some(answer) => ElicitationResponse::Accept(answer.clone()),
            None => ElicitationResponse::Decline,
        }
    }
    fn list_changed(&self, server: &str, list: &str) {
        self.changes
            .lock()
            .unwrap()
            .push(format!("{server}: {list}"));
    }
    fn resource_updated(&self, server: &str, uri: &str) {
        self.changes
            .lock()
            .unwrap()
            .push(format!("{server}: updated {uri}"));
    }
}

/// A harness with `server` and `host`.
fn hosted(
    turns: Vec<ScriptedTurn>,
    server: McpServer,
    host: Option<Arc<RecordingHost>>,
) -> Harness {
    let mut config = SessionConfig::default().with_mcp_server(server);
    if let Some(host) = host {
        config = config.with_mcp_host(host);
    }
    harness_with(ScriptedModel::new(turns), profile(), config)
}

fn with_resources(name: &str, more: &[&str]) -> McpServer {
    let mut args = vec!["--resources"];
    args.extend_from_slice(more);
    fake(name, &args)
}

/// Waits (up to a generous ceiling) until `found` holds.
fn eventually(found: impl Fn() -> bool) -> bool {
    let deadline = Instant::now() + support::GENEROUS;
    while Instant::now() < deadline {
        if found() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

#[test]
fn resources_are_listed_across_pages_and_read_by_the_model_and_the_host() {
    let mut h = hosted(
        vec![
            ScriptedTurn::tool_call("list_mcp_resources", json!({}))
                .with_tool_call("list_mcp_resource_templates", json!({"server": "fake"}))
                .with_tool_call(
                    "read_mcp_resource",
                    json!({"server": "fake", "uri": "res://a.txt"}),
                )
                .with_tool_call(
                    "read_mcp_resource",
                    json!({"server": "fake", "uri": "res://b.png"}),
                )
                .with_tool_call(
                    "read_mcp_resource",
                    json!({"server": "fake", "uri": "res://items/7"}),
                )
                .with_tool_call(
                    "read_mcp_resource",
                    json!({"server": "fake", "uri": "res://nope"}),
                ),
            ScriptedTurn::tool_call(
                "list_mcp_resources",
                json!({"server": "fake", "cursor": "2"}),
            ),
            ScriptedTurn::text("done"),
        ],
        with_resources("fake", &[]),
        None,
    );
    h.session.submit("go").unwrap();
    collect_input(&mut h.events);
    let requests = h.model.requests();
    let names = offered(&requests[0]);
    for tool in [
        "list_mcp_resources",
        "list_mcp_resource_templates",
        "read_mcp_resource",
    ] {
        assert!(names.contains(&tool.to_string()), "{names:?}");
    }
    let results = tool_results(&requests[1]);
    let all: Value = serde_json::from_str(&results[0].content).unwrap();
    let uris: Vec<&str> = all["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["uri"].as_str().unwrap())
        .collect();
    // Five resources served two per page: every page was read.
    assert_eq!(
        uris,
        [
            "res://a.txt",
            "res://b.png",
            "res://big.txt",
            "res://c.md",
            "res://d.json"
        ]
    );
    assert_eq!(all["resources"][0]["server"], "fake");
    let templates: Value = serde_json::from_str(&results[1].content).unwrap();
    assert_eq!(
        templates["resourceTemplates"][0]["uriTemplate"],
        "res://items/{id}"
    );
    assert_eq!(
        results[2].content,
        "Resource <res://a.txt> of `fake` (text/plain):\nalpha text"
    );
    assert!(
        results[3].content.contains("[image, 70 bytes]"),
        "{}",
        results[3].content
    );
    let image = results[3].image.as_ref().expect("the PNG as an image part");
    assert_eq!(&image.data.as_ref().unwrap()[..4], b"\x89PNG");
    assert!(
        results[4].content.ends_with(":\nitem 7"),
        "{}",
        results[4].content
    );
    assert!(results[5].is_error);
    assert!(
        results[5].content.contains("Resource not found"),
        "{}",
        results[5].content
    );
    // One page from a cursor, with the next cursor.
    let page: Value = serde_json::from_str(&last_result(&requests[2]).content).unwrap();
    assert_eq!(page["resources"].as_array().unwrap().len(), 2);
    assert_eq!(page["resources"][0]["uri"], "res://big.txt");
    assert_eq!(page["nextCursor"], "4");
    // The host reads directly, and sees the counts.
    let resources = h.session.mcp_resources(false);
    assert_eq!(resources.len(), 5);
    assert_eq!(
        resources[0],
        json!({"server": "fake", "uri": "res://a.txt", "name": "a.txt",
               "mimeType": "text/plain", "description": "Alpha."})
    );
    assert_eq!(
        h.session.mcp_resources(true)[0]["uriTemplate"],
        "res://items/{id}"
    );
    let read = h.session.read_mcp_resource("fake", "res://c.md").unwrap();
    assert_eq!(read[0]["text"], "# See");
    let png = h.session.read_mcp_resource("fake", "res://b.png").unwrap();
    assert_eq!(png[0]["mimeType"], "image/png");
    assert!(png[0]["blob"].as_str().unwrap().starts_with("iVBORw0KGgo"));
    let status = &h.session.mcp_servers()[0];
    assert_eq!(
        (status.resources, status.resource_templates, status.prompts),
        (5, 1, 2)
    );
}

#[test]
fn a_60_mb_resource_costs_the_model_a_note_not_its_size() {
    let mut h = hosted(
        vec![
            ScriptedTurn::tool_call(
                "read_mcp_resource",
                json!({"server": "fake", "uri": "res://big.txt"}),
            ),
            ScriptedTurn::text("done"),
        ],
        with_resources("fake", &[]),
        None,
    );
    h.session.submit("go").unwrap();
    let events = collect_input(&mut h.events);
    let (_, full, is_error) = &ends(&events)[0];
    assert!(!is_error);
    // The host's full copy is bounded too: 256 KiB of text and the note.
    assert!(full.len() < 300 * 1024, "{}", full.len());
    assert!(
        full.contains("[… cut: the resource has 62914560 bytes of text"),
        "{}",
        &full[full.len() - 200..]
    );
    let model_copy = &last_result(&h.model.requests()[1]).content;
    assert!(model_copy.len() < 300 * 1024);
    assert_eq!(
        stop_reason(&events),
        agentloop::session::StopReason::Completed
    );
}

#[test]
fn prompts_are_listed_and_fetched_with_their_arguments() {
    let h = hosted(vec![], with_resources("fake", &[]), None);
    let prompts = h.session.mcp_prompts();
    assert_eq!(prompts.len(), 2);
    assert_eq!(prompts[0]["name"], "greet");
    assert_eq!(prompts[0]["server"], "fake");
    assert_eq!(
        prompts[0]["arguments"],
        json!([{"name": "who", "description": "Whom", "required": true}])
    );
    assert_eq!(prompts[1]["title"], "Plain");
    let args = Map::from_iter([("who".to_string(), json!("Ada"))]);
    let messages = h.session.get_mcp_prompt("fake", "greet", &args).unwrap();
    assert_eq!(messages[0].role, Role::User);
    assert_eq!(messages[0].text(), "Hello, Ada!");
    assert!(matches!(messages[1].content[0], ContentPart::Image(_)));
    let missing = h
        .session
        .get_mcp_prompt("nobody", "greet", &args)
        .unwrap_err();
    assert!(
        missing
            .to_string()
            .contains("no ready MCP server is called `nobody`")
    );
}

fn elicit(era: &str, host: Option<Arc<RecordingHost>>) -> (String, Vec<Value>) {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let server = with_resources("fake", &["--era", era, "--log", log.to_str().unwrap()]);
    let mut h = hosted(
        vec![
            ScriptedTurn::tool_call("mcp__fake__ask", json!({})),
            ScriptedTurn::text("done"),
        ],
        server,
        host,
    );
    h.session.submit("go").unwrap();
    collect_input(&mut h.events);
    let answer = last_result(&h.model.requests()[1]).content;
    drop(h);
    (answer, server_log(&log).0)
}

#[test]
fn an_elicitation_reaches_the_host_and_its_answer_with_defaults_reaches_the_server() {
    for era in ["legacy", "modern"] {
        let host = Arc::new(RecordingHost {
            answer: Some(Map::from_iter([("name".to_string(), json!("Ada"))])),
            ..RecordingHost::default()
        });
        let (answer, log) = elicit(era, Some(host.clone()));
        // The default of the field the user left out was filled in.
        assert!(
            answer.starts_with(
                r#"answer: {"action": "accept", "content": {"color": "blue", "name": "Ada"}}"#
            ),
            "{era}: {answer}"
        );
        if era == "modern" {
            assert!(answer.ends_with("state: state-1"), "{answer}");
        }
        let asked = host.asked.lock().unwrap();
        assert_eq!(asked.len(), 1, "{era}");
        assert_eq!(asked[0].server, "fake");
        assert_eq!(asked[0].message, "What is your name?");
        assert_eq!(
            asked[0].schema.as_ref().unwrap()["required"],
            json!(["name"])
        );
        // The capability was declared (in the era's own place), sampling never.
        let capabilities = log
            .iter()
            .find_map(|m| match m["method"].as_str() {
                Some("initialize") => Some(m["params"]["capabilities"].clone()),
                Some("server/discover") => {
                    Some(m["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"].clone())
                }
                _ => None,
            })
            .unwrap();
        assert_eq!(
            capabilities,
            json!({"roots": {"listChanged": true}, "elicitation": {"form": {}, "url": {}}}),
            "{era}"
        );
    }
}

#[test]
fn without_a_host_an_elicitation_is_declined_and_not_announced() {
    let (answer, log) = elicit("legacy", None);
    assert_eq!(answer, r#"answer: {"action": "decline"}"#);
    let initialize = log.iter().find(|m| m["method"] == "initialize").unwrap();
    assert_eq!(
        initialize["params"]["capabilities"],
        json!({"roots": {"listChanged": true}})
    );
}

#[test]
fn roots_are_the_working_directory_then_the_hosts_and_a_change_is_announced() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let extra = tempfile::tempdir().unwrap();
    let mut h = hosted(
        vec![
            ScriptedTurn::tool_call("mcp__fake__roots", json!({}))
                .with_tool_call("mcp__fake__sample", json!({})),
            ScriptedTurn::text("first"),
            ScriptedTurn::tool_call("mcp__fake__roots", json!({})),
            ScriptedTurn::text("second"),
        ],
        with_resources("fake", &["--log", log.to_str().unwrap()]),
        None,
    );
    h.session.submit("go").unwrap();
    collect_input(&mut h.events);
    let results = tool_results(&h.model.requests()[1]);
    let roots: Value = serde_json::from_str(&results[0].content).unwrap();
    let cwd = h.dir.path().to_path_buf();
    assert_eq!(roots["roots"].as_array().unwrap().len(), 1, "{roots}");
    assert_eq!(
        roots["roots"][0]["uri"],
        format!("file://{}", cwd.display())
    );
    // Sampling is declined with an error the server can read.
    assert!(
        results[1].content.contains("-32601"),
        "{}",
        results[1].content
    );
    assert!(
        results[1].content.contains("sampling is not supported"),
        "{}",
        results[1].content
    );
    h.session.set_mcp_roots(vec![extra.path().to_path_buf()]);
    assert!(eventually(|| server_log(&log)
        .0
        .iter()
        .any(|m| m["method"] == "notifications/roots/list_changed")));
    h.session.submit("again").unwrap();
    collect_input(&mut h.events);
    let roots: Value = serde_json::from_str(&last_result(&h.model.requests()[3]).content).unwrap();
    assert_eq!(
        roots["roots"][1]["uri"],
        format!("file://{}", extra.path().display())
    );
    assert_eq!(
        roots["roots"][0]["uri"],
        format!("file://{}", cwd.display())
    );
}

#[test]
fn list_and_resource_changes_reach_the_host_and_the_counts() {
    let host = Arc::new(RecordingHost::default());
    let mut h = hosted(
        vec![
            ScriptedTurn::tool_call("mcp__fake__change", json!({})),
            ScriptedTurn::text("done"),
        ],
        with_resources("fake", &[]),
        Some(host.clone()),
    );
    assert_eq!(h.session.mcp_servers()[0].resources, 5);
    h.session.submit("go").unwrap();
    collect_input(&mut h.events);
    assert!(eventually(|| host.changes.lock().unwrap().len() >= 2));
    assert_eq!(
        host.changes.lock().unwrap()[..2],
        ["fake: resources".to_string(), "fake: prompts".to_string()]
    );
    assert_eq!(h.session.mcp_servers()[0].resources, 6);
    h.session
        .subscribe_mcp_resource("fake", "res://a.txt", true)
        .unwrap();
    assert!(eventually(|| host
        .changes
        .lock()
        .unwrap()
        .contains(&"fake: updated res://a.txt".to_string())));
    assert_eq!(h.session.mcp_servers()[0].state, McpServerState::Ready);
}

#[test]
fn a_flood_of_server_requests_is_answered_and_endless_input_requests_end() {
    let mut h = hosted(
        vec![
            ScriptedTurn::tool_call("mcp__fake__flood", json!({})),
            ScriptedTurn::tool_call("mcp__fake__ask_forever", json!({})),
            ScriptedTurn::text("done"),
        ],
        with_resources("fake", &["--era", "modern"]),
        None,
    );
    // In the modern era the flood still arrives as JSON-RPC requests (a hostile server):
    // the client answers with the roots while it keeps up and "busy" beyond, never blocks,
    // and drops answers only when the server stops reading them (its pipe full).
    h.session.submit("go").unwrap();
    let events = collect_input(&mut h.events);
    let ends = ends(&events);
    let flood = &ends[0].1;
    let counts: Vec<usize> = flood
        .split(' ')
        .filter_map(|word| word.parse().ok())
        .collect();
    assert_eq!(counts.iter().sum::<usize>(), 300, "{flood}");
    assert!(counts[0] > 0, "{flood}");
    // A server that asks for input on every retry is given up on after a few rounds.
    let (_, endless, is_error) = &ends[1];
    assert!(is_error, "{endless}");
    assert!(
        endless.contains("asked for input more than 8 times"),
        "{endless}"
    );
}
