// A backend that ignores SIGTERM and the end of its stdin, and floods stdout and stderr while it is
// being stopped (tests/servers/stubborn.mjs): the shim stays responsive meanwhile, ends it with
// SIGKILL once SIGTERM's grace runs out, and serves what waited with a new process; asked to stop
// itself, it ends such a backend the same way and exits cleanly. No systemd needed: the shim runs
// behind systemd-socket-activate, the sessions straight on its socket. The stop's graces (2 s for
// stdin, 3 s for SIGTERM) are the shim's; the waits below are bounds for a hang, not timings.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { INIT, SockPeer, TESTS, cleanupPeers, cmdline, startShimOnSocket, waitFor } from "./lib/env.mjs";

after(cleanupPeers);
const dir = mkdtempSync(join(tmpdir(), "mcp-lazy-stubborn-"));
after(() => rmSync(dir, { recursive: true, force: true }));
const sock = join(dir, "stubborn.sock");
const manifest = join(dir, "m.yaml");
writeFileSync(
  manifest,
  `backends:
  stubborn:
    command: [${process.execPath}, ${join(TESTS, "servers/stubborn.mjs")}]
    idle_timeout: 10m
    socket: ${sock}
tools:
  - {name: echo, backend: stubborn, input_schema: {type: object}}
  - {name: flood, backend: stubborn, input_schema: {type: object}}
`,
);

const call = (id, name, args = {}) => ({ jsonrpc: "2.0", id, method: "tools/call", params: { name, arguments: args } });
const textOf = (m) => m.result?.content?.[0]?.text ?? JSON.stringify(m);
const pidOf = (m) => Number(/from (\d+)$/.exec(textOf(m))?.[1]);
const alive = (pid) => cmdline(pid).includes("stubborn.mjs");
// The backends seen: one that ignores SIGTERM and its stdin's end outlives a shim that a failed test
// killed with SIGKILL (no systemd here to end its cgroup), so they are killed after the tests.
const seen = [];
after(() => {
  for (const pid of seen) if (alive(pid)) process.kill(pid, "SIGKILL");
});

async function session() {
  const s = new SockPeer(sock);
  assert.ok((await s.request(INIT())).result);
  s.send({ jsonrpc: "2.0", method: "notifications/initialized" });
  return s;
}

// How a child exited, or that it did not within ms (a bound for a hang, not a timing).
async function exitWithin(exited, ms = 30000) {
  let bound;
  const r = await Promise.race([exited, new Promise((res) => (bound = setTimeout(() => res(`still running after ${ms} ms`), ms)))]);
  clearTimeout(bound);
  return r;
}

test("a backend that ignores SIGTERM and floods stdout and stderr while stopped: the shim answers meanwhile, kills it, and a new one serves", async () => {
  const shim = await startShimOnSocket(sock, manifest, "stubborn", { extra: ["--max-line-bytes", "65536"] });
  after(() => shim.child.kill("SIGKILL"));
  const shimSays = () => `\nthe shim said (its last 4 KiB): ${shim.stderr().slice(-4096)}`;

  const a = await session();
  const b = await session();
  const first = await a.request(call(1, "echo", { message: "hi" }));
  const pid1 = pidOf(first);
  seen.push(pid1);
  assert.ok(pid1 > 0 && alive(pid1), textOf(first));
  // The flood: its endless line passes the line limit with neither id nor method, so the shim stops
  // the backend (its stdin closed, then SIGTERM, which it ignores), while the flood goes on.
  assert.equal(textOf(await a.request(call(2, "flood"))), `flooding from ${pid1}`);
  assert.ok(await waitFor(() => shim.stderr().includes("restarting it"), 30000), shimSays());

  // Meanwhile the shim answers both sessions' pings, and takes a call, which waits for the next
  // process (the stubborn one is not killed before the 5 s of its graces are out).
  assert.deepEqual(await b.request({ jsonrpc: "2.0", id: 1, method: "ping" }), { jsonrpc: "2.0", id: 1, result: {} });
  assert.deepEqual(await a.request({ jsonrpc: "2.0", id: 3, method: "ping" }), { jsonrpc: "2.0", id: 3, result: {} });
  const next = await b.request(call(2, "echo", { message: "after" }), 60000);
  const pid2 = pidOf(next);
  seen.push(pid2);
  assert.match(textOf(next), /^echo after from \d+$/);
  assert.ok(pid2 > 0 && pid2 !== pid1, textOf(next));

  // The stubborn one heard SIGTERM, ignored it, and was killed.
  assert.ok(shim.stderr().includes(`stubborn ${pid1}: SIGTERM ignored`), shimSays());
  assert.match(shim.stderr(), new RegExp(`\\(pid ${pid1}\\) ignored SIGTERM, killing it`), shimSays());
  assert.ok(!alive(pid1), `backend ${pid1} still runs${shimSays()}`);
  assert.equal(textOf(await a.request(call(4, "echo", { message: "again" }))), `echo again from ${pid2}`);

  // Told to stop, the shim ends the second stubborn backend as well, then exits cleanly.
  a.close();
  b.close();
  shim.child.kill("SIGTERM");
  assert.deepEqual(await exitWithin(shim.exited), { code: 0, signal: null }, shimSays());
  assert.ok(shim.stderr().includes(`stubborn ${pid2}: SIGTERM ignored`), shimSays());
  assert.ok(!alive(pid2), `backend ${pid2} outlived the shim${shimSays()}`);
});
