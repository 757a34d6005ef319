// The official ACP TypeScript client (@agentclientprotocol/sdk, pinned in
// package-lock.json) drives `troupe acp --script` (docs/acp.md): streamed
// text and tool calls, a permission rejected then allowed, an edit whose
// tool_call_update carries a diff, a subagent shown as a tool_call,
// set_mode read-only refusing a write, cancel, load of an earlier session,
// and every line troupe writes on stdout parses as JSON-RPC.
//
//   TROUPE_BIN=target/debug/troupe node --test   (in tests/acp; .ci/run)

import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn, execFileSync } from "node:child_process";
import { mkdtempSync, writeFileSync, readFileSync, existsSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { Writable } from "node:stream";
import { client, methods, ndJsonStream } from "@agentclientprotocol/sdk";

const HERE = dirname(fileURLToPath(import.meta.url));
const BIN = process.env.TROUPE_BIN;
if (!BIN) throw new Error("set TROUPE_BIN to the troupe binary");

/** A git repository with a.txt, and a private config dir (trust store). */
function workspace() {
  const root = mkdtempSync(join(tmpdir(), "troupe-acp-"));
  const ws = join(root, "ws");
  execFileSync("git", ["init", "-q", ws]);
  writeFileSync(join(ws, "a.txt"), "hello\n");
  execFileSync("git", ["-C", ws, "-c", "user.name=t", "-c", "user.email=t@t", "add", "."]);
  execFileSync("git", ["-C", ws, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init"]);
  return { root, ws, config: join(root, "config") };
}

/**
 * Starts `troupe acp` with `script` (TOML text) and connects the official
 * client. `onPermission(params)` answers session/request_permission.
 * Returns the updates seen, the raw stdout, and `run(op)`.
 */
function agent(env, script, { onPermission, onElicitation, args = [] } = {}) {
  const scriptPath = join(env.root, `script-${Math.random().toString(16).slice(2)}.toml`);
  writeFileSync(scriptPath, script);
  const child = spawn(BIN, ["acp", "--script", scriptPath, "--provider", "anthropic", ...args], {
    cwd: env.ws,
    env: { ...process.env, TROUPE_CONFIG_DIR: env.config, RUST_LOG: "warn" },
    stdio: ["pipe", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stderr.on("data", (d) => (stderr += d));
  const input = new ReadableStream({
    start(controller) {
      let open = true;
      child.stdout.on("data", (d) => {
        stdout += d.toString("utf8");
        if (open) {
          try {
            controller.enqueue(new Uint8Array(d));
          } catch {
            open = false;
          }
        }
      });
      child.stdout.on("end", () => {
        if (open) {
          open = false;
          try {
            controller.close();
          } catch {}
        }
      });
    },
    cancel() {},
  });
  const updates = [];
  const permissions = [];
  const elicitations = [];
  const app = client({ name: "troupe-acp-test" })
    .onRequest(methods.client.elicitation.create, async ({ params }) => {
      elicitations.push(params);
      return onElicitation ? onElicitation(params) : { action: "decline" };
    })
    .onNotification(methods.client.session.update, ({ params }) => {
      updates.push(params);
    })
    .onRequest(methods.client.session.requestPermission, async ({ params }) => {
      permissions.push(params);
      const optionId = onPermission ? await onPermission(params) : "reject_once";
      return { outcome: { outcome: "selected", optionId } };
    });
  const stream = ndJsonStream(Writable.toWeb(child.stdin), input);
  const exited = new Promise((resolve) => child.on("exit", (code) => resolve(code)));
  return {
    child,
    updates,
    permissions,
    elicitations,
    stdout: () => stdout,
    stderr: () => stderr,
    async run(op) {
      try {
        return await app.connectWith(stream, op);
      } finally {
        child.stdin.end();
        const code = await Promise.race([exited, new Promise((r) => setTimeout(() => r("timeout"), 15000).unref())]);
        if (code === "timeout") child.kill("SIGKILL");
        assert.equal(code, 0, `troupe acp exited ${code}; stderr:\n${stderr}`);
        assertJsonRpc(stdout);
      }
    },
  };
}

/** Every stdout line is one JSON-RPC 2.0 message. */
function assertJsonRpc(stdout) {
  const lines = stdout.split("\n").filter((l) => l.length > 0);
  assert.ok(lines.length > 0, "nothing on stdout");
  for (const line of lines) {
    let msg;
    assert.doesNotThrow(() => (msg = JSON.parse(line)), `not JSON: ${line.slice(0, 200)}`);
    assert.equal(msg.jsonrpc, "2.0", `not JSON-RPC: ${line.slice(0, 200)}`);
    assert.ok("method" in msg || "result" in msg || "error" in msg, `not a JSON-RPC message: ${line.slice(0, 200)}`);
  }
}

/** Whether a process whose command line contains `needle` runs. */
function running(needle) {
  for (const pid of readdirSync("/proc")) {
    if (!/^\d+$/.test(pid)) continue;
    try {
      const cmd = readFileSync(`/proc/${pid}/cmdline`, "utf8").replaceAll("\0", " ");
      if (cmd.includes(needle) && !cmd.includes("node")) return true;
    } catch {}
  }
  return false;
}

const kinds = (updates) => updates.map((u) => u.update.sessionUpdate);
const text = (updates, kind) =>
  updates.filter((u) => u.update.sessionUpdate === kind).map((u) => u.update.content.text).join("");
const toolCalls = (updates) => updates.filter((u) => u.update.sessionUpdate === "tool_call").map((u) => u.update);
const callUpdates = (updates, id) =>
  updates.filter((u) => u.update.sessionUpdate === "tool_call_update" && u.update.toolCallId === id).map((u) => u.update);

async function init(ctx, clientCapabilities = {}) {
  const r = await ctx.request(methods.agent.initialize, {
    protocolVersion: 1,
    clientCapabilities: { fs: { readTextFile: false, writeTextFile: false }, terminal: false, ...clientCapabilities },
    clientInfo: { name: "troupe-acp-test", version: "1.0.0" },
  });
  return r;
}

function rootEvents(ws, sessionId) {
  const lines = readFileSync(join(ws, ".vtcode", "sessions", sessionId, "events.jsonl"), "utf8").split("\n").filter(Boolean);
  return lines.map((l) => JSON.parse(l).event);
}

test("a prompt streams text, reasoning and tool calls; a later prompt continues the thread; load replays it", async () => {
  const env = workspace();
  try {
    const script = `
[[replies]]
kind = "message"
text = "Reading a.txt."
thinking = [{ text = "Look at a.txt first.", signature = "sig" }]
tool_calls = [
  { id = "r1", name = "read_file", arguments = { path = "a.txt" } },
  { id = "l1", name = "list_files", arguments = { path = "." } },
]
[[replies]]
kind = "message"
text = "It says hello."
[[replies]]
kind = "message"
text = "Second answer."
`;
    const a = agent(env, script);
    let sessionId;
    await a.run(async (ctx) => {
      const init1 = await init(ctx);
      assert.equal(init1.protocolVersion, 1);
      assert.equal(init1.agentCapabilities.loadSession, true);
      assert.equal(init1.agentCapabilities.promptCapabilities.embeddedContext, true);
      assert.deepEqual(init1.authMethods ?? [], []);
      const s = await ctx.request(methods.agent.session.new, { cwd: env.ws, mcpServers: [] });
      sessionId = s.sessionId;
      assert.deepEqual(s.modes.availableModes.map((m) => m.id), ["build", "plan", "read-only"]);
      assert.equal(s.modes.currentModeId, "build");
      const r = await ctx.request(methods.agent.session.prompt, {
        sessionId,
        prompt: [{ type: "text", text: "What does a.txt say?" }],
      });
      assert.equal(r.stopReason, "end_turn");
      const r2 = await ctx.request(methods.agent.session.prompt, {
        sessionId,
        prompt: [{ type: "text", text: "And again?" }],
      });
      assert.equal(r2.stopReason, "end_turn");
    });
    const u = a.updates;
    assert.ok(u.every((x) => x.sessionId === sessionId));
    assert.equal(text(u, "agent_message_chunk"), "Reading a.txt.It says hello.Second answer.");
    assert.equal(text(u, "agent_thought_chunk"), "Look at a.txt first.");
    assert.ok(!kinds(u).includes("user_message_chunk"), "a live prompt does not echo the user's message");
    const calls = toolCalls(u);
    assert.deepEqual(calls.map((c) => c.kind), ["read", "search"]);
    assert.equal(calls[0].title, "Read a.txt");
    assert.deepEqual(calls[0].rawInput, { path: "a.txt" });
    assert.equal(calls[0].locations[0].path, join(env.ws, "a.txt"));
    const done = callUpdates(u, calls[0].toolCallId).at(-1);
    assert.equal(done.status, "completed");
    assert.match(done.content.at(-1).content.text, /1\thello/);
    // One session, both prompts in its root thread.
    const events = rootEvents(env.ws, sessionId);
    const asked = events.filter((e) => e.type === "troupe.user_message" && e.agent_id === "session/root").map((e) => e.text);
    assert.deepEqual(asked, ["What does a.txt say?", "And again?"]);

    // A new connection loads it: the history as updates, the user's too.
    const b = agent(env, script);
    await b.run(async (ctx) => {
      await init(ctx);
      const r = await ctx.request(methods.agent.session.load, { sessionId, cwd: env.ws, mcpServers: [] });
      assert.equal(r.modes.currentModeId, "build");
    });
    assert.equal(text(b.updates, "user_message_chunk"), "What does a.txt say?And again?");
    assert.equal(text(b.updates, "agent_message_chunk"), "Reading a.txt.It says hello.Second answer.");
    assert.deepEqual(toolCalls(b.updates).map((c) => c.title), ["Read a.txt", "List ."]);
  } finally {
    rmSync(env.root, { recursive: true, force: true });
  }
});

test("a permission rejected then allowed; the edit's update carries a diff", async () => {
  const env = workspace();
  try {
    const script = `
[[replies]]
kind = "message"
tool_calls = [{ id = "w1", name = "write_file", arguments = { path = "x.txt", content = "new file\\n" } }]
[[replies]]
kind = "message"
tool_calls = [{ id = "e1", name = "edit_file", arguments = { path = "a.txt", old_string = "hello", new_string = "hello world" } }]
[[replies]]
kind = "message"
text = "Edited."
`;
    let n = 0;
    const a = agent(env, script, { onPermission: () => (n++ === 0 ? "reject_once" : "allow_once") });
    await a.run(async (ctx) => {
      await init(ctx);
      const s = await ctx.request(methods.agent.session.new, { cwd: env.ws, mcpServers: [] });
      const r = await ctx.request(methods.agent.session.prompt, {
        sessionId: s.sessionId,
        prompt: [{ type: "text", text: "Edit the file" }],
      });
      assert.equal(r.stopReason, "end_turn");
    });
    assert.equal(a.permissions.length, 2);
    const opts = a.permissions[0].options.map((o) => `${o.optionId}:${o.kind}`);
    assert.deepEqual(opts, ["allow_once:allow_once", "allow_always:allow_always", "reject_once:reject_once", "reject_always:reject_always"]);
    assert.equal(a.permissions[0].toolCall.kind, "edit");
    const [write, edit] = toolCalls(a.updates);
    assert.equal(write.status ?? "pending", "pending");
    assert.equal(a.permissions[0].toolCall.toolCallId, write.toolCallId);
    assert.equal(callUpdates(a.updates, write.toolCallId).at(-1).status, "failed");
    assert.ok(!existsSync(join(env.ws, "x.txt")), "the rejected write ran");
    const last = callUpdates(a.updates, edit.toolCallId).at(-1);
    assert.equal(last.status, "completed");
    const diff = last.content.find((c) => c.type === "diff");
    assert.ok(diff, JSON.stringify(last));
    assert.equal(diff.path, join(env.ws, "a.txt"));
    assert.equal(diff.oldText, "hello");
    assert.equal(diff.newText, "hello world");
    assert.equal(readFileSync(join(env.ws, "a.txt"), "utf8"), "hello world\n");
  } finally {
    rmSync(env.root, { recursive: true, force: true });
  }
});

test("a subagent is a tool_call whose updates carry its progress", async () => {
  const env = workspace();
  try {
    const script = `
[[routes]]
when = "Count (C-9)"
replies = [
  { kind = "message", text = "counting", tool_calls = [{ id = "c1", name = "read_file", arguments = { path = "a.txt" } }] },
  { kind = "message", text = "one line" },
]
[[replies]]
kind = "message"
tool_calls = [{ id = "s1", name = "spawn_subagent", arguments = { name = "counter", task = "Count (C-9) the lines of a.txt." } }]
[[replies]]
kind = "message"
text = "The counter says one line."
`;
    const a = agent(env, script);
    await a.run(async (ctx) => {
      await init(ctx);
      const s = await ctx.request(methods.agent.session.new, { cwd: env.ws, mcpServers: [] });
      const r = await ctx.request(methods.agent.session.prompt, {
        sessionId: s.sessionId,
        prompt: [{ type: "text", text: "Delegate the count" }],
      });
      assert.equal(r.stopReason, "end_turn");
    });
    const calls = toolCalls(a.updates);
    assert.equal(calls.length, 1, JSON.stringify(calls));
    assert.match(calls[0].title, /^Subagent counter: Count/);
    const ups = callUpdates(a.updates, calls[0].toolCallId);
    // The subagent's handoff (its deliverable, not confirmed done) is a plan entry.
    const plan = a.updates.filter((u) => u.update.sessionUpdate === "plan").at(-1);
    assert.ok(plan, "no plan update from the subagent's handoff");
    assert.match(plan.update.entries[0].content, /Count \(C-9\)/);
    const progress = ups.map((x) => JSON.stringify(x.content ?? [])).join("\n");
    assert.match(progress, /counter: Read a.txt/);
    assert.match(progress, /counter: says: one line/);
    assert.equal(ups.at(-1).status, "completed");
    // The subagent's own calls are not top-level tool calls.
    assert.ok(!calls.some((c) => c.title.includes("Read a.txt")));
  } finally {
    rmSync(env.root, { recursive: true, force: true });
  }
});

test("set_mode read-only refuses a write", async () => {
  const env = workspace();
  try {
    const script = `
[[replies]]
kind = "message"
tool_calls = [{ id = "w1", name = "write_file", arguments = { path = "y.txt", content = "nope\\n" } }]
[[replies]]
kind = "message"
text = "Could not write."
`;
    const a = agent(env, script, { onPermission: () => "allow_once" });
    await a.run(async (ctx) => {
      await init(ctx);
      const s = await ctx.request(methods.agent.session.new, { cwd: env.ws, mcpServers: [] });
      await ctx.request(methods.agent.session.setMode, { sessionId: s.sessionId, modeId: "read-only" });
      await assert.rejects(ctx.request(methods.agent.session.setMode, { sessionId: s.sessionId, modeId: "yolo" }));
      const r = await ctx.request(methods.agent.session.prompt, {
        sessionId: s.sessionId,
        prompt: [{ type: "text", text: "Write y.txt" }],
      });
      assert.equal(r.stopReason, "end_turn");
    });
    const [write] = toolCalls(a.updates);
    const last = callUpdates(a.updates, write.toolCallId).at(-1);
    assert.equal(last.status, "failed");
    assert.match(JSON.stringify(last.content), /read-only/);
    assert.ok(!existsSync(join(env.ws, "y.txt")));
  } finally {
    rmSync(env.root, { recursive: true, force: true });
  }
});

test("cancel ends the turn cancelled within seconds and kills the tool's process", async () => {
  const env = workspace();
  const marker = `${30 + Math.floor(Math.random() * 1000) / 1000}`;
  try {
    const script = `
[[replies]]
kind = "message"
tool_calls = [{ id = "x1", name = "exec_command", arguments = { command = "sleep ${marker}" } }]
[[replies]]
kind = "message"
text = "never"
`;
    let sleeping;
    const started = new Promise((r) => (sleeping = r));
    const a = agent(env, script, { onPermission: () => "allow_always", args: ["-a", "untrusted"] });
    let elapsed;
    await a.run(async (ctx) => {
      await init(ctx);
      const s = await ctx.request(methods.agent.session.new, { cwd: env.ws, mcpServers: [] });
      const prompt = ctx.request(methods.agent.session.prompt, {
        sessionId: s.sessionId,
        prompt: [{ type: "text", text: "Sleep" }],
      });
      const poll = setInterval(() => {
        if (running(`sleep ${marker}`)) {
          clearInterval(poll);
          sleeping();
        }
      }, 100);
      await started;
      const t0 = Date.now();
      await ctx.notify(methods.agent.session.cancel, { sessionId: s.sessionId });
      const r = await prompt;
      elapsed = Date.now() - t0;
      assert.equal(r.stopReason, "cancelled");
    });
    assert.ok(elapsed < 5000, `cancel took ${elapsed} ms`);
    assert.ok(!running(`sleep ${marker}`), "the tool's process survived the cancel");
    const [call] = toolCalls(a.updates);
    assert.equal(callUpdates(a.updates, call.toolCallId).at(-1).status, "failed");
    // The log is drained: it ends with the root's thread.completed, cancelled.
    const sessions = readdirSync(join(env.ws, ".vtcode", "sessions")).filter((d) => !d.startsWith("."));
    const events = rootEvents(env.ws, sessions[0]);
    assert.equal(events.at(-1).type, "thread.completed");
    assert.equal(events.at(-1).subtype, "cancelled");
  } finally {
    rmSync(env.root, { recursive: true, force: true });
  }
});

test("the client's MCP server joins the session; @-mentions are attached through read_file's policy", async () => {
  const env = workspace();
  try {
    const script = `
[[replies]]
kind = "message"
tool_calls = [{ id = "m1", name = "mcp__editor_echo__echo", arguments = { text = "from the editor" } }]
[[replies]]
kind = "message"
text = "Echoed."
`;
    const a = agent(env, script);
    let sessionId;
    await a.run(async (ctx) => {
      await init(ctx);
      const s = await ctx.request(methods.agent.session.new, {
        cwd: env.ws,
        mcpServers: [{ name: "editor echo", command: process.execPath, args: [join(HERE, "echo-server.mjs")], env: [] }],
      });
      sessionId = s.sessionId;
      const r = await ctx.request(methods.agent.session.prompt, {
        sessionId,
        prompt: [
          { type: "text", text: "Echo it" },
          { type: "resource_link", uri: `file://${join(env.ws, "a.txt")}`, name: "a.txt" },
          { type: "resource_link", uri: "file:///etc/hostname", name: "hostname" },
        ],
      });
      assert.equal(r.stopReason, "end_turn");
    });
    const [call] = toolCalls(a.updates);
    assert.equal(call.title, "editor_echo: echo");
    const last = callUpdates(a.updates, call.toolCallId).at(-1);
    assert.equal(last.status, "completed", JSON.stringify(a.updates) + a.stderr());
    assert.match(JSON.stringify(last.content), /echo: from the editor/);
    const asked = rootEvents(env.ws, sessionId).find((e) => e.type === "troupe.user_message").text;
    assert.match(asked, /^Echo it\n\n## Attached context/);
    assert.match(asked, /1\thello/);
    assert.match(asked, /file:\/\/\/etc\/hostname\n\(not attached: .*outside the workspace/);
  } finally {
    rmSync(env.root, { recursive: true, force: true });
  }
});

test("plan mode answers with plan entries; a failed run is a JSON-RPC error with troupe's outcome code", async () => {
  const env = workspace();
  try {
    const script = `
[[replies]]
kind = "message"
tool_calls = [{ id = "w1", name = "write_file", arguments = { path = "z.txt", content = "no" } }]
[[replies]]
kind = "message"
text = "The plan:\\n- Fix the parser\\n- Add a test"
`;
    const a = agent(env, script);
    await a.run(async (ctx) => {
      await init(ctx);
      const s = await ctx.request(methods.agent.session.new, { cwd: env.ws, mcpServers: [] });
      await ctx.request(methods.agent.session.setMode, { sessionId: s.sessionId, modeId: "plan" });
      const r = await ctx.request(methods.agent.session.prompt, {
        sessionId: s.sessionId,
        prompt: [{ type: "text", text: "Plan the fix" }],
      });
      assert.equal(r.stopReason, "end_turn");
      // The script is used up: the next run fails (HTTP 410 from the
      // scripted server), which is an error carrying troupe's outcome.
      await ctx.request(methods.agent.session.setMode, { sessionId: s.sessionId, modeId: "build" });
      await assert.rejects(
        ctx.request(methods.agent.session.prompt, { sessionId: s.sessionId, prompt: [{ type: "text", text: "Go on" }] }),
        (e) => {
          assert.equal(e.data?.subtype, "error_during_execution", JSON.stringify(e));
          assert.ok(e.data.outcome_code, JSON.stringify(e));
          assert.match(e.message, /script exhausted/);
          return true;
        },
      );
    });
    assert.equal(a.permissions.length, 0, "plan mode refuses writes without asking");
    assert.ok(!existsSync(join(env.ws, "z.txt")));
    const plans = a.updates.filter((u) => u.update.sessionUpdate === "plan");
    assert.ok(plans.length > 0, "no plan update");
    assert.deepEqual(
      plans.at(-1).update.entries.map((e) => [e.content, e.status]),
      [["Fix the parser", "pending"], ["Add a test", "pending"]],
    );
  } finally {
    rmSync(env.root, { recursive: true, force: true });
  }
});

test("an MCP server's elicitation reaches the editor as elicitation/create", async () => {
  const env = workspace();
  try {
    const script = `
[[replies]]
kind = "message"
tool_calls = [{ id = "q1", name = "mcp__asker__ask", arguments = {} }]
[[replies]]
kind = "message"
text = "Asked."
`;
    const a = agent(env, script, {
      onPermission: () => "allow_once",
      onElicitation: () => ({ action: "accept", content: { name: "Ada" } }),
    });
    await a.run(async (ctx) => {
      await init(ctx, { elicitation: { form: {} } });
      const s = await ctx.request(methods.agent.session.new, {
        cwd: env.ws,
        mcpServers: [{ name: "asker", command: process.execPath, args: [join(HERE, "echo-server.mjs")], env: [] }],
      });
      const r = await ctx.request(methods.agent.session.prompt, {
        sessionId: s.sessionId,
        prompt: [{ type: "text", text: "Ask for a name" }],
      });
      assert.equal(r.stopReason, "end_turn");
    });
    assert.equal(a.elicitations.length, 1);
    assert.equal(a.elicitations[0].mode, "form");
    assert.match(a.elicitations[0].message, /Your name\?/);
    assert.equal(a.elicitations[0].requestedSchema.properties.name.type, "string");
    const [call] = toolCalls(a.updates);
    const last = callUpdates(a.updates, call.toolCallId).at(-1);
    assert.equal(last.status, "completed", JSON.stringify(last));
    assert.match(JSON.stringify(last.content), /elicited: accept .*Ada/);
  } finally {
    rmSync(env.root, { recursive: true, force: true });
  }
});
