// A minimal MCP server (stdio, newline-delimited JSON-RPC, no dependency)
// for acp.test.mjs: a read-only tool, `echo`, answering its `text`, and
// `ask`, which elicits a name from the user (elicitation/create, a form)
// and answers with what came back. The client (an editor) passes it in
// session/new's mcpServers.
import { createInterface } from "node:readline";

const send = (msg) => process.stdout.write(JSON.stringify(msg) + "\n");

let asking; // the tools/call waiting for the elicitation's answer

createInterface({ input: process.stdin }).on("line", (line) => {
  let msg;
  try {
    msg = JSON.parse(line);
  } catch {
    return;
  }
  if (msg.id === undefined) return; // a notification
  if (msg.id === "elicit-1" && msg.method === undefined) {
    const r = msg.result ?? {};
    send({
      jsonrpc: "2.0",
      id: asking,
      result: { content: [{ type: "text", text: `elicited: ${r.action} ${JSON.stringify(r.content ?? {})}` }] },
    });
    return;
  }
  switch (msg.method) {
    case "initialize":
      send({
        jsonrpc: "2.0",
        id: msg.id,
        result: {
          protocolVersion: msg.params?.protocolVersion ?? "2025-06-18",
          capabilities: { tools: {} },
          serverInfo: { name: "echo", version: "1.0.0" },
        },
      });
      break;
    case "tools/list":
      send({
        jsonrpc: "2.0",
        id: msg.id,
        result: {
          tools: [
            {
              name: "echo",
              description: "Echoes its text",
              inputSchema: { type: "object", properties: { text: { type: "string" } }, required: ["text"] },
              annotations: { readOnlyHint: true },
            },
            {
              name: "ask",
              description: "Asks the user for a name",
              inputSchema: { type: "object", properties: {} },
            },
          ],
        },
      });
      break;
    case "tools/call":
      if (msg.params.name === "ask") {
        asking = msg.id;
        send({
          jsonrpc: "2.0",
          id: "elicit-1",
          method: "elicitation/create",
          params: {
            mode: "form",
            message: "Your name?",
            requestedSchema: { type: "object", properties: { name: { type: "string" } }, required: ["name"] },
          },
        });
        break;
      }
      send({
        jsonrpc: "2.0",
        id: msg.id,
        result: { content: [{ type: "text", text: `echo: ${msg.params.arguments.text}` }] },
      });
      break;
    default:
      send({ jsonrpc: "2.0", id: msg.id, error: { code: -32601, message: "method not found" } });
  }
});
