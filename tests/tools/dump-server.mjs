#!/usr/bin/env node
// dump-server.mjs — launch a real MCP server over stdio with the official SDK
// client and print what it advertises, as JSON:
//
//   { serverInfo, protocolVersion, capabilities, instructions,
//     tools, resources?, resourceTemplates?, prompts?, notifications, timing }
//
// tools/list is always asked (all pages); resources/list,
// resources/templates/list and prompts/list only when the server advertises
// the `resources` / `prompts` capability. Every list holds the items EXACTLY as
// the server sent them on the wire (captured from the transport before the
// SDK's schema parsing, so no unknown key is stripped), in the server's order.
//
// Usage:
//   node tools/dump-server.mjs [options] [--] COMMAND [ARG...]
//
// Options:
//   --caps none|basic|full   client capabilities sent in `initialize`:
//                              none  = {}  (default)
//                              basic = {sampling:{}, elicitation:{}, roots:{listChanged:true}}
//                              full  = basic + elicitation.form/url + tasks.requests
//                                      (sampling.createMessage, elicitation.create)
//   --caps-json JSON         explicit client capabilities object
//   --env KEY=VALUE          extra environment variable for the server (repeatable);
//                            the server otherwise inherits this process's environment
//   --cwd DIR                working directory of the server
//   --roots DIR[,DIR...]     roots answered to roots/list (default: none, empty list)
//   --settle MS              wait MS after `initialized` before listing (default 0);
//                            the server's notifications in that time are recorded
//   --no-lists               only initialize (with --timing: measure spawn→initialize)
//   --timeout MS             per-request timeout (default 30000)
//   --pretty                 indent the JSON output
//   --out FILE               write JSON to FILE instead of stdout
//   --stderr                 pass the server's stderr through (default: discarded)
//
// Example:
//   node tools/dump-server.mjs --pretty node node_modules/@modelcontextprotocol/server-memory/dist/index.js

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { ListRootsRequestSchema } from "@modelcontextprotocol/sdk/types.js";
import { writeFileSync } from "node:fs";
import { resolve } from "node:path";
import { pathToFileURL } from "node:url";

export const CAPS = {
  none: {},
  basic: { sampling: {}, elicitation: {}, roots: { listChanged: true } },
  full: {
    sampling: {},
    elicitation: { form: {}, url: {} },
    roots: { listChanged: true },
    tasks: {
      list: {},
      cancel: {},
      requests: { sampling: { createMessage: {} }, elicitation: { create: {} } },
    },
  },
};

function usage(msg) {
  if (msg) process.stderr.write(`dump-server: ${msg}\n`);
  process.stderr.write(
    "usage: node tools/dump-server.mjs [--caps none|basic|full] [--caps-json JSON] [--env K=V]... " +
      "[--cwd DIR] [--roots DIR,...] [--settle MS] [--no-lists] [--timeout MS] [--pretty] [--out FILE] [--stderr] [--] COMMAND [ARG...]\n",
  );
  process.exit(2);
}

export function parseArgs(argv) {
  const o = {
    caps: CAPS.none,
    capsName: "none",
    env: {},
    cwd: undefined,
    roots: [],
    settle: 0,
    lists: true,
    timeout: 30000,
    pretty: false,
    out: undefined,
    stderr: false,
    command: [],
  };
  let i = 0;
  const need = (flag) => {
    if (i + 1 >= argv.length) usage(`${flag} needs a value`);
    return argv[++i];
  };
  for (; i < argv.length; i++) {
    const a = argv[i];
    if (a === "--") {
      i++;
      break;
    }
    if (!a.startsWith("--")) break;
    switch (a) {
      case "--caps": {
        const v = need(a);
        if (!(v in CAPS)) usage(`unknown --caps ${v}`);
        o.caps = CAPS[v];
        o.capsName = v;
        break;
      }
      case "--caps-json":
        o.caps = JSON.parse(need(a));
        o.capsName = "custom";
        break;
      case "--env": {
        const v = need(a);
        const eq = v.indexOf("=");
        if (eq <= 0) usage(`--env wants KEY=VALUE, got ${v}`);
        o.env[v.slice(0, eq)] = v.slice(eq + 1);
        break;
      }
      case "--cwd":
        o.cwd = need(a);
        break;
      case "--roots":
        o.roots = need(a).split(",").filter(Boolean);
        break;
      case "--settle":
        o.settle = Number(need(a));
        break;
      case "--no-lists":
        o.lists = false;
        break;
      case "--timeout":
        o.timeout = Number(need(a));
        break;
      case "--pretty":
        o.pretty = true;
        break;
      case "--out":
        o.out = need(a);
        break;
      case "--stderr":
        o.stderr = true;
        break;
      default:
        usage(`unknown option ${a}`);
    }
  }
  o.command = argv.slice(i);
  if (o.command.length === 0) usage("no server command given");
  return o;
}

/**
 * Start the server, initialize, list everything it advertises, close it.
 * Returns the dump object (see the header comment).
 */
export async function dumpServer(o) {
  const [command, ...args] = o.command;
  const t0 = performance.now();
  const transport = new StdioClientTransport({
    command,
    args,
    env: { ...process.env, ...o.env },
    cwd: o.cwd,
    stderr: o.stderr ? "inherit" : "ignore",
  });

  // Raw capture: remember the method of each request we send, and the raw
  // result of each response, before the SDK parses (and may strip) it.
  const sentMethod = new Map();
  const raw = []; // { method, params, result, ms }
  const notifications = []; // { method, params, ms }
  const origSend = transport.send.bind(transport);
  transport.send = async (msg, opts) => {
    if (msg && msg.id !== undefined && msg.method) sentMethod.set(msg.id, { method: msg.method, params: msg.params });
    return origSend(msg, opts);
  };

  const client = new Client(
    { name: "mcp-lazy-dump-server", version: "0.1.0" },
    { capabilities: o.caps },
  );
  if (o.caps.roots) {
    client.setRequestHandler(ListRootsRequestSchema, async () => ({
      roots: o.roots.map((d) => ({ uri: pathToFileURL(resolve(d)).href, name: d })),
    }));
  }

  // Client.connect() installs transport.onmessage; wrap start() so our tap
  // sits in front of the SDK's handler from the very first message.
  const origStart = transport.start.bind(transport);
  transport.start = async () => {
    const sdkOnMessage = transport.onmessage;
    transport.onmessage = (msg, extra) => {
      const ms = performance.now() - t0;
      if (msg && msg.id !== undefined && ("result" in msg || "error" in msg) && sentMethod.has(msg.id)) {
        const req = sentMethod.get(msg.id);
        raw.push({ method: req.method, params: req.params, result: msg.result, error: msg.error, ms });
      } else if (msg && msg.id === undefined && msg.method) {
        notifications.push({ method: msg.method, params: msg.params, ms });
      }
      sdkOnMessage?.(msg, extra);
    };
    return origStart();
  };

  const reqOpts = { timeout: o.timeout };
  const timing = {};
  try {
    await client.connect(transport, reqOpts);
    timing.initialize_ms = round(lastRaw(raw, "initialize").ms);
    const init = lastRaw(raw, "initialize").result;
    const out = {
      command: o.command,
      clientCapabilities: o.caps,
      protocolVersion: init.protocolVersion,
      serverInfo: init.serverInfo,
      capabilities: init.capabilities,
      instructions: init.instructions,
    };
    if (o.settle > 0) await new Promise((r) => setTimeout(r, o.settle));

    if (o.lists) {
      const pages = async (method, call, key) => {
        const items = [];
        let cursor;
        let n = 0;
        do {
          await call(cursor === undefined ? {} : { cursor }, reqOpts);
          const r = lastRaw(raw, method);
          if (r.error) throw new Error(`${method}: ${JSON.stringify(r.error)}`);
          items.push(...(r.result[key] ?? []));
          cursor = r.result.nextCursor;
          if (++n > 1000) throw new Error(`${method}: more than 1000 pages`);
        } while (cursor !== undefined && cursor !== null);
        return items;
      };
      out.tools = await pages("tools/list", (p, ro) => client.listTools(p, ro), "tools");
      timing.tools_list_ms = round(lastRaw(raw, "tools/list").ms);
      const caps = init.capabilities ?? {};
      if (caps.resources) {
        out.resources = await tryList(() => pages("resources/list", (p, ro) => client.listResources(p, ro), "resources"));
        out.resourceTemplates = await tryList(() =>
          pages("resources/templates/list", (p, ro) => client.listResourceTemplates(p, ro), "resourceTemplates"),
        );
      }
      if (caps.prompts) {
        out.prompts = await tryList(() => pages("prompts/list", (p, ro) => client.listPrompts(p, ro), "prompts"));
      }
    }
    out.notifications = notifications;
    out.timing = timing;
    return out;
  } finally {
    await client.close().catch(() => {});
  }
}

// A list the server advertises but fails to answer (server-postgres's
// resources/list without a reachable database) is recorded as {error}.
async function tryList(fn) {
  try {
    return await fn();
  } catch (e) {
    return { error: String(e?.message ?? e) };
  }
}

function lastRaw(raw, method) {
  for (let i = raw.length - 1; i >= 0; i--) if (raw[i].method === method) return raw[i];
  throw new Error(`no response recorded for ${method}`);
}

const round = (x) => Math.round(x * 10) / 10;

async function main() {
  const o = parseArgs(process.argv.slice(2));
  const out = await dumpServer(o);
  const text = JSON.stringify(out, null, o.pretty ? 2 : undefined) + "\n";
  if (o.out) writeFileSync(o.out, text);
  else process.stdout.write(text);
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().catch((e) => {
    process.stderr.write(`dump-server: ${e?.stack ?? e}\n`);
    process.exit(1);
  });
}
