//! Inputs the fuzz targets of `fuzz/` found (docs/security.md#fuzzing),
//! each the minimized crashing input (or its essence), checked against the
//! event grammar.

use crate::common::{check_grammar, decode, decode_chunks, decoder_for};
use troupe_provider::ModelResponse;

/// `sse_responses`: a `function_call` item announced only by its
/// `output_item.done` (added and ended at once), then an arguments delta
/// for the same output index. The decoder emitted a `ToolCallDelta` after
/// the call's `ToolCallEnd`; a fragment after the end is now ignored.
#[test]
fn responses_arguments_after_the_call_ended_are_ignored() {
    let body = concat!(
        "data:{\"type\":\"response.output_item.done\",\"output_index\":0,\"item\":{\"type\":\"function_call\"}}\n",
        "\n",
        "data:{\"type\":\"response.function_call_arguments.delta\",\"output_index\":0,\"delta\":\"}\"}",
    );
    let d = decode("openai-responses", body.as_bytes());
    check_grammar(&d.events);
    let response = ModelResponse::from_events(&d.events);
    assert_eq!(response.tool_calls.len(), 1);
    assert_eq!(response.tool_calls[0].arguments, "{}");
    // The cut stream (no response.completed) is still reported.
    assert_eq!(d.errors.len(), 1, "{:?}", d.errors);
}

/// `sse_gemini`: a chunk ending in the CR of a CRLF, then an empty chunk,
/// then the LF. The SSE decoder forgot the CR at the empty chunk and took
/// the LF for a blank line, dispatching the event half read (here the
/// first line of a two-line `data:` JSON: "invalid JSON chunk"). The
/// fuzzer's input cut a Gemini stream into 3086 chunks, some empty; this
/// is its essence. An empty chunk now changes nothing.
#[test]
fn an_empty_chunk_between_cr_and_lf_does_not_end_the_event() {
    let chunks: [&[u8]; 4] = [
        b"data: {\"candidates\":\r",
        b"",
        b"\ndata: [{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"hi\"}]},\"finishReason\":\"STOP\"}]}\r\n",
        b"\r\n",
    ];
    let d = decode_chunks(decoder_for("gemini").unwrap(), chunks);
    assert!(d.errors.is_empty(), "{:?}", d.errors);
    check_grammar(&d.events);
    let response = ModelResponse::from_events(&d.events);
    assert_eq!(response.text, "hi");
}
