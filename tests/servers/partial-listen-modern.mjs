// A 2026-07-28-only backend whose subscriptions/listen takes only the URIs that start with "ok:": its
// acknowledgement leaves the others out (a resource it lists but does not offer updates of). A URI that
// starts with "nul:" it acknowledges as another: the same with "\u0000x" after it.
import { createInterface } from "node:readline";

const send = (m) => process.stdout.write(JSON.stringify(m) + "\n");
const meta = { "io.modelcontextprotocol/serverInfo": { name: "partial-listen", version: "1" } };

createInterface({ input: process.stdin }).on("line", (line) => {
  const m = JSON.parse(line);
  if (m.id === undefined) return;
  if (m.method === "server/discover")
    return send({
      jsonrpc: "2.0",
      id: m.id,
      result: {
        resultType: "complete",
        supportedVersions: ["2026-07-28"],
        capabilities: { tools: {}, resources: { subscribe: true } },
        ttlMs: 0,
        cacheScope: "public",
        _meta: meta,
      },
    });
  if (m.method === "subscriptions/listen") {
    const want = m.params?.notifications?.resourceSubscriptions ?? [];
    return send({
      jsonrpc: "2.0",
      method: "notifications/subscriptions/acknowledged",
      params: {
        notifications: {
          resourceSubscriptions: [...want.filter((u) => u.startsWith("ok:")), ...want.filter((u) => u.startsWith("nul:")).map((u) => `${u}\u0000x`)],
        },
        _meta: { "io.modelcontextprotocol/subscriptionId": m.id },
      },
    });
  }
  send({ jsonrpc: "2.0", id: m.id, error: { code: -32601, message: "Method not found" } });
});
