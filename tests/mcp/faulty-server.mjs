// A deliberately faulty MCP server (stdio, newline-delimited JSON-RPC) for
// tests/e2e/mcp.rs: `malformed` answers with a result that is not a
// CallToolResult, `crash` exits in the middle of the call, `grow` adds the
// tool `added` and announces it (notifications/tools/list_changed) before
// it answers, `hang` never answers. With `--stay` it keeps running after
// its stdin closes (so only troupe killing it ends it).
import { createInterface } from "node:readline";

const send = (msg) => process.stdout.write(JSON.stringify(msg) + "\n");
const tool = (name, description) => ({
  name,
  description,
  inputSchema: { type: "object", properties: {} },
});

let grown = false;
if (process.argv.includes("--stay")) setInterval(() => {}, 1 << 30);

createInterface({ input: process.stdin }).on("line", (line) => {
  let msg;
  try {
    msg = JSON.parse(line);
  } catch {
    return;
  }
  if (msg.id === undefined) return; // a notification
  switch (msg.method) {
    case "initialize":
      send({
        jsonrpc: "2.0",
        id: msg.id,
        result: {
          protocolVersion: msg.params.protocolVersion,
          capabilities: { tools: {} },
          serverInfo: { name: "faulty", version: "1.0.0" },
        },
      });
      break;
    case "tools/list":
      send({
        jsonrpc: "2.0",
        id: msg.id,
        result: {
          tools: [
            tool("malformed", "Answers with a malformed result"),
            tool("crash", "Exits during the call"),
            tool("grow", "Adds the tool `added`"),
            tool("hang", "Never answers"),
            ...(grown ? [tool("added", "Added by grow")] : []),
          ],
        },
      });
      break;
    case "tools/call":
      if (msg.params.name === "crash") process.exit(3);
      if (msg.params.name === "hang") break;
      if (msg.params.name === "grow") {
        grown = true;
        send({ jsonrpc: "2.0", method: "notifications/tools/list_changed" });
        const answer = { content: [{ type: "text", text: "grown" }] };
        setTimeout(() => send({ jsonrpc: "2.0", id: msg.id, result: answer }), 300);
        break;
      }
      if (msg.params.name === "added") {
        send({ jsonrpc: "2.0", id: msg.id, result: { content: [{ type: "text", text: "added works" }] } });
        break;
      }
      send({ jsonrpc: "2.0", id: msg.id, result: { content: "not a list", isError: "maybe" } });
      break;
    default:
      send({ jsonrpc: "2.0", id: msg.id, error: { code: -32601, message: "method not found" } });
  }
});
