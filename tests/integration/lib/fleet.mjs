// The backends the shim tests run, and two places to run them: a real systemd in a box (socket
// activation), or no systemd at all (the frontend starts the shim itself: --activation=direct).
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { startBox } from "./box.mjs";
import { MCP_LAZY, ROOT, SANITIZER_DROPIN, SERVER_SCRIPTS, SHIMD, TESTS, cmdline, descendants, processesMatching } from "./env.mjs";

export const IDLE_MS = 1500;
export const PG_URL = "postgresql://root@localhost/postgres?host=/var/run/postgresql";

// Tools the tests call, one per backend, declared in the manifest exactly as the servers list them.
const tool = (name, backend, props = {}) =>
  `  - {name: ${name}, backend: ${backend}, input_schema: {type: object, properties: ${JSON.stringify(props)}}}\n`;

export function fleetManifest({ postgres = false, idle = `${IDLE_MS}ms` } = {}) {
  let m = `backends:
  memory:
    command: [node, ${SERVER_SCRIPTS.memory}]
    env: {MEMORY_FILE_PATH: /tmp/mcp-lazy-test-memory.jsonl}
    idle_timeout: ${idle}
  everything:
    command: [node, ${SERVER_SCRIPTS.everything}, stdio]
    idle_timeout: ${idle}
  files:
    command: [node, ${SERVER_SCRIPTS.filesystem}, /tmp]
    idle_timeout: ${idle}
    sharing: session
  npxmem:
    # npx is a wrapper: node (npm) starting node (the server). Both must go when it idles out.
    command: [npx, --no-install, mcp-server-memory]
    cwd: ${TESTS}
    env: {MEMORY_FILE_PATH: /tmp/mcp-lazy-test-npx.jsonl, npm_config_update_notifier: "false"}
    idle_timeout: ${idle}
`;
  if (postgres)
    m += `  database:
    command: [node, ${SERVER_SCRIPTS.postgres}, "${PG_URL}"]
    idle_timeout: ${idle}
`;
  m += "tools:\n";
  m += tool("read_graph", "memory");
  m += tool("create_entities", "memory", { entities: { type: "array" } });
  m += tool("echo", "everything", { message: { type: "string" } });
  m += tool("get-sum", "everything", { a: { type: "number" }, b: { type: "number" } });
  m += tool("trigger-long-running-operation", "everything", { duration: { type: "number" }, steps: { type: "number" } });
  m += tool("list_allowed_directories", "files");
  m += tool("search_nodes", "npxmem", { query: { type: "string" } });
  if (postgres) m += tool("query", "database", { sql: { type: "string" } });
  return m;
}

async function connect(command, args) {
  const transport = new StdioClientTransport({ command, args, stderr: "pipe" });
  let stderr = "";
  transport.stderr?.on("data", (d) => (stderr += d));
  const client = new Client({ name: "mcp-lazy-test", version: "1.0.0" });
  await client.connect(transport);
  client.stderrText = () => stderr;
  client.transportPid = transport.pid;
  return client;
}

// The box: units installed by `make install`, the shim from the build under test. idle: the
// backends' idle_timeout; a test that reads a unit's state after a call and does not watch it idle
// out takes a long one, which a loaded machine cannot outlast between the call and the read.
export async function boxFleet({ idle } = {}) {
  const box = await startBox({ bind: [ROOT] });
  const sessions = new Set();
  const fleet = {
    kind: "systemd",
    box,
    manifestPath: "/etc/mcp-lazy/manifest.yaml",
    // bash --norc: with its stdin a socket (node's pipes are socketpairs) and SHLVL below 2 (a runner
    // started in the background, `make check` under `exec`), bash reads root's ~/.bashrc, as for a
    // command run by sshd; remote.test.mjs makes that file noisy for the far host, which shares it.
    async sh(script) {
      const r = await box.exec("bash", ["--norc", "-c", script]);
      if (r.code !== 0) throw new Error(`box: ${script}\n${r.stdout}${r.stderr}`);
      return r.stdout;
    },
    // The shims' manifest from now on: the running shims stop, their sockets activate new ones.
    async useManifest(text) {
      const w = await box.exec("bash", ["-c", "cat > /etc/mcp-lazy/manifest.yaml"], { input: text });
      if (w.code !== 0) throw new Error(`writing the manifest failed: ${w.stderr}`);
      await fleet.sh("systemctl stop 'mcp-lazy@*.service'");
    },
    manifestOptions: { postgres: true, ...(idle ? { idle } : {}) },
    async try(script) {
      return box.exec("bash", ["--norc", "-c", script]);
    },
    async session(extra = []) {
      const [cmd, ...pre] = box.nsenterArgs();
      const c = await connect(cmd, [...pre, MCP_LAZY, "--manifest", fleet.manifestPath, ...extra]);
      sessions.add(c);
      return c;
    },
    async active(name) {
      const r = await box.exec("systemctl", ["is-active", `mcp-lazy@${name}.service`]);
      return r.stdout.trim();
    },
    // Every process in the backend's service cgroup (the shim, the backend and its children).
    async cgroupPids(name) {
      const out = await fleet.try(
        `cg=$(systemctl show -P ControlGroup mcp-lazy@${name}.service); [ -n "$cg" ] && cat /sys/fs/cgroup$cg/cgroup.procs 2>/dev/null || true`,
      );
      return out.stdout.split(/\s+/).filter(Boolean).map(Number);
    },
    // The cgroup's processes but the shim, read in one exec: one exec per process adds up on a
    // loaded machine, time in which a short idle_timeout can end what is being counted.
    async backendPids(name) {
      const out = await fleet.try(
        `cg=$(systemctl show -P ControlGroup mcp-lazy@${name}.service); [ -n "$cg" ] || exit 0
        for p in $(cat /sys/fs/cgroup$cg/cgroup.procs 2>/dev/null); do
          c=$(tr '\\0' ' ' < /proc/$p/cmdline 2>/dev/null)
          case "$c" in *mcp-lazy-shimd*) ;; *) echo $p ;; esac
        done`,
      );
      return out.stdout.split(/\s+/).filter(Boolean).map(Number);
    },
    async killBackend(name, sig = "KILL") {
      const pids = await fleet.backendPids(name);
      await fleet.sh(`kill -${sig} ${pids.join(" ")}`);
      return pids;
    },
    async allInactive(names) {
      for (const n of names) if ((await fleet.active(n)) === "active") return false;
      return true;
    },
    async stop() {
      for (const c of sessions) await c.close().catch(() => {});
      await box.stop();
    },
  };
  try {
    await fleet.sh(`make -s -C ${ROOT} install PREFIX=/usr/local >/dev/null && systemd-sysusers`);
    // The shim under test is the build's (with sanitizers under make check), not the installed copy.
    await fleet.sh(`mkdir -p /etc/systemd/system/mcp-lazy@.service.d /etc/mcp-lazy
      printf '[Service]\\nExecStart=\\nExecStart=${SHIMD} --manifest \${MCP_LAZY_MANIFEST} %%i\\n' > /etc/systemd/system/mcp-lazy@.service.d/test.conf
      ${SANITIZER_DROPIN}
      # The database backend logs in to PostgreSQL by peer authentication as root (README: what a backend may do).
      mkdir -p /etc/systemd/system/mcp-lazy@database.service.d
      printf '[Service]\\nDynamicUser=no\\nUser=root\\n' > /etc/systemd/system/mcp-lazy@database.service.d/peer-auth.conf`);
    // PostgreSQL: the Debian cluster, with a superuser role for root so peer auth lets the backend in.
    await fleet.sh(`pg_lsclusters -h | awk '{print $1"-"$2; exit}' > /tmp/pgcluster; systemctl start postgresql@$(cat /tmp/pgcluster)
      for i in $(seq 300); do runuser -u postgres -- psql -qAtc 'select 1' >/dev/null 2>&1 && break; sleep 0.2; done
      runuser -u postgres -- psql -qc "DO \\$\\$ BEGIN CREATE ROLE root SUPERUSER LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END \\$\\$;"`);
    const w = await box.exec("bash", ["-c", "cat > /etc/mcp-lazy/manifest.yaml"], { input: fleetManifest(fleet.manifestOptions) });
    if (w.code !== 0) throw new Error(`writing the manifest failed: ${w.stderr}`);
  } catch (e) {
    await box.stop();
    throw e;
  }
  return fleet;
}

export async function enableSockets(fleet, names) {
  await fleet.sh(`systemctl daemon-reload && systemctl enable --now ${names.map((n) => `mcp-lazy@${n}.socket`).join(" ")}`);
}

// No systemd: each frontend starts its own shim over a socketpair.
export function directFleet() {
  const dir = mkdtempSync(join(tmpdir(), "mcp-lazy-direct-"));
  const manifestPath = join(dir, "manifest.yaml");
  writeFileSync(manifestPath, fleetManifest());
  const sessions = new Set();
  const scriptOf = { memory: SERVER_SCRIPTS.memory, everything: SERVER_SCRIPTS.everything, files: SERVER_SCRIPTS.filesystem, npxmem: "mcp-server-memory" };
  const fleet = {
    kind: "direct",
    // For frontends started from now on (each starts its own shim, which reads it).
    async useManifest(text) {
      writeFileSync(manifestPath, text);
    },
    manifestOptions: {},
    manifestPath,
    async session(extra = []) {
      const c = await connect(MCP_LAZY, ["--manifest", manifestPath, "--activation=direct", "--shimd", SHIMD, ...extra]);
      sessions.add(c);
      return c;
    },
    // Backend processes below any of our frontends; for npxmem both npm's node and the server's.
    async backendPids(name) {
      const out = [];
      for (const c of sessions)
        for (const pid of descendants(c.transportPid)) {
          const cl = cmdline(pid);
          if (cl.includes(scriptOf[name]) && !cl.includes("mcp-lazy-shimd")) out.push(pid);
        }
      return out;
    },
    async shimPids(client) {
      return descendants(client.transportPid).filter((p) => cmdline(p).includes("mcp-lazy-shimd"));
    },
    async killBackend(name, sig = "KILL") {
      const pids = await fleet.backendPids(name);
      for (const p of pids) process.kill(p, `SIG${sig}`);
      return pids;
    },
    async stop() {
      for (const c of sessions) await c.close().catch(() => {});
    },
    orphans: () => processesMatching(dir),
  };
  return fleet;
}
