#!/usr/bin/env node
// A 2026-07-28 server whose input_required answers break the rules a hostile backend could break, one
// tool each (the tool's name says how), and one plain tool to show the pooled backend still serves.
import { createInterface } from "node:readline";

const send = (m) => process.stdout.write(JSON.stringify(m) + "\n");
const meta = { "io.modelcontextprotocol/serverInfo": { name: "hostile-modern", version: "1" } };
const complete = (id, text) => send({ jsonrpc: "2.0", id, result: { resultType: "complete", content: [{ type: "text", text }] } });
const ask = (id, inputRequests) => send({ jsonrpc: "2.0", id, result: { resultType: "input_required", inputRequests, requestState: "s" } });
const roots = (n) => Object.fromEntries(Array.from({ length: n }, (_, k) => [`r${k}`, { method: "roots/list" }]));

createInterface({ input: process.stdin }).on("line", (line) => {
  const m = JSON.parse(line);
  if (m.id === undefined) return;
  if (m.method === "server/discover")
    return send({ jsonrpc: "2.0", id: m.id, result: { resultType: "complete", supportedVersions: ["2026-07-28"], capabilities: { tools: {} }, ttlMs: 0, cacheScope: "public", _meta: meta } });
  if (m.method !== "tools/call") return send({ jsonrpc: "2.0", id: m.id, error: { code: -32601, message: "Method not found" } });
  const { name, arguments: args = {} } = m.params;
  const answered = m.params.inputResponses;
  if (name === "echo") return complete(m.id, `echo: ${args.message}`);
  if (answered) return complete(m.id, `answered: ${Object.keys(answered).length}`);
  if (name === "array") return ask(m.id, [{ method: "roots/list" }]);
  if (name === "many") return ask(m.id, roots(args.n));
  if (name === "badparams") return ask(m.id, { q: { method: "elicitation/create", params: "x" } });
  if (name === "unknown") return ask(m.id, { q: { method: "x/unknown", params: {} } });
  if (name === "notobject") return ask(m.id, { q: "roots/list" });
  send({ jsonrpc: "2.0", id: m.id, error: { code: -32602, message: `no tool ${name}` } });
});
