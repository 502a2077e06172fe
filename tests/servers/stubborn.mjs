#!/usr/bin/env node
// A handshake-era server that will not stop: it ignores SIGTERM (saying so on stderr) and the end of
// its stdin, so only SIGKILL ends it (tests/integration/stubborn.test.mjs). Tools:
//   echo   "echo MESSAGE from PID"
//   flood  answers "flooding from PID", then writes without end: one endless line with neither id nor
//          method on stdout (past the shim's line limit the shim restarts it), and noise on stderr
import { writeSync } from "node:fs";
import { createInterface } from "node:readline";

const send = (m) => process.stdout.write(JSON.stringify(m) + "\n");
const text = (id, t) => ({ jsonrpc: "2.0", id, result: { content: [{ type: "text", text: t }] } });

process.on("SIGTERM", () => writeSync(2, `stubborn ${process.pid}: SIGTERM ignored\n`));
setInterval(() => {}, 1 << 30); // lives on after its stdin ends

const endless = "x".repeat(16384);
function flood() {
  try {
    writeSync(1, endless);
  } catch {} // EPIPE once the shim closed its end; stderr goes on
  try {
    writeSync(2, `stubborn ${process.pid}: noise ${"n".repeat(80)}\n`);
  } catch {}
  setTimeout(flood, 1);
}

createInterface({ input: process.stdin }).on("line", (line) => {
  const m = JSON.parse(line);
  if (m.id === undefined) return;
  if (m.method === "initialize")
    return send({ jsonrpc: "2.0", id: m.id, result: { protocolVersion: m.params.protocolVersion, capabilities: { tools: {} }, serverInfo: { name: "stubborn", version: "1" } } });
  if (m.method !== "tools/call") return send({ jsonrpc: "2.0", id: m.id, error: { code: -32601, message: "Method not found" } });
  const a = m.params.arguments ?? {};
  if (m.params.name === "echo") return send(text(m.id, `echo ${a.message} from ${process.pid}`));
  if (m.params.name === "flood") return process.stdout.write(JSON.stringify(text(m.id, `flooding from ${process.pid}`)) + "\n", flood);
});
