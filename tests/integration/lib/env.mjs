// Where the binaries under test are, and small helpers shared by the integration tests.
import { spawn } from "node:child_process";
import { readFileSync, readdirSync, writeFileSync } from "node:fs";
import { connect } from "node:net";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { onLines } from "./lines.mjs";

export const TESTS = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
export const ROOT = resolve(TESTS, "..");
export const BUILD = process.env.MCP_LAZY_BUILD ?? join(ROOT, "build");
export const MCP_LAZY = join(BUILD, "mcp-lazy");
export const SHIMD = join(BUILD, "mcp-lazy-shimd");
export const MANIFESTS = join(ROOT, "manifests");
export const SERVERS = join(TESTS, "node_modules/@modelcontextprotocol");
export const SERVER_SCRIPTS = {
  memory: join(SERVERS, "server-memory/dist/index.js"),
  everything: join(SERVERS, "server-everything/dist/index.js"),
  filesystem: join(SERVERS, "server-filesystem/dist/index.js"),
  postgres: join(SERVERS, "server-postgres/dist/index.js"),
};

// The sanitizer builds' leak check stops the shim's threads with ptrace at exit, which the system
// units' SystemCallFilter= refuses: the tests' drop-in (system manager only) allows @debug back.
// The repo itself may sit where the units' sandbox hides (a clone under /tmp, /home or /root): the
// same drop-in binds it in, read-only, as every other path is under ProtectSystem=strict.
export const SANITIZER_DROPIN = `printf '[Service]\\nSystemCallFilter=@debug\\nBindReadOnlyPaths=${ROOT}\\n' > /etc/systemd/system/mcp-lazy@.service.d/sanitizer.conf`;

// A function that writes a file in dir (a test file's manifests) and returns its path.
export const fileWriter = (dir) => (name, text) => {
  const p = join(dir, name);
  writeFileSync(p, text);
  return p;
};

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Polls fn until it returns truthy or ms pass; returns the last value.
export async function waitFor(fn, ms = 20000, step = 50) {
  const end = Date.now() + ms;
  let v;
  while (!(v = await fn()) && Date.now() < end) await sleep(step);
  return v;
}

// A unit's journal (in a box: sh runs a script there and resolves to its stdout) once ok(log) holds,
// or after ms. A service's lines reach journald through a stream it reads when it gets to it: on a
// loaded machine a line can show up well after what logged it has been answered.
export async function journalUntil(sh, unit, ok, ms = 20000) {
  let log = "";
  await waitFor(async () => ok((log = await sh(`journalctl -q -o cat -u ${unit}`))), ms, 200);
  return log;
}

// Whether a unix socket listens at path. Its file appears at bind(), before listen(): a connect
// in between is refused. Read from /proc/net/unix (flag __SO_ACCEPTCON), as a probe connection
// would start an Accept=no service.
export function unixListening(path) {
  return readFileSync("/proc/net/unix", "utf8")
    .split("\n")
    .slice(1)
    .some((line) => {
      const f = line.trim().split(/\s+/);
      return f[7] === path && (parseInt(f[3], 16) & 0x10000) !== 0;
    });
}

// Each process's parent, from /proc.
function parents() {
  const parent = new Map();
  for (const d of readdirSync("/proc")) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const stat = readFileSync(`/proc/${d}/stat`, "utf8");
      parent.set(Number(d), Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]));
    } catch {}
  }
  return parent;
}

// Every process whose parent chain reaches pid (pid itself excluded).
export function descendants(pid) {
  const parent = parents();
  const out = [];
  for (const [p] of parent) {
    for (let q = parent.get(p); q; q = parent.get(q)) {
      if (q === pid) {
        out.push(p);
        break;
      }
    }
  }
  return out;
}

// The processes whose parent is pid.
export function children(pid) {
  return [...parents()].filter(([, q]) => q === pid).map(([p]) => p);
}

export function cmdline(pid) {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").join(" ").trim();
  } catch {
    return "";
  }
}

// Processes anywhere on the machine whose command line contains needle.
export function processesMatching(needle) {
  return readdirSync("/proc")
    .filter((d) => /^\d+$/.test(d) && Number(d) !== process.pid)
    .filter((d) => cmdline(d).includes(needle))
    .map(Number);
}

const livePeers = new Set();
// Ends every RawPeer still running, and every other child of this process that a failed test left
// running (an SDK client's frontend or server: its pipes would keep the file from ever exiting).
// Test files call it from after(), so a failed test hangs nothing. SIGTERM first, and up to 15 s to
// go: a shim stops its backend as it exits, and one killed outright leaves the backend behind, with
// the pipes (seen: audit's shim, still stopping at the end of the file, killed; its backend held
// the file open). SIGKILL for what is left. A box's processes (nsenter into it, the box script) are
// left to its stop(), which ends them all.
export async function cleanupPeers() {
  const left = () =>
    children(process.pid).filter((pid) => {
      const c = cmdline(pid);
      return c && !c.startsWith("nsenter ") && !c.includes("/integration/box ");
    });
  const signal = (sig) => {
    for (const pid of left())
      try {
        process.kill(pid, sig);
      } catch {}
  };
  for (const p of livePeers) if (cmdline(p.child.pid).startsWith("nsenter ")) p.kill();
  signal("SIGTERM");
  if (!(await waitFor(() => left().length === 0, 15000, 100))) signal("SIGKILL");
}

// A raw line-level JSON-RPC peer on a child's stdio, for what the SDK would never send.
export class RawPeer {
  constructor(command, args, opts = {}) {
    this.child = spawn(command, args, { stdio: ["pipe", "pipe", "pipe"], ...opts });
    this.lines = [];
    this.waiters = [];
    this.stderr = "";
    onLines(this.child.stdout, (line) => {
      this.lines.push(line);
      this.waiters.splice(0).forEach((w) => w());
    });
    this.child.stderr.setEncoding("utf8").on("data", (d) => (this.stderr += d));
    // All of stderr has been read: it is a pipe of its own, read apart from stdout, so a line written
    // before an answer can still be unread when the answer is.
    this.stderrEnded = new Promise((r) => this.child.stderr.on("close", r));
    livePeers.add(this);
    this.exited = new Promise((r) =>
      this.child.on("exit", (code, signal) => {
        livePeers.delete(this);
        r({ code, signal });
      }),
    );
  }
  send(obj) {
    this.child.stdin.write((typeof obj === "string" ? obj : JSON.stringify(obj)) + "\n");
  }
  // The next n messages, parsed; rejects after ms (a bound for a hang, not a timing: a message
  // that needs a backend started can take seconds on a loaded machine, tens with megabytes).
  async next(n = 1, ms = 60000) {
    await this.waitLines(n, ms);
    return this.lines.splice(0, n).map((l) => JSON.parse(l));
  }
  // The next line as it was written (parsing loses duplicate keys and how numbers were spelt).
  async nextLine(ms = 60000) {
    await this.waitLines(1, ms);
    return this.lines.shift();
  }
  async waitLines(n, ms) {
    const end = Date.now() + ms;
    while (this.lines.length < n) {
      if (Date.now() > end) throw new Error(`timed out waiting for ${n} message(s); have ${JSON.stringify(this.lines)}; stderr: ${this.stderr}`);
      await new Promise((r) => {
        this.waiters.push(r);
        setTimeout(r, 50);
      });
    }
  }
  async request(obj, ms) {
    this.send(obj);
    const [m] = await this.next(1, ms);
    return m;
  }
  // Ends its input; resolves to how it exited, killed after ms if it has not (a bound for a hang:
  // the status then says SIGKILL).
  close(ms = 60000) {
    this.child.stdin.end();
    return this.exitWithin(ms);
  }
  exitWithin(ms = 60000) {
    const timer = setTimeout(() => this.kill(), ms);
    return this.exited.finally(() => clearTimeout(timer));
  }
  kill(sig = "SIGKILL") {
    try {
      this.child.kill(sig);
    } catch {}
    return this.exited;
  }
}

// mcp-lazy-shimd on a listening socket of its own at path (Accept=no, as the shipped units run it),
// behind systemd-socket-activate; prefix runs before that (setpriv to drop privileges). Resolves once
// the socket listens; the caller stops the child (cleanupPeers ends what is left).
export async function startShimOnSocket(path, manifest, name, { extra = [], prefix = [] } = {}) {
  const argv = [...prefix, "systemd-socket-activate", "-l", path, SHIMD, "--manifest", manifest, ...extra, name];
  const child = spawn(argv[0], argv.slice(1), { stdio: ["ignore", "ignore", "pipe"] });
  let stderr = "";
  child.stderr.setEncoding("utf8").on("data", (d) => (stderr += d));
  const exited = new Promise((r) => child.on("exit", (code, signal) => r({ code, signal })));
  if (!(await waitFor(() => unixListening(path), 20000))) {
    child.kill("SIGKILL");
    throw new Error(`the shim's socket ${path} does not listen; stderr: ${stderr}`);
  }
  return { path, child, exited, stderr: () => stderr };
}

// mcp-lazy-shimd behind a listening socket that outlives it, as a socket unit holds it: made once
// (systemd-socket-activate), and a shell, started on the first connection, starts the shim again each
// time one exits (20 times at most), so that a connection made meanwhile waits in the backlog for the
// next one, as under systemd. exits() lists each exit status so far; stop() ends the shell and the shim.
export async function startShimRespawning(path, manifest, name) {
  const loop = `n=0; while [ $n -lt 20 ]; do sh -c 'export LISTEN_PID=$$; exec "$0" "$@"' "$@"; echo "exit $?" >&2; n=$((n+1)); done`;
  const argv = ["systemd-socket-activate", "-l", path, "sh", "-c", loop, "sh", SHIMD, "--manifest", manifest, name];
  const child = spawn(argv[0], argv.slice(1), { stdio: ["ignore", "ignore", "pipe"], detached: true });
  let stderr = "";
  child.stderr.setEncoding("utf8").on("data", (d) => (stderr += d));
  const exited = new Promise((r) => child.on("exit", (code, signal) => r({ code, signal })));
  const stop = async () => {
    try {
      process.kill(-child.pid, "SIGTERM");
    } catch {}
    await Promise.race([exited, sleep(15000)]);
    try {
      process.kill(-child.pid, "SIGKILL");
    } catch {}
  };
  if (!(await waitFor(() => unixListening(path), 20000))) {
    await stop();
    throw new Error(`the shim's socket ${path} does not listen; stderr: ${stderr}`);
  }
  return { path, child, stop, stderr: () => stderr, exits: () => [...stderr.matchAll(/^exit (\d+)$/gm)].map((m) => Number(m[1])) };
}

// Raw lines from a unix socket (a shim's): one of several sessions on one shim.
export class SockPeer {
  constructor(path) {
    this.lines = [];
    this.waiters = [];
    this.sock = connect(path);
    onLines(this.sock, (line) => {
      this.lines.push(line);
      this.waiters.splice(0).forEach((w) => w());
    });
    this.sock.on("error", () => {});
  }
  send(obj) {
    this.sock.write((typeof obj === "string" ? obj : JSON.stringify(obj)) + "\n");
  }
  async nextRaw(ms = 20000) {
    const end = Date.now() + ms;
    while (this.lines.length === 0) {
      if (Date.now() > end) throw new Error("timed out waiting for a message");
      await new Promise((r) => {
        this.waiters.push(r);
        setTimeout(r, 50);
      });
    }
    return this.lines.shift();
  }
  async next(ms) {
    return JSON.parse(await this.nextRaw(ms));
  }
  async request(obj, ms) {
    this.send(obj);
    return this.next(ms);
  }
  close() {
    this.sock.end();
  }
}

// A session on a shim's socket that declares roots and answers each roots/list with its current root
// (p.root): p.ask(msg) sends msg (if any) and resolves to the first other message.
export function rootedPeer(path, root) {
  const p = new SockPeer(path);
  p.root = root;
  p.ask = async (msg) => {
    if (msg) p.send(msg);
    for (;;) {
      const r = await p.next();
      if (r.method !== "roots/list") return r;
      p.send({ jsonrpc: "2.0", id: r.id, result: { roots: [{ uri: `file:///${p.root}` }] } });
    }
  };
  return p;
}

export const INIT = (version = "2025-06-18", capabilities = {}) => ({
  jsonrpc: "2.0",
  id: 0,
  method: "initialize",
  params: { protocolVersion: version, capabilities, clientInfo: { name: "raw-test", version: "1" } },
});
