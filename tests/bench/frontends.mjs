// frontends.mjs — bench section 5: what a frontend costs now that a session runs one per backend.
//
//   5a. one frontend on manifests/demo.yaml: the whole fleet vs `--backend NAME`, start ->
//       tools/list answered, peak RSS, own memory, file descriptors;
//   5b. a thousand frontends of one user (uid 65534 when run as root): how many watch with inotify
//       and how many with the stat() timer, their memory and idle CPU, and how long until each
//       has announced a changed manifest.
//
// Run alone: cd tests && MCP_LAZY_BUILD=$PWD/../build node bench/frontends.mjs [N]
import { chmodSync, mkdtempSync, readdirSync, readlinkSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { Peer, heading, honest, initialize, median, mib, ms, now, procCpuMs, procPss, procStatus, qcell, ratio, sleep, table, toolsList } from "./lib.mjs";

const TESTS = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const DEMO = resolve(TESTS, "../manifests/demo.yaml");

function fds(pid) {
  try {
    const all = readdirSync(`/proc/${pid}/fd`);
    const inotify = all.filter((f) => {
      try {
        return readlinkSync(`/proc/${pid}/fd/${f}`) === "anon_inode:inotify";
      } catch {
        return false;
      }
    }).length;
    return { n: all.length, inotify };
  } catch {
    return { n: NaN, inotify: NaN };
  }
}

async function oneFrontend(mcpLazy, args, env) {
  const p = new Peer(mcpLazy, args, { env });
  await p.request(0, "initialize", initialize().params);
  const { t } = await p.request(1, "tools/list");
  const st = procStatus(p.pid) ?? {};
  const f = fds(p.pid);
  const out = { ms: t - p.t0, hwm: st.VmHWM, anon: st.RssAnon, fds: f.n, inotify: f.inotify };
  await p.close();
  return out;
}

const Q = [0.5, 0.9, 0.99];
// "median / p90 / p99" of values formatted with fmt (n<10 / n<100 where there are too few), and
// the ratios of values' median, p90 and p99 to base's.
const mp9 = (values, fmt) => Q.map((q) => qcell(values, q, fmt)).join(" / ");
const rq = (values, base) => Q.map((q) => ratio(honest(values, q), honest(base, q))).join(" / ");

export async function sectionFrontends({ mcpLazy, work, runs = 100, n = 1000 }) {
  heading("5. frontends: one per backend, and a thousand of one user");
  const env = { ...process.env, MCP_LAZY_CACHE_DIR: join(work, "cache") };
  const subjects = [
    ["fleet (--manifest demo.yaml)", ["--manifest", DEMO, "--activation=systemd"]],
    ["--backend memory", ["--backend", "memory", "--manifest", DEMO, "--activation=systemd"]],
    ["--backend everything", ["--backend", "everything", "--manifest", DEMO, "--activation=systemd"]],
    ["--backend files", ["--backend", "files", "--manifest", DEMO, "--activation=systemd"]],
  ];
  const res = subjects.map(() => []);
  await oneFrontend(mcpLazy, subjects[0][1], env); // fills the manifest cache
  // Round robin, the order rotating, so that no subject always follows another.
  for (let i = 0; i < runs; i++)
    for (let j = 0; j < subjects.length; j++) {
      const k = (i + j) % subjects.length;
      res[k].push(await oneFrontend(mcpLazy, subjects[k][1], env));
    }
  const col = (k, key) => res[k].map((x) => x[key]);
  const rows = [];
  subjects.forEach(([label], k) => {
    const vs = (key) => (k === 0 ? "" : rq(col(k, key), col(0, key)));
    rows.push([label, res[k].length, "start->tools/list", mp9(col(k, "ms"), ms), vs("ms")]);
    rows.push(["", "", "peak RSS", mp9(col(k, "hwm"), mib), vs("hwm")]);
    rows.push(["", "", "RssAnon", mp9(col(k, "anon"), mib), vs("anon")]);
    rows.push(["", "", "fds, inotify", `${median(col(k, "fds"))}, ${median(col(k, "inotify"))} (median)`, ""]);
  });
  table(["5a. frontend", "runs", "what", "median / p90 / p99", "ratio to fleet, med / p90 / p99"], rows);
  console.log("  (the subjects in rounds, the order rotating; peak RSS = VmHWM, after tools/list)");

  // 5b: one user's frontends, past the 128 inotify instances Linux gives a user.
  const dir = mkdtempSync(join(tmpdir(), "mcp-lazy-bench-frontends-"));
  chmodSync(dir, 0o755);
  const path = join(dir, "m.yaml");
  const text = (tools) => `backends: {x: {command: [/bin/false]}}\ntools:\n${tools.map((t) => `  - {name: ${t}, backend: x, input_schema: {type: object}}\n`).join("")}`;
  writeFileSync(path, text(["t1"]), { mode: 0o644 });
  const asUser = process.getuid() === 0 ? ["setpriv", ["--reuid=65534", "--regid=65534", "--clear-groups", mcpLazy]] : [mcpLazy, []];
  const userEnv = { PATH: process.env.PATH, MCP_LAZY_CACHE_DIR: "" };
  const peers = [];
  try {
    const t0 = now();
    for (let i = 0; i < n; i++) {
      const p = new Peer(asUser[0], [...asUser[1], "--backend", "x", "--manifest", path, "--activation=systemd"], { env: userEnv });
      p.write(initialize(0));
      peers.push(p);
      if (i % 50 === 49) await sleep(10);
    }
    for (const p of peers) await p.response(0, 60000);
    const started = now() - t0;
    const f = peers.map((p) => fds(p.pid));
    const inotify = f.filter((x) => x.inotify > 0).length;
    const pssEach = peers.map((p) => procPss(p.pid) ?? NaN), rssEach = peers.map((p) => procStatus(p.pid)?.VmRSS ?? NaN);
    const pss = pssEach.reduce((a, v) => a + (v || 0), 0), rss = rssEach.reduce((a, v) => a + (v || 0), 0);
    const cpu0 = peers.map((p) => procCpuMs(p.pid) ?? 0);
    const IDLE = 4000; // two periods of the stat() timer: enough for a per-second figure
    await sleep(IDLE);
    const cpuEach = peers.map((p, i) => (procCpuMs(p.pid) ?? 0) - cpu0[i]);
    const cpu = cpuEach.reduce((a, v) => a + v, 0);
    writeFileSync(path + ".new", text(["t1", "t2"]), { mode: 0o644 });
    const tw = now();
    renameSync(path + ".new", path);
    const lat = await Promise.all(
      peers.map(async (p) => {
        for (;;) {
          const hit = p.lines.find((l) => l.line.includes("notifications/tools/list_changed"));
          if (hit) return hit.t - tw;
          if (now() - tw > 30000) return NaN;
          await sleep(20);
        }
      }),
    );
    const by = (pred) => lat.filter((_, i) => pred(f[i]));
    const missed = lat.filter((x) => Number.isNaN(x)).length;
    console.log(`  5b. ${n} frontends of uid ${process.getuid() === 0 ? 65534 : process.getuid()}: all initialized in ${ms(started)}; ` +
      `${inotify} watch with inotify, ${n - inotify} with the stat() timer`);
    const usPerS = (v) => `${((v / (IDLE / 1000)) * 1000).toFixed(1)} µs/s`;
    console.log(`  memory: sum PSS ${mib(pss)} (${mib(pss / n)} each), sum RSS ${mib(rss)}; idle CPU: ${ms(cpu)} in ${IDLE / 1000} s for all ` +
      `(${((cpu / n / (IDLE / 1000)) * 1000).toFixed(1)} us per frontend per second)`);
    const ino = (x) => x.inotify > 0;
    const part = (v, pred) => v.filter((_, i) => pred(f[i]));
    const per = [
      ["PSS", pssEach, mib],
      ["idle CPU", cpuEach, usPerS],
      ["manifest renamed over -> list_changed", lat, ms],
    ];
    table(["5b. per frontend", "inotify: n", "median / p90 / p99", "stat() every 2 s: n", "median / p90 / p99", "ratio stat() / inotify, med / p90 / p99"],
      per.map(([what, v, fmt]) => {
        const a = part(v, ino), b = part(v, (x) => !ino(x));
        return [what, a.length, mp9(a, fmt), b.length, mp9(b, fmt), rq(b, a)];
      }));
    console.log(`  (max: inotify ${ms(Math.max(...by(ino)))}, stat() ${ms(Math.max(...by((x) => !ino(x))))}; PSS at the start, idle CPU over ${IDLE / 1000} s)`);
    console.log(`  target: every frontend announces the change -> ${missed === 0 ? "met" : `NOT met (${missed} never did)`}`);
    if (missed) throw new Error(`${missed} of ${n} frontends never announced the changed manifest`);
  } finally {
    await Promise.all(peers.map((p) => p.close(5000)));
    rmSync(dir, { recursive: true, force: true });
  }
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const build = process.env.MCP_LAZY_BUILD ?? resolve(TESTS, "../build");
  const work = mkdtempSync(join(tmpdir(), "mcp-lazy-bench-"));
  sectionFrontends({ mcpLazy: join(build, "mcp-lazy"), work, n: Number(process.argv[2] ?? 1000) })
    .catch((e) => {
      console.error(e.stack || e.message);
      process.exitCode = 1;
    })
    .finally(() => rmSync(work, { recursive: true, force: true }));
}
