// The live page of `troupe serve` (GET /) in a real headless browser:
// Debian's chromium driven by playwright-core (pinned in package-lock.json;
// it never downloads a browser). Offline: sessions are scripted. Run by
// .ci/run after the Rust tests:
//
//   TROUPE_BIN=target/debug/troupe node --test tests/browser/
//
// CHROMIUM overrides /usr/bin/chromium; SCREENSHOT_DIR overrides
// target/browser. See docs/serve.md, "The browser test".

import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn, execFileSync } from "node:child_process";
import { createInterface } from "node:readline";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

const here = dirname(fileURLToPath(import.meta.url));
const repo = resolve(here, "..", "..");
const troupeBin = process.env.TROUPE_BIN;
const chromiumBin = process.env.CHROMIUM || "/usr/bin/chromium";
const shotDir = process.env.SCREENSHOT_DIR || join(repo, "target", "browser");

// The root delegates to a subagent (its own route, matched by the task's
// marker), which runs a command and hands off with a boundary status.
const delegating = `
[[routes]]
when = "marker B-15"
replies = [
  { kind = "message", text = "Writing the notes.", tool_calls = [{ id = "s1", name = "exec_command", arguments = { command = "echo notes > notes.txt" } }], usage = { input_tokens = 300, output_tokens = 20 } },
  { kind = "message", tool_calls = [{ id = "s2", name = "handoff", arguments = { state_summary = "Wrote notes.txt.", boundary_status = [{ name = "write notes.txt", status = "done" }, { name = "review the notes", status = "not_started", note = "left to the root" }], modified_files = ["notes.txt"] } }], usage = { input_tokens = 400, output_tokens = 40 } },
  { kind = "message", text = "notes written", usage = { input_tokens = 450, output_tokens = 5 } },
]

[[routes]]
when = "Delegate the notes"
replies = [
  { kind = "message", text = "Delegating.", tool_calls = [{ id = "r1", name = "spawn_subagent", arguments = { name = "scribe", task = "Write notes.txt (marker B-15)." } }], usage = { input_tokens = 200, output_tokens = 30 } },
  { kind = "message", text = "The scribe wrote notes.txt; all done.", usage = { input_tokens = 500, output_tokens = 12 } },
]
`;

// A model that takes 4 s per reply, for 100 commands: aborted long before.
const slow = `[rule]
tool = "exec_command"
arguments = { command = "echo step >> steps.txt" }
until_tool_results = 100
final_text = "done"
delay_ms = 4000
`;

// A model that runs one command, which asks under approval_policy
// untrusted; its subject holds markup, shown as text.
const asking = `
[[replies]]
kind = "message"
text = "Writing the approved file."
tool_calls = [{ id = "a1", name = "exec_command", arguments = { command = "echo '<b>ok</b>' > approved.txt" } }]

[[replies]]
kind = "message"
text = "approved.txt written"
`;

function workspace() {
  const ws = mkdtempSync(join(tmpdir(), "troupe-browser-"));
  writeFileSync(join(ws, "README.md"), "a workspace\n");
  const git = (...args) =>
    execFileSync("git", args, {
      cwd: ws,
      stdio: "ignore",
      env: {
        ...process.env,
        GIT_AUTHOR_NAME: "t", GIT_AUTHOR_EMAIL: "t@example.com",
        GIT_COMMITTER_NAME: "t", GIT_COMMITTER_EMAIL: "t@example.com",
      },
    });
  git("init", "-q");
  git("add", "-A");
  git("commit", "-q", "-m", "init");
  return ws;
}

// `troupe serve --listen 127.0.0.1:0`; resolves with its base URL.
function serve(ws) {
  const env = { ...process.env, TROUPE_LOG: "warn" };
  delete env.TROUPE_SERVE_TOKEN;
  const child = spawn(troupeBin, ["serve", "--listen", "127.0.0.1:0", "--workspace", ws], {
    env,
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stderr = "";
  child.stderr.on("data", (d) => { stderr += d; });
  const base = new Promise((ok, fail) => {
    const lines = createInterface({ input: child.stdout });
    lines.once("line", (line) => {
      const m = /^listening on (http:\/\/\S+)$/.exec(line.trim());
      if (m) ok(m[1]); else fail(new Error(`serve's first line: ${JSON.stringify(line)}`));
    });
    child.once("exit", (code) => fail(new Error(`serve exited ${code}: ${stderr}`)));
  });
  return { child, base, stderr: () => stderr };
}

async function startSession(base, body) {
  const r = await fetch(`${base}/v1/sessions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  const j = await r.json();
  assert.equal(r.status, 201, JSON.stringify(j));
  return j.session_id;
}

const cell = (page, agent, field) =>
  page.locator(`#tree tr[data-agent="${agent}"] td[data-field="${field}"]`);

test("the live page shows the agent tree to its end and aborts a session", { timeout: 90_000 }, async (t) => {
  assert.ok(troupeBin, "set TROUPE_BIN to the built troupe binary (e.g. target/debug/troupe)");
  assert.ok(existsSync(chromiumBin), `no chromium at ${chromiumBin}: apt-get install chromium (or set CHROMIUM)`);
  const ws = workspace();
  const server = serve(ws);
  t.after(() => { server.child.kill("SIGKILL"); rmSync(ws, { recursive: true, force: true }); });
  const base = await server.base;

  const browser = await chromium.launch({
    executablePath: chromiumBin,
    headless: true,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
  });
  t.after(() => browser.close());
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  const pageErrors = [];
  page.on("pageerror", (e) => pageErrors.push(String(e)));

  // --- a root and a subagent, watched to their final state ---------------
  const done = await startSession(base, { prompt: "Delegate the notes to a subagent.", script: delegating });
  await page.goto(`${base}/#${done}`);
  await cell(page, "session/root", "state").filter({ hasText: /^success$/ }).waitFor({ timeout: 30_000 });
  await page.getByText("session completed: success").waitFor();

  const rows = page.locator("#tree tbody tr");
  const agents = await rows.evaluateAll((trs) => trs.map((tr) => tr.dataset.agent));
  // The supervision tree's own actors (session, session/drain) come
  // first; the subagent's row follows the root's, indented under it.
  const sub = agents.find((a) => a.startsWith("session/root/") && a.includes("scribe"));
  assert.ok(sub, `no scribe subagent row in ${agents}`);
  assert.ok(agents.indexOf(sub) > agents.indexOf("session/root"), `tree rows: ${agents}`);
  const indent = async (a) => (await cell(page, a, "agent").textContent()).search(/[^\u00a0]/);
  assert.ok((await indent(sub)) > (await indent("session/root")), "the subagent is nested under the root");
  assert.equal(await cell(page, "session/root", "role").textContent(), "root");
  assert.equal(await cell(page, sub, "state").textContent(), "success");
  assert.equal(await cell(page, sub, "role").textContent(), "subagent");
  // Every row says what `GET /v1/sessions/{id}` (`sessions show`) says.
  const tree = (await (await fetch(`${base}/v1/sessions/${done}`)).json()).agents;
  assert.deepEqual(agents, tree.map((a) => a.agent_id));
  for (const a of tree) {
    const row = { role: a.role, state: a.state, turn: String(a.turns),
      tokens: String(a.usage.input_tokens + a.usage.output_tokens), restarts: String(a.restarts),
      cost: a.cost_usd == null ? "" : "$" + a.cost_usd.toFixed(4) };
    for (const [field, want] of Object.entries(row)) {
      assert.equal(await cell(page, a.agent_id, field).textContent(), want, `${a.agent_id} ${field}`);
    }
  }
  assert.ok(Number(await cell(page, sub, "tokens").textContent()) > 0, "the subagent's tokens count");

  // Tool calls with their status: the subagent's command and the root's
  // spawn_subagent, both completed.
  // Each agent's items are its own (item ids repeat across agents).
  const tool = (title) => page.locator('[data-testid="entry-tool"]').filter({
    has: page.locator("div.small", { hasText: title }),
  });
  const command = tool(`${sub} · $ echo notes > notes.txt · completed (exit 0)`);
  assert.equal(await command.count(), 1);
  assert.equal(await command.getAttribute("data-status"), "completed");
  const spawnCall = tool("session/root · tool spawn_subagent · completed");
  assert.equal(await spawnCall.count(), 1);
  assert.equal(await spawnCall.getAttribute("data-status"), "completed");
  assert.match(await spawnCall.locator("pre").textContent(), /"name":"scribe"/);
  const handoffCall = tool(`${sub} · tool handoff · completed`);
  assert.equal(await handoffCall.count(), 1);
  // The handoff, with the boundary status of each deliverable.
  const handoff = page.locator('[data-testid="entry-handoff"]');
  assert.equal(await handoff.count(), 1);
  const handoffText = await handoff.textContent();
  assert.match(handoffText, /\[done\] write notes\.txt/);
  assert.match(handoffText, /\[not_started\] review the notes — left to the root/);
  assert.match(await page.locator("#log").textContent(), /all done/);

  mkdirSync(shotDir, { recursive: true });
  await page.screenshot({ path: join(shotDir, "live-page.png"), fullPage: true });

  // --- a waiting session, aborted from the page --------------------------
  const waiting = await startSession(base, { prompt: "wait", script: slow });
  await page.goto(`${base}/#${waiting}`);
  // goto with only a new hash does not reload: make sure the page opened it.
  await page.reload();
  await page.locator("#head b", { hasText: waiting }).waitFor();
  await cell(page, "session/root", "state").filter({ hasText: /^running$/ }).waitFor({ timeout: 20_000 });
  await page.locator("#abort").click();
  await page.getByText("session completed: cancelled").waitFor({ timeout: 20_000 });
  await page.locator("#abort", { hasText: "Aborted" }).waitFor();
  assert.equal(await page.locator("#abort").isDisabled(), true);
  assert.match(await cell(page, "session/root", "state").textContent(), /cancel/);
  // The sessions list shows it too (refreshed every 3 s and after abort).
  await page.locator(`.session[data-id="${waiting}"]`, { hasText: "cancelled" }).waitFor({ timeout: 10_000 });

  const shown = await (await fetch(`${base}/v1/sessions/${waiting}`)).json();
  assert.equal(shown.status, "completed", JSON.stringify(shown));
  assert.equal(shown.subtype, "cancelled", JSON.stringify(shown));
  const first = await (await fetch(`${base}/v1/sessions/${done}`)).json();
  assert.equal(first.subtype, "success", JSON.stringify(first));

  await page.screenshot({ path: join(shotDir, "live-page-aborted.png"), fullPage: true });

  // --- a request approved from the page ----------------------------------
  const asks = await startSession(base, { prompt: "Write the approved file.", script: asking, approval_policy: "untrusted" });
  await page.goto(`${base}/#${asks}`);
  await page.reload();
  await page.locator("#head b", { hasText: asks }).waitFor();
  const box = page.locator("#approvals .approval");
  const approve = box.locator("button.approve");
  await approve.waitFor({ timeout: 20_000 });
  assert.equal(await box.count(), 1);
  const pending = (await (await fetch(`${base}/v1/sessions/${asks}/approvals`)).json()).approvals;
  assert.equal(pending.length, 1, JSON.stringify(pending));
  assert.equal(await box.getAttribute("data-approval"), pending[0].approval_id);
  assert.equal(await box.getAttribute("data-agent"), "session/root");
  // The subject is text: its markup is shown, not rendered.
  assert.equal(await box.locator("pre.subject").textContent(), "echo '<b>ok</b>' > approved.txt");
  assert.equal(await box.locator("pre.subject b").count(), 0);
  assert.match(await box.textContent(), /exec_command/);
  assert.match(await box.locator(".reason").textContent(), /untrusted/);
  await cell(page, "session/root", "state").filter({ hasText: /^waiting_for_approval$/ }).waitFor();
  assert.equal(existsSync(join(ws, "approved.txt")), false, "a waiting command must not run");
  await page.screenshot({ path: join(shotDir, "live-page-approval.png"), fullPage: true });
  await approve.click();
  await page.getByText("session completed: success").waitFor({ timeout: 20_000 });
  assert.equal(await box.count(), 0, "the decided request is gone");
  await page.locator('[data-testid="entry-approval"]', { hasText: "approve by human" }).waitFor();
  assert.equal(await cell(page, "session/root", "state").textContent(), "success");
  assert.equal(readFileSync(join(ws, "approved.txt"), "utf8"), "<b>ok</b>\n");
  const events = readFileSync(join(ws, ".vtcode", "sessions", asks, "events.jsonl"), "utf8")
    .trim().split("\n").map((l) => JSON.parse(l).event);
  const resolved = events.filter((e) => e.type === "troupe.approval_resolved");
  assert.equal(resolved.length, 1, JSON.stringify(resolved));
  assert.equal(resolved[0].approval_id, pending[0].approval_id);
  assert.equal(resolved[0].decision, "approve");
  assert.equal(resolved[0].by, "human");
  assert.equal((await (await fetch(`${base}/v1/sessions/${asks}/approvals`)).json()).approvals.length, 0);

  assert.deepEqual(pageErrors, []);
});
