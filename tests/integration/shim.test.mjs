// The shim behind the frontend, for real: socket activation under a real systemd (in a box), and
// direct activation without systemd. Real servers from npm, the official SDK as the client.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { IDLE_MS, PG_URL, boxFleet, directFleet, enableSockets, fleetManifest } from "./lib/fleet.mjs";
import { INIT, MCP_LAZY, RawPeer, SERVER_SCRIPTS, SHIMD, cleanupPeers, cmdline, sleep, waitFor } from "./lib/env.mjs";

after(cleanupPeers);
const NAMES = ["memory", "everything", "files", "npxmem", "database"];

// The same call made to the server itself, without mcp-lazy (inside the box for the box).
async function directCall(fleet, script, args, name, callArgs) {
  const [cmd, ...pre] = fleet.box ? fleet.box.nsenterArgs() : [process.execPath];
  const transport = new StdioClientTransport({
    command: cmd,
    args: fleet.box ? [...pre, process.execPath, script, ...args] : [script, ...args],
    env: { ...process.env, MEMORY_FILE_PATH: "/tmp/mcp-lazy-direct-memory.jsonl" },
    stderr: "pipe",
  });
  const client = new Client({ name: "mcp-lazy-test", version: "1.0.0" });
  await client.connect(transport);
  try {
    return await client.callTool({ name, arguments: callArgs });
  } finally {
    await client.close();
  }
}

function scenarios(makeFleet) {
  let fleet;
  before(async () => {
    fleet = await makeFleet();
    if (fleet.box) await enableSockets(fleet, NAMES);
  });
  after(async () => fleet && (await fleet.stop()));

  // Whether the backend's processes (and under systemd its service) are gone within a bound far
  // past its idle_timeout (a bound for a hang, not a timing).
  const idleGone = async (name, idleMs = IDLE_MS) => {
    if (fleet.box)
      return waitFor(async () => (await fleet.active(name)) !== "active" && (await fleet.cgroupPids(name)).length === 0, idleMs + 30000, 100);
    return waitFor(async () => (await fleet.backendPids(name)).length === 0, idleMs + 30000, 100);
  };

  test("initialize and listTools start nothing", async () => {
    const s = await fleet.session();
    const { tools } = await s.listTools();
    assert.ok(tools.some((t) => t.name === "echo"));
    await s.ping();
    for (const n of ["memory", "everything", "files", "npxmem"]) assert.deepEqual(await fleet.backendPids(n), [], n);
    if (fleet.box) assert.ok(await fleet.allInactive(NAMES), "every service inactive");
    else assert.deepEqual(await fleet.shimPids(s), [], "no shim started");
    await s.close();
  });

  // Runs fn with the shims' idle_timeout set to idle, then puts the usual one back.
  const withIdle = async (idle, fn) => {
    await fleet.useManifest(fleetManifest({ ...fleet.manifestOptions, idle }));
    try {
      return await fn();
    } finally {
      await fleet.useManifest(fleetManifest(fleet.manifestOptions));
    }
  };

  test("a call gives what the server itself gives, and starts only its backend", () =>
    // Which services are active is read after the call: with the usual 1.5 s idle_timeout a loaded
    // machine can outlast the read, and the shim would be gone.
    withIdle("10m", async () => {
      const s = await fleet.session();
      const sum = { a: 2, b: 40 };
      const got = await s.callTool({ name: "get-sum", arguments: sum });
      if (fleet.box) {
        assert.equal(await fleet.active("everything"), "active");
        for (const n of ["memory", "npxmem", "files", "database"]) assert.equal(await fleet.active(n), "inactive", n);
      } else assert.deepEqual(await fleet.backendPids("memory"), []);
      const echo = await s.callTool({ name: "echo", arguments: { message: "héllo" } });
      const dirs = await s.callTool({ name: "list_allowed_directories", arguments: {} });
      const sql = { sql: "select 1 + 1 as two, current_user as who" };
      const pg = fleet.box
        ? await s.callTool({ name: "query", arguments: sql }).catch((e) => {
            throw new Error(`${e.message}; mcp-lazy's stderr: ${s.stderrText()}`);
          })
        : null;
      await s.close();
      assert.deepEqual(got, await directCall(fleet, SERVER_SCRIPTS.everything, ["stdio"], "get-sum", sum));
      assert.deepEqual(echo, await directCall(fleet, SERVER_SCRIPTS.everything, ["stdio"], "echo", { message: "héllo" }));
      assert.deepEqual(dirs, await directCall(fleet, SERVER_SCRIPTS.filesystem, ["/tmp"], "list_allowed_directories", {}));
      if (pg) {
        assert.match(pg.content[0].text, /"two": 2/);
        assert.deepEqual(pg, await directCall(fleet, SERVER_SCRIPTS.postgres, [PG_URL], "query", sql));
      }
    }));

  test("after idle_timeout the backend is gone, npx's child too; the next call starts it again", () =>
    // The processes are counted after the call: under load that can outlast the usual 1.5 s
    // idle_timeout (a cold start of another backend did), and they would be gone before counted.
    withIdle("5s", async () => {
      const s = await fleet.session();
      const r = await s.callTool({ name: "search_nodes", arguments: { query: "x" } });
      assert.ok(!r.isError, JSON.stringify(r));
      const pids = await fleet.backendPids("npxmem");
      assert.ok(pids.length >= 2, `npx wrapper and its server: ${pids}`);
      await s.callTool({ name: "read_graph", arguments: {} });
      assert.ok(await idleGone("npxmem", 5000), "npxmem idled out with every process");
      assert.ok(await idleGone("memory", 5000), "memory idled out");
      if (fleet.box) assert.equal(await fleet.active("npxmem"), "inactive");
      const again = await s.callTool({ name: "search_nodes", arguments: { query: "x" } });
      assert.ok(!again.isError, JSON.stringify(again));
      await s.close();
    }));

  test("two sessions share a pooled backend, and get one each with sharing: session", () =>
    // Processes are counted between calls here, and idle_timeout counts from the last call whether
    // sessions are connected or not: a shim that idles out meanwhile stops its backends, both session
    // backends at once (the count goes from 2 to 0, never 1), and a pooled one may be stopped and
    // started again. So these shims run with an idle_timeout no pause below can reach.
    withIdle("10m", async () => {
      // Session backends of earlier tests end with their sessions; wait for that to be done.
      assert.ok(await waitFor(async () => (await fleet.backendPids("files")).length === 0, 20000));
      const [a, b] = [await fleet.session(), await fleet.session()];
      await Promise.all([a, b].map((s) => s.callTool({ name: "read_graph", arguments: {} })));
      await Promise.all([a, b].map((s) => s.callTool({ name: "list_allowed_directories", arguments: {} })));
      const mem = await fleet.backendPids("memory");
      const files = await fleet.backendPids("files");
      // Without systemd each frontend starts its own shim, so nothing is shared across sessions.
      assert.equal(mem.length, fleet.box ? 1 : 2, `memory: ${mem}`);
      assert.equal(files.length, 2, `files: ${files}`);
      // Longer than the usual idle_timeout: what ends a's backend below is its session, not the
      // shim idling out.
      await sleep(IDLE_MS + 500);
      await a.close();
      if (fleet.box) {
        assert.ok(await waitFor(async () => (await fleet.backendPids("files")).length === 1, 20000), "a session backend ends with its session");
        await b.callTool({ name: "list_allowed_directories", arguments: {} });
        assert.equal((await fleet.backendPids("files")).length, 1, "the other session's backend still serves it");
      }
      await b.close();
    }));

  test("calls are pipelined: a slow call does not hold up a fast one", async () => {
    const s = await fleet.session();
    await s.callTool({ name: "echo", arguments: { message: "warm" } });
    const order = [];
    const slow = s.callTool({ name: "trigger-long-running-operation", arguments: { duration: 2, steps: 2 } }).then(() => order.push("slow"));
    const fast = s.callTool({ name: "echo", arguments: { message: "fast" } }).then(() => order.push("fast"));
    await Promise.all([slow, fast]);
    assert.deepEqual(order, ["fast", "slow"]);
    await s.close();
  });

  test("a call in flight longer than idle_timeout keeps its shim and backend, also after another call was answered", async () => {
    // The idle timer runs only while nothing is in flight: a call answered beside a longer one
    // (idle_timeout 1.5 s here) must not start it, or the shim would drain under the long call.
    const s = await fleet.session();
    await s.callTool({ name: "echo", arguments: { message: "warm" } });
    const pids = await fleet.backendPids("everything");
    const slow = s.callTool({ name: "trigger-long-running-operation", arguments: { duration: 3, steps: 3 } });
    await s.callTool({ name: "echo", arguments: { message: "fast" } });
    assert.ok(!(await slow).isError);
    await s.callTool({ name: "echo", arguments: { message: "after" } });
    assert.deepEqual(await fleet.backendPids("everything"), pids, "the same backend answered all three");
    await s.close();
  });

  test("a backend killed mid-call fails that call; the next call works", async () => {
    const s = await fleet.session();
    // Killed once the call runs (its first progress), not at a guess: under load a backend can take
    // longer than any fixed delay to answer initialize, and its death would then be a failed start.
    let running;
    const started = new Promise((r) => (running = r));
    const slow = s
      .callTool({ name: "trigger-long-running-operation", arguments: { duration: 5, steps: 5 } }, undefined, { onprogress: () => running() })
      .then(
        (r) => r,
        (e) => e,
      );
    await Promise.race([started, slow]); // a call that fails before running fails below, not hangs here
    await fleet.killBackend("everything");
    const r = await slow;
    const text = r instanceof Error ? r.message : JSON.stringify(r);
    assert.ok(r instanceof Error || r.isError, text);
    assert.match(text, /backend 'everything' was killed by signal KILL/);
    const ok = await s.callTool({ name: "echo", arguments: { message: "again" } });
    assert.equal(ok.content[0].text, "Echo: again");
    await s.close();
  });

  test("a frontend killed mid-call leaves the shim and other sessions working", () =>
    // The same shim serves b before and after: one that idled out meanwhile would not, so a long
    // idle_timeout here.
    withIdle("10m", async () => {
      const [a, b] = [await fleet.session(), await fleet.session()];
      await b.callTool({ name: "echo", arguments: { message: "b" } });
      const shimPid = async () => (fleet.box ? (await fleet.sh("systemctl show -P MainPID mcp-lazy@everything.service")).trim() : String(await fleet.shimPids(b)));
      const shim = await shimPid();
      assert.ok(!/^0?$/.test(shim), `a shim runs: '${shim}'`);
      let running;
      const started = new Promise((r) => (running = r));
      const slow = a.callTool({ name: "trigger-long-running-operation", arguments: { duration: 3, steps: 3 } }, undefined, { onprogress: () => running() }).catch(() => {});
      await Promise.race([started, slow]); // mid-call indeed: it has run one step
      process.kill(a.transportPid, "SIGKILL");
      await sleep(300);
      const r = await b.callTool({ name: "echo", arguments: { message: "still here" } });
      assert.equal(r.content[0].text, "Echo: still here");
      assert.equal(await shimPid(), shim, "the same shim serves b");
      await b.close();
      await a.close().catch(() => {});
      if (!fleet.box) assert.ok(await waitFor(() => fleet.orphans().length === 0, 20000), `orphans: ${fleet.orphans().map((p) => `${p} ${cmdline(p)}`)}`);
    }));

  test("calls in a tight loop across the idle boundary are each answered exactly once", async () => {
    const args = fleet.box
      ? [...fleet.box.nsenterArgs(), MCP_LAZY, "--manifest", fleet.manifestPath]
      : [MCP_LAZY, "--manifest", fleet.manifestPath, "--activation=direct", "--shimd", SHIMD];
    const p = new RawPeer(args[0], args.slice(1));
    await p.request(INIT());
    p.send({ jsonrpc: "2.0", method: "notifications/initialized" });
    const N = 14;
    const seen = new Map();
    for (let i = 1; i <= N; i++) {
      // Gaps straddle idle_timeout, and every third call is a pair sent at once.
      p.send({ jsonrpc: "2.0", id: i, method: "tools/call", params: { name: "echo", arguments: { message: `m${i}` } } });
      if (i % 3 === 0) p.send({ jsonrpc: "2.0", id: 1000 + i, method: "tools/call", params: { name: "echo", arguments: { message: `m${1000 + i}` } } });
      await sleep(IDLE_MS - 250 + ((i * 97) % 500));
    }
    const expected = N + Math.floor(N / 3);
    const msgs = await p.next(expected, 30000);
    await sleep(300);
    assert.equal(p.lines.length, 0, `extra messages: ${p.lines}`);
    for (const m of msgs) seen.set(m.id, (seen.get(m.id) ?? 0) + 1);
    assert.equal(seen.size, expected);
    for (const m of msgs) assert.equal(m.result?.content?.[0]?.text, `Echo: m${m.id}`, JSON.stringify(m));
    await p.close();
  });
}

describe("socket activation under systemd", () => scenarios(boxFleet));
describe("direct activation without systemd", () => scenarios(async () => directFleet()));
