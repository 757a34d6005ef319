#!/usr/bin/env bash
# The MCP conformance suite's client command for troupe (the scenario
# elicitation-sep1034-client-defaults, run by .ci/run):
#
#   conformance client --command "tests/conformance/client.sh" --scenario ...
#
# The suite appends its server's URL. This runs troupe's real path: a
# workspace whose troupe.toml names the server, `troupe exec` with a
# scripted model that calls the server's tool, and a person's answer
# through the CLI from another process: `troupe approvals list` until the
# server's elicitation is waiting, then `troupe approvals approve` (accept
# with every field left out: troupe fills in the schema's defaults).
# Exits with troupe exec's status. TROUPE_BIN names the binary (default:
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
