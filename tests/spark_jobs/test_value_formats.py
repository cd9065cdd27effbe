"""The run's value schemas on recorded registry answers: reader schema, writer ids, what fails the run.

``json_schema`` pipelines need no JVM here (Avro's schema checks run in the
driver's JVM and are covered by tests/integration/test_value_formats.py), so
these run without Spark. The answers are Apicurio Registry 2.4.2.Final's.
"""

from __future__ import annotations

import json

import pytest

from include.contract.errors import ValueSchemaError
from include.contract.transform_spec import FieldSpec, TransformSpec, ValueSchema
from include.readers.schema_registry import RegistryClient
from spark_jobs.formats.schemas import ValueSchemas, read_registry_file
from tests.fakes import recorded_registry

URL = "http://registry:8080/apis/ccompat/v7"
JSON_SCHEMA = '{"$schema":"http://json-schema.org/draft-07/schema#","type":"object"}'
ANSWERS = {
    f"{URL}/subjects/orders-value/versions/latest": (200, {"id": 4, "subject": "orders-value", "version": 2,
                                                           "schema": JSON_SCHEMA, "schemaType": "JSON"}),
    f"{URL}/subjects/avro-value/versions/latest": (200, {"id": 1, "subject": "avro-value", "version": 1,
                                                         "schema": '{"type":"string"}'}),
    f"{URL}/schemas/ids/5": (200, {"schema": JSON_SCHEMA, "schemaType": "JSON"}),
    f"{URL}/schemas/ids/6": (200, {"schema": '{"type":"string"}'}),
    f"{URL}/schemas/ids/999": (404, {"message": "No content with id/hash 'contentId-999' was found.",
                                     "error_code": 40403}),
    f"{URL}/schemas/ids/500": (500, {"message": "database unavailable", "error_code": 50001}),
}  # fmt: skip


def _client() -> RegistryClient:
    return recorded_registry(URL, ANSWERS)[0]


def _spec(subject: str = "orders-value", version: int | None = None) -> TransformSpec:
    return TransformSpec(fields=(FieldSpec("id", "string", required=True), FieldSpec("ts", "timestamp")),
                         key=("id",), ordering="ts", format="json_schema",
                         value_schema=ValueSchema(registry="sr", subject=subject, version=version))  # fmt: skip


def test_the_reader_schema_is_the_subjects_latest_and_is_what_commits_record():
    values = ValueSchemas(None, _spec(), client=_client())
    assert values.recorded() == {"subject": "orders-value", "version": 2, "id": 4, "type": "JSON"}
    assert values.source == f"schema registry {URL}"


def test_writer_ids_are_looked_up_once_each_and_unknown_or_foreign_ones_carry_their_problem():
    values = ValueSchemas(None, _spec(), client=_client())
    assert values._writer(5).problem is None and values._writer(5).schema == JSON_SCHEMA
    assert values._writer(999).problem == f"unknown to schema registry {URL} (it answered HTTP 404)"
    assert values._writer(6).problem == (f"a schema of type AVRO in schema registry {URL}; transform.format json_schema "
                                         "reads JSON values")  # fmt: skip


def test_a_registry_failing_on_a_writer_id_fails_the_batch_rather_than_quarantining_its_records():
    values = ValueSchemas(None, _spec(), client=_client())
    with pytest.raises(ValueSchemaError, match="cannot look up writer schema id 500: .*HTTP 500, error 50001: "
                                               "database unavailable"):  # fmt: skip
        values._writer(500)


@pytest.mark.parametrize(("spec", "message"), [
    (_spec("missing-value"), "cannot read the reader schema of subject 'missing-value' (latest): "
                             f"schema registry {URL}: cannot read subject 'missing-value' version latest: HTTP 404"),
    (_spec("orders-value", 7), "subject 'orders-value' (version 7)"),
    (_spec("avro-value"), "subject 'avro-value' version 1 is a schema of type AVRO; transform.format json_schema needs JSON"),
])  # fmt: skip
def test_a_reader_schema_that_cannot_be_had_stops_the_run_naming_subject_and_version(spec, message):
    with pytest.raises(ValueSchemaError) as err:
        ValueSchemas(None, spec, client=_client())
    assert message in str(err.value), str(err.value)


def test_the_registry_file_must_hold_a_url(tmp_path):
    with pytest.raises(ValueSchemaError, match="got no --registry-file"):
        read_registry_file(None)
    path = tmp_path / "r.json"
    path.write_text('{"username": "u"}')
    with pytest.raises(ValueSchemaError, match="expected a JSON object with 'url'"):
        read_registry_file(str(path))
    path.write_text(json.dumps({"url": URL, "username": "u", "password": "p"}))
    assert read_registry_file(str(path)) == {"url": URL, "username": "u", "password": "p"}


def test_the_schema_id_cap_keeps_known_ids_then_the_ones_most_records_carry():
    from spark_jobs.formats.schemas import chosen_ids

    # A producer wrote 20 values framed with made-up ids 0..19; the batch's 500 real records carry id 41.
    counts = {**{i: 1 for i in range(20)}, 41: 500, 42: 3}
    assert chosen_ids(counts, known=set(), cap=20) == sorted([41, 42, *range(18)])
    assert 41 in chosen_ids(counts, known=set(), cap=1)
    # an id the run already looked up (or the reader's) is kept even when few records carry it
    assert chosen_ids({**counts, 7: 1}, known={42}, cap=2) == [41, 42]


@pytest.mark.integration
def test_made_up_schema_ids_do_not_push_a_batchs_real_records_past_the_cap(spark):
    import dataclasses

    from include.readers.schema_registry import frame
    from tests.spark_jobs.helpers import bronze

    # Values a producer framed with made-up ids 0..3 and 50 real ones under id 5, with a cap of 3: taking the
    # lowest ids, as the cap did, put every real record in quarantine.
    spec = dataclasses.replace(_spec(), limits=dataclasses.replace(_spec().limits, schema_ids=3))
    values = ValueSchemas(spark, spec, client=_client())
    rows = [(b"k", frame(i, b"{}")) for i in range(4)] + [(b"k", frame(5, b'{"id": "a"}')) for _ in range(50)]
    plan = values.plan(bronze(spark, rows))
    assert 5 in [w.id for w in plan.writers] and len(plan.writers) == 3
    assert plan.id_cap == 3  # two made-up ids go to quarantine under the cap's reason; the real ones decode


def test_every_format_of_the_contract_has_a_runtime_module_and_the_same_rules():
    # A fifth format is its entry in include/contract/value_formats.py and its module under spark_jobs/formats/,
    # one registry line each: the two registries name the same formats, and each module carries its entry.
    from include.contract.value_formats import VALUE_FORMATS
    from spark_jobs.formats.registry import FORMATS, value_format

    assert list(FORMATS) == list(VALUE_FORMATS)
    assert all(value_format(name).rules is VALUE_FORMATS[name] for name in FORMATS)
    assert all(VALUE_FORMATS[name].registry_type for name in VALUE_FORMATS if not VALUE_FORMATS[name].schema_file
               and VALUE_FORMATS[name].needs_schema), "a registry-only format needs the registry's schema type"  # fmt: skip
