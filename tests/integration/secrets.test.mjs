// `mcp-lazy import` as root under a real system manager: a backend's env values go into a file of that
// backend that only root reads (/etc/mcp-lazy/secrets/NAME.env, which its unit reads with
// EnvironmentFile=), never into the manifest the socket group reads. The backend still gets them
// (server-everything's get-env, through a real client), refresh and re-import use them, undo leaves
// none where another user could read it, and an older manifest's values are moved by refresh.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { startBox } from "./lib/box.mjs";
import { MCP_LAZY, ROOT, SANITIZER_DROPIN, SERVER_SCRIPTS, SHIMD, journalUntil, waitFor } from "./lib/env.mjs";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

// What an environment file must carry through exactly: quotes of both kinds, a backslash, what a
// shell would expand, a newline, text beyond ASCII.
const SECRET = "s3cr3t-\"dq\" 'sq' $HOME `id` \\ ü";
const MULTI = "first line\nsecond line";
const MARK = "s3cr3t-"; // what no readable file, journal line or output may hold
// A real server that refuses to start without its secret, as one that needs an API key does.
const WRAPPER = `[ -n "$API_TOKEN" ] || { echo 'API_TOKEN is not set' >&2; exit 1; }; exec ${process.execPath} ${SERVER_SCRIPTS.everything} stdio`;
const server = { command: "sh", args: ["-c", WRAPPER], env: { API_TOKEN: SECRET, MULTI, MCP_LAZY_TEST_PLAIN: "plain-value" } };
const CONFIG = JSON.stringify({ mcpServers: { vault: server } }, null, 2) + "\n";

let box;
async function sh(script, input) {
  const r = await box.exec("bash", ["--norc", "-c", script], input === undefined ? {} : { input });
  if (r.code !== 0) throw new Error(`box: ${script}\n${r.stdout}${r.stderr}`);
  return r.stdout;
}
const tryIn = (script) => box.exec("bash", ["--norc", "-c", script]);
const AS_BOB = "runuser -u bob --";
// root's import, with an undo record of this test's own (the box's /root is the host's, overlaid).
const AS_ROOT = "env HOME=/root XDG_STATE_HOME=/root/secrets-test-state";

// Files that others than their owner may read, holding the mark.
const readableLeaks = () =>
  sh(`{ find /etc /run /var/lib /var/log /var/cache /var/tmp /home -type f -perm /044 -print0; find /root -maxdepth 2 -type f -perm /044 -print0; } 2>/dev/null |
    xargs -0 grep -lF -- '${MARK}' 2>/dev/null || true`);

// The backend's environment, through the rewritten entry, as the client launches it.
async function backendEnv(config = "/root/vault.json", name = "vault") {
  const entry = JSON.parse(await sh(`cat ${config}`)).mcpServers[name];
  const [cmd, ...pre] = box.nsenterArgs();
  const transport = new StdioClientTransport({ command: cmd, args: [...pre, "env", "HOME=/root", entry.command, ...entry.args], stderr: "pipe" });
  const client = new Client({ name: "secrets-test", version: "1.0.0" });
  await client.connect(transport);
  try {
    const r = await client.callTool({ name: "get-env", arguments: {} });
    assert.notEqual(r.isError, true, JSON.stringify(r));
    return JSON.parse(r.content[0].text);
  } finally {
    await client.close();
  }
}

before(async () => {
  box = await startBox({ bind: [ROOT] });
  try {
    await sh(`make -s -C ${ROOT} install PREFIX=/usr/local >/dev/null && systemd-sysusers
      mkdir -p /etc/systemd/system/mcp-lazy@.service.d
      printf '[Service]\\nExecStart=\\nExecStart=${SHIMD} --manifest \${MCP_LAZY_MANIFEST} %%i\\n' > /etc/systemd/system/mcp-lazy@.service.d/test.conf
      ${SANITIZER_DROPIN}
      systemctl daemon-reload
      id bob >/dev/null 2>&1 || useradd -m -u 1600 -G mcp-lazy bob`);
    await sh("umask 077 && cat > /root/vault.json", CONFIG);
  } catch (e) {
    await box.stop();
    throw e;
  }
});
after(async () => box && (await box.stop()));

test("import as root: the values go to a root-only file the unit reads, the manifest keeps their names", async () => {
  const d = await tryIn(`cd /root && ${AS_ROOT} ${MCP_LAZY} import --dry-run --from /root/vault.json`);
  assert.equal(d.code, 0, d.stdout + d.stderr);
  assert.match(d.stdout, /^--- \/etc\/mcp-lazy\/secrets\/vault\.env \(would be written, mode 0600, for root alone: API_TOKEN, MULTI; values not shown\)$/m);
  assert.match(d.stdout, /^ {4}secret_env: \[API_TOKEN, MULTI\]$/m);
  assert.ok(!(d.stdout + d.stderr).includes(MARK), d.stdout + d.stderr);
  assert.equal((await tryIn("ls /etc/mcp-lazy/secrets /etc/mcp-lazy/manifest.yaml")).code, 2, "the dry run wrote nothing");
  const r = await tryIn(`cd /root && ${AS_ROOT} ${MCP_LAZY} import --from /root/vault.json`);
  assert.equal(r.code, 0, r.stdout + r.stderr);
  assert.match(r.stdout, /^Wrote \/etc\/mcp-lazy\/secrets\/vault\.env \(API_TOKEN, MULTI; mode 0600: root reads it, for mcp-lazy@vault\.service\)$/m);
  assert.match(r.stdout, /^vault: MCP_LAZY_TEST_PLAIN stays in the manifest's env/m);
  assert.match(r.stdout, /^vault\s+claude-code\s+-> backend 'vault'$/m);
  assert.ok(!(r.stdout + r.stderr).includes(MARK), r.stdout + r.stderr);

  const manifest = await sh("cat /etc/mcp-lazy/manifest.yaml");
  assert.ok(!manifest.includes(MARK) && !manifest.includes("second line"), manifest);
  assert.match(manifest, /^    secret_env: \[API_TOKEN, MULTI\]$/m);
  assert.match(manifest, /^      MCP_LAZY_TEST_PLAIN: plain-value$/m);
  assert.equal(await sh("stat -c '%a %U %G' /etc/mcp-lazy/manifest.yaml /etc/mcp-lazy/secrets /etc/mcp-lazy/secrets/vault.env"),
    "640 root mcp-lazy\n700 root root\n600 root root\n");

  // bob may connect (the socket group) and read the manifest, but not the secret in any form.
  const b = await tryIn(`${AS_BOB} head -c 10 /etc/mcp-lazy/manifest.yaml >/dev/null && echo manifest-readable
    ${AS_BOB} cat /etc/mcp-lazy/secrets/vault.env; echo "cat: $?"
    ${AS_BOB} systemctl show mcp-lazy@vault.service`);
  assert.match(b.stdout, /^manifest-readable$/m);
  assert.match(b.stdout, /^cat: 1$/m);
  assert.match(b.stderr, /Permission denied/);
  assert.match(b.stdout, /^EnvironmentFiles=\/etc\/mcp-lazy\/secrets\/vault\.env \(ignore_errors=yes\)$/m);
  assert.ok(!(b.stdout + b.stderr).includes(MARK), b.stdout + b.stderr);

  // The backend (started by its socket, its secret from the file) gets every value exactly.
  const env = await backendEnv();
  assert.equal(env.API_TOKEN, SECRET);
  assert.equal(env.MULTI, MULTI);
  assert.equal(env.MCP_LAZY_TEST_PLAIN, "plain-value");
  assert.equal((await tryIn("systemctl is-active mcp-lazy@vault.service")).stdout.trim(), "active");

  const status = await tryIn(`${MCP_LAZY} status; ${MCP_LAZY} status --json`);
  assert.match(status.stdout, /vault/);
  assert.ok(!(status.stdout + status.stderr).includes(MARK));
  assert.equal(await readableLeaks(), "");
  assert.equal(await sh(`journalctl -q -o cat | grep -cF -- '${MARK}' || true`), "0\n");
});

test("refresh as root starts the server with its secrets; one who cannot read them is told so", async () => {
  const r = await tryIn(`${MCP_LAZY} refresh --check vault`);
  assert.equal(r.code, 0, r.stdout + r.stderr);
  assert.match(r.stdout, /^vault:\n {2}matches the manifest$/m);
  // Without the file (bob cannot read it), the server would start without API_TOKEN: refresh says why.
  const b = await tryIn(`cd /tmp && ${AS_BOB} ${MCP_LAZY} refresh --check --manifest /etc/mcp-lazy/manifest.yaml vault`);
  assert.equal(b.code, 1, b.stdout + b.stderr);
  assert.match(b.stdout, /^ {2}FAILED: it gets API_TOKEN from \/etc\/mcp-lazy\/secrets\/vault\.env, which cannot be read \(Permission denied\): run refresh as root, or with the variable in refresh's own environment$/m);
  // ...and the server really needs it: given in refresh's own environment, it starts.
  const e = await tryIn(`cd /tmp && ${AS_BOB} env API_TOKEN=other MULTI=x ${MCP_LAZY} refresh --check --manifest /etc/mcp-lazy/manifest.yaml vault`);
  assert.equal(e.code, 0, e.stdout + e.stderr);
  assert.match(e.stdout, /^ {2}matches the manifest$/m);
});

test("re-importing the same server (same env, from another config) refreshes its backend", async () => {
  await sh("umask 077 && cat > /root/again.json", JSON.stringify({ mcpServers: { "vault again": server } }, null, 2) + "\n");
  const r = await tryIn(`cd /root && ${AS_ROOT} ${MCP_LAZY} import --from /root/again.json`);
  assert.equal(r.code, 0, r.stdout + r.stderr);
  assert.match(r.stdout, /^vault again\s+claude-code\s+-> backend 'vault'$/m);
  const manifest = await sh("cat /etc/mcp-lazy/manifest.yaml");
  assert.doesNotMatch(manifest, /vault-2/);
  assert.ok(!manifest.includes(MARK));
  assert.equal(await sh("stat -c '%a %U' /etc/mcp-lazy/secrets/vault.env"), "600 root\n");
  assert.equal((await backendEnv()).API_TOKEN, SECRET);
});

test("undo puts the configs back byte for byte; the secret stays where only root reads it", async () => {
  const r = await tryIn(`cd /root && ${AS_ROOT} ${MCP_LAZY} import --undo`);
  assert.equal(r.code, 0, r.stdout + r.stderr);
  assert.match(r.stdout, /^Put back \/root\/vault\.json$/m);
  assert.equal(await sh("cat /root/vault.json"), CONFIG);
  assert.equal(await sh("stat -c '%a' /root/vault.json /root/again.json; ls /root | grep -c backup || true"), "600\n600\n0\n");
  assert.equal(await sh("stat -c '%a %U' /etc/mcp-lazy/secrets/vault.env"), "600 root\n");
  assert.ok(!(await sh("cat /etc/mcp-lazy/manifest.yaml")).includes(MARK));
  assert.equal(await readableLeaks(), "");
});

test("refresh moves the values of an older manifest (or one edited by hand) into secrets files", async () => {
  // A backend as an older import wrote it: its env in the manifest, which the group reads; and a
  // secret its admin already moved into its file by hand, as the README said before (kept).
  await sh(`install -m 0600 /dev/stdin /etc/mcp-lazy/secrets/old.env <<<"# by hand"$'\\n'"HAND_TOKEN='${MARK}hand'"
    sed -i 's/^backends:$/backends:\\n  old:\\n    command: [sh, -c, "exit 1"]\\n    env: {OLD_TOKEN: ${MARK}old}/' /etc/mcp-lazy/manifest.yaml
    grep -q 'OLD_TOKEN: ${MARK}old' /etc/mcp-lazy/manifest.yaml`);
  const c = await tryIn(`${MCP_LAZY} refresh --check vault`);
  assert.equal(c.code, 1, c.stdout + c.stderr);
  assert.match(c.stdout, /^The manifest holds env values that the socket group can read: 'mcp-lazy refresh' moves them into secrets files\.$/m);
  const r = await tryIn(`${MCP_LAZY} refresh vault`);
  assert.equal(r.code, 0, r.stdout + r.stderr);
  assert.match(r.stdout, /^Wrote \/etc\/mcp-lazy\/secrets\/old\.env \(HAND_TOKEN, OLD_TOKEN; mode 0600/m);
  const manifest = await sh("cat /etc/mcp-lazy/manifest.yaml");
  assert.ok(!manifest.includes(MARK), manifest);
  assert.match(manifest, /^ {4}secret_env: \[HAND_TOKEN, OLD_TOKEN\]$/m);
  assert.equal(await sh("stat -c '%a %U' /etc/mcp-lazy/secrets/old.env; cat /etc/mcp-lazy/secrets/old.env"),
    `600 root\nHAND_TOKEN="${MARK}hand"\nOLD_TOKEN="${MARK}old"\n`);
  assert.equal(await readableLeaks(), "");
  // vault's file was left as it was.
  assert.match(await sh("cat /etc/mcp-lazy/secrets/vault.env"), /^API_TOKEN="s3cr3t-\\"dq\\" 'sq' \\\$HOME \\`id\\` \\\\ ü"$/m);
});

test("a shim started without the unit (the frontend's direct activation) says the secrets are missing", async () => {
  // Only the unit reads the secrets file: a shim the frontend starts itself has none, and says so.
  // (The frontend starts one itself when nothing listens on the socket.)
  await sh("systemctl stop mcp-lazy@vault.socket mcp-lazy@vault.service");
  const [cmd, ...pre] = box.nsenterArgs();
  const transport = new StdioClientTransport({
    command: cmd,
    args: [...pre, "env", "HOME=/root", MCP_LAZY, "--backend", "vault", "--activation=direct", "--shimd", SHIMD],
    stderr: "pipe",
  });
  let stderr = "";
  transport.stderr?.on("data", (d) => (stderr += d));
  const client = new Client({ name: "secrets-test", version: "1.0.0" });
  await client.connect(transport).catch((e) => assert.fail(`${e.message}\n${stderr}`));
  try {
    const r = await client.callTool({ name: "echo", arguments: { message: "x" } });
    assert.equal(r.isError, true, JSON.stringify(r) + stderr);
  } finally {
    await client.close();
  }
  assert.match(stderr, /Backend 'vault' names API_TOKEN in secret_env, but the shim's environment lacks it: the backend starts without it \(mcp-lazy@vault\.service reads it from its secrets file, \/etc\/mcp-lazy\/secrets\/vault\.env; a shim started otherwise gets none\)\./);
  assert.match(stderr, /API_TOKEN is not set/);
  assert.ok(!stderr.includes(MARK), stderr);
});

// The secrets directory agrees with the manifest (REVIEW9): a value systemd would refuse is named and
// changes nothing; a file no backend names in secret_env is put aside, never handed on.
const everything = (env) => ({ command: process.execPath, args: [SERVER_SCRIPTS.everything, "stdio"], ...(env ? { env } : {}) });
// Another server than everything's node: the same server behind sh.
const other = (env) => ({ command: "/bin/sh", args: ["-c", `exec ${process.execPath} ${SERVER_SCRIPTS.everything} stdio`], ...(env ? { env } : {}) });
async function importAs(file, servers) {
  await sh(`umask 077 && cat > /root/${file}`, JSON.stringify({ mcpServers: servers }, null, 2) + "\n");
  const r = await tryIn(`cd /root && ${AS_ROOT} ${MCP_LAZY} import --from /root/${file}`);
  return r;
}
async function resetManifest() {
  await sh(`${AS_ROOT} ${MCP_LAZY} import --undo >/dev/null; systemctl stop 'mcp-lazy@*.socket' 'mcp-lazy@*.service'
    mkdir -p -m 0700 /etc/mcp-lazy/secrets && printf 'backends: {}\\n' > /etc/mcp-lazy/manifest.yaml`);
}
// The README's recipe before secret_env (a shell script): db's secret written by hand into
// secrets/db.env, db in the manifest with neither env nor secret_env.
const handWrittenDb = `install -m 0600 /dev/stdin /etc/mcp-lazy/secrets/db.env <<<'API_TOKEN=${MARK}db'
    cat > /etc/mcp-lazy/manifest.yaml <<'Y'
backends:
  db:
    command: [${JSON.stringify(process.execPath)}, ${JSON.stringify(SERVER_SCRIPTS.everything)}, stdio]
Y`;
const orphans = (name) => sh(`cd /etc/mcp-lazy/secrets && for f in ${name}.env.orphaned-*; do [ -e "$f" ] && stat -c '%a %U' "$f" && cat "$f"; done; true`);

test("a value systemd refuses (a Unicode noncharacter): import names the variable, not the value; that server alone fails", async () => {
  await resetManifest();
  const r = await importAs("nc.json", {
    nc: everything({ API_TOKEN: `${MARK}nc`, OTHER: `${MARK}other \u{FDD0}` }),
    ok: other({ OK_TOKEN: `${MARK}ok` }),
  });
  assert.equal(r.code, 1, r.stdout + r.stderr);
  assert.match(r.stdout, /^nc\s+claude-code\s+FAILED, left as it is: its env OTHER cannot go into its secrets file: its value holds a Unicode noncharacter \(U\+FDD0\.\.U\+FDEF, U\+xFFFE or U\+xFFFF\), which systemd refuses$/m);
  assert.match(r.stdout, /^ok\s+claude-code\s+-> backend 'ok'$/m);
  // The earlier tests' vault is gone from the manifest: its file is put aside.
  assert.match(r.stderr, /^mcp-lazy: \/etc\/mcp-lazy\/secrets\/vault\.env belongs to no backend of the manifest that names it in secret_env, so no unit may hand it on: renamed \/etc\/mcp-lazy\/secrets\/vault\.env\.orphaned-\d{8}T\d{6} \(mode 0600\)$/m);
  assert.match(await orphans("vault"), /^600 root\nAPI_TOKEN=/);
  assert.ok(!(r.stdout + r.stderr).includes(MARK), r.stdout + r.stderr);
  assert.equal((await tryIn("ls /etc/mcp-lazy/secrets/nc.env")).code, 2, "no file written");
  assert.equal(await sh("cat /etc/mcp-lazy/secrets/ok.env"), `OK_TOKEN="${MARK}ok"\n`);
  const manifest = await sh("cat /etc/mcp-lazy/manifest.yaml");
  assert.doesNotMatch(manifest, /^ {2}nc:/m);
  assert.match(manifest, /^ {2}ok:/m);
});

test("re-importing a server without its old variable: the backend keeps it, and import says so", async () => {
  await resetManifest();
  let r = await importAs("api.json", { api: everything({ TOKEN: `${MARK}old` }) });
  assert.equal(r.code, 0, r.stdout + r.stderr);
  assert.match(r.stderr, /secrets\/ok\.env belongs to no backend .*: renamed /);
  assert.equal((await backendEnv("/root/api.json", "api")).TOKEN, `${MARK}old`);
  await sh(`${AS_ROOT} ${MCP_LAZY} import --undo >/dev/null; systemctl stop mcp-lazy@api.service`);
  r = await importAs("api.json", { api: everything() });
  assert.equal(r.code, 0, r.stdout + r.stderr);
  assert.match(r.stdout, /^api\s+claude-code\s+-> backend 'api'$/m);
  assert.match(r.stdout, /^Backend 'api' keeps TOKEN from \/etc\/mcp-lazy\/secrets\/api\.env, which this config does not set \(an earlier import's, or written by hand\): remove them there to revoke them\.$/m);
  assert.match(await sh("cat /etc/mcp-lazy/manifest.yaml"), /^ {4}secret_env: \[TOKEN\]$/m);
});

test("a backend gone from the manifest: another server under its name gets none of its secrets", async () => {
  await resetManifest();
  // 1. No env: the old file is put aside, not handed on.
  let r = await importAs("other.json", { api: other() });
  assert.equal(r.code, 0, r.stdout + r.stderr);
  assert.match(r.stderr, /secrets\/api\.env belongs to no backend .*: renamed \/etc\/mcp-lazy\/secrets\/api\.env\.orphaned-/);
  assert.equal((await backendEnv("/root/other.json", "api")).TOKEN, undefined);
  assert.match(await orphans("api"), new RegExp(`^600 root\nTOKEN="${MARK}old"\n$`));
  assert.doesNotMatch(await sh("cat /etc/mcp-lazy/manifest.yaml"), /secret_env/);
  await sh("rm -f /etc/mcp-lazy/secrets/api.env.orphaned-*");
  // 2. Its own env: the new file holds that alone (nothing adopted).
  await resetManifest();
  await sh(`install -m 0600 /dev/stdin /etc/mcp-lazy/secrets/api.env <<<'TOKEN=${MARK}hand'`);
  r = await importAs("other.json", { api: other({ NEW: `${MARK}new` }) });
  assert.equal(r.code, 0, r.stdout + r.stderr);
  assert.equal(await sh("cat /etc/mcp-lazy/secrets/api.env"), `NEW="${MARK}new"\n`);
  assert.match(await sh("cat /etc/mcp-lazy/manifest.yaml"), /^ {4}secret_env: \[NEW\]$/m);
  let env = await backendEnv("/root/other.json", "api");
  assert.equal(env.TOKEN, undefined);
  assert.equal(env.NEW, `${MARK}new`);
  assert.match(await orphans("api"), new RegExp(`^600 root\nTOKEN=${MARK}hand\n$`));
  await sh("rm -f /etc/mcp-lazy/secrets/api.env.orphaned-*");
  // 3. Only a name that stays in the manifest's env (nothing moves): the file is put aside too.
  await resetManifest();
  await sh(`install -m 0600 /dev/stdin /etc/mcp-lazy/secrets/api.env <<<'TOKEN=${MARK}hand'`);
  r = await importAs("other.json", { api: other({ LD_BIND_NOW: "1" }) });
  assert.equal(r.code, 0, r.stdout + r.stderr);
  env = await backendEnv("/root/other.json", "api");
  assert.equal(env.TOKEN, undefined);
  assert.equal(env.LD_BIND_NOW, "1");
  assert.match(await orphans("api"), new RegExp(`^600 root\nTOKEN=${MARK}hand\n$`));
  assert.doesNotMatch(await sh("cat /etc/mcp-lazy/manifest.yaml"), /secret_env/);
  assert.equal(await readableLeaks(), "");
});

test("refresh of another manifest than the system one reads no secrets file (its units do not either)", async () => {
  // A manifest with secret_env and a secrets/ beside it, as a copy of /etc's would have: no unit of
  // it reads that file, so refresh starts the server without it (this one then fails, needing
  // API_TOKEN) and says why, instead of checking what the backend will never run with.
  await sh(`mkdir -p /root/copy/secrets && chmod 0700 /root/copy/secrets
    install -m 0600 /dev/stdin /root/copy/secrets/vault.env <<<'API_TOKEN=${MARK}copy'
    cat > /root/copy/manifest.yaml <<'Y'
backends:
  vault:
    command: [sh, -c, ${JSON.stringify(WRAPPER)}]
    secret_env: [API_TOKEN]
Y`);
  const r = await tryIn(`cd /root && ${AS_ROOT} ${MCP_LAZY} refresh --check --manifest /root/copy/manifest.yaml vault`);
  assert.equal(r.code, 1, r.stdout + r.stderr);
  assert.match(r.stdout, /^ {2}secret_env is ignored: only the units of the system manager's manifest read a secrets file, so this backend starts without API_TOKEN$/m);
  assert.match(r.stdout, /^ {2}FAILED: /m);
  assert.ok(!(r.stdout + r.stderr).includes(MARK), r.stdout + r.stderr);
  // mcp-lazy check says so too; of the system manifest, it does not.
  const c = await tryIn(`${MCP_LAZY} check /root/copy/manifest.yaml`);
  assert.equal(c.code, 0, c.stdout + c.stderr);
  assert.match(c.stderr, /^warning: backend 'vault' names API_TOKEN in secret_env, but only the units of the system manager's manifest read a secrets file: with this manifest it starts without them$/m);
  await sh("cp /root/copy/manifest.yaml /etc/mcp-lazy/manifest.yaml");
  const s = await tryIn(`${MCP_LAZY} check /etc/mcp-lazy/manifest.yaml`);
  assert.equal(s.code, 0, s.stdout + s.stderr);
  assert.doesNotMatch(s.stderr, /secret_env/);
});

test("a secrets file written by hand as the README said before secret_env: refresh adopts it, never puts it aside", async () => {
  // The old recipe: the backend in the manifest with neither env nor secret_env, its secret in
  // secrets/db.env by hand, a drop-in reading it (no '-').
  await sh("mkdir -p -m 0700 /etc/mcp-lazy/secrets");
  await resetManifest();
  await sh(`${handWrittenDb}
    mkdir -p /etc/systemd/system/mcp-lazy@db.service.d
    printf '[Service]\\nEnvironmentFile=/etc/mcp-lazy/secrets/db.env\\n' > /etc/systemd/system/mcp-lazy@db.service.d/secret.conf
    systemctl daemon-reload && systemctl start mcp-lazy@db.socket`);
  const r = await tryIn(`cd /root && ${AS_ROOT} ${MCP_LAZY} refresh db`);
  assert.equal(r.code, 0, r.stdout + r.stderr);
  assert.match(r.stdout, /^db: \/etc\/mcp-lazy\/secrets\/db\.env \(written by hand\?\) holds API_TOKEN, which its unit hands on: the manifest now names them in secret_env$/m);
  assert.doesNotMatch(r.stderr, /orphaned/);
  assert.equal(await sh("cat /etc/mcp-lazy/secrets/db.env"), `API_TOKEN=${MARK}db\n`);
  assert.match(await sh("cat /etc/mcp-lazy/manifest.yaml"), /^ {4}secret_env: \[API_TOKEN\]$/m);
  await sh("umask 077 && cat > /root/db.json", JSON.stringify({ mcpServers: { db: { command: MCP_LAZY, args: ["--backend", "db"] } } }) + "\n");
  assert.equal((await backendEnv("/root/db.json", "db")).API_TOKEN, `${MARK}db`);
  await sh("rm -r /etc/systemd/system/mcp-lazy@db.service.d && systemctl daemon-reload");
});

test("a server with a backend's command but another env that stays, or cwd, replaces it without its secrets", async () => {
  // Review 10 LOW-1: the same command alone no longer owns the file; what runs is also its cwd and
  // the env that stays in the manifest (here LD_BIND_NOW; LD_PRELOAD would be another).
  await resetManifest();
  let r = await importAs("db.json", { db: everything({ TOKEN: `${MARK}db` }) });
  assert.equal(r.code, 0, r.stdout + r.stderr);
  await sh(`${AS_ROOT} ${MCP_LAZY} import --undo >/dev/null; systemctl stop mcp-lazy@db.service
    rm -f /etc/mcp-lazy/secrets/*.orphaned-*`);
  r = await importAs("db.json", { db: everything({ LD_BIND_NOW: "1" }) });
  assert.equal(r.code, 0, r.stdout + r.stderr);
  assert.match(r.stdout, /^db\s+claude-code\s+-> backend 'db'$/m);
  const env = await backendEnv("/root/db.json", "db");
  assert.equal(env.TOKEN, undefined);
  assert.equal(env.LD_BIND_NOW, "1");
  assert.match(r.stderr, /^mcp-lazy: backend 'db' no longer runs what it ran \(env LD_BIND_NOW changed\), so it gets none of the values its secrets file had, only those of its own config$/m);
  assert.match(r.stderr, /secrets\/db\.env belongs to no backend .*: renamed /);
  assert.match(await orphans("db"), new RegExp(`^600 root\nTOKEN="${MARK}db"\n$`));
  assert.doesNotMatch(await sh("cat /etc/mcp-lazy/manifest.yaml"), /secret_env/);
  assert.ok(!(r.stdout + r.stderr).includes(MARK), r.stdout + r.stderr);
  await sh(`${AS_ROOT} ${MCP_LAZY} import --undo >/dev/null; rm -f /etc/mcp-lazy/secrets/db.env.orphaned-*`);
});

test("the same command with another value of a variable that moves (NODE_OPTIONS) replaces it without its secrets", async () => {
  // Review 12 MEDIUM-1: a new value of any variable is another definition, not only a new name: the
  // config that sets NODE_OPTIONS anew gets none of the old file's values (the token).
  await resetManifest();
  let r = await importAs("db.json", { db: everything({ TOKEN: `${MARK}db`, NODE_OPTIONS: "--max-old-space-size=512" }) });
  assert.equal(r.code, 0, r.stdout + r.stderr);
  await sh(`${AS_ROOT} ${MCP_LAZY} import --undo >/dev/null; systemctl stop mcp-lazy@db.service
    rm -f /etc/mcp-lazy/secrets/*.orphaned-*`);
  r = await importAs("db.json", { db: everything({ NODE_OPTIONS: "--max-old-space-size=256" }) });
  assert.equal(r.code, 0, r.stdout + r.stderr);
  assert.match(r.stderr, /^mcp-lazy: backend 'db' no longer runs what it ran \(env NODE_OPTIONS has another value\), so it gets none of the values its secrets file had, only those of its own config$/m);
  const env = await backendEnv("/root/db.json", "db");
  assert.equal(env.TOKEN, undefined);
  assert.equal(env.NODE_OPTIONS, "--max-old-space-size=256");
  assert.equal(await sh("cat /etc/mcp-lazy/secrets/db.env"), `NODE_OPTIONS="--max-old-space-size=256"\n`);
  assert.match(await orphans("db"), new RegExp(`^600 root\nNODE_OPTIONS="--max-old-space-size=512"\nTOKEN="${MARK}db"\n$|^600 root\nTOKEN="${MARK}db"\nNODE_OPTIONS="--max-old-space-size=512"\n$`));
  assert.match(await sh("cat /etc/mcp-lazy/manifest.yaml"), /^ {4}secret_env: \[NODE_OPTIONS\]$/m);
  assert.ok(!(r.stdout + r.stderr).includes(MARK), r.stdout + r.stderr);
  await sh(`${AS_ROOT} ${MCP_LAZY} import --undo >/dev/null; rm -f /etc/mcp-lazy/secrets/db.env.orphaned-*`);
});

test("a backend moved to another host: refresh puts its file aside, writes a valid manifest, and refresh --check says a file systemd would ignore", async () => {
  // Review 12 MEDIUM-2: a leftover db.env was adopted into secret_env of a backend with host:,
  // which the loader refuses, after other files were renamed; every later refresh failed.
  await resetManifest();
  await sh(`install -m 0600 /dev/stdin /etc/mcp-lazy/secrets/db.env <<<'PGPASSWORD=${MARK}db'
    install -m 0600 /dev/stdin /etc/mcp-lazy/secrets/gone.env <<<'TOKEN=${MARK}gone'
    cat > /etc/mcp-lazy/manifest.yaml <<'Y'
backends:
  db:
    host: ssh://db.example
  ev:
    command: [${JSON.stringify(process.execPath)}, ${JSON.stringify(SERVER_SCRIPTS.everything)}, stdio]
Y`);
  let r = await tryIn(`${MCP_LAZY} refresh --check ev`);
  assert.match(r.stderr, /secrets\/db\.env belongs to no backend .*: it would be renamed /);
  r = await tryIn(`${MCP_LAZY} refresh ev`);
  assert.equal(r.code, 0, r.stdout + r.stderr);
  assert.match(r.stderr, /^mcp-lazy: backend 'db' lives on another host \(host:\), so it gets none of the values its secrets file had, only those of its own config$/m);
  assert.doesNotMatch(r.stderr, /would not be valid/);
  assert.match(await orphans("db"), new RegExp(`^600 root\nPGPASSWORD=${MARK}db\n$`));
  assert.match(await orphans("gone"), new RegExp(`^600 root\nTOKEN=${MARK}gone\n$`));
  assert.doesNotMatch(await sh("cat /etc/mcp-lazy/manifest.yaml"), /secret_env/);
  assert.equal((await tryIn(`${MCP_LAZY} check /etc/mcp-lazy/manifest.yaml`)).code, 0);
  await sh("rm -f /etc/mcp-lazy/secrets/*.orphaned-*");
  // Review 12 LOW-2: a file whose line systemd cannot read (it ignores the whole file) is said and counted.
  await resetManifest();
  await sh(`install -m 0600 /dev/stdin /etc/mcp-lazy/secrets/db.env <<<'API_TOKEN=${MARK}db
no equals sign'
    cat > /etc/mcp-lazy/manifest.yaml <<'Y'
backends:
  db:
    command: [${JSON.stringify(process.execPath)}, ${JSON.stringify(SERVER_SCRIPTS.everything)}, stdio]
    secret_env: [API_TOKEN]
Y`);
  r = await tryIn(`${MCP_LAZY} refresh --check db`);
  assert.equal(r.code, 1, r.stdout + r.stderr);
  assert.match(r.stderr, /^mcp-lazy: cannot read \/etc\/mcp-lazy\/secrets\/db\.env:2: not a line of an environment file: systemd ignores the whole file, so mcp-lazy@db\.service starts without any of its values: fix or remove it$/m);
  assert.ok(!(r.stdout + r.stderr).includes(MARK), r.stdout + r.stderr);
  await sh("rm -f /etc/mcp-lazy/secrets/db.env");
});

test("refresh --check counts what refresh would do to the secrets files: a file to adopt, one to put aside", async () => {
  await resetManifest();
  await sh(handWrittenDb);
  let r = await tryIn(`cd /root && ${AS_ROOT} ${MCP_LAZY} refresh db`);
  assert.equal(r.code, 0, r.stdout + r.stderr);
  // Its lists recorded; secret_env taken out again by hand: only the adoption differs.
  await sh("sed -i '/^ *secret_env:/d' /etc/mcp-lazy/manifest.yaml");
  r = await tryIn(`${MCP_LAZY} refresh --check db`);
  assert.equal(r.code, 1, r.stdout + r.stderr);
  assert.match(r.stdout, /^db:\n {2}matches the manifest$/m);
  assert.match(r.stdout, /^db: \/etc\/mcp-lazy\/secrets\/db\.env \(written by hand\?\) holds API_TOKEN, which its unit hands on: 'mcp-lazy refresh' names them in secret_env$/m);
  assert.match(r.stdout, /^The manifest differs from the servers \(1 difference\): run 'mcp-lazy refresh'\.$/m);
  assert.doesNotMatch(await sh("cat /etc/mcp-lazy/manifest.yaml"), /secret_env/, "--check wrote nothing");
  // refresh does it, though the servers' lists match.
  r = await tryIn(`${MCP_LAZY} refresh db`);
  assert.equal(r.code, 0, r.stdout + r.stderr);
  assert.match(await sh("cat /etc/mcp-lazy/manifest.yaml"), /^ {4}secret_env: \[API_TOKEN\]$/m);
  r = await tryIn(`${MCP_LAZY} refresh --check db`);
  assert.equal(r.code, 0, r.stdout + r.stderr);
  // A file no backend owns: --check says it would be put aside, refresh does.
  await sh(`install -m 0600 /dev/stdin /etc/mcp-lazy/secrets/gone.env <<<'TOKEN=${MARK}gone'`);
  r = await tryIn(`${MCP_LAZY} refresh --check db`);
  assert.equal(r.code, 1, r.stdout + r.stderr);
  assert.match(r.stderr, /^mcp-lazy: \/etc\/mcp-lazy\/secrets\/gone\.env belongs to no backend of the manifest that names it in secret_env: it would be renamed \/etc\/mcp-lazy\/secrets\/gone\.env\.orphaned-/m);
  assert.equal(await sh("cat /etc/mcp-lazy/secrets/gone.env"), `TOKEN=${MARK}gone\n`);
  r = await tryIn(`${MCP_LAZY} refresh db`);
  assert.equal(r.code, 0, r.stdout + r.stderr);
  assert.match(await orphans("gone"), new RegExp(`^600 root\nTOKEN=${MARK}gone\n$`));
  assert.ok(!(r.stdout + r.stderr).includes(MARK), r.stdout + r.stderr);
  await sh("rm -f /etc/mcp-lazy/secrets/gone.env.orphaned-*");
});

test("a secrets directory others may write to: import refuses it, naming it, and changes nothing", async () => {
  await resetManifest();
  await sh(`install -m 0600 /dev/stdin /etc/mcp-lazy/secrets/left.env <<<'TOKEN=${MARK}left'
    chmod 0777 /etc/mcp-lazy/secrets`);
  try {
    const servers = { bad: everything({ TOKEN: `${MARK}bad` }) };
    const r = await importAs("bad.json", servers);
    assert.equal(r.code, 1, r.stdout + r.stderr);
    assert.match(r.stderr, /^mcp-lazy: \/etc\/mcp-lazy\/secrets must be root's own and writable by root alone \(mode 0700, as installed\); nothing was changed$/m);
    assert.ok(!(r.stdout + r.stderr).includes(MARK), r.stdout + r.stderr);
    // Nothing put aside (left.env belongs to no backend), nothing written.
    assert.equal(await sh("cat /etc/mcp-lazy/secrets/left.env; ls /etc/mcp-lazy/secrets | grep -c -e orphaned -e '^bad' || true"), `TOKEN=${MARK}left\n0\n`);
    assert.equal(await sh("cat /etc/mcp-lazy/manifest.yaml"), "backends: {}\n");
    assert.equal(await sh("cat /root/bad.json"), JSON.stringify({ mcpServers: servers }, null, 2) + "\n");
  } finally {
    await sh("chmod 0700 /etc/mcp-lazy/secrets && rm -f /etc/mcp-lazy/secrets/left.env");
  }
});

test("a secret imported anew reaches the running backend: import reloads its unit; a file edited by hand, systemctl reload", async () => {
  // The manifest keeps only the variable's name: it says nothing new when the value changes, so the
  // running shim (started with the old file) would keep handing the old value on.
  await resetManifest();
  let r = await importAs("rot.json", { rot: everything({ TOKEN: `${MARK}one` }) });
  assert.equal(r.code, 0, r.stdout + r.stderr);
  assert.equal((await backendEnv("/root/rot.json", "rot")).TOKEN, `${MARK}one`);
  const mainPid = async () => (await sh("systemctl show -P MainPID mcp-lazy@rot.service")).trim();
  const first = await mainPid();
  assert.notEqual(first, "0", "the shim runs (idle_timeout: 5 minutes)");

  await sh(`${AS_ROOT} ${MCP_LAZY} import --undo >/dev/null`);
  r = await importAs("rot.json", { rot: everything({ TOKEN: `${MARK}two` }) });
  assert.equal(r.code, 0, r.stdout + r.stderr);
  assert.match(await sh("cat /etc/mcp-lazy/manifest.yaml"), /^ {4}secret_env: \[TOKEN\]$/m);
  assert.match(r.stdout, /^Reloaded mcp-lazy@rot\.service: its shim stops once no call is in flight, and the next call starts it with the new values$/m);
  assert.ok(!(r.stdout + r.stderr).includes(MARK), r.stdout + r.stderr);
  // Nothing is in flight: it stops at once (the next connection would wait for that in the backlog).
  assert.ok(await waitFor(async () => (await mainPid()) !== first, 30000, 200), "the shim stopped");
  assert.equal((await backendEnv("/root/rot.json", "rot")).TOKEN, `${MARK}two`);
  const log = await journalUntil(sh, "mcp-lazy@rot.service", (l) => /Received SIGHUP/.test(l));
  assert.match(log, /Stopping once no call is in flight, to start again with \/etc\/mcp-lazy\/manifest\.yaml and the environment read anew\./);
  // The definition the shim compares did not change (the manifest keeps the variable's name only):
  // the reload came from import.
  assert.doesNotMatch(log, /Backend 'rot' changed/);

  // By hand: the README's way, systemctl reload.
  const second = await mainPid();
  assert.notEqual(second, "0");
  await sh(`printf 'TOKEN=${MARK}three\\n' > /etc/mcp-lazy/secrets/rot.env && systemctl reload mcp-lazy@rot.service`);
  assert.ok(await waitFor(async () => (await mainPid()) !== second, 30000, 200), "the shim stopped");
  assert.equal((await backendEnv("/root/rot.json", "rot")).TOKEN, `${MARK}three`);
  await sh(`${AS_ROOT} ${MCP_LAZY} import --undo >/dev/null; rm -f /etc/mcp-lazy/secrets/rot.env.orphaned-*`);
});
