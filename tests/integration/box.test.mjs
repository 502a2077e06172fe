// box.test.mjs — self-test of the systemd box the integration tests run in:
// a real PID 1, real socket activation, real cgroups, an MCP server reached
// through nsenter, and no trace of the box on the host once it is stopped.

import assert from "node:assert/strict";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport, getDefaultEnvironment } from "@modelcontextprotocol/sdk/client/stdio.js";
import { startBox } from "./lib/box.mjs";

const REPO = fileURLToPath(new URL("../..", import.meta.url)).replace(/\/$/, "");
const MEMORY_SERVER = join(REPO, "tests/node_modules/@modelcontextprotocol/server-memory/dist/index.js");

// Listens on the socket systemd passes as fd 3, answers every connection with
// where it runs, and keeps a child around to show that children share its cgroup.
const SERVER = `
import net from "node:net";
import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
const helper = spawn("sleep", ["infinity"], { stdio: "ignore" });
net.createServer((c) => c.end(JSON.stringify({
  pid: process.pid,
  helper: helper.pid,
  cgroup: readFileSync("/proc/self/cgroup", "utf8").match(/^0::(.*)$/m)[1],
}) + "\\n")).listen({ fd: 3 });
`;

const UNITS = {
  "/etc/systemd/system/boxtest.socket": "[Socket]\nListenStream=/run/boxtest.sock\nAccept=no\n",
  "/etc/systemd/system/boxtest.service": `[Service]\nExecStart=${process.execPath} /run/boxtest-server.mjs\n`,
  "/run/boxtest-server.mjs": SERVER,
};

let box;
let bootMs;

before(async () => {
  const t0 = performance.now();
  box = await startBox({ bind: [REPO] });
  bootMs = Math.round(performance.now() - t0);
});

after(() => box?.stop());

// Runs a command in the box and returns its stdout, failing the test on a non-zero exit.
async function ok(cmd, args = [], opts = {}) {
  const r = await box.exec(cmd, args, opts);
  assert.equal(r.code, 0, `${cmd} ${args.join(" ")} exited ${r.code}: ${r.stderr}`);
  return r.stdout.trim();
}

async function eventually(what, predicate, ms = 20000) {
  const deadline = Date.now() + ms;
  while (!(await predicate())) {
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

// Connects from the host, through the box's root: no nsenter needed for sockets.
function request(socketPath) {
  return new Promise((resolve, reject) => {
    let data = "";
    net
      .connect(socketPath)
      .setEncoding("utf8")
      .on("data", (d) => (data += d))
      .on("end", () => resolve(JSON.parse(data)))
      .on("error", reject);
  });
}

test("PID 1 in the box is a running systemd", async (t) => {
  t.diagnostic(`boot took ${bootMs} ms`);
  assert.equal(await ok("cat", ["/proc/1/comm"]), "systemd");
  assert.equal(await ok("readlink", ["/proc/1/exe"]), "/usr/lib/systemd/systemd");
  assert.match(await ok("systemctl", ["is-system-running"]), /^(running|degraded)$/);
  assert.equal(await ok("pwd", [], { cwd: REPO }), REPO, "cwd is kept when it exists in the box");
  assert.equal((await box.exec("sh", ["-c", "exit 7"])).code, 7, "exit status is propagated");
});

test("a socket activates its service, whose processes share its cgroup", async () => {
  for (const [path, text] of Object.entries(UNITS)) await ok("tee", [path], { input: text });
  await ok("systemctl", ["daemon-reload"]);
  await ok("systemctl", ["start", "boxtest.socket"]);
  assert.equal(await ok("systemctl", ["is-active", "boxtest.socket"]), "active");
  assert.equal((await box.exec("systemctl", ["is-active", "boxtest.service"])).stdout.trim(), "inactive");

  const reply = await request(`/proc/${box.pid}/root/run/boxtest.sock`);
  assert.equal(await ok("systemctl", ["is-active", "boxtest.service"]), "active");

  const cgroup = await ok("systemctl", ["show", "-P", "ControlGroup", "boxtest.service"]);
  assert.equal(cgroup, "/system.slice/boxtest.service");
  assert.equal(reply.cgroup, cgroup);
  assert.equal(Number(await ok("systemctl", ["show", "-P", "MainPID", "boxtest.service"])), reply.pid);
  const procs = (await ok("cat", [`/sys/fs/cgroup${cgroup}/cgroup.procs`])).split("\n").map(Number);
  assert.deepEqual(procs.sort(), [reply.pid, reply.helper].sort());

  await ok("systemctl", ["stop", "boxtest.service"]);
  const left = await box.exec("cat", [`/sys/fs/cgroup${cgroup}/cgroup.procs`]);
  assert.ok(left.code !== 0 || left.stdout.trim() === "", `cgroup not emptied: ${left.stdout}`);
  assert.notEqual((await box.exec("kill", ["-0", String(reply.helper)])).code, 0, "helper survived");
  assert.equal(await ok("systemctl", ["is-active", "boxtest.socket"]), "active");
});

test("an MCP server runs in the box over nsenter", async () => {
  const [command, ...prefix] = box.nsenterArgs();
  const transport = new StdioClientTransport({
    command,
    args: [...prefix, process.execPath, MEMORY_SERVER],
    env: { ...getDefaultEnvironment(), MEMORY_FILE_PATH: "/tmp/boxtest-memory.jsonl" },
    stderr: "ignore",
  });
  const client = new Client({ name: "box-selftest", version: "0" });
  await client.connect(transport);
  try {
    const { tools } = await client.listTools();
    assert.ok(tools.some((tool) => tool.name === "create_entities"));
    await ok("pgrep", ["-f", "server-memory/dist/index.js"]);
  } finally {
    await client.close();
  }
  const gone = async () => (await box.exec("pgrep", ["-f", "server-memory/dist/index.js"])).code !== 0;
  await eventually("the MCP server to exit", gone);
});

test("a user manager for root starts in the box", async () => {
  await ok("systemctl", ["start", "user@0.service"]);
  const env = { ...process.env, XDG_RUNTIME_DIR: "/run/user/0" };
  assert.match(await ok("systemctl", ["--user", "is-system-running"], { env }), /^(running|degraded)$/);
});

test("stop() leaves nothing behind", async () => {
  const { pid, stateDir } = box;
  const cgroup = readFileSync(join(stateDir, "cgroup"), "utf8").trim();
  await box.stop();
  await box.stop();
  assert.ok(!existsSync(stateDir), "state directory removed");
  assert.ok(!existsSync(`/proc/${pid}`), "box systemd gone");
  assert.ok(!existsSync(cgroup), "box cgroup removed");
  assert.ok(!readFileSync("/proc/self/mountinfo", "utf8").includes(stateDir), "no mounts left");
});

// A stand-in for systemd, named systemd as the real one is: BOX_SYSTEMD points
// PID 1 at it. Its directory is bound into the box (the box's /tmp is its own).
function fakeSystemd(t, script) {
  const dir = mkdtempSync(join(tmpdir(), "mcp-lazy-fake-systemd."));
  t.after(() => rmSync(dir, { recursive: true }));
  writeFileSync(join(dir, "systemd"), `#!/bin/sh\n${script}\n`, { mode: 0o755 });
  return { dir, env: { BOX_SYSTEMD: join(dir, "systemd") } };
}

// Between its exec and /run/systemd/system, systemd is "offline" to systemctl;
// under load `box up` once saw that and gave up. Here the window is 3 s wide.
test("a systemd slow to start is waited for, not taken for an offline one", async (t) => {
  const fake = fakeSystemd(t, '/bin/sleep 3\nexec /lib/systemd/systemd "$@"');
  const t0 = performance.now();
  const slow = await startBox({ bind: [fake.dir], env: fake.env, retry: false });
  try {
    t.diagnostic(`slowed boot took ${Math.round(performance.now() - t0)} ms`);
    const exe = await slow.exec("readlink", ["/proc/1/exe"]);
    assert.equal(exe.stdout.trim(), "/usr/lib/systemd/systemd", "PID 1 is the real systemd by now");
    const r = await slow.exec("systemctl", ["is-system-running"]);
    assert.match(r.stdout.trim(), /^(running|degraded)$/);
  } finally {
    await slow.stop();
  }
});

test("a box whose systemd dies fails saying so, not by timing out", async (t) => {
  const fake = fakeSystemd(t, "/bin/sleep 1\nexit 3");
  const env = { ...fake.env, BOX_BOOT_TIMEOUT: "120" };
  await assert.rejects(startBox({ bind: [fake.dir], env, retry: false }), (e) => {
    assert.match(e.message, /^box up failed \(exit 1\): box: (systemd died|the box failed to start)$/m);
    return true;
  });
});
