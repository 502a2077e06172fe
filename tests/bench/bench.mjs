// bench.mjs — what mcp-lazy costs and saves, measured against the real reference servers.
//
//   make bench     (cd tests && MCP_LAZY_BUILD=$PWD/../build node bench/bench.mjs [SECTION...])
//   BENCH_QUICK=1  fewer runs and no sections 4, 5, 6 and 8, for working on the bench itself (make bench QUICK=1)
//
// 1. startup: process start -> tools/list answered, and memory then, for 1/10/100/1000-tool manifests,
//    each beside a C floor (floor.c) that reads the same manifest and writes the same answer bytes,
//    the same floor linked with libsystemd (sd_event_default), mcp-lazy without its cache, and what
//    starting @modelcontextprotocol/server-memory costs a client today (startup.mjs);
// 2. warm call latency: straight to a server vs two socat relays (and two relays on sd-event,
//    sd-relay.c: what the loop mcp-lazy must use costs a relay) vs through mcp-lazy (direct
//    activation), for the C backend of floor.c and server-memory; 4b the same through systemd's socket
//    (part of section 4; `bench.mjs 4b` runs it alone);
// 3. the first call from cold, split into mcp-lazy's own phases, vs the server's own start and (the C
//    backend) two socat relays started from nothing (cold.mjs);
// 4. processes and memory of 10 sessions x 3 backends: every session starting its own servers
//    vs mcp-lazy with pooled backends behind systemd sockets (in a throwaway systemd box);
// 5. a frontend per backend vs one for the fleet, and 500 frontends of one user, inotify vs the
//    stat() timer (frontends.mjs; `node bench/frontends.mjs 1000` for a thousand);
// 6. a warm call to a backend on another host (a network namespace with sshd in the box) through
//    mcp-lazy and ssh, beside the same call through a plain `ssh HOST socat` relay (the floor);
// 7. throughput to floor.c's backend alone vs through one pooled shim and the frontend, and for one
//    session through socat and systemd-socket-proxyd relays (throughput.mjs);
// 8. a fleet on one pooled shim: 1 vs 1000 open sessions, the shim's RSS and descriptors, a call
//    from every session at once, and one session's call latency while the others stay open.
// 9. both eras: the cost of the 2026-07-28 envelope per call, beside the handshake-era path.
//
// Every timing is printed with its number of samples, median, p90 and p99 (a quantile without enough
// samples for it reads n<10 / n<100), beside its floor or rival from the same run, interleaved, with
// ratios. Targets are printed beside the figures; missing one never fails the run. A section that cannot
// run prints FAILED with the reason, and the run then exits 1. Nothing is left running.

import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { cpus, loadavg, tmpdir } from "node:os";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport, getDefaultEnvironment } from "@modelcontextprotocol/sdk/client/stdio.js";
import { startBox } from "../integration/lib/box.mjs";
import { sectionFrontends } from "./frontends.mjs";
import { addFarHost } from "../integration/lib/far.mjs";
import { sectionThroughput } from "./throughput.mjs";
import { sectionStartup } from "./startup.mjs";
import { sectionCold } from "./cold.mjs";
import { SESSIONS as SESSIONS_SCRIPT, recorderBox } from "../integration/lib/recorder-box.mjs";
import {
  CLIENT_INFO, Peer, alive, cmdline, descendants, honest, leftovers, demoTools, generateManifest, heading, initialize, initialized, killAllTracked, median,
  mib, ms, now, p90, p99, procCpuMs, quantile, procPss, procState, procStatus, processesMatching, qcell, ratio, reapTree, table, toolsCall, toolsList,
  trackPid, untrackPid, us,
} from "./lib.mjs";

const TESTS = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const ROOT = resolve(TESTS, "..");
const BUILD = resolve(TESTS, process.env.MCP_LAZY_BUILD ?? join(ROOT, "build"));
const MCP_LAZY = join(BUILD, "mcp-lazy");
const SHIMD = join(BUILD, "mcp-lazy-shimd");
const NODE = process.execPath;
const SERVERS = join(TESTS, "node_modules/@modelcontextprotocol");
const SCRIPT = {
  memory: join(SERVERS, "server-memory/dist/index.js"),
  everything: join(SERVERS, "server-everything/dist/index.js"),
  files: join(SERVERS, "server-filesystem/dist/index.js"),
};
// How each backend of manifests/demo.yaml is started, and the call the bench makes to it.
const BACKENDS = {
  memory: { args: [SCRIPT.memory], call: ["read_graph", {}] },
  everything: { args: [SCRIPT.everything, "stdio"], call: ["echo", { message: "hello from mcp-lazy-bench" }] },
  files: { args: [SCRIPT.files, "/tmp"], call: ["list_allowed_directories", {}] },
};

const QUICK = process.env.BENCH_QUICK === "1"; // fewer runs, for working on the bench itself
const RUNS = {
  startupLazy: QUICK ? 10 : 100, // rounds of section 1: 100 for a p99 at 100 and 1000 tools (30 at 1 and 10)
  startupNode: QUICK ? 2 : 5, // server-memory's start: one row, 60x the others
  warmCalls: QUICK ? 200 : 1000,
  warmUp: QUICK ? 50 : 200,
  // Warm calls of sections 2 and 4b, per backend: the C backend answers in µs, so its p99 gets more
  // rounds; server-memory runs in epochs, each with fresh processes on every path (a node process
  // can be tens of µs per call faster or slower than another for as long as it lives: the epochs
  // average that out, and a second direct process shows what is left of it). Its p99 is a node
  // process's tail (threadpool hand-offs, GC) more than anything a relay adds: 3000 rounds in 8 epochs
  // (1200 in 3 before: a p99 of the 12th largest difference moved 2x from run to run), and each ratio
  // printed with the interval its rounds allow (ratioInterval()).
  warm: {
    // The C backend too: one slow direct process (52 µs median where 14-21 is usual, load 6) had made
    // every relay's 'added' negative for a whole run; two epochs and the control row show and halve that.
    // In the box (4b, box:) 8 epochs of 250: each epoch draws anew where mcp-lazy's shim and the judged
    // floor's second relay land (both started by the box's service manager, independently), and an
    // epoch where one sits on the other CPU moves the C backend's ratio by more than the hops.
    floor: { rounds: QUICK ? 300 : 1000, epochs: 2, box: { rounds: QUICK ? 150 : 250, epochs: QUICK ? 4 : 8 } },
    // 8 epochs of 375 (4 of 750 before): which vCPU a process lands on can move a relay's whole life
    // 42 <-> 100 µs, so the process sets, not the rounds, are what the ratio's spread comes from.
    memory: { rounds: QUICK ? 100 : 375, epochs: QUICK ? 2 : 8, warmUp: QUICK ? 50 : 100 },
  },
  // Rounds of section 3: the C backend (100, for a p99: 3-4 s), each node server and the pooled shim
  // with and without roots (a round of those takes 0.5-1.5 s: 5, so their p90 and p99 read n<10, n<100).
  cold: { floor: QUICK ? 10 : 100, node: QUICK ? 1 : 5, roots: QUICK ? 1 : 5 },
  sessions: 10,
};
const DEADLINE_MS = 330_000;

const WORK = mkdtempSync(join(tmpdir(), "mcp-lazy-bench-"));
// tests/bench/floor.c, built at the start of the run: the start floor and the C backend.
const FLOOR = join(WORK, "floor");
const failures = [];

function memoryEnv(file) {
  return { ...process.env, MEMORY_FILE_PATH: join(WORK, file) };
}

// The demo fleet with absolute paths, for mcp-lazy --activation=direct: every socket: points to
// a path where nothing listens, so the frontend starts each shim itself over a socketpair.
function writeDirectManifest() {
  const demo = readFileSync(join(ROOT, "manifests/demo.yaml"), "utf8");
  const backend = (name, extra = []) => [
    `  ${name}:`,
    `    command: ${JSON.stringify([NODE, ...BACKENDS[name].args])}`,
    `    cwd: ${TESTS}`,
    `    socket: ${WORK}/absent-${name}.sock`,
    "    idle_timeout: 5m",
    ...extra,
  ];
  const text = [
    "server: {name: bench-direct, version: \"1.0.0\"}",
    "backends:",
    ...backend("memory", [`    env: { MEMORY_FILE_PATH: ${WORK}/memory-lazy.jsonl }`]),
    ...backend("everything"),
    ...backend("files"),
    "  cfloor:",
    `    command: [${JSON.stringify(FLOOR)}, backend]`,
    `    socket: ${WORK}/absent-cfloor.sock`,
    "    idle_timeout: 5m",
    demoTools(demo),
    "  - name: floor_echo",
    "    description: answers at once (tests/bench/floor.c)",
    "    backend: cfloor",
    '    input_schema: {"type":"object"}',
  ].join("\n");
  const path = join(WORK, "direct.yaml");
  writeFileSync(path, text);
  return path;
}

function lazyDirect(manifest, { debug = false, pipes = false } = {}) {
  const env = { ...process.env };
  if (debug) env.MCP_LAZY_LOG_LEVEL = "debug";
  else delete env.MCP_LAZY_LOG_LEVEL;
  return new Peer(MCP_LAZY, ["--manifest", manifest, "--activation=direct", "--shimd", SHIMD], { env, stderr: true, pipes });
}

function server(name, env = process.env) {
  return new Peer(NODE, BACKENDS[name].args, { env, cwd: TESTS, stderr: true });
}

function checkToolResult(msg, what) {
  if (msg.error) throw new Error(`${what}: JSON-RPC error ${msg.error.code}: ${msg.error.message}`);
  if (msg.result?.isError) throw new Error(`${what}: tool error: ${msg.result.content?.[0]?.text}`);
}

// ---- 2. warm call latency -----------------------------------------------------------------

async function handshake(p) {
  const { msg } = await p.request(0, "initialize", initialize(0).params);
  if (!msg.result) throw new Error(`initialize failed: ${JSON.stringify(msg).slice(0, 300)}`);
  p.write(initialized);
}

// Sequential calls of the same tool on initialized peers ({ key: Peer }), interleaved so that
// whatever else the machine does hits every path alike: each round calls every path once, the
// rounds going through every order of the paths in turn, so that every path follows every other
// equally often (with the order only rotating, a path always followed the same one, and that biased
// it: a second direct server-memory process read 13-28 µs faster than the first, right behind it);
// the first calls (the cold one through mcp-lazy) are warm-up. Returns { key: [ms...] }, the i-th
// of every key from the same round.
// balanced: the rounds go through the orders of a balanced Latin square instead (balancedOrders()),
// for more paths than an epoch has rounds for all their orders (section 4b: 6 paths, 720 orders).
// sample: called after the warm-up and every rounds/16 rounds (section 4b: where the processes run).
async function interleavedCalls(peers, tool, args, { rounds = RUNS.warmCalls, warmUp = RUNS.warmUp, balanced = false, sample } = {}) {
  const keys = Object.keys(peers);
  const ids = new Map(keys.map((k) => [k, 1]));
  const call = async (key) => {
    const id = ids.get(key);
    ids.set(key, id + 1);
    const t0 = now();
    const { t, msg } = await peers[key].request(id, "tools/call", { name: tool, arguments: args }, 60000);
    checkToolResult(msg, `${key} ${tool}`);
    return t - t0;
  };
  for (let i = 0; i < warmUp; i++) for (const k of keys) await call(k);
  const out = Object.fromEntries(keys.map((k) => [k, []]));
  const orders = balanced ? balancedOrders(keys) : permutations(keys);
  const every = Math.max(1, Math.ceil(rounds / 16));
  for (let i = 0; i < rounds; i++) {
    if (sample && i % every === 0) sample();
    for (const k of orders[i % orders.length]) out[k].push(await call(k));
  }
  sample?.();
  return out;
}

// A Williams design: n orders (2n for an odd n) in which every path takes every place equally often
// and follows every other path equally often, so that a few rounds balance what 720 orders of 6 paths
// would (an epoch of 375 rounds ran through half of them: some paths never came first in it).
function balancedOrders(keys) {
  const n = keys.length;
  const step = Array.from({ length: n }, (_, j) => (j % 2 ? (j + 1) / 2 : (n - j / 2) % n));
  const rows = Array.from({ length: n }, (_, r) => step.map((c) => keys[(r + c) % n]));
  return n % 2 ? [...rows, ...rows.map((x) => x.toReversed())] : rows;
}

const permutations = (a) => (a.length <= 1 ? [a] : a.flatMap((x, i) => permutations(a.toSpliced(i, 1)).map((p) => [x, ...p])));

// The two-relay floor: `socat STDIO UNIX-CONNECT:S` -> `socat UNIX-LISTEN:S EXEC:backend` ->
// the backend: two processes relaying the same bytes over a Unix socket, like frontend and shim.
// command is a list without spaces in its words (socat's EXEC splits on spaces); prefix runs each
// socat elsewhere (nsenter into the box). The sessions are the shim's and its backend's: with the
// kernel's autogroups a session is a scheduling group, and under load a process in a group of its own
// answers later than one in the bench's (server-memory: tens to a hundred µs per call on this 2-CPU
// machine). Under systemd (section 4b, ownSession) the shim has its service's session and starts each
// backend in a session of its own (setsid); started directly by mcp-lazy (section 2, shared) the shim
// has a session of its own and its backend a process group in it (setpgid).
// Every backend of these paths runs on pipes, as the shim gives its backend (shimd/process.c), and
// every process the bench talks to has pipes too (Peer's pipes): on socat EXEC's default, one
// socketpair for stdin and stdout, the C backend took 1.1-1.4 µs more CPU per call than on pipes and
// server-memory 3-14 µs; on node's own stdio (a socketpair per fd) the C backend 0.5-0.6 µs more
// (FINDINGS-floorcheck.md): work the floor's or the direct backend did and mcp-lazy's did not.
const RELAY_STDIO = "every backend, and every process the bench talks to, on pipes";
// wrap: a command that runs the second relay (section 4b: in a transient service, whose main process
// has a session of its own as a service's has).
function relayPair(sock, command, { env = process.env, prefix = [], ownSession = false, shared = false, wrap } = {}) {
  const run = (args) => (prefix.length ? [prefix[0], [...prefix.slice(1), ...args]] : [args[0], args.slice(1)]);
  const server = new Peer(...run([...(wrap ?? (ownSession || shared ? ["setsid"] : [])), "socat", `UNIX-LISTEN:${sock}`,
    `EXEC:${command.join(" ")},${shared ? "setpgid" : "setsid"},pipes`]), { env, stderr: true });
  const client = new Peer(...run(["socat", "STDIO", `UNIX-CONNECT:${sock},retry=200,interval=0.02`]), { env, stderr: true, pipes: true });
  client.relayServer = server;
  return client;
}
async function closeRelay(client) {
  await client.close();
  await client.relayServer.close(3000);
  for (const p of client.helpers ?? []) {
    p.killTree();
    await p.exited;
  }
}

// The same two hops as two byte relays on sd-event (tests/bench/sd-relay.c, built by sectionWarm()),
// the loop mcp-lazy must use: what relaying costs a program made as mcp-lazy is made, before it reads
// anything. The second takes a session of its own and runs the backend on pipes in a process group of
// its own in it, as a directly started shim does (see relayPair()).
const SD_RELAY = join(WORK, "sd-relay");
function sdRelayPair(sock, command, { env = process.env } = {}) {
  const server = new Peer(SD_RELAY, ["listen", sock, ...command], { env, stderr: true });
  const client = new Peer(SD_RELAY, ["connect", sock], { env, stderr: true, pipes: true });
  client.relayServer = server;
  return client;
}

// The same two hops with systemd's own byte relay in the shim's place: `socat STDIO UNIX-CONNECT:A`
// -> systemd-socket-proxyd, socket-activated on A (systemd-socket-activate passes it the listening
// socket, as a .socket unit would) -> the C backend listening on B (floor.c's `listen`: proxyd
// relays to a socket, not a pipe, so it applies to the C backend only).
const SOCKET_PROXYD = "/usr/lib/systemd/systemd-socket-proxyd";
const SOCKET_ACTIVATE = "/usr/bin/systemd-socket-activate";
async function proxydPair(dir, tag = "") {
  for (const f of [SOCKET_PROXYD, SOCKET_ACTIVATE, "socat"].filter((f) => f.startsWith("/")))
    if (!existsSync(f)) throw new Error(`${f} is missing (Debian's systemd package)`);
  const [a, b] = [join(dir, `proxyd-front${tag}.sock`), join(dir, `proxyd-back${tag}.sock`)];
  const backend = new Peer("setsid", [FLOOR, "listen", b], { stderr: true }); // a session of its own: see relayPair()
  // It exits once its one connection is gone (else closeRelay() waits its 3 s for it).
  const proxy = new Peer(SOCKET_ACTIVATE, ["-l", a, SOCKET_PROXYD, "--exit-idle-time=10ms", b], { stderr: true });
  for (let i = 0; !(existsSync(a) && existsSync(b)); i++) {
    if (i > 300) throw new Error(`systemd-socket-proxyd's sockets did not appear${proxy.stderrHint()}${backend.stderrHint()}`);
    await new Promise((r) => setTimeout(r, 10));
  }
  const client = new Peer("socat", ["STDIO", `UNIX-CONNECT:${a},retry=200,interval=0.02`], { stderr: true, pipes: true });
  client.relayServer = proxy;
  client.helpers = [backend];
  return client;
}

// Which backends section 2 calls: the C floor backend (what mcp-lazy adds, nothing else) and server-memory
// (with a second direct process beside the first, as a control: see RUNS.warm).
const WARM = {
  floor: { label: "C backend", command: () => [FLOOR, "backend"], call: ["floor_echo", {}], env: () => process.env, proxyd: true, control: true },
  memory: {
    label: "memory read_graph", command: () => [NODE, SCRIPT.memory], call: BACKENDS.memory.call, env: (path) => memoryEnv(`memory-${path}.jsonl`),
    control: true,
  },
};

// Concatenates the epochs' { key: [ms...] }: round i of every key stays at the same index.
function joinEpochs(epochs) {
  const out = {};
  for (const e of epochs) for (const [k, v] of Object.entries(e)) out[k] = [...(out[k] ?? []), ...v];
  return out;
}

async function warmEpoch(name, manifest, epoch) {
  const w = WARM[name];
  const [tool, args] = w.call;
  const [cmd, ...cargs] = w.command();
  const peers = {};
  const closers = [];
  try {
    // The direct backends in a session of their own, mcp-lazy's and the relays' as relayPair() says.
    peers.direct = new Peer("setsid", [cmd, ...cargs], { env: w.env("direct"), cwd: TESTS, stderr: true, pipes: true });
    closers.push(() => peers.direct.close());
    if (w.control) {
      peers.direct2 = new Peer("setsid", [cmd, ...cargs], { env: w.env("direct2"), cwd: TESTS, stderr: true, pipes: true });
      closers.push(() => peers.direct2.close());
    }
    peers.relay = relayPair(join(WORK, `relay-${name}-${epoch}.sock`), w.command(), { env: w.env("relay"), shared: true });
    closers.push(() => closeRelay(peers.relay));
    if (existsSync(SD_RELAY)) {
      peers.sdrelay = sdRelayPair(join(WORK, `sd-relay-${name}-${epoch}.sock`), w.command(), { env: w.env("sdrelay") });
      closers.push(() => closeRelay(peers.sdrelay));
    }
    if (w.proxyd) {
      peers.proxyd = await proxydPair(WORK, `-${epoch}`);
      closers.push(() => closeRelay(peers.proxyd));
    }
    peers.lazy = lazyDirect(manifest, { pipes: true });
    closers.push(() => peers.lazy.close());
    for (const p of Object.values(peers)) await handshake(p);
    const r = await interleavedCalls(peers, tool, args, { rounds: RUNS.warm[name].rounds, warmUp: RUNS.warm[name].warmUp ?? RUNS.warmUp });
    return { r, processes: 1 + descendants(peers.lazy.pid).length };
  } finally {
    await Promise.all(closers.map((f) => f()));
  }
}

async function warmPaths(name, manifest) {
  const epochs = [];
  let processes;
  for (let e = 0; e < RUNS.warm[name].epochs; e++) {
    const x = await warmEpoch(name, manifest, e);
    epochs.push(x.r);
    processes = x.processes;
  }
  return { ...joinEpochs(epochs), processes, epochs: epochs.length };
}

// How steady a ratio of added costs is at this number of rounds and epochs: a two-level resample, 400
// times (a fixed seed: the same run gives the same interval): the epochs drawn with replacement (each
// epoch is one set of processes, and a process keeps its speed for life), then the rounds within each
// drawn epoch (the same rounds for both paths); mcp-lazy's added over the floor's at the median and at
// the p99 each time; returns the 5th and 95th percentile of each. A ratio whose interval spans the
// target is noise-bound at this size: more rounds or epochs, not a faster relay, would settle it.
function ratioInterval(r, k, resamples = 400) {
  const n = r.direct.length;
  const per = Math.ceil(n / (r.epochs ?? 1));
  let seed = 0x9e3779b9;
  const rand = () => {
    seed = (seed + 0x6d2b79f5) >>> 0; // mulberry32
    let t = Math.imul(seed ^ (seed >>> 15), seed | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const lazy = r.lazy.map((v, i) => v - r.direct[i]);
  const floor = r[k].map((v, i) => v - r.direct[i]);
  const a = new Float64Array(n), b = new Float64Array(n);
  const at = (s, q) => s[Math.min(n - 1, Math.max(0, Math.ceil(q * n) - 1))];
  const over = (x, y) => (y > 0 ? x / y : Infinity); // a floor that added nothing: no ratio meets a target
  const epochs = Math.ceil(n / per);
  const drawn = new Int32Array(epochs);
  const med = [], p99s = [];
  for (let j = 0; j < resamples; j++) {
    for (let e = 0; e < epochs; e++) drawn[e] = Math.floor(rand() * epochs);
    for (let i = 0; i < n; i++) {
      const first = drawn[Math.floor(i / per)] * per;
      const x = first + Math.floor(rand() * Math.min(per, n - first));
      a[i] = lazy[x];
      b[i] = floor[x];
    }
    a.sort();
    b.sort();
    med.push(over(at(a, 0.5), at(b, 0.5)));
    p99s.push(over(at(a, 0.99), at(b, 0.99)));
  }
  const range = (v) => [quantile(v, 0.05), quantile(v, 0.95)];
  return { med: range(med), p99: range(p99s) };
}
// mcp-lazy's added over the floor's at the median, epoch by epoch: how far one set of processes moves it.
function perEpochRatios(r, k) {
  const per = Math.ceil(r.direct.length / r.epochs);
  const out = [];
  for (let first = 0; first < r.direct.length; first += per) {
    const added = (key) => median(r[key].slice(first, first + per).map((v, i) => v - r.direct[first + i]));
    const f = added(k);
    out.push(f > 0 ? added("lazy") / f : NaN);
  }
  return out;
}
const perEpoch = (r, k) => perEpochRatios(r, k).map((x) => (Number.isFinite(x) ? x.toFixed(2) : "-")).join(" ");
const interval = ([lo, hi]) => (Number.isFinite(lo) && Number.isFinite(hi) ? `${lo.toFixed(2)}..${hi.toFixed(2)}x` : "-");

// Rows for one backend: each path's latency, then what each relay path adds over the direct call,
// paired per round (the paths of one round run back to back, every order in turn: each difference is
// that round's, so a stall that hits a whole round cancels), and mcp-lazy's added cost over each
// floor's, at the median and the p99 of those per-round differences.
function latencyRows(label, r, lazyLabel) {
  const q = (v) => [median(v), p90(v), p99(v)];
  const paired = (k) => r[k].map((v, i) => v - r.direct[i]);
  const floors = [["relay", "two socat relays"], ...(r.relaysb ? [["relaysb", SANDBOXED_RELAYS]] : []), ...(r.relayunit ? [["relayunit", UNIT_RELAYS]] : []),
    ...(r.proxyd ? [["proxyd", "socat + systemd-socket-proxyd"]] : []), ...(r.sdrelay ? [["sdrelay", "two sd-event relays"]] : [])];
  const al = q(paired("lazy"));
  const epochs = r.epochs > 1 ? ` (${r.epochs} x fresh processes)` : "";
  const rows = [[`${label}, direct${epochs}`, r.direct.length, ...q(r.direct).map(us), ""]];
  if (r.direct2) rows.push([`${label}, direct, a second process (control)`, r.direct2.length, ...q(r.direct2).map(us), ratio(median(r.direct2), median(r.direct))]);
  for (const [k, what] of floors) rows.push([`${label}, ${what}`, r[k].length, ...q(r[k]).map(us), ratio(median(r[k]), median(r.direct))]);
  rows.push([`${label}, ${lazyLabel}`, r.lazy.length, ...q(r.lazy).map(us), ratio(median(r.lazy), median(r.direct))]);
  const out = { rows, med: NaN, p99: NaN, floors: {} };
  if (r.direct2) rows.push(["  added by a second direct process (control: the bench's own noise)", "", ...q(paired("direct2")).map(us), ""]);
  for (const [k, what] of floors) {
    const a = q(paired(k));
    rows.push([`  added by ${what} (per round)`, "", ...a.map(us), ""]);
    out.floors[k] = { what, med: al[0] / a[0], p99: al[2] / a[2], floorMed: a[0], floorP99: a[2], interval: ratioInterval(r, k) };
  }
  rows.push(["  added by mcp-lazy (per round)", "", ...al.map(us), ""]);
  for (const [k, what] of floors) {
    const a = q(paired(k));
    rows.push([`  mcp-lazy's added / ${what}'`, "", ratio(al[0], a[0]), ratio(al[1], a[1]), ratio(al[2], a[2]), ""]);
    const iv = out.floors[k].interval;
    rows.push(["    90% interval (epochs and rounds resampled)", "", interval(iv.med), "", interval(iv.p99), ""]);
  }
  // Epoch by epoch (each its own processes), printed after the table: how far one set of processes moves it.
  if (r.epochs > 2)
    out.notes = floors.map(([k, what]) => `  ${label}, per epoch: mcp-lazy's added / ${what}', median: ${perEpoch(r, k)}`);
  out.med = out.floors.relay.med;
  out.p99 = out.floors.relay.p99;
  return out;
}
const SANDBOXED_RELAYS = "two socat relays, backend sandboxed";
const UNIT_RELAYS = "two socat relays, 2nd + backend sandboxed";
const LATENCY_HEADERS = ["path", "calls", "median", "p90", "p99", "ratio to direct"];
// A ratio of added costs means nothing where the relays added nothing (a difference <= 0: then
// mcp-lazy's, over the same negative, would read as a ratio); that is noise, and never "met".
const warmVerdict = (label, x) => {
  const f = (v, floor, iv) =>
    floor > 0 && Number.isFinite(v) ? `${v.toFixed(2)}x (${interval(iv)})` : "not measurable (the floor added <= 0)";
  const one = (v) => [[v.med, v.floorMed], [v.p99, v.floorP99]].every(([y, floor]) => floor > 0 && Number.isFinite(y) && y <= 1.15);
  return Object.values(x.floors)
    .map((v) => `${label} vs ${v.what}: median ${f(v.med, v.floorMed, v.interval.med)}, p99 ${f(v.p99, v.floorP99, v.interval.p99)} ${one(v) ? "met" : "NOT met"}`)
    .join("; ");
};

async function sectionWarm(manifest) {
  heading("2. Warm call latency: direct vs two relays (socat; socat + systemd-socket-proxyd; sd-event) vs mcp-lazy (direct activation)");
  const rows = [];
  const notes = [];
  const verdicts = [];
  try {
    execFileSync("cc", ["-O2", "-Wall", "-Wextra", "-D_GNU_SOURCE", "-o", SD_RELAY, join(TESTS, "bench/sd-relay.c"), "-lsystemd"], { stdio: "inherit" });
  } catch (e) {
    console.log(`  (no sd-event relays: tests/bench/sd-relay.c did not build: ${e.message.split("\n")[0]})`);
  }
  for (const name of Object.keys(WARM)) {
    const r = await warmPaths(name, manifest);
    const x = latencyRows(WARM[name].label, r, `mcp-lazy (${r.processes} procs)`);
    rows.push(...x.rows);
    notes.push(...(x.notes ?? []));
    verdicts.push(warmVerdict(WARM[name].label, x));
  }
  table(LATENCY_HEADERS, rows);
  for (const n of notes) console.log(n);
  const m = RUNS.warm.memory;
  console.log(`  (sequential raw JSON-RPC calls on stdio after ${RUNS.warmUp} warm-up calls each (server-memory: ${m.epochs} epochs of ${m.rounds}`);
  console.log(`   rounds, each with fresh processes on every path, after ${m.warmUp} warm-up calls each), the paths interleaved, every`);
  console.log("   order in turn; 'added' = per round, that path's call minus the direct call of the same round; the relays:");
  console.log("   socat STDIO UNIX-CONNECT -> socat UNIX-LISTEN EXEC, and socat STDIO UNIX-CONNECT -> systemd-socket-proxyd");
  console.log("   (socket-activated) -> the C backend on a socket (floor.c listen), and two byte relays on sd-event, the loop");
  console.log("   mcp-lazy must use (tests/bench/sd-relay.c: one io source per direction, read and write); the 90% interval: of");
  console.log("   each ratio over 400 resamples of the epochs, then of the rounds within each, how far the processes and the rounds move it; " + RELAY_STDIO + "; load average " +
    loadavg().map((x) => x.toFixed(2)).join(" ") + ")");
  console.log(`  target: mcp-lazy's added cost <= 1.15x the floor's, median and p99 -> ${verdicts.join("; ")}`);
}

// ---- 9. both eras --------------------------------------------------------------------------

const MODERN_SERVER = join(TESTS, "servers/modern.mjs");
const ENVELOPE = {
  "io.modelcontextprotocol/protocolVersion": "2026-07-28",
  "io.modelcontextprotocol/clientCapabilities": {},
  "io.modelcontextprotocol/clientInfo": CLIENT_INFO,
};

// Sequential calls on several peers, round robin (the order rotating), after warm-up calls each.
async function roundRobin(entries) {
  const call = async (e) => {
    const id = (e.next = (e.next ?? 0) + 1);
    const t0 = now();
    const { t, msg } = await e.peer.request(id, "tools/call", e.params, 60000);
    checkToolResult(msg, e.label);
    return t - t0;
  };
  for (let i = 0; i < RUNS.warmUp; i++) for (const e of entries) await call(e);
  for (const e of entries) e.times = [];
  for (let i = 0; i < RUNS.warmCalls; i++)
    for (let k = 0; k < entries.length; k++) {
      const e = entries[(i + k) % entries.length];
      e.times.push(await call(e));
    }
}

async function sectionEras(directManifest) {
  heading("9. Both eras: the 2026-07-28 envelope per call, beside the handshake-era path");
  const manifest = join(WORK, "modern.json");
  writeFileSync(manifest, JSON.stringify({
    backends: { modern: { command: [NODE, MODERN_SERVER], socket: `${WORK}/absent-modern.sock` } },
    tools: [{ name: "echo", backend: "modern", inputSchema: { type: "object", properties: { message: { type: "string" } } } }],
  }));
  const args = { message: "hello from mcp-lazy-bench" };
  const legacy = { name: "echo", arguments: args };
  const modern = { name: "echo", arguments: args, _meta: ENVELOPE };
  const peers = [];
  const entry = (label, peer, params) => (peers.push(peer), { label, peer, params });
  const entries = [
    entry("modern server, modern client, direct", new Peer(NODE, [MODERN_SERVER], { stderr: true }), modern),
    entry("modern server, modern client, via mcp-lazy", lazyDirect(manifest), modern),
    entry("modern server, legacy client, via mcp-lazy", lazyDirect(manifest), legacy),
    entry("everything, legacy client, via mcp-lazy", lazyDirect(directManifest), legacy),
    entry("everything, modern client, via mcp-lazy", lazyDirect(directManifest), modern),
  ];
  try {
    await handshake(entries[2].peer);
    await handshake(entries[3].peer);
    await roundRobin(entries);
  } finally {
    await Promise.all(peers.map((p) => p.close()));
  }
  const [md, mm, , el, em] = entries.map((e) => e.times);
  const row = (e, base) => [e.label, e.times.length, us(median(e.times)), us(p90(e.times)), us(p99(e.times)),
    base ? [median, p90, p99].map((f) => ratio(f(e.times), f(base))).join(" / ") : "",
    base ? [median, p90, p99].map((f) => signedUs(f(e.times.map((v, i) => v - base[i])))).join(" / ") : ""];
  // The i-th call of every path is from the same round: what a path adds over its base, per round.
  const signedUs = (v) => (v < 0 ? `-${us(-v)}` : `+${us(v)}`);
  table(["path", "calls", "median", "p90", "p99", "ratio med / p90 / p99", "added per round, med / p90 / p99"], [
    row(entries[0]),
    row(entries[1], md),
    row(entries[2], mm),
    row(entries[3]),
    row(entries[4], el),
  ]);
  console.log("  (ratios: mcp-lazy in front of a modern server vs the server itself; the legacy client's path");
  console.log("   (envelope added, modern fields stripped by the shim) vs the modern client's; a modern client of a");
  console.log("   handshake-era server (envelope carried, resultType added) vs a legacy client of the same; added = each");
  console.log("   round's call minus its base's call of the same round, the paths round robin, the order rotating)");
  console.log(`  target: the modern envelope costs <1.15x -> ${median(em) / median(el) < 1.15 && median(mm) / median(md) < 1.15 ? "met" : "NOT met"}` +
    ` (${ratio(median(em), median(el))} on everything, ${ratio(median(mm), median(md))} in front of the modern server)`);
}

// ---- 4. fleet: processes and memory -------------------------------------------------------

function memOf(pids) {
  let rss = 0, pss = 0;
  const seen = [];
  for (const pid of pids) {
    const st = procStatus(pid);
    if (!st) continue;
    rss += st.VmRSS ?? 0;
    pss += procPss(pid) ?? 0;
    seen.push(pid);
  }
  return { n: seen.length, rss, pss };
}

// Connects an SDK client over stdio; the entry joins sink at once, so that closeAll() ends it even
// when the handshake fails.
async function connectClient(command, args, env, label, sink) {
  const transport = new StdioClientTransport({ command, args, env, cwd: TESTS, stderr: "pipe" });
  let stderr = "";
  transport.stderr?.on("data", (d) => (stderr = (stderr + d).slice(-4000)));
  const client = new Client({ name: `mcp-lazy-bench-${label}`, version: "1" });
  const entry = { client, transport, label, stderr: () => stderr, pid: null };
  sink.push(entry);
  // connect() spawns before its first await: track the child at once, so that an interruption
  // during the handshake still kills it (a frontend left in the box would hold its shutdown up).
  const connecting = client.connect(transport);
  entry.pid = transport.pid;
  trackPid(transport.pid);
  try {
    await connecting;
  } catch (e) {
    throw new Error(`${label}: connect failed: ${e.message}; stderr: ${stderr.trim().slice(-500)}`);
  }
  return entry;
}

async function callOnce(entry, name) {
  const [tool, args] = BACKENDS[name].call;
  const r = await entry.client.callTool({ name: tool, arguments: args }, undefined, { timeout: 60000 });
  if (r.isError) throw new Error(`${entry.label}: ${tool} failed: ${r.content?.[0]?.text}; stderr: ${entry.stderr().trim().slice(-500)}`);
}

async function closeAll(entries) {
  const trees = entries.filter((e) => e.pid).map((e) => ({ pid: e.pid, tree: descendants(e.pid) }));
  await Promise.all(entries.map((e) => e.client.close().catch(() => {})));
  await Promise.all(trees.map(({ pid, tree }) => reapTree(pid, tree, 5000)));
  for (const { pid } of trees) untrackPid(pid);
}

async function fleetEager() {
  const entries = [];
  try {
    const t0 = now();
    const jobs = [];
    for (let s = 0; s < RUNS.sessions; s++)
      for (const name of Object.keys(BACKENDS)) {
        const env = { ...getDefaultEnvironment(), MEMORY_FILE_PATH: join(WORK, `memory-eager-${s}.jsonl`) };
        jobs.push(connectClient(NODE, BACKENDS[name].args, env, `eager session ${s} ${name}`, entries).then((e) => {
          e.backend = name;
          return e;
        }));
      }
    const settled = await Promise.allSettled(jobs);
    const bad = settled.find((x) => x.status === "rejected");
    if (bad) throw bad.reason;
    const tReady = now() - t0;
    await Promise.all(entries.map((e) => callOnce(e, e.backend)));
    const tCalled = now() - t0;
    const pids = entries.flatMap((e) => [e.pid, ...descendants(e.pid)]);
    return { ...memOf(pids), tReady, tCalled };
  } finally {
    await closeAll(entries);
  }
}

// Runs inside the box: the shims and backends are whatever sits in each service's cgroup, the
// frontends are found by command line. Prints JSON.
const BOX_MEASURE = `
const fs = require("fs"), { execFileSync } = require("child_process");
const info = (pid) => {
  let rss = 0, pss = 0, comm = "";
  try { rss = Number(/^VmRSS:\\s+(\\d+)/m.exec(fs.readFileSync("/proc/" + pid + "/status", "utf8"))?.[1] ?? 0); } catch {}
  try { pss = Number(/^Pss:\\s+(\\d+)/m.exec(fs.readFileSync("/proc/" + pid + "/smaps_rollup", "utf8"))?.[1] ?? 0); } catch {}
  try { comm = fs.readFileSync("/proc/" + pid + "/comm", "utf8").trim(); } catch {}
  return { pid, rss, pss, comm };
};
const out = { units: {}, frontends: [] };
for (const b of JSON.parse(process.argv[1])) {
  const unit = "mcp-lazy@" + b + ".service";
  const show = (p) => execFileSync("systemctl", ["show", "-P", p, unit]).toString().trim();
  const cg = show("ControlGroup"), main = Number(show("MainPID"));
  let pids = [];
  try { pids = fs.readFileSync("/sys/fs/cgroup" + cg + "/cgroup.procs", "utf8").split("\\n").filter(Boolean).map(Number); } catch {}
  out.units[b] = { active: show("ActiveState"), main, procs: pids.map(info) };
}
for (const d of fs.readdirSync("/proc")) {
  if (!/^\\d+$/.test(d)) continue;
  let cmd = "";
  try { cmd = fs.readFileSync("/proc/" + d + "/cmdline", "utf8"); } catch { continue; }
  if (cmd.startsWith("/usr/local/bin/mcp-lazy\\0" + (process.argv[2] ?? "--manifest") + "\\0")) out.frontends.push(info(Number(d)));
}
console.log(JSON.stringify(out));
`;

async function boxOk(box, cmd, args, opts = {}) {
  const r = await box.exec(cmd, args, { timeout: 60000, ...opts });
  if (r.code !== 0) throw new Error(`in the box: ${cmd} ${args.join(" ")} exited ${r.code}: ${(r.stderr || r.stdout).trim().slice(-800)}`);
  return r.stdout.trim();
}

function boxManifest() {
  const demo = readFileSync(join(ROOT, "manifests/demo.yaml"), "utf8");
  const backend = (name, extra = []) => [
    `  ${name}:`,
    `    command: ${JSON.stringify([NODE, ...BACKENDS[name].args])}`,
    `    cwd: ${TESTS}`,
    "    idle_timeout: 5m",
    "    sharing: pooled",
    ...extra,
  ];
  return [
    "server: {name: bench-pooled, version: \"1.0.0\"}",
    "backends:",
    ...backend("memory", ["    env: { MEMORY_FILE_PATH: /tmp/mcp-lazy-bench-memory.jsonl }"]),
    ...backend("everything"),
    ...backend("files"),
    demoTools(demo),
  ].join("\n");
}

// The box's binds: the repository, and the build directory when it lies outside it.
function boxBinds() {
  return relative(ROOT, BUILD).startsWith("..") ? [ROOT, BUILD] : [ROOT];
}

// mcp-lazy installed in a box with boxManifest() checked in /etc/mcp-lazy, and these backends' sockets listening.
async function installInBox(box, names) {
  await boxOk(box, "make", ["-C", ROOT, "-o", "all", "install", "DESTDIR=", "PREFIX=/usr/local", `B=${BUILD}`, "SYSTEMUNITDIR=/etc/systemd/system"], { cwd: ROOT });
  await boxOk(box, "systemd-sysusers", []);
  await boxOk(box, "mkdir", ["-p", "/etc/mcp-lazy"]);
  await boxOk(box, "tee", ["/etc/mcp-lazy/manifest.yaml"], { input: boxManifest() });
  await boxOk(box, "/usr/local/bin/mcp-lazy", ["check", "/etc/mcp-lazy/manifest.yaml"]);
  await boxOk(box, "systemctl", ["daemon-reload"]);
  await boxOk(box, "systemctl", ["enable", "--now", ...names.map((n) => `mcp-lazy@${n}.socket`)]);
}

async function fleetPooled() {
  let stage = "booting the box";
  const box = await startBox({ bind: boxBinds() });
  const entries = [];
  try {
    stage = "installing mcp-lazy and its units in the box";
    const names = Object.keys(BACKENDS);
    await installInBox(box, names);

    stage = "sessions";
    const [nsenter, ...prefix] = box.nsenterArgs();
    const t0 = now();
    const settled = await Promise.allSettled(
      Array.from({ length: RUNS.sessions }, (_, s) =>
        connectClient(nsenter, [...prefix, "/usr/local/bin/mcp-lazy", "--manifest", "/etc/mcp-lazy/manifest.yaml"],
          getDefaultEnvironment(), `pooled session ${s}`, entries)),
    );
    const bad = settled.find((x) => x.status === "rejected");
    if (bad) throw bad.reason;
    const tReady = now() - t0;
    await Promise.all(entries.map(async (e) => {
      for (const n of names) await callOnce(e, n);
    }));
    const tCalled = now() - t0;

    stage = "measuring";
    const m = JSON.parse(await boxOk(box, NODE, ["-e", BOX_MEASURE, JSON.stringify(names)]));
    const shims = [], backends = [];
    for (const n of names) {
      const u = m.units[n];
      if (u.active !== "active") throw new Error(`mcp-lazy@${n}.service is ${u.active} after the calls`);
      for (const p of u.procs) (p.pid === u.main ? shims : backends).push({ ...p, unit: n });
    }
    stage = "one frontend per backend per session";
    let perBackend;
    try {
      perBackend = await fleetPerBackend(box, names, entries);
    } catch (e) {
      perBackend = { error: e };
    }
    stage = "warm calls through the socket";
    let warm;
    try {
      // The warm calls have the shims to themselves, as the relays have their backends.
      await closeAll(entries.splice(0));

      warm = await boxWarm(box);
    } catch (e) {
      warm = { error: e };
    }
    const sum = (arr, k) => arr.reduce((a, p) => a + p[k], 0);
    const group = (arr) => ({ n: arr.length, rss: sum(arr, "rss"), pss: sum(arr, "pss") });
    return {
      frontends: group(m.frontends), shims: group(shims), backends: group(backends),
      perUnit: Object.fromEntries(names.map((n) => [n, m.units[n].procs.length])),
      tReady, tCalled, warm, perBackend,
    };
  } catch (e) {
    e.message = `${stage}: ${e.message}`;
    throw e;
  } finally {
    await closeAll(entries).catch(() => {});
    await box.stop();
  }
}

// The drop-in form: the fleet's sessions closed, each of RUNS.sessions sessions launches one
// `mcp-lazy --backend NAME` per backend (what `mcp-lazy import` writes), each called once; the same
// pooled shims and backends serve them. Measured like the fleet's (PSS of every process).
async function fleetPerBackend(box, names, entries) {
  await closeAll(entries.splice(0));
  const [nsenter, ...prefix] = box.nsenterArgs();
  const t0 = now();
  const settled = await Promise.allSettled(
    Array.from({ length: RUNS.sessions }, (_, s) => names.map((n) =>
      connectClient(nsenter, [...prefix, "/usr/local/bin/mcp-lazy", "--backend", n, "--manifest", "/etc/mcp-lazy/manifest.yaml"],
        getDefaultEnvironment(), `session ${s} --backend ${n}`, entries).then((e) => ((e.backend = n), e)))).flat(),
  );
  const bad = settled.find((x) => x.status === "rejected");
  if (bad) throw bad.reason;
  const tReady = now() - t0;
  await Promise.all(entries.map((e) => callOnce(e, e.backend)));
  const tCalled = now() - t0;
  const m = JSON.parse(await boxOk(box, NODE, ["-e", BOX_MEASURE, JSON.stringify(names), "--backend"]));
  const shims = [], backends = [];
  for (const n of names) for (const p of m.units[n].procs) (p.pid === m.units[n].main ? shims : backends).push(p);
  if (m.frontends.length !== RUNS.sessions * names.length) throw new Error(`found ${m.frontends.length} --backend frontends in the box`);
  const sum = (arr, k) => arr.reduce((a, p) => a + p[k], 0);
  const group = (arr) => ({ n: arr.length, rss: sum(arr, "rss"), pss: sum(arr, "pss") });
  let floors;
  try {
    floors = await fleetFloors(box, m.frontends.length);
  } catch (e) {
    floors = { error: e };
  }
  return { frontends: group(m.frontends), shims: group(shims), backends: group(backends), tReady, tCalled, floors };
}

// The floor of a frontend in this fleet: as many processes of floor.c's libsystemd floor with the
// manifest watch (sd_event_default(), sd_event_add_inotify() on the manifest's directory, the manifest
// read, an answer written) as there are frontends, started in the box beside them, each holding its
// stdin like a frontend its client's.
const BOX_FLOOR_SD = "/usr/local/bin/mcp-lazy-bench-floor-sd";
async function fleetFloors(box, n) {
  await boxOk(box, "cc", ["-O2", "-D_GNU_SOURCE", "-DFLOOR_SD_EVENT", "-o", BOX_FLOOR_SD, join(TESTS, "bench/floor.c"), "-lsystemd"]);
  await boxOk(box, "tee", ["/tmp/mcp-lazy-bench-floor.answers"], { input: '{"jsonrpc":"2.0","id":0,"result":{}}\n' });
  const [nsenter, ...prefix] = box.nsenterArgs();
  const peers = [];
  try {
    for (let i = 0; i < n; i++) {
      const p = new Peer(nsenter, [...prefix, BOX_FLOOR_SD, "answer", "/etc/mcp-lazy/manifest.yaml", "/tmp/mcp-lazy-bench-floor.answers", "watch"]);
      p.write(initialize(0));
      peers.push(p);
    }
    await Promise.all(peers.map((p) => p.waitLines(1, 30000)));
    // nsenter forks into the box's namespaces: the floor is its child.
    const pids = peers.flatMap((p) => [p.pid, ...descendants(p.pid)]).filter((pid) => cmdline(pid)?.startsWith(BOX_FLOOR_SD));
    if (pids.length !== n) throw new Error(`found ${pids.length} of ${n} floor processes`);
    return { n, rss: pids.reduce((a, pid) => a + (procStatus(pid)?.VmRSS ?? 0), 0), pss: pids.reduce((a, pid) => a + (procPss(pid) ?? 0), 0) };
  } finally {
    await Promise.all(peers.map((p) => p.close()));
  }
}

// The production path, warm: a raw client -> mcp-lazy -> systemd's socket -> the pooled shim -> the
// backend, against the backend on its own and two socat relays, all started in the box through
// nsenter: the C backend of floor.c (built in the box, served by mcp-lazy@cfloor with a manifest of
// its own), then server-memory.
const BOX_FLOOR = "/usr/local/bin/mcp-lazy-bench-floor";

// The unit's sandbox without mcp-lazy, for the relays: `mcp-lazy-bench-sandboxed-NAME [systemd-run
// options] COMMAND...` runs COMMAND on its stdio with `systemd-run --pipe` as a transient service with
// the [Service] lines of the installed mcp-lazy@.service for backend NAME, all but those that start the
// shim or route its output. COMMAND is the relays' backend, or their second relay, which starts the
// backend there (boxWarmOne()): then the relays' processes pay for the sandbox (DynamicUser, the mount
// namespace, the stacked seccomp filters) and land where a service's do, as mcp-lazy's, and their
// added costs differ only by the hops.
const BOX_SANDBOXED = "/usr/local/bin/mcp-lazy-bench-sandboxed-";
async function writeSandboxed(box, name) {
  const unit = await boxOk(box, "cat", ["/etc/systemd/system/mcp-lazy@.service"]);
  const skip = new Set(["Type", "NotifyAccess", "ExecStart", "StandardError", "SyslogIdentifier"]);
  const spec = { i: name, E: "/etc", S: "/var/lib", C: "/var/cache", t: "/run" };
  const props = unit.split(/^\[Service\]$/m)[1].split(/^\[/m)[0].split("\n")
    .filter((l) => l.trim() && !l.startsWith("#") && !skip.has(l.split("=")[0]))
    .map((l) => l.replace(/%(.)/g, (m, c) => {
      if (!(c in spec)) throw new Error(`mcp-lazy@.service: ${m} in '${l}' is not known to the bench's sandboxed relay`);
      return spec[c];
    }));
  if (props.some((l) => l.includes("'"))) throw new Error("mcp-lazy@.service: a quote in a [Service] line");
  await boxOk(box, "tee", [BOX_SANDBOXED + name], {
    input: `#!/bin/sh\nexec systemd-run --quiet --pipe --wait --collect ${props.map((l) => `-p '${l}'`).join(" ")} "$@"\n`,
  });
  await boxOk(box, "chmod", ["755", BOX_SANDBOXED + name]);
}

async function boxWarm(box) {
  await boxOk(box, "cc", ["-O2", "-D_GNU_SOURCE", "-o", BOX_FLOOR, join(TESTS, "bench/floor.c")]);
  await boxOk(box, "tee", ["/etc/mcp-lazy/cfloor.yaml"], {
    input: `backends:\n  cfloor:\n    command: [${BOX_FLOOR}, backend]\n    idle_timeout: 5m\n    sharing: pooled\n` +
      `tools:\n  - {name: floor_echo, backend: cfloor, input_schema: {type: object}}\n`,
  });
  await boxOk(box, "mkdir", ["-p", "/etc/systemd/system/mcp-lazy@cfloor.service.d"]);
  await boxOk(box, "tee", ["/etc/systemd/system/mcp-lazy@cfloor.service.d/manifest.conf"], {
    input: "[Service]\nEnvironment=MCP_LAZY_MANIFEST=/etc/mcp-lazy/cfloor.yaml\n",
  });
  await boxOk(box, "systemctl", ["daemon-reload"]);
  await boxOk(box, "systemctl", ["enable", "--now", "mcp-lazy@cfloor.socket"]);
  for (const n of ["cfloor", "memory"]) await writeSandboxed(box, n);
  const floor = await boxWarmEpochs(box, "floor", [BOX_FLOOR, "backend"], ["floor_echo", {}], "/etc/mcp-lazy/cfloor.yaml", "cfloor");
  const [tool, args] = BACKENDS.memory.call;
  const memory = await boxWarmEpochs(box, "memory", [NODE, SCRIPT.memory], [tool, args], "/etc/mcp-lazy/manifest.yaml", "memory",
    "MEMORY_FILE_PATH=/tmp/mcp-lazy-bench-");
  return { floor, memory };
}

// RUNS.warm[name].epochs rounds of boxWarmOne (.box's where it has one), each with fresh processes:
// the pooled backend too (its service stopped first; the next connection starts it again).
async function boxWarmEpochs(box, name, command, call, manifest, backend, envPrefix) {
  const epochs = [];
  const placements = [];
  const runs = RUNS.warm[name].box ?? RUNS.warm[name];
  const t0 = now();
  for (let e = 0; e < runs.epochs; e++) {
    await boxOk(box, "systemctl", ["stop", `mcp-lazy@${backend}.service`]);
    // and its start counter reset: 8 epochs of the C backend start it more than StartLimitBurst= (5)
    // times in StartLimitIntervalSec= (10 s), past which its socket refuses the next connection.
    await boxOk(box, "systemctl", ["reset-failed", `mcp-lazy@${backend}.service`]);
    const x = await boxWarmOne(box, name, command, call, manifest, envPrefix, WARM[name].control, e, backend, runs);
    epochs.push(x.r);
    placements.push(x.placement);
  }
  return { ...joinEpochs(epochs), epochs: epochs.length, placements, seconds: (now() - t0) / 1000 };
}

const statOf = (pid) => procState(pid) ?? [];
const cpuOf = (pid) => {
  const cpu = statOf(pid)[36];
  return cpu === undefined ? undefined : Number(cpu);
};
// Where a path's long-lived processes run (section 4b): the CPU each last ran on (/proc/PID/stat's
// processor field), sampled during an epoch's rounds beside the bench's own (the client of every path:
// the frontend and the first socat run beside it, started through nsenter). A process the box's service
// manager starts (the shim, the judged floor's second relay) can land on the other CPU and keep it for
// life. Returns { sample(), result() }: result() gives, per process, its samples on the bench's CPU
// and how many were taken (none: not found).
function placementSampler(box, backend, relaySock) {
  let pids;
  const seen = {};
  const find = () => {
    const inBox = descendants(box.pid);
    const argv = new Map(inBox.map((p) => [p, cmdline(p).split(" ")]));
    const child = (pid) => inBox.find((p) => Number(statOf(p)[1]) === pid);
    const shim = inBox.find((p) => argv.get(p)[0].endsWith("/mcp-lazy-shimd") && argv.get(p).at(-1) === backend);
    const relay = inBox.find((p) => /(^|\/)socat$/.test(argv.get(p)[0]) && argv.get(p)[1] === `UNIX-LISTEN:${relaySock}`);
    return { shim, shimBackend: shim && child(shim), relay, relayBackend: relay && child(relay) };
  };
  return {
    sample() {
      pids ??= find();
      const client = cpuOf(process.pid);
      for (const [k, pid] of Object.entries(pids)) {
        const cpu = pid && cpuOf(pid);
        if (cpu === undefined || client === undefined) continue;
        seen[k] ??= { same: 0, n: 0 };
        seen[k].n++;
        if (cpu === client) seen[k].same++;
      }
    },
    result: () => seen,
  };
}

async function boxWarmOne(box, name, command, [tool, args], manifest, envPrefix, control, epoch, backend, runs) {
  const [nsenter, ...prefix] = box.nsenterArgs();
  const env = getDefaultEnvironment();
  const withEnv = (what) => (envPrefix ? ["env", `${envPrefix}${what}.jsonl`, ...command] : command);
  // Sessions as in the production path (see relayPair()): the shim in its service's, each backend in its own.
  const peers = { direct: new Peer(nsenter, [...prefix, "setsid", ...withEnv("direct")], { env, stderr: true, pipes: true }) };
  if (control) peers.direct2 = new Peer(nsenter, [...prefix, "setsid", ...withEnv("direct2")], { env, stderr: true, pipes: true });
  peers.relay = relayPair(`/tmp/mcp-lazy-bench-relay-${name}-${epoch}.sock`, withEnv("relay"), { env, prefix: [nsenter, ...prefix], ownSession: true });
  // The same relays, their backend in the unit's sandbox (writeSandboxed()): a service of its own, as mcp-lazy's.
  const sandboxed = [BOX_SANDBOXED + backend, ...(envPrefix ? ["-E", `${envPrefix}relaysb.jsonl`] : []), ...command];
  peers.relaysb = relayPair(`/tmp/mcp-lazy-bench-relaysb-${name}-${epoch}.sock`, sandboxed, { env, prefix: [nsenter, ...prefix], ownSession: true });
  // And placed as mcp-lazy's hops are: the second relay (socat UNIX-LISTEN ... EXEC) in the transient
  // service with the unit's [Service] lines, starting its backend there, as the shim runs in its unit
  // with its backend; its socket in a runtime directory of that service (the unit's /tmp is private,
  // the rest of the file system read-only), which root's client socat reaches.
  const dir = `mcp-lazy-bench-relayunit-${name}-${epoch}`;
  peers.relayunit = relayPair(`/run/${dir}/relay.sock`, withEnv("relayunit"),
    { env, prefix: [nsenter, ...prefix], wrap: [BOX_SANDBOXED + backend, "-p", `RuntimeDirectory=${dir}`] });
  peers.lazy = new Peer(nsenter, [...prefix, "/usr/local/bin/mcp-lazy", "--manifest", manifest], { env, stderr: true, pipes: true });
  const place = placementSampler(box, backend, `/run/${dir}/relay.sock`);
  try {
    for (const p of Object.values(peers)) await handshake(p);
    const r = await interleavedCalls(peers, tool, args, { rounds: runs.rounds, warmUp: runs.warmUp ?? RUNS.warmUp, balanced: true, sample: place.sample });
    return { r, placement: place.result() };
  } finally {
    await Promise.all(Object.entries(peers).map(([k, p]) => (k.startsWith("relay") ? closeRelay(p) : p.close())));
  }
}

// The drop-in form's rows (fleetPerBackend), beside eager.
function fleetPerBackendRows(eager, pb) {
  if (pb.error) {
    console.log(`  one frontend per backend per session: FAILED: ${pb.error.message}`);
    failures.push(`4 (--backend): ${oneLine(pb.error.message)}`);
    return;
  }
  const total = ["n", "rss", "pss"].reduce((o, k) => ({ ...o, [k]: pb.frontends[k] + pb.shims[k] + pb.backends[k] }), {});
  console.log(`\n  the drop-in form: ${RUNS.sessions} sessions x ${pb.frontends.n / RUNS.sessions} entries \`mcp-lazy --backend NAME\`, ` +
    "one frontend per backend per session, the same pooled shims and backends:");
  table(["setup", "processes", "sum RSS", "sum PSS", "sessions ready", "+ first calls"], [
    ["eager: every session starts its servers", eager.n, mib(eager.rss), mib(eager.pss), ms(eager.tReady), ms(eager.tCalled)],
    ["mcp-lazy, --backend per entry: total", total.n, mib(total.rss), mib(total.pss), ms(pb.tReady), ms(pb.tCalled)],
    ["  frontends (mcp-lazy --backend)", pb.frontends.n, mib(pb.frontends.rss), mib(pb.frontends.pss), "", ""],
    ...(pb.floors?.error ? [] : [["  (their floor: libsystemd floor + watch)", pb.floors.n, mib(pb.floors.rss), mib(pb.floors.pss), "", ""]]),
    ["  shims (mcp-lazy-shimd)", pb.shims.n, mib(pb.shims.rss), mib(pb.shims.pss), "", ""],
    ["  backends (node)", pb.backends.n, mib(pb.backends.rss), mib(pb.backends.pss), "", ""],
  ]);
  const r = eager.pss / total.pss;
  console.log(`  ratio eager / --backend per entry: processes ${ratio(eager.n, total.n)}, RSS ${ratio(eager.rss, total.rss)}, ` +
    `PSS ${ratio(eager.pss, total.pss)}, sessions ready ${ratio(eager.tReady, pb.tReady)}, + first calls ${ratio(eager.tCalled, pb.tCalled)}; ` +
    `a frontend's PSS ${mib(pb.frontends.pss / pb.frontends.n)}${pb.floors?.error ? "" : ` (${ratio(pb.frontends.pss, pb.floors.pss)} its floor's)`}`);
  const bound = eager.pss / pb.backends.pss, own = pb.frontends.pss + pb.shims.pss, room = eager.pss / 8 - pb.backends.pss;
  console.log(`  target: at least 8x less total PSS than eager with one frontend per backend per session -> ${r.toFixed(1)}x ${r >= 8 ? "met" : "NOT met"}` +
    `; the bound with frontends and shims of no size at all (eager / the ${pb.backends.n} pooled backends alone): ${bound.toFixed(1)}x; ` +
    `mcp-lazy's own processes: ${mib(own)}, ${((100 * own) / total.pss).toFixed(0)}% of the total`);
  // What 8x would take: the total under eager / 8, so mcp-lazy's own processes under what the backends leave of it.
  console.log(`  8x needs the total under ${mib(eager.pss / 8)}: ` + (room > 0
    ? `the backends leave ${mib(room)} for ${pb.frontends.n} frontends and ${pb.shims.n} shims (${mib(room / (pb.frontends.n + pb.shims.n))} each; now ${mib(own / (pb.frontends.n + pb.shims.n))})`
    : `the ${pb.backends.n} node backends alone take ${mib(pb.backends.pss)}, so it is out of reach with these backends whatever mcp-lazy's own processes take`));
  if (pb.floors?.error) {
    console.log(`  the frontends' floor: FAILED: ${pb.floors.error.message}`);
    failures.push(`4 (floor): ${oneLine(pb.floors.error.message)}`);
  } else if (room > 0) {
    // Each entry is a process linking libsystemd: what that alone holds here, beside what is left.
    const atFloor = pb.floors.pss + pb.shims.pss;
    console.log(`  a frontend's floor (a process that only sets up sd-event with the manifest watch): ${mib(pb.floors.pss / pb.floors.n)} of PSS each, ` +
      `${mib(pb.frontends.pss / pb.frontends.n)} for a frontend; frontends at that floor and the shims as they are: ${mib(atFloor)} ` +
      `(${(eager.pss / (pb.backends.pss + atFloor)).toFixed(1)}x), ${atFloor > room ? `over the ${mib(room)} left: out of reach while each entry is a process linking libsystemd` : `within the ${mib(room)} left`}`);
  }
}

async function sectionFleet() {
  heading(`4. Fleet: ${RUNS.sessions} sessions x 3 backends (memory, everything, filesystem), one call to each`);
  const eager = await fleetEager();
  let pooled, pooledError;
  try {
    pooled = await fleetPooled();
  } catch (e) {
    pooledError = e;
  }
  const rows = [[`eager: every session starts its servers`, eager.n, mib(eager.rss), mib(eager.pss), ms(eager.tReady), ms(eager.tCalled)]];
  if (pooled) {
    const total = {
      n: pooled.frontends.n + pooled.shims.n + pooled.backends.n,
      rss: pooled.frontends.rss + pooled.shims.rss + pooled.backends.rss,
      pss: pooled.frontends.pss + pooled.shims.pss + pooled.backends.pss,
    };
    rows.push([`mcp-lazy pooled (systemd sockets): total`, total.n, mib(total.rss), mib(total.pss), ms(pooled.tReady), ms(pooled.tCalled)]);
    rows.push([`  frontends (mcp-lazy)`, pooled.frontends.n, mib(pooled.frontends.rss), mib(pooled.frontends.pss), "", ""]);
    rows.push([`  shims (mcp-lazy-shimd)`, pooled.shims.n, mib(pooled.shims.rss), mib(pooled.shims.pss), "", ""]);
    rows.push([`  backends (node)`, pooled.backends.n, mib(pooled.backends.rss), mib(pooled.backends.pss), "", ""]);
    table(["setup", "processes", "sum RSS", "sum PSS", "sessions ready", "+ first calls"], rows);
    console.log(`  ratio eager / pooled: processes ${ratio(eager.n, total.n)}, RSS ${ratio(eager.rss, total.rss)}, PSS ${ratio(eager.pss, total.pss)}, ` +
      `sessions ready ${ratio(eager.tReady, pooled.tReady)}, + first calls ${ratio(eager.tCalled, pooled.tCalled)}`);
    fleetPerBackendRows(eager, pooled.perBackend);
    console.log(`  backend processes per unit cgroup: ${Object.entries(pooled.perUnit).map(([k, v]) => `${k} ${v - 1}`).join(", ")}`);
    console.log("  (RSS counts shared pages once per process; PSS splits them. Times: wall clock from the first spawn, " +
      "all sessions at once; the pooled sessions go through nsenter into the box, not counted above.");
    console.log("   One run of each setup, one after the other (n=1: no p90 or p99; memory is read once the calls are answered))");
    boxWarmRows(pooled.warm);
  } else {
    table(["setup", "processes", "sum RSS", "sum PSS", "sessions ready", "+ first calls"], rows);
    console.log(`  mcp-lazy pooled: FAILED: ${pooledError.message}`);
    failures.push(`4 (pooled): ${oneLine(pooledError.message)}`);
  }
}

// Epoch by epoch (4b): mcp-lazy's added over the judged floor's, and where mcp-lazy's shim and the
// floor's second relay ran (their backends in brackets): 'same' CPU as the bench (the client) in >= 80%
// of the samples, 'other' in <= 20%, else 'mixed'. Then the ratio over the epochs where the two have the
// same placement class, which the processes' luck moves less; the verdict stays on all epochs.
const placeClass = (x) => (!x?.n ? "?" : x.same >= 0.8 * x.n ? "same" : x.same <= 0.2 * x.n ? "other" : "mixed");
const placeCell = (x) => (x?.n ? `${placeClass(x)} ${Math.round((100 * x.same) / x.n)}%` : "not found");
function placementNotes(label, r, k) {
  const ratios = perEpochRatios(r, k);
  console.log(`  ${label}, per epoch: mcp-lazy's added / the judged floor's, median; where mcp-lazy's shim and the floor's 2nd relay ran ` +
    "(on the bench's CPU in >= 80% of ~17 samples: same, <= 20%: other, else mixed; their backends in brackets):");
  r.placements.forEach((p, e) => {
    const cell = (a, b) => `${placeCell(p[a])} (${p[b]?.n ? `${Math.round((100 * p[b].same) / p[b].n)}%` : "-"})`;
    console.log(`    ${e + 1}: ${Number.isFinite(ratios[e]) ? ratios[e].toFixed(2) : "-"}  shim ${cell("shim", "shimBackend")}, relay ${cell("relay", "relayBackend")}`);
  });
  const away = (w) => r.placements.filter((p) => placeClass(p[w]) === "other").length;
  const keep = r.placements.flatMap((p, e) => (placeClass(p.shim) !== "?" && placeClass(p.shim) === placeClass(p.relay) ? [e] : []));
  const head = `  ${label}, on the other CPU: the shim in ${away("shim")}, the relay in ${away("relay")} of ${r.epochs} epochs; placement-matched ratio`;
  if (!keep.length) return console.log(`${head}: no epoch had the shim and the relay placed alike`);
  const per = Math.ceil(r.direct.length / r.epochs);
  const sub = Object.fromEntries(["direct", "lazy", k].map((key) => [key, keep.flatMap((e) => r[key].slice(e * per, (e + 1) * per))]));
  sub.epochs = keep.length;
  const added = (key, q) => quantile(sub[key].map((v, i) => v - sub.direct[i]), q);
  const iv = ratioInterval(sub, k);
  const at = (q) => (added(k, q) > 0 ? `${(added("lazy", q) / added(k, q)).toFixed(2)}x` : "-");
  console.log(`${head} (epochs ${keep.map((e) => e + 1).join(" ")}: ${keep.length} of ${r.epochs}): median ${at(0.5)} (${interval(iv.med)}), ` +
    `p99 ${at(0.99)} (${interval(iv.p99)}) (90% intervals resampled as below). Not the verdict, which stays on all epochs: the box's ` +
    "service manager places both, independently and with the same odds, so all epochs favour neither path, they only spread more");
}

function boxWarmRows(warm) {
  console.log("\n  4b. warm calls in the box, through the systemd socket and a pooled shim: the C backend, server-memory");
  if (warm.error) {
    console.log(`  FAILED: ${warm.error.message}`);
    failures.push(`4b: ${oneLine(warm.error.message)}`);
    return;
  }
  const f = latencyRows("C backend", warm.floor, "mcp-lazy (systemd socket)");
  const x = latencyRows("memory read_graph", warm.memory, "mcp-lazy (systemd socket)");
  table(LATENCY_HEADERS, [...f.rows, ...x.rows]);
  for (const n of [...(f.notes ?? []), ...(x.notes ?? [])]) console.log(n);
  console.log("  (all started in the box through nsenter, the relays too; 'added' per round, as in section 2; the shims serve these");
  console.log("   calls alone (the fleet's sessions closed first). Where each path's processes run: mcp-lazy's frontend outside the");
  console.log("   unit's sandbox, its shim and backend in it (mcp-lazy@NAME.service); the relays' first socat (STDIO UNIX-CONNECT)");
  console.log(`   outside it; '${UNIT_RELAYS}': the second socat (UNIX-LISTEN EXEC) and its backend in a transient`);
  console.log("   service with the unit's [Service] lines (systemd-run), its socket in that service's RuntimeDirectory=, as mcp-lazy's");
  console.log(`   are; '${SANDBOXED_RELAYS}': only the backend in such a service (systemd-run --pipe), the second socat`);
  console.log(`   outside; 'two socat relays': nothing in it; ${RELAY_STDIO})`);
  // The target is judged on what mcp-lazy's hops add: against the relays whose processes run where
  // mcp-lazy's do, the second relay and its backend in a service with the unit's [Service] lines as
  // the shim and its backend run in theirs. Not for the sandbox's system-call filters, which cost a
  // hop nothing measurable (README: "What the sandbox costs a call"), but for where a service's
  // processes land: one that the service manager starts can land on the other CPU from the client
  // that calls it and keep that for life (each call then crosses CPUs: a C backend's round trip 80
  // instead of 25 µs at a load of 5-9), where one the bench starts shares its client's CPU. The other
  // two floors stay beside it, with what the unit costs the relays.
  const judged = x.floors.relayunit && f.floors.relayunit ? "relayunit" : "relaysb";
  console.log(`  (the epochs took ${warm.floor.seconds.toFixed(1)} s for the C backend, ${warm.memory.seconds.toFixed(1)} s for server-memory)`);
  if (judged === "relayunit") for (const [label, r] of [["C backend", warm.floor], ["memory read_graph", warm.memory]]) placementNotes(label, r, judged);
  const only = (y, k) => ({ ...y, floors: { [k]: y.floors[k] } });
  const cost = (r, a, b) => (r[a] && r[b] ? us(median(r[a].map((v, i) => v - r[b][i]))) : "-");
  console.log(`  target: mcp-lazy's added cost <= 1.15x the relays', median and p99, judged against ` +
    (judged === "relayunit" ? "the relays placed as mcp-lazy's processes are" : `'${SANDBOXED_RELAYS}' (the relays placed as mcp-lazy's processes are did not run)`) +
    `, over all epochs (the target is about what mcp-lazy's hops add; the unit is a cost of its own) -> ${warmVerdict("C backend, systemd socket", only(f, judged))}; ` +
    `${warmVerdict("memory, systemd socket", only(x, judged))}`);
  console.log(`  what running in the unit costs the relays per call (per round, median, against the relays with nothing in it; its sandbox and where ` +
    `its processes land): the backend alone: C backend ${cost(warm.floor, "relaysb", "relay")}, server-memory ${cost(warm.memory, "relaysb", "relay")}; ` +
    `the second relay and the backend: C backend ${cost(warm.floor, "relayunit", "relay")}, server-memory ${cost(warm.memory, "relayunit", "relay")}`);
  const others = (y, label) => Object.keys(y.floors).filter((k) => k !== judged).map((k) => warmVerdict(label, only(y, k))).join("; ");
  console.log(`  against the other floors (the unit, or the second relay's part in it, counted as mcp-lazy's): ${others(f, "C backend")}; ${others(x, "memory")}`);
}

// 4b alone (`node bench/bench.mjs 4b`, not part of a full run: section 4 runs it): a box with the
// memory backend's units, then the warm calls.
async function sectionBoxWarm() {
  heading("4b. Warm calls through the systemd socket (alone)");
  const box = await startBox({ bind: boxBinds() });
  try {
    await installInBox(box, ["memory"]);
    let warm;
    try {
      warm = await boxWarm(box);
    } catch (e) {
      warm = { error: e };
    }
    boxWarmRows(warm);
  } finally {
    await box.stop();
  }
}

// ---- 6. a backend on another host ----------------------------------------------------------

async function sectionRemote() {
  heading("6. Warm call to a backend on another host: mcp-lazy through ssh vs a plain `ssh HOST socat` relay");
  const box = await startBox({ bind: boxBinds() });
  const peers = [];
  try {
    await installInBox(box, ["memory"]);
    await addFarHost({ sh: (script) => boxOk(box, "bash", ["-c", script]) });
    const [tool, args] = BACKENDS.memory.call;
    await boxOk(box, "tee", ["/etc/mcp-lazy/near.yaml"], {
      input: `backends:
  rmem:
    host: ssh://root@far
    remote_name: memory
tools:
  - {name: ${tool}, backend: rmem, input_schema: {type: object}}
`,
    });
    const [nsenter, ...prefix] = box.nsenterArgs();
    const env = getDefaultEnvironment();
    // The floor: ssh's own connection, socat on the far host relaying to the same pooled shim.
    const floor = new Peer(nsenter, [...prefix, "ssh", "-T", "-o", "BatchMode=yes", "root@far", "socat", "STDIO", "UNIX-CONNECT:/run/mcp-lazy/memory.sock"], { env, stderr: true });
    const lazy = new Peer(nsenter, [...prefix, MCP_LAZY, "--manifest", "/etc/mcp-lazy/near.yaml"], { env, stderr: true });
    peers.push(floor, lazy);
    await handshake(floor);
    await handshake(lazy);
    const { floor: d, lazy: l } = await interleavedCalls({ floor, lazy }, tool, args);
    const q = (v) => [median(v), p90(v), p99(v)].map(us);
    table(["path", "calls", "median", "p90", "p99", "ratio med / p90 / p99"], [
      ["memory read_graph, ssh + socat", d.length, ...q(d), ""],
      ["memory read_graph, via mcp-lazy + connect", l.length, ...q(l), [median, p90, p99].map((f) => ratio(f(l), f(d))).join(" / ")],
    ]);
    console.log("  (both over ssh to a network namespace of the same machine, so the network costs nothing: the figures are");
    console.log("   the relays' own cost; mcp-lazy's path: frontend -> ssh mux client -> ControlMaster -> sshd -> mcp-lazy connect)");
    console.log(`  target: <1.15x per call -> ${ratio(median(l), median(d))} ${median(l) / median(d) < 1.15 ? "met" : "NOT met"}`);
  } finally {
    await Promise.all(peers.map((p) => p.close().catch(() => {})));
    await box.stop();
  }
}

const oneLine = (text) => {
  const t = text.replace(/\s+/g, " ");
  return t.length > 300 ? `${t.slice(0, 300)}...` : t;
};

// ---- 8. a fleet on one pooled shim ----------------------------------------------------------

async function sectionFleetScale() {
  heading("8. one pooled shim (mcp-lazy@rec, a recorder backend) with 1 and 1000 open sessions");
  const rb = await recorderBox({ shimd: SHIMD, build: BUILD, maxSessions: 4096, idle: "5m" });
  // 1 session before and after 1000 (each run on a fresh shim), the 1-session runs pooled: whatever
  // drifts over the section (a box warming up) hits both sides alike.
  const plan = [[1, RUNS.warmCalls / 2, "before"], [1000, RUNS.warmCalls, ""], [1, RUNS.warmCalls / 2, "after"]];
  const runs = [];
  try {
    for (const [n, probe, when] of plan) {
      const o = { socket: "/run/mcp-lazy/rec.sock", sessions: n, rounds: 3, interval_ms: 1000, probe, unit: "mcp-lazy@rec.service", raw: true };
      const r = await rb.box.exec(NODE, [SESSIONS_SCRIPT, JSON.stringify(o)], { timeout: 300000 });
      if (r.code !== 0) throw new Error(`${n} sessions: ${r.stderr.slice(-800)}`);
      const f = JSON.parse(r.stdout);
      if (f.answered !== f.calls || f.errors || f.misrouted || f.unknown) throw new Error(`${n} sessions: ${r.stdout.slice(0, 2000)}`);
      runs.push({ n, when, rss: f.shim.rss_kib, fds: f.shim.fds, all: f.latency_raw, probe: f.probe_raw });
      // The next run starts from a fresh shim.
      await rb.sh("systemctl stop mcp-lazy@rec.service; rm -f /srv/load/record.log");
    }
  } finally {
    await rb.box.stop();
  }
  const Q = [0.5, 0.9, 0.99];
  const cell = (v) => `${v.length}: ${Q.map((q) => qcell(v, q, (x) => x.toFixed(3))).join(" / ")} ms`;
  const label = (r) => `${r.n} session${r.n === 1 ? "" : "s"}${r.when ? `, ${r.when}` : ""}`;
  const ones = runs.filter((r) => r.n === 1), many = runs.find((r) => r.n === 1000);
  const one = { n: 1, when: "both runs", rss: median(ones.map((r) => r.rss)), fds: median(ones.map((r) => r.fds)),
    all: ones.flatMap((r) => r.all), probe: ones.flatMap((r) => r.probe) };
  table(["open sessions", "shim RSS", "shim fds", "all call at once, calls: p50 / p90 / p99", "one session's calls, the rest open: p50 / p90 / p99"],
    [...runs, one].map((r) => [label(r), `${(r.rss / 1024).toFixed(1)} MiB`, String(r.fds), cell(r.all), cell(r.probe)]));
  const vs = (k) => Q.map((q) => ratio(honest(many[k], q), honest(one[k], q))).join(" / ");
  const probeRatio = median(many.probe) / median(one.probe);
  console.log(`  1000 sessions / 1 (both runs): shim RSS ${ratio(many.rss, one.rss)} (${((many.rss - one.rss) / 1000).toFixed(1)} KiB each), ` +
    `fds ${ratio(many.fds, one.fds)}; all at once p50 / p90 / p99 ${vs("all")}; one session's call ${vs("probe")} ` +
    `(target: p50 <1.5x -> ${probeRatio < 1.5 ? "met" : "NOT met"})`);
  console.log("  (raw JSON-RPC clients on the shim's socket inside the box, each holding its connection; RSS = VmRSS of the shim;");
  console.log("   'all at once' = 3 rounds of one call from every session, 1 s apart; n<10 / n<100: too few calls for a p90 / p99)");
}

// ---- main ---------------------------------------------------------------------------------

async function section(title, fn) {
  const t0 = now();
  const load = () => loadavg().map((x) => x.toFixed(2)).join(" ");
  const before = load();
  try {
    await fn();
    console.log(`  [${title}: ${(Math.round(now() - t0) / 1000).toFixed(1)} s, load average ${before} at its start, ${load()} at its end]`);
  } catch (e) {
    console.log(`  ${title}: FAILED: ${e.stack || e.message}`);
    failures.push(`${title}: ${oneLine(e.message)}`);
  }
}

async function main() {
  for (const f of [MCP_LAZY, SHIMD, ...Object.values(SCRIPT)])
    if (!existsSync(f)) throw new Error(`${f} is missing: run 'make deps all' first`);
  const only = new Set(process.argv.slice(2));
  const want = (n) => only.size === 0 || only.has(String(n));
  for (const sig of ["SIGINT", "SIGTERM", "SIGHUP"])
    process.on(sig, () => {
      console.log(`\nbench: ${sig}, cleaning up`);
      killAllTracked();
      rmSync(WORK, { recursive: true, force: true });
      process.exit(130); // 'exit' also takes any box down (box.mjs)
    });
  const watchdog = setTimeout(() => {
    console.log(`\nbench: still running after ${DEADLINE_MS / 1000} s, giving up`);
    killAllTracked();
    rmSync(WORK, { recursive: true, force: true });
    process.exit(2);
  }, DEADLINE_MS);
  watchdog.unref();

  let rev = "unknown revision";
  try {
    rev = execFileSync("git", ["-C", ROOT, "describe", "--always", "--dirty"], { stdio: ["ignore", "pipe", "ignore"] }).toString().trim();
  } catch {}
  const load = () => loadavg().map((x) => x.toFixed(2)).join(" ");
  console.log(`mcp-lazy bench: ${MCP_LAZY} (${rev})`);
  console.log(`node ${process.version}, ${cpus().length} CPUs, load average ${load()}; ${QUICK ? "BENCH_QUICK=1: fewer runs" : "full run"}`);
  execFileSync("cc", ["-O2", "-Wall", "-Wextra", "-D_GNU_SOURCE", "-o", FLOOR, join(TESTS, "bench/floor.c")], { stdio: "inherit" });
  const direct = writeDirectManifest();
  const t0 = now();
  if (want(1))
    await section("section 1", () => sectionStartup({
      mcpLazy: MCP_LAZY, floorSource: join(TESTS, "bench/floor.c"), work: WORK, node: NODE, tests: TESTS,
      memoryArgs: BACKENDS.memory.args, memoryEnv: memoryEnv("memory-startup.jsonl"), runs: RUNS.startupLazy, nodeRuns: RUNS.startupNode, quick: QUICK,
    }));
  if (want(2)) await section("section 2", () => sectionWarm(direct));
  if (want(3))
    await section("section 3", () => sectionCold({
      backends: BACKENDS, runs: RUNS.cold, mcpLazy: MCP_LAZY, shimd: SHIMD, manifest: direct, floor: FLOOR, work: WORK, server, memoryEnv, checkToolResult,
      initialize, initialized, toolsCall,
    }));
  // The fleet boots a systemd box: half of a QUICK run's 30 s on its own.
  if (!(QUICK && only.size === 0 && (console.log("\n4. skipped with BENCH_QUICK=1 (a systemd box): node bench/bench.mjs 4"), true)) && want(4))
    await section("section 4", sectionFleet);
  if (only.has("4b") && !only.has("4")) await section("section 4b", sectionBoxWarm);
  if (want(7)) await section("section 7", () => sectionThroughput({ floor: FLOOR, shimd: SHIMD, mcpLazy: MCP_LAZY, work: WORK, quick: QUICK }));
  // BENCH_QUICK=1 leaves out what takes longest (unless asked for by number), to stay under 30 s.
  const quickSkip = (n, why) => QUICK && only.size === 0 && (console.log(`\n${n}. skipped with BENCH_QUICK=1 (${why}): node bench/bench.mjs ${n}`), true);
  if (!quickSkip(5, "frontends: 500 processes and their idle CPU") && want(5))
    await section("section 5", () => sectionFrontends({ mcpLazy: MCP_LAZY, work: WORK, runs: QUICK ? 10 : 100, n: QUICK ? 200 : 500 }));
  if (!quickSkip(6, "a backend on another host: a second box") && want(6)) await section("section 6", sectionRemote);
  if (!quickSkip(8, "1000 sessions in a box") && want(8)) await section("section 8", sectionFleetScale);
  if (want(9)) await section("section 9", () => sectionEras(direct));

  // Anything of ours still running is a bug in the bench or in mcp-lazy's shutdown.
  await new Promise((r) => setTimeout(r, 200));
  // Only our own: what ran below our children, and whatever names our private work directory.
  const left = [...new Set([...leftovers(), ...processesMatching(WORK)])].filter((p) => alive(p));
  if (left.length) {
    console.log(`\nbench: ${left.length} process(es) left behind, killing: ${left.map((p) => `${p} (${cmdline(p).slice(0, 80)})`).join(", ")}`);
    failures.push("processes left behind");
  }
  killAllTracked();
  for (const p of left) try { process.kill(p, "SIGKILL"); } catch {}
  rmSync(WORK, { recursive: true, force: true });
  console.log(`\nbench done in ${((now() - t0) / 1000).toFixed(1)} s, load average ${load()}${failures.length ? `; FAILED: ${failures.join(" | ")}` : ""}`);
  process.exitCode = failures.length ? 1 : 0;
}

main().catch((e) => {
  console.error(e.stack || e.message);
  killAllTracked();
  rmSync(WORK, { recursive: true, force: true });
  process.exitCode = 2;
});
