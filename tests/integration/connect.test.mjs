// mcp-lazy connect NAME: a stdio MCP server onto a backend's shim on this host (here without
// systemd: it starts the shim directly), and what it says when it cannot reach the backend.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fleetManifest } from "./lib/fleet.mjs";
import { INIT, MCP_LAZY, RawPeer, SHIMD, cleanupPeers } from "./lib/env.mjs";

after(cleanupPeers);

const dir = mkdtempSync(join(tmpdir(), "mcp-lazy-connect-"));
const manifest = join(dir, "manifest.yaml");
writeFileSync(manifest, fleetManifest());

test("connect relays a whole session to the backend's shim, pipelined, and ends with it", async () => {
  const p = new RawPeer(MCP_LAZY, ["connect", "everything", "--manifest", manifest, "--activation=direct", "--shimd", SHIMD]);
  const init = await p.request(INIT("2025-11-25"), 30000);
  assert.equal(init.result.protocolVersion, "2025-11-25");
  p.send({ jsonrpc: "2.0", method: "notifications/initialized" });
  for (let i = 1; i <= 5; i++)
    p.send({ jsonrpc: "2.0", id: i, method: "tools/call", params: { name: "get-sum", arguments: { a: i, b: 1 } } });
  // Responses, in any order, and whatever the server notifies meanwhile (it passes through).
  const answers = [];
  while (answers.length < 5) for (const m of await p.next(1, 30000)) if ("id" in m) answers.push(m);
  answers.sort((x, y) => x.id - y.id);
  assert.deepEqual(answers.map((a) => a.result.content[0].text), [1, 2, 3, 4, 5].map((i) => `The sum of ${i} and 1 is ${i + 1}.`));
  // End of input: the answers already made arrive, then the relay exits 0.
  p.send({ jsonrpc: "2.0", id: 9, method: "tools/call", params: { name: "echo", arguments: { message: "last" } } });
  p.child.stdin.end();
  let last;
  while (!last) for (const m of await p.next(1, 30000)) if (m.id === 9) last = m;
  assert.equal(last.result.content[0].text, "Echo: last");
  assert.deepEqual(await p.exitWithin(), { code: 0, signal: null });
});

test("connect to a backend it cannot reach: exit 69 and one line saying why", () => {
  const r = spawnSync(MCP_LAZY, ["connect", "nosuch", "--manifest", manifest, "--activation=direct"], { input: "", encoding: "utf8" });
  assert.equal(r.status, 69);
  assert.match(r.stderr, /^mcp-lazy connect: backend 'nosuch' is not running \(no socket at \S+\/nosuch\.sock\) and is not in \S+manifest\.yaml to start it from$/m);
  assert.equal(r.stdout, "");
  const bad = spawnSync(MCP_LAZY, ["connect", "../etc"], { input: "", encoding: "utf8" });
  assert.equal(bad.status, 2);
  assert.match(bad.stderr, /'\.\.\/etc' is not a backend name/);
});
