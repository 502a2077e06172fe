// A hostile session on a pooled backend (review of the data path): what one session sends must not
// reach or affect another session's calls, whatever shape it gives its message. The shim runs behind
// systemd-socket-activate with the line-level backend (tests/fixtures/echo-backend.mjs), which, like a
// lenient hand-written server, acts on a method name whether or not the message has an id.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { INIT, MCP_LAZY, RawPeer, SHIMD, SockPeer, TESTS, cleanupPeers, rootedPeer, startShimOnSocket, sleep, waitFor } from "./lib/env.mjs";
import { onLines } from "./lib/lines.mjs";

after(cleanupPeers);

const dir = mkdtempSync(join(tmpdir(), "mcp-lazy-hostile-"));
after(() => rmSync(dir, { recursive: true, force: true }));
const ECHO = join(TESTS, "fixtures/echo-backend.mjs");
const manifest = join(dir, "m.yaml");
writeFileSync(
  manifest,
  `backends:
  echo:
    command: [${process.execPath}, ${ECHO}]
    socket: ${dir}/absent.sock
    env: { ECHO_REFUSE_FILE: ${dir}/refuse }
tools:
${["raw", "slow", "seen", "task", "progress", "ask", "touch", "nan", "late", "askp", "badreq", "send", "subscribed", "exit"].map((t) => `  - {name: ${t}, backend: echo, input_schema: {type: object}}`).join("\n")}
`,
);

// A shim on a socket of its own for the tests of one describe() (call it in its body); the function it
// returns opens an initialized session on that shim.
function pooledSessions(sockName, extra = []) {
  let shim;
  const peers = [];
  before(async () => (shim = await startShimOnSocket(join(dir, sockName), manifest, "echo", { extra })));
  after(() => {
    peers.forEach((p) => p.close());
    shim?.child.kill("SIGTERM");
  });
  return async () => {
    const p = new SockPeer(shim.path);
    peers.push(p);
    const r = await p.request(INIT("2025-06-18", {}));
    assert.ok(r.result, `${JSON.stringify(r)}; the shim said: ${shim.stderr()}`);
    return p;
  };
}
const call = (id, name, args = {}) => ({ jsonrpc: "2.0", id, method: "tools/call", params: { name, arguments: args } });
const text = (r) => r.result?.content?.[0]?.text ?? JSON.stringify(r);
// Lines past a 4096-byte limit that are no answer to the backend's request askId, though their first
// bytes read as one to a look-up that cuts a string at its NUL or takes a method only when whole and
// once: each is refused under its own id, as any line past the limit.
const oversizeNonAnswers = (askId) => {
  const big = "x".repeat(8000);
  return [
    [askId + "\u0000x", `{"jsonrpc":"2.0","id":${JSON.stringify(askId + "\u0000x")},"result":{"model":"${big}"}}`],
    [askId, `{"jsonrpc":"2.0","id":${JSON.stringify(askId)},"method":"a","method":"b","params":{"x":"${big}"}}`],
    [askId, `{"jsonrpc":"2.0","id":${JSON.stringify(askId)},"method":"${big}"}`],
  ];
};

describe("a hostile session on a pooled backend", () => {
  const session = pooledSessions("echo.sock");

  test("a request named like a notification cannot cancel another session's call", async () => {
    const a = await session();
    const b = await session();
    // b's call is in flight at the backend; a guesses its backend id (they are small integers).
    b.send(call("b1", "slow", { ms: 800 }));
    await sleep(200);
    for (let guess = 0; guess < 8; guess++)
      a.send({ jsonrpc: "2.0", id: `a${guess}`, method: "notifications/cancelled", params: { requestId: guess, m: "cancelmarker" } });
    const mine = await b.next(); // before the fix: never answered (the backend dropped it as cancelled)
    assert.equal(mine.id, "b1");
    assert.equal(text(mine), "slow done");
    for (let guess = 0; guess < 8; guess++) {
      const e = await a.next();
      assert.equal(e.error?.code, -32600, JSON.stringify(e));
      assert.match(e.error.message, /notification/, JSON.stringify(e));
    }
    const seen = await a.request(call("s", "seen", { marker: "cancelmarker" }));
    assert.equal(text(seen), "[]", "the backend never saw any of them");
  });

  test("progress tokens 0 and -0 (one value to the backend's parser) each reach their own session", async () => {
    const a = await session();
    const b = await session();
    a.sock.write('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"progress","arguments":{},"_meta":{"progressToken":0}}}\n');
    b.sock.write('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"progress","arguments":{},"_meta":{"progressToken":-0}}}\n');
    for (const [p, token] of [[a, "0"], [b, "-0"]]) {
      const n = await p.next();
      assert.equal(n.method, "notifications/progress", JSON.stringify(n));
      assert.ok(Object.is(n.params.progressToken, token === "0" ? 0 : -0), `token ${token}: ${JSON.stringify(n)}`);
      const r = await p.next();
      assert.equal(r.id, 1, JSON.stringify(r));
    }
    await sleep(100);
    assert.equal(a.lines.length + b.lines.length, 0, `more than asked: ${a.lines} ${b.lines}`);
  });

  test("one session's resources/unsubscribe does not end another's subscription", async () => {
    const a = await session();
    const b = await session();
    const sub = { jsonrpc: "2.0", method: "resources/subscribe", params: { uri: "echo://sub" } };
    assert.deepEqual((await a.request({ ...sub, id: 1 })).result, {});
    assert.deepEqual((await b.request({ ...sub, id: 1 })).result, {});
    const un = await a.request({ jsonrpc: "2.0", id: 2, method: "resources/unsubscribe", params: { uri: "echo://sub" } });
    assert.deepEqual(un.result, {}, JSON.stringify(un));
    b.send(call(2, "touch", { uri: "echo://sub" }));
    const n = await b.next();
    assert.equal(n.method, "notifications/resources/updated", `b still subscribed: ${JSON.stringify(n)}`);
    assert.equal((await b.next()).id, 2);
    await sleep(100);
    assert.equal(a.lines.length, 0, `a unsubscribed: ${a.lines}`);
    // The last one out unsubscribes at the backend.
    assert.deepEqual((await b.request({ jsonrpc: "2.0", id: 3, method: "resources/unsubscribe", params: { uri: "echo://sub" } })).result, {});
    const t = await b.request(call(4, "touch", { uri: "echo://sub" }));
    assert.equal(t.id, 4, JSON.stringify(t));
  });

  test("a resource URI that decodes with a NUL is refused, never merged with the URI its first bytes spell", async () => {
    const a = await session();
    const b = await session();
    const uri = "echo://nul";
    const sub = (id, method, u) => ({ jsonrpc: "2.0", id, method, params: { uri: u } });
    assert.deepEqual((await a.request(sub(1, "resources/subscribe", uri))).result, {});
    // b asks for another URI, whose first bytes spell a's: refused, saying why.
    for (const [id, method] of [[1, "resources/subscribe"], [2, "resources/unsubscribe"]]) {
      const e = await b.request(sub(id, method, uri + "\u0000x"));
      assert.equal(e.error?.code, -32602, JSON.stringify(e));
      assert.match(e.error.message, /the uri holds a NUL character/, JSON.stringify(e));
    }
    // a's updates reach a alone; an update the backend sends for the longer URI reaches nobody.
    b.send(call(3, "touch", { uri }));
    assert.equal((await b.next()).id, 3, "b is not subscribed");
    assert.deepEqual((await a.next()).params, { uri });
    const line = JSON.stringify({ jsonrpc: "2.0", method: "notifications/resources/updated", params: { uri: uri + "\u0000x" } });
    a.send(call(4, "send", { lines: [line], answer: true }));
    const sent = await a.next();
    assert.equal(sent.id, 4, `the update for the other URI reached a: ${JSON.stringify(sent)}`);
    // b's unsubscribe was refused, so a's subscription holds at the backend.
    a.send(call(5, "touch", { uri }));
    assert.equal((await a.next()).method, "notifications/resources/updated");
    assert.equal((await a.next()).id, 5);
    await sleep(100);
    assert.equal(b.lines.length, 0, `b heard of a's URI: ${b.lines}`);
    assert.equal(text(await a.request(call(6, "seen", { marker: "nul\\u0000" }))), "[]", "the backend never saw the NUL URI");
  });

  test("an answer that is not JSON (NaN) fails its call instead of leaving it waiting", async () => {
    const a = await session();
    const r = await a.request(call("n", "nan"), 5000);
    assert.equal(r.id, "n");
    assert.equal(r.result?.isError, true, JSON.stringify(r));
    assert.match(text(r), /answered this call with a line that is not valid UTF-8 JSON/);
  });

  test("tasks/* requests count against the connection's 1024 requests in flight, and past it get a clear error", async () => {
    const a = await session();
    const made = await a.request(call("t", "task"));
    const taskId = made.result?.task?.taskId;
    assert.ok(taskId, JSON.stringify(made));
    // 1024 calls held at the backend fill this connection's in-flight slots.
    for (let i = 0; i < 1024; i++) a.send(call(`s${i}`, "slow", { ms: 6000 }));
    const tasks = [
      ["tasks/get", { taskId }],
      ["tasks/result", { taskId }],
      ["tasks/cancel", { taskId }],
      ["tasks/list", {}],
    ];
    tasks.forEach(([method, params], k) => a.send({ jsonrpc: "2.0", id: `k${k}`, method, params }));
    const refused = new Map();
    const slowDone = new Set();
    while (refused.size < tasks.length) {
      const m = await a.next();
      if (m.method === "notifications/tasks/status") continue;
      if (String(m.id).startsWith("s")) {
        slowDone.add(m.id); // would only come after 6 s: the slots must still be full
        continue;
      }
      refused.set(m.id, m);
    }
    assert.equal(slowDone.size, 0, "the refusals came while the calls were in flight");
    tasks.forEach(([method], k) => {
      const e = refused.get(`k${k}`);
      assert.equal(e?.error?.code, -32603, `${method}: ${JSON.stringify(e)}`);
      assert.equal(e.error.message, "too many requests in flight on this connection", method);
    });
    // Once the calls are answered, the same requests go through again.
    while (slowDone.size < 1024) {
      const m = await a.next(20000);
      if (String(m.id).startsWith("s")) {
        assert.equal(text(m), "slow done");
        slowDone.add(m.id);
      }
    }
    const got = await a.request({ jsonrpc: "2.0", id: "g", method: "tasks/get", params: { taskId } });
    assert.equal(got.result?.taskId, taskId, JSON.stringify(got));
    const listed = await a.request({ jsonrpc: "2.0", id: "l", method: "tasks/list", params: {} });
    assert.ok(listed.result?.tasks?.some((t) => t.taskId === taskId), JSON.stringify(listed));
  });

  test("a notification named like a task request does not reach the backend unchecked", async () => {
    const a = await session();
    const b = await session();
    const created = await b.request(call(1, "task"));
    const taskId = created.result?.task?.taskId;
    assert.ok(taskId, JSON.stringify(created));
    await b.next(); // its notifications/tasks/status
    const e = await a.request({ jsonrpc: "2.0", method: "tasks/cancel", params: { taskId, m: "taskmarker" } });
    assert.equal(e.error?.code, -32600, JSON.stringify(e));
    assert.match(e.error.message, /is a request/, JSON.stringify(e));
    const seen = await a.request(call("s", "seen", { marker: "taskmarker" }));
    assert.equal(text(seen), "[]", "the backend never saw b's task named by a");
  });
});

// A handshake-era backend holds one set of subscriptions for every session it serves (echo-backend's
// "subscribed" tool lists it): it holds what the sessions hold, no more, across their ends and its own
// restarts (review 15).
describe("subscriptions at a pooled handshake-era backend follow its sessions", () => {
  let shim;
  const peers = [];
  before(async () => (shim = await startShimOnSocket(join(dir, "subs.sock"), manifest, "echo")));
  after(() => {
    peers.forEach((p) => p.close());
    shim?.child.kill("SIGTERM");
  });
  const session = async () => {
    const p = new SockPeer(shim.path);
    peers.push(p);
    assert.ok((await p.request(INIT("2025-06-18", {}))).result, shim.stderr());
    return p;
  };
  const sub = (id, uri, method = "resources/subscribe") => ({ jsonrpc: "2.0", id, method, params: { uri } });
  const held = async (p, id) => JSON.parse(text(await p.request(call(id, "subscribed"))));

  test("a session that ends lets go of the URIs only it held; one another session holds stays", async () => {
    const a = await session();
    const b = await session();
    for (const [id, uri] of [[1, "echo://only-a"], [2, "echo://both"], [3, "echo://only-a2"]])
      assert.deepEqual((await a.request(sub(id, uri))).result, {});
    assert.deepEqual((await b.request(sub(1, "echo://both"))).result, {});
    assert.deepEqual(await held(b, 2), ["echo://both", "echo://only-a", "echo://only-a2"]);
    a.close();
    // Before: the backend kept watching echo://only-a and echo://only-a2 for nobody, for as long as it ran.
    let now;
    await waitFor(async () => (now = await held(b, `h${Date.now()}`)).length === 1, 10000);
    assert.deepEqual(now, ["echo://both"]);
    b.send(call(4, "touch", { uri: "echo://both" }));
    assert.deepEqual((await b.next()).params, { uri: "echo://both" }, "b is still subscribed");
    assert.equal((await b.next()).id, 4);
    b.close();
    const c = await session();
    await waitFor(async () => (now = await held(c, `h${Date.now()}`)).length === 0, 10000);
    assert.deepEqual(now, [], "the last session out let go of all");
    c.close();
  });

  test("a backend that restarts is asked for what its sessions hold, before the call that restarted it", async () => {
    const a = await session();
    const b = await session();
    assert.deepEqual((await a.request(sub(1, "echo://r-a"))).result, {});
    assert.deepEqual((await b.request(sub(1, "echo://r-b"))).result, {});
    assert.deepEqual((await b.request(sub(2, "echo://gone", "resources/unsubscribe"))).result, {});
    const died = await b.request(call(3, "exit"));
    assert.ok(died.error || died.result?.isError, JSON.stringify(died));
    // The touch starts a new process; before, it held nothing and the update never came.
    a.send(call(2, "touch", { uri: "echo://r-a" }));
    assert.deepEqual((await a.next()).params, { uri: "echo://r-a" }, shim.stderr());
    assert.equal((await a.next()).id, 2);
    assert.deepEqual(await held(b, 4), ["echo://r-a", "echo://r-b"]);
    assert.match(shim.stderr(), /its sessions' 2 resource subscriptions made again/);
    a.close();
    b.close();
  });

  test("a session whose roots change moves to the backend process for them: its subscriptions go with it, the old process lets go of them", async () => {
    const rooted = async (root) => {
      const p = rootedPeer(shim.path, root);
      peers.push(p);
      assert.ok((await p.ask(INIT("2025-06-18", { roots: { listChanged: true } }))).result, shim.stderr());
      return p;
    };
    const heldBy = async (p, id) => JSON.parse(text(await p.ask(call(id, "subscribed"))));
    const a = await rooted("move-r1"), c = await rooted("move-r1"), b = await rooted("move-r2");
    assert.deepEqual((await a.ask(sub(1, "echo://moves"))).result, {});
    assert.deepEqual(await heldBy(c, 1), ["echo://moves"]);
    assert.deepEqual(await heldBy(b, 1), []);
    const moved = () => (shim.stderr().match(/changed its roots; its next calls go to the backend for them/g) ?? []).length;
    const before = moved();
    a.root = "move-r2";
    a.send({ jsonrpc: "2.0", method: "notifications/roots/list_changed" });
    assert.deepEqual(await a.ask({ jsonrpc: "2.0", id: "p", method: "ping" }), { jsonrpc: "2.0", id: "p", result: {} });
    assert.ok(await waitFor(() => moved() > before, 10000), shim.stderr());
    assert.deepEqual(await heldBy(b, 2), ["echo://moves"], "the new process holds what the session brought");
    assert.deepEqual(await heldBy(c, 2), [], "the old process let go of what only the session held");
    const t = await a.ask(call(2, "touch", { uri: "echo://moves" }));
    assert.equal(t.method, "notifications/resources/updated", JSON.stringify(t));
    assert.equal((await a.ask()).id, 2);
    a.close();
    assert.ok(await waitFor(async () => (await heldBy(b, `h${Date.now()}`)).length === 0, 10000), "the session's leave let go of it at its new process");
  });

  test("a subscribe the session cancelled, which the backend granted all the same, is let go there", async () => {
    const a = await session();
    const cancel = { jsonrpc: "2.0", method: "notifications/cancelled", params: { requestId: 1 } };
    // One write: the shim sends both on before it reads the backend's grant, which it then drops.
    a.send(`${JSON.stringify(sub(1, "echo://cancelled"))}\n${JSON.stringify(cancel)}`);
    // Before: the backend watched echo://cancelled for nobody, for as long as it ran.
    assert.deepEqual(await held(a, 2), [], "the next answer a reads is its call's: none for the cancelled");
    a.close();
  });

  test("a subscription the restarted backend refuses is logged, naming the backend and its error", async () => {
    const a = await session();
    assert.deepEqual((await a.request(sub(1, "echo://refuse/x"))).result, {});
    writeFileSync(join(dir, "refuse"), "");
    try {
      await a.request(call(2, "exit"));
      const t = await a.request(call(3, "touch", { uri: "echo://refuse/x" }));
      assert.equal(t.id, 3, `no update from a backend that refused it: ${JSON.stringify(t)}`);
      assert.ok(
        await waitFor(() => /Backend 'echo' \(pid \d+\): 1 of 1 resources\/subscribe made again after the restart were refused; the first: echo:\/\/refuse\/x: no subscriptions to echo:\/\/refuse\/x today/.test(shim.stderr()), 10000),
        shim.stderr(),
      );
    } finally {
      rmSync(join(dir, "refuse"), { force: true });
      a.close();
    }
  });

  test("several subscriptions the restarted backend refuses make one log line, its text printable (a newline in it forges no line)", async () => {
    const a = await session();
    const uris = ["echo://refuse/1", "echo://refuse/2", "echo://refuse/3\nmcp-lazy-shimd: forged line", "echo://kept"];
    for (const [n, uri] of uris.entries()) assert.deepEqual((await a.request(sub(n + 1, uri))).result, {});
    const lines = () => shim.stderr().split("\n").filter((l) => / resources\/subscribe made again after the restart were refused/.test(l));
    const before = lines().length;
    writeFileSync(join(dir, "refuse"), "");
    try {
      await a.request(call(10, "exit"));
      assert.equal((await a.request(call(11, "touch", { uri: "echo://kept" }))).method, "notifications/resources/updated");
      assert.ok(await waitFor(() => lines().length > before, 10000), shim.stderr());
      const now = lines().slice(before);
      assert.equal(now.length, 1, now.join("\n"));
      assert.match(now[0], /: 3 of 4 resources\/subscribe made again after the restart were refused; the first: echo:\/\/refuse\//);
      assert.doesNotMatch(shim.stderr(), /^mcp-lazy-shimd: forged line/m);
    } finally {
      rmSync(join(dir, "refuse"), { force: true });
      a.close();
    }
  });
});

describe("a hostile session on a pooled backend (issue 7's review)", () => {
  const session = pooledSessions("echo2.sock");

  test("tasks/list shows each session only its own tasks, with the backend's nextCursor", async () => {
    const a = await session();
    const b = await session();
    const mine = (await a.request(call(1, "task"))).result?.task?.taskId;
    await a.next(); // its notifications/tasks/status
    const theirs = (await b.request(call(1, "task"))).result?.task?.taskId;
    await b.next();
    assert.ok(mine && theirs && mine !== theirs);
    const la = await a.request({ jsonrpc: "2.0", id: 2, method: "tasks/list", params: {} });
    assert.deepEqual(la.result.tasks.map((t) => t.taskId), [mine], JSON.stringify(la));
    assert.equal(la.result.nextCursor, "more");
    const lb = await b.request({ jsonrpc: "2.0", id: 2, method: "tasks/list" });
    assert.deepEqual(lb.result.tasks.map((t) => t.taskId), [theirs], JSON.stringify(lb));
  });

  test("progress a backend sends after its call ended does not land on a later call with the same token", async () => {
    const a = await session();
    const withToken = (id, name, args) => ({ ...call(id, name, args), params: { name, arguments: args, _meta: { progressToken: "T" } } });
    assert.equal(text(await a.request(withToken(1, "late", { ms: 300 }))), "early");
    a.send(withToken(2, "slow", { ms: 900 }));
    const r = await a.next(5000);
    assert.equal(r.id, 2, `only the answer, no stale progress: ${JSON.stringify(r)}`);
    assert.equal(text(r), "slow done");
  });

  test("a session cannot send progress for another session's request from the backend", async () => {
    const a = await session();
    const b = await session();
    b.send(call("b1", "askp"));
    const ask = await b.next();
    assert.equal(ask.method, "sampling/createMessage", JSON.stringify(ask));
    const token = ask.params._meta.progressToken;
    const progress = (marker) => ({ jsonrpc: "2.0", method: "notifications/progress", params: { progressToken: token, progress: 1, message: marker } });
    a.send(progress("spoofmarker"));
    a.send({ jsonrpc: "2.0", method: "notifications/progress", params: { progressToken: "whatever", progress: 1, message: "spoofmarker" } });
    b.send(progress("ownmarker"));
    await sleep(200);
    b.send({ jsonrpc: "2.0", id: ask.id, result: { role: "assistant", content: { type: "text", text: "ok" }, model: "m" } });
    assert.equal((await b.next()).id, "b1");
    assert.equal(text(await a.request(call("s", "seen", { marker: "spoofmarker" }))), "[]", "the backend never saw a's progress");
    assert.equal(JSON.parse(text(await a.request(call("s2", "seen", { marker: "ownmarker" })))).length, 1, "b's own progress reached it");
  });

  test("a session's answer to the backend's request counts only under the id it was given, all of it", async () => {
    const b = await session();
    b.send(call("b1", "ask"));
    const ask = await b.next();
    assert.equal(ask.method, "sampling/createMessage", JSON.stringify(ask));
    const answer = (id, t) => `{"jsonrpc":"2.0","id":${JSON.stringify(id)},"result":{"role":"assistant","content":{"type":"text","text":"${t}"},"model":"m"}}`;
    // Cut at its NUL this id is the one given (mcp-lazy-upcall:N); it is not: the answer goes nowhere.
    b.sock.write(answer(ask.id + "\u0000x", "wrong") + "\n" + answer(ask.id, "right") + "\n");
    const r = await b.next();
    assert.equal(r.id, "b1", JSON.stringify(r));
    assert.match(text(r), /right/, JSON.stringify(r));
  });

  test("a session's invalid or unreadable answer to the backend's request fails that request, which waited for ever", async () => {
    const b = await session();
    for (const [k, bad, why] of [
      [1, (id) => `{"jsonrpc":"2.0","id":${JSON.stringify(id)},"result":{},"error":{"code":1,"message":"both"}}`, /the client's answer was invalid \(a message needs .*method/],
      [2, (id) => `{"jsonrpc":"2.0","id":${JSON.stringify(id)},"result":{"x":"\\ud800"}}`, /the client's answer was invalid \(not one line of valid UTF-8 JSON\)/],
    ]) {
      b.send(call(`b${k}`, "ask"));
      const ask = await b.next();
      assert.equal(ask.method, "sampling/createMessage", JSON.stringify(ask));
      b.sock.write(bad(ask.id) + "\n");
      const r = await b.next(10000);
      assert.equal(r.id, `b${k}`, JSON.stringify(r));
      assert.match(text(r), why, JSON.stringify(r));
    }
  });

  test("a backend's invalid answer fails its call whatever other keys it has; a line with a method is never an answer", async () => {
    const a = await session();
    // Keys as the scan reads them: "METHOD" or "method\u0000" makes no request of an invalid answer
    // (cJSON's look-up, case-insensitive and cut at the NUL, took both for one, and the call waited).
    for (const [k, line, why] of [
      [1, '{"jsonrpc":"2.0","id":$ID,"METHOD":"x","result":{},"error":{"code":1,"message":"m"}}', /a message needs .*method/],
      [2, '{"jsonrpc":"2.0","id":$ID,"method\\u0000":"x","result":{}}', /an object key must not hold a NUL/],
    ]) {
      const r = await a.request(call(`k${k}`, "send", { lines: [line] }), 10000);
      assert.equal(r.id, `k${k}`, JSON.stringify(r));
      assert.equal(r.result?.isError, true, JSON.stringify(r));
      assert.match(text(r), /backend 'echo' sent an invalid answer to this call/, JSON.stringify(r));
      assert.match(text(r), why, JSON.stringify(r));
    }
    // A request the shim cannot read, under the shim's own id for the call (a backend's ids may look
    // like ours), with "method" twice: no answer, so the call gets its real one; the backend is told.
    const r = await a.request(call("k3", "send", { answer: true, lines: ['{"jsonrpc":"2.0","id":$ID,"method":"sampling/createMessage","method":"x","params":{"a":"\\ud800"}}'] }), 10000);
    assert.equal(text(r), "sent", JSON.stringify(r));
    const seen = await a.request(call("k4", "seen", { marker: "cannot read this request" }));
    assert.match(text(seen), /mcp-lazy-shimd cannot read this request \(not valid UTF-8 JSON\)/, JSON.stringify(seen));
  });

  test("an invalid request from the backend is answered with the JSON-RPC error", async () => {
    const a = await session();
    const r = await a.request(call(1, "badreq"), 5000);
    const e = JSON.parse(text(r));
    assert.equal(e.code, -32600, JSON.stringify(r));
    assert.match(e.message, /"params" must be an object or an array/);
  });

  test("ids, progress tokens and task ids longer than 1024 bytes are refused, naming the limit", async () => {
    const a = await session();
    const e = await a.request({ jsonrpc: "2.0", id: "i".repeat(2000), method: "ping" });
    assert.equal(e.id, null);
    assert.equal(e.error?.code, -32600, JSON.stringify(e).slice(0, 200));
    assert.match(e.error.message, /"id" is longer than 1024 bytes, the limit/);
    const p = await a.request({ ...call(5, "progress"), params: { name: "progress", arguments: {}, _meta: { progressToken: "p".repeat(1100) } } });
    assert.equal(p.id, 5);
    assert.match(p.error?.message ?? "", /progress token is longer than 1024 bytes/);
    const t = await a.request({ jsonrpc: "2.0", id: 6, method: "tasks/get", params: { taskId: "t".repeat(1100) } });
    assert.match(t.error?.message ?? "", /task id is longer than 1024 bytes/);
    const after = await a.request(call(7, "raw"));
    assert.equal(after.id, 7, "the session goes on");
  });
});

describe("a session past the line limit of a pooled shim", () => {
  const session = pooledSessions("echo3.sock", ["--max-line-bytes", "4096"]);

  test("a line past the limit answers the backend's request only under its whole id and without a method", async () => {
    const b = await session();
    b.send(call("b1", "ask"));
    const ask = await b.next();
    assert.equal(ask.method, "sampling/createMessage", JSON.stringify(ask));
    for (const [id, line] of oversizeNonAnswers(ask.id)) {
      b.sock.write(line + "\n");
      const e = await b.next();
      assert.equal(e.id, id, JSON.stringify(e));
      assert.equal(e.error?.code, -32600, JSON.stringify(e));
      assert.match(e.error.message, /longer than the 4096-byte limit/);
    }
    // The backend's request still waits for its answer, and takes it.
    b.send({ jsonrpc: "2.0", id: ask.id, result: { role: "assistant", content: { type: "text", text: "right" }, model: "m" } });
    const r = await b.next();
    assert.equal(r.id, "b1", JSON.stringify(r));
    assert.match(text(r), /right/, JSON.stringify(r));
  });
});

describe("the frontend, with a shim that sends an invalid request", () => {
  test("the invalid request is answered with the JSON-RPC error, and the session goes on", async () => {
    // A stand-in for a (remote, or compromised) shim on the backend's socket.
    const sock = join(dir, "fake-shim.sock");
    const got = [];
    const server = createServer((c) =>
      onLines(c, (line) => {
        const m = JSON.parse(line);
        got.push(m);
        if (m.method === "initialize")
          c.write(JSON.stringify({ jsonrpc: "2.0", id: m.id, result: { protocolVersion: "2025-06-18", capabilities: { tools: {} }, serverInfo: { name: "fake", version: "1" } } }) + "\n");
        if (m.method === "tools/call") {
          c.write(JSON.stringify({ jsonrpc: "2.0", id: "srv-1", method: "sampling/createMessage", params: "not an object" }) + "\n");
          setTimeout(() => c.write(JSON.stringify({ jsonrpc: "2.0", id: m.id, result: { content: [{ type: "text", text: "done" }] } }) + "\n"), 200);
        }
      }),
    );
    await new Promise((r) => server.listen(sock, r));
    const m = join(dir, "fake.yaml");
    writeFileSync(m, `backends:\n  fake: {command: [x], socket: ${sock}}\ntools:\n  - {name: t, backend: fake, input_schema: {type: object}}\n`);
    const p = new RawPeer(MCP_LAZY, ["--manifest", m, "--activation=systemd"]);
    assert.ok((await p.request(INIT("2025-06-18", { sampling: {} }))).result);
    const r = await p.request(call(1, "t"), 10000);
    assert.equal(text(r), "done", JSON.stringify(r));
    const answer = got.find((x) => x.id === "srv-1");
    assert.equal(answer?.error?.code, -32600, JSON.stringify(got));
    assert.match(answer.error.message, /"params" must be an object or an array/);
    await p.close();
    server.close();
  });
});

describe("the frontend, with a shim that answers a call with a bad line", () => {
  // A stand-in for a hostile shim on the backend's socket: it answers the handshake properly, then
  // answers tools/call as its "mode" argument says. Before the fix, a line that was not JSON, or an
  // invalid answer without an id, was only logged, and the call it answered waited for ever.
  const sock = join(dir, "bad-lines.sock");
  const conns = [];
  const held = [];
  const answer = (id) => JSON.stringify({ jsonrpc: "2.0", id, result: { content: [{ type: "text", text: "fine" }] } });
  const bad = {
    // Bytes that are not UTF-8 inside a string: the id can still be read.
    utf8: (id) => Buffer.concat([Buffer.from(`{"jsonrpc":"2.0","id":${JSON.stringify(id)},"result":{"content":[{"type":"text","text":"`), Buffer.from([0xff, 0xfe, 0x80]), Buffer.from('"}]}}\n')]),
    // A line cut off after its id.
    truncated: (id) => `{"jsonrpc":"2.0","id":${JSON.stringify(id)},"result":{"content":[{"type":"te\n`,
    // A line cut off before any id: it could be any call's answer.
    truncatedNoId: () => '{"jsonrpc":"2.0","result":{"content":[{"type":"te\n',
    // JSON, but an answer without an id, and one whose id is not a valid id.
    noId: () => JSON.stringify({ jsonrpc: "2.0", result: { content: [{ type: "text", text: "whose?" }] } }) + "\n",
    badId: () => JSON.stringify({ jsonrpc: "2.0", id: { x: 1 }, result: { content: [] } }) + "\n",
    // A notification that is not JSON is only dropped; the call's real answer follows.
    badNotification: (id) => Buffer.concat([Buffer.from('{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"'), Buffer.from([0xff]), Buffer.from('"}}\n' + answer(id) + "\n")]),
  };
  let server, p;
  before(async () => {
    server = createServer((c) => {
      conns.push(c);
      onLines(c, (line) => {
        const m = JSON.parse(line);
        if (m.method === "initialize")
          c.write(JSON.stringify({ jsonrpc: "2.0", id: m.id, result: { protocolVersion: "2025-06-18", capabilities: { tools: {} }, serverInfo: { name: "fake", version: "1" } } }) + "\n");
        if (m.method === "tools/call") {
          const mode = m.params?.arguments?.mode;
          // "later": answered after the next call with mode "now" (answers out of order).
          if (mode === "later") return void held.push(m.id);
          c.write(mode in bad ? bad[mode](m.id) : answer(m.id) + "\n");
          if (mode === "now") for (const id of held.splice(0)) c.write(answer(id) + "\n");
        }
      });
    });
    await new Promise((r) => server.listen(sock, r));
    const mf = join(dir, "bad-lines.yaml");
    writeFileSync(mf, `backends:\n  fake: {command: [x], socket: ${sock}}\ntools:\n  - {name: t, backend: fake, input_schema: {type: object}}\n`);
    p = new RawPeer(MCP_LAZY, ["--manifest", mf, "--activation=systemd"]);
    assert.ok((await p.request(INIT("2025-06-18"))).result);
    const ok = await p.request(call("warm", "t"), 10000);
    assert.equal(text(ok), "fine", JSON.stringify(ok));
  });
  after(async () => {
    await p?.close();
    conns.forEach((c) => c.destroy());
    server?.close();
  });

  let n = 0;
  // The call fails within 10 s (it hung before), and the next call works.
  async function failsThenRecovers(mode, expect) {
    const r = await p.request(call(`${mode}-${++n}`, "t", { mode }), 10000);
    assert.equal(r.id, `${mode}-${n}`, JSON.stringify(r));
    assert.equal(r.result?.isError, true, JSON.stringify(r));
    assert.match(text(r), expect, JSON.stringify(r));
    const ok = await p.request(call(`ok-${++n}`, "t"), 10000);
    assert.equal(text(ok), "fine", JSON.stringify(ok));
  }
  const invalidAnswer = (why) => new RegExp(`backend 'fake' sent an invalid answer to this call \\(${why}\\)`);
  const lost = (why) => new RegExp(`lost the connection to backend 'fake' \\(it sent an invalid message without a readable id: ${why}, beginning '\\{"jsonrpc":"2\\.0",.*'\\); the call may or may not have run`);

  test("an answer with bytes that are not UTF-8 fails its call, naming the backend", async () => {
    const before = conns.length;
    await failsThenRecovers("utf8", invalidAnswer("a line that is not valid UTF-8 JSON"));
    assert.equal(conns.length, before, "the connection stays: only that call failed");
  });

  test("a truncated answer fails its call when its id can be read", async () => {
    await failsThenRecovers("truncated", invalidAnswer("a line that is not valid UTF-8 JSON"));
  });

  test("a failed call's answer carries the call's id as the client wrote it, one too long to be kept inline too", async () => {
    for (const id of [`long-${"x".repeat(100)}`, `esc-\u00e9"\\-${++n}`, 9007199254740991]) {
      const r = await p.request(call(id, "t", { mode: "truncated" }), 10000);
      assert.equal(r.id, id, JSON.stringify(r));
      assert.equal(r.result?.isError, true, JSON.stringify(r));
      assert.match(text(r), invalidAnswer("a line that is not valid UTF-8 JSON"), JSON.stringify(r));
    }
  });

  test("a truncated line without an id closes the connection, failing its call; the next call reconnects", async () => {
    const before = conns.length;
    await failsThenRecovers("truncatedNoId", lost("a line that is not valid UTF-8 JSON"));
    assert.equal(conns.length, before + 1, "the next call made a new connection");
  });

  test("an answer without an id closes the connection, failing its call; the next call reconnects", async () => {
    const before = conns.length;
    await failsThenRecovers("noId", lost('a message needs "method", or "id" with exactly one of "result" and "error"'));
    assert.equal(conns.length, before + 1, "the next call made a new connection");
  });

  test("an answer whose id is not a valid id closes the connection too", async () => {
    const before = conns.length;
    await failsThenRecovers("badId", lost('"id" must be a string or an integer'));
    assert.equal(conns.length, before + 1, "the next call made a new connection");
  });

  test("answers out of the order of their calls each reach their call", async () => {
    p.send(call(`first-${++n}`, "t", { mode: "later" }));
    p.send(call(`second-${n}`, "t", { mode: "later" }));
    p.send(call(`third-${n}`, "t", { mode: "now" }));
    const got = await p.next(3, 10000);
    assert.deepEqual(got.map((r) => r.id), [`third-${n}`, `first-${n}`, `second-${n}`], JSON.stringify(got));
    for (const r of got) assert.equal(text(r), "fine", JSON.stringify(r));
    const ok = await p.request(call(`ok-${++n}`, "t"), 10000);
    assert.equal(text(ok), "fine", JSON.stringify(ok));
  });

  test("a notification that is not JSON is dropped, and the call's answer still arrives", async () => {
    const before = conns.length;
    const r = await p.request(call(`bn-${++n}`, "t", { mode: "badNotification" }), 10000);
    assert.equal(text(r), "fine", JSON.stringify(r));
    assert.equal(conns.length, before);
  });
});

describe("the frontend, with a shim that sends null ids, requests it cannot read, and bad answers to initialize", () => {
  // A stand-in shim again. Each tools/call's "mode" says what it writes before (or instead of) the
  // call's answer; "init" says how the next connection's initialize is answered.
  const sock = join(dir, "robust.sock");
  const conns = [];
  const got = []; // what the frontend sent that was not initialize, initialized or tools/call
  let init = "ok";
  const answer = (id) => JSON.stringify({ jsonrpc: "2.0", id, result: { content: [{ type: "text", text: "fine" }] } });
  const deep = (n) => "[".repeat(n) + "]".repeat(n);
  const before_ = {
    // An error to a message the shim could not read: id null. Invalid (result and error both) or valid.
    nullInvalid: () => JSON.stringify({ jsonrpc: "2.0", id: null, result: {}, error: { code: -32700, message: "Parse error" } }),
    nullValid: () => JSON.stringify({ jsonrpc: "2.0", id: null, error: { code: -32700, message: "Parse error" } }),
    // A request from the backend that cannot be read (nested too deep), under the id of the call.
    deepRequest: (id) => `{"jsonrpc":"2.0","id":${JSON.stringify(id)},"method":"sampling/createMessage","params":{"x":${deep(200)}}}`,
    // The same request past the line limit (--max-line-bytes 4096 below).
    longRequest: (id) => `{"jsonrpc":"2.0","id":${JSON.stringify(id)},"method":"sampling/createMessage","params":{"x":"${"y".repeat(8192)}"}}`,
  };
  const initAnswer = {
    ok: (id) => JSON.stringify({ jsonrpc: "2.0", id, result: { protocolVersion: "2025-06-18", capabilities: { tools: {} }, serverInfo: { name: "fake", version: "1" } } }),
    invalid: (id) => JSON.stringify({ jsonrpc: "2.0", id, result: { protocolVersion: "2025-06-18" }, error: { code: 1, message: "both" } }),
    // A lone surrogate escape: not JSON to the message layer, its id still readable.
    notJson: (id) => `{"jsonrpc":"2.0","id":${JSON.stringify(id)},"result":{"protocolVersion":"2025-06-18","x":"\\ud800"}}`,
    long: (id) => JSON.stringify({ jsonrpc: "2.0", id, result: { protocolVersion: "2025-06-18", x: "y".repeat(8192) } }),
  };
  const mf = join(dir, "robust.yaml");
  let server, p;
  before(async () => {
    server = createServer((c) => {
      conns.push(c);
      c.on("error", () => {}); // the frontend closes a connection whose initialize was answered badly
      const mode = init;
      onLines(c, (line) => {
        const m = JSON.parse(line);
        if (m.method === "initialize") return c.write(initAnswer[mode](m.id) + "\n");
        if (m.method === "resources/subscribe") return c.write(initAnswer.invalid(m.id) + "\n");
        if (m.method === "tools/call") {
          const how = before_[m.params?.arguments?.mode];
          return c.write((how ? how(m.id) + "\n" : "") + answer(m.id) + "\n");
        }
        if (m.method !== "notifications/initialized") got.push(m);
      });
    });
    await new Promise((r) => server.listen(sock, r));
    writeFileSync(mf, `backends:\n  fake: {command: [x], socket: ${sock}, resources: [{uri: "x://y", name: y}]}\ntools:\n  - {name: t, backend: fake, input_schema: {type: object}}\n`);
    p = new RawPeer(MCP_LAZY, ["--manifest", mf, "--activation=systemd", "--max-line-bytes", "4096"]);
    assert.ok((await p.request(INIT("2025-06-18"))).result);
    const ok = await p.request(call("warm", "t"), 10000);
    assert.equal(text(ok), "fine", JSON.stringify(ok));
  });
  after(async () => {
    await p?.close();
    conns.forEach((c) => c.destroy());
    server?.close();
  });

  // The call gets its real answer, on the same connection (before: a null id or a request that could
  // not be read closed it, or failed the call).
  async function answered(id, mode, log) {
    const n = conns.length;
    const r = await p.request(call(id, "t", { mode }), 10000);
    assert.equal(r.id, id, JSON.stringify(r));
    assert.equal(text(r), "fine", `${JSON.stringify(r)}\n${p.stderr}`);
    assert.equal(conns.length, n, "the connection stayed");
    assert.ok(await waitFor(() => log.test(p.stderr), 5000), p.stderr);
  }

  test("an invalid answer with id null is dropped with a warning, as a valid one is: no call fails", async () => {
    await answered("n1", "nullInvalid", /Backend 'fake' sent an invalid answer with "id": null \(a message needs .*\), ignoring it/);
    await answered("n2", "nullValid", /Backend 'fake' sent an error with "id": null \(Parse error\), ignoring it/);
  });

  test("a request from the shim that cannot be read never fails the call its id names", async () => {
    // Client ids may look like the shim's own request ids.
    got.length = 0;
    await answered("mcp-lazy-upcall:3", "deepRequest", /Backend 'fake' sent a request that cannot be read \(JSON nested deeper than 128 levels\)/);
    // The shim is told, under the id it used: its backend's request does not wait for ever.
    assert.ok(await waitFor(() => got.length > 0, 5000));
    assert.equal(got[0].id, "mcp-lazy-upcall:3", JSON.stringify(got));
    assert.match(got[0].error?.message ?? "", /nested deeper than 128 levels/, JSON.stringify(got));
    got.length = 0;
    await answered("mcp-lazy-upcall:4", "longRequest", /Backend 'fake' sent a request that cannot be read \(a message longer than the 4096-byte limit/);
    assert.ok(await waitFor(() => got.length > 0, 5000));
    assert.equal(got[0].id, "mcp-lazy-upcall:4", JSON.stringify(got));
  });

  // The connection is dropped by the shim; the next call makes a new one, whose initialize is answered
  // as "mode" says: its calls fail naming the backend and why, and the call after that connects again.
  for (const [mode, why] of [
    ["invalid", 'a message needs "method", or "id" with exactly one of "result" and "error"'],
    ["notJson", "a line that is not valid UTF-8 JSON"],
    ["long", "a message longer than the 4096-byte limit \\(see --max-line-bytes\\)"],
  ])
    test(`a bad answer to initialize (${mode}) fails the calls on that connection and closes it`, async () => {
      conns.at(-1).destroy();
      await sleep(300);
      init = mode;
      const n = conns.length;
      const r = await p.request(call(`i-${mode}`, "t"), 10000);
      init = "ok";
      assert.equal(r.result?.isError, true, JSON.stringify(r));
      assert.match(text(r), new RegExp(`lost the connection to backend 'fake' \\(it sent an invalid answer to initialize: ${why}\\); the call may or may not have run`), JSON.stringify(r));
      assert.equal(conns.length, n + 1);
      const ok = await p.request(call(`ok-${mode}`, "t"), 10000);
      assert.equal(text(ok), "fine", JSON.stringify(ok));
      assert.equal(conns.length, n + 2, "the next call connected again");
    });

  test("an invalid answer to the frontend's own subscribe refuses it: the 2026-07-28 stream is still acknowledged", async () => {
    // Before: it was "an answer to no call", and the stream waited for ever for its acknowledgement.
    const q = new RawPeer(MCP_LAZY, ["--manifest", mf, "--activation=systemd"]);
    const env = { "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {} };
    try {
      q.send({ jsonrpc: "2.0", id: "s1", method: "subscriptions/listen", params: { notifications: { resourceSubscriptions: ["x://y"] }, _meta: env } });
      const [ack] = await q.next(1, 10000);
      assert.equal(ack.method, "notifications/subscriptions/acknowledged", JSON.stringify(ack));
      assert.equal(ack.params?.notifications?.resourceSubscriptions, undefined, JSON.stringify(ack));
      assert.ok(await waitFor(() => /Backend 'fake' refused a subscription to 'x:\/\/y': backend 'fake' sent an invalid answer \(a message needs/.test(q.stderr), 5000), q.stderr);
    } finally {
      await q.close();
    }
  });
});

describe("the frontend, with a client at the edges of framing", () => {
  test("a last line without its newline is answered before the frontend exits", async () => {
    const p = new RawPeer(MCP_LAZY, ["--manifest", manifest, "--activation=direct", "--shimd", SHIMD]);
    p.child.stdin.end('{"jsonrpc":"2.0","id":"last","method":"ping"}');
    const [r] = await p.next(1);
    assert.deepEqual(r, { jsonrpc: "2.0", id: "last", result: {} });
    await p.exitWithin();
  });

  test("a batch has a bounded number of members (each answer is held until the last)", async () => {
    const p = new RawPeer(MCP_LAZY, ["--manifest", manifest]);
    assert.ok((await p.request(INIT("2025-03-26"))).result);
    p.send(`[${Array(5000).fill('{"jsonrpc":"2.0","method":"notifications/x"}').join(",")}]`);
    const [e] = await p.next(1);
    assert.equal(e.error?.code, -32600, JSON.stringify(e));
    assert.match(e.error.message, /a batch of 5000 messages; at most 4096/);
    p.send(`[${Array(4096).fill('{"jsonrpc":"2.0","id":1,"method":"ping"}').join(",")}]`);
    const [arr] = await p.next(1);
    assert.equal(arr.length, 4096);
    await p.close();
  });

  test("a client's answer to a backend's request past the line limit fails that request, not silently", async () => {
    const p = new RawPeer(MCP_LAZY, ["--manifest", manifest, "--activation=direct", "--shimd", SHIMD, "--max-line-bytes", "4096"]);
    const init = await p.request(INIT("2025-06-18", { sampling: {} }));
    assert.ok(init.result, JSON.stringify(init));
    p.send(call(1, "ask"));
    const [ask] = await p.next(1);
    assert.equal(ask.method, "sampling/createMessage", JSON.stringify(ask));
    p.send({ jsonrpc: "2.0", id: ask.id, result: { role: "assistant", content: { type: "text", text: "x".repeat(8000) }, model: "m" } });
    const [r] = await p.next(1);
    assert.equal(r.id, 1, `the call is answered (no reply to the client's own answer): ${JSON.stringify(r)}`);
    assert.match(text(r), /longer than the 4096-byte limit/, JSON.stringify(r));
    await p.close();
  });

  test("a client's line past the limit answers a backend's request only under its whole id and without a method", async () => {
    const p = new RawPeer(MCP_LAZY, ["--manifest", manifest, "--activation=direct", "--shimd", SHIMD, "--max-line-bytes", "4096"]);
    assert.ok((await p.request(INIT("2025-06-18", { sampling: {} }))).result);
    p.send(call(1, "ask"));
    const [ask] = await p.next(1);
    assert.equal(ask.method, "sampling/createMessage", JSON.stringify(ask));
    for (const [id, line] of oversizeNonAnswers(ask.id)) {
      p.send(line);
      const [e] = await p.next(1);
      assert.equal(e.id, id, JSON.stringify(e));
      assert.equal(e.error?.code, -32600, JSON.stringify(e));
      assert.match(e.error.message, /longer than the 4096-byte limit/);
    }
    p.send({ jsonrpc: "2.0", id: ask.id, result: { role: "assistant", content: { type: "text", text: "right" }, model: "m" } });
    const [r] = await p.next(1);
    assert.equal(r.id, 1, JSON.stringify(r));
    assert.match(text(r), /right/, JSON.stringify(r));
    await p.close();
  });
});
