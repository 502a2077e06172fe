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

// The input requests a bridged call sends its client: roots/list, each answered (refused, or left
// unanswered) as how(k) says.
async function answerRoots(p, n, how = () => "answer") {
  const asks = await p.next(n, 30000);
  for (const [k, a] of asks.entries()) {
    assert.equal(a.method, "roots/list", JSON.stringify(a));
    if (how(k) === "refuse") p.send({ jsonrpc: "2.0", id: a.id, error: { code: -32603, message: "no roots here" } });
    else if (how(k) === "answer") p.send({ jsonrpc: "2.0", id: a.id, result: { roots: [] } });
  }
  return asks;
}

test("input requests per round are capped at 16, with an error naming the limit; 16 are served", async () => {
  const p = await legacyClient();
  const r = await p.request(CALL(1, "many", { n: 17 }), 30000);
  assert.equal(r.id, 1, JSON.stringify(r));
  assert.match(text(r), /backend 'hostile' asked for more than 16 inputs in one input_required answer \(mcp-lazy's limit per round\)/);
  p.send(CALL(2, "many", { n: 16 }));
  await answerRoots(p, 16);
  const [done] = await p.next(1, 30000);
  assert.deepEqual([done.id, text(done)], [2, "answered: 16"]);
  await p.close();
});

test("a bridged call that fails withdraws the input requests its client still has, and frees their slots", async () => {
  const p = await legacyClient();
  // Each round: 16 requests, the first refused, the other 15 left unanswered: they are withdrawn.
  // 70 rounds would hold more than the shim's 1024 upcall slots if they were kept.
  for (let round = 0; round < 70; round++) {
    p.send(CALL(round, "many", { n: 16 }));
    const asks = await answerRoots(p, 16, (k) => (k === 0 ? "refuse" : "leave"));
    const [failed, ...withdrawn] = await p.next(16, 30000);
    assert.equal(failed.id, round, JSON.stringify(failed));
    assert.match(text(failed), /the client refused what backend 'hostile' asked \(r0\): no roots here/);
    const ids = (l) => l.sort((a, b) => a[1].localeCompare(b[1]));
    assert.deepEqual(
      ids(withdrawn.map((w) => [w.method, w.params.requestId])),
      ids(asks.slice(1).map((a) => ["notifications/cancelled", a.id])),
    );
  }
  p.send(CALL("last", "many", { n: 2 }));
  await answerRoots(p, 2);
  assert.equal(text((await p.next(1, 30000))[0]), "answered: 2");
  await p.close();
});

test("an input request whose params are not an object fails that call, saying so", async () => {
  const p = await legacyClient();
  const r = await p.request(CALL(1, "badparams"), 30000);
  assert.equal(r.result.isError, true, JSON.stringify(r));
  assert.match(text(r), /backend 'hostile' asked for input \(elicitation\/create\) with params that are not an object/);
  await p.close();
});
