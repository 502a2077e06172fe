// Backends on another host, through OpenSSH: frontends in the box's network namespace call pooled
// backends of the "far" host (a network namespace of its own with a real sshd) and get what a
// direct call gets; every way of failing is a specific tool error within 30 s, never a hang.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { IDLE_MS, boxFleet, enableSockets, fleetManifest } from "./lib/fleet.mjs";
import { addFarHost, farLink, nearManifest } from "./lib/far.mjs";
import { MCP_LAZY, cmdline, descendants, journalUntil, waitFor } from "./lib/env.mjs";

let fleet;
const NEAR = "/etc/mcp-lazy/near.yaml";
const DIRECT = "/etc/mcp-lazy/manifest.yaml";

before(async () => {
  // The far host's backends are read (status, processes, ssh connections) after calls here: with a
  // long idle_timeout, which a loaded machine cannot outlast between the call and the read. The test
  // of idling out sets a short one for itself.
  fleet = await boxFleet({ idle: "10m" });
  await enableSockets(fleet, ["memory", "everything"]);
  await addFarHost(fleet);
  const w = await fleet.box.exec("bash", ["-c", `cat > ${NEAR}`], { input: nearManifest() });
  assert.equal(w.code, 0, w.stderr);
});
after(async () => fleet && (await fleet.stop()));

async function session(manifest = NEAR) {
  fleet.manifestPath = manifest;
  return fleet.session();
}

// Each process of this session's ssh to far (the frontend's children).
function sshPids(client) {
  return descendants(client.transportPid).filter((p) => /^ssh .*mcp-lazy connect/.test(cmdline(p)));
}

async function timed(p) {
  const t0 = Date.now();
  const r = await p;
  return { r, ms: Date.now() - t0 };
}

// `mcp-lazy status` on the near host: each remote backend with its host, whether ssh reaches it,
// and the far host's own status of that backend, read there without starting anything.
test("status shows remote backends: reachable and idle, active after a call, unreachable with the link down", async (t) => {
  const status = async () => {
    const t0 = Date.now();
    const r = await fleet.try(`${MCP_LAZY} status --system --json --manifest ${NEAR}`);
    assert.equal(r.code, 0, r.stdout + r.stderr);
    const rows = Object.fromEntries(JSON.parse(r.stdout).backends.map((b) => [b.name, b]));
    return { rows, ms: Date.now() - t0 };
  };
  assert.equal(await fleet.active("everything"), "inactive");
  let { rows } = await status();
  assert.deepEqual(rows.reverything.remote, { host: "ssh://root@far", remote_name: "everything", reachability: "reachable", reason: null });
  assert.equal(rows.reverything.socket, "listening");
  assert.equal(rows.reverything.service, "idle");
  assert.deepEqual(rows.reverything.pids, []);
  assert.equal(rows.rmem.remote.reachability, "reachable");
  assert.equal(rows.notenabled.remote.reachability, "reachable");
  assert.equal(rows.notenabled.remote.reason, "there, the manifest has no backend 'disabled'");
  assert.equal(rows.noport.remote.reachability, "unreachable");
  assert.match(rows.noport.remote.reason, /^ssh: connect to host far port 2222: Connection refused$/);
  assert.match(rows.noname.remote.reason, /Could not resolve hostname nosuch\.invalid/);
  assert.match(rows.unknownkey.remote.reason, /Host key verification failed\.$/);
  // Looking started nothing there.
  assert.equal(await fleet.active("everything"), "inactive");
  assert.deepEqual(await fleet.backendPids("everything"), []);
  // The table says the same, in its WHERE column.
  const table = await fleet.sh(`${MCP_LAZY} status --system --manifest ${NEAR}`);
  assert.match(table, /^reverything +listening +idle .* ssh:\/\/root@far \(everything\): reachable$/m);
  assert.match(table, /^noport .* ssh:\/\/root@far:2222 \(everything\): unreachable: ssh: connect to host far port 2222: Connection refused$/m);

  const s = await session();
  await s.callTool({ name: "echo", arguments: { message: "hi" } });
  ({ rows } = await status());
  assert.equal(rows.reverything.service, "active");
  assert.deepEqual(rows.reverything.pids, await fleet.backendPids("everything"));
  assert.equal(rows.reverything.pids.length, 1);
  assert.ok(rows.reverything.sessions >= 1, JSON.stringify(rows.reverything));

  await farLink(fleet, false);
  try {
    const down = await status();
    t.diagnostic(`link down: status answered after ${down.ms} ms; far: ${down.rows.reverything.remote.reason}`);
    assert.ok(down.ms < 30000, `took ${down.ms} ms`);
    for (const name of ["reverything", "rmem", "notenabled"]) {
      assert.equal(down.rows[name].remote.reachability, "unreachable", JSON.stringify(down.rows[name]));
      assert.ok(down.rows[name].remote.reason, JSON.stringify(down.rows[name]));
      assert.equal(down.rows[name].service, null);
    }
  } finally {
    await farLink(fleet, true);
  }
  await s.close();
});

test("a remote pooled backend answers exactly as a direct call does", async () => {
  const far = await session();
  const near = await session(DIRECT);
  // Closed however the test ends: a session left open would be counted by the next test's shim.
  try {
    for (const [name, args] of [
      ["echo", { message: "über ssh" }],
      ["get-sum", { a: 2, b: 40 }],
    ]) {
      const viaSsh = await far.callTool({ name, arguments: args });
      const direct = await near.callTool({ name, arguments: args });
      assert.deepEqual(viaSsh, direct);
    }
    assert.deepEqual(await far.callTool({ name: "read_graph", arguments: {} }), await near.callTool({ name: "read_graph", arguments: {} }));
    // Progress comes back through ssh, with the client's own token. The SDK drops progress it reads
    // in the same chunk as the result (its handler runs a microtask later, when the token is gone):
    // often the last one, others when the client reads late. What came must be in order, and the
    // first, sent 3 s before the result, must have come.
    const progress = [];
    const r = await far.callTool(
      { name: "trigger-long-running-operation", arguments: { duration: 3, steps: 3 } },
      undefined,
      { onprogress: (p) => progress.push(p.progress) },
    );
    assert.match(r.content[0].text, /Long running operation completed/);
    assert.ok(progress.length >= 1 && progress.every((p, k) => p === k + 1), JSON.stringify(progress));
    // Cancellation goes through: the aborted call ends at once, the backend goes on serving.
    const ac = new AbortController();
    const cancelled = far.callTool({ name: "trigger-long-running-operation", arguments: { duration: 5, steps: 5 } }, undefined, { signal: ac.signal });
    setTimeout(() => ac.abort("enough"), 300);
    await assert.rejects(cancelled);
    assert.equal((await far.callTool({ name: "echo", arguments: { message: "after" } })).content[0].text, "Echo: after");
    // Pipelined calls on one connection.
    const many = await Promise.all(Array.from({ length: 20 }, (_, i) => far.callTool({ name: "get-sum", arguments: { a: i, b: 1 } })));
    assert.deepEqual(many.map((x) => x.content[0].text), Array.from({ length: 20 }, (_, i) => `The sum of ${i} and 1 is ${i + 1}.`));
  } finally {
    await far.close();
    await near.close();
  }
});

test("sessions of both hosts share one backend process on the far host, which idles out and comes back", async () => {
  const a = await session();
  const b = await session();
  // A session of the far host itself (the units are the far host's): straight to the socket.
  const local = await session(DIRECT);
  await a.callTool({ name: "echo", arguments: { message: "a" } });
  const pids = await fleet.backendPids("everything");
  assert.equal(pids.length, 1);
  // A call in flight keeps the backend from idling out while we look.
  const busy = local.callTool({ name: "trigger-long-running-operation", arguments: { duration: 6, steps: 2 } });
  await b.callTool({ name: "echo", arguments: { message: "b" } });
  // A plain connect on the far host, in its own network namespace, reaches the same backend (as a
  // client of the same version and capabilities as the SDK's: the pool is per client configuration).
  const c = await fleet.sh(`printf '%s\\n' '{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}' \\
      '{"jsonrpc":"2.0","method":"notifications/initialized"}' '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"message":"in far"}}}' \\
      | ip netns exec far mcp-lazy connect everything`);
  assert.match(c, /"text":"Echo: in far"/);
  assert.deepEqual(await fleet.backendPids("everything"), pids);
  // Three sessions on one shim (sessions of the tests before may take a moment to go).
  const status = await waitFor(async () => {
    const st = await fleet.sh("systemctl show -P StatusText mcp-lazy@everything.service");
    return / 3 sessions,/.test(st) && st;
  }, 20000);
  assert.ok(status, await fleet.sh("systemctl show -P StatusText mcp-lazy@everything.service"));
  assert.match((await busy).content[0].text, /Long running operation completed/);
  assert.deepEqual(await fleet.backendPids("everything"), pids);
  // Idle: the backend stops there; the ssh sessions are told (drain) and the next call reconnects.
  // With the usual short idle_timeout from here (the shims stop, and start again with it); what
  // happened is read from the journal, which that timer does not race.
  await fleet.useManifest(fleetManifest({ ...fleet.manifestOptions, idle: `${IDLE_MS}ms` }));
  try {
    const cursor = (await fleet.sh("journalctl -q -n 0 --show-cursor")).match(/cursor: (.*)/)[1];
    const journal = (ok) => journalUntil((script) => fleet.sh(script.replace("journalctl", `journalctl --after-cursor='${cursor}'`)), "mcp-lazy@everything.service", ok);
    const started = (l) => [...l.matchAll(/^Started backend 'everything' as pid (\d+)\.$/gm)].map((m) => m[1]);
    assert.equal((await a.callTool({ name: "echo", arguments: { message: "short" } })).content[0].text, "Echo: short");
    assert.ok(await waitFor(async () => (await fleet.active("everything")) !== "active", 30000), "backend did not idle out");
    const idled = await journal((l) => /^Idle for 1500ms, stopping\.$/m.test(l));
    assert.match(idled, /^Idle for 1500ms, stopping\.$/m);
    assert.equal(started(idled).length, 1, idled);
    assert.ok(await waitFor(() => sshPids(a).length === 0, 20000), "ssh of an idle session stayed");
    const r = await a.callTool({ name: "echo", arguments: { message: "again" } });
    assert.equal(r.content[0].text, "Echo: again");
    const back = await journal((l) => started(l).length >= 2);
    assert.equal(started(back).length, 2, back);
    assert.notEqual(started(back)[1], started(back)[0]);
  } finally {
    await fleet.useManifest(fleetManifest(fleet.manifestOptions));
  }
  for (const s of [a, b, local]) await s.close();
});

test("ssh killed mid-call: that call fails saying so, the next call reconnects", async () => {
  const s = await session();
  await s.callTool({ name: "echo", arguments: { message: "warm" } });
  // Killed once the call runs on far (its first progress), not after a guessed delay.
  let running;
  const started = new Promise((r) => (running = r));
  const call = s.callTool({ name: "trigger-long-running-operation", arguments: { duration: 30, steps: 30 } }, undefined, { onprogress: () => running() });
  await Promise.race([started, call]);
  const ssh = sshPids(s);
  assert.equal(ssh.length, 1);
  process.kill(ssh[0], "SIGKILL");
  const { r, ms } = await timed(call);
  assert.ok(ms < 20000, `took ${ms} ms`); // not the 30 s call's end
  assert.equal(r.isError, true);
  assert.equal(
    r.content[0].text,
    "backend 'reverything' on ssh://root@far (backend 'everything' there): ssh was killed by signal KILL; the call may or may not have run, the next call connects again",
  );
  const again = await s.callTool({ name: "echo", arguments: { message: "back" } });
  assert.equal(again.content[0].text, "Echo: back");
  await s.close();
});

test("a remote login that writes to stdout (a noisy ~/.bashrc) fails the call saying so and what to do; quiet again, calls work", async () => {
  // What bash reads for a command run by sshd: root's ~/.bashrc there (the box's own copy, an overlay).
  await fleet.sh("cp /root/.bashrc /root/.bashrc.away");
  const noisy = await fleet.box.exec("bash", ["-c", "cat >> /root/.bashrc"], { input: "printf 'Welcome to far, \\033[1mroot\\033[0m\\n'\n" });
  assert.equal(noisy.code, 0, noisy.stderr);
  const s = await session();
  try {
    const r = await s.callTool({ name: "echo", arguments: { message: "noisy" } });
    assert.equal(r.isError, true, JSON.stringify(r));
    const text = r.content[0].text;
    // The line, quoted printably (its escape sequences as ?), the likely cause, and what to do.
    assert.ok(text.startsWith("backend 'reverything' on ssh://root@far (backend 'everything' there): the remote login wrote 'Welcome to far, ?[1mroot?[0m' to stdout, "), text);
    assert.match(text, /a shell startup file that runs for non-interactive shells \(~\/\.bashrc for bash, ~\/\.zshenv for zsh\), ~\/\.ssh\/rc or a forced command of the remote user prints it; make it print nothing unless the shell is interactive/);
    assert.match(text, /, so that 'ssh root@far true' prints nothing; the call may or may not have run, the next call connects again$/);
    // The frontend's log says the same.
    assert.ok(s.stderrText().includes(text), s.stderrText());
    // So do status and refresh, which reach the host through ssh too.
    const hint = "a shell startup file that runs for non-interactive shells (~/.bashrc for bash, ~/.zshenv for zsh), ~/.ssh/rc or a forced command of the remote user prints it; make it print nothing unless the shell is interactive (e.g. begin ~/.bashrc with: case $- in *i*) ;; *) return;; esac)";
    const st = await fleet.try(`${MCP_LAZY} status --system --json --manifest ${NEAR}`);
    const row = JSON.parse(st.stdout).backends.find((b) => b.name === "reverything");
    assert.equal(row.remote.reason, `the remote login wrote 'Welcome to far, ?[1mroot?[0m' to stdout before 'mcp-lazy status --json' answered: ${hint}`, st.stdout);
    const rf = await fleet.try(`${MCP_LAZY} refresh --check --manifest ${NEAR} rmem`);
    assert.equal(rf.code, 1, rf.stdout + rf.stderr);
    assert.ok(rf.stdout.includes(`rmem:\n  FAILED: it wrote something that is not JSON-RPC on stdout: 'Welcome to far, ?[1mroot?[0m'; its command is ssh, so most likely the remote login wrote it: ${hint}\n`), rf.stdout);
  } finally {
    await fleet.sh("mv /root/.bashrc.away /root/.bashrc");
  }
  const again = await s.callTool({ name: "echo", arguments: { message: "quiet" } });
  assert.equal(again.content[0].text, "Echo: quiet");
  await s.close();
});

test("host keys: an unknown one and a changed one are refused, each with what to do", async () => {
  const s = await session();
  const u = await s.callTool({ name: "t_unknownkey", arguments: {} });
  assert.equal(u.isError, true);
  assert.match(
    u.content[0].text,
    /^backend 'unknownkey' on ssh:\/\/root@far-unknown \(backend 'everything' there\): the host key of far-unknown is not known, and mcp-lazy never accepts one by itself: check it and accept it by running 'ssh root@far-unknown' once \(or add it to ~\/\.ssh\/known_hosts\) \(ssh said: .*Host key verification failed\.\)$/,
  );
  const c = await s.callTool({ name: "t_changedkey", arguments: {} });
  assert.equal(c.isError, true);
  assert.match(
    c.content[0].text,
    /^backend 'changedkey' on ssh:\/\/root@far-changed \(backend 'everything' there\): the host key of far-changed has changed, and ssh refused to connect: if the change is expected, run 'ssh-keygen -R far-changed' and check the new key by running 'ssh root@far-changed' once \(ssh said: .*Host key for far-changed has changed and you have requested strict checking\.  Host key verification failed\.\)$/,
  );
  // Nothing was accepted on the way.
  const known = await fleet.sh("cat /root/.ssh/known_hosts");
  assert.doesNotMatch(known, /far-unknown/);
  assert.equal(known.match(/far-changed/g).length, 1);
  await s.close();
});

test("authentication refused, mcp-lazy missing there, a backend not enabled there, no sshd, no such host", async () => {
  const s = await session();
  const p = await s.callTool({ name: "t_noport", arguments: {} });
  assert.match(
    p.content[0].text,
    /^backend 'noport' on ssh:\/\/root@far:2222 \(backend 'everything' there\): far refused the connection: is sshd running there\? \(ssh said: .*Connection refused\)$/,
  );
  const h = await s.callTool({ name: "t_noname", arguments: {} });
  assert.match(
    h.content[0].text,
    /^backend 'noname' on ssh:\/\/root@nosuch\.invalid \(backend 'everything' there\): the host name nosuch\.invalid does not resolve \(ssh said: .*Could not resolve hostname.*\)$/,
  );
  const n = await s.callTool({ name: "t_notenabled", arguments: {} });
  assert.equal(
    n.content[0].text,
    "backend 'notenabled' on ssh://root@far (backend 'disabled' there): there, backend 'disabled' is not enabled: run 'systemctl enable --now mcp-lazy@disabled.socket'",
  );
  await fleet.sh("mv /usr/local/bin/mcp-lazy /usr/local/bin/mcp-lazy.away");
  try {
    const m = await s.callTool({ name: "t_notenabled", arguments: {} });
    assert.match(
      m.content[0].text,
      /^backend 'notenabled' on ssh:\/\/root@far \(backend 'disabled' there\): mcp-lazy is not installed on far \(the remote shell found no 'mcp-lazy'\): install it there so that 'ssh root@far mcp-lazy --version' works \(ssh said: .*mcp-lazy: command not found\)$/,
    );
  } finally {
    await fleet.sh("mv /usr/local/bin/mcp-lazy.away /usr/local/bin/mcp-lazy");
  }
  await fleet.sh("mv /root/.ssh/authorized_keys /root/.ssh/authorized_keys.away");
  try {
    // The shared connection would still let us in: a new master is needed to see the refusal.
    await fleet.sh("for s in /run/mcp-lazy/ssh/*[0-9]; do [ -S $s ] && ssh -o ControlPath=$s -O exit far 2>/dev/null; done; true");
    const a = await s.callTool({ name: "t_notenabled", arguments: {} });
    assert.match(
      a.content[0].text,
      /^backend 'notenabled' on ssh:\/\/root@far \(backend 'disabled' there\): far refused authentication: mcp-lazy runs ssh with BatchMode=yes \(no password prompts\); set up key authentication \(ssh-copy-id\) so that 'ssh root@far -o BatchMode=yes true' works \(ssh said: .*Permission denied \(publickey\)\.\)$/,
    );
  } finally {
    await fleet.sh("mv /root/.ssh/authorized_keys.away /root/.ssh/authorized_keys");
  }
  await s.close();
});

test("the far host unreachable: calls in flight and new sessions fail within 30 s; calls work once it is back", async (t) => {
  const open = await session();
  await open.callTool({ name: "echo", arguments: { message: "before" } });
  let running;
  const started = new Promise((r) => (running = r));
  const inFlight = timed(open.callTool({ name: "trigger-long-running-operation", arguments: { duration: 60, steps: 60 } }, undefined, { timeout: 120000, onprogress: () => running() }));
  await Promise.race([started, inFlight]); // in flight indeed: it has run one step on far
  await farLink(fleet, false);
  try {
    const fresh = await session();
    const [a, b] = await Promise.all([inFlight, timed(fresh.callTool({ name: "echo", arguments: { message: "x" } }, undefined, { timeout: 120000 }))]);
    t.diagnostic(`link down: the call in flight failed after ${a.ms} ms, the new session's call after ${b.ms} ms`);
    for (const { r, ms } of [a, b]) {
      assert.equal(r.isError, true, JSON.stringify(r));
      assert.ok(ms < 30000, `took ${ms} ms: ${r.content[0].text}`);
      assert.match(r.content[0].text, /^backend 'reverything' on ssh:\/\/root@far \(backend 'everything' there\): /);
    }
    assert.match(a.r.content[0].text, /far is unreachable \(the connection was lost\); the call may or may not have run|ssh/);
    await fresh.close();
  } finally {
    await farLink(fleet, true);
  }
  const r = await open.callTool({ name: "echo", arguments: { message: "after" } });
  assert.equal(r.content[0].text, "Echo: after");
  await open.close();
});

test("mcp-lazy refresh asks the pooled backend on the far host, through ssh", async () => {
  const r = await fleet.try(`${MCP_LAZY} refresh --check --manifest ${NEAR} rmem`);
  // The near manifest declares two of server-memory's nine tools, with schemas of its own.
  assert.equal(r.code, 1, r.stdout + r.stderr);
  assert.doesNotMatch(r.stdout, /FAILED/);
  assert.match(r.stdout, /^rmem:\n  tools: 7 added, 0 removed, 2 changed: /m);
});

test("fifty sessions on one host call one remote host (sshd's MaxSessions 10 untouched)", async (t) => {
  const sessions = [];
  for (let i = 0; i < 50; i++) sessions.push(await session());
  const t0 = Date.now();
  const results = await Promise.all(sessions.map((s, i) => s.callTool({ name: "echo", arguments: { message: `s${i}` } }, undefined, { timeout: 120000 })));
  assert.deepEqual(results.map((r) => r.content[0].text), sessions.map((_, i) => `Echo: s${i}`));
  // At most 8 sessions on each shared connection: at least 7 connections to far, not 50.
  const conns = Number((await fleet.sh("ip netns exec far ss -Htn state established '( sport = :22 )' | wc -l")).trim());
  t.diagnostic(`50 sessions: first calls all answered after ${Date.now() - t0} ms over ${conns} ssh connections`);
  assert.ok(conns >= 7 && conns <= 12, `${conns} ssh connections`);
  const pids = await fleet.backendPids("everything");
  assert.equal(pids.length, 1, (await fleet.sh(`ps -o pid,ppid,etime,args -p ${pids.join(",")}; systemctl show -P StatusText mcp-lazy@everything.service`)));
  await Promise.all(sessions.map((s) => s.close()));
});
