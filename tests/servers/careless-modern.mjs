#!/usr/bin/env node
// A 2026-07-28 server that asks for input whatever the client declared (the SDK's server would
// refuse with -32021 itself): to see mcp-lazy hold the line. It says on stderr what it got.
import { createInterface } from "node:readline";

const send = (m) => process.stdout.write(JSON.stringify(m) + "\n");
const meta = { "io.modelcontextprotocol/serverInfo": { name: "careless", version: "1" } };
createInterface({ input: process.stdin }).on("line", (line) => {
  const m = JSON.parse(line);
  process.stderr.write(`careless got ${m.method ?? "a response"}${m.params?._meta?.["io.modelcontextprotocol/logLevel"] ? ` at ${m.params._meta["io.modelcontextprotocol/logLevel"]}` : ""}\n`);
  if (m.id === undefined) return;
  if (m.method === "server/discover")
    return send({ jsonrpc: "2.0", id: m.id, result: { resultType: "complete", supportedVersions: ["2026-07-28"], capabilities: { tools: {} }, ttlMs: 0, cacheScope: "public", _meta: meta } });
  if (m.method === "tools/list")
    return send({ jsonrpc: "2.0", id: m.id, result: { resultType: "complete", tools: [{ name: "ask", inputSchema: { type: "object" } }], ttlMs: 0, cacheScope: "public", _meta: meta } });
  if (m.method === "tools/call" && m.params?.name === "plain")
    return send({ jsonrpc: "2.0", id: m.id, result: { resultType: "complete", content: [{ type: "text", text: "plain" }], _meta: meta } });
  if (m.method === "tools/call")
    return send({ jsonrpc: "2.0", id: m.id, result: { resultType: "input_required", inputRequests: { q: { method: "elicitation/create", params: { message: "?", requestedSchema: { type: "object", properties: {} } } }, r: { method: "roots/list" } }, requestState: "s", _meta: meta } });
  send({ jsonrpc: "2.0", id: m.id, error: { code: -32601, message: "Method not found" } });
});
