#!/usr/bin/env node
// A handshake-era server that exits on any request before initialize (as some do): server-everything
// behind a check of the first line. Counts its starts in $STRICT_LEGACY_STARTS, if set.
import { spawn } from "node:child_process";
import { appendFileSync } from "node:fs";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

const everything = fileURLToPath(new URL("../node_modules/@modelcontextprotocol/server-everything/dist/index.js", import.meta.url));
if (process.env.STRICT_LEGACY_STARTS) appendFileSync(process.env.STRICT_LEGACY_STARTS, "start\n");
const rl = createInterface({ input: process.stdin });
rl.once("line", (first) => {
  if (JSON.parse(first).method !== "initialize") {
    process.stderr.write(`strict-legacy: '${JSON.parse(first).method}' before initialize, exiting\n`);
    process.exit(3);
  }
  rl.close();
  const child = spawn("node", [everything, "stdio"], { stdio: ["pipe", "inherit", "inherit"] });
  child.stdin.write(first + "\n");
  process.stdin.pipe(child.stdin);
  child.on("exit", (code) => process.exit(code ?? 1));
});
