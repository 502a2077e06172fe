// The stdio frontend on its own: answers from the manifest, JSON-RPC edge cases, nothing started.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readdirSync, renameSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { INIT, MANIFESTS, MCP_LAZY, RawPeer, cleanupPeers, descendants, sleep, waitFor, fileWriter } from "./lib/env.mjs";

after(cleanupPeers);

const dir = mkdtempSync(join(tmpdir(), "mcp-lazy-frontend-"));
const manifest = fileWriter(dir);

const small = manifest(
  "small.yaml",
  `server: {name: small, version: "3.1", instructions: "Be brief.", page_size: 2}
backends:
  b:
    command: [/bin/false]
    socket: ${dir}/nothing-listens-here.sock
tools:
  - {name: t1, description: one, backend: b, input_schema: {type: object}}
  - {name: t2, description: two, backend: b, input_schema: {type: object}}
  - {name: t3, description: three, backend: b, input_schema: {type: object}}
`,
);

function peer(path = small, extra = []) {
  return new RawPeer(MCP_LAZY, ["--manifest", path, "--activation=systemd", ...extra]);
}

test("SDK client: listTools() is exactly the manifest's tools, and nothing is started", async () => {
  for (const file of ["example.yaml", "demo.yaml"]) {
    const transport = new StdioClientTransport({ command: MCP_LAZY, args: ["--manifest", join(MANIFESTS, file)], stderr: "pipe" });
    const client = new Client({ name: "sdk-test", version: "1.0.0" });
    await client.connect(transport);
    const { tools } = await client.listTools();
    await client.ping();
    // The frontend's own JSON for the same manifest, to compare with what went through the SDK.
    const raw = peer(join(MANIFESTS, file));
    raw.send(INIT());
    await raw.next();
    const direct = await raw.request({ jsonrpc: "2.0", id: 1, method: "tools/list" });
    await raw.close();
    assert.ok(tools.length > 5, `${file}: ${tools.length} tools`);
    assert.deepEqual(tools, direct.result.tools);
    assert.deepEqual(descendants(transport.pid), [], `${file}: no child process`);
    await client.close();
  }
});

test("initialize negotiates the version and advertises only tools and logging", async () => {
  for (const [asked, got] of [
    ["2024-11-05", "2024-11-05"],
    ["2025-03-26", "2025-03-26"],
    ["2025-06-18", "2025-06-18"],
    ["2025-11-25", "2025-11-25"],
    ["1999-01-01", "2025-11-25"],
  ]) {
    const p = peer();
    const r = await p.request(INIT(asked));
    assert.equal(r.result.protocolVersion, got);
    assert.deepEqual(r.result.capabilities, { tools: { listChanged: true }, logging: {} });
    assert.deepEqual(r.result.serverInfo, { name: "small", version: "3.1" });
    assert.equal(r.result.instructions, "Be brief.");
    const again = await p.request(INIT(asked));
    assert.equal(again.error.code, -32600);
    assert.equal((await p.close()).code, 0);
  }
});

test("tools/list pages with cursors; unknown cursors get -32602", async () => {
  const p = peer();
  await p.request(INIT());
  const a = await p.request({ jsonrpc: "2.0", id: 1, method: "tools/list" });
  assert.deepEqual(a.result.tools.map((t) => t.name), ["t1", "t2"]);
  const b = await p.request({ jsonrpc: "2.0", id: 2, method: "tools/list", params: { cursor: a.result.nextCursor } });
  assert.deepEqual(b.result.tools.map((t) => t.name), ["t3"]);
  assert.equal(b.result.nextCursor, undefined);
  for (const cursor of ["bogus", "mcp-lazy:tools:9", "mcp-lazy:tools:0", 5]) {
    const e = await p.request({ jsonrpc: "2.0", id: 3, method: "tools/list", params: { cursor } });
    assert.equal(e.error.code, -32602, JSON.stringify(cursor));
  }
  await p.close();
});

test("JSON-RPC errors: parse, invalid, unknown method, unknown tool, no answer to notifications", async () => {
  const p = peer();
  const cases = [
    ["{not json", null, -32700],
    ['{"jsonrpc":"2.0","id":1,"method":"tools/list"} trailing', null, -32700],
    ['"just a string"', null, -32600],
    ['{"jsonrpc":"1.0","id":5,"method":"ping"}', 5, -32600],
    ['{"jsonrpc":"2.0","id":6,"method":7}', 6, -32600],
    ['{"jsonrpc":"2.0","id":null,"method":"ping"}', null, -32600],
    ['{"jsonrpc":"2.0","id":8,"method":"server/discover"}', 8, -32602], // no envelope: see eras.test.mjs
    ['{"jsonrpc":"2.0","id":8,"method":"no/such-method"}', 8, -32601],
    ['{"jsonrpc":"2.0","id":9,"method":"resources/list"}', 9, -32601],
    ['{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"nope"}}', 10, -32602],
    ['{"jsonrpc":"2.0","id":11,"method":"tools/call"}', 11, -32602],
    ['{"jsonrpc":"2.0","id":12,"method":"initialize","params":{}}', 12, -32602],
    ["[1,2]", null, -32600], // batches need 2025-03-26
  ];
  for (const [line, id, code] of cases) {
    p.send(line);
    const [m] = await p.next();
    assert.equal(m.id, id, line);
    assert.equal(m.error?.code, code, line);
  }
  p.send('{"jsonrpc":"2.0","method":"notifications/initialized"}');
  p.send('{"jsonrpc":"2.0","method":"notifications/whatever","params":{}}');
  p.send('{"jsonrpc":"2.0","id":99,"result":{}}'); // a response to nothing: dropped
  const ping = await p.request({ jsonrpc: "2.0", id: 13, method: "ping" });
  assert.deepEqual(ping, { jsonrpc: "2.0", id: 13, result: {} });
  const tool = await p.request({ jsonrpc: "2.0", id: 14, method: "tools/call", params: { name: "nope" } });
  assert.match(tool.error.message, /Unknown tool: 'nope'/);
  assert.equal((await p.close()).code, 0);
});

test("embedded NUL, CRLF and invalid UTF-8 are handled per line", async () => {
  const p = peer();
  p.child.stdin.write('{"jsonrpc":"2.0","id":1,"method":"ping"}\r\n');
  p.child.stdin.write(Buffer.from('{"jsonrpc":"2.0","id":2,"method":"ping"\0}\n'));
  p.child.stdin.write(Buffer.from([0x7b, 0x22, 0x61, 0x22, 0x3a, 0x22, 0xc3, 0x28, 0x22, 0x7d, 0x0a]));
  p.child.stdin.write('{"jsonrpc":"2.0","id":3,"method":"ping"}\n');
  const [a, b, c, d] = await p.next(4);
  assert.deepEqual(a, { jsonrpc: "2.0", id: 1, result: {} });
  assert.equal(b.error.code, -32700);
  assert.equal(c.error.code, -32700);
  assert.deepEqual(d, { jsonrpc: "2.0", id: 3, result: {} });
  await p.close();
});

test("a line past the limit is refused without being held, and the session goes on", async () => {
  const p = peer(small, ["--max-line-bytes", "4096"]);
  const big = '{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"' + "x".repeat(1 << 20) + '"}}';
  p.send(big);
  const [e] = await p.next();
  assert.equal(e.error.code, -32600);
  assert.match(e.error.message, /4096-byte limit/);
  const ping = await p.request({ jsonrpc: "2.0", id: 2, method: "ping" });
  assert.deepEqual(ping.result, {});
  await p.close();
});

test("batches with 2025-03-26: answered as one array, notifications skipped", async () => {
  const p = peer();
  await p.request(INIT("2025-03-26"));
  p.send([
    { jsonrpc: "2.0", id: "a", method: "ping" },
    { jsonrpc: "2.0", method: "notifications/initialized" },
    { jsonrpc: "2.0", id: "b", method: "tools/list", params: { cursor: "bad" } },
    { jsonrpc: "2.0", id: "c", method: "tools/call", params: { name: "t1", arguments: {} } },
    7,
  ]);
  const [arr] = await p.next();
  assert.ok(Array.isArray(arr));
  const byId = Object.fromEntries(arr.filter((m) => m.id !== null).map((m) => [m.id, m]));
  assert.deepEqual(byId.a.result, {});
  assert.equal(byId.b.error.code, -32602);
  assert.equal(byId.c.result.isError, true); // backend unreachable: a tool error, inside the batch
  assert.equal(arr.filter((m) => m.id === null && m.error.code === -32600).length, 1);
  assert.equal(arr.length, 4);
  p.send("[]");
  assert.equal((await p.next())[0].error.code, -32600);
  p.send([{ jsonrpc: "2.0", method: "notifications/initialized" }]);
  p.send({ jsonrpc: "2.0", id: "z", method: "ping" });
  assert.equal((await p.next())[0].id, "z"); // the all-notification batch got no answer
  await p.close();
});

test("a call to an unreachable backend is a tool error that says what to do", async () => {
  const p = peer();
  await p.request(INIT());
  const r = await p.request({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "t2", arguments: {} } });
  assert.equal(r.result.isError, true);
  assert.match(r.result.content[0].text, /backend 'b'.*systemctl.* enable --now mcp-lazy@b\.socket/);
  await p.close();
});

test("SIGTERM and end of input both exit 0 at once", async () => {
  // Each exit timed on its own: the start of the second frontend is no part of it, and takes seconds
  // on a loaded machine.
  const p = peer();
  await p.request(INIT());
  let t0 = Date.now();
  p.child.kill("SIGTERM");
  assert.deepEqual(await p.exitWithin(), { code: 0, signal: null });
  assert.ok(Date.now() - t0 < 2500, `SIGTERM: exited after ${Date.now() - t0} ms`);
  const q = peer();
  await q.request(INIT());
  t0 = Date.now();
  assert.equal((await q.close()).code, 0);
  assert.ok(Date.now() - t0 < 2500, `end of input: exited after ${Date.now() - t0} ms`);
});

test("mcp-lazy check: every manifest in manifests/ passes; bad ones get file:line:col", async () => {
  const all = readdirSync(MANIFESTS).filter((f) => /\.(ya?ml|json)$/.test(f));
  assert.ok(all.length >= 2, `manifests: ${all}`);
  for (const f of all) {
    const p = new RawPeer(MCP_LAZY, ["check", join(MANIFESTS, f)]);
    const { code } = await p.exitWithin();
    assert.equal(code, 0, p.stderr);
  }
  const bad = manifest("bad.yaml", "backends:\n  db:\n    comand: [x]\n");
  const p = new RawPeer(MCP_LAZY, ["check", bad]);
  const { code } = await p.exitWithin();
  assert.equal(code, 1);
  assert.match(p.stderr, /bad\.yaml:3:5: unknown key 'comand' in a backend; did you mean 'command'\?/);
  const q = new RawPeer(MCP_LAZY, ["--manifest", bad]);
  assert.equal((await q.exitWithin()).code, 1);
  await sleep(0);
});

test("mcp-lazy check warns of backend names the system manager's sandbox user cannot carry", async () => {
  const ok = "a".repeat(22);
  const long = "b".repeat(23);
  const path = manifest(
    "names.yaml",
    `backends:\n  ${ok}: {command: [x]}\n  ${long}: {command: [x]}\n  my.server: {command: [x]}\n  far.away: {host: "ssh://h"}\n` +
      `tools:\n  - {name: t, backend: ${ok}, input_schema: {type: object}}\n`,
  );
  const p = new RawPeer(MCP_LAZY, ["check", path]);
  assert.equal((await p.exitWithin()).code, 0, "a user manager runs them all: a warning, not an error");
  const warned = [...p.stderr.matchAll(/^warning: backend '([^']+)'/gm)].map((m) => m[1]);
  assert.deepEqual(warned, [long, "my.server"], p.stderr);
  assert.match(p.stderr, new RegExp(`user 'mcp-lazy-${long}', which systemd refuses \\(at most 31 characters of A-Za-z0-9_-, so a backend name of at most 22\\): give mcp-lazy@${long}.service a User= of its own`));
});

test("a changed manifest is reloaded and announced; a broken one is refused and the old one stays", async () => {
  const path = manifest("reload.yaml", "backends:\n  b: {command: [x]}\ntools:\n  - {name: one, backend: b, input_schema: {type: object}}\n");
  const p = peer(path);
  await p.request(INIT());
  // An editor's way: write a new file and rename it over the old one.
  writeFileSync(path + ".tmp", "backends:\n  b: {command: [x]}\ntools:\n  - {name: one, backend: b, input_schema: {type: object}}\n  - {name: two, backend: b, input_schema: {type: object}}\n");
  renameSync(path + ".tmp", path);
  const [n] = await p.next();
  assert.deepEqual(n, { jsonrpc: "2.0", method: "notifications/tools/list_changed" });
  const l = await p.request({ jsonrpc: "2.0", id: 1, method: "tools/list" });
  assert.deepEqual(l.result.tools.map((t) => t.name), ["one", "two"]);
  writeFileSync(path, "backends:\n  b: {command: [x]}\ntools:\n  - {name: three, backend: nope, input_schema: {type: object}}\n");
  const refused = /cannot be used, keeping the one in force: .*reload\.yaml:4:28: tool 'three' names backend 'nope'/;
  await waitFor(() => refused.test(p.stderr), 20000);
  assert.match(p.stderr, refused);
  const l2 = await p.request({ jsonrpc: "2.0", id: 2, method: "tools/list" });
  assert.deepEqual(l2.result.tools.map((t) => t.name), ["one", "two"]);
  await p.close();
});
