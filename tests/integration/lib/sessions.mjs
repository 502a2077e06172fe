// Many MCP sessions on one shim's socket, each holding its connection between calls as agent
// sessions do; run inside the box (the fleet test and `make bench`):
//   node sessions.mjs '{"socket": "/run/mcp-lazy/rec.sock", "sessions": 1000, "rounds": 3, "interval_ms": 1000, "extra": 1}'
// Options: "probe": N sequential calls on one session afterwards (latency with all others open),
// "unit": the shim's unit, whose RSS, descriptors and status line are read before closing.
// Opens `sessions` connections (initialize each), then `rounds` times calls `record` once on every
// session at once, a round every interval_ms; then opens `extra` more connections and calls once on
// each (past max_sessions these are refused). Prints one JSON line of figures.
// "raw": true also prints every latency (latency_raw, probe_raw, in ms), for a caller to pool runs.
// "keep": true: the first session, opened alone, holds a call at the backend (lib/recorder.mjs's
// hold/release) until the end, so the shim cannot idle out between the steps however slow they are.
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { connect } from "node:net";
import { onLines } from "./lines.mjs";

const o = JSON.parse(process.argv[2]);
const now = () => performance.now();

class Session {
  constructor(path, name) {
    this.name = name;
    this.nextId = 1;
    this.pending = new Map();
    this.unknown = 0; // answers to no request of ours, or a second answer to one
    this.closed = false;
    this.sock = connect(path);
    onLines(this.sock, (line) => {
      const m = JSON.parse(line);
      if (m.id === undefined) return; // notifications (the draining notice of a refusal)
      const p = this.pending.get(m.id);
      if (!p) this.unknown++;
      else {
        this.pending.delete(m.id);
        p(m);
      }
    });
    this.sock.on("error", (e) => this.fail(e));
    this.sock.on("close", () => this.fail(new Error("connection closed")));
  }
  fail(e) {
    this.closed = true;
    for (const [id, p] of this.pending) {
      this.pending.delete(id);
      p({ id, transportError: e.message });
    }
  }
  request(method, params) {
    const id = this.nextId++;
    return new Promise((resolve) => {
      if (this.closed) return resolve({ id, transportError: "connection closed" });
      this.pending.set(id, resolve);
      this.sock.write(JSON.stringify({ jsonrpc: "2.0", id, method, params }) + "\n");
    });
  }
  async init() {
    const r = await this.request("initialize", { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: this.name, version: "1" } });
    if (!r.result) throw new Error(`${this.name}: initialize failed: ${JSON.stringify(r)}`);
    this.sock.write(JSON.stringify({ jsonrpc: "2.0", method: "notifications/initialized" }) + "\n");
  }
  call(seq) {
    return this.request("tools/call", { name: "record", arguments: { session: this.name, seq } });
  }
}

async function inBatches(items, n, fn) {
  for (let i = 0; i < items.length; i += n) await Promise.all(items.slice(i, i + n).map(fn));
}

const figures = { sessions: 0, calls: 0, answered: 0, errors: 0, misrouted: 0, unknown: 0, transport: 0, latencies: [], refused: [] };
const t0 = now();
let kept;
const sessions = [];
if (o.keep) {
  sessions.push(new Session(o.socket, "s0"));
  await sessions[0].init();
  kept = sessions[0].request("tools/call", { name: "record", arguments: { session: "keep", seq: 0, hold: "keep" } });
}
for (let k = sessions.length; k < o.sessions; k++) sessions.push(new Session(o.socket, `s${k}`));
await inBatches(sessions.slice(o.keep ? 1 : 0), 100, (s) => s.init());
figures.sessions = sessions.length;
figures.open_ms = Math.round(now() - t0);

function check(s, seq, r, t) {
  figures.calls++;
  if (r.transportError) return void figures.transport++;
  figures.answered++;
  figures.latencies.push(now() - t);
  if (r.result?.isError || r.error) {
    figures.errors++;
    if (figures.errors <= 3) figures.firstError = JSON.stringify(r).slice(0, 300);
    return;
  }
  const got = JSON.parse(r.result.content[0].text);
  if (got.session !== s.name || got.seq !== seq) figures.misrouted++;
}

for (let round = 1; round <= o.rounds; round++) {
  const start = now();
  await Promise.all(
    sessions.map(async (s) => {
      const t = now();
      check(s, round, await s.call(round), t);
    }),
  );
  const left = o.interval_ms - (now() - start);
  if (round < o.rounds && left > 0) await new Promise((r) => setTimeout(r, left));
}

// Past the limit: a clear refusal, at once.
for (let k = 0; k < (o.extra ?? 0); k++) {
  const s = new Session(o.socket, `extra${k}`);
  const t = now();
  await s.request("initialize", { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: s.name, version: "1" } });
  const r = await s.call(1);
  figures.refused.push({ ms: Math.round(now() - t), isError: r.result?.isError ?? false, text: r.result?.content?.[0]?.text ?? JSON.stringify(r) });
  s.sock.destroy();
}
for (const s of sessions) figures.unknown += s.unknown;

if (o.raw) figures.latency_raw = figures.latencies.map((v) => Math.round(v * 1000) / 1000);
const lat = figures.latencies.sort((a, b) => a - b);
const q = (p) => (lat.length ? Math.round(lat[Math.min(lat.length - 1, Math.floor(p * lat.length))] * 100) / 100 : null);
figures.latency_ms = { n: lat.length, p50: q(0.5), p90: q(0.9), p99: q(0.99), max: q(1) };
delete figures.latencies;
// One session's calls one after another while every other session stays open.
if (o.probe) {
  const s = sessions[0];
  const t = [];
  for (let k = 0; k < o.probe; k++) {
    const t0 = now();
    const r = await s.call(1000 + k);
    if (!r.result || r.result.isError) figures.errors++;
    t.push(now() - t0);
  }
  if (o.raw) figures.probe_raw = t.map((v) => Math.round(v * 1000) / 1000);
  t.sort((a, b) => a - b);
  const at = (p) => Math.round(t[Math.min(t.length - 1, Math.floor(p * t.length))] * 1000) / 1000;
  figures.probe_ms = { n: t.length, p50: at(0.5), p90: at(0.9), p99: at(0.99) };
}
// The shim with every session still open: its memory and the status line systemd shows.
if (o.unit) {
  const show = (p) => execFileSync("systemctl", ["show", "-P", p, o.unit], { encoding: "utf8" }).trim();
  const pid = show("MainPID");
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  figures.shim = { pid: Number(pid), rss_kib: Number(/VmRSS:\s+(\d+)/.exec(status)[1]), hwm_kib: Number(/VmHWM:\s+(\d+)/.exec(status)[1]), fds: execFileSync("ls", [`/proc/${pid}/fd`], { encoding: "utf8" }).split("\n").filter(Boolean).length, status: show("StatusText") };
}
if (kept) {
  const released = await sessions[0].request("tools/call", { name: "record", arguments: { session: "keep", seq: 1, release: "keep" } });
  const held = await kept;
  if (!released.result || !held.result) throw new Error(`the kept call: ${JSON.stringify([held, released])}`);
}
for (const s of sessions) s.sock.end();
console.log(JSON.stringify(figures));
