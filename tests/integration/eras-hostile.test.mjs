// Hostile peers of the 2026-07-28 era: a backend's broken input_required answer fails its own call with
// a sentence that says what was wrong, for clients of either era, and the shim serves on; a client's
// ids and envelopes are held to one rule.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { INIT, MCP_LAZY, RawPeer, SHIMD, TESTS, cleanupPeers, fileWriter } from "./lib/env.mjs";
import { MREQ } from "./lib/eras.mjs";

after(cleanupPeers);

const dir = mkdtempSync(join(tmpdir(), "mcp-lazy-eras-hostile-"));
const HOSTILE = join(TESTS, "servers/hostile-modern.mjs");
const direct = (m) => ["--manifest", m, "--activation=direct", "--shimd", SHIMD];
const manifest = fileWriter(dir);
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

test("a modern client gets the same refusals of a broken input_required as the bridge gives a handshake-era one", async () => {
  const p = new RawPeer(MCP_LAZY, direct(hostile));
  const caps = { roots: {}, elicitation: {}, sampling: {} };
  const want = {
    unknown: /backend 'hostile' asked for input of an unknown kind \('x\/unknown'\)/,
    array: /backend 'hostile' answered input_required with inputRequests that is not an object/,
    badparams: /backend 'hostile' asked for input \(elicitation\/create\) with params that are not an object/,
    notobject: /backend 'hostile' asked for input of an unknown kind \('\?'\)/,
  };
  for (const [name, re] of Object.entries(want)) {
    const r = await p.request(MREQ(name, "tools/call", { name, arguments: {} }, caps), 30000);
    assert.equal(r.id, name);
    assert.equal(r.result?.isError, true, JSON.stringify(r));
    assert.equal(r.result.resultType, "complete");
    assert.match(text(r), re);
  }
  // A valid one still passes as it is.
  const ok = await p.request(MREQ("many", "tools/call", { name: "many", arguments: { n: 2 } }, caps));
  assert.equal(ok.result.resultType, "input_required");
  assert.deepEqual(Object.keys(ok.result.inputRequests), ["r0", "r1"]);
  await p.close();
});

test("one id space: a request may not take the id of an open subscriptions/listen stream", async () => {
  const p = new RawPeer(MCP_LAZY, direct(hostile));
  p.send(MREQ(7, "subscriptions/listen", { notifications: {} }));
  assert.equal((await p.next(1))[0].method, "notifications/subscriptions/acknowledged");
  const r = await p.request(MREQ(7, "tools/call", { name: "echo", arguments: { message: "x" } }), 30000);
  assert.equal(r.id, 7);
  assert.equal(r.error?.code, -32600, JSON.stringify(r));
  assert.match(r.error.message, /request id is already used by a subscriptions\/listen stream still open/);
  // Once the stream is cancelled, the id is free again.
  p.send({ jsonrpc: "2.0", method: "notifications/cancelled", params: { requestId: 7 } });
  assert.equal(text(await p.request(MREQ(7, "tools/call", { name: "echo", arguments: { message: "x" } }), 30000)), "echo: x");
  await p.close();
});

test("server/discover with a _meta that is not an object says so", async () => {
  const p = new RawPeer(MCP_LAZY, direct(hostile));
  for (const meta of ["x", 5, [], null]) {
    const r = await p.request({ jsonrpc: "2.0", id: 1, method: "server/discover", params: { _meta: meta } });
    assert.equal(r.error?.code, -32602, JSON.stringify(r));
    assert.equal(r.error.message, "Invalid params: params._meta must be an object", JSON.stringify(meta));
  }
  const none = await p.request({ jsonrpc: "2.0", id: 2, method: "server/discover", params: {} });
  assert.match(none.error.message, /server\/discover needs params._meta with/);
  await p.close();
});

const count = (text, key) => text.split(`"${key}":`).length - 1;

test("a handshake-era backend's answer to a modern request says resultType, ttlMs and cacheScope once, as mcp-lazy means them, and keeps the backend's bytes", async () => {
  const m = manifest(
    "hostile-legacy.yaml",
    `backends:
  legacy:
    command: [node, ${join(TESTS, "servers/hostile-legacy.mjs")}]
    protocol: legacy
    resources: [{uri: "hostile://secret", name: secret}, {uri: "hostile://missing", name: missing}]
tools:
  - {name: typed, backend: legacy, input_schema: {type: object}}
`,
  );
  const p = new RawPeer(MCP_LAZY, direct(m));
  p.send(MREQ(1, "resources/read", { uri: "hostile://secret" }));
  const read = await p.nextLine();
  for (const key of ["resultType", "ttlMs", "cacheScope"]) assert.equal(count(read, key), 1, `${key} once: ${read}`);
  const r = JSON.parse(read).result;
  assert.deepEqual([r.resultType, r.ttlMs, r.cacheScope], ["complete", 0, "private"]);
  assert.deepEqual(r.contents, [{ uri: "hostile://secret", text: "for one user only" }]);
  // Everything else is the backend's bytes: numbers a double does not hold keep their spelling.
  assert.match(read, /"big":12345678901234567890123[,}]/);

  p.send(MREQ(2, "tools/call", { name: "typed", arguments: {} }));
  const call = await p.nextLine();
  assert.equal(count(call, "resultType"), 1, call);
  assert.equal(JSON.parse(call).result.resultType, "complete");
  assert.equal(count(call, "ttlMs") + count(call, "cacheScope"), 0, call);
  assert.match(call, /"structuredContent":\{"big":12345678901234567890123,"exact":1\.10,"e":1E400\}/);
  // Resource not found: -32002 becomes -32602, the rest of the error as the backend wrote it.
  p.send(MREQ(3, "resources/read", { uri: "hostile://missing" }));
  const missing = await p.nextLine();
  assert.equal(missing, '{"jsonrpc":"2.0","id":3,"error":{"code":-32602,"message":"no such resource","data":{"uri":"hostile://missing","n":12345678901234567890123}}}');
  await p.close();
});
