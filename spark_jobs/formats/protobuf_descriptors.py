"""Descriptor sets of ``protobuf`` record values, built in the driver once per run and schema id.

protobuf-java cannot read ``.proto`` text, and a registry answers with text: the
writer schema and every file it imports (the registry's references, read by
:func:`include.readers.schema_registry.referenced_texts`). ``protoc`` (the one
grpcio-tools ships, with Google's well-known types on its include path, which
Confluent's serializer never registers) compiles them into a
``FileDescriptorSet``. That set travels in the query plan to the executors,
where ``kde_protobuf_json`` (include/spark/jvm/src/kde/functions/ProtobufJson.java)
decodes each value with it.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from include.contract.errors import PipelineError

#: The file name the registry's schema text gets in the set (the registry gives the root no name).
ROOT_FILE = "schema_id_{id}.proto"


class DescriptorError(PipelineError, ValueError):
    """The schema and its imports do not compile; the message is protoc's own."""


@dataclass(frozen=True)
class MessageType:
    """A message the value's message-index path can name: its full name and its fields."""

    name: str
    fields: tuple[str, ...]


#: How long protoc may take for one schema and its imports: a registered schema compiles in a second.
PROTOC_TIMEOUT_S = 60


def build(schema_id: int, text: str, imports: dict[str, str]) -> tuple[bytes, str]:
    """``(FileDescriptorSet bytes, the schema's file name in it)`` for ``text`` and the ``imports`` it names,
    by import path. Raises :class:`DescriptorError` with protoc's message when they do not compile."""
    root = ROOT_FILE.format(id=schema_id)
    with tempfile.TemporaryDirectory(prefix="kde-proto-") as work:
        folder = Path(work)
        for name, body in {**imports, root: text}.items():
            path = PurePosixPath(name)
            if path.is_absolute() or ".." in path.parts:
                raise DescriptorError(f"import {name!r} is not a relative path inside the schema's files")
            (folder / path).parent.mkdir(parents=True, exist_ok=True)
            (folder / path).write_text(body)
        out = folder / "set.pb"
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "grpc_tools.protoc", f"-I{folder}", "--include_imports",
                 f"--descriptor_set_out={out}", root],
                capture_output=True, text=True, cwd=folder, timeout=PROTOC_TIMEOUT_S,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            raise DescriptorError(f"protoc did not compile it within {PROTOC_TIMEOUT_S} s") from None
        if proc.returncode != 0:
            message = (proc.stderr or proc.stdout).strip().replace(f"{folder}/", "")
            raise DescriptorError(f"protoc cannot compile it: {message[-1500:]}")
        return out.read_bytes(), root


def message_types(descriptor_set: bytes, file: str) -> list[MessageType]:
    """Every message of ``file`` in the set that a message-index path can name: top-level first, then each
    one's nested messages (map entries, which Confluent's indexes do not count, left out)."""
    from google.protobuf import descriptor_pb2

    found = descriptor_pb2.FileDescriptorSet.FromString(descriptor_set)
    proto = next((f for f in found.file if f.name == file), None)
    if proto is None:
        raise DescriptorError(f"the descriptor set has no file {file}")
    prefix = f"{proto.package}." if proto.package else ""
    out: list[MessageType] = []

    def walk(messages: Iterable[Any], scope: str) -> None:  # DescriptorProtos: protobuf ships no types
        for m in messages:
            if not m.options.map_entry:
                out.append(MessageType(f"{scope}{m.name}", tuple(f.name for f in m.field)))
                walk(m.nested_type, f"{scope}{m.name}.")

    walk(proto.message_type, prefix)
    return out
