// The client closes the frontend's input (MCP's stdio shutdown, or `printf ... | mcp-lazy`): the calls
// already sent are answered, as a server run directly answers them, then the frontend exits. A
// backend's request to the client, which can no longer be answered, gets an error at once; a hung
// backend keeps the frontend until SIGTERM, which ends it. Real frontend, shims and a line-level
// backend (tests/fixtures/echo-backend.mjs), started by the frontend (--activation=direct).
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { INIT, MCP_LAZY, RawPeer, SHIMD, TESTS, cleanupPeers } from "./lib/env.mjs";

after(cleanupPeers);
const dir = mkdtempSync(join(tmpdir(), "mcp-lazy-eof-"));
after(() => rmSync(dir, { recursive: true, force: true }));
const ECHO = join(TESTS, "fixtures/echo-backend.mjs");
// Backend two: every call is answered after arguments.ms ("slow done"), whatever its tool.
const SLOW = join(dir, "slow-backend.mjs");
writeFileSync(
  SLOW,
  `import { createInterface } from "node:readline";
const send = (m) => process.stdout.write(JSON.stringify(m) + "\\n");
createInterface({ input: process.stdin }).on("line", (line) => {
  const m = JSON.parse(line);
  if (m.method === "initialize")
    send({ jsonrpc: "2.0", id: m.id, result: { protocolVersion: m.params.protocolVersion, capabilities: { tools: {} }, serverInfo: { name: "slow", version: "1" } } });
  else if (m.method === "tools/call")
    setTimeout(() => send({ jsonrpc: "2.0", id: m.id, result: { content: [{ type: "text", text: "slow done" }] } }), m.params.arguments?.ms ?? 0);
  else if (m.id !== undefined) send({ jsonrpc: "2.0", id: m.id, error: { code: -32601, message: "no" } });
});
`,
);
const manifest = join(dir, "m.yaml");
const TOOLS = ["slow", "progress", "ask"];
writeFileSync(
  manifest,
  `backends:
  one: {command: [${process.execPath}, ${ECHO}], socket: ${dir}/absent-one.sock}
  two: {command: [${process.execPath}, ${SLOW}], socket: ${dir}/absent-two.sock}
tools:
${TOOLS.map((t) => `  - {name: ${t}, backend: one, input_schema: {type: object}}`).join("\n")}
  - {name: slow2, backend: two, input_schema: {type: object}}
`,
);

const call = (id, name, args = {}, extra = {}) => ({ jsonrpc: "2.0", id, method: "tools/call", params: { name, arguments: args, ...extra } });
const text = (r) => r.result?.content?.[0]?.text ?? JSON.stringify(r);
const CAPS = { sampling: {}, roots: {}, elicitation: {} };

// A frontend whose client writes lines and closes its input at once, before any answer.
function writeAndClose(lines, extra = []) {
  const p = new RawPeer(MCP_LAZY, ["--manifest", manifest, "--activation=direct", "--shimd", SHIMD, ...extra]);
  p.stdoutClosed = new Promise((r) => p.child.stdout.on("close", r));
  p.child.stdin.end(lines.map((l) => JSON.stringify(l) + "\n").join(""));
  return p;
}

// Everything it wrote, once it has exited and its stdout is read to the end.
async function allOutput(p) {
  const st = await p.exitWithin(60000);
  await p.stdoutClosed;
  return { st, out: p.lines.map((l) => JSON.parse(l)) };
}
const byId = (out, id) => out.find((m) => m.id === id && m.method === undefined);

test("a call to a backend still starting, input closed at once: its real answer, then exit 0", async () => {
  const p = writeAndClose([INIT(), { jsonrpc: "2.0", method: "notifications/initialized" }, call(2, "slow", { ms: 10 })], ["--backend", "one"]);
  const { st, out } = await allOutput(p);
  assert.deepEqual(st, { code: 0, signal: null }, p.stderr);
  assert.ok(byId(out, 0)?.result?.protocolVersion, JSON.stringify(out));
  assert.equal(text(byId(out, 2)), "slow done", JSON.stringify(out));
});

test("calls in flight at two backends, input closed: both answered, with the notifications on the way", async () => {
  const p = writeAndClose([
    INIT(),
    { jsonrpc: "2.0", method: "notifications/initialized" },
    call(2, "slow", { ms: 200 }),
    call(3, "slow2", { ms: 100 }),
    call(4, "progress", {}, { _meta: { progressToken: "tok" } }),
  ]);
  const { st, out } = await allOutput(p);
  assert.deepEqual(st, { code: 0, signal: null }, p.stderr);
  assert.equal(text(byId(out, 2)), "slow done", JSON.stringify(out));
  assert.equal(text(byId(out, 3)), "slow done", JSON.stringify(out));
  assert.ok(byId(out, 4)?.result, JSON.stringify(out));
  const progress = out.filter((m) => m.method === "notifications/progress");
  assert.deepEqual(progress.map((m) => m.params.progressToken), ["tok"], JSON.stringify(out));
  assert.ok(out.indexOf(progress[0]) < out.indexOf(byId(out, 4)), "the progress goes before the call's answer");
});

test("a backend's request to a client whose input is closed gets an error at once; the call is answered", async () => {
  const p = writeAndClose([INIT("2025-06-18", CAPS), { jsonrpc: "2.0", method: "notifications/initialized" }, call(2, "ask")]);
  const { st, out } = await allOutput(p);
  assert.deepEqual(st, { code: 0, signal: null }, p.stderr);
  // The call's answer carries what the backend's sampling request got back: the error, from mcp-lazy.
  const r = byId(out, 2);
  assert.ok(r, JSON.stringify(out));
  const got = JSON.parse(text(r));
  assert.equal(got.code, -32603, text(r));
  assert.match(got.message, /client closed its input/, text(r));
});

test("a call at a hung backend, input closed: the frontend stays until SIGTERM, then exits at once", async () => {
  // A backend that answers one call and never the other (its timer is as long as node allows).
  const p = writeAndClose([
    INIT(),
    { jsonrpc: "2.0", method: "notifications/initialized" },
    call(2, "slow", { ms: 2147483647 }),
    call(3, "slow2", { ms: 10 }),
  ]);
  // The other backend's answer: the input was closed long before, and the session still serves.
  const [init, r] = await p.next(2, 60000);
  assert.ok(init.result?.protocolVersion, JSON.stringify(init));
  assert.equal(r.id, 3, JSON.stringify(r));
  assert.equal(text(r), "slow done");
  assert.equal(p.child.exitCode, null, "the frontend waits for the hung call");
  assert.equal(p.child.stdout.readableEnded, false, "its stdout stays open");
  p.child.kill("SIGTERM");
  // A bound for a hang, not a timing: without the signal it would wait for ever.
  const st = await p.exitWithin(30000);
  assert.notEqual(st.signal, "SIGKILL", "SIGTERM ended it");
  assert.deepEqual(st, { code: 0, signal: null }, p.stderr);
  await p.stdoutClosed;
  assert.deepEqual(p.lines, [], "nothing after the answer: the hung call is not answered");
});
