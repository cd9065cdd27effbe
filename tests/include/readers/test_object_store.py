"""An Airflow ``aws`` connection read as the settings of an S3 store (pure: connections are plain objects)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from include.contract.locations import scheme_of
from include.readers.connections import ConnectionConfigError
from include.readers.object_store import S3Settings, location_options, s3_settings


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


# --------------------------------------------------------------------------- a location's delta-rs options


@pytest.fixture
def masked(monkeypatch) -> list[str]:
    """What was handed to Airflow's log masker (recorded, so no global masker state leaks between tests)."""
    seen: list[str] = []
    monkeypatch.setattr("airflow.sdk.log.mask_secret", lambda value, name=None: seen.append(value))
    return seen


def _never(conn_id: str):
    raise AssertionError(f"connection {conn_id!r} looked up for a local location")


@pytest.mark.parametrize("location", ["/srv/lake/bronze", "file:///srv/lake/bronze"])
def test_a_local_location_has_no_options_and_looks_no_connection_up(location, masked):
    assert location_options(location, "aws_lake", get_connection=_never) is None
    assert masked == []


@pytest.mark.parametrize("location", ["s3a://bucket/lake/bronze", "s3://bucket/lake/bronze"])
def test_an_s3_location_takes_the_connections_settings_and_masks_its_secrets(location, masked):
    asked = []
    conn = _conn("key", "secret-key", endpoint_url="http://minio:9000", aws_session_token="session-token")
    options = location_options(location, "aws_lake", get_connection=lambda conn_id: asked.append(conn_id) or conn)
    assert options == {
        "aws_access_key_id": "key", "aws_secret_access_key": "secret-key", "aws_session_token": "session-token",
        "aws_endpoint": "http://minio:9000", "aws_virtual_hosted_style_request": "false", "aws_allow_http": "true",
    }  # fmt: skip
    assert asked == ["aws_lake"] and masked == ["secret-key", "session-token"]


def test_another_store_is_refused_naming_the_location_before_any_lookup(masked):
    location = "abfss://lake@account.dfs.core.windows.net/bronze"
    with pytest.raises(ConnectionConfigError, match=r"tables.bronze_path 'abfss://lake@account.*' is on a abfss:// "
                                                     r"store.*HDFS \(hdfs://\).*s3a:// or hdfs:// location"):  # fmt: skip
        location_options(location, "aws_lake", what="tables.bronze_path", get_connection=_never)


def test_hdfs_takes_no_connection_and_no_options():
    assert location_options("hdfs://namenode:8020/lake/bronze", "aws_lake", get_connection=_never) is None


def test_a_malformed_connection_is_refused_naming_it(masked):
    with pytest.raises(ConnectionConfigError, match=r"'aws_lake': has an access key id but no secret"):
        location_options("s3a://bucket/x", "aws_lake", get_connection=lambda _: _conn("key"))
    assert masked == []


# --------------------------------------------------------------------------- Spark's S3A options

S3A = "org.apache.hadoop.fs.s3a.S3AFileSystem"


def test_hadoop_options_default_to_path_style_and_the_workers_own_credentials():
    assert S3Settings().hadoop_options() == {"fs.s3.impl": S3A, "fs.s3a.path.style.access": "true"}
    assert S3Settings().hadoop_secrets() == {}


def test_hadoop_options_of_an_http_endpoint_turn_ssl_off_and_carry_the_region_but_no_secret():
    s = _settings(_conn("key", "secret", endpoint_url="http://minio:9000", region_name="eu-west-1"))
    assert s.hadoop_options() == {
        "fs.s3.impl": S3A, "fs.s3a.path.style.access": "true", "fs.s3a.endpoint": "http://minio:9000",
        "fs.s3a.connection.ssl.enabled": "false", "fs.s3a.endpoint.region": "eu-west-1",
    }  # fmt: skip
    assert s.hadoop_secrets() == {"fs.s3a.access.key": "key", "fs.s3a.secret.key": "secret"}


def test_hadoop_options_of_an_https_endpoint_keep_ssl_and_virtual_hosting_turns_path_style_off():
    s = _settings(_conn(endpoint_url="HTTPS://s3.example", config_kwargs={"s3": {"addressing_style": "virtual"}}))
    assert s.hadoop_options() == {
        "fs.s3.impl": S3A, "fs.s3a.path.style.access": "false", "fs.s3a.endpoint": "HTTPS://s3.example",
        "fs.s3a.connection.ssl.enabled": "true",
    }  # fmt: skip


def test_a_session_token_selects_the_temporary_credentials_provider():
    s = _settings(_conn("key", "secret", aws_session_token="token"))
    assert s.hadoop_options()["fs.s3a.aws.credentials.provider"] == \
        "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"  # fmt: skip
    assert s.hadoop_secrets() == {"fs.s3a.access.key": "key", "fs.s3a.secret.key": "secret",
                                  "fs.s3a.session.token": "token"}  # fmt: skip
    assert not {"token", "secret"} & set(s.hadoop_options().values())


def test_keys_are_set_only_with_a_whole_key_pair():
    half = S3Settings(access_key_id="key")  # s3_settings refuses this; the options must not carry half of it
    assert half.hadoop_secrets() == {}
    assert not {"fs.s3a.access.key", "fs.s3a.secret.key"} & set(half.hadoop_options())


# --------------------------------------------------------------------------- a pipeline's tables (object_store.TableOptions)


def test_a_local_pipeline_looks_no_connection_up(make_pipeline, masked):
    from include.readers.object_store import TableOptions

    options = TableOptions(make_pipeline(), get_connection=_never)
    assert [options(k) for k in ("bronze_path", "silver_path", "quarantine_path", "ledger_path")] == [None] * 4


def test_a_pipeline_on_s3_looks_its_connection_up_once_for_every_table(make_pipeline, masked):
    from include.readers.object_store import TableOptions

    cfg = make_pipeline(tables={"lakehouse_root": "s3a://bucket/lake", "storage_connection_id": "aws_lake"})
    asked = []
    options = TableOptions(cfg, get_connection=lambda conn_id: asked.append(conn_id) or _conn("key", "secret-key"))
    assert options("bronze_path") == options("ledger_path") == {
        "aws_access_key_id": "key", "aws_secret_access_key": "secret-key", "aws_virtual_hosted_style_request": "false"}
    assert asked == ["aws_lake"]


def test_a_failed_lookup_is_asked_again_and_a_local_table_still_reads(make_pipeline, tmp_path, masked):
    """A failure is not kept: the run's last task must still reach the lock when an earlier read failed."""
    from include.readers.object_store import TableOptions

    cfg = make_pipeline(tables={"lakehouse_root": "s3a://bucket/lake", "ledger_path": str(tmp_path / "runs")})
    asked = []

    def flaky(conn_id: str):
        asked.append(conn_id)
        if len(asked) == 1:
            raise ConnectionConfigError(f"Airflow connection {conn_id!r} does not exist")
        return _conn("key", "secret-key")

    options = TableOptions(cfg, get_connection=flaky)
    with pytest.raises(ConnectionConfigError, match="'aws_default' does not exist"):
        options("bronze_path")
    assert options("ledger_path") is None and asked == ["aws_default"]
    assert options("silver_path")["aws_access_key_id"] == "key"
    assert options("bronze_path")["aws_access_key_id"] == "key" and asked == ["aws_default"] * 2


def test_the_lock_and_the_tables_share_one_lookup(make_pipeline, masked):
    from include.orchestration.run_lock import ObjectStoreFolder, lock_folder
    from include.readers.object_store import TableOptions

    cfg = make_pipeline(tables={"lakehouse_root": "s3a://bucket/lake"})
    asked = []
    options = TableOptions(cfg, get_connection=lambda conn_id: asked.append(conn_id) or _conn("key", "secret-key"))
    assert isinstance(lock_folder(cfg, options), ObjectStoreFolder)
    assert options("bronze_path")["aws_secret_access_key"] == "secret-key"
    assert asked == ["aws_default"] and masked == ["secret-key"]


# --------------------------------------------------------------------------- the connection's allowed roots


def test_locations_outside_the_connections_allowed_roots_are_refused_naming_both(make_pipeline, masked):
    from include.readers.object_store import TableOptions, store_settings

    conn = _conn("key", "secret-key", allowed_roots=["s3://Lake-A/teams/orders", "s3a://shared/x"])
    get = lambda _: conn  # noqa: E731
    # Inside a root, spelt any way that resolves there: s3a against s3, the bucket in capitals, a trailing /.
    assert store_settings({"tables.bronze_path": "s3a://lake-a/teams/orders/bronze/"}, "aws_lake", get_connection=get)
    with pytest.raises(ConnectionConfigError, match=r"tables.silver_path 's3a://lake-a/teams/orders/../payments' lies "
                                                     r"outside the allowed_roots of Airflow connection 'aws_lake' "
                                                     r"\(s3://Lake-A/teams/orders, s3a://shared/x\)"):  # fmt: skip
        store_settings({"tables.bronze_path": "s3a://lake-a/teams/orders/b",
                        "tables.silver_path": "s3a://lake-a/teams/orders/../payments"}, "aws_lake", get_connection=get)  # fmt: skip
    # A prefix that only starts alike is another folder.
    with pytest.raises(ConnectionConfigError, match="outside the allowed_roots"):
        store_settings({"tables.bronze_path": "s3://lake-a/teams/orders-old"}, "aws_lake", get_connection=get)
    # The tasks' reads are held to the same roots; a local table looks nothing up.
    cfg = make_pipeline(tables={"lakehouse_root": "s3a://other/lake", "storage_connection_id": "aws_lake"})
    with pytest.raises(ConnectionConfigError, match=r"tables.bronze_path 's3a://other/lake/.*' lies outside"):
        TableOptions(cfg, get_connection=get)("bronze_path")
    assert TableOptions(make_pipeline(), get_connection=_never)("bronze_path") is None


@pytest.mark.parametrize("roots", [[], "", ["/srv/lake"], ["s3://"], [7], {"s3://a": 1}])
def test_a_malformed_allowed_roots_is_refused_naming_the_connection(roots):
    with pytest.raises(ConnectionConfigError, match=r"'aws_lake': extra allowed_roots"):
        _settings(_conn("key", "secret-key", allowed_roots=roots))


def test_without_allowed_roots_any_location_on_the_store_is_reached():
    assert _settings(_conn("key", "secret-key")).allowed_roots == ()
    assert _settings(_conn(allowed_roots="s3://a/x, s3a://b")).allowed_roots == ("s3://a/x", "s3a://b")
