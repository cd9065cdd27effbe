"""The schema registry client, the wire format and the registry connection, on recorded answers.

The answers are what Apicurio Registry 2.4.2.Final (the project's local
registry) sent on its Confluent-compatible API, recorded with curl; the
integration tests (tests/integration/test_value_formats.py) talk to the
running server itself.
"""

from __future__ import annotations

import base64
import json
from types import SimpleNamespace

import pytest

from include.contract.transform_spec import subject_name
from include.readers import connections
from include.readers.schema_registry import (
    RegistryClient,
    SchemaRegistryError,
    frame,
    is_not_found,
    referenced_texts,
    unframe,
)
from tests.fakes import recorded_registry

URL = "http://registry:8080/apis/ccompat/v7"
ORDER = '{"type":"record","name":"Order","namespace":"shop","fields":[{"name":"id","type":"string"}]}'
RECORDED = {
    f"{URL}/subjects/orders-value/versions/latest": (200, json.dumps(
        {"id": 1, "subject": "orders-value", "version": 1, "schema": ORDER, "references": []})),
    f"{URL}/subjects/orders-value/versions/3": (404, json.dumps(
        {"message": "No version '3' found for artifact with ID 'orders-value' in group 'null'.",
         "error_code": 40402})),
    f"{URL}/schemas/ids/4": (200, json.dumps(
        {"schema": '{"$schema":"http://json-schema.org/draft-07/schema#","type":"object"}', "schemaType": "JSON",
         "references": []})),
    f"{URL}/schemas/ids/999": (404, json.dumps(
        {"message": "No content with id/hash 'contentId-999' was found.", "error_code": 40403})),
    f"{URL}/schemas/ids/1/versions": (200, json.dumps(
        [{"subject": "orders-value", "version": 1}, {"subject": "shop.Order", "version": 1}])),
    f"{URL}/schemas/ids/999/versions": (404, json.dumps(
        {"message": "No content with id/hash 'contentId-999' was found.", "error_code": 40403})),
    f"{URL}/subjects/shop.Order%2Fv1/versions/latest": (200, json.dumps(
        {"id": 7, "subject": "shop.Order/v1", "version": 2, "schema": ORDER})),
}  # fmt: skip


class Recorded:
    """A transport that answers from :data:`RECORDED` and remembers what was asked."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, dict[str, str]]] = []

    def __call__(self, url: str, headers: dict[str, str], timeout: float) -> tuple[int, bytes]:
        self.asked.append((url, headers))
        status, body = RECORDED.get(url, (500, '{"message": "not recorded"}'))
        return status, body.encode()


def test_the_wire_format_round_trips_and_anything_else_is_refused_naming_its_bytes():
    assert frame(258, b"payload") == b"\x00\x00\x00\x01\x02payload"
    assert unframe(frame(258, b"payload")) == (258, b"payload")
    with pytest.raises(ValueError, match="got 4 bytes starting with 01020304"):
        unframe(b"\x01\x02\x03\x04")
    with pytest.raises(ValueError, match="starting with nothing"):
        unframe(b"")


@pytest.mark.parametrize(("strategy", "record", "subject"), [
    ("topic_name", None, "orders-value"),
    ("record_name", "shop.Order", "shop.Order"),
    ("topic_record_name", "shop.Order", "orders-shop.Order"),
])  # fmt: skip
def test_subjects_are_named_as_confluents_serializers_name_them(strategy, record, subject):
    assert subject_name(strategy, "orders", record) == subject


def test_record_strategies_need_the_record_name():
    with pytest.raises(ValueError, match="needs the record's full name"):
        subject_name("record_name", "orders", None)


def test_a_subject_version_is_read_with_basic_auth_and_its_id_kept():
    transport = Recorded()
    client = RegistryClient(URL + "/", username="reader", password="s3cret", transport=transport)
    found = client.subject_version("orders-value")
    assert (found.id, found.version, found.schema, found.schema_type) == (1, 1, ORDER, "AVRO")
    assert found.to_json() == {"subject": "orders-value", "version": 1, "id": 1, "type": "AVRO"}
    url, headers = transport.asked[0]
    assert url == f"{URL}/subjects/orders-value/versions/latest"
    assert headers["Authorization"] == "Basic " + base64.b64encode(b"reader:s3cret").decode()
    assert client.schema_by_id(1).schema == ORDER and len(transport.asked) == 1  # known from the version read


def test_a_subject_with_a_slash_is_quoted_in_the_path():
    found = RegistryClient(URL, transport=Recorded()).subject_version("shop.Order/v1")
    assert (found.id, found.version) == (7, 2)


def test_schemas_by_id_carry_their_type_and_are_asked_once():
    transport = Recorded()
    client = RegistryClient(URL, transport=transport)
    assert client.schema_by_id(4).schema_type == "JSON"
    assert client.schema_by_id(4).schema_type == "JSON"
    assert len(transport.asked) == 1
    assert "Authorization" not in transport.asked[0][1]


def test_an_unknown_id_or_version_is_not_found_with_the_registrys_own_words():
    client = RegistryClient(URL, transport=Recorded())
    with pytest.raises(SchemaRegistryError) as err:
        client.schema_by_id(999)
    assert is_not_found(err.value) and err.value.error_code == 40403
    assert str(err.value) == (f"schema registry {URL}: cannot read schema id 999: HTTP 404, error 40403: "
                              "No content with id/hash 'contentId-999' was found.")  # fmt: skip
    with pytest.raises(SchemaRegistryError, match="subject 'orders-value' version 3: HTTP 404, error 40402"):
        client.subject_version("orders-value", 3)


def test_refused_credentials_and_an_unreachable_registry_say_what_to_check():
    def unauthorized(url, headers, timeout):
        return 401, b'{"message": "Unauthorized", "error_code": 401}'

    with pytest.raises(SchemaRegistryError, match="HTTP 401, error 401: Unauthorized; check the connection's login"):
        RegistryClient(URL, transport=unauthorized).schema_by_id(1)

    def refused(url, headers, timeout):
        raise ConnectionRefusedError(111, "Connection refused")

    with pytest.raises(SchemaRegistryError) as err:
        RegistryClient(URL, transport=refused).schema_by_id(1)
    assert not is_not_found(err.value)
    assert f"cannot read schema id 1 ({URL}/schemas/ids/1)" in str(err.value) and "that it is running" in str(err.value)
    with pytest.raises(SchemaRegistryError, match="expected http:// or https://"):
        RegistryClient("registry:8081")


def _conn(**fields):
    base = {"host": None, "port": None, "schema": None, "login": None, "password": None, "extra_dejson": {}}
    return lambda conn_id: SimpleNamespace(**{**base, **fields})


@pytest.mark.parametrize(("fields", "expected"), [
    ({"host": "registry", "port": 8081}, {"url": "http://registry:8081"}),
    ({"host": "registry", "port": 443, "schema": "https"}, {"url": "https://registry:443"}),
    ({"host": "https://registry.example"}, {"url": "https://registry.example"}),
    ({"extra_dejson": {"url": URL}, "host": "ignored"}, {"url": URL}),
    ({"host": "r", "port": 1, "login": "u", "password": "p"}, {"url": "http://r:1", "username": "u", "password": "p"}),
])  # fmt: skip
def test_a_registry_connection_gives_the_url_and_credentials(fields, expected):
    assert connections.registry_settings("sr", get_connection=_conn(**fields)) == expected


def test_a_registry_connection_without_an_address_is_refused_naming_it():
    with pytest.raises(connections.ConnectionConfigError, match="Airflow connection 'sr': expected the schema"):
        connections.registry_settings("sr", get_connection=_conn())


def _proto_registry(answers: dict[str, dict]) -> tuple[RegistryClient, list[str]]:
    """A client on recorded Protobuf answers (Apicurio's shape: schema, schemaType, references), by path."""
    return recorded_registry(URL, {URL + path: (200, body) for path, body in answers.items()})


def _proto(text: str, *refs: tuple[str, str, int], **more) -> dict:
    return {"schema": text, "schemaType": "PROTOBUF", "references": [
        {"name": n, "subject": s, "version": v} for n, s, v in refs], **more}  # fmt: skip


def test_a_protobuf_schemas_imports_are_read_through_its_references_each_once():
    client, asked = _proto_registry({
        "/schemas/ids/9": _proto("orders", ("shop/common.proto", "common", 1), ("shop/money.proto", "money", 2)),
        "/schemas/ids/10": _proto("orders v2", ("shop/common.proto", "common", 1)),
        "/subjects/common/versions/1": _proto("common", ("shop/money.proto", "money", 2), id=3, version=1),
        "/subjects/money/versions/2": _proto("money", id=4, version=2),
    })  # fmt: skip
    schema = client.schema_by_id(9)
    assert [(r.name, r.subject, r.version) for r in schema.references] == [
        ("shop/common.proto", "common", 1), ("shop/money.proto", "money", 2)]  # fmt: skip
    assert referenced_texts(client, schema) == {"shop/common.proto": "common", "shop/money.proto": "money"}
    assert asked.count(f"{URL}/subjects/money/versions/2") == 1  # imported twice, read once
    # another writer schema of the run with the same imports: they are not read again
    assert referenced_texts(client, client.schema_by_id(10)) == {"shop/common.proto": "common",
                                                                 "shop/money.proto": "money"}  # fmt: skip
    assert [u for u in asked if "/subjects/" in u] == [f"{URL}/subjects/common/versions/1",
                                                       f"{URL}/subjects/money/versions/2"]  # fmt: skip


def test_references_that_nest_too_deep_or_disagree_are_refused_naming_them():
    chain = {"/schemas/ids/1": _proto("root", ("f0.proto", "s0", 1))}
    chain.update({f"/subjects/s{i}/versions/1": _proto(f"f{i}", (f"f{i + 1}.proto", f"s{i + 1}", 1), id=10 + i,
                                                        version=1) for i in range(20)})  # fmt: skip
    deep, _ = _proto_registry(chain)
    with pytest.raises(SchemaRegistryError, match=r"references nest more than 16 deep: schema id 1 -> "
                                                  r"f0.proto -> f1.proto -> .* -> f15.proto$"):  # fmt: skip
        referenced_texts(deep, deep.schema_by_id(1))
    clash, _ = _proto_registry({
        "/schemas/ids/1": _proto("a", ("x.proto", "x", 1), ("y.proto", "y", 1)),
        "/subjects/x/versions/1": _proto("x", id=2, version=1),
        "/subjects/y/versions/1": _proto("y", ("x.proto", "x", 2), id=3, version=1),
    })  # fmt: skip
    with pytest.raises(SchemaRegistryError, match="import 'x.proto' is subject 'x' version 1 in one reference and "
                                                  "subject 'x' version 2 in another"):  # fmt: skip
        referenced_texts(clash, clash.schema_by_id(1))


def test_references_without_a_subject_are_refused_naming_the_schema():
    client, _ = _proto_registry({"/schemas/ids/5": {"schema": "a", "schemaType": "PROTOBUF", "references": [{"name": "x"}]}})
    with pytest.raises(SchemaRegistryError, match=r"schema id 5: expected references as name, subject and version"):
        client.schema_by_id(5)


def test_a_redirect_to_another_host_or_to_plain_http_is_refused_and_credentials_in_the_url_never_shown():
    import http.server
    import threading

    from include.readers.schema_registry import RegistryClient, SchemaRegistryError, shown_url

    seen: list[str | None] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the stdlib's name
            seen.append(self.headers.get("Authorization"))
            if self.path.startswith("/same"):
                self.send_response(302)
                self.send_header("Location", "/apis/ok/schemas/ids/1")
            elif self.path.startswith("/apis/ok"):
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b'{"schema": "\\"string\\""}')
                return
            else:  # to another host: 127.0.0.2 answers the same server, but it is another origin
                self.send_response(302)
                self.send_header("Location", f"http://127.0.0.2:{self.server.server_port}/apis/ok/schemas/ids/1")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = f"http://user:s3cret@127.0.0.1:{server.server_port}"
        same = RegistryClient(f"{base}/same")
        assert same.schema_by_id(1).schema == '"string"'  # a redirect on the same origin is followed
        other = RegistryClient(f"{base}/away")
        with pytest.raises(SchemaRegistryError, match="refused the registry's redirect .302. from http://127.0.0.1 "
                                                      "to http://127.0.0.2") as refused:  # fmt: skip
            other.schema_by_id(1)
        assert "s3cret" not in str(refused.value)
        assert len(seen) == 3, "the other host never got the request, nor its credentials"
        assert seen[0] is not None and seen[0].startswith("Basic ")  # credentials in the URL are the login
    finally:
        server.shutdown()
    assert shown_url("https://a:b@registry:8081/x") == "https://***@registry:8081/x"
    assert shown_url("https://registry/x") == "https://registry/x"


def test_the_subjects_of_a_schema_id_are_listed_and_an_unknown_id_is_not_found():
    client = RegistryClient(URL, transport=Recorded())
    assert client.subjects_of(1) == ("orders-value", "shop.Order")
    with pytest.raises(SchemaRegistryError) as err:
        client.subjects_of(999)
    assert is_not_found(err.value)
    assert "cannot read the subjects of schema id 999: HTTP 404, error 40403" in str(err.value)
