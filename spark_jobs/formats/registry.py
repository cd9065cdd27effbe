"""Every record value format the transform reads, by name (``transform.format``): one line each.

The names are those of :data:`include.contract.value_formats.VALUE_FORMATS`
(``tests/spark_jobs/test_value_formats.py`` checks that the two agree).
"""

from __future__ import annotations

from collections.abc import Callable

from include.contract.errors import ContractError
from spark_jobs.formats.avro import AvroValues
from spark_jobs.formats.base import ValueFormat
from spark_jobs.formats.json_schema import JsonSchemaValues
from spark_jobs.formats.json_text import JsonValues
from spark_jobs.formats.protobuf import ProtobufValues

#: Format name -> what makes one run's instance of it.
FORMATS: dict[str, Callable[[], ValueFormat]] = {
    "json": JsonValues,
    "avro": AvroValues,
    "json_schema": JsonSchemaValues,
    "protobuf": ProtobufValues,
}


def value_format(name: str) -> ValueFormat:
    """A new instance of format ``name`` (one per run: a format keeps what it readied from the reader schema)."""
    try:
        return FORMATS[name]()
    except KeyError:
        raise ContractError(f"transform.format {name!r}: no such value format (known: {', '.join(FORMATS)})") from None
