#!/usr/bin/env bash
# The MCP conformance suite's client command for troupe (run by .ci/run
# for each client scenario, docs/mcp.md "Conformance"):
#
#   conformance client --command "tests/conformance/client.sh" --scenario S
#
# The suite appends its server's URL and sets MCP_CONFORMANCE_SCENARIO.
# Each scenario runs troupe's real path against a workspace whose
# troupe.toml names the server `conf`:
# - initialize: `troupe mcp list` (handshake, tools/list);
# - tools_call, sse-retry: `troupe exec --script` with a scripted model
#   that calls the server's tool (tools-call.toml, sse-retry.toml);
# - elicitation-sep1034-client-defaults: `troupe exec` whose tool call
#   makes the server ask an elicitation, answered by a person through the
#   CLI from another process: `troupe approvals list` until it is waiting,
#   then `troupe approvals approve` (accept with every field left out:
#   troupe fills in the schema's defaults);
# - auth/*: `troupe mcp login conf --no-browser` (the suite's authorization
#   server redirects back without a login page), then `troupe mcp list`
#   with the stored token; the pre-registered client of the suite's
#   MCP_CONFORMANCE_CONTEXT goes in `[mcp_servers.conf.oauth]`, and the
#   suite's client ID metadata document URL for auth/basic-cimd. For
#   auth/scope-step-up, `troupe exec` calls the tool (403: the scopes are
#   recorded), a second login asks for them, and the call succeeds.
# Exits with troupe's status. TROUPE_BIN names the binary (default:
# `troupe` on PATH).
set -euo pipefail
url="${!#}"
here=$(cd "$(dirname "$0")" && pwd)
troupe="${TROUPE_BIN:-troupe}"
ws=$(mktemp -d)
pid=""
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; fi
  rm -rf "$ws"
}
trap cleanup EXIT

printf '[mcp_servers.conf]\nurl = "%s"\n' "$url" >"$ws/troupe.toml"

# Runs troupe exec with the scripted model $1, no person needed.
scripted() {
  local status=0
  "$troupe" exec --script "$here/$1" -a never --json -C "$ws" "Call the conformance tool" \
    >"$ws/events.jsonl" 2>"$ws/stderr.log" || status=$?
  if [ "$status" -ne 0 ]; then
    echo "client.sh: troupe exec exited $status" >&2
    cat "$ws/stderr.log" >&2
  fi
  return "$status"
}

# The suite's context (JSON): the value of "$1", if any.
context() {
  sed -n "s/.*\"$1\": *\"\([^\"]*\)\".*/\1/p" <<<"${MCP_CONFORMANCE_CONTEXT:-}"
}

# auth/*: OAuth through `troupe mcp login`, the tokens in a private
# configuration directory.
authorized() {
  export TROUPE_CONFIG_DIR="$ws/config"
  local id secret
  id=$(context client_id)
  secret=$(context client_secret)
  if [ -n "$id" ] || [ "$MCP_CONFORMANCE_SCENARIO" = auth/basic-cimd ]; then
    printf '\n[mcp_servers.conf.oauth]\n' >>"$ws/troupe.toml"
  fi
  if [ -n "$id" ]; then
    printf 'client_id = "%s"\n' "$id" >>"$ws/troupe.toml"
  fi
  if [ -n "$secret" ]; then
    export CONFORMANCE_CLIENT_SECRET="$secret"
    printf 'client_secret_env_var = "CONFORMANCE_CLIENT_SECRET"\n' >>"$ws/troupe.toml"
    # A secret sent on the workspace file's word: trusted, as a person would.
    "$troupe" trust "$ws" >/dev/null
  fi
  if [ "$MCP_CONFORMANCE_SCENARIO" = auth/basic-cimd ]; then
    printf 'client_metadata_url = "https://conformance-test.local/client-metadata.json"\n' >>"$ws/troupe.toml"
  fi
  "$troupe" mcp login conf --no-browser -C "$ws" 2>"$ws/login.log" || {
    local status=$?
    cat "$ws/login.log" >&2
    return "$status"
  }
  if [ "$MCP_CONFORMANCE_SCENARIO" = auth/scope-step-up ]; then
    # The call needs a scope the token lacks: a tool error, the scopes
    # recorded; the second login asks for them; the call then succeeds.
    scripted auth-tool.toml
    grep -q '"status":"failed"' "$ws/events.jsonl" || { echo "client.sh: the first call did not fail" >&2; return 1; }
    "$troupe" mcp login conf --no-browser -C "$ws" 2>>"$ws/login.log" || { cat "$ws/login.log" >&2; return 1; }
    scripted auth-tool.toml
    grep -q '"status":"completed"' "$ws/events.jsonl" || { echo "client.sh: the call after step-up failed" >&2; cat "$ws/events.jsonl" >&2; return 1; }
    return 0
  fi
  "$troupe" mcp list -C "$ws"
}

case "${MCP_CONFORMANCE_SCENARIO:-}" in
  auth/*)
    authorized; exit ;;
  initialize)
    "$troupe" mcp list -C "$ws"; exit ;;
  tools_call)
    scripted tools-call.toml; exit ;;
  sse-retry)
    scripted sse-retry.toml; exit ;;
  elicitation-sep1034-client-defaults) ;;
  *)
    echo "client.sh: no client for scenario '${MCP_CONFORMANCE_SCENARIO:-}'" >&2
    exit 2 ;;
esac

"$troupe" exec --script "$here/elicitation-defaults.toml" -a on-request --json \
  -C "$ws" "Call the conformance tool" >"$ws/events.jsonl" 2>"$ws/stderr.log" &
pid=$!

# The person: waits (at most 20 s) for the elicitation to be asked.
id=""
for _ in $(seq 1 200); do
  id=$("$troupe" approvals list --json --workspace "$ws" 2>/dev/null |
    grep '"tool":"elicitation"' | sed -n 's/.*"approval_id":"\([^"]*\)".*/\1/p' | head -n 1 || true)
  [ -n "$id" ] && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
if [ -z "$id" ]; then
  echo "client.sh: no elicitation request appeared" >&2
  cat "$ws/stderr.log" >&2
  exit 1
fi
"$troupe" approvals approve "$id" --workspace "$ws" >&2

status=0
wait "$pid" || status=$?
pid=""
if [ "$status" -ne 0 ]; then
  echo "client.sh: troupe exec exited $status" >&2
  cat "$ws/stderr.log" >&2
fi
exit "$status"
