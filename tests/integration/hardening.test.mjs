// The system manager's units: every backend runs as a user of its own in a sandbox (measured with
// systemd-analyze security), a drop-in grants a backend more, and one peer (uid) cannot take every
// backend slot or every request slot of a shim.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { boxFleet, enableSockets } from "./lib/fleet.mjs";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { MCP_LAZY, ROOT, SERVER_SCRIPTS, TESTS, journalUntil } from "./lib/env.mjs";

const PEER = `${TESTS}/integration/lib/peer.mjs`;
// What `systemd-analyze security` still flags, each for a reason README gives ("What a backend may do").
const NOT_TIGHTENED = [
  "DeviceAllow=",
  "IPAddressDeny=",
  "MemoryDenyWriteExecute=",
  "PrivateNetwork=",
  "PrivateUsers=",
  "RestrictAddressFamilies=~AF_(INET|INET6)",
  "RestrictAddressFamilies=~AF_UNIX",
  "RootDirectory=/RootImage=",
  "SupplementaryGroups=",
];

let fleet;
before(async () => {
  // The shims' processes are read after calls here: with a long idle_timeout, which a loaded machine
  // cannot outlast between the call and the read.
  fleet = await boxFleet({ idle: "10m" });
  await fleet.sh("id alice >/dev/null 2>&1 || useradd -m -u 1500 -G mcp-lazy alice");
  // As `mcp-lazy import` writes it as root (env values are often secrets): readable by the socket
  // group only, of which the unit makes each backend's user a member.
  await fleet.sh("chown root:mcp-lazy /etc/mcp-lazy/manifest.yaml && chmod 0640 /etc/mcp-lazy/manifest.yaml");
  await enableSockets(fleet, ["everything", "memory", "npxmem", "files", "database"]);
});
after(async () => fleet && (await fleet.stop()));

test("real backends work as unprivileged users of their own; a drop-in grants one what it needs", async () => {
  const s = await fleet.session();
  // The database backend's drop-in runs it as root, for PostgreSQL's peer authentication.
  const q = await s.callTool({ name: "query", arguments: { sql: "select 6 * 7 as answer" } });
  assert.match(q.content[0].text, /42/);
  const db = await fleet.sh(`cg=/sys/fs/cgroup$(systemctl show -P ControlGroup mcp-lazy@database.service)
    for p in $(cat "$cg/cgroup.procs"); do ps -o user= -p $p; done`);
  assert.deepEqual([...new Set(db.split("\n").filter(Boolean))], ["root"]);
  const calls = { everything: ["echo", { message: "sandboxed" }], memory: ["read_graph", {}], npxmem: ["search_nodes", { query: "x" }], files: ["list_allowed_directories", {}] };
  for (const [unit, [name, args]] of Object.entries(calls)) {
    const r = await s.callTool({ name, arguments: args });
    assert.ok(!r.isError, `${name}: ${JSON.stringify(r)}`);
    // The shim and its backend, and who they run as.
    const users = (await fleet.sh(`cg=/sys/fs/cgroup$(systemctl show -P ControlGroup mcp-lazy@${unit}.service)
      for p in $(cat "$cg/cgroup.procs"); do ps -o user= -p $p; done`)).split("\n").filter(Boolean);
    assert.ok(users.length >= 2, `${unit}: ${users}`);
    assert.deepEqual([...new Set(users)], [`mcp-lazy-${unit}`], `${unit}: a user of its own for the shim and its backend`);
    // The group lets it read the manifest; the sockets of the other backends stay out of its sight.
    const seen = await fleet.sh(`pid=$(systemctl show -P MainPID mcp-lazy@${unit}.service)
      grep '^Groups:' /proc/$pid/status; getent group mcp-lazy | cut -d: -f3
      echo "sockets: $(ls -A /proc/$pid/root/run/mcp-lazy | wc -l) of $(ls -A /run/mcp-lazy | wc -l)"`);
    const [groups, gid] = seen.split("\n");
    assert.ok(groups.split(/\s+/).includes(gid.trim()), `${unit}: ${seen}`);
    assert.match(seen, /^sockets: 0 of [1-9]\d*$/m, `${unit}: ${seen}`);
  }
  await s.close();
});

test("a secret in the unit's EnvironmentFile= reaches its backend, not the socket group's members (README)", async () => {
  // server-everything's get-env shows its environment (tools: is the manifest's last section). The
  // file is the one import writes (secrets.test.mjs), here by hand: the unit reads it, no drop-in.
  await fleet.sh(`grep -q 'name: get-env' /etc/mcp-lazy/manifest.yaml || echo '  - {name: get-env, backend: everything, input_schema: {type: object}}' >> /etc/mcp-lazy/manifest.yaml
    install -m 0600 -D /dev/stdin /etc/mcp-lazy/secrets/everything.env <<<'MCP_LAZY_TEST_SECRET=s3cret-value'
    mkdir -p /etc/systemd/system/mcp-lazy@everything.service.d
    systemctl stop mcp-lazy@everything.service`);
  try {
    const s = await fleet.session();
    const env = JSON.parse((await s.callTool({ name: "get-env", arguments: {} })).content[0].text);
    assert.equal(env.MCP_LAZY_TEST_SECRET, "s3cret-value");
    // alice may connect (group mcp-lazy) and read the manifest, but not the secret: not its file, not
    // the unit's properties, not the running backend's environment.
    const r = await fleet.try(`pid=$(systemctl show -P MainPID mcp-lazy@everything.service)
      runuser -u alice -- head -c 100 /etc/mcp-lazy/manifest.yaml >/dev/null && echo manifest-readable
      runuser -u alice -- cat /etc/mcp-lazy/secrets/everything.env
      runuser -u alice -- systemctl show mcp-lazy@everything.service
      runuser -u alice -- cat /proc/$pid/environ
      for p in $(pgrep -u mcp-lazy-everything); do runuser -u alice -- cat /proc/$p/environ; done`);
    assert.match(r.stdout, /^manifest-readable$/m);
    assert.match(r.stdout, /^EnvironmentFiles=\/etc\/mcp-lazy\/secrets\/everything\.env \(ignore_errors=yes\)$/m, "the unit names the file");
    assert.ok(!(r.stdout + r.stderr).includes("s3cret-value"), r.stdout + r.stderr);
    // Environment= would not do: any user reads a unit's properties (README says so).
    await fleet.sh(`printf '[Service]\\nEnvironment=MCP_LAZY_TEST_SHOWN=sh0wn-value\\n' > /etc/systemd/system/mcp-lazy@everything.service.d/shown.conf
      systemctl daemon-reload`);
    const shown = await fleet.try("runuser -u alice -- systemctl show -P Environment mcp-lazy@everything.service");
    assert.match(shown.stdout, /MCP_LAZY_TEST_SHOWN=sh0wn-value/);
    await s.close();
  } finally {
    await fleet.sh("rm -f /etc/systemd/system/mcp-lazy@everything.service.d/shown.conf; systemctl daemon-reload");
  }
});

test("import as root: the manifest is root:mcp-lazy 0640 before it is renamed into place (never root:root for a moment)", async () => {
  // strace shows the order of the calls: the group must be on the temporary file before the rename
  // (a chown after it left the group's readers, the shims, a moment without the manifest).
  const out = await fleet.sh(`rm -rf /tmp/imp && mkdir -p /tmp/imp && cd /tmp/imp
    printf '{"mcpServers":{"mem":{"command":"${process.execPath}","args":["${SERVER_SCRIPTS.memory}"],"env":{"API_KEY":"k"}}}}' > cfg.json
    # (LeakSanitizer, in the sanitizer builds, cannot run under ptrace)
    ASAN_OPTIONS=detect_leaks=0 strace -f -qq -o trace -e trace=chown,fchown,fchownat,lchown,rename,renameat,renameat2 \\
      ${MCP_LAZY} import --no-enable --manifest /tmp/imp/manifest.yaml --from /tmp/imp/cfg.json >log 2>&1 || { cat log; exit 1; }
    stat -c '%U:%G %a' manifest.yaml; getent group mcp-lazy | cut -d: -f3; grep -E 'rename|chown' trace`);
  const [owner, gid, ...calls] = out.trim().split("\n");
  assert.equal(owner, "root:mcp-lazy 640");
  const renamed = calls.findIndex((l) => /rename\w*\(.*"\/tmp\/imp\/manifest\.yaml"/.test(l));
  assert.ok(renamed >= 0, out);
  const owned = calls.findIndex((l) => new RegExp(`fchown\\(\\d+, 0, ${gid.trim()}\\)`).test(l));
  assert.ok(owned >= 0 && owned < renamed, `the group is set before the rename:\n${out}`);
  assert.ok(!calls.some((l) => /chown\w*\(.*manifest\.yaml"/.test(l)), `the manifest is not chowned by its name (after the rename):\n${out}`);
});

test("systemd-analyze security: the exposure of the service template, and what could not be tightened", async () => {
  // As installed: without the drop-in that lets the sanitizer builds' leak check use ptrace.
  const out = await fleet.sh(`mv /etc/systemd/system/mcp-lazy@.service.d/sanitizer.conf /root/; systemctl daemon-reload
    systemd-analyze security --no-pager mcp-lazy@everything.service
    mv /root/sanitizer.conf /etc/systemd/system/mcp-lazy@.service.d/; systemctl daemon-reload`);
  const level = /Overall exposure level for mcp-lazy@everything\.service: ([\d.]+) (\w+)/.exec(out);
  assert.ok(level, out);
  const flagged = out
    .split("\n")
    .filter((l) => l.startsWith("✗"))
    .map((l) => l.slice(2).split(/\s+/)[0])
    .sort();
  console.log(`systemd-analyze security mcp-lazy@everything.service: exposure ${level[1]} ${level[2]}; not tightened: ${flagged.join(", ")}`);
  assert.deepEqual(flagged, NOT_TIGHTENED);
  assert.ok(Number(level[1]) <= 1.5, `exposure ${level[1]}`);
  // The user manager's copy has none of it: there the backends run as the user, as that user's tools.
  assert.doesNotMatch(await fleet.sh("cat /usr/lib/systemd/user/mcp-lazy@.service"), /^(@system@|DynamicUser=|ProtectSystem=)/m);
});

test("MemoryDenyWriteExecute= would stop every Node.js backend (V8 compiles code at run time)", async () => {
  await fleet.sh(`mkdir -p /etc/systemd/system/mcp-lazy@memory.service.d
    printf '[Service]\\nMemoryDenyWriteExecute=yes\\n' > /etc/systemd/system/mcp-lazy@memory.service.d/mdwe.conf
    systemctl daemon-reload; systemctl stop mcp-lazy@memory.service`);
  const s = await fleet.session();
  try {
    const r = await s.callTool({ name: "read_graph", arguments: {} });
    assert.equal(r.isError, true, JSON.stringify(r));
    assert.match(r.content[0].text, /backend 'memory' failed to start: it was killed by signal|backend 'memory' failed to start: it exited/);
  } finally {
    await s.close();
    await fleet.sh("rm -r /etc/systemd/system/mcp-lazy@memory.service.d; systemctl daemon-reload; systemctl stop mcp-lazy@memory.service");
  }
});

test("README's drop-in that trades the system-call filters away: the backend works, with 5 filters stacked instead of 31", async () => {
  const readme = readFileSync(join(ROOT, "README.md"), "utf8");
  const dropin = /```ini\n([\s\S]*?)```/.exec(readme.slice(readme.indexOf("**What the sandbox costs a call.**")))?.[1];
  assert.match(dropin ?? "", /^\[Service\]\n[^]*^SystemCallFilter=$/m, "README has the drop-in");
  // Seccomp_filters of every process of the unit (the shim and its backend), after a call.
  const filters = async () => {
    const s = await fleet.session();
    try {
      const r = await s.callTool({ name: "read_graph", arguments: {} });
      assert.ok(!r.isError, JSON.stringify(r));
    } finally {
      await s.close();
    }
    const out = await fleet.sh(`cg=/sys/fs/cgroup$(systemctl show -P ControlGroup mcp-lazy@memory.service)
      for p in $(cat "$cg/cgroup.procs"); do awk '/^Seccomp_filters:/ { print $2 }' /proc/$p/status; done`);
    const n = [...new Set(out.split("\n").filter(Boolean).map(Number))];
    assert.equal(n.length, 1, `the shim and its backend have the same filters: ${out}`);
    return n[0];
  };
  await fleet.sh("systemctl stop mcp-lazy@memory.service");
  assert.equal(await filters(), 31);
  await fleet.sh(`mkdir -p /etc/systemd/system/mcp-lazy@memory.service.d
    cat > /etc/systemd/system/mcp-lazy@memory.service.d/trade.conf <<'EOF'\n${dropin}EOF
    systemctl daemon-reload; systemctl stop mcp-lazy@memory.service`);
  try {
    assert.equal(await filters(), 5);
  } finally {
    await fleet.sh(`rm /etc/systemd/system/mcp-lazy@memory.service.d/trade.conf; rmdir --ignore-fail-on-non-empty /etc/systemd/system/mcp-lazy@memory.service.d
      systemctl daemon-reload; systemctl stop mcp-lazy@memory.service`);
  }
});

const peers = async (user, connections) => {
  const arg = JSON.stringify({ socket: "/run/mcp-lazy/everything.sock", connections }).replace(/'/g, "'\\''");
  return JSON.parse(await fleet.sh(`${user === "root" ? "" : `runuser -u ${user} -- `}${process.execPath} ${PEER} '${arg}'`));
};
const slow = { name: "trigger-long-running-operation", arguments: { duration: 3, steps: 1 } };

test("one peer gets at most 4 of the 8 backend processes; another user still gets one", async () => {
  await fleet.sh("systemctl stop mcp-lazy@everything.service");
  // Five client configurations from root at once, each holding its backend with a 3 s call...
  const root = peers("root", Array.from({ length: 5 }, (_, k) => ({ caps: { experimental: { config: { k } } }, calls: [slow] })));
  await new Promise((r) => setTimeout(r, 1500));
  // ...and alice, a member of the socket's group, meanwhile.
  const alice = await peers("alice", [{ caps: { experimental: { alice: {} } }, calls: [slow] }]);
  const r = await root;
  const refused = r.filter((c) => c.init?.error);
  assert.equal(refused.length, 1, JSON.stringify(r));
  assert.equal(
    refused[0].init.error,
    "backend 'everything' already runs 4 processes for client configurations of uid 0, the most one user may (4 of 8); call with the same client configuration as another session of this user, or try again when one ends",
  );
  assert.deepEqual(r.filter((c) => c.init?.ok).map((c) => c.answers), Array(4).fill({ ok: 1 }));
  assert.deepEqual(alice, [{ init: { ok: true }, answers: { ok: 1 }, n: 2 }]);
  const log = await journalUntil(fleet.sh, "mcp-lazy@everything.service", (l) => /^Connection \d+ from pid \d+ uid 1500 gid 1500\.$/m.test(l));
  assert.match(log, /^Connection \d+ from pid \d+ uid 1500 gid 1500\.$/m);
});

test("one peer gets at most 4096 requests in flight over all its connections", async () => {
  // Five connections of 900 slow calls each: past 4096 in all, calls are refused with the reason.
  // (Their initializes wait in the same count while the backend starts: up to 5 fewer calls get in.)
  const r = await peers("root", Array.from({ length: 5 }, () => ({ calls: [slow], repeat: 900 })));
  const total = {};
  for (const c of r) for (const [k, v] of Object.entries(c.answers)) total[k] = (total[k] ?? 0) + v;
  const text = "uid 0 already has 4096 requests in flight at backend 'everything', the most one user may; call again when some have been answered";
  assert.deepEqual(Object.keys(total).sort(), ["ok", text].sort());
  assert.equal(total.ok + total[text], 5 * 900);
  assert.ok(total.ok <= 4096 && total.ok >= 4096 - 5, JSON.stringify(total));
});

test("one peer holds at most 3/4 of max_sessions; root, and another user, still get a session", async () => {
  // A backend of its own with max_sessions 4 (its own manifest, through the unit's MCP_LAZY_MANIFEST).
  await fleet.sh(`printf 'backends:\\n  share:\\n    command: [node, ${SERVER_SCRIPTS.everything}, stdio]\\n    max_sessions: 4\\ntools:\\n  - {name: echo, backend: share, input_schema: {type: object}}\\n' > /etc/mcp-lazy/share.yaml
    mkdir -p /etc/systemd/system/mcp-lazy@share.service.d
    printf '[Service]\\nEnvironment=MCP_LAZY_MANIFEST=/etc/mcp-lazy/share.yaml\\n' > /etc/systemd/system/mcp-lazy@share.service.d/manifest.conf`);
  await enableSockets(fleet, ["share"]);
  const at = async (user, connections) => {
    const arg = JSON.stringify({ socket: "/run/mcp-lazy/share.sock", connections }).replace(/'/g, "'\\''");
    return JSON.parse(await fleet.sh(`${user === "root" ? "" : `runuser -u ${user} -- `}${process.execPath} ${PEER} '${arg}'`));
  };
  // alice opens all four sessions at once, each holding a 3 s call...
  const alice = at("alice", Array.from({ length: 4 }, () => ({ calls: [slow] })));
  // (once the shim has taken them all: a root that came first, on a loaded machine, would hold one
  // of the four when alice's last came, and that one would be refused as over max_sessions)
  const refusedLine = /^Connection \d+ from pid \d+ uid 1500 refused: uid 1500 already holds 3 of the 4 sessions/m;
  await journalUntil(fleet.sh, "mcp-lazy@share.service", (l) => refusedLine.test(l), 60000);
  // ...root still gets the fourth.
  const root = await at("root", [{ calls: [{ name: "echo", arguments: { message: "root" } }] }]);
  const a = await alice;
  assert.deepEqual(root, [{ init: { ok: true }, answers: { ok: 1 }, n: 2 }]);
  const refused = a.filter((c) => c.init?.error);
  assert.deepEqual(refused.map((c) => c.init.error), [
    "uid 1500 already holds 3 of the 4 sessions backend 'share' serves, the most one user may; call again when one of them has ended (or raise max_sessions of backend 'share' in the manifest)",
  ]);
  assert.deepEqual(a.filter((c) => c.init?.ok).map((c) => c.answers), Array(3).fill({ ok: 1 }));
  assert.match(await fleet.sh("journalctl -q -o cat -u mcp-lazy@share.service"), refusedLine);
});
