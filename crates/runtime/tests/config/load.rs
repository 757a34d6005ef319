//! Loading: defaults, a full file, and the env and flag layers above it.

use std::path::PathBuf;
use std::time::Duration;

use troupe_runtime::config::{Config, ConfigOverrides, ContextResetMode};
use troupe_runtime::provider::{KeySource, ProviderKind};
use troupe_runtime::store::FsyncPolicy;
use troupe_runtime::tools::ExecConfig;

use crate::common::{load, workspace};

const FULL: &str = r#"
[agent]
provider = "openai"
model = "gpt-4o"
max_turns = 20
max_parallel_tools = 4
system_prompt = "Be terse."

[agent.fallback]
provider = "anthropic"

[agent.harness]
max_budget_usd = 2.5
auto_compaction_enabled = false
auto_compaction_threshold_tokens = 100000
event_log_path = "out/events.jsonl"
context_reset_mode = "on_stall"
context_reset_stall_threshold = 5

[context]
max_context_tokens = 90000
auto_upgrade = true

[providers.openai]
base_url = "https://proxy.example/v1"
api_key_env = "MY_OPENAI_KEY"
headers = { "x-team" = "core" }
connect_timeout_ms = 2500
max_retries = 1

[models."my-local"]
context_window = 32768
input_per_mtok = 0.5
output_per_mtok = 1.5

[tools]
exec_timeout_ms = 5000
protected_paths = [".git", "config/prod/"]

[permissions]
allow = ["read_file", "exec_command(cargo *)"]
deny = ["exec_command(git push*)"]

[hooks.lifecycle]
session_start = ["./on-start.sh"]
pre_tool_use = ["./guard.sh", "./audit.sh"]
stop = ["./on-stop.sh"]
pre_compact = ["./pre-compact.sh"]
timeout_ms = 2500

[session]
fsync = "always"
retention_max_sessions = 7
retention_max_age_days = 2
"#;

#[test]
fn no_file_gives_the_defaults() {
    let dir = workspace(None);
    let c = load(dir.path(), &[]).unwrap();
    assert_eq!(c.source, None);
    assert_eq!(c.agent.provider, "openai");
    assert_eq!(c.model(), "gpt-4.1");
    assert!(!c.model_pinned);
    assert_eq!(c.agent.max_turns, 15);
    assert_eq!(c.agent.max_parallel_tools, 8);
    assert_eq!(c.agent.harness.max_budget_usd, None);
    assert!(c.agent.harness.auto_compaction_enabled);
    assert_eq!(c.agent.harness.context_reset_mode, ContextResetMode::Off);
    assert_eq!(c.agent.harness.context_reset_stall_threshold, 3);
    assert_eq!(c.context.max_context_tokens, 160_000);
    assert!(!c.context.auto_upgrade);
    assert_eq!(c.event_log_path(), None);
    assert_eq!(c.exec_timeout(), ExecConfig::default().default_timeout);
    assert_eq!(
        c.protected_paths().entries(),
        troupe_runtime::tools::DEFAULT_PROTECTED_PATHS
    );
    assert_eq!(c.exec_config(), ExecConfig::default());
    assert!(c.permission_allow().is_empty() && c.permission_deny().is_empty());
    assert_eq!(c.hooks().timeout, Duration::from_secs(10));
    assert_eq!(c.log_config().fsync, FsyncPolicy::Batch);
    assert_eq!(c.retention().max_sessions, 50);
    assert_eq!(c.retention().max_age, Duration::from_secs(30 * 86_400));
    let p = c.provider_config().unwrap();
    assert_eq!(p.kind, ProviderKind::OpenAi);
    assert_eq!(p.base_url, "https://api.openai.com/v1");
    assert_eq!(p.api_key, KeySource::Env("OPENAI_API_KEY".into()));
    assert!(c.fallback_provider_config().unwrap().is_none());
    // 90 % of min(window, 160k).
    assert_eq!(c.compaction_threshold_tokens(Some(200_000)), Some(144_000));
    assert_eq!(c.compaction_threshold_tokens(Some(100_000)), Some(90_000));
}

#[test]
fn a_full_file_sets_every_table() {
    let dir = workspace(Some(FULL));
    let c = load(dir.path(), &[]).unwrap();
    assert_eq!(c.source, Some(dir.path().join("troupe.toml")));
    assert_eq!(c.model(), "gpt-4o");
    assert!(!c.model_pinned, "a model from the file is not pinned");
    assert_eq!((c.agent.max_turns, c.agent.max_parallel_tools), (20, 4));
    assert_eq!(c.agent.system_prompt.as_deref(), Some("Be terse."));
    let h = &c.agent.harness;
    assert_eq!(h.max_budget_usd, Some(2.5));
    assert!(!h.auto_compaction_enabled);
    assert_eq!(h.context_reset_mode, ContextResetMode::OnStall);
    assert_eq!(h.context_reset_stall_threshold, 5);
    assert_eq!(
        c.compaction_threshold_tokens(Some(50_000)),
        None,
        "disabled"
    );
    assert_eq!(
        c.event_log_path(),
        Some(dir.path().join("out/events.jsonl"))
    );
    assert_eq!(c.context.max_context_tokens, 90_000);
    assert!(c.context.auto_upgrade);

    let p = c.provider_config().unwrap();
    assert_eq!(p.base_url, "https://proxy.example/v1");
    assert_eq!(p.api_key, KeySource::Env("MY_OPENAI_KEY".into()));
    assert_eq!(p.headers.len(), 1);
    assert_eq!(p.headers[0].0, "x-team");
    assert_eq!(p.headers[0].1.expose(), "core");
    assert_eq!(p.timeouts.connect, Duration::from_millis(2500));
    assert_eq!(p.retry.max_retries, 1);

    let f = c.fallback_provider_config().unwrap().unwrap();
    assert_eq!(f.kind, ProviderKind::Anthropic);
    assert_eq!(f.base_url, "https://api.anthropic.com");
    assert_eq!(c.fallback_model().as_deref(), Some("claude-sonnet-4-5"));

    let info = *c.model_catalog().get("my-local").unwrap();
    assert_eq!(info.context_window, Some(32_768));
    assert_eq!(info.pricing.unwrap().output_per_mtok, 1.5);
    assert_eq!(c.exec_timeout(), Duration::from_secs(5));
    assert_eq!(c.protected_paths().entries(), [".git", "config/prod"]);
    assert_eq!(c.exec_config().default_timeout, Duration::from_secs(5));
    let policy = c.permission_policy();
    assert_eq!(policy.deny, ["exec_command(git push*)"]);
    assert!(
        policy
            .check(
                "exec_command",
                &serde_json::json!({"command": "git push origin"})
            )
            .is_err()
    );
    assert!(
        policy
            .check("read_file", &serde_json::json!({"path": "a"}))
            .is_ok()
    );
    assert_eq!(c.permission_allow(), ["read_file", "exec_command(cargo *)"]);
    assert_eq!(c.permission_deny(), ["exec_command(git push*)"]);

    let hooks = c.hooks();
    assert_eq!(hooks.session_start, ["./on-start.sh"]);
    assert_eq!(hooks.pre_tool_use, ["./guard.sh", "./audit.sh"]);
    assert!(hooks.post_tool_use.is_empty());
    assert_eq!(hooks.stop, ["./on-stop.sh"]);
    assert_eq!(hooks.pre_compact, ["./pre-compact.sh"]);
    assert_eq!(hooks.timeout, Duration::from_millis(2500));

    assert_eq!(c.log_config().fsync, FsyncPolicy::Always);
    assert_eq!(c.retention().max_sessions, 7);
    assert_eq!(c.retention().max_age, Duration::from_secs(2 * 86_400));
}

#[test]
fn the_environment_overrides_the_file() {
    let dir = workspace(Some(FULL));
    let c = load(
        dir.path(),
        &[
            ("AGENT_MAX_TURNS_PER_REQUEST", "7"),
            ("TROUPE_MAX_BUDGET_USD", "0.75"),
            ("TROUPE_BASE_URL", "http://localhost:9999/v1"),
            ("CONTEXT_AUTO_UPGRADE", "off"),
        ],
    )
    .unwrap();
    assert_eq!(c.agent.max_turns, 7);
    assert_eq!(c.agent.harness.max_budget_usd, Some(0.75));
    assert!(!c.context.auto_upgrade);
    let p = c.provider_config().unwrap();
    assert_eq!(p.base_url, "http://localhost:9999/v1");
    assert_eq!(
        p.api_key,
        KeySource::Env("MY_OPENAI_KEY".into()),
        "file kept"
    );
    assert_eq!(
        c.fallback_provider_config().unwrap().unwrap().base_url,
        "https://api.anthropic.com",
        "TROUPE_BASE_URL is for the agent's provider only"
    );
    assert!(!c.model_pinned);

    for on in ["1", "true", "ON", "yes"] {
        let c = load(dir.path(), &[("CONTEXT_AUTO_UPGRADE", on)]).unwrap();
        assert!(c.context.auto_upgrade, "{on}");
    }
}

#[test]
fn an_empty_variable_counts_as_unset() {
    let dir = workspace(Some("[agent]\nmax_turns = 20\n"));
    let c = load(
        dir.path(),
        &[("AGENT_MAX_TURNS_PER_REQUEST", " "), ("TROUPE_MODEL", "")],
    )
    .unwrap();
    assert_eq!(c.agent.max_turns, 20);
    assert!(!c.model_pinned);
}

#[test]
fn flags_override_the_environment() {
    let dir = workspace(Some(FULL));
    let mut c = load(
        dir.path(),
        &[
            ("AGENT_MAX_TURNS_PER_REQUEST", "7"),
            ("TROUPE_PROVIDER", "anthropic"),
            ("TROUPE_BASE_URL", "http://env.example"),
        ],
    )
    .unwrap();
    c.apply(&ConfigOverrides {
        provider: Some("gemini".into()),
        base_url: Some("http://flag.example".into()),
        max_turns: Some(3),
        max_budget_usd: Some(9.0),
        events_path: Some(PathBuf::from("flag.jsonl")),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(c.agent.max_turns, 3);
    assert_eq!(c.agent.harness.max_budget_usd, Some(9.0));
    assert_eq!(c.event_log_path(), Some(dir.path().join("flag.jsonl")));
    let p = c.provider_config().unwrap();
    assert_eq!(p.kind, ProviderKind::Gemini);
    assert_eq!(p.base_url, "http://flag.example");
    assert_eq!(
        c.model(),
        "gemini-2.5-pro",
        "the file's gpt-4o was for openai"
    );
    assert!(!c.model_pinned);
}

#[test]
fn a_model_from_the_environment_or_a_flag_is_pinned() {
    let dir = workspace(Some(FULL));
    let c = load(dir.path(), &[("TROUPE_MODEL", "gpt-5")]).unwrap();
    assert!(c.model_pinned);
    assert_eq!(c.model(), "gpt-5");

    let mut c = load(dir.path(), &[]).unwrap();
    assert!(!c.model_pinned);
    c.apply(&ConfigOverrides {
        model: Some("o3".into()),
        ..Default::default()
    })
    .unwrap();
    assert!(c.model_pinned);
    assert_eq!(c.model(), "o3");

    // A pinned model survives a later provider change.
    let mut c = load(dir.path(), &[("TROUPE_MODEL", "my-model")]).unwrap();
    c.apply(&ConfigOverrides {
        provider: Some("anthropic".into()),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(c.model(), "my-model");
    assert!(c.model_pinned);
}

#[test]
fn same_provider_override_keeps_the_files_model() {
    let dir = workspace(Some("[agent]\nprovider = \"openai\"\nmodel = \"gpt-4o\"\n"));
    let c = load(dir.path(), &[("TROUPE_PROVIDER", "openai")]).unwrap();
    assert_eq!(c.model(), "gpt-4o");
}

#[test]
fn a_named_provider_resolves_through_its_kind_and_sends_no_hosted_key() {
    let text = r#"
[agent]
provider = "local"
[providers.local]
kind = "openai"
base_url = "http://127.0.0.1:11434/v1"
"#;
    let dir = workspace(Some(text));
    let c = load(dir.path(), &[]).unwrap();
    let p = c.provider_config().unwrap();
    assert_eq!(p.kind, ProviderKind::OpenAi);
    assert_eq!(p.base_url, "http://127.0.0.1:11434/v1");
    assert_eq!(p.api_key, KeySource::None);
    assert_eq!(c.model(), "gpt-4.1");
}

#[test]
fn an_empty_key_env_sends_no_key() {
    let dir = workspace(Some("[providers.openai]\napi_key_env = \"\"\n"));
    let c = load(dir.path(), &[]).unwrap();
    assert_eq!(c.provider_config().unwrap().api_key, KeySource::None);
}

#[test]
fn an_explicit_compaction_threshold_is_capped_by_the_window() {
    let dir = workspace(Some(
        "[agent.harness]\nauto_compaction_threshold_tokens = 150000\n",
    ));
    let c = load(dir.path(), &[]).unwrap();
    assert_eq!(c.compaction_threshold_tokens(Some(400_000)), Some(150_000));
    assert_eq!(c.compaction_threshold_tokens(Some(128_000)), Some(128_000));
    assert_eq!(c.compaction_threshold_tokens(None), Some(150_000));
}

#[test]
fn config_parse_matches_load() {
    let dir = workspace(Some(FULL));
    let mut parsed = Config::parse(FULL, &dir.path().join("troupe.toml")).unwrap();
    parsed.workspace = dir.path().to_path_buf();
    parsed.source = Some(dir.path().join("troupe.toml"));
    let loaded = load(dir.path(), &[]).unwrap();
    assert_eq!(
        loaded.workspace_text.as_ref().map(|t| t.0.as_str()),
        Some(FULL)
    );
    parsed.workspace_text = loaded.workspace_text.clone();
    assert_eq!(parsed, loaded);
}

#[test]
fn sandbox_mode_and_network_access_come_from_the_file_and_the_flags() {
    use troupe_runtime::tools::SandboxMode;
    let dir = workspace(None);
    let c = load(dir.path(), &[]).unwrap();
    assert_eq!(c.sandbox_mode(), SandboxMode::WorkspaceWrite);
    assert!(!c.exec_config().network_access && !c.allow_unsandboxed);
    let dir = workspace(Some(
        "sandbox_mode = \"read-only\"\nallow_unsandboxed = true\n\n[sandbox_workspace_write]\nnetwork_access = true\n",
    ));
    let mut c = load(dir.path(), &[]).unwrap();
    assert_eq!(c.sandbox_mode(), SandboxMode::ReadOnly);
    assert!(c.exec_config().network_access && c.allow_unsandboxed);
    c.apply(&ConfigOverrides {
        sandbox_mode: Some(SandboxMode::DangerFullAccess),
        network_access: Some(false),
        ..ConfigOverrides::default()
    })
    .unwrap();
    assert_eq!(c.sandbox_mode(), SandboxMode::DangerFullAccess);
    assert!(!c.exec_config().network_access);
}

#[test]
fn wire_api_and_the_openai_responses_kind_pick_the_responses_api() {
    let kinds = |text: &str| {
        let dir = workspace(Some(text));
        let c = load(dir.path(), &[]).unwrap();
        (c.provider_config().unwrap(), c.model())
    };
    // A custom table: its own URL, no key, Responses over wire_api.
    let (p, _) = kinds(
        "[agent]\nprovider = \"vllm\"\n[providers.vllm]\nkind = \"openai\"\nwire_api = \"responses\"\nbase_url = \"http://127.0.0.1:8000/v1\"\n",
    );
    assert_eq!(p.kind, ProviderKind::OpenAiResponses);
    assert_eq!(p.api_key, KeySource::None);
    assert_eq!(p.base_url, "http://127.0.0.1:8000/v1");
    // The kind by name, and its default model.
    let (p, model) = kinds("[agent]\nprovider = \"openai-responses\"\n");
    assert_eq!(p.kind, ProviderKind::OpenAiResponses);
    assert_eq!(p.api_key, KeySource::Env("OPENAI_API_KEY".into()));
    assert_eq!(model, "gpt-5");
    // wire_api = "chat" is chat completions.
    let (p, _) = kinds("[providers.openai]\nwire_api = \"chat\"\n");
    assert_eq!(p.kind, ProviderKind::OpenAi);
    // The environment's provider works too.
    let dir = workspace(None);
    let c = load(dir.path(), &[("TROUPE_PROVIDER", "openai-responses")]).unwrap();
    assert_eq!(
        c.provider_config().unwrap().kind,
        ProviderKind::OpenAiResponses
    );
}

/// The user's troupe.toml (`TROUPE_CONFIG_DIR`) is read first; the
/// workspace's merges over it key by key; each file's errors name it.
#[test]
fn the_users_file_lies_under_the_workspaces() {
    let ws = tempfile::tempdir().unwrap();
    let user = tempfile::tempdir().unwrap();
    std::fs::write(
        user.path().join("troupe.toml"),
        "[agent]\nmax_turns = 9\nsystem_prompt = \"from the user\"\n\n[providers.local]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\n",
    )
    .unwrap();
    std::fs::write(
        ws.path().join("troupe.toml"),
        "[agent]\nmax_turns = 4\nprovider = \"local\"\n",
    )
    .unwrap();
    let dir = user.path().to_str().unwrap().to_string();
    let env = move |var: &str| (var == "TROUPE_CONFIG_DIR").then(|| dir.clone());
    let config = Config::load_with_env(ws.path(), &env).unwrap();
    assert_eq!(config.agent.max_turns, 4, "the workspace's value wins");
    assert_eq!(config.agent.system_prompt.as_deref(), Some("from the user"));
    assert_eq!(
        config.provider_config().unwrap().base_url,
        "http://127.0.0.1:9/v1",
        "a provider the user's file defines, named by the workspace's"
    );
    assert_eq!(config.source, Some(ws.path().join("troupe.toml")));

    // Without the workspace's file, the user's alone.
    std::fs::remove_file(ws.path().join("troupe.toml")).unwrap();
    let config = Config::load_with_env(ws.path(), &env).unwrap();
    assert_eq!(config.agent.max_turns, 9);

    // A bad key in the user's file names the user's file and line.
    std::fs::write(user.path().join("troupe.toml"), "[agent]\nmax_turn = 9\n").unwrap();
    let e = Config::load_with_env(ws.path(), &env)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(&format!("{}:2", user.path().join("troupe.toml").display())),
        "{e}"
    );
    // No directory at all: the workspace's file alone.
    let none = |_: &str| None;
    std::fs::write(ws.path().join("troupe.toml"), "[agent]\nmax_turns = 4\n").unwrap();
    assert_eq!(
        Config::load_with_env(ws.path(), &none)
            .unwrap()
            .agent
            .max_turns,
        4
    );
}
