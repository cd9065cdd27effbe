"""Where a pipeline's location points: a folder of this machine's filesystem, or an object store's URI."""

from __future__ import annotations

from pathlib import Path


def scheme_of(location: str) -> str | None:
    """The URI scheme of ``location`` (``s3a``), or ``None`` for a local path or a ``file://`` URI."""
    head, sep, _ = location.partition("://")
    return head.lower() if sep and head.lower() != "file" else None


def local_path(location: str | Path) -> Path | None:
    """The local folder a location names (a path, or a ``file://`` URI); ``None`` for any other URI."""
    text = str(location)
    if "://" in text and not text.startswith("file://"):
        return None
    return Path(text.removeprefix("file://"))
