// The official MCP TypeScript SDK client (@modelcontextprotocol/sdk, pinned
// in package-lock.json) drives `troupe mcp-server --script` over stdio,
// offline (docs/mcp.md#troupe-as-an-mcp-server): run_agent with progress
// and log notifications and its result; a long run answered as running,
// polled with session_result, steered, aborted; a run_agent call the client
// cancels aborts its session; approval requests answered as elicitations.
//
//   TROUPE_BIN=target/debug/troupe node --test   (in tests/mcp-server; .ci/run)

import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, writeFileSync, readFileSync, readdirSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { ElicitRequestSchema, LoggingMessageNotificationSchema } from "@modelcontextprotocol/sdk/types.js";

const BIN = process.env.TROUPE_BIN;
if (!BIN) throw new Error("set TROUPE_BIN to the troupe binary");

/** A git repository and a private config dir (trust store). */
function workspace() {
  const root = mkdtempSync(join(tmpdir(), "troupe-mcps-"));
  const ws = join(root, "ws");
  execFileSync("git", ["init", "-q", ws]);
  writeFileSync(join(ws, "README.md"), "a workspace\n");
  const git = ["-C", ws, "-c", "user.name=t", "-c", "user.email=t@t"];
  execFileSync("git", [...git, "add", "."]);
  execFileSync("git", [...git, "commit", "-qm", "init"]);
  return { root, ws, config: join(root, "config") };
}

/** A model that runs `k` shell steps, each reply after `delayMs`. */
function steps(k, delayMs) {
  return `[rule]
tool = "exec_command"
arguments = { command = "echo step {n} >> steps.txt" }
until_tool_results = ${k}
final_text = "done after {tool_results} tool results"
delay_ms = ${delayMs}
`;
}

/** `troupe mcp-server --script` on `script`, with the official client connected. */
async function connect(env, script, { args = [], onElicit } = {}) {
  const path = join(env.root, `script-${Math.random().toString(16).slice(2)}.toml`);
  writeFileSync(path, script);
  const transport = new StdioClientTransport({
    command: BIN,
    args: ["mcp-server", "--script", path, "-C", env.ws, ...args],
    env: { ...process.env, TROUPE_CONFIG_DIR: env.config, TROUPE_LOG: "warn" },
    stderr: "pipe",
  });
  let stderr = "";
  transport.stderr?.on("data", (d) => (stderr += d));
  const client = new Client(
    { name: "troupe-mcp-server-test", version: "1.0.0" },
    { capabilities: onElicit ? { elicitation: { form: {} } } : {} },
  );
  if (onElicit) client.setRequestHandler(ElicitRequestSchema, (req) => onElicit(req.params));
  const logs = [];
  client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => logs.push(n.params));
  await client.connect(transport);
  return { client, logs, stderr: () => stderr };
}

function sessionIds(env) {
  const dir = join(env.ws, ".vtcode", "sessions");
  return existsSync(dir) ? readdirSync(dir) : [];
}

async function until(what, ms, check) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await check();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

test("tools are listed with input and output schemas", async () => {
  const env = workspace();
  const { client } = await connect(env, steps(1, 0));
  try {
    const { tools } = await client.listTools();
    const names = tools.map((t) => t.name).sort();
    assert.deepEqual(names, [
      "abort_session", "decide_approval", "list_approvals", "run_agent",
      "run_pipeline", "session_result", "session_status", "steer_session",
    ]);
    for (const t of tools) {
      assert.equal(t.inputSchema.type, "object", t.name);
      assert.equal(t.outputSchema?.type, "object", t.name);
    }
  } finally {
    await client.close();
  }
});

test("run_agent runs a session to its end, with progress, log messages and the result", async () => {
  const env = workspace();
  const { client, logs, stderr } = await connect(env, steps(3, 150));
  try {
    const progress = [];
    const res = await client.callTool(
      { name: "run_agent", arguments: { prompt: "take three steps", wait_seconds: 60 } },
      undefined,
      { onprogress: (p) => progress.push(p), timeout: 90_000 },
    );
    assert.ok(!res.isError, JSON.stringify(res) + stderr());
    const out = res.structuredContent;
    assert.equal(out.status, "completed", JSON.stringify(out));
    assert.equal(out.subtype, "success");
    assert.equal(out.result, "done after 3 tool results");
    assert.ok(out.turn_count >= 3, JSON.stringify(out));
    assert.ok(progress.length >= 2, `progress: ${JSON.stringify(progress)}`);
    assert.ok(progress.some((p) => /turn \d+/.test(p.message ?? "")), JSON.stringify(progress));
    // Increasing, as the protocol requires.
    for (let i = 1; i < progress.length; i++) assert.ok(progress[i].progress > progress[i - 1].progress);
    assert.ok(
      logs.some((l) => l.data?.event === "thread.completed" && l.data?.subtype === "success"),
      `logs: ${JSON.stringify(logs)}`,
    );
    assert.equal(readFileSync(join(env.ws, "steps.txt"), "utf8").trim().split("\n").length, 3);
  } finally {
    await client.close();
  }
});

test("a long run: answered running, polled with session_result, steered, aborted", async () => {
  const env = workspace();
  const { client, stderr } = await connect(env, steps(200, 300));
  try {
    const started = await client.callTool({ name: "run_agent", arguments: { prompt: "take many steps", wait_seconds: 1 } });
    assert.ok(!started.isError, JSON.stringify(started) + stderr());
    const id = started.structuredContent.session_id;
    assert.equal(started.structuredContent.status, "running");
    const polled = await client.callTool({ name: "session_result", arguments: { session_id: id, wait_seconds: 1 } });
    assert.equal(polled.structuredContent.status, "running", JSON.stringify(polled));
    assert.equal(polled.structuredContent.session_id, id);
    const status = await client.callTool({ name: "session_status", arguments: { session_id: id } });
    assert.ok(status.structuredContent.agents.length >= 1, JSON.stringify(status));

    const steered = await client.callTool({
      name: "steer_session",
      arguments: { session_id: id, text: "MCP-STEER-MARK: wrap up" },
    });
    assert.ok(!steered.isError, JSON.stringify(steered));
    assert.equal(steered.structuredContent.agent_id, "session/root");
    const events = join(env.ws, ".vtcode", "sessions", id, "events.jsonl");
    await until("the steering text in the log", 30_000, () =>
      readFileSync(events, "utf8").includes("MCP-STEER-MARK"),
    );

    const aborted = await client.callTool({ name: "abort_session", arguments: { session_id: id } });
    assert.ok(!aborted.isError, JSON.stringify(aborted));
    assert.equal(aborted.structuredContent.status, "completed");
    assert.equal(aborted.structuredContent.subtype, "cancelled");
    const again = await client.callTool({ name: "session_result", arguments: { session_id: id, wait_seconds: 0 } });
    assert.equal(again.structuredContent.subtype, "cancelled");
  } finally {
    await client.close();
  }
});

test("cancelling a run_agent call aborts its session", async () => {
  const env = workspace();
  const { client, stderr } = await connect(env, steps(200, 300));
  try {
    const controller = new AbortController();
    const call = client.callTool(
      { name: "run_agent", arguments: { prompt: "take many steps", wait_seconds: 120 } },
      undefined,
      {
        signal: controller.signal,
        timeout: 120_000,
        onprogress: (p) => {
          if (/turn 2/.test(p.message ?? "")) controller.abort("the user cancelled");
        },
      },
    );
    await assert.rejects(call);
    const [id] = await until("the session", 10_000, () => sessionIds(env).length === 1 && sessionIds(env));
    const done = await until("the cancelled session", 30_000, async () => {
      const r = await client.callTool({ name: "session_status", arguments: { session_id: id } });
      return r.structuredContent?.status === "completed" && r.structuredContent;
    });
    assert.equal(done.subtype, "cancelled", JSON.stringify(done) + stderr());
    const taken = readFileSync(join(env.ws, "steps.txt"), "utf8").trim().split("\n").length;
    assert.ok(taken < 200, `the session went on: ${taken} steps`);
  } finally {
    await client.close();
  }
});

test("approval requests reach a client that supports elicitation, and its answers decide them", async () => {
  const env = workspace();
  const asked = [];
  // The first command is denied (with a message), the second approved.
  const { client, stderr } = await connect(env, steps(2, 50), {
    args: ["-a", "untrusted"],
    onElicit: (params) => {
      asked.push(params);
      return asked.length === 1
        ? { action: "accept", content: { decision: "deny", message: "not that one" } }
        : { action: "accept", content: { decision: "approve" } };
    },
  });
  try {
    const res = await client.callTool(
      { name: "run_agent", arguments: { prompt: "take steps", wait_seconds: 60 } },
      undefined,
      { timeout: 90_000 },
    );
    assert.ok(!res.isError, JSON.stringify(res) + stderr());
    assert.equal(res.structuredContent.status, "completed", JSON.stringify(res.structuredContent));
    assert.ok(asked.length >= 2, JSON.stringify(asked));
    assert.equal(asked[0].mode ?? "form", "form");
    assert.match(asked[0].message, /exec_command/);
    assert.ok(asked[0].requestedSchema.properties.decision.enum.includes("approve"));
    const id = res.structuredContent.session_id;
    const log = readFileSync(join(env.ws, ".vtcode", "sessions", id, "events.jsonl"), "utf8");
    const resolved = log.split("\n").filter((l) => l.includes('"troupe.approval_resolved"'));
    assert.ok(resolved.some((l) => l.includes('"deny"')), resolved.join("\n"));
    assert.ok(resolved.some((l) => l.includes('"approve"')), resolved.join("\n"));
    // The denied step did not run; the approved one did.
    const taken = existsSync(join(env.ws, "steps.txt"))
      ? readFileSync(join(env.ws, "steps.txt"), "utf8").trim().split("\n").length
      : 0;
    assert.equal(taken, asked.length - 1, `steps: ${taken}, asked: ${asked.length}`);
  } finally {
    await client.close();
  }
});
