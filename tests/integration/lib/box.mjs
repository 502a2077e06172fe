// box.mjs — a throwaway systemd for node:test integration tests, driving
// tests/integration/box (see that script for what the box is and isn't).
//
//   const box = await startBox({ bind: [repoDir] });
//   after(() => box.stop());
//   const { code, stdout } = await box.exec("systemctl", ["is-active", "x.socket"]);
//   const [command, ...args] = box.nsenterArgs();
//   new StdioClientTransport({ command, args: [...args, process.execPath, server] });
//
// Boxes are torn down even when the test process does not get to call stop():
// on 'exit', SIGINT and SIGTERM here, and, for SIGKILL, by a watcher that
// `box up` starts for BOX_OWNER_PID.

import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { constants, tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

export const BOX_SCRIPT = fileURLToPath(new URL("../box", import.meta.url));

const live = new Set();
let backstopInstalled = false;

// Runs a command to completion; never rejects for a non-zero exit.
// opts: cwd, env, input (written to stdin), timeout (ms, then SIGKILL).
function run(command, args, opts = {}) {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, {
      cwd: opts.cwd,
      env: opts.env ?? process.env,
      stdio: ["pipe", "pipe", "pipe"],
      timeout: opts.timeout,
      killSignal: "SIGKILL",
    });
    let stdout = "";
    let stderr = "";
    child.stdout.setEncoding("utf8").on("data", (d) => (stdout += d));
    child.stderr.setEncoding("utf8").on("data", (d) => (stderr += d));
    child.on("error", reject);
    child.on("close", (code, signal) => {
      // Shell convention, so a killed command is still a non-zero number.
      if (code === null) code = 128 + (constants.signals[signal] ?? 0);
      resolve({ code, stdout, stderr });
    });
    child.stdin.on("error", () => {}); // the command may not read its input
    child.stdin.end(opts.input ?? "");
  });
}

function stopAllSync() {
  for (const box of live) box.stopSync();
}

// The last line of defence: tests that throw, time out or get interrupted
// must not leave a running systemd behind.
function installBackstop() {
  if (backstopInstalled) return;
  backstopInstalled = true;
  process.on("exit", stopAllSync);
  for (const signal of ["SIGINT", "SIGTERM"]) {
    const handler = () => {
      stopAllSync();
      process.removeListener(signal, handler);
      // Let node:test's own handler end the process if it has one; else die
      // of the signal as we would have without this handler.
      if (process.listenerCount(signal) === 0) process.kill(process.pid, signal);
    };
    process.on(signal, handler);
  }
}

class Box {
  constructor(stateDir) {
    this.stateDir = stateDir;
    this.pid = undefined;
    this.stopped = undefined;
  }

  // Runs `cmd args...` inside the box. opts: cwd (kept when it exists in the
  // box, else /), env (the whole environment, default process.env), input
  // (stdin), timeout (ms). Resolves to { code, stdout, stderr }; a command
  // killed by a signal gets 128 + its number.
  exec(cmd, args = [], opts = {}) {
    return run(BOX_SCRIPT, ["exec", this.stateDir, cmd, ...args], opts);
  }

  // Prefix for spawning a long-lived process in the box yourself, e.g. an MCP
  // server: const [cmd, ...args] = box.nsenterArgs(); spawn(cmd, [...args,
  // "node", "server.js"]). It starts in / of the box, with the environment
  // given to spawn. nsenter does not forward signals: end the process by
  // closing its stdin (or by stopping the box).
  nsenterArgs() {
    return ["nsenter", "-t", String(this.pid), "-a", "-r", "-w"];
  }

  // Powers the box off and removes every trace of it. Idempotent.
  stop() {
    this.stopped ??= run(BOX_SCRIPT, ["down", this.stateDir]).then((r) => {
      // A box that would not go down stays in `live`: the exit handler retries.
      if (r.code !== 0) throw new Error(`box down ${this.stateDir} failed (${r.code}): ${r.stderr}`);
      live.delete(this);
    });
    return this.stopped;
  }

  stopSync() {
    if (!live.has(this)) return;
    live.delete(this);
    spawnSync(BOX_SCRIPT, ["down", this.stateDir], { stdio: ["ignore", "ignore", "inherit"] });
  }
}

// Boots a box; bind lists host directories to share read-write at the same
// path (the checkout, fixtures). Rejects with the box's console on failure,
// having cleaned up after itself.
// The error's first line says why (the script's first line on stderr); the
// rest (the console of the failed box) follows.
async function startBoxOnce(bind, env) {
  const box = new Box(mkdtempSync(join(tmpdir(), "mcp-lazy-box.")));
  live.add(box);
  env = { ...process.env, ...env, BOX_OWNER_PID: String(process.pid) };
  const r = await run(BOX_SCRIPT, ["up", box.stateDir, ...bind], { env });
  if (r.code !== 0) {
    await box.stop().catch(() => {});
    const [why, ...rest] = r.stderr.trimEnd().split("\n");
    throw new Error(`box up failed (exit ${r.code}): ${why || "nothing on stderr"}${rest.map((l) => `\n${l}`).join("")}`);
  }
  box.pid = Number(r.stdout.trim());
  return box;
}

// env: variables for `box up` (BOX_BOOT_TIMEOUT, BOX_SYSTEMD...). One more try
// when a boot fails for what the host lacks at that moment (under load: the
// boot timeout, inotify instances shared with other boxes); the first failure
// and its reason go to stderr, a second one fails the test. retry: false for a
// test of the boot itself.
export async function startBox({ bind = [], env = {}, retry = true } = {}) {
  installBackstop();
  if (!retry) return startBoxOnce(bind, env);
  try {
    return await startBoxOnce(bind, env);
  } catch (e) {
    console.error(`box: first boot failed, trying once more: ${e.message}`);
    return startBoxOnce(bind, env);
  }
}
