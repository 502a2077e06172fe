// Client configs as the clients write them, and the check that an imported entry serves what the
// server itself does.
import assert from "node:assert/strict";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { ListRootsRequestSchema } from "@modelcontextprotocol/sdk/types.js";
import { SERVER_SCRIPTS } from "./env.mjs";

// What each client declares (the table in frontend/client-config.c and the README).
export const CLIENT_CAPS = {
  "claude-code": { roots: { listChanged: true }, elicitation: {} },
  "claude-desktop": { roots: {} },
  vscode: { roots: { listChanged: true }, sampling: {}, elicitation: { form: {}, url: {} } },
  cursor: { roots: {}, elicitation: {} },
};

// ~/.claude.json as Claude Code writes it (JSON.stringify, 2 spaces): user servers, a remote one,
// a project with its own server, and the rest of what the file holds.
export function claudeCodeConfig(home, { memoryFile = `${home}/memory.jsonl`, filesDir = "/tmp", scripts = SERVER_SCRIPTS } = {}) {
  const direct = {
    memory: { command: "node", args: [scripts.memory], env: { MEMORY_FILE_PATH: memoryFile } },
    "my files!": { command: "node", args: [scripts.filesystem, filesDir] },
  };
  const obj = (entry) => ({
    numStartups: 12,
    installMethod: "npm",
    tipsHistory: { "new-user-warmup": 1 },
    mcpServers: {
      memory: entry("memory", { type: "stdio", ...direct.memory }),
      "remote-api": { type: "http", url: "https://mcp.example.com/mcp", headers: { Authorization: "Bearer not-a-secret" } },
    },
    projects: {
      [filesDir]: {
        allowedTools: [],
        mcpServers: { "my files!": entry("my files!", { type: "stdio", ...direct["my files!"], env: {} }) },
        hasTrustDialogAccepted: true,
      },
    },
    userID: "0123abcd",
  });
  const text = JSON.stringify(obj((name, e) => e), null, 2) + "\n";
  return {
    text,
    direct,
    // The file after import: each stdio entry {type, command, args}, everything else as it was.
    rewritten: (mcpLazy, backendArgs) =>
      JSON.stringify(obj((name, e) => ({ type: e.type, command: mcpLazy, args: backendArgs(name) })), null, 2) + "\n",
  };
}

// claude_desktop_config.json, 4 spaces: one local server and one remote.
export function desktopConfig(home, { scripts = SERVER_SCRIPTS } = {}) {
  const direct = { everything: { command: "node", args: [scripts.everything, "stdio"] } };
  const obj = (entry) => ({
    mcpServers: {
      everything: entry("everything", direct.everything),
      weather: { type: "sse", url: "https://weather.example.com/sse" },
    },
    globalShortcut: "Ctrl+Space",
  });
  return {
    text: JSON.stringify(obj((n, e) => e), null, 4) + "\n",
    direct,
    rewritten: (mcpLazy, backendArgs) => JSON.stringify(obj((name) => ({ command: mcpLazy, args: backendArgs(name) })), null, 4) + "\n",
  };
}

// Everything a client learns from a server: initialize and every list it declares.
// prefix (nsenter ... runuser ...): the environment then goes through env(1), past runuser.
async function survey(command, args, env, caps, prefix = []) {
  const transport = prefix.length
    ? new StdioClientTransport({
        command: prefix[0],
        args: [...prefix.slice(1), "env", ...Object.entries(env).map(([k, v]) => `${k}=${v}`), command, ...args],
        stderr: "pipe",
      })
    : new StdioClientTransport({ command, args, env, stderr: "pipe" });
  let stderr = "";
  transport.stderr?.on("data", (d) => (stderr += d));
  const client = new Client({ name: "import-test", version: "1.0.0" }, { capabilities: caps });
  if (caps.roots) client.setRequestHandler(ListRootsRequestSchema, () => ({ roots: [] }));
  try {
    await client.connect(transport);
  } catch (e) {
    throw new Error(`${command} ${args.join(" ")}: ${e.message}\n${stderr}`);
  }
  const capabilities = client.getServerCapabilities();
  const out = { serverInfo: client.getServerVersion(), instructions: client.getInstructions(), capabilities };
  const all = async (method, key) => {
    const items = [];
    let cursor;
    do {
      const r = await client[method](cursor ? { cursor } : {});
      items.push(...r[key]);
      cursor = r.nextCursor;
    } while (cursor);
    return items;
  };
  out.tools = await all("listTools", "tools");
  if (capabilities.resources) {
    out.resources = await all("listResources", "resources");
    out.resourceTemplates = await all("listResourceTemplates", "resourceTemplates");
  }
  if (capabilities.prompts) out.prompts = await all("listPrompts", "prompts");
  return { out, client, stderr: () => stderr };
}

// Launches the rewritten config entry exactly as a client would (its command, args and env) and
// the server itself, both declaring the client's capabilities: same initialize result, same lists.
// Then calls a tool through the entry. prefix: how to get into the box as the user (nsenter ...).
export async function compareWithDirect(entry, direct, caps, { env = {}, call, prefix = [] } = {}) {
  const base = { PATH: process.env.PATH, ...env };
  const d = await survey(direct.command, direct.args, { ...base, ...(direct.env ?? {}) }, caps, prefix);
  await d.client.close();
  const l = await survey(entry.command, entry.args ?? [], { ...base, ...(entry.env ?? {}) }, caps, prefix);
  try {
    assert.deepEqual(l.out, d.out);
    if (call) {
      const r = await l.client.callTool({ name: call[0], arguments: call[1] });
      assert.notEqual(r.isError, true, JSON.stringify(r));
    }
  } finally {
    await l.client.close();
  }
  return d.out;
}
