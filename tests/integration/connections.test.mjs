// Connections and backend lifecycle: nothing queued for a peer that still reads is dropped, a reload
// never frees what a pending answer prints, paused readers resume with what they had buffered,
// over-long messages fail their own call, and a crash fails only the calls that reached the backend.
// No systemd needed: the shim runs behind systemd-socket-activate, or is started by the frontend.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { INIT, MCP_LAZY, RawPeer, SHIMD, cleanupPeers, cmdline, descendants, sleep, startShimOnSocket, waitFor } from "./lib/env.mjs";

after(cleanupPeers);
const dir = mkdtempSync(join(tmpdir(), "mcp-lazy-conn-"));

// A backend whose tools exercise the data path: sizes, delays, held answers and a crash.
const backend = join(dir, "backend.mjs");
writeFileSync(
  backend,
  `import readline from "node:readline";
import { appendFileSync } from "node:fs";
const out = (m) => process.stdout.write(JSON.stringify(m) + "\\n");
const text = (id, t) => ({ jsonrpc: "2.0", id, result: { content: [{ type: "text", text: t } ] } });
const held = [];
const rl = readline.createInterface({ input: process.stdin });
rl.on("line", (l) => {
  const m = JSON.parse(l);
  if (m.method === "initialize")
    return out({ jsonrpc: "2.0", id: m.id, result: { protocolVersion: m.params.protocolVersion, capabilities: { tools: {} }, serverInfo: { name: "conn", version: "1" } } });
  if (m.method !== "tools/call") return m.id !== undefined && out({ jsonrpc: "2.0", id: m.id, result: {} });
  const a = m.params.arguments ?? {};
  switch (m.params.name) {
    case "echo": return out(text(m.id, "Echo: " + a.message));
    // A side effect per call, to count how often each really ran.
    case "note":
      appendFileSync(process.env.NOTE_FILE, a.k + " " + process.pid + "\\n");
      return out(text(m.id, "noted " + a.k + " by " + process.pid));
    case "big":
    case "idle_big":
      return out(text(m.id, "x".repeat(a.bytes)));
    case "slow": return setTimeout(() => out(text(m.id, "slow done")), a.ms);
    case "hold": return held.push(m.id);
    // The big answer and every held one in one write: the reader gets them in one read.
    case "release":
      return process.stdout.write([text(m.id, "x".repeat(a.bytes)), ...held.splice(0).map((id) => text(id, "released"))].map((x) => JSON.stringify(x) + "\\n").join(""));
    // Busy (its event loop blocked, so nothing more is read from its stdin), then dies: what is
    // sent meanwhile never reaches it. It notes "stall" first, for the test to send from then on.
    case "stall": {
      appendFileSync(process.env.NOTE_FILE, "stall\\n");
      const end = Date.now() + a.ms;
      while (Date.now() < end);
      process.exit(1);
    }
  }
});
`,
);
const tools = ["echo", "big", "slow", "hold", "release", "stall", "note"];
const noteFile = join(dir, "notes.txt");
function manifestText(extraTool = "") {
  return (
    `backends:\n  conn: {command: [node, ${backend}], idle_timeout: 0, env: {NOTE_FILE: ${noteFile}}}\n  idler: {command: [node, ${backend}], idle_timeout: 1s}\ntools:\n` +
    tools.map((t) => `  - {name: ${t}, backend: conn, input_schema: {type: object}}\n`).join("") +
    `  - {name: idle_big, backend: idler, input_schema: {type: object}}\n` +
    extraTool
  );
}
const manifest = join(dir, "m.yaml");
writeFileSync(manifest, manifestText());

// Until the backend is in its stall (it no longer reads): what is sent from then on never reaches it,
// however slow the machine. A fixed wait was outlasted: the backend then read the calls meant to
// miss it in the same read as the stall, and they failed with it.
async function stalled() {
  assert.ok(await waitFor(() => readFileSync(noteFile, "utf8").split("\n").includes("stall"), 20000), "the backend stalls");
}

let nextId = 100;
const call = (name, args = {}, id = ++nextId) => ({ jsonrpc: "2.0", id, method: "tools/call", params: { name, arguments: args } });
const textOf = (r) => r.result?.content?.[0]?.text ?? JSON.stringify(r);

function frontend(extra = [], version) {
  return new RawPeer(MCP_LAZY, ["--manifest", manifest, "--activation=direct", "--shimd", SHIMD, ...extra]);
}

// mcp-lazy-shimd on a listening socket of its own (Accept=no, as the shipped units do).
async function shimOnSocket(name, extra = []) {
  const shim = await startShimOnSocket(join(mkdtempSync(join(dir, "sock-")), `${name}.sock`), manifest, name, { extra });
  after(() => shim.child.kill("SIGKILL"));
  return shim;
}

// A raw connection to a shim: lines in, lines out, and control over reading and half-closing.
function rawConnection(path) {
  const sock = net.connect({ path, allowHalfOpen: true });
  const conn = { sock, lines: [], ended: false, buf: "" };
  sock.setEncoding("utf8");
  sock.on("data", (d) => {
    conn.buf += d;
    let i;
    while ((i = conn.buf.indexOf("\n")) >= 0) {
      conn.lines.push(conn.buf.slice(0, i));
      conn.buf = conn.buf.slice(i + 1);
    }
  });
  sock.on("end", () => (conn.ended = true));
  sock.on("error", () => (conn.ended = true));
  conn.send = (m) => sock.write((typeof m === "string" ? m : JSON.stringify(m)) + "\n");
  conn.next = async (ms = 10000) => {
    assert.ok(await waitFor(() => conn.lines.length > 0 || conn.ended, ms), "an answer arrives");
    assert.ok(conn.lines.length > 0, `the shim closed the connection; ${conn.buf.length} bytes of an unfinished line were left`);
    return JSON.parse(conn.lines.shift());
  };
  return conn;
}

test("a half-closed connection gets its whole answer, however large, before the shim closes it", async () => {
  const shim = await shimOnSocket("conn");
  const c = rawConnection(shim.path);
  c.send(INIT());
  assert.ok((await c.next()).result);
  const big = call("big", { bytes: 3 * 1024 * 1024 });
  c.sock.pause(); // the answer waits in the shim's queue, far past the socket buffer
  c.send(big);
  c.sock.end(); // half-close: we send nothing more, but still read
  await sleep(1500);
  c.sock.resume();
  const r = await c.next(60000);
  assert.equal(r.id, big.id);
  assert.equal(textOf(r).length, 3 * 1024 * 1024);
  assert.ok(await waitFor(() => c.ended, 20000), "then the shim closes its side");
});

test("the idle boundary: a frontend that half-closes on the draining notice still gets every answer", async () => {
  const shim = await shimOnSocket("idler");
  const c = rawConnection(shim.path);
  c.send(INIT());
  assert.ok((await c.next()).result);
  const big = call("idle_big", { bytes: 2 * 1024 * 1024 });
  c.send(call("idle_big", { bytes: 10 }));
  await c.next();
  // Idle after 1 s: the draining notice comes; we answer it as the frontend does, but one call is
  // still on its way and its answer is larger than the socket buffer.
  const notice = await c.next(20000);
  assert.equal(notice.method, "notifications/mcp-lazy/draining");
  c.sock.pause();
  c.send(big);
  c.sock.end();
  await sleep(1500);
  c.sock.resume();
  const r = await c.next(60000);
  assert.equal(r.id, big.id);
  assert.equal(textOf(r).length, 2 * 1024 * 1024);
  assert.ok(await waitFor(() => c.ended, 20000));
  const { code } = await Promise.race([shim.exited, new Promise((r) => setTimeout(r, 30000, { code: "still running" }).unref())]);
  assert.equal(code, 0, shim.stderr());
});

test("a manifest reload while a batch waits for a backend: the batch's tools/list is still whole", async () => {
  const p = frontend();
  await p.request(INIT("2025-03-26"));
  // The batch's call is held by the backend until the reload is done, whatever the machine's speed.
  p.send([
    { jsonrpc: "2.0", id: 1, method: "tools/list" },
    { jsonrpc: "2.0", id: 2, method: "tools/call", params: { name: "hold", arguments: {} } },
  ]);
  // The frontend has read the batch once its call has started a backend.
  const backendUp = () => descendants(p.child.pid).some((pid) => cmdline(pid).includes(backend));
  assert.ok(await waitFor(backendUp, 20000), "the batch's call started a backend");
  const tmp = `${manifest}.new`;
  writeFileSync(tmp, manifestText("  - {name: added, backend: conn, input_schema: {type: object}}\n"));
  renameSync(tmp, manifest);
  try {
    const [changed] = await p.next(1, 20000);
    assert.equal(changed.method, "notifications/tools/list_changed");
    const release = call("release", { bytes: 1 });
    p.send(release);
    const msgs = await p.next(2, 20000);
    const batch = msgs.find((m) => Array.isArray(m));
    assert.ok(batch, JSON.stringify(msgs));
    assert.equal(msgs.find((m) => !Array.isArray(m))?.id, release.id, JSON.stringify(msgs));
    const list = batch.find((m) => m.id === 1);
    assert.deepEqual(
      list.result.tools.map((t) => t.name),
      [...tools, "idle_big"],
    );
    assert.equal(textOf(batch.find((m) => m.id === 2)), "released");
    const [now] = [await p.request({ jsonrpc: "2.0", id: 3, method: "tools/list" })];
    assert.ok(now.result.tools.some((t) => t.name === "added"));
  } finally {
    writeFileSync(manifest, manifestText());
    await p.close();
  }
  assert.doesNotMatch(p.stderr, /AddressSanitizer/);
});

test("after the client catches up, answers already read from a backend go out at once", async () => {
  const p = frontend();
  await p.request(INIT());
  p.child.stdout.pause(); // the client stops reading
  const held = call("hold");
  const release = call("release", { bytes: 9 * 1024 * 1024 });
  p.send(held);
  await sleep(200);
  p.send(release);
  await sleep(3000); // the 9 MiB answer backs mcp-lazy's output up past 8 MiB
  p.child.stdout.resume();
  const msgs = await p.next(2, 60000);
  assert.deepEqual(msgs.map((m) => m.id).sort(), [held.id, release.id].sort());
  assert.equal(textOf(msgs.find((m) => m.id === held.id)), "released");
  await p.close();
});

test("a backend answer past the line limit fails its call, and the limit reaches a direct shim", async () => {
  const p = frontend(["--max-line-bytes", "65536"]);
  await p.request(INIT());
  const r = await p.request(call("big", { bytes: 100000 }), 10000);
  assert.equal(r.result?.isError, true, JSON.stringify(r));
  assert.match(textOf(r), /backend 'conn' answered with a message longer than the 65536-byte limit/);
  const ok = await p.request(call("echo", { message: "after" }));
  assert.equal(textOf(ok), "Echo: after");
  await p.close();
});

test("a client line past the limit is refused under the client's own id", async () => {
  const p = frontend(["--max-line-bytes", "65536"]);
  await p.request(INIT());
  const r = await p.request(call("echo", { message: "y".repeat(100000) }, 7));
  assert.equal(r.id, 7);
  assert.equal(r.error.code, -32600);
  assert.match(r.error.message, /longer than the 65536-byte limit/);
  const n = await p.request({ jsonrpc: "2.0", method: "x", params: { p: "z".repeat(100000) } });
  assert.equal(n.id, null);
  await p.close();

  const shim = await shimOnSocket("conn", ["--max-line-bytes", "65536"]);
  const c = rawConnection(shim.path);
  c.send(INIT());
  assert.ok((await c.next()).result);
  c.send(call("echo", { message: "y".repeat(100000) }, "abc"));
  const e = await c.next();
  assert.equal(e.id, "abc");
  assert.match(e.error.message, /longer than the 65536-byte limit/);
  c.sock.destroy();
});

test("an over-long backend answer does not keep the shim from idling out", async () => {
  const shim = await shimOnSocket("idler", ["--max-line-bytes", "65536"]);
  const c = rawConnection(shim.path);
  c.send(INIT());
  assert.ok((await c.next()).result);
  const big = call("idle_big", { bytes: 100000 });
  c.send(big);
  const r = await c.next();
  assert.equal(r.id, big.id);
  assert.match(textOf(r), /longer than the 65536-byte limit/);
  c.sock.end();
  const { code } = await Promise.race([shim.exited, new Promise((r) => setTimeout(r, 30000, { code: "still running" }).unref())]);
  assert.equal(code, 0, shim.stderr());
});

test("a crash fails only the calls that reached the backend; the others go to the next one", async () => {
  const p = frontend();
  await p.request(INIT());
  assert.equal(textOf(await p.request(call("echo", { message: "warm" }))), "Echo: warm");
  writeFileSync(noteFile, "");
  const stall = call("stall", { ms: 800 });
  p.send(stall);
  await stalled();
  // The backend has stopped reading: these sit in its pipe when it dies, never read.
  const echoes = Array.from({ length: 10 }, (_, k) => call("echo", { message: `e${k}` }));
  for (const e of echoes) p.send(e);
  await sleep(700);
  // And these come while it is dying or dead.
  const late = Array.from({ length: 10 }, (_, k) => call("echo", { message: `l${k}` }));
  for (const e of late) {
    p.send(e);
    await sleep(20);
  }
  const msgs = await p.next(21, 20000);
  const byId = new Map(msgs.map((m) => [m.id, m]));
  assert.match(textOf(byId.get(stall.id)), /^backend 'conn' exited with status 1 while handling this call/);
  for (const e of [...echoes, ...late]) assert.equal(textOf(byId.get(e.id)), `Echo: ${e.params.arguments.message}`, `${JSON.stringify(byId.get(e.id))}\n${p.stderr}`);
  await p.close();
});

test("a backend's death is handled while other sessions keep the shim busy; calls meanwhile wait for the next one", async () => {
  const shim = await shimOnSocket("conn");
  const busy = rawConnection(shim.path);
  const b = rawConnection(shim.path);
  for (const c of [busy, b]) {
    c.send(INIT());
    assert.ok((await c.next()).result);
  }
  assert.equal(textOf((b.send(call("echo", { message: "warm" })), await b.next())), "Echo: warm");
  // One session never lets the shim's loop rest: pings, answered by the shim itself, without end.
  let flooding = true;
  const ping = (JSON.stringify({ jsonrpc: "2.0", id: "p", method: "ping" }) + "\n").repeat(200);
  (async () => {
    while (flooding) {
      if (!busy.sock.write(ping)) await new Promise((r) => busy.sock.once("drain", r));
      busy.lines.length = 0;
      await new Promise((r) => setImmediate(r));
    }
  })();
  try {
    writeFileSync(noteFile, "");
    const stall = call("stall", { ms: 300 });
    b.send(stall);
    await stalled(); // it dies soon, with the flood going on
    const after = Array.from({ length: 5 }, (_, k) => call("echo", { message: `a${k}` }));
    for (const e of after) b.send(e);
    const got = new Map();
    for (let k = 0; k < 6; k++) {
      const m = await b.next(20000);
      got.set(m.id, m);
    }
    assert.match(textOf(got.get(stall.id)), /exited with status 1 while handling this call/);
    for (const e of after) assert.equal(textOf(got.get(e.id)), `Echo: ${e.params.arguments.message}`, JSON.stringify(got.get(e.id)));
  } finally {
    flooding = false;
  }
  busy.sock.destroy();
  b.sock.destroy();
});

// A 2026-07-28 backend that closes its stdin as it asks for input (input_required), and lives on: the
// shim learns it only from a write that fails. Lines are read synchronously, so that fd 0 is ours to close.
const closer = join(dir, "closer.mjs");
writeFileSync(
  closer,
  `import { closeSync, readSync } from "node:fs";
const out = (m) => process.stdout.write(JSON.stringify(m) + "\\n");
const META = { "io.modelcontextprotocol/serverInfo": { name: "closer", version: "1" } };
const done = (id, t) => out({ jsonrpc: "2.0", id, result: { content: [{ type: "text", text: t + " " + process.pid }], resultType: "complete", _meta: META } });
const buf = Buffer.alloc(65536);
let text = "";
for (;;) {
  let nl;
  while ((nl = text.indexOf("\\n")) < 0) {
    const n = readSync(0, buf);
    if (n === 0) process.exit(0);
    text += buf.toString("utf8", 0, n);
  }
  const m = JSON.parse(text.slice(0, nl));
  text = text.slice(nl + 1);
  if (m.id === undefined) continue;
  if (m.method === "server/discover") out({ jsonrpc: "2.0", id: m.id, result: { supportedVersions: ["2026-07-28"], capabilities: { tools: {} }, resultType: "complete", _meta: META } });
  else if (m.method === "tools/list") out({ jsonrpc: "2.0", id: m.id, result: { tools: [], resultType: "complete" } });
  else if (m.method === "tools/call" && m.params.name === "ask" && m.params.inputResponses) done(m.id, "answered " + m.params.inputResponses.q.content.n);
  else if (m.method === "tools/call" && m.params.name === "ask") {
    closeSync(0);
    out({ jsonrpc: "2.0", id: m.id, result: { resultType: "input_required", inputRequests: { q: { method: "elicitation/create", params: { message: "n?", requestedSchema: { type: "object", properties: { n: { type: "integer" } } } } } }, requestState: "s" } });
    setInterval(() => {}, 1000);
    break;
  } else if (m.method === "tools/call") done(m.id, "echo");
  else out({ jsonrpc: "2.0", id: m.id, error: { code: -32601, message: "Method not found" } });
}
`,
);

test("a retry the backend never got, because its stdin had closed, goes to the next one", async () => {
  const m = join(dir, "closer.yaml");
  writeFileSync(m, `backends:\n  closer: {command: [node, ${closer}], idle_timeout: 0}\ntools:\n  - {name: ask, backend: closer, input_schema: {type: object}}\n  - {name: echo, backend: closer, input_schema: {type: object}}\n`);
  const p = new RawPeer(MCP_LAZY, ["--manifest", m, "--activation=direct", "--shimd", SHIMD]);
  assert.ok((await p.request(INIT("2025-06-18", { elicitation: {} }))).result);
  // A handshake-era client: the backend's input_required reaches it as an elicitation.
  p.send(call("ask", {}, 1));
  const [ask] = await p.next(1, 30000);
  assert.equal(ask.method, "elicitation/create", JSON.stringify(ask));
  // A call sent now is the write that fails: the shim learns that the backend's stdin is closed.
  p.send(call("echo"));
  assert.ok(await waitFor(() => /Backend 'closer' \(pid \d+\) closed its stdin/.test(p.stderr)), p.stderr);
  // The client's answer makes the retry, which that backend can never read: the next one gets it.
  p.send({ jsonrpc: "2.0", id: ask.id, result: { action: "accept", content: { n: 7 } } });
  const msgs = await p.next(2, 30000);
  const byId = new Map(msgs.map((x) => [x.id, x]));
  assert.match(textOf(byId.get(1)), /^answered 7 \d+$/, `${JSON.stringify(msgs)}\n${p.stderr}`);
  assert.match(textOf(byId.get(nextId)), /^echo \d+$/, JSON.stringify(msgs));
  await p.close();
});

test("a backend killed again and again under pipelined calls: every call answered once, by the process that ran it, none run twice", async () => {
  writeFileSync(noteFile, "");
  const p = frontend();
  await p.request(INIT());
  assert.equal(textOf(await p.request(call("echo", { message: "warm" }))), "Echo: warm");
  // Which process ran each call (k -> pid), and how many calls each process ran, from the notes.
  const notes = () => {
    const ran = new Map();
    const perPid = new Map();
    for (const l of readFileSync(noteFile, "utf8").split("\n")) {
      const [k, pid] = l.split(" ");
      if (!pid) continue;
      ran.set(`n${k}`, [...(ran.get(`n${k}`) ?? []), Number(pid)]);
      perPid.set(Number(pid), (perPid.get(Number(pid)) ?? 0) + 1);
    }
    return { ran, perPid };
  };
  // Five kills, each of another backend process, and only of one that has run two calls: it has
  // answered one, so the shim counts its death as one crash and starts the next at once (a backend
  // killed before it answered meets the crash-loop backoff, which has its own test; with kills at
  // random it made from 0 to 2,636 calls fail from run to run here, and could kill one process
  // several times over while it died). Calls go on until the fifth kill.
  const killed = new Set();
  let sending = true;
  const killer = (async () => {
    while (sending && killed.size < 5) {
      await sleep(150 + Math.floor(Math.random() * 150));
      const { perPid } = notes();
      for (const pid of descendants(p.child.pid)) {
        if (killed.has(pid) || !cmdline(pid).includes(backend) || (perPid.get(pid) ?? 0) < 2) continue;
        try {
          process.kill(pid, "SIGKILL");
          killed.add(pid);
        } catch {}
        break;
      }
    }
  })();
  let N = 0;
  // The bound on calls is far past what five kills take even on a loaded machine. At most 256 in
  // flight (every line back is an answer, none taken before the end): on a loaded machine a backend's
  // restart can take a second, and sending on regardless would pass the shim's limit of calls in
  // flight on a connection (CLIENT_MAX_PENDING), failing calls with "too many requests in flight".
  while (killed.size < 5 && N < 20000) {
    while (N - p.lines.length >= 256 && killed.size < 5) await sleep(3);
    p.send(call("note", { k: N }, `n${N}`));
    if (++N % 4 === 0) await sleep(3);
  }
  sending = false;
  await killer;
  assert.equal(killed.size, 5, `${N} calls sent, only ${killed.size} kills`);
  // After the last kill the next backend serves every call.
  const AFTER = 20;
  for (let j = 0; j < AFTER; j++, N++) p.send(call("note", { k: N }, `n${N}`));
  const msgs = await p.next(N, 120000);
  await sleep(300);
  assert.equal(p.lines.length, 0, `extra messages: ${p.lines.slice(0, 3)}`);
  const answered = new Map();
  for (const m of msgs) {
    assert.ok(!answered.has(m.id), `answered twice: ${m.id}`);
    answered.set(m.id, m);
  }
  const { ran, perPid } = notes();
  const killedText = "backend 'conn' was killed by signal KILL while handling this call; the next call starts it again";
  let failed = 0;
  const served = new Set();
  for (let k = 0; k < N; k++) {
    const id = `n${k}`;
    const m = answered.get(id);
    const by = ran.get(id) ?? [];
    assert.ok(m, `no answer for ${id}`);
    assert.ok(by.length <= 1, `${id} ran ${by.length} times`);
    if (m.result?.isError) {
      // Only a call that reached a killed backend fails, saying so; it ran there or not at all.
      failed++;
      assert.equal(textOf(m), killedText, `${id}: ${JSON.stringify(m)}`);
      assert.ok(by.length === 0 || killed.has(by[0]), `${id} failed, but ran in ${by[0]}, which was not killed`);
      assert.ok(k < N - AFTER, `${id}, after the last kill, failed`);
    } else {
      // The answer is that of this call, from the process that ran it (nothing misrouted).
      assert.equal(by.length, 1, `${id} answered but ran ${by.length} times`);
      assert.equal(textOf(m), `noted ${k} by ${by[0]}`, `${id}: ${JSON.stringify(m)}`);
      served.add(by[0]);
      if (k >= N - AFTER) assert.ok(!killed.has(by[0]), `${id} answered by ${by[0]}, killed before it`);
    }
  }
  // Every process killed had served calls, and the calls were served by the first process, four in
  // between and the one after the last kill (killing it needed two calls run, so one answered).
  for (const pid of killed) assert.ok(served.has(pid), `killed ${pid} answered no call`);
  assert.ok(served.size >= 6 && perPid.size >= 6, `${served.size} backend processes answered calls, ${perPid.size} ran some`);
  const held = [...p.stderr.matchAll(/; (\d+) it never read go to the next one/g)].reduce((a, m) => a + Number(m[1]), 0);
  console.log(`# ${N} calls, ${killed.size} kills, ${failed} failed (read by a killed backend), ${held} sent again to the next backend, ${served.size} backend processes answered, 0 run twice`);
  await p.close();
});

// A backend that closes its stdin while it starts (the first process only; the next ones are plain):
// it reads initialize, closes its stdin, asks the client something, and answers initialize only once
// the shim is held (SIGSTOP) with the client's answer to its request waiting too. The shim's write of
// that answer fails, and so would its notifications/initialized: whichever its event loop takes first
// (a write error while starting, or the refused notifications/initialized, which failed every waiting
// call with "out of memory" before), the calls that waited never reached a backend and go to the next.
const initCloser = join(dir, "init-closer.mjs");
writeFileSync(
  initCloser,
  `import { closeSync, existsSync, readSync, writeFileSync } from "node:fs";
const mark = process.argv[2];
const out = (m) => process.stdout.write(JSON.stringify(m) + "\\n");
const first = !existsSync(mark + ".started");
writeFileSync(mark + ".started", "");
const buf = Buffer.alloc(65536);
let text = "";
const line = () => {
  let nl;
  while ((nl = text.indexOf("\\n")) < 0) {
    const n = readSync(0, buf);
    if (n === 0) process.exit(0);
    text += buf.toString("utf8", 0, n);
  }
  const m = JSON.parse(text.slice(0, nl));
  text = text.slice(nl + 1);
  return m;
};
const init = (id) => ({ jsonrpc: "2.0", id, result: { protocolVersion: "2025-06-18", capabilities: { tools: {} }, serverInfo: { name: "ic", version: "1" } } });
if (first) {
  const m = line();
  closeSync(0);
  out({ jsonrpc: "2.0", id: "s1", method: "sampling/createMessage", params: { messages: [], maxTokens: 1 } });
  const wait = new Int32Array(new SharedArrayBuffer(4));
  while (!existsSync(mark + ".go")) Atomics.wait(wait, 0, 0, 20);
  out(init(m.id));
  writeFileSync(mark + ".wrote", "");
  setInterval(() => {}, 1000);
} else
  for (;;) {
    const m = line();
    if (m.id === undefined) continue;
    if (m.method === "initialize") out(init(m.id));
    else out({ jsonrpc: "2.0", id: m.id, result: { content: [{ type: "text", text: "echo " + process.pid }] } });
  }
`,
);

test("a backend whose stdin closed while it started: the calls that waited for it go to the next one", async () => {
  const mark = join(dir, "ic");
  const m = join(dir, "ic.yaml");
  writeFileSync(m, `backends:\n  ic: {command: [node, ${initCloser}, ${mark}], idle_timeout: 0, protocol: legacy}\ntools:\n  - {name: echo, backend: ic, input_schema: {type: object}}\n`);
  const shim = await startShimOnSocket(join(dir, "ic.sock"), m, "ic");
  const c = net.connect(join(dir, "ic.sock"));
  const lines = [];
  c.setEncoding("utf8").on("data", (d) => lines.push(...d.split("\n").filter(Boolean).map((l) => JSON.parse(l))));
  try {
    c.write(JSON.stringify(INIT("2025-06-18", { sampling: {} })) + "\n");
    c.write(JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "echo", arguments: {} } }) + "\n");
    assert.ok(await waitFor(() => lines.some((l) => l.method === "sampling/createMessage"), 20000), `${JSON.stringify(lines)}\n${shim.stderr()}`);
    const ask = lines.find((l) => l.method === "sampling/createMessage");
    process.kill(shim.child.pid, "SIGSTOP");
    try {
      c.write(JSON.stringify({ jsonrpc: "2.0", id: ask.id, result: { role: "assistant", content: { type: "text", text: "x" }, model: "m" } }) + "\n");
      writeFileSync(mark + ".go", "");
      assert.ok(await waitFor(() => existsSync(mark + ".wrote"), 20000));
      await sleep(100);
    } finally {
      process.kill(shim.child.pid, "SIGCONT");
    }
    assert.ok(await waitFor(() => lines.some((l) => l.id === 1), 30000), `${JSON.stringify(lines)}\n${shim.stderr()}`);
    const init = lines.find((l) => l.id === 0);
    const call = lines.find((l) => l.id === 1);
    assert.ok(init?.result, `${JSON.stringify(init)}\n${shim.stderr()}`);
    assert.match(call.result?.content?.[0]?.text ?? "", /^echo \d+$/, `${JSON.stringify(call)}\n${shim.stderr()}`);
    assert.match(shim.stderr(), /Backend 'ic' \(pid \d+\) closed its stdin/);
  } finally {
    c.destroy();
    shim.child.kill("SIGTERM");
  }
});

// A backend that answers initialize with a message that breaks the rules (argv[2] says how); any
// later process answers properly.
const badInit = join(dir, "bad-init.mjs");
writeFileSync(
  badInit,
  `import { existsSync, writeFileSync } from "node:fs";
import readline from "node:readline";
const [mode, mark] = process.argv.slice(2);
const first = !existsSync(mark);
writeFileSync(mark, "");
const out = (t) => process.stdout.write(t + "\\n");
readline.createInterface({ input: process.stdin }).on("line", (l) => {
  const m = JSON.parse(l);
  if (m.id === undefined) return;
  const ok = { protocolVersion: "2025-06-18", capabilities: { tools: {} }, serverInfo: { name: "bi", version: "1" } };
  if (m.method === "initialize" && first && mode === "invalid") return out(JSON.stringify({ jsonrpc: "2.0", id: m.id, result: ok, error: { code: 1, message: "both" } }));
  if (m.method === "initialize" && first) return out(\`{"jsonrpc":"2.0","id":\${m.id},"result":{"x":"\\\\ud800"}}\`);
  if (m.method === "initialize") return out(JSON.stringify({ jsonrpc: "2.0", id: m.id, result: ok }));
  out(JSON.stringify({ jsonrpc: "2.0", id: m.id, result: { content: [{ type: "text", text: "fine" }] } }));
});
`,
);

test("a backend's invalid or unreadable answer to initialize fails the start at once, saying so, not after init_timeout", async () => {
  for (const [mode, why] of [
    ["invalid", /backend 'bi' sent an invalid answer to initialize \(a message needs .*method/],
    ["notJson", /backend 'bi' sent an invalid answer to initialize \(a line that is not valid UTF-8 JSON\)/],
  ]) {
    const m = join(dir, `bi-${mode}.yaml`);
    writeFileSync(m, `backends:\n  bi: {command: [node, ${badInit}, ${mode}, ${join(dir, `bi-${mode}.mark`)}], idle_timeout: 0, protocol: legacy}\ntools:\n  - {name: t, backend: bi, input_schema: {type: object}}\n`);
    const p = new RawPeer(MCP_LAZY, ["--manifest", m, "--activation=direct", "--shimd", SHIMD]);
    try {
      assert.ok((await p.request(INIT("2025-06-18"))).result);
      // Before: the call waited for init_timeout (2 minutes), then failed with "did not answer initialize".
      const [r] = await p.next((p.send({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "t", arguments: {} } }), 1), 20000);
      assert.equal(r.result?.isError, true, JSON.stringify(r));
      assert.match(r.result.content[0].text, why, JSON.stringify(r));
      // The next call starts the next process, which answers properly.
      const [ok] = await p.next((p.send({ jsonrpc: "2.0", id: 2, method: "tools/call", params: { name: "t", arguments: {} } }), 1), 20000);
      assert.equal(ok.result?.content?.[0]?.text, "fine", `${JSON.stringify(ok)}\n${p.stderr}`);
    } finally {
      await p.close();
    }
  }
});
