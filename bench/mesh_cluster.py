"""`python -m bench.mesh_cluster`: real `eddy serve` processes joined by the QUIC mesh.

1. Gossip: node 1 starts, then nodes 2-5 at once (seeded by node 1); the time from the last
   node's ready line (and from the last process spawn) until every node's status lists all
   five alive. Then node 3 is killed
   with SIGKILL: the time until every other node lists it dead; then it restarts (same data
   dir, so the same NodeId): the time from its ready line until every node lists it alive.
   Once with mesh.ping.interval.ms=500 / mesh.ping.max.unacked=4 (the defaults), once with
   200 / 3. Status is polled in-process, every node at once, over the control RPC that
   `eddy cluster status --mesh` uses; one polling round's duration is the resolution.
2. Gateway: brokers 1 and 2 and a gateway (process.roles=gateway). 1 KiB records with
   confluent-kafka (acks=1, linger.ms=5, batch.size 1 MB) into a fresh 4-partition topic
   owned by broker 1, produced (a) to broker 1 directly and (b) through the gateway, then
   read back from offset 0 the same way (bench.runner's produce and consume phases).
3. KafkaOp round trip: sequential one-record produces (acks=1, linger.ms=0), each waited
   for, directly and through the gateway; p50/p99 latency.

Every run is `--repeat` times and the median is reported. Prints a table; `--json PATH`
also writes the results (`-` for stdout). Never asserts a timing; exits 1 when a phase
failed (a cluster that did not converge, a produce that was not acknowledged).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import workloads
from bench.brokers import EddyBroker
from bench.runner import Options, Session, _collect, _errors, say
from eddy.gateway.routes import pick_node
from eddy.mesh.client import control_call
from eddy.mesh.control import StatusRequest, StatusResponse

MESH = "EDDY_MESH "
NS = 1_000_000_000
#: (mesh.ping.interval.ms, mesh.ping.max.unacked) settings the gossip phase runs with
PING_SETTINGS = ((500, 4), (200, 3))
VICTIM = 3  # the node killed and restarted (not the seed, node 1)
GATEWAY_NODE_ID = 9
OWNER = 1  # the broker every benchmark topic lives on
#: the row labels, in print order (the smoke test checks for them)
GOSSIP_ROWS = {"join_s": "join, after last ready line", "join_from_spawn_s":
               "join, after last spawn", "dead_s": "kill -9 -> dead everywhere",
               "rejoin_s": "restart -> alive everywhere"}
KAFKA_ROWS = ("produce direct", "produce gateway", "consume direct", "consume gateway",
              "round trip direct", "round trip gateway")


def free_udp_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class MeshNode(EddyBroker):
    """An `eddy serve` on the mesh with a fixed mesh port, restartable with the same data
    dir (so the same NodeId); its workdir lives under the run's temp dir."""

    def __init__(self, label: str, node_id: int, mesh_port: int, seed_port: int | None,
                 root: str, settings: dict[str, str]) -> None:
        self.name = label
        sets = {"mesh.listener": f"127.0.0.1:{mesh_port}", **settings}
        if seed_port is not None:
            sets["mesh.seeds"] = f"127.0.0.1:{seed_port}"
        args = ["--node-id", str(node_id)]
        for k, v in sets.items():
            args += ["--set", f"{k}={v}"]
        super().__init__(args, root)
        self.node_id = node_id
        self.mesh_addr = ("127.0.0.1", mesh_port)
        self.key = ""  # NodeId (hex), from the EDDY_MESH line
        self.spawned_at = 0.0  # perf_counter of the last start
        self.ready_at = 0.0  # perf_counter of its ready line

    def _is_ready_line(self, line: str) -> bool:
        if line.startswith(MESH):
            fields = dict(f.split("=", 1) for f in line.split()[1:])
            self.key = fields["node"]
            # the ready line follows at once and may already sit in the pipe's text buffer,
            # where the start loop's select() would not see it: read it here
            assert self.proc is not None and self.proc.stdout is not None
            line = self.proc.stdout.readline()
        return super()._is_ready_line(line)

    def start(self, timeout: float = 60.0) -> None:
        self.ready_line_s = None
        self.first_metadata_s = None
        self.spawned_at = time.perf_counter()
        super().start(timeout)
        self.ready_at = self.spawned_at + (self.ready_line_s or 0.0)

    def kill9(self) -> None:
        """SIGKILL, keeping the data dir."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def start_all(nodes: list[MeshNode]) -> None:
    """Start `nodes` at the same time (one thread each); raises the first failure."""
    errors: list[BaseException] = []

    def run(n: MeshNode) -> None:
        try:
            n.start()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(n,)) for n in nodes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


# ----------------------------------------------------------------------------- status


async def _states_of(addr: tuple[str, int]) -> dict[str, str] | None:
    try:
        answer = await control_call(addr, StatusRequest(), 5.0)
    except Exception:
        return None
    if not isinstance(answer, StatusResponse):
        return None
    return {n.node_key.hex(): n.state for n in answer.nodes}


async def _poll_round(nodes: list[MeshNode]) -> list[dict[str, str] | None]:
    return list(await asyncio.gather(*(_states_of(n.mesh_addr) for n in nodes)))


@dataclass
class Waited:
    seconds: float | None = None  # None: not within the time limit
    rounds: int = 0
    round_ms: list[float] = field(default_factory=list)


def wait_states(nodes: list[MeshNode], check: Callable[[list[dict[str, str] | None]], bool],
                since: float, timeout: float) -> Waited:
    """Poll every node's status until `check` holds; seconds from `since` (perf_counter)
    to the start of the polling round that saw it."""
    out = Waited()
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        t0 = time.perf_counter()
        seen = asyncio.run(_poll_round(nodes))
        out.rounds += 1
        out.round_ms.append((time.perf_counter() - t0) * 1e3)
        if check(seen):
            out.seconds = max(0.0, t0 - since)
            return out
        time.sleep(0.02)
    return out


def _all_say(keys: dict[str, str], state: str) -> Callable[[list[dict[str, str] | None]], bool]:
    """Every answer lists each of `keys` (hex NodeIds) in `state`."""
    def check(seen: list[dict[str, str] | None]) -> bool:
        return all(s is not None and all(s.get(k) == state for k in keys) for s in seen)
    return check


# ----------------------------------------------------------------------------- gossip


def gossip_cycle(root: str, ping_ms: int, unacked: int) -> dict[str, Any]:
    """One 5-node cluster: join, kill -9 of node 3, restart of node 3."""
    settings = {"mesh.ping.interval.ms": str(ping_ms), "mesh.ping.max.unacked": str(unacked)}
    ports = [free_udp_port() for _ in range(5)]
    nodes = [MeshNode(f"n{i + 1}", i + 1, ports[i], ports[0] if i else None, root, settings)
             for i in range(5)]
    res: dict[str, Any] = {}
    try:
        nodes[0].start()
        start_all(nodes[1:])
        last = max(n.ready_at for n in nodes[1:])
        res["startup_s"] = last - nodes[0].ready_at
        keys = {n.key: n.name for n in nodes}
        w = wait_states(nodes, _all_say(keys, "alive"), last, 60)
        res["join_s"], res["poll_round_ms"] = w.seconds, statistics.median(w.round_ms)
        if w.seconds is not None:
            res["join_from_spawn_s"] = w.seconds + last - max(n.spawned_at for n in nodes[1:])
        if w.seconds is None:
            res["error"] = "the 5 nodes did not all see each other alive in 60 s"
            return res
        victim = nodes[VICTIM - 1]
        others = [n for n in nodes if n is not victim]
        killed = time.perf_counter()
        victim.kill9()
        w = wait_states(others, _all_say({victim.key: victim.name}, "dead"), killed, 60)
        res["dead_s"] = w.seconds
        if w.seconds is None:
            res["error"] = f"{victim.name} was not marked dead everywhere in 60 s"
            return res
        restarted = time.perf_counter()
        victim.start()
        res["restart_ready_s"] = victim.ready_at - restarted
        w = wait_states(nodes, _all_say({victim.key: victim.name}, "alive"), victim.ready_at,
                        60)
        res["rejoin_s"] = w.seconds
        if w.seconds is None:
            res["error"] = f"{victim.name} was not alive everywhere 60 s after its restart"
    except Exception as exc:
        res["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        for n in nodes:
            n.cleanup()
    return res


def gossip_phase(root: str, repeat: int) -> list[dict[str, Any]]:
    out = []
    for ping_ms, unacked in PING_SETTINGS:
        runs = []
        for rep in range(repeat):
            r = gossip_cycle(root, ping_ms, unacked)
            say(f"gossip {ping_ms} ms x{unacked} run {rep + 1}/{repeat}: "
                + ", ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}"
                            for k, v in r.items()))
            runs.append(r)
        out.append({"ping_interval_ms": ping_ms, "ping_max_unacked": unacked, "runs": runs})
    return out


# ----------------------------------------------------------------------------- gateway


class RoutedSession(Session):
    """bench.runner's Session whose topics all land on broker `OWNER`: created through the
    node the clients talk to (a broker, or the gateway, which places a topic by rendezvous
    hashing of its name over the broker node ids), deleted on the owner."""

    def __init__(self, contact: MeshNode, owner: MeshNode, opts: Options) -> None:
        from confluent_kafka.admin import AdminClient

        super().__init__(contact, opts)
        self.owner_admin: Any = AdminClient({"bootstrap.servers": owner.bootstrap})

    def close(self) -> None:
        super().close()
        self.owner_admin = None

    def delete_topic(self, topic: str) -> None:
        """Best effort, on the owning broker (a gateway does not offer DeleteTopics)."""
        try:
            fs = self.owner_admin.delete_topics([topic], operation_timeout=20,
                                                request_timeout=20)
            fs[topic].result(30)
        except Exception as exc:
            say(f"could not delete {topic}: {exc}")

    def create_topic(self, phase: str, partitions: int | None = None) -> str:
        from confluent_kafka.admin import NewTopic

        while True:
            name = f"mesh-{phase}-{uuid.uuid4().hex[:8]}"
            if pick_node(name, [1, 2]) == OWNER:
                break
        fs = self.admin.create_topics(
            [NewTopic(name, num_partitions=partitions or self.opts.partitions,
                      replication_factor=1)], operation_timeout=20, request_timeout=20)
        fs[name].result(30)
        return name


def rtt_worker(p: dict[str, Any], queue: Any) -> None:
    workloads._guard(_rtt, queue, p)


def _rtt(p: dict[str, Any]) -> dict[str, Any]:
    """Sequential one-record produces, each flushed before the next: request latency."""
    from confluent_kafka import Producer

    failed = [0]

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            failed[0] += 1

    conf = workloads.producer_conf(p["bootstrap"], "1", 0)
    conf.update({"socket.nagle.disable": True, "delivery.report.only.error": False,
                 "on_delivery": on_delivery})
    prod = Producer(conf)
    workloads._wait_for_topic(prod, p["topic"], 1, 20)
    payload = os.urandom(p["size"])
    lat_us: list[float] = []
    for i in range(p["warmup"] + p["requests"]):
        t0 = time.perf_counter_ns()
        prod.produce(p["topic"], payload, partition=0)
        if prod.flush(10) != 0:
            raise TimeoutError(f"request {i} not acknowledged in 10 s")
        if i >= p["warmup"]:
            lat_us.append((time.perf_counter_ns() - t0) / 1000)
    lat_us.sort()
    return {"requests": len(lat_us), "failed": failed[0],
            "p50_ms": _pct(lat_us, 0.50) / 1000, "p99_ms": _pct(lat_us, 0.99) / 1000,
            "max_ms": lat_us[-1] / 1000 if lat_us else None}


def _pct(s: list[float], q: float) -> float:
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def rtt(session: RoutedSession, requests: int) -> dict[str, Any]:
    topic = session.create_topic("rtt", partitions=1)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    params = {"bootstrap": session.broker.bootstrap, "topic": topic, "size": 100,
              "warmup": min(100, max(10, requests // 10)), "requests": requests}
    proc = ctx.Process(target=rtt_worker, args=(params, q), daemon=True)
    proc.start()
    results = _collect(q, 1, 60 + requests * 0.1, [proc])
    session.delete_topic(topic)
    err = _errors(results)
    return {"error": err} if err else results[0]


def gateway_phase(root: str, opts: Options, rtt_requests: int) -> dict[str, Any]:
    ports = [free_udp_port() for _ in range(3)]
    b1 = MeshNode("broker1", 1, ports[0], None, root, {})
    b2 = MeshNode("broker2", 2, ports[1], ports[0], root, {})
    gw = MeshNode("gateway", GATEWAY_NODE_ID, ports[2], ports[0], root,
                  {"process.roles": "gateway"})
    nodes = [b1, b2, gw]
    res: dict[str, Any] = {"produce": {}, "consume": {}, "rtt": {}}
    sessions: list[RoutedSession] = []
    try:
        b1.start()
        start_all([b2, gw])
        keys = {n.key: n.name for n in nodes}
        w = wait_states(nodes, _all_say(keys, "alive"), max(b2.ready_at, gw.ready_at), 60)
        if w.seconds is None:
            res["error"] = "the brokers and the gateway did not all see each other alive"
            return res
        paths = {"direct": RoutedSession(b1, b1, opts), "gateway": RoutedSession(gw, b1, opts)}
        sessions = list(paths.values())
        for rep in range(opts.repeat):
            for path, s in paths.items():
                p = s.produce(f"{path}-{rep}", 1024, "1")
                res["produce"].setdefault(path, []).append(p)
                say(f"produce {path} run {rep + 1}/{opts.repeat}: {_brief(p)}")
                if p.get("acked") and "error" not in p:
                    c = s.consume(path, p["topic"], p["acked"])
                else:
                    c = {"error": f"no data: produce {path} failed"}
                res["consume"].setdefault(path, []).append(c)
                say(f"consume {path} run {rep + 1}/{opts.repeat}: {_brief(c)}")
                if "topic" in p:
                    s.delete_topic(p["topic"])
                if not all(n.alive() for n in nodes):
                    raise RuntimeError("a node died: " + " | ".join(
                        f"{n.name}: {n.log_tail(5)}" for n in nodes if not n.alive()))
        for path, s in paths.items():
            res["rtt"][path] = [rtt(s, rtt_requests) for _ in range(opts.repeat)]
            say(f"round trip {path}: {[_brief(r) for r in res['rtt'][path]]}")
    except Exception as exc:
        res["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        for s in sessions:
            s.close()
        for n in nodes:
            n.cleanup()
    return res


def _brief(r: dict[str, Any]) -> str:
    if "error" in r:
        return f"ERROR {r['error']}"
    if "p50_ms" in r:
        return f"p50 {r['p50_ms']:.2f} ms p99 {r['p99_ms']:.2f} ms"
    return f"{r['msgs_s']:,.0f} records/s {r['mib_s']:.1f} MiB/s"


# ----------------------------------------------------------------------------- report


def _med(vals: list[float | None]) -> float | None:
    ok = [v for v in vals if v is not None]
    return statistics.median(ok) if ok else None


def summarize(gossip: list[dict[str, Any]], kafka: dict[str, Any]) -> dict[str, Any]:
    """Medians over the runs, and the errors, in the shape the table prints."""
    errors: list[str] = []
    g_rows = []
    for setting in gossip:
        runs = setting["runs"]
        errors += [r["error"] for r in runs if "error" in r]
        tag = f"{setting['ping_interval_ms']} ms x{setting['ping_max_unacked']}"
        for key, label in GOSSIP_ROWS.items():
            vals = [r.get(key) for r in runs]
            ok = [v for v in vals if v is not None]
            g_rows.append({"row": label, "ping": tag, "median_s": _med(vals),
                           "min_s": min(ok) if ok else None, "max_s": max(ok) if ok else None,
                           "runs": len(ok), "of": len(runs),
                           "poll_round_ms": _med([r.get("poll_round_ms") for r in runs])})
    if "error" in kafka:
        errors.append(kafka["error"])
    k_rows: dict[str, dict[str, Any]] = {}
    for kind in ("produce", "consume"):
        for path, runs in kafka.get(kind, {}).items():
            errors += [r["error"] for r in runs if "error" in r]
            ok = sorted((r for r in runs if "error" not in r), key=lambda r: r["mib_s"])
            if ok:
                m = ok[len(ok) // 2]
                k_rows[f"{kind} {path}"] = {"records_s": m["msgs_s"],
                                            "mb_s": m["mib_s"] * 1024 * 1024 / 1e6,
                                            "samples_mib_s": [r["mib_s"] for r in ok]}
    for path, runs in kafka.get("rtt", {}).items():
        errors += [r["error"] for r in runs if "error" in r]
        ok = [r for r in runs if "error" not in r]
        if ok:
            k_rows[f"round trip {path}"] = {"p50_ms": _med([r["p50_ms"] for r in ok]),
                                            "p99_ms": _med([r["p99_ms"] for r in ok]),
                                            "requests": ok[0]["requests"]}
    for kind, key in (("produce", "mb_s"), ("consume", "mb_s"), ("round trip", "p50_ms")):
        d, g = k_rows.get(f"{kind} direct"), k_rows.get(f"{kind} gateway")
        if d and g and d[key]:
            g["ratio"] = g[key] / d[key]
    return {"gossip": g_rows, "kafka": k_rows, "errors": errors}


def _f(v: float | None, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def print_table(summary: dict[str, Any], opts: Options, rtt_requests: int) -> None:
    print("gossip convergence, 5 eddy serve processes on 127.0.0.1 (seconds; status polled "
          "on every node at once)")
    head = (f"{'event':<30} {'ping':>11} {'median s':>9} {'min s':>7} {'max s':>7} "
            f"{'runs':>5} {'poll ms':>8}")
    print(head)
    print("-" * len(head))
    for r in summary["gossip"]:
        print(f"{r['row']:<30} {r['ping']:>11} {_f(r['median_s'], '.2f'):>9} "
              f"{_f(r['min_s'], '.2f'):>7} {_f(r['max_s'], '.2f'):>7} "
              f"{r['runs']:>2}/{r['of']:<2} {_f(r['poll_round_ms'], '.0f'):>8}")
    print()
    print(f"Kafka clients through the gateway vs to the owning broker directly: "
          f"{opts.records:,} x 1 KiB records, acks=1, linger.ms=5, {opts.partitions} partitions; "
          f"round trip: {rtt_requests:,} sequential 100 B produces")
    head = (f"{'path':<30} {'records/s':>11} {'MB/s':>8} {'p50 ms':>8} {'p99 ms':>8} "
            f"{'gw/direct':>10}")
    print(head)
    print("-" * len(head))
    for label in KAFKA_ROWS:
        r = summary["kafka"].get(label)
        if r is None:
            print(f"{label:<30} {'failed':>11}")
            continue
        print(f"{label:<30} {_f(r.get('records_s'), ',.0f'):>11} {_f(r.get('mb_s'), '.1f'):>8} "
              f"{_f(r.get('p50_ms'), '.2f'):>8} {_f(r.get('p99_ms'), '.2f'):>8} "
              f"{_f(r.get('ratio'), '.2f'):>10}")
    for e in summary["errors"]:
        print(f"ERROR: {e}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.mesh_cluster", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help="small sizes, one run each (the smoke test; ~1 min)")
    ap.add_argument("--repeat", type=int, help="runs per measurement, median reported (3; "
                    "quick 1)")
    ap.add_argument("--records", type=int, help="1 KiB records per produce (200,000; quick "
                    "2,000)")
    ap.add_argument("--requests", type=int, help="sequential produces per round-trip run "
                    "(2,000; quick 100)")
    ap.add_argument("--only", choices=["gossip", "gateway"], help="run one part only")
    ap.add_argument("--json", metavar="PATH", help="also write the results as JSON (- : stdout)")
    args = ap.parse_args(argv)
    repeat = max(1, args.repeat or (1 if args.quick else 3))
    records = args.records or (2_000 if args.quick else 200_000)
    requests = args.requests or (100 if args.quick else 2_000)
    opts = Options(records=records, seconds=60.0, partitions=4, producers=1, consumers=2,
                   linger_ms=5.0, repeat=repeat)
    root = tempfile.mkdtemp(prefix="eddy-mesh-bench-")
    try:
        gossip = gossip_phase(root, repeat) if args.only != "gateway" else []
        kafka = gateway_phase(root, opts, requests) if args.only != "gossip" else {}
    finally:
        shutil.rmtree(root, ignore_errors=True)
    summary = summarize(gossip, kafka)
    print_table(summary, opts, requests)
    if args.json:
        doc = json.dumps({"summary": summary, "gossip": gossip, "kafka": kafka,
                          "repeat": repeat, "records": records, "requests": requests,
                          "cpus": os.cpu_count()}, indent=2, default=str)
        if args.json == "-":
            print(doc)
        else:
            Path(args.json).write_text(doc)
    return 1 if summary["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
