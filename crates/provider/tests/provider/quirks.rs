//! Streams no recording shows but a client must survive: synthesized.

use troupe_provider::{FinishReason, ModelEvent, ModelResponse, OpenAiDecoder, ProviderError};

use crate::common::{check_grammar, decode, decode_chunks};

fn openai(body: &str) -> (ModelResponse, Vec<ModelEvent>, Vec<ProviderError>) {
    let d = decode("openai-chat", body.as_bytes());
    check_grammar(&d.events);
    (ModelResponse::from_events(&d.events), d.events, d.errors)
}

#[test]
fn interleaved_parallel_tool_call_fragments() {
    let body = concat!(
        r#"data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"read","arguments":""}},{"index":1,"id":"b","function":{"name":"grep","arguments":"{\"q\""}}]}}]}"#,
        "\n\n",
        r#"data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"path\":"}}]}}]}"#,
        "\n\n",
        r#"data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":":\"x\"}"}}]}}]}"#,
        "\n\n",
        r#"data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"a.txt\"}"}}]}}]}"#,
        "\n\n",
        r#"data: {"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
        "\n\n",
        "data: [DONE]\n\n",
    );
    let (r, events, errors) = openai(body);
    assert!(errors.is_empty());
    assert_eq!(r.tool_calls.len(), 2);
    assert_eq!(
        (
            r.tool_calls[0].id.as_str(),
            r.tool_calls[0].arguments.as_str()
        ),
        ("a", r#"{"path":"a.txt"}"#)
    );
    assert_eq!(
        (
            r.tool_calls[1].id.as_str(),
            r.tool_calls[1].arguments.as_str()
        ),
        ("b", r#"{"q":"x"}"#)
    );
    // Deltas are attributed to the right call as they arrive.
    let deltas: Vec<(usize, &str)> = events
        .iter()
        .filter_map(|e| match e {
            ModelEvent::ToolCallDelta { index, arguments } => Some((*index, arguments.as_str())),
            _ => None,
        })
        .collect();
    assert_eq!(
        deltas,
        vec![
            (1, "{\"q\""),
            (0, "{\"path\":"),
            (1, ":\"x\"}"),
            (0, "\"a.txt\"}")
        ]
    );
    assert_eq!(r.finish, Some(FinishReason::ToolCalls));
}

#[test]
fn same_index_with_a_new_id_starts_a_new_call() {
    let body = concat!(
        r#"data: {"choices":[{"delta":{"tool_calls":[{"index":0,"id":"x1","function":{"name":"ls","arguments":"{}"}}]}}]}"#,
        "\n\n",
        r#"data: {"choices":[{"delta":{"tool_calls":[{"index":0,"id":"x2","function":{"name":"ls","arguments":"{\"l\":1}"}}]}}]}"#,
        "\n\n",
        r#"data: {"choices":[{"delta":{},"finish_reason":"tool_calls"}]}"#,
        "\n\n",
    );
    let (r, _, errors) = openai(body);
    assert!(errors.is_empty(), "{errors:?}");
    let ids: Vec<_> = r.tool_calls.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["x1", "x2"]);
    assert_eq!(r.tool_calls[1].arguments, r#"{"l":1}"#);
}

#[test]
fn multi_line_data_and_cr_only_line_endings() {
    // One JSON object spread over two data lines (joined with LF, which is
    // JSON whitespace), CR-only line endings, comments and an unknown field.
    let body = ": hi\rretry: 10\rdata: {\"choices\":[{\"index\":0,\r\ndata: \"delta\":{\"content\":\"h\u{e9}\"}}]}\r\rdata: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\r\rdata: [DONE]\r\r";
    let (r, _, errors) = openai(body);
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(r.text, "h\u{e9}");
    assert_eq!(r.finish, Some(FinishReason::Stop));
}

#[test]
fn tool_call_without_id_gets_a_stable_generated_id() {
    let body = concat!(
        r#"data: {"choices":[{"delta":{"tool_calls":[{"function":{"name":"ls","arguments":""}}]}}]}"#,
        "\n\n",
        r#"data: {"choices":[{"delta":{},"finish_reason":"tool_calls"}]}"#,
        "\n\n",
    );
    let run = || {
        decode_chunks(
            Box::new(OpenAiDecoder::with_id_prefix("p")),
            [body.as_bytes()],
        )
    };
    let a = ModelResponse::from_events(&run().events);
    assert_eq!(a.tool_calls[0].id, "call_p_0");
    assert_eq!(a.tool_calls[0].arguments, "{}");
    assert_eq!(run().events, run().events);
}

#[test]
fn cut_stream_and_malformed_chunk_are_stream_broken() {
    let cut = r#"data: {"choices":[{"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"read","arguments":"{\"pa"}}]}}]}

"#;
    let (_, events, errors) = openai(cut);
    assert!(
        matches!(errors.as_slice(), [ProviderError::StreamBroken { .. }]),
        "{errors:?}"
    );
    assert!(!events.iter().any(|e| matches!(
        e,
        ModelEvent::Finish { .. } | ModelEvent::ToolCallEnd { .. }
    )));

    let malformed = "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: {not json\n\n";
    let (_, _, errors) = openai(malformed);
    assert!(
        matches!(errors.first(), Some(ProviderError::StreamBroken { .. })),
        "{errors:?}"
    );
}

#[test]
fn anthropic_cache_tokens_count_in_input() {
    let body = concat!(
        "event: message_start\n",
        r#"data: {"type":"message_start","message":{"usage":{"input_tokens":12,"cache_creation_input_tokens":100,"cache_read_input_tokens":2000,"output_tokens":1}}}"#,
        "\n\n",
        "event: content_block_start\n",
        r#"data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
        "\n\n",
        "event: content_block_delta\n",
        r#"data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"ok"}}"#,
        "\n\n",
        "event: something_new\n",
        r#"data: {"type":"something_new","x":1}"#,
        "\n\n",
        r#"data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":7}}"#,
        "\n\n",
        r#"data: {"type":"message_stop"}"#,
        "\n\n",
    );
    let d = decode("anthropic", body.as_bytes());
    assert!(d.errors.is_empty(), "{:?}", d.errors);
    let r = ModelResponse::from_events(&d.events);
    let usage = r.usage.unwrap();
    assert_eq!(usage.input_tokens, 2112);
    assert_eq!(usage.cached_input_tokens, 2000);
    assert_eq!(usage.cache_creation_tokens, 100);
    assert_eq!(usage.output_tokens, 7);
    assert_eq!(r.text, "ok");
}

#[test]
fn errors_inside_a_200_stream_are_typed() {
    let overloaded = "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n";
    let d = decode("anthropic", overloaded.as_bytes());
    assert!(
        matches!(d.errors.first(), Some(ProviderError::Retryable { .. })),
        "{:?}",
        d.errors
    );

    // A prompt too long, in Anthropic's and in Gemini's words.
    let too_long = "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\",\"message\":\"prompt is too long: 210000 tokens > 200000 maximum\"}}\n\n";
    let gemini = "data: {\"error\":{\"code\":400,\"message\":\"The input token count (2000000) exceeds the maximum number of tokens allowed (1048576).\",\"status\":\"INVALID_ARGUMENT\"}}\n\n";
    for (provider, body) in [("anthropic", too_long), ("gemini", gemini)] {
        let d = decode(provider, body.as_bytes());
        assert!(
            d.errors
                .first()
                .is_some_and(ProviderError::is_context_overflow),
            "{provider}"
        );
    }
}

#[test]
fn gemini_cut_before_finish_reason_is_broken() {
    let body = "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"hal\"}]}}]}\r\n\r\n";
    let d = decode("gemini", body.as_bytes());
    assert!(matches!(
        d.errors.as_slice(),
        [ProviderError::StreamBroken { .. }]
    ));
}
