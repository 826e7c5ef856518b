"""A veth pair between two network namespaces of our own: where hooks are tried on real traffic.

``VethPair`` creates two fresh namespaces joined by a veth pair (``va`` in the first, ``vb`` in the second,
with IPv4 and IPv6 addresses), and deletes both namespaces, hence the pair and anything attached to it, on
``close``. Frames are sent from a raw packet socket on one end, from a thread that may be pinned to a CPU
(veth delivers a frame on the sending CPU, so that is the CPU the hook on the other end runs on);
``Receiver`` counts what actually arrives (a UDP socket, which sees only what a hook let through, whether the
hook runs before the packet taps, as XDP does, or after them, as tc does).
"""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from typing import TypeVar

from capsule.kernel.link import run_in_netns

T = TypeVar("T")
A_IP4, B_IP4 = "10.199.0.1", "10.199.0.2"
A_IP6, B_IP6 = "fd00:c5:1e::1", "fd00:c5:1e::2"
OPEN: set[str] = set()  # the namespaces this process has made and not yet deleted
MADE: set[str] = set()  # every namespace this process has made (the names are unique)
RETRY_PAUSE = 0.0002  # seconds a sender waits when the peer's ring is full


def send_all(s: socket.socket, frames: Iterable[bytes]) -> int:
    """Send every frame; a frame the veth refused because its peer's ring was full (ENOBUFS: veth dropped it
    before the peer's hook saw it) is sent again once the peer has drained a little."""
    sent = 0
    for f in frames:
        while True:
            try:
                s.send(f)
                break
            except OSError as e:
                if e.errno != errno.ENOBUFS:
                    raise
                time.sleep(RETRY_PAUSE)
        sent += 1
    return sent


class NetnsError(OSError):
    """A namespace or veth could not be made (``ip`` failed), with what ``ip`` said."""


def ip(*args: str, check: bool = True) -> str:
    res = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and res.returncode:
        raise NetnsError(f"ip {' '.join(args)}: {res.stderr.strip() or res.returncode}")
    return res.stdout


def namespaces() -> set[str]:
    """The network namespaces ``ip netns`` knows (to check that none is left behind)."""
    return {line.split()[0] for line in ip("netns", "list").splitlines() if line.strip()}


class VethPair:
    def __init__(self, *, mtu: int | None = None, queues: int = 1, tag: str | None = None) -> None:
        """``queues`` > 1 gives each end that many queues, transmit queue k of ``vb`` used by CPU k (XPS):
        veth hands a frame to the receive queue of the same number, each with its own NAPI context run on
        the CPU that sent into it, so native XDP on ``va`` runs on as many CPUs at once as there are
        senders (with one queue, a second sender only adds to the ring the first CPU's NAPI is draining)."""
        tag = tag or uuid.uuid4().hex[:8]
        self.ns_a, self.ns_b = f"capsule-{tag}-a", f"capsule-{tag}-b"
        self.dev_a, self.dev_b = "va", "vb"
        self._made: list[str] = []
        try:
            for ns in (self.ns_a, self.ns_b):
                ip("netns", "add", ns)
                self._made.append(ns)
                OPEN.add(ns)
                MADE.add(ns)
            nq = ("numtxqueues", str(queues), "numrxqueues", str(queues))
            ip("link", "add", self.dev_a, "netns", self.ns_a, *nq, "type", "veth", "peer", "name", self.dev_b,
               "netns", self.ns_b, *nq)
            for ns, dev, v4, v6 in ((self.ns_a, self.dev_a, A_IP4, A_IP6), (self.ns_b, self.dev_b, B_IP4, B_IP6)):
                if mtu is not None:
                    ip("-n", ns, "link", "set", dev, "mtu", str(mtu))
                ip("-n", ns, "addr", "add", f"{v4}/24", "dev", dev)
                ip("-n", ns, "addr", "add", f"{v6}/64", "dev", dev, "nodad")
                ip("-n", ns, "link", "set", dev, "up")
                ip("-n", ns, "link", "set", "lo", "up")
            for k in range(queues if queues > 1 else 0):
                xps = f"/sys/class/net/{self.dev_b}/queues/tx-{k}/xps_cpus"
                subprocess.run(["ip", "netns", "exec", self.ns_b, "tee", xps], input=f"{1 << k:x}\n", text=True,
                               capture_output=True, check=True)
            self.mac_a = self.mac(self.ns_a, self.dev_a)
            self.mac_b = self.mac(self.ns_b, self.dev_b)
        except BaseException:
            self.close()
            raise

    @staticmethod
    def mac(ns: str, dev: str) -> bytes:
        line = ip("-n", ns, "-o", "link", "show", "dev", dev)
        return bytes.fromhex(line.split("link/ether", 1)[1].split()[0].replace(":", ""))

    def path(self, ns: str) -> str:
        return f"/run/netns/{ns}"

    def run_in(self, ns: str, fn: Callable[[], T]) -> T:
        return run_in_netns(self.path(ns), fn)

    def ifindex(self, ns: str, dev: str) -> int:
        return self.run_in(ns, lambda: socket.if_nametoindex(dev))

    def send(self, frames: Iterable[bytes], *, cpu: int | None = None, side: str = "b") -> int:
        """Send raw frames out of one end (``b``: towards ``va``), from a thread pinned to ``cpu``; how many
        the socket took."""
        ns, dev = (self.ns_b, self.dev_b) if side == "b" else (self.ns_a, self.dev_a)

        def body() -> int:
            if cpu is not None:
                os.sched_setaffinity(0, {cpu})  # this thread only
            with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as s:
                s.bind((dev, 0))
                return send_all(s, frames)

        return self.run_in(ns, body)

    def send_parallel(self, batches: list[tuple[int, list[bytes]]]) -> list[int]:
        """Send each (cpu, frames) batch from its own thread at the same time."""
        results: list[int | BaseException] = [0] * len(batches)
        start = threading.Barrier(len(batches))

        def one(k: int, cpu: int, frames: list[bytes]) -> None:
            def body() -> int:
                os.sched_setaffinity(0, {cpu})
                with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as s:
                    s.bind((self.dev_b, 0))
                    start.wait()
                    return send_all(s, frames)
            try:
                results[k] = self.run_in(self.ns_b, body)
            except BaseException as e:  # handed to the caller below
                results[k] = e

        threads = [threading.Thread(target=one, args=(k, cpu, fr)) for k, (cpu, fr) in enumerate(batches)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for r in results:
            if isinstance(r, BaseException):
                raise r
        return [int(r) for r in results]  # type: ignore[arg-type]

    def close(self) -> None:
        for ns in reversed(self._made):
            ip("netns", "del", ns, check=False)
            OPEN.discard(ns)
        self._made.clear()

    def __enter__(self) -> VethPair:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Receiver:
    """A UDP socket in a namespace, bound to a port: the datagrams that reached it."""

    def __init__(self, pair: VethPair, port: int, *, ns: str | None = None, v6: bool = False) -> None:
        family = socket.AF_INET6 if v6 else socket.AF_INET
        addr = A_IP6 if v6 else A_IP4

        def make() -> socket.socket:
            s = socket.socket(family, socket.SOCK_DGRAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
            s.bind((addr, port))
            s.settimeout(0.2)
            return s

        self.sock = pair.run_in(ns or pair.ns_a, make)

    def drain(self, want: int | None = None, timeout: float = 2.0) -> list[bytes]:
        """The payloads received, until ``want`` of them or ``timeout`` seconds without one more."""
        out: list[bytes] = []
        idle = 0.0
        while (want is None or len(out) < want) and idle < timeout:
            try:
                out.append(self.sock.recv(65536))
                idle = 0.0
            except TimeoutError:
                idle += 0.2
        return out

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Receiver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
