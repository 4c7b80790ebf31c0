"""`eddy mesh keygen|sign`: the cluster signing key and nodes' membership tokens (issue 16).

    eddy mesh keygen --out cluster.key      # prints the public key for mesh.cluster.public.key
    eddy mesh sign --cluster-key cluster.key --data-dir /var/lib/eddy [--expires 90d]

Nodes with `mesh.cluster.public.key` set admit a peer on `mesh.allowed.nodes` or one that
presents a token for its NodeId signed by that key (`eddy.mesh.membership`). The token file
is `<data_dir>/node.membership`; a tool dialing the mesh with EDDY_MESH_IDENTITY=DIR presents
`DIR/node.membership` the same way.
"""

from __future__ import annotations

import datetime
import os
import re
import time
from pathlib import Path
from typing import Annotated

import typer
from cryptography.hazmat.primitives import serialization

from eddy.cli.common import CliError, handle_errors, usage_error

mesh_app = typer.Typer(help="Mesh admission: the cluster key and membership tokens.",
                       no_args_is_help=True)

_DURATION = re.compile(r"(\d{1,9})([smhd])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_expiry(text: str | None, now: float) -> int:
    """Unix seconds from `never`, a duration from now (90d, 12h, 30m, 3600s) or an ISO-8601
    time (UTC when it names no zone); 0: never."""
    if text is None or text.strip().lower() in ("", "never"):
        return 0
    s = text.strip()
    match = _DURATION.fullmatch(s)
    if match is not None:
        seconds = int(match.group(1)) * _UNIT_S[match.group(2)]
        if seconds <= 0:
            usage_error("--expires must be in the future")
        return int(now) + seconds
    try:
        when = datetime.datetime.fromisoformat(s)
    except ValueError:
        usage_error(f"--expires {s!r}: expected never, a duration such as 90d, 12h, 30m or "
                    "3600s, or an ISO-8601 time")
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    at = int(when.timestamp())
    if at <= now:
        usage_error(f"--expires {s!r} is in the past")
    return at


@mesh_app.command("keygen")
@handle_errors
def keygen(
    out: Annotated[Path, typer.Option("--out", help="where to write the cluster's private "
                                      "key (PEM PKCS#8, mode 0600; never overwritten)")],
) -> None:
    """Make the cluster signing key; prints its public key (for mesh.cluster.public.key) and
    writes it beside the key as OUT.pub (PEM)."""
    from eddy.mesh.membership import MembershipError, create_cluster_key, public_hex

    pub_path = out.with_name(out.name + ".pub")
    for path in (out, pub_path):
        if os.path.lexists(path):
            raise CliError(f"{path} exists: not overwriting it")
    try:
        key = create_cluster_key(out)
    except MembershipError as exc:
        raise CliError(str(exc)) from None
    public = key.public_key()
    pem = public.public_bytes(serialization.Encoding.PEM,
                              serialization.PublicFormat.SubjectPublicKeyInfo)
    try:
        fd = os.open(pub_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, pem)
        finally:
            os.close(fd)
    except OSError as exc:
        raise CliError(f"{pub_path}: cannot write the public key ({exc.strerror})") from None
    typer.echo(public_hex(public))
    typer.echo(f"cluster key written to {out} (keep it offline: it admits nodes); public key "
               f"in {pub_path}; set mesh.cluster.public.key to the hex above or to that file",
               err=True)


@mesh_app.command("sign")
@handle_errors
def sign(
    cluster_key: Annotated[Path, typer.Option("--cluster-key",
                                              help="the cluster's private key (keygen)")],
    data_dir: Annotated[Path | None, typer.Option(
        "--data-dir", help="the node's data directory: signs the NodeId of its node.key "
        "(made now if the node has none yet) and writes DATA_DIR/node.membership")] = None,
    node_id: Annotated[str | None, typer.Option(
        "--node-id", help="the NodeId to sign (64 hex digits or 52 base32 characters), "
        "instead of --data-dir; needs --out")] = None,
    out: Annotated[Path | None, typer.Option(
        "--out", help="where to write the token (default DATA_DIR/node.membership)")] = None,
    expires: Annotated[str | None, typer.Option(
        "--expires", help="never (default), a duration (90d, 12h, 30m, 3600s) or an "
        "ISO-8601 time")] = None,
) -> None:
    """Write a node's membership token: the cluster key's signature over its NodeId."""
    from eddy.mesh.identity import IdentityError, NodeIdentity, parse_node_id, to_base32
    from eddy.mesh.membership import (
        MEMBERSHIP_FILE,
        MembershipError,
        load_cluster_key,
        make_token,
        write_token_file,
    )

    if (data_dir is None) == (node_id is None):
        usage_error("give exactly one of --data-dir and --node-id")
    expires_at = parse_expiry(expires, time.time())
    try:
        if data_dir is not None:
            node = NodeIdentity.load_or_create(data_dir).node_id
            target = out or data_dir / MEMBERSHIP_FILE
        else:
            assert node_id is not None
            if out is None:
                usage_error("--node-id needs --out (where to write the token)")
            node, target = parse_node_id(node_id), out
        token = make_token(load_cluster_key(cluster_key), node, expires_at)
        write_token_file(target, token)
    except (IdentityError, MembershipError) as exc:
        raise CliError(str(exc)) from None
    except OSError as exc:
        raise CliError(f"cannot write the token: {exc.strerror or exc}") from None
    typer.echo(f"signed node {to_base32(node)} (expires {token.expiry_text()}): {target}")
