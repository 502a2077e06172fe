// One frontend per backend: `mcp-lazy --backend NAME` against the real server it stands for.
// A client that launches the server directly and one that launches mcp-lazy get the same initialize
// result and the same lists (both read off the wire, before the SDK's parsing), and calls work.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { dumpServer, CAPS } from "../tools/dump-server.mjs";
import { localCommand, readBackends } from "../tools/regen-manifests.mjs";
import { INIT, MANIFESTS, MCP_LAZY, RawPeer, TESTS, cleanupPeers, sleep, waitFor } from "./lib/env.mjs";

after(cleanupPeers);

const DEMO = join(MANIFESTS, "demo.yaml");
const dir = mkdtempSync(join(tmpdir(), "mcp-lazy-dropin-"));
// Every frontend here starts its own shim (no systemd): nothing is shared with other tests.
const lazyArgs = (backend, manifest = DEMO) => ["--backend", backend, "--manifest", manifest, "--activation=direct"];

function direct(name) {
  const b = readBackends(readFileSync(DEMO, "utf8")).find((x) => x.name === name);
  return localCommand(b, MANIFESTS);
}

async function dump(command, { cwd, env } = {}) {
  const o = { command, cwd, env: env ?? {}, caps: CAPS.none, capsName: "none", roots: [], settle: 0, lists: true, timeout: 60000, stderr: false };
  const d = await dumpServer(o);
  delete d.command;
  delete d.timing;
  delete d.notifications;
  return d;
}

for (const name of ["everything", "memory", "files"]) {
  test(`--backend ${name}: the same initialize result and lists as the server itself`, async () => {
    const run = direct(name);
    const own = await dump(run.command, run);
    const lazy = await dump([MCP_LAZY, ...lazyArgs(name)]);
    assert.ok(own.serverInfo?.name && own.tools.length > 0, JSON.stringify(own.serverInfo));
    assert.deepEqual(lazy, own);
  });
}

// A call through each: the SDK client, the server's answer.
test("--backend: calls reach the backend and answer as the server does", async () => {
  const calls = {
    everything: ["echo", { message: "drop-in" }],
    files: ["list_allowed_directories", {}],
    memory: ["search_nodes", { query: "mcp-lazy-dropin-nothing-matches-this" }],
  };
  for (const [name, [tool, args]] of Object.entries(calls)) {
    const results = [];
    for (const transport of [
      new StdioClientTransport({ command: direct(name).command[0], args: direct(name).command.slice(1), cwd: direct(name).cwd, env: { ...process.env, ...direct(name).env }, stderr: "pipe" }),
      new StdioClientTransport({ command: MCP_LAZY, args: lazyArgs(name), stderr: "pipe" }),
    ]) {
      const client = new Client({ name: "dropin-test", version: "1.0.0" });
      await client.connect(transport);
      results.push(await client.callTool({ name: tool, arguments: args }));
      await client.close();
    }
    assert.deepEqual(results[1], results[0], name);
  }
});

test("--backend: only that backend's tools; other backends' tools are unknown", async () => {
  const p = new RawPeer(MCP_LAZY, lazyArgs("files"));
  p.send(INIT());
  await p.next();
  const list = await p.request({ jsonrpc: "2.0", id: 1, method: "tools/list" });
  assert.ok(list.result.tools.some((t) => t.name === "read_text_file"));
  assert.ok(!list.result.tools.some((t) => t.name === "echo" || t.name === "create_entities"));
  const call = await p.request({ jsonrpc: "2.0", id: 2, method: "tools/call", params: { name: "echo", arguments: {} } });
  assert.equal(call.error.code, -32602);
  // server-filesystem declares no prompts or resources: neither does its drop-in.
  const prompts = await p.request({ jsonrpc: "2.0", id: 3, method: "prompts/list" });
  assert.equal(prompts.error.code, -32601);
  await p.close();
});

test("--backend NAME that the manifest does not have: a clear error naming the ones it has", () => {
  const r = spawnSync(MCP_LAZY, lazyArgs("nope"), { encoding: "utf8", input: "" });
  assert.equal(r.status, 1);
  assert.equal(r.stderr.trim(), `${DEMO}: no backend 'nope' in this manifest (it has: memory, everything, files)`);
  const bad = spawnSync(MCP_LAZY, ["--backend", "../x"], { encoding: "utf8", input: "" });
  assert.equal(bad.status, 2);
  assert.match(bad.stderr, /--backend '\.\.\/x' is not a backend name/);
});

test("--backend without --manifest reads the manifest the units read ($XDG_CONFIG_HOME/mcp-lazy/manifest.yaml)", async () => {
  // A user's default; root's (/etc/mcp-lazy/manifest.yaml) is the system manager's, used in the box tests.
  const home = join(dir, "home");
  mkdirSync(join(home, "config/mcp-lazy"), { recursive: true });
  writeFileSync(
    join(home, "config/mcp-lazy/manifest.yaml"),
    `backends:
  one:
    command: [/bin/false]
    server_info: {name: one-server, version: "1.2"}
    instructions: Use one.
    capabilities: {tools: {}}
  two: {command: [/bin/false]}
tools:
  - {name: a, backend: one, input_schema: {type: object}}
  - {name: b, backend: two, input_schema: {type: object}}
`,
  );
  for (const d of [dir, home, join(home, "config"), join(home, "config/mcp-lazy")]) chmodSync(d, 0o755);
  chmodSync(join(home, "config/mcp-lazy/manifest.yaml"), 0o644);
  const p = new RawPeer("setpriv", ["--reuid=65534", "--regid=65534", "--clear-groups", MCP_LAZY, "--backend", "one"], {
    env: { PATH: process.env.PATH, HOME: "/nonexistent", XDG_CONFIG_HOME: join(home, "config"), MCP_LAZY_CACHE_DIR: "" },
  });
  p.send(INIT());
  const [init] = await p.next();
  assert.deepEqual(init.result, { protocolVersion: "2025-06-18", capabilities: { tools: {} }, serverInfo: { name: "one-server", version: "1.2" }, instructions: "Use one." });
  const list = await p.request({ jsonrpc: "2.0", id: 1, method: "tools/list" });
  assert.deepEqual(list.result.tools.map((x) => x.name), ["a"]);
  await p.close();
});

test("--backend: a reload that drops the backend is refused; one that changes it is announced as the backend would", async () => {
  const path = join(dir, "reload.yaml");
  const text = (tools, caps = "{tools: {listChanged: true}}") => `backends:
  x:
    command: [/bin/false]
    server_info: {name: x, version: "1"}
    capabilities: ${caps}
  y: {command: [/bin/false]}
tools:
${tools.map((t) => `  - {name: ${t}, backend: x, input_schema: {type: object}}`).join("\n")}
  - {name: other, backend: y, input_schema: {type: object}}
`;
  writeFileSync(path, text(["t1"]));
  const p = new RawPeer(MCP_LAZY, lazyArgs("x", path), { env: { ...process.env, MCP_LAZY_CACHE_DIR: "" } });
  p.send(INIT());
  await p.next();
  writeFileSync(path, text(["t1", "t2"]));
  const [note] = await p.next(1, 10000);
  assert.equal(note.method, "notifications/tools/list_changed");
  // Without x the file is no use to this frontend: it keeps what it has.
  writeFileSync(path, "backends: {y: {command: [/bin/false]}}\n");
  await waitFor(() => p.stderr.includes("no backend 'x'"), 20000);
  assert.match(p.stderr, /keeping the one in force: .*no backend 'x' in this manifest \(it has: y\)/);
  const list = await p.request({ jsonrpc: "2.0", id: 1, method: "tools/list" });
  assert.deepEqual(list.result.tools.map((x) => x.name), ["t1", "t2"]);
  // A backend that does not announce changes (no tools.listChanged) gets none announced for it.
  writeFileSync(path, text(["t1"], "{tools: {}}"));
  await waitFor(() => (p.stderr.match(/Reloaded/g) ?? []).length >= 2, 20000);
  await sleep(200);
  assert.deepEqual(p.lines, []);
  const after = await p.request({ jsonrpc: "2.0", id: 2, method: "tools/list" });
  assert.deepEqual(after.result.tools.map((x) => x.name), ["t1"]);
  await p.close();
});

// Linux gives each user 128 inotify instances, one per frontend: past that a frontend checks its
// manifest with stat() on a timer. Here, in a user namespace whose limit is 4, 12 frontends of one
// user all hear of a change.
test("more frontends than the user's inotify instances: every one still reloads", async (t) => {
  const LIMIT = 4;
  const N = 12;
  const { spawn } = await import("node:child_process");
  const holder = spawn("unshare", ["-U", "-r", "sh", "-c", `echo ${LIMIT} > /proc/sys/user/max_inotify_instances && echo ready && exec sleep 600`], { stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  holder.stdout.on("data", (d) => (out += d));
  holder.stderr.on("data", (d) => (out += d));
  t.after(() => holder.kill("SIGKILL"));
  await waitFor(() => out.includes("ready") || holder.exitCode !== null, 20000);
  assert.match(out, /ready/, `cannot make a user namespace with a lower inotify limit: ${out}`);

  const path = join(dir, "many.yaml");
  const text = (tools) => `backends: {x: {command: [/bin/false]}}
tools:
${tools.map((n) => `  - {name: ${n}, backend: x, input_schema: {type: object}}`).join("\n")}
`;
  writeFileSync(path, text(["t1"]));
  const env = { ...process.env, MCP_LAZY_CACHE_DIR: "", MCP_LAZY_LOG_LEVEL: "debug" };
  const peers = [];
  for (let i = 0; i < N; i++) {
    const p = new RawPeer("nsenter", ["-t", String(holder.pid), "-U", "--", MCP_LAZY, ...lazyArgs("x", path)], { env });
    p.send(INIT());
    peers.push(p);
  }
  for (const p of peers) await p.next(1, 10000);
  const polling = peers.filter((p) => /Cannot watch .* with inotify \(Too many open files\), checking it every 2 s instead/.test(p.stderr));
  assert.equal(polling.length, N - LIMIT, "frontends past the limit fall back to stat()");
  // Renamed over, as editors and `mcp-lazy import` write it.
  writeFileSync(path + ".new", text(["t1", "t2"]));
  const { renameSync } = await import("node:fs");
  renameSync(path + ".new", path);
  for (const p of peers) {
    const [note] = await p.next(1, 10000);
    assert.equal(note.method, "notifications/tools/list_changed");
    const list = await p.request({ jsonrpc: "2.0", id: 1, method: "tools/list" });
    assert.deepEqual(list.result.tools.map((x) => x.name), ["t1", "t2"]);
  }
  // And written in place.
  writeFileSync(path, text(["t3"]));
  for (const p of peers) {
    const [note] = await p.next(1, 10000);
    assert.equal(note.method, "notifications/tools/list_changed");
  }
  await Promise.all(peers.map((p) => p.close()));
});
