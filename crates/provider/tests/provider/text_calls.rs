//! `tool_call_fallback` over HTTP: the scripted server streams a call
//! written as text, in each of the four wire formats, and the client
//! hands over a real tool call after the text, which is left as it came.

use troupe_provider::{FinishReason, ProviderClient, ToolCallFallback};
use troupe_testkit::{Reply, Script, ScriptedServer};

use crate::scripted::{KINDS, call, config, request};

const FENCED: &str =
    "Reading it.\n```json\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"a.txt\"}}\n```";
const HERMES: &str =
    "<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"a.txt\"}}\n</tool_call>";

#[tokio::test]
async fn every_wire_format_gets_calls_written_as_text() {
    for kind in KINDS {
        for (style, text) in [
            (ToolCallFallback::FencedJson, FENCED),
            (ToolCallFallback::Hermes, HERMES),
        ] {
            let server = ScriptedServer::start(Script::replies(vec![Reply::text(text)]))
                .await
                .unwrap();
            let client =
                ProviderClient::new(config(kind, &server).with_tool_call_fallback(style)).unwrap();
            let o = call(&client, &request()).await;
            assert!(o.error.is_none(), "{kind:?} {style:?}: {:?}", o.error);
            let r = o.response();
            assert_eq!(r.text, text, "{kind:?} {style:?}");
            assert_eq!(r.tool_calls.len(), 1, "{kind:?} {style:?}");
            assert_eq!(r.tool_calls[0].name, "read_file");
            assert_eq!(r.tool_calls[0].arguments, r#"{"path":"a.txt"}"#);
            assert_eq!(
                r.finish,
                Some(FinishReason::ToolCalls),
                "{kind:?} {style:?}"
            );
        }
    }
}

#[tokio::test]
async fn without_the_fallback_the_text_is_only_text() {
    for kind in KINDS {
        let server = ScriptedServer::start(Script::replies(vec![Reply::text(FENCED)]))
            .await
            .unwrap();
        let client = ProviderClient::new(config(kind, &server)).unwrap();
        let r = call(&client, &request()).await.response();
        assert_eq!(r.text, FENCED);
        assert!(r.tool_calls.is_empty(), "{kind:?}");
        assert_eq!(r.finish, Some(FinishReason::Stop), "{kind:?}");
    }
}
