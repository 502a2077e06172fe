// `make install` three ways, in a box with a real systemd: a packager's DESTDIR install (files only),
// a user's unprivileged install under ~/.local (user units, nothing system-wide), and root's install
// (the socket group through systemd-sysusers, and a daemon-reload), each then used for real.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { startBox } from "./lib/box.mjs";
import { ROOT, SERVER_SCRIPTS } from "./lib/env.mjs";

let box;
const sh = async (script) => {
  const r = await box.exec("bash", ["-c", script]);
  if (r.code !== 0) throw new Error(`box: ${script}\n${r.stdout}${r.stderr}`);
  return r.stdout;
};
const MANIFEST = `backends:
  everything:
    command: [node, ${SERVER_SCRIPTS.everything}, stdio]
tools:
  - {name: echo, backend: everything, input_schema: {type: object, properties: {message: {type: string}}}}
`;
const ALICE = "runuser -u alice -- env XDG_RUNTIME_DIR=/run/user/1500 HOME=/home/alice";
const reloads = async () => Number((await sh("journalctl -q -o cat _PID=1 | grep -c '^Reloading' || true")).trim());

before(async () => {
  box = await startBox({ bind: [ROOT] });
  // The box starts as a copy of the host: no group, no units of ours, and an unprivileged user.
  await sh(`getent group mcp-lazy >/dev/null && groupdel mcp-lazy; rm -f /usr/local/bin/mcp-lazy*
    id alice >/dev/null 2>&1 || useradd -m -u 1500 alice
    systemctl start user@1500.service
    for i in $(seq 50); do ${ALICE} systemctl --user is-system-running >/dev/null 2>&1 && break; sleep 0.1; done`);
});
after(async () => box && (await box.stop()));

test("DESTDIR: the files, and neither systemd-sysusers nor a daemon-reload", async () => {
  const before = await reloads();
  const out = await sh(`make -s -C ${ROOT} install DESTDIR=/tmp/stage PREFIX=/usr 2>&1`);
  assert.doesNotMatch(out, /sysusers|daemon-reload/);
  const files = (await sh("cd /tmp/stage && find . -type f | LC_ALL=C sort")).trim().split("\n");
  assert.deepEqual(files, [
    "./lib/systemd/system/mcp-lazy@.service",
    "./lib/systemd/system/mcp-lazy@.socket",
    "./usr/bin/mcp-lazy",
    "./usr/bin/mcp-lazy-shimd",
    "./usr/lib/systemd/user/mcp-lazy@.service",
    "./usr/lib/systemd/user/mcp-lazy@.socket",
    "./usr/lib/sysusers.d/mcp-lazy.conf",
    "./usr/share/doc/mcp-lazy/README.md",
    "./usr/share/man/man1/mcp-lazy.1",
    "./usr/share/man/man5/mcp-lazy.manifest.5",
    "./usr/share/man/man8/mcp-lazy-shimd.8",
  ]);
  assert.match(await sh("cat /tmp/stage/lib/systemd/system/mcp-lazy@.service"), /^ExecStart=\/usr\/bin\/mcp-lazy-shimd /m);
  assert.equal((await box.exec("getent", ["group", "mcp-lazy"])).code, 2, "no group was made");
  assert.equal(await reloads(), before, "no daemon-reload");
  // The staged man pages are the real ones.
  assert.match(await sh("MANWIDTH=80 man -l /tmp/stage/usr/share/man/man5/mcp-lazy.manifest.5 | head -5"), /mcp-lazy.manifest - the backends and tools/);
});

test("a user without root: ~/.local, user units only, and their manager runs the backend", async () => {
  const out = await sh(`cd /tmp && ${ALICE} make -s -C ${ROOT} install PREFIX=/home/alice/.local 2>&1`);
  assert.doesNotMatch(out, /sysusers|Permission denied/);
  assert.match(out, /systemctl --user daemon-reload/);
  const files = (await sh("cd /home/alice/.local && find . -type f | LC_ALL=C sort")).trim().split("\n");
  assert.deepEqual(files, [
    "./bin/mcp-lazy",
    "./bin/mcp-lazy-shimd",
    "./share/doc/mcp-lazy/README.md",
    "./share/man/man1/mcp-lazy.1",
    "./share/man/man5/mcp-lazy.manifest.5",
    "./share/man/man8/mcp-lazy-shimd.8",
    "./share/systemd/user/mcp-lazy@.service",
    "./share/systemd/user/mcp-lazy@.socket",
  ]);
  assert.equal(await sh("stat -c %U /home/alice/.local/bin/mcp-lazy"), "alice\n");
  // Nothing system-wide.
  assert.equal((await box.exec("bash", ["-c", "ls /usr/local/bin/mcp-lazy /lib/systemd/system/mcp-lazy@.socket /usr/lib/sysusers.d/mcp-lazy.conf"])).code, 2);
  assert.equal((await box.exec("getent", ["group", "mcp-lazy"])).code, 2);
  // Her manager found the units (the install reloaded it), and runs the installed shim.
  await box.exec("bash", ["-c", `cat > /home/alice/mcp.yaml && chown alice: /home/alice/mcp.yaml && ${ALICE} mkdir -p /home/alice/.config/mcp-lazy && ${ALICE} cp /home/alice/mcp.yaml /home/alice/.config/mcp-lazy/manifest.yaml`], { input: MANIFEST });
  await sh(`${ALICE} systemctl --user enable --now mcp-lazy@everything.socket`);
  const call = [
    '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}',
    '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"message":"installed"}}}',
  ].join("\n");
  const r = await box.exec("bash", ["-c", `(cat; sleep 5) | ${ALICE} /home/alice/.local/bin/mcp-lazy --manifest /home/alice/.config/mcp-lazy/manifest.yaml | head -n 2`], { input: call + "\n", timeout: 60000 });
  const answers = r.stdout.trim().split("\n").map((l) => JSON.parse(l));
  assert.deepEqual(answers[1], { jsonrpc: "2.0", id: 2, result: { content: [{ type: "text", text: "Echo: installed" }] } }, r.stdout + r.stderr);
  assert.match(await sh(`${ALICE} systemctl --user show -P ExecStart mcp-lazy@everything.service`), /path=\/home\/alice\/\.local\/bin\/mcp-lazy-shimd/);
  await sh(`${ALICE} systemctl --user stop mcp-lazy@everything.socket mcp-lazy@everything.service`);
});

test("root, no DESTDIR: the socket group and a daemon-reload, so enable --now works at once", async () => {
  const before = await reloads();
  const out = await sh(`make -s -C ${ROOT} install PREFIX=/usr/local 2>&1`);
  assert.match(out, /systemd-sysusers/);
  assert.match(out, /systemctl daemon-reload/);
  assert.equal((await box.exec("getent", ["group", "mcp-lazy"])).code, 0, "the group exists");
  assert.ok((await reloads()) > before, "systemd was reloaded");
  // The failure the issue describes ("Failed to resolve group mcp-lazy") does not happen.
  await box.exec("bash", ["-c", "mkdir -p /etc/mcp-lazy && cat > /etc/mcp-lazy/manifest.yaml"], { input: MANIFEST });
  await sh("systemctl enable --now mcp-lazy@everything.socket");
  assert.match(await sh("stat -c '%a %G' /run/mcp-lazy/everything.sock"), /^660 mcp-lazy\n$/);
  // The man pages are where man looks.
  assert.equal(await sh("readlink -f \"$(man -w mcp-lazy.manifest)\""), "/usr/local/share/man/man5/mcp-lazy.manifest.5\n");
  assert.match(await sh("systemctl cat mcp-lazy@everything.service"), /WantedBy=default\.target/);
});
