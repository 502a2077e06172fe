// Backends over vsock (host: vsock:CID:PORT): the frontend connects to a shim whose socket unit
// listens with ListenStream=vsock::PORT. The positive test needs the kernel's vsock loopback
// (VMADDR_CID_LOCAL, 1); where the kernel has none it is skipped, saying so and why.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { boxFleet } from "./lib/fleet.mjs";
import { INIT, MCP_LAZY, RawPeer, cleanupPeers, waitFor } from "./lib/env.mjs";

after(cleanupPeers);

const PORT = 47000 + (process.pid % 1000);

function manifest(port) {
  const dir = mkdtempSync(join(tmpdir(), "mcp-lazy-vsock-"));
  const path = join(dir, "m.yaml");
  writeFileSync(path, `backends:
  vm:
    host: vsock:1:${port}
    remote_name: everything
tools:
  - {name: echo, backend: vm, input_schema: {type: object, properties: {message: {type: string}}}}
`);
  return path;
}

// Does a vsock connection to VMADDR_CID_LOCAL reach a listener on this machine? socat says why not.
async function loopbackWorks() {
  const port = PORT + 500;
  // -d -d: socat says "listening on" once it does, or why it cannot.
  const listener = spawn("socat", ["-d", "-d", "-u", `VSOCK-LISTEN:${port}`, "-"], { stdio: ["ignore", "pipe", "pipe"] });
  let lerr = "";
  let exited = false;
  listener.stderr.on("data", (d) => (lerr += d));
  listener.on("exit", () => (exited = true));
  await waitFor(() => exited || / N listening on /.test(lerr), 20000);
  // socat's last error line, else its last line.
  const why = (s) => (s.match(/^.* E .*$/gm) ?? [s.trim().split("\n").pop()]).pop();
  if (exited) return { ok: false, why: why(lerr) };
  const c = spawnSync("socat", ["-u", "-", `VSOCK-CONNECT:1:${port}`], { input: "x", timeout: 10000, encoding: "utf8" });
  listener.kill("SIGKILL");
  if (c.status === 0) return { ok: true };
  return { ok: false, why: why(c.stderr || lerr || `socat exited ${c.status}`) };
}

test("a vsock backend nobody listens for: a tool error naming the address and the unit to enable, no hang", async (t) => {
  const p = new RawPeer(MCP_LAZY, ["--manifest", manifest(PORT)]);
  await p.request(INIT());
  p.send({ jsonrpc: "2.0", method: "notifications/initialized" });
  const t0 = Date.now();
  const r = await p.request({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "echo", arguments: { message: "x" } } }, 15000);
  assert.ok(Date.now() - t0 < 10000);
  assert.equal(r.result.isError, true);
  assert.match(
    r.result.content[0].text,
    new RegExp(`^backend 'vm' on vsock:1:${PORT} is unreachable \\([^)]+\\): enable mcp-lazy@everything\\.socket there, with ListenStream=vsock::${PORT}$`),
  );
  // While a connect is under way (the kernel waits up to 2 s for an answer from that CID), the
  // frontend goes on: a ping sent after the call is answered before the call's error. A connect the
  // kernel refuses at once (no vsock transport) answers the call first, as nothing waited.
  p.send({ jsonrpc: "2.0", id: 2, method: "tools/call", params: { name: "echo", arguments: { message: "y" } } });
  p.send({ jsonrpc: "2.0", id: 3, method: "ping" });
  const [first, second] = await p.next(2, 15000);
  if (/\(Connection timed out\)/.test(r.result.content[0].text)) assert.deepEqual([first.id, second.id], [3, 2], "the ping was not held up by the connect");
  else t.diagnostic(`the kernel refused the connect at once (${r.result.content[0].text}): no connect was under way to wait for`);
  assert.equal(second.id === 2 ? second.result.isError : first.result.isError, true);
  await p.close();
});

test("a vsock backend behind a systemd socket unit (ListenStream=vsock::PORT)", async (t) => {
  const probe = await loopbackWorks();
  if (!probe.ok) {
    t.skip(`no vsock loopback in this kernel: a connection to VMADDR_CID_LOCAL (1) fails (${probe.why}); ` +
      "it needs CONFIG_VSOCKETS_LOOPBACK (vsock_loopback)");
    return;
  }
  const fleet = await boxFleet();
  try {
    await fleet.sh(`mkdir -p /etc/systemd/system/mcp-lazy@everything.socket.d
      printf '[Socket]\\nListenStream=vsock::${PORT}\\n' > /etc/systemd/system/mcp-lazy@everything.socket.d/vsock.conf
      systemctl daemon-reload && systemctl enable --now mcp-lazy@everything.socket`);
    const m = await fleet.sh(`cat > /tmp/vsock.yaml <<'EOF'
backends:
  vm:
    host: vsock:1:${PORT}
    remote_name: everything
tools:
  - {name: echo, backend: vm, input_schema: {type: object, properties: {message: {type: string}}}}
EOF
echo /tmp/vsock.yaml`);
    fleet.manifestPath = m.trim();
    const s = await fleet.session();
    const r = await s.callTool({ name: "echo", arguments: { message: "over vsock" } });
    assert.equal(r.content[0].text, "Echo: over vsock");
    await s.close();
  } finally {
    await fleet.stop();
  }
});
