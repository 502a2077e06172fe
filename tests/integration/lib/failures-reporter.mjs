// A node:test reporter for make check-integration: once the run is over, one line per test that
// failed (file:line, name, the error's first line), so a CI log says what failed at its end, without
// reading the whole TAP stream. Suites only repeat their tests' failures and are left out.
import { relative } from "node:path";

export default async function* failures(source) {
  const failed = [];
  for await (const { type, data } of source) {
    if (type !== "test:fail" || data.details?.error?.failureType === "subtestsFailed") continue;
    const e = data.details?.error;
    const c = e?.cause;
    let why = String(c?.message ?? e?.message ?? e).split("\n").find((l) => l.trim()) ?? "";
    if (c?.code === "ERR_ASSERTION" && (typeof c.actual !== "object" || c.actual === null))
      why += ` (actual ${JSON.stringify(c.actual)?.slice(0, 200)}, expected ${JSON.stringify(c.expected)?.slice(0, 200)})`;
    const where = data.file ? `${relative(process.cwd(), data.file)}${data.line ? `:${data.line}` : ""}` : "?";
    failed.push(`#   ${where} ${data.name}: ${e?.failureType === "testTimeoutFailure" ? "timed out: " : ""}${why}`);
  }
  yield failed.length ? `# ${failed.length} failed:\n${failed.join("\n")}\n` : "# none failed\n";
}
