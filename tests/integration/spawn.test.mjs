// How the shim starts a backend (direct activation: no systemd needed): in a process group of its own,
// in the session the frontend gave the shim (which the frontend ends when the shim dies), in its cwd, with the manifest's env over the shim's (its PATH finds the command),
// without the LISTEN_* variables meant for the shim, with no signal blocked and SIGPIPE at its
// default, and with the soft descriptor limit the shim was started with (the shim raises its own).
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { INIT, MCP_LAZY, RawPeer, SHIMD, cleanupPeers, waitFor } from "./lib/env.mjs";

after(cleanupPeers);
const dir = mkdtempSync(join(tmpdir(), "mcp-lazy-spawn-"));
after(() => rmSync(dir, { recursive: true, force: true }));
const facts = join(dir, "facts");
mkdirSync(join(dir, "bin"));
mkdirSync(join(dir, "work"));
// A server that answers at once, reached only through the manifest's PATH; the shell before it
// writes down what it was started with.
writeFileSync(
  join(dir, "serve.mjs"),
  `import readline from "node:readline";
const out = (m) => process.stdout.write(JSON.stringify(m) + "\\n");
// "linger": it outlives its stdin's EOF, as an MCP server may (the spec has its client signal it then).
if (process.argv[2] === "linger") setInterval(() => {}, 1000);
readline.createInterface({ input: process.stdin }).on("line", (l) => {
  const m = JSON.parse(l);
  if (m.id === undefined) return;
  if (m.method === "initialize") out({ jsonrpc: "2.0", id: m.id, result: { protocolVersion: m.params.protocolVersion, capabilities: { tools: {} }, serverInfo: { name: "facts", version: "1" } } });
  else if (m.method === "tools/call") out({ jsonrpc: "2.0", id: m.id, result: { content: [{ type: "text", text: "started" }] } });
  else out({ jsonrpc: "2.0", id: m.id, error: { code: -32601, message: "Method not found" } });
});
`,
);
writeFileSync(
  join(dir, "bin", "facts-server"),
  `#!/bin/sh
grep -E '^(SigBlk|SigIgn):' /proc/self/status > ${facts}
echo "soft $(ulimit -Sn)" >> ${facts}
echo "cwd $PWD" >> ${facts}
echo "foo \${FOO-unset} listen \${LISTEN_FDS-unset} \${LISTEN_PID-unset} \${LISTEN_FDNAMES-unset}" >> ${facts}
echo "pid $$ pgid $(ps -o pgid= -p $$ | tr -d ' ') sid $(ps -o sid= -p $$ | tr -d ' ') ppid $PPID" >> ${facts}
exec node ${join(dir, "serve.mjs")}
`,
  { mode: 0o755 },
);
// A backend that leaves a process of its own behind (in its group), and outlives its stdin's EOF.
const lingerPids = join(dir, "linger-pids");
writeFileSync(
  join(dir, "bin", "lingering-server"),
  `#!/bin/sh
sleep 1000 &
echo "$! $$" > ${lingerPids}
exec node ${join(dir, "serve.mjs")} linger
`,
  { mode: 0o755 },
);
const manifest = join(dir, "m.yaml");
writeFileSync(
  manifest,
  `backends:
  facts:
    command: [facts-server]
    cwd: ${join(dir, "work")}
    env: {FOO: from-the-manifest, PATH: "${join(dir, "bin")}:/usr/local/bin:/usr/bin:/bin"}
    socket: ${join(dir, "absent.sock")}
  linger:
    command: [${join(dir, "bin", "lingering-server")}]
    socket: ${join(dir, "absent-linger.sock")}
tools:
  - {name: started, backend: facts, input_schema: {type: object}}
  - {name: lingering, backend: linger, input_schema: {type: object}}
`,
);

// Through the frontend p, the backend starts (writing down its facts) and answers; p is closed after.
async function callStarted(p) {
  try {
    await p.request(INIT());
    const r = await p.request({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "started", arguments: {} } }, 30000);
    assert.equal(r.result?.content?.[0]?.text, "started", JSON.stringify(r));
  } finally {
    await p.close();
  }
}

test("a backend starts in its own process group in its shim's session, cwd and env, with no signal blocked and the shim's first descriptor limit", async () => {
  // The frontend (and so the shim) starts with a soft limit of 512; the shim raises its own.
  const p = new RawPeer("sh", ["-c", `ulimit -Sn 512 && exec "$0" "$@"`, MCP_LAZY, "--manifest", manifest, "--activation=direct", "--shimd", SHIMD], {
    env: { ...process.env, MCP_LAZY_CACHE_DIR: "", FOO: "from-the-client" },
  });
  await callStarted(p);
  const f = Object.fromEntries(readFileSync(facts, "utf8").trim().split("\n").map((l) => {
    const key = l.split(/[:\s]/)[0];
    return [key, l.slice(key.length).replace(/^[:\s]+/, "")];
  }));
  assert.equal(BigInt(`0x${f.SigBlk}`), 0n, "no signal blocked");
  assert.equal(BigInt(`0x${f.SigIgn}`) & (1n << 12n), 0n, "SIGPIPE at its default");
  assert.equal(f.soft, "512");
  assert.equal(f.cwd, join(dir, "work"));
  assert.equal(f.foo, "from-the-manifest listen unset unset unset");
  const [pid, , pgid, , sid, , ppid] = f.pid.split(" ");
  assert.ok(pid && pid === pgid && sid === ppid && sid !== pid, `its own group, in its shim's session: ${f.pid}`);
});

// A process that is gone, or dead and waiting to be reaped.
function gone(pid) {
  try {
    return readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].startsWith("Z");
  } catch {
    return true;
  }
}

test("a shim killed with SIGKILL outside systemd takes its backend with it, and what the backend started", async () => {
  rmSync(lingerPids, { force: true });
  const p = new RawPeer(MCP_LAZY, ["--manifest", manifest, "--activation=direct", "--shimd", SHIMD], {
    env: { ...process.env, MCP_LAZY_CACHE_DIR: "" },
  });
  let pids = [];
  try {
    await p.request(INIT());
    const r = await p.request({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "lingering", arguments: {} } }, 30000);
    assert.equal(r.result?.content?.[0]?.text, "started", JSON.stringify(r));
    pids = readFileSync(lingerPids, "utf8").trim().split(" ").map(Number); // sleep, the server
    const shim = Number(readFileSync(`/proc/${pids[1]}/stat`, "utf8").split(") ")[1].split(" ")[1]);
    assert.match(readFileSync(`/proc/${shim}/cmdline`, "utf8"), /mcp-lazy-shimd/);
    process.kill(shim, "SIGKILL");
    assert.ok(await waitFor(() => pids.every(gone)), `left running: ${pids.filter((q) => !gone(q))}`);
  } finally {
    for (const q of pids) {
      try {
        process.kill(q, "SIGKILL");
      } catch {}
    }
    await p.close();
  }
});

test("a relative entry of the manifest's PATH is searched from the backend's cwd, as execvp() in that cwd would", async () => {
  const rel = join(dir, "rel.yaml");
  writeFileSync(rel, readFileSync(manifest, "utf8").replace(`PATH: "${join(dir, "bin")}:`, 'PATH: "../bin:'));
  rmSync(facts, { force: true });
  const p = new RawPeer(MCP_LAZY, ["--manifest", rel, "--activation=direct", "--shimd", SHIMD], {
    env: { ...process.env, MCP_LAZY_CACHE_DIR: "" },
  });
  await callStarted(p);
  assert.match(readFileSync(facts, "utf8"), new RegExp(`^cwd ${join(dir, "work")}$`, "m"));
});
