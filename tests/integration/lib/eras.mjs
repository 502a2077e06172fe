// The 2026-07-28 era in tests: the v2 SDK client in its three modes, the modern test server, envelopes.
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { Client } from "@modelcontextprotocol/client";
import { StdioClientTransport } from "@modelcontextprotocol/client/stdio";
import { TESTS } from "./env.mjs";

export const MODERN_SERVER = join(TESTS, "servers/modern.mjs");
export const MODERN = "2026-07-28";

export const ENVELOPE = (capabilities = {}, version = MODERN) => ({
  "io.modelcontextprotocol/protocolVersion": version,
  "io.modelcontextprotocol/clientCapabilities": capabilities,
  "io.modelcontextprotocol/clientInfo": { name: "raw-modern", version: "1" },
});

// A modern request as a raw peer writes it.
export const MREQ = (id, method, params = {}, capabilities = {}) => ({
  jsonrpc: "2.0",
  id,
  method,
  params: { ...params, _meta: { ...(params._meta ?? {}), ...ENVELOPE(capabilities) } },
});

// The v2 SDK client: mode is 'legacy', 'auto' or 'pin' (2026-07-28 with no fallback). Its handlers
// answer elicitation and sampling with `answer` so a test can tell sessions apart.
// gate, if given, is awaited before an elicitation is answered.
export async function connectV2(mode, command, args, { answer = "forty-two", env, gate } = {}) {
  const versionNegotiation = mode === "pin" ? { mode: { pin: MODERN } } : { mode };
  const client = new Client(
    { name: `v2-${mode}`, version: "1.0.0" },
    { capabilities: { elicitation: {}, sampling: {} }, versionNegotiation },
  );
  client.seen = [];
  client.setRequestHandler("elicitation/create", async (r) => {
    client.seen.push(r.params.message);
    if (gate) await gate();
    return { action: "accept", content: { answer } };
  });
  client.setRequestHandler("sampling/createMessage", async () => ({
    role: "assistant",
    content: { type: "text", text: answer },
    model: "test-model",
    stopReason: "endTurn",
  }));
  const transport = new StdioClientTransport({ command, args, env: env ? { ...process.env, ...env } : undefined, stderr: "pipe" });
  client.stderrText = "";
  transport.stderr?.on("data", (d) => (client.stderrText += d));
  await client.connect(transport);
  client.transportPid = transport.pid;
  return client;
}

// What is left of a result once what may differ between a server and mcp-lazy in front of it is gone:
// the identity a result carries (serverInfo) and nothing else.
export function normalise(result) {
  const r = structuredClone(result);
  if (r?._meta) {
    delete r._meta["io.modelcontextprotocol/serverInfo"];
    if (Object.keys(r._meta).length === 0) delete r._meta;
  }
  return r;
}

// One scripted session with the modern test server's surface: every tool kind, a resource, a prompt.
export async function modernScript(client) {
  const out = {};
  out.tools = (await client.listTools()).tools.map((t) => t.name).sort();
  out.echo = normalise(await client.callTool({ name: "echo", arguments: { message: "hey" } }));
  out.add = normalise(await client.callTool({ name: "add", arguments: { a: 2, b: 40 } }));
  const progress = [];
  out.count = normalise(
    await client.callTool({ name: "count", arguments: { n: 3 } }, { onprogress: (p) => progress.push(p.progress) }),
  );
  // The v2 SDK runs a notification's handler a microtask after reading it, but forgets a request's
  // progress token as it reads the result: progress that comes in the same read as the result is
  // dropped ("unknown token"). How much does depends on how fast the client reads (at load 28 a
  // direct run kept [1] of [1, 2, 3]), so what is compared is that what came is in order.
  out.progress = progress.every((p, k) => p === k + 1) && progress.length <= 3 ? "in order" : progress;
  out.ask = normalise(await client.callTool({ name: "ask", arguments: { question: "the answer?" } }));
  out.think = normalise(await client.callTool({ name: "think", arguments: { prompt: "say something" } }));
  out.resource = normalise(await client.readResource({ uri: "modern://greeting" }));
  out.prompt = normalise(await client.getPrompt({ name: "greet", arguments: { who: "Ada" } }));
  return out;
}

// A JSON manifest for the modern test server, its entries exactly what the server lists (asked in the
// 2026-07-28 era). extra: more backend keys (protocol, sharing...).
export async function modernManifest(path, { args = [], extra = {}, name = "modern" } = {}) {
  const c = await connectV2("pin", "node", [MODERN_SERVER, ...args]);
  const { tools } = await c.listTools();
  const { resources } = await c.listResources();
  const { prompts } = await c.listPrompts();
  await c.close();
  const manifest = {
    backends: { [name]: { command: ["node", MODERN_SERVER, ...args], resources, prompts, ...extra } },
    tools: tools.map((t) => ({ ...t, backend: name })),
  };
  writeFileSync(path, JSON.stringify(manifest, null, 1));
  return path;
}
