"""Fuzz the mesh decoders (issue 11's approach, for the node mesh): `python -m
bench.fuzz.mesh_decoders --seconds 10 [--seed N] [--json out.json]`.

``check_input(data)`` is the target: the bytes are one QUIC stream, parsed whole
(``parse_frame``) and fed in chunks (``FrameReader``; the first byte picks the chunk size),
and each mesh message is decoded from them with postcard (``Hello``, ``Pong``, the whole
``PingFrame`` enum, ``KafkaOpRequest``, ``KafkaOpResponse``, ``Pointer``, ``PullResponse``,
a gateway's ``CredentialRequest``/``CredentialAnswer``, ``KafkaOpAs`` and
``AuthorizeRequest``/``AuthorizeAnswer``, and the rest),
from the frame's payload when a frame parses and from the raw bytes otherwise; the raw bytes
are also checked as a peer's certificate and membership token (``membership_target``). Only
``FrameError`` and ``PostcardError`` are documented; anything else escaping is a finding,
and so is a decoded value that does not re-encode to exactly the bytes it came from
(postcard's decoder is meant to accept canonical encodings only).

``main`` runs random inputs and mutations of valid encodings (bit flips, interesting bytes,
huge varints written or inserted, truncation, duplication, splices) for a time budget,
deterministically by ``--seed``, and prints execs/s and the findings (deduplicated by
exception type and the line it came from). Exit status 1 when there are findings.

With atheris installed (``pip install -e '.[fuzz]'``): ``python -m bench.fuzz.mesh_decoders
--atheris [libFuzzer flags] [CORPUS_DIR ...]`` runs the same target under libFuzzer with the
mesh modules instrumented for coverage.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from bench.fuzz.membership_target import check_membership, membership_seeds
from eddy import postcard
from eddy.cluster.controller.rpc import (
    ControllerReply,
    ControllerRequest,
    CreateTopicRequest,
    HeartbeatRequest,
    RegisterRequest,
)
from eddy.cluster.offsets import OffsetsEntry, OffsetsMachine, OffsetsSnapshot
from eddy.cluster.raft.core import RaftNode
from eddy.cluster.raft.memstore import MemoryLogStore
from eddy.cluster.raft.messages import (
    ConfChangeEntry,
    Heartbeat,
    RaftMessage,
    RaftMessageError,
    RequestVote,
)
from eddy.cluster.raft.ready import RaftConfig
from eddy.cluster.raft.types import ConfState
from eddy.gateway.ops import OPS
from eddy.mesh.announce import (
    Announcement,
    BadAnnouncement,
    GossipPayload,
    SignedAnnouncement,
)
from eddy.mesh.announce import verify as verify_announcement
from eddy.mesh.control import (
    ControlRequest,
    ControlResponse,
    PingRequest,
    RaftChangeRequest,
    StatusRequest,
)
from eddy.mesh.frames import (
    TAG_AUTHORIZE,
    TAG_CONTROL_RPC,
    TAG_CONTROLLER,
    TAG_CREDENTIALS,
    TAG_GOSSIP,
    TAG_KAFKA_OP,
    TAG_KAFKA_OP_AS,
    TAG_PING,
    TAG_POINTER_PULL,
    TAG_RAFT,
    TAG_TXN_MARKERS,
    AuthorizeAnswer,
    AuthorizeRequest,
    CredentialAnswer,
    CredentialRequest,
    FrameError,
    FrameReader,
    Hello,
    KafkaOpAs,
    KafkaOpRequest,
    KafkaOpResponse,
    PeerInfo,
    Ping,
    PingFrame,
    Pointer,
    Pong,
    PullResponse,
    TraceContext,
    encode_frame,
    parse_frame,
)
from eddy.mesh.gossip.messages import GossipMessage, GossipMessageError, Join, PeerRef
from eddy.mesh.gossip.messages import Ping as GossipPing
from eddy.mesh.gossip.messages import validate as validate_gossip
from eddy.metadata.commands import MetadataCommand
from eddy.metadata.records import MetadataSnapshot
from eddy.metadata.state import MetadataSnapshotError, MetadataState
from eddy.postcard import PostcardError
from eddy.security.acl import AclOperation, ResourceType
from eddy.security.acting import check_client
from eddy.security.remote_authorizer import (
    AuthorizationError,
    any_check,
    check_answer,
    resource_check,
)
from eddy.security.remote_authorizer import check_request as check_authorize_request
from eddy.security.remote_credentials import CredentialError, check_request, credential_of
from eddy.txn.raft_store import pending_key, split, txn_key
from eddy.txn.rpc import WriteMarkersReply, WriteMarkersRequest
from eddy.txn.rpc import decode_reply as decode_markers_reply
from eddy.txn.rpc import decode_request as decode_markers_request

MAX_PAYLOAD = 1 << 16
MESSAGES: list[Any] = [
    Hello, Pong, PingFrame, KafkaOpRequest, KafkaOpResponse, Pointer, PullResponse,
    # gossip, announcements, operator control RPCs and every KafkaOp struct ride frames too
    GossipMessage, GossipPayload, Announcement, SignedAnnouncement, ControlRequest,
    ControlResponse,
    *sorted({cls for pair in OPS.values() for cls in pair}, key=lambda c: c.__name__),
    # Raft messages (tag 0x05), the metadata group's commands and snapshots
    RaftMessage, ConfChangeEntry, MetadataCommand, MetadataSnapshot,
    # brokers' requests to the controller and its answers (tag 0x06)
    ControllerRequest, ControllerReply,
    # the offsets group's entries and snapshots
    OffsetsEntry, OffsetsSnapshot,
    # transaction markers asked of a partition's leader, and its answers (tag 0x07)
    WriteMarkersRequest, WriteMarkersReply,
    # a gateway's credential lookups (tag 0x09), its clients' ops (tag 0x12) and its ACL
    # decisions (tag 0x0A)
    CredentialRequest, CredentialAnswer, KafkaOpAs, AuthorizeRequest, AuthorizeAnswer,
]
DOCUMENTED = (FrameError, PostcardError)


class NotCanonical(AssertionError):
    """A decoder accepted bytes that are not the canonical encoding of what it returned."""


def _decode(tp: Any, data: bytes) -> None:
    try:
        value = postcard.decode(tp, data)
    except PostcardError:
        return
    again = postcard.encode_value(tp, value)
    if again != data:
        raise NotCanonical(f"{tp!r}: {data.hex()} decoded, re-encodes as {again.hex()}")
    # what the receivers run next on a decoded value: its own checks, documented errors only
    if tp is GossipMessage:
        with contextlib.suppress(GossipMessageError):
            validate_gossip(value)
    elif isinstance(value, SignedAnnouncement):
        with contextlib.suppress(BadAnnouncement):
            verify_announcement(value)
    elif tp is RaftMessage:
        _step_raft(value)
    elif tp is MetadataCommand:
        MetadataState().apply(value)  # a rejected command is an ApplyResult, never a raise
    elif tp is MetadataSnapshot:
        with contextlib.suppress(MetadataSnapshotError):
            MetadataState().restore(data)
    elif tp is ControllerRequest:
        _ask_controller(data)
    elif tp is OffsetsEntry:
        OffsetsMachine().apply(1, data)  # a bad entry is refused, never a raise
        split(value.records)  # the transaction coordinator's records among them
    elif tp is WriteMarkersRequest:
        with contextlib.suppress(ValueError):
            decode_markers_request(data)
    elif tp is WriteMarkersReply:
        with contextlib.suppress(ValueError):
            decode_markers_reply(data, 3)
    elif tp is OffsetsSnapshot:
        OffsetsMachine().restore(data)
    elif tp is CredentialRequest:
        with contextlib.suppress(CredentialError):
            check_request(value)
    elif tp is CredentialAnswer:
        for mechanism in (1, 2):
            with contextlib.suppress(CredentialError):
                credential_of(value, "u", mechanism)
    elif tp is KafkaOpAs:
        check_client(value.principal, value.host)
        with contextlib.suppress(PostcardError):
            postcard.decode(KafkaOpRequest, value.request)
    elif tp is AuthorizeRequest:
        with contextlib.suppress(AuthorizationError):
            check_authorize_request(value)
    elif tp is AuthorizeAnswer:
        for count in (0, 1, len(value.allowed)):
            with contextlib.suppress(AuthorizationError):
                check_answer(value, count)


def _ask_controller(data: bytes) -> None:
    """Decoded controller request bytes answered by an active controller with a registered
    broker, as its mesh handler does (every failure must be a reply, never a raise)."""
    from bench.fuzz.controller_target import answer_bytes

    answer_bytes(data)


def _step_raft(msg: Any) -> None:
    """A decoded Raft message stepped into a follower of a 3-voter group, as node 2."""
    node = RaftNode(2, RaftConfig(), random.Random(0),
                    MemoryLogStore(ConfState(voters=(1, 2, 3))))
    with contextlib.suppress(RaftMessageError):
        node.step(msg)
        node.ready()


def check_input(data: bytes) -> None:
    """The fuzz target: returns for every documented outcome, raises anything else."""
    try:
        frame = parse_frame(data, MAX_PAYLOAD)
        body = frame.payload
    except FrameError:
        frame, body = None, data
    step = 1 + (data[0] % 7 if data else 0)
    reader = FrameReader(MAX_PAYLOAD)
    try:
        for i in range(0, len(data), step):
            reader.feed(data[i:i + step])
        incremental = reader.finish()
    except FrameError:
        incremental = None
    if incremental != frame:
        raise AssertionError(f"FrameReader gave {incremental!r}, parse_frame {frame!r}")
    if frame is not None:
        again = encode_frame(frame.tag, frame.payload, frame.trace)
        if again != data:
            raise NotCanonical(f"frame {data.hex()} re-encodes as {again.hex()}")
    for tp in MESSAGES:
        _decode(tp, body)
    check_membership(data)  # a peer's certificate and its membership token (issue 16)


# -- seeds and mutations -----------------------------------------------------------------------
TRACE = TraceContext(bytes(range(1, 17)), bytes(range(1, 9)), 1)


def seed_messages() -> list[tuple[int, Any]]:
    """One or more valid values of every message type, with the tag each travels under."""
    rng = random.Random(0)
    node = bytes(range(32))
    peers = tuple(PeerInfo(node, i, f"10.0.0.{i}:7946", f"10.0.0.{i}:9092", ("broker",),
                           "r1" if i % 2 else None) for i in range(3))
    return [
        (TAG_PING, Ping(1, 1_700_000_000_000)),
        (TAG_PING, Pong(7, 300, peers)),
        (TAG_PING, Hello(node, -1, ("broker", "gateway"),
                         ("127.0.0.1:7946", "kafka=127.0.0.1:9092"), "rack-a", "0.1.0")),
        (TAG_KAFKA_OP, KafkaOpRequest(2**63, 0x02, 5, 30_000, rng.randbytes(40))),
        (TAG_KAFKA_OP, KafkaOpResponse(9, 0x0B, 3, b"", "timed out: \u00e9")),
        (TAG_POINTER_PULL, Pointer(node, 4000, node[::-1])),
        (TAG_POINTER_PULL, PullResponse(node, b"x" * 50)),
        (TAG_POINTER_PULL, PullResponse(node, None)),
        (TAG_GOSSIP, Join("127.0.0.1:7946")),
        (TAG_GOSSIP, GossipPing(3, "127.0.0.1:7946", True)),
        (TAG_GOSSIP, SignedAnnouncement(b"\x00" * 10, bytes(64))),
        (TAG_CONTROL_RPC, StatusRequest()),
        (TAG_CONTROL_RPC, PingRequest("2", 3, 100)),
        (TAG_GOSSIP, PeerRef(node, "10.0.0.1:7946")),
        (TAG_RAFT, Heartbeat(0, 1, 2, 3, 0, b"")),
        (TAG_RAFT, RequestVote(0, 3, 2, 4, 0, 0, True, False)),
        (TAG_CONTROL_RPC, RaftChangeRequest("metadata", "transfer-leader", 2)),
        (TAG_CONTROLLER, RegisterRequest(2, "r1", "127.0.0.1:9092", "127.0.0.1:7946")),
        (TAG_CONTROLLER, HeartbeatRequest(2, 1, (bytes(16),))),
        (TAG_CONTROLLER, CreateTopicRequest("t", 3, 1, (), False)),
        (TAG_RAFT, OffsetsEntry(((b"\x00\x01key", b"value"), (b"\x00\x02gone", None)))),
        (TAG_RAFT, OffsetsSnapshot(((b"\x00\x01key", b"value"),))),
        (TAG_RAFT, OffsetsEntry(((pending_key(7, b"\x00\x01key"), b"v"),
                                 (txn_key("t"), b'{"producer_id": 1}')))),
        (TAG_TXN_MARKERS, WriteMarkersRequest(5, 1, True, (("t", 0), ("u", 3)))),
        (TAG_TXN_MARKERS, WriteMarkersReply(0, None, (0, 6, 3))),
        (TAG_CREDENTIALS, CredentialRequest("alice", 2)),
        (TAG_CREDENTIALS, CredentialAnswer(0, True, rng.randbytes(32), rng.randbytes(32),
                                           rng.randbytes(32), 8192)),
        (TAG_CREDENTIALS, CredentialAnswer(31, False, b"", b"", b"", 0)),
        (TAG_KAFKA_OP_AS, KafkaOpAs("User:alice", "10.0.0.7", postcard.encode(
            KafkaOpRequest(3, 0x02, 0, 30_000, rng.randbytes(24))))),
        (TAG_AUTHORIZE, AuthorizeRequest("User:alice", "10.0.0.7", (
            resource_check(AclOperation.DESCRIBE, ResourceType.TOPIC, "orders"),
            any_check(AclOperation.WRITE, ResourceType.TOPIC)))),
        (TAG_AUTHORIZE, AuthorizeAnswer(0, True, (True, False))),
        (TAG_AUTHORIZE, AuthorizeAnswer(31, False, ())),
    ]


def seed_inputs() -> list[bytes]:
    """Valid encodings of every message, bare and framed (with and without a trace), and a
    frame under an unknown tag."""
    out = []
    for tag, msg in seed_messages():
        payload = postcard.encode(msg)
        out += [payload, encode_frame(tag, payload), encode_frame(tag, payload, TRACE)]
    out.append(encode_frame(0x95, b"\x01"))
    return out + membership_seeds()


INTERESTING = [0x00, 0x01, 0x02, 0x7F, 0x80, 0xFF, 0xFE]
HUGE_VARINTS = [b"\xff\xff\xff\xff\x0f", b"\x80\x80\x80\x80\x08", b"\xff" * 9 + b"\x01",
                b"\x80" * 10 + b"\x01", b"\x80\x00", b"\xff\xff\xff\xff\x1f", b"\xa0\x1f"]

Mutation = Callable[[random.Random, bytearray, list[bytes]], None]


def _flip(rng: random.Random, b: bytearray, _: list[bytes]) -> None:
    for _i in range(rng.randint(1, 4)):
        b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)


def _set_byte(rng: random.Random, b: bytearray, _: list[bytes]) -> None:
    b[rng.randrange(len(b))] = rng.choice([*INTERESTING, rng.randrange(256)])


def _varint(rng: random.Random, b: bytearray, _: list[bytes]) -> None:
    pos, v = rng.randrange(len(b) + 1), rng.choice(HUGE_VARINTS)
    if rng.random() < 0.5:
        b[pos:pos + len(v)] = v  # overwrite
    else:
        b[pos:pos] = v  # insert


def _truncate(rng: random.Random, b: bytearray, _: list[bytes]) -> None:
    del b[rng.randrange(len(b)):]


def _duplicate(rng: random.Random, b: bytearray, _: list[bytes]) -> None:
    lo = rng.randrange(len(b))
    hi = min(len(b), lo + rng.randint(1, 16))
    b[hi:hi] = b[lo:hi]


def _splice(rng: random.Random, b: bytearray, corpus: list[bytes]) -> None:
    other = rng.choice(corpus)
    lo = rng.randrange(len(other))
    b[rng.randrange(len(b) + 1):] = other[lo:]


def _delete(rng: random.Random, b: bytearray, _: list[bytes]) -> None:
    lo = rng.randrange(len(b))
    del b[lo:lo + rng.randint(1, 8)]


MUTATIONS: list[Mutation] = [_flip, _set_byte, _varint, _truncate, _duplicate, _splice, _delete]


def next_input(rng: random.Random, corpus: list[bytes]) -> bytes:
    """One in eight inputs is random bytes; the others are a seed with 1-3 mutations."""
    if rng.random() < 0.125:
        return rng.randbytes(rng.randrange(64))
    b = bytearray(rng.choice(corpus))
    for _ in range(rng.randint(1, 3)):
        if not b:
            break
        rng.choice(MUTATIONS)(rng, b, corpus)
    return bytes(b)


# -- the run -----------------------------------------------------------------------------------
@dataclass
class Finding:
    signature: str  # exception type and the line it was raised from
    message: str
    input_hex: str
    count: int = 1


@dataclass
class Report:
    seed: int
    seconds: float = 0.0
    execs: int = 0
    findings: list[Finding] = field(default_factory=list)

    @property
    def execs_per_s(self) -> float:
        return self.execs / self.seconds if self.seconds else 0.0


def raised_at(exc: BaseException) -> str:
    """``file.py:line`` an exception was raised from (``?`` without a traceback)."""
    tb = traceback.extract_tb(exc.__traceback__)
    return f"{tb[-1].filename.rsplit('/', 1)[-1]}:{tb[-1].lineno}" if tb else "?"


def _signature(exc: BaseException) -> str:
    return f"{type(exc).__name__} at {raised_at(exc)}"


def write_report(report: Any, path: str) -> None:
    """A harness's report (a dataclass with ``execs_per_s``) as JSON."""
    with open(path, "w") as fh:
        json.dump({**asdict(report), "execs_per_s": report.execs_per_s}, fh, indent=2)


def print_report(name: str, report: Any, json_path: str | None,
                 details: tuple[str, ...] = ()) -> int:
    """Print a harness's report (``details`` after the summary line, then the findings),
    write it as JSON to ``json_path`` when given; the exit status (1: findings)."""
    print(f"{name}, seed {report.seed}: {report.execs} execs in {report.seconds:.1f} s "
          f"({report.execs_per_s:,.0f}/s), {len(report.findings)} findings")
    for line in details:
        print(line)
    for f in report.findings:
        print(f"  {f.signature} (x{f.count}): {f.message}\n    input: {f.input_hex}")
    if json_path:
        write_report(report, json_path)
    return 1 if report.findings else 0


def start_atheris(argv: list[str], target: Callable[[bytes], None], seeds: list[bytes],
                  prefix: str, extra: tuple[str, ...] = ()) -> None:
    """libFuzzer over ``target`` (atheris), every loaded module instrumented. Without a
    corpus directory among the arguments, a temporary one seeded with ``seeds``; ``extra``
    libFuzzer flags go first."""
    import tempfile

    import atheris  # optional: pip install -e '.[fuzz]'

    args = argv[1:]
    if all(a.startswith("-") for a in args):
        corpus = tempfile.mkdtemp(prefix=prefix)
        for i, data in enumerate(seeds):
            with open(f"{corpus}/seed-{i:03d}", "wb") as fh:
                fh.write(data)
        args.append(corpus)
    atheris.instrument_all()
    atheris.Setup([argv[0], *extra, *args], target)
    atheris.Fuzz()


def run(seconds: float, seed: int = 1, max_execs: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        target: Callable[[bytes], None] | None = None,
        seeds: list[bytes] | None = None) -> Report:
    """Fuzz ``target`` (default: ``check_input``, from ``seed_inputs``) for ``seconds`` (or
    ``max_execs`` inputs); findings deduplicated by signature."""
    rng = random.Random(seed)
    check = check_input if target is None else target
    corpus = seed_inputs() if seeds is None else seeds
    report = Report(seed)
    found: dict[str, Finding] = {}
    start = clock()
    deadline = start + seconds
    while (max_execs is None or report.execs < max_execs) and (
            report.execs % 64 or clock() < deadline):
        data = next_input(rng, corpus)
        report.execs += 1
        try:
            check(data)
        except Exception as exc:
            sig = _signature(exc)
            if sig in found:
                found[sig].count += 1
            else:
                found[sig] = Finding(sig, str(exc)[:300], data.hex())
    report.seconds = clock() - start
    report.findings = list(found.values())
    return report


def atheris_main(argv: list[str]) -> None:
    """libFuzzer over ``check_input`` (``start_atheris``, seeded with ``seed_inputs``)."""
    start_atheris(argv, check_input, seed_inputs(), "eddy-mesh-fuzz-")


def main(argv: list[str] | None = None) -> int:
    args_in = sys.argv[1:] if argv is None else argv
    if args_in[:1] == ["--atheris"]:
        atheris_main([sys.argv[0], *args_in[1:]])
        return 0
    ap = argparse.ArgumentParser(prog="python -m bench.fuzz.mesh_decoders",
                                 description="Fuzz the mesh frame and postcard decoders.")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-execs", type=int, help="stop after this many inputs")
    ap.add_argument("--json", help="write the report as JSON to this file")
    args = ap.parse_args(args_in)
    return print_report("mesh decoders", run(args.seconds, args.seed, args.max_execs), args.json)


if __name__ == "__main__":
    sys.exit(main())
