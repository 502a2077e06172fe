// hot-path.mjs — the functions a warm call runs, for the Makefile's HOT_PATH (not part of make bench).
//
//   cd tests && node bench/hot-path.mjs [BUILD_DIR]      (needs valgrind; BUILD_DIR default ../build)
//
// Runs 300 sequential calls to floor.c's C backend through mcp-lazy (direct activation) with the
// frontend and the shim under valgrind's lackey, which traces every instruction's address. In the
// steady state (the second half of the loop's wakeups, split at each epoll_wait()), it lists our own
// functions that ran in at least a tenth of those wakeups, in the order they first ran: the
// frontend's, then the shim's others. Prints
// the HOT_PATH line for the Makefile. A function's clones (.part.0, .isra.0) go by its name.
import { execFileSync, spawn } from "node:child_process";
import { createReadStream, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync, chmodSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { Peer } from "./lib.mjs";

const TESTS = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const BUILD = resolve(process.argv[2] ?? join(TESTS, "../build"));
const CALLS = 300;
const work = mkdtempSync(join(tmpdir(), "mcp-lazy-hot-path-"));

function symbols(binary) {
  const out = [];
  for (const l of execFileSync("nm", ["-n", "-S", binary], { encoding: "utf8" }).split("\n")) {
    const p = l.trim().split(/\s+/);
    if (p.length === 4 && "Tt".includes(p[2])) out.push({ start: BigInt(`0x${p[0]}`), end: BigInt(`0x${p[0]}`) + BigInt(`0x${p[1]}`), name: p[3] });
  }
  return out;
}

// The load address of a mapped file and its executable ranges, from /proc/PID/maps.
function mapping(maps, path) {
  const rows = maps.split("\n").filter((l) => l.endsWith(` ${path}`)).map((l) => {
    const [range, perms, off] = l.split(/\s+/);
    const [a, b] = range.split("-").map((x) => BigInt(`0x${x}`));
    return { a, b, off: BigInt(`0x${off}`), x: perms.includes("x") };
  });
  if (!rows.length) throw new Error(`${path} is not mapped`);
  return { base: rows.reduce((m, r) => (r.a - r.off < m ? r.a - r.off : m), rows[0].a - rows[0].off), text: rows.filter((r) => r.x) };
}

async function hotFunctions(log, maps, binary) {
  const libc = maps.split("\n").map((l) => l.split(/\s+/).pop()).find((p) => /\/libc\.so\.6$/.test(p));
  const epoll = execFileSync("nm", ["-D", libc], { encoding: "utf8" }).split("\n").find((l) => /\sepoll_wait@/.test(l));
  const mark = mapping(maps, libc).base + BigInt(`0x${epoll.split(" ")[0]}`);
  const own = mapping(maps, binary);
  const syms = symbols(binary);
  const name = (addr) => {
    const off = addr - own.base;
    let lo = 0, hi = syms.length;
    while (lo < hi) {
      const m = (lo + hi) >> 1;
      if (syms[m].start <= off) lo = m + 1;
      else hi = m;
    }
    const s = syms[lo - 1];
    return s && off < s.end ? s.name.replace(/\..*$/, "") : null;
  };
  // Two passes: count the wakeups, then take the steady state (past the first half, short of the end).
  const read = () => createInterface({ input: createReadStream(log), crlfDelay: Infinity });
  let n = 0;
  for await (const l of read()) if (l.startsWith("I  ") && BigInt(`0x${l.slice(3, l.indexOf(","))}`) === mark) n++;
  const order = new Map(); // name -> { first, wakeups, last }
  let k = 0;
  for await (const l of read()) {
    if (!l.startsWith("I  ")) continue;
    const addr = BigInt(`0x${l.slice(3, l.indexOf(","))}`);
    if (addr === mark) k++;
    if (k < n / 2 || k > n - 20 || !own.text.some((r) => r.a <= addr && addr < r.b)) continue;
    const f = name(addr);
    if (!f) continue;
    const e = order.get(f) ?? order.set(f, { first: order.size, wakeups: 0, last: -1 }).get(f);
    if (e.last !== k) e.wakeups++, (e.last = k);
  }
  // Per message, not per second (the status line's timer): in at least a tenth of the wakeups.
  const steady = Math.max(1, n - 20 - Math.ceil(n / 2));
  return [...order.entries()].filter(([, e]) => e.wakeups >= steady / 10).map(([f]) => f);
}

try {
  execFileSync("valgrind", ["--version"], { stdio: "ignore" });
  const floor = join(work, "floor");
  execFileSync("cc", ["-O2", "-D_GNU_SOURCE", "-o", floor, join(TESTS, "bench/floor.c")]);
  const manifest = join(work, "manifest.yaml");
  writeFileSync(manifest, `backends:\n  cfloor:\n    command: [${floor}, backend]\n    socket: ${work}/absent.sock\n    idle_timeout: 5m\n` +
    "tools:\n  - {name: floor_echo, backend: cfloor, input_schema: {type: object}}\n");
  const lackey = ["--tool=lackey", "--trace-mem=yes"];
  // The shim under valgrind too: exec keeps the pid the frontend gave LISTEN_PID.
  const wrapper = join(work, "shimd");
  writeFileSync(wrapper, `#!/bin/sh\nexec valgrind ${lackey.join(" ")} --log-file=${work}/shim.%p.log ${BUILD}/mcp-lazy-shimd "$@"\n`);
  chmodSync(wrapper, 0o755);
  const p = new Peer("valgrind", [...lackey, `--log-file=${work}/fe.%p.log`, join(BUILD, "mcp-lazy"), "--manifest", manifest, "--activation=direct", "--shimd", wrapper], { stderr: true });
  await p.request(0, "initialize", { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "hot-path", version: "1" } }, 120000);
  p.write({ jsonrpc: "2.0", method: "notifications/initialized" });
  for (let i = 1; i <= CALLS; i++) await p.request(i, "tools/call", { name: "floor_echo", arguments: {} }, 60000);
  const shimPid = Number(readdirSync(work).map((f) => /^shim\.(\d+)\.log$/.exec(f)?.[1]).filter(Boolean).sort((a, b) => a - b)[0]);
  const maps = { fe: readFileSync(`/proc/${p.pid}/maps`, "utf8"), shim: readFileSync(`/proc/${shimPid}/maps`, "utf8") };
  p.child.stdin.end();
  await p.exited;
  const fe = await hotFunctions(join(work, `fe.${p.pid}.log`), maps.fe, join(BUILD, "mcp-lazy"));
  const shim = await hotFunctions(join(work, `shim.${shimPid}.log`), maps.shim, join(BUILD, "mcp-lazy-shimd"));
  const all = [...new Set([...fe, ...shim])];
  console.log(`# ${fe.length} functions in the frontend, ${shim.length} in the shim, ${all.length} in all`);
  console.log(`HOT_PATH := ${all.join(" ")}`);
} finally {
  rmSync(work, { recursive: true, force: true });
}
