//! Every recorded stream in tests/fixtures/providers parses, and what is extracted
//! matches `crates/runtime/tests/fixtures_expected.json`, a snapshot of
//! `python3 expected.py --json .` run in tests/fixtures/providers (regenerate,
//! from the repository root, with `cd tests/fixtures/providers &&
//! python3 expected.py --json . > ../../../crates/runtime/tests/fixtures_expected.json`).

use serde_json::Value;
use troupe_protocol::Usage;
use troupe_provider::{FinishReason, ModelEvent, ModelResponse, ProviderError};

use crate::common::{check_grammar, decode, decode_chunks, decoder_for, expected, fixtures_dir};

fn u(v: &Value, key: &str) -> u64 {
    v.get(key).and_then(Value::as_u64).unwrap_or(0)
}

/// The usage troupe must report for a fixture, from the raw usage the
/// provider sent (as the snapshot shows it).
fn expected_usage(format: &str, exp: &Value) -> Option<Usage> {
    let raw = match exp.get("usage").filter(|v| !v.is_null()) {
        Some(raw) => raw,
        None => exp.get("x_groq_usage").filter(|v| !v.is_null())?,
    };
    Some(match format {
        "openai-chat" => {
            let prompt = u(raw, "prompt_tokens");
            let details = raw
                .get("prompt_tokens_details")
                .cloned()
                .unwrap_or(Value::Null);
            let cached = details
                .get("cached_tokens")
                .and_then(Value::as_u64)
                .unwrap_or_else(|| u(raw, "prompt_cache_hit_tokens"));
            let completion = u(raw, "completion_tokens");
            let total = raw.get("total_tokens").and_then(Value::as_u64);
            Usage {
                input_tokens: prompt,
                cached_input_tokens: cached,
                cache_creation_tokens: u(&details, "cache_write_tokens"),
                output_tokens: total.map_or(completion, |t| completion.max(t - prompt)),
            }
        }
        "anthropic" => {
            let read = u(raw, "cache_read_input_tokens");
            let created = u(raw, "cache_creation_input_tokens");
            Usage {
                input_tokens: u(raw, "input_tokens") + read + created,
                cached_input_tokens: read,
                cache_creation_tokens: created,
                output_tokens: u(raw, "output_tokens"),
            }
        }
        "gemini" => Usage {
            input_tokens: u(raw, "promptTokenCount"),
            cached_input_tokens: u(raw, "cachedContentTokenCount"),
            cache_creation_tokens: 0,
            output_tokens: u(raw, "candidatesTokenCount") + u(raw, "thoughtsTokenCount"),
        },
        // Cached tokens are part of input_tokens, reasoning tokens part of
        // output_tokens.
        "openai-responses" => Usage {
            input_tokens: u(raw, "input_tokens"),
            cached_input_tokens: raw
                .pointer("/input_tokens_details/cached_tokens")
                .and_then(Value::as_u64)
                .unwrap_or(0),
            cache_creation_tokens: 0,
            output_tokens: u(raw, "output_tokens"),
        },
        other => panic!("no usage rule for {other}"),
    })
}

fn check_fixture(name: &str, exp: &Value) -> bool {
    let format = exp["format"].as_str().expect("format");
    let bytes = std::fs::read(fixtures_dir().join(name)).expect("fixture readable");
    let decoded = decode(format, &bytes);
    check_grammar(&decoded.events);
    let got = ModelResponse::from_events(&decoded.events);

    assert_eq!(got.text, exp["text"].as_str().unwrap(), "{name}: text");
    assert_eq!(
        got.reasoning,
        exp["reasoning"].as_str().unwrap(),
        "{name}: reasoning"
    );

    let calls = exp["tool_calls"].as_array().unwrap();
    assert_eq!(
        got.tool_calls.len(),
        calls.len(),
        "{name}: number of tool calls"
    );
    for (ours, theirs) in got.tool_calls.iter().zip(calls) {
        let id = theirs["id"].as_str().unwrap();
        if id == "(none)" {
            assert!(
                ours.id.starts_with("call_g"),
                "{name}: generated id {}",
                ours.id
            );
        } else {
            assert_eq!(ours.id, id, "{name}: call id");
        }
        assert_eq!(
            ours.name,
            theirs["name"].as_str().unwrap(),
            "{name}: call name"
        );
        let want: Value = serde_json::from_str(theirs["arguments"].as_str().unwrap()).unwrap();
        let have: Value = serde_json::from_str(&ours.arguments)
            .unwrap_or_else(|e| panic!("{name}: arguments {:?} not JSON: {e}", ours.arguments));
        assert_eq!(have, want, "{name}: arguments");
    }
    let mut ids: Vec<&str> = got.tool_calls.iter().map(|c| c.id.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(
        ids.len(),
        got.tool_calls.len(),
        "{name}: call ids are unique"
    );

    let want_errors = !exp["errors"].as_array().unwrap().is_empty();
    assert_eq!(
        !decoded.errors.is_empty(),
        want_errors,
        "{name}: errors {:?}",
        decoded.errors
    );
    if want_errors {
        // The provider's own error comes first, typed, not as a parse failure.
        assert!(
            !matches!(decoded.errors[0], ProviderError::StreamBroken { .. }),
            "{name}: {:?}",
            decoded.errors[0]
        );
    }
    let want_finish = exp["finish"].as_str();
    if want_finish.is_some() || !want_errors {
        assert_eq!(
            got.finish_raw.as_deref(),
            want_finish,
            "{name}: finish reason"
        );
        let reason = got
            .finish
            .unwrap_or_else(|| panic!("{name}: no Finish event"));
        if !got.tool_calls.is_empty() && reason != FinishReason::Length {
            assert_eq!(reason, FinishReason::ToolCalls, "{name}: tool calls finish");
        }
    }
    assert_eq!(got.usage, expected_usage(format, exp), "{name}: usage");
    true
}

#[test]
fn every_recorded_stream_matches_the_expected_content() {
    let expected = expected();
    assert_eq!(
        expected.len(),
        51,
        "the snapshot lists the 51 recorded streams"
    );
    let mut checked = 0;
    for (name, exp) in &expected {
        if check_fixture(name, exp) {
            checked += 1;
        }
    }
    assert_eq!(checked, 51, "every recorded stream was checked");
}

/// Hand-checked values, so the normalization rules are pinned by numbers
/// and not only by a second implementation of the same formula.
#[test]
fn usage_normalization_pinned_values() {
    let usage_of = |name: &str| {
        let format = expected()[name]["format"].as_str().unwrap().to_owned();
        let bytes = std::fs::read(fixtures_dir().join(name)).unwrap();
        ModelResponse::from_events(&decode(&format, &bytes).events)
            .usage
            .unwrap()
    };
    let cached = usage_of("openai/chat-text-cached-usage.sse");
    assert_eq!(
        (
            cached.input_tokens,
            cached.cached_input_tokens,
            cached.output_tokens
        ),
        (1144, 1024, 3)
    );
    // xAI counts reasoning outside completion_tokens (26 + 227 reasoning).
    assert_eq!(
        usage_of("xai/grok-reasoning-tool-call-no-finish-field.sse").output_tokens,
        253
    );
    // Gemini: candidates + thoughts.
    let gem = usage_of("gemini/thinking-text.sse");
    assert_eq!((gem.input_tokens, gem.output_tokens), (34, 469 + 787));
    // Groq: only x_groq.usage on some streams; DeepSeek cache hits.
    assert_eq!(
        usage_of("deepseek/reasoner-tool-call.sse").cached_input_tokens,
        320
    );
    let anthropic = usage_of("anthropic/text-plain.sse");
    assert_eq!((anthropic.input_tokens, anthropic.output_tokens), (10, 4));
    let openrouter = usage_of("openrouter/anthropic-parallel-tools-comments.sse");
    assert_eq!(openrouter.input_tokens, 685);
}

fn split_fixture_consistently(name: &str) {
    let expected = expected();
    let format = expected[name]["format"].as_str().unwrap();
    let bytes = std::fs::read(fixtures_dir().join(name)).unwrap();
    let whole = decode_chunks(decoder_for(format).unwrap(), [&bytes[..]]);
    assert!(whole.errors.is_empty(), "{name}: {:?}", whole.errors);
    assert!(matches!(
        whole.events.last(),
        Some(ModelEvent::Finish { .. })
    ));
    let bytewise = decode_chunks(decoder_for(format).unwrap(), bytes.chunks(1));
    assert_eq!(bytewise.events, whole.events, "{name}: one byte at a time");
    for cut in 1..bytes.len() {
        let (a, b) = bytes.split_at(cut);
        let split = decode_chunks(decoder_for(format).unwrap(), [a, b]);
        assert_eq!(split.events, whole.events, "{name}: split at byte {cut}");
        assert!(split.errors.is_empty());
    }
    let mut rng = fastrand::Rng::with_seed(7);
    for _ in 0..20 {
        let mut chunks = Vec::new();
        let mut rest = &bytes[..];
        while !rest.is_empty() {
            let n = rng.usize(1..=rest.len().min(64));
            let (c, r) = rest.split_at(n);
            chunks.push(c);
            rest = r;
        }
        let random = decode_chunks(decoder_for(format).unwrap(), chunks);
        assert_eq!(random.events, whole.events, "{name}: random chunks");
    }
}

#[test]
fn split_at_every_byte_anthropic_emoji() {
    // A raw 4-byte emoji: some splits fall inside it.
    let name = "anthropic/text-after-tool-result-emoji.sse";
    let bytes = std::fs::read(fixtures_dir().join(name)).unwrap();
    assert!(
        String::from_utf8(bytes)
            .unwrap()
            .chars()
            .any(|c| c.len_utf8() == 4)
    );
    split_fixture_consistently(name);
}

#[test]
fn split_at_every_byte_gemini_crlf() {
    let name = "gemini/text-stream.sse";
    assert!(
        std::fs::read(fixtures_dir().join(name))
            .unwrap()
            .windows(2)
            .any(|w| w == b"\r\n")
    );
    split_fixture_consistently(name);
    split_fixture_consistently("gemini/vertex-function-calls-parallel.sse");
}

#[test]
fn split_at_every_byte_responses() {
    split_fixture_consistently("openai-responses/function-calls-parallel.sse");
    split_fixture_consistently("openai-responses/text.sse");
}

/// The reasoning item of a Responses stream becomes one complete block
/// (id, encrypted content, summary text) after its summary deltas, and
/// the call after it is call 0 although its output_index is 1.
#[test]
fn responses_reasoning_item_is_a_complete_block() {
    let name = "openai-responses/reasoning-summary-function-call.sse";
    let bytes = std::fs::read(fixtures_dir().join(name)).unwrap();
    let decoded = decode("openai-responses", &bytes);
    assert!(decoded.errors.is_empty(), "{:?}", decoded.errors);
    let got = ModelResponse::from_events(&decoded.events);
    assert_eq!(got.reasoning_blocks.len(), 1);
    let block = &got.reasoning_blocks[0];
    assert_eq!(
        block.id.as_deref(),
        Some("rs_017e85da2ae23b69016a3c1251dcec819daf72930a854fd4d1")
    );
    // The encrypted content of output_item.done (it differs from the one
    // of output_item.added).
    let sig = block.signature.as_deref().unwrap();
    assert!(sig.starts_with("gAAAAABqPBJWAIvE"), "{sig:.20}");
    assert_eq!(block.text, got.reasoning);
    assert!(block.text.starts_with("**Getting weather info**"));
    let block_at = decoded
        .events
        .iter()
        .position(|e| matches!(e, ModelEvent::ReasoningBlock { .. }))
        .unwrap();
    let last_delta = decoded
        .events
        .iter()
        .rposition(|e| matches!(e, ModelEvent::ReasoningDelta { .. }))
        .unwrap();
    assert!(last_delta < block_at, "the block follows its deltas");
    assert!(matches!(
        &decoded.events[block_at + 1],
        ModelEvent::ToolCallStart { index: 0, id, .. } if id == "call_zgUaIBRPTwxxOusyyKw5NVMH"
    ));
    let usage = got.usage.unwrap();
    // 64 reasoning tokens are part of the 121 output tokens.
    assert_eq!((usage.input_tokens, usage.output_tokens), (63, 121));
}

#[test]
fn split_at_every_byte_openai_and_compatible() {
    split_fixture_consistently("openai/chat-tool-call-single.sse");
    split_fixture_consistently("openrouter/anthropic-text-emoji-comments.sse");
    split_fixture_consistently("mistral/tool-call-incremental-empty-name.sse");
    split_fixture_consistently("anthropic/tool-use-parallel.sse");
}
