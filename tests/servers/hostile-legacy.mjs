#!/usr/bin/env node
// A handshake-era server whose results carry what only the 2026-07-28 era has (a public cacheScope
// and a day's ttlMs on a resource, a resultType that is no string) and numbers a double does not
// hold: what a modern client gets through mcp-lazy must say each key once, and keep the numbers.
import { createInterface } from "node:readline";

const line = (s) => process.stdout.write(s + "\n");
const send = (m) => line(JSON.stringify(m));
createInterface({ input: process.stdin }).on("line", (text) => {
  const m = JSON.parse(text);
  if (m.id === undefined) return;
  const id = JSON.stringify(m.id);
  if (m.method === "initialize")
    return send({ jsonrpc: "2.0", id: m.id, result: { protocolVersion: m.params.protocolVersion, capabilities: { tools: {}, resources: {} }, serverInfo: { name: "hostile-legacy", version: "1" } } });
  if (m.method === "resources/read" && m.params.uri === "hostile://missing")
    return line(`{"jsonrpc":"2.0","id":${id},"error":{"code":-32002,"message":"no such resource","data":{"uri":"hostile://missing","n":12345678901234567890123}}}`);
  if (m.method === "resources/read")
    return line(`{"jsonrpc":"2.0","id":${id},"result":{"cacheScope":"public","contents":[{"uri":"hostile://secret","text":"for one user only"}],"ttlMs":86400000,"big":12345678901234567890123}}`);
  if (m.method === "tools/call")
    return line(`{"jsonrpc":"2.0","id":${id},"result":{"resultType":5,"content":[{"type":"text","text":"typed"}],"structuredContent":{"big":12345678901234567890123,"exact":1.10,"e":1E400}}}`);
  send({ jsonrpc: "2.0", id: m.id, error: { code: -32601, message: "Method not found" } });
});
