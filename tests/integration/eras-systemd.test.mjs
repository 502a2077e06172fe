// Both eras under a real systemd: a 2026-07-28 backend pooled behind socket activation, reached by
// v2 clients in every mode; a modern-only backend bridged for handshake-era clients; two sessions'
// MRTR elicitations at once on one backend; a resident modern-only backend started ahead of any call.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { boxFleet, enableSockets } from "./lib/fleet.mjs";
import { MCP_LAZY, TESTS, cleanupPeers, journalUntil, waitFor } from "./lib/env.mjs";
import { MODERN_SERVER, connectV2, modernManifest, modernScript } from "./lib/eras.mjs";

after(cleanupPeers);
const dir = mkdtempSync(join(tmpdir(), "mcp-lazy-eras-box-"));
let fleet;
const clients = new Set();

// One manifest per backend (their tools have the same names); the unit of each gets its own.
const MANIFESTS = {
  modern: "/etc/mcp-lazy/modern.json",
  modernonly: "/etc/mcp-lazy/modernonly.json",
  modernres: "/etc/mcp-lazy/modernres.json",
  asker: "/etc/mcp-lazy/asker.yaml",
};

before(async () => {
  const local = {
    modern: await modernManifest(join(dir, "modern.json"), { name: "modern" }),
    modernonly: await modernManifest(join(dir, "modernonly.json"), { name: "modernonly", args: ["--legacy", "reject"] }),
    modernres: await modernManifest(join(dir, "modernres.json"), {
      name: "modernres",
      args: ["--legacy", "reject"],
      extra: { lifecycle: "resident" },
    }),
    asker: join(dir, "asker.yaml"),
  };
  // A handshake-era server (SDK 1.x) whose tools ask their client (eras-mrtr.test.mjs has it too).
  writeFileSync(
    local.asker,
    `backends:\n  asker:\n    command: [node, ${join(TESTS, "servers/legacy-asker.mjs")}]\n    idle_timeout: 10m\ntools:\n` +
      ["echo", "ask", "think"].map((t) => `  - {name: ${t}, backend: asker, input_schema: {type: object}}\n`).join(""),
  );
  fleet = await boxFleet();
  for (const [name, path] of Object.entries(MANIFESTS)) {
    const w = await fleet.box.exec("bash", ["-c", `cat > ${path}`], { input: readFileSync(local[name], "utf8") });
    assert.equal(w.code, 0, w.stderr);
    await fleet.sh(`mkdir -p /etc/systemd/system/mcp-lazy@${name}.service.d
      printf '[Service]\\nEnvironment=MCP_LAZY_MANIFEST=${path}\\n' > /etc/systemd/system/mcp-lazy@${name}.service.d/manifest.conf`);
  }
  await enableSockets(fleet, Object.keys(MANIFESTS));
});

after(async () => {
  for (const c of clients) await c.close().catch(() => {});
  if (fleet) await fleet.stop();
});

async function session(mode, name, opts) {
  const [cmd, ...pre] = fleet.box.nsenterArgs();
  const c = await connectV2(mode, cmd, [...pre, MCP_LAZY, "--manifest", MANIFESTS[name]], opts);
  clients.add(c);
  return c;
}

async function close(c) {
  clients.delete(c);
  await c.close();
}

test("differential under systemd: the modern server straight and through mcp-lazy, for the v2 client in legacy, auto and pinned modes, the three sessions at once", async () => {
  const modes = ["legacy", "auto", "pin"];
  const want = {};
  for (const mode of modes) {
    const straight = await connectV2(mode, "node", [MODERN_SERVER]);
    want[mode] = await modernScript(straight);
    await straight.close();
  }
  const sessions = await Promise.all(modes.map((mode) => session(mode, "modern")));
  const got = await Promise.all(sessions.map((c) => modernScript(c)));
  for (const [k, mode] of modes.entries()) assert.deepEqual(got[k], want[mode], mode);
  for (const c of sessions) await close(c);
  // Every mode was served by one backend process: capabilities travel with each request.
  assert.equal((await fleet.backendPids("modern")).length, 1);
});

test("under systemd, a handshake-era client of a modern-only backend gets what a dual-era server would give it", async () => {
  const straight = await connectV2("legacy", "node", [MODERN_SERVER]);
  const want = await modernScript(straight);
  await straight.close();
  const c = await session("legacy", "modernonly");
  assert.deepEqual(await modernScript(c), want);
  await close(c);
});

// Each client's elicitation handler waits until both have been asked: the two calls are at the
// backend at once, and each session must answer its own.
async function concurrentAsk(modes, name) {
  let arrived = 0;
  let release;
  const both = new Promise((r) => (release = r));
  const sessions = [];
  const gate = async () => {
    if (++arrived === modes.length) release();
    await both;
  };
  for (const [k, mode] of modes.entries()) sessions.push(await session(mode, name, { answer: `answer-${k}`, gate }));
  const results = await Promise.all(
    sessions.map((c, k) => c.callTool({ name: "ask", arguments: { question: `question-${k}` } })),
  );
  for (const [k, c] of sessions.entries()) {
    assert.equal(results[k].content[0].text, `ask:question-${k} -> answer-${k}`, `${modes[k]} session ${k}`);
    assert.deepEqual(c.seen, [`question-${k}`], "each session was asked only its own question");
  }
  for (const c of sessions) await close(c);
}

test("two pooled sessions call an MRTR elicitation tool at once: each answers only its own, both complete", async () => {
  await concurrentAsk(["pin", "auto"], "modern");
  await concurrentAsk(["legacy", "pin"], "modernonly");
  await concurrentAsk(["legacy", "legacy"], "modernonly");
  assert.equal((await fleet.backendPids("modernonly")).length, 1, "one backend for every session");
});

// lifecycle and era together: the backend started ahead of any session (as a 2025-11-25 client with
// no capabilities would start it) is probed like any other, found modern, and serves a handshake-era
// session bridged; after a crash it is started (and probed) again without waiting for a call.
test("a resident modern-only backend: started with its shim, found modern, bridged for the first session, restarted after a crash", async () => {
  const ready = async () => /^backend pid \d+ \(ready\)/.test(await fleet.sh("systemctl show -P StatusText mcp-lazy@modernres.service"));
  await fleet.sh("systemctl start mcp-lazy@modernres.service");
  assert.ok(await waitFor(ready, 20000), "started ahead and ready");
  const [pid] = await fleet.backendPids("modernres");
  assert.ok(pid > 0);
  const straight = await connectV2("legacy", "node", [MODERN_SERVER]);
  const want = await modernScript(straight);
  await straight.close();
  const c = await session("legacy", "modernres");
  assert.deepEqual(await modernScript(c), want);
  await close(c);
  assert.deepEqual(await fleet.backendPids("modernres"), [pid], "the session took the backend started ahead");
  const log = await journalUntil(fleet.sh, "mcp-lazy@modernres.service", (l) => /started ahead, serves its first session/.test(l));
  assert.match(log, /Starting backend 'modernres' ahead of any call \(lifecycle: resident\)/);
  assert.match(log, /started ahead, serves its first session/);
  await fleet.sh(`kill -9 ${pid}`);
  const again = async () => (await ready()) && (await fleet.backendPids("modernres")).some((p) => p !== pid);
  assert.ok(await waitFor(again, 20000), "started again without a call");
  const c2 = await session("pin", "modernres");
  const res = await c2.callTool({ name: "echo", arguments: { message: "again" } });
  assert.ok(!res.isError, JSON.stringify(res));
  assert.match(res.content[0].text, /again/);
  await close(c2);
});

// A modern client of a handshake-era backend under systemd: the backend's requests come back as
// input_required for the call they belong to, and each pooled session answers its own.
test("under systemd, v2 clients pinned to 2026-07-28 at a pooled handshake-era backend that asks: input_required, each session its own answer", async () => {
  for (const [k, answer] of ["alpha", "beta"].entries()) {
    const c = await session("pin", "asker", { answer });
    assert.equal((await c.callTool({ name: "ask", arguments: { question: `q${k}?` } })).content[0].text, `q${k}? -> ${answer}`);
    assert.equal((await c.callTool({ name: "think", arguments: { prompt: "p" } })).content[0].text, `model said: ${answer}`);
    assert.deepEqual(c.seen, [`q${k}?`], "the elicitation reached its own session, as input_required");
    await close(c);
  }
  assert.equal((await fleet.backendPids("asker")).length, 1, "one pooled backend");
  const log = await journalUntil(fleet.sh, "mcp-lazy@asker.service", (l) => /did not answer server\/discover as a modern server/.test(l));
  assert.match(log, /did not answer server\/discover as a modern server: a handshake-era server/);
  assert.doesNotMatch(log, /refused it/);
});
