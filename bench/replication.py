"""`python -m bench.replication [--rounds 20] [--smoke]`: replication (issue 14) on real
processes: three `eddy serve` nodes on loopback (each a broker and a metadata voter), topics
of replication factor 3 with min.insync.replicas=2, next to a single node, in one run.

1. Latency and throughput, 1 KiB records, acks=all, the single-node bench's librdkafka
   producer (bench.workloads.producer_conf; bench.runner's produce phase and its fixed-rate
   end-to-end latency run, with acks=all): a single node (replication factor 1); the
   cluster with write caching off (the default: every in-sync replica fsyncs before the
   offset counts as replicated); a cluster started with `--set log.write.caching=true` whose
   topic also sets `write.caching=true` (Kafka's behaviour: acknowledged from memory).
2. Failover after kill -9: a producer (acks=all, idempotent, linger.ms=0) sends a record
   every 2 ms to a 1-partition topic; its leader is killed with SIGKILL; the time from the
   kill to the first acknowledgement of a record produced after the kill (which only a new
   leader can give). The node restarts and catches up (back in the ISR) before the next
   round. Median and max over --rounds.
3. Controlled shutdown: the same, with SIGTERM (the node moves its leaderships away before
   it exits); unavailability = the longest gap between two acknowledgements from the
   SIGTERM until a second after the process exited.

Each produce phase also reports what the disk under the nodes' data wrote meanwhile
(/proc/diskstats of the device holding --data-root): on this machine one disk (~500 MB/s
sustained) holds the data of all three nodes, so replication factor 3 writes (and fsyncs)
every byte three times to it. `--data-root /dev/shm` runs every node on memory instead,
to see the CPU side alone.

Prints a table; writes bench/results/<stamp>-replication[-smoke].json (unless --no-save).
Never asserts a timing; exits 1 when a phase failed.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

from bench.brokers import EddyBroker
from bench.mesh_cluster import MeshNode, free_udp_port, start_all
from bench.runner import MIB, Options, Session, say
from eddy.client.raw import RawClient

IDS = (1, 2, 3)
RESULTS_DIR = Path(__file__).resolve().parent / "results"
SEND_EVERY_S = 0.002
PARTS = ("single", "cluster", "cluster_caching", "failover")


@dataclass
class Front:
    """What bench.runner.Session needs of a broker: where to connect, whose CPU to count
    (the first node's), a name."""

    bootstrap: str
    pid: int
    name: str = "eddy-cluster"


class ClusterSession(Session):
    """bench.runner's phases on topics of replication factor `rf` with `configs`."""

    def __init__(self, front: Front, opts: Options, rf: int, configs: dict[str, str]) -> None:
        super().__init__(front, opts)  # type: ignore[arg-type]
        self.rf, self.configs = rf, configs

    def create_topic(self, phase: str) -> str:
        from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

        name = f"bench-{phase}-{self.run_id}"
        fs = self.admin.create_topics(
            [NewTopic(name, num_partitions=self.opts.partitions,
                      replication_factor=self.rf, config=self.configs)],
            operation_timeout=20, request_timeout=20)
        fs[name].result(30)
        return name


def cluster_nodes(root: str, settings: dict[str, str]) -> dict[int, MeshNode]:
    ports = {i: free_udp_port() for i in IDS}
    voters = ",".join(f"{i}@127.0.0.1:{p}" for i, p in ports.items())
    return {i: MeshNode(f"n{i}", i, ports[i], None, root, {
        "process.roles": "broker,controller", "controller.quorum.voters": voters, **settings})
        for i in IDS}


def bootstrap(nodes: dict[int, MeshNode]) -> str:
    return ",".join(n.bootstrap for n in nodes.values() if n.alive())


def describe(node: MeshNode, topic: str) -> dict[int, tuple[int, int]]:
    """partition -> (leader, ISR size) as ``node`` answers ({} when it does not)."""
    try:
        with RawClient("127.0.0.1", node.port, 5.0) as raw:
            answer = raw.call(MetadataRequest(
                topics=(MetadataRequestTopic(topic_id=None, name=topic),),
                allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    except OSError:
        return {}
    (t,) = answer.topics
    if t.error_code != 0:
        return {}
    return {int(p.partition_index): (int(p.leader_id), len(p.isr_nodes)) for p in t.partitions}


def _until(check: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise TimeoutError(f"not within {timeout_s} s: {what}")


def settled(nodes: dict[int, MeshNode], topic: str) -> bool:
    """Every live node names a live leader and a full ISR for every partition."""
    views = [describe(n, topic) for n in nodes.values() if n.alive()]
    return bool(views) and all(v == views[0] and v for v in views) and all(
        leader in IDS and isr == 3 for leader, isr in views[0].values())


# ---------------------------------------------------------------------------- throughput


def sectors_written(path: str) -> int | None:
    """Sectors (512 bytes) the block device holding ``path`` has written since boot (None:
    no block device, e.g. tmpfs, or no /proc/diskstats)."""
    dev = os.stat(path).st_dev
    want = (os.major(dev), os.minor(dev))
    try:
        with open("/proc/diskstats", encoding="ascii") as f:
            for line in f:
                fields = line.split()
                if (int(fields[0]), int(fields[1])) == want:
                    return int(fields[9])
    except (OSError, ValueError, IndexError):
        return None
    return None


def throughput(session: Session, data_root: str) -> dict[str, Any]:
    """bench.runner's latency run (acks=all), then its produce phase (1 KiB, acks=all):
    latency first, while the page cache holds no gigabyte of dirty pages that each fsync
    would wait behind. The produce phase reports the disk's write rate meanwhile."""
    out = {"latency": session.latency()}
    session.delete_topic(out["latency"].get("topic", ""))
    before, t0 = sectors_written(data_root), time.monotonic()
    out["produce"] = session.produce("1k_acksall", 1024, "all")
    after, t1 = sectors_written(data_root), time.monotonic()
    if before is not None and after is not None and t1 > t0:
        out["produce"]["disk_mib_s"] = (after - before) * 512 / MIB / (t1 - t0)
    session.delete_topic(out["produce"].get("topic", ""))
    return out


def single_node(opts: Options, data_root: str) -> dict[str, Any]:
    broker = EddyBroker(root=data_root)
    try:
        broker.start()
        session = Session(broker, opts)
        return throughput(session, data_root)
    finally:
        broker.stop()
        broker.cleanup()


def cluster_throughput(opts: Options, caching: bool, data_root: str) -> dict[str, Any]:
    settings = {"log.write.caching": "true"} if caching else {}
    configs = {"min.insync.replicas": "2", **({"write.caching": "true"} if caching else {})}
    with tempfile.TemporaryDirectory(prefix="eddy-repl-", dir=data_root) as root:
        nodes = cluster_nodes(root, settings)
        try:
            start_cluster(nodes)
            session = ClusterSession(Front(bootstrap(nodes), nodes[1].pid), opts, 3, configs)
            return throughput(session, data_root)
        finally:
            for n in nodes.values():
                n.kill9()


def start_cluster(nodes: dict[int, MeshNode]) -> None:
    start_all(list(nodes.values()))
    from bench.metadata_failover import describe as describe_cluster

    _until(lambda: all(describe_cluster(n)[1] == 3 for n in nodes.values()), 60,
           "every node lists 3 brokers")


# ------------------------------------------------------------------------------ failover


class Stream:
    """A producer thread sending a record every SEND_EVERY_S; keeps (seq, ack time)."""

    def __init__(self, servers: str, topic: str) -> None:
        from confluent_kafka import Producer

        self.producer = Producer({"bootstrap.servers": servers, "acks": "all",
                                  "enable.idempotence": True, "linger.ms": 0,
                                  "message.timeout.ms": 30000})
        self.topic = topic
        self.seq = 0
        self.acks: list[tuple[int, float]] = []
        self.failed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _report(self, err: Any, msg: Any) -> None:
        if err is None:
            self.acks.append((int(msg.value()), time.perf_counter()))
        else:
            self.failed += 1

    def _run(self) -> None:
        p = self.producer
        nxt = time.perf_counter()
        while not self._stop.is_set():
            self.seq += 1
            p.produce(self.topic, str(self.seq).encode(), on_delivery=self._report)
            p.poll(0)
            nxt += SEND_EVERY_S
            time.sleep(max(0.0, nxt - time.perf_counter()))
        p.flush(30)

    def start(self) -> Stream:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)


def one_failover(nodes: dict[int, MeshNode], topic: str, sig: signal.Signals,
                 controllers: list[bool]) -> float:
    """Kill (SIGKILL) or stop (SIGTERM) the topic's leader while a stream runs; returns ms:
    for SIGKILL, until the first ack of a record produced after the kill; for SIGTERM, the
    longest gap between acks from the signal until a second after the process exited."""
    any_node = next(n for n in nodes.values() if n.alive())
    _until(lambda: settled(nodes, topic), 60, f"{topic}: a leader and a full ISR")
    leader = describe(any_node, topic)[0][0]
    from bench.metadata_failover import controller

    controllers.append(controller(any_node) == leader)  # the metadata leader dies too
    stream = Stream(bootstrap(nodes), topic).start()
    try:
        _until(lambda: len(stream.acks) > 50, 30, "the stream acknowledged")
        victim = nodes[leader]
        assert victim.proc is not None
        seq_at, at = stream.seq, time.perf_counter()
        victim.proc.send_signal(sig)
        victim.proc.wait(30)
        exited = time.perf_counter()
        if sig == signal.SIGKILL:
            _until(lambda: any(s > seq_at for s, _ in stream.acks), 30,
                   "an ack of a record produced after the kill")
            took = min(t for s, t in stream.acks if s > seq_at) - at
        else:
            time.sleep(max(0.0, exited + 1.0 - time.perf_counter()))
            times = [at, *sorted(t for _, t in stream.acks if at <= t <= exited + 1.0)]
            took = max(b - a for a, b in itertools.pairwise(times)) if len(
                times) > 1 else exited + 1.0 - at
    finally:
        stream.stop()
    victim.start()
    return took * 1000


def failover(rounds: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="eddy-failover-") as root:
        nodes = cluster_nodes(root, {})
        try:
            start_cluster(nodes)
            admin_topic(nodes, "failover")
            for name, sig in (("kill9_ms", signal.SIGKILL), ("sigterm_gap_ms", signal.SIGTERM)):
                ctl: list[bool] = out.setdefault(name.replace("_ms", "_controller_too"), [])
                try:
                    out[name] = [one_failover(nodes, "failover", sig, ctl)
                                 for _ in range(rounds)]
                except Exception as exc:
                    out[name + "_error"] = f"{type(exc).__name__}: {exc}"
        finally:
            for n in nodes.values():
                n.kill9()
    return out


def admin_topic(nodes: dict[int, MeshNode], topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": bootstrap(nodes)})
    fs = admin.create_topics([NewTopic(topic, 1, 3, config={"min.insync.replicas": "2"})],
                             request_timeout=20)
    fs[topic].result(30)


# ------------------------------------------------------------------------------- report


def _stats(ms: list[float]) -> str:
    if not ms:
        return "-"
    return f"median {statistics.median(ms):7.0f} ms   max {max(ms):7.0f} ms   ({len(ms)})"


def render(results: dict[str, Any]) -> list[str]:
    lines = [f"{'1 KiB, acks=all':<34} {'MiB/s':>8} {'msgs/s':>9} {'p50 ms':>8} {'p99 ms':>8}"
             f" {'disk MiB/s':>11}"]
    for label, key in (("single node (rf 1)", "single"), ("3 nodes rf 3, write caching off",
                                                          "cluster"),
                       ("3 nodes rf 3, write caching on", "cluster_caching")):
        if key not in results:
            continue
        r = results.get(key) or {}
        prod, lat = r.get("produce") or {}, r.get("latency") or {}
        err = " (!)" if "error" in prod or "error" in lat or "error" in r else ""
        disk = prod.get("disk_mib_s")
        lines.append(f"{label + err:<34} {prod.get('mib_s', 0):8.1f} {prod.get('msgs_s', 0):9.0f} "
                     f"{lat.get('p50_ms', 0):8.1f} {lat.get('p99_ms', 0):8.1f} "
                     f"{'-' if disk is None else f'{disk:.0f}':>11}")
    single = ((results.get("single") or {}).get("produce") or {}).get("mib_s") or 0
    for key in ("cluster", "cluster_caching"):
        mib = ((results.get(key) or {}).get("produce") or {}).get("mib_s") or 0
        if single:
            lines.append(f"{key}: {100 * mib / single:.0f} % of single-node acks=all "
                         "(target: at least 50 %)")
    f = results.get("failover") or {}
    for key, what, target in (
            ("kill9", "failover, kill -9 of the leader -> first ack on the new leader",
             "under 2 s"),
            ("sigterm_gap", "controlled shutdown (SIGTERM), longest gap between acks",
             "under 200 ms")):
        ms, ctl = f.get(f"{key}_ms", []), f.get(f"{key}_controller_too", [])
        lines.append(f"{what}: {_stats(ms)} (target: {target})")
        both = [m for m, c in zip(ms, ctl, strict=False) if c]
        if both:
            lines.append(f"  of which the controller too ({len(both)}): {_stats(both)}")
    return lines


def errors(results: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for key, r in results.items():
        if not isinstance(r, dict):
            continue
        out += [f"{key}: {v}" for k, v in r.items() if k.endswith("error")]
        out += [f"{key}.{k}: {v['error']}" for k, v in r.items()
                if isinstance(v, dict) and "error" in v]
    return out


def guarded(fn: Any, *args: Any) -> dict[str, Any]:
    try:
        result: dict[str, Any] = fn(*args)
        return result
    except Exception as exc:
        say(f"{fn.__name__}: {type(exc).__name__}: {exc}")
        return {"error": f"{type(exc).__name__}: {exc}"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.replication",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, help="failovers of each kind (20; smoke 2)")
    ap.add_argument("--seconds", type=float, help="per produce/latency phase (5; smoke 1)")
    ap.add_argument("--latency-rate", type=float, default=5.0,
                    help="MiB/s of 1 KiB records in the fixed-rate latency run (5)")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes for CI")
    ap.add_argument("--no-save", action="store_true", help="do not write the JSON results")
    ap.add_argument("--only", nargs="+", choices=PARTS, default=list(PARTS),
                    help="which parts to run (all)")
    ap.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    ap.add_argument("--data-root", default=tempfile.gettempdir(),
                    help="where the nodes keep their data (default: the temp dir; "
                    "/dev/shm: memory, no disk)")
    a = ap.parse_args(argv)
    seconds = a.seconds or (1.0 if a.smoke else 5.0)
    opts = Options(records=2_000 if a.smoke else 2_000_000, seconds=seconds,
                   latency_seconds=seconds, latency_warmup=0.2 if a.smoke else 0.5,
                   latency_acks="all", latency_rate_mib=a.latency_rate,
                   phases={"produce", "latency"})
    rounds = a.rounds or (2 if a.smoke else 20)
    started = time.time()
    results: dict[str, Any] = {}
    for key, fn, args in (("single", single_node, (opts, a.data_root)),
                          ("cluster", cluster_throughput, (opts, False, a.data_root)),
                          ("cluster_caching", cluster_throughput, (opts, True, a.data_root)),
                          ("failover", failover, (rounds,))):
        if key not in a.only:
            continue
        say(f"replication: {key}")
        results[key] = guarded(fn, *args)
    lines = render(results)
    print("Replication benchmark" + (" (smoke: numbers are meaningless)" if a.smoke else ""))
    print("\n".join(lines))
    print(f"(p50/p99: end-to-end, produce to consume, at {a.latency_rate:g} MiB/s; "
          f"produce phase {seconds:g} s, 4 partitions, linger.ms=5)")
    problems = errors(results)
    for p in problems:
        say(p)
    if not a.no_save:
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        path = a.results_dir / f"{stamp}-replication{'-smoke' if a.smoke else ''}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({
            "started": datetime.datetime.fromtimestamp(started).isoformat(timespec="seconds"),
            "duration_s": round(time.time() - started, 1), "argv": sys.argv[1:],
            "record_mib": 1024 / MIB, "rounds": rounds, "results": results, "table": lines,
        }, indent=1, default=str))
        print(f"results: {path}")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
