#!/usr/bin/env node
// manifest-from-server.mjs — turn a dump-server.mjs JSON dump into the
// mcp-lazy manifest `tools:` entries for ONE backend (YAML).
//
// Usage:
//   node tools/manifest-from-server.mjs --backend NAME [--header] [--indent N] [DUMP.json | -]
//
//   --backend NAME  the backend name written into every tool's `backend:` key (required)
//   --header        print a `tools:` line before the entries
//   --backend-keys  print instead the keys that go under `backends.NAME`: the server's own
//                   initialize answer (server_info, instructions, capabilities) and its
//                   resources, resource_templates and prompts (see backendKeysToYaml)
//   --indent N      spaces before each "- " (default 2)
//   DUMP.json       output of dump-server.mjs (default: standard input)
//
// Tools are emitted in exactly the order the server returned them. Keys, in
// this order and spelling (absent ones skipped):
//
//   name, title, description, backend, input_schema, output_schema,
//   annotations, icons, execution, _meta
//
// (`execution` — {"taskSupport": ...} — is sent on every tool by servers built
// on the SDK's McpServer, so it is kept to make the copy exact.) A tool key not
// in that list makes the script fail rather than silently drop it.
//
// Every value is written as JSON on one line (JSON is YAML flow syntax, and
// libyaml reads it back exactly): strings JSON-quoted — with the few
// characters that YAML 1.1 treats as line breaks or does not allow in a
// stream (U+0085, U+2028, U+2029, U+007F–U+009F, U+FEFF, U+FFFE, U+FFFF)
// written as \uXXXX escapes, which YAML double-quoted scalars also understand —
// objects and arrays as compact JSON. Other non-ASCII stays UTF-8.

import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";

// MCP Tool field → manifest key, in emission order.
export const TOOL_KEYS = [
  ["name", "name"],
  ["title", "title"],
  ["description", "description"],
  [null, "backend"],
  ["inputSchema", "input_schema"],
  ["outputSchema", "output_schema"],
  ["annotations", "annotations"],
  ["icons", "icons"],
  ["execution", "execution"],
  ["_meta", "_meta"],
];
const KNOWN = new Set(TOOL_KEYS.map(([k]) => k).filter(Boolean));

/** JSON text that is also a YAML (1.1, libyaml) flow value meaning the same. */
export function yamlJson(value) {
  const s = JSON.stringify(value);
  if (s === undefined) throw new Error(`value not representable as JSON: ${value}`);
  // JSON.stringify already escapes C0 controls, '"', '\\' and lone surrogates.
  return s.replace(/[\u007f-\u009f\u2028\u2029\ufeff\ufffe\uffff]/g, (c) => "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0"));
}

// Plain (unquoted) YAML is used only for names that are obviously strings.
const PLAIN_OK = /^[A-Za-z_][A-Za-z0-9_.\/-]*$/;
const YAML_WORDS = /^(null|Null|NULL|true|True|TRUE|false|False|FALSE|yes|Yes|YES|no|No|NO|on|On|ON|off|Off|OFF|y|Y|n|N)$/;
export function yamlName(s) {
  if (typeof s === "string" && PLAIN_OK.test(s) && !YAML_WORDS.test(s)) return s;
  return yamlJson(s);
}

// JavaScript objects list integer-like keys ("0", "17") first, whatever order
// the server sent them in; such a key would make the copy's key order inexact.
function checkKeyOrder(v, where) {
  if (Array.isArray(v)) v.forEach((x, i) => checkKeyOrder(x, `${where}[${i}]`));
  else if (v !== null && typeof v === "object") {
    for (const k of Object.keys(v)) {
      if (/^(0|[1-9][0-9]*)$/.test(k)) throw new Error(`${where} has the integer-like key ${JSON.stringify(k)}: its order cannot be kept`);
      checkKeyOrder(v[k], `${where}.${k}`);
    }
  }
}

/** YAML list entries (no `tools:` header) for the given MCP tools. */
export function toolsToYaml(tools, backend, { indent = 2 } = {}) {
  const pad = " ".repeat(indent);
  const lines = [];
  for (const tool of tools) {
    const unknown = Object.keys(tool).filter((k) => !KNOWN.has(k));
    if (unknown.length) throw new Error(`tool ${JSON.stringify(tool.name)} has keys the manifest cannot hold: ${unknown.join(", ")}`);
    if (typeof tool.name !== "string") throw new Error(`tool without a string name: ${JSON.stringify(tool)}`);
    if (tool.inputSchema === undefined) throw new Error(`tool ${tool.name} has no inputSchema`);
    checkKeyOrder(tool, `tool ${tool.name}`);
    let first = true;
    for (const [field, key] of TOOL_KEYS) {
      let text;
      if (field === null) text = yamlName(backend);
      else if (!(field in tool)) continue;
      else if (field === "name") text = yamlName(tool.name);
      else text = yamlJson(tool[field]);
      lines.push(`${first ? pad + "- " : pad + "  "}${key}: ${text}`);
      first = false;
    }
  }
  return lines.join("\n") + (lines.length ? "\n" : "");
}

// What goes under `backends.NAME` from a dump, in this order (absent ones skipped): the server's
// own initialize answer, which `mcp-lazy --backend NAME` answers with, and its other lists.
export const BACKEND_KEYS = [
  ["serverInfo", "server_info"],
  ["instructions", "instructions"],
  ["capabilities", "capabilities"],
  ["resources", "resources"],
  ["resourceTemplates", "resource_templates"],
  ["prompts", "prompts"],
];

/** `backends.NAME` keys (one-line JSON values) recorded from a dump; lists the server failed to
 * answer ({error}) and empty lists are left out. */
export function backendKeysToYaml(dump, { indent = 4 } = {}) {
  const pad = " ".repeat(indent);
  const lines = [];
  for (const [field, key] of BACKEND_KEYS) {
    const v = dump[field];
    if (v === undefined || v === null) continue;
    if (["resources", "resourceTemplates", "prompts"].includes(field) && (!Array.isArray(v) || v.length === 0)) continue;
    checkKeyOrder(v, field);
    lines.push(`${pad}${key}: ${yamlJson(v)}`);
  }
  return lines.join("\n") + (lines.length ? "\n" : "");
}

function main(argv) {
  let backend;
  let header = false;
  let keys = false;
  let indent;
  let input = "-";
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === "--backend") backend = argv[++i];
    else if (a === "--header") header = true;
    else if (a === "--backend-keys") keys = true;
    else if (a === "--indent") indent = Number(argv[++i]);
    else if (a.startsWith("--")) throw new Error(`unknown option ${a}`);
    else input = a;
  }
  if (!backend) throw new Error("usage: manifest-from-server.mjs --backend NAME [--header | --backend-keys] [--indent N] [DUMP.json|-]");
  const dump = JSON.parse(readFileSync(input === "-" ? 0 : input, "utf8"));
  if (keys) return process.stdout.write(backendKeysToYaml(dump, { indent: indent ?? 4 }));
  const tools = Array.isArray(dump) ? dump : dump.tools;
  if (!Array.isArray(tools)) throw new Error("input has no tools array");
  process.stdout.write((header ? "tools:\n" : "") + toolsToYaml(tools, backend, { indent: indent ?? 2 }));
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  try {
    main(process.argv.slice(2));
  } catch (e) {
    process.stderr.write(`manifest-from-server: ${e.message}\n`);
    process.exit(1);
  }
}
