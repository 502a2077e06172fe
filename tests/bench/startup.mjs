// startup.mjs — bench section 1: process start -> tools/list answered, and memory at that moment.
//
// Subjects, round robin (the order rotating) so that a busy machine slows every one alike:
//   - the C floor (floor.c `answer`): reads the manifest whole and writes mcp-lazy's own answer bytes;
//   - the libsystemd floor: the same program linked with libsystemd, calling sd_event_default()
//     first: what any program that uses sd-event (which mcp-lazy must) pays before its first byte;
//     at 100 tools also with the manifest watch mcp-lazy sets up (sd_event_add_inotify(), which
//     runs libc's printf code: libsystemd formats the watch's /proc/self/fd path with it);
//   - mcp-lazy, from its prepared answers (the cache warm: the common case, every start after the
//     first of a manifest version), and with MCP_LAZY_CACHE_DIR= (answered from the manifest);
//   - server-memory (node), what a client starts today, and `cat` (the harness's own cost).
// Then where the memory goes: RSS and PSS by mapping (libsystemd and what it pulls in, libc and the
// loader, cJSON and libyaml, the program, heap and stacks), read from /proc/PID/smaps at the answer.
import { execFileSync } from "node:child_process";
import { readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import {
  Peer, descendants, generateManifest, heading, initialize, initialized, honest, median, mib, ms, procCpuMs, procStatus, qcell,
  ratio, table, toolsList,
} from "./lib.mjs";

// The mappings of a process, grouped: { group: { rss, pss, priv } } in KiB, and the totals.
const GROUPS = [
  ["libsystemd + its libraries", /\/lib(systemd|cap|gcrypt|gpg-error|lzma|zstd|lz4)\.so/],
  ["libc + ld.so", /\/(libc\.so|ld-linux)/],
  ["libcjson + libyaml + libm", /\/lib(cjson|yaml|m)[.-]/],
  ["heap, stack, anonymous", /^(\[heap\]|\[stack\]|\[anon\]|)$/],
];
export function smapsGroups(pid, program) {
  let text;
  try {
    text = readFileSync(`/proc/${pid}/smaps`, "utf8");
  } catch {
    return undefined;
  }
  const out = {};
  const add = (g, k, v) => ((out[g] ??= { rss: 0, pss: 0, priv: 0 })[k] += v);
  let group = "other";
  for (const l of text.split("\n")) {
    const h = /^[0-9a-f]+-[0-9a-f]+ \S+ \S+ \S+ \S+\s*(.*)$/.exec(l);
    if (h) {
      const name = h[1];
      group = name === program ? "the program" : GROUPS.find(([, re]) => re.test(name))?.[0] ?? (name.startsWith("[") ? "heap, stack, anonymous" : "other");
      continue;
    }
    const m = /^(Rss|Pss|Private_Clean|Private_Dirty):\s+(\d+) kB/.exec(l);
    if (!m) continue;
    const v = Number(m[2]);
    if (m[1] === "Rss") add(group, "rss", v);
    else if (m[1] === "Pss") add(group, "pss", v);
    else add(group, "priv", v);
  }
  return out;
}

// Spawn, write initialize + initialized + tools/list at once, stop the clock at the tools/list
// answer, then read the process's memory before closing its stdin.
async function startupOnce(command, args, opts, { smaps = false } = {}) {
  const p = new Peer(command, args, opts);
  try {
    p.write(initialize(0), initialized, toolsList(1));
    const { t, msg } = await p.response(1);
    const st = procStatus(p.pid) ?? {};
    const cpu = procCpuMs(p.pid);
    const extra = descendants(p.pid).length;
    const groups = smaps ? smapsGroups(p.pid, command) : undefined;
    if (!msg.result?.tools) throw new Error(`tools/list failed: ${JSON.stringify(msg).slice(0, 300)}`);
    return { ms: t - p.t0, cpu, hwm: st.VmHWM, tools: msg.result.tools.length, extra, groups };
  } finally {
    await p.close();
  }
}

// Each mapping group's RSS, PSS and private memory, the median of the runs that read smaps: where the
// kernel's fault-around windows fall moves with the load address from run to run (ASLR).
function medianGroups(list) {
  if (!list.length) return undefined;
  const out = {};
  for (const g of new Set(list.flatMap((x) => Object.keys(x))))
    out[g] = Object.fromEntries(["rss", "pss", "priv"].map((k) => [k, median(list.map((x) => x[g]?.[k] ?? 0))]));
  return out;
}

function summarize(runs) {
  const v = (k) => runs.map((r) => r[k] ?? NaN);
  return {
    n: runs.length,
    v,
    med: median(v("ms")),
    cpu: median(v("cpu")),
    hwm: median(v("hwm")),
    tools: runs[0]?.tools,
    extra: Math.max(...runs.map((r) => r.extra ?? 0)),
    groups: medianGroups(runs.filter((r) => r.groups).map((r) => r.groups)),
  };
}

// The harness's own floor: spawn `cat`, write the same three lines, wait for them to come back.
async function catOnce() {
  const p = new Peer("cat", []);
  try {
    p.write(initialize(0), initialized, toolsList(1));
    const { t } = await p.waitLines(3);
    return { ms: t - p.t0 };
  } finally {
    await p.close();
  }
}

// The answer lines mcp-lazy writes for initialize and tools/list, for the floors to write back.
async function captureAnswers(mcpLazy, manifest, env) {
  const p = new Peer(mcpLazy, ["--manifest", manifest], { env });
  try {
    p.write(initialize(0), initialized, toolsList(1));
    await p.waitLines(2);
    return p.lines.slice(0, 2).map((l) => l.line + "\n").join("");
  } finally {
    await p.close();
  }
}

// Each subject's run paired with the floor's run of the same round: the median of the differences
// is steadier than the difference of the medians on a loaded machine.
const pairedOver = (runs, floor) => median(runs.map((r) => r.ms - floor[r.round].ms));

// The last rounds read /proc/PID/smaps at the answer too (100 tools).
const SMAPS_RUNS = 5;
// Rounds of the 1- and 10-tool manifests (and cat), at most.
const SMALL_RUNS = 30;

const signed = (v) => (v < 0 ? `-${ms(-v)}` : `+${ms(v)}`);

export async function sectionStartup({ mcpLazy, floorSource, work, node, memoryArgs, memoryEnv, tests, runs: nRuns, nodeRuns, quick }) {
  heading("1. Startup: process start -> tools/list answered, and memory at that moment, beside the floors");
  const floor = join(work, "floor-start");
  const floorSd = join(work, "floor-sd");
  execFileSync("cc", ["-O2", "-Wall", "-Wextra", "-D_GNU_SOURCE", "-o", floor, floorSource], { stdio: "inherit" });
  execFileSync("cc", ["-O2", "-Wall", "-Wextra", "-D_GNU_SOURCE", "-DFLOOR_SD_EVENT", "-o", floorSd, floorSource, "-lsystemd"], { stdio: "inherit" });
  const env = { ...process.env, MCP_LAZY_CACHE_DIR: join(work, "start-cache") };
  delete env.MCP_LAZY_LOG_LEVEL;
  const noCache = { ...env, MCP_LAZY_CACHE_DIR: "" };
  // 1 tool: the fixed cost (exec, dynamic linking, event loop) that every manifest pays.
  const sizes = [1, 10, 100, 1000];
  const paths = {}, answers = {};
  for (const size of sizes) {
    paths[size] = join(work, `generated-${size}.yaml`);
    writeFileSync(paths[size], generateManifest(size, { socketDir: work }));
    answers[size] = join(work, `answers-${size}.jsonl`);
    // This also prepares mcp-lazy's answers: every timed start below serves them.
    writeFileSync(answers[size], await captureAnswers(mcpLazy, paths[size], env));
  }
  const subjects = [];
  for (const size of sizes) {
    const s = (key, label, cmd, args, opts) => subjects.push({ key, size, label, cmd, args, opts, runs: [] });
    s(`floor${size}`, "C floor", floor, ["answer", paths[size], answers[size]], {});
    s(`sd${size}`, "libsystemd floor (sd_event_default)", floorSd, ["answer", paths[size], answers[size]], {});
    if (size === 100) s(`sdw${size}`, "libsystemd floor + manifest watch", floorSd, ["answer", paths[size], answers[size], "watch"], {});
    s(`lazy${size}`, "mcp-lazy (prepared answers)", mcpLazy, ["--manifest", paths[size]], { env });
    if (size === 100 || (size === 1000 && !quick)) s(`nocache${size}`, "mcp-lazy, no cache (from the manifest)", mcpLazy, ["--manifest", paths[size]], { env: noCache });
  }
  const by = Object.fromEntries(subjects.map((x) => [x.key, x]));
  const cat = [], nodeRunsOut = [];
  const nodeEvery = Math.max(1, Math.round(nRuns / nodeRuns));
  const warm = 2;
  // The sizes of the targets (100 and 1000 tools) get every round, for a p99; 1 and 10 tools and the
  // harness's cat the first 30 (their p99 reads n<100), which keeps the section's time in check.
  const roundsOf = (size) => (size >= 100 ? nRuns : Math.min(nRuns, SMALL_RUNS));
  for (let round = 0; round < nRuns + warm; round++) {
    const keep = round >= warm;
    if (round < roundsOf(1) + warm) {
      const r = await catOnce();
      if (keep) cat.push(r);
    }
    for (const size of sizes) {
      if (round >= roundsOf(size) + warm) continue;
      const group = subjects.filter((x) => x.size === size);
      // Rotate the order within each size, so that no subject always follows another.
      for (let k = 0; k < group.length; k++) {
        const x = group[(round + k) % group.length];
        // Without its cache mcp-lazy takes several times as long (1000 tools: 25x): every other round
        // is enough, every fourth at 1000 tools (a p90; its p99 reads n<100).
        const every = size === 1000 && !quick ? 4 : 2;
        if (x.key.startsWith("nocache") && round % every && round !== nRuns + warm - 1) continue;
        const res = await startupOnce(x.cmd, x.args, x.opts, { smaps: size === 100 && round >= nRuns + warm - SMAPS_RUNS });
        res.round = round - warm;
        if (keep) x.runs.push(res);
      }
    }
    if (round % nodeEvery === 0 && (round < warm || nodeRunsOut.length < nodeRuns)) {
      const res = await startupOnce(node, memoryArgs, { env: memoryEnv, cwd: tests });
      if (keep) nodeRunsOut.push(res);
    }
  }
  const rows = [], costRows = [];
  const S = Object.fromEntries(subjects.map((x) => [x.key, summarize(x.runs)]));
  const Q = [0.5, 0.9, 0.99];
  // Median, p90 and p99 of field k, formatted with fmt (n<10 / n<100 where there are too few runs).
  const qs = (r, k, fmt) => Q.map((q) => qcell(r.v(k), q, fmt));
  // The ratios of r's median, p90 and p99 of k to base's ("-" where either has too few runs).
  const rq = (r, base, k) => Q.map((q) => ratio(honest(r.v(k), q), honest(base.v(k), q))).join(" / ");
  const add = (label, kibText, r, base, { over = "", overSd = "", cpu = true } = {}) => {
    rows.push([label, kibText, r.n, ...qs(r, "ms", ms), base ? rq(r, base, "ms") : "", over, overSd]);
    costRows.push([label, r.n, ...(cpu ? [qs(r, "cpu", ms).join(" / "), base ? rq(r, base, "cpu") : ""] : ["-", ""]),
      ...(r.v("hwm").some(Number.isFinite) ? [qs(r, "hwm", mib).join(" / "), base ? rq(r, base, "hwm") : ""] : ["-", ""])]);
  };
  for (const size of sizes) {
    const kibText = `${Math.round(statSync(paths[size]).size / 1024)} KiB`;
    const f = S[`floor${size}`];
    for (const x of subjects.filter((y) => y.size === size)) {
      const r = S[x.key];
      if (r.tools !== size) throw new Error(`${x.label}, ${size} tools: tools/list returned ${r.tools} tools`);
      if (r.extra) throw new Error(`${x.label} started ${r.extra} process(es) just to answer tools/list`);
      const isFloor = x.key === `floor${size}`;
      add(`${x.label}, ${size} tool${size > 1 ? "s" : ""}`, kibText, r, isFloor ? undefined : f, {
        over: isFloor ? "" : signed(pairedOver(x.runs, by[`floor${size}`].runs)),
        overSd: x.key.startsWith("lazy") ? signed(pairedOver(x.runs, by[`sd${size}`].runs)) : "",
      });
    }
  }
  const nodeS = summarize(nodeRunsOut), catS = summarize(cat);
  add(`server-memory (node), ${nodeS.tools} tools`, "-", nodeS, S.floor10);
  add("harness: spawn cat, echo", "-", catS, S.floor1, { cpu: false });
  table(["what", "manifest", "runs", "median", "p90", "p99", "ratio med / p90 / p99", "over C floor", "over sd floor"], rows);
  console.log("  (over = median of the paired differences, each run minus the floor's run of the same round; ratio = to the C");
  console.log("   floor at the same size (server-memory and cat: the 10- and 1-tool floor), at the median, p90 and p99; the rounds");
  console.log(`   go through every subject, the order rotating within a size, 1 and 10 tools in the first ${roundsOf(1)} only; n<10 / n<100:`);
  console.log("   too few runs for a p90 / p99)");
  console.log("\n  the same runs: CPU until the answer (/proc/PID/schedstat) and peak RSS (VmHWM) at the answer, median / p90 / p99");
  table(["what", "runs", "CPU", "ratio med / p90 / p99", "peak RSS", "ratio med / p90 / p99"], costRows);

  // Where the memory goes, at the answer, 100 tools.
  const subjects100 = ["floor100", "sd100", "sdw100", "lazy100", "nocache100"];
  const names = [...new Set(subjects100.flatMap((k) => Object.keys(S[k].groups ?? {})))];
  const order = ["libc + ld.so", ...GROUPS.map(([g]) => g).filter((g) => g !== "libc + ld.so"), "the program", "other"].filter((g) => names.includes(g));
  const cell = (k, g) => {
    const x = S[k].groups?.[g];
    return x ? `${mib(x.rss)} / ${mib(x.pss)} / ${mib(x.priv)}` : "-";
  };
  const total = (k) => Object.values(S[k].groups ?? {}).reduce((a, x) => ({ rss: a.rss + x.rss, pss: a.pss + x.pss, priv: a.priv + x.priv }), { rss: 0, pss: 0, priv: 0 });
  console.log(`\n  memory at the answer, 100 tools: RSS / PSS / private (Private_Clean + Private_Dirty), by mapping, median of ${SMAPS_RUNS} runs`);
  table(["mappings", ...subjects100.map((k) => subjects.find((x) => x.key === k).label)], [
    ...order.map((g) => [g, ...subjects100.map((k) => cell(k, g))]),
    ["total", ...subjects100.map((k) => {
      const t = total(k);
      return `${mib(t.rss)} / ${mib(t.pss)} / ${mib(t.priv)}`;
    })],
  ]);
  console.log("  (RSS counts every mapped page, shared library pages too, with the kernel's fault-around of 16 pages;");
  console.log("   PSS splits shared pages among the processes mapping them; private = pages only this process maps)");

  const d = (size, lim) => {
    const v = pairedOver(by[`lazy${size}`].runs, by[`floor${size}`].runs);
    return `${size} tools ${signed(v)} (<${lim} ms) ${v < lim ? "met" : "NOT met"}`;
  };
  const l100 = S.lazy100, sd100 = S.sd100, sdw100 = S.sdw100;
  console.log(`  targets: over the C floor: ${d(100, 1)}; ${d(1000, 3)}; peak RSS at 100 tools ${mib(l100.hwm)} (<2 MiB) ` +
    `${l100.hwm < 2048 ? "met" : "NOT met"}`);
  if (l100.hwm >= 2048) console.log(memoryVerdict(S, l100, sd100, sdw100));
}

// Why the RSS target is out of reach, and what mcp-lazy holds over the floor it cannot go below.
function memoryVerdict(S, l100, sd100, sdw100) {
  const g = (k, name) => S[k].groups?.[name]?.rss ?? 0;
  const lib = g("sd100", "libsystemd + its libraries");
  const over = ["the program", "libcjson + libyaml + libm", "heap, stack, anonymous", "libc + ld.so", "libsystemd + its libraries"]
    .map((name) => [name, g("lazy100", name) - g("sdw100", name)])
    .filter(([, v]) => Math.abs(v) >= 8)
    .map(([name, v]) => `${name} ${v < 0 ? "-" : "+"}${mib(Math.abs(v))}`);
  return [
    `  peak RSS: out of reach while the frontend links libsystemd (sd-event, which the project requires): the libsystemd floor`,
    `   (sd_event_default() and nothing else) peaks at ${mib(sd100.hwm)}, ${mib(sdw100.hwm)} with the manifest watch mcp-lazy sets up;`,
    `   the C floor at ${mib(S.floor100.hwm)}. 2 MiB would take a frontend without libsystemd (it and the libraries it loads: ${mib(lib)} of RSS`,
    `   here). mcp-lazy over the floor with the watch: ${mib(l100.hwm - sdw100.hwm)} (by mapping: ${over.join(", ") || "none above 8 KiB"})`,
  ].join("\n");
}
