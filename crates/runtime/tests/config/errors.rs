//! Bad files, bad variables and bad flags: each error names the place
//! and the fix, and never a secret.

use troupe_runtime::config::{ConfigError, ConfigOverrides};

use crate::common::{load, load_err, workspace};

/// An unknown key's place as the error names it: its line, the key, its
/// table and the keys that table accepts.
fn unknown_key(e: &ConfigError) -> (Option<usize>, &str, &str, &[String]) {
    let ConfigError::UnknownKey {
        line,
        key,
        table,
        valid,
        ..
    } = e
    else {
        panic!("{e:?}")
    };
    (*line, key, table, valid)
}

#[test]
fn an_unknown_key_names_itself_its_line_its_table_and_the_valid_keys() {
    let e = load_err("# comment\n[agent]\nprovider = \"openai\"\nmax_turn = 3\n");
    let (line, key, table, valid) = unknown_key(&e);
    assert_eq!(line, Some(4));
    assert_eq!(key, "max_turn");
    assert_eq!(table, "agent");
    for k in ["provider", "model", "max_turns", "fallback", "harness"] {
        assert!(valid.iter().any(|v| v == k), "{k} missing from {valid:?}");
    }
    let text = e.to_string();
    assert!(
        text.contains("troupe.toml:4: unknown key `max_turn` in [agent]; valid keys: provider, model, max_turns"),
        "{text}"
    );
    assert!(
        text.ends_with("(fix the key or remove it; did you mean `max_turns`?)"),
        "{text}"
    );
}

#[test]
fn an_unknown_key_in_a_nested_table_names_the_nested_table() {
    let e = load_err("[agent]\nmax_turns = 3\n\n[agent.harness]\nmax_budget = 1.0\n");
    let (line, key, table, valid) = unknown_key(&e);
    assert_eq!((line, key, table), (Some(5), "max_budget", "agent.harness"));
    assert!(valid.iter().any(|v| v == "max_budget_usd"), "{valid:?}");
    assert!(e.to_string().contains("in [agent.harness]"), "{e}");
}

#[test]
fn an_unknown_table_lists_the_top_level_keys() {
    let e = load_err("[agnet]\nmax_turns = 3\n");
    let (line, key, table, valid) = unknown_key(&e);
    assert_eq!((line, key, table), (Some(1), "agnet", ""));
    assert!(valid.iter().any(|v| v == "agent"), "{valid:?}");
    assert!(
        !valid.iter().any(|v| v == "model_pinned"),
        "internal fields are not keys"
    );
    assert!(e.to_string().contains("in the top level"), "{e}");
    assert!(e.to_string().contains("did you mean `agent`?"), "{e}");
    let far = load_err("[tools]\nfrobnicate = 1\n");
    assert!(!far.to_string().contains("did you mean"), "{far}");
    assert!(
        far.to_string().ends_with("(fix the key or remove it)"),
        "{far}"
    );
}

#[test]
fn a_dotted_key_at_the_top_level_is_located() {
    let e = load_err("agent.max_turns = 3\nagent.harness.max_budget = 1.0\n");
    let (line, key, table, _) = unknown_key(&e);
    assert_eq!((line, key, table), (Some(2), "max_budget", "agent.harness"));
}

#[test]
fn a_wrong_type_says_the_expected_type_without_quoting_the_value() {
    let e = load_err("[agent]\n\nmax_turns = \"sk-secret-looking\"\n");
    let ConfigError::InvalidValue {
        line, key, message, ..
    } = &e
    else {
        panic!("{e:?}")
    };
    assert_eq!(*line, Some(3));
    assert_eq!(key, "agent.max_turns");
    assert!(
        message.contains("expected a non-negative integer"),
        "{message}"
    );
    let text = e.to_string();
    assert!(text.contains("troupe.toml:3: `agent.max_turns`"), "{text}");
    assert!(!text.contains("sk-secret-looking"), "{text}");

    let e = load_err("[permissions]\nallow = \"read_file\"\n");
    assert!(
        e.to_string().contains("expected an array of strings"),
        "{e}"
    );
    assert_eq!(e.line(), Some(2));

    let e = load_err("[agent.harness]\nauto_compaction_enabled = \"yes\"\n");
    assert!(e.to_string().contains("expected a boolean"), "{e}");
}

#[test]
fn a_bad_enum_value_lists_the_valid_values() {
    let e = load_err("[agent.harness]\ncontext_reset_mode = \"sometimes\"\n");
    let text = e.to_string();
    assert!(
        text.contains(":2: `agent.harness.context_reset_mode`"),
        "{text}"
    );
    assert!(
        text.contains("unknown value `sometimes`; valid values: off, on_stall, on_compaction"),
        "{text}"
    );

    let e = load_err("[session]\nfsync = \"often\"\n");
    assert!(
        e.to_string().contains("valid values: always, batch, never"),
        "{e}"
    );
    assert_eq!(e.line(), Some(2));

    let e = load_err("[providers.local]\nkind = \"openia\"\n");
    assert!(
        e.to_string()
            .contains("valid values: openai, anthropic, gemini"),
        "{e}"
    );
    assert_eq!(e.line(), Some(2));
}

#[test]
fn an_unknown_provider_is_refused_with_its_line() {
    let e = load_err("[agent]\nmodel = \"x\"\nprovider = \"opnai\"\n");
    let text = e.to_string();
    assert!(
        text.contains(":3: `agent.provider`: unknown provider `opnai`"),
        "{text}"
    );
    assert!(text.contains("openai, anthropic, gemini"), "{text}");

    let e = load_err("[agent.fallback]\nprovider = \"nope\"\n");
    assert!(e.to_string().contains("`agent.fallback.provider`"), "{e}");

    let e = load_err("[providers.local]\nbase_url = \"http://localhost\"\n");
    assert!(
        e.to_string()
            .contains(":1: `providers.local`: provider `local` is not a kind and sets no `kind`"),
        "{e}"
    );
}

#[test]
fn invalid_toml_names_the_line() {
    let e = load_err("[agent]\nmax_turns = 3\nmodel = \"unterminated\n");
    let ConfigError::Syntax { line, .. } = &e else {
        panic!("{e:?}")
    };
    assert_eq!(*line, 3);
    assert!(e.to_string().contains("troupe.toml:3:"), "{e}");
    assert!(e.to_string().contains("invalid TOML"), "{e}");
}

#[test]
fn a_literal_api_key_is_refused_without_echoing_it() {
    let e = load_err(
        "[providers.openai]\nbase_url = \"https://x.example\"\napi_key = \"sk-live-123456\"\n",
    );
    let ConfigError::LiteralApiKey { line, table, .. } = &e else {
        panic!("{e:?}")
    };
    assert_eq!((*line, table.as_str()), (3, "providers.openai"));
    let text = e.to_string();
    assert!(text.contains("api_key_env"), "{text}");
    assert!(!text.contains("sk-live-123456"), "{text}");
    assert!(!format!("{e:?}").contains("sk-live-123456"));
}

#[test]
fn a_key_in_api_key_env_is_refused_without_echoing_it() {
    let e = load_err("[providers.openai]\napi_key_env = \"sk-live-abc/123\"\n");
    let text = e.to_string();
    assert!(
        text.contains(":2: `providers.openai.api_key_env`"),
        "{text}"
    );
    assert!(!text.contains("sk-live"), "{text}");
}

#[test]
fn out_of_range_values_name_the_key_and_line() {
    let cases = [
        (
            "[agent.harness]\nmax_budget_usd = -1.0\n",
            2,
            "agent.harness.max_budget_usd",
        ),
        (
            "[agent]\nprovider = \"openai\"\nmax_turns = 0\n",
            3,
            "agent.max_turns",
        ),
        (
            "[hooks.lifecycle]\ntimeout_ms = 0\n",
            2,
            "hooks.lifecycle.timeout_ms",
        ),
        (
            "[session]\nretention_max_sessions = 0\n",
            2,
            "session.retention_max_sessions",
        ),
        (
            "[providers.openai]\nbase_url = \"api.openai.com\"\n",
            2,
            "providers.openai.base_url",
        ),
        (
            "[models.m]\ninput_per_mtok = -2.0\n",
            2,
            "models.m.input_per_mtok",
        ),
    ];
    for (text, want_line, want_key) in cases {
        let e = load_err(text);
        let ConfigError::InvalidValue { line, key, fix, .. } = &e else {
            panic!("{text}: {e:?}")
        };
        assert_eq!(
            (*line, key.as_str()),
            (Some(want_line), want_key),
            "{text}: {e}"
        );
        assert!(!fix.is_empty());
    }
    // A negative integer in an unsigned field is a type error, located.
    let e = load_err("[agent]\nmax_turns = -5\n");
    assert_eq!(e.line(), Some(2), "{e}");
    assert!(
        e.to_string()
            .contains("`agent.max_turns`: expected a non-negative integer, found integer `-5`"),
        "{e}"
    );
}

#[test]
fn a_bad_environment_value_names_the_variable() {
    let dir = workspace(None);
    let cases = [
        ("AGENT_MAX_TURNS_PER_REQUEST", "many"),
        ("AGENT_MAX_TURNS_PER_REQUEST", "0"),
        ("TROUPE_MAX_BUDGET_USD", "-3"),
        ("TROUPE_MAX_BUDGET_USD", "lots"),
        ("CONTEXT_AUTO_UPGRADE", "maybe"),
        ("TROUPE_PROVIDER", "openia"),
        ("TROUPE_BASE_URL", "localhost:8080"),
    ];
    for (var, value) in cases {
        let e = load(dir.path(), &[(var, value)]).unwrap_err();
        let ConfigError::Env { var: named, .. } = &e else {
            panic!("{var}={value}: {e:?}")
        };
        assert_eq!(named, var);
        assert!(
            e.to_string()
                .starts_with(&format!("environment variable {var}: ")),
            "{e}"
        );
    }
}

#[test]
fn a_bad_flag_names_the_flag() {
    let dir = workspace(None);
    let mut c = load(dir.path(), &[]).unwrap();
    let e = c
        .apply(&ConfigOverrides {
            max_turns: Some(0),
            ..Default::default()
        })
        .unwrap_err();
    assert!(
        matches!(&e, ConfigError::Flag { flag, .. } if flag == "--max-turns"),
        "{e:?}"
    );
    let e = c
        .apply(&ConfigOverrides {
            provider: Some("nope".into()),
            ..Default::default()
        })
        .unwrap_err();
    assert!(
        e.to_string()
            .starts_with("flag --provider: unknown provider `nope`"),
        "{e}"
    );
    assert_eq!(c.agent.provider, "openai", "a refused flag changes nothing");
}

#[test]
fn header_values_never_print() {
    let dir = workspace(Some(
        "[providers.openai]\nheaders = { \"x-secret\" = \"hunter2-value\" }\n",
    ));
    let c = load(dir.path(), &[]).unwrap();
    assert!(!format!("{c:?}").contains("hunter2-value"));
    assert!(!format!("{:?}", c.provider_config().unwrap()).contains("hunter2-value"));
}

#[test]
fn protected_paths_entries_must_stay_inside_the_workspace() {
    for (entry, says) in [
        ("/etc", "is absolute"),
        ("../outside", "climbs out"),
        ("", "empty entry"),
        ("tests/[a", "`tests/[a` is not a valid glob"),
    ] {
        let e = load_err(&format!(
            "[tools]\nprotected_paths = [\".git\", \"{entry}\"]\n"
        ));
        let text = e.to_string();
        assert!(text.contains("tools.protected_paths"), "{text}");
        assert!(text.contains(says), "{entry}: {text}");
        assert_eq!(e.line(), Some(2), "{text}");
    }
}

#[test]
fn credentials_in_a_base_url_are_refused_without_echoing_them() {
    // In troupe.toml, in the environment and as a flag alike.
    let e =
        load_err("[providers.openai]\nbase_url = \"http://me:sk-in-url-123@localhost:8080/v1\"\n");
    let text = e.to_string();
    assert!(text.contains("providers.openai.base_url"), "{text}");
    assert!(text.contains("carries credentials"), "{text}");
    assert!(!text.contains("sk-in-url-123"), "{text}");
    assert_eq!(e.line(), Some(2));

    let dir = workspace(None);
    let e = load(
        dir.path(),
        &[("TROUPE_BASE_URL", "https://sk-in-url-123@example.com/v1")],
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("TROUPE_BASE_URL") && e.contains("carries credentials"),
        "{e}"
    );
    assert!(!e.contains("sk-in-url-123"), "{e}");

    let mut c = load(dir.path(), &[]).unwrap();
    let e = c
        .apply(&ConfigOverrides {
            base_url: Some("http://u:sk-in-url-123@127.0.0.1:1/v1".into()),
            ..Default::default()
        })
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("--base-url") && e.contains("OPENAI_API_KEY"),
        "{e}"
    );
    assert!(!e.contains("sk-in-url-123"), "{e}");
    // An `@` in the path or query is no credential.
    c.apply(&ConfigOverrides {
        base_url: Some("http://127.0.0.1:1/v1/@team?x=a@b".into()),
        ..Default::default()
    })
    .unwrap();
}

#[test]
fn a_bad_sandbox_mode_names_the_key_its_line_and_the_modes() {
    let text = load_err("sandbox_mode = \"full\"\n").to_string();
    assert!(
        text.contains("troupe.toml:1") && text.contains("sandbox_mode"),
        "{text}"
    );
    for mode in ["read-only", "workspace-write", "danger-full-access"] {
        assert!(text.contains(mode), "{text}");
    }
    assert_eq!(text.lines().count(), 1, "{text}");
}

#[test]
fn wire_api_is_checked() {
    let e = load_err("[providers.anthropic]\nwire_api = \"responses\"\n").to_string();
    assert!(
        e.contains("providers.anthropic.wire_api")
            && e.contains("only applies to an OpenAI-compatible provider"),
        "{e}"
    );
    let e = load_err("[providers.openai]\nwire_api = \"grpc\"\n").to_string();
    assert!(
        e.contains("wire_api") && e.contains("chat") && e.contains("responses"),
        "{e}"
    );
}

#[test]
fn sampling_values_are_checked() {
    let e = load_err("[providers.local]\nkind = \"openai\"\ntemperature = 3.0\n").to_string();
    assert!(
        e.contains("providers.local.temperature") && e.contains("between 0 and 2"),
        "{e}"
    );
    let e = load_err("[providers.local]\nkind = \"openai\"\nmax_output_tokens = 0\n").to_string();
    assert!(
        e.contains("providers.local.max_output_tokens") && e.contains("is 0"),
        "{e}"
    );
    let e = load_err("[providers.local]\nkind = \"openai\"\nseed = -1\n").to_string();
    assert!(e.contains("seed"), "{e}");
}

#[test]
fn stall_settings_are_checked() {
    let e = load_err("[agent.harness]\nstall_action = \"panic\"\n");
    let text = e.to_string();
    assert!(
        text.contains("valid values: nudge, reset, escalate, stop"),
        "{text}"
    );
    let e =
        load_err("[agent.harness]\ncontext_reset_mode = \"on_stall\"\nstall_action = \"stop\"\n");
    let text = e.to_string();
    assert!(text.contains("`agent.harness.stall_action`"), "{text}");
    assert!(
        text.contains("contradicts `context_reset_mode = \"on_stall\"`"),
        "{text}"
    );
    assert!(text.contains("keep one of the two settings"), "{text}");
    let e = load_err("[agent.harness]\nstall_threshold = 0\n");
    assert!(e.to_string().contains("the stall threshold is 0"), "{e}");
}
