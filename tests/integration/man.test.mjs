// The man pages render without a warning, and mcp-lazy.manifest(5) names every key the reader knows.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { ROOT } from "./lib/env.mjs";

const PAGES = ["mcp-lazy.1", "mcp-lazy-shimd.8", "mcp-lazy.manifest.5"];

for (const page of PAGES) {
  test(`man/${page} renders without warnings`, () => {
    const file = join(ROOT, "man", page);
    const r = spawnSync("man", ["--warnings", "-l", file], {
      encoding: "utf8",
      env: { ...process.env, MANWIDTH: "80", MAN_KEEP_FORMATTING: "", PAGER: "cat", MANPAGER: "cat", LC_ALL: "C.UTF-8" },
    });
    assert.equal(r.status, 0, r.stderr);
    assert.equal(r.stderr, "", `man --warnings printed warnings for ${page}`);
    assert.match(r.stdout, /^NAME$/m);
    assert.match(r.stdout, /^SEE ALSO$/m);
  });
}

// The key tables of common/manifest.c: `static const char *const NAME_keys[] = { "a", "b", NULL };`
function manifestKeys() {
  const src = readFileSync(join(ROOT, "common/manifest.c"), "utf8");
  const keys = new Set();
  for (const m of src.matchAll(/static const char \*const (\w*keys|\w*key_names)\[\] = \{([^}]*)\}/g))
    for (const k of m[2].matchAll(/"([^"]+)"/g)) keys.add(k[1]);
  return keys;
}

test("mcp-lazy.manifest(5) documents every manifest key", () => {
  const keys = manifestKeys();
  assert.ok(keys.has("command") && keys.has("idle_timeout") && keys.has("input_schema"), [...keys].join(" "));
  const page = readFileSync(join(ROOT, "man/mcp-lazy.manifest.5"), "utf8");
  // A key is documented where it is the tag of a .TP paragraph (.B key, or .BR key ", " other).
  const tagged = new Set();
  for (const m of page.matchAll(/^\.(?:TP|TQ)\n\.BR? ([^\n]+)$/gm))
    for (const w of m[1].split(/[\s,"]+/)) if (w) tagged.add(w.replace(/\\-/g, "-"));
  const missing = [...keys].filter((k) => !tagged.has(k) && !["server", "backends", "tools"].includes(k));
  assert.deepEqual(missing, [], `keys not documented in man/mcp-lazy.manifest.5: ${missing.join(", ")}`);
  for (const top of ["server", "backends", "tools"]) assert.match(page, new RegExp(`^\\.B ${top}$`, "m"));
});
