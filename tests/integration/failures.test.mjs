// Backends that misbehave: crash loops, silence, garbage on stdout. The frontend and the shim must
// answer every call with a clear error and carry on (direct activation: no systemd needed).
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { INIT, MCP_LAZY, ROOT, RawPeer, SERVER_SCRIPTS, SHIMD, cleanupPeers, sleep, waitFor } from "./lib/env.mjs";

after(cleanupPeers);
const dir = mkdtempSync(join(tmpdir(), "mcp-lazy-failures-"));
// A backend that prints garbage and a line that is not JSON-RPC, then behaves.
writeFileSync(
  join(dir, "noisy.sh"),
  `#!/bin/sh\necho 'Server starting... not JSON'\necho '{"jsonrpc":"2.0","bogus":1}'\nexec node ${SERVER_SCRIPTS.memory}\n`,
  { mode: 0o755 },
);
// A backend run through ssh whose login prints (a noisy ~/.bashrc there): a stand-in named ssh that
// writes a banner (with an escape sequence) and then runs the server.
mkdirSync(join(dir, "bin"));
writeFileSync(join(dir, "bin/ssh"), `#!/bin/sh\nprintf 'Welcome to far, \\033[1mroot\\033[0m\\n'\nexec node ${SERVER_SCRIPTS.memory}\n`, { mode: 0o755 });
// A handshake-era backend that refuses server/discover at once, then takes 3 s over initialize:
// longer than the 2 s the shim gives server/discover, well within its init_timeout.
writeFileSync(
  join(dir, "late.mjs"),
  `import readline from "node:readline";
const out = (m) => process.stdout.write(JSON.stringify(m) + "\\n");
readline.createInterface({ input: process.stdin }).on("line", (l) => {
  const m = JSON.parse(l);
  if (m.method === "server/discover") out({ jsonrpc: "2.0", id: m.id, error: { code: -32601, message: "Method not found" } });
  else if (m.method === "initialize")
    setTimeout(() => out({ jsonrpc: "2.0", id: m.id, result: { protocolVersion: m.params.protocolVersion, capabilities: { tools: {} }, serverInfo: { name: "late", version: "1" } } }), 3000);
  else if (m.method === "tools/call") out({ jsonrpc: "2.0", id: m.id, result: { content: [{ type: "text", text: "late, but here" }] } });
});
`,
);
// A handshake-era backend that never answers server/discover (the shim initializes it after 2 s), then
// dies in the middle of its answer to a call: part of a line, no newline, exit.
writeFileSync(
  join(dir, "mute.mjs"),
  `import readline from "node:readline";
const out = (m) => process.stdout.write(JSON.stringify(m) + "\\n");
readline.createInterface({ input: process.stdin }).on("line", (l) => {
  const m = JSON.parse(l);
  if (m.method === "initialize")
    out({ jsonrpc: "2.0", id: m.id, result: { protocolVersion: m.params.protocolVersion, capabilities: { tools: {} }, serverInfo: { name: "mute", version: "1" } } });
  else if (m.method === "tools/call") process.stdout.write('{"jsonrpc":"2.0","id":' + m.id + ',"result":{"content":[{"type":"text","text":"par', () => process.exit(0));
});
`,
);
const manifest = join(dir, "m.yaml");
writeFileSync(
  manifest,
  `backends:
  crashy: {command: [sh, -c, "echo dying >&2; exit 3"]}
  silent: {command: [sleep, "600"], init_timeout: 1s}
  missing: {command: [/nonexistent/server]}
  noisy: {command: [${join(dir, "noisy.sh")}], env: {MEMORY_FILE_PATH: ${dir}/m.jsonl}}
  late: {command: [node, ${join(dir, "late.mjs")}], init_timeout: 20s}
  mute: {command: [node, ${join(dir, "mute.mjs")}]}
  viassh: {command: [${join(dir, "bin/ssh")}, far, mcp-lazy, connect, memory], env: {MEMORY_FILE_PATH: ${dir}/s.jsonl}}
tools:
  - {name: crash, backend: crashy, input_schema: {type: object}}
  - {name: hang, backend: silent, input_schema: {type: object}}
  - {name: nothing, backend: missing, input_schema: {type: object}}
  - {name: read_graph, backend: noisy, input_schema: {type: object}}
  - {name: slow_start, backend: late, input_schema: {type: object}}
  - {name: search_nodes, backend: viassh, input_schema: {type: object}}
  - {name: cut_short, backend: mute, input_schema: {type: object}}
`,
);

async function session() {
  const p = new RawPeer(MCP_LAZY, ["--manifest", manifest, "--activation=direct", "--shimd", SHIMD]);
  await p.request(INIT());
  return p;
}
let n = 0;
const call = (p, name) => p.request({ jsonrpc: "2.0", id: ++n, method: "tools/call", params: { name, arguments: {} } }, 30000);
const text = (r) => r.result?.content?.[0]?.text ?? JSON.stringify(r);

test("a backend that keeps crashing: each call says how it died, then a backoff, never a hot loop", async () => {
  const p = await session();
  // The call waits for the start; a failed start is tried once more at once (the call never
  // reached a backend), then the backoff holds: the call fails saying how the start failed.
  const died = "backend 'crashy' failed to start: it exited with status 3 before answering initialize";
  const a = await call(p, "crash");
  assert.equal(a.result.isError, true);
  assert.equal(text(a), died);
  let starts = 2;
  // The backoff after N crashes in a row is 0.5 s x 2^(N-2). A call either meets it (and says for how
  // long), or comes after it and starts the backend once more: which one depends on how fast the
  // machine got the call there, so each answer is checked against the starts so far, not a schedule.
  // The backoff doubles, so calls one after another meet it soon on any machine.
  const untilHeld = async () => {
    for (let k = 0; k < 6; k++) {
      const t = text(await call(p, "crash"));
      const m = /^backend 'crashy' crashed (\d+) times in a row \(last: it exited with status 3\); not restarting it for another (\d+\.\d) s$/.exec(t);
      if (!m) {
        assert.equal(t, died);
        starts++;
        continue;
      }
      assert.equal(Number(m[1]), starts, t);
      assert.ok(Number(m[2]) <= 0.5 * 2 ** (starts - 2), t);
      return Number(m[2]);
    }
    assert.fail(`no call met the backoff after ${starts} starts`);
  };
  const left = await untilHeld();
  // Once the backoff has passed, the next call starts the backend once more.
  await sleep(left * 1000 + 200);
  assert.equal(text(await call(p, "crash")), died);
  starts++;
  await untilHeld();
  // The shim's log says the same (it comes on stderr, which can lag the answers on stdout).
  const logged = () => (p.stderr.match(/Started backend 'crashy'/g) ?? []).length;
  await waitFor(() => logged() >= starts, 20000);
  assert.equal(logged(), starts, p.stderr);
  assert.deepEqual((await p.request({ jsonrpc: "2.0", id: 99, method: "ping" })).result, {});
  await p.close();
});

test("a backend that never answers initialize is stopped after init_timeout", async () => {
  const p = await session();
  const t0 = Date.now();
  const r = await call(p, "hang");
  assert.equal(text(r), "backend 'silent' did not answer initialize within 1s (init_timeout); stopped it");
  assert.ok(Date.now() - t0 < 20000); // the 1 s init_timeout, not the 30 s bound of the call
  await p.close();
});

test("a handshake-era backend slow to initialize after refusing server/discover has all of init_timeout", async () => {
  const p = await session();
  const r = await p.request({ jsonrpc: "2.0", id: ++n, method: "tools/call", params: { name: "slow_start", arguments: {} } }, 30000);
  assert.equal(text(r), "late, but here", p.stderr); // before the fix: "did not answer initialize within 20s" after 2 s
  await p.close();
});

test("a backend that never answered server/discover and dies mid-answer fails the call in flight", async () => {
  const p = await session();
  const r = await p.request({ jsonrpc: "2.0", id: ++n, method: "tools/call", params: { name: "cut_short", arguments: {} } }, 30000);
  // Before the fix the shim took the death for one on server/discover (still pending), started the
  // backend again, and the call waited for ever.
  assert.ok(r.result?.isError, JSON.stringify(r));
  assert.match(text(r), /^backend 'mute' exited with status 0 while handling this call; the next call starts it again$/, p.stderr);
  await p.close();
});

test("a command that cannot be executed is named in the error", async () => {
  const p = await session();
  const r = await call(p, "nothing");
  assert.equal(text(r), "cannot start backend 'missing': /nonexistent/server: No such file or directory");
  await p.close();
});

test("garbage on a backend's stdout is skipped and logged, the calls still work", async () => {
  const p = await session();
  const r = await call(p, "read_graph");
  assert.ok(!r.result.isError, JSON.stringify(r));
  assert.match(text(r), /"entities"/);
  // Logged as the shim read them, but on stderr: the answer, on stdout, may reach us first.
  await waitFor(() => /wrote a line that is not JSON-RPC/.test(p.stderr) && /sent an invalid message/.test(p.stderr), 20000);
  assert.match(p.stderr, /Backend 'noisy' wrote a line that is not JSON-RPC to stdout, ignoring it: 'Server starting\.\.\. not JSON'\n/);
  assert.match(p.stderr, /Backend 'noisy' sent an invalid message/);
  await p.close();
});

test("a backend run through ssh whose login writes to stdout: the line is logged printably, with the likely cause and what to do", async () => {
  const p = await session();
  const r = await p.request({ jsonrpc: "2.0", id: ++n, method: "tools/call", params: { name: "search_nodes", arguments: { query: "x" } } }, 30000);
  assert.ok(!r.result.isError, JSON.stringify(r));
  await waitFor(() => /Backend 'viassh' wrote/.test(p.stderr), 20000);
  assert.match(
    p.stderr,
    /Backend 'viassh' wrote a line that is not JSON-RPC to stdout, ignoring it: 'Welcome to far, \?\[1mroot\?\[0m'; its command is ssh, so most likely the remote login wrote it: a shell startup file that runs for non-interactive shells \(~\/\.bashrc for bash, ~\/\.zshenv for zsh\), ~\/\.ssh\/rc or a forced command of the remote user prints it; make it print nothing unless the shell is interactive \(e\.g\. begin ~\/\.bashrc with: case \$- in \*i\*\) ;; \*\) return;; esac\)\n/,
  );
  assert.doesNotMatch(p.stderr, /\x1b/, "no escape sequence reaches the log");
  await p.close();
});

test("a client that does not read while a backend floods it: memory stays bounded, nothing is lost", async () => {
  // A backend that answers one call with 60 MB of log notifications first.
  const flood = join(dir, "flood.mjs");
  writeFileSync(
    flood,
    `import readline from "node:readline";
const out = (m) => process.stdout.write(JSON.stringify(m) + "\\n");
readline.createInterface({ input: process.stdin }).on("line", async (l) => {
  const m = JSON.parse(l);
  if (m.method === "initialize") out({ jsonrpc: "2.0", id: m.id, result: { protocolVersion: m.params.protocolVersion, capabilities: { tools: {}, logging: {} }, serverInfo: { name: "flood", version: "1" } } });
  if (m.method === "tools/call") {
    const data = "x".repeat(1000);
    for (let i = 0; i < 60000; i++) if (!process.stdout.write(JSON.stringify({ jsonrpc: "2.0", method: "notifications/message", params: { level: "info", data: i + data } }) + "\\n")) await new Promise((r) => process.stdout.once("drain", r));
    out({ jsonrpc: "2.0", id: m.id, result: { content: [{ type: "text", text: "done" }] } });
  }
});
`,
  );
  const m = join(dir, "flood.yaml");
  writeFileSync(m, `backends:\n  flood: {command: [node, ${flood}]}\ntools:\n  - {name: flood, backend: flood, input_schema: {type: object}}\n`);
  // Memory is measured on the plain build: AddressSanitizer's quarantine keeps freed memory resident.
  const plain = join(ROOT, "build");
  const p = new RawPeer(join(plain, "mcp-lazy"), ["--manifest", m, "--activation=direct", "--shimd", join(plain, "mcp-lazy-shimd")]);
  await p.request(INIT());
  p.child.stdout.pause(); // the client stops reading
  p.send({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "flood", arguments: {} } });
  await sleep(5000);
  const rss = Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${p.child.pid}/status`, "utf8"))[1]) / 1024;
  assert.ok(rss < 32, `mcp-lazy holds ${rss.toFixed(1)} MiB while its client does not read`);
  p.child.stdout.resume();
  const msgs = await p.next(60001, 90000);
  assert.equal(msgs.filter((x) => x.method === "notifications/message").length, 60000);
  assert.equal(msgs.at(-1).result.content[0].text, "done");
  await p.close();
});
