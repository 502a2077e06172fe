// Newline-delimited JSON-RPC from a stream: each complete line, without its newline, to fn. Imports
// nothing, so that the scripts run inside the box (peer.mjs, sessions.mjs, recorder.mjs) use it too.
// A chunk without a newline is only appended: answers of many megabytes are not scanned again and
// again.
export function onLines(stream, fn) {
  let buf = "";
  stream.setEncoding("utf8").on("data", (d) => {
    buf += d;
    if (!d.includes("\n")) return;
    let i;
    while ((i = buf.indexOf("\n")) >= 0) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      fn(line);
    }
  });
}
