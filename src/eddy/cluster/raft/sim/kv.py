"""The simulation's application: a key-value state machine (put/get/cas) fed by Raft, the
client history it produces, and a linearizability checker for it (Wing & Gong's search,
one register per key: linearizability is compositional, so keys are checked apart)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from eddy.cluster.raft.types import ENTRY_NORMAL, Entry

Value = str | None


@dataclass(frozen=True, slots=True)
class KvOp:
    client: int
    op_id: int
    kind: str  # "put" | "get" | "cas"
    key: str
    value: str = ""  # put: the value; cas: the new value
    expect: Value = None  # cas: the value it must find

    def encode(self) -> bytes:
        return json.dumps([self.client, self.op_id, self.kind, self.key, self.value,
                           self.expect]).encode()

    @staticmethod
    def decode(data: bytes) -> KvOp:
        c, i, k, key, v, e = json.loads(data)
        return KvOp(int(c), int(i), str(k), str(key), str(v), e)


def apply_op(state: dict[str, str], op: KvOp) -> tuple[dict[str, str], object]:
    """The model: (new state, result). Used by the state machine and the checker."""
    cur = state.get(op.key)
    if op.kind == "get":
        return state, cur
    if op.kind == "put":
        return {**state, op.key: op.value}, True
    if cur == op.expect:
        return {**state, op.key: op.value}, True
    return state, False


class KvStateMachine:
    def __init__(self) -> None:
        self.data: dict[str, str] = {}

    def apply(self, entry: Entry) -> object:
        if entry.kind != ENTRY_NORMAL:
            return None
        op = KvOp.decode(entry.data)
        cur = self.data.get(op.key)
        if op.kind == "get":
            return cur
        if op.kind == "put" or cur == op.expect:
            self.data[op.key] = op.value
            return True
        return False

    def encode(self) -> bytes:
        return json.dumps(self.data, sort_keys=True).encode()

    @staticmethod
    def decode(data: bytes) -> KvStateMachine:
        sm = KvStateMachine()
        sm.data = {str(k): str(v) for k, v in json.loads(data).items()} if data else {}
        return sm


@dataclass(slots=True)
class HistOp:
    """One client operation: ``ret`` None means the outcome is unknown (it may have taken
    effect at any point after ``call``, or never)."""

    op: KvOp
    call: int
    ret: int | None = None
    result: object = None
    done: bool = field(default=False)


_INF = 1 << 62


def check_register(ops: list[HistOp], max_states: int = 200_000) -> bool | None:
    """Is this single-key history linearizable? None when the search gave up (too big)."""
    n = len(ops)
    calls = [o.call for o in ops]
    rets = [o.ret if o.ret is not None else _INF for o in ops]
    need = 0
    for k, o in enumerate(ops):
        if o.ret is not None:
            need |= 1 << k
    order = sorted(range(n), key=lambda k: calls[k])
    seen: set[tuple[int, Value]] = set()
    key = ops[0].op.key if ops else ""
    budget = [max_states]

    def search(done: int, value: Value) -> bool:
        if done & need == need:
            return True
        if (done, value) in seen:
            return False
        budget[0] -= 1
        if budget[0] < 0:
            raise TimeoutError
        seen.add((done, value))
        min_ret = min((rets[k] for k in range(n) if not done >> k & 1), default=_INF)
        for k in order:
            if calls[k] > min_ret:
                break
            if done >> k & 1:
                continue
            o = ops[k]
            state = {} if value is None else {key: value}
            new_state, result = apply_op(state, o.op)
            if o.ret is not None and result != o.result:
                continue
            if search(done | 1 << k, new_state.get(key)):
                return True
        return False

    try:
        return search(0, None)
    except (TimeoutError, RecursionError):
        return None


def check_history(history: list[HistOp]) -> list[str]:
    """Per key: an error line for each key whose history is not linearizable."""
    by_key: dict[str, list[HistOp]] = {}
    for h in history:
        if h.ret is None and h.op.kind == "get":
            continue  # a read with no answer constrains nothing
        by_key.setdefault(h.op.key, []).append(h)
    errors = []
    for key, ops in sorted(by_key.items()):
        verdict = check_register(ops)
        if verdict is False:
            lines = [f"  {h.op.kind} {h.op.value!r}/{h.op.expect!r} [{h.call}, {h.ret}] -> "
                     f"{h.result!r}" for h in sorted(ops, key=lambda h: h.call)]
            errors.append(f"key {key!r}: history not linearizable\n" + "\n".join(lines[-40:]))
    return errors
