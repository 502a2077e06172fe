// A manifest reload in the middle of a burst of requests: a client writes many lines at once (single
// requests and JSON-RPC batches) and does not read its answers, so the frontend's output backs up past
// its limit and it stops reading with lines of the burst still to handle; the manifest changes then.
// Every request gets exactly one answer, each from one manifest (a batch's members all from the same
// one), the old manifest's up to the list_changed notifications and the new one's after them; nothing
// is lost, nothing is garbled. With prepared answers (the cache) and without. No systemd needed.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { MCP_LAZY, cleanupPeers, waitFor } from "./lib/env.mjs";
import { onLines } from "./lib/lines.mjs";

after(cleanupPeers);
const dir = mkdtempSync(join(tmpdir(), "mcp-lazy-reload-burst-"));
after(() => rmSync(dir, { recursive: true, force: true }));

const N_TOOLS = 100;
// One manifest of a tag: every name it lists carries the tag, so an answer says which one it came from.
// A tools/list answer is about 410 KB: the burst's 86 of them are well past the frontend's 8 MiB of
// unsent output.
const manifestText = (tag) =>
  `server:\n  page_size: 0\nbackends:\n  b_${tag}:\n    command: [/nonexistent/${tag}]\n` +
  `    capabilities: {"tools":{"listChanged":true},"prompts":{"listChanged":true},"resources":{"listChanged":true}}\n` +
  `    resources: [{uri: "r:${tag}", name: res_${tag}}]\n    prompts: [{name: p_${tag}}]\n` +
  `tools:\n${Array.from({ length: N_TOOLS }, (_, i) => `  - {name: ${tag}_${i}, backend: b_${tag}, description: "${tag.repeat(2000)}", input_schema: {type: object}}\n`).join("")}`;

const req = (id, method, params) => ({ jsonrpc: "2.0", id, method, ...(params ? { params } : {}) });

// The burst: K lines, each a single request or a batch of three plus a notification. Four are calls,
// two among the first lines (the old manifest's: aa_0 goes to its backend, bb_0 is unknown) and two
// among the last (the new one's: the other way round); their answers come when the backend's do.
const K = 120;
const CALLS = { 4: ["call-old-aa", "aa_0"], 5: ["call-old-bb", "bb_0"], [K - 4]: ["call-new-aa", "aa_0"], [K - 3]: ["call-new-bb", "bb_0"] };
function burst() {
  const lines = [];
  const ids = [];
  for (let k = 0; k < K; k++) {
    if (CALLS[k]) {
      ids.push(CALLS[k][0]);
      lines.push(JSON.stringify(req(CALLS[k][0], "tools/call", { name: CALLS[k][1], arguments: {} })));
    } else if (k % 4 === 2) {
      const batch = [req(`b${k}-t`, "tools/list"), req(`b${k}-r`, "resources/list"), { jsonrpc: "2.0", method: "notifications/roots/list_changed" }, req(`b${k}-p`, "prompts/list")];
      ids.push(`b${k}-t`, `b${k}-r`, `b${k}-p`);
      lines.push(JSON.stringify(batch));
    } else {
      const method = k % 4 === 3 ? "prompts/list" : "tools/list";
      ids.push(k);
      lines.push(JSON.stringify(req(k, method)));
    }
  }
  return { text: lines.join("\n") + "\n", ids };
}

// The tag of the manifest an answer came from, checking that the answer is that manifest's, whole.
function tagOf(m) {
  const r = m.result;
  assert.ok(r, `an error: ${JSON.stringify(m).slice(0, 300)}`);
  if (r.tools) {
    const tag = r.tools[0]?.name.split("_")[0];
    assert.deepEqual(
      r.tools.map((t) => t.name),
      Array.from({ length: N_TOOLS }, (_, i) => `${tag}_${i}`),
    );
    assert.ok(r.tools.every((t) => t.description === tag.repeat(2000)), "descriptions whole");
    assert.equal(r.nextCursor, undefined);
    return tag;
  }
  if (r.resources) {
    assert.equal(r.resources.length, 1);
    return r.resources[0].uri.slice(2);
  }
  assert.equal(r.prompts?.length, 1, JSON.stringify(m));
  return r.prompts[0].name.slice(2);
}

async function reloadMidBurst(cache) {
  const path = join(dir, `m-${cache ? "cache" : "nocache"}.yaml`);
  writeFileSync(path, manifestText("aa"));
  const child = spawn(MCP_LAZY, ["--manifest", path], {
    env: { ...process.env, MCP_LAZY_CACHE_DIR: cache, MCP_LAZY_LOG_LEVEL: "debug" },
    stdio: ["pipe", "pipe", "pipe"],
  });
  after(() => child.kill("SIGKILL"));
  let gone = false;
  const exited = new Promise((r) =>
    child.on("exit", (code, signal) => {
      gone = true;
      r({ code, signal });
    }),
  );
  let err = "";
  child.stderr.setEncoding("utf8").on("data", (d) => (err += d));
  const lines = [];
  child.stdin.write(`${JSON.stringify(req(0, "initialize", { protocolVersion: "2025-03-26", capabilities: {}, clientInfo: { name: "t", version: "1" } }))}\n`);
  const initialized = new Promise((resolve) => {
    child.stdout.once("data", (d) => resolve(d));
  });
  const first = JSON.parse(String(await initialized).split("\n")[0]);
  assert.equal(first.result?.protocolVersion, "2025-03-26", String(err));
  child.stdout.pause(); // the client stops reading
  const { text, ids } = burst();
  child.stdin.write(`${JSON.stringify({ jsonrpc: "2.0", method: "notifications/initialized" })}\n${text}`);

  // Answers of the burst have started to come: the frontend has handled some of its lines, and, its
  // output backed up past the limit, waits with the rest unread (the burst's answers are ~36 MB: far
  // more than the limit, the pipe and this side's buffer hold).
  assert.ok(await waitFor(() => child.stdout.readableLength > 0, 20000), `no answer; stderr: ${err}`);
  if (cache) assert.match(err, /Prepared the answers in /);
  writeFileSync(`${path}.new`, manifestText("bb"));
  renameSync(`${path}.new`, path);
  assert.ok(await waitFor(() => /Reloaded/.test(err), 20000), `no reload; stderr: ${err}`);
  assert.match(err, cache ? /Reloaded .*: 100 tools \(prepared answers\)\./ : /Reloaded .*: 1 backends, 100 tools\./);

  // The client reads again: every line of the burst gets one message (a batch: one array), and the
  // three list_changed come; then it ends its input (a bound for a hang, not a timing).
  onLines(child.stdout, (l) => lines.push(l));
  child.stdout.resume();
  await waitFor(() => lines.length >= K + 3 || gone, 60000);
  child.stdin.end();
  const timer = setTimeout(() => child.kill("SIGKILL"), 60000);
  const { code, signal } = await exited;
  clearTimeout(timer);
  assert.equal(code, 0, `exit ${code ?? signal}; ${lines.length} lines; stderr: ${err}`);
  assert.equal(lines.length, K + 3, err);

  const msgs = lines.map((l) => JSON.parse(l));
  const answered = [];
  const tags = []; // in the order written, "changed" where a list_changed notification came
  let notes = [];
  const calls = {};
  for (const m of msgs) {
    if (typeof m.id === "string" && m.id.startsWith("call-")) {
      calls[m.id] = m.error?.message ?? m.result?.content?.[0]?.text;
      answered.push(m.id);
    } else if (Array.isArray(m)) {
      assert.equal(m.length, 3, JSON.stringify(m).slice(0, 300));
      const t = m.map(tagOf);
      assert.ok(t.every((x) => x === t[0]), `one batch, one manifest: ${t}`);
      m.forEach((x) => answered.push(x.id));
      tags.push(t[0]);
    } else if (m.method) {
      notes.push(m.method);
      tags.push("changed");
    } else {
      answered.push(m.id);
      tags.push(tagOf(m));
    }
  }
  // Exactly one answer per request, in the order sent but for the calls, which wait for a backend.
  const inOrder = (a) => a.filter((id) => !String(id).startsWith("call-"));
  assert.deepEqual(inOrder(answered), inOrder(ids));
  assert.deepEqual([...answered].sort(), [...ids].sort());
  // Each call routed by the manifest in force when its line was handled.
  assert.deepEqual(calls, {
    "call-old-aa": "cannot start backend 'b_aa': /nonexistent/aa: No such file or directory",
    "call-old-bb": "Unknown tool: 'bb_0'",
    "call-new-aa": "Unknown tool: 'aa_0'",
    "call-new-bb": "cannot start backend 'b_bb': /nonexistent/bb: No such file or directory",
  });
  notes = notes.sort();
  assert.deepEqual(notes, ["notifications/prompts/list_changed", "notifications/resources/list_changed", "notifications/tools/list_changed"]);
  // The old manifest's answers, the notifications, the new one's: the reload fell inside the burst.
  const firstChanged = tags.indexOf("changed");
  assert.ok(firstChanged > 0, "some answers came from the old manifest");
  assert.deepEqual(tags.slice(firstChanged, firstChanged + 3), ["changed", "changed", "changed"]);
  assert.ok(tags.slice(0, firstChanged).every((t) => t === "aa"), tags.join(" "));
  assert.ok(firstChanged + 3 < tags.length, "some answers came from the new manifest");
  assert.ok(tags.slice(firstChanged + 3).every((t) => t === "bb"), tags.join(" "));
  assert.doesNotMatch(err, /AddressSanitizer|runtime error|cannot be used/);
}

test("a manifest reload in the middle of a burst of lines and batches: each request answered once, from one manifest, old then new (no cache)", async () => {
  await reloadMidBurst("");
});

test("the same with prepared answers (the cache)", async () => {
  const cache = join(dir, "cache");
  await reloadMidBurst(cache);
});
