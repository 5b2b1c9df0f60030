"""A cluster of Linux network namespaces joined by shaped links: `dane bench network`'s wire.

One namespace per node: "s" (the Dask scheduler and the driver) and "w0", "w1", ... (one Dask
worker or DDP rank each). Every node's `eth0` is one end of a veth pair whose other end is
a port of a bridge in a namespace of its own (the hub), so every byte between two nodes
crosses two links: the sender's uplink and the receiver's downlink. Each link is shaped in
both directions with a token bucket (`tbf`): the node's eth0 on the way out, the hub's port
on the way in. `netem` is not used (this kernel lacks it), so links are slowed in bandwidth
and not given added delay.

Addresses come from one private /24 that exists only inside these namespaces. Namespaces
and interfaces carry a per-run tag; `down()` deletes the namespaces, which deletes every
interface in them, so `ip netns list` and `ip link` are as before. `leftovers()` finds what a
killed run left behind, `cleanup()` removes it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass, field

NAMESPACE_PREFIX = "dane-net-"  # every namespace this module creates starts with this
PROBE_PREFIX = f"{NAMESPACE_PREFIX}probe"  # check_can_run's, named with the process id
SUBNET = "10.213.7"  # /24, only ever inside the namespaces
SCHEDULER_NODE = "s"
BRIDGE = "bridge0"  # in the hub namespace
# Links are not given a queue longer than this: a full queue drops, as a switch port does.
QUEUE_LATENCY = "50ms"
MIN_BURST_BYTES = 2 * 1514  # two Ethernet frames at MTU 1500
BURST_S = 0.001


class NetnsUnavailable(RuntimeError):
    """This machine cannot build the namespaces; the message says why in one line."""


def _ip(*args: str) -> str:
    return _run("ip", *args)


def _run(*args: str) -> str:
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"`{' '.join(args)}` failed: {done.stderr.strip() or done.returncode}")
    return done.stdout


def rate_bytes_per_s(rate: str) -> float:
    """Bytes per second of a tc rate such as "1gbit", "100mbit", "10mbit" or "1mbit"."""
    units = {"gbit": 1e9, "mbit": 1e6, "kbit": 1e3, "bit": 1.0}
    text = rate.strip().lower()
    for unit, bits in units.items():
        if text.endswith(unit):
            number = text[: -len(unit)]
            try:
                value = float(number)
            except ValueError:
                break
            if value > 0:
                return value * bits / 8
            break
    raise ValueError(f"bandwidth {rate!r} is not a rate like 1gbit, 100mbit or 10mbit")


def leftovers() -> list[str]:
    """Namespaces an earlier run left behind (killed before it could remove them). The probe
    of a process still running is not one: it is being checked now (check_can_run; two test
    processes import the namespaced tests' module at once)."""
    names = [line.split()[0] for line in _ip("netns", "list").splitlines() if line.strip()]
    return sorted(n for n in names if n.startswith(NAMESPACE_PREFIX) and not _live_probe(n))


def _live_probe(name: str) -> bool:
    pid = name.removeprefix(PROBE_PREFIX)
    if not name.startswith(PROBE_PREFIX) or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)  # signal 0: only asks whether the process is there
    except ProcessLookupError:
        return False
    except PermissionError:  # there, and another user's
        pass
    return True


def cleanup() -> list[str]:
    """Delete every namespace `leftovers()` finds; returns their names."""
    found = leftovers()
    for name in found:
        _ip("netns", "delete", name)
    return found


def check_can_run() -> None:
    """NetnsUnavailable naming the first thing missing: root, ip, tc, tbf, or a clean slate."""
    if os.geteuid() != 0:
        raise NetnsUnavailable("network namespaces need root; run as root (CI does)")
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            raise NetnsUnavailable(f"`{tool}` is not installed; install iproute2")
    left = leftovers()
    if left:
        raise NetnsUnavailable(
            f"namespaces of an earlier run are still there ({', '.join(left)}); "
            "remove them with --cleanup"
        )
    probe = f"{PROBE_PREFIX}{os.getpid()}"
    try:
        _ip("netns", "add", probe)
        _ip("-n", probe, "link", "set", "lo", "up")
        _run("tc", "-n", probe, "qdisc", "add", "dev", "lo", "root", "tbf",
             "rate", "10mbit", "burst", "64kb", "latency", QUEUE_LATENCY)  # fmt: skip
    except RuntimeError as err:
        raise NetnsUnavailable(f"cannot build a shaped namespace here: {err}") from None
    finally:
        subprocess.run(["ip", "netns", "delete", probe], capture_output=True, check=False)


@dataclass
class NetnsCluster:
    """`workers` worker namespaces and a scheduler namespace on one bridge (see module doc)."""

    workers: int
    tag: str = field(default_factory=lambda: f"d{os.getpid() % 100000}")
    built: bool = False

    @property
    def nodes(self) -> list[str]:
        return [SCHEDULER_NODE, *self.worker_nodes]

    @property
    def worker_nodes(self) -> list[str]:
        return [f"w{i}" for i in range(self.workers)]

    def namespace(self, node: str) -> str:
        return f"{NAMESPACE_PREFIX}{self.tag}-{node}"

    @property
    def hub(self) -> str:
        return self.namespace("hub")

    def address(self, node: str) -> str:
        host = 1 if node == SCHEDULER_NODE else 10 + int(node[1:])
        return f"{SUBNET}.{host}"

    def port(self, node: str) -> str:
        """The hub's end of `node`'s link (a per-run name: the tag, then the node)."""
        return f"{self.tag}{node}"

    def exec_prefix(self, node: str) -> list[str]:
        """Prepend to a command line to run it inside `node`'s namespace."""
        return ["ip", "netns", "exec", self.namespace(node)]

    def up(self) -> NetnsCluster:
        """Build the namespaces, the bridge and the links (unshaped until `shape`)."""
        self.built = True  # from the first namespace on, down() has something to remove
        _ip("netns", "add", self.hub)
        _ip("-n", self.hub, "link", "add", "name", BRIDGE, "type", "bridge")
        _ip("-n", self.hub, "link", "set", "dev", BRIDGE, "up")
        for node in self.nodes:
            self._add_node(node)
        return self

    def _add_node(self, node: str) -> None:
        ns, port = self.namespace(node), self.port(node)
        _ip("netns", "add", ns)
        _ip("-n", self.hub, "link", "add", "name", port, "type", "veth", "peer", "name", "eth0",
            "netns", ns)  # fmt: skip
        _ip("-n", self.hub, "link", "set", "dev", port, "master", BRIDGE, "up")
        _ip("-n", ns, "addr", "add", f"{self.address(node)}/24", "dev", "eth0")
        _ip("-n", ns, "link", "set", "dev", "lo", "up")
        _ip("-n", ns, "link", "set", "dev", "eth0", "up")

    def shape(self, rate: str) -> None:
        """Every link, both ways, to `rate` (a tc rate: "100mbit"); replaces an earlier one."""
        bytes_per_s = rate_bytes_per_s(rate)
        # The bucket is what the link may send at once after an idle spell, at the veth's own
        # speed: a large one lets a whole message through unshaped (64 KB of a 150 KB model
        # at 10 Mbit/s hid 40 % of its time). One millisecond of traffic, and never less
        # than two full frames, which tbf needs to pass a frame at all.
        burst = str(int(max(MIN_BURST_BYTES, bytes_per_s * BURST_S)))
        for node in self.nodes:
            for ns, dev in ((self.namespace(node), "eth0"), (self.hub, self.port(node))):
                _run("tc", "-n", ns, "qdisc", "replace", "dev", dev, "root", "tbf",
                     "rate", rate, "burst", burst, "latency", QUEUE_LATENCY)  # fmt: skip

    def set_link(self, node: str, up: bool) -> None:
        """Take `node`'s link down (a cable pulled: nothing passes either way) or back up."""
        _ip("-n", self.hub, "link", "set", "dev", self.port(node), "up" if up else "down")

    def sent_bytes(self) -> dict[str, int]:
        """Bytes each node has sent onto its shaped link so far, as a wire would carry them.

        Read from the token bucket's own count, not the interface's: the kernel hands the
        veth 64 KB segmentation-offload packets, which the interface counts with one set of
        headers, while the qdisc counts every frame's (what it shapes by). Offload stays on
        because segmenting every frame in software caps these 2 cores near 400 Mbit/s.
        """
        sent = {}
        for node in self.nodes:
            stats = json.loads(
                _run("tc", "-n", self.namespace(node), "-j", "-s", "qdisc", "show", "dev", "eth0")
            )
            # Unshaped (no bucket yet): the root qdisc's count, the same measure.
            root = next((q for q in stats if q.get("kind") == "tbf"), stats[0])
            sent[node] = int(root["bytes"])
        return sent

    def down(self) -> None:
        """Delete every namespace of this cluster (and so every interface); idempotent."""
        if not self.built:
            return
        for node in [*self.nodes, "hub"]:
            subprocess.run(
                ["ip", "netns", "delete", self.namespace(node)], capture_output=True, check=False
            )
        self.built = False

    def __enter__(self) -> NetnsCluster:
        try:
            return self.up()
        except BaseException:
            self.down()
            raise

    def __exit__(self, *exc: object) -> None:
        self.down()
