//! Helpers shared by the provider tests.

use std::path::PathBuf;

use troupe_provider::{
    AnthropicDecoder, GeminiDecoder, ModelEvent, OpenAiDecoder, ProviderError, ResponsesDecoder,
    StreamDecoder, StreamParser,
};

/// The recorded streams, kept in the repository at `tests/fixtures/providers`.
pub fn fixtures_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/providers")
}

/// The checked-in snapshot of `expected.py --json`
/// (`crates/runtime/tests/fixtures_expected.json`, where tests/e2e's
/// first_hour checks it too).
pub fn expected() -> serde_json::Map<String, serde_json::Value> {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../runtime/tests/fixtures_expected.json");
    let text = std::fs::read_to_string(&path).expect("fixtures_expected.json");
    serde_json::from_str(&text).expect("valid snapshot")
}

/// A decoder for a wire format name of the snapshot, with fixed generated ids.
pub fn decoder_for(format: &str) -> Option<Box<dyn StreamDecoder>> {
    match format {
        "openai-chat" => Some(Box::new(OpenAiDecoder::with_id_prefix("t"))),
        "anthropic" => Some(Box::new(AnthropicDecoder::new())),
        "gemini" => Some(Box::new(GeminiDecoder::with_id_prefix("t"))),
        "openai-responses" => Some(Box::new(ResponsesDecoder::new())),
        _ => None,
    }
}

/// What decoding a whole body produced: every event, and every error (the
/// parser keeps going after an error so the rest can be checked too).
#[derive(Debug, Default)]
pub struct Decoded {
    pub events: Vec<ModelEvent>,
    pub errors: Vec<ProviderError>,
}

/// Decodes `bytes` fed in the given chunk boundaries.
pub fn decode_chunks<'a>(
    decoder: Box<dyn StreamDecoder>,
    chunks: impl IntoIterator<Item = &'a [u8]>,
) -> Decoded {
    let mut parser = StreamParser::new(decoder);
    let mut d = Decoded::default();
    for chunk in chunks {
        if parser.is_done() {
            break;
        }
        if let Err(e) = parser.feed(chunk, &mut d.events) {
            d.errors.push(e);
        }
    }
    if !parser.is_done()
        && let Err(e) = parser.finish(&mut d.events)
    {
        d.errors.push(e);
    }
    d
}

/// Decodes `bytes` in one chunk.
pub fn decode(format: &str, bytes: &[u8]) -> Decoded {
    decode_chunks(decoder_for(format).expect("supported format"), [bytes])
}

/// Checks the event grammar: each call starts once, its deltas come after
/// its start and before its end, it ends once before `Finish`; at most one
/// `Usage` and one `Finish`, and `Finish` is last.
pub fn check_grammar(events: &[ModelEvent]) {
    use std::collections::HashMap;
    let mut state: HashMap<usize, u8> = HashMap::new(); // 1 started, 2 ended
    let mut finishes = 0;
    let mut usages = 0;
    for (i, ev) in events.iter().enumerate() {
        assert_eq!(finishes, 0, "event {i} after Finish: {ev:?}");
        match ev {
            ModelEvent::ToolCallStart { index, .. } => {
                assert!(
                    state.insert(*index, 1).is_none(),
                    "call {index} started twice"
                );
            }
            ModelEvent::ToolCallDelta { index, .. } => {
                assert_eq!(state.get(index), Some(&1), "delta outside call {index}");
            }
            ModelEvent::ToolCallEnd { index, .. } => {
                assert_eq!(state.insert(*index, 2), Some(1), "end of call {index}");
            }
            ModelEvent::Usage { .. } => usages += 1,
            ModelEvent::Finish { .. } => finishes += 1,
            _ => {}
        }
    }
    assert!(usages <= 1, "{usages} usage events");
    if finishes == 1 {
        assert!(state.values().all(|s| *s == 2), "call left open at Finish");
    }
}

/// Asserts the Responses input of a reasoning turn that called a tool: the
/// user message, the reasoning item sent back, the call and its output.
pub fn assert_reasoning_turn_kinds(input: &[serde_json::Value]) {
    let kinds: Vec<&str> = input.iter().map(|i| i["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "message",
            "reasoning",
            "function_call",
            "function_call_output"
        ]
    );
}
