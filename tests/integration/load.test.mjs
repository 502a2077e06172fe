// Load and faults under a real systemd: many sessions (real frontends) pipeline calls to one pooled
// backend while it is killed at random points. Every call is answered exactly once, to its own
// session; only calls in flight at a kill may fail; nothing runs twice; nothing is left after idle.
// LOAD_SECONDS sets how long the calls go on (`make soak` runs it for minutes).
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { LOG, recorderBox } from "./lib/recorder-box.mjs";
import { MCP_LAZY, sleep, waitFor } from "./lib/env.mjs";
import { onLines } from "./lib/lines.mjs";

const SECONDS = Number(process.env.LOAD_SECONDS ?? 15);
const SESSIONS = Number(process.env.LOAD_SESSIONS ?? 12);
const WINDOW = 8; // calls each session keeps in flight
const CALL_TIMEOUT_MS = 30000;
const now = () => performance.now();

let rb;
const frontends = [];
before(async () => {
  rb = await recorderBox({ idle: "2s" });
});
after(async () => {
  for (const f of frontends) f.child.kill("SIGKILL");
  if (rb) await rb.box.stop();
});

// One session: a real frontend in the box, spoken to line by line so that every answer is seen,
// a second one for the same id included.
class Session {
  constructor(name) {
    this.name = name;
    const [cmd, ...pre] = rb.box.nsenterArgs();
    this.child = spawn(cmd, [...pre, MCP_LAZY, "--manifest", "/etc/mcp-lazy/manifest.yaml"], { stdio: ["pipe", "pipe", "pipe"] });
    this.calls = new Map(); // id -> {seq, tSend, tAnswer, answers: [..]}
    this.waiters = new Map();
    this.stray = 0;
    this.stderr = "";
    this.child.stderr.setEncoding("utf8").on("data", (d) => (this.stderr = (this.stderr + d).slice(-4000)));
    onLines(this.child.stdout, (line) => {
      const m = JSON.parse(line);
      if (m.id === undefined) return;
      const c = this.calls.get(m.id);
      if (!c) return void this.stray++;
      c.answers.push(m);
      if (c.answers.length === 1) {
        c.tAnswer = now();
        this.waiters.get(m.id)?.();
      }
    });
    this.exited = new Promise((r) => this.child.on("exit", r));
  }
  request(id, method, params, seq) {
    const c = { seq, tSend: now(), tAnswer: undefined, answers: [] };
    this.calls.set(id, c);
    const done = new Promise((resolve) => {
      const t = setTimeout(resolve, CALL_TIMEOUT_MS);
      this.waiters.set(id, () => {
        clearTimeout(t);
        this.waiters.delete(id);
        resolve();
      });
    });
    this.child.stdin.write(JSON.stringify({ jsonrpc: "2.0", id, method, params }) + "\n");
    return done;
  }
  async init() {
    await this.request(0, "initialize", { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: this.name, version: "1" } });
    this.calls.delete(0);
    this.child.stdin.write(JSON.stringify({ jsonrpc: "2.0", method: "notifications/initialized" }) + "\n");
  }
  // Keeps WINDOW calls in flight until the deadline.
  async run(deadline) {
    let seq = 0;
    const lane = async () => {
      while (now() < deadline) {
        const s = ++seq;
        const delay_ms = [0, 0, 0, 1, 2, 5][s % 6];
        await this.request(s, "tools/call", { name: "record", arguments: { session: this.name, seq: s, delay_ms } }, s);
      }
    };
    await Promise.all(Array.from({ length: WINDOW }, lane));
  }
}

// SIGKILL to the backend (never the shim) once it has taken some calls, so that it has answered
// and the next call restarts it at once rather than after a crash-loop backoff.
const KILL = `cg=/sys/fs/cgroup$(systemctl show -P ControlGroup mcp-lazy@rec.service)
  for p in $(cat "$cg/cgroup.procs" 2>/dev/null); do
    tr '\\0' ' ' < /proc/$p/cmdline 2>/dev/null | grep -q recorder.mjs || continue
    [ "$(grep -c " $p$" ${LOG})" -ge 20 ] && kill -KILL $p && echo $p
  done; true`;

async function killer(deadline, kills) {
  while (now() < deadline) {
    await sleep(150 + Math.random() * 450);
    const tBefore = now();
    const r = await rb.try(KILL);
    const pids = r.stdout.split(/\s+/).filter(Boolean).map(Number);
    if (pids.length) kills.push({ tBefore, tAfter: now(), pids });
  }
}

test(`sessions x pipelined calls to a pooled backend killed at random points: nothing lost, duplicated, misrouted or run twice (${SECONDS} s)`, async () => {
  const sessions = Array.from({ length: SESSIONS }, (_, k) => new Session(`s${k}`));
  frontends.push(...sessions);
  await Promise.all(sessions.map((s) => s.init()));
  const kills = [];
  const t0 = now();
  const deadline = t0 + SECONDS * 1000;
  await Promise.all([...sessions.map((s) => s.run(deadline)), killer(deadline, kills)]);
  const elapsed = (now() - t0) / 1000;

  // What the backend ran: "SESSION SEQ PID" per execution.
  const runs = new Map();
  for (const line of (await rb.sh(`cat ${LOG}`)).split("\n").filter(Boolean)) {
    const [s, seq, pid] = line.split(" ");
    const k = `${s} ${seq}`;
    runs.set(k, [...(runs.get(k) ?? []), Number(pid)]);
  }
  const killed = new Set(kills.flatMap((k) => k.pids));
  const f = { calls: 0, ok: 0, failed: 0, lost: 0, duplicated: 0, misrouted: 0, runTwice: 0, okNotRun: 0, failedNotInFlight: 0, failedRunByLiving: 0, stray: 0 };
  const samples = [];
  for (const s of sessions) {
    f.stray += s.stray;
    for (const [id, c] of s.calls) {
      f.calls++;
      const ran = runs.get(`${s.name} ${c.seq}`) ?? [];
      if (ran.length > 1) f.runTwice++;
      if (c.answers.length === 0) {
        f.lost++;
        continue;
      }
      if (c.answers.length > 1) f.duplicated++;
      const m = c.answers[0];
      if (m.id !== id) f.misrouted++;
      if (m.result && !m.result.isError) {
        f.ok++;
        const got = JSON.parse(m.result.content[0].text);
        if (got.session !== s.name || got.seq !== c.seq) f.misrouted++;
        if (ran.length === 0) f.okNotRun++;
        continue;
      }
      f.failed++;
      // A failure is due only to a call outstanding while a kill happened...
      if (!kills.some((k) => c.tSend <= k.tAfter && c.tAnswer >= k.tBefore)) {
        f.failedNotInFlight++;
        if (samples.length < 3) samples.push(JSON.stringify(m).slice(0, 300));
      }
      // ...and that had reached a process that was then killed, if it reached one at all.
      if (ran.some((pid) => !killed.has(pid))) f.failedRunByLiving++;
    }
  }
  console.log(
    `load: ${SESSIONS} sessions x ${WINDOW} in flight for ${elapsed.toFixed(1)} s: ${f.calls} calls (${Math.round(f.calls / elapsed)}/s), ` +
      `${kills.length} backend kills; ${f.ok} answered, ${f.failed} failed (${f.failedNotInFlight} of them not in flight at a kill), ` +
      `${f.lost} lost, ${f.duplicated} duplicated, ${f.misrouted} misrouted, ${f.runTwice} run twice, ${f.stray} stray answers`,
  );
  assert.ok(kills.length >= Math.min(3, SECONDS / 2), `only ${kills.length} kills`);
  assert.ok(f.ok > f.calls / 2, JSON.stringify(f));
  assert.deepEqual(
    { lost: f.lost, duplicated: f.duplicated, misrouted: f.misrouted, runTwice: f.runTwice, okNotRun: f.okNotRun, stray: f.stray, failedRunByLiving: f.failedRunByLiving },
    { lost: 0, duplicated: 0, misrouted: 0, runTwice: 0, okNotRun: 0, stray: 0, failedRunByLiving: 0 },
  );
  // Only calls that really were in flight at a crash may fail (finding 8: calls that arrive while
  // the backend restarts wait for the new one).
  assert.equal(f.failedNotInFlight, 0, `failures of calls not in flight at any kill, e.g.:\n${samples.join("\n")}`);
});

test("after the sessions end the shim idles out and no process is left", async () => {
  for (const s of frontends) s.child.stdin.end();
  await Promise.all(frontends.map((s) => s.exited));
  assert.ok(await waitFor(async () => (await rb.try("systemctl is-active mcp-lazy@rec.service")).stdout.trim() === "inactive", 30000));
  const left = await rb.try("cat /sys/fs/cgroup/system.slice/system-mcp\\\\x2dlazy.slice/mcp-lazy@rec.service/cgroup.procs 2>/dev/null; pgrep -c -f '[m]cp-lazy --manifest|[r]ecorder.mjs' || true");
  assert.equal(left.stdout.trim(), "0");
});
