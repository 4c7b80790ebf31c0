"""`python -m bench.security [--rounds 3] [--smoke] [--json PATH]`: what TLS and SASL cost.

1. Throughput, side by side on one `eddy serve` with a PLAINTEXT and a SASL_SSL listener
   (SCRAM-SHA-512, a test-made certificate; `sasl.bootstrap.user` makes the user): the main
   bench's produce phase (1 KiB records, acks=1, linger.ms=5, 4 partitions, librdkafka with
   bench.workloads' settings) and its read-back, through one listener then the other, the
   order alternating each round. Per side: MiB/s, records/s, the broker's CPU time per
   record; medians over the rounds and SASL_SSL's difference.
2. Connections per second on the same broker: new connections opened one after another by
   `--connectors` processes (Python's ssl, a full handshake each, no session resumption),
   each answering one ApiVersions before it is closed: plain TCP, TLS (the SSL listener),
   SCRAM-SHA-512 on SASL_PLAINTEXT (SASL authentications/s) and TLS + SCRAM (SASL_SSL).
   Also the broker's CPU time per connection.
3. Propagation on a 3-node cluster (every node a broker and a voter, StandardAuthorizer,
   INTERNAL PLAINTEXT + EXTERNAL SASL_PLAINTEXT listeners): a SCRAM user created through
   node 1 (AlterUserScramCredentials), the time until it logs in on nodes 2 and 3; an ACL
   created through node 1 (CreateAcls), the time until DescribeAcls on nodes 2 and 3 lists
   it ("ACL propagation ms"), both from the request's start.

Prints tables (rich on a terminal); `--json PATH` writes the report. Exits 1 when a phase
failed; never on a timing.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.brokers import EddyBroker
from bench.procstat import cpu_seconds
from bench.runner import Options, Session, _collect, _ctx, _errors, say
from bench.security_wire import KINDS, Certs, connect_worker, login_ok, make_certs

ADMIN = ("admin", "admin-bench-secret")
MECHANISM = "SCRAM-SHA-512"
RECORD_SIZE = 1024
LISTENERS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SIDES = ("plaintext", "sasl_ssl")
PROPAGATION_DEADLINE_S = 10.0


@dataclass
class Front:
    """What bench.runner.Session needs of a broker: where to connect, whose CPU to count."""

    bootstrap: str
    pid: int
    name: str = "eddy"


def listener_addrs(broker: EddyBroker, names: tuple[str, ...],
                   timeout: float = 10.0) -> dict[str, str]:
    """NAME -> HOST:PORT from the broker's EDDY_LISTENER lines (they follow EDDY_READY)."""
    deadline = time.monotonic() + timeout
    while True:
        found: dict[str, str] = {}
        for line in list(broker._stdout_lines):
            if line.startswith("EDDY_LISTENER "):
                fields = dict(f.split("=", 1) for f in line.split()[1:])
                found[fields["name"]] = fields["kafka"]
        if all(n in found for n in names):
            return found
        if time.monotonic() > deadline:
            raise RuntimeError(f"listeners {names} not announced; got {found}")
        time.sleep(0.02)


def secure_settings(certs: Certs) -> dict[str, str]:
    return {"sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
            "sasl.bootstrap.user": f"{ADMIN[0]}:{ADMIN[1]}",
            "ssl.keystore.certificate.chain": str(certs.server_chain),
            "ssl.keystore.key": str(certs.server_key),
            # the propagation poll fails logins on purpose until the user arrives
            "sasl.failed.logins.per.ip.per.minute": "1000000",
            "connection.failed.authentication.delay.ms": "0"}


def _args(settings: dict[str, str]) -> list[str]:
    return [a for k, v in settings.items() for a in ("--set", f"{k}={v}")]


def client_conf(side: str, certs: Certs) -> dict[str, Any]:
    if side == "plaintext":
        return {}
    return {"security.protocol": "SASL_SSL", "sasl.mechanism": MECHANISM,
            "sasl.username": ADMIN[0], "sasl.password": ADMIN[1],
            "ssl.ca.location": str(certs.ca)}


# ---------------------------------------------------------------------------- throughput


def throughput_run(broker: EddyBroker, addr: str, side: str, certs: Certs,
                   opts: Options) -> dict[str, Any]:
    """bench.runner's produce phase and read-back through ``addr`` with ``side``'s client
    settings (Options.client_conf, which the spawned workers get too)."""
    opts = dataclasses.replace(opts, client_conf=client_conf(side, certs))
    out: dict[str, Any] = {"side": side}
    session = Session(Front(addr, broker.pid), opts)  # type: ignore[arg-type]
    try:
        produced = session.produce(side, RECORD_SIZE, "1")
        out["produce"] = produced
        if "error" not in produced:
            out["consume"] = session.consume(side, produced["topic"], produced["acked"])
        if "topic" in produced:
            session.delete_topic(produced["topic"])
    except Exception as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        session.close()
    for kind in ("produce", "consume"):
        r = out.get(kind)
        if r is not None and "error" in r and "error" not in out:
            out["error"] = f"{kind}: {r['error']}"
    return out


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per phase and side: every run's MiB/s, records/s and broker CPU us per record, their
    medians, and SASL_SSL's difference from PLAINTEXT in % of PLAINTEXT."""
    out: dict[str, Any] = {}
    for kind in ("produce", "consume"):
        phase: dict[str, Any] = {}
        for run in runs:
            r = run.get(kind)
            if r is None or "error" in r or not r.get("msgs_s"):
                continue
            s = phase.setdefault(run["side"], {"mib_s": [], "msgs_s": [],
                                               "cpu_us_per_record": []})
            s["mib_s"].append(round(float(r["mib_s"]), 2))
            s["msgs_s"].append(round(float(r["msgs_s"])))
            if r.get("broker_cores") is not None:
                s["cpu_us_per_record"].append(
                    round(float(r["broker_cores"]) / float(r["msgs_s"]) * 1e6, 3))
        for s in phase.values():
            for m in ("mib_s", "msgs_s", "cpu_us_per_record"):
                if s[m]:
                    s[f"median_{m}"] = round(statistics.median(s[m]), 3)
        if all(k in phase for k in SIDES):
            for m in ("mib_s", "cpu_us_per_record"):
                a, b = (phase[k].get(f"median_{m}") for k in SIDES)
                if a and b:
                    phase[f"sasl_ssl_{m}_diff_pct"] = round((b - a) / a * 100, 1)
        out[kind] = phase
    return out


# ---------------------------------------------------------------------------- connections


def connection_rate(broker: EddyBroker, addrs: dict[str, str], kind: str, certs: Certs,
                    connectors: int, seconds: float) -> dict[str, Any]:
    listener = {"plaintext": "PLAINTEXT", "tls": "SSL", "sasl": "SASL_PLAINTEXT",
                "tls_sasl": "SASL_SSL"}[kind]
    host, port = addrs[listener].rsplit(":", 1)
    ctx = _ctx()
    barrier, q = ctx.Barrier(connectors + 1), ctx.Queue()
    p = {"kind": kind, "host": host, "port": int(port), "ca": str(certs.ca),
         "user": ADMIN[0], "password": ADMIN[1], "mechanism": MECHANISM, "seconds": seconds}
    procs = [ctx.Process(target=connect_worker, args=(p, barrier, q), daemon=True)
             for _ in range(connectors)]
    for proc in procs:
        proc.start()
    try:
        barrier.wait(timeout=90)
    except threading.BrokenBarrierError:
        return {"error": _errors(_collect(q, connectors, 5, procs)) or "workers never started"}
    cpu0, w0 = cpu_seconds(broker.pid), time.monotonic_ns()
    results = _collect(q, connectors, seconds + 60, procs)
    cpu1, w1 = cpu_seconds(broker.pid), time.monotonic_ns()
    err = _errors(results)
    if err:
        return {"error": err}
    secs = (max(r["t1_ns"] for r in results) - min(r["t0_ns"] for r in results)) / 1e9
    done = sum(r["connections"] for r in results)
    out: dict[str, Any] = {
        "listener": listener, "connectors": connectors, "seconds": round(secs, 3),
        "connections": done, "failed": sum(r["failed"] for r in results),
        "per_s": round(done / secs, 1) if secs > 0 else 0.0,
        "client_cores": round(sum(r["client_cpu_s"] for r in results) / secs, 3),
    }
    if cpu0 is not None and cpu1 is not None and done:
        out["broker_cores"] = round((cpu1 - cpu0) / ((w1 - w0) / 1e9), 3)
        out["broker_cpu_ms_per_connection"] = round((cpu1 - cpu0) / done * 1e3, 3)
    first = next((r["first_error"] for r in results if r["first_error"]), None)
    if out["failed"] or not done:
        out["error"] = f"{out['failed']} connections failed ({first}), {done} succeeded"
    return out


# ---------------------------------------------------------------------------- propagation


def _stats(ms: list[float]) -> dict[str, Any]:
    return {"all": [round(m, 1) for m in ms], "median": round(statistics.median(ms), 1),
            "max": round(max(ms), 1), "min": round(min(ms), 1)} if ms else {}


def _poll(checks: dict[int, Callable[[], bool]], t0: float) -> dict[int, float]:
    """node -> ms from ``t0`` until its check first held (every check polled in turn)."""
    seen: dict[int, float] = {}
    while len(seen) < len(checks):
        for node, check in checks.items():
            if node not in seen and check():
                seen[node] = (time.perf_counter() - t0) * 1e3
        if time.perf_counter() - t0 > PROPAGATION_DEADLINE_S:
            missing = sorted(set(checks) - set(seen))
            raise TimeoutError(f"not on nodes {missing} within {PROPAGATION_DEADLINE_S} s")
        time.sleep(0.002)
    return seen


def acl_listed(admin: Any, topic: str) -> bool:
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    try:
        found = admin.describe_acls(AclBindingFilter(
            ResourceType.TOPIC, topic, ResourcePatternType.LITERAL,
            None, None,  # type: ignore[arg-type]  # any principal, any host
            AclOperation.ANY, AclPermissionType.ANY), request_timeout=5).result(10)
    except Exception:
        return False
    return any(b.name == topic for b in found)


def propagation_round(out: dict[str, Any], nodes: dict[int, Any], admins: dict[int, Any],
                      externals: dict[int, str], i: int) -> None:
    """Fills ``out`` as it goes (what was measured stays when a later step fails)."""
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    user, password = f"bench-user-{i}-{os.getpid()}", f"pw-{i}"
    others = [n for n in nodes if n != 1]
    t0 = time.perf_counter()
    fs = admins[1].alter_user_scram_credentials([UserScramCredentialUpsertion(
        user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), password.encode())])
    fs[user].result(20)
    out["user_answer_ms"] = round((time.perf_counter() - t0) * 1e3, 1)

    def logs_in(n: int) -> Callable[[], bool]:
        host, port = externals[n].rsplit(":", 1)
        return lambda: login_ok(host, int(port), user, password, MECHANISM)

    out["user_ms"] = {str(n): round(ms, 1) for n, ms in
                      _poll({n: logs_in(n) for n in others}, t0).items()}
    topic = f"bench-acl-{i}-{os.getpid()}"
    binding = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL,
                         f"User:{user}", "*", AclOperation.READ, AclPermissionType.ALLOW)
    t0 = time.perf_counter()
    admins[1].create_acls([binding], request_timeout=20)[binding].result(30)
    out["acl_answer_ms"] = round((time.perf_counter() - t0) * 1e3, 1)

    def lists(n: int) -> Callable[[], bool]:
        return lambda: acl_listed(admins[n], topic)

    out["acl_ms"] = {str(n): round(ms, 1) for n, ms in
                     _poll({n: lists(n) for n in others}, t0).items()}


def propagation(rounds: int, certs: Certs) -> dict[str, Any]:
    from confluent_kafka.admin import AdminClient

    from bench.mesh_cluster import MeshNode, free_udp_port, start_all
    from bench.metadata_failover import describe as describe_cluster

    ids = (1, 2, 3)
    ports = {i: free_udp_port() for i in ids}
    voters = ",".join(f"{i}@127.0.0.1:{p}" for i, p in ports.items())
    settings = {
        "process.roles": "broker,controller", "controller.quorum.voters": voters,
        "listeners": "INTERNAL://127.0.0.1:0,EXTERNAL://127.0.0.1:0",
        "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:SASL_PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": f"User:ANONYMOUS;User:{ADMIN[0]}", **secure_settings(certs)}
    root = tempfile.mkdtemp(prefix="eddy-bench-security-")
    nodes = {i: MeshNode(f"n{i}", i, ports[i], None, root, settings) for i in ids}
    out: dict[str, Any] = {"nodes": len(ids), "rounds": []}
    admins: dict[int, Any] = {}
    failed = False
    try:
        start_all(list(nodes.values()))
        externals = {i: listener_addrs(n, ("INTERNAL", "EXTERNAL"))["EXTERNAL"]
                     for i, n in nodes.items()}
        deadline = time.monotonic() + 60
        while not all(describe_cluster(n)[1] == 3 for n in nodes.values()):
            if time.monotonic() > deadline:
                raise TimeoutError("the 3 nodes never all listed 3 brokers")
            time.sleep(0.1)
        admins.update({i: AdminClient({"bootstrap.servers": n.bootstrap, "log_level": 0})
                       for i, n in nodes.items()})
        for i in range(rounds):
            out["rounds"].append({})
            propagation_round(out["rounds"][-1], nodes, admins, externals, i)
    except Exception as exc:
        failed = True
        out["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        admins.clear()  # before the nodes go: no reconnect noise from librdkafka
        for what in ("user", "acl"):
            out[f"{what}_ms"] = _stats([v for r in out["rounds"]
                                        for v in r.get(f"{what}_ms", {}).values()])
            out[f"{what}_answer_ms"] = _stats([r[f"{what}_answer_ms"] for r in out["rounds"]
                                               if f"{what}_answer_ms" in r])
        for n in nodes.values():
            if n.alive():
                n.stop()
            n.cleanup(keep_logs=failed)
        if failed:
            say(f"the cluster's logs are kept under {root}")
    return out


# ---------------------------------------------------------------------------------- main


def _table(title: str, header: list[str], rows: list[list[str]]) -> None:
    try:
        if not sys.stdout.isatty():
            raise ImportError
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
        print(title)
        for r in [header, ["-" * w for w in widths], *rows]:
            print("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                            for i, (c, w) in enumerate(zip(r, widths, strict=True))).rstrip())
        print()
        return
    table = Table(title=title)
    for i, h in enumerate(header):
        table.add_column(h, justify="left" if i == 0 else "right", no_wrap=i == 0)
    for r in rows:
        table.add_row(*r)
    Console().print(table)


def _f(v: Any, fmt: str = "{:,.1f}") -> str:
    return fmt.format(v) if isinstance(v, int | float) else "-"


def render(report: dict[str, Any]) -> None:
    summary = report["throughput"]["summary"]
    rows = []
    for kind in ("produce", "consume"):
        ph = summary.get(kind, {})
        for label, m, fmt in (("MiB/s", "mib_s", "{:,.1f}"), ("records/s", "msgs_s", "{:,.0f}"),
                              ("broker CPU us/record", "cpu_us_per_record", "{:,.2f}")):
            diff = ph.get(f"sasl_ssl_{m}_diff_pct")
            rows.append([f"{kind} 1 KiB acks=1 {label} (median)",
                         *(_f(ph.get(s, {}).get(f"median_{m}"), fmt) for s in SIDES),
                         _f(diff, "{:+.1f} %")])
    _table(f"PLAINTEXT vs SASL_SSL ({MECHANISM}), {report['rounds']} rounds",
           ["metric", "PLAINTEXT", "SASL_SSL", "SASL_SSL vs PLAINTEXT"], rows)
    conns = report["connections"]
    labels = {"plaintext": "TCP (PLAINTEXT)", "tls": "TLS handshakes (SSL)",
              "sasl": f"SASL authentications ({MECHANISM}, SASL_PLAINTEXT)",
              "tls_sasl": f"TLS + {MECHANISM} (SASL_SSL)"}
    _table(f"new connections/s ({report['options']['connectors']} client processes, one "
           "ApiVersions each)", ["connection", "per s", "broker CPU ms each", "broker cores",
                                 "client cores"],
           [[labels[k], _f(c.get("per_s"), "{:,.0f}"),
             _f(c.get("broker_cpu_ms_per_connection"), "{:.2f}"),
             _f(c.get("broker_cores"), "{:.2f}"), _f(c.get("client_cores"), "{:.2f}")]
            for k, c in conns.items()])
    prop = report.get("propagation", {})
    rows = [[label, _f(prop.get(key, {}).get("median")), _f(prop.get(key, {}).get("max")),
             _f(prop.get(key, {}).get("min"))]
            for label, key in (("ACL propagation ms (to nodes 2, 3)", "acl_ms"),
                               ("CreateAcls answered by node 1 ms", "acl_answer_ms"),
                               ("SCRAM user propagation ms (login on 2, 3)", "user_ms"),
                               ("AlterUserScramCredentials answered ms", "user_answer_ms"))]
    _table(f"3-node propagation, {len(prop.get('rounds', []))} rounds, from the request",
           ["measure", "median", "max", "min"], rows)


def problems(report: dict[str, Any]) -> list[str]:
    found = [f"throughput {r['side']}: {r['error']}" for r in report["throughput"]["runs"]
             if "error" in r]
    found += [f"connections {k}: {c['error']}" for k, c in report["connections"].items()
              if "error" in c]
    if "error" in report.get("propagation", {}):
        found.append(f"propagation: {report['propagation']['error']}")
    return found + [str(e) for e in report.get("errors", [])]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.security",
                                 description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--rounds", type=int, help="throughput rounds of both sides (3; smoke 1)")
    ap.add_argument("--seconds", type=float,
                    help="produce seconds per run and connection-rate seconds (5; smoke 0.5)")
    ap.add_argument("--records", type=int, help="records per produce (2,000,000; smoke 2,000)")
    ap.add_argument("--connectors", type=int, default=2, help="connecting processes (2)")
    ap.add_argument("--propagation-rounds", type=int, help="(10; smoke 1; 0: skip)")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes for CI (~30 s)")
    ap.add_argument("--json", type=Path, help="write the report here")
    a = ap.parse_args(argv)
    rounds = a.rounds or (1 if a.smoke else 3)
    seconds = a.seconds or (0.5 if a.smoke else 5.0)
    prop_rounds = (a.propagation_rounds if a.propagation_rounds is not None
                   else 1 if a.smoke else 10)
    opts = Options(records=a.records or (2_000 if a.smoke else 2_000_000), seconds=seconds,
                   partitions=4, producers=1, consumers=1 if a.smoke else 2)
    report: dict[str, Any] = {
        "smoke": a.smoke, "rounds": rounds, "record_size": RECORD_SIZE, "mechanism": MECHANISM,
        "options": {"records": opts.records, "seconds": seconds, "partitions": opts.partitions,
                    "consumers": opts.consumers, "connectors": a.connectors},
        "throughput": {"runs": []}, "connections": {}, "errors": []}
    with tempfile.TemporaryDirectory(prefix="eddy-bench-certs-") as tmp:
        certs = make_certs(Path(tmp))
        listeners = ",".join(f"{n}://127.0.0.1:0" for n in LISTENERS)
        broker = EddyBroker(_args({"listeners": listeners, **secure_settings(certs)}))
        try:
            broker.start()
            addrs = listener_addrs(broker, LISTENERS)
            side_addr = {"plaintext": addrs["PLAINTEXT"], "sasl_ssl": addrs["SASL_SSL"]}
            for rnd in range(rounds):
                for side in SIDES if rnd % 2 == 0 else SIDES[::-1]:
                    say(f"round {rnd + 1}/{rounds}: {side}")
                    run = throughput_run(broker, side_addr[side], side, certs, opts)
                    report["throughput"]["runs"].append(run)
            for kind in KINDS:
                say(f"connections: {kind}")
                report["connections"][kind] = connection_rate(
                    broker, addrs, kind, certs, a.connectors, seconds)
        except Exception as exc:
            report["errors"].append(f"broker: {type(exc).__name__}: {exc}")
        finally:
            failed = bool(report["errors"])
            if broker.alive():
                broker.stop()
            broker.cleanup(keep_logs=failed)
            if failed:
                say(f"the broker's log is kept: {broker.log_path}")
        report["throughput"]["summary"] = summarize(report["throughput"]["runs"])
        if prop_rounds > 0:
            say(f"propagation: 3-node cluster, {prop_rounds} rounds")
            report["propagation"] = propagation(prop_rounds, certs)
    render(report)
    found = problems(report)
    for p in found:
        say(p)
    if a.json is not None:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(report, indent=2) + "\n")
        say(f"report: {a.json}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
