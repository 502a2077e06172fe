#!/usr/bin/env node
// A 2026-07-28-only MCP server at the level of lines, for what a JSON library would re-spell: its
// answers carry an integer past 2^53, its requestState an escape, and its tools answer with the very
// line they got. `raw` echoes its request (`keep-meta` too, with more in _meta); `ask-raw` asks for input (params with a big integer) first,
// then echoes the retry. With --legacy it is a handshake-era server instead: `ask-raw` sends its
// client an elicitation/create (params with a big integer) and answers the call with the very line
// of the client's answer; `ask-url` asks for a URL-mode elicitation, `sample-tools` for sampling
// with tools; `raw` answers with a big integer, resources/read with -32002.
import { createInterface } from "node:readline";

const legacy = process.argv.includes("--legacy");
let asking; // the id of the call whose elicitation is out

const BIG = "12345678901234567890123";
const SERVER_INFO = '"io.modelcontextprotocol/serverInfo":{"name":"raw-modern","version":"1"}';
const INFO = `"_meta":{${SERVER_INFO}}`;
const out = (line) => process.stdout.write(line + "\n");
// keep: a member of _meta besides the server info, which a legacy client still gets.
const text = (id, t, keep) =>
  out(`{"jsonrpc":"2.0","id":${id},"result":{"content":[{"type":"text","text":${JSON.stringify(t)}}],"big":${BIG},"resultType":"complete","ttlMs":0,"cacheScope":"private","_meta":{${SERVER_INFO}${keep ? `,"keep":${BIG}` : ""}}}}`);

createInterface({ input: process.stdin }).on("line", (line) => {
  const m = JSON.parse(line);
  if (m.id === undefined) return;
  const id = JSON.stringify(m.id);
  if (legacy) return handshakeEra(m, id, line);
  if (m.method === "server/discover")
    return out(`{"jsonrpc":"2.0","id":${id},"result":{"supportedVersions":["2026-07-28"],"capabilities":{"tools":{}},"resultType":"complete","ttlMs":0,"cacheScope":"public",${INFO}}}`);
  if (m.method === "initialize")
    return out(`{"jsonrpc":"2.0","id":${id},"error":{"code":-32022,"message":"Unsupported protocol version","data":{"supported":["2026-07-28"],"requested":"x"}}}`);
  if (m.method === "tools/list")
    return out(`{"jsonrpc":"2.0","id":${id},"result":{"tools":[],"resultType":"complete","ttlMs":0,"cacheScope":"public"}}`);
  if (m.method === "tools/call" && m.params.name === "ask-raw" && !m.params.inputResponses)
    return out(
      `{"jsonrpc":"2.0","id":${id},"result":{"resultType":"input_required","inputRequests":{"q":{"method":"elicitation/create","params":{"message":"n?","requestedSchema":{"type":"object","properties":{"n":{"type":"integer"}}},"_meta":{"big":${BIG}}}}},"requestState":"\\u0073tate"}}`,
    );
  if (m.method === "tools/call") return text(id, line, m.params.name === "keep-meta");
  out(`{"jsonrpc":"2.0","id":${id},"error":{"code":-32601,"message":"Method not found"}}`);
});

function handshakeEra(m, id, line) {
  if (m.method === "initialize")
    return out(`{"jsonrpc":"2.0","id":${id},"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"raw-legacy","version":"1"}}}`);
  if (m.method === "tools/list") return out(`{"jsonrpc":"2.0","id":${id},"result":{"tools":[]}}`);
  if (m.method === "tools/call" && m.params.name === "ask-raw") {
    asking = id;
    return out(`{"jsonrpc":"2.0","id":"e1","method":"elicitation/create","params":{"message":"n?","requestedSchema":{"type":"object","properties":{"n":{"type":"integer"}}},"_meta":{"big":${BIG}}}}`);
  }
  if (m.method === "tools/call" && m.params.name === "ask-url")
    return out(`{"jsonrpc":"2.0","id":"e2","method":"elicitation/create","params":{"mode":"url","message":"sign in","url":"https://example.com/x","elicitationId":"x1"}}`);
  if (m.method === "tools/call" && m.params.name === "sample-tools")
    return out(`{"jsonrpc":"2.0","id":"s1","method":"sampling/createMessage","params":{"messages":[],"maxTokens":5,"tools":[{"name":"t","inputSchema":{"type":"object"}}]}}`);
  if (m.method === "tools/call" && m.params.name === "raw")
    return out(`{"jsonrpc":"2.0","id":${id},"result":{ "content":[{"type":"text","text":"\\u00e9"}],"big":${BIG}}}`);
  if (m.method === "resources/read")
    return out(`{"jsonrpc":"2.0","id":${id},"error":{"code":-32002,"message":"Resource not found","data":{"big":${BIG}}}}`);
  if (m.id === "e1" && m.method === undefined)
    return out(`{"jsonrpc":"2.0","id":${asking},"result":{"content":[{"type":"text","text":${JSON.stringify(line)}}]}}`);
  if (m.method) out(`{"jsonrpc":"2.0","id":${id},"error":{"code":-32601,"message":"Method not found"}}`);
}
