// lib.mjs — helpers for bench.mjs: timed line-level JSON-RPC peers, /proc readers, statistics,
// tables, generated manifests, and a process tracker so that no run leaves anything behind.
import { execFileSync, spawn } from "node:child_process";
import { closeSync, constants, mkdtempSync, openSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";

export const now = () => performance.now();
export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// ---- /proc -------------------------------------------------------------------------------

// Fields of /proc/PID/status in KiB (VmHWM, VmRSS, RssAnon, ...); undefined once the process is gone.
export function procStatus(pid) {
  try {
    const out = {};
    for (const l of readFileSync(`/proc/${pid}/status`, "utf8").split("\n")) {
      const m = /^(\w+):\s+(\d+) kB$/.exec(l);
      if (m) out[m[1]] = Number(m[2]);
    }
    return out;
  } catch {
    return undefined;
  }
}

// Time the process has spent on a CPU so far, in ms (/proc/PID/schedstat, ns resolution).
export function procCpuMs(pid) {
  try {
    return Number(readFileSync(`/proc/${pid}/schedstat`, "utf8").split(" ")[0]) / 1e6;
  } catch {
    return undefined;
  }
}

// Proportional set size in KiB (shared pages split among the processes that map them).
export function procPss(pid) {
  try {
    const m = /^Pss:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/smaps_rollup`, "utf8"));
    return m ? Number(m[1]) : undefined;
  } catch {
    return undefined;
  }
}

// /proc/PID/stat from field 3 (state) on (the command, which may hold spaces, cut off), or undefined.
export function procState(pid) {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  } catch {
    return undefined;
  }
}

// Alive and not a zombie (nobody here reaps orphans: PID 1 is not an init).
export function alive(pid) {
  const s = procState(pid);
  return !!s && s[0] !== "Z" && s[0] !== "X";
}

export function cmdline(pid) {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").join(" ").trim();
  } catch {
    return "";
  }
}

// The pids in /proc now (one directory read, no file opened).
function pidsNow() {
  const out = new Set();
  for (const d of readdirSync("/proc")) {
    const c = d.charCodeAt(0);
    if (c >= 48 && c <= 57) out.add(Number(d));
  }
  return out;
}

// pid -> parent pid of the live processes in pids.
function parentsOf(pids) {
  const parent = new Map();
  for (const d of pids) {
    const s = procState(d);
    if (s && s[0] !== "Z") parent.set(Number(d), Number(s[1]));
  }
  return parent;
}

// pid -> parent pid of every live process. One scan of /proc serves every call made in the same
// turn of the event loop (closing 500 peers at once would otherwise read /proc 500 times over); a
// spawn starts a new scan.
let parentsCache;
function parents() {
  if (parentsCache) return parentsCache;
  parentsCache = parentsOf(pidsNow());
  setImmediate(() => (parentsCache = undefined));
  return parentsCache;
}

// The pids that were alive just before a live Peer was spawned, by the Peer's pid: its descendants
// came later, so only the other pids need their parent read (every /proc/PID/stat read on a busy
// machine took 3-35 ms a scan, and the bench scans at each of its hundreds of closes).
const bornAfter = new Map();

// Every live process whose parent chain reaches pid (pid itself excluded). A few processes born
// after pid are read alone; many (closing 500 peers at once: each was born before the others) take
// one scan of all, which the calls of the same turn share.
export function descendants(pid) {
  const before = bornAfter.get(pid);
  const fresh = !parentsCache && before ? [...pidsNow()].filter((p) => !before.has(p)) : undefined;
  const parent = fresh && fresh.length < 64 ? parentsOf(fresh) : parents();
  const out = [];
  for (const [p] of parent) {
    for (let q = parent.get(p), hops = 0; q && hops < 64; q = parent.get(q), hops++) {
      if (q === pid) {
        out.push(p);
        break;
      }
    }
  }
  return out;
}

export function processesMatching(needle) {
  return readdirSync("/proc")
    .filter((d) => /^\d+$/.test(d) && Number(d) !== process.pid)
    .filter((d) => alive(d) && cmdline(d).includes(needle))
    .map(Number);
}

function killPids(pids, sig = "SIGKILL") {
  for (const p of pids) {
    try {
      process.kill(p, sig);
    } catch {}
  }
}

// ---- process tracking --------------------------------------------------------------------

const live = new Set();
let trackerInstalled = false;

// SIGKILLs every tracked process and everything below it (backends setsid() away from their
// shim's group, so process groups are not enough; the parent chain is).
export function killAllTracked() {
  for (const p of live) p.killTree();
  for (const pid of livePids) killPids([...descendants(pid), pid]);
  livePids.clear();
}

// Every process the bench saw below one of its own children, by pid and start time (pids get
// reused): leftovers() reports those still running at the end, and only those.
const seen = new Map();
function startTime(pid) {
  const s = procState(pid);
  return s ? s[19] : undefined;
}
export function remember(pids) {
  for (const pid of pids) {
    const st = startTime(pid);
    if (st !== undefined && !seen.has(pid)) seen.set(pid, st);
  }
}
export function leftovers() {
  return [...seen].filter(([pid, st]) => alive(pid) && startTime(pid) === st).map(([pid]) => pid);
}

// Processes started by others (the SDK's StdioClientTransport): killed with their trees at exit.
const livePids = new Set();
export function trackPid(pid) {
  installTracker();
  if (pid) livePids.add(pid);
}
export function untrackPid(pid) {
  livePids.delete(pid);
}

function installTracker() {
  if (trackerInstalled) return;
  trackerInstalled = true;
  process.on("exit", killAllTracked);
}

// Snapshots pid's descendants, waits up to ms for pid and them to end, then SIGKILLs what is left.
// Returns the pids that had to be killed.
export async function reapTree(pid, tree, ms = 8000) {
  const all = [pid, ...tree].filter(Boolean);
  remember(all);
  const end = now() + ms;
  while (all.some(alive) && now() < end) await sleep(20);
  const left = all.filter(alive);
  if (left.length) {
    killPids([...left, ...left.flatMap(descendants)]);
    const end2 = now() + 2000;
    while (left.some(alive) && now() < end2) await sleep(20);
  }
  return left;
}

// ---- a timed JSON-RPC peer on a child's stdio ----------------------------------------------

// The child's stdin and stdout as two pipes, and the bench's ends of them as streams: FIFOs (node makes
// no anonymous pipe), opened so that no open blocks and the child's ends stay blocking, as pipe2()'s.
// node's own stdio for a child is one socketpair per fd, which costs a backend more per call than
// pipes (FINDINGS-floorcheck.md): the warm-call paths give every process the bench talks to, and
// every backend, pipes, as the shim gives its backend.
function stdioPipes() {
  const dir = mkdtempSync(join(tmpdir(), "mcp-lazy-bench-fifo-"));
  const [a, b] = [join(dir, "in"), join(dir, "out")];
  try {
    execFileSync("mkfifo", ["-m", "600", a, b]);
    const { O_RDONLY, O_WRONLY, O_NONBLOCK } = constants;
    const reader = openSync(a, O_RDONLY | O_NONBLOCK); // so that the writer's open does not fail
    const ours = { in: openSync(a, O_WRONLY | O_NONBLOCK), out: openSync(b, O_RDONLY | O_NONBLOCK) };
    const theirs = [openSync(a, O_RDONLY), openSync(b, O_WRONLY)];
    closeSync(reader);
    return {
      theirs,
      stdin: new Socket({ fd: ours.in, readable: false, writable: true }),
      stdout: new Socket({ fd: ours.out, readable: true, writable: false }),
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

// Every stdout line and (optionally) every stderr line is stamped with performance.now() on arrival.
// pipes: the child's stdin and stdout are pipes (stdioPipes()), not node's socketpairs.
export class Peer {
  constructor(command, args, { env = process.env, cwd, stderr = false, pipes = false } = {}) {
    installTracker();
    this.lines = []; // { t, line }
    this.err = []; // { t, line }
    this.stderrText = "";
    this.waiters = new Set();
    const before = pidsNow();
    this.t0 = now();
    parentsCache = undefined;
    const p = pipes ? stdioPipes() : undefined;
    this.child = spawn(command, args, { env, cwd, stdio: [...(p?.theirs ?? ["pipe", "pipe"]), stderr ? "pipe" : "ignore"] });
    for (const fd of p?.theirs ?? []) closeSync(fd);
    this.stdin = p?.stdin ?? this.child.stdin;
    this.stdout = p?.stdout ?? this.child.stdout;
    this.pid = this.child.pid;
    if (this.pid) remember([this.pid]);
    if (this.pid) bornAfter.set(this.pid, before);
    live.add(this);
    this.exited = new Promise((resolve) =>
      this.child.on("exit", (code, signal) => {
        this.exitCode = code;
        live.delete(this);
        if (bornAfter.get(this.pid) === before) bornAfter.delete(this.pid);
        resolve({ code, signal });
        this.wake();
      }),
    );
    this.child.on("error", (e) => {
      this.spawnError = e;
      this.wake();
    });
    this.stdin.on("error", () => {});
    let chunks = [];
    this.stdout.on("data", (d) => {
      const t = now();
      let start = 0;
      for (let i = d.indexOf(10); i >= 0; i = d.indexOf(10, start)) {
        chunks.push(d.subarray(start, i));
        this.lines.push({ t, line: Buffer.concat(chunks).toString("utf8") });
        chunks = [];
        start = i + 1;
      }
      if (start < d.length) chunks.push(d.subarray(start));
      this.wake();
    });
    if (stderr) {
      let ebuf = "";
      this.child.stderr.setEncoding("utf8").on("data", (d) => {
        const t = now();
        this.stderrText += d;
        ebuf += d;
        let i;
        while ((i = ebuf.indexOf("\n")) >= 0) {
          this.err.push({ t, line: ebuf.slice(0, i) });
          ebuf = ebuf.slice(i + 1);
        }
        this.wake();
      });
    }
  }

  wake() {
    for (const w of this.waiters) w();
  }

  write(...messages) {
    this.stdin.write(messages.map((m) => (typeof m === "string" ? m : JSON.stringify(m)) + "\n").join(""));
  }

  // The first stdout line (from the start, consumed) that is a response with this id.
  // Resolves to { t, msg }; rejects after ms or when the process ends first.
  async response(id, ms = 15000) {
    const end = now() + ms;
    for (;;) {
      for (let i = 0; i < this.lines.length; i++) {
        const { t, line } = this.lines[i];
        if (!line.includes(`"id":${JSON.stringify(id)}`)) continue;
        let msg;
        try {
          msg = JSON.parse(line);
        } catch {
          continue;
        }
        if (msg.id === id && ("result" in msg || "error" in msg)) {
          this.lines.splice(0, i + 1);
          return { t, msg };
        }
      }
      if (this.spawnError) throw this.spawnError;
      if (this.exitCode !== undefined)
        throw new Error(`${this.child.spawnfile} exited (${this.exitCode}) before answering id ${id}${this.stderrHint()}`);
      if (now() > end) throw new Error(`timed out after ${ms} ms waiting for id ${id}${this.stderrHint()}`);
      await new Promise((r) => {
        const w = () => {
          this.waiters.delete(w);
          clearTimeout(timer);
          r();
        };
        const timer = setTimeout(w, Math.max(1, end - now()));
        this.waiters.add(w);
      });
    }
  }

  async request(id, method, params, ms) {
    this.write({ jsonrpc: "2.0", id, method, ...(params === undefined ? {} : { params }) });
    return this.response(id, ms);
  }

  // Resolves once n stdout lines have arrived (for peers that do not speak JSON-RPC, like cat).
  async waitLines(n, ms = 15000) {
    const end = now() + ms;
    while (this.lines.length < n) {
      if (now() > end || this.exitCode !== undefined) throw new Error(`expected ${n} lines, got ${this.lines.length}`);
      await new Promise((r) => {
        const w = () => {
          this.waiters.delete(w);
          clearTimeout(timer);
          r();
        };
        const timer = setTimeout(w, Math.max(1, end - now()));
        this.waiters.add(w);
      });
    }
    return this.lines[n - 1];
  }

  // The first stderr line matching re, from arrival order; rejects after ms.
  async stderrLine(re, ms = 15000) {
    const end = now() + ms;
    for (;;) {
      const hit = this.err.find((e) => re.test(e.line));
      if (hit) return hit;
      if (now() > end || this.exitCode !== undefined) throw new Error(`no stderr line matching ${re}${this.stderrHint()}`);
      await sleep(5);
    }
  }

  stderrHint() {
    const s = this.stderrText.trim();
    return s ? `; stderr: ${s.slice(-600)}` : "";
  }

  // Closes stdin (an MCP server's signal to end) and waits for the whole tree to go; kills stragglers.
  async close(ms = 8000) {
    const tree = descendants(this.pid);
    try {
      if (this.stdin === this.child.stdin) this.stdin.end();
      else this.stdin.destroySoon(); // a FIFO has no shutdown(): its last writer's close is the end
    } catch {}
    // The child's own exit is an event: no polling (at 20 ms a step) for a peer without children.
    const end = now() + ms;
    if (this.exitCode === undefined && !this.spawnError) {
      let timer;
      await Promise.race([this.exited, new Promise((r) => (timer = setTimeout(r, ms)))]);
      clearTimeout(timer);
    }
    const killed = await reapTree(this.pid, tree, Math.max(0, end - now()));
    live.delete(this);
    return killed;
  }

  killTree() {
    killPids([...descendants(this.pid), this.pid]);
    live.delete(this);
  }
}

// ---- statistics and tables ----------------------------------------------------------------

export function quantile(values, q) {
  const s = [...values].sort((a, b) => a - b);
  if (!s.length) return NaN;
  const i = Math.min(s.length - 1, Math.max(0, Math.ceil(q * s.length) - 1));
  return s[i];
}
export const median = (v) => quantile(v, 0.5);
export const p90 = (v) => quantile(v, 0.9);
export const p99 = (v) => quantile(v, 0.99);

// A quantile q of n samples means something only with n >= 1/(1-q) samples (a p90 of fewer than 10,
// a p99 of fewer than 100, would be the largest sample): enough() says whether it has them, and
// honest() gives the quantile, or NaN without them; tooFew(q) is what a table prints instead.
export const enough = (n, q) => {
  const tail = 1 - Math.max(q, 1 - q);
  return n >= 1 && (tail >= 0.5 || n * tail >= 1 - 1e-9);
};
export const honest = (values, q) => (enough(values.length, q) ? quantile(values, q) : NaN);
export const tooFew = (q) => `n<${Math.round(1 / (1 - Math.max(q, 1 - q)))}`;
// The cell for quantile q of values printed with fmt, or tooFew(q).
export const qcell = (values, q, fmt) => (enough(values.length, q) ? fmt(quantile(values, q)) : tooFew(q));

export function ms(v, digits) {
  if (!Number.isFinite(v)) return "-";
  digits ??= v < 1 ? 3 : v < 10 ? 2 : v < 100 ? 1 : 0;
  return `${v.toFixed(digits)} ms`;
}
export function us(v) {
  return Number.isFinite(v) ? `${Math.round(v * 1000)} µs` : "-";
}
export function mib(kib) {
  if (!Number.isFinite(kib)) return "-";
  const m = kib / 1024;
  return `${m.toFixed(m < 10 ? 2 : m < 100 ? 1 : 0)} MiB`;
}
export function ratio(a, b) {
  return Number.isFinite(a) && Number.isFinite(b) && b > 0 ? `${(a / b).toFixed(a / b < 10 ? 2 : 0)}x` : "-";
}

// Prints rows (arrays of cells) under headers; numbers-ish cells are right-aligned.
export function table(headers, rows, indent = "  ") {
  const all = [headers, ...rows].map((r) => r.map((c) => String(c ?? "")));
  const width = headers.map((_, i) => Math.max(...all.map((r) => [...(r[i] ?? "")].length)));
  const numeric = (s) => /^[-+~<>]?[\d.,]+\s*(ms|µs|MiB|KiB|x|%)?$/.test(s) || s === "-";
  const fmt = (r) =>
    r
      .map((c, i) => {
        const pad = " ".repeat(width[i] - [...c].length);
        return i > 0 && numeric(c) ? pad + c : c + pad;
      })
      .join("  ")
      .trimEnd();
  console.log(indent + fmt(all[0]));
  console.log(indent + width.map((w) => "-".repeat(w)).join("  "));
  for (const r of all.slice(1)) console.log(indent + fmt(r));
}

export function heading(text) {
  console.log(`\n${text}\n${"=".repeat([...text].length)}`);
}

// ---- JSON-RPC messages --------------------------------------------------------------------

export const CLIENT_INFO = { name: "mcp-lazy-bench", version: "1" };
export const initialize = (id = 0, version = "2025-06-18") => ({
  jsonrpc: "2.0",
  id,
  method: "initialize",
  params: { protocolVersion: version, capabilities: {}, clientInfo: CLIENT_INFO },
});
export const initialized = { jsonrpc: "2.0", method: "notifications/initialized" };
export const toolsList = (id) => ({ jsonrpc: "2.0", id, method: "tools/list" });
export const toolsCall = (id, name, args = {}) => ({ jsonrpc: "2.0", id, method: "tools/call", params: { name, arguments: args } });

// ---- generated manifests ------------------------------------------------------------------

// A small deterministic PRNG, so that every run benchmarks the same manifests.
function prng(seed) {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const NOUNS = ["issue", "ticket", "invoice", "customer", "order", "repository", "branch", "deployment", "alert", "metric",
  "document", "page", "channel", "message", "calendar_event", "contact", "file", "bucket", "queue", "job", "secret",
  "dashboard", "incident", "pipeline", "artifact"];
const VERBS = ["list", "get", "create", "update", "delete", "search", "archive", "export", "sync", "describe"];
const SERVICES = ["github", "jira", "stripe", "slack", "gcal", "drive", "s3", "k8s", "grafana", "pagerduty", "notion",
  "linear", "sentry", "datadog", "postgres", "redis", "gitlab", "confluence", "zendesk", "hubspot", "salesforce",
  "twilio", "sendgrid", "airtable", "asana", "trello", "figma", "vercel", "netlify", "cloudflare", "okta", "auth0",
  "snowflake", "bigquery", "dbt", "airflow", "kafka", "rabbitmq", "elastic", "mongo"];

function property(rand, name) {
  const kind = Math.floor(rand() * 6);
  switch (kind) {
    case 0:
      return { type: "string", description: `The ${name.replace(/_/g, " ")} to act on, as shown in the web UI or returned by a list call` };
    case 1:
      return { type: "integer", minimum: 1, maximum: 100, default: 20, description: `How many ${name.replace(/_/g, " ")} entries to return per page (1-100)` };
    case 2:
      return { type: "boolean", default: false, description: `Whether to include ${name.replace(/_/g, " ")} details in the result` };
    case 3:
      return { type: "string", enum: ["asc", "desc", "relevance", "created", "updated"], description: `Sort order for ${name.replace(/_/g, " ")}` };
    case 4:
      return { type: "array", items: { type: "string" }, description: `Zero or more ${name.replace(/_/g, " ")} labels to filter by; all must match` };
    default:
      return { type: "string", format: "date-time", description: `Only ${name.replace(/_/g, " ")} changed after this ISO 8601 timestamp` };
  }
}

// A manifest of n tools spread over ceil(n/25) backends, each tool with 2-5 input properties, a
// description, annotations, and (for a third of them) an output schema, like real servers' lists.
export function generateManifest(n, { socketDir = "/nonexistent" } = {}) {
  const rand = prng(n * 7919 + 17);
  const nBackends = Math.ceil(n / 25);
  const backends = [];
  const lines = [
    `# Generated by tests/bench/bench.mjs: ${n} tools over ${nBackends} backends.`,
    "server:",
    `  name: bench-${n}`,
    '  version: "1.0.0"',
    `  instructions: "A generated fleet of ${nBackends} services with ${n} tools in all."`,
    "backends:",
  ];
  for (let b = 0; b < nBackends; b++) {
    const name = `${SERVICES[b % SERVICES.length]}${b >= SERVICES.length ? b : ""}`;
    backends.push(name);
    lines.push(`  ${name}:`, `    command: [npx, -y, "@example/${name}-mcp@1.2.3"]`, `    socket: ${socketDir}/${name}.sock`, "    idle_timeout: 5m");
  }
  lines.push("tools:");
  for (let i = 0; i < n; i++) {
    const backend = backends[Math.floor(i / 25)];
    const verb = VERBS[Math.floor(rand() * VERBS.length)];
    const noun = NOUNS[Math.floor(rand() * NOUNS.length)];
    const name = `${backend}_${verb}_${noun}_${i}`;
    const nProps = 2 + Math.floor(rand() * 4);
    const properties = {};
    const required = [];
    for (let p = 0; p < nProps; p++) {
      const pname = p === 0 ? `${noun}_id` : `${NOUNS[Math.floor(rand() * NOUNS.length)]}_${["filter", "limit", "sort", "tags", "since"][p % 5]}`;
      properties[pname] = property(rand, pname);
      if (p === 0 || rand() < 0.3) required.push(pname);
    }
    const input = { $schema: "http://json-schema.org/draft-07/schema#", type: "object", properties, required, additionalProperties: false };
    const readOnly = ["list", "get", "search", "describe", "export"].includes(verb);
    lines.push(
      `  - name: ${name}`,
      `    title: "${verb[0].toUpperCase() + verb.slice(1)} ${noun.replace(/_/g, " ")} (${backend})"`,
      `    description: "${verb[0].toUpperCase() + verb.slice(1)} ${noun.replace(/_/g, " ")} records in ${backend}. Results are paginated; pass the cursor from the previous page to continue. Requires the ${backend} token to have ${readOnly ? "read" : "write"} scope."`,
      `    backend: ${backend}`,
      `    input_schema: ${JSON.stringify(input)}`,
    );
    if (i % 3 === 0)
      lines.push(
        `    output_schema: ${JSON.stringify({
          type: "object",
          properties: { items: { type: "array", items: { type: "object", properties: { id: { type: "string" }, name: { type: "string" }, updated: { type: "string" } }, required: ["id"] } }, nextCursor: { type: "string" } },
          required: ["items"],
        })}`,
      );
    lines.push(`    annotations: ${JSON.stringify({ readOnlyHint: readOnly, destructiveHint: verb === "delete", idempotentHint: readOnly, openWorldHint: true })}`);
  }
  return lines.join("\n") + "\n";
}

// The tools: section of manifests/demo.yaml (memory, everything, files), to pair with other backends.
export function demoTools(demoYamlText) {
  const i = demoYamlText.search(/^tools:/m);
  if (i < 0) throw new Error("manifests/demo.yaml has no top-level tools: section");
  return demoYamlText.slice(i);
}
