//! Inputs the fuzz targets of `fuzz/` found (docs/security.md#fuzzing),
//! each the minimized crashing input, checked against the event grammar.

use crate::common::{check_grammar, decode};
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
