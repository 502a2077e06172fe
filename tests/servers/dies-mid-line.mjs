#!/usr/bin/env node
// A handshake-era server that dies in the middle of an answer line, for the crash tests
// (tests/integration/crash.test.mjs). Everything it does follows from what it is sent, nothing from
// time. Tools:
//   hold   keeps the call open (under arguments.tag), and says so with a progress notification
//          for the call's progressToken: "holding TAG"
//   crash  in one write: the whole answer to the call held under arguments.whole ("answer for TAG
//          from PID"), then the first bytes of the answer to the call held under arguments.cut
//          (no newline, with text that must never reach a client); then it exits with status 3.
//          The crash call itself is never answered.
//   ask    sends sampling/createMessage to the client (its id "q" + the call's id) and keeps the call
//          open; the client's answer ends the call ("asked: TEXT", the answer's content text)
//   exit   exits with status 3 at once
//   echo   "echo MESSAGE from PID"
// Each tools/call it reads is noted in $NOTE_FILE as "PID NAME TAG": which process ran which call.
import { appendFileSync } from "node:fs";
import { createInterface } from "node:readline";

const CUT_TEXT = "PARTIAL-ANSWER-MUST-NEVER-ARRIVE";
const send = (m) => process.stdout.write(JSON.stringify(m) + "\n");
const text = (id, t) => ({ jsonrpc: "2.0", id, result: { content: [{ type: "text", text: t }] } });
const held = new Map(); // tag -> the held call's id
const asked = new Map(); // our request's id -> the call that asked

createInterface({ input: process.stdin }).on("line", (line) => {
  const m = JSON.parse(line);
  if (m.id === undefined) return;
  if (m.method === undefined && asked.has(m.id)) return send(text(asked.get(m.id), `asked: ${m.result?.content?.text}`));
  if (m.method === "initialize")
    return send({ jsonrpc: "2.0", id: m.id, result: { protocolVersion: m.params.protocolVersion, capabilities: { tools: {} }, serverInfo: { name: "dies-mid-line", version: "1" } } });
  if (m.method !== "tools/call") return send({ jsonrpc: "2.0", id: m.id, error: { code: -32601, message: "Method not found" } });
  const a = m.params.arguments ?? {};
  appendFileSync(process.env.NOTE_FILE, `${process.pid} ${m.params.name} ${a.tag ?? a.message ?? ""}\n`);
  switch (m.params.name) {
    case "hold":
      held.set(a.tag, m.id);
      return send({ jsonrpc: "2.0", method: "notifications/progress", params: { progressToken: m.params._meta?.progressToken, progress: 1, message: `holding ${a.tag}` } });
    case "crash": {
      const whole = JSON.stringify(text(held.get(a.whole), `answer for ${a.whole} from ${process.pid}`)) + "\n";
      const cut = JSON.stringify(text(held.get(a.cut), `${CUT_TEXT} ${"x".repeat(64)}`)).slice(0, -20);
      return process.stdout.write(whole + cut, () => process.exit(3));
    }
    case "ask":
      asked.set(`q${m.id}`, m.id);
      return send({ jsonrpc: "2.0", id: `q${m.id}`, method: "sampling/createMessage", params: { messages: [{ role: "user", content: { type: "text", text: "?" } }], maxTokens: 1 } });
    case "exit":
      return process.exit(3);
    case "echo":
      return send(text(m.id, `echo ${a.message} from ${process.pid}`));
  }
});
