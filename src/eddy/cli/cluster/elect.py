"""`eddy cluster elect-leaders`: Kafka's ElectLeaders, as kafka-leader-election.sh runs it.

Preferred elections by default (`--unclean` for unclean ones), of every partition, of one
topic's (`--topic`) or of named ones (`--topic T --partition P`, repeatable). Each partition
is listed with its outcome: elected, not needed (its leader already is the one wanted), or
the error; the exit code is 1 when any partition failed."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from confluent_kafka import ElectionType, KafkaError, TopicPartition

from eddy.cli.common import (
    REQUEST_TIMEOUT_S,
    BootstrapOpt,
    ClientConfigOpt,
    CliError,
    Conn,
    Output,
    OutputOpt,
    handle_errors,
    print_json,
    render_table,
    resolve_output,
)

__all__ = ["elect_rows", "register_elect_command"]

ELECTED = "elected"
NOT_NEEDED = "not needed"


def elect_rows(result: dict[Any, Any]) -> list[tuple[str, int, str, str]]:
    """(topic, partition, outcome, message) per partition, sorted; ``result`` is what
    AdminClient.elect_leaders gives (a KafkaError or None per TopicPartition)."""
    rows: list[tuple[str, int, str, str]] = []
    for tp, error in result.items():
        if error is None:
            rows.append((tp.topic, tp.partition, ELECTED, ""))
        elif error.code() == KafkaError.ELECTION_NOT_NEEDED:
            rows.append((tp.topic, tp.partition, NOT_NEEDED, ""))
        else:
            rows.append((tp.topic, tp.partition, error.name(), error.str()))
    return sorted(rows)


def register_elect_command(app: typer.Typer) -> None:
    @app.command("elect-leaders")
    @handle_errors
    def elect_leaders(
        topic: Annotated[str | None, typer.Option(
            "--topic", "-t", help="only this topic's partitions")] = None,
        partition: Annotated[list[int] | None, typer.Option(
            "--partition", "-p", min=0, help="only this partition of --topic (repeatable)")
        ] = None,
        unclean: Annotated[bool, typer.Option(
            "--unclean", help="elect a leader for partitions without one, from outside the "
            "ISR if need be (records may be lost); default: the preferred replica")] = False,
        bootstrap: BootstrapOpt = "127.0.0.1:9092",
        output: OutputOpt = None,
        client_config: ClientConfigOpt = None,
    ) -> None:
        """Move leadership to each partition's preferred replica (the first of its
        replicas) where it is alive and in sync, or with --unclean give leaderless
        partitions a leader (ElectLeaders)."""
        out = resolve_output(output)
        if partition and topic is None:
            raise CliError("--partition needs --topic", 2)
        conn = Conn.make(bootstrap, client_config)
        admin = conn.admin()
        asked: list[TopicPartition] | None = None
        if topic is not None:
            parts = partition or conn.topic_partitions(topic)
            asked = [TopicPartition(topic, p) for p in parts]
        election = ElectionType.UNCLEAN if unclean else ElectionType.PREFERRED
        result = admin.elect_leaders(election, asked).result(REQUEST_TIMEOUT_S)
        rows = elect_rows(result)
        if out is Output.json:
            print_json([{"topic": t, "partition": p, "result": r, "message": m or None}
                        for t, p, r, m in rows])
        elif rows:
            render_table(out, ["TOPIC", "PARTITION", "RESULT", "MESSAGE"], rows,
                         title=f"{election.name.lower()} leader election")
        elif out is Output.table:
            typer.echo("no partition needed an election")
        failed = [r for r in rows if r[2] not in (ELECTED, NOT_NEEDED)]
        if failed:
            raise CliError(f"{len(failed)} of {len(rows)} partitions were not elected")
