// A small MCP server on stdio for load and fault tests: the tool `record` appends one line per
// execution to $RECORD_LOG ("SESSION SEQ PID", written when the call arrives, before it is answered),
// then answers after `delay_ms` with {session, seq, pid}, so a test can tell every call's fate:
// run once, run twice, answered to the wrong session, or never run. A call with `hold: KEY` is
// answered (and recorded) only once a call with `release: KEY` comes: a test keeps a call in flight,
// and with it the shim from idling out, for as long as its steps take.
import { appendFileSync } from "node:fs";
import { onLines } from "./lines.mjs";

const log = process.env.RECORD_LOG;
const held = new Map();
const send = (m) => process.stdout.write(JSON.stringify(m) + "\n");
const TOOL = {
  name: "record",
  description: "Records that it ran, then answers with who asked",
  inputSchema: { type: "object", properties: { session: { type: "string" }, seq: { type: "number" }, delay_ms: { type: "number" } } },
};

function handle(m) {
  if (m.id === undefined || typeof m.method !== "string") return; // notifications and answers
  switch (m.method) {
    case "initialize":
      return send({
        jsonrpc: "2.0",
        id: m.id,
        result: { protocolVersion: m.params?.protocolVersion ?? "2025-06-18", capabilities: { tools: {} }, serverInfo: { name: "recorder", version: "1.0.0" } },
      });
    case "ping":
      return send({ jsonrpc: "2.0", id: m.id, result: {} });
    case "tools/list":
      return send({ jsonrpc: "2.0", id: m.id, result: { tools: [TOOL] } });
    case "tools/call": {
      const a = m.params?.arguments ?? {};
      if (a.hold !== undefined) return void held.set(a.hold, m);
      if (a.release !== undefined) {
        const h = held.get(a.release);
        held.delete(a.release);
        if (h) handle({ ...h, params: { ...h.params, arguments: { ...h.params.arguments, hold: undefined } } });
      }
      if (log) appendFileSync(log, `${a.session} ${a.seq} ${process.pid}\n`);
      const answer = () =>
        send({ jsonrpc: "2.0", id: m.id, result: { content: [{ type: "text", text: JSON.stringify({ session: a.session, seq: a.seq, pid: process.pid, pad: a.pad > 0 ? "x".repeat(a.pad) : undefined }) }] } });
      return a.delay_ms > 0 ? setTimeout(answer, a.delay_ms) : answer();
    }
    default:
      return send({ jsonrpc: "2.0", id: m.id, error: { code: -32601, message: `no method ${m.method}` } });
  }
}

onLines(process.stdin, (line) => line.trim() && handle(JSON.parse(line)));
process.stdin.on("end", () => process.exit(0));
