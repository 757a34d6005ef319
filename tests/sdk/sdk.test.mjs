// troupe driven by the real Codex TypeScript SDK (@openai/codex-sdk, pinned
// in package-lock.json): the SDK spawns `troupe exec --experimental-json
// ...` (codexPathOverride) against the scripted model server, started here
// as `troupe mock-llm`. Run by .ci/run:
//
//   TROUPE_BIN=target/debug/troupe node --test tests/sdk/
//
// See docs/events.md, "Driving troupe from the Codex SDK".

import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { mkdirSync, mkdtempSync, writeFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

import { Codex } from "@openai/codex-sdk";

const BIN = process.env.TROUPE_BIN;
if (!BIN) {
  throw new Error("set TROUPE_BIN to the troupe binary (e.g. target/debug/troupe)");
}
const TROUPE = resolve(BIN);

/** Starts `troupe mock-llm` on `script`; resolves to { url, stop }. */
async function mockLlm(dir, script) {
  const path = join(dir, "script.json");
  writeFileSync(path, JSON.stringify(script));
  const child = spawn(TROUPE, ["mock-llm", "--script", path, "--listen", "127.0.0.1:0"], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  const lines = createInterface({ input: child.stdout });
  const first = await new Promise((ok, fail) => {
    child.once("error", fail);
    child.once("exit", (code) => fail(new Error(`mock-llm exited with ${code}`)));
    lines.once("line", ok);
  });
  const m = /^listening on (http:\/\/\S+)$/.exec(first);
  assert.ok(m, `mock-llm's first line is not its address: ${first}`);
  child.removeAllListeners("exit");
  return {
    url: `${m[1]}/v1`,
    stop: () =>
      new Promise((ok) => {
        child.once("exit", ok);
        child.kill("SIGINT");
      }),
  };
}

/** A workspace, a scripted server and a Codex client pointed at both. */
async function setup(t, script, troupeToml) {
  const dir = mkdtempSync(join(tmpdir(), "troupe-sdk-"));
  const ws = join(dir, "ws");
  mkdirSync(ws);
  const server = await mockLlm(dir, script);
  t.after(async () => {
    await server.stop();
    rmSync(dir, { recursive: true, force: true });
  });
  if (troupeToml) {
    writeFileSync(join(ws, "troupe.toml"), troupeToml);
  }
  // The key travels as CODEX_API_KEY, as with Codex itself.
  const codex = new Codex({ codexPathOverride: TROUPE, baseUrl: server.url, apiKey: "sk-sdk-test" });
  const options = { workingDirectory: ws, skipGitRepoCheck: true, model: "scripted" };
  return { codex, ws, options };
}

const usage = (input_tokens, output_tokens, cached_input_tokens = 0) => ({
  input_tokens,
  output_tokens,
  cached_input_tokens,
});

test("a text answer: final response, items and the run's usage", async (t) => {
  const { codex, options } = await setup(t, {
    replies: [{ kind: "message", text: "Hello from troupe.", usage: usage(120, 9, 20) }],
  });
  const thread = codex.startThread(options);
  const turn = await thread.run("Say hello.");
  assert.equal(turn.finalResponse, "Hello from troupe.");
  assert.ok(turn.items.some((i) => i.type === "agent_message" && i.text === "Hello from troupe."));
  assert.equal(turn.usage.input_tokens, 120);
  assert.equal(turn.usage.cached_input_tokens, 20);
  assert.equal(turn.usage.output_tokens, 9);
  assert.match(thread.id, /^[0-9a-f-]{36}$/);
});

test("a tool run: exec_command's output is among the items; usage is the run's total", async (t) => {
  const { codex, options } = await setup(t, {
    replies: [
      {
        kind: "message",
        text: "Running it.",
        tool_calls: [{ id: "call_1", name: "exec_command", arguments: { command: "printf '%s-%s' abc xyz" } }],
        usage: usage(300, 15),
      },
      { kind: "message", text: "The command printed abc-xyz.", usage: usage(450, 11) },
    ],
  });
  const turn = await codex.startThread(options).run("Run the command.");
  assert.equal(turn.finalResponse, "The command printed abc-xyz.");
  // The command's output reached an item (troupe's tool_output, or a
  // command_execution's aggregated_output), not only the model's text.
  const outputs = turn.items.filter((i) => i.type !== "agent_message").map((i) => JSON.stringify(i));
  assert.ok(outputs.some((s) => s.includes("abc-xyz")), JSON.stringify(turn.items));
  assert.equal(turn.usage.input_tokens, 750);
  assert.equal(turn.usage.output_tokens, 26);
});

test("a failed run throws with troupe's error message", async (t) => {
  const boom = { error: { message: "the scripted provider is down" } };
  const { codex, options } = await setup(
    t,
    {
      replies: [
        { kind: "http_error", status: 500, body: JSON.stringify(boom) },
        { kind: "http_error", status: 500, body: JSON.stringify(boom) },
      ],
    },
    "[providers.openai]\nmax_retries = 1\ninitial_backoff_ms = 10\n",
  );
  const thread = codex.startThread(options);
  await assert.rejects(thread.run("Hello?"), (e) => {
    assert.match(e.message, /model call failed/);
    assert.match(e.message, /500/);
    // troupe's message, from turn.failed, not the SDK's exit-code report.
    assert.doesNotMatch(e.message, /Codex Exec exited/);
    return true;
  });
});

test("a resumed thread: a second run() continues it, and so does resumeThread(id)", async (t) => {
  const { codex, options } = await setup(t, {
    replies: [
      { kind: "message", text: "Noted: the number is 7.", usage: usage(50, 6) },
      { kind: "message", text: "Doubled, it is 14.", usage: usage(90, 5, 40) },
      { kind: "message", text: "Plus one, 15.", usage: usage(130, 4) },
    ],
  });
  const thread = codex.startThread(options);
  const first = await thread.run("Remember the number 7.");
  assert.equal(first.finalResponse, "Noted: the number is 7.");
  const id = thread.id;
  const second = await thread.run("Double it.");
  assert.equal(thread.id, id, "the same thread");
  assert.equal(second.finalResponse, "Doubled, it is 14.");
  // Usage is the second run's own, not the thread's.
  assert.equal(second.usage.input_tokens, 90);
  assert.equal(second.usage.cached_input_tokens, 40);
  assert.equal(second.usage.output_tokens, 5);
  const again = codex.resumeThread(id, options);
  const third = await again.run("Add one.");
  assert.equal(again.id, id);
  assert.equal(third.finalResponse, "Plus one, 15.");
  assert.equal(third.usage.input_tokens, 130);
});
