// What the eras removed, mapped across them: resources/subscribe and logging/setLevel of handshake-era
// clients at a 2026-07-28 backend (one subscriptions/listen per backend process, the level in each
// request's envelope), and subscriptions/listen resource subscriptions of modern clients at backends of
// either era; pooled (two sessions on one shim behind systemd-socket-activate) and against the servers
// straight. No systemd needed.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { INIT, MCP_LAZY, RawPeer, SERVER_SCRIPTS, SHIMD, TESTS, cleanupPeers, rootedPeer, sleep, startShimOnSocket, waitFor } from "./lib/env.mjs";
import { MODERN_SERVER, MREQ, connectV2, modernManifest, modernScript } from "./lib/eras.mjs";

after(cleanupPeers);
const dir = mkdtempSync(join(tmpdir(), "mcp-lazy-eras-map-"));
const URI = "modern://greeting";
const CALL = (id, name, args = {}) => ({ jsonrpc: "2.0", id, method: "tools/call", params: { name, arguments: args } });

// Messages up to and including the answer to id: [the others, the answer].
async function until(peer, id, ms = 20000) {
  const seen = [];
  for (;;) {
    const [m] = await peer.next(1, ms);
    if (m.id === id && !m.method) return [seen, m];
    seen.push(m);
  }
}

// A shim of its own on a listening socket (as the shipped units run it): sessions share its backend.
async function pooled(manifestPath, name) {
  const shim = await startShimOnSocket(join(dir, `${name}.sock`), manifestPath, name);
  after(() => shim.child.kill("SIGKILL"));
  return shim;
}

async function socketManifest(file, name, args) {
  const m = await modernManifest(join(dir, file), { name, args, extra: { socket: join(dir, `${name}.sock`) } });
  return m;
}

const session = (m) => new RawPeer(MCP_LAZY, ["--manifest", m, "--activation=systemd"]);

test("handshake-era sessions pooled on a modern-only backend: resources/subscribe and logging/setLevel mapped, each session gets only its own", async () => {
  const m = await socketManifest("only.json", "only", ["--legacy", "reject"]);
  const shim = await pooled(m, "only");
  const a = session(m);
  const b = session(m);
  for (const p of [a, b]) {
    assert.ok((await p.request(INIT("2025-11-25"))).result);
    p.send({ jsonrpc: "2.0", method: "notifications/initialized" });
  }
  assert.deepEqual((await a.request({ jsonrpc: "2.0", id: 1, method: "logging/setLevel", params: { level: "info" } })).result, {});
  assert.deepEqual((await a.request({ jsonrpc: "2.0", id: 2, method: "resources/subscribe", params: { uri: URI } }, 20000)).result, {});

  // B changes the resource: A, subscribed, hears of it as the handshake era has it; B does not.
  b.send(CALL(4, "touch"));
  const [bNotes] = await until(b, 4);
  assert.deepEqual(bNotes, [], "B did not subscribe");
  const [aNotes] = await until(a, (a.send(CALL(5, "echo", { message: "x" })), 5));
  assert.deepEqual(aNotes, [{ jsonrpc: "2.0", method: "notifications/resources/updated", params: { uri: URI } }]);

  // A's level (info) travels with A's requests; B set none, so its calls log nothing, to anyone.
  a.send(CALL(6, "log", { message: "a" }));
  const [aLog] = await until(a, 6);
  assert.deepEqual(aLog, [{ jsonrpc: "2.0", method: "notifications/message", params: { level: "info", data: "info: a" } }]);
  b.send(CALL(7, "log", { message: "b" }));
  assert.deepEqual((await until(b, 7))[0], []);
  assert.deepEqual((await until(a, (a.send(CALL(8, "echo", { message: "y" })), 8)))[0], [], "A heard nothing of B's call");

  // Unsubscribed: the next change reaches nobody, and the backend's stream is cancelled.
  assert.deepEqual((await a.request({ jsonrpc: "2.0", id: 10, method: "resources/unsubscribe", params: { uri: URI } })).result, {});
  b.send(CALL(11, "touch"));
  await until(b, 11);
  assert.deepEqual((await until(a, (a.send(CALL(12, "echo", { message: "z" })), 12)))[0], []);
  await a.close();
  await b.close();
  assert.doesNotMatch(shim.stderr(), /refused|invalid/i);
});

test("a modern backend that restarts listens again before the call that restarted it goes on: the update that call causes reaches the session", async () => {
  const m = await socketManifest("restart.json", "restart", ["--legacy", "reject"]);
  const shim = await pooled(m, "restart");
  const a = session(m);
  assert.ok((await a.request(INIT("2025-11-25"))).result);
  a.send({ jsonrpc: "2.0", method: "notifications/initialized" });
  assert.deepEqual((await a.request({ jsonrpc: "2.0", id: 1, method: "resources/subscribe", params: { uri: URI } }, 20000)).result, {});
  const pids = spawnSync("pgrep", ["-P", String(shim.child.pid)], { encoding: "utf8" }).stdout.trim().split("\n");
  assert.equal(pids.length, 1, `the shim's one child, its backend: ${pids}`);
  process.kill(Number(pids[0]), "SIGKILL");
  assert.ok(await waitFor(() => /was killed by signal KILL/.test(shim.stderr())), shim.stderr());
  // The touch starts the next process; before, it went ahead of the listen stream and its update was lost.
  a.send(CALL(2, "touch"));
  const [notes] = await until(a, 2);
  const [later] = await until(a, (a.send(CALL(3, "echo", { message: "x" })), 3));
  const updates = [...notes, ...later].filter((n) => n.method === "notifications/resources/updated");
  assert.deepEqual(updates, [{ jsonrpc: "2.0", method: "notifications/resources/updated", params: { uri: URI } }], shim.stderr());
  await a.close();
});

test("at a modern backend, an update on the stream whose uri decodes with a NUL reaches no session, not the one subscribed to the URI its first bytes spell", async () => {
  // The modern server behind a relay that writes, ahead of each update, the same update for the
  // URI with "\u0000x" after it.
  const relay = join(dir, "nul-relay.mjs");
  writeFileSync(
    relay,
    `import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
const child = spawn(process.argv[2], process.argv.slice(3), { stdio: ["pipe", "pipe", "inherit"] });
process.stdin.pipe(child.stdin);
child.on("exit", (code) => process.exit(code ?? 1));
createInterface({ input: child.stdout }).on("line", (l) => {
  let m;
  try { m = JSON.parse(l); } catch {}
  if (m?.method === "notifications/resources/updated")
    process.stdout.write(JSON.stringify({ ...m, params: { ...m.params, uri: m.params.uri + "\\u0000x" } }) + "\\n");
  process.stdout.write(l + "\\n");
});
`,
  );
  const m = await modernManifest(join(dir, "nul.json"), {
    name: "nul",
    args: ["--legacy", "reject"],
    extra: { socket: join(dir, "nul.sock"), command: ["node", relay, "node", MODERN_SERVER, "--legacy", "reject"] },
  });
  const shim = await pooled(m, "nul");
  const a = session(m);
  const b = session(m);
  for (const p of [a, b]) {
    assert.ok((await p.request(INIT("2025-11-25"))).result);
    p.send({ jsonrpc: "2.0", method: "notifications/initialized" });
  }
  assert.deepEqual((await a.request({ jsonrpc: "2.0", id: 2, method: "resources/subscribe", params: { uri: URI } }, 20000)).result, {});
  b.send(CALL(4, "touch"));
  await until(b, 4);
  const [aNotes] = await until(a, (a.send(CALL(5, "echo", { message: "x" })), 5));
  assert.deepEqual(aNotes, [{ jsonrpc: "2.0", method: "notifications/resources/updated", params: { uri: URI } }], shim.stderr());
  await a.close();
  await b.close();
});

test("differential: a handshake-era client's logging/setLevel at a modern backend, straight (the SDK's own bridge) and through mcp-lazy (the envelope's logLevel)", async () => {
  const only = await modernManifest(join(dir, "only-direct.json"), { args: ["--legacy", "reject"] });
  const script = async (c) => {
    const got = [];
    c.setNotificationHandler("notifications/message", (n) => void got.push(n.params));
    await c.setLoggingLevel("info");
    const r = await c.callTool({ name: "log", arguments: { message: "hello" } });
    await c.setLoggingLevel("debug");
    await c.callTool({ name: "log", arguments: { message: "again" } });
    return { got, r };
  };
  const straight = await connectV2("legacy", "node", [MODERN_SERVER]);
  const want = await script(straight);
  await straight.close();
  assert.deepEqual(want.got.map((p) => p.data), ["info: hello", "debug: again", "info: again"]);
  const through = await connectV2("legacy", MCP_LAZY, ["--manifest", only, "--activation=direct", "--shimd", SHIMD]);
  assert.deepEqual(await script(through), want);
  await through.close();
});

// A raw 2026-07-28 client's stream: listen, then the notifications that carry its id.
const LISTEN = (id, notifications) => MREQ(id, "subscriptions/listen", { notifications });

test("differential, pooled: subscriptions/listen resource subscriptions of modern clients at a modern backend reach the stream as the server itself sends them", async () => {
  const script = async (p, q) => {
    // q, another session of the same backend, changes the resource.
    p.send(LISTEN("s1", { resourceSubscriptions: [URI] }));
    const [ack] = await p.next(1, 20000);
    q.send(MREQ(2, "tools/call", { name: "touch", arguments: {} }));
    const [seen] = await until(q, 2);
    const updated = p === q ? seen.find((n) => n.method === "notifications/resources/updated") : (await p.next(1, 10000))[0];
    p.send({ jsonrpc: "2.0", method: "notifications/cancelled", params: { requestId: "s1" } });
    q.send(MREQ(3, "tools/call", { name: "touch", arguments: {} }));
    await until(q, 3);
    const [, answer] = await until(p, (p.send(MREQ(4, "tools/call", { name: "echo", arguments: { message: "m" } })), 4));
    return { ack, updated, after: answer.result.content };
  };
  // Straight: one process serves both (a modern server is stateless: any stdio connection will do).
  const server = new RawPeer("node", [MODERN_SERVER]);
  const want = await script(server, server);
  await server.close();
  assert.deepEqual(want.updated, {
    jsonrpc: "2.0",
    method: "notifications/resources/updated",
    params: { uri: URI, _meta: { "io.modelcontextprotocol/subscriptionId": "s1" } },
  });

  const m = await socketManifest("modern.json", "modern", []);
  await pooled(m, "modern");
  const p = session(m);
  const q = session(m);
  assert.deepEqual(await script(p, q), want);
  // q never listened: nothing of p's stream reached it.
  assert.deepEqual((await until(q, (q.send(MREQ(5, "tools/call", { name: "echo", arguments: { message: "q" } })), 5)))[0], []);
  await p.close();
  await q.close();
});

test("subscriptions/listen at a handshake-era backend: resources/subscribe to it, its updates on the stream, its unsubscribe when the stream ends", async () => {
  const m = join(dir, "everything.yaml");
  writeFileSync(
    m,
    `backends:
  everything:
    command: [node, ${SERVER_SCRIPTS.everything}, stdio]
    resources: [{uri: "demo://x", name: x}]
tools:
  - {name: toggle-subscriber-updates, backend: everything, input_schema: {type: object}}
  - {name: echo, backend: everything, input_schema: {type: object, properties: {message: {type: string}}}}
`,
  );
  const p = new RawPeer(MCP_LAZY, ["--manifest", m, "--activation=direct", "--shimd", SHIMD]);
  // The capability says so in this era too: a stream's resourceSubscriptions are honoured.
  assert.equal((await p.request(MREQ("d", "server/discover"))).result.capabilities.resources.subscribe, true);
  p.send(LISTEN(7, { resourceSubscriptions: ["demo://x", "nobody://serves-this"], toolsListChanged: true }));
  const [ack] = await p.next(1, 30000);
  assert.deepEqual(ack, {
    jsonrpc: "2.0",
    method: "notifications/subscriptions/acknowledged",
    params: {
      notifications: { toolsListChanged: true, resourceSubscriptions: ["demo://x"] },
      _meta: { "io.modelcontextprotocol/subscriptionId": 7 },
    },
  });
  // server-everything sends the update at once when its updates are switched on.
  p.send(MREQ(1, "tools/call", { name: "toggle-subscriber-updates", arguments: {} }));
  const [notes] = await until(p, 1);
  assert.deepEqual(notes, [
    {
      jsonrpc: "2.0",
      method: "notifications/resources/updated",
      params: { uri: "demo://x", _meta: { "io.modelcontextprotocol/subscriptionId": 7 } },
    },
  ], "the update, on the stream; not the backend's log of the subscribe (no logLevel was asked for)");
  p.send({ jsonrpc: "2.0", method: "notifications/cancelled", params: { requestId: 7 } });
  p.send(MREQ(2, "tools/call", { name: "toggle-subscriber-updates", arguments: {} }));
  await until(p, 2);
  p.send(MREQ(3, "tools/call", { name: "toggle-subscriber-updates", arguments: {} }));
  assert.deepEqual((await until(p, 3))[0], [], "unsubscribed at the backend: switched on again, it sends nothing");
  await p.close();
});

test("the era learned is kept across shim exits in a file of the shim's own, keyed by the command; a changed command, a foreign file or a backend that disagrees is probed again", async () => {
  const run = mkdtempSync(join(dir, "run-"));
  mkdirSync(join(run, "mcp-lazy"));
  const env = { XDG_RUNTIME_DIR: run, STATE_DIRECTORY: "", RUNTIME_DIRECTORY: "" };
  const starts = join(dir, "strict-starts");
  const write = (extra = "") =>
    writeFileSync(
      join(dir, "strict.yaml"),
      `backends:
  strict:
    command: [node, ${join(TESTS, "servers/strict-legacy.mjs")}${extra}]
    env: {STRICT_LEGACY_STARTS: ${starts}}
tools:
  - {name: echo, backend: strict, input_schema: {type: object, properties: {message: {type: string}}}}
`,
    );
  const session = async () => {
    writeFileSync(starts, "");
    const c = await connectV2("legacy", MCP_LAZY, ["--manifest", join(dir, "strict.yaml"), "--activation=direct", "--shimd", SHIMD], { env });
    const r = await c.callTool({ name: "echo", arguments: { message: "hi" } });
    assert.deepEqual(r.content, [{ type: "text", text: "Echo: hi" }]);
    await c.close();
    return { starts: readFileSync(starts, "utf8").split("\n").filter(Boolean).length, log: c.stderrText };
  };
  const file = join(run, "mcp-lazy", "strict.era");
  write();
  const first = await session();
  assert.equal(first.starts, 2, "probed (it exits on server/discover), then started again");
  assert.deepEqual(JSON.parse(readFileSync(file, "utf8")).era, "legacy");
  assert.equal(statSync(file).mode & 0o777, 0o600);
  const second = await session();
  assert.equal(second.starts, 1, "the next shim remembered: initialize at once");
  assert.match(second.log, /Backend 'strict' spoke the handshake era last time/);
  // Another command: probed again.
  write(", --changed");
  assert.equal((await session()).starts, 2);
  // A file others may write is not believed.
  chmodSync(file, 0o666);
  const foreign = await session();
  assert.equal(foreign.starts, 2);
  assert.match(foreign.log, /Not using .*strict\.era \(not a file of this user's alone/);

  // A modern-only backend that the file calls legacy: initialize is refused, it is probed, and works.
  const only = await modernManifest(join(dir, "only-era.json"), { name: "onlyera", args: ["--legacy", "reject"] });
  const cmd = JSON.parse(readFileSync(only, "utf8")).backends.onlyera.command;
  writeFileSync(join(run, "mcp-lazy", "onlyera.era"), JSON.stringify({ command: JSON.stringify(cmd), era: "legacy" }), { mode: 0o600 });
  const c = await connectV2("legacy", MCP_LAZY, ["--manifest", only, "--activation=direct", "--shimd", SHIMD], { env });
  assert.deepEqual((await c.callTool({ name: "echo", arguments: { message: "m" } })).content, [{ type: "text", text: "Echo: m" }]);
  await c.close();
  assert.match(c.stderrText, /refused initialize, though it spoke the handshake era before: probing it/);
  assert.equal(JSON.parse(readFileSync(join(run, "mcp-lazy", "onlyera.era"), "utf8")).era, "modern");
});

test("mcp-lazy import probes as a dual-era client and records the era as protocol: (a modern-only server is read in the 2026-07-28 era; one that exits on the probe is started again)", async () => {
  const h = mkdtempSync(join(dir, "home-"));
  // Each into a manifest of its own: both have a tool 'echo'.
  const importOne = (name, command, args, env) => {
    const from = join(h, `${name}.json`);
    const manifest = join(h, `${name}.yaml`);
    writeFileSync(from, JSON.stringify({ mcpServers: { [name]: { command, args, env } } }));
    const r = spawnSync(MCP_LAZY, ["import", "--no-enable", "--client", "claude-code", "--from", from, "--manifest", manifest], {
      env: { PATH: process.env.PATH, HOME: h, XDG_STATE_HOME: join(h, ".local/state") },
      encoding: "utf8",
      timeout: 120000,
    });
    assert.equal(r.status, 0, r.stdout + r.stderr);
    return { manifest, text: readFileSync(manifest, "utf8") };
  };
  const modern = importOne("modernonly", "node", [MODERN_SERVER, "--legacy", "reject"]);
  assert.match(modern.text, /\n    protocol: modern\n/);
  assert.match(modern.text, /name: modern-test/);
  assert.match(modern.text, /- name: ask\n/, "the modern server's tools, read in its era");
  const starts = join(h, "starts");
  writeFileSync(starts, "");
  const strict = importOne("strict", "node", [join(TESTS, "servers/strict-legacy.mjs")], { STRICT_LEGACY_STARTS: starts });
  assert.equal(readFileSync(starts, "utf8"), "start\nstart\n", "import: the probe, then initialize");
  assert.match(strict.text, /\n    protocol: legacy\n/);
  assert.match(strict.text, /- name: get-sum\n/, "the strict one's, after it was started again for initialize");
  const manifest = modern.manifest;

  // The imported entries: the modern-only one serves a handshake-era client (bridged); the strict one
  // is initialized at once, with no probe to die on.
  const c = await connectV2("legacy", MCP_LAZY, ["--manifest", manifest, "--backend", "modernonly", "--activation=direct", "--shimd", SHIMD]);
  assert.deepEqual((await c.callTool({ name: "echo", arguments: { message: "imported" } })).content, [{ type: "text", text: "Echo: imported" }]);
  await c.close();
  writeFileSync(starts, "");
  const d = await connectV2("pin", MCP_LAZY, ["--manifest", strict.manifest, "--backend", "strict", "--activation=direct", "--shimd", SHIMD], {
    env: { XDG_RUNTIME_DIR: "", STATE_DIRECTORY: "", RUNTIME_DIRECTORY: "" },
  });
  assert.deepEqual((await d.callTool({ name: "echo", arguments: { message: "x" } })).content, [{ type: "text", text: "Echo: x" }]);
  await d.close();
  assert.equal(readFileSync(starts, "utf8"), "start\n");
  assert.doesNotMatch(d.stderrText, /server\/discover/);
});

test("differential, pooled, two sessions at once: the modern test server's scripted session straight and through one shared backend, for the v2 client in each mode", async () => {
  const want = {};
  for (const mode of ["legacy", "pin"]) {
    const straight = await connectV2(mode, "node", [MODERN_SERVER]);
    want[mode] = await modernScript(straight);
    await straight.close();
  }
  const m = await socketManifest("pooled2.json", "pooled2", []);
  const shim = await pooled(m, "pooled2");
  // Each pair runs its scripts at the same time on the one backend process.
  for (const modes of [["legacy", "pin"], ["pin", "auto"], ["legacy", "legacy"]]) {
    const clients = await Promise.all(modes.map((mode) => connectV2(mode, MCP_LAZY, ["--manifest", m, "--activation=systemd"])));
    const got = await Promise.all(clients.map((c) => modernScript(c)));
    for (const [k, mode] of modes.entries()) assert.deepEqual(got[k], want[mode === "auto" ? "pin" : mode], `${modes}: ${mode}`);
    await Promise.all(clients.map((c) => c.close()));
  }
  assert.equal((shim.stderr().match(/Started backend 'pooled2'/g) ?? []).length, 1, "one backend process served every session");
});

test("a listen stream's subscription outlives its backend's idle stop: the next connection to the backend subscribes again", async () => {
  const m = await modernManifest(join(dir, "idle.json"), { name: "idle", extra: { idle_timeout: "1s" } });
  const p = new RawPeer(MCP_LAZY, ["--manifest", m, "--activation=direct", "--shimd", SHIMD]);
  p.send(LISTEN("s", { resourceSubscriptions: [URI] }));
  assert.deepEqual((await p.next(1, 20000))[0].params.notifications, { resourceSubscriptions: [URI] });
  assert.ok(await waitFor(() => /Idle for 1s, stopping/.test(p.stderr), 30000), p.stderr);
  assert.ok(await waitFor(() => /stopped: exited/.test(p.stderr), 30000), p.stderr);
  p.send(MREQ(1, "tools/call", { name: "touch", arguments: {} }));
  const [notes] = await until(p, 1);
  assert.deepEqual(notes, [
    { jsonrpc: "2.0", method: "notifications/resources/updated", params: { uri: URI, _meta: { "io.modelcontextprotocol/subscriptionId": "s" } } },
  ]);
  await p.close();
});

test("what a handshake-era client sends that the modern era removed never reaches a modern backend: ping and logging/setLevel answered, notifications/roots/list_changed dropped", async () => {
  const m = join(dir, "careless.yaml");
  writeFileSync(
    m,
    `backends:
  careless:
    command: [node, ${join(TESTS, "servers/careless-modern.mjs")}]
tools:
  - {name: plain, backend: careless, input_schema: {type: object}}
`,
  );
  const p = new RawPeer(MCP_LAZY, ["--manifest", m, "--activation=direct", "--shimd", SHIMD]);
  assert.ok((await p.request(INIT("2025-06-18", { roots: {} }))).result);
  p.send({ jsonrpc: "2.0", method: "notifications/initialized" });
  assert.equal((await until(p, (p.send(CALL(1, "plain")), 1)))[1].result.content[0].text, "plain");
  p.send({ jsonrpc: "2.0", method: "notifications/roots/list_changed" });
  assert.deepEqual((await p.request({ jsonrpc: "2.0", id: 2, method: "ping" })).result, {});
  assert.deepEqual((await p.request({ jsonrpc: "2.0", id: 3, method: "logging/setLevel", params: { level: "warning" } })).result, {});
  assert.equal((await until(p, (p.send(CALL(4, "plain")), 4)))[1].result.content[0].text, "plain");
  await p.close();
  const got = p.stderr.match(/careless got .*/g) ?? [];
  for (const gone of ["ping", "logging/setLevel", "notifications/roots/list_changed", "initialize"])
    assert.ok(!got.some((l) => l === `careless got ${gone}`), `${gone} reached the backend: ${got}`);
  assert.ok(got.includes("careless got tools/call at warning"), got.join("\n"));
});

test("one listen stream over two backends of different eras: each URI subscribed at its own backend, the updates of both on the one stream", async () => {
  const m = join(dir, "two.yaml");
  writeFileSync(
    m,
    `backends:
  everything:
    command: [node, ${SERVER_SCRIPTS.everything}, stdio]
    resources: [{uri: "demo://x", name: x}]
  modern:
    command: [node, ${MODERN_SERVER}, --legacy, reject]
    resources: [{uri: "${URI}", name: greeting}]
tools:
  - {name: toggle-subscriber-updates, backend: everything, input_schema: {type: object}}
  - {name: touch, backend: modern, input_schema: {type: object}}
`,
  );
  const p = new RawPeer(MCP_LAZY, ["--manifest", m, "--activation=direct", "--shimd", SHIMD]);
  p.send(LISTEN("both", { resourceSubscriptions: ["demo://x", URI] }));
  const [ack] = await p.next(1, 30000);
  assert.deepEqual(ack.params.notifications, { resourceSubscriptions: ["demo://x", URI] });
  const meta = { "io.modelcontextprotocol/subscriptionId": "both" };
  p.send(MREQ(1, "tools/call", { name: "touch", arguments: {} }));
  assert.deepEqual((await until(p, 1))[0], [{ jsonrpc: "2.0", method: "notifications/resources/updated", params: { uri: URI, _meta: meta } }]);
  p.send(MREQ(2, "tools/call", { name: "toggle-subscriber-updates", arguments: {} }));
  assert.deepEqual((await until(p, 2))[0], [{ jsonrpc: "2.0", method: "notifications/resources/updated", params: { uri: "demo://x", _meta: meta } }]);
  await p.close();
});

test("a URI the modern backend's stream did not take: each resources/subscribe to it gets its error (the second at once too, not a wait for an acknowledgement that never comes); one it takes still subscribes", async () => {
  const m = join(dir, "partial.yaml");
  writeFileSync(
    m,
    `backends:
  partial:
    command: [node, ${join(TESTS, "servers/partial-listen-modern.mjs")}]
    resources: [{uri: "bad://x", name: x}, {uri: "ok:y", name: y}]
tools:
  - {name: echo, backend: partial, input_schema: {type: object}}
`,
  );
  const p = new RawPeer(MCP_LAZY, ["--manifest", m, "--activation=direct", "--shimd", SHIMD]);
  assert.ok((await p.request(INIT("2025-11-25"))).result.capabilities.resources.subscribe);
  p.send({ jsonrpc: "2.0", method: "notifications/initialized" });
  const refused = /backend 'partial' does not offer updates of 'bad:\/\/x'/;
  for (const id of [2, 3]) {
    // Bounded: before the fix the second one was never answered.
    const r = await p.request({ jsonrpc: "2.0", id, method: "resources/subscribe", params: { uri: "bad://x" } }, 10000);
    assert.match(r.error?.message ?? "", refused, `subscribe ${id}: ${JSON.stringify(r)}`);
  }
  assert.deepEqual((await p.request({ jsonrpc: "2.0", id: 4, method: "resources/subscribe", params: { uri: "ok:y" } }, 10000)).result, {});
  await p.close();
});

test("past the per-connection limit of resource subscriptions, resources/subscribe gets an error naming the limit (not silence); an unsubscribe makes room", async () => {
  const m = join(dir, "partial-cap.yaml");
  writeFileSync(
    m,
    `backends:
  partial:
    command: [node, ${join(TESTS, "servers/partial-listen-modern.mjs")}]
    resources:
${[...Array(1024).keys(), "past"].map((k) => `      - {uri: "ok:${k}", name: r${k}}\n`).join("")}tools:
  - {name: echo, backend: partial, input_schema: {type: object}}
`,
  );
  const p = new RawPeer(MCP_LAZY, ["--manifest", m, "--activation=direct", "--shimd", SHIMD]);
  assert.ok((await p.request(INIT("2025-11-25"))).result);
  p.send({ jsonrpc: "2.0", method: "notifications/initialized" });
  const sub = (id, uri, method = "resources/subscribe") => p.request({ jsonrpc: "2.0", id, method, params: { uri } }, 20000);
  for (let k = 0; k < 1024; k++) {
    const r = await sub(10 + k, `ok:${k}`);
    assert.deepEqual(r.result, {}, `subscribe ${k}: ${JSON.stringify(r)}`);
  }
  const past = await sub(5000, "ok:past");
  assert.match(past.error?.message ?? "", /too many resource subscriptions on this connection \(limit 1024\)/, JSON.stringify(past));
  assert.deepEqual((await sub(5001, "ok:0", "resources/unsubscribe")).result, {});
  assert.deepEqual((await sub(5002, "ok:past")).result, {});
  await p.close();
});

// A backend that answers server/discover as a 2026-07-28 server while the file $DUAL_MODERN_FILE exists
// (after 400 ms; then it never acknowledges a subscriptions/listen), else speaks the handshake era; it
// appends each
// method it reads to $DUAL_LOG.
const DUAL_BACKEND = `
import { appendFileSync, existsSync } from "node:fs";
import { createInterface } from "node:readline";
const send = (m) => process.stdout.write(JSON.stringify(m) + "\\n");
const modern = existsSync(process.env.DUAL_MODERN_FILE);
createInterface({ input: process.stdin }).on("line", (line) => {
  const m = JSON.parse(line);
  if (m.method) appendFileSync(process.env.DUAL_LOG, process.pid + " " + m.method + "\\n");
  if (m.id === undefined || m.method === undefined) return;
  if (m.method === "server/discover") {
    if (modern)
      return setTimeout(() => send({ jsonrpc: "2.0", id: m.id, result: { supportedVersions: ["2026-07-28"], capabilities: { resources: { subscribe: true }, tools: {} }, _meta: { "io.modelcontextprotocol/serverInfo": { name: "dual", version: "1" } } } }), 400);
    return send({ jsonrpc: "2.0", id: m.id, error: { code: -32601, message: "Method not found" } });
  }
  if (m.method === "initialize")
    return send({ jsonrpc: "2.0", id: m.id, result: { protocolVersion: m.params.protocolVersion, capabilities: { tools: {}, resources: { subscribe: true } }, serverInfo: { name: "dual", version: "1" } } });
  if (m.method === "subscriptions/listen") return; // never acknowledged
  send({ jsonrpc: "2.0", id: m.id, error: { code: -32601, message: "no" } });
});
`;

test("a session whose roots change moves to another backend process: its subscribe still waiting at the old one is answered there and then, and nothing of it stays behind (the old process ending later touches no freed session)", async () => {
  const d = mkdtempSync(join(dir, "roots-move-"));
  const flag = join(d, "modern"), log = join(d, "log"), script = join(d, "dual.mjs");
  writeFileSync(flag, "");
  writeFileSync(log, "");
  writeFileSync(script, DUAL_BACKEND);
  const m = join(d, "m.yaml");
  writeFileSync(m, `backends:
  dual:
    command: [${process.execPath}, ${script}]
    socket: ${d}/absent.sock
    env: { DUAL_MODERN_FILE: ${flag}, DUAL_LOG: ${log} }
tools:
  - {name: t, backend: dual, input_schema: {type: object}}
`);
  const shim = await startShimOnSocket(join(d, "s.sock"), m, "dual");
  try {
    const peer = (root) => rootedPeer(shim.path, root);
    const pids = () => [...shim.stderr().matchAll(/Started backend 'dual' as pid (\d+)/g)].map((x) => Number(x[1]));
    const ROOTS = INIT("2025-06-18", { roots: { listChanged: true } });
    // Two processes for two roots, both 2026-07-28: started at once, before the era is known.
    const A = peer("r1"), B = peer("r1"), C = peer("r2");
    for (const r of await Promise.all([A, B, C].map((p) => p.ask(ROOTS)))) assert.ok(r.result, JSON.stringify(r));
    assert.ok(await waitFor(() => pids().length === 2, 20000), shim.stderr());
    // A's subscribe waits at the r1 process (2026-07-28) for an acknowledgement that never comes.
    A.send({ jsonrpc: "2.0", id: 1, method: "resources/subscribe", params: { uri: "dual://x" } });
    const listener = () => pids().find((p) => readFileSync(log, "utf8").includes(`${p} subscriptions/listen`));
    assert.ok(await waitFor(listener, 20000), readFileSync(log, "utf8") + shim.stderr());
    const p1 = listener(), p2 = pids().find((p) => p !== p1);
    // C's process comes back as a handshake-era server: roots pool into one learned era again.
    rmSync(flag);
    process.kill(p2, "SIGKILL");
    assert.ok(await waitFor(() => shim.stderr().includes(`(pid ${p2})`), 20000), shim.stderr());
    assert.equal((await C.ask(CALL(1, "t"))).error?.message, "no");
    // A moves to the r2 process: its subscribe is answered now, as ended.
    A.send({ jsonrpc: "2.0", method: "notifications/roots/list_changed" });
    A.root = "r2";
    const answer = await A.ask();
    assert.equal(answer.id, 1, JSON.stringify(answer));
    assert.match(answer.error?.message ?? "", /changed its roots and moved/);
    assert.deepEqual(await A.ask({ jsonrpc: "2.0", id: "p", method: "ping" }), { jsonrpc: "2.0", id: "p", result: {} });
    A.close();
    await sleep(300); // the shim reads A's end (and frees it): nothing it logs says so
    assert.deepEqual(await B.ask({ jsonrpc: "2.0", id: "q", method: "ping" }), { jsonrpc: "2.0", id: "q", result: {} });
    // The old process ends: the shim answers nothing to the session that is gone, and stays up.
    process.kill(p1, "SIGKILL");
    assert.ok(await waitFor(() => shim.stderr().includes(`(pid ${p1})`), 20000), shim.stderr());
    assert.deepEqual(await B.ask({ jsonrpc: "2.0", id: "p", method: "ping" }), { jsonrpc: "2.0", id: "p", result: {} });
    assert.doesNotMatch(shim.stderr(), /AddressSanitizer|runtime error/);
  } finally {
    shim.child.kill("SIGKILL");
  }
});
