// The unit templates under a real systemd: clean verify, status lines, and the frontend's advice
// when a backend's socket is not enabled or its unit has failed.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { boxFleet, enableSockets } from "./lib/fleet.mjs";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { join } from "node:path";
import { MCP_LAZY, ROOT, SERVER_SCRIPTS, SHIMD, TESTS, journalUntil, sleep, waitFor } from "./lib/env.mjs";

let fleet;
before(async () => {
  // Unit state is read after calls here: with a long idle_timeout, as no test here watches one.
  fleet = await boxFleet({ idle: "10m" });
  // The frontend's manifest knows two backends more than the shims' one: 'disabled' has no socket
  // enabled, and 'ghost' has one whose shim cannot find it and so fails every start.
  const extra = `  disabled:
    command: [node, ${SERVER_SCRIPTS.memory}]
  ghost:
    command: [node, ${SERVER_SCRIPTS.memory}]
`;
  await fleet.sh(`sed -e 's|^tools:$|${extra.replace(/\n/g, "\\n")}tools:|' /etc/mcp-lazy/manifest.yaml > /etc/mcp-lazy/frontend.yaml
    printf '  - {name: t_disabled, backend: disabled, input_schema: {type: object}}\\n  - {name: t_ghost, backend: ghost, input_schema: {type: object}}\\n' >> /etc/mcp-lazy/frontend.yaml`);
  await enableSockets(fleet, ["everything", "ghost"]);
});
after(async () => fleet && (await fleet.stop()));

test("systemd-analyze verify is clean on the installed units", async () => {
  const r = await fleet.try(
    "cd /etc/systemd/system && systemd-analyze verify --man=no mcp-lazy@everything.socket mcp-lazy@everything.service 2>&1",
  );
  assert.equal(r.code, 0, r.stdout + r.stderr);
  assert.equal(r.stdout.trim(), "", r.stdout);
  const u = await fleet.sh("systemctl cat mcp-lazy@everything.socket");
  assert.match(u, /ListenStream=%t\/mcp-lazy\/%i\.sock/);
  assert.match(u, /SocketMode=0660/);
  assert.match(u, /SocketGroup=mcp-lazy/);
  assert.match(await fleet.sh("stat -c '%a %G' /run/mcp-lazy/everything.sock"), /^660 mcp-lazy/);
});

test("the shim reports READY and a STATUS= line that systemctl shows", async () => {
  fleet.manifestPath = "/etc/mcp-lazy/frontend.yaml";
  const s = await fleet.session();
  const t0 = Date.now();
  await s.callTool({ name: "echo", arguments: { message: "x" } });
  const t1 = Date.now();
  // The test manifest declares 5 of the server's tools, 3 with schemas of its own: the shim says so.
  // (The counts reach systemd at most every second: wait for the call's too.)
  const status = await waitFor(async () => {
    const st = await fleet.sh("systemctl show -P StatusText mcp-lazy@everything.service");
    return /manifest differs/.test(st) && / 1 call served/.test(st) && st;
  }, 20000);
  assert.match(status, /^backend pid \d+ \(ready\), 1 session, 0 in flight, 1 call served, last call at \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ, manifest differs: tools: 0 missing, \d+ extra, \d+ changed$/m);
  // The last call's time, to the second: when the shim answered it, between this test's own clock
  // before the call and after its answer (the box shares the clock), plus the status interval (1 s)
  // within which the line is made.
  const lastCall = (st) => Date.parse(st.match(/last call at (\S+Z)/)[1]) / 1000;
  const sec = (ms) => Math.floor(ms / 1000);
  const at = lastCall(status);
  assert.ok(at >= sec(t0) && at <= sec(t1) + 1, `last call at ${at}, the call between ${t0 / 1000} and ${t1 / 1000}`);
  const log = await journalUntil(fleet.sh, "mcp-lazy@everything.service", (l) => /lists the tool 'echo' differently/.test(l));
  assert.match(log, /Backend 'everything' lists the tool 'get-env', which the manifest does not declare\./);
  assert.match(log, /Backend 'everything' lists the tool 'echo' differently from the manifest\./);
  assert.match(await fleet.sh("systemctl show -P Type mcp-lazy@everything.service"), /notify/);
  // Made again seconds later for another reason (the session leaves), with no call since, the line
  // still says when the call was answered, not when it was made.
  await sleep(2500);
  await s.close();
  const later = await waitFor(async () => {
    const st = await fleet.sh("systemctl show -P StatusText mcp-lazy@everything.service");
    return / 0 sessions, /.test(st) && st;
  }, 20000);
  assert.ok(later, "the line says the session left");
  assert.equal(lastCall(later), at, later);
});

test("a backend whose socket is not enabled: a tool error with the exact command", async () => {
  const s = await fleet.session();
  const r = await s.callTool({ name: "t_disabled", arguments: {} });
  assert.equal(r.isError, true);
  assert.equal(r.content[0].text, "backend 'disabled' is not enabled: run 'systemctl enable --now mcp-lazy@disabled.socket'");
  await s.close();
});

test("a unit that keeps failing trips its start limit, and the error says how to reset it", async () => {
  const s = await fleet.session();
  let r;
  for (let i = 0; i < 12; i++) {
    r = await s.callTool({ name: "t_ghost", arguments: {} });
    assert.equal(r.isError, true);
    if (/has failed/.test(r.content[0].text)) break;
  }
  assert.match(
    r.content[0].text,
    /^backend 'ghost' has failed \(mcp-lazy@ghost\.socket: service-start-limit-hit\); see 'journalctl -u mcp-lazy@ghost\.service', then run 'systemctl reset-failed mcp-lazy@ghost\.socket mcp-lazy@ghost\.service && systemctl start mcp-lazy@ghost\.socket'$/,
  );
  // The journal says why the shim failed.
  const log = await journalUntil(fleet.sh, "mcp-lazy@ghost.service", (l) => /Backend 'ghost' is not in/.test(l));
  assert.match(log, /Backend 'ghost' is not in \/etc\/mcp-lazy\/manifest\.yaml/);
  await s.close();
});

test("stopping a unit kills every process of the backend", async () => {
  fleet.manifestPath = "/etc/mcp-lazy/frontend.yaml";
  const s = await fleet.session();
  const t0 = Date.now();
  await s.callTool({ name: "echo", arguments: { message: "x" } });
  const t1 = Date.now();
  assert.ok((await fleet.cgroupPids("everything")).length >= 2);
  await fleet.sh("systemctl stop mcp-lazy@everything.service");
  assert.deepEqual(await fleet.cgroupPids("everything"), []);
  // The socket stays, so the next call starts it again.
  const r = await s.callTool({ name: "echo", arguments: { message: "back" } });
  assert.equal(r.content[0].text, "Echo: back");
  assert.ok(await waitFor(async () => (await fleet.active("everything")) === "active", 2000));
  await s.close();
});

test("Accept=yes: a shim per connection, named after the socket's address, not the instance", async () => {
  await fleet.sh(`mkdir -p /etc/mcp-lazy
    printf '[Socket]\\nListenStream=/run/mcp-lazy-acc/everything.sock\\nAccept=yes\\n' > /etc/systemd/system/mcp-lazy-acc.socket
    printf '[Service]\\nType=notify\\nExecStart=${SHIMD} --manifest /etc/mcp-lazy/manifest.yaml\\n' > /etc/systemd/system/mcp-lazy-acc@.service
    grep -v '^  - ' /etc/mcp-lazy/manifest.yaml | sed -e '/^tools:/,$d' > /etc/mcp-lazy/acc.yaml
    printf '  acc:\\n    command: [false]\\n    socket: /run/mcp-lazy-acc/everything.sock\\ntools:\\n  - {name: echo, backend: acc, input_schema: {type: object}}\\n' >> /etc/mcp-lazy/acc.yaml
    systemctl daemon-reload && systemctl start mcp-lazy-acc.socket`);
  fleet.manifestPath = "/etc/mcp-lazy/acc.yaml";
  const s = await fleet.session();
  const r = await s.callTool({ name: "echo", arguments: { message: "accepted" } });
  assert.equal(r.content[0].text, "Echo: accepted");
  // The instance is named after the connection; the shim found 'everything' from the socket's path.
  const units = await fleet.sh("systemctl list-units --no-legend --plain 'mcp-lazy-acc@*' | awk '{print $1}'");
  assert.match(units, /^mcp-lazy-acc@\d+-\d+-\d+\.service$/m);
  await s.close();
  fleet.manifestPath = "/etc/mcp-lazy/frontend.yaml";
  // The connection's shim ends with it, and its backend with the shim.
  assert.ok(await waitFor(async () => !(await fleet.sh("systemctl list-units --no-legend --plain 'mcp-lazy-acc@*'")).includes("running"), 20000));
});

test("the same units under a user manager: socket in $XDG_RUNTIME_DIR, mode 0600, manifest in ~/.config", async () => {
  const u = "XDG_RUNTIME_DIR=/run/user/0 systemctl --user";
  await fleet.sh(`systemctl start user@0.service
    for i in $(seq 50); do ${u} is-system-running >/dev/null 2>&1 && break; sleep 0.1; done
    mkdir -p /etc/systemd/user/mcp-lazy@.service.d /root/.config/mcp-lazy
    cp /etc/systemd/system/mcp-lazy@.service.d/test.conf /etc/systemd/user/mcp-lazy@.service.d/test.conf
    cp /etc/mcp-lazy/manifest.yaml /root/.config/mcp-lazy/manifest.yaml
    ${u} daemon-reload && ${u} enable --now mcp-lazy@everything.socket`);
  assert.match(await fleet.sh("stat -c '%a %U' /run/user/0/mcp-lazy/everything.sock"), /^600 root/);
  // A frontend of that user: root here, so the manifest names the user manager's socket.
  await fleet.sh(`sed -e 's|^  everything:$|  everything:\\n    socket: /run/user/0/mcp-lazy/everything.sock|' /etc/mcp-lazy/manifest.yaml > /etc/mcp-lazy/user.yaml`);
  fleet.manifestPath = "/etc/mcp-lazy/user.yaml";
  const s = await fleet.session();
  const r = await s.callTool({ name: "echo", arguments: { message: "user manager" } });
  assert.equal(r.content[0].text, "Echo: user manager");
  assert.equal((await fleet.try(`${u} is-active mcp-lazy@everything.service`)).stdout.trim(), "active");
  // %E of a user manager is ~/.config: the shim ran with the user's manifest.
  assert.match(await fleet.sh(`${u} show -P Environment mcp-lazy@everything.service`), /MCP_LAZY_MANIFEST=\/root\/.config\/mcp-lazy\/manifest\.yaml/);
  assert.match(await fleet.sh(`tr '\\0' ' ' < /proc/$(${u} show -P MainPID mcp-lazy@everything.service)/cmdline`), /--manifest \/root\/.config\/mcp-lazy\/manifest\.yaml everything/);
  await s.close();
  fleet.manifestPath = "/etc/mcp-lazy/frontend.yaml";
  await fleet.sh(`${u} stop mcp-lazy@everything.service mcp-lazy@everything.socket; systemctl stop user@0.service`);
});

test("a desktop user: their own manager, their own sockets, and advice that says --user", async () => {
  await fleet.sh(`id alice >/dev/null 2>&1 || useradd -m -u 1500 alice
    mkdir -p /home/alice/.config/mcp-lazy && cp /etc/mcp-lazy/manifest.yaml /home/alice/.config/mcp-lazy/manifest.yaml
    chown -R alice: /home/alice/.config
    systemctl start user@1500.service`);
  const u = "runuser -u alice -- env XDG_RUNTIME_DIR=/run/user/1500 systemctl --user";
  await fleet.sh(`for i in $(seq 50); do ${u} is-system-running >/dev/null 2>&1 && break; sleep 0.1; done
    mkdir -p /etc/systemd/user/mcp-lazy@.service.d
    cp /etc/systemd/system/mcp-lazy@.service.d/test.conf /etc/systemd/user/mcp-lazy@.service.d/test.conf
    ${u} daemon-reload && ${u} enable --now mcp-lazy@everything.socket`);
  // mcp-lazy as alice, with no socket: overrides: $XDG_RUNTIME_DIR/mcp-lazy/NAME.sock and her bus.
  const [cmd, ...pre] = fleet.box.nsenterArgs();
  const transport = new StdioClientTransport({
    command: cmd,
    args: [...pre, "runuser", "-u", "alice", "--", "env", "XDG_RUNTIME_DIR=/run/user/1500", MCP_LAZY, "--manifest", "/home/alice/.config/mcp-lazy/manifest.yaml"],
    stderr: "pipe",
  });
  const s = new Client({ name: "alice", version: "1" });
  await s.connect(transport);
  try {
    const r = await s.callTool({ name: "echo", arguments: { message: "from alice" } });
    assert.equal(r.content[0].text, "Echo: from alice", JSON.stringify(r));
    assert.equal((await fleet.try(`${u} is-active mcp-lazy@everything.service`)).stdout.trim(), "active");
    assert.match(await fleet.sh("stat -c '%a %U' /run/user/1500/mcp-lazy/everything.sock"), /^600 alice/);
    const off = await s.callTool({ name: "list_allowed_directories", arguments: {} }).catch((e) => e);
    assert.ok(off.isError, JSON.stringify(off));
    assert.equal(off.content[0].text, "backend 'files' is not enabled: run 'systemctl --user enable --now mcp-lazy@files.socket'");
  } finally {
    await s.close();
  }
  await fleet.sh(`${u} stop mcp-lazy@everything.socket mcp-lazy@everything.service; systemctl stop user@1500.service`);
});

test("a changed definition: the shim stops once no call is in flight, the next call runs what the manifest says; reload too; resident starts again at once", async () => {
  const ECHO = join(TESTS, "fixtures/echo-backend.mjs");
  const base = await fleet.sh("cat /etc/mcp-lazy/manifest.yaml");
  const withGen = (gen, lifecycle = "lazy") =>
    base.replace(/^tools:$/m, `  gen:\n    command: [node, ${ECHO}]\n    env: {GEN: ${gen}}\n    lifecycle: ${lifecycle}\ntools:`) +
    "  - {name: whoami, backend: gen, input_schema: {type: object}}\n";
  // As editors write it: a new file renamed over the old.
  const write = async (text) => {
    const w = await fleet.box.exec("bash", ["-c", "cat > /etc/mcp-lazy/m.new && mv /etc/mcp-lazy/m.new /etc/mcp-lazy/manifest.yaml"], { input: text });
    assert.equal(w.code, 0, w.stderr);
  };
  const mainPid = async () => (await fleet.sh("systemctl show -P MainPID mcp-lazy@gen.service")).trim();
  const stopped = (pid) => waitFor(async () => (await mainPid()) !== pid, 30000, 200);
  await write(withGen("one"));
  await enableSockets(fleet, ["gen"]);
  fleet.manifestPath = "/etc/mcp-lazy/manifest.yaml"; // the one the shims read, watched by both
  const client = await fleet.session();
  const who = async () => JSON.parse((await client.callTool({ name: "whoami", arguments: { env: ["GEN"] } })).content[0].text);
  const one = await who();
  assert.equal(one.env.GEN, "one");

  // The shim sees the change, logs it, and stops (nothing in flight): the same session's next call
  // reaches the next shim, whose backend runs as the manifest says now.
  const shim1 = await mainPid();
  await write(withGen("two"));
  const log = await journalUntil(fleet.sh, "mcp-lazy@gen.service", (l) => /Backend 'gen' changed in/.test(l));
  assert.match(log, /Backend 'gen' changed in \/etc\/mcp-lazy\/manifest\.yaml \(env GEN\): stopping once no call is in flight, to start again as it says now\./);
  assert.ok(await stopped(shim1), log);
  const two = await who();
  assert.equal(two.env.GEN, "two");
  assert.notEqual(two.pid, one.pid);

  // systemctl reload (ExecReload=, in the system manager's sandbox): the same, the manifest unchanged.
  const shim2 = await mainPid();
  await fleet.sh("systemctl reload mcp-lazy@gen.service");
  assert.ok(await stopped(shim2), await fleet.sh("journalctl -q -o cat -u mcp-lazy@gen.service"));
  const three = await who();
  assert.equal(three.env.GEN, "two");
  assert.notEqual(three.pid, two.pid);

  // Made resident: its shim exits for the unit to start it again at once, and with it the backend,
  // without waiting for a call.
  const shim3 = await mainPid();
  await write(withGen("four", "resident"));
  const backUp = async () => {
    const pid = await mainPid();
    return pid !== "0" && pid !== shim3 && (await fleet.backendPids("gen")).length > 0;
  };
  assert.ok(await waitFor(backUp, 30000, 200), await fleet.sh("systemctl status mcp-lazy@gen.service; journalctl -q -o cat -u mcp-lazy@gen.service"));
  assert.equal((await fleet.active("gen")), "active");
  assert.equal((await who()).env.GEN, "four");
  await client.close();
  fleet.manifestPath = "/etc/mcp-lazy/frontend.yaml";
  await fleet.sh("systemctl stop mcp-lazy@gen.socket mcp-lazy@gen.service");
});
