"""`python -m bench.registry [--seconds 10] [--smoke]`: the schema registry (issue 15) served
by a real `eddy serve` (a fresh data dir, the Kafka listener and the registry on free
loopback ports), under 32 concurrent keep-alive clients.

Setup registers `--schemas` distinct Avro records (subject `bench-<i>-value` each) with
http.client and reads back every id's answer and every re-registration's answer (the bodies
the load must get back). Then, each phase for `--seconds` after `--warmup` seconds:

1. lookups: GET /schemas/ids/{id}, over every registered id in turn;
2. re-registers: POST /subjects/{s}/versions of a schema the subject already has (the
   idempotent path every producer start takes);
3. new registers: POST /subjects/{s}/versions of a new schema under a new subject each
   (written to `_schemas`).

The load is `--clients` processes (bench.registry_load: raw non-blocking sockets, pre-built
requests, one request in flight per connection) sharing `--connections` connections. Each
phase reports requests/s, p50/p99/max latency, errors (a status other than 200, a body other
than the expected one, a dropped connection) and the CPU (cores) used meanwhile by the
server, by the clients and by everything else on the machine, so a client-bound run (or
one sharing the machine with another job) shows as such.
`--profile DIR` runs py-spy on the server during each phase (bench.flame reads it).

Prints a table; writes bench/results/<stamp>-registry[-smoke].json (unless --no-save).
Exits 1 when a phase failed or saw an error; never on a timing.
"""

from __future__ import annotations

import argparse
import datetime
import http.client
import json
import multiprocessing as mp
import queue as queue_mod
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from bench.brokers import EddyBroker
from bench.procstat import cpu_seconds, machine_busy_seconds
from bench.registry_load import FreshPost, Spec, get_request, percentile, post_request, run_worker

RESULTS_DIR = Path(__file__).resolve().parent / "results"
PHASES = ("lookups", "reregisters", "new_registers")
LOOKUP_TARGET = 5000.0
_FIELD_TYPES = ("int", "long", "string", "double", "boolean")


def say(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def avro_schema(name: str, extra_fields: int) -> str:
    """An Avro record ``name`` with an id, a name and ``extra_fields`` more fields."""
    fields: list[dict[str, Any]] = [{"name": "id", "type": "long"},
                                    {"name": "name", "type": "string"}]
    fields += [{"name": f"f{k}", "type": _FIELD_TYPES[k % len(_FIELD_TYPES)]}
               for k in range(extra_fields)]
    return json.dumps({"type": "record", "name": name, "namespace": "bench.registry",
                       "fields": fields}, separators=(",", ":"))


def register_body(schema: str) -> bytes:
    return json.dumps({"schema": schema}).encode()


# ------------------------------------------------------------------------------- server


class RegistryBroker(EddyBroker):
    """`eddy serve` with the registry on a free loopback port; its URL from the startup log."""

    def __init__(self) -> None:
        super().__init__(["--set", "registry.listener=127.0.0.1:0"])
        self.registry_port = 0

    def start(self, timeout: float = 30.0) -> None:
        super().start(timeout)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.log_path.read_text(errors="replace")
            marker = "schema registry on http://127.0.0.1:"
            at = text.find(marker)
            if at >= 0:
                digits = text[at + len(marker):].split(maxsplit=1)[0]
                if digits.isdigit():
                    self.registry_port = int(digits)
                    return
            time.sleep(0.05)
        raise RuntimeError(f"no registry startup line in the log:\n{self.log_tail()}")


def call(conn: http.client.HTTPConnection, method: str, path: str,
         body: bytes | None = None) -> tuple[int, bytes]:
    headers = {"Accept": "application/vnd.schemaregistry.v1+json"}
    if body is not None:
        headers["Content-Type"] = "application/vnd.schemaregistry.v1+json"
    conn.request(method, path, body=body, headers=headers)
    answer = conn.getresponse()
    return answer.status, answer.read()


def setup(port: int, count: int) -> dict[str, Any]:
    """Register ``count`` schemas; the ids and the bodies the load must get back."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    ids, id_bodies, reregister_bodies = [], [], []
    t0 = time.perf_counter()
    try:
        for i in range(count):
            body = register_body(avro_schema(f"Rec{i}", i % 8))
            status, answer = call(conn, "POST", f"/subjects/bench-{i}-value/versions", body)
            if status != 200:
                raise RuntimeError(f"registering schema {i}: HTTP {status} {answer[:200]!r}")
            ids.append(int(json.loads(answer)["id"]))
        took = time.perf_counter() - t0
        if len(set(ids)) != count:
            raise RuntimeError(f"{count} distinct schemas got {len(set(ids))} distinct ids")
        for i, schema_id in enumerate(ids):
            status, answer = call(conn, "GET", f"/schemas/ids/{schema_id}")
            if status != 200 or json.loads(answer).get("schema") is None:
                raise RuntimeError(f"GET /schemas/ids/{schema_id}: HTTP {status} {answer!r}")
            id_bodies.append(answer)
            status, again = call(conn, "POST", f"/subjects/bench-{i}-value/versions",
                                 register_body(avro_schema(f"Rec{i}", i % 8)))
            if status != 200 or json.loads(again).get("id") != schema_id:
                raise RuntimeError(f"re-registering schema {i} answered HTTP {status} "
                                   f"{again[:200]!r}, not id {schema_id}")
            reregister_bodies.append(again)
    finally:
        conn.close()
    return {"ids": ids, "id_bodies": id_bodies, "reregister_bodies": reregister_bodies,
            "register_s": took}


def specs(phase: str, port: int, state: dict[str, Any], clients: int,
          connections: int) -> list[Spec]:
    """One Spec per client process, the connections spread over them."""
    host, count = "127.0.0.1", len(state["ids"])
    shares = [connections // clients + (1 if w < connections % clients else 0)
              for w in range(clients)]
    if phase == "lookups":
        requests = [get_request(host, port, f"/schemas/ids/{i}") for i in state["ids"]]
        return [Spec(host, port, n, requests, state["id_bodies"]) for n in shares]
    if phase == "reregisters":
        requests = [post_request(host, port, f"/subjects/bench-{i}-value/versions",
                                 register_body(avro_schema(f"Rec{i}", i % 8)))
                    for i in range(count)]
        return [Spec(host, port, n, requests, state["reregister_bodies"]) for n in shares]
    run = uuid.uuid4().hex[:8]
    body = register_body(avro_schema("New_{tag}", 3)).decode()
    return [Spec(host, port, n, fresh=FreshPost(host, port, "/subjects/new-{tag}-value/versions",
                                               body, run, w))
            for w, n in enumerate(shares)]


# -------------------------------------------------------------------------------- phases


def run_phase(broker: RegistryBroker, worker_specs: list[Spec], seconds: float,
              warmup: float) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    ready, out, go, times = ctx.Queue(), ctx.Queue(), ctx.Event(), ctx.Array("d", 2)
    procs = [ctx.Process(target=run_worker, args=(spec, w, ready, go, times, out), daemon=True)
             for w, spec in enumerate(worker_specs)]
    for p in procs:
        p.start()
    results: list[dict[str, Any]] = []
    try:
        for _ in procs:  # connected, or failed (its result then comes first)
            try:
                ready.get(timeout=30)
            except queue_mod.Empty:
                raise RuntimeError("a client process did not connect within 30 s") from None
        now = time.monotonic()
        times[0], times[1] = now + warmup, now + warmup + seconds
        go.set()
        time.sleep(max(0.0, times[0] - time.monotonic()))
        pids = [p.pid for p in procs if p.pid is not None]
        before = (cpu_seconds(broker.pid), [cpu_seconds(pid) for pid in pids],
                  machine_busy_seconds(), time.monotonic())
        time.sleep(max(0.0, times[1] - time.monotonic()))
        after = (cpu_seconds(broker.pid), [cpu_seconds(pid) for pid in pids],
                 machine_busy_seconds(), time.monotonic())
        deadline = time.monotonic() + 60
        while len(results) < len(procs) and time.monotonic() < deadline:
            try:
                results.append(out.get(timeout=0.5))
            except queue_mod.Empty:
                if not any(p.is_alive() for p in procs) and out.empty():
                    break
    finally:
        go.set()
        for p in procs:
            p.join(5)
            if p.is_alive():
                p.terminate()
                p.join(5)
    failed = [r for r in results if "error" in r]
    if failed or len(results) < len(procs):
        for r in failed:
            say(r.get("trace", ""))
        raise RuntimeError("; ".join(r["error"] for r in failed) or "a client gave no result")
    return summarize(results, before, after, seconds, len(worker_specs),
                     sum(s.connections for s in worker_specs))


def _cores(a: float | None, b: float | None, wall: float) -> float | None:
    return None if a is None or b is None or wall <= 0 else round((b - a) / wall, 2)


def summarize(results: list[dict[str, Any]], before: Any, after: Any, seconds: float,
              clients: int, connections: int) -> dict[str, Any]:
    lat = sorted(x for r in results for x in r["latencies"])
    ok, errors = sum(r["ok"] for r in results), sum(r["errors"] for r in results)
    wall = after[3] - before[3]
    client_cpu = [_cores(a, b, wall) for a, b in zip(before[1], after[1], strict=True)]
    server, machine = _cores(before[0], after[0], wall), _cores(before[2], after[2], wall)
    clients_total = round(sum(c or 0.0 for c in client_cpu), 2)
    return {
        "requests_s": round(ok / seconds, 1), "ok": ok, "errors": errors,
        "error_samples": [s for r in results for s in r["error_samples"]][:5],
        "p50_ms": round(percentile(lat, 50) * 1000, 3),
        "p99_ms": round(percentile(lat, 99) * 1000, 3),
        "max_ms": round(lat[-1] * 1000, 3) if lat else 0.0,
        # server CPU per answered request: what the server could do with a core to itself
        "server_us_per_request": None if server is None or not ok else
        round(server * wall / ok * 1e6, 1),
        "client_us_per_request": None if not ok else round(clients_total * wall / ok * 1e6, 1),
        "server_cores": server, "client_cores": clients_total, "client_cores_each": client_cpu,
        "machine_cores": machine,
        # what the rest of the machine used meanwhile (another job's load)
        "other_cores": None if machine is None or server is None else
        round(max(0.0, machine - server - clients_total), 2),
        "seconds": seconds, "clients": clients, "connections": connections,
    }


# ------------------------------------------------------------------------------- report


def render(results: dict[str, Any]) -> list[str]:
    head = (f"{'phase':<14} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} "
            f"{'ok':>8} {'errors':>6} {'server':>7} {'clients':>7} {'other':>6} "
            f"{'srv us/req':>10}")
    lines = [head, "-" * len(head)]
    for phase in PHASES:
        r = results.get(phase)
        if r is None:
            continue
        if "error" in r:
            lines.append(f"{phase:<14} failed: {r['error']}")
            continue

        def cores(key: str, r: dict[str, Any] = r) -> str:
            v = r.get(key)
            return "-" if v is None else f"{v:.2f}"

        lines.append(f"{phase:<14} {r['requests_s']:9.0f} {r['p50_ms']:8.2f} "
                     f"{r['p99_ms']:8.2f} {r['max_ms']:8.1f} {r['ok']:8d} {r['errors']:6d} "
                     f"{cores('server_cores'):>7} {cores('client_cores'):>7} "
                     f"{cores('other_cores'):>6} {cores('server_us_per_request'):>10}")
    lines.append("-" * len(head))
    look = results.get("lookups") or {}
    if "requests_s" in look:
        verdict = "PASS" if look["requests_s"] >= LOOKUP_TARGET else "FAIL"
        lines.append(f"lookups/s: {look['requests_s']:.0f} (target: at least "
                     f"{LOOKUP_TARGET:.0f}) {verdict}")
    return lines


def problems(results: dict[str, Any]) -> list[str]:
    out = []
    for phase, r in results.items():
        if not isinstance(r, dict):
            continue
        if "error" in r:
            out.append(f"{phase}: {r['error']}")
        elif r.get("errors"):
            out.append(f"{phase}: {r['errors']} errors, e.g. {r['error_samples'][:2]}")
        elif r.get("ok") == 0:
            out.append(f"{phase}: no request answered")
    return out


def run(a: argparse.Namespace, seconds: float, warmup: float, schemas: int) -> dict[str, Any]:
    from bench.runner import Options, Profiler

    results: dict[str, Any] = {}
    broker = RegistryBroker()
    try:
        broker.start()
        say(f"eddy serve pid {broker.pid}, registry on 127.0.0.1:{broker.registry_port}")
        state = setup(broker.registry_port, schemas)
        results["setup"] = {"schemas": schemas, "register_s": round(state["register_s"], 3),
                            "first_id": state["ids"][0], "last_id": state["ids"][-1]}
        for phase in a.only:
            say(f"registry: {phase} ({a.clients} clients, {a.connections} connections, "
                f"{seconds:g} s)")
            profiler = Profiler(Options(profile_dir=a.profile), broker, f"registry-{phase}",
                                seconds + warmup)
            try:
                results[phase] = run_phase(broker, specs(phase, broker.registry_port, state,
                                                         a.clients, a.connections),
                                           seconds, warmup)
            except Exception as exc:
                say(f"{phase}: {type(exc).__name__}: {exc}")
                results[phase] = {"error": f"{type(exc).__name__}: {exc}"}
            finally:
                profiler.finish()
            if not broker.alive():
                raise RuntimeError(f"eddy serve exited: {broker.log_tail()}")
    except Exception as exc:
        say(f"registry bench: {type(exc).__name__}: {exc}")
        results["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        broker.stop()
        broker.cleanup(keep_logs="error" in results)
        if "error" in results:
            say(f"the server's log is kept: {broker.log_path}")
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.registry",
                                 description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--seconds", type=float, help="measured seconds per phase (10; smoke 0.5)")
    ap.add_argument("--warmup", type=float, help="seconds of load before measuring (2; smoke 0.2)")
    ap.add_argument("--schemas", type=int, help="distinct schemas registered first (100; smoke 10)")
    ap.add_argument("--connections", type=int, default=32, help="keep-alive connections (32)")
    ap.add_argument("--clients", type=int, default=2, help="client processes sharing them (2)")
    ap.add_argument("--only", nargs="+", choices=PHASES, default=list(PHASES),
                    help="which phases to run (all)")
    ap.add_argument("--profile", type=Path, help="py-spy the server per phase into this dir")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes for CI")
    ap.add_argument("--no-save", action="store_true", help="do not write the JSON results")
    ap.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    a = ap.parse_args(argv)
    if not 1 <= a.clients <= a.connections:
        ap.error("--clients must be between 1 and --connections")
    seconds = a.seconds or (0.5 if a.smoke else 10.0)
    warmup = a.warmup if a.warmup is not None else (0.2 if a.smoke else 2.0)
    schemas = a.schemas or (10 if a.smoke else 100)
    started = time.time()
    results = run(a, seconds, warmup, schemas)
    lines = render(results)
    print("Schema registry benchmark" + (" (smoke: numbers are meaningless)" if a.smoke else ""))
    print("\n".join(lines))
    print(f"({a.connections} keep-alive connections from {a.clients} client processes, "
          f"{seconds:g} s per phase after {warmup:g} s of warm-up, {schemas} schemas; "
          "server/clients/other: CPU cores used by the registry's process, by the load\n"
          "generator, by everything else on the machine; srv us/req: the server's CPU time "
          "per answered request)")
    found = problems(results)
    for p in found:
        say(p)
    if not a.no_save:
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        path = a.results_dir / f"{stamp}-registry{'-smoke' if a.smoke else ''}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({
            "started": datetime.datetime.fromtimestamp(started).isoformat(timespec="seconds"),
            "duration_s": round(time.time() - started, 1), "argv": sys.argv[1:],
            "results": results, "table": lines}, indent=1, default=str) + "\n")
        print(f"results: {path}")
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
