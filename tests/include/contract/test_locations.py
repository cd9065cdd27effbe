"""Where a location points: a URI or a path (include/contract/locations.py)."""

from __future__ import annotations

import pytest

from include.contract.locations import is_uri


@pytest.mark.parametrize(("location", "uri"), [
    ("s3a://bucket/lake", True), ("hdfs://nn:8020/lake", True), ("file:///tmp/lake", True),
    ("/tmp/lake", False), ("lake/bronze", False), ("./a://b", False), ("3s://bucket", False), ("s3:/bucket", False),
])  # fmt: skip
def test_a_location_is_a_uri_only_when_it_starts_with_a_scheme_and_colon_slash_slash(location, uri):
    assert is_uri(location) is uri
