// The example manifests are what the real servers report from their own tools/list today.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { TESTS } from "./lib/env.mjs";

test("manifests/*.yaml tool entries equal the servers' own tools/list", () => {
  const r = spawnSync("bash", [join(TESTS, "tools/regen-manifests.sh"), "--check"], { cwd: TESTS, encoding: "utf8", timeout: 120000 });
  assert.equal(r.status, 0, r.stdout + r.stderr);
  assert.match(r.stdout + r.stderr, /manifests\/example\.yaml: up to date/);
  assert.match(r.stdout + r.stderr, /manifests\/demo\.yaml: up to date/);
});
