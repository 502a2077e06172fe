// make demo: the journey of a user who has MCP servers configured in Claude Code and Claude Desktop.
// In a throwaway home: `mcp-lazy import` turns their configs into a manifest and points each entry at
// `mcp-lazy --backend NAME`; then the official SDK client launches an entry exactly as the client
// would, lists its tools without anything started, calls one (the backend starts), and the session
// ends (the backend goes). `mcp-lazy import --undo` puts the configs back. Without a booted systemd
// (a fresh machine, a container) the entries start their backends directly; with one, import enables
// a socket per backend in your manager.
import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { ListRootsRequestSchema } from "@modelcontextprotocol/sdk/types.js";
import { MCP_LAZY, SERVER_SCRIPTS, cmdline, descendants } from "./integration/lib/env.mjs";

const home = mkdtempSync(join(tmpdir(), "mcp-lazy-demo-"));
const manifest = join(home, ".config/mcp-lazy/manifest.yaml");
const env = { PATH: process.env.PATH, HOME: home };
const ms = (t0) => `${(performance.now() - t0).toFixed(1)} ms`;
const show = (text) => console.log(text.replace(/^/gm, "  | ").replaceAll(home, "~"));
function lazy(...args) {
  const r = spawnSync(MCP_LAZY, args, { env, cwd: home, encoding: "utf8" });
  show((r.stderr + r.stdout).trimEnd());
  return r;
}
const running = (pid) =>
  descendants(pid)
    .map((p) => cmdline(p))
    .filter((c) => !c.includes("mcp-lazy-shimd"))
    .map((c) => c.replace(/.*node_modules\/@modelcontextprotocol\/([^/]+).*/, "$1"));

try {
  // 1. What the user has: Claude Code and Claude Desktop configs, three local servers and a remote one.
  mkdirSync(join(home, ".config/Claude"), { recursive: true });
  writeFileSync(
    join(home, ".claude.json"),
    JSON.stringify(
      {
        numStartups: 7,
        mcpServers: {
          memory: { type: "stdio", command: "node", args: [SERVER_SCRIPTS.memory], env: { MEMORY_FILE_PATH: join(home, "memory.jsonl") } },
          files: { type: "stdio", command: "node", args: [SERVER_SCRIPTS.filesystem, home] },
          docs: { type: "http", url: "https://mcp.example.com/mcp" },
        },
      },
      null,
      2,
    ) + "\n",
  );
  writeFileSync(
    join(home, ".config/Claude/claude_desktop_config.json"),
    JSON.stringify({ mcpServers: { everything: { command: "node", args: [SERVER_SCRIPTS.everything, "stdio"] } } }, null, 2) + "\n",
  );
  console.log(`A home with MCP servers in Claude Code and Claude Desktop: ${home}\n`);

  // 2. Import: each server started once to read what it offers; the manifest written; entries rewritten.
  // The demo leaves this machine's service manager alone (--no-enable); the entries then start
  // their backends directly, as they do on any machine without systemd.
  console.log(`$ mcp-lazy import --no-enable --manifest ${manifest.replace(home, "~")}`);
  let t0 = performance.now();
  const imp = lazy("import", "--no-enable", "--manifest", manifest);
  console.log(`(${ms(t0)}, exit ${imp.status})\n`);
  const cfg = JSON.parse(readFileSync(join(home, ".claude.json"), "utf8"));
  console.log("~/.claude.json now says:");
  show(JSON.stringify(cfg.mcpServers, null, 2));

  // 3. Status before anything ran (without systemd it can only say what the manifest holds).
  const status = () => {
    console.log("\n$ mcp-lazy status");
    lazy("status", "--manifest", manifest);
  };
  status();

  // 4. Claude Code's view: it launches the entry as written, with the capabilities it declares.
  const entry = cfg.mcpServers.memory;
  // Where systemd runs, sockets would be the way; without enabling them, start the backend directly.
  const direct = spawnSync("test", ["-d", "/run/systemd/system"]).status === 0 ? ["--activation=direct"] : [];
  const transport = new StdioClientTransport({ command: entry.command, args: [...entry.args, ...direct], env, stderr: "pipe" });
  transport.stderr?.on("data", (d) => process.stderr.write(`  stderr| ${d}`));
  const client = new Client({ name: "demo", version: "1.0.0" }, { capabilities: { roots: { listChanged: true }, elicitation: {} } });
  client.setRequestHandler(ListRootsRequestSchema, () => ({ roots: [] }));
  t0 = performance.now();
  await client.connect(transport);
  console.log(`\nThe 'memory' entry: initialize in ${ms(t0)}, server ${JSON.stringify(client.getServerVersion())}`);
  t0 = performance.now();
  const { tools } = await client.listTools();
  console.log(`tools/list: ${tools.length} tools in ${ms(t0)}: ${tools.map((t) => t.name).join(", ")}`);
  console.log(`backends running: ${JSON.stringify(running(transport.pid))} (none yet)`);
  for (const [name, args] of [
    ["create_entities", { entities: [{ name: "mcp-lazy", entityType: "project", observations: ["imported my config"] }] }],
    ["read_graph", {}],
  ]) {
    t0 = performance.now();
    const r = await client.callTool({ name, arguments: args });
    console.log(`${name}: ${ms(t0)}${r.isError ? " (error)" : ""}  ${(r.content?.[0]?.text ?? "").replace(/\s+/g, " ").slice(0, 70)}`);
  }
  console.log(`backends running: ${JSON.stringify(running(transport.pid))}`);
  status();
  await client.close();
  console.log("\nclosed the session: the backend it started has gone with it.");

  // 5. Undo: the configs as they were, byte for byte; the manifest stays.
  console.log("\n$ mcp-lazy import --undo");
  lazy("import", "--undo");
} finally {
  rmSync(home, { recursive: true, force: true });
}
