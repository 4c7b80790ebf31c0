"""Re-record the request corpus: `python -m bench.fuzz.record [--only CLIENT]`.

Starts a real `eddy serve` (advertising the proxy's address), puts the recording proxy
between it and each client session of bench.fuzz.sessions, stores a sample of the request
frames under bench/fuzz/corpus/requests/<client>/, synthesises frames for advertised
(API, version) pairs no client sent (bench.fuzz.synth) and prints the coverage table.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Callable

from bench.brokers import EddyBroker, free_port
from bench.fuzz import synth
from bench.fuzz.corpus_files import CLIENTS, REQUESTS_DIR, load_corpus, write_frames
from bench.fuzz.coverage_report import write_report
from bench.fuzz.proxy import FrameSample, RecordingProxy
from bench.fuzz.sessions import (
    aiokafka_session,
    kafka_python_session,
    librdkafka_old_session,
    librdkafka_session,
)

# older broker versions each client is pinned to, for the lower API versions
KAFKA_PYTHON_PINS: list[tuple[int, ...] | None] = [
    None, (0, 10, 0), (0, 10, 1), (0, 10, 2), (0, 11), (1, 0), (1, 1), (2, 0), (2, 1),
    (2, 2), (2, 3), (2, 4), (2, 5), (2, 6), (2, 7), (2, 8), (3, 0), (3, 3), (3, 5), (3, 7),
    (3, 9), (4, 0),
]
AIOKAFKA_PINS = ["auto", "0.10.1", "0.10.2", "0.11", "1.0", "1.1", "2.0", "2.1", "2.2", "2.3",
                 "2.4"]
LIBRDKAFKA_FALLBACKS = ["0.10.0", "0.11.0", "1.0.0", "2.0.0"]


def sessions(client: str, bootstrap: str) -> list[tuple[str, Callable[[], object]]]:
    if client == "librdkafka":
        out: list[tuple[str, Callable[[], object]]] = [
            ("negotiated", lambda: librdkafka_session(bootstrap))]
        out += [(f"fallback {v}", lambda v=v: librdkafka_old_session(bootstrap, v))  # type: ignore[misc]
                for v in LIBRDKAFKA_FALLBACKS]
        return out
    if client == "kafka-python":
        return [(f"api_version {pin}", lambda pin=pin: kafka_python_session(bootstrap, pin))  # type: ignore[misc]
                for pin in KAFKA_PYTHON_PINS]
    return [(f"api_version {pin}", lambda pin=pin: asyncio.run(aiokafka_session(bootstrap, pin)))  # type: ignore[misc]
            for pin in AIOKAFKA_PINS]


class _ProxiedEddy(EddyBroker):
    """eddy serve on a port chosen here, advertising the proxy: its ready line names the
    advertised address, not the one it listens on."""

    def __init__(self, proxy_port: int) -> None:
        super().__init__(["--advertised", f"127.0.0.1:{proxy_port}",
                          "--set", "num.partitions=2"])
        self.listen_port = free_port()

    def command(self) -> list[str]:
        cmd = super().command()
        cmd[cmd.index("127.0.0.1:0")] = f"127.0.0.1:{self.listen_port}"
        return cmd

    def _is_ready_line(self, line: str) -> bool:
        if super()._is_ready_line(line):
            self.port = self.listen_port
            return True
        return False


def record(clients: list[str], keep_log: bool = False) -> None:
    sample = FrameSample()
    proxy = RecordingProxy(sample)
    broker = _ProxiedEddy(proxy.port)
    broker.start()
    proxy.start(("127.0.0.1", broker.port))
    bootstrap = f"127.0.0.1:{proxy.port}"
    try:
        for client in clients:
            proxy.label = client
            for what, run in sessions(client, bootstrap):
                t0 = time.monotonic()
                print(f"{client}: {what}", file=sys.stderr)
                try:
                    run()
                except Exception as exc:
                    print(f"  session failed: {type(exc).__name__}: {exc}", file=sys.stderr)
                print(f"  {time.monotonic() - t0:.1f}s, {sample.seen} frames so far",
                      file=sys.stderr)
                if not broker.alive():
                    raise SystemExit(f"broker died while recording:\n{broker.log_tail()}")
            n = write_frames(client, sample.for_label(client))
            print(f"{client}: {n} (api, version) files in {REQUESTS_DIR / client}",
                  file=sys.stderr)
    finally:
        proxy.stop()
        broker.stop()
        broker.cleanup(keep_logs=keep_log)
        if keep_log:
            print(f"broker log: {broker.log_path}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.fuzz.record", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", action="append", choices=CLIENTS,
                    help="record only this client (repeatable); default: all three")
    ap.add_argument("--keep-log", action="store_true", help="keep the broker's log and data")
    ap.add_argument("--no-record", action="store_true",
                    help="only re-synthesise and re-print the coverage table")
    args = ap.parse_args(argv)
    if not args.no_record:
        record(args.only or list(CLIENTS), args.keep_log)
    made = synth.synthesise_missing()
    print(f"synthesised {made} frames", file=sys.stderr)
    print(write_report(load_corpus()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
