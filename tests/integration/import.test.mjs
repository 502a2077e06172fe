// The whole user journey under a real systemd, as a desktop user with her own manager: her Claude
// Code and Claude Desktop configs, `mcp-lazy import`, the rewritten entries launched by the SDK client
// exactly as the configs say, the backends socket-activated and idling out, `mcp-lazy import --undo`.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { startBox } from "./lib/box.mjs";
import { MCP_LAZY, ROOT, SHIMD, waitFor } from "./lib/env.mjs";
import { CLIENT_CAPS, claudeCodeConfig, compareWithDirect, desktopConfig } from "./lib/import.mjs";

const HOME = "/home/alice";
const RT = "/run/user/1500";
const ENV = `HOME=${HOME} XDG_RUNTIME_DIR=${RT} PATH=/usr/local/bin:/usr/bin:/bin`;
const AS_ALICE = `runuser -u alice -- env ${ENV}`;
const USERCTL = `${AS_ALICE} systemctl --user`;

let box;
async function sh(script, input) {
  const r = await box.exec("bash", ["-c", script], input === undefined ? {} : { input });
  if (r.code !== 0) throw new Error(`box: ${script}\n${r.stdout}${r.stderr}`);
  return r.stdout;
}
const tryIn = (script) => box.exec("bash", ["-c", script]);
const active = async (unit) => (await tryIn(`${USERCTL} is-active ${unit}`)).stdout.trim();

const code = claudeCodeConfig(HOME, { filesDir: `${HOME}/project` });
const desk = desktopConfig(HOME);

before(async () => {
  box = await startBox({ bind: [ROOT] });
  try {
    await sh(`make -s -C ${ROOT} install PREFIX=/usr/local >/dev/null && systemd-sysusers
      mkdir -p /etc/systemd/user/mcp-lazy@.service.d
      printf '[Service]\\nExecStart=\\nExecStart=${SHIMD} --manifest \${MCP_LAZY_MANIFEST} %%i\\n' > /etc/systemd/user/mcp-lazy@.service.d/test.conf
      id alice >/dev/null 2>&1 || useradd -m -u 1500 alice
      mkdir -p ${HOME}/.config/Claude ${HOME}/project
      systemctl start user@1500.service
      for i in $(seq 100); do ${USERCTL} is-system-running >/dev/null 2>&1 && break; sleep 0.1; done`);
    await sh(`cat > ${HOME}/.claude.json`, code.text);
    await sh(`cat > ${HOME}/.config/Claude/claude_desktop_config.json`, desk.text);
    await sh(`chown -R alice: ${HOME}`);
  } catch (e) {
    await box.stop();
    throw e;
  }
});
after(async () => box && (await box.stop()));

test("import as a desktop user: manifest in ~/.config, sockets enabled in her manager, entries that serve what the servers do", async () => {
  const r = await tryIn(`cd ${HOME} && ${AS_ALICE} ${MCP_LAZY} import`);
  assert.equal(r.code, 0, r.stdout + r.stderr);
  const manifest = `${HOME}/.config/mcp-lazy/manifest.yaml`;
  assert.match(r.stdout, new RegExp(`^Wrote ${manifest}$`, "m"));
  for (const b of ["memory", "my-files", "everything"]) {
    assert.match(r.stdout, new RegExp(`^Enabled and started mcp-lazy@${b}\\.socket \\(user manager\\)$`, "m"));
    assert.equal(await active(`mcp-lazy@${b}.socket`), "active");
    assert.equal((await tryIn(`${USERCTL} is-enabled mcp-lazy@${b}.socket`)).stdout.trim(), "enabled");
    assert.equal(await active(`mcp-lazy@${b}.service`), "inactive", "nothing started yet");
  }
  assert.match(r.stdout, /^remote-api\s+claude-code\s+a remote server: left as it is$/m);
  assert.match(await sh(`stat -c '%a %U' ${manifest} ${RT}/mcp-lazy/memory.sock`), /^600 alice\n600 alice\n$/);
  // The default manifest is the one the units read: entries carry no --manifest.
  const backendArgs = (name) => ["--backend", name === "my files!" ? "my-files" : name];
  assert.equal(await sh(`cat ${HOME}/.claude.json`), code.rewritten(MCP_LAZY, backendArgs));
  assert.equal(await sh(`cat ${HOME}/.config/Claude/claude_desktop_config.json`), desk.rewritten(MCP_LAZY, backendArgs));

  // Short idle timeouts, to watch the backends go (the shims read the manifest when they start).
  // everything, called last, is read as active after its call: 10 s for that read, which the
  // status of her manager takes on a loaded machine.
  await sh(`sed -i -e 's/^  \\(memory\\|my-files\\):$/&\\n    idle_timeout: 4s/' -e 's/^  everything:$/&\\n    idle_timeout: 10s/' ${manifest}`);

  const prefix = [...box.nsenterArgs(), "runuser", "-u", "alice", "--"];
  const env = { HOME, XDG_RUNTIME_DIR: RT, PATH: "/usr/local/bin:/usr/bin:/bin" };
  const cfg = JSON.parse(await sh(`cat ${HOME}/.claude.json`));
  const dcfg = JSON.parse(await sh(`cat ${HOME}/.config/Claude/claude_desktop_config.json`));
  await compareWithDirect(cfg.mcpServers.memory, code.direct.memory, CLIENT_CAPS["claude-code"], { env, prefix, call: ["read_graph", {}] });
  await compareWithDirect(cfg.projects[`${HOME}/project`].mcpServers["my files!"], code.direct["my files!"], CLIENT_CAPS["claude-code"], {
    env,
    prefix,
    call: ["list_allowed_directories", {}],
  });
  await compareWithDirect(dcfg.mcpServers.everything, desk.direct.everything, CLIENT_CAPS["claude-desktop"], { env, prefix, call: ["echo", { message: "hi" }] });

  // `mcp-lazy status` (her manager, her default manifest): every socket listening; the last backend
  // called still active, with its call counted; then each one idle after its idle_timeout.
  const status = async () => JSON.parse(await sh(`${AS_ALICE} ${MCP_LAZY} status --json`));
  const row = (s, name) => s.backends.find((b) => b.name === name);
  let s = await status();
  assert.equal(s.manifest, manifest);
  for (const b of ["memory", "my-files", "everything"]) assert.equal(row(s, b).socket, "listening", JSON.stringify(row(s, b)));
  assert.equal(row(s, "everything").service, "active", JSON.stringify(row(s, "everything")));
  assert.ok(row(s, "everything").calls >= 1, JSON.stringify(row(s, "everything")));
  for (const b of ["memory", "my-files", "everything"]) {
    const t = await sh(`${USERCTL} show -P ExecMainStartTimestampMonotonic mcp-lazy@${b}.service`);
    assert.notEqual(t.trim(), "0", `mcp-lazy@${b}.service ran`);
  }
  assert.ok(
    await waitFor(async () => {
      s = await status();
      return ["memory", "my-files", "everything"].every((b) => row(s, b).service === "idle");
    }, 40000),
    `idle after idle_timeout: ${JSON.stringify(s)}`,
  );
  const table = await sh(`${AS_ALICE} ${MCP_LAZY} status`);
  assert.match(table, /^everything\s.*idle/m);
  assert.equal(await active("mcp-lazy@memory.socket"), "active", "the socket stays for the next call");

  // --undo: both configs back, byte for byte.
  const u = await tryIn(`${AS_ALICE} ${MCP_LAZY} import --undo`);
  assert.equal(u.code, 0, u.stdout + u.stderr);
  assert.equal(await sh(`cat ${HOME}/.claude.json`), code.text);
  assert.equal(await sh(`cat ${HOME}/.config/Claude/claude_desktop_config.json`), desk.text);
  assert.equal(await sh(`stat -c '%U' ${HOME}/.claude.json`), "alice\n");
});

test("a manifest she cannot write: reported, nothing changed", async () => {
  const cfg = JSON.stringify({ mcpServers: { mem: code.direct.memory } }, null, 2);
  await sh(`cat > ${HOME}/other.json && mkdir -p ${HOME}/.config/mcp-lazy && chown -R alice: ${HOME} && chmod 0500 ${HOME}/.config/mcp-lazy`, cfg);
  const r = await tryIn(`cd ${HOME} && ${AS_ALICE} ${MCP_LAZY} import --no-enable --from ${HOME}/other.json`);
  assert.equal(r.code, 1, r.stdout + r.stderr);
  assert.match(r.stderr, new RegExp(`^mcp-lazy: cannot write the manifest ${HOME}/\\.config/mcp-lazy/manifest\\.yaml: Permission denied; nothing was changed$`, "m"));
  assert.equal(await sh(`cat ${HOME}/other.json`), cfg);
  assert.equal((await tryIn(`ls ${HOME}/other.json.mcp-lazy-backup`)).code, 2);
  await sh(`chmod 0700 ${HOME}/.config/mcp-lazy`);
});

test("as root: /etc/mcp-lazy/manifest.yaml and the system manager's sockets", async () => {
  const cfg = JSON.stringify({ mcpServers: { "root mem": { command: "node", args: [code.direct.memory.args[0]], env: { MEMORY_FILE_PATH: "/root/mem.jsonl" } } } }, null, 2);
  await sh("cat > /root/claude.json", cfg);
  // The system manager runs backends as users of their own (README: what a backend may do); this
  // server writes in /root, as root's own client ran it. The manifest (mode 0640, group mcp-lazy)
  // is for the socket group and the shims, which the unit puts in that group; its env values go to
  // /etc/mcp-lazy/secrets/root-mem.env, which the unit reads (secrets.test.mjs).
  await sh(`mkdir -p /etc/systemd/system/mcp-lazy@root-mem.service.d
    printf '[Service]\\nDynamicUser=no\\nUser=root\\nProtectHome=no\\nReadWritePaths=/root\\nBindReadOnlyPaths=${ROOT}\\n' > /etc/systemd/system/mcp-lazy@root-mem.service.d/as-root.conf`);
  const r = await tryIn(`cd /root && env HOME=/root ${MCP_LAZY} import --from /root/claude.json`);
  assert.equal(r.code, 0, r.stdout + r.stderr);
  assert.match(r.stdout, /^Wrote \/etc\/mcp-lazy\/manifest\.yaml$/m);
  assert.match(r.stdout, /^root mem\s+claude-code\s+-> backend 'root-mem'$/m);
  assert.match(r.stdout, /^Enabled and started mcp-lazy@root-mem\.socket \(system manager\)$/m);
  assert.equal((await tryIn("systemctl is-active mcp-lazy@root-mem.socket")).stdout.trim(), "active");
  assert.match(await sh("stat -c '%a %U %G' /etc/mcp-lazy/manifest.yaml /run/mcp-lazy/root-mem.sock"), /^640 root mcp-lazy\n660 root mcp-lazy\n$/);
  assert.equal(JSON.parse(await sh("cat /root/claude.json")).mcpServers["root mem"].args.join(" "), "--backend root-mem");
  // The entry, launched as the config says, reaches the backend through the system socket.
  const prefix = [...box.nsenterArgs()];
  const entry = JSON.parse(await sh("cat /root/claude.json")).mcpServers["root mem"];
  await compareWithDirect(entry, { command: "node", args: [code.direct.memory.args[0]], env: { MEMORY_FILE_PATH: "/root/mem.jsonl" } }, CLIENT_CAPS["claude-code"], {
    env: { HOME: "/root", PATH: "/usr/local/bin:/usr/bin:/bin" },
    prefix,
    call: ["read_graph", {}],
  });
  assert.equal((await tryIn("systemctl is-active mcp-lazy@root-mem.service")).stdout.trim(), "active");
});

test("as root: a socket that does not start is said to have failed, not started", async () => {
  // As `systemctl enable --now`, import waits for each start job's end: a socket whose start fails
  // (here its ExecStartPre=) is reported with the job's result, and import exits 1.
  await sh(`mkdir -p /etc/systemd/system/mcp-lazy@no-start.socket.d
    printf '[Socket]\\nExecStartPre=/bin/false\\n' > /etc/systemd/system/mcp-lazy@no-start.socket.d/fail.conf`);
  const cfg = JSON.stringify({ mcpServers: { "no start": desk.direct.everything } }, null, 2);
  await sh("cat > /root/no-start.json", cfg);
  const r = await tryIn(`cd /root && env HOME=/root ${MCP_LAZY} import --from /root/no-start.json`);
  assert.equal(r.code, 1, r.stdout + r.stderr);
  assert.match(r.stdout, /^no start\s+\S+\s+-> backend 'no-start'$/m, r.stdout + r.stderr);
  assert.doesNotMatch(r.stdout, /Enabled and started mcp-lazy@no-start\.socket/);
  assert.match(r.stderr, /^mcp-lazy: mcp-lazy@no-start\.socket: start failed; see 'journalctl -u mcp-lazy@no-start\.socket'$/m);
  assert.equal((await tryIn("systemctl is-active mcp-lazy@no-start.socket")).stdout.trim(), "failed");
});
