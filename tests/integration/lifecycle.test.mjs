// Lifecycle modes (lazy, warm, resident), `mcp-lazy warm` and `mcp-lazy status`, under a real systemd.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { ListRootsRequestSchema } from "@modelcontextprotocol/sdk/types.js";
import { boxFleet } from "./lib/fleet.mjs";
import { MCP_LAZY, SERVER_SCRIPTS, journalUntil, sleep, waitFor } from "./lib/env.mjs";

const tool = (name, backend) => `  - {name: ${name}, backend: ${backend}, input_schema: {type: object}}\n`;
const MANIFEST =
  `backends:
  warmone:
    command: [node, ${SERVER_SCRIPTS.everything}, stdio]
    lifecycle: warm
    idle_timeout: 10m
  warmidle:
    command: [node, ${SERVER_SCRIPTS.everything}, stdio]
    lifecycle: warm
    idle_timeout: 2s
  resi:
    command: [node, ${SERVER_SCRIPTS.memory}]
    env: {MEMORY_FILE_PATH: /tmp/mcp-lazy-resident.jsonl}
    lifecycle: resident
    idle_timeout: 1s
  lazyone:
    command: [node, ${SERVER_SCRIPTS.everything}, stdio]
    idle_timeout: 2s
  off:
    command: [node, ${SERVER_SCRIPTS.memory}]
  resess:
    command: [node, ${SERVER_SCRIPTS.memory}]
    env: {MEMORY_FILE_PATH: /tmp/mcp-lazy-resess.jsonl}
    lifecycle: resident
    sharing: session
tools:
` +
  tool("echo", "warmone") +
  tool("get-env", "warmidle") +
  tool("read_graph", "resi") +
  tool("get-sum", "lazyone") +
  tool("search_nodes", "off") +
  tool("open_nodes", "resess");

let fleet;
before(async () => {
  fleet = await boxFleet();
  const w = await fleet.box.exec("bash", ["-c", "cat > /etc/mcp-lazy/manifest.yaml"], { input: MANIFEST });
  assert.equal(w.code, 0, w.stderr);
  await fleet.sh("systemctl daemon-reload && systemctl enable --now mcp-lazy@warmone.socket mcp-lazy@lazyone.socket");
});
after(async () => fleet && (await fleet.stop()));

const statusText = (name) => fleet.sh(`systemctl show -P StatusText mcp-lazy@${name}.service`);
// What a unit's shim logged after `cursor` (journalCursor()), once ok(log) holds (or after 20 s).
const journalCursor = async () => (await fleet.sh("journalctl -q -n 0 --show-cursor")).match(/cursor: (.*)/)[1];
const journalSince = (cursor, name, ok) =>
  journalUntil((script) => fleet.sh(script.replace("journalctl", `journalctl --after-cursor='${cursor}'`)), `mcp-lazy@${name}.service`, ok);
const status = async () => JSON.parse(await fleet.sh(`${MCP_LAZY} status --system --json`));
const row = (st, name) => st.backends.find((b) => b.name === name);

test("lazy: starting the service starts the shim only; the backend waits for a call", async () => {
  // What the shim did is read from its journal, which no timer changes: its 2 s idle_timeout can end
  // it between any two reads of its state on a loaded machine.
  const cursor = await journalCursor();
  // Type=notify: the start returns once the shim said READY=1.
  await fleet.sh("systemctl start mcp-lazy@lazyone.service");
  // `mcp-lazy warm` refuses it: nothing would be warmed.
  const r = await fleet.try(`${MCP_LAZY} warm --system lazyone`);
  assert.equal(r.code, 1);
  assert.match(r.stderr, /backend 'lazyone' is lazy: .*set 'lifecycle: warm'/);
  assert.ok(await waitFor(async () => (await fleet.active("lazyone")) !== "active", 20000), "idles out");
  const log = await journalSince(cursor, "lazyone", (l) => /^Idle for 2s, stopping\.$/m.test(l));
  assert.match(log, /^Idle for 2s, stopping\.$/m);
  assert.doesNotMatch(log, /Start(ed|ing) backend/, "no backend started");
  assert.deepEqual(await fleet.cgroupPids("lazyone"), []);
});

test("warm: `mcp-lazy warm` starts the backend before any call, the first session takes it, and it still idles out", async () => {
  // warmone's idle_timeout is long, so that what the session takes is what was started ahead however
  // slow the machine; warmidle (2 s) shows a warm backend idles out all the same.
  const cursor = await journalCursor();
  const w = await fleet.try(`${MCP_LAZY} warm --system warmidle`);
  assert.equal(w.code, 0, w.stderr);
  assert.ok(await waitFor(async () => (await fleet.active("warmidle")) !== "active", 30000), "idles out");
  const idled = await journalSince(cursor, "warmidle", (l) => /^Idle for 2s, stopping\.$/m.test(l));
  assert.match(idled, /^Starting backend 'warmidle' ahead of any call \(lifecycle: warm\)\.[^]*^Idle for 2s, stopping\.$/m);
  assert.deepEqual(await fleet.cgroupPids("warmidle"), []);

  const r = await fleet.try(`${MCP_LAZY} warm --system warmone`);
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /^mcp-lazy@warmone\.service: started$/m);
  const ready = await waitFor(async () => /^backend pid \d+ \(ready\)/.test(await statusText("warmone")), 20000);
  assert.ok(ready, await statusText("warmone"));
  const [pid] = await fleet.backendPids("warmone");
  assert.ok(pid > 0);
  const s = await fleet.session();
  const res = await s.callTool({ name: "echo", arguments: { message: "warm" } });
  assert.equal(res.content[0].text, "Echo: warm");
  const log = await journalSince(cursor, "warmone", (l) => /serves its first session/.test(l));
  // The same process served the call: it was not started again for the session.
  assert.deepEqual(await fleet.backendPids("warmone"), [pid], log);
  assert.match(log, /Starting backend 'warmone' ahead of any call \(lifecycle: warm\)/);
  assert.match(log, new RegExp(`Backend 'warmone' \\(pid ${pid}\\), started ahead, serves its first session\\.`));
  await s.close();
  await fleet.sh("systemctl stop mcp-lazy@warmone.service");
  assert.deepEqual(await fleet.cgroupPids("warmone"), []);
  // `systemctl start` does the same as `mcp-lazy warm`. A client that declares capabilities (here
  // roots) is not the one the backend was started for: it takes it over all the same.
  await fleet.sh("systemctl start mcp-lazy@warmone.service");
  assert.ok(await waitFor(async () => /^backend pid \d+ \(ready\)/.test(await statusText("warmone")), 20000));
  const [again] = await fleet.backendPids("warmone");
  const [cmd, ...pre] = fleet.box.nsenterArgs();
  const cursor2 = await journalCursor();
  const c = new Client({ name: "roots-client", version: "1" }, { capabilities: { roots: { listChanged: true } } });
  c.setRequestHandler(ListRootsRequestSchema, async () => ({ roots: [] }));
  await c.connect(new StdioClientTransport({ command: cmd, args: [...pre, MCP_LAZY, "--manifest", fleet.manifestPath], stderr: "pipe" }));
  try {
    const r2 = await c.callTool({ name: "echo", arguments: { message: "roots" } });
    assert.equal(r2.content[0].text, "Echo: roots");
    const log2 = await journalSince(cursor2, "warmone", (l) => /serves its first session/.test(l));
    assert.deepEqual(await fleet.backendPids("warmone"), [again], log2);
    assert.match(log2, new RegExp(`Backend 'warmone' \\(pid ${again}\\), started ahead, serves its first session\\.`));
  } finally {
    await c.close();
  }
  await fleet.sh("systemctl stop mcp-lazy@warmone.service");
});

test("resident: enabled, it starts with default.target, never idles out, and comes back after a crash without a call", async () => {
  await fleet.sh("systemctl enable mcp-lazy@resi.service");
  // [Install]: default.target wants the service, and Also= enabled the socket.
  assert.match(await fleet.sh("systemctl show -P Wants default.target"), /mcp-lazy@resi\.service/);
  assert.equal((await fleet.sh("systemctl is-enabled mcp-lazy@resi.socket")).trim(), "enabled");
  // What boot (or login, for a user manager) does: start default.target.
  await fleet.sh("systemctl start default.target");
  assert.ok(await waitFor(async () => (await fleet.backendPids("resi")).length === 1, 20000), "backend started");
  const [first] = await fleet.backendPids("resi");
  await sleep(2500); // idle_timeout is 1s: a lazy or warm backend would be gone by now
  assert.equal(await fleet.active("resi"), "active");
  assert.deepEqual(await fleet.backendPids("resi"), [first]);

  await fleet.killBackend("resi");
  const second = await waitFor(async () => {
    const p = await fleet.backendPids("resi");
    return p.length === 1 && p[0] !== first && p[0];
  }, 20000);
  assert.ok(second, "started again after the crash, with no call");
  assert.ok(await waitFor(async () => /^backend pid \d+ \(ready\)/.test(await statusText("resi")), 20000));
  // A crash soon after the start counts as a crash loop: the next start waits (the backoff).
  await fleet.killBackend("resi");
  const third = await waitFor(async () => {
    const p = await fleet.backendPids("resi");
    return p.length === 1 && p[0] !== second && p[0];
  }, 20000);
  assert.ok(third);
  const again = (l) => (l.match(/Starting backend 'resi' again \(lifecycle: resident\)/g) ?? []).length;
  const log = await journalUntil(fleet.sh, "mcp-lazy@resi.service", (l) => again(l) >= 2);
  assert.equal(again(log), 2, log);
  // And a call works.
  const s = await fleet.session();
  const r = await s.callTool({ name: "read_graph", arguments: {} });
  assert.ok(!r.isError, JSON.stringify(r));
  await s.close();
  // systemctl stop stops it for good: no restart of a backend stopped on purpose.
  await fleet.sh("systemctl stop mcp-lazy@resi.service");
  assert.deepEqual(await fleet.cgroupPids("resi"), []);
  await fleet.sh("systemctl disable mcp-lazy@resi.service");
});

test("resident with sharing: session: a session takes the running backend, and another starts for the next", async () => {
  await fleet.sh("systemctl start mcp-lazy@resess.service");
  assert.ok(await waitFor(async () => (await fleet.backendPids("resess")).length === 1, 20000), "started ahead");
  const [first] = await fleet.backendPids("resess");
  const s = await fleet.session();
  const r = await s.callTool({ name: "open_nodes", arguments: { names: [] } });
  assert.ok(!r.isError, JSON.stringify(r));
  // The session has the first backend; a spare one starts for the next session.
  const spare = await waitFor(async () => {
    const p = await fleet.backendPids("resess");
    return p.length === 2 && p.includes(first) && p.find((x) => x !== first);
  }, 20000);
  assert.ok(spare, JSON.stringify(await fleet.backendPids("resess")));
  await s.close();
  // The session's backend ends with it; the spare stays.
  assert.ok(await waitFor(async () => JSON.stringify(await fleet.backendPids("resess")) === JSON.stringify([spare]), 20000));
  await fleet.sh("systemctl stop mcp-lazy@resess.service");
});

test("mcp-lazy status: a row per backend from the units and the shim's status, never starting anything", async () => {
  await fleet.sh("systemctl start mcp-lazy@resi.service");
  assert.ok(await waitFor(async () => /\(ready\)/.test(await statusText("resi")), 20000));
  const s = await fleet.session();
  await s.callTool({ name: "read_graph", arguments: {} });
  const t0 = Date.now();
  await s.callTool({ name: "read_graph", arguments: {} });
  const t1 = Date.now();
  // The shim tells systemd its counts at most every second: the calls show within that.
  let st;
  assert.ok(await waitFor(async () => row((st = await status()), "resi")?.calls === 2, 20000), JSON.stringify(st));
  // Read again some seconds after the last call, whose age it then gives (below).
  await sleep(2500);
  const t3 = Date.now();
  st = await status();
  const t4 = Date.now();
  assert.equal(st.manager, "system");
  assert.equal(st.systemd, true);
  assert.equal(st.manifest, "/etc/mcp-lazy/manifest.yaml");
  const resi = row(st, "resi");
  assert.equal(resi.socket, "listening");
  assert.equal(resi.service, "active");
  assert.equal(resi.lifecycle, "resident");
  assert.equal(resi.pids.length, 1);
  assert.deepEqual(resi.pids, await fleet.backendPids("resi"));
  assert.ok(resi.uptime_sec >= 0 && resi.uptime_sec < 600, JSON.stringify(resi));
  // The unit's MemoryCurrent, as systemd has it: unknown where the box's cgroup2 has no memory
  // controller (a host with the memory controller on cgroup v1), else the cgroup's whole memory.
  const mem = (await fleet.sh("systemctl show -P MemoryCurrent mcp-lazy@resi.service")).trim();
  if (/^\d+$/.test(mem)) assert.ok(resi.memory_bytes > 1024 * 1024 && Math.abs(resi.memory_bytes - Number(mem)) < 64 * 1024 * 1024, `${mem} ${JSON.stringify(resi)}`);
  else assert.equal(resi.memory_bytes, null, `${mem} ${JSON.stringify(resi)}`);
  assert.equal(resi.sessions, 1);
  assert.equal(resi.calls, 2);
  // The age of the last call, in whole seconds: from when the shim answered it (between t0 and t1 by
  // this test's clock, which the box shares, to the second, plus the status interval of 1 s in which
  // the line is made) to when status ran (between t3 and t4).
  const sec = (ms) => Math.floor(ms / 1000);
  const [lo, hi] = [sec(t3) - (sec(t1) + 1), sec(t4) - sec(t0)];
  assert.ok(resi.last_call_sec_ago >= lo && resi.last_call_sec_ago <= hi, `${lo}..${hi}: ${JSON.stringify(resi)}`);
  // The manifest declares one of the memory server's tools, with a schema of its own.
  assert.match(resi.manifest_check, /^differs: tools: 0 missing, \d+ extra, 1 changed$/);
  // 'off' has neither socket nor service running, and status did not start them.
  const off = row(st, "off");
  assert.equal(off.socket, "not enabled");
  assert.equal(off.service, "idle");
  assert.deepEqual(off.pids, []);
  assert.equal(off.memory_bytes, null);
  assert.equal(off.calls, null);
  assert.equal((await fleet.try("systemctl is-active mcp-lazy@off.socket mcp-lazy@off.service")).stdout.trim(), "inactive\ninactive");
  // lazyone idled out: its socket listens, no shim runs.
  const lazy = row(st, "lazyone");
  assert.equal(lazy.socket, "listening");
  assert.equal(lazy.service, "idle");
  // The table says the same.
  const table = await fleet.sh(`${MCP_LAZY} status --system`);
  const lines = table.trim().split("\n");
  assert.match(lines[0], /^BACKEND +SOCKET +SERVICE +PID +UP +MEMORY +SESSIONS +CALLS +LAST CALL +MANIFEST$/);
  assert.match(table, new RegExp(`^resi +listening +active +${resi.pids[0]} +\\S+ +(-|[\\d.]+[KMG]) +1 +2 +\\d+s ago +differs: tools`, "m"));
  assert.match(table, /^off +not enabled +idle +- +- +- +- +- +- +-$/m);
  assert.equal(lines.length, 7);
  await s.close();
  await fleet.sh("systemctl stop mcp-lazy@resi.service");
});

test("mcp-lazy status for a user's own manager, with the manifest from ~/.config", async () => {
  await fleet.sh(`id alice >/dev/null 2>&1 || useradd -m -u 1500 alice
    mkdir -p /home/alice/.config/mcp-lazy && cp /etc/mcp-lazy/manifest.yaml /home/alice/.config/mcp-lazy/manifest.yaml
    chown -R alice: /home/alice/.config
    mkdir -p /etc/systemd/user/mcp-lazy@.service.d
    cp /etc/systemd/system/mcp-lazy@.service.d/test.conf /etc/systemd/user/mcp-lazy@.service.d/test.conf
    systemctl start user@1500.service`);
  const u = "runuser -u alice -- env XDG_RUNTIME_DIR=/run/user/1500";
  await fleet.sh(`for i in $(seq 300); do ${u} systemctl --user is-system-running >/dev/null 2>&1 && break; sleep 0.1; done
    ${u} systemctl --user enable --now mcp-lazy@lazyone.socket`);
  const st = JSON.parse(await fleet.sh(`${u} ${MCP_LAZY} status --json`));
  assert.equal(st.manager, "user");
  assert.equal(st.manifest, "/home/alice/.config/mcp-lazy/manifest.yaml");
  assert.equal(row(st, "lazyone").socket, "listening");
  assert.equal(row(st, "lazyone").service, "idle");
  assert.equal(row(st, "off").socket, "not enabled");
  await fleet.sh(`${u} systemctl --user stop mcp-lazy@lazyone.socket; systemctl stop user@1500.service`);
});

test("mcp-lazy status without systemd: says so, shows the manifest, exits 0", () => {
  const dir = mkdtempSync(join(tmpdir(), "mcp-lazy-status-"));
  const path = join(dir, "manifest.yaml");
  writeFileSync(path, MANIFEST);
  // A private /run without /run/systemd/system: systemd is not running, as far as we can tell.
  const r = spawnSync("unshare", ["-m", "sh", "-c", `mount -t tmpfs none /run && exec ${MCP_LAZY} status --manifest ${path}`], { encoding: "utf8" });
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stderr, /systemd is not running here/);
  assert.match(r.stdout, /^BACKEND +TOOLS +IDLE TIMEOUT +SHARING +LIFECYCLE$/m);
  assert.match(r.stdout, /^resi +1 +1s +pooled +resident$/m);
  assert.match(r.stdout, /^warmone +1 +10m +pooled +warm$/m);
  const j = spawnSync("unshare", ["-m", "sh", "-c", `mount -t tmpfs none /run && exec ${MCP_LAZY} status --json --manifest ${path}`], { encoding: "utf8" });
  assert.equal(j.status, 0, j.stderr);
  const st = JSON.parse(j.stdout);
  assert.equal(st.systemd, false);
  assert.equal(st.manager, null);
  assert.deepEqual(st.backends.map((b) => b.name), ["warmone", "warmidle", "resi", "lazyone", "off", "resess"]);
  // A manifest that cannot be read: exit 1.
  const bad = spawnSync(MCP_LAZY, ["status", "--manifest", join(dir, "missing.yaml")], { encoding: "utf8" });
  assert.equal(bad.status, 1);
  assert.match(bad.stderr, /missing\.yaml/);
});
