"""Fuzz what a follower reads from its leader (issue 14): `python -m
bench.fuzz.replica_decoders --seconds 10 [--seed N] [--json out.json]`.

``check_input(data)`` is the target: the bytes are one response frame (size prefix
excluded) from a leader, decoded as a Fetch v12 response, an OffsetForLeaderEpoch v4
response and the SaslHandshake v1 / SaslAuthenticate v2 answers of a login to a SASL
inter-broker listener (``decode_response``: every length and count checked against the
bytes present),
and the records of every partition of a decoded Fetch response go through the follower's
batch checks (``check_replica_batches``) at the offset the seed asked for; the same bytes
also go, as a stream cut in uneven pieces, through the link's frame reader. Documented
outcomes: ``MalformedResponse`` and ``KafkaError`` (CORRUPT_MESSAGE); anything else is a
finding, and so is a check that takes more bytes than it was given, or batches that do not
continue each other. Mutations and the run loop are the mesh fuzzer's.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import sys

from bench.fuzz.mesh_decoders import next_input, print_report, run, start_atheris
from eddy.client.raw import MalformedResponse, decode_response
from eddy.cluster.replication.link import _Frames
from eddy.protocol.apis import ApiKey
from eddy.protocol.codec import build, encode_response, response_module
from eddy.protocol.errors import ErrorCode, KafkaError
from eddy.protocol.fetch_codec import FetchPartition, FetchTopic, encode_fetch_response
from eddy.protocol.records import build_batch
from eddy.protocol.replica_batches import check_replica_batches

__all__ = ["check_input", "main", "next_input", "sasl_seed_inputs", "seed_inputs"]

FETCH, OFFSET_FOR_LEADER_EPOCH = 1, 23
#: the answers a follower reads while it logs in to a SASL inter-broker listener
SASL_ANSWERS = ((ApiKey.SASL_HANDSHAKE, 1), (ApiKey.SASL_AUTHENTICATE, 2))
CORRELATION = 1
FETCH_OFFSET = 5
FRAME_CAP = 1 << 16  # the link's response cap, small: sizes in seeds cross it


def _check_records(records: bytes) -> None:
    try:
        checked = check_replica_batches(records, FETCH_OFFSET, len(records))
    except KafkaError as exc:
        if exc.code != ErrorCode.corrupt_message:
            raise AssertionError(f"unexpected code {exc.code.name}") from None
        return
    if checked.length > len(records):
        raise AssertionError(f"took {checked.length} of {len(records)} bytes")
    expected = FETCH_OFFSET
    for h, pos in zip(checked.headers, checked.positions, strict=True):
        if h.base_offset != expected or pos + h.size > checked.length:
            raise AssertionError(f"batch at {pos} does not continue the log")
        expected = h.last_offset + 1


def check_input(data: bytes) -> None:
    """The fuzz target: returns for every documented outcome, raises anything else."""
    try:
        fetched = decode_response(FETCH, 12, CORRELATION, data)
    except (MalformedResponse, ConnectionError):
        fetched = None
    if fetched is not None:
        for topic in fetched.responses:
            for part in topic.partitions:
                if part.records:
                    _check_records(bytes(part.records))
    with contextlib.suppress(MalformedResponse, ConnectionError):
        decode_response(OFFSET_FOR_LEADER_EPOCH, 4, CORRELATION, data)
    for key, version in SASL_ANSWERS:
        with contextlib.suppress(MalformedResponse, ConnectionError):
            decode_response(key, version, CORRELATION, data)
    _check_frames(data)
    if len(data) < 4096:
        _check_records(data)  # the raw bytes as a record set too


def _check_frames(data: bytes) -> None:
    """The link's frame reader over ``data`` as a byte stream, in uneven pieces: each frame
    it yields is one announced within the cap and exactly that long, or it fails with
    MalformedResponse; nothing is held beyond one frame."""
    frames = _Frames(FRAME_CAP)
    frames.connection_made(_NullTransport())  # type: ignore[arg-type,unused-ignore]
    pos, step = 0, 1
    while pos < len(data) and frames._failure is None:
        buf = frames.get_buffer(-1)
        n = min(len(buf), len(data) - pos, step)
        buf[:n] = data[pos:pos + n]
        frames.buffer_updated(n)
        pos, step = pos + n, step * 3 % 1021 + 1
        done = frames._done
        if done is not None:
            frames._take()
            if not 4 <= len(done) <= FRAME_CAP:
                raise AssertionError(f"a frame of {len(done)} bytes passed the cap")
    if frames._failure is not None and not isinstance(frames._failure, MalformedResponse):
        raise frames._failure


class _NullTransport:
    def pause_reading(self) -> None: ...
    def resume_reading(self) -> None: ...
    def abort(self) -> None: ...
    def is_closing(self) -> bool:
        return False


def seed_inputs() -> list[bytes]:
    """Leader answers a follower gets: batches continuing its log (one and several
    partitions, a cut last batch), an error, an empty answer."""
    batches = b"".join(bytes(b) for b in (
        _batch(FETCH_OFFSET, 3), _batch(FETCH_OFFSET + 3, 1), _batch(FETCH_OFFSET + 4, 2)))
    parts = [FetchPartition(0, 0, 11, 11, 0, None, batches),
             FetchPartition(1, 0, 5, 5, 0, None, batches[:-7]),
             FetchPartition(2, int(ErrorCode.not_leader_or_follower), -1, -1, -1, None, b"",
                            current_leader=(3, 7))]
    out = []
    for topics in ([FetchTopic("t", None, parts)], [FetchTopic("t", None, parts[:1])], []):
        out.append(b"".join(bytes(c) for c in encode_fetch_response(12, CORRELATION,
                                                                    topics)))
    out.append(batches)
    return out


def sasl_seed_inputs() -> list[bytes]:
    """The answers of a login to a SASL inter-broker listener: a SaslHandshake v1 and a
    SaslAuthenticate v2 (a SCRAM server-first message with a session lifetime)."""
    out = []
    handshake = response_module(ApiKey.SASL_HANDSHAKE, 1)
    out.append(bytes(encode_response(ApiKey.SASL_HANDSHAKE, 1, CORRELATION, build(
        handshake.SaslHandshakeResponse, error_code=ErrorCode.none,
        mechanisms=("SCRAM-SHA-512", "PLAIN")))))
    auth = response_module(ApiKey.SASL_AUTHENTICATE, 2)
    out.append(bytes(encode_response(ApiKey.SASL_AUTHENTICATE, 2, CORRELATION, build(
        auth.SaslAuthenticateResponse, error_code=ErrorCode.none, error_message=None,
        auth_bytes=b"r=nonce,s=c2FsdA==,i=4096",
        session_lifetime=datetime.timedelta(milliseconds=60000)))))
    return out


def _batch(base: int, n: int) -> bytes:
    data = build_batch([(b"k%d" % i, b"v%d" % i) for i in range(n)], 1_700_000_000_000)
    data[0:8] = base.to_bytes(8, "big")  # the base offset is outside the CRC
    return bytes(data)


def main(argv: list[str] | None = None) -> int:
    args_in = sys.argv[1:] if argv is None else argv
    if args_in[:1] == ["--atheris"]:
        start_atheris([sys.argv[0], *args_in[1:]], check_input,
                      seed_inputs() + sasl_seed_inputs(),
                      "eddy-replica-fuzz-")
        return 0
    ap = argparse.ArgumentParser(prog="python -m bench.fuzz.replica_decoders",
                                 description="Fuzz a follower's reading of leader answers.")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", help="write the report as JSON to this file")
    args = ap.parse_args(args_in)
    report = run(args.seconds, args.seed, target=check_input,
                 seeds=seed_inputs() + sasl_seed_inputs())
    return print_report("replica decoders", report, args.json)


if __name__ == "__main__":
    sys.exit(main())
