// Roots on a pooled backend, under a real systemd with server-filesystem: roots are a session's own
// (part of its pool key, as PgBouncer pools by startup parameters), so sessions with different roots
// get backends that see only their own; one session's roots (or its notifications/roots/list_changed)
// cannot change what another's backend may read; sessions with equal roots share one backend.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { ListRootsRequestSchema } from "@modelcontextprotocol/sdk/types.js";
import { startBox } from "./lib/box.mjs";
import { MCP_LAZY, ROOT, SANITIZER_DROPIN, SERVER_SCRIPTS, SHIMD, sleep, waitFor } from "./lib/env.mjs";

let box;
const sh = async (script) => {
  const r = await box.exec("bash", ["-c", script]);
  if (r.code !== 0) throw new Error(`box: ${script}\n${r.stdout}${r.stderr}`);
  return r.stdout;
};

before(async () => {
  box = await startBox({ bind: [ROOT] });
  await sh(`make -s -C ${ROOT} install PREFIX=/usr/local >/dev/null && systemd-sysusers
    mkdir -p /etc/systemd/system/mcp-lazy@.service.d /etc/mcp-lazy /srv/ra /srv/rb /srv/rc
    echo a > /srv/ra/a.txt; echo b > /srv/rb/b.txt; echo c > /srv/rc/c.txt
    printf '[Service]\\nExecStart=\\nExecStart=${SHIMD} --manifest \${MCP_LAZY_MANIFEST} %%i\\n' > /etc/systemd/system/mcp-lazy@.service.d/test.conf
    ${SANITIZER_DROPIN}
    cat > /etc/mcp-lazy/manifest.yaml <<'EOF'
backends:
  files:
    command: [${process.execPath}, ${SERVER_SCRIPTS.filesystem}, /srv/rc]
tools:
  - {name: list_allowed_directories, backend: files, input_schema: {type: object}}
  - {name: read_text_file, backend: files, input_schema: {type: object}}
EOF
    chmod 644 /etc/mcp-lazy/manifest.yaml
    systemctl daemon-reload && systemctl enable --now mcp-lazy@files.socket`);
});
after(async () => box && (await box.stop()));

// A session through the frontend, as a client with roots declares them.
async function session(roots) {
  const client = new Client({ name: "roots-test", version: "1" }, { capabilities: { roots: { listChanged: true } } });
  const state = { roots, asked: 0 };
  client.setRequestHandler(ListRootsRequestSchema, async () => (state.asked++, { roots: state.roots.map((d) => ({ uri: `file://${d}` })) }));
  const [cmd, ...pre] = box.nsenterArgs();
  await client.connect(new StdioClientTransport({ command: cmd, args: [...pre, MCP_LAZY, "--manifest", "/etc/mcp-lazy/manifest.yaml"], stderr: "pipe" }));
  const text = async (name, args = {}) => (await client.callTool({ name, arguments: args })).content[0].text;
  // server-filesystem asks for roots once initialized: the first call starts it.
  const allowed = async () => (await text("list_allowed_directories")).split("\n").slice(1).sort();
  return { client, state, text, allowed };
}

const backendPids = async () =>
  (await sh("cat /sys/fs/cgroup$(systemctl show -P ControlGroup mcp-lazy@files.service)/cgroup.procs"))
    .split(/\s+/)
    .filter(Boolean).length - 1; // the shim

test("sessions with different roots get backends that see only their own; equal roots share one", async () => {
  const a = await session(["/srv/ra"]);
  const b = await session(["/srv/rb"]);
  const a2 = await session(["/srv/ra"]);
  for (const s of [a, b, a2]) await s.allowed();
  assert.ok(await waitFor(async () => (await a.allowed())[0] === "/srv/ra" && (await b.allowed())[0] === "/srv/rb", 20000));
  assert.deepEqual(await a.allowed(), ["/srv/ra"]);
  assert.deepEqual(await b.allowed(), ["/srv/rb"]);
  assert.deepEqual(await a2.allowed(), ["/srv/ra"]);
  assert.match(await b.text("read_text_file", { path: "/srv/rb/b.txt" }), /^b/);
  assert.match(await b.text("read_text_file", { path: "/srv/ra/a.txt" }), /Access denied/);
  assert.match(await a2.text("read_text_file", { path: "/srv/ra/a.txt" }), /^a/);
  assert.equal(await backendPids(), 2, "one backend for the two sessions with roots /srv/ra, one for /srv/rb");
  // The shim asked each session itself, once: the backends' own roots/list were answered by the shim.
  assert.deepEqual([a.state.asked, b.state.asked, a2.state.asked], [1, 1, 1]);
  for (const s of [a, b, a2]) await s.client.close();
});

test("a hostile session cannot change another session's allowed directories", async () => {
  await sh("systemctl stop mcp-lazy@files.service");
  const a = await session(["/srv/ra"]);
  // Same roots at first: the two share a backend.
  const h = await session(["/srv/ra"]);
  await a.allowed();
  await h.allowed();
  assert.equal(await backendPids(), 1);
  // Then h claims the whole file system and says its roots changed.
  h.state.roots = ["/"];
  await h.client.sendRootsListChanged();
  assert.ok(await waitFor(async () => (await h.allowed())[0] === "/", 20000), "h's next calls go to a backend with its new roots");
  await sleep(500);
  assert.deepEqual(await a.allowed(), ["/srv/ra"], "a's backend never heard of h's roots");
  assert.match(await a.text("read_text_file", { path: "/srv/rb/b.txt" }), /Access denied/);
  assert.equal(await backendPids(), 2);
  // A session that answers roots/list with roots of its own from the start gets its own backend too.
  const h2 = await session(["/"]);
  assert.ok(await waitFor(async () => (await h2.allowed())[0] === "/", 20000));
  assert.deepEqual(await a.allowed(), ["/srv/ra"]);
  assert.equal(await backendPids(), 2, "h2 shares h's backend: the same roots");
  for (const s of [a, h, h2]) await s.client.close();
});

test("a session alone on its backend that changes its roots keeps the backend, which takes them", async () => {
  await sh("systemctl stop mcp-lazy@files.service");
  const a = await session(["/srv/ra"]);
  await a.allowed();
  a.state.roots = ["/srv/rb"];
  await a.client.sendRootsListChanged();
  assert.ok(await waitFor(async () => (await a.allowed())[0] === "/srv/rb", 20000), "the backend asked again and got the new roots");
  assert.equal(await backendPids(), 1);
  await a.client.close();
});

test("bounded: a session that does not answer roots/list, or answers past the size limit, gets a clear error", async () => {
  const { RawPeer, INIT } = await import("./lib/env.mjs");
  const [cmd, ...pre] = box.nsenterArgs();
  const peer = () => new RawPeer(cmd, [...pre, MCP_LAZY, "--manifest", "/etc/mcp-lazy/manifest.yaml"]);
  const call = (id) => ({ jsonrpc: "2.0", id, method: "tools/call", params: { name: "list_allowed_directories", arguments: {} } });
  const p = peer();
  assert.ok((await p.request(INIT("2025-06-18", { roots: {} }))).result);
  p.send(call(1));
  const [ask] = await p.next(1, 10000);
  assert.equal(ask.method, "roots/list", JSON.stringify(ask));
  const t0 = Date.now();
  const [r] = await p.next(1, 20000); // nothing answered: the shim gives up after 10 s
  assert.ok(Date.now() - t0 > 5000);
  assert.equal(r.id, 1, JSON.stringify(r));
  assert.equal(r.result?.isError, true, JSON.stringify(r));
  assert.match(r.result.content[0].text, /did not answer mcp-lazy's roots\/list within 10 s/);
  // The next call asks again; an answer past 64 KiB is refused, naming the limit.
  p.send(call(2));
  const [again] = await p.next(1, 10000);
  assert.equal(again.method, "roots/list");
  p.send({ jsonrpc: "2.0", id: again.id, result: { roots: Array.from({ length: 2000 }, (_, i) => ({ uri: `file:///srv/ra/${"x".repeat(40)}${i}` })) } });
  const [big] = await p.next(1, 10000);
  assert.equal(big.id, 2);
  assert.match(big.result?.content?.[0]?.text ?? JSON.stringify(big), /roots\/list answer is longer than 65536 bytes, the limit/);
  // And one that answers is served.
  p.send(call(3));
  const [third] = await p.next(1, 10000);
  p.send({ jsonrpc: "2.0", id: third.id, result: { roots: [{ uri: "file:///srv/rc" }] } });
  const msgs = await p.next(1, 30000);
  assert.equal(msgs[0].id, 3, JSON.stringify(msgs));
  assert.match(msgs[0].result.content[0].text, /\/srv\/rc/);
  await p.close();
});

test("a 2026-07-28 client is not asked (it takes no requests from a server): pooled apart, its backend gets no roots", async () => {
  const { RawPeer } = await import("./lib/env.mjs");
  const { MREQ } = await import("./lib/eras.mjs");
  await sh("systemctl stop mcp-lazy@files.service");
  const a = await session(["/srv/ra"]);
  await a.allowed();
  const [cmd, ...pre] = box.nsenterArgs();
  const p = new RawPeer(cmd, [...pre, MCP_LAZY, "--manifest", "/etc/mcp-lazy/manifest.yaml"]);
  const msgs = [];
  for (let id = 1; id <= 2; id++) {
    p.send(MREQ(id, "tools/call", { name: "list_allowed_directories", arguments: {} }, { roots: { listChanged: true } }));
    const [m] = await p.next(1, 30000);
    msgs.push(m);
    await sleep(500); // server-filesystem asks for roots once initialized; the shim answers "none"
  }
  // Not asked: a roots/list would have come before the answer, and a wait for one that never comes
  // ends the call with the roots/list timeout's error (not a clock: a cold start on a loaded machine
  // can take as long as a wait would).
  assert.ok(msgs.every((m) => m.result && !m.result.isError), JSON.stringify(msgs));
  assert.match(msgs[1].result.content[0].text, /^Allowed directories:\n\/srv\/rc$/, "the manifest's directory: no session's roots");
  assert.deepEqual(await a.allowed(), ["/srv/ra"]);
  assert.equal(await backendPids(), 2, "pooled apart from the session that answered roots");
  await p.close();
  await a.client.close();
});
