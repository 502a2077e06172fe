#!/usr/bin/env node
// regen-manifests.mjs — regenerate the `tools:` section of manifests from the
// live servers, so the manifests follow version bumps.
//
// Usage (from anywhere; needs `npm ci` done in tests/):
//   node tests/tools/regen-manifests.mjs [--caps none|basic|full] [--check] [MANIFEST.yaml ...]
//
//   MANIFEST   default: manifests/example.yaml and manifests/demo.yaml
//   --caps     client capabilities declared when listing tools (see
//              dump-server.mjs; default none). server-everything lists more
//              tools when the client declares sampling/elicitation/roots/tasks.
//   --check    do not write; exit 1 if a manifest's tools section is stale
//
// For each manifest, the backends are read from its `backends:` section, which
// must be in the simple layout the repo's manifests use: a backend name at
// two spaces of indent, and under it (four spaces) `command:` as a one-line
// flow list, optionally `env:` as a one-line flow map and `cwd:` as a scalar.
// Each backend is started for real:
//   - `npx [-y] @scope/pkg@VERSION ARG...` runs the copy installed in
//     tests/node_modules instead (no network), after checking that its
//     version is exactly VERSION — bump tests/package.json first;
//   - any other command runs as written, in `cwd` (relative to the manifest's
//     directory; default the manifest's directory), with `env` added.
// Its tools/list is turned into manifest entries by manifest-from-server.mjs,
// and EVERYTHING FROM THE TOP-LEVEL `tools:` LINE TO THE END OF THE FILE is
// replaced by the entries of all backends, in the order of `backends:`.
// In each backend's block, the recorded keys (server_info, instructions,
// capabilities, resources, resource_templates, prompts: one line each, after
// a `# ---- recorded` comment) are replaced by what the server answers now;
// every other line of the block stays as it is.

import { readFileSync, writeFileSync, existsSync } from "node:fs";
import { dirname, isAbsolute, join, resolve, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { dumpServer, CAPS as CAPS_TABLE } from "./dump-server.mjs";
import { toolsToYaml, backendKeysToYaml, BACKEND_KEYS } from "./manifest-from-server.mjs";

const HERE = dirname(fileURLToPath(import.meta.url));
const TESTS = resolve(HERE, "..");
const ROOT = resolve(TESTS, "..");
const NODE_MODULES = join(TESTS, "node_modules");

const CAPS = Object.keys(CAPS_TABLE);

// ---- a tiny reader for one-line YAML flow lists/maps of scalars ----------

function parseScalarToken(s, i, stops) {
  // returns [value, nextIndex]
  while (s[i] === " ") i++;
  if (s[i] === '"') {
    let j = i + 1;
    while (j < s.length && s[j] !== '"') j += s[j] === "\\" ? 2 : 1;
    if (j >= s.length) throw new Error(`unterminated "string" in: ${s}`);
    return [JSON.parse(s.slice(i, j + 1)), j + 1];
  }
  if (s[i] === "'") {
    let j = i + 1;
    let v = "";
    for (;;) {
      if (j >= s.length) throw new Error(`unterminated 'string' in: ${s}`);
      if (s[j] === "'") {
        if (s[j + 1] === "'") {
          v += "'";
          j += 2;
          continue;
        }
        return [v, j + 1];
      }
      v += s[j++];
    }
  }
  let j = i;
  while (j < s.length && !stops(s, j)) j++;
  return [s.slice(i, j).trim(), j];
}

export function parseFlow(text) {
  const s = text.trim();
  const skip = (i) => {
    while (s[i] === " ") i++;
    return i;
  };
  if (s.startsWith("[")) {
    const out = [];
    let i = skip(1);
    if (s[i] === "]") return out;
    for (;;) {
      const [v, j] = parseScalarToken(s, i, (t, k) => t[k] === "," || t[k] === "]");
      out.push(v);
      i = skip(j);
      if (s[i] === ",") i = skip(i + 1);
      else if (s[i] === "]" && skip(i + 1) === s.length) return out;
      else throw new Error(`cannot read flow list: ${text}`);
    }
  }
  if (s.startsWith("{")) {
    const out = {};
    let i = skip(1);
    if (s[i] === "}") return out;
    for (;;) {
      const [k, j] = parseScalarToken(s, i, (t, n) => t[n] === ":" && (t[n + 1] === " " || t[n + 1] === undefined));
      i = skip(j);
      if (s[i] !== ":") throw new Error(`cannot read flow map: ${text}`);
      const [v, j2] = parseScalarToken(s, i + 1, (t, n) => t[n] === "," || t[n] === "}");
      out[k] = v;
      i = skip(j2);
      if (s[i] === ",") i = skip(i + 1);
      else if (s[i] === "}" && skip(i + 1) === s.length) return out;
      else throw new Error(`cannot read flow map: ${text}`);
    }
  }
  throw new Error(`expected a one-line flow list or map, got: ${text}`);
}

const stripComment = (v) => v.replace(/\s+#.*$/, "").trim();
const unquoteKey = (k) => (k.startsWith('"') ? JSON.parse(k) : k.startsWith("'") ? k.slice(1, -1).replace(/''/g, "'") : k);

/** Read the `backends:` section: [{name, command, env, cwd}] in file order. */
export function readBackends(text) {
  const lines = text.split("\n");
  const start = lines.findIndex((l) => /^backends:\s*(#.*)?$/.test(l));
  if (start < 0) throw new Error("no top-level `backends:` line");
  const backends = [];
  let cur = null;
  for (let i = start + 1; i < lines.length; i++) {
    const l = lines[i];
    if (/^\S/.test(l) && !l.startsWith("#")) break; // next top-level key
    let m;
    if ((m = /^ {2}("[^"]*"|'[^']*'|[^\s#:][^:]*?)\s*:\s*(#.*)?$/.exec(l))) {
      cur = { name: unquoteKey(m[1]), env: {}, cwd: undefined, command: undefined };
      backends.push(cur);
    } else if (cur && (m = /^ {4}(command|env|cwd):\s*(.*)$/.exec(l))) {
      const v = stripComment(m[2]);
      if (m[1] === "command") cur.command = parseFlow(v);
      else if (m[1] === "env") cur.env = parseFlow(v);
      else cur.cwd = v.startsWith('"') || v.startsWith("'") ? parseFlow(`[${v}]`)[0] : v;
    }
  }
  for (const b of backends) if (!Array.isArray(b.command) || b.command.length === 0) throw new Error(`backend ${b.name}: no one-line \`command: [...]\``);
  return backends;
}

/** Split "@scope/name@1.2.3" / "name@1.2.3" / "name". */
export function splitSpec(spec) {
  const at = spec.indexOf("@", spec.startsWith("@") ? 1 : 0);
  return at < 0 ? { name: spec, version: undefined } : { name: spec.slice(0, at), version: spec.slice(at + 1) };
}

/** Entry script of an installed package, as npx would pick its bin. */
export function packageEntry(name) {
  const dir = join(NODE_MODULES, name);
  const pj = join(dir, "package.json");
  if (!existsSync(pj)) throw new Error(`${name} is not installed in tests/node_modules (run: cd tests && npm ci)`);
  const pkg = JSON.parse(readFileSync(pj, "utf8"));
  let bin = pkg.bin;
  if (typeof bin === "object" && bin !== null) {
    const keys = Object.keys(bin);
    const base = name.split("/").pop();
    bin = keys.length === 1 ? bin[keys[0]] : (bin[base] ?? bin[keys[0]]);
  }
  if (!bin) throw new Error(`${name} has no bin`);
  return { version: pkg.version, entry: join(dir, bin) };
}

/** How to run a manifest backend locally: {command: [...], cwd, env, note}. */
export function localCommand(backend, manifestDir) {
  const cwd = backend.cwd === undefined ? manifestDir : isAbsolute(backend.cwd) ? backend.cwd : resolve(manifestDir, backend.cwd);
  const [cmd, ...rest] = backend.command;
  if (cmd === "npx") {
    let i = 0;
    while (i < rest.length && rest[i].startsWith("-")) {
      if (rest[i] === "-p" || rest[i] === "--package") throw new Error(`backend ${backend.name}: npx ${rest[i]} is not supported here`);
      i++;
    }
    if (i >= rest.length) throw new Error(`backend ${backend.name}: npx without a package`);
    const { name, version } = splitSpec(rest[i]);
    const inst = packageEntry(name);
    if (version === undefined) throw new Error(`backend ${backend.name}: ${name} is not pinned to a version`);
    if (inst.version !== version)
      throw new Error(`backend ${backend.name}: manifest wants ${name}@${version} but tests/node_modules has ${inst.version}; update tests/package.json and run npm install`);
    return { command: [process.execPath, inst.entry, ...rest.slice(i + 1)], cwd, env: backend.env, note: `${name}@${version}` };
  }
  return { command: [cmd === "node" ? process.execPath : cmd, ...rest], cwd, env: backend.env, note: backend.command.join(" ") };
}

const RECORDED = new RegExp(`^ {4}(${BACKEND_KEYS.map(([, k]) => k).join("|")}):|^ {4}# ---- recorded `);

/** The lines up to `tools:` with each backend's recorded keys replaced by the dumps' (at the end of
 * its block, before any blank lines). */
function recordBackendKeys(lines, dumps, caps) {
  const start = lines.findIndex((l) => /^backends:\s*(#.*)?$/.test(l));
  const out = lines.slice(0, start + 1);
  let i = start + 1;
  const flush = (block, d) => {
    while (block.length && block[block.length - 1].trim() === "") block.pop();
    const tail = [];
    const kept = block.filter((l) => !RECORDED.test(l));
    if (d) {
      const si = d.dump.serverInfo ?? {};
      tail.push(
        `    # ---- recorded from initialize and the lists of ${si.name} ${si.version}` +
          `${caps === "none" ? "" : ` (client capabilities: ${caps})`}: do not edit, run tests/tools/regen-manifests.sh`,
      );
      tail.push(...backendKeysToYaml(d.dump, { indent: 4 }).split("\n").filter(Boolean));
    }
    return [...kept, ...tail];
  };
  let block = null;
  let cur = null;
  const blanks = [];
  for (; i < lines.length; i++) {
    const l = lines[i];
    if (/^\S/.test(l) && !l.startsWith("#")) break;
    const m = /^ {2}("[^"]*"|'[^']*'|[^\s#:][^:]*?)\s*:\s*(#.*)?$/.exec(l);
    if (m) {
      if (block) out.push(...flush(block, cur), ...blanks.splice(0));
      const name = unquoteKey(m[1]);
      cur = dumps.find((d) => d.b.name === name);
      block = [l];
    } else if (block) {
      if (l.trim() === "") blanks.push(l);
      else block.push(...blanks.splice(0), l);
    } else out.push(l);
  }
  if (block) out.push(...flush(block, cur), ...blanks.splice(0));
  return [...out, ...lines.slice(i)];
}

export async function regenManifest(file, { caps = "none" } = {}) {
  const text = readFileSync(file, "utf8");
  const backends = readBackends(text);
  const lines = text.split("\n");
  const toolsAt = lines.findIndex((l) => /^tools:\s*(#.*)?$/.test(l));
  if (toolsAt < 0) throw new Error(`${file}: no top-level \`tools:\` line`);
  for (let i = toolsAt + 1; i < lines.length; i++) {
    if (/^[^\s#]/.test(lines[i])) throw new Error(`${file}: \`tools:\` must be the last top-level key (found ${JSON.stringify(lines[i])} after it)`);
  }
  const manifestDir = dirname(resolve(file));
  const dumps = [];
  for (const b of backends) {
    const run = localCommand(b, manifestDir);
    const o = {
      command: run.command,
      cwd: run.cwd,
      env: run.env ?? {},
      caps: CAPS_TABLE[caps],
      capsName: caps,
      roots: [],
      settle: 0,
      lists: true,
      timeout: 60000,
      stderr: false,
    };
    const dump = await dumpServer(o);
    const si = dump.serverInfo ?? {};
    process.stderr.write(
      `  ${relative(ROOT, file)}: ${b.name}: ${dump.tools.length} tools from ${si.name} ${si.version} (${run.note}); ` +
        `spawn→initialize ${dump.timing.initialize_ms} ms, →tools/list ${dump.timing.tools_list_ms} ms\n`,
    );
    dumps.push({ b, run, dump, si });
  }
  let out = recordBackendKeys(lines.slice(0, toolsAt + 1), dumps, caps).join("\n") + "\n";
  for (const { b, run, dump, si } of dumps) {
    out +=
      `  # ---- backend ${b.name}: ${dump.tools.length} tool${dump.tools.length === 1 ? "" : "s"}, verbatim from tools/list of ${si.name} ${si.version} (${run.note})` +
      `${caps === "none" ? "" : `, client capabilities: ${caps}`}\n`;
    out += toolsToYaml(dump.tools, b.name, { indent: 2 });
  }
  return { old: text, text: out };
}

async function main(argv) {
  let caps = "none";
  let check = false;
  const files = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === "--caps") {
      caps = argv[++i];
      if (!CAPS.includes(caps)) throw new Error(`--caps must be one of ${CAPS.join(", ")}`);
    } else if (a === "--check") check = true;
    else if (a.startsWith("--")) throw new Error(`unknown option ${a}`);
    else files.push(resolve(a));
  }
  if (files.length === 0) files.push(join(ROOT, "manifests/example.yaml"), join(ROOT, "manifests/demo.yaml"));
  let stale = 0;
  for (const f of files) {
    const { old, text } = await regenManifest(f, { caps });
    if (old === text) {
      process.stderr.write(`${relative(ROOT, f)}: up to date\n`);
    } else if (check) {
      process.stderr.write(`${relative(ROOT, f)}: STALE — run tests/tools/regen-manifests.sh\n`);
      stale++;
    } else {
      writeFileSync(f, text);
      process.stderr.write(`${relative(ROOT, f)}: rewritten\n`);
    }
  }
  process.exit(stale ? 1 : 0);
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  main(process.argv.slice(2)).catch((e) => {
    process.stderr.write(`regen-manifests: ${e?.message ?? e}\n`);
    process.exit(1);
  });
}
