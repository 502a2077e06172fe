// The drop-in form as a desktop user has it, under a real systemd: alice's user manager runs the
// units on her ~/.config/mcp-lazy/manifest.yaml, and her client's entries are `mcp-lazy --backend
// NAME` with no --manifest. Each answers initialize and lists as the server launched directly does,
// and a call starts the backend in her manager.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { dumpServer, CAPS } from "../tools/dump-server.mjs";
import { localCommand, readBackends } from "../tools/regen-manifests.mjs";
import { boxFleet } from "./lib/fleet.mjs";
import { MANIFESTS, MCP_LAZY, SHIMD, TESTS } from "./lib/env.mjs";

const DEMO = readFileSync(join(MANIFESTS, "demo.yaml"), "utf8");
// demo.yaml's cwd is relative to manifests/: in alice's ~/.config it names tests/ absolutely.
const MANIFEST = DEMO.replace(/^( {4}cwd: )\.\.\/tests$/gm, `$1${TESTS}`);
const BACKENDS = ["everything", "memory", "files"];
const U = "runuser -u alice -- env XDG_RUNTIME_DIR=/run/user/1500 systemctl --user";

let fleet;
before(async () => {
  fleet = await boxFleet();
  await fleet.sh(`id alice >/dev/null 2>&1 || useradd -m -u 1500 alice
    mkdir -p /home/alice/.config/mcp-lazy && chown -R alice: /home/alice/.config
    systemctl start user@1500.service`);
  const w = await fleet.box.exec("runuser", ["-u", "alice", "--", "sh", "-c", "cat > /home/alice/.config/mcp-lazy/manifest.yaml"], { input: MANIFEST });
  assert.equal(w.code, 0, w.stderr);
  await fleet.sh(`for i in $(seq 50); do ${U} is-system-running >/dev/null 2>&1 && break; sleep 0.1; done
    mkdir -p /etc/systemd/user/mcp-lazy@.service.d
    printf '[Service]\\nExecStart=\\nExecStart=${SHIMD} --manifest \${MCP_LAZY_MANIFEST} %%i\\n' > /etc/systemd/user/mcp-lazy@.service.d/test.conf
    ${U} daemon-reload && ${U} enable --now ${BACKENDS.map((b) => `mcp-lazy@${b}.socket`).join(" ")}`);
});
after(async () => fleet && (await fleet.stop()));

// A command line run as alice in the box, as her client would run it.
function asAlice(argv, { cwd, env = {} } = {}) {
  const [cmd, ...pre] = fleet.box.nsenterArgs();
  const vars = Object.entries(env).map(([k, v]) => `${k}=${v}`);
  return [cmd, ...pre, "runuser", "-u", "alice", "--", "env", ...(cwd ? ["-C", cwd] : []), "XDG_RUNTIME_DIR=/run/user/1500", ...vars, ...argv];
}

function direct(name) {
  const run = localCommand(readBackends(DEMO).find((b) => b.name === name), MANIFESTS);
  return asAlice(run.command, run);
}

async function dump(command) {
  const d = await dumpServer({ command, env: {}, caps: CAPS.none, capsName: "none", roots: [], settle: 0, lists: true, timeout: 60000, stderr: false });
  delete d.command;
  delete d.timing;
  delete d.notifications;
  return d;
}

for (const name of BACKENDS) {
  test(`alice's entry 'mcp-lazy --backend ${name}': initialize and lists as from the server, a call through her manager`, async () => {
    const own = await dump(direct(name));
    const lazy = await dump(asAlice([MCP_LAZY, "--backend", name]));
    assert.deepEqual(lazy, own);
    assert.equal((await fleet.try(`${U} is-active mcp-lazy@${name}.service`)).stdout.trim(), "inactive", "lists start nothing");

    const [cmd, ...args] = asAlice([MCP_LAZY, "--backend", name]);
    const client = new Client({ name: "alice-client", version: "1" });
    await client.connect(new StdioClientTransport({ command: cmd, args, stderr: "pipe" }));
    try {
      const tool = { everything: "echo", memory: "read_graph", files: "list_allowed_directories" }[name];
      const r = await client.callTool({ name: tool, arguments: name === "everything" ? { message: "alice" } : {} });
      assert.ok(!r.isError, JSON.stringify(r));
      assert.equal((await fleet.try(`${U} is-active mcp-lazy@${name}.service`)).stdout.trim(), "active");
    } finally {
      await client.close();
    }
  });
}
