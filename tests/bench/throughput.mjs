// throughput.mjs — bench section 7: pipelined tools/call throughput to a C backend that answers at
// once (floor.c), alone on its stdio pipe vs through one pooled mcp-lazy-shimd (listening socket
// from systemd-socket-activate, as systemd's mcp-lazy@.socket would pass it) with 1, 10 and 100
// sessions, and through the frontend and the shim for one session; for one session also through the
// floors a relay could cost (socat, systemd-socket-proxyd, two socats). The same number of calls is in
// flight on every side of a comparison (DEPTH per session), and the runs are interleaved.
// Every backend here, and every process the bench talks to on stdio, on pipes, as the shim gives its
// backend: node's own stdio for a child is a socketpair per fd and socat EXEC's one socketpair, both
// of which cost the C backend more per call than pipes (FINDINGS-floorcheck.md).
import { connect } from "node:net";
import { existsSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Peer, descendants, enough, heading, honest, initialize, initialized, median, now, procCpuMs, quantile, ratio, sleep, table, tooFew } from "./lib.mjs";

const DEPTH = 64;
const TOOL = "floor_echo";
const SOCKET_PROXYD = "/usr/lib/systemd/systemd-socket-proxyd";

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
  const out = p.stdout;
  out.removeAllListeners("data");
  return { write: (t) => p.stdin.write(t), on: (f) => out.on("data", f), off: () => out.removeAllListeners("data"), end: () => {} };
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

// The two sides of a pair take turns in short runs (alternating which goes first), their processes
// and connections kept between runs, so that what else the machine does (on 2 shared cores the rate
// moves between regimes lasting 100-200 ms, and a process can wait tens of ms for a CPU) hits both
// alike. A run keeps its calls in flight for runMs, then stops sending and waits for what is in
// flight. Its rate is read in windows of WINDOW_MS from SKIP_MS (the pipes filling) to runMs (the
// last window with every call still in flight), counting answers by when they arrived: each window is
// one sample, and the rounds' windows pooled give a median, p90 and p99 of the rate.
const WINDOW_MS = 20, SKIP_MS = 20;

// Keeps `inFlight` calls in flight on ch until the time `until`, then waits for the answers still due;
// resolves to the number of answers, rejects on an error answer. Every chunk read adds [time, answers]
// to arrivals.
function pumpChannel(ch, until, inFlight, arrivals) {
  const req = (id) => `{"jsonrpc":"2.0","id":${id},"method":"tools/call","params":{"name":"${TOOL}","arguments":{}}}\n`;
  ch.nextId ??= 1000;
  return new Promise((resolve, reject) => {
    let sent = 0, got = 0;
    const send = (n) => {
      let text = "";
      for (let i = 0; i < n; i++, sent++) text += req(ch.nextId++);
      if (text) ch.write(text);
    };
    const timer = setTimeout(() => reject(new Error(`stalled after ${got} of ${sent} answers`)), until - now() + 60000);
    ch.on((d) => {
      const t = now();
      let n = 0;
      for (let i = d.indexOf(10); i >= 0; i = d.indexOf(10, i + 1)) n++;
      if (d.includes('"error"')) {
        clearTimeout(timer);
        reject(new Error(`error answer: ${d.toString().slice(0, 300)}`));
        return;
      }
      got += n;
      arrivals.push([t, n]);
      if (t < until) send(n);
      else if (got >= sent) {
        clearTimeout(timer);
        ch.off();
        resolve(got);
      }
    });
    send(inFlight);
  });
}

// One run on channels, inFlight calls on each, with the CPU time of pids (by name) over it.
async function run(channels, inFlight, runMs, pids) {
  const arrivals = [];
  const cpu0 = Object.fromEntries(Object.entries(pids).map(([k, v]) => [k, cpuOf(v)]));
  const t0 = now();
  const counts = await Promise.all(channels.map((ch) => pumpChannel(ch, t0 + runMs, inFlight, arrivals)));
  const cpu = Object.fromEntries(Object.entries(pids).map(([k, v]) => [k, cpuOf(v) - cpu0[k]]));
  return { t0, calls: counts.reduce((a, n) => a + n, 0), arrivals, cpu, runMs };
}
const cpuOf = (pids) => pids.map(procCpuMs).reduce((a, v) => a + (v ?? 0), 0);

// The rate (calls/s) in each window of a run.
function windowRates({ t0, arrivals, runMs }) {
  const counts = new Array(Math.floor((runMs - SKIP_MS) / WINDOW_MS)).fill(0);
  for (const [t, k] of arrivals) {
    const w = Math.floor((t - t0 - SKIP_MS) / WINDOW_MS);
    if (w >= 0 && w < counts.length) counts[w] += k;
  }
  return counts.map((c) => (c * 1000) / WINDOW_MS);
}
// A run's rate over all its windows.
const runRate = (r) => {
  const w = windowRates(r);
  return w.reduce((a, v) => a + v, 0) / w.length;
};

// Median, p90 and p99 of the windows' rates, the slow side: p90 is the rate that 90% of the windows
// reached or beat (the 90th percentile of the time per call), as a latency's p90 is its slow side.
// A quantile q takes 1/(1-q) samples at least (a p99 of fewer would be the slowest window): NaN.
function rateQuantiles(rates) {
  const perCall = rates.map((r) => (r > 0 ? 1 / r : Infinity));
  return [0.5, 0.9, 0.99].map((q) => 1 / honest(perCall, q));
}

export async function sectionThroughput({ floor, shimd, mcpLazy, work, quick, socketActivate = "/usr/bin/systemd-socket-activate" }) {
  heading(`7. Throughput: pipelined tools/call to a C backend that answers at once, ${DEPTH} in flight per session`);
  if (!existsSync(socketActivate)) throw new Error(`${socketActivate} is missing (Debian's systemd package)`);
  const sock = join(work, "cfloor.sock");
  const manifest = join(work, "throughput.yaml");
  writeFileSync(manifest, floorManifest(floor, sock, "    sharing: pooled"));
  const shim = new Peer(socketActivate, ["-l", sock, shimd, "--manifest", manifest, "cfloor"], { stderr: true });
  // Rounds of a run on each side: 12 x 9 windows of 20 ms, enough for a p99 (QUICK: 2 x 4, no p90 either).
  const rounds = quick ? 2 : 12;
  const runMs = quick ? 100 : 200;
  const opened = [];
  try {
    for (let i = 0; !existsSync(sock); i++) {
      if (i > 200) throw new Error(`systemd-socket-activate did not listen on ${sock}${shim.stderrHint()}`);
      await sleep(10);
    }
    // Each side: opened once, then run(ms) as many times as there are rounds.
    const aloneSide = async (sessions) => {
      const p = new Peer(floor, ["backend"], { pipes: true });
      opened.push(() => p.close());
      const ch = peerChannel(p);
      await handshakeChannel(ch);
      return (ms) => run([ch], sessions * DEPTH, ms, { backend: [p.pid] });
    };
    const shimSide = async (sessions) => {
      const chs = await Promise.all(Array.from({ length: sessions }, () => socketChannel(sock)));
      opened.push(() => chs.forEach((c) => c.end()));
      await Promise.all(chs.map(handshakeChannel));
      const backends = descendants(shim.pid);
      return (ms) => run(chs, DEPTH, ms, { shim: [shim.pid], backend: backends });
    };
    const frontSide = async () => {
      const env = { ...process.env };
      delete env.MCP_LAZY_LOG_LEVEL;
      const p = new Peer(mcpLazy, ["--manifest", manifest], { env, stderr: true, pipes: true });
      opened.push(() => p.close());
      const ch = peerChannel(p);
      await handshakeChannel(ch);
      const backends = descendants(shim.pid);
      return (ms) => run([ch], DEPTH, ms, { front: [p.pid], shim: [shim.pid], backend: backends });
    };
    // The floors a hop could cost, for one session: the backend behind one relay on the socket the
    // client connects to (socat, or systemd's own socket-activated systemd-socket-proxyd in front of
    // the backend listening on a socket: floor.c listen), and behind two socat relays from stdio (the
    // frontend and the shim's hops). The backends in a session of their own, as the shim's are.
    const waitFor = async (paths, who) => {
      for (let i = 0; !paths.every(existsSync); i++) {
        if (i > 300) throw new Error(`${paths.join(", ")} did not appear${who.map((p) => p.stderrHint()).join("")}`);
        await sleep(10);
      }
    };
    let relays = 0;
    const socatServer = async () => {
      const path = join(work, `relay-${relays++}.sock`);
      const p = new Peer("socat", [`UNIX-LISTEN:${path}`, `EXEC:${floor} backend,setsid,pipes`], { stderr: true });
      opened.push(() => p.close(3000));
      await waitFor([path], [p]);
      return { path, pids: () => [p.pid], backends: () => descendants(p.pid) };
    };
    const socatSide = async () => {
      const server = await socatServer();
      const ch = await socketChannel(server.path);
      opened.push(() => ch.end());
      await handshakeChannel(ch);
      return (ms) => run([ch], DEPTH, ms, { shim: server.pids(), backend: server.backends() });
    };
    const proxydSide = async () => {
      const a = join(work, `relay-${relays++}.sock`), b = join(work, `relay-${relays++}.sock`);
      const backend = new Peer("setsid", [floor, "listen", b], { stderr: true });
      const proxy = new Peer(socketActivate, ["-l", a, SOCKET_PROXYD, b], { stderr: true });
      opened.push(() => backend.killTree(), () => proxy.killTree());
      await waitFor([a, b], [proxy, backend]);
      const ch = await socketChannel(a);
      opened.push(() => ch.end());
      await handshakeChannel(ch);
      const proxyd = descendants(proxy.pid).concat(proxy.pid);
      return (ms) => run([ch], DEPTH, ms, { shim: proxyd, backend: [backend.pid, ...descendants(backend.pid)] });
    };
    const twoSocatSide = async () => {
      const server = await socatServer();
      const client = new Peer("socat", ["STDIO", `UNIX-CONNECT:${server.path}`], { stderr: true, pipes: true });
      opened.push(() => client.close(3000));
      const ch = peerChannel(client);
      await handshakeChannel(ch);
      return (ms) => run([ch], DEPTH, ms, { front: [client.pid], shim: server.pids(), backend: server.backends() });
    };
    const closeOpened = async () => {
      for (const f of opened.splice(0).reverse()) await f(); // the last opened first
    };
    const fmtRate = (v, q) => (Number.isFinite(v) ? `${Math.round(v).toLocaleString("en-US")}/s` : tooFew(q));
    const Q = [0.5, 0.9, 0.99];
    const usPer = (runs, k) => {
      const calls = runs.reduce((a, r) => a + r.calls, 0);
      return `${((runs.reduce((a, r) => a + r.cpu[k], 0) * 1000) / calls).toFixed(2)} µs`;
    };
    const subjects = [
      { label: "one pooled shim, 1 session", sessions: 1, open: () => shimSide(1),
        floors: [["socat relay (socket -> socat -> backend), 1 session", socatSide],
          ["systemd-socket-proxyd (socket -> proxyd -> backend's socket), 1 session", proxydSide]] },
      ...[10, 100].map((s) => ({ label: `one pooled shim, ${s} sessions`, sessions: s, open: () => shimSide(s), floors: [] })),
      { label: "frontend + shim, 1 session", sessions: 1, open: frontSide, front: true,
        floors: [["two socat relays (stdio -> socat -> socat -> backend), 1 session", twoSocatSide]] },
    ];
    await (await shimSide(1))(50); // the shim's first connection starts the backend: not measured
    await closeOpened();
    const rows = [];
    const verdicts = [];
    for (const subj of subjects) {
      // The sides of this pair (or more, with floors): each opened, warmed up, then one run per round,
      // the order rotating round by round.
      const sides = [{ label: `backend alone, ${subj.sessions * DEPTH} in flight`, open: () => aloneSide(subj.sessions) },
        ...subj.floors.map(([label, open]) => ({ label, open, floor: true })), { label: subj.label, open: subj.open, subject: true }];
      for (const x of sides) {
        x.run = await x.open();
        await x.run(quick ? 25 : 50); // warm-up, not measured
        x.runs = [];
      }
      for (let i = 0; i < rounds; i++)
        for (let k = 0; k < sides.length; k++) {
          const x = sides[(i + k) % sides.length];
          x.runs.push(await x.run(runMs));
        }
      await closeOpened();
      const [alone] = sides;
      for (const x of sides) {
        x.windows = x.runs.flatMap(windowRates);
        x.q = rateQuantiles(x.windows);
      }
      const cpu = (x, k) => (x.runs[0].cpu[k] === undefined ? "" : usPer(x.runs, k));
      for (const x of sides) {
        const paired = x.runs.map((r, i) => runRate(r) / runRate(alone.runs[i]));
        const spread = enough(paired.length, 0.9) ? ` (${ratio(quantile(paired, 0.1), 1)}-${ratio(quantile(paired, 0.9), 1)})` : ` (${tooFew(0.9)})`;
        rows.push([x.label, x.windows.length, ...x.q.map((v, k) => fmtRate(v, Q[k])), x === alone ? "" : x.q.map((v, k) => ratio(v, alone.q[k])).join(" / "),
          x === alone ? "" : `${ratio(median(paired), 1)}${spread}`, cpu(x, "shim"), cpu(x, "backend"), cpu(x, "front")]);
      }
      const lazy = sides.at(-1), r = lazy.q[0] / alone.q[0];
      const vsFloors = subj.floors.length ? ` (${sides.filter((x) => x.floor).map((x) => `${ratio(x.q[0], alone.q[0])} through ${x.label.replace(/ \(.*/, "")}`).join(", ")})` : "";
      verdicts.push(`${subj.label}: ${r.toFixed(2)}x ${r >= 0.5 ? "met" : "NOT met"}${vsFloors}`);
    }
    table(["path", "windows", "median", "p90", "p99", "ratio med / p90 / p99", "per round (p10-p90)", "shim (relay) CPU/call", "backend CPU/call",
      "frontend (relay) CPU/call"], rows);
    console.log(`  (${rounds} rounds of a ${runMs} ms run on each side, the sides' processes and connections kept, the order rotating;`);
    console.log(`   the rate is read in windows of ${WINDOW_MS} ms after the first ${SKIP_MS} ms of a run (the pipes filling), one sample a`);
    console.log("   window; p90 and p99 are the slow side: the rate 90% and 99% of the windows reached (n<100: too few windows for a p99);");
    console.log(`   per round = each round's rate over its windows / the backend alone's in the same round, median (p10-p90) of the ${rounds};`);
    console.log("   a session is a raw JSON-RPC client on the shim's socket; CPU/call = /proc/PID/schedstat time over the runs / calls;");
    console.log("   the backend is tests/bench/floor.c)");
    console.log(`  target: >= 0.5x the backend alone (the medians) -> ${verdicts.join("; ")}`);
  } finally {
    for (const f of opened.splice(0).reverse()) await f(); // the last opened first
    // The shim idles out only after its manifest's 5 minutes (closing its stdin ends nothing): at once.
    shim.killTree();
    await shim.exited;
  }
}
