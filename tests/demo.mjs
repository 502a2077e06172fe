// make demo: what mcp-lazy does, shown with the official SDK client on a manifest (manifests/demo.yaml).
// The client launches mcp-lazy as it would any MCP server; the backends start only when called.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { resolve } from "node:path";
import { MCP_LAZY, descendants, cmdline } from "./integration/lib/env.mjs";

const manifest = resolve(process.argv[2] ?? "../manifests/demo.yaml");
const ms = (t0) => `${(performance.now() - t0).toFixed(1)} ms`;
const running = (pid) =>
  descendants(pid)
    .map((p) => cmdline(p))
    .filter((c) => !c.includes("mcp-lazy-shimd"))
    .map((c) => c.replace(/.*node_modules\/@modelcontextprotocol\/([^/]+).*/, "$1"));

const transport = new StdioClientTransport({
  command: MCP_LAZY,
  args: ["--manifest", manifest],
  stderr: "pipe",
  env: { ...process.env },
});
transport.stderr?.on("data", (d) => process.stderr.write(`  | ${d}`));
const client = new Client({ name: "mcp-lazy-demo", version: "1.0.0" });

let t0 = performance.now();
await client.connect(transport);
console.log(`initialize: ${ms(t0)}  (server: ${client.getServerVersion().name})`);
t0 = performance.now();
const { tools } = await client.listTools();
console.log(`tools/list: ${tools.length} tools in ${ms(t0)}`);
for (const t of tools) console.log(`  - ${t.name}: ${(t.description ?? "").split("\n")[0].slice(0, 70)}`);
console.log(`backends running now: ${JSON.stringify(running(transport.pid))}  (none: nothing was started)\n`);

const calls = [
  ["create_entities", { entities: [{ name: "mcp-lazy", entityType: "project", observations: ["starts backends on demand"] }] }],
  ["read_graph", {}],
  ["echo", { message: "hello through mcp-lazy" }],
  ["get-sum", { a: 20, b: 22 }],
  ["list_allowed_directories", {}],
];
for (const [name, args] of calls) {
  t0 = performance.now();
  const r = await client.callTool({ name, arguments: args });
  const text = (r.content?.[0]?.text ?? "").replace(/\s+/g, " ").slice(0, 80);
  console.log(`${name}: ${ms(t0)}${r.isError ? " (error)" : ""}  ${text}`);
  console.log(`  backends running: ${JSON.stringify(running(transport.pid))}`);
}
await client.close();
console.log("\nclosed the session: mcp-lazy and every backend it started have exited.");
