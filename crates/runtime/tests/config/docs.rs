//! docs/config.md stays true: its examples parse to what it says.

use std::path::{Path, PathBuf};

use troupe_runtime::config::Config;
use troupe_runtime::provider::{KeySource, ProviderKind};

fn doc() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/config.md");
    std::fs::read_to_string(path).expect("docs/config.md")
}

/// The ```toml blocks of the doc, in order.
fn toml_blocks(doc: &str) -> Vec<String> {
    doc.split("```toml\n")
        .skip(1)
        .map(|rest| rest.split("```").next().unwrap_or("").to_owned())
        .collect()
}

#[test]
fn the_documented_defaults_are_the_defaults() {
    let blocks = toml_blocks(&doc());
    let c = Config::parse(&blocks[0], &PathBuf::from("docs/config.md")).unwrap();
    let d = Config::default();
    assert_eq!(c.agent, d.agent);
    assert_eq!(c.context, d.context);
    assert_eq!(c.tools, d.tools);
    assert_eq!(c.permissions, d.permissions);
    assert_eq!(c.hooks, d.hooks);
    assert_eq!(c.session, d.session);
    assert_eq!(c.verifier, d.verifier);
    assert_eq!(c.supervision, d.supervision);
    assert_eq!(c.export, d.export);
    assert!(
        blocks[0].contains("\n[export] ")
            && blocks[0].contains("\natif = false ")
            && blocks[0].contains("\nopen_responses = false "),
        "the defaults block shows [export]"
    );
    assert_eq!(
        c.exec_timeout(),
        std::time::Duration::from_secs(10),
        "the doc says exec_command's default is 10 s"
    );
    assert_eq!(
        c.provider_config().unwrap().base_url,
        "https://api.openai.com/v1"
    );
}

#[test]
fn the_documented_local_provider_example_works() {
    let blocks = toml_blocks(&doc());
    let c = Config::parse(&blocks[1], &PathBuf::from("docs/config.md")).unwrap();
    let p = c.provider_config().unwrap();
    assert_eq!(p.kind, ProviderKind::OpenAi);
    assert_eq!(p.base_url, "http://127.0.0.1:11434/v1");
    assert_eq!(p.api_key, KeySource::None);
    // "A loopback base URL gets the `local` profile's time limits."
    assert_eq!(p.timeouts, troupe_runtime::provider::Timeouts::local());
}

#[test]
fn the_documented_responses_example_works() {
    let blocks = toml_blocks(&doc());
    let block = blocks
        .iter()
        .find(|b| b.contains("wire_api = \"responses\""))
        .expect("docs/config.md shows wire_api");
    let c = Config::parse(block, &PathBuf::from("docs/config.md")).unwrap();
    let p = c.provider_config().unwrap();
    assert_eq!(p.kind, ProviderKind::OpenAiResponses);
    assert_eq!(p.base_url, "https://api.openai.com/v1");
    assert_eq!(p.api_key, KeySource::Env("OPENAI_API_KEY".into()));
    assert_eq!(
        p.kind.endpoint(&p.base_url, "gpt-5"),
        "https://api.openai.com/v1/responses"
    );
}

#[test]
fn the_local_model_example_sets_the_window_and_the_sampling() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/local-models.md");
    let doc = std::fs::read_to_string(path).expect("docs/local-models.md");
    let blocks = toml_blocks(&doc);
    let c = Config::parse(&blocks[0], &PathBuf::from("docs/local-models.md")).unwrap();
    let p = c.provider_config().unwrap();
    assert_eq!(p.kind, ProviderKind::OpenAi);
    assert_eq!(p.base_url, "http://127.0.0.1:8080/v1");
    assert_eq!(p.api_key, KeySource::None, "a local provider gets no key");
    assert_eq!(p.sampling.temperature, Some(0.0));
    assert_eq!(p.sampling.seed, Some(42));
    assert_eq!(p.sampling.max_output_tokens, Some(512));
    // A loopback URL gets the local profile's limits.
    assert_eq!(
        p.timeouts.first_byte,
        std::time::Duration::from_secs(20 * 60)
    );
    assert_eq!(p.timeouts.idle, std::time::Duration::from_secs(20 * 60));
    let model = c.agent.model.clone().expect("a model");
    assert_eq!(
        c.model_catalog().get(&model).and_then(|m| m.context_window),
        Some(16384)
    );
}

#[test]
fn the_documented_export_example_turns_both_files_on() {
    let blocks = toml_blocks(&doc());
    let block = blocks
        .iter()
        .find(|b| b.starts_with("[export]"))
        .expect("docs/config.md has an [export] example");
    let c = Config::parse(block, &PathBuf::from("docs/config.md")).unwrap();
    assert!(c.export.atif && c.export.open_responses);
    assert!(!Config::default().export.atif && !Config::default().export.open_responses);
    let e = Config::parse(
        "[export]\natif = true\njsonl = true\n",
        &PathBuf::from("t.toml"),
    )
    .unwrap_err();
    assert!(e.to_string().contains("jsonl"), "{e}");
}
