// Both eras of MCP: the 2026-07-28 test server itself, and the frontend serving modern clients from the manifest.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { INIT, MCP_LAZY, RawPeer, SERVER_SCRIPTS, SHIMD, TESTS, cleanupPeers, descendants, sleep, fileWriter } from "./lib/env.mjs";
import { ENVELOPE, MODERN, MODERN_SERVER, MREQ, connectV2, modernManifest, modernScript, normalise } from "./lib/eras.mjs";

after(cleanupPeers);

const dir = mkdtempSync(join(tmpdir(), "mcp-lazy-eras-"));
const manifest = fileWriter(dir);

const SMALL = `server: {name: small, version: "3.1", instructions: "Be brief."__EXTRA__}
backends:
  b:
    command: [/bin/false]
    socket: ${dir}/nothing-listens-here.sock
    prompts: [{name: p1, description: a prompt}]
tools:
  - {name: t1, description: one, backend: b, input_schema: {type: object}}
  - {name: t2, description: two, backend: b, input_schema: {type: object}}
`;
const small = manifest("small.yaml", SMALL.replace("__EXTRA__", ""));
const peer = (path = small) => new RawPeer(MCP_LAZY, ["--manifest", path, "--activation=systemd"]);

const everything = manifest(
  "everything.yaml",
  `backends:
  everything:
    command: [node, ${SERVER_SCRIPTS.everything}, stdio]
tools:
  - {name: echo, backend: everything, input_schema: {type: object, properties: {message: {type: string}}}}
  - {name: get-sum, backend: everything, input_schema: {type: object, properties: {a: {type: number}, b: {type: number}}}}
  - {name: get-structured-content, backend: everything, input_schema: {type: object, properties: {location: {type: string}}}}
`,
);

test("the modern test server: every tool kind, a resource and a prompt, to the v2 client in each mode", async () => {
  const results = {};
  for (const mode of ["legacy", "auto", "pin"]) {
    const c = await connectV2(mode, "node", [MODERN_SERVER]);
    assert.equal(c.getNegotiatedProtocolVersion?.() ?? (mode === "legacy" ? "2025-11-25" : MODERN), mode === "legacy" ? "2025-11-25" : MODERN);
    results[mode] = await modernScript(c);
    await c.close();
  }
  assert.deepEqual(results.auto, results.pin);
  assert.equal(results.pin.ask.content[0].text, "ask:the answer? -> forty-two");
  assert.equal(results.pin.think.content[0].text, "model said: forty-two");
  assert.equal(results.pin.progress, "in order"); // how many depends on the SDK's reads (lib/eras.mjs)
  assert.deepEqual(results.pin.add.structuredContent, { sum: 42 });
  // The SDK bridges a legacy client itself (real server-to-client requests): same answers, less the
  // caching hints the handshake era does not have.
  const { ttlMs, cacheScope, ...resource } = results.pin.resource;
  assert.deepEqual([ttlMs, cacheScope], [0, "private"]);
  assert.deepEqual(results.legacy, { ...results.pin, resource });
});

test("the modern test server with {legacy: 'reject'} refuses initialize with -32022 and serves modern requests", async () => {
  const p = new RawPeer("node", [MODERN_SERVER, "--legacy", "reject"]);
  const init = await p.request(INIT("2025-11-25"));
  assert.equal(init.error.code, -32022);
  assert.ok(init.error.data.supported.includes(MODERN));
  const list = await p.request(MREQ(1, "tools/list"));
  assert.ok(list.result.tools.length >= 5);
  await p.close();
});

test("server/discover is answered from the manifest at once, and starts nothing", async () => {
  const p = new RawPeer(MCP_LAZY, ["--manifest", everything, "--activation=direct", "--shimd", SHIMD]);
  const r = await p.request(MREQ("d", "server/discover"));
  assert.deepEqual(r, {
    jsonrpc: "2.0",
    id: "d",
    result: {
      supportedVersions: [MODERN],
      capabilities: { tools: { listChanged: true }, logging: {} },
      resultType: "complete",
      ttlMs: 0,
      cacheScope: "public",
      _meta: { "io.modelcontextprotocol/serverInfo": { name: "mcp-lazy", version: r.result._meta["io.modelcontextprotocol/serverInfo"].version } },
    },
  });
  // The same list as the v2 SDK's dual-era server (it serves initialize too): what an envelope may name.
  const sdk = new RawPeer("node", [MODERN_SERVER]);
  assert.deepEqual((await sdk.request(MREQ("d", "server/discover"))).result.supportedVersions, r.result.supportedVersions);
  await sdk.close();
  await sleep(100);
  assert.deepEqual(descendants(p.child.pid), [], "a probe starts no shim and no backend");
  assert.equal((await p.close()).code, 0);

  const q = peer();
  const s = await q.request(MREQ(1, "server/discover"));
  assert.equal(s.result.instructions, "Be brief.");
  assert.deepEqual(s.result._meta["io.modelcontextprotocol/serverInfo"], { name: "small", version: "3.1" });
  assert.deepEqual(s.result.capabilities, { tools: { listChanged: true }, logging: {}, prompts: { listChanged: true }, completions: {} });
  await q.close();
});

test("modern requests: -32602 for a broken envelope, -32022 for an unknown version, -32601 for removed methods", async () => {
  const p = peer();
  const bad = [
    [{ jsonrpc: "2.0", id: 1, method: "server/discover" }, -32602],
    [{ jsonrpc: "2.0", id: 2, method: "tools/list", params: { _meta: { "io.modelcontextprotocol/protocolVersion": MODERN } } }, -32602],
    [{ jsonrpc: "2.0", id: 3, method: "tools/list", params: { _meta: { "io.modelcontextprotocol/clientCapabilities": {} } } }, -32602],
    [{ jsonrpc: "2.0", id: 4, method: "tools/list", params: { _meta: { ...ENVELOPE(), "io.modelcontextprotocol/clientCapabilities": [] } } }, -32602],
    [{ jsonrpc: "2.0", id: 5, method: "tools/list", params: { _meta: { ...ENVELOPE(), "io.modelcontextprotocol/clientInfo": "x" } } }, -32602],
    [MREQ(6, "ping"), -32601],
    [MREQ(7, "logging/setLevel", { level: "debug" }), -32601],
    [MREQ(8, "tasks/list"), -32601],
  ];
  for (const [req, code] of bad) {
    const r = await p.request(req);
    assert.equal(r.error?.code, code, JSON.stringify(req));
    assert.equal(r.id, req.id);
  }
  for (const version of ["1900-01-01", "2025-11-25"]) {
    const r = await p.request({ jsonrpc: "2.0", id: 9, method: "server/discover", params: { _meta: ENVELOPE({}, version) } });
    assert.deepEqual(r.error.data, { supported: [MODERN], requested: version });
    assert.equal(r.error.code, -32022);
    // What the error says is supported works when retried (a handshake version in _meta is refused:
    // listing one here sent a client that retries with it round in circles).
    for (const v of r.error.data.supported) {
      const again = await p.request({ jsonrpc: "2.0", id: 9, method: "tools/list", params: { _meta: ENVELOPE({}, v) } });
      assert.ok(again.result, `${v}: ${JSON.stringify(again)}`);
    }
  }
  // The handshake era is untouched on the same pipe.
  assert.deepEqual((await p.request({ jsonrpc: "2.0", id: 10, method: "ping" })).result, {});
  assert.equal((await p.close()).code, 0);
});

test("lists from the manifest carry resultType, ttlMs and cacheScope for modern requests only; both are configurable", async () => {
  const p = peer();
  const modern = await p.request(MREQ(1, "tools/list"));
  assert.equal(modern.result.resultType, "complete");
  assert.equal(modern.result.ttlMs, 0);
  assert.equal(modern.result.cacheScope, "public");
  assert.deepEqual(modern.result._meta, { "io.modelcontextprotocol/serverInfo": { name: "small", version: "3.1" } });
  const prompts = await p.request(MREQ(2, "prompts/list"));
  assert.deepEqual(prompts.result.prompts, [{ name: "p1", description: "a prompt" }]);
  assert.equal(prompts.result.resultType, "complete");
  await p.request(INIT());
  const legacy = await p.request({ jsonrpc: "2.0", id: 3, method: "tools/list" });
  assert.deepEqual(Object.keys(legacy.result), ["tools"]);
  assert.deepEqual(legacy.result.tools, modern.result.tools);
  await p.close();

  const tuned = manifest("tuned.yaml", SMALL.replace("__EXTRA__", ", cache_ttl: 5m, cache_scope: private"));
  const q = peer(tuned);
  for (const method of ["tools/list", "server/discover", "prompts/list"]) {
    const r = await q.request(MREQ(1, method));
    assert.equal(r.result.ttlMs, 300000, method);
    assert.equal(r.result.cacheScope, "private", method);
  }
  await q.close();
  const wrong = manifest("wrong.yaml", SMALL.replace("__EXTRA__", ", cache_ttl: soon, cache_scope: everyone"));
  const w = new RawPeer(MCP_LAZY, ["check", wrong]);
  await w.exitWithin();
  assert.match(w.stderr, /cache_ttl 'soon' is not a duration/);
  assert.match(w.stderr, /cache_scope must be public or private/);
});

test("subscriptions/listen: acknowledged with its id, a manifest reload reaches it, notifications/cancelled ends it", async () => {
  const path = manifest("listen.yaml", SMALL.replace("__EXTRA__", ""));
  const p = peer(path);
  p.send(MREQ("sub-1", "subscriptions/listen", { notifications: { toolsListChanged: true, resourcesListChanged: true, resourceSubscriptions: ["x://y"] } }));
  p.send(MREQ(7, "subscriptions/listen", { notifications: { promptsListChanged: true } }));
  const acks = await p.next(2);
  assert.deepEqual(acks[0], {
    jsonrpc: "2.0",
    method: "notifications/subscriptions/acknowledged",
    params: { notifications: { toolsListChanged: true }, _meta: { "io.modelcontextprotocol/subscriptionId": "sub-1" } },
  });
  assert.deepEqual(acks[1].params, { notifications: { promptsListChanged: true }, _meta: { "io.modelcontextprotocol/subscriptionId": 7 } });
  // The same id again while the stream is open is refused.
  assert.equal((await p.request(MREQ(7, "subscriptions/listen", {}))).error.code, -32600);

  const next = join(dir, "listen.next");
  writeFileSync(next, SMALL.replace("__EXTRA__", "").replace("description: two", "description: changed"));
  renameSync(next, path);
  const [changed] = await p.next(1);
  assert.deepEqual(changed, {
    jsonrpc: "2.0",
    method: "notifications/tools/list_changed",
    params: { _meta: { "io.modelcontextprotocol/subscriptionId": "sub-1" } },
  });

  p.send({ jsonrpc: "2.0", method: "notifications/cancelled", params: { requestId: "sub-1" } });
  writeFileSync(next, SMALL.replace("__EXTRA__", "").replace("description: two", "description: again").replace("a prompt", "another"));
  renameSync(next, path);
  const [prompts] = await p.next(1);
  assert.deepEqual(prompts.params, { _meta: { "io.modelcontextprotocol/subscriptionId": 7 } });
  assert.equal(prompts.method, "notifications/prompts/list_changed");
  // The cancelled stream heard nothing: the next message is the answer to this request.
  assert.equal((await p.request(MREQ(8, "tools/list"))).id, 8);
  await p.close();
});

test("a Python-style probe on the same pipe, then the handshake, is served as the handshake era", async () => {
  const p = peer();
  const probe = await p.request(MREQ(0, "server/discover"));
  assert.ok(probe.result.supportedVersions.includes(MODERN));
  const init = await p.request({ ...INIT("2025-11-25"), id: 1 });
  assert.equal(init.result.protocolVersion, "2025-11-25");
  p.send({ jsonrpc: "2.0", method: "notifications/initialized" });
  const list = await p.request({ jsonrpc: "2.0", id: 2, method: "tools/list" });
  assert.deepEqual(list.result.tools.map((t) => t.name), ["t1", "t2"]);
  assert.equal((await p.request({ jsonrpc: "2.0", id: 3, method: "ping" })).result !== undefined, true);
  await p.close();
});

test("the v2 client in auto and pinned modes through mcp-lazy to a handshake-era backend: what a legacy client gets directly", async () => {
  // The reference: the v1 SDK client straight to server-everything.
  const t = new StdioClientTransport({ command: "node", args: [SERVER_SCRIPTS.everything, "stdio"], stderr: "pipe" });
  const legacy = new Client({ name: "legacy", version: "1" });
  await legacy.connect(t);
  const script = async (c) => [
    await c.callTool({ name: "echo", arguments: { message: "hey" } }),
    await c.callTool({ name: "get-sum", arguments: { a: 2, b: 40 } }),
    await c.callTool({ name: "get-structured-content", arguments: { location: "New York" } }),
  ];
  const want = await script(legacy);
  await legacy.close();
  for (const mode of ["auto", "pin"]) {
    const c = await connectV2(mode, MCP_LAZY, ["--manifest", everything, "--activation=direct", "--shimd", SHIMD]);
    assert.equal(c.getNegotiatedProtocolVersion?.() ?? MODERN, MODERN);
    assert.deepEqual(descendants(c.transportPid), [], `${mode}: nothing started before the first call`);
    assert.deepEqual((await script(c)).map(normalise), want, mode);
    await c.close();
  }
});

// The shim driving 2026-07-28 backends (direct activation: the frontend starts the shim itself).
const direct = (m) => ["--manifest", m, "--activation=direct", "--shimd", SHIMD];

test("differential: the modern test server straight and through mcp-lazy, for the v2 client in legacy, auto and pinned modes", async () => {
  const m = await modernManifest(join(dir, "modern.json"));
  for (const mode of ["legacy", "auto", "pin"]) {
    const straight = await connectV2(mode, "node", [MODERN_SERVER]);
    const want = await modernScript(straight);
    await straight.close();
    const through = await connectV2(mode, MCP_LAZY, direct(m));
    assert.deepEqual(await modernScript(through), want, mode);
    assert.match(through.stderrText, /Backend 'modern' speaks 2026-07-28 \(it answered server\/discover\)/);
    await through.close();
  }
});

test("a handshake-era client of a backend that serves only 2026-07-28: mcp-lazy bridges, with what the SDK's own bridge gives", async () => {
  const only = await modernManifest(join(dir, "modern-only.json"), { args: ["--legacy", "reject"] });
  const straight = await connectV2("legacy", "node", [MODERN_SERVER]);
  const want = await modernScript(straight);
  await straight.close();
  // Without mcp-lazy this pairing does not work at all.
  const refused = await connectV2("legacy", "node", [MODERN_SERVER, "--legacy", "reject"]).catch((e) => e);
  assert.ok(refused instanceof Error, "a legacy client cannot use a modern-only server directly");
  const through = await connectV2("legacy", MCP_LAZY, direct(only));
  assert.deepEqual(await modernScript(through), want);
  assert.deepEqual(through.seen, ["the answer?"], "the elicitation reached the client as a request");
  await through.close();
});

test("protocol: legacy in the manifest drives a dual-era backend through initialize; protocol: modern refuses a handshake-era one clearly", async () => {
  const m = await modernManifest(join(dir, "modern-legacy.json"), { extra: { protocol: "legacy" } });
  const c = await connectV2("pin", MCP_LAZY, direct(m));
  const r = await c.callTool({ name: "echo", arguments: { message: "hey" } });
  assert.deepEqual(r.content, [{ type: "text", text: "Echo: hey" }]);
  assert.doesNotMatch(c.stderrText, /speaks 2026-07-28/);
  await c.close();

  const pinned = manifest(
    "pinned-modern.yaml",
    `backends:
  everything:
    command: [node, ${SERVER_SCRIPTS.everything}, stdio]
    protocol: modern
tools:
  - {name: echo, backend: everything, input_schema: {type: object}}
`,
  );
  const d = await connectV2("legacy", MCP_LAZY, direct(pinned));
  const e = await d.callTool({ name: "echo", arguments: { message: "x" } });
  assert.equal(e.isError, true);
  assert.match(e.content[0].text, /pinned to protocol: modern in the manifest, but did not answer server\/discover as a 2026-07-28 server: Method not found/);
  await d.close();
  const bad = manifest("bad-protocol.yaml", `backends: {b: {command: [x], protocol: newest}}\ntools: []\n`);
  const w = new RawPeer(MCP_LAZY, ["check", bad]);
  await w.exitWithin();
  assert.match(w.stderr, /protocol of backend 'b' must be 'auto', 'modern' or 'legacy', not 'newest'/);
});

test("a handshake-era backend that exits on server/discover is started again and initialized, with no error for the client", async () => {
  const starts = join(dir, "strict-starts");
  const m = manifest(
    "strict.yaml",
    `backends:
  strict:
    command: [node, ${join(TESTS, "servers/strict-legacy.mjs")}]
    env: {STRICT_LEGACY_STARTS: ${starts}}
tools:
  - {name: echo, backend: strict, input_schema: {type: object, properties: {message: {type: string}}}}
  - {name: get-sum, backend: strict, input_schema: {type: object}}
`,
  );
  for (const mode of ["legacy", "pin"]) {
    writeFileSync(starts, "");
    // No place to keep the era learned (eras-map.test.mjs tests that): each run probes.
    const c = await connectV2(mode, MCP_LAZY, direct(m), { env: { XDG_RUNTIME_DIR: "", STATE_DIRECTORY: "", RUNTIME_DIRECTORY: "" } });
    const r = await c.callTool({ name: "echo", arguments: { message: "still here" } });
    assert.deepEqual(r.content, [{ type: "text", text: "Echo: still here" }], mode);
    assert.equal((await c.callTool({ name: "get-sum", arguments: { a: 1, b: 2 } })).isError, undefined);
    assert.match(c.stderrText, /exited with status 3 on server\/discover: a handshake-era server, starting it again/);
    assert.equal(readFileSync(starts, "utf8"), "start\nstart\n", "one probe, one real start");
    await c.close();
  }
});

test("an input_required answer asking for what the request's envelope did not declare becomes -32021", async () => {
  const m = manifest(
    "careless.yaml",
    `backends:
  careless:
    command: [node, ${join(TESTS, "servers/careless-modern.mjs")}]
tools:
  - {name: ask, backend: careless, input_schema: {type: object}}
`,
  );
  const p = new RawPeer(MCP_LAZY, direct(m));
  const refused = await p.request(MREQ(1, "tools/call", { name: "ask", arguments: {} }, { roots: {} }), 30000);
  assert.deepEqual(refused.error.data, { requiredCapabilities: { elicitation: {} } });
  assert.equal(refused.error.code, -32021);
  assert.equal(refused.id, 1);
  const passed = await p.request(MREQ(2, "tools/call", { name: "ask", arguments: {} }, { roots: {}, elicitation: {} }));
  assert.equal(passed.result.resultType, "input_required");
  assert.equal(passed.result.requestState, "s");
  await p.close();
});

test("per-backend mode (--backend): server/discover and lists are that backend's own", async () => {
  const m = manifest(
    "per-backend.yaml",
    `backends:
  b:
    command: [/bin/false]
    socket: ${dir}/nothing-listens-here.sock
    server_info: {name: the-b, version: "9"}
    instructions: B's own.
    capabilities: {tools: {}, prompts: {listChanged: true}}
    prompts: [{name: p1, description: a prompt}]
  c:
    command: [/bin/false]
tools:
  - {name: t1, backend: b, input_schema: {type: object}}
  - {name: t2, backend: c, input_schema: {type: object}}
`,
  );
  const p = new RawPeer(MCP_LAZY, ["--manifest", m, "--backend", "b", "--activation=systemd"]);
  const r = await p.request(MREQ(1, "server/discover"));
  assert.deepEqual(r.result.capabilities, { tools: {}, prompts: { listChanged: true } });
  assert.equal(r.result.instructions, "B's own.");
  assert.deepEqual(r.result._meta["io.modelcontextprotocol/serverInfo"], { name: "the-b", version: "9" });
  const tools = await p.request(MREQ(2, "tools/list"));
  assert.deepEqual(tools.result.tools.map((t) => t.name), ["t1"]);
  assert.deepEqual(tools.result._meta["io.modelcontextprotocol/serverInfo"], { name: "the-b", version: "9" });
  // Its tools list does not announce changes: a listen stream gets only what it does announce.
  p.send(MREQ(3, "subscriptions/listen", { notifications: { toolsListChanged: true, promptsListChanged: true } }));
  const [ack] = await p.next(1);
  assert.deepEqual(ack.params.notifications, { promptsListChanged: true });
  await p.close();
});

test("a handshake-era client's over-long answer to a bridged elicitation fails that call, saying so", async () => {
  const only = await modernManifest(join(dir, "modern-only-long.json"), { args: ["--legacy", "reject"] });
  const p = new RawPeer(MCP_LAZY, [...direct(only), "--max-line-bytes", "4096"]);
  assert.ok((await p.request(INIT("2025-06-18", { elicitation: {} }))).result);
  p.send({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "ask", arguments: { question: "q" } } });
  const [ask] = await p.next(1, 30000);
  assert.equal(ask.method, "elicitation/create", JSON.stringify(ask));
  p.send({ jsonrpc: "2.0", id: ask.id, result: { action: "accept", content: { answer: "x".repeat(8000) } } });
  const [r] = await p.next(1);
  assert.equal(r.id, 1, JSON.stringify(r));
  assert.match(JSON.stringify(r), /longer than the 4096-byte limit/);
  await p.close();
});
