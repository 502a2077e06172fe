// A 2026-07-28 client of a handshake-era backend: initialized from the envelope, and the backend's
// requests to its client turned into input_required answers with a requestState only mcp-lazy makes
// (MRTR); and the bridge the other way (a handshake-era client of a modern backend): cancellation, bytes.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { ElicitRequestSchema, CreateMessageRequestSchema, ListRootsRequestSchema } from "@modelcontextprotocol/sdk/types.js";
import { INIT, MCP_LAZY, RawPeer, SERVER_SCRIPTS, SHIMD, TESTS, cleanupPeers, sleep, waitFor } from "./lib/env.mjs";
import { ENVELOPE, MODERN, MREQ, connectV2, modernManifest, normalise } from "./lib/eras.mjs";

after(cleanupPeers);

const dir = mkdtempSync(join(tmpdir(), "mcp-lazy-mrtr-"));
const ASKER = join(TESTS, "servers/legacy-asker.mjs");
const direct = (m) => ["--manifest", m, "--activation=direct", "--shimd", SHIMD];
function manifest(name, text) {
  const p = join(dir, name);
  writeFileSync(p, text);
  return p;
}

const TOOL = (name, backend) => `  - {name: ${name}, backend: ${backend}, input_schema: {type: object}}\n`;
const askerManifest = (name, extra = "") =>
  manifest(
    name,
    `backends:
  asker:
    command: [node, ${ASKER}]
    env: {LEGACY_ASKER_LOG: ${join(dir, name + ".log")}}
    prompts: [{name: greet, description: Greet someone the user names}]
${extra}tools:
${["echo", "ask", "ask-twice", "ask-both", "think", "roots"].map((t) => TOOL(t, "asker")).join("")}`,
  );
const askerLog = (name) => {
  try {
    return readFileSync(join(dir, name + ".log"), "utf8");
  } catch {
    return "";
  }
};

// The v1 SDK client straight to a handshake-era server: the reference a modern client through
// mcp-lazy must equal.
async function legacyStraight(args, answer = "forty-two") {
  const t = new StdioClientTransport({ command: "node", args, stderr: "pipe" });
  const c = new Client({ name: "legacy", version: "1" }, { capabilities: { elicitation: {}, sampling: {}, roots: {} } });
  c.setRequestHandler(ElicitRequestSchema, async () => ({ action: "accept", content: { answer } }));
  c.setRequestHandler(CreateMessageRequestSchema, async () => ({
    role: "assistant",
    content: { type: "text", text: answer },
    model: "test-model",
    stopReason: "endTurn",
  }));
  c.setRequestHandler(ListRootsRequestSchema, async () => ({ roots: [{ uri: "file:///r", name: "r" }] }));
  await c.connect(t);
  return c;
}

test("a modern request without clientInfo reaches a handshake-era backend, initialized in mcp-lazy's name", async () => {
  const m = manifest(
    "everything.yaml",
    `backends:
  everything:
    command: [node, ${SERVER_SCRIPTS.everything}, stdio]
tools:
${TOOL("echo", "everything")}`,
  );
  const p = new RawPeer(MCP_LAZY, direct(m));
  const meta = ENVELOPE({});
  delete meta["io.modelcontextprotocol/clientInfo"];
  const r = await p.request({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "echo", arguments: { message: "hi" }, _meta: meta } }, 30000);
  assert.deepEqual(r.result, { content: [{ type: "text", text: "Echo: hi" }], resultType: "complete" }, JSON.stringify(r));
  await p.close();
});
