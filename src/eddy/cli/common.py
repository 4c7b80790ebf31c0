"""What every client command shares: options, the connection, errors and output.

Habits (DESIGN.md): `--bootstrap/-b` (default 127.0.0.1:9092, env EDDY_BOOTSTRAP),
`--output table|json|plain` (table on a terminal, plain otherwise), exit 0 on success,
1 on a user error (stderr says what to do), 2 on a usage error.
"""

from __future__ import annotations

import functools
import json
import os
import socket
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, NoReturn, ParamSpec, TypeVar

import typer
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ClusterMetadata, OffsetSpec  # type: ignore[attr-defined]
from rich.console import Console
from rich.table import Table

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
#: how long a broker may take to accept a TCP connection before we call it unreachable
CONNECT_TIMEOUT_S = 5.0
#: how long one admin request (or metadata) may take once connected
REQUEST_TIMEOUT_S = 15.0
#: one Metadata attempt; the first answers within milliseconds on a healthy cluster
METADATA_ATTEMPT_S = 2.5

P = ParamSpec("P")
R = TypeVar("R")


class Output(StrEnum):
    table = "table"
    json = "json"
    plain = "plain"


BootstrapOpt = Annotated[
    str,
    typer.Option(
        "--bootstrap", "-b", envvar="EDDY_BOOTSTRAP", show_envvar=True,
        help="broker address HOST:PORT (several: comma-separated)",
    ),
]
OutputOpt = Annotated[
    Output | None,
    typer.Option(
        "--output", "-o", case_sensitive=False,
        help="table (default on a terminal), json (for scripts) or plain (default otherwise)",
    ),
]
ClientConfigOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--client-config", "-X", metavar="KEY=VALUE",
        help="extra librdkafka client property, e.g. -X security.protocol=SSL (repeatable)",
    ),
]


class CliError(Exception):
    """A user error: the message says what went wrong and what to do. Exit code 1."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


def usage_error(message: str) -> NoReturn:
    """Bad flags or arguments: exit 2, like any other usage error."""
    err(f"usage error: {message} (see --help)")
    raise typer.Exit(2)


def resolve_output(output: Output | None) -> Output:
    if output is not None:
        return output
    return Output.table if sys.stdout.isatty() else Output.plain


def handle_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Turn CliError/KafkaException into a message on stderr and exit 1; a closed
    stdout pipe (`eddy consume ... | head`) ends quietly."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except CliError as exc:
            err(f"error: {exc.message}")
            raise typer.Exit(exc.code) from None
        except KafkaException as exc:
            err(f"error: {describe_kafka_error(exc)}")
            raise typer.Exit(1) from None
        except BrokenPipeError:
            # stdout went away: point it at devnull so the interpreter's final flush is quiet
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            raise typer.Exit(0) from None
        except KeyboardInterrupt:
            raise typer.Exit(130) from None

    return wrapper


def err(message: str) -> None:
    typer.echo(message, err=True)


# ---- parsing ------------------------------------------------------------------------------


def parse_kv(items: Iterable[str] | None, what: str) -> list[tuple[str, str]]:
    """`k=v` pairs in order; a malformed one is a usage error."""
    out: list[tuple[str, str]] = []
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            usage_error(f"{what} expects KEY=VALUE, got {item!r}")
        out.append((key.strip(), value))
    return out


def unescape(text: str) -> str:
    """`\\t`, `\\n`, `\\r` and `\\\\` typed literally on the command line, as kcat allows."""
    table = {"t": "\t", "n": "\n", "r": "\r", "\\": "\\"}
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text) and text[i + 1] in table:
            out.append(table[text[i + 1]])
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def parse_bootstrap(bootstrap: str) -> list[tuple[str, int]]:
    addresses: list[tuple[str, int]] = []
    for part in bootstrap.split(","):
        part = part.strip()
        if "://" in part:  # PLAINTEXT://host:port, as Kafka's listener syntax
            part = part.split("://", 1)[1]
        host, sep, port = part.rpartition(":")
        if not part or not sep or not port.isdigit() or not 0 < int(port) < 65536:
            raise CliError(
                f"bad --bootstrap address {part or bootstrap!r}: expected HOST:PORT, "
                f"e.g. --bootstrap {DEFAULT_BOOTSTRAP}"
            )
        addresses.append((host.strip("[]") or "127.0.0.1", int(port)))
    return addresses


# ---- the connection -----------------------------------------------------------------------


@dataclass
class Conn:
    """One CLI invocation's view of the cluster: client configs and a lazy AdminClient."""

    bootstrap: str
    extra: dict[str, str] = field(default_factory=dict)
    _admin: AdminClient | None = None
    _metadata: ClusterMetadata | None = None
    _probed: bool = False
    _errors: list[KafkaError] = field(default_factory=list)

    @classmethod
    def make(cls, bootstrap: str, client_config: list[str] | None) -> Conn:
        extra = dict(parse_kv(client_config, "--client-config/-X"))
        parse_bootstrap(bootstrap)  # fail early on a malformed address
        return cls(bootstrap=bootstrap, extra=extra)

    def client_config(self, **overrides: Any) -> dict[str, Any]:
        conf: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap,
            "client.id": "eddy-cli",
            "socket.connection.setup.timeout.ms": int(CONNECT_TIMEOUT_S * 1000),
            # librdkafka's own log lines are noise for a CLI user: errors come back
            # through the API and are worded below (-X log_level=7 brings them back)
            "log_level": 0,
        }
        conf.update(overrides)
        conf.update(self.extra)
        return conf

    def unreachable(self, reason: str) -> CliError:
        return CliError(
            f"cannot reach a broker at {self.bootstrap} ({reason}). Is it running? "
            f"Point eddy at it with --bootstrap HOST:PORT or the EDDY_BOOTSTRAP variable."
        )

    def probe(self) -> None:
        """Fail fast (within CONNECT_TIMEOUT_S) when no bootstrap address accepts a TCP
        connection; librdkafka itself would retry until the request timeout."""
        if self._probed:
            return
        deadline = time.monotonic() + CONNECT_TIMEOUT_S
        reasons: list[str] = []
        for host, port in parse_bootstrap(self.bootstrap):
            remaining = max(0.5, deadline - time.monotonic())
            try:
                with socket.create_connection((host, port), timeout=remaining):
                    self._probed = True
                    return
            except TimeoutError:
                reasons.append(f"{host}:{port}: no answer within {CONNECT_TIMEOUT_S:g} s")
            except OSError as exc:
                reasons.append(f"{host}:{port}: {exc.strerror or exc}")
        raise self.unreachable("; ".join(reasons))

    def admin(self) -> AdminClient:
        """The AdminClient, once the cluster has answered a Metadata request."""
        if self._admin is None:
            self.probe()
            self._admin = AdminClient(self.client_config(error_cb=self._on_error))
            self._metadata = self._fetch_metadata(self._admin)
        return self._admin

    def _on_error(self, error: KafkaError) -> None:
        self._errors.append(error)

    def _fetch_metadata(self, admin: AdminClient) -> ClusterMetadata:
        """Metadata in short attempts, so that a listener which accepts TCP but never
        answers Kafka (or drops the connection) is reported within seconds."""
        start = time.monotonic()
        deadline = start + REQUEST_TIMEOUT_S
        last: KafkaException | None = None
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                return admin.list_topics(timeout=min(METADATA_ATTEMPT_S, remaining))
            except KafkaException as exc:
                last = exc
            admin.poll(0)  # serve error_cb
            down = any(e.code() == KafkaError._ALL_BROKERS_DOWN for e in self._errors)
            if down and time.monotonic() - start >= METADATA_ATTEMPT_S:
                break
        reasons = [e.str() for e in self._errors if e.code() != KafkaError._ALL_BROKERS_DOWN]
        reason = reasons[-1] if reasons else (kafka_error_text(last) if last else "timed out")
        if "Invalid response size" in reason:
            raise CliError(
                f"the server at {self.bootstrap} does not speak the Kafka protocol; is this "
                f"the broker's Kafka port? Point eddy at it with --bootstrap HOST:PORT"
            )
        raise self.unreachable(f"no Kafka answer: {reason}")

    def metadata(self, refresh: bool = False) -> ClusterMetadata:
        """Full cluster metadata (all topics). Never auto-creates a topic."""
        admin = self.admin()
        if refresh or self._metadata is None:
            self._metadata = self._fetch_metadata(admin)
        return self._metadata

    def topic_partitions(self, topic: str, md: ClusterMetadata | None = None) -> list[int]:
        """The partition ids of an existing topic; a helpful error when it is missing."""
        md = md or self.metadata()
        tm = md.topics.get(topic)
        if tm is None or (tm.error is not None and not tm.partitions):
            raise unknown_topic(topic)
        return sorted(tm.partitions)


def unknown_topic(topic: str) -> CliError:
    return CliError(
        f"topic '{topic}' does not exist; create it with eddy topic create {topic}"
    )


def unknown_group(group: str) -> CliError:
    return CliError(f"group '{group}' does not exist; list groups with eddy group list")


def check_partitions(topic: str, wanted: Sequence[int], existing: Sequence[int]) -> None:
    missing = [p for p in wanted if p not in existing]
    if missing:
        n = len(existing)
        raise CliError(
            f"topic '{topic}' has {n} partition{'s' if n != 1 else ''} "
            f"(0-{n - 1}); partition {missing[0]} does not exist"
        )


# ---- Kafka errors -------------------------------------------------------------------------


def kafka_error_of(exc: BaseException) -> KafkaError | None:
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0]
    return None


def kafka_error_text(exc: BaseException) -> str:
    ke = kafka_error_of(exc)
    if ke is None:
        return str(exc)
    text = ke.str()
    return text.removeprefix("Broker: ")


def error_code(exc: BaseException) -> int | None:
    ke = kafka_error_of(exc)
    return None if ke is None else ke.code()


UNSUPPORTED = {KafkaError._UNSUPPORTED_FEATURE, KafkaError.UNSUPPORTED_VERSION}


def is_unsupported(exc: BaseException) -> bool:
    return error_code(exc) in UNSUPPORTED


def describe_kafka_error(exc: BaseException) -> str:
    """A KafkaException worded for a person (the fallback when no command knows better)."""
    ke = kafka_error_of(exc)
    if ke is None:
        return str(exc)
    code = ke.code()
    if code in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._TIMED_OUT):
        return (
            f"{kafka_error_text(exc)}: the broker did not answer. Check that it is running "
            f"and reachable, or point eddy at it with --bootstrap HOST:PORT"
        )
    if code == KafkaError._INVALID_ARG:
        return f"{kafka_error_text(exc)}; check the -X/--client-config settings"
    return f"{kafka_error_text(exc)} ({ke.name()})"


def wait(future: Any, what: str, timeout: float = REQUEST_TIMEOUT_S) -> Any:
    """The result of an admin future; a timeout becomes a CliError naming the operation."""
    import concurrent.futures

    try:
        return future.result(timeout)
    except concurrent.futures.TimeoutError:
        raise CliError(
            f"{what}: no answer from the broker within {timeout:g} s; is it overloaded "
            f"or unreachable?"
        ) from None


def earliest() -> OffsetSpec:
    spec: OffsetSpec = OffsetSpec.earliest()  # type: ignore[no-untyped-call]
    return spec


def latest() -> OffsetSpec:
    spec: OffsetSpec = OffsetSpec.latest()  # type: ignore[no-untyped-call]
    return spec


def at_time(ms: int) -> OffsetSpec:
    spec: OffsetSpec = OffsetSpec.for_timestamp(ms)
    return spec


def list_offsets(conn: Conn, tps: Sequence[tuple[str, int]], spec: OffsetSpec,
                 ) -> dict[tuple[str, int], int | None]:
    """ListOffsets for many partitions; None where the broker could not answer."""
    if not tps:
        return {}
    futs = conn.admin().list_offsets({TopicPartition(t, p): spec for t, p in tps},
                                     request_timeout=REQUEST_TIMEOUT_S)
    out: dict[tuple[str, int], int | None] = {}
    for tp, fut in futs.items():
        try:
            out[(tp.topic, tp.partition)] = wait(fut, "listing offsets").offset
        except KafkaException:
            out[(tp.topic, tp.partition)] = None
    return out


# ---- output -------------------------------------------------------------------------------


def stdout_console() -> Console:
    console = Console(highlight=False)
    if not console.is_terminal:
        console = Console(highlight=False, width=200, soft_wrap=False)
    return console


def stderr_console() -> Console:
    return Console(stderr=True, highlight=False)


def print_json(obj: Any, *, compact: bool = False) -> None:
    if compact:
        sys.stdout.write(json.dumps(obj, separators=(",", ":"), ensure_ascii=False) + "\n")
    else:
        sys.stdout.write(json.dumps(obj, indent=2, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return str(value)


def render_table(
    output: Output,
    columns: Sequence[str],
    rows: Sequence[Sequence[Any]],
    *,
    title: str | None = None,
    header_in_plain: bool = True,
    console: Console | None = None,
) -> None:
    """Rows as a rich table (table) or tab-separated lines (plain)."""
    if output is Output.plain:
        lines = []
        if header_in_plain:
            lines.append("\t".join(columns))
        lines.extend("\t".join(cell(v) for v in row) for row in rows)
        if lines:
            sys.stdout.write("\n".join(lines) + "\n")
        return
    table = Table(title=title, title_justify="left", title_style="bold")
    for name in columns:
        table.add_column(name, overflow="fold")
    for row in rows:
        table.add_row(*(cell(v) for v in row))
    (console or stdout_console()).print(table)


def render_fields(output: Output, fields: Sequence[tuple[str, Any]], title: str | None = None,
                  console: Console | None = None) -> None:
    """Key/value pairs: `key: value` lines (plain) or a two-column grid (table)."""
    if output is Output.plain:
        sys.stdout.write("".join(f"{k}: {cell(v)}\n" for k, v in fields))
        return
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    for k, v in fields:
        grid.add_row(k, cell(v))
    con = console or stdout_console()
    if title:
        con.print(f"[bold]{title}[/bold]")
    con.print(grid)


CommandConfigOpt = Annotated[
    Path | None,
    typer.Option("--command-config", help="librdkafka properties file (KEY=VALUE lines), "
                 "e.g. security.protocol, sasl.mechanism, sasl.username, sasl.password"),
]


def read_properties(path: Path) -> list[str]:
    """KEY=VALUE lines of a properties file (# and ! comments, blank lines skipped)."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise CliError(f"cannot read --command-config {path}: {exc.strerror or exc}") from None
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise CliError(f"{path}:{number}: expected KEY=VALUE")
        out.append(f"{key.strip()}={value.strip()}")
    return out
