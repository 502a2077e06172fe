// cold.mjs — bench section 3: the first call from cold through mcp-lazy (direct activation), split
// into mcp-lazy's own phases and the backend's, beside the same backend started and called alone.
//
// Backends: the C backend of floor.c (it starts and answers in microseconds, so what is left is
// mcp-lazy's), then server-memory and server-everything (node: their own start varies by tens of ms
// from run to run, which is why mcp-lazy's share is never taken as a difference of two such runs).
// Each round runs mcp-lazy's first call and the backend alone back to back (the C backend: also the
// same through two socat relays started from nothing, the floor of two hops), the order rotating.
//
// Phase boundaries are the times the frontend and the shim wrote their debug lines to stderr
// (MCP_LAZY_LOG_LEVEL=debug, MCP_LAZY_LOG_TIME=monotonic: each line ends with CLOCK_MONOTONIC, the
// clock of node's process.hrtime; the shim inherits the frontend's stderr), from the moment the
// client wrote tools/call:
//   frontend  manifest read for the call  "Reading the manifest for a request" .. "Read the manifest"
//             (the session started from prepared answers)
//             the call in, connect          .. "Starting mcp-lazy-shimd"  (no socket: socketpair, fork)
//   shim      start                         .. "mcp-lazy-shimd: Reading the manifest"  (exec, dynamic linking)
//             manifest read                 .. "mcp-lazy-shimd: Read the manifest"
//             handshake and call in         .. "Starting backend"  (event loop, the frontend's handshake and call read)
//   backend   exec, start, first answer     .. "did not answer server/discover" (the probe), else "is ready after"
//             (from the moment the shim calls posix_spawn(), as the backend alone is timed from its spawn)
//   shim      handshake relay               .. "is ready after"  (initialize after the probe; nothing when the era is known)
//   backend   the call                      .. "answered its first call"
//   relay     the answer back               .. the result on the frontend's stdout
// mcp-lazy's own share of a run = the call's time minus the backend's own rows (start, the call):
// every other microsecond between tools/call and its result is mcp-lazy's. The shim keeps the era it
// learned in STATE_DIRECTORY, as its units give it: every activation but a backend's first skips the
// server/discover probe, and the warm-up run (the first) shows what the probe costs.
import { existsSync, mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Peer, heading, honest, median, ms, now, qcell, ratio, sleep, table } from "./lib.mjs";

// CLOCK_MONOTONIC in ms, as the log lines' stamps are.
const mono = () => Number(process.hrtime.bigint()) / 1e6;
// When the first stderr line matching re was written (ms, CLOCK_MONOTONIC), or undefined (a phase
// that did not happen in this run).
function lineAt(p, re) {
  const l = p.err.find((e) => re.test(e.line))?.line;
  const m = l && /\[monotonic (\d+)\.(\d{6})\]$/.exec(l);
  return m ? Number(m[1]) * 1000 + Number(m[2]) / 1000 : undefined;
}

// mcp-lazy's phases (own: true) and the backend's, in order; each ends where the next begins.
const PHASES = [
  { key: "feRead", own: true, label: "frontend: read the manifest for the call" },
  { key: "connect", own: true, label: "frontend: the call in, connect (no socket), socketpair, fork" },
  { key: "shimStart", own: true, label: "shim: exec, dynamic linking, start" },
  { key: "shimManifest", own: true, label: "shim: read the manifest" },
  { key: "spawn", own: true, label: "shim: event loop, the handshake and call in" },
  { key: "backendStart", own: false, label: "backend: spawn, exec, start, answer its first request", alone: "init" },
  { key: "handshake", own: true, label: "shim: handshake relay (initialize after the era probe)" },
  { key: "backendCall", own: false, label: "backend: the call", alone: "call" },
  { key: "relay", own: true, label: "relay: the answer back to the client" },
];

async function coldLazy(ctx, b) {
  const env = { ...process.env, MCP_LAZY_LOG_LEVEL: "debug", MCP_LAZY_LOG_TIME: "monotonic", STATE_DIRECTORY: ctx.stateDir };
  const p = new Peer(ctx.mcpLazy, ["--manifest", ctx.manifest, "--activation=direct", "--shimd", ctx.shimd], { env, stderr: true });
  try {
    p.write(ctx.initialize(0));
    const init = await p.response(0);
    const tSent = now(), tSentMono = mono();
    p.write(ctx.initialized, ctx.toolsCall(1, b.tool, b.args));
    const call = await p.response(1, 60000);
    ctx.checkToolResult(call.msg, `first ${b.tool} via mcp-lazy`);
    await p.stderrLine(/answered its first call/);
    const at = (re) => {
      const t = lineAt(p, re);
      return t === undefined ? undefined : t - tSentMono; // ms after tools/call was written
    };
    const t = {
      feReading: at(/^mcp-lazy: Reading the manifest for a request/),
      feRead: at(/^mcp-lazy: Read the manifest:/),
      fork: at(/^mcp-lazy: Starting mcp-lazy-shimd for/),
      shimReading: at(/^mcp-lazy-shimd: Reading the manifest/),
      shimRead: at(/^mcp-lazy-shimd: Read the manifest:/),
      spawning: at(/^mcp-lazy-shimd: Starting backend '/),
      probed: at(/did not answer server\/discover as a modern server/),
      ready: at(/is ready after \d+ ms/),
      answered: at(/answered its first call/),
    };
    const missing = Object.entries(t).filter(([k, v]) => v === undefined && !["feReading", "feRead", "probed"].includes(k));
    if (missing.length) throw new Error(`no time stamp for ${missing.map(([k]) => k).join(", ")}: ${p.stderrText.slice(-800)}`);
    const result = call.t - tSent;
    const feRead = t.feReading !== undefined && t.feRead !== undefined ? t.feRead - t.feReading : 0;
    const first = t.probed ?? t.ready;
    const r = {
      init: init.t - p.t0,
      call: result,
      total: call.t - p.t0,
      feRead,
      connect: t.fork - feRead,
      shimStart: t.shimReading - t.fork,
      shimManifest: t.shimRead - t.shimReading,
      spawn: t.spawning - t.shimRead,
      backendStart: first - t.spawning,
      handshake: t.ready - first,
      backendCall: t.answered - t.ready,
      relay: result - t.answered,
      probed: t.probed !== undefined,
    };
    r.own = PHASES.filter((x) => x.own).reduce((a, x) => a + r[x.key], 0);
    return r;
  } finally {
    await p.close();
  }
}

async function coldAlone(ctx, b, start = b.alone) {
  const p = start();
  try {
    p.write(ctx.initialize(0));
    const init = await p.response(0, 30000);
    const tSent = now();
    p.write(ctx.initialized, ctx.toolsCall(1, b.tool, b.args));
    const call = await p.response(1, 30000);
    ctx.checkToolResult(call.msg, `first ${b.tool} alone`);
    return { init: init.t - p.t0, call: call.t - tSent, total: call.t - p.t0 };
  } finally {
    await p.close();
  }
}

const signed = (v) => (v < 0 ? `-${ms(-v)}` : `+${ms(v)}`);
// "median / p90 / p99" of values in ms; a quantile without the samples for it says so (n<10, n<100).
const mp9 = (v) => [0.5, 0.9, 0.99].map((q) => qcell(v, q, ms)).join(" / ");

// A client that declares roots (Claude Code and VS Code do) at a pooled backend (a listening socket,
// Accept=no, as the shipped units): before its first call goes on, the shim asks it for roots/list
// through the frontend (its roots are part of the pool key), and the backend starts after the answer.
// The same first call with and without roots declared, each on a fresh pooled shim that
// systemd-socket-activate has started already (its era known, as above); the client answers at once.
async function coldPooled(ctx, name, roots) {
  const [tool, args] = ctx.backends[name].call;
  const dir = mkdtempSync(join(ctx.work, "cold-pooled-"));
  const sock = join(dir, `${name}.sock`), manifest = join(dir, "pooled.yaml");
  const file = ctx.memoryEnv(`memory-cold-pooled-${name}.jsonl`).MEMORY_FILE_PATH;
  writeFileSync(manifest, ["backends:", `  ${name}:`, `    command: ${JSON.stringify([process.execPath, ...ctx.backends[name].args])}`,
    `    env: {MEMORY_FILE_PATH: ${JSON.stringify(file)}}`, `    socket: ${sock}`, "    idle_timeout: 5m", "tools:",
    `  - {name: ${tool}, backend: ${name}, input_schema: {type: object}}`].join("\n"));
  // systemd-socket-activate passes on only what -E names.
  const shim = new Peer("/usr/bin/systemd-socket-activate", ["-l", sock, "-E", "MCP_LAZY_LOG_TIME=monotonic", "-E",
    `STATE_DIRECTORY=${ctx.pooledStateDir}`, ctx.shimd, "--manifest", manifest, name], { stderr: true });
  let p;
  try {
    for (let i = 0; !existsSync(sock); i++) {
      if (i > 500) throw new Error(`systemd-socket-activate did not listen on ${sock}${shim.stderrHint()}`);
      await sleep(10);
    }
    p = new Peer(ctx.mcpLazy, ["--manifest", manifest, "--activation=systemd"], { stderr: true });
    const init = ctx.initialize(0);
    if (roots) init.params.capabilities = { roots: {} };
    p.write(init);
    await p.response(0);
    const tSent = now(), tSentMono = mono();
    p.write(ctx.initialized, ctx.toolsCall(1, tool, args));
    let asked;
    while (roots && asked === undefined) {
      const i = p.lines.findIndex(({ line }) => line.includes('"method":"roots/list"'));
      if (i >= 0) {
        const [{ t, line }] = p.lines.splice(i, 1);
        p.write({ jsonrpc: "2.0", id: JSON.parse(line).id, result: { roots: [{ uri: `file://${dir}` }] } });
        asked = t - tSent;
      } else if (now() - tSent > 30000 || p.exitCode !== undefined) throw new Error(`no roots/list from mcp-lazy${p.stderrHint()}${shim.stderrHint()}`);
      else await new Promise((r) => p.waiters.add(r));
    }
    const call = await p.response(1, 60000);
    ctx.checkToolResult(call.msg, `first ${tool} via a pooled shim`);
    await shim.stderrLine(/Started backend '/);
    return { asked, spawned: lineAt(shim, /Started backend '/) - tSentMono, call: call.t - tSent };
  } finally {
    await p?.close();
    shim.killTree();
  }
}

async function sectionColdRoots(ctx) {
  ctx = { ...ctx, pooledStateDir: join(ctx.work, "shim-state-pooled") };
  mkdirSync(ctx.pooledStateDir, { recursive: true });
  await coldPooled(ctx, "memory", false); // warm-up: the era probe, the page cache
  const R = [], N = [];
  for (let i = 0; i < ctx.runs.roots; i++) {
    if (i % 2) (N.push(await coldPooled(ctx, "memory", false)), R.push(await coldPooled(ctx, "memory", true)));
    else (R.push(await coldPooled(ctx, "memory", true)), N.push(await coldPooled(ctx, "memory", false)));
  }
  const q = (arr, k) => mp9(arr.map((x) => x[k]));
  const m = (arr, k) => median(arr.map((x) => x[k]));
  const extra = (k) => `${signed(m(R, k) - m(N, k))}, ${ratio(m(R, k), m(N, k))}`;
  console.log(`\n  memory (${ctx.backends.memory.call[0]}) at a pooled shim (its socket listening, the shim started), ${ctx.runs.roots} rounds, median / p90 / p99:`);
  table(["phase", "no roots", "client declares roots", "extra, ratio (medians)"], [
    ["tools/call written -> the shim's roots/list at the client", "", q(R, "asked"), ""],
    ["tools/call written -> the shim spawns the backend", q(N, "spawned"), q(R, "spawned"), extra("spawned")],
    ["tools/call written -> result", q(N, "call"), q(R, "call"), extra("call")],
  ]);
  console.log("  (roots are part of a pooled backend's key: the shim asks as soon as the session's initialize arrives, and the");
  console.log("   backend starts once the client has answered: the extra is one round trip shim -> frontend -> client and back;");
  console.log("   the result's difference is mostly the backend's own start varying)");
}

export async function sectionCold(ctx) {
  heading("3. First call from cold: mcp-lazy (direct activation) vs the backend alone (and two socat relays), by phase");
  ctx = { ...ctx, stateDir: join(ctx.work, "shim-state") };
  mkdirSync(ctx.stateDir, { recursive: true });
  const subjects = [
    {
      name: "C backend", tool: "floor_echo", args: {}, runs: ctx.runs.floor, alone: () => new Peer(ctx.floor, ["backend"], { stderr: true }),
      // The floor of two hops started from nothing: socat -> socat -> the backend over socketpairs, as
      // the frontend forks the shim over one (socat starts all three at once; mcp-lazy starts the shim
      // and the backend at the first call).
      relay: () => new Peer("socat", ["STDIO", `EXEC:'socat STDIO "EXEC:${ctx.floor} backend"'`], { stderr: true }),
    },
    // BENCH_QUICK=1 (one round of each): server-memory stands for both node servers.
    ...(ctx.runs.node > 1 ? ["memory", "everything"] : ["memory"]).map((name) => ({
      name, tool: ctx.backends[name].call[0], args: ctx.backends[name].call[1], runs: ctx.runs.node,
      alone: () => ctx.server(name, ctx.memoryEnv(`memory-cold-${name}.jsonl`)),
    })),
  ];
  const verdicts = [];
  for (const b of subjects) {
    // Warm-up: the page cache (the backend's files too), the prepared answers, and the first
    // activation, which probes the era.
    const first = await coldLazy(ctx, b);
    const L = [], A = [], R = [];
    // Each round runs every side once, the order rotating.
    const sides = [() => coldLazy(ctx, b), () => coldAlone(ctx, b), ...(b.relay ? [() => coldAlone(ctx, b, b.relay)] : [])];
    const out = [L, A, R];
    for (let i = 0; i < b.runs; i++)
      for (let k = 0; k < sides.length; k++) {
        const j = (i + k) % sides.length;
        out[j].push(await sides[j]());
      }
    const col = (arr, k) => arr.map((x) => x[k]);
    const q = (arr, k) => mp9(col(arr, k));
    const vs = (k, alone) => ratio(median(col(L, k)), median(col(A, alone)));
    const own = col(L, "own");
    // Every round's first result with mcp-lazy minus the backend alone's of the same round.
    const paired = L.map((x, i) => x.total - A[i].total);
    console.log(`\n  ${b.name} (${b.tool}), ${b.runs} rounds, median / p90 / p99:`);
    table(["phase", "mcp-lazy", "backend alone", "ratio (medians)", "whose"], [
      ["(a) process start -> initialize answered", q(L, "init"), q(A, "init"), vs("init", "init"), ""],
      ["(b) tools/call written -> result", q(L, "call"), q(A, "call"), vs("call", "call"), ""],
      ...PHASES.map((x) => [`    ${x.label}`, q(L, x.key), x.alone ? q(A, x.alone) : "", x.alone ? vs(x.key, x.alone) : "", x.own ? "mcp-lazy" : "backend"]),
      ["    mcp-lazy's own share: (b) minus the backend's rows", q(L, "own"), "", "", "mcp-lazy"],
      ["process start -> first result", q(L, "total"), q(A, "total"), vs("total", "total"), ""],
      ...(R.length ? [["  the same through two socat relays (floor)", q(R, "total"), "", ratio(median(col(R, "total")), median(col(A, "total"))), ""],
        ["  mcp-lazy / two socat relays", [0.5, 0.9, 0.99].map((x) => ratio(honest(col(L, "total"), x), honest(col(R, "total"), x))).join(" / "), "", "", ""]] : []),
    ]);
    const probeCost = first.probed ? first.handshake : NaN;
    const phaseSum = PHASES.filter((x) => x.own).reduce((a, x) => a + median(col(L, x.key)), 0);
    console.log(`  mcp-lazy's own share ${ms(median(own))} (p90 ${qcell(own, 0.9, ms)}, p99 ${qcell(own, 0.99, ms)}, ${own.length} rounds; its phases' medians add up to ${ms(phaseSum)}: ` +
      `a wait for a CPU in any one phase counts in its run); the backend's start under the shim ` +
      `${ratio(median(col(L, "backendStart")), median(col(A, "init")))} its start alone; first result with mcp-lazy minus ` +
      `alone, paired per round: ${signed(median(paired))} (p10 ${qcell(paired, 0.1, signed)}, p90 ${qcell(paired, 0.9, signed)}, p99 ${qcell(paired, 0.99, signed)})` +
      (first.probed ? `; the first activation's era probe: +${ms(probeCost)}` : ""));
    verdicts.push(`${b.name} ${ms(median(own))}`);
    b.ownMedian = median(own);
  }
  const met = subjects.every((b) => b.ownMedian < 5);
  console.log(`\n  target: mcp-lazy's own share of the first call (connect, activation, shim start, manifest reads, spawn, ` +
    `handshake relay, the answer's way back) < 5 ms -> ${verdicts.join(", ")} ${met ? "met" : "NOT met"}`);
  console.log("  (own share = tools/call written -> result, minus the backend's own start and call as the shim saw them, per run,");
  console.log("   median over the rounds; phase boundaries: the frontend's and the shim's debug lines (CLOCK_MONOTONIC); the era");
  console.log("   known from an earlier activation (STATE_DIRECTORY), as for every activation but a backend's first; (a) is");
  console.log("   answered from prepared answers and not counted; paired = each round's first result minus the backend alone's)");
  await sectionColdRoots(ctx);
}
