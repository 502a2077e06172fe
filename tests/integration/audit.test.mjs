// An attacker's review of the subcommands (issue 7's standard: every peer is hostile): what a remote
// host answers to `mcp-lazy status`, what `mcp-lazy warm` is asked to start, and client configs that
// `mcp-lazy import` reads and rewrites. Without systemd; ssh is a script that plays a hostile host.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { appendFileSync, chmodSync, chownSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { INIT, MCP_LAZY, RawPeer, cleanupPeers, sleep, startShimOnSocket, waitFor } from "./lib/env.mjs";
import { onLines } from "./lib/lines.mjs";
import { connect } from "node:net";

const dir = mkdtempSync(join(tmpdir(), "mcp-lazy-audit-"));
after(async () => {
  await cleanupPeers();
  rmSync(dir, { recursive: true, force: true });
});

// An ssh that answers `mcp-lazy status --json` with what the test puts in FAKE_OUT / FAKE_ERR.
const SSH = join(dir, "ssh");
writeFileSync(SSH, `#!/bin/sh\nprintf '%s' "$FAKE_OUT"\nprintf '%s' "$FAKE_ERR" >&2\nexit "\${FAKE_EXIT:-0}"\n`);
chmodSync(SSH, 0o755);
const REMOTE_MANIFEST = join(dir, "remote.yaml");
writeFileSync(
  REMOTE_MANIFEST,
  `backends:
  far:
    host: ssh://alice@far.example
    remote_name: db
tools:
  - {name: query, backend: far, input_schema: {type: object}}
`,
);

function status(out, { err = "", exit = 0 } = {}) {
  const env = { PATH: process.env.PATH, HOME: dir, MCP_LAZY_SSH: SSH, FAKE_OUT: out, FAKE_ERR: err, FAKE_EXIT: String(exit) };
  const r = spawnSync(MCP_LAZY, ["status", "--json", "--manifest", REMOTE_MANIFEST], { env, encoding: "utf8", timeout: 30000 });
  assert.equal(r.status, 0, r.stdout + r.stderr);
  assert.doesNotMatch(r.stderr, /runtime error|Sanitizer/);
  const row = JSON.parse(r.stdout).backends[0];
  assert.equal(row.name, "far");
  return row;
}

const entry = (fields) => JSON.stringify({ manifest: "/x", manager: "user", systemd: true, problem: null, backends: [{ name: "db", ...fields }] });

test("status: the remote's own status of a backend is shown when it is what 'status --json' says", () => {
  const row = status(entry({ socket: "listening", service: "active", pids: [4242], uptime_sec: 12, memory_bytes: 1048576, sessions: 2, in_flight: 0, calls: 17, last_call_sec_ago: 3, manifest_check: "matches", status_text: "backend pid 4242 (ready), 2 sessions" }));
  assert.equal(row.remote.reachability, "reachable");
  assert.equal(row.remote.reason, null);
  assert.deepEqual([row.socket, row.service, row.pids, row.sessions, row.calls, row.manifest_check], ["listening", "active", [4242], 2, 17, "matches"]);
});

test("status: a remote's numbers, pids and words that 'status --json' never says are refused, not shown", () => {
  for (const [field, value] of [
    ["pids", [1e20]],
    ["pids", [-5]],
    ["pids", [1, 2, 3, 4, 5, 6, 7, 8, 9]],
    ["pids", "4242"],
    ["memory_bytes", 1e300],
    ["uptime_sec", -1],
    ["sessions", 1.5],
    ["socket", "listening\u001b[2J"],
    ["service", { state: "active" }],
    ["manifest_check", "matches\u001b]0;owned\u0007"],
    ["status_text", "x".repeat(100000)],
  ]) {
    const row = status(entry({ socket: "listening", service: "active", [field]: value }));
    assert.equal(row.remote.reachability, "reachable");
    assert.equal(row.remote.reason, `there, 'mcp-lazy status --json' answered a '${field}' for backend 'db' that is not what it can say; shown as unknown`, JSON.stringify(value));
    assert.deepEqual([row.socket, row.service, row.pids, row.memory_bytes, row.uptime_sec], [null, null, [], null, null]);
  }
  // Not JSON, nested past any status, or not an object: said so.
  for (const out of ["[1,2", "[".repeat(5000) + "]".repeat(5000), '"backends"', '{"backends":[]} trailing']) {
    const row = status(out);
    assert.equal(row.remote.reason, "there, 'mcp-lazy status --json' answered something else than its status");
  }
});

test("status: text from the remote host and from ssh reaches the terminal without control sequences", () => {
  let row = status("", { err: "ssh: connect to host far.example: \u001b]52;c;cm0gLXJmIH4=\u0007\u001b[1A\u009b2K refused\n", exit: 255 });
  assert.equal(row.remote.reachability, "unreachable");
  assert.equal(row.remote.reason, "ssh: connect to host far.example: ?]52;c;cm0gLXJmIH4=??[1A??2K refused");
  row = status(JSON.stringify({ problem: "systemd \u001b[31mis not\u001b[0m running", backends: [] }));
  assert.equal(row.remote.reason, "there, systemd ?[31mis not?[0m running");
});

test("a remote backend's failure: ssh's own words, without control sequences, however fast ssh ended", async () => {
  const calls = async (err, exit, n) => {
    const env = { PATH: process.env.PATH, HOME: dir, MCP_LAZY_SSH: SSH, FAKE_OUT: "", FAKE_ERR: err, FAKE_EXIT: String(exit) };
    const p = new RawPeer(MCP_LAZY, ["--manifest", REMOTE_MANIFEST], { env });
    p.send(INIT());
    await p.next();
    const texts = new Set();
    // Each call starts ssh anew; some of them find it gone before the request is written (the race
    // that gave "unreachable: Broken pipe" instead of what ssh said).
    for (let i = 0; i < n; i++) {
      p.send({ jsonrpc: "2.0", id: 10 + i, method: "tools/call", params: { name: "query", arguments: {} } });
      const [r] = await p.next(1, 20000);
      assert.equal(r.result.isError, true);
      texts.add(r.result.content[0].text);
    }
    p.child.stdin.end();
    await p.exitWithin();
    return [...texts];
  };
  assert.deepEqual(await calls("\u001b]0;owned\u0007ssh: connect to host far.example port 22: Connection refused\u001b[2K\n", 255, 30), [
    "backend 'far' on ssh://alice@far.example (backend 'db' there): far.example refused the connection: is sshd running there? (ssh said: ?]0;owned?ssh: connect to host far.example port 22: Connection refused?[2K)",
  ]);
  assert.deepEqual(await calls("mcp-lazy connect: backend 'db' is \u001b[8mnot enabled\n", 69, 1), [
    "backend 'far' on ssh://alice@far.example (backend 'db' there): there, backend 'db' is ?[8mnot enabled",
  ]);
});

test("warm: a backend on another host is warmed there, and mcp-lazy says so instead of starting a local unit", () => {
  const r = spawnSync(MCP_LAZY, ["warm", "--manifest", REMOTE_MANIFEST, "far"], { env: { PATH: process.env.PATH, HOME: dir }, encoding: "utf8" });
  assert.equal(r.status, 1);
  assert.equal(r.stderr, "mcp-lazy: backend 'far' runs on ssh://alice@far.example, as 'db' there: warm it there ('mcp-lazy warm db' on that host)\n");
});

// A stdio MCP server with one tool; with TOUCH set, it first appends to that file (a client that
// rewrites its config while import runs: Claude Code does on every session).
const SERVER = join(dir, "server.mjs");
writeFileSync(
  SERVER,
  `import { appendFileSync } from "node:fs";
import { createInterface } from "node:readline";
if (process.env.TOUCH) appendFileSync(process.env.TOUCH, "\\n");
const send = (m) => process.stdout.write(JSON.stringify(m) + "\\n");
createInterface({ input: process.stdin }).on("line", (line) => {
  const m = JSON.parse(line);
  if (m.method === "initialize") send({ jsonrpc: "2.0", id: m.id, result: { protocolVersion: m.params.protocolVersion, capabilities: { tools: {} }, serverInfo: { name: "audit", version: "1" } } });
  else if (m.method === "tools/list") send({ jsonrpc: "2.0", id: m.id, result: { tools: [{ name: "t", inputSchema: { type: "object" } }] } });
  else if (m.id !== undefined) send({ jsonrpc: "2.0", id: m.id, error: { code: -32601, message: "no" } });
});
`,
);
let homes = 0;
function importHome(config) {
  const h = join(dir, `home${++homes}`);
  mkdirSync(h, { recursive: true });
  const path = join(h, "cfg.json");
  writeFileSync(path, config(path));
  chmodSync(path, 0o644);
  return { h, path, text: readFileSync(path, "utf8") };
}
function importFrom(h, path) {
  const env = { PATH: process.env.PATH, HOME: h, XDG_STATE_HOME: join(h, "state"), XDG_CONFIG_HOME: join(h, "config") };
  // --manifest: as root, the default is /etc/mcp-lazy/manifest.yaml
  const r = spawnSync(MCP_LAZY, ["import", "--no-enable", "--manifest", join(h, "manifest.yaml"), "--from", path], { env, cwd: h, encoding: "utf8", timeout: 60000 });
  return { code: r.status, out: r.stdout, err: r.stderr };
}

test("import: a config its client rewrote while import ran keeps the client's version (nothing lost, nothing overwritten)", () => {
  const { h, path, text } = importHome((p) => JSON.stringify({ mcpServers: { toucher: { command: process.execPath, args: [SERVER], env: { TOUCH: p } } } }, null, 2));
  const r = importFrom(h, path);
  assert.equal(r.code, 1, r.out + r.err);
  assert.equal(readFileSync(path, "utf8"), text + "\n", "the client's own change stays");
  assert.equal(existsSync(path + ".mcp-lazy-backup"), false);
  assert.match(r.err, new RegExp(`^mcp-lazy: ${path} changed while import ran \\(its client rewrote it\\?\\); left as it is now: quit the client and run 'mcp-lazy import' again \\(the manifest has the backends already\\)$`, "m"));
  assert.match(readFileSync(join(h, "manifest.yaml"), "utf8"), /^  toucher:\n/m);
});

test("import: a config that someone else can have written is not run, and says why", (t) => {
  const marker = join(dir, "ran");
  const config = () => JSON.stringify({ mcpServers: { planted: { command: "/bin/sh", args: ["-c", `touch ${marker}`] } } });
  const cases = [[0o666, null, "is writable by every user"], [0o664, 65534, null]];
  for (const [mode, gid, why] of cases) {
    const { h, path, text } = importHome(config);
    chmodSync(path, mode);
    let expect = why;
    if (gid !== null) {
      if (process.getuid() !== 0) {
        t.diagnostic("group and owner cases need root to chown; only the mode case ran");
        continue;
      }
      chownSync(path, 0, gid);
      expect = `is writable by group ${gid}`;
    }
    const r = importFrom(h, path);
    assert.equal(r.code, 1, r.out + r.err);
    assert.equal(r.err, `mcp-lazy: ${path} ${expect}: someone else may have put the commands in it that import would run as you (chown or chmod it, or import it as its owner); left untouched\n`);
    assert.equal(readFileSync(path, "utf8"), text);
    assert.equal(existsSync(marker), false, "its command never ran");
  }
  if (process.getuid() === 0) {
    // Root in another user's project: that user's config is theirs to import.
    const { h, path } = importHome(config);
    chownSync(path, 1234, 1234);
    const r = importFrom(h, path);
    assert.equal(r.err, `mcp-lazy: ${path} belongs to uid 1234: someone else may have put the commands in it that import would run as you (chown or chmod it, or import it as its owner); left untouched\n`);
    assert.equal(existsSync(marker), false, "its command never ran");
  }
});

// A backend that answers initialize and then reads nothing more (hung, or busy for minutes), or that
// never answers it: what a peer sends it is held by the shim.
const STUCK = join(dir, "stuck.mjs");
writeFileSync(
  STUCK,
  `process.stdin.once("data", (d) => {
  const m = JSON.parse(d.toString().split("\\n")[0]);
  if (process.argv[2] === "answer") process.stdout.write(JSON.stringify({ jsonrpc: "2.0", id: m.id, result: { protocolVersion: m.params.protocolVersion, capabilities: { tools: {} }, serverInfo: { name: "stuck", version: "1" } } }) + "\\n");
  process.stdin.pause();
});
setInterval(() => {}, 1e9);
`,
);

// The shim as another user (nobody), so that root, connecting, is a peer like any other.
let shims = 0;
async function nobodyShim(mode) {
  const sdir = join(dir, `nobody${++shims}`);
  mkdirSync(sdir);
  chmodSync(dir, 0o711); // the shim's user reaches its manifest and socket there
  chmodSync(sdir, 0o777);
  const m = join(sdir, "m.yaml");
  writeFileSync(m, `backends:\n  stuck:\n    command: [${process.execPath}, ${STUCK}, ${mode}]\n    protocol: legacy\ntools:\n  - {name: t, backend: stuck, input_schema: {type: object}}\n`);
  chmodSync(m, 0o644);
  const sock = join(sdir, "s.sock");
  return startShimOnSocket(sock, m, "stuck", { prefix: ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] });
}

test("one peer cannot make the shim hold more than 256 MiB of its requests (in flight at a backend that reads nothing, or waiting for one that does not start)", async (t) => {
  if (process.getuid() !== 0) return t.skip("needs root, to run the shim as another user (root is then a peer like any other)");
  const text = "uid 0 already has 256 MiB of requests held at backend 'stuck' (waiting for it, or in flight), the most one user may; call again when some have been answered";
  for (const mode of ["answer", "silent"]) {
    const shim = await nobodyShim(mode);
    const sock = shim.path;
    try {
      const c = connect(sock);
      const lines = [];
      onLines(c, (line) => lines.push(JSON.parse(line)));
      c.on("error", () => {});
      c.write(JSON.stringify(INIT()) + "\n");
      if (mode === "answer") assert.ok(await waitFor(() => lines.length === 1, 20000), "initialize answered");
      const big = "x".repeat(4 * 1024 * 1024);
      const N = 80;
      for (let k = 0; k < N; k++) c.write(JSON.stringify({ jsonrpc: "2.0", id: 100 + k, method: "tools/call", params: { name: "t", arguments: { big } } }) + "\n");
      const refused = () => lines.filter((l) => l.result?.isError && l.result.content[0].text === text).length;
      // 4 MiB each: at most 63 held, the rest refused at once, saying why.
      await waitFor(() => refused() >= N - 63, 30000);
      assert.ok(refused() >= N - 63 && refused() <= N - 60, `${mode}: ${refused()} refused; ${JSON.stringify(lines.slice(0, 2)).slice(0, 300)}`);
      c.destroy();
    } finally {
      shim.child.kill("SIGTERM");
    }
  }
});

test("one peer's unfinished lines together stay under 256 MiB: past it, the connection that grew is closed", async (t) => {
  if (process.getuid() !== 0) return t.skip("needs root, to run the shim as another user (root is then a peer like any other)");
  const shim = await nobodyShim("answer");
  const socks = [];
  try {
    let closed = 0;
    const part = Buffer.alloc(15 * 1024 * 1024, "x");
    for (let k = 0; k < 20; k++) {
      const c = connect(shim.path);
      c.on("error", () => {});
      c.on("close", () => closed++);
      c.write(JSON.stringify(INIT()) + "\n");
      c.write('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{"big":"');
      c.write(part); // 15 MiB of a line that does not end
      socks.push(c);
    }
    assert.ok(await waitFor(() => closed >= 1, 30000), `no connection closed; shim: ${shim.stderr().slice(-500)}`);
    assert.match(shim.stderr(), /^mcp-lazy-shimd: The connections of uid 0 hold \d+ bytes of unfinished messages; closing connection \d+\.$/m);
    assert.ok(closed < 20, "the others stay");
  } finally {
    socks.forEach((c) => c.destroy());
    shim.child.kill("SIGTERM");
  }
});

test("import: a project's ./.mcp.json (a repository just cloned) runs only the servers Claude Code approved for it", () => {
  const h = join(dir, `home${++homes}`);
  const proj = join(h, "proj");
  mkdirSync(proj, { recursive: true });
  const marker = join(dir, "planted-ran");
  const planted = { command: "/bin/sh", args: ["-c", `touch ${marker}`] };
  writeFileSync(join(h, ".claude.json"), JSON.stringify({ projects: { [proj]: { enabledMcpjsonServers: ["approved"], disabledMcpjsonServers: ["refused"] } } }, null, 2));
  const mcp = JSON.stringify({ mcpServers: { approved: { command: process.execPath, args: [SERVER] }, unknown: planted, refused: planted } }, null, 2);
  writeFileSync(join(proj, ".mcp.json"), mcp);
  const env = { PATH: process.env.PATH, HOME: h, XDG_STATE_HOME: join(h, "state") };
  const r = spawnSync(MCP_LAZY, ["import", "--no-enable", "--manifest", join(h, "manifest.yaml")], { env, cwd: proj, encoding: "utf8", timeout: 60000 });
  assert.equal(r.status, 0, r.stdout + r.stderr);
  assert.match(r.stdout, /^approved\s+claude-code\s+-> backend 'approved'$/m);
  for (const name of ["unknown", "refused"])
    assert.match(r.stdout, new RegExp(`^${name}\\s+claude-code\\s+not imported: Claude Code has not approved this project's server \\(approve it there, with /mcp, or import it with --from ${proj}/\\.mcp\\.json\\); left as it is$`, "m"));
  assert.equal(existsSync(marker), false, "an unapproved server never ran");
  assert.match(readFileSync(join(proj, ".mcp.json"), "utf8"), /"unknown": \{ "command": "\/bin\/sh"|"unknown": \{\n\s+"command": "\/bin\/sh"/);
});

test("import: a tool key the manifest does not take is named without the escape sequences the server put in it", () => {
  const odd = join(dir, "odd.mjs");
  writeFileSync(
    odd,
    `import { createInterface } from "node:readline";
const send = (m) => process.stdout.write(JSON.stringify(m) + "\\n");
createInterface({ input: process.stdin }).on("line", (line) => {
  const m = JSON.parse(line);
  if (m.method === "initialize") send({ jsonrpc: "2.0", id: m.id, result: { protocolVersion: m.params.protocolVersion, capabilities: { tools: {} }, serverInfo: { name: "odd", version: "1" } } });
  else if (m.method === "tools/list") send({ jsonrpc: "2.0", id: m.id, result: { tools: [{ name: "t", inputSchema: { type: "object" }, "x\\u001b]0;owned\\u0007": 1 }] } });
  else if (m.id !== undefined) send({ jsonrpc: "2.0", id: m.id, error: { code: -32601, message: "no" } });
});
`,
  );
  const { h, path } = importHome(() => JSON.stringify({ mcpServers: { odd: { command: process.execPath, args: [odd] } } }));
  const r = importFrom(h, path);
  assert.equal(r.code, 0, r.out + r.err);
  assert.doesNotMatch(r.err, /[\u001b\u0007]/);
  assert.match(r.err, /^mcp-lazy: tool 't' of 'odd': leaving out its key 'x\?\]0;owned\?', which the manifest does not take$/m);
});

test("refresh: a list of thousands that changed whole is compared by key and said in a line (the first 20 names, made printable, and a count)", () => {
  // A server whose resources are named after the word in SEED (read at each resources/list).
  const lister = join(dir, "lister.mjs");
  writeFileSync(
    lister,
    `import { readFileSync } from "node:fs";
import { createInterface } from "node:readline";
const send = (m) => process.stdout.write(JSON.stringify(m) + "\\n");
createInterface({ input: process.stdin }).on("line", (line) => {
  const m = JSON.parse(line);
  const seed = readFileSync(process.env.SEED, "utf8");
  if (m.method === "initialize") send({ jsonrpc: "2.0", id: m.id, result: { protocolVersion: m.params.protocolVersion, capabilities: { tools: {}, resources: {} }, serverInfo: { name: "lister", version: "1" } } });
  else if (m.method === "tools/list") send({ jsonrpc: "2.0", id: m.id, result: { tools: [{ name: "t", inputSchema: { type: "object" } }] } });
  else if (m.method === "resources/list") send({ jsonrpc: "2.0", id: m.id, result: { resources: Array.from({ length: 3000 }, (_, k) => ({ uri: "demo://" + seed + "/" + k, name: "r" + k })) } });
  else if (m.method === "resources/templates/list") send({ jsonrpc: "2.0", id: m.id, result: { resourceTemplates: [] } });
  else if (m.id !== undefined) send({ jsonrpc: "2.0", id: m.id, error: { code: -32601, message: "no" } });
});
`,
  );
  const h = join(dir, `home${++homes}`);
  mkdirSync(h);
  const seed = join(h, "seed");
  writeFileSync(seed, "a");
  const cfg = join(h, "cfg.json");
  writeFileSync(cfg, JSON.stringify({ mcpServers: { lister: { command: process.execPath, args: [lister], env: { SEED: seed } } } }));
  const manifest = join(h, "manifest.yaml");
  const env = { PATH: process.env.PATH, HOME: h, XDG_STATE_HOME: join(h, "state") };
  const imp = spawnSync(MCP_LAZY, ["import", "--no-enable", "--manifest", manifest, "--from", cfg], { env, encoding: "utf8", timeout: 120000 });
  assert.equal(imp.status, 0, imp.stdout + imp.stderr);
  writeFileSync(seed, "b\u001b[2J");
  const r = spawnSync(MCP_LAZY, ["refresh", "--check", "--manifest", manifest], { env, encoding: "utf8", timeout: 120000 });
  assert.equal(r.status, 1, r.stdout + r.stderr);
  const first = Array.from({ length: 20 }, (_, k) => `+demo://b?[2J/${k}`).join(" ");
  assert.match(r.stdout, new RegExp(`^  resources: 3000 added, 3000 removed, 0 changed: ${first.replace(/[?[\]/.+]/g, "\\$&")} \\(\\+5980 more\\)$`, "m"));
});

test("import: a config's server names and arguments, and what a server says, reach the terminal without escape sequences", () => {
  const { h, path } = importHome(() =>
    JSON.stringify({
      mcpServers: {
        "evil\u001b]0;owned\u0007": { command: process.execPath, args: [SERVER, "\u001b[2J\u009b1A"] },
        "gone\u001b[8m": { command: "/nonexistent/\u001b[31mserver" },
      },
    }),
  );
  const r = importFrom(h, path);
  assert.equal(r.code, 1, r.out + r.err); // one of the two failed
  assert.doesNotMatch(r.out + r.err, /[\u001b\u0007\u009b]/);
  assert.match(r.out, new RegExp(`^Starting 'evil-0-owned': ${process.execPath} ${SERVER} \\?\\[2J\\?\\?1A$`, "m"));
  assert.match(r.out, /^evil\?\]0;owned\?\s+\S+\s+-> backend 'evil-0-owned'$/m);
  assert.match(r.out, /^gone\?\[8m\s+\S+\s+FAILED, left as it is: cannot start \/nonexistent\/\?\[31mserver: No such file or directory$/m);
});
