// A 2026-07-28 client of a handshake-era backend: initialized from the envelope, and the backend's
// requests to its client turned into input_required answers with a requestState only mcp-lazy makes
// (MRTR); and the bridge the other way (a handshake-era client of a modern backend): cancellation, bytes.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { ElicitRequestSchema, CreateMessageRequestSchema, ListRootsRequestSchema } from "@modelcontextprotocol/sdk/types.js";
import { INIT, MCP_LAZY, RawPeer, SERVER_SCRIPTS, SHIMD, TESTS, cleanupPeers, sleep, startShimOnSocket, waitFor, fileWriter } from "./lib/env.mjs";
import { ENVELOPE, MODERN, MREQ, connectV2, modernManifest, normalise } from "./lib/eras.mjs";

after(cleanupPeers);

const dir = mkdtempSync(join(tmpdir(), "mcp-lazy-mrtr-"));
const ASKER = join(TESTS, "servers/legacy-asker.mjs");
const direct = (m) => ["--manifest", m, "--activation=direct", "--shimd", SHIMD];
const manifest = fileWriter(dir);

const TOOL = (name, backend) => `  - {name: ${name}, backend: ${backend}, input_schema: {type: object}}\n`;
const askerManifest = (name, extra = "") =>
  manifest(
    name,
    `backends:
  asker:
    command: [node, ${ASKER}]
    env: {LEGACY_ASKER_LOG: ${join(dir, name + ".log")}}
    prompts: [{name: greet, description: Greet someone the user names}]
${extra}tools:
${["echo", "ask", "ask-twice", "ask-both", "think", "roots"].map((t) => TOOL(t, "asker")).join("")}`,
  );
const askerLog = (name) => {
  try {
    return readFileSync(join(dir, name + ".log"), "utf8");
  } catch {
    return "";
  }
};

// The v1 SDK client straight to a handshake-era server: the reference a modern client through
// mcp-lazy must equal.
async function legacyStraight(args, answer = "forty-two") {
  const t = new StdioClientTransport({ command: "node", args, stderr: "pipe" });
  const c = new Client({ name: "legacy", version: "1" }, { capabilities: { elicitation: {}, sampling: {}, roots: {} } });
  c.setRequestHandler(ElicitRequestSchema, async () => ({ action: "accept", content: { answer } }));
  c.setRequestHandler(CreateMessageRequestSchema, async () => ({
    role: "assistant",
    content: { type: "text", text: answer },
    model: "test-model",
    stopReason: "endTurn",
  }));
  c.setRequestHandler(ListRootsRequestSchema, async () => ({ roots: [{ uri: "file:///r", name: "r" }] }));
  await c.connect(t);
  return c;
}

test("a modern request without clientInfo reaches a handshake-era backend, initialized in mcp-lazy's name", async () => {
  const m = manifest(
    "everything.yaml",
    `backends:
  everything:
    command: [node, ${SERVER_SCRIPTS.everything}, stdio]
tools:
${TOOL("echo", "everything")}`,
  );
  const p = new RawPeer(MCP_LAZY, direct(m));
  const meta = ENVELOPE({});
  delete meta["io.modelcontextprotocol/clientInfo"];
  const r = await p.request({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "echo", arguments: { message: "hi" }, _meta: meta } }, 30000);
  assert.deepEqual(r.result, { content: [{ type: "text", text: "Echo: hi" }], resultType: "complete" }, JSON.stringify(r));
  await p.close();
});

// A v2 client like connectV2()'s, also declaring roots; handlers answer from `answers`.
async function v2(mode, command, args, { answers = {}, gate, caps } = {}) {
  const { Client: V2 } = await import("@modelcontextprotocol/client");
  const { StdioClientTransport: V2Stdio } = await import("@modelcontextprotocol/client/stdio");
  const versionNegotiation = mode === "pin" ? { mode: { pin: MODERN } } : { mode };
  const c = new V2({ name: `v2-${mode}`, version: "1.0.0" }, { capabilities: caps ?? { elicitation: {}, sampling: {}, roots: {} }, versionNegotiation });
  c.seen = [];
  c.setRequestHandler("elicitation/create", async (r) => {
    c.seen.push(r.params.message);
    if (gate) await gate();
    return { action: "accept", content: answers.elicit ?? { answer: "forty-two" } };
  });
  c.setRequestHandler("sampling/createMessage", async () => ({
    role: "assistant",
    content: { type: "text", text: answers.sample ?? "forty-two" },
    model: "test-model",
    stopReason: "endTurn",
  }));
  c.rootsAsked = 0;
  c.setRequestHandler("roots/list", async () => (c.rootsAsked++, { roots: [{ uri: answers.root ?? "file:///r", name: "r" }] }));
  const t = new V2Stdio({ command, args, stderr: "pipe" });
  c.stderrText = "";
  t.stderr?.on("data", (d) => (c.stderrText += d));
  await c.connect(t);
  return c;
}

const askerScript = async (c) => ({
  ask: normalise(await c.callTool({ name: "ask", arguments: { question: "the answer?" } })),
  think: normalise(await c.callTool({ name: "think", arguments: { prompt: "say something" } })),
  twice: normalise(await c.callTool({ name: "ask-twice", arguments: {} })),
  both: normalise(await c.callTool({ name: "ask-both", arguments: {} })),
  roots: normalise(await c.callTool({ name: "roots", arguments: {} })),
  prompt: normalise(await c.getPrompt({ name: "greet", arguments: {} })),
});

// SDK clients opened through keep() are closed whatever happens: a failed assertion must not leave
// their children running (the test file would never exit).
async function closing(fn) {
  const open = [];
  try {
    return await fn((c) => (open.push(c), c));
  } finally {
    await Promise.allSettled(open.map((c) => c.close()));
  }
}

test("a v2 client pinned to 2026-07-28 through mcp-lazy to a handshake-era server that asks its client: what a legacy client gets straight", () =>
  closing(async (keep) => {
    const straight = keep(await legacyStraight([ASKER]));
    const want = await askerScript(straight);
    await straight.close();
    assert.equal(want.twice.content[0].text, "forty-two then forty-two");
    const m = askerManifest("asker.yaml");
    for (const mode of ["pin", "auto"]) {
      const c = keep(await v2(mode, MCP_LAZY, direct(m)));
      assert.equal(c.getNegotiatedProtocolVersion?.() ?? MODERN, MODERN);
      assert.deepEqual(await askerScript(c), want, mode);
      assert.deepEqual(c.seen, ["the answer?", "first?", "second?", "user?", "who?"], mode);
      await c.close();
    }
  }));

test("server-everything's elicitation, sampling and roots tools for a v2 client pinned to 2026-07-28: what a legacy client gets straight", async () => {
  const m = manifest(
    "everything-asks.yaml",
    `backends:
  everything:
    command: [node, ${SERVER_SCRIPTS.everything}, stdio]
tools:
${["trigger-elicitation-request", "trigger-sampling-request", "get-roots-list"].map((t) => TOOL(t, "everything")).join("")}`,
  );
  const script = async (c) => [
    await c.callTool({ name: "trigger-elicitation-request", arguments: {} }),
    await c.callTool({ name: "trigger-sampling-request", arguments: { prompt: "hi", maxTokens: 10 } }),
    await c.callTool({ name: "get-roots-list", arguments: {} }),
  ];
  const answers = { elicit: { name: "Ada", check: true, integer: 7 } };
  await closing(async (keep) => {
    const straight = keep(await legacyStraight([SERVER_SCRIPTS.everything, "stdio"]));
    straight.setRequestHandler(ElicitRequestSchema, async () => ({ action: "accept", content: answers.elicit }));
    const want = await script(straight);
    await straight.close();
    assert.match(want[0].content[1].text, /Name: Ada/);
    const c = keep(await v2("pin", MCP_LAZY, direct(m), { answers }));
    assert.deepEqual((await script(c)).map(normalise), want);
  });
});

// mcp-lazy-shimd for the asker on a listening socket of its own (Accept=no, as the shipped units do):
// several frontends are sessions of one shim, as under systemd.
async function askerOnSocket(name, extra = "") {
  const sock = join(mkdtempSync(join(dir, "sock-")), "asker.sock");
  const m = askerManifest(name, `    socket: ${sock}\n    idle_timeout: 10m\n${extra}`);
  const shim = await startShimOnSocket(sock, m, "asker");
  after(() => shim.child.kill("SIGKILL"));
  return {
    manifest: m,
    sock,
    stderr: shim.stderr,
    session: () => new RawPeer(MCP_LAZY, ["--manifest", m, "--activation=systemd"]),
    // A peer on the shim's socket itself, as a frontend is (or any other local program).
    raw: () => new RawPeer("socat", ["-", `UNIX-CONNECT:${sock}`]),
  };
}

const CAPS = { elicitation: {}, sampling: {} };
// The initialize a frontend sends its shim, saying which era its client speaks (era undefined: says nothing).
const SAYS = (era, capabilities = {}) => {
  const init = INIT("2025-11-25", capabilities);
  if (era !== undefined) init.params._meta = { "mcp-lazy/clientEra": era };
  return init;
};
const ASK = (id, question = "q?", caps = CAPS, more = {}) => MREQ(id, "tools/call", { name: "ask", arguments: { question }, ...more }, caps);
const retry = (id, first, state, responses, question = "q?") =>
  ASK(id, question, CAPS, { ...(responses && { inputResponses: responses }), requestState: state, _meta: { progressToken: `p${id}` } });

test("requestState: a made-up, replayed, other session's or other request's is refused; the right one carries the answer", async () => {
  const shim = await askerOnSocket("state.yaml");
  const a = shim.session(), b = shim.session();
  const r1 = await a.request(ASK(1), 30000);
  assert.equal(r1.result.resultType, "input_required", JSON.stringify(r1));
  const [[key, req]] = Object.entries(r1.result.inputRequests);
  assert.equal(req.method, "elicitation/create");
  assert.equal(req.params.message, "q?");
  const state = r1.result.requestState;
  assert.match(state, /^mcp-lazy-mrtr:\d+\.[0-9a-f]{32}$/);
  const answer = { [key]: { action: "accept", content: { answer: "x" } } };
  const refusals = [
    [a, retry(2, r1, state.slice(0, -1) + (state.endsWith("0") ? "1" : "0"), answer), /not the current one/],
    [a, retry(3, r1, "mcp-lazy-mrtr:999999.00000000000000000000000000000000", answer), /names no call of this session/],
    [b, retry(4, r1, state, answer), /names no call of this session/],
    [a, retry(5, r1, state, answer, "another question?"), /belongs to another request/],
    [a, { ...retry(6, r1, state, answer), params: { ...retry(6, r1, state, answer).params, name: "think" } }, /belongs to another request/],
  ];
  for (const [peer, req, why] of refusals) {
    const r = await peer.request(req, 10000);
    assert.equal(r.error?.code, -32602, JSON.stringify(r));
    assert.match(r.error.message, why);
  }
  // The right retry (a new id) gets the backend's result; the same state again is refused.
  const done = await a.request(retry(7, r1, state, answer), 10000);
  assert.deepEqual(done.result, { content: [{ type: "text", text: "q? -> x" }], resultType: "complete" });
  const again = await a.request(retry(8, r1, state, answer), 10000);
  assert.match(again.error.message, /names no call of this session/);
  assert.ok(await waitFor(() => /Connection \d+ sent a requestState that/.test(shim.stderr()), 20000), shim.stderr());

  // Two rounds: each state is good once, an earlier round's is refused; a retry without the answer
  // is asked again.
  const t1 = await a.request(MREQ(10, "tools/call", { name: "ask-twice", arguments: {} }, CAPS), 10000);
  const k1 = Object.keys(t1.result.inputRequests)[0];
  const same = await a.request(MREQ(11, "tools/call", { name: "ask-twice", arguments: {}, requestState: t1.result.requestState }, CAPS), 10000);
  assert.equal(same.result.resultType, "input_required", "no answer: asked again");
  assert.deepEqual(Object.keys(same.result.inputRequests), [k1]);
  assert.notEqual(same.result.requestState, t1.result.requestState);
  const stale = await a.request(MREQ(12, "tools/call", { name: "ask-twice", arguments: {}, requestState: t1.result.requestState, inputResponses: { [k1]: { action: "accept", content: { answer: "one" } } } }, CAPS), 10000);
  assert.match(stale.error.message, /not the current one/);
  const t2 = await a.request(MREQ(13, "tools/call", { name: "ask-twice", arguments: {}, requestState: same.result.requestState, inputResponses: { [k1]: { action: "accept", content: { answer: "one" } } } }, CAPS), 10000);
  assert.equal(t2.result.inputRequests[Object.keys(t2.result.inputRequests)[0]].params.message, "second?");
  const k2 = Object.keys(t2.result.inputRequests)[0];
  const t3 = await a.request(MREQ(14, "tools/call", { name: "ask-twice", arguments: {}, requestState: t2.result.requestState, inputResponses: { [k2]: { action: "decline" } } }, CAPS), 10000);
  assert.deepEqual(t3.result.content, [{ type: "text", text: "one then (decline)" }]);
  await a.close();
  await b.close();
});

test("a 2026-07-28 request without clientCapabilities gets -32602 naming it, also a retry, at the shim's own socket", async () => {
  const shim = await askerOnSocket("nocaps.yaml");
  const p = shim.raw();
  try {
    assert.ok((await p.request(SAYS(MODERN, CAPS), 30000)).result);
    const bare = (id, more = {}) => {
      const r = ASK(id, "q?", CAPS, more);
      delete r.params._meta["io.modelcontextprotocol/clientCapabilities"];
      return r;
    };
    const r1 = await p.request(bare(1), 30000);
    assert.equal(r1.error?.code, -32602, JSON.stringify(r1));
    assert.match(r1.error.message, /io\.modelcontextprotocol\/clientCapabilities/);
    // A retry without it: the same (the call it names goes on waiting for a good one).
    const asked = await p.request(ASK(2), 10000);
    assert.equal(asked.result?.resultType, "input_required", JSON.stringify(asked));
    const [key] = Object.keys(asked.result.inputRequests);
    const answer = { [key]: { action: "accept", content: { answer: "x" } } };
    const r3 = await p.request(bare(3, { requestState: asked.result.requestState, inputResponses: answer }), 10000);
    assert.equal(r3.error?.code, -32602, JSON.stringify(r3));
    assert.match(r3.error.message, /io\.modelcontextprotocol\/clientCapabilities/);
    const done = await p.request(retry(4, asked, asked.result.requestState, answer), 10000);
    assert.deepEqual(done.result?.content, [{ type: "text", text: "q? -> x" }], JSON.stringify(done));
  } finally {
    await p.close();
  }
});

test("-32021 when the request that gets the input_required did not declare what answering needs", async () => {
  const m = askerManifest("caps.yaml");
  const p = new RawPeer(MCP_LAZY, direct(m));
  // The backend was initialized with elicitation (the session's first request declared it) ...
  assert.deepEqual((await p.request(MREQ(1, "tools/call", { name: "echo", arguments: { message: "x" } }, CAPS), 30000)).result.content, [
    { type: "text", text: "Echo: x" },
  ]);
  // ... but this request does not declare it.
  const r = await p.request(ASK(2, "q?", { sampling: {} }), 10000);
  assert.equal(r.error?.code, -32021, JSON.stringify(r));
  assert.deepEqual(r.error.data, { requiredCapabilities: { elicitation: {} } });
  // The call ended at the backend: its elicitation got an error.
  assert.ok(await waitFor(() => /failed: q\?/.test(askerLog("caps.yaml")), 20000), askerLog("caps.yaml"));
  assert.equal((await p.request(ASK(3, "again?"), 10000)).result.resultType, "input_required");
  await p.close();
});

test("a client that never retries: after input_timeout the backend's request gets an error, the call is cancelled there, and a late retry hears why", async () => {
  const m = askerManifest("timeout.yaml", "    input_timeout: 1s\n");
  const p = new RawPeer(MCP_LAZY, direct(m));
  const r = await p.request(ASK(1), 30000);
  assert.equal(r.result.resultType, "input_required");
  assert.ok(await waitFor(() => /failed: q\?/.test(askerLog("timeout.yaml")), 20000), "the backend's elicitation failed");
  const said = /Connection \d+ did not retry its tools\/call at backend 'asker' within 1s \(input_timeout\) of being asked for input; cancelling it there/;
  assert.ok(await waitFor(() => said.test(p.stderr), 20000), p.stderr);
  const [key] = Object.keys(r.result.inputRequests);
  const late = await p.request(retry(2, r, r.result.requestState, { [key]: { action: "accept", content: { answer: "x" } } }), 10000);
  assert.equal(late.result.isError, true, JSON.stringify(late));
  assert.match(late.result.content[0].text, /not retried within 1s \(input_timeout of backend 'asker'\)/);
  // Nothing is left waiting: the next call works, and a second late retry is refused.
  assert.deepEqual((await p.request(MREQ(3, "tools/call", { name: "echo", arguments: { message: "y" } }, CAPS), 10000)).result.content, [
    { type: "text", text: "Echo: y" },
  ]);
  assert.equal((await p.request(retry(4, r, r.result.requestState, {}), 10000)).error?.code, -32602);
  await p.close();
});

test("two pooled modern sessions at one handshake-era backend: each answers its own input; one that cannot be attributed is refused, saying so", async () => {
  const shim = await askerOnSocket("pooled.yaml");
  const [cmd, args] = [MCP_LAZY, ["--manifest", shim.manifest, "--activation=systemd"]];
  let release;
  const held = new Promise((r) => (release = r));
  await closing(async (keep) => {
    const a = keep(await v2("pin", cmd, args, { answers: { elicit: { answer: "alpha" } }, gate: () => held }));
    const b = keep(await v2("pin", cmd, args, { answers: { elicit: { answer: "beta" } } }));
    // One at a time, each gets its own answer.
    release();
    assert.equal((await a.callTool({ name: "ask", arguments: { question: "a?" } })).content[0].text, "a? -> alpha");
    assert.equal((await b.callTool({ name: "ask", arguments: { question: "b?" } })).content[0].text, "b? -> beta");
    assert.match(shim.stderr(), /Started backend 'asker'/);
    assert.equal(shim.stderr().match(/Started backend 'asker'/g).length, 1, "one pooled backend");
  });

  // A holds its question; while it does, B's question cannot be told apart from A's at the backend.
  let open;
  const gate = new Promise((r) => (open = r));
  await closing(async (keep) => {
    const c = keep(await v2("pin", cmd, args, { answers: { elicit: { answer: "gamma" } }, gate: () => gate }));
    const d = keep(await v2("pin", cmd, args, { answers: { elicit: { answer: "delta" } } }));
    const first = c.callTool({ name: "ask", arguments: { question: "c?" } });
    first.catch(() => {}); // awaited below; a failure before that closes c, which rejects it
    assert.ok(await waitFor(() => c.seen.length === 1, 20000));
    const second = await d.callTool({ name: "ask", arguments: { question: "d?" } });
    assert.equal(second.isError, true);
    assert.match(second.content[0].text, /several client sessions share this backend; mcp-lazy cannot tell which one this request is for/);
    assert.deepEqual(d.seen, []);
    open();
    assert.equal((await first).content[0].text, "c? -> gamma");
  });
});

// The era a frontend says its client speaks, in the initialize it sends the shim: what the shim asks
// of the session (roots) and sends it (a backend's requests, or input_required) follows from it.
test("roots at a pooled shim by the era the frontend says: SDK 1.x and v2 legacy-mode clients are asked and keep their own; a v2 client pinned to 2026-07-28 is never asked and gets none", async () => {
  const shim = await askerOnSocket("roots-era.yaml");
  const args = ["--manifest", shim.manifest, "--activation=systemd"];
  const text = async (c, name) => (await c.callTool({ name, arguments: name === "echo" ? { message: "first" } : {} })).content[0].text;
  await closing(async (keep) => {
    const t = new StdioClientTransport({ command: MCP_LAZY, args, stderr: "pipe" });
    const one = keep(new Client({ name: "v1-roots", version: "1" }, { capabilities: { roots: { listChanged: true } } }));
    one.rootsAsked = 0;
    one.setRequestHandler(ListRootsRequestSchema, async () => (one.rootsAsked++, { roots: [{ uri: "file:///one" }] }));
    await one.connect(t);
    const two = keep(await v2("legacy", MCP_LAZY, args, { answers: { root: "file:///two" } }));
    const pin = keep(await v2("pin", MCP_LAZY, args, { answers: { root: "file:///pin" } }));
    // The pinned client's first call: answered with nothing asked of it (no roots/list held it up).
    assert.equal(await text(pin, "echo"), "Echo: first");
    assert.equal(pin.rootsAsked, 0);
    assert.equal(await text(one, "echo"), "Echo: first");
    assert.ok(one.rootsAsked >= 1, "asked by the shim before its first call went on");
    assert.equal(await text(one, "roots"), "roots: file:///one");
    assert.equal(await text(two, "roots"), "roots: file:///two");
    assert.ok(two.rootsAsked >= 1);
    // Its backend's roots/list gets "no roots" from the shim: never another session's.
    const none = await pin.callTool({ name: "roots", arguments: {} });
    assert.equal(none.isError, true, JSON.stringify(none));
    assert.match(none.content[0].text, /declared no roots/);
    assert.equal(pin.rootsAsked, 0, "a 2026-07-28 client is never asked");
    assert.equal(shim.stderr().match(/Started backend 'asker'/g).length, 3, "one backend per pool key: its roots, or a 2026-07-28 client's");
  });
  // The flag is the shim's alone: no backend's initialize carries it.
  const inits = askerLog("roots-era.yaml").split("\n").filter((l) => l.startsWith("initialize: "));
  assert.ok(inits.length >= 3, askerLog("roots-era.yaml"));
  assert.ok(inits.every((l) => !l.includes("mcp-lazy/clientEra")), inits.join("\n"));
});

test("no wait after initialize: a handshake-era session is asked for its roots at once, a 2026-07-28 one never (its initialize is answered first), at the shim's own socket", async () => {
  const shim = await askerOnSocket("roots-order.yaml");
  const peers = [];
  try {
    // Said handshake, or said nothing (as any other peer): roots/list comes while initialize is handled,
    // before the answer to a ping sent after it.
    for (const era of ["handshake", undefined]) {
      const p = shim.raw();
      peers.push(p);
      p.send(SAYS(era, { roots: {} }));
      p.send({ jsonrpc: "2.0", id: "ping", method: "ping" });
      const [asked, pong] = await p.next(2, 30000);
      assert.equal(asked.method, "roots/list", JSON.stringify([asked, pong]));
      assert.deepEqual(pong, { jsonrpc: "2.0", id: "ping", result: {} });
      p.send({ jsonrpc: "2.0", id: asked.id, result: { roots: [{ uri: "file:///h" }] } });
      const [init] = await p.next(1, 30000);
      assert.equal(init.id, 0, JSON.stringify(init));
      assert.ok(init.result, JSON.stringify(init));
      const r = await p.request({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "roots", arguments: {} } }, 10000);
      assert.equal(r.result.content[0].text, "roots: file:///h");
      // Asked for its roots, it is a handshake-era session, whatever it says next.
      const late = await p.request(MREQ(2, "tools/call", { name: "roots", arguments: {} }, { roots: {} }), 10000);
      assert.equal(late.error?.code, -32600, JSON.stringify(late));
    }
    // Said 2026-07-28: the first thing it hears is its initialize's answer; nothing is held for roots.
    const m = shim.raw();
    peers.push(m);
    const init = await m.request(SAYS(MODERN, { roots: {} }), 30000);
    assert.equal(init.id, 0, JSON.stringify(init));
    assert.ok(init.result, JSON.stringify(init));
    const r = await m.request(MREQ(1, "tools/call", { name: "roots", arguments: {} }, { roots: {} }), 10000);
    assert.equal(r.id, 1, JSON.stringify(r));
    assert.match(r.result.content[0].text, /declared no roots/);
    assert.deepEqual(m.lines, []);
  } finally {
    await Promise.all(peers.map((p) => p.close()));
  }
});

test("a session that said one era (or, saying nothing, spoke it first) and speaks the other gets -32600 saying so; a bad name -32602 (at the shim's own socket)", async () => {
  const shim = await askerOnSocket("era-lies.yaml");
  const echo = (id) => ({ jsonrpc: "2.0", id, method: "tools/call", params: { name: "echo", arguments: { message: "hi" } } });
  const modernEcho = (id) => MREQ(id, "tools/call", { name: "echo", arguments: { message: "hi" } }, CAPS);
  const peers = [];
  const peer = () => (peers.push(shim.raw()), peers.at(-1));
  try {
    const bad = peer();
    for (const [k, era] of ["2025-11-25", "", 7, null].entries()) {
      const r = await bad.request({ ...SAYS(era, CAPS), id: k }, 10000);
      assert.equal(r.error?.code, -32602, JSON.stringify(r));
      assert.match(r.error.message, /mcp-lazy\/clientEra must be "2026-07-28" or "handshake"/);
    }
    const m = peer();
    assert.ok((await m.request(SAYS(MODERN, CAPS), 30000)).result);
    const plain = await m.request(echo(1), 10000);
    assert.equal(plain.error?.code, -32600, JSON.stringify(plain));
    assert.match(plain.error.message, /speaks 2026-07-28 .* but this request has no 2026-07-28 envelope/);
    assert.deepEqual((await m.request(modernEcho(2), 10000)).result?.content, [{ type: "text", text: "Echo: hi" }]);
    const h = peer();
    assert.ok((await h.request(SAYS("handshake", CAPS), 30000)).result);
    const enveloped = await h.request(modernEcho(1), 10000);
    assert.equal(enveloped.error?.code, -32600, JSON.stringify(enveloped));
    assert.match(enveloped.error.message, /speaks the handshake era .* but this request carries a 2026-07-28 envelope/);
    assert.deepEqual((await h.request(echo(2), 10000)).result?.content, [{ type: "text", text: "Echo: hi" }]);
    // A peer that says nothing (an mcp-lazy from before the member) speaks the era of its first request
    // (a ping does not count), and is held to it.
    const plainFirst = peer();
    assert.ok((await plainFirst.request(SAYS(undefined, CAPS), 30000)).result);
    assert.deepEqual((await plainFirst.request({ jsonrpc: "2.0", id: 1, method: "ping" }, 10000)).result, {});
    assert.deepEqual((await plainFirst.request(echo(2), 10000)).result?.content, [{ type: "text", text: "Echo: hi" }]);
    const late = await plainFirst.request(modernEcho(3), 10000);
    assert.equal(late.error?.code, -32600, JSON.stringify(late));
    assert.match(late.error.message, /speaks the handshake era .* but this request carries a 2026-07-28 envelope/);
    const modernFirst = peer();
    assert.ok((await modernFirst.request(SAYS(undefined, CAPS), 30000)).result);
    assert.deepEqual((await modernFirst.request({ jsonrpc: "2.0", id: 1, method: "ping" }, 10000)).result, {});
    assert.deepEqual((await modernFirst.request(modernEcho(2), 10000)).result?.content, [{ type: "text", text: "Echo: hi" }]);
    const plainLate = await modernFirst.request(echo(3), 10000);
    assert.equal(plainLate.error?.code, -32600, JSON.stringify(plainLate));
    assert.match(plainLate.error.message, /speaks 2026-07-28 .* but this request has no 2026-07-28 envelope/);
    assert.match(shim.stderr(), /speaks 2026-07-28, then sent a request without its envelope; refused it/);
  } finally {
    await Promise.all(peers.map((p) => p.close()));
  }
});

test("initialize after 2026-07-28 requests on one stdin: the next calls reach a shim told the handshake era (a backend's request reaches the client as a request)", async () => {
  const m = askerManifest("era-change.yaml");
  const p = new RawPeer(MCP_LAZY, direct(m));
  try {
    const first = await p.request(MREQ(1, "tools/call", { name: "echo", arguments: { message: "one" } }, CAPS), 30000);
    assert.deepEqual(first.result?.content, [{ type: "text", text: "Echo: one" }], JSON.stringify(first));
    assert.ok((await p.request({ ...INIT("2025-06-18", CAPS), id: 2 })).result);
    p.send({ jsonrpc: "2.0", method: "notifications/initialized" });
    p.send({ jsonrpc: "2.0", id: 3, method: "tools/call", params: { name: "ask", arguments: { question: "q?" } } });
    const [ask] = await p.next(1, 30000);
    assert.equal(ask.method, "elicitation/create", JSON.stringify(ask));
    p.send({ jsonrpc: "2.0", id: ask.id, result: { action: "accept", content: { answer: "x" } } });
    const [done] = await p.next(1, 10000);
    assert.deepEqual(done, { jsonrpc: "2.0", id: 3, result: { content: [{ type: "text", text: "q? -> x" }] } });
    // Now a handshake-era session: a 2026-07-28 request is refused, saying why.
    const mixed = await p.request(MREQ(4, "tools/call", { name: "echo", arguments: { message: "two" } }, CAPS), 10000);
    assert.equal(mixed.error?.code, -32600, JSON.stringify(mixed));
    assert.match(mixed.error.message, /speaks the handshake era/);
  } finally {
    await p.close();
  }
});

test("a handshake-era client cancels a bridged call: the input requests it was sent are withdrawn, and its late answer is ignored", async () => {
  const only = await modernManifest(join(dir, "modern-only-cancel.json"), { args: ["--legacy", "reject"] });
  const p = new RawPeer(MCP_LAZY, direct(only));
  assert.ok((await p.request(INIT("2025-06-18", { elicitation: {} }))).result);
  p.send({ jsonrpc: "2.0", method: "notifications/initialized" });
  p.send({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "ask", arguments: { question: "q" } } });
  const [ask] = await p.next(1, 30000);
  assert.equal(ask.method, "elicitation/create", JSON.stringify(ask));
  p.send({ jsonrpc: "2.0", method: "notifications/cancelled", params: { requestId: 1, reason: "changed my mind" } });
  const [withdrawn] = await p.next(1, 10000);
  assert.equal(withdrawn.method, "notifications/cancelled", JSON.stringify(withdrawn));
  assert.equal(withdrawn.params.requestId, ask.id);
  // The late answer goes nowhere; the session carries on.
  p.send({ jsonrpc: "2.0", id: ask.id, result: { action: "accept", content: { answer: "late" } } });
  const echo = await p.request({ jsonrpc: "2.0", id: 2, method: "tools/call", params: { name: "echo", arguments: { message: "still here" } } }, 10000);
  assert.deepEqual(echo, { jsonrpc: "2.0", id: 2, result: { content: [{ type: "text", text: "Echo: still here" }] } });
  await p.close();
});

test("a handshake-era client's progress across a bridged round: its own token before and after the input, then one result", async () => {
  const only = await modernManifest(join(dir, "modern-only-progress.json"), { args: ["--legacy", "reject"] });
  const p = new RawPeer(MCP_LAZY, direct(only));
  try {
    assert.ok((await p.request(INIT("2025-06-18", { elicitation: {} }))).result);
    p.send({ jsonrpc: "2.0", method: "notifications/initialized" });
    p.send({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "ask-progress", arguments: {}, _meta: { progressToken: "mine" } } });
    const [before, ask] = await p.next(2, 30000);
    assert.deepEqual(before, { jsonrpc: "2.0", method: "notifications/progress", params: { progressToken: "mine", progress: 1, total: 2, message: "before" } }, JSON.stringify([before, ask]));
    assert.equal(ask.method, "elicitation/create", JSON.stringify(ask));
    assert.equal(ask.params.message, "go on?");
    p.send({ jsonrpc: "2.0", id: ask.id, result: { action: "accept", content: { answer: "yes" } } });
    const [after, r] = await p.next(2, 10000);
    assert.deepEqual(after, { jsonrpc: "2.0", method: "notifications/progress", params: { progressToken: "mine", progress: 2, total: 2, message: "after" } }, JSON.stringify([after, r]));
    assert.deepEqual(r, { jsonrpc: "2.0", id: 1, result: { content: [{ type: "text", text: "answered yes" }] } });
    // One result only, and nothing more for this call (a ping answered next shows the stream is drained).
    const pong = await p.request({ jsonrpc: "2.0", id: 2, method: "ping" }, 10000);
    assert.deepEqual(pong, { jsonrpc: "2.0", id: 2, result: {} });
    await sleep(300);
    assert.deepEqual(p.lines, [], "no second result, no stray progress");
  } finally {
    await p.close();
  }
});

test("a bridged call keeps the peers' bytes: integers past 2^53 and escapes both ways, through the envelope, the input requests, the answers and the retry", async () => {
  const BIG = "12345678901234567890123";
  const m = manifest(
    "raw-modern.yaml",
    `backends:
  raw:
    command: [node, ${join(TESTS, "servers/raw-modern.mjs")}]
tools:
${["raw", "keep-meta", "ask-raw"].map((t) => TOOL(t, "raw")).join("")}`,
  );
  const p = new RawPeer(MCP_LAZY, direct(m));
  assert.ok((await p.request(INIT("2025-06-18", { elicitation: {} }))).result);
  p.send({ jsonrpc: "2.0", method: "notifications/initialized" });
  // The request reaches the backend as the client wrote it, with the envelope put into its _meta.
  p.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"raw","arguments":{"n":${BIG},"s":"\\u00e9\\/"},"_meta":{"progressToken":"t1"}}}`);
  const answer = await p.nextLine(30000);
  assert.ok(answer.includes(`"big":${BIG}`), answer);
  const got = JSON.parse(answer);
  assert.deepEqual(Object.keys(got.result), ["content", "big"], "what the handshake era does not have is gone");
  const sent = got.result.content[0].text;
  assert.ok(sent.includes(`"arguments":{"n":${BIG},"s":"\\u00e9\\/"}`), sent);
  assert.ok(sent.includes(`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{}},"io.modelcontextprotocol/clientInfo":{"name":"raw-test","version":"1"},"progressToken":"t1"}`), sent);
  // What else _meta holds stays, as its bytes.
  p.send({ jsonrpc: "2.0", id: 2, method: "tools/call", params: { name: "keep-meta", arguments: {} } });
  const kept = await p.nextLine();
  assert.ok(kept.includes(`"_meta":{"keep":${BIG}}`), kept);
  // An input request reaches the client as the backend wrote it; the client's answer and the
  // backend's requestState go back as they were written.
  p.send({ jsonrpc: "2.0", id: 3, method: "tools/call", params: { name: "ask-raw", arguments: {} } });
  const ask = await p.nextLine();
  assert.ok(ask.includes(`"params":{"message":"n?","requestedSchema":{"type":"object","properties":{"n":{"type":"integer"}}},"_meta":{"big":${BIG}}}`), ask);
  p.send(`{"jsonrpc":"2.0","id":${JSON.stringify(JSON.parse(ask).id)},"result":{"action":"accept","content":{"n":98765432109876543210987}}}`);
  const done = JSON.parse(await p.nextLine());
  assert.equal(done.id, 3);
  const retried = done.result.content[0].text;
  assert.ok(retried.includes(`"inputResponses":{"q":{"action":"accept","content":{"n":98765432109876543210987}}}`), retried);
  assert.ok(retried.includes(`"requestState":"\\u0073tate"`), retried);
  await p.close();
});

test("input_required for a modern client keeps the peers' bytes: the handshake-era backend's params, the client's answer", async () => {
  const BIG = "12345678901234567890123";
  const m = manifest(
    "raw-legacy.yaml",
    `backends:
  raw:
    command: [node, ${join(TESTS, "servers/raw-modern.mjs")}, --legacy]
tools:
${TOOL("ask-raw", "raw")}`,
  );
  const p = new RawPeer(MCP_LAZY, direct(m));
  p.send(MREQ(1, "tools/call", { name: "ask-raw", arguments: {} }, CAPS));
  const asked = await p.nextLine(30000);
  assert.ok(asked.includes(`"method":"elicitation/create","params":{"message":"n?","requestedSchema":{"type":"object","properties":{"n":{"type":"integer"}}},"_meta":{"big":${BIG}}}`), asked);
  const r = JSON.parse(asked).result;
  const [key] = Object.keys(r.inputRequests);
  const req = MREQ(2, "tools/call", { name: "ask-raw", arguments: {}, requestState: r.requestState, inputResponses: { [key]: "ANSWER" } }, CAPS);
  p.send(JSON.stringify(req).replace('"ANSWER"', '{"action":"accept","content":{"n":98765432109876543210987,"s":"\\u00e9"}}'));
  const done = JSON.parse(await p.nextLine());
  assert.equal(done.id, 2);
  assert.equal(done.result.content[0].text, '{"jsonrpc":"2.0","id":"e1","result":{"action":"accept","content":{"n":98765432109876543210987,"s":"\\u00e9"}}}');
  await p.close();
});

test("a modern session with two calls in flight at a handshake-era backend: a request of the backend's is refused, saying so; the first call goes on", async () => {
  const m = askerManifest("two-calls.yaml");
  const p = new RawPeer(MCP_LAZY, direct(m));
  const first = await p.request(ASK(1, "one?"), 30000);
  assert.equal(first.result.resultType, "input_required");
  // The first call waits for its retry (it is in flight); the second one's question cannot be told apart.
  const second = await p.request(ASK(2, "two?"), 10000);
  assert.equal(second.result.isError, true, JSON.stringify(second));
  assert.match(second.result.content[0].text, /speaks 2026-07-28, where a server asks for input only in its answer to one call, and it has 2 calls in flight at this backend: mcp-lazy cannot tell which one this request is for/);
  const [key] = Object.keys(first.result.inputRequests);
  const done = await p.request(retry(3, first, first.result.requestState, { [key]: { action: "accept", content: { answer: "1" } } }, "one?"), 10000);
  assert.deepEqual(done.result.content, [{ type: "text", text: "one? -> 1" }]);
  await p.close();
});

test("a handshake-era backend's answer to a modern request keeps its bytes, with resultType put in (and -32602 for -32002)", async () => {
  const BIG = "12345678901234567890123";
  const m = manifest(
    "raw-legacy-answers.yaml",
    `backends:
  raw:
    command: [node, ${join(TESTS, "servers/raw-modern.mjs")}, --legacy]
    resources: [{uri: "raw://gone", name: gone}]
tools:
${TOOL("raw", "raw")}`,
  );
  const p = new RawPeer(MCP_LAZY, direct(m));
  p.send(MREQ(1, "tools/call", { name: "raw", arguments: {} }, CAPS));
  assert.equal(await p.nextLine(30000), `{"jsonrpc":"2.0","id":1,"result":{"resultType":"complete", "content":[{"type":"text","text":"\\u00e9"}],"big":${BIG}}}`);
  p.send(MREQ(2, "resources/read", { uri: "raw://gone" }, CAPS));
  assert.equal(await p.nextLine(), `{"jsonrpc":"2.0","id":2,"error":{"code":-32602,"message":"Resource not found","data":{"big":${BIG}}}}`);
  await p.close();
});

test("-32021 names what answering needs: a URL-mode elicitation needs elicitation.url, sampling with tools sampling.tools", async () => {
  const m = manifest(
    "raw-legacy-caps.yaml",
    `backends:
  raw:
    command: [node, ${join(TESTS, "servers/raw-modern.mjs")}, --legacy]
tools:
${["ask-url", "sample-tools"].map((t) => TOOL(t, "raw")).join("")}`,
  );
  const p = new RawPeer(MCP_LAZY, direct(m));
  const url = await p.request(MREQ(1, "tools/call", { name: "ask-url", arguments: {} }, { elicitation: {} }), 30000);
  assert.equal(url.error?.code, -32021, JSON.stringify(url));
  assert.deepEqual(url.error.data, { requiredCapabilities: { elicitation: { url: {} } } });
  const tools = await p.request(MREQ(2, "tools/call", { name: "sample-tools", arguments: {} }, { sampling: {} }), 10000);
  assert.deepEqual(tools.error?.data, { requiredCapabilities: { sampling: { tools: {} } } }, JSON.stringify(tools));
  // Declared: asked.
  const ok = await p.request(MREQ(3, "tools/call", { name: "ask-url", arguments: {} }, { elicitation: { url: {} } }), 10000);
  assert.equal(ok.result?.resultType, "input_required", JSON.stringify(ok));
  assert.equal(Object.values(ok.result.inputRequests)[0].params.mode, "url");
  await p.close();
});

test("progress of a call that asked for input reaches the modern client under the token of the request it waits on", async () => {
  const m = askerManifest("progress.yaml");
  writeFileSync(m, readFileSync(m, "utf8") + TOOL("ask-progress", "asker"));
  const p = new RawPeer(MCP_LAZY, direct(m));
  p.send(MREQ(1, "tools/call", { name: "ask-progress", arguments: {}, _meta: { progressToken: "first" } }, CAPS));
  const [before, asked] = await p.next(2, 30000);
  assert.deepEqual(before.params, { progressToken: "first", progress: 1, total: 2, message: "before" }, JSON.stringify(before));
  assert.equal(asked.result.resultType, "input_required");
  const [key] = Object.keys(asked.result.inputRequests);
  p.send(MREQ(2, "tools/call", { name: "ask-progress", arguments: {}, requestState: asked.result.requestState, inputResponses: { [key]: { action: "accept", content: { answer: "yes" } } }, _meta: { progressToken: "second" } }, CAPS));
  const [after, done] = await p.next(2, 10000);
  assert.deepEqual(after.params, { progressToken: "second", progress: 2, total: 2, message: "after" }, JSON.stringify(after));
  assert.deepEqual(done.result.content, [{ type: "text", text: "went on: yes" }]);
  // A retry that names no token gets no progress (the first request's token has ended).
  p.send(MREQ(3, "tools/call", { name: "ask-progress", arguments: {}, _meta: { progressToken: "third" } }, CAPS));
  const [, again] = await p.next(2, 10000);
  p.send(MREQ(4, "tools/call", { name: "ask-progress", arguments: {}, requestState: again.result.requestState, inputResponses: { [Object.keys(again.result.inputRequests)[0]]: { action: "accept", content: { answer: "no" } } } }, CAPS));
  const [last] = await p.next(1, 10000);
  assert.equal(last.id, 4, JSON.stringify(last));
  assert.deepEqual(last.result.content, [{ type: "text", text: "went on: no" }]);
  await p.close();
});
