// The message layer at each trust boundary: what a peer sends is checked once (duplicate keys
// refused at every depth), passed on byte for byte with only the translated ids changed, and every
// id a client may send is taken. A line-level backend (tests/fixtures/echo-backend.mjs) shows what
// arrived; the shim runs behind systemd-socket-activate (two sessions on one backend) or is started
// by the frontend (--activation=direct). No systemd needed.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { INIT, MCP_LAZY, RawPeer, SHIMD, SockPeer, TESTS, cleanupPeers, startShimOnSocket, sleep, waitFor } from "./lib/env.mjs";

after(cleanupPeers);
const dir = mkdtempSync(join(tmpdir(), "mcp-lazy-message-"));
after(() => rmSync(dir, { recursive: true, force: true }));
const ECHO = join(TESTS, "fixtures/echo-backend.mjs");
const manifest = join(dir, "m.yaml");
const tools = ["raw", "big", "slow", "levels", "upcall", "progress", "seen", "dupanswer", "dupwide", "task", "ask"];
writeFileSync(
  manifest,
  `backends:
  echo:
    command: [${process.execPath}, ${ECHO}]
    socket: ${dir}/absent.sock
    resources: [{uri: "echo://one", name: one}]
    prompts: [{name: pr}]
tools:
${tools.map((t) => `  - {name: ${t}, backend: echo, input_schema: {type: object}}`).join("\n")}
`,
);

const call = (id, name, args = {}, extra = {}) => ({ jsonrpc: "2.0", id, method: "tools/call", params: { name, arguments: args, ...extra } });
const text = (r) => r.result?.content?.[0]?.text ?? JSON.stringify(r);

describe("the shim, with several sessions on one backend", () => {
  let shim;
  const peers = [];
  const session = async (capabilities = {}) => {
    const p = new SockPeer(shim.path);
    peers.push(p);
    const r = await p.request(INIT("2025-06-18", capabilities));
    return [p, r];
  };
  before(async () => (shim = await startShimOnSocket(join(dir, "echo.sock"), manifest, "echo")));
  after(() => {
    peers.forEach((p) => p.close());
    shim?.child.kill("SIGTERM");
  });

  test("duplicate keys are refused at every depth and never reach the backend", async () => {
    const [a] = await session();
    const [b] = await session();
    // b's call is in flight at the backend under the shim's id 1 (the first call this shim routes).
    b.send(call(1, "slow", { ms: 1500 }));
    await sleep(200);
    // Node's parser takes the last of two keys: the backend would see id 1, or a cancel of b's call.
    a.send('{"jsonrpc":"2.0","id":"a1","method":"tools/call","params":{"name":"raw","arguments":{"m":"dupmarker"}},"id":1}');
    const e1 = await a.next();
    a.send('{"jsonrpc":"2.0","method":"notifications/message","params":{"requestId":1,"m":"dupmarker"},"method":"notifications/cancelled"}');
    const e2 = await a.next();
    a.send('{"jsonrpc":"2.0","id":"a3","method":"tools/call","params":{"name":"raw","arguments":{"m":"dupmarker","m":"x"}}}');
    const e3 = await a.next();
    a.send('{"jsonrpc":"2.0","id":"a4","method":"tools/call","params":{"name":"raw","arguments":{"m":"dupmarker","\\u006d":"x"}}}');
    const e4 = await a.next();
    for (const e of [e1, e2, e3, e4]) {
      assert.equal(e.error?.code, -32600, JSON.stringify(e));
      assert.match(e.error.message, /duplicate key/, JSON.stringify(e));
    }
    assert.equal(e1.id, null);
    assert.equal(e3.id, "a3");
    const mine = await b.next(5000);
    assert.deepEqual(mine, { jsonrpc: "2.0", id: 1, result: { content: [{ type: "text", text: "slow done" }] } });
    const seen = await a.request(call("s", "seen", { marker: "dupmarker" }));
    assert.equal(text(seen), "[]", "the backend never saw any of them");
  });

  test("two sessions may use the same progress token at once; each gets its own progress", async () => {
    const [a] = await session();
    const [b] = await session();
    a.send(call(5, "progress", {}, { _meta: { progressToken: 1 } }));
    b.send(call(5, "progress", {}, { _meta: { progressToken: 1 } }));
    for (const p of [a, b]) {
      const [n, r] = [await p.next(), await p.next()];
      assert.equal(n.method, "notifications/progress");
      assert.equal(n.params.progressToken, 1);
      assert.equal(r.id, 5);
    }
  });

  test("a task belongs to the session whose call created it", async () => {
    const [a] = await session();
    const [b] = await session();
    const created = await a.request(call(1, "task"));
    const taskId = created.result?.task?.taskId;
    assert.match(taskId ?? "", /^task-\d+$/, JSON.stringify(created));
    const status = await a.next();
    assert.equal(status.method, "notifications/tasks/status");
    assert.equal(status.params.taskId, taskId);
    const theirs = await b.request({ jsonrpc: "2.0", id: 2, method: "tasks/get", params: { taskId } });
    assert.match(theirs.error?.message ?? "", /unknown task/, JSON.stringify(theirs));
    const mine = await a.request({ jsonrpc: "2.0", id: 2, method: "tasks/get", params: { taskId } });
    assert.equal(mine.result?.taskId, taskId, JSON.stringify(mine));
    await sleep(200);
    assert.equal(b.lines.length, 0, `b heard of a's task: ${b.lines}`);
  });

  test("a tools/call refused for lack of a backend slot is a tool error that says why", async () => {
    // Eight client configurations have a backend each (the first sessions above are one of them).
    for (let i = 1; i < 8; i++) {
      const [, r] = await session({ experimental: { n: i } });
      assert.ok(r.result, JSON.stringify(r));
    }
    const [p, r] = await session({ experimental: { n: 99 } });
    assert.match(r.error?.message ?? "", /as many client configurations/);
    const c = await p.request(call(7, "raw"));
    assert.equal(c.id, 7);
    assert.equal(c.result?.isError, true, JSON.stringify(c));
    assert.match(text(c), /as many client configurations as it may \(8\)/);
    const l = await p.request({ jsonrpc: "2.0", id: 8, method: "resources/read", params: { uri: "echo://one" } });
    assert.match(l.error?.message ?? "", /as many client configurations/);
  });
});

describe("the frontend and its shim", () => {
  let p;
  before(async () => {
    p = new RawPeer(MCP_LAZY, ["--manifest", manifest, "--activation=direct", "--shimd", SHIMD]);
    const init = await p.request(INIT("2025-06-18", { sampling: {} }));
    assert.ok(init.result, JSON.stringify(init));
  });
  after(() => p?.close());

  test("arguments and results pass byte for byte; only ids change", async () => {
    const args = '{"big":12345678901234567890123,"f":1.0,"e":1E2,"neg":-0,"s":"\\u00e9","sp" : [ 1 ,2 ]}';
    p.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"raw","arguments":${args}}}`);
    const got = JSON.parse(await p.nextLine());
    assert.equal(got.id, 1);
    assert.ok(text(got).includes(`"arguments":${args}`), text(got));
    p.send(call(2, "big"));
    const line = await p.nextLine();
    assert.ok(line.includes('"structuredContent":{"n":12345678901234567890123,"f":1.0,"e":1E2,"neg":-0,"s":"\\u00e9"}'), line);
  });

  test("any id a client may send comes back exactly as sent", async () => {
    for (const id of ["1000000000000000", "123456789012345678901234567890", "-9007199254740993", '"\\u0061b"', '""']) {
      p.send(`{"jsonrpc":"2.0","id":${id},"method":"tools/call","params":{"name":"raw","arguments":{}}}`);
      const line = await p.nextLine();
      assert.ok(line.startsWith(`{"jsonrpc":"2.0","id":${id},"result":`), line);
      p.send(`{"jsonrpc":"2.0","id":${id},"method":"ping"}`);
      assert.equal(await p.nextLine(), `{"jsonrpc":"2.0","id":${id},"result":{}}`);
    }
  });

  test("the backend sees the client's own progress token", async () => {
    p.send(call(3, "progress", {}, { _meta: { progressToken: 7 } }));
    const [n, r] = await p.next(2);
    assert.deepEqual(n.params, { progressToken: 7, progress: 1, total: 2 });
    assert.equal(text(r), "7");
  });

  test("a second logging/setLevel while the first is in flight reaches the backend too", async () => {
    await p.request(call(4, "levels"));
    p.send({ jsonrpc: "2.0", id: 5, method: "logging/setLevel", params: { level: "debug" } });
    p.send({ jsonrpc: "2.0", id: 6, method: "logging/setLevel", params: { level: "error" } });
    const acks = await p.next(2);
    assert.deepEqual(acks.map((m) => m.id), [5, 6]);
    // mcp-lazy answers both at once and passes them on: ask the backend until it has had two.
    let levels = "[]";
    let id = 7;
    await waitFor(async () => JSON.parse((levels = text(await p.request(call(id++, "levels"))))).length >= 2, 20000, 100);
    assert.equal(levels, '["debug","error"]', p.stderr);
  });

  test("a backend's cancellation of its own request names the id the client was given", async () => {
    p.send(call(8, "upcall"));
    const [req, cancel, done] = await p.next(3);
    assert.equal(req.method, "sampling/createMessage");
    assert.equal(cancel.method, "notifications/cancelled");
    assert.equal(cancel.params.requestId, req.id);
    assert.equal(cancel.params.reason, "changed my mind");
    assert.equal(done.id, 8);
  });

  test("tasks/* obey the reserved ids; resources/list takes cursor: null", async () => {
    const t = await p.request({ jsonrpc: "2.0", id: "mcp-lazy/x", method: "tasks/get", params: { taskId: "t" } });
    assert.equal(t.error?.code, -32600);
    assert.match(t.error.message, /reserved/);
    const l = await p.request({ jsonrpc: "2.0", id: 9, method: "resources/list", params: { cursor: null } });
    assert.deepEqual(l.result?.resources, [{ uri: "echo://one", name: "one" }], JSON.stringify(l));
  });

  test("an answer with duplicate keys ends its call with an error that says so", async () => {
    const r = await p.request(call(12, "dupanswer"));
    assert.equal(r.id, 12);
    assert.equal(r.result?.isError, true, JSON.stringify(r));
    assert.match(text(r), /backend 'echo' sent an invalid answer to this call \(duplicate key "isError"/);
  });

  test("an error that quotes a key cut at 64 bytes is UTF-8: the call gets it, not a line the frontend drops", async () => {
    // The shim's error cut the key inside an 'é': the frontend dropped that line, and the call waited.
    const r = await p.request(call(13, "dupwide"), 20000);
    assert.equal(r.id, 13);
    assert.equal(r.result?.isError, true, JSON.stringify(r));
    assert.match(text(r), /sent an invalid answer to this call \(duplicate key "a(é){31}" in an object\)/);
  });

  test("a tool's name is read as the backend reads it: escapes decoded, and a NUL in it names no tool", async () => {
    p.send('{"jsonrpc":"2.0","id":20,"method":"tools/call","params":{"name":"r\\u0061w","arguments":{"marker":"esc"}}}');
    const ok = JSON.parse(await p.nextLine());
    assert.equal(ok.id, 20);
    assert.ok(text(ok).includes('"name":"r\\u0061w"'), text(ok));
    p.send('{"jsonrpc":"2.0","id":21,"method":"tools/call","params":{"name":"seen\\u0000x","arguments":{"marker":"nul"}}}');
    const bad = JSON.parse(await p.nextLine());
    assert.equal(bad.id, 21);
    assert.equal(bad.error?.code, -32602, JSON.stringify(bad));
    assert.match(bad.error.message, /Unknown tool: 'seen'/);
    for (const params of ["[1]", '{"name":5}', '{"arguments":{}}']) {
      p.send(`{"jsonrpc":"2.0","id":22,"method":"tools/call","params":${params}}`);
      const e = JSON.parse(await p.nextLine());
      assert.equal(e.error?.code, -32602, params);
      assert.match(e.error.message, /tools\/call needs params with a string name/, params);
    }
    // A resource's URI likewise: cut at the NUL it would be echo://one, which the backend would not read.
    p.send('{"jsonrpc":"2.0","id":24,"method":"resources/read","params":{"uri":"echo://one\\u0000x","marker":"nul"}}');
    const uri = JSON.parse(await p.nextLine());
    assert.equal(uri.id, 24);
    assert.deepEqual(uri.error, { code: -32602, message: "Unknown resource: 'echo://one'" }, JSON.stringify(uri));
    // A completion's ref.name or ref.uri likewise (they choose its backend as a prompt's name and a URI do).
    for (const [id, ref, what] of [
      [25, '{"type":"ref/prompt","name":"pr\\u0000x"}', "prompt: 'pr'"],
      [26, '{"type":"ref/resource","uri":"echo://one\\u0000x"}', "resource: 'echo://one'"],
    ]) {
      p.send(`{"jsonrpc":"2.0","id":${id},"method":"completion/complete","params":{"ref":${ref},"argument":{"name":"a","value":""},"marker":"nul"}}`);
      const c = JSON.parse(await p.nextLine());
      assert.equal(c.id, id);
      assert.deepEqual(c.error, { code: -32602, message: `Unknown ${what}` }, JSON.stringify(c));
    }
    // And a task id: cut at the NUL it would be this session's task-N, at the backend that made it.
    const made = await p.request(call(27, "task"));
    const taskId = made.result?.task?.taskId;
    assert.match(taskId ?? "", /^task-\d+$/, JSON.stringify(made));
    const [status] = await p.next();
    assert.equal(status.params?.taskId, taskId, JSON.stringify(status));
    p.send(`{"jsonrpc":"2.0","id":28,"method":"tasks/get","params":{"taskId":"${taskId}\\u0000x","marker":"nul"}}`);
    const task = JSON.parse(await p.nextLine());
    assert.equal(task.id, 28);
    assert.deepEqual(task.error, { code: -32602, message: `Unknown task: '${taskId}'` }, JSON.stringify(task));
    const got = await p.request({ jsonrpc: "2.0", id: 29, method: "tasks/get", params: { taskId } });
    assert.equal(got.result?.taskId, taskId, JSON.stringify(got));
    // A completion's ref.type too: "ref/prompt\u0000x" is no ref/prompt to the backend.
    p.send('{"jsonrpc":"2.0","id":30,"method":"completion/complete","params":{"ref":{"type":"ref/prompt\\u0000x","name":"pr"},"argument":{"name":"a","value":""},"marker":"nul"}}');
    const type = JSON.parse(await p.nextLine());
    assert.equal(type.id, 30);
    assert.deepEqual(type.error, { code: -32602, message: "completion/complete needs a ref/prompt or ref/resource" }, JSON.stringify(type));
    // What was refused never reached the backend.
    const seen = await p.request(call(23, "seen", { marker: "nul" }));
    assert.deepEqual(JSON.parse(text(seen)), []);
  });

  test("a protocol version with a NUL in it is no version we speak, in initialize or in a 2026-07-28 envelope", async () => {
    // Cut at the NUL it would be 2025-06-18 (or 2026-07-28), which the backend would not read.
    const q = new RawPeer(MCP_LAZY, ["--manifest", manifest, "--activation=direct", "--shimd", SHIMD]);
    const r = new RawPeer(MCP_LAZY, ["--manifest", manifest, "--activation=direct", "--shimd", SHIMD]);
    try {
      const init = await q.request({ ...INIT("2025-06-18"), params: { ...INIT("2025-06-18").params, protocolVersion: "2025-06-18\u0000x" } });
      assert.equal(init.result?.protocolVersion, "2025-11-25", JSON.stringify(init));
      const env = { "io.modelcontextprotocol/protocolVersion": "2026-07-28\u0000x", "io.modelcontextprotocol/clientCapabilities": {} };
      const bad = await r.request(call(1, "seen", { marker: "nulversion" }, { _meta: env }));
      assert.equal(bad.error?.code, -32022, JSON.stringify(bad));
      assert.equal(bad.error.data?.requested, "2026-07-28\u0000x", "named as the client wrote it");
      const env2 = { ...env, "io.modelcontextprotocol/protocolVersion": "2026-07-28" };
      const seen = await r.request(call(2, "seen", { marker: "nulversion" }, { _meta: env2 }));
      assert.equal(text(seen), "[]", "the refused call never reached the backend");
    } finally {
      await q.close();
      await r.close();
    }
  });

  test("a client's answer to a backend's request counts only under the id it was given, all of it", async () => {
    const q = new RawPeer(MCP_LAZY, ["--manifest", manifest, "--activation=direct", "--shimd", SHIMD]);
    const answer = (id, t) => `{"jsonrpc":"2.0","id":${JSON.stringify(id)},"result":{"role":"assistant","content":{"type":"text","text":"${t}"},"model":"m"}}`;
    try {
      assert.ok((await q.request(INIT("2025-06-18", { sampling: {} }))).result);
      q.send(call(1, "ask"));
      const [ask] = await q.next(1, 30000);
      assert.equal(ask.method, "sampling/createMessage", JSON.stringify(ask));
      // Cut at its NUL this id is the one given; it is not, and the answer under it goes nowhere.
      q.send(answer(ask.id + "\u0000x", "wrong"));
      q.send(answer(ask.id, "right"));
      const [r] = await q.next(1, 30000);
      assert.equal(r.id, 1, JSON.stringify(r));
      assert.match(text(r), /right/, JSON.stringify(r));
    } finally {
      await q.close();
    }
  });

  test("a client's invalid or unreadable answer to a backend's request fails that request, which waited for ever", async () => {
    const q = new RawPeer(MCP_LAZY, ["--manifest", manifest, "--activation=direct", "--shimd", SHIMD]);
    try {
      assert.ok((await q.request(INIT("2025-06-18", { sampling: {} }))).result);
      for (const [k, bad, why] of [
        [1, (id) => `{"jsonrpc":"2.0","id":${JSON.stringify(id)},"result":{},"error":{"code":1,"message":"both"}}`, /the client's answer was invalid \(a message needs .*method/],
        [2, (id) => `{"jsonrpc":"2.0","id":${JSON.stringify(id)},"result":{"x":"\\ud800"}}`, /the client's answer was invalid \(not one line of valid UTF-8 JSON\)/],
      ]) {
        q.send(call(k, "ask"));
        const [ask] = await q.next(1, 30000);
        assert.equal(ask.method, "sampling/createMessage", JSON.stringify(ask));
        q.send(bad(ask.id));
        const [r] = await q.next(1, 10000);
        assert.equal(r.id, k, JSON.stringify(r));
        assert.match(text(r), why, JSON.stringify(r));
      }
    } finally {
      await q.close();
    }
  });

  test("a 2026-07-28 call goes on as it is only while its envelope changes nothing: a new log level still reaches the backend", async () => {
    const q = new RawPeer(MCP_LAZY, ["--manifest", manifest, "--activation=direct", "--shimd", SHIMD]);
    const env = (level) => ({
      "io.modelcontextprotocol/protocolVersion": "2026-07-28",
      "io.modelcontextprotocol/clientCapabilities": {},
      ...(level ? { "io.modelcontextprotocol/logLevel": level } : {}),
    });
    try {
      const first = await q.request(call(1, "levels", {}, { _meta: env("info") }));
      assert.equal(first.result?.resultType, "complete", JSON.stringify(first));
      const same = await q.request(call(2, "levels", {}, { _meta: env("info") }));
      assert.deepEqual(JSON.parse(text(same)), ["info"]);
      let levels = "[]";
      let id = 3;
      await waitFor(async () => JSON.parse((levels = text(await q.request(call(id++, "levels", {}, { _meta: env("error") }))))).length >= 2, 20000, 100);
      assert.deepEqual(JSON.parse(levels), ["info", "error"]);
      const bad = await q.request(call(90, "levels", {}, { _meta: env("loud") }));
      assert.equal(bad.error?.code, -32602, JSON.stringify(bad));
      const old = await q.request(call(91, "levels", {}, { _meta: { ...env(), "io.modelcontextprotocol/protocolVersion": "2025-06-18" } }));
      assert.equal(old.error?.code, -32022, JSON.stringify(old));
    } finally {
      await q.close();
    }
  });

  test("duplicate keys from the client are refused", async () => {
    p.send('{"jsonrpc":"2.0","id":10,"method":"ping","id":11}');
    const e = await p.next();
    assert.equal(e[0].error?.code, -32600);
    assert.match(e[0].error.message, /duplicate key/);
  });
});
