// Raw MCP connections to a shim's socket for the per-peer tests, run inside the box (as any user):
//   node peer.mjs '{"socket": "...", "connections": [{"caps": {...}, "calls": [{name, arguments}, ...]}]}'
// A connection's "repeat": N sends its calls N times; "hold_ms": it reads nothing for that long after
// initialize (then reads on, and says whether the shim closed it: "closed"). With "hold_until" (a
// shell command), the held connections read on as soon as that command succeeds (polled), hold_ms
// being only the bound: a paused socket cannot see the shim close it, and a loaded machine can
// outlast any fixed hold. Each connection initializes with its capabilities, sends all its calls at
// once, and waits for every answer (or 20 s). Prints, per connection, the initialize answer and a
// count of answers by text. "keep": true (with lib/recorder.mjs as the backend): a connection of its
// own holds a call at the backend from before the others start until they are done, so the shim
// cannot idle out meanwhile however slow the machine.
import { execFileSync } from "node:child_process";
import { connect } from "node:net";
import { onLines } from "./lines.mjs";

const o = JSON.parse(process.argv[2]);

// The connection that holds the kept call: request() resolves with the answer to what it sent.
function keeper() {
  const sock = connect(o.socket);
  const waiting = new Map();
  onLines(sock, (line) => {
    const m = JSON.parse(line);
    waiting.get(m.id)?.(m);
  });
  const request = (id, method, params) =>
    new Promise((resolve) => {
      waiting.set(id, resolve);
      sock.write(JSON.stringify({ jsonrpc: "2.0", id, method, params }) + "\n");
    });
  const record = (id, args) => request(id, "tools/call", { name: "record", arguments: { session: "keep", seq: id, ...args } });
  return { sock, request, record };
}
let keep;
if (o.keep) {
  const k = keeper();
  await k.request(0, "initialize", { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "keeper", version: "1" } });
  k.sock.write(JSON.stringify({ jsonrpc: "2.0", method: "notifications/initialized" }) + "\n");
  keep = { ...k, held: k.record(1, { hold: "keep" }) };
}
const held = new Set();
let released = false;
let poll;
const release = () => {
  released = true;
  clearInterval(poll);
  for (const sock of held) sock.resume();
  held.clear();
};
if (o.hold_until) {
  poll = setInterval(() => {
    try {
      execFileSync("bash", ["-c", o.hold_until], { stdio: "ignore" });
    } catch {
      return;
    }
    release();
  }, 200);
}
const out = await Promise.all(
  o.connections.map(
    (c) =>
      new Promise((resolve) => {
        c.calls = Array.from({ length: c.repeat ?? 1 }, () => c.calls ?? []).flat();
        const sock = connect(o.socket);
        const res = { init: null, answers: {}, n: 0 };
        const want = 1 + (c.calls?.length ?? 0);
        const done = () => {
          sock.destroy();
          resolve(res);
        };
        const timer = setTimeout(done, o.timeout_ms ?? 20000);
        onLines(sock, (line) => {
          if (sock.destroyed) return; // done: what follows the refused initialize is not counted
          const m = JSON.parse(line);
          if (m.id === undefined) return;
          if (m.id === 0) {
            res.init = m.error ? { error: m.error.message } : { ok: true };
            if (m.error) {
              clearTimeout(timer);
              return done();
            }
            if (c.hold_ms && !released) {
              sock.pause();
              held.add(sock);
              setTimeout(() => held.delete(sock) && sock.resume(), c.hold_ms).unref();
            }
            sendCalls();
          } else {
            const text = m.error?.message ?? (m.result?.isError ? m.result.content[0].text : "ok");
            res.answers[text] = (res.answers[text] ?? 0) + 1;
          }
          if (++res.n === want) {
            clearTimeout(timer);
            done();
          }
        });
        sock.on("end", () => {
          if (c.hold_ms) res.closed = true;
          clearTimeout(timer);
          done();
        });
        sock.on("error", (e) => {
          res.error = e.message;
          done();
        });
        const send = (m) => sock.write(JSON.stringify({ jsonrpc: "2.0", ...m }) + "\n");
        send({ id: 0, method: "initialize", params: { protocolVersion: "2025-06-18", capabilities: c.caps ?? {}, clientInfo: { name: "peer", version: "1" } } });
        send({ method: "notifications/initialized" });
        const sendCalls = () => c.calls.forEach((call, k) => send({ id: k + 1, method: "tools/call", params: call }));
      }),
  ),
);
release();
if (keep) {
  const answers = [await keep.record(2, { release: "keep" }), await keep.held];
  if (!answers.every((m) => m.result && !m.result.isError)) throw new Error(`the kept call: ${JSON.stringify(answers)}`);
  keep.sock.end();
}
console.log(JSON.stringify(out));
