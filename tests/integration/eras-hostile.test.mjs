// A hostile 2026-07-28 backend (and client) against the era bridges: each broken input_required
// answer fails its own call with a sentence that says what was wrong, and the shim serves on.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { INIT, MCP_LAZY, RawPeer, SHIMD, TESTS, cleanupPeers } from "./lib/env.mjs";

after(cleanupPeers);

const dir = mkdtempSync(join(tmpdir(), "mcp-lazy-eras-hostile-"));
const HOSTILE = join(TESTS, "servers/hostile-modern.mjs");
const direct = (m) => ["--manifest", m, "--activation=direct", "--shimd", SHIMD];
function manifest(name, text) {
  const p = join(dir, name);
  writeFileSync(p, text);
  return p;
}
const TOOLS = ["echo", "array", "many", "badparams", "unknown", "notobject"];
const hostile = manifest(
  "hostile.yaml",
  `backends:
  hostile:
    command: [node, ${HOSTILE}]
tools:
${TOOLS.map((t) => `  - {name: ${t}, backend: hostile, input_schema: {type: object}}\n`).join("")}`,
);
const CALL = (id, name, args = {}) => ({ jsonrpc: "2.0", id, method: "tools/call", params: { name, arguments: args } });
const text = (r) => r.result?.content?.[0]?.text ?? JSON.stringify(r);

// A handshake-era client (the shim bridges for it), with every input capability declared.
async function legacyClient() {
  const p = new RawPeer(MCP_LAZY, direct(hostile));
  assert.ok((await p.request(INIT("2025-06-18", { roots: {}, elicitation: {}, sampling: {} }))).result);
  p.send({ jsonrpc: "2.0", method: "notifications/initialized" });
  return p;
}

test("inputRequests that is not an object fails that call, and the shim serves on", async () => {
  const p = await legacyClient();
  const r = await p.request(CALL(1, "array"), 30000);
  assert.equal(r.id, 1);
  assert.equal(r.result.isError, true, JSON.stringify(r));
  assert.match(text(r), /backend 'hostile' answered input_required with inputRequests that is not an object/);
  assert.equal(text(await p.request(CALL(2, "echo", { message: "still" }))), "echo: still");
  assert.doesNotMatch(p.stderr, /exited|signal/);
  await p.close();
});
