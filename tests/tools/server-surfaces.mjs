#!/usr/bin/env node
// server-surfaces.mjs — record what each reference server installed in
// tests/node_modules offers besides tools (resources, resource templates,
// prompts, instructions, capabilities) into tests/fixtures/server-surfaces.json,
// keyed by package name. Items are verbatim from the servers, in their order.
//
// Usage:
//   node tests/tools/server-surfaces.mjs [--postgres-url URL] [--out FILE|-]
//
// server-postgres lists one resource per table of the `public` schema, so its
// `resources` need a reachable database (default URL below; e.g. as the
// postgres OS user: --postgres-url 'postgresql://postgres@localhost/postgres?host=/var/run/postgresql').
// Without one, its `resources` holds {"error": ...}.
//
// For each package the fixture also gives `tool_names_by_client_capabilities`:
// the names tools/list returns when the client declares the capability sets
// none / basic / full of dump-server.mjs.

import { writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { dumpServer, CAPS } from "./dump-server.mjs";
import { packageEntry } from "./regen-manifests.mjs";

const HERE = dirname(fileURLToPath(import.meta.url));
const TESTS = resolve(HERE, "..");

let postgresUrl = "postgresql://postgres@localhost:5432/postgres";
let out = join(TESTS, "fixtures/server-surfaces.json");
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i++) {
  if (argv[i] === "--postgres-url") postgresUrl = argv[++i];
  else if (argv[i] === "--out") out = argv[++i];
  else {
    process.stderr.write(`server-surfaces: unknown argument ${argv[i]}\n`);
    process.exit(2);
  }
}

const SERVERS = [
  { pkg: "@modelcontextprotocol/server-everything", args: ["stdio"], env: {} },
  { pkg: "@modelcontextprotocol/server-filesystem", args: ["/tmp"], env: {} },
  { pkg: "@modelcontextprotocol/server-memory", args: [], env: { MEMORY_FILE_PATH: "/tmp/mcp-lazy-surfaces-memory.jsonl" } },
  { pkg: "@modelcontextprotocol/server-postgres", args: [postgresUrl], env: {}, recordedArgs: ["postgresql://…"] },
];

const base = { cwd: TESTS, roots: [], settle: 0, lists: true, timeout: 60000, stderr: false };
const fixture = {
  _about:
    "Verbatim resources/list, resources/templates/list and prompts/list (null: capability not advertised; {error}: the request failed) " +
    "of the reference servers pinned in tests/package.json, listed with no client capabilities. Regenerate with tests/tools/server-surfaces.mjs.",
};
for (const s of SERVERS) {
  const { version, entry } = packageEntry(s.pkg);
  const command = [process.execPath, entry, ...s.args];
  const names = {};
  let dump;
  for (const caps of Object.keys(CAPS)) {
    const d = await dumpServer({ ...base, command, env: s.env, caps: CAPS[caps], capsName: caps });
    names[caps] = d.tools.map((t) => t.name);
    if (caps === "none") dump = d;
  }
  const caps = dump.capabilities ?? {};
  fixture[s.pkg] = {
    version,
    entry: entry.slice(TESTS.length + 1),
    args: s.recordedArgs ?? s.args,
    env: s.env,
    protocolVersion: dump.protocolVersion,
    serverInfo: dump.serverInfo,
    capabilities: dump.capabilities,
    instructions: dump.instructions ?? null,
    resources: caps.resources ? dump.resources : null,
    resource_templates: caps.resources ? dump.resourceTemplates : null,
    prompts: caps.prompts ? dump.prompts : null,
    tool_names_by_client_capabilities: names,
  };
  const n = (v) => (Array.isArray(v) ? v.length : v === null || v === undefined ? "-" : "error");
  process.stderr.write(
    `${s.pkg}@${version}: resources ${n(fixture[s.pkg].resources)}, templates ${n(fixture[s.pkg].resource_templates)}, prompts ${n(fixture[s.pkg].prompts)}, ` +
      `tools ${Object.entries(names).map(([k, v]) => `${k}:${v.length}`).join(" ")}\n`,
  );
}
const text = JSON.stringify(fixture, null, 2) + "\n";
if (out === "-") process.stdout.write(text);
else writeFileSync(out, text);
