//! Sampling defaults of a provider (`[providers.<name>]` `temperature`,
//! `seed`, `max_output_tokens`) on the wire, against the scripted model
//! server.

use serde_json::json;
use troupe_provider::{ProviderClient, ProviderKind, Sampling};
use troupe_testkit::{Reply, Script, ScriptedServer};

use crate::scripted::{KINDS, Outcome, call, config, request};

fn ok(kind: ProviderKind, o: Outcome) {
    assert!(o.error.is_none(), "{kind:?}: {:?}", o.error);
}

/// `[providers.<name>]` `temperature`, `seed` and `max_output_tokens`
/// reach every wire format's own fields (no seed where the format has
/// none); a request's own value wins; unset, nothing is sent.
#[tokio::test]
async fn sampling_defaults_reach_the_wire() {
    let sampling = Sampling {
        temperature: Some(0.0),
        seed: Some(42),
        max_output_tokens: Some(77),
    };
    for kind in KINDS {
        let server = ScriptedServer::start(Script::replies(vec![
            Reply::text("a"),
            Reply::text("b"),
            Reply::text("c"),
        ]))
        .await
        .unwrap();
        let client = ProviderClient::new(config(kind, &server).with_sampling(sampling)).unwrap();
        ok(kind, call(&client, &request()).await);
        let mut own = request();
        own.max_output_tokens = Some(5);
        own.temperature = Some(0.5);
        ok(kind, call(&client, &own).await);
        let bare = ProviderClient::new(config(kind, &server)).unwrap();
        ok(kind, call(&bare, &request()).await);
        let reqs = server.requests();
        let (filled, kept, unset) = (&reqs[0].body, &reqs[1].body, &reqs[2].body);
        let (temp, max, seed): (&[&str], &[&str], Option<&[&str]>) = match kind {
            ProviderKind::OpenAi => (&["temperature"], &["max_tokens"], Some(&["seed"])),
            ProviderKind::Anthropic => (&["temperature"], &["max_tokens"], None),
            ProviderKind::Gemini => (
                &["generationConfig", "temperature"],
                &["generationConfig", "maxOutputTokens"],
                Some(&["generationConfig", "seed"]),
            ),
            ProviderKind::OpenAiResponses => (&["temperature"], &["max_output_tokens"], None),
        };
        let at = |body: &serde_json::Value, path: &[&str]| {
            path.iter()
                .fold(body.clone(), |v, k| v.get(*k).cloned().unwrap_or_default())
        };
        assert_eq!(at(filled, temp), json!(0.0), "{kind:?}: {filled}");
        assert_eq!(at(filled, max), json!(77), "{kind:?}: {filled}");
        assert_eq!(at(kept, temp), json!(0.5), "{kind:?}: {kept}");
        assert_eq!(at(kept, max), json!(5), "{kind:?}: {kept}");
        assert!(at(unset, temp).is_null(), "{kind:?}: {unset}");
        match seed {
            Some(path) => {
                assert_eq!(at(filled, path), json!(42), "{kind:?}: {filled}");
                assert!(at(unset, path).is_null(), "{kind:?}: {unset}");
            }
            None => assert!(
                !filled.to_string().contains("\"seed\""),
                "{kind:?} has no seed field: {filled}"
            ),
        }
        if kind != ProviderKind::Anthropic {
            // Anthropic always sends max_tokens (8192 by default).
            assert!(at(unset, max).is_null(), "{kind:?}: {unset}");
        }
    }
}
