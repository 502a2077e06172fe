// cold.mjs — bench section 3: the first call from cold through mcp-lazy (direct activation), split
// into mcp-lazy's own phases, beside the same server started and called on its own.
//
// Phase boundaries are the times the frontend and the shim wrote their debug lines to stderr
// (MCP_LAZY_LOG_LEVEL=debug, MCP_LAZY_LOG_TIME=monotonic: each line ends with CLOCK_MONOTONIC, the
// clock of node's process.hrtime; the shim inherits the frontend's stderr):
//   frontend  manifest read for the call  "Reading the manifest for a request" .. "Read the manifest"
//             (only when the session started from prepared answers)
//             connect + activation          .. "Starting mcp-lazy-shimd"  (connect fails: no socket; socketpair)
//   shim      start                         .. "mcp-lazy-shimd: Reading the manifest"  (fork, exec, dynamic linking, the socket)
//             manifest read                 .. "mcp-lazy-shimd: Read the manifest"
//             spawn                         .. "Started backend"  (event loop, the frontend's handshake and call, fork+exec)
//   backend   start + initialize            .. "is ready after"  (the server's own; with the era probe first)
//   relay     the call and its answer       .. the result on the frontend's stdout
// mcp-lazy's own share is the first result's time minus the server's own (start, initialize, call).
import { Peer, heading, median, ms, now, p90, ratio, table } from "./lib.mjs";

// CLOCK_MONOTONIC in ms, as the log lines' stamps are.
const mono = () => Number(process.hrtime.bigint()) / 1e6;
// When the first stderr line matching re was written (ms, CLOCK_MONOTONIC), or undefined (a phase
// that did not happen in this run).
function lineAt(p, re) {
  const l = p.err.find((e) => re.test(e.line))?.line;
  const m = l && /\[monotonic (\d+)\.(\d{6})\]$/.exec(l);
  return m ? Number(m[1]) * 1000 + Number(m[2]) / 1000 : undefined;
}

async function coldLazy(ctx, name) {
  const [tool, args] = ctx.backends[name].call;
  const env = { ...process.env, MCP_LAZY_LOG_LEVEL: "debug", MCP_LAZY_LOG_TIME: "monotonic" };
  const p = new Peer(ctx.mcpLazy, ["--manifest", ctx.manifest, "--activation=direct", "--shimd", ctx.shimd], { env, stderr: true });
  try {
    p.write(ctx.initialize(0));
    const init = await p.response(0);
    const tSent = now(), tSentMono = mono();
    p.write(ctx.initialized, ctx.toolsCall(1, tool, args));
    const call = await p.response(1, 60000);
    ctx.checkToolResult(call.msg, `first ${tool} via mcp-lazy`);
    const ready = await p.stderrLine(/is ready after \d+ ms/);
    const shimReadyMs = Number(/is ready after (\d+) ms/.exec(ready.line)[1]);
    await p.stderrLine(/^mcp-lazy: Started mcp-lazy-shimd for/);
    await p.stderrLine(/Started backend '/);
    // Everything relative to the moment the call was written (ms).
    const rel = (re) => {
      const t = lineAt(p, re);
      return t === undefined ? undefined : t - tSentMono;
    };
    const at = {
      feReading: rel(/^mcp-lazy: Reading the manifest for a request/),
      feRead: rel(/^mcp-lazy: Read the manifest:/),
      fork: rel(/^mcp-lazy: Starting mcp-lazy-shimd for/),
      shimReading: rel(/^mcp-lazy-shimd: Reading the manifest/),
      shimRead: rel(/^mcp-lazy-shimd: Read the manifest:/),
      spawned: rel(/^mcp-lazy-shimd: Started backend '/),
      ready: rel(/is ready after \d+ ms/),
    };
    if ([at.fork, at.spawned, at.ready].includes(undefined)) throw new Error(`a phase's log line has no time stamp: ${p.stderrText.slice(-800)}`);
    const result = call.t - tSent;
    const feRead = at.feReading !== undefined && at.feRead !== undefined ? at.feRead - at.feReading : 0;
    return {
      init: init.t - p.t0,
      call: call.t - tSent,
      total: call.t - p.t0,
      feRead,
      activation: at.fork - feRead,
      shimStart: (at.shimReading ?? at.fork) - at.fork,
      shimManifest: at.shimRead !== undefined && at.shimReading !== undefined ? at.shimRead - at.shimReading : NaN,
      spawn: at.spawned - (at.shimRead ?? at.fork),
      backend: at.ready - at.spawned,
      shimReadyMs,
      forward: result - at.ready,
    };
  } finally {
    await p.close();
  }
}

async function coldDirect(ctx, name) {
  const [tool, args] = ctx.backends[name].call;
  const p = ctx.server(name, ctx.memoryEnv(`memory-cold-${name}.jsonl`));
  try {
    p.write(ctx.initialize(0));
    const init = await p.response(0, 30000);
    const tSent = now();
    p.write(ctx.initialized, ctx.toolsCall(1, tool, args));
    const call = await p.response(1, 30000);
    ctx.checkToolResult(call.msg, `first ${tool} direct`);
    return { init: init.t - p.t0, call: call.t - tSent, total: call.t - p.t0 };
  } finally {
    await p.close();
  }
}

export async function sectionCold(ctx) {
  heading("3. First call from cold: mcp-lazy (direct activation) vs the server's own start, by phase");
  for (const name of ["memory", "everything"]) {
    const L = [], D = [];
    await coldDirect(ctx, name); // page cache
    for (let i = 0; i < ctx.runs; i++) {
      // Alternating which goes first, so that neither always runs on a just-warmed cache.
      if (i % 2) {
        D.push(await coldDirect(ctx, name));
        L.push(await coldLazy(ctx, name));
      } else {
        L.push(await coldLazy(ctx, name));
        D.push(await coldDirect(ctx, name));
      }
    }
    const m = (arr, k) => median(arr.map((x) => x[k]));
    const q = (arr, k) => `${ms(median(arr.map((x) => x[k])))} / ${ms(p90(arr.map((x) => x[k])))}`;
    const tool = ctx.backends[name].call[0];
    const own = ["feRead", "activation", "shimStart", "shimManifest", "spawn"];
    const ownSum = own.reduce((a, k) => a + (m(L, k) || 0), 0);
    const backendOver = m(L, "backend") - m(D, "init");
    const forwardOver = m(L, "forward") - m(D, "call");
    console.log(`\n  ${name} (${tool}), ${ctx.runs} runs each, median / p90:`);
    table(["phase", "mcp-lazy", "server alone", "mcp-lazy's own"], [
      ["(a) process start -> initialize answered", q(L, "init"), q(D, "init"), ""],
      ["(b) tools/call sent -> result", q(L, "call"), q(D, "call"), ""],
      ["    frontend: read the manifest for the call", q(L, "feRead"), "", ms(m(L, "feRead"))],
      ["    frontend: the call read, connect (no socket), socketpair", q(L, "activation"), "", ms(m(L, "activation"))],
      ["    shim: fork, exec, dynamic linking, its socket", q(L, "shimStart"), "", ms(m(L, "shimStart"))],
      ["    shim: read the manifest", q(L, "shimManifest"), "", ms(m(L, "shimManifest"))],
      ["    shim: handshake and call in, spawn the backend", q(L, "spawn"), "", ms(m(L, "spawn"))],
      [`    backend: start, era probe, initialize (shim: ${Math.round(m(L, "shimReadyMs"))} ms)`, q(L, "backend"), q(D, "init"),
        `${backendOver >= 0 ? "+" : ""}${ms(backendOver)}`],
      ["    the call relayed, its answer back", q(L, "forward"), q(D, "call"), `${forwardOver >= 0 ? "+" : ""}${ms(forwardOver)}`],
      ["process start -> first result", q(L, "total"), q(D, "total"), ""],
    ]);
    const over = m(L, "total") - m(D, "total");
    console.log(`  mcp-lazy's own phases before the backend starts: ${ms(ownSum)}; first result ${over >= 0 ? "+" : ""}${ms(over)} ` +
      `with mcp-lazy (${ratio(m(L, "total"), m(D, "total"))}); initialize answered ${ratio(m(D, "init"), m(L, "init"))} sooner`);
    console.log(`  target: mcp-lazy's own share (first result minus the server's own) < 5 ms -> ${ms(over)} ${over < 5 ? "met" : "NOT met"}` +
      `; its phases before the backend: ${ms(ownSum)} ${ownSum < 5 ? "met" : "NOT met"}`);
  }
  console.log("  (phase boundaries: when the frontend and the shim wrote their debug lines (CLOCK_MONOTONIC); 'mcp-lazy's own' of the backend and");
  console.log("   relay rows: mcp-lazy's median minus the server's own; the backend's start varies by tens of ms from run to run)");
}
