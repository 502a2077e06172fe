// Resource URIs that decode with a NUL ("a\u0000b"): a parsed tree has them cut at the NUL, where they
// read as another URI ("a"), one a session may hold. Wherever a subscription's URIs are compared, they
// are compared whole, or refused: the shim's reading of a 2026-07-28 backend's acknowledgement, the
// frontend's subscriptions/listen and the updates it puts on a stream. No systemd needed.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { INIT, MCP_LAZY, RawPeer, SHIMD, TESTS, cleanupPeers } from "./lib/env.mjs";
import { MREQ } from "./lib/eras.mjs";
import { onLines } from "./lib/lines.mjs";

after(cleanupPeers);
const dir = mkdtempSync(join(tmpdir(), "mcp-lazy-nul-uris-"));
after(() => rmSync(dir, { recursive: true, force: true }));

// The backend acknowledges "ok:" URIs as asked, and a "nul:" URI as that URI with "\u0000x" after it.
const partial = join(dir, "partial.yaml");
writeFileSync(
  partial,
  `backends:
  partial:
    command: [node, ${join(TESTS, "servers/partial-listen-modern.mjs")}]
    resources: [{uri: "nul:z", name: z}, {uri: "ok:y", name: y}]
    resource_templates: [{uriTemplate: "ok:long/{x}", name: long}]
tools:
  - {name: echo, backend: partial, input_schema: {type: object}}
`,
);
const direct = (m) => new RawPeer(MCP_LAZY, ["--manifest", m, "--activation=direct", "--shimd", SHIMD]);

test("at a 2026-07-28 backend, an acknowledgement of \"nul:z\\u0000x\" does not subscribe a session to \"nul:z\"", async () => {
  const p = direct(partial);
  assert.ok((await p.request(INIT("2025-11-25"))).result.capabilities.resources.subscribe);
  p.send({ jsonrpc: "2.0", method: "notifications/initialized" });
  const refused = /backend 'partial' does not offer updates of 'nul:z'/;
  // Before the fix the acknowledgement's tree, cut at the NUL, read as one of "nul:z": {} here.
  const first = await p.request({ jsonrpc: "2.0", id: 2, method: "resources/subscribe", params: { uri: "nul:z" } }, 20000);
  assert.match(first.error?.message ?? "", refused, JSON.stringify(first));
  assert.deepEqual((await p.request({ jsonrpc: "2.0", id: 3, method: "resources/subscribe", params: { uri: "ok:y" } }, 20000)).result, {});
  // The stream as it stands does not hold "nul:z" either: asked again, refused again.
  const again = await p.request({ jsonrpc: "2.0", id: 4, method: "resources/subscribe", params: { uri: "nul:z" } }, 20000);
  assert.match(again.error?.message ?? "", refused, JSON.stringify(again));
  await p.close();
  assert.match(p.stderr, /Backend 'partial' acknowledged 1 resource URI with a NUL character \(\\u0000\), which no session subscribed to, ignoring\./);
  assert.doesNotMatch(p.stderr, /AddressSanitizer|runtime error/);
});

test("a resources/subscribe or unsubscribe whose uri is longer than 8192 bytes is refused, one of 8192 held", async () => {
  // A session keeps each URI it holds for its life: before the limit, 1024 of a line's length each.
  const p = direct(partial);
  assert.ok((await p.request(INIT("2025-11-25"))).result.capabilities.resources.subscribe);
  p.send({ jsonrpc: "2.0", method: "notifications/initialized" });
  const longest = "ok:long/" + "x".repeat(8192 - 8);
  const over = longest + "x";
  const tooLong = /^Invalid params: the uri is longer than 8192 bytes, the longest one a subscription takes$/;
  // Before the limit: {} (held), and the unsubscribe forwarded.
  const refused = await p.request({ jsonrpc: "2.0", id: 2, method: "resources/subscribe", params: { uri: over } }, 20000);
  assert.equal(refused.error?.code, -32602, JSON.stringify(refused).slice(0, 300));
  assert.match(refused.error.message, tooLong);
  // Escapes count as what they decode to: 8192 bytes written with \u escapes are not too long.
  const escaped = await p.request(
    JSON.stringify({ jsonrpc: "2.0", id: 3, method: "resources/subscribe", params: { uri: longest } }).replace(/x/g, "\\u0078"),
    20000,
  );
  assert.deepEqual(escaped.result, {}, JSON.stringify(escaped).slice(0, 300));
  const unsub = await p.request({ jsonrpc: "2.0", id: 4, method: "resources/unsubscribe", params: { uri: over } }, 20000);
  assert.equal(unsub.error?.code, -32602, JSON.stringify(unsub).slice(0, 300));
  assert.match(unsub.error.message, tooLong);
  assert.deepEqual((await p.request({ jsonrpc: "2.0", id: 5, method: "resources/unsubscribe", params: { uri: longest } }, 20000)).result, {});
  await p.close();
  assert.doesNotMatch(p.stderr, /AddressSanitizer|runtime error/);
});

test("subscriptions/listen with a URI that holds a NUL is refused, never listened to as the URI its first bytes spell", async () => {
  const p = direct(partial);
  // Before the fix: acknowledged, with "ok:y" among what the stream takes.
  const r = await p.request(MREQ("l1", "subscriptions/listen", { notifications: { resourceSubscriptions: ["ok:y", "ok:y\u0000x"] } }), 20000);
  assert.equal(r.id, "l1", JSON.stringify(r));
  assert.equal(r.error?.code, -32602, JSON.stringify(r));
  assert.match(r.error.message, /subscriptions\/listen: a URI in notifications\.resourceSubscriptions holds a NUL character \(\\u0000\), which no resource URI has \(write it as %00\)/);
  // The id is free again, and the same stream without it is taken.
  p.send(MREQ("l1", "subscriptions/listen", { notifications: { resourceSubscriptions: ["ok:y"] } }));
  const [ack] = await p.next(1, 20000);
  assert.equal(ack.method, "notifications/subscriptions/acknowledged", JSON.stringify(ack));
  assert.deepEqual(ack.params.notifications, { resourceSubscriptions: ["ok:y"] });
  assert.equal(ack.params._meta["io.modelcontextprotocol/subscriptionId"], "l1");
  await p.close();
  assert.doesNotMatch(p.stderr, /AddressSanitizer|runtime error/);
});

test("an update whose uri holds a NUL goes on no stream, not on the one listening to the URI its first bytes spell", async () => {
  // A stand-in for a (remote, or compromised) shim on the backend's socket: on "touch" it sends an
  // update of "ok:y\u0000x", then one of "ok:y", then the call's answer.
  const sock = join(dir, "fake-shim.sock");
  const server = createServer((c) =>
    onLines(c, (line) => {
      const m = JSON.parse(line);
      const answer = (result) => c.write(JSON.stringify({ jsonrpc: "2.0", id: m.id, result }) + "\n");
      if (m.method === "initialize")
        answer({ protocolVersion: "2025-11-25", capabilities: { tools: {}, resources: { subscribe: true } }, serverInfo: { name: "fake", version: "1" } });
      else if (m.method === "resources/subscribe") answer({});
      else if (m.method === "tools/call") {
        for (const [uri, n] of [["ok:y\u0000x", 1], ["ok:y", 2]])
          c.write(JSON.stringify({ jsonrpc: "2.0", method: "notifications/resources/updated", params: { uri, n } }) + "\n");
        answer({ content: [{ type: "text", text: "touched" }] });
      } else if (m.id !== undefined) answer({});
    }),
  );
  await new Promise((r) => server.listen(sock, r));
  after(() => server.close());
  const m = join(dir, "fake.yaml");
  writeFileSync(m, `backends:\n  fake: {command: [x], socket: ${sock}, resources: [{uri: "ok:y", name: y}]}\ntools:\n  - {name: touch, backend: fake, input_schema: {type: object}}\n`);
  const p = new RawPeer(MCP_LAZY, ["--manifest", m, "--activation=systemd"]);
  p.send(MREQ("l1", "subscriptions/listen", { notifications: { resourceSubscriptions: ["ok:y"] } }));
  const [ack] = await p.next(1, 20000);
  assert.deepEqual(ack.params?.notifications, { resourceSubscriptions: ["ok:y"] }, JSON.stringify(ack));
  p.send(MREQ(2, "tools/call", { name: "touch", arguments: {} }));
  const seen = [];
  for (;;) {
    const [msg] = await p.next(1, 20000);
    if (msg.id === 2) break;
    seen.push(msg);
  }
  // Before the fix the first update went on the stream too, printed from the tree: as one of "ok:y".
  assert.deepEqual(seen, [
    {
      jsonrpc: "2.0",
      method: "notifications/resources/updated",
      params: { uri: "ok:y", n: 2, _meta: { "io.modelcontextprotocol/subscriptionId": "l1" } },
    },
  ]);
  await p.close();
  assert.doesNotMatch(p.stderr, /AddressSanitizer|runtime error/);
});
