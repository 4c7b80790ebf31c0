"""Protobuf messages from rows, for the eddy sink's value.format protobuf.

A row (a dict, as eddy.connect.formats.value_encoders makes of Arrow's values) fills a dynamic
message of the schema's first message field by field, by name: absent or null fields
stay unset; timestamps (datetimes, or microseconds) fill google.protobuf.Timestamp;
dates fill integer fields as days since 1970-01-01; decimals fill string fields exactly;
strings fill enum fields by value name. A null inside a repeated field or a map value
cannot be written: ProtobufEncodeError, naming the field (the row is a dead letter).
"""

from __future__ import annotations

import base64
import datetime
import decimal
from typing import Any

from eddy.connect.formats.confluent_wire import frame

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_EPOCH_DAY = datetime.date(1970, 1, 1)


class ProtobufEncodeError(ValueError):
    """A row (or a schema) that cannot be encoded; the message names the field."""


def _at(path: str) -> str:
    return f"`{path}`" if path else "the value"


def load_message_class(serialized: str) -> Any:
    """The class of the first message of a base64 FileDescriptorProto whose imports are
    files Confluent resolves without a reference (google/protobuf's well-known types,
    google/type/*, confluent/meta)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    from eddy.formats.protobuf.schema import known_files

    try:
        fdp = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(serialized))
    except Exception as exc:
        raise ProtobufEncodeError(f"not a serialized FileDescriptorProto "
                                  f"({type(exc).__name__})") from None
    if not fdp.message_type:
        raise ProtobufEncodeError("the Protobuf schema has no message")
    pool = descriptor_pool.DescriptorPool()
    added: set[str] = set()
    for dep in fdp.dependency:
        known = known_files(dep)
        if known is None:
            raise ProtobufEncodeError(f"import {dep!r} is not a well-known type")
        for file in known:
            if file.name not in added:
                added.add(file.name)
                pool.Add(file)
    name = fdp.message_type[0].name
    try:
        pool.Add(fdp)
        return message_factory.GetMessageClass(pool.FindMessageTypeByName(
            f"{fdp.package}.{name}" if fdp.package else name))
    except Exception as exc:
        raise ProtobufEncodeError(f"the Protobuf schema does not load: {exc}") from None


def _scalar(fd: Any, value: Any, path: str) -> Any:
    from google.protobuf.descriptor import FieldDescriptor as FD

    if fd.type == FD.TYPE_ENUM and isinstance(value, str):
        found = fd.enum_type.values_by_name.get(value)
        if found is None:
            raise ProtobufEncodeError(f"{_at(path)}: {value!r} is not a value of enum "
                                      f"{fd.enum_type.full_name}")
        return found.number
    if isinstance(value, datetime.date) and not isinstance(value, datetime.datetime) and \
            fd.cpp_type in (FD.CPPTYPE_INT32, FD.CPPTYPE_INT64):
        return (value - _EPOCH_DAY).days
    if isinstance(value, decimal.Decimal) and fd.type == FD.TYPE_STRING:
        return format(value, "f")
    if isinstance(value, datetime.datetime | datetime.date) and fd.type == FD.TYPE_STRING:
        return value.isoformat()
    return value


def _micros(value: Any, path: str) -> int:
    if isinstance(value, datetime.datetime):
        stamp = value if value.tzinfo is not None else value.replace(tzinfo=datetime.UTC)
        return (stamp - _EPOCH) // datetime.timedelta(microseconds=1)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ProtobufEncodeError(f"{_at(path)}: expected a timestamp, got {type(value).__name__}")


def fill(msg: Any, value: Any, path: str = "") -> None:
    """Set `msg`'s fields from a dict (by field name; absent or null: unset)."""
    from google.protobuf.descriptor import FieldDescriptor as FD

    if msg.DESCRIPTOR.full_name == "google.protobuf.Timestamp":
        seconds, micros = divmod(_micros(value, path), 1_000_000)
        msg.seconds, msg.nanos = seconds, micros * 1000
        return
    if not isinstance(value, dict):
        raise ProtobufEncodeError(f"{_at(path)}: expected a struct for message "
                                  f"{msg.DESCRIPTOR.full_name}, got {type(value).__name__}")
    for fd in msg.DESCRIPTOR.fields:
        v = value.get(fd.name)
        if v is None:
            continue
        where = f"{path}.{fd.name}" if path else fd.name
        is_message = fd.type == FD.TYPE_MESSAGE
        try:
            if is_message and fd.message_type.GetOptions().map_entry:
                target = getattr(msg, fd.name)
                val_fd = fd.message_type.fields_by_name["value"]
                for k, x in (v.items() if isinstance(v, dict) else v):
                    if x is None:
                        raise ProtobufEncodeError(f"{_at(where)}: map value for {k!r} is "
                                                  "null, which a Protobuf map cannot hold")
                    if val_fd.type == FD.TYPE_MESSAGE:
                        fill(target[k], x, f"{where}.{k}")
                    else:
                        target[k] = _scalar(val_fd, x, f"{where}.{k}")
            elif fd.is_repeated:
                target = getattr(msg, fd.name)
                for i, x in enumerate(v):
                    if x is None:
                        raise ProtobufEncodeError(f"{_at(f'{where}[{i}]')}: null, which a "
                                                  "Protobuf repeated field cannot hold")
                    if is_message:
                        fill(target.add(), x, f"{where}[{i}]")
                    else:
                        target.append(_scalar(fd, x, f"{where}[{i}]"))
            elif is_message:
                sub = getattr(msg, fd.name)
                sub.SetInParent()
                fill(sub, v, where)
            else:
                setattr(msg, fd.name, _scalar(fd, v, where))
        except (TypeError, ValueError, OverflowError) as exc:
            if isinstance(exc, ProtobufEncodeError):
                raise
            raise ProtobufEncodeError(f"{_at(where)}: {str(exc)[:200]}") from None


class ProtobufEncoder:
    def __init__(self, schema_id: int, serialized: str) -> None:
        self.header = frame(schema_id, b"\x00")  # message indexes [0]: the first message
        self.message = load_message_class(serialized)

    def encode(self, value: Any) -> bytes:
        msg = self.message()
        fill(msg, value)
        return bytes(self.header + msg.SerializeToString())
