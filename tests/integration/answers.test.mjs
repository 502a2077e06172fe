// Prepared answers: what a frontend answers from its manifest (initialize, server/discover, every
// tools/list page, the other lists), printed once per manifest change into a file of the cache and
// served from it. Every answer must be byte for byte what the manifest path prints (MCP_LAZY_CACHE_DIR=
// turns the cache off), in both eras and both modes; a changed manifest makes new answers; a cache
// file that is damaged, hostile or not ours is ignored (and replaced), never served.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import {
  chmodSync, chownSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, renameSync, rmSync, statSync, symlinkSync,
  unlinkSync, writeFileSync,
} from "node:fs";
import { execFileSync } from "node:child_process";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { MANIFESTS, MCP_LAZY, RawPeer, cleanupPeers, waitFor } from "./lib/env.mjs";

after(cleanupPeers);

const dir = mkdtempSync(join(tmpdir(), "mcp-lazy-answers-"));
after(() => rmSync(dir, { recursive: true, force: true }));
const CACHE = join(dir, "cache");
const ENVELOPE = {
  "io.modelcontextprotocol/protocolVersion": "2026-07-28",
  "io.modelcontextprotocol/clientCapabilities": {},
};
const VERSIONS = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", "1999-01-01"];

// demo.yaml with paged tools (7 a page), a cache_ttl, and an absolute cwd so that it can move.
function demoText({ pageSize = 7, extraTool = "" } = {}) {
  return readFileSync(join(MANIFESTS, "demo.yaml"), "utf8")
    .replace(/^server:\n/m, `server:\n  page_size: ${pageSize}\n  cache_ttl: 30s\n`)
    .replaceAll("cwd: ../tests", `cwd: ${join(MANIFESTS, "../tests")}`)
    .replace(/^tools:\n/m, `tools:\n${extraTool}`);
}

// Runs one frontend over lines (stdin closed after them), returns { out, err } once it has exited.
function run(args, lines, { cache = CACHE, debug = true } = {}) {
  return new Promise((resolve, reject) => {
    const env = { ...process.env, MCP_LAZY_CACHE_DIR: cache };
    if (debug) env.MCP_LAZY_LOG_LEVEL = "debug";
    else delete env.MCP_LAZY_LOG_LEVEL;
    const child = spawn(MCP_LAZY, args, { env, stdio: ["pipe", "pipe", "pipe"] });
    let out = "", err = "";
    child.stdout.setEncoding("utf8").on("data", (d) => (out += d));
    child.stderr.setEncoding("utf8").on("data", (d) => (err += d));
    const timer = setTimeout(() => child.kill("SIGKILL"), 20000);
    child.on("error", reject);
    child.on("exit", (code, signal) => {
      clearTimeout(timer);
      if (code !== 0) reject(new Error(`mcp-lazy exited ${code ?? signal}; stderr: ${err}`));
      else resolve({ out, err });
    });
    child.stdin.end(lines.map((l) => (typeof l === "string" ? l : JSON.stringify(l))).join("\n") + "\n");
  });
}

const req = (id, method, params) => ({ jsonrpc: "2.0", id, method, ...(params === undefined ? {} : { params }) });
const modern = (params = {}) => ({ ...params, _meta: ENVELOPE });

// Every request the prepared answers cover (and some they leave to the manifest), for one session.
function sessionLines(version, nTools, pageSize) {
  const lines = [
    req(0, "initialize", { protocolVersion: version, capabilities: {}, clientInfo: { name: "answers-test", version: "1" } }),
    { jsonrpc: "2.0", method: "notifications/initialized" },
    req("a\\u00e9\"b", "tools/list"),
    req(12345678901234567890, "tools/list", modern()),
    '{"jsonrpc":"2.0","id":1e2,"method":"tools/list"}',
    '{"jsonrpc":"2.0","id":-7,"method":"ping"}',
  ];
  let id = 100;
  for (let off = pageSize; off < nTools; off += pageSize) {
    lines.push(req(id++, "tools/list", { cursor: `mcp-lazy:tools:${off}` }));
    lines.push(req(id++, "tools/list", modern({ cursor: `mcp-lazy:tools:${off}` })));
  }
  lines.push(
    req(id++, "tools/list", { cursor: "mcp-lazy:tools:3" }), // no page of ours starts there: the manifest's path
    req(id++, "tools/list", { cursor: "bogus" }),
    req(id++, "tools/list", []),
    req(id++, "server/discover", modern()),
    req(id++, "server/discover", {}),
  );
  for (const m of ["resources/list", "resources/templates/list", "prompts/list"])
    lines.push(req(id++, m), req(id++, m, modern()), req(id++, m, { cursor: "x" }));
  lines.push(req(id++, "initialize", { protocolVersion: version, capabilities: {} }));
  if (version === "2025-03-26")
    lines.push(JSON.stringify([req(id++, "tools/list"), req(id++, "prompts/list"), req(id++, "ping"), req(id++, "resources/list", modern())]));
  return lines;
}

const cacheFiles = () => {
  try {
    return readdirSync(CACHE).filter((f) => f.endsWith(".answers"));
  } catch {
    return [];
  }
};

// The same session three ways: from the manifest (no cache), preparing the answers (a miss), from them (a hit).
async function threeWays(args, lines) {
  rmSync(CACHE, { recursive: true, force: true });
  const off = await run(args, lines, { cache: "" });
  const miss = await run(args, lines);
  const hit = await run(args, lines);
  assert.equal(cacheFiles().length, 1, `one answers file: ${cacheFiles()}`);
  assert.doesNotMatch(miss.err, /Serving prepared answers/);
  assert.match(hit.err, /Serving prepared answers from /);
  return { off: off.out, miss: miss.out, hit: hit.out, hitErr: hit.err };
}

const manifestPath = join(dir, "demo.yaml");
writeFileSync(manifestPath, demoText());
const jsonPath = join(dir, "demo.json");

test("prepared answers are byte for byte the manifest's, every page, both eras, fleet and --backend", async () => {
  const count = (args) =>
    JSON.parse(execFileSync(MCP_LAZY, args, { env: { ...process.env, MCP_LAZY_CACHE_DIR: "" }, input: `${JSON.stringify(req(1, "tools/list", {}))}\n` }).toString())
      .result;
  for (const mode of [[], ["--backend", "everything"], ["--backend", "memory"], ["--backend", "files"]]) {
    const args = ["--manifest", manifestPath, ...mode];
    // How many tools this mode lists: the first page says where the next starts.
    const first = count(args);
    const n = first.nextCursor ? 100 : first.tools.length;
    for (const version of VERSIONS) {
      const r = await threeWays(args, sessionLines(version, n, 7));
      assert.ok(r.off.length > 1000, `output of ${mode} ${version}: ${r.off.slice(0, 300)}`);
      assert.equal(r.miss, r.off, `${mode.join(" ") || "fleet"} ${version}: a miss answers as the manifest does`);
      assert.equal(r.hit, r.off, `${mode.join(" ") || "fleet"} ${version}: a hit answers as the manifest does`);
    }
  }
});

test("prepared answers: a session that only lists never reads the manifest; a call does", async () => {
  const args = ["--manifest", manifestPath];
  const lines = sessionLines("2025-06-18", 40, 7).filter((l) => !String(JSON.stringify(l)).includes("tools:3"));
  const r = await threeWays(args, lines.slice(0, 6));
  assert.doesNotMatch(r.hitErr, /Reading the manifest for a request/);
  const call = await run(args, [...lines.slice(0, 2), req(9, "completion/complete", { ref: { type: "ref/prompt", name: "nope" } })]);
  assert.match(call.err, /Reading the manifest for a request the prepared answers do not cover/);
  assert.match(call.out, /"id":9,"error":\{"code":-32602,"message":"Unknown prompt: 'nope'"/);
});

test("a frontend that prepared the answers keeps no manifest: a request they do not cover reads it again", async () => {
  // A child reads the manifest and prints the answers: none of what that took stays with the
  // frontend (one that did it itself held 0.3-0.4 MiB more for good); the cache's tree serves the rest.
  rmSync(CACHE, { recursive: true, force: true });
  for (const args of [["--manifest", manifestPath], ["--manifest", manifestPath, "--backend", "everything"]]) {
    const lines = sessionLines("2025-06-18", 40, 7).slice(0, 2);
    const r = await run(args, [...lines, req(9, "completion/complete", { ref: { type: "ref/prompt", name: "nope" } })]);
    assert.doesNotMatch(r.err, /Serving prepared answers/, "this session prepares the answers");
    assert.match(r.err, /Prepared the answers in /, "in a child, whose manifest goes with it");
    assert.match(r.err, /Reading the manifest for a request the prepared answers do not cover/, args.join(" "));
    assert.match(r.out, /"id":9,"error":\{"code":-32602,"message":"Unknown prompt: 'nope'"/);
  }
});

test("prepared answers of a JSON manifest, and of a manifest without paging", async () => {
  // The demo's tools as the frontend lists them (MCP spelling), under one backend of a JSON manifest.
  const flat = join(dir, "flat.yaml");
  writeFileSync(flat, demoText({ pageSize: 0 }));
  const listed = JSON.parse(
    execFileSync(MCP_LAZY, ["--manifest", flat], { env: { ...process.env, MCP_LAZY_CACHE_DIR: "" }, input: `${JSON.stringify(req(1, "tools/list"))}\n` }).toString(),
  ).result.tools;
  assert.ok(listed.length > 20, `the demo's tools: ${listed.length}`);
  const m = {
    server: { name: "json-fleet", version: "2", page_size: 0, instructions: "JSON \u2603 \"quoted\"" },
    backends: { one: { command: ["node", "x.js"], resources: [{ uri: "a://b", name: "b" }], prompts: [{ name: "p" }] } },
    tools: listed.map((x) => ({ ...x, backend: "one" })),
  };
  writeFileSync(jsonPath, JSON.stringify(m));
  for (const version of ["2025-03-26", "2025-11-25"]) {
    const r = await threeWays(["--manifest", jsonPath], sessionLines(version, m.tools.length, 7));
    assert.equal(r.miss, r.off);
    assert.equal(r.hit, r.off);
    assert.match(r.hit, /"instructions":"JSON/);
  }
  // A call needs the manifest: from the tree the miss left in the cache.
  const call = await run(["--manifest", jsonPath], [req(5, "prompts/get", { name: "nope" })]);
  assert.match(call.err, /Reading the manifest for a request/);
  assert.match(call.out, /"id":5,"error":\{"code":-32602,"message":"Unknown prompt: 'nope'"/);
});

test("prepared answers follow the manifest: a changed file is prepared again, a running frontend announces it", async () => {
  const path = join(dir, "changing.yaml");
  writeFileSync(path, demoText());
  rmSync(CACHE, { recursive: true, force: true });
  const lines = sessionLines("2025-06-18", 40, 7).slice(0, 3);
  const before = await run(["--manifest", path], lines);
  const hit = await run(["--manifest", path], lines);
  assert.match(hit.err, /Serving prepared answers/);
  assert.equal(hit.out, before.out);

  // A running frontend (from the prepared answers) sees the file change.
  const p = new RawPeer(MCP_LAZY, ["--manifest", path], { env: { ...process.env, MCP_LAZY_CACHE_DIR: CACHE, MCP_LAZY_LOG_LEVEL: "debug" } });
  await p.request(req(0, "initialize", { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "t", version: "1" } }));
  assert.match(p.stderr, /Serving prepared answers/);
  const extra = "  - {name: zz_added_tool, backend: memory, input_schema: {type: object}}\n";
  writeFileSync(path + ".new", demoText({ extraTool: extra }));
  renameSync(path + ".new", path);
  const [note] = await p.next(1, 10000);
  assert.equal(note.method, "notifications/tools/list_changed");
  const page = await p.request(req(1, "tools/list"));
  assert.equal(page.result.tools[0].name, "zz_added_tool");
  // Only the resources change: only their notification.
  writeFileSync(path + ".new", demoText({ extraTool: extra }).replace('"name":"knowledge-graph"', '"name":"knowledge-graph-2"'));
  renameSync(path + ".new", path);
  const [note2] = await p.next(1, 10000);
  assert.equal(note2.method, "notifications/resources/list_changed");
  // The same content written again: nothing to announce.
  writeFileSync(path, readFileSync(path));
  assert.ok(await waitFor(() => (p.stderr.match(/Reloaded/g) ?? []).length >= 3, 20000), p.stderr);
  const ping = await p.request(req(2, "ping"));
  assert.deepEqual(ping, { jsonrpc: "2.0", id: 2, result: {} });
  await p.close();

  // A later start: the new file's answers, the same as the manifest's own.
  const after = await run(["--manifest", path], lines);
  const off = await run(["--manifest", path], lines, { cache: "" });
  assert.equal(after.out, off.out);
  assert.notEqual(after.out, before.out);
  assert.match(after.out, /zz_added_tool/);
});

test("a large prepared answer is written from the answers themselves: one the client has not read yet survives a reload whole", async () => {
  const path = join(dir, "large.yaml");
  const text = (tag) =>
    demoText({
      pageSize: 0,
      extraTool: Array.from({ length: 200 }, (_, i) => `  - {name: big_${tag}_${i}, backend: memory, description: "${tag.repeat(2000)}", input_schema: {type: object}}\n`).join(""),
    });
  writeFileSync(path, text("a"));
  const old = await run(["--manifest", path], [req(1, "tools/list")], { cache: "" });
  assert.ok(old.out.length > 400000, `one page of ${old.out.length} bytes`);
  rmSync(CACHE, { recursive: true, force: true });
  await run(["--manifest", path], [req(1, "tools/list")]); // prepares the answers
  const child = spawn(MCP_LAZY, ["--manifest", path], {
    env: { ...process.env, MCP_LAZY_CACHE_DIR: CACHE, MCP_LAZY_LOG_LEVEL: "debug" },
    stdio: ["pipe", "pipe", "pipe"],
  });
  const exited = new Promise((resolve) => child.on("exit", resolve));
  let err = "";
  child.stderr.setEncoding("utf8").on("data", (d) => (err += d));
  child.stdout.pause();
  try {
    child.stdin.write(`${JSON.stringify(req(1, "tools/list"))}\n`);
    // The pipe and this side's buffer hold a part of the page; the rest waits in the frontend's queue.
    assert.ok(await waitFor(() => child.stdout.readableLength > 8192), `no answer; stderr: ${err}`);
    assert.match(err, /Serving prepared answers/);
    writeFileSync(path + ".new", text("b"));
    renameSync(path + ".new", path);
    assert.ok(await waitFor(() => /Reloaded/.test(err)), `no reload; stderr: ${err}`);
    child.stdin.end(`${JSON.stringify(req(2, "tools/list"))}\n`);
    let out = "";
    child.stdout.setEncoding("utf8").on("data", (d) => (out += d));
    child.stdout.resume();
    await exited;
    const [first, second] = out.split("\n");
    assert.equal(`${first}\n`, old.out);
    assert.match(second, /^\{"jsonrpc":"2.0","id":2,"result":\{"tools":\[.*"big_b_199"/);
  } finally {
    child.kill("SIGKILL");
  }
});

// ---- damaged and hostile cache files ----

const M64 = (1n << 64n) - 1n;
const rotl = (x, r) => ((x << BigInt(r)) | (x >> BigInt(64 - r))) & M64;
const mul = (a, b) => (a * b) & M64;
function fmix(k) {
  k ^= k >> 33n;
  k = mul(k, 0xff51afd7ed558ccdn);
  k ^= k >> 33n;
  k = mul(k, 0xc4ceb9fe1a85ec53n);
  return k ^ (k >> 33n);
}
// answers.c's hash64(), for forging files whose checksum holds.
function hash64(h, buf) {
  let i = 0;
  for (; i + 8 <= buf.length; i += 8) {
    let w = buf.readBigUInt64LE(i);
    w = mul(w, 0x87c37b91114253d5n);
    w = mul(rotl(w, 31), 0x4cf5ad432745937fn);
    h = (mul(rotl(h ^ w, 27), 5n) + 0x52dce729n) & M64;
  }
  const tail = Buffer.alloc(8);
  buf.copy(tail, 0, i);
  h ^= mul(rotl(mul(tail.readBigUInt64LE(0), 0x87c37b91114253d5n), 31), 0x4cf5ad432745937fn);
  return fmix(h ^ BigInt(buf.length));
}
const HEADER = 280; // magic, format, size, sum, key_len, n_tools, page_size, n_pages, surfaces[6], notify, 9 segments, routes
function reseal(b) {
  b.writeBigUInt64LE(BigInt(b.length), 16);
  const h = Buffer.from(b.subarray(0, HEADER));
  h.writeBigUInt64LE(0n, 24);
  b.writeBigUInt64LE(hash64(hash64(1n, h), b.subarray(HEADER)), 24);
  return b;
}
const segment = (b, i) => [Number(b.readBigUInt64LE(120 + 16 * i)), Number(b.readBigUInt64LE(128 + 16 * i))];

// One session that stays open until the call is answered.
// Its stderr is read to the end: a line logged before the answer can still be unread when it comes.
async function callOnce(args, id, name) {
  const p = new RawPeer(MCP_LAZY, args, { env: { ...process.env, MCP_LAZY_CACHE_DIR: CACHE, MCP_LAZY_LOG_LEVEL: "debug" } });
  let answer;
  try {
    await p.request(req(0, "initialize", { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "answers-test", version: "1" } }));
    p.send({ jsonrpc: "2.0", method: "notifications/initialized" });
    answer = await p.request(req(id, "tools/call", { name, arguments: { message: "routed" } }), 60000);
  } finally {
    await p.close();
  }
  await Promise.race([p.stderrEnded, new Promise((r) => setTimeout(r, 20000).unref())]);
  return { answer, err: p.stderr };
}

test("prepared answers route a call to a local backend: the manifest is not read, the backend answers", async (t) => {
  const args = ["--manifest", manifestPath, "--activation=direct"];
  rmSync(CACHE, { recursive: true, force: true });
  await run(args, [req(0, "tools/list")]);
  const r = await callOnce(args, 7, "echo");
  assert.match(r.err, /Serving prepared answers/);
  assert.doesNotMatch(r.err, /^mcp-lazy: Reading the manifest/m);
  assert.equal(r.answer.id, 7);
  assert.match(JSON.stringify(r.answer.result), /Echo: routed/);
  // Several tools in one session: each goes by the routes (indexed from the second tool on), none reads the manifest.
  const p = new RawPeer(MCP_LAZY, args, { env: { ...process.env, MCP_LAZY_CACHE_DIR: CACHE, MCP_LAZY_LOG_LEVEL: "debug" } });
  const answers = [];
  try {
    await p.request(req(0, "initialize", { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "answers-test", version: "1" } }));
    p.send({ jsonrpc: "2.0", method: "notifications/initialized" });
    for (const [id, name, a] of [[1, "echo", { message: "one" }], [2, "get-sum", { a: 1, b: 2 }], [3, "echo", { message: "two" }], [4, "get-sum", { a: 3, b: 4 }]])
      answers.push(await p.request(req(id, "tools/call", { name, arguments: a }), 60000));
  } finally {
    await p.close();
  }
  await Promise.race([p.stderrEnded, new Promise((r) => setTimeout(r, 20000).unref())]);
  assert.doesNotMatch(p.stderr, /^mcp-lazy: Reading the manifest/m);
  assert.deepEqual(answers.map((a) => a.id), [1, 2, 3, 4]);
  assert.match(JSON.stringify(answers[0].result), /Echo: one/);
  assert.match(JSON.stringify(answers[1].result), /\b3\b/);
  assert.match(JSON.stringify(answers[2].result), /Echo: two/);
  assert.match(JSON.stringify(answers[3].result), /\b7\b/);
  // A tool the routes do not know is the manifest's to refuse; a damaged route table sends the call there too.
  const unknown = await callOnce(args, 8, "nope");
  assert.match(unknown.err, /^mcp-lazy: Reading the manifest for a request/m);
  assert.deepEqual(unknown.answer.error, { code: -32602, message: "Unknown tool: 'nope'" });
  await t.test("routes with a backend count of 0, checksum forged: the call goes by the manifest", async () => {
    const [name] = cacheFiles();
    const file = join(CACHE, name);
    const b = Buffer.from(readFileSync(file));
    const off = Number(b.readBigUInt64LE(HEADER - 16));
    assert.equal(b.toString("latin1", off, off + 2), "3\0", "the routes begin with the number of backends");
    b[off] = 0x30;
    writeFileSync(file, reseal(b), { mode: 0o600 });
    const forged = await callOnce(args, 9, "echo");
    assert.match(forged.err, /Serving prepared answers/);
    assert.match(forged.err, /^mcp-lazy: Reading the manifest for a request/m);
    assert.match(JSON.stringify(forged.answer.result), /Echo: routed/);
  });
});

test("a damaged, forged or foreign answers file is ignored and replaced, never served", async (t) => {
  const args = ["--manifest", manifestPath];
  const lines = sessionLines("2025-06-18", 40, 7);
  const good = (await run(args, lines, { cache: "" })).out;
  rmSync(CACHE, { recursive: true, force: true });
  await run(args, lines);
  const [name] = cacheFiles();
  const file = join(CACHE, name);
  const pristine = readFileSync(file);
  // Our own forgery with the checksum recomputed must still be taken when it changes nothing.
  writeFileSync(file, reseal(Buffer.from(pristine)), { mode: 0o600 });
  assert.match((await run(args, lines)).err, /Serving prepared answers/, "the test's checksum is answers.c's");

  const tamper = {
    "truncated": () => writeFileSync(file, pristine.subarray(0, pristine.length >> 1), { mode: 0o600 }),
    "empty": () => writeFileSync(file, ""),
    "a byte changed (checksum)": () => {
      const b = Buffer.from(pristine);
      b[b.length - 100] ^= 0x20;
      writeFileSync(file, b, { mode: 0o600 });
    },
    "a newline in an answer, checksum forged": () => {
      const b = Buffer.from(pristine);
      const [off, len] = segment(b, 0);
      b[off + Math.floor(len / 2)] = 0x0a;
      writeFileSync(file, reseal(b), { mode: 0o600 });
    },
    "a NUL in an answer, checksum forged": () => {
      const b = Buffer.from(pristine);
      const [off] = segment(b, 4);
      b[off + 3] = 0;
      writeFileSync(file, reseal(b), { mode: 0o600 });
    },
    "an answer past the end, checksum forged": () => {
      const b = Buffer.from(pristine);
      b.writeBigUInt64LE(BigInt(b.length - 10), 120 + 16 * 4);
      writeFileSync(file, reseal(b), { mode: 0o600 });
    },
    "an answer that is no object, checksum forged": () => {
      const b = Buffer.from(pristine);
      const [off] = segment(b, 4);
      b[off] = 0x5b;
      writeFileSync(file, reseal(b), { mode: 0o600 });
    },
    "a page count out of range, checksum forged": () => {
      const b = Buffer.from(pristine);
      b.writeBigUInt64LE(1n << 62n, 56);
      writeFileSync(file, reseal(b), { mode: 0o600 });
    },
    "another manifest's answers": () => {
      const b = Buffer.from(pristine);
      const keyEnd = HEADER + Number(b.readBigUInt64LE(32));
      const at = b.indexOf("demo.yaml", HEADER);
      assert.ok(at > 0 && at < keyEnd);
      b.write("dema", at);
      writeFileSync(file, reseal(b), { mode: 0o600 });
    },
    "writable by the group": () => {
      writeFileSync(file, pristine, { mode: 0o600 });
      chmodSync(file, 0o620);
    },
    "owned by someone else": () => {
      writeFileSync(file, pristine, { mode: 0o600 });
      chownSync(file, 65534, 65534);
    },
    "a symbolic link": () => {
      writeFileSync(join(dir, "elsewhere.answers"), pristine, { mode: 0o600 });
      symlinkSync(join(dir, "elsewhere.answers"), file);
    },
    "a FIFO": () => execFileSync("mkfifo", ["-m", "600", file]),
    "a directory": () => mkdirSync(file, { mode: 0o700 }),
  };
  for (const [what, fn] of Object.entries(tamper)) {
    await t.test(what, async () => {
      rmSync(file, { recursive: true, force: true });
      fn();
      if (process.getuid() !== 0 && what === "owned by someone else") return t.skip("needs root");
      const r = await run(args, lines);
      assert.doesNotMatch(r.err, /Serving prepared answers/, `${what}: must not be served`);
      assert.equal(r.out, good, `${what}: answered from the manifest`);
      // Replaced by good answers where a file can go (a directory stays: then there is no cache).
      const st = statSync(file, { throwIfNoEntry: false });
      if (what !== "a directory") {
        assert.ok(st?.isFile() && (st.mode & 0o777) === 0o600, `${what}: replaced`);
        const again = await run(args, lines);
        assert.match(again.err, /Serving prepared answers/, `${what}: the replacement is served`);
        assert.equal(again.out, good);
      }
    });
  }
  rmSync(file, { recursive: true, force: true });
  unlinkSync(join(dir, "elsewhere.answers"));

  // The parsed manifest's cache file (the same name, .json) as a FIFO: opening it hung the frontend.
  await t.test("the parsed manifest's cache file is a FIFO", async () => {
    const tree = file.replace(/\.answers$/, ".json");
    rmSync(tree, { force: true });
    execFileSync("mkfifo", ["-m", "600", tree]);
    const r = await run(args, lines);
    assert.equal(r.out, good);
    rmSync(tree, { force: true });
  });
});
