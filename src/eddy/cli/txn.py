"""`eddy txn list|describe`: the transactions of a broker, or of a whole cluster (as
Kafka's admin client does: ListTransactions asks every broker the bootstrap's Metadata
names, DescribeTransactions asks each id's coordinator, found with FindCoordinator)."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.list_transactions.v1.request import ListTransactionsRequest
from kio.schema.metadata.v12.request import MetadataRequest

from eddy.cli.common import (
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
from eddy.cli.raw_conn import raw_client
from eddy.client.raw import RawClient

txn_app = typer.Typer(help="Inspect transactions.", no_args_is_help=True)


TRANSACTION = 1


def _client(conn: Conn, at: tuple[str, int] | None = None) -> RawClient:
    """The first bootstrap broker (or ``at``), with the -X security settings."""
    return raw_client(conn, at, timeout_s=5.0)


def _list(client: RawClient, states: list[str], producer_ids: list[int]) -> list[Any]:
    resp = client.call(ListTransactionsRequest(
        state_filters=tuple(states), producer_id_filters=tuple(producer_ids),
        duration_filter=-1))
    if resp.error_code != 0:
        raise CliError(f"the broker refused ListTransactions: {resp.error_code.name}")
    if resp.unknown_state_filters:
        raise CliError(f"unknown transaction state(s): {', '.join(resp.unknown_state_filters)}"
                       "; states are Empty, Ongoing, PrepareCommit, PrepareAbort, "
                       "CompleteCommit, CompleteAbort")
    return list(resp.transaction_states)


def _brokers(client: RawClient) -> dict[int, tuple[str, int]]:
    resp = client.call(MetadataRequest(topics=(), allow_auto_topic_creation=False,
                                       include_topic_authorized_operations=False))
    return {int(b.node_id): (b.host, int(b.port)) for b in resp.brokers}


def _list_all(conn: Conn, states: list[str], producer_ids: list[int]) -> list[Any]:
    """Every broker's transactions (each answers for those it coordinates)."""
    with _client(conn) as client:
        brokers = _brokers(client)
        if len(brokers) <= 1:
            return sorted(_list(client, states, producer_ids),
                          key=lambda t: t.transactional_id)
    found: dict[str, Any] = {}
    for host, port in brokers.values():
        with _client(conn, (host, port)) as other:
            for t in _list(other, states, producer_ids):
                found.setdefault(t.transactional_id, t)
    return [found[k] for k in sorted(found)]


def _describe_all(conn: Conn, txn_ids: list[str]) -> list[Any]:
    """Each id described by its coordinator."""
    with _client(conn) as client:
        brokers = _brokers(client)
        coords = client.call(FindCoordinatorRequest(key_type=TRANSACTION,
                                                    coordinator_keys=tuple(txn_ids)))
    by_node: dict[int, list[str]] = {}
    for c in coords.coordinators:
        if c.error_code != 0 or int(c.node_id) not in brokers:
            raise CliError(f"no coordinator for transaction {c.key!r}: {c.error_code.name}")
        by_node.setdefault(int(c.node_id), []).append(c.key)
    states: dict[str, Any] = {}
    for node, ids in by_node.items():
        with _client(conn, brokers[node]) as coordinator:
            resp = coordinator.call(DescribeTransactionsRequest(transactional_ids=tuple(ids)))
        states.update({s.transactional_id: s for s in resp.transaction_states})
    return [states[t] for t in txn_ids]


@txn_app.command("list")
@handle_errors
def list_(
    state: Annotated[list[str] | None, typer.Option("--state", help="only in this state")] = None,
    producer_id: Annotated[list[int] | None, typer.Option(help="only this producer id")] = None,
    bootstrap: BootstrapOpt = "127.0.0.1:9092",
    client_config: ClientConfigOpt = None,
    output: OutputOpt = None,
) -> None:
    """Transactional ids with their producer id and state."""
    out = resolve_output(output)
    txns = _list_all(Conn.make(bootstrap, client_config), state or [], producer_id or [])
    rows = [[t.transactional_id, t.producer_id, t.transaction_state] for t in txns]
    if out is Output.json:
        print_json([{"transactional_id": r[0], "producer_id": r[1], "state": r[2]}
                    for r in rows])
        return
    render_table(out, ["TRANSACTIONAL ID", "PRODUCER ID", "STATE"], rows,
                 title="Transactions")


@txn_app.command("describe")
@handle_errors
def describe(
    transactional_ids: Annotated[list[str], typer.Argument(help="transactional ids")],
    bootstrap: BootstrapOpt = "127.0.0.1:9092",
    client_config: ClientConfigOpt = None,
    output: OutputOpt = None,
) -> None:
    """State, producer id/epoch, timeout, start time and partitions of transactions."""
    out = resolve_output(output)
    conn = Conn.make(bootstrap, client_config)
    known = {t.transactional_id for t in _list_all(conn, [], [])}
    missing = [t for t in transactional_ids if t not in known]
    if missing:
        raise CliError(f"no transaction with id {', '.join(map(repr, missing))}; "
                       "see eddy txn list")
    items = []
    for s in _describe_all(conn, transactional_ids):
        start = s.transaction_start_time
        items.append({
            "transactional_id": s.transactional_id,
            "state": s.transaction_state,
            "producer_id": s.producer_id,
            "producer_epoch": s.producer_epoch,
            "timeout_ms": int(s.transaction_timeout.total_seconds() * 1000),
            "start_time": start.isoformat() if start.timestamp() > 0 else None,
            "partitions": [f"{t.topic}-{p}" for t in s.topics for p in t.partitions],
        })
    if out is Output.json:
        print_json(items)
        return
    render_table(
        out, ["TRANSACTIONAL ID", "STATE", "PRODUCER", "EPOCH", "TIMEOUT MS", "STARTED",
              "PARTITIONS"],
        [[i["transactional_id"], i["state"], i["producer_id"], i["producer_epoch"],
          i["timeout_ms"], i["start_time"] or "-", ",".join(i["partitions"]) or "-"]
         for i in items],
        title="Transactions",
    )


__all__ = ["txn_app"]
