// throughput.mjs — bench section 7: pipelined tools/call throughput to a C backend that answers at
// once (floor.c), alone on its stdio pipe vs through one pooled mcp-lazy-shimd (listening socket
// from systemd-socket-activate, as systemd's mcp-lazy@.socket would pass it) with 1, 10 and 100
// sessions, and through the frontend and the shim for one session. The same number of calls is in
// flight on both sides of each comparison (DEPTH per session), and the runs are interleaved.
import { connect } from "node:net";
import { existsSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Peer, descendants, heading, initialize, initialized, median, now, procCpuMs, quantile, ratio, sleep, table } from "./lib.mjs";

const DEPTH = 64;
const TOOL = "floor_echo";

// A manifest with one backend, the C floor, behind a socket where the shim listens.
export function floorManifest(floor, socket, extra = "") {
  return [
    "server: {name: bench-floor, version: \"1.0.0\"}",
    "backends:",
    "  cfloor:",
    `    command: [${JSON.stringify(floor)}, backend]`,
    `    socket: ${socket}`,
    "    idle_timeout: 5m",
    extra,
    "tools:",
    `  - name: ${TOOL}`,
    "    description: answers at once",
    "    backend: cfloor",
    '    input_schema: {"type":"object"}',
  ].filter(Boolean).join("\n") + "\n";
}

// One line-level channel: write(text) and a data handler; end() closes it.
function socketChannel(path) {
  return new Promise((resolve, reject) => {
    const s = connect(path);
    s.once("error", reject);
    s.once("connect", () => resolve({ write: (t) => s.write(t), on: (f) => s.on("data", f), off: () => s.removeAllListeners("data"), end: () => s.destroy() }));
  });
}
// A Peer's stdio, without the Peer's own line collector (it would cost this side more than the other).
function peerChannel(p) {
  const out = p.child.stdout;
  out.removeAllListeners("data");
  return { write: (t) => p.child.stdin.write(t), on: (f) => out.on("data", f), off: () => out.removeAllListeners("data"), end: () => {} };
}

// initialize (id 0), then initialized, on a raw channel.
async function handshakeChannel(ch) {
  await new Promise((resolve, reject) => {
    let buf = "";
    const timer = setTimeout(() => reject(new Error(`no initialize answer; got ${buf.slice(0, 300)}`)), 15000);
    const f = (d) => {
      buf += d;
      if (!buf.includes("\n")) return;
      clearTimeout(timer);
      ch.off();
      if (!buf.includes('"result"')) reject(new Error(`initialize failed: ${buf.slice(0, 300)}`));
      else resolve();
    };
    ch.on(f);
    ch.write(JSON.stringify(initialize(0)) + "\n");
  });
  ch.write(JSON.stringify(initialized) + "\n");
}

// Keeps DEPTH calls in flight on each channel until `calls` answers in all; returns wall ms.
async function pump(channels, calls) {
  const per = Math.ceil(calls / channels.length);
  const t0 = now();
  await Promise.all(channels.map((ch) => pumpChannel(ch, per, DEPTH)));
  return now() - t0;
}

// Keeps `inFlight` calls in flight on ch until `calls` answers; resolves then, rejects on an error answer.
function pumpChannel(ch, calls, inFlight) {
  const req = (id) => `{"jsonrpc":"2.0","id":${id},"method":"tools/call","params":{"name":"${TOOL}","arguments":{}}}\n`;
  return new Promise((resolve, reject) => {
    let sent = 0, got = 0, nextId = 1000;
    const send = (n) => {
      let text = "";
      for (let i = 0; i < n && sent < calls; i++, sent++) text += req(nextId++);
      if (text) ch.write(text);
    };
    const timer = setTimeout(() => reject(new Error(`stalled after ${got} of ${calls} answers`)), 60000);
    ch.on((d) => {
      let n = 0;
      for (let i = d.indexOf(10); i >= 0; i = d.indexOf(10, i + 1)) n++;
      if (d.includes('"error"')) {
        clearTimeout(timer);
        reject(new Error(`error answer: ${d.toString().slice(0, 300)}`));
        return;
      }
      got += n;
      if (got >= calls) {
        clearTimeout(timer);
        ch.off();
        resolve();
      } else send(n);
    });
    send(inFlight);
  });
}

export async function sectionThroughput({ floor, shimd, mcpLazy, work, quick, socketActivate = "/usr/bin/systemd-socket-activate" }) {
  heading(`7. Throughput: pipelined tools/call to a C backend that answers at once, ${DEPTH} in flight per session`);
  if (!existsSync(socketActivate)) throw new Error(`${socketActivate} is missing (Debian's systemd package)`);
  const sock = join(work, "cfloor.sock");
  const manifest = join(work, "throughput.yaml");
  writeFileSync(manifest, floorManifest(floor, sock, "    sharing: pooled"));
  const shim = new Peer(socketActivate, ["-l", sock, shimd, "--manifest", manifest, "cfloor"], { stderr: true });
  const reps = quick ? 1 : 3;
  const calls = quick ? 20000 : 60000;
  try {
    for (let i = 0; !existsSync(sock); i++) {
      if (i > 200) throw new Error(`systemd-socket-activate did not listen on ${sock}${shim.stderrHint()}`);
      await sleep(10);
    }
    const rows = [];
    const verdicts = [];
    const shimSide = async (sessions) => {
      const chs = await Promise.all(Array.from({ length: sessions }, () => socketChannel(sock)));
      try {
        await Promise.all(chs.map(handshakeChannel));
        const backends = descendants(shim.pid);
        const cpu0 = procCpuMs(shim.pid), b0 = backends.map(procCpuMs);
        const t = await pump(chs, calls);
        const shimCpu = procCpuMs(shim.pid) - cpu0;
        const backendCpu = backends.map(procCpuMs).reduce((a, v, i) => a + v - b0[i], 0);
        return { t, calls, shimCpu, backendCpu, backends: backends.length };
      } finally {
        for (const c of chs) c.end();
      }
    };
    const frontSide = async () => {
      const env = { ...process.env };
      delete env.MCP_LAZY_LOG_LEVEL;
      const p = new Peer(mcpLazy, ["--manifest", manifest], { env, stderr: true });
      try {
        const ch = peerChannel(p);
        await handshakeChannel(ch);
        const cpu0 = procCpuMs(p.pid), s0 = procCpuMs(shim.pid);
        const t = await pump([ch], calls);
        return { t, calls, frontCpu: procCpuMs(p.pid) - cpu0, shimCpu: procCpuMs(shim.pid) - s0 };
      } finally {
        await p.close();
      }
    };
    const rate = (r) => (r.calls / r.t) * 1000;
    const fmtRate = (v) => `${Math.round(v).toLocaleString("en-US")}/s`;
    const usPer = (cpuMs, n) => `${((cpuMs * 1000) / n).toFixed(2)} µs`;
    const subjects = [
      ...[1, 10, 100].map((s) => ({ label: `one pooled shim, ${s} session${s > 1 ? "s" : ""}`, sessions: s, run: () => shimSide(s) })),
      { label: "frontend + shim, 1 session", sessions: 1, run: frontSide, front: true },
    ];
    await shimSide(1); // the shim's first connection starts the backend: not measured
    for (const subj of subjects) {
      const A = [], S = [];
      for (let i = 0; i < reps; i++) {
        if (i % 2) {
          S.push(await subj.run());
          A.push(await aloneDeep(floor, subj.sessions, calls));
        } else {
          A.push(await aloneDeep(floor, subj.sessions, calls));
          S.push(await subj.run());
        }
      }
      const a = A.map(rate), s = S.map(rate);
      const n = S[0].calls * S.length;
      const shimCpu = S.reduce((x, r) => x + r.shimCpu, 0);
      const r = median(s) / median(a);
      rows.push([`backend alone, ${subj.sessions * DEPTH} in flight`, reps, fmtRate(median(a)), fmtRate(quantile(a, 0)), fmtRate(quantile(a, 1)), "", "", ""]);
      rows.push([`${subj.label}`, reps, fmtRate(median(s)), fmtRate(quantile(s, 0)), fmtRate(quantile(s, 1)), ratio(median(s), median(a)),
        usPer(shimCpu, n), subj.front ? usPer(S.reduce((x, q) => x + q.frontCpu, 0), n) : ""]);
      verdicts.push(`${subj.label}: ${r.toFixed(2)}x ${r >= 0.5 ? "met" : "NOT met"}`);
    }
    table(["path", "runs", "median", "min", "max", "ratio", "shim CPU/call", "frontend CPU/call"], rows);
    console.log(`  (${calls} calls a run, each pair interleaved; a session is a raw JSON-RPC client on the shim's socket;`);
    console.log("   CPU/call = /proc/PID/schedstat time over the run / calls; the backend is tests/bench/floor.c)");
    console.log(`  target: >= 0.5x the backend alone -> ${verdicts.join("; ")}`);
  } finally {
    await shim.close(3000);
  }
}

// The backend alone with sessions x DEPTH calls in flight on its one pipe.
async function aloneDeep(floor, sessions, calls) {
  const p = new Peer(floor, ["backend"]);
  try {
    const ch = peerChannel(p);
    await handshakeChannel(ch);
    const t = await pumpShared(ch, sessions, calls);
    return { t, calls };
  } finally {
    await p.close();
  }
}

// pump() for one pipe with k x DEPTH calls in flight.
async function pumpShared(ch, k, calls) {
  const t0 = now();
  await pumpChannel(ch, calls, k * DEPTH);
  return now() - t0;
}
