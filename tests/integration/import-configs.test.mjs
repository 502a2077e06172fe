// mcp-lazy import and refresh: real client configs in a throwaway home, real servers from npm.
// Here without systemd (the entries then start their backends directly); the whole journey under
// a user manager is in import.test.mjs.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { INIT, MCP_LAZY, RawPeer, SERVER_SCRIPTS, TESTS, cleanupPeers, processesMatching } from "./lib/env.mjs";
import { claudeCodeConfig, desktopConfig, compareWithDirect, CLIENT_CAPS } from "./lib/import.mjs";

const base = mkdtempSync(join(tmpdir(), "mcp-lazy-import-"));
after(async () => {
  await cleanupPeers();
  rmSync(base, { recursive: true, force: true });
});

let homes = 0;
function home() {
  const h = join(base, `home${++homes}`);
  mkdirSync(join(h, ".config/Claude"), { recursive: true });
  return h;
}

// Runs mcp-lazy with a clean user environment of that home.
function lazy(h, args, { timeout = 120000, cwd = h } = {}) {
  const env = { PATH: process.env.PATH, HOME: h, XDG_STATE_HOME: join(h, ".local/state") };
  const r = spawnSync(MCP_LAZY, args, { env, cwd, encoding: "utf8", timeout });
  return { code: r.status, out: r.stdout, err: r.stderr, all: r.stdout + r.stderr };
}

test("import: Claude Code and Claude Desktop configs become a manifest; only the imported entries change", async () => {
  const h = home();
  const manifest = join(h, "manifest.yaml");
  const code = claudeCodeConfig(h);
  const desk = desktopConfig(h);
  writeFileSync(join(h, ".claude.json"), code.text);
  writeFileSync(join(h, ".config/Claude/claude_desktop_config.json"), desk.text);
  chmodSync(join(h, ".claude.json"), 0o640);

  // --dry-run: prints, changes nothing.
  const dry = lazy(h, ["import", "--no-enable", "--manifest", manifest, "--dry-run"]);
  assert.equal(dry.code, 0, dry.all);
  assert.match(dry.out, /would be written/);
  assert.equal(existsSync(manifest), false);
  assert.equal(readFileSync(join(h, ".claude.json"), "utf8"), code.text);

  const r = lazy(h, ["import", "--no-enable", "--manifest", manifest]);
  assert.equal(r.code, 0, r.all);
  // The mapping: server -> backend, the remote one left alone and said so.
  assert.match(r.out, /^memory\s+claude-code\s+-> backend 'memory'$/m);
  assert.match(r.out, /^my files! \(project\)\s+claude-code\s+-> backend 'my-files'$/m);
  assert.match(r.out, /^everything\s+claude-desktop\s+-> backend 'everything'$/m);
  assert.match(r.out, /^remote-api\s+claude-code\s+a remote server: left as it is$/m);
  assert.match(r.out, /^weather\s+claude-desktop\s+a remote server: left as it is$/m);

  // Every byte but the imported entries' values is the same; those are exactly the mcp-lazy entry.
  const backendArgs = (name) => ["--backend", name === "my files!" ? "my-files" : name, "--manifest", manifest];
  assert.equal(readFileSync(join(h, ".claude.json"), "utf8"), code.rewritten(MCP_LAZY, backendArgs));
  assert.equal(readFileSync(join(h, ".config/Claude/claude_desktop_config.json"), "utf8"), desk.rewritten(MCP_LAZY, backendArgs));
  assert.equal(statSync(join(h, ".claude.json")).mode & 0o777, 0o640, "the config keeps its mode");
  assert.equal(readFileSync(join(h, ".claude.json.mcp-lazy-backup"), "utf8"), code.text);

  // The manifest: readable YAML, 0600 because it holds env values, and valid.
  assert.equal(statSync(manifest).mode & 0o777, 0o600);
  const m = readFileSync(manifest, "utf8");
  assert.match(m, /^backends:\n  memory:\n    command: \[\/usr\/bin\/node, \S+server-memory\/dist\/index\.js\]\n    env:\n      MEMORY_FILE_PATH: \S+\n    protocol: legacy\n    server_info:\n      name: memory-server\n/m);
  assert.match(m, /^  my-files:\n    command: .*\n    cwd: \/tmp\n/m);
  const check = spawnSync(MCP_LAZY, ["check", manifest], { encoding: "utf8" });
  assert.equal(check.status, 0, check.stderr);
  assert.match(check.stdout, /3 backends, \d+ tools/);

  // What a client launching the rewritten entries sees is what it saw from the servers themselves.
  const cfg = JSON.parse(readFileSync(join(h, ".claude.json"), "utf8"));
  await compareWithDirect(cfg.mcpServers.memory, code.direct.memory, CLIENT_CAPS["claude-code"], { env: { HOME: h }, call: ["read_graph", {}] });
  const dcfg = JSON.parse(readFileSync(join(h, ".config/Claude/claude_desktop_config.json"), "utf8"));
  await compareWithDirect(dcfg.mcpServers.everything, desk.direct.everything, CLIENT_CAPS["claude-desktop"], { env: { HOME: h }, call: ["echo", { message: "hi" }] });

  // Importing again changes nothing more: the entries already go through mcp-lazy.
  const again = lazy(h, ["import", "--no-enable", "--manifest", manifest]);
  assert.match(again.out, /^memory\s+claude-code\s+already goes through mcp-lazy$/m);

  // --undo puts back both files byte for byte and forgets them.
  const u = lazy(h, ["import", "--undo"]);
  assert.equal(u.code, 0, u.all);
  assert.equal(readFileSync(join(h, ".claude.json"), "utf8"), code.text);
  assert.equal(statSync(join(h, ".claude.json")).mode & 0o777, 0o640);
  assert.equal(readFileSync(join(h, ".config/Claude/claude_desktop_config.json"), "utf8"), desk.text);
  assert.equal(existsSync(join(h, ".claude.json.mcp-lazy-backup")), false);
  assert.match(lazy(h, ["import", "--undo"]).out, /Nothing to undo/);
  assert.equal(existsSync(manifest), true, "the manifest stays");
});

test("import: VS Code (JSONC, servers, type stdio) and Cursor, --client and --from", async () => {
  const h = home();
  const manifest = join(h, "m.yaml");
  mkdirSync(join(h, ".config/Code/User"), { recursive: true });
  mkdirSync(join(h, ".cursor"), { recursive: true });
  const vscode = `// my servers
{
\t"servers": {
\t\t/* the knowledge graph */
\t\t"memory": {
\t\t\t"type": "stdio",
\t\t\t"command": "node",
\t\t\t"args": ["${SERVER_SCRIPTS.memory}"],
\t\t},
\t\t"gh": { "type": "http", "url": "https://api.example.com/mcp/" },
\t},
\t"inputs": []
}
`;
  writeFileSync(join(h, ".config/Code/User/mcp.json"), vscode);
  const cursor = `{"mcpServers":{"mem":{"command":"node","args":["${SERVER_SCRIPTS.memory}"]},"mem2":{"command":"node","args":["${SERVER_SCRIPTS.memory}"],"env":{"MEMORY_FILE_PATH":"${h}/c.jsonl"}}}}`;
  writeFileSync(join(h, ".cursor/mcp.json"), cursor);

  const r = lazy(h, ["import", "--no-enable", "--client", "vscode", "--manifest", manifest]);
  assert.equal(r.code, 0, r.all);
  const want = vscode.replace(
    /"memory": \{[^}]*\},/,
    `"memory": {\n\t\t\t"type": "stdio",\n\t\t\t"command": ${JSON.stringify(MCP_LAZY)},\n\t\t\t"args": ["--backend", "memory", "--manifest", ${JSON.stringify(manifest)}]\n\t\t},`,
  );
  assert.equal(readFileSync(join(h, ".config/Code/User/mcp.json"), "utf8"), want);
  assert.equal(readFileSync(join(h, ".cursor/mcp.json"), "utf8"), cursor, "--client vscode leaves Cursor alone");
  // VS Code declares sampling, elicitation and roots: the manifest says which capabilities it spoke with.
  assert.match(readFileSync(manifest, "utf8"), /client_capabilities:\n      roots: \{listChanged: true\}|client_capabilities:\n      roots:\n        listChanged: true\n      sampling: \{\}/);

  const c = lazy(h, ["import", "--no-enable", "--from", join(h, ".cursor/mcp.json"), "--manifest", manifest]);
  assert.equal(c.code, 1, c.all);
  // The same server as VS Code's: the same backend. The same server with another env would be a
  // second backend with the same tool names, which one manifest cannot hold: said, and left alone.
  assert.match(c.out, /^mem\s+cursor\s+-> backend 'memory'$/m);
  assert.match(c.out, /^mem2\s+cursor\s+FAILED, left as it is: its tool 'create_entities' is already served by backend 'memory' of the manifest; import it into a manifest of its own with --manifest$/m);
  assert.equal(
    readFileSync(join(h, ".cursor/mcp.json"), "utf8"),
    cursor.replace(/"mem":\{[^}]*\}/, `"mem":{"command":${JSON.stringify(MCP_LAZY)}, "args":["--backend", "memory", "--manifest", ${JSON.stringify(manifest)}]}`),
  );
  const m = readFileSync(manifest, "utf8");
  assert.equal(m.match(/^  [\w.-]+:\n    command:/gm).length, 1, m);
});

test("import failures: missing, crashing and hanging servers are reported with their stderr and left untouched", () => {
  const h = home();
  const manifest = join(h, "m.yaml");
  const cfg = `{
  "mcpServers": {
    "ghost": { "command": "mcp-server-that-does-not-exist", "args": [] },
    "crash": { "command": "node", "args": ["-e", "console.error('Error: Cannot find module lodash'); console.error('    at Module._resolveFilename'); process.exit(7)"] },
    "hang": { "command": "node", "args": ["-e", "console.error('warming up forever'); setInterval(() => {}, 1000) /* ${h} */"] },
    "memory": { "command": "node", "args": [${JSON.stringify(SERVER_SCRIPTS.memory)}] }
  }
}
`;
  writeFileSync(join(h, ".claude.json"), cfg);
  const r = lazy(h, ["import", "--no-enable", "--manifest", manifest, "--timeout", "3s"]);
  assert.equal(r.code, 1, "a failure is a non-zero exit: " + r.all);
  assert.match(r.out, /^ghost\s+claude-code\s+FAILED, left as it is: cannot start mcp-server-that-does-not-exist: No such file or directory$/m);
  assert.match(r.out, /^crash\s+claude-code\s+FAILED, left as it is: it exited with status 7 before answering initialize; its stderr ended with:\n  \| Error: Cannot find module lodash\n  \|     at Module\._resolveFilename$/m);
  assert.match(r.out, /^hang\s+claude-code\s+FAILED, left as it is: it did not answer initialize within 3s; its stderr ended with:\n  \| warming up forever$/m);
  assert.match(r.out, /^memory\s+claude-code\s+-> backend 'memory'$/m);
  // Only memory's entry changed; the others are byte for byte what they were.
  const now = readFileSync(join(h, ".claude.json"), "utf8");
  assert.equal(now.replace(/"memory": \{[^}]*\}/, "X"), cfg.replace(/"memory": \{[^}]*\}/, "X"));
  assert.match(now, /"memory": \{ "command": "[^"]+mcp-lazy", "args": \["--backend", "memory", "--manifest", "[^"]+"\] \}/);
  // The hanging server was stopped, its whole process group.
  // (Matched by this test's home: other suites on the machine may run the same test right now.)
  assert.deepEqual(processesMatching(`/* ${h} */`), []);
});

test("import: every page of tools/list; servers whose lists a manifest cannot hold are refused one by one", () => {
  const h = home();
  const manifest = join(h, "m.yaml");
  const script = join(TESTS, "fixtures/scripted-server.mjs");
  const entry = (...args) => ({ command: "node", args: [script, ...args] });
  const cfg = JSON.stringify({ mcpServers: { paged: entry("paged", "7"), badname: entry("bad-name"), deep: entry("deep"), garbage: entry("garbage") } }, null, 2);
  writeFileSync(join(h, ".claude.json"), cfg);
  const r = lazy(h, ["import", "--no-enable", "--manifest", manifest]);
  assert.equal(r.code, 1, r.all);
  assert.match(r.out, /^paged\s+claude-code\s+-> backend 'paged'$/m);
  assert.match(r.out, /^  scripted-paged 1\.0\.0: 7 tools$/m);
  assert.deepEqual([...readFileSync(manifest, "utf8").matchAll(/^- name: (t\d)$/gm)].map((m) => m[1]), ["t0", "t1", "t2", "t3", "t4", "t5", "t6"]);
  assert.match(r.out, /^badname\s+claude-code\s+FAILED, left as it is: what it lists does not fit a manifest: .*tool name 'not fine!' is invalid/m);
  assert.match(r.out, /^deep\s+claude-code\s+FAILED, left as it is: what it lists does not fit a manifest: it sends JSON nested deeper than a manifest takes \(64 levels\)/m);
  assert.match(r.out, /^garbage\s+claude-code\s+FAILED, left as it is: it wrote something that is not JSON-RPC on stdout: 'Server listening on stdio'(;|$)/m);
  const now = JSON.parse(readFileSync(join(h, ".claude.json"), "utf8")).mcpServers;
  assert.deepEqual(now.badname, entry("bad-name"));
  assert.deepEqual(now.paged.args, ["--backend", "paged", "--manifest", manifest]);
});

test("import failures: a config that does not parse is named with line and column and left untouched", () => {
  const h = home();
  const broken = `{\n  "mcpServers": {\n    "memory": { "command": "node" "args": [] }\n  }\n}\n`;
  writeFileSync(join(h, ".claude.json"), broken);
  const r = lazy(h, ["import", "--no-enable", "--manifest", join(h, "m.yaml")]);
  assert.equal(r.code, 1);
  assert.match(r.err, new RegExp(`^mcp-lazy: ${h}/\\.claude\\.json:3:35: not valid JSON here; left untouched$`, "m"));
  assert.equal(readFileSync(join(h, ".claude.json"), "utf8"), broken);
  assert.equal(existsSync(join(h, "m.yaml")), false);
  // Two equal keys: cJSON would read the first, a client maybe the other. Refused where it matters.
  const dup = `{"mcpServers": {"memory": {"command": "node", "command": "evil"}}}`;
  writeFileSync(join(h, ".claude.json"), dup);
  const d = lazy(h, ["import", "--no-enable", "--manifest", join(h, "m.yaml")]);
  assert.equal(d.code, 1);
  assert.match(d.err, new RegExp(`^mcp-lazy: ${h}/\\.claude\\.json:1:47: key 'command' appears twice in server 'memory'; left untouched$`, "m"));
  assert.equal(readFileSync(join(h, ".claude.json"), "utf8"), dup);
  // And a manifest that does not parse: named, nothing changed.
  writeFileSync(join(h, ".claude.json"), `{"mcpServers": {"memory": {"command": "node", "args": [${JSON.stringify(SERVER_SCRIPTS.memory)}]}}}`);
  writeFileSync(join(h, "m.yaml"), "backends:\n  x: [unclosed\n");
  const r2 = lazy(h, ["import", "--no-enable", "--manifest", join(h, "m.yaml")]);
  assert.equal(r2.code, 1);
  assert.match(r2.err, new RegExp(`^mcp-lazy: ${h}/m\\.yaml:3:1: .*; nothing was changed$`, "m"));
  assert.equal(readFileSync(join(h, "m.yaml"), "utf8"), "backends:\n  x: [unclosed\n");
});

test("import failures: a manifest that cannot be written changes nothing", () => {
  const h = home();
  const cfg = `{"mcpServers": {"memory": {"command": "node", "args": [${JSON.stringify(SERVER_SCRIPTS.memory)}]}}}`;
  writeFileSync(join(h, ".claude.json"), cfg);
  // A manifest path below a regular file can never be written, not even by root.
  writeFileSync(join(h, "file"), "");
  const r = lazy(h, ["import", "--no-enable", "--manifest", join(h, "file/manifest.yaml")]);
  assert.equal(r.code, 1);
  assert.match(r.err, /^mcp-lazy: \S+\/file\/manifest\.yaml: Not a directory; nothing was changed$/m);
  assert.equal(readFileSync(join(h, ".claude.json"), "utf8"), cfg);
  assert.equal(existsSync(join(h, ".claude.json.mcp-lazy-backup")), false);
});

test("refresh: says what changed against the servers, writes it (running frontends hear of it); --check fails on a difference", async () => {
  const h = home();
  const manifest = join(h, "m.yaml");
  writeFileSync(join(h, ".claude.json"), `{"mcpServers": {"memory": {"command": "node", "args": [${JSON.stringify(SERVER_SCRIPTS.memory)}]}}}`);
  assert.equal(lazy(h, ["import", "--no-enable", "--manifest", manifest]).code, 0);
  const fresh = readFileSync(manifest, "utf8");
  let c = lazy(h, ["refresh", "--check", "--manifest", manifest]);
  assert.equal(c.code, 0, c.all);
  assert.match(c.out, /^memory:\n  matches the manifest$/m);

  // Drift: a tool gone, one described differently, the server's version changed.
  const drifted = fresh
    .replace(/- name: read_graph\n(  .*\n)+?(?=- name:)/, "")
    .replace(/(- name: search_nodes\n(?:  .*\n)*?  description: ).*/, "$1old words")
    .replace(/version: '(\d+\.\d+\.\d+)'/, "version: '0.0.1'");
  assert.notEqual(drifted, fresh);
  writeFileSync(manifest, drifted);
  c = lazy(h, ["refresh", "--check", "--manifest", manifest]);
  assert.equal(c.code, 1, c.all);
  assert.match(c.out, /^  tools: 1 added, 0 removed, 1 changed: \+read_graph ~search_nodes$/m);
  assert.match(c.out, /^  server_info: \{"name":"memory-server","version":"0\.0\.1"\} -> \{"name":"memory-server","version":"[\d.]+"\}$/m);
  assert.match(c.out, /run 'mcp-lazy refresh'/);
  assert.equal(readFileSync(manifest, "utf8"), drifted, "--check writes nothing");

  // A client is connected through the entry while refresh writes: it hears the lists changed.
  const peer = new RawPeer(MCP_LAZY, ["--backend", "memory", "--manifest", manifest]);
  await peer.request(INIT());
  const before = await peer.request({ jsonrpc: "2.0", id: 1, method: "tools/list" });
  assert.equal(before.result.tools.some((t) => t.name === "read_graph"), false);
  const w = lazy(h, ["refresh", "memory", "--manifest", manifest]);
  assert.equal(w.code, 0, w.all);
  assert.match(w.out, /Wrote /);
  assert.equal(readFileSync(manifest, "utf8"), fresh, "refresh writes what import wrote");
  const [note] = await peer.next(1, 10000);
  assert.equal(note.method, "notifications/tools/list_changed");
  const now = await peer.request({ jsonrpc: "2.0", id: 2, method: "tools/list" });
  assert.equal(now.result.tools.some((t) => t.name === "read_graph"), true);
  await peer.close();
  assert.equal(lazy(h, ["refresh", "--check", "--manifest", manifest]).code, 0);
  assert.match(lazy(h, ["refresh", "nosuch", "--manifest", manifest]).err, /has no backend 'nosuch'/);
});
