//! Structured output (`Session::run_structured`) on all four wire formats, against the
//! loopback server speaking each: the `final_answer` tool is offered beside the profile's
//! tools with the schema as its parameters; a valid call is the outcome's value; an invalid
//! one gets the validator's message back and a corrected one passes; a model that never
//! complies ends with a typed error, the history still valid.

use std::sync::Arc;

use agentloop::ErrorKind;
use agentloop::llm::Client;
use agentloop::profiles::ProviderProfile;
use agentloop::session::{EventKind, Session, SessionConfig, SessionEvent, StopReason};
use serde_json::{Value, json};

use support::parity_kit::Kit;
use support::session::{DirEnv, collect_to_end, echo_tool};
use support::turns::{self, Call, function};
use support::{Reply, Server, providers};

/// The four wire formats.
#[derive(Clone, Copy)]
enum Format {
    Anthropic,
    Responses,
    Chat,
    Gemini,
}

impl Format {
    fn client(self, server: &Server) -> (Client, &'static str) {
        match self {
            Format::Anthropic => (support::anthropic_client(server), "anthropic"),
            Format::Responses => (support::client_for(providers::openai(server)), "openai"),
            Format::Chat => (
                support::client_for(providers::openai_chat(server)),
                "openai-chat",
            ),
            Format::Gemini => (support::client_for(providers::gemini(server)), "gemini"),
        }
    }

    fn turn(self, text: &str, calls: &[Call]) -> Reply {
        match self {
            Format::Anthropic => Kit::Anthropic.turn(text, calls),
            Format::Responses => Kit::OpenAi.turn(text, calls),
            Format::Chat => turns::chat_turn(text, calls),
            Format::Gemini => Kit::Gemini.turn(text, calls),
        }
    }

    /// The offered tools of a request body: (name, parameters).
    fn tools(self, body: &Value) -> Vec<(String, Value)> {
        let list = match self {
            Format::Gemini => &body["tools"][0]["functionDeclarations"],
            _ => &body["tools"],
        };
        list.as_array()
            .into_iter()
            .flatten()
            .map(|tool| {
                let (name, parameters) = match self {
                    Format::Anthropic => (&tool["name"], &tool["input_schema"]),
                    Format::Responses => (&tool["name"], &tool["parameters"]),
                    Format::Chat => (&tool["function"]["name"], &tool["function"]["parameters"]),
                    Format::Gemini => (&tool["name"], &tool["parameters"]),
                };
                (name.as_str().unwrap().to_string(), parameters.clone())
            })
            .collect()
    }

    /// The tool outputs a request body sends back, in order.
    fn tool_outputs(self, body: &Value) -> Vec<String> {
        match self {
            Format::Anthropic => Kit::Anthropic.tool_outputs(body),
            Format::Responses => Kit::OpenAi.tool_outputs(body),
            Format::Gemini => Kit::Gemini.tool_outputs(body),
            Format::Chat => {
                return body["messages"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|m| m["role"] == "tool")
                    .map(|m| m["content"].as_str().unwrap_or_default().to_string())
                    .collect();
            }
        }
        .into_iter()
        .map(|seen| seen.text)
        .collect()
    }
}

fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "count": {"type": "integer", "minimum": 0},
            "files": {"type": "array", "items": {"type": "string"}}
        },
        "required": ["count", "files"],
        "additionalProperties": false
    })
}

struct Structured {
    session: Session,
    events: agentloop::session::Events,
    server: Server,
    _dir: tempfile::TempDir,
}

fn start(format: Format, replies: Vec<Reply>, config: SessionConfig) -> Structured {
    let server = Server::start(replies);
    let (client, id) = format.client(&server);
    let dir = tempfile::tempdir().unwrap();
    let env = Arc::new(DirEnv::new(dir.path()));
    let profile = ProviderProfile::new(id, "loopback-model").with_tool(echo_tool());
    let session = Session::new(profile, env, client, config).unwrap();
    let events = session.events();
    Structured {
        session,
        events,
        server,
        _dir: dir,
    }
}

impl Structured {
    fn bodies(&self) -> Vec<Value> {
        self.server
            .requests()
            .iter()
            .map(|r| r.json().clone())
            .collect()
    }

    fn finish(mut self) -> (Vec<SessionEvent>, Vec<Value>) {
        self.session.close();
        let events = collect_to_end(&mut self.events);
        self.session.history().check_tool_results().unwrap();
        let bodies = self.bodies();
        (events, bodies)
    }
}

fn processing_end(events: &[SessionEvent]) -> (StopReason, Option<Value>) {
    events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::ProcessingEnd {
                stop_reason,
                output,
                ..
            } => Some((*stop_reason, output.clone())),
            _ => None,
        })
        .unwrap()
}

fn a_valid_final_answer_is_the_value(format: Format) {
    let answer = json!({"count": 2, "files": ["a.rs", "b.rs"]});
    let run = start(
        format,
        vec![
            format.turn("", &[function("c1", "echo", json!({"text": "looking"}))]),
            format.turn("", &[function("c2", "final_answer", answer.clone())]),
        ],
        SessionConfig::default(),
    );
    let outcome = run
        .session
        .run_structured("count the files", schema())
        .unwrap();
    assert_eq!(outcome.stop_reason, StopReason::Completed);
    assert_eq!(outcome.output, Some(answer.clone()));
    let (events, bodies) = run.finish();
    assert_eq!(
        processing_end(&events),
        (StopReason::Completed, Some(answer))
    );
    assert_eq!(bodies.len(), 2, "the valid answer ends the input");
    // The tool is offered beside the profile's, with the schema's fields.
    let tools = format.tools(&bodies[0]);
    let names: Vec<&str> = tools.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["echo", "final_answer"]);
    let parameters = &tools[1].1;
    assert!(
        parameters["properties"]["count"].is_object(),
        "{parameters}"
    );
    assert!(
        parameters["properties"]["files"].is_object(),
        "{parameters}"
    );
}

fn an_invalid_answer_gets_the_validators_message_and_a_corrected_one_passes(format: Format) {
    let wrong = json!({"count": "two", "files": ["a.rs"]});
    let right = json!({"count": 1, "files": ["a.rs"]});
    let run = start(
        format,
        vec![
            format.turn("", &[function("c1", "final_answer", wrong)]),
            format.turn("", &[function("c2", "final_answer", right.clone())]),
        ],
        SessionConfig::default(),
    );
    let outcome = run
        .session
        .run_structured("count the files", schema())
        .unwrap();
    assert_eq!(outcome.output, Some(right));
    let (_, bodies) = run.finish();
    assert_eq!(bodies.len(), 2);
    let outputs = format.tool_outputs(&bodies[1]);
    assert_eq!(outputs.len(), 1, "{outputs:?}");
    assert!(
        outputs[0].starts_with(
            "Invalid arguments for tool final_answer: \"count\" must be an integer ≥ 0, got \"two\""
        ),
        "{}",
        outputs[0]
    );
}

fn a_model_that_never_complies_ends_with_a_typed_error(format: Format) {
    let run = start(
        format,
        vec![
            format.turn("There are two files.", &[]),
            format.turn("Two.", &[]),
        ],
        SessionConfig::default().with_structured_output_retries(1),
    );
    let err = run
        .session
        .run_structured("count the files", schema())
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::StructuredOutput);
    assert!(
        err.to_string()
            .contains("the model answered with text instead of calling final_answer"),
        "{err}"
    );
    let (events, bodies) = run.finish();
    assert_eq!(
        processing_end(&events),
        (StopReason::StructuredOutputFailed, None)
    );
    // One reminder, then it gave up.
    assert_eq!(bodies.len(), 2);
    let reminder = serde_json::to_string(&bodies[1]).unwrap();
    assert!(
        reminder.contains("Your answer was not delivered") && reminder.contains("final_answer"),
        "{reminder}"
    );
}

macro_rules! formats {
    ($($test:ident),* $(,)?) => {
        mod anthropic {
            $(#[test] fn $test() { super::$test(super::Format::Anthropic) })*
        }
        mod responses {
            $(#[test] fn $test() { super::$test(super::Format::Responses) })*
        }
        mod chat {
            $(#[test] fn $test() { super::$test(super::Format::Chat) })*
        }
        mod gemini {
            $(#[test] fn $test() { super::$test(super::Format::Gemini) })*
        }
    };
}

formats!(
    a_valid_final_answer_is_the_value,
    an_invalid_answer_gets_the_validators_message_and_a_corrected_one_passes,
    a_model_that_never_complies_ends_with_a_typed_error,
);

#[test]
fn a_schema_whose_root_is_not_an_object_is_wrapped_and_a_text_answer_that_fits_is_taken() {
    let format = Format::Anthropic;
    let run = start(
        format,
        vec![format.turn("```json\n[\"a.rs\", \"b.rs\"]\n```", &[])],
        SessionConfig::default(),
    );
    let schema = json!({"type": "array", "items": {"type": "string"}});
    let outcome = run.session.run_structured("list them", schema).unwrap();
    assert_eq!(outcome.output, Some(json!(["a.rs", "b.rs"])));
    let (_, bodies) = run.finish();
    let tools = format.tools(&bodies[0]);
    assert_eq!(tools[1].1["required"], json!(["value"]));
    assert_eq!(tools[1].1["properties"]["value"]["type"], "array");
}

#[test]
fn an_unusable_schema_is_a_configuration_error_before_anything_is_sent() {
    let run = start(Format::Anthropic, vec![], SessionConfig::default());
    let err = run
        .session
        .run_structured("x", json!("not a schema"))
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Configuration);
    assert!(run.bodies().is_empty());
}
