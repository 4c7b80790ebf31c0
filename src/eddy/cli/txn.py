"""`eddy txn list|describe`: the transactions a broker coordinates."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
from kio.schema.list_transactions.v1.request import ListTransactionsRequest

from eddy.cli.common import (
    BootstrapOpt,
    CliError,
    Output,
    OutputOpt,
    handle_errors,
    parse_bootstrap,
    print_json,
    render_table,
    resolve_output,
)
from eddy.client.raw import RawClient

txn_app = typer.Typer(help="Inspect transactions.", no_args_is_help=True)


def _client(bootstrap: str) -> RawClient:
    host, port = parse_bootstrap(bootstrap)[0]
    try:
        return RawClient(host, port, timeout_s=5.0)
    except OSError as exc:
        raise CliError(f"cannot reach a broker at {host}:{port} ({exc.strerror or exc}); "
                       f"check the address or pass --bootstrap HOST:PORT") from None


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
    return sorted(resp.transaction_states, key=lambda t: t.transactional_id)


@txn_app.command("list")
@handle_errors
def list_(
    state: Annotated[list[str] | None, typer.Option("--state", help="only in this state")] = None,
    producer_id: Annotated[list[int] | None, typer.Option(help="only this producer id")] = None,
    bootstrap: BootstrapOpt = "127.0.0.1:9092",
    output: OutputOpt = None,
) -> None:
    """Transactional ids with their producer id and state."""
    out = resolve_output(output)
    with _client(bootstrap) as client:
        txns = _list(client, state or [], producer_id or [])
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
    output: OutputOpt = None,
) -> None:
    """State, producer id/epoch, timeout, start time and partitions of transactions."""
    out = resolve_output(output)
    with _client(bootstrap) as client:
        known = {t.transactional_id for t in _list(client, [], [])}
        missing = [t for t in transactional_ids if t not in known]
        if missing:
            raise CliError(f"no transaction with id {', '.join(map(repr, missing))}; "
                           "see eddy txn list")
        resp = client.call(DescribeTransactionsRequest(
            transactional_ids=tuple(transactional_ids)))
    items = []
    for s in resp.transaction_states:
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
