// A pooled backend that dies in the middle of an answer line, with two sessions using the same
// request id at once and one of them half-closed: every call gets exactly one answer, in the right
// session; nothing of the cut line reaches anyone; the next call starts the backend again; neither
// the shim nor the frontend crashes or hangs. No systemd needed: the shim runs behind
// systemd-socket-activate (Accept=no, as the shipped units run it), one session comes through the
// frontend and one straight to the socket. The backend (tests/servers/dies-mid-line.mjs) does what
// the calls tell it, so every step waits for a message, never for a time.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { INIT, MCP_LAZY, RawPeer, TESTS, cleanupPeers, startShimOnSocket, waitFor } from "./lib/env.mjs";
import { onLines } from "./lib/lines.mjs";

after(cleanupPeers);
const dir = mkdtempSync(join(tmpdir(), "mcp-lazy-crash-"));
after(() => rmSync(dir, { recursive: true, force: true }));
const BACKEND = join(TESTS, "servers/dies-mid-line.mjs");
const CUT_TEXT = "PARTIAL-ANSWER-MUST-NEVER-ARRIVE"; // what the backend's cut line carries
const noteFile = join(dir, "notes.txt");
const sock = join(dir, "crash.sock");
const manifest = join(dir, "m.yaml");
writeFileSync(
  manifest,
  `backends:
  crash:
    command: [${process.execPath}, ${BACKEND}]
    env: {NOTE_FILE: ${noteFile}}
    idle_timeout: 10m
    socket: ${sock}
tools:
${["hold", "crash", "echo", "ask", "exit"].map((t) => `  - {name: ${t}, backend: crash, input_schema: {type: object}}`).join("\n")}
`,
);

const call = (id, name, args, meta) => ({ jsonrpc: "2.0", id, method: "tools/call", params: { name, arguments: args, ...(meta ? { _meta: meta } : {}) } });
const textOf = (m) => m.result?.content?.[0]?.text ?? JSON.stringify(m);
const initialized = { jsonrpc: "2.0", method: "notifications/initialized" };

// A session straight on the shim's socket, which can half-close (end its write side) and still read.
function rawSession(path) {
  const s = net.connect({ path, allowHalfOpen: true });
  const conn = { s, raw: [], ended: false, buf: "" };
  s.setEncoding("utf8");
  s.on("data", (d) => {
    conn.buf += d;
    let i;
    while ((i = conn.buf.indexOf("\n")) >= 0) {
      conn.raw.push(conn.buf.slice(0, i));
      conn.buf = conn.buf.slice(i + 1);
    }
  });
  s.on("end", () => (conn.ended = true));
  s.on("error", () => (conn.ended = true));
  conn.send = (m) => s.write(JSON.stringify(m) + "\n");
  let read = 0;
  // The next message; fails (rather than hang) when the shim closes the connection first.
  conn.next = async () => {
    assert.ok(await waitFor(() => conn.raw.length > read || conn.ended, 30000), `a message arrives; have ${JSON.stringify(conn.raw)}`);
    assert.ok(conn.raw.length > read, `the shim closed the connection; got ${JSON.stringify(conn.raw)}`);
    return JSON.parse(conn.raw[read++]);
  };
  // Resolves once shutdown(SHUT_WR) is done: the shim's socket has our EOF from then on.
  conn.halfClose = () => new Promise((r) => s.end(r));
  return conn;
}

// Messages from next() until one satisfies pred; returns [it, those before it].
async function until(next, pred) {
  const before = [];
  for (;;) {
    const m = await next();
    if (pred(m)) return [m, before];
    before.push(m);
  }
}

// How a child exited, or that it did not within ms (a bound for a hang, not a timing).
async function exitWithin(exited, ms = 30000) {
  let bound;
  const r = await Promise.race([exited, new Promise((res) => (bound = setTimeout(() => res(`still running after ${ms} ms`), ms)))]);
  clearTimeout(bound);
  return r;
}

// Which process ran which call: [pid, name, tag] per tools/call the backend read.
const notes = () =>
  readFileSync(noteFile, "utf8")
    .split("\n")
    .filter(Boolean)
    .map((l) => l.split(" "));

test("a pooled backend dies mid-line with the same id in flight in two sessions, one half-closed: one answer each, to its own session, then a new backend", async () => {
  writeFileSync(noteFile, "");
  const shim = await startShimOnSocket(sock, manifest, "crash");
  after(() => shim.child.kill("SIGKILL"));
  const shimSays = () => `\nthe shim said: ${shim.stderr()}`;

  // Session F through the frontend (which keeps its client's ids: the shim sees 7 from both).
  const f = new RawPeer(MCP_LAZY, ["--manifest", manifest, "--activation=systemd"]);
  const fNext = async () => (await f.next(1, 30000))[0];
  const fAll = []; // every line F got (next() takes them off f.lines)
  onLines(f.child.stdout, (l) => fAll.push(l));
  assert.ok((await f.request(INIT())).result);
  f.send(initialized);
  // Session R straight on the socket.
  const r = rawSession(sock);
  r.send(INIT());
  assert.ok((await r.next()).result, shimSays());
  r.send(initialized);

  // Both hold a call with id 7 (and the same progress token) at the one backend; each is there once
  // the backend's progress for it came back, to that session.
  f.send(call(7, "hold", { tag: "F" }, { progressToken: "tok" }));
  const [fHeld, fBefore] = await until(fNext, (m) => m.method === "notifications/progress");
  assert.deepEqual([fBefore, fHeld.params], [[], { progressToken: "tok", progress: 1, message: "holding F" }]);
  r.send(call(7, "hold", { tag: "R" }, { progressToken: "tok" }));
  const rHeld = await r.next();
  assert.deepEqual(rHeld.params, { progressToken: "tok", progress: 1, message: "holding R" }, JSON.stringify(rHeld));
  const [pid1] = notes()[0];
  assert.deepEqual(notes(), [[pid1, "hold", "F"], [pid1, "hold", "R"]], "one pooled backend holds both calls");

  // R half-closes with its call in flight; then F's call makes the backend answer F's 7 whole,
  // write the first bytes of the answer to R's 7, and exit.
  await r.halfClose();
  f.send(call(8, "crash", { whole: "F", cut: "R" }));

  const died = "backend 'crash' exited with status 3 while handling this call; the next call starts it again";
  // F: its 7 answered by the backend, its 8 lost with the backend; exactly these two, once each.
  const fGot = [await fNext(), await fNext()].sort((a, b) => a.id - b.id);
  assert.deepEqual(
    fGot.map((m) => [m.id, m.result?.isError ?? false, textOf(m)]),
    [
      [7, false, `answer for F from ${pid1}`],
      [8, true, died],
    ],
    JSON.stringify(fGot) + shimSays(),
  );
  // R: its 7 lost (the cut line is no answer), told so, then the shim closes the connection.
  const rGot = await r.next();
  assert.deepEqual([rGot.id, rGot.result?.isError, textOf(rGot)], [7, true, died], JSON.stringify(rGot) + shimSays());
  assert.ok(await waitFor(() => r.ended, 30000), "the shim closes the half-closed connection once it is answered" + shimSays());
  assert.equal(r.raw.length, 3, `R got its initialize answer, its progress and one answer: ${JSON.stringify(r.raw)}`);
  assert.equal(r.buf, "", "nothing unfinished");
  for (const line of [...r.raw, ...fAll]) assert.ok(!line.includes(CUT_TEXT), `the cut line reached a session: ${line}`);

  // The next call starts the backend again, and it serves F and a new session (with id 7 again).
  const again = await f.request(call(9, "echo", { message: "again" }), 30000);
  const [, pid2] = /^echo again from (\d+)$/.exec(textOf(again)) ?? assert.fail(JSON.stringify(again) + shimSays());
  assert.notEqual(pid2, pid1, "a new backend process");
  const r2 = rawSession(sock);
  r2.send(INIT());
  assert.ok((await r2.next()).result);
  r2.send(call(7, "echo", { message: "r2" }));
  assert.equal(textOf(await r2.next()), `echo r2 from ${pid2}`);
  // Each call ran once, where the test says: the lost ones were not sent again to the new backend.
  assert.deepEqual(notes(), [
    [pid1, "hold", "F"],
    [pid1, "hold", "R"],
    [pid1, "crash", ""],
    [pid2, "echo", "again"],
    [pid2, "echo", "r2"],
  ]);
  for (const line of [...r2.raw, ...fAll]) assert.ok(!line.includes(CUT_TEXT), `the cut line reached a session: ${line}`);
  // Its log comes on stderr, which can lag the answers.
  const logged = new RegExp(`Backend 'crash' \\(pid ${pid1}\\) exited with status 3\\.`);
  assert.ok(await waitFor(() => logged.test(shim.stderr()), 20000), shimSays());

  // Neither crashed nor hangs: the frontend ends with its input, the shim on SIGTERM, both cleanly
  // (the sanitizer builds exit otherwise, and say why on stderr).
  r2.s.end();
  assert.deepEqual(await f.close(30000), { code: 0, signal: null }, f.stderr);
  assert.equal(shim.child.exitCode, null, "the shim still runs" + shimSays());
  shim.child.kill("SIGTERM");
  assert.deepEqual(await exitWithin(shim.exited), { code: 0, signal: null }, shimSays());
  if (!shim.child.stderr.closed) await new Promise((res) => shim.child.stderr.once("close", res));
  await f.stderrEnded;
  assert.doesNotMatch(shim.stderr() + f.stderr, /AddressSanitizer|runtime error|LeakSanitizer/);
});

test("a backend that dies with a request of its own at a session: the session is told it is withdrawn, and its late answer harms nothing", async () => {
  writeFileSync(noteFile, "");
  // A shim of its own, reached through the frontend: the withdrawal comes under the id the frontend
  // gave its client.
  const askSock = join(dir, "ask.sock");
  const askManifest = join(dir, "ask.yaml");
  writeFileSync(askManifest, readFileSync(manifest, "utf8").replace(`socket: ${sock}`, `socket: ${askSock}`));
  const shim = await startShimOnSocket(askSock, askManifest, "crash");
  after(() => shim.child.kill("SIGKILL"));
  const shimSays = () => `\nthe shim said: ${shim.stderr()}`;
  const f = new RawPeer(MCP_LAZY, ["--manifest", askManifest, "--activation=systemd"]);
  const next = async () => (await f.next(1, 30000))[0];
  assert.ok((await f.request(INIT("2025-06-18", { sampling: {} }))).result);
  f.send(initialized);
  // The backend asks the session something while call 1 runs.
  f.send(call(1, "ask", {}));
  const ask = await next();
  assert.equal(ask.method, "sampling/createMessage", JSON.stringify(ask) + shimSays());
  // Call 2 makes it exit before the session answers: both calls fail, and the question is withdrawn
  // (before the fix nothing told the session: a client would go on asking its user or its model).
  f.send(call(2, "exit", {}));
  const died = "backend 'crash' exited with status 3 while handling this call; the next call starts it again";
  const got = [];
  // Up to the answer to a ping sent once both calls are answered and the question withdrawn: whatever
  // else came meanwhile is before it. (The frontend answers a ping itself, so it is no fence for what
  // the shim wrote after the answers: the withdrawal may reach it after them, in a read of its own.)
  while (got.filter((m) => m.id === 1 || m.id === 2 || m.method === "notifications/cancelled").length < 3) got.push(await next());
  f.send({ jsonrpc: "2.0", id: 3, method: "ping" });
  const [, more] = await until(next, (m) => m.id === 3);
  got.push(...more);
  assert.deepEqual(
    got.map((m) => (m.method ? [m.method, m.params.requestId, m.params.reason] : [m.id, textOf(m)])).sort(),
    [
      [1, died],
      [2, died],
      ["notifications/cancelled", ask.id, "the backend that asked for it has stopped"],
    ].sort(),
    JSON.stringify(got) + shimSays(),
  );
  // The session's late answer to the withdrawn question goes nowhere; the next call starts a backend.
  f.send({ jsonrpc: "2.0", id: ask.id, result: { role: "assistant", content: { type: "text", text: "late" }, model: "m" } });
  f.send(call(4, "echo", { message: "after" }));
  const [after4, before4] = await until(next, (m) => m.id === 4);
  assert.deepEqual(before4, []);
  assert.match(textOf(after4), /^echo after from \d+$/);
  assert.deepEqual(await f.close(30000), { code: 0, signal: null }, f.stderr);
  shim.child.kill("SIGTERM");
  assert.deepEqual(await exitWithin(shim.exited), { code: 0, signal: null }, shimSays());
});

test("a session that half-closes while its resources/subscribe waits for a 2026-07-28 backend's stream still gets the answer", async () => {
  const m = join(dir, "listen.yaml");
  writeFileSync(
    m,
    `backends:\n  listen: {command: [${process.execPath}, ${join(TESTS, "servers/partial-listen-modern.mjs")}], idle_timeout: 10m}\n` +
      `tools:\n  - {name: t, backend: listen, input_schema: {type: object}}\n`,
  );
  const shim = await startShimOnSocket(join(dir, "listen.sock"), m, "listen");
  after(() => shim.child.kill("SIGKILL"));
  const shimSays = () => `\nthe shim said: ${shim.stderr()}`;
  const s = rawSession(shim.path);
  s.send(INIT());
  assert.ok((await s.next()).result, shimSays());
  s.send(initialized);
  // The subscribe waits for the backend's acknowledgement of its subscriptions/listen stream, which
  // is no call in flight: before the fix the shim took the half-closed session for done at once,
  // closed it, and the answer had nowhere to go.
  s.send({ jsonrpc: "2.0", id: 1, method: "resources/subscribe", params: { uri: "ok:1" } });
  await s.halfClose();
  assert.deepEqual(await s.next(), { jsonrpc: "2.0", id: 1, result: {} }, shimSays());
  assert.ok(await waitFor(() => s.ended, 30000), "then the shim closes the connection" + shimSays());
  assert.equal(s.raw.length, 2, JSON.stringify(s.raw));
  shim.child.kill("SIGTERM");
  assert.deepEqual(await exitWithin(shim.exited), { code: 0, signal: null }, shimSays());
});
