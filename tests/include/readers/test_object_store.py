"""An Airflow ``aws`` connection read as the settings of an S3 store (pure: connections are plain objects)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from include.contract.locations import scheme_of
from include.readers.connections import ConnectionConfigError
from include.readers.object_store import S3Settings, s3_settings


def _conn(login=None, password=None, **extra):
    return SimpleNamespace(login=login, password=password, extra_dejson=extra)


def _settings(conn) -> S3Settings:
    return s3_settings("aws_lake", get_connection=lambda _: conn)


@pytest.mark.parametrize(("location", "scheme"), [
    ("s3a://bucket/lake", "s3a"), ("S3://bucket", "s3"), ("/srv/lake", None), ("file:///srv/lake", None),
    ("abfss://c@a.dfs.core.windows.net/x", "abfss"),
])  # fmt: skip
def test_the_scheme_of_a_location(location, scheme):
    assert scheme_of(location) == scheme


def test_a_connection_to_an_s3_compatible_store_gives_every_option_object_store_needs():
    s = _settings(_conn("key", "secret", endpoint_url="http://127.0.0.1:9000", region_name="eu-west-1",
                        aws_session_token="token"))  # fmt: skip
    assert s.object_store_options() == {
        "aws_access_key_id": "key", "aws_secret_access_key": "secret", "aws_session_token": "token",
        "aws_endpoint": "http://127.0.0.1:9000", "aws_region": "eu-west-1",
        "aws_virtual_hosted_style_request": "false", "aws_allow_http": "true",
    }  # fmt: skip
    assert s.secrets() == ["secret", "token"]
    config, client = s.obstore_args()
    assert client == {"allow_http": "true"} and "aws_allow_http" not in config and config["aws_endpoint"]
    assert "secret" not in repr(s) and "token" not in repr(s)


def test_the_s3_service_endpoint_wins_keys_may_sit_in_the_extra_and_virtual_hosting_is_asked_for():
    s = _settings(_conn(aws_access_key_id="k", aws_secret_access_key="s", endpoint_url="https://all.example",
                        service_config={"s3": {"endpoint_url": "https://s3.example"}},
                        config_kwargs={"s3": {"addressing_style": "virtual"}}))  # fmt: skip
    assert s.object_store_options() == {
        "aws_access_key_id": "k", "aws_secret_access_key": "s", "aws_endpoint": "https://s3.example",
        "aws_virtual_hosted_style_request": "true",
    }  # fmt: skip


def test_no_keys_leaves_the_credentials_to_the_workers_own_aws_chain():
    assert _settings(_conn(region_name="us-east-1")).object_store_options() == {
        "aws_region": "us-east-1", "aws_virtual_hosted_style_request": "false"}


def test_a_key_without_its_secret_is_refused_naming_the_connection():
    with pytest.raises(ConnectionConfigError, match=r"'aws_lake': has an access key id but no secret access key"):
        _settings(_conn("key"))


def test_an_unknown_addressing_style_is_refused_naming_the_field():
    with pytest.raises(ConnectionConfigError, match=r"config_kwargs.s3.addressing_style is 'sideways'"):
        _settings(_conn(config_kwargs={"s3": {"addressing_style": "sideways"}}))
