//! The JSON writer's tests: its bytes against `serde_json`'s.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::json;

use super::{next_escape, to_vec};

/// Our bytes and `serde_json`'s for `value`, which must be equal.
#[track_caller]
fn check<T: Serialize + ?Sized + std::fmt::Debug>(value: &T) {
    let ours = to_vec(value).expect("ours writes it");
    let theirs = serde_json::to_vec(value).expect("serde_json writes it");
    assert_eq!(
        String::from_utf8_lossy(&ours),
        String::from_utf8_lossy(&theirs),
        "{value:?}"
    );
}

#[test]
fn every_ascii_byte_at_every_offset_of_a_word_is_written_as_serde_json_writes_it() {
    for byte in 0u8..0x80 {
        let c = char::from(byte);
        for before in 0..=40 {
            for after in [0, 1, 7, 8, 9, 15, 16, 17, 31, 32, 33] {
                let text = format!("{}{c}{}", "a".repeat(before), "é".repeat(after));
                check(&text);
                // Two in a row, and next to multi-byte characters.
                check(&format!(
                    "{}{c}{c}ü{}",
                    "€".repeat(before),
                    "b".repeat(after)
                ));
            }
        }
    }
}

#[test]
fn bytes_to_escape_between_utf8_characters_are_written_as_serde_json_writes_them() {
    // Lead and continuation bytes from 0x80 up, against the unsigned compare.
    let neighbours = ["\u{80}", "\u{ff}", "\u{7ff}", "é", "€", "\u{ffff}", "😀"];
    for neighbour in neighbours {
        for escaped in ['"', '\\', '\0', '\n', '\u{1f}', '\u{7f}'] {
            for before in 0..=40 {
                for after in [0, 1, 15, 16, 17, 31, 32, 33] {
                    check(&format!(
                        "{}{neighbour}{escaped}{neighbour}{}",
                        "a".repeat(before),
                        neighbour.repeat(after)
                    ));
                }
            }
        }
    }
}

/// The first byte of `bytes[from..]` that JSON requires escaped, one byte at a time.
fn first_to_escape(bytes: &[u8], from: usize) -> usize {
    bytes[from..]
        .iter()
        .position(|&byte| byte < 0x20 || byte == b'"' || byte == b'\\')
        .map_or(bytes.len(), |offset| from + offset)
}

#[test]
fn the_scan_finds_the_first_byte_to_escape_and_no_other() {
    for len in 0..70 {
        for at in 0..=len {
            for special in [b'"', b'\\', 0x00, 0x1f, b'\n'] {
                let mut bytes = vec![b'x'; len];
                if at < len {
                    bytes[at] = special;
                }
                assert_eq!(next_escape(&bytes, 0), at, "{bytes:?}");
            }
        }
    }
    // A match borrows from the bytes above it in the word; the scan after it must not
    // stop at them.
    for special in [0x00u8, 0x1f, b'"', b'\\'] {
        for next in 0x20u8..=0xff {
            if next == b'"' || next == b'\\' {
                continue;
            }
            let bytes = [
                b'x', special, next, next, b'y', next, 0x80, next, next, b'z',
            ];
            assert_eq!(next_escape(&bytes, 0), 1);
            assert_eq!(next_escape(&bytes, 2), bytes.len(), "{bytes:?}");
            let long: Vec<u8> = bytes.iter().copied().cycle().take(50).collect();
            assert_eq!(next_escape(&long, 0), 1);
            assert_eq!(next_escape(&long, 2), 11, "{long:?}");
            assert_eq!(next_escape(&long, 42), long.len(), "{long:?}");
        }
    }
    // Bytes just outside the escaped ranges: space, 0x7f, and UTF-8 bytes.
    let clean = " !#[]^_`{|}~\u{7f}é€😀 ".repeat(5);
    assert_eq!(next_escape(clean.as_bytes(), 0), clean.len());
}

#[test]
fn the_scan_from_every_start_stops_where_a_byte_by_byte_scan_stops() {
    // Every byte that needs no escape, 0x80 to 0xff included, turns up in every lane of
    // a word and in the bytes after the last word.
    let clean: Vec<u8> = (0x20u8..=0xff)
        .filter(|&byte| byte != b'"' && byte != b'\\')
        .collect();
    for len in 0..=50 {
        for at in 0..=len {
            for special in [0x00, 0x1f, b'\n', b'"', b'\\'] {
                let mut bytes: Vec<u8> = (0..len)
                    .map(|i| clean[(i * 7 + len * 13 + at) % clean.len()])
                    .collect();
                if at < len {
                    bytes[at] = special;
                }
                for from in 0..=len {
                    let expected = first_to_escape(&bytes, from);
                    assert_eq!(next_escape(&bytes, from), expected, "from {from} {bytes:?}");
                }
            }
        }
    }
}

#[test]
fn random_strings_are_written_as_serde_json_writes_them() {
    let alphabet: Vec<char> = "\"\\/\n\r\t\u{0}\u{1}\u{8}\u{c}\u{1f}\u{7f} aZ09~é€😀\u{2028}"
        .chars()
        .collect();
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for _ in 0..3000 {
        let len = (next() % 150) as usize;
        let text: String = (0..len)
            .map(|_| alphabet[(next() % alphabet.len() as u64) as usize])
            .collect();
        check(&text);
    }
}

#[derive(Serialize, Debug)]
struct Unit;

#[derive(Serialize, Debug)]
struct Pair(u8, &'static str);

#[derive(Serialize, Debug)]
struct Inner {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    missing: Option<u32>,
    present: Option<f32>,
}

#[derive(Serialize, Debug)]
#[serde(rename_all = "snake_case")]
enum Every {
    UnitVariant,
    Newtype(Inner),
    Tuple(i8, bool),
    Struct { a: char, b: Vec<u16> },
}

#[derive(Serialize, Debug)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Tagged {
    Text {
        text: String,
    },
    Image {
        url: &'static str,
        detail: Option<&'static str>,
    },
}

#[derive(Serialize, Debug)]
#[serde(untagged)]
enum Untagged {
    Number(i64),
    Words(Vec<&'static str>),
}

#[derive(Serialize, Debug)]
struct Flattened {
    model: &'static str,
    #[serde(flatten)]
    rest: serde_json::Map<String, serde_json::Value>,
}

/// `serialize_bytes` without a helper crate.
#[derive(Debug)]
struct Bytes(&'static [u8]);

impl Serialize for Bytes {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(self.0)
    }
}

#[test]
fn every_shape_serde_derives_is_written_as_serde_json_writes_it() {
    check(&json!({
        "null": null, "t": true, "f": false,
        "ints": [0, -1, i64::MIN, i64::MAX, u64::MAX],
        "floats": [0.1, -0.0, 1.0, 1e300, 2.5e-8, f64::MIN_POSITIVE],
        "nested": {"a": [[], {}, [{}]], "b\n\"": {"c": "d\u{1}"}},
    }));
    check(&Unit);
    check(&Pair(7, "x\"y"));
    check(&(1u128 << 100, -(1i128 << 100), 'q', '\n', ()));
    check(&[f64::NAN, f64::INFINITY, 1.5]);
    check(&[f32::NAN, 0.3f32]);
    check(&Bytes(b"\x00\xffabc"));
    check(&vec![
        Every::UnitVariant,
        Every::Newtype(Inner {
            kind: "k",
            missing: None,
            present: None,
        }),
        Every::Tuple(-3, true),
        Every::Struct {
            a: '"',
            b: vec![1, 2],
        },
    ]);
    check(&vec![
        Tagged::Text {
            text: "a\tb".to_string(),
        },
        Tagged::Image {
            url: "u",
            detail: Some("high"),
        },
    ]);
    check(&(Untagged::Number(-9), Untagged::Words(vec!["a", "\\"])));
    let serde_json::Value::Object(rest) = json!({"stream": true, "x": [1]}) else {
        unreachable!()
    };
    check(&Flattened { model: "m", rest });
    // Keys that are numbers or bools are quoted, as serde_json quotes them.
    check(&BTreeMap::from([(3u32, "three"), (10, "ten")]));
    check(&BTreeMap::from([(-2i64, 1)]));
    check(&BTreeMap::from([(true, 1), (false, 0)]));
    check(&BTreeMap::from([('k', 1)]));
    check(&BTreeMap::<String, u8>::new());
    check(&Vec::<u8>::new());
}

#[test]
fn a_key_that_is_not_a_string_number_or_bool_is_an_error_as_in_serde_json() {
    let keyed_by_lists = BTreeMap::from([(vec![1], 1)]);
    assert!(serde_json::to_vec(&keyed_by_lists).is_err());
    assert!(to_vec(&keyed_by_lists).is_err());
    let keyed_by_nothing = BTreeMap::from([(None::<u8>, 1)]);
    assert!(serde_json::to_vec(&keyed_by_nothing).is_err());
    assert!(to_vec(&keyed_by_nothing).is_err());
}

#[test]
fn the_built_in_tool_schemas_and_a_whole_request_are_written_as_serde_json_writes_them() {
    for profile in [crate::profiles::openai("m"), crate::profiles::gemini("m")] {
        check(&profile.tools());
    }
    let registry = crate::profiles::anthropic("m").tools();
    assert!(
        registry.len() >= 5,
        "the built-in tools: {}",
        registry.len()
    );
    check(&registry);
    let mut request = crate::llm::Request {
        model: "m".to_string(),
        tools: registry,
        ..Default::default()
    };
    request.messages = vec![
        crate::llm::Message::system("rules:\n\t\"quoted\" \\ back"),
        crate::llm::Message::user("fix\u{7}it — ✓"),
    ];
    check(&request);
}
