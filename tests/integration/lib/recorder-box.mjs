// A box with one backend, `rec` (lib/recorder.mjs), behind the installed units, for the fleet and
// load tests and the bench: the shim from the build under test, the recorder's log in /srv/load.
import { startBox } from "./box.mjs";
import { ROOT, SANITIZER_DROPIN, SHIMD, TESTS } from "./env.mjs";

export const RECORDER = `${TESTS}/integration/lib/recorder.mjs`;
export const SESSIONS = `${TESTS}/integration/lib/sessions.mjs`;
export const LOG = "/srv/load/record.log";

export function recorderManifest({ maxSessions, idle = "2s", sharing = "pooled" } = {}) {
  return `backends:
  rec:
    command: [${process.execPath}, ${RECORDER}]
    env: {RECORD_LOG: ${LOG}}
    idle_timeout: ${idle}
    sharing: ${sharing}
${maxSessions ? `    max_sessions: ${maxSessions}\n` : ""}tools:
  - name: record
    description: Records that it ran, then answers with who asked
    backend: rec
    input_schema: {type: object, properties: {session: {type: string}, seq: {type: number}, delay_ms: {type: number}}}
`;
}

// shimd: the shim binary the unit runs (default: the build under test).
export async function recorderBox({ shimd = SHIMD, build, ...manifest } = {}) {
  const bind = [ROOT];
  if (build && !build.startsWith(ROOT + "/")) bind.push(build);
  const box = await startBox({ bind });
  const sh = async (script, opts = {}) => {
    const r = await box.exec("bash", ["-c", script], opts);
    if (r.code !== 0) throw new Error(`box: ${script}\n${r.stdout}${r.stderr}`);
    return r.stdout;
  };
  try {
    await sh(`make -s -C ${ROOT} install PREFIX=/usr/local ${build ? `-o all B=${build}` : ""} >/dev/null && systemd-sysusers
      mkdir -p /etc/systemd/system/mcp-lazy@.service.d /etc/systemd/system/mcp-lazy@rec.service.d /etc/mcp-lazy /srv/load
      chmod 0777 /srv/load
      printf '[Service]\\nExecStart=\\nExecStart=${shimd} --manifest \${MCP_LAZY_MANIFEST} %%i\\n' > /etc/systemd/system/mcp-lazy@.service.d/test.conf
      ${SANITIZER_DROPIN}
      # What this backend needs beyond the unit's defaults: somewhere to write its record.
      printf '[Service]\\nReadWritePaths=/srv/load\\n' > /etc/systemd/system/mcp-lazy@rec.service.d/record.conf`);
    await sh("cat > /etc/mcp-lazy/manifest.yaml", { input: recorderManifest(manifest) });
    await sh("systemctl daemon-reload && systemctl enable --now mcp-lazy@rec.socket");
  } catch (e) {
    await box.stop();
    throw e;
  }
  return { box, sh, try: (script) => box.exec("bash", ["-c", script]) };
}
