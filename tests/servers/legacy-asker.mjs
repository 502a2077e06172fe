#!/usr/bin/env node
// A handshake-era MCP server (SDK 1.x) whose tools ask their client: elicitation, sampling, roots,
// two rounds, two questions at once. What its requests to the client met (an answer, an error, a
// cancellation of the call), and the params of its initialize, are appended to $LEGACY_ASKER_LOG, if set.
import { appendFileSync } from "node:fs";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { z } from "zod";

const log = (line) => process.env.LEGACY_ASKER_LOG && appendFileSync(process.env.LEGACY_ASKER_LOG, line + "\n");
const server = new McpServer({ name: "legacy-asker", version: "1.0.0" });
const schema = { type: "object", properties: { answer: { type: "string" } }, required: ["answer"] };
const text = (t) => ({ content: [{ type: "text", text: t }] });

async function elicit(message, extra) {
  extra.signal.addEventListener("abort", () => log(`cancelled: ${message}`));
  try {
    const r = await server.server.elicitInput({ message, requestedSchema: schema }, { signal: extra.signal });
    log(`answered: ${message}`);
    return r.action === "accept" ? r.content.answer : `(${r.action})`;
  } catch (e) {
    log(`failed: ${message}: ${e.message}`);
    throw e;
  }
}

async function sample(prompt) {
  const r = await server.server.createMessage({ messages: [{ role: "user", content: { type: "text", text: prompt } }], maxTokens: 50 });
  return r.content.text;
}

server.registerTool("echo", { description: "Echo a message", inputSchema: { message: z.string() } }, async ({ message }) =>
  text(`Echo: ${message}`),
);
server.registerTool("ask", { description: "Ask the user a question", inputSchema: { question: z.string() } }, async ({ question }, extra) =>
  text(`${question} -> ${await elicit(question, extra)}`),
);
server.registerTool("ask-twice", { description: "Ask two questions, one after the other", inputSchema: {} }, async (_, extra) => {
  const first = await elicit("first?", extra);
  const second = await elicit("second?", extra);
  return text(`${first} then ${second}`);
});
server.registerTool("ask-both", { description: "Ask the user and the model at once", inputSchema: {} }, async (_, extra) => {
  const [user, model] = await Promise.all([elicit("user?", extra), sample("model?")]);
  return text(`user said ${user}, model said ${model}`);
});
server.registerTool("ask-progress", { description: "Report progress, ask, report again", inputSchema: {} }, async (_, extra) => {
  const token = extra._meta?.progressToken;
  const progress = (n, message) =>
    token !== undefined && extra.sendNotification({ method: "notifications/progress", params: { progressToken: token, progress: n, total: 2, message } });
  await progress(1, "before");
  const answer = await elicit("go on?", extra);
  await progress(2, "after");
  return text(`went on: ${answer}`);
});
server.registerTool("think", { description: "Ask the client model", inputSchema: { prompt: z.string() } }, async ({ prompt }) =>
  text(`model said: ${await sample(prompt)}`),
);
server.registerTool("roots", { description: "List the client's roots", inputSchema: {} }, async () => {
  const { roots } = await server.server.listRoots();
  return text(`roots: ${roots.map((r) => r.uri).join(", ")}`);
});
server.registerPrompt("greet", { description: "Greet someone the user names", argsSchema: {} }, async (_, extra) => ({
  messages: [{ role: "user", content: { type: "text", text: `Say hello to ${await elicit("who?", extra)}` } }],
}));

const transport = new StdioServerTransport();
await server.connect(transport);
// The initialize it got, as its params (what a client, or mcp-lazy for it, said).
const onmessage = transport.onmessage;
transport.onmessage = (m, extra) => {
  if (m.method === "initialize") log(`initialize: ${JSON.stringify(m.params)}`);
  onmessage(m, extra);
};
