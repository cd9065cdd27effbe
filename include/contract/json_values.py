"""The type of a JSON value, for the records that cross a process boundary (XComs, envelopes, files).

A record field typed with these holds what ``json.dumps`` writes and ``json.loads`` gives back, and mypy
checks it as such, where ``Any`` would let anything through.
"""

from __future__ import annotations

from typing import TypeAlias

#: One JSON value.
Json: TypeAlias = "str | int | float | bool | None | list[Json] | dict[str, Json]"
#: A JSON object.
JsonDict: TypeAlias = "dict[str, Json]"
