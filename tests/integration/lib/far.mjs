// A second host inside the box: the network namespace "far" (10.77.0.2, linked to the box's own
// namespace, 10.77.0.1, by a veth pair) running Debian's sshd with key authentication. Its
// mcp-lazy backends are the box's systemd units, so a session in "far" and frontends in the box's
// namespace that reach it through ssh share one backend process there.
import { MCP_LAZY } from "./env.mjs";

export const FAR_IP = "10.77.0.2";

export async function addFarHost(fleet) {
  await fleet.sh(`set -e
    ip link set lo up
    ip netns add far
    ip link add veth-near type veth peer name veth-far
    ip link set veth-far netns far
    ip addr add 10.77.0.1/24 dev veth-near && ip link set veth-near up
    ip netns exec far ip link set lo up
    ip netns exec far ip addr add ${FAR_IP}/24 dev veth-far
    ip netns exec far ip link set veth-far up
    # Host keys of its own (the overlay hides the machine's), a client key for root, known_hosts.
    rm -f /etc/ssh/ssh_host_* && ssh-keygen -q -A
    mkdir -p -m 700 /root/.ssh /run/sshd
    rm -f /root/.ssh/id_ed25519* && ssh-keygen -q -t ed25519 -N '' -f /root/.ssh/id_ed25519
    cp /root/.ssh/id_ed25519.pub /root/.ssh/authorized_keys
    ssh-keygen -q -t ed25519 -N '' -f /tmp/other-host-key
    printf '%s\\n' "${FAR_IP},far $(cut -d' ' -f1,2 /etc/ssh/ssh_host_ed25519_key.pub)" \\
      "far-changed $(cut -d' ' -f1,2 /tmp/other-host-key.pub)" > /root/.ssh/known_hosts
    printf '%s\\n' 'Host *' '  UserKnownHostsFile /root/.ssh/known_hosts' '  GlobalKnownHostsFile /dev/null' > /root/.ssh/config
    printf '${FAR_IP} far far-unknown far-changed\\n' >> /etc/hosts
    # The installed mcp-lazy that ssh sessions find in PATH is the build under test.
    ln -sf ${MCP_LAZY} /usr/local/bin/mcp-lazy
    # sshd as the far host runs it: the stock configuration (MaxSessions 10), key authentication only.
    systemd-run -q --unit=far-sshd -p NetworkNamespacePath=/run/netns/far \\
      /usr/sbin/sshd -D -e -o UsePAM=no -o PasswordAuthentication=no -o PermitRootLogin=prohibit-password
    for i in $(seq 600); do ip netns exec far ss -ltn | grep -q ':22 ' && break; sleep 0.1; done
    ssh -o BatchMode=yes root@far true`);
}

// Link down as seen from here: the far end's interface goes down, so packets vanish (no error).
// Up: back once a connection to far's sshd gets through again. Right after the link comes up a
// connect can still fail (seen under load: 'ssh: connect to host far port 22: No route to host', the
// neighbour entry given up on while the link was down), and the next test's first call with it.
export async function farLink(fleet, up) {
  await fleet.sh(`ip netns exec far ip link set veth-far ${up ? "up" : "down"}`);
  if (up)
    await fleet.sh(`for i in $(seq 300); do timeout 2 bash -c '</dev/tcp/${FAR_IP}/22' 2>/dev/null && exit 0; sleep 0.1; done
      echo 'far is not reachable again after its link came up' >&2; exit 1`);
}

// The frontend manifest of the near host: remote backends on far, and some that fail on purpose.
export function nearManifest() {
  const t = (name, backend, props = {}) =>
    `  - {name: ${name}, backend: ${backend}, input_schema: {type: object, properties: ${JSON.stringify(props)}}}\n`;
  return `backends:
  rmem:
    host: ssh://root@far
    remote_name: memory
  reverything:
    host: ssh://root@far
    remote_name: everything
  unknownkey:
    host: ssh://root@far-unknown
    remote_name: everything
  changedkey:
    host: ssh://root@far-changed
    remote_name: everything
  notenabled:
    host: ssh://root@far
    remote_name: disabled
  noport:
    host: ssh://root@far:2222
    remote_name: everything
  noname:
    host: ssh://root@nosuch.invalid
    remote_name: everything
tools:
${t("read_graph", "rmem")}${t("create_entities", "rmem", { entities: { type: "array" } })}${t("echo", "reverything", { message: { type: "string" } })}${t("get-sum", "reverything", { a: { type: "number" }, b: { type: "number" } })}${t("trigger-long-running-operation", "reverything", { duration: { type: "number" }, steps: { type: "number" } })}${t("t_unknownkey", "unknownkey")}${t("t_changedkey", "changedkey")}${t("t_notenabled", "notenabled")}${t("t_noport", "noport")}${t("t_noname", "noname")}`;
}
