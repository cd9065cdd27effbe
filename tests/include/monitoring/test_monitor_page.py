"""The monitoring pages and charts, rendered from hand-made snapshots."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import quote

import pytest

from include import settings
from include.monitoring import monitor, monitor_charts, monitor_format, monitor_page
from include.monitoring.monitor_charts import lag_chart_svg, rows_chart_svg
from include.monitoring.monitor_format import TEMPLATE_DIR, humanize_seconds
from include.monitoring.monitor_page import REFRESH_S, render_error, render_overview, render_pipeline
from tests.include.monitoring.snapshots import CHECKED, run, snapshot

BASE = "/kde-monitor"
EVIL = "<script>alert(1)</script>"


_BLOCKS = {"div", "p", "li", "ul", "br", "details", "summary", "td", "th", "tr", "h1", "h2", "header", "nav",
           "section", "figure", "figcaption", "dt", "dd", "svg", "text"}  # fmt: skip


class _Doc(HTMLParser):
    """Visible text (no attributes, no <title>/<style>), anchors, partition rows and td cells."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.text: list[str] = []
        self.anchors: list[dict] = []
        self.rows: list[dict] = []  # partition rows: attrs + {data-field: text}
        self.cells: dict[str, list[str]] = {}  # overview cells by data-col
        self._skip = 0
        self._field: str | None = None
        self._col: str | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag in _BLOCKS:  # a browser shows these on their own line
            self.handle_data(" ")
        if tag in ("style", "title"):
            self._skip += 1
        elif tag == "a":
            self.anchors.append(attrs)
        elif tag == "tr" and "data-partition" in attrs and "data-topic" in attrs:
            self.rows.append({"attrs": attrs, "cells": {}})
        elif tag == "td" and "data-field" in attrs and self.rows:
            self._field = attrs["data-field"]
            self.rows[-1]["cells"][self._field] = ""
        if tag == "td" and "data-col" in attrs:
            self._col = attrs["data-col"]
            self.cells.setdefault(self._col, []).append("")

    def handle_endtag(self, tag):
        if tag in ("style", "title"):
            self._skip -= 1
        elif tag == "td":
            if self._field:
                cells = self.rows[-1]["cells"]
                cells[self._field] = " ".join(cells[self._field].split())
            if self._col:
                self.cells[self._col][-1] = " ".join(self.cells[self._col][-1].split())
            self._field = self._col = None

    def handle_data(self, data):
        if self._skip:
            return
        self.text.append(data)
        if self._field:
            self.rows[-1]["cells"][self._field] += data
        if self._col:
            self.cells[self._col][-1] += data

    @property
    def visible(self) -> str:
        return " ".join("".join(self.text).split())


def parse(page: str) -> _Doc:
    doc = _Doc()
    doc.feed(page)
    doc.close()
    return doc


# --------------------------------------------------------------------------- escaping


def test_script_in_a_reason_is_escaped_on_both_pages():
    snap = snapshot(health={"state": "failing", "reasons": [EVIL]})
    for page in (render_overview([snap], base=BASE, checked_at=CHECKED), render_pipeline(snap, base=BASE)):
        assert "<script" not in page
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
        assert EVIL in parse(page).visible  # shown to the operator as text


def test_pipeline_name_with_quote_is_escaped_in_text_attributes_and_urls():
    name = 'evil"name <b>'
    snap = snapshot(pipeline=name, dag_id=name)
    overview = render_overview([snap], base=BASE, checked_at=CHECKED)
    assert 'evil"name' not in overview and "<b>" not in overview
    assert 'data-pipeline="evil&#34;name &lt;b&gt;"' in overview
    assert 'href="/kde-monitor/pipelines/evil%22name%20%3Cb%3E"' in overview
    assert 'href="/kde-monitor/api/pipelines/evil%22name%20%3Cb%3E"' in overview
    assert name in parse(overview).visible
    page = render_pipeline(snap, base=BASE)
    assert 'evil"name' not in page and "<b>" not in page
    assert "<h1>evil&#34;name &lt;b&gt; " in page


def test_every_user_string_is_escaped():
    bad = '<img src=x onerror="alert(1)">'
    last = run(run_id=f"manual__{bad}", reason=bad, requested_by=bad, request_reason=bad, run_type="manual",
               action=bad, ranges=[{"topic": bad, "partition": 0, "from": 1, "until": 2, "rows": 1}])  # fmt: skip
    snap = snapshot(
        description=bad, schedule=bad, health={"state": "warning", "reasons": [bad]},
        kafka={"ok": False, "error": bad}, table={"ok": False, "error": bad, "exists": True, "version": 1, "epoch": 1},
        ledger={"ok": False, "error": bad},
        source={"connection_id": bad, "bootstrap_servers": bad, "topics": [bad], "topic_pattern": None},
        tables={"bronze": bad, "silver": bad, "ledger": bad},
        partitions=[{"topic": bad, "partition": 0, "earliest": 0, "latest": 1, "next_offset": 1, "lag": 0,
                     "lost_now": 0, "last_ingested_at": bad, "oldest_pending_at": None, "group_offset": None}],
        last_run=last, runs=[last],
        gaps=[{"run_id": bad, "finished_at": bad, "topic": bad, "partition": 0, "from": 1, "until": 2,
               "lost": 1, "reason": bad}],
        manual_actions=[{"run_id": bad, "finished_at": bad, "run_type": bad, "action": bad,
                         "requested_by": bad, "reason": bad, "outcome": bad}],
    )  # fmt: skip
    pages = [
        render_overview([snap], base=BASE, checked_at=CHECKED),
        render_pipeline(snap, base=BASE),
        render_error(bad, bad, base=BASE, status_hint=bad),
    ]
    for page in pages:
        assert "<img" not in page
        assert 'onerror="' not in page
    # the pipeline page shows every one of these strings, escaped
    assert pages[1].count("&lt;img src=x onerror=&#34;alert(1)&#34;&gt;") >= 20


def test_javascript_links_from_a_snapshot_do_not_become_hrefs():
    snap = snapshot(links={"dag": "javascript:alert(1)", "last_run": "//evil.example/x"},
                    last_run=run(link="javascript:alert(2)"), runs=[run(link="/\\evil.example")])  # fmt: skip
    for page in (render_overview([snap], base=BASE, checked_at=CHECKED), render_pipeline(snap, base=BASE)):
        hrefs = [a.get("href", "") for a in parse(page).anchors]
        assert hrefs and not [h for h in hrefs if "javascript" in h or "evil" in h]


# Names as the page's users could choose them: each one closes a cell, opens a script, ends an
# attribute with either quote, holds a bare and an already escaped "&", and has slashes for URLs.
NAMES = {"pipeline": "PIPELINE", "topic": "TOPIC", "table": "/TABLE", "run": "RUN"}
HOSTILE = {what: f"""{name}&amp;&"'</td><script>alert(1)</script>""" for what, name in NAMES.items()}


def named_snapshot(names: dict[str, str]) -> dict:
    """A snapshot in which the pipeline, topic, table and run names appear everywhere the page shows them."""
    pipeline, topic, table, run_id = names["pipeline"], names["topic"], names["table"], names["run"]
    last = run(run_id=run_id, link=monitor.run_link(pipeline, run_id), run_type="manual", action="backfill_offsets",
               ranges=[{"topic": topic, "partition": 0, "from": 100, "until": 1600, "rows": 1500}])  # fmt: skip
    part = {"topic": topic, "partition": 0, "earliest": 0, "latest": 20, "next_offset": 5, "lag": 15, "lost_now": 3,
            "last_ingested_at": "2024-05-01T12:01:00+00:00", "oldest_pending_at": None, "group_offset": 5}  # fmt: skip
    return snapshot(
        pipeline=pipeline, dag_id=pipeline,
        source={"connection_id": "kafka_default", "bootstrap_servers": "127.0.0.1:9092", "topics": [topic],
                "topic_pattern": None},
        tables={"bronze": f"{table}/bronze", "silver": f"{table}/silver", "ledger": f"{table}/_runs"},
        partitions=[part], open_gaps=[{"topic": topic, "partition": 0, "from": 5, "until": 8, "records": 3}],
        last_run=last, runs=[last],
        gaps=[{"run_id": run_id, "finished_at": CHECKED, "topic": topic, "partition": 0, "from": 1, "until": 2,
               "lost": 1, "reason": "retention"}],
        manual_actions=[{"run_id": run_id, "finished_at": CHECKED, "run_type": "manual", "action": "backfill_offsets",
                         "requested_by": "ana", "reason": "replay", "outcome": "success"}],
        links={"dag": monitor.dag_link(pipeline), "last_run": last["link"]},
    )  # fmt: skip


class _Events(HTMLParser):
    """The document as a browser builds it: tags with their attributes, end tags and text, entities decoded."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.events: list[tuple] = []

    def handle_starttag(self, tag, attrs):
        self.events.append(("start", tag, attrs))

    def handle_startendtag(self, tag, attrs):
        self.events.append(("start", tag, attrs))
        self.events.append(("end", tag))

    def handle_endtag(self, tag):
        self.events.append(("end", tag))

    def handle_data(self, data):
        self.events.append(("text", data))


def events(page: str, rename: dict[str, str]) -> list[tuple]:
    """``page``'s document with each name in ``rename`` (as text and as a URL path segment) renamed."""
    pairs = [(old, new) for old, new in rename.items()]
    pairs += [(quote(old, safe=""), quote(new, safe="")) for old, new in rename.items()]

    def renamed(text: str | None) -> str | None:
        for old, new in pairs:
            text = text.replace(old, new) if text else text
        return text

    parser = _Events()
    parser.feed(page)
    parser.close()
    return [
        (kind, tag, [(k, renamed(v)) for k, v in rest[0]]) if kind == "start" else (kind, renamed(tag))
        for kind, tag, *rest in parser.events
    ]


def pages_of(names: dict[str, str]) -> dict[str, str]:
    snap = named_snapshot(names)
    return {
        "overview": render_overview([snap], base=BASE, checked_at=CHECKED,
                                    invalid_files={f"{names['table']}/p.yaml": f"topic {names['topic']}: bad"}),
        "pipeline": render_pipeline(snap, base=BASE),
        "error": render_error(f"Unknown {names['pipeline']}", f"no pipeline named '{names['pipeline']}'",
                              base=BASE, status_hint=names["run"]),
    }  # fmt: skip


@pytest.mark.parametrize("page", ["overview", "pipeline", "error"])
def test_hostile_names_are_escaped_everywhere_they_appear(page):
    plain, hostile = pages_of(NAMES)[page], pages_of(HOSTILE)[page]
    # The same document, tag for tag and attribute for attribute, as with plain names: each hostile
    # name is, once the browser has decoded it, exactly the text, attribute or URL segment where the
    # plain one was. Nothing broke out of a cell, an attribute or a path segment.
    assert events(hostile, {HOSTILE[w]: NAMES[w] for w in NAMES}) == events(plain, {})
    assert "<script" not in hostile and "</td><script" not in hostile
    # Every "&" in the page starts an entity, so none of the names' ampersands was left bare.
    assert re.search(r"&(?!amp;|lt;|gt;|#34;|#39;)", hostile) is None
    for what, name in NAMES.items():
        escaped = HOSTILE[what].replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        escaped = escaped.replace('"', "&#34;").replace("'", "&#39;")
        # Wherever the plain name was written (text, attributes, or inside a URL), the escaped one is.
        assert hostile.count(escaped) + hostile.count(quote(HOSTILE[what], safe="")) == plain.count(name), what


def test_hostile_names_in_urls_are_one_path_segment():
    overview, pipeline = pages_of(HOSTILE)["overview"], pages_of(HOSTILE)["pipeline"]
    segment = quote(HOSTILE["pipeline"], safe="")
    assert "%2F" in segment and "/" not in segment  # "</td>" cannot add a path segment
    assert f'href="/kde-monitor/pipelines/{segment}"' in overview
    assert f'href="/kde-monitor/api/pipelines/{segment}"' in overview
    assert f'href="/kde-monitor/api/pipelines/{segment}"' in pipeline
    assert f'href="/dags/{segment}" target="_top"' in pipeline
    assert f'href="/dags/{segment}/runs/{quote(HOSTILE["run"], safe="")}" target="_top"' in pipeline


def test_templates_and_renderer_never_mark_text_safe():
    """Autoescape is the only escaping: no template or view switches it off or vouches for a string."""
    for path in TEMPLATE_DIR.iterdir():
        source = path.read_text()
        assert not re.search(r"\|\s*safe\b|autoescape\s+false|Markup", source), path.name
    for module in (monitor_page, monitor_charts, monitor_format):
        source = Path(module.__file__).read_text()
        assert "Markup" not in source and "html.escape" not in source and "import html" not in source


# --------------------------------------------------------------------------- unknown values


def test_none_values_render_as_em_dash_never_none():
    nothing = run(run_id="r1", outcome=None, duration_s=None, rows=None, lag_before=None, lag_after=None,
                  continuity=None, quarantined=None, started_at=None, finished_at=None, link=None,
                  ranges=[{"topic": "t", "partition": 0, "from": None, "until": None, "rows": 0}])  # fmt: skip
    snap = snapshot(
        description=None, schedule="@daily", next_run_at=None, paused=None, elapsed_s=None,
        source={"connection_id": None, "bootstrap_servers": None, "topics": [], "topic_pattern": None},
        table={"ok": True, "error": None, "exists": True, "version": None, "epoch": None},
        lag={"records": None, "oldest_pending_at": None, "oldest_pending_age_s": None, "partitions_behind": None},
        partitions=[{"topic": "t", "partition": 0, "earliest": None, "latest": None, "next_offset": None,
                     "lag": None, "lost_now": None, "last_ingested_at": None, "oldest_pending_at": None,
                     "group_offset": None}],
        open_gaps=None, last_run=nothing, runs=[nothing], links={"dag": None, "last_run": None},
    )  # fmt: skip
    overview = render_overview([snap], base=BASE, checked_at=CHECKED)
    page = render_pipeline(snap, base=BASE)
    for html in (overview, page):
        assert "None" not in html
        assert "null" not in html
    cells = parse(overview).cells
    assert [cells[c][0] for c in ("lag", "continuity", "open_gaps", "quarantined")] == ["—"] * 4
    assert cells["next_run"][0].startswith("—")
    (row,) = parse(page).rows
    assert {k: v for k, v in row["cells"].items() if k not in ("topic", "partition")} == {
        "earliest": "—", "latest": "—", "next_offset": "—", "lag": "—",
        "last_ingested_at": "—", "oldest_pending_at": "—", "retention_left_s": "—", "group_offset": "—",
    }  # fmt: skip
    assert "t[0] —–— (0)" in parse(page).visible


def test_kafka_unreachable_row_shows_the_error_as_text_and_no_lag():
    error = "broker unreachable: no answer from 127.0.0.1:9092 within 5s"
    snap = snapshot(kafka={"ok": False, "error": error},
                    health={"state": "failing", "reasons": ["Kafka unreachable", "DAG paused"]},
                    open_gaps=[], lag={"records": 99, "oldest_pending_at": None, "oldest_pending_age_s": 5.0,
                                       "partitions_behind": 1})  # fmt: skip
    # Neither has a time left before retention (one unknown, one unbounded): they keep the order given.
    other = snapshot(pipeline="other", lag={**snapshot()["lag"], "retention_left_s": None})
    doc = parse(render_overview([snap, other], base=BASE, checked_at=CHECKED))
    # the reason that says what the alert says is not repeated; the error is text, not a tooltip
    assert doc.cells["pipeline"][0] == f"demo_orders failing DAG paused Kafka unreachable {error}"
    assert "Kafka unreachable" not in doc.cells["pipeline"][1]
    assert doc.cells["lag"] == ["—", "1,234 records oldest pending 3m 12s 1 partition behind"]
    assert doc.cells["open_gaps"] == ["—", "none"]
    page = render_pipeline(snap, base=BASE)
    kafka_box = re.search(r'<section class="box down" data-box="kafka">.*?</section>', page, re.DOTALL).group(0)
    assert f"Kafka unreachable {error}" in parse(kafka_box).visible
    assert "Unknown while Kafka is unreachable." in parse(page).visible
    # the table's own side of the partitions is still known
    assert [c["cells"]["next_offset"] for c in parse(page).rows] == ["1600", "1233333"]


def test_unreadable_run_history_is_not_called_empty():
    snap = snapshot(ledger={"ok": False, "error": "no such table"}, last_run=None, runs=[])
    page = parse(render_pipeline(snap, base=BASE)).visible
    assert "Run ledger unreadable no such table" in page
    assert "No runs recorded yet." not in page
    assert parse(render_overview([snap], base=BASE, checked_at=CHECKED)).cells["last_run"] == ["—"]
    fresh = snapshot(last_run=None, runs=[])
    assert "No runs recorded yet." in parse(render_pipeline(fresh, base=BASE)).visible
    assert parse(render_overview([fresh], base=BASE, checked_at=CHECKED)).cells["last_run"] == ["no runs yet"]


# --------------------------------------------------------------------------- overview


def test_overview_row_contents_and_header():
    gaps = [{"topic": "demo.orders", "partition": 0, "from": 0, "until": 5, "records": 5},
            {"topic": "demo.orders", "partition": 2, "from": 0, "until": 10, "records": 10}]  # fmt: skip
    snap = snapshot(
        open_gaps=gaps, last_run=run(quarantined=3), health={"state": "warning", "reasons": ["slow"]}
    )
    page = render_overview([snap], base=BASE, checked_at=CHECKED)
    doc = parse(page)
    assert "<title>Kafka → Delta pipelines</title>" in page
    assert "<h1>Kafka → Delta pipelines</h1>" in page
    assert "checked at 2024-05-01 12:10:00 UTC" in doc.visible
    assert {"href": "/kde-monitor/api/pipelines"} in doc.anchors
    assert doc.cells["pipeline"] == ["demo_orders warning slow"]
    assert 'class="badge st-warning" title="slow"' in page
    assert doc.cells["last_run"] == ["2024-05-01 12:01:30 success 1,500 rows · 8m 30s ago"]
    assert doc.cells["continuity"] == ["CONTINUOUS"]
    assert doc.cells["open_gaps"] == ["2 gaps · 15 records lost"]
    assert doc.cells["quarantined"] == ["3"]
    assert doc.cells["next_run"] == ["2024-05-01 12:20:00 in 10m */10 * * * *"]
    assert doc.cells["links"] == ["DAG · JSON"]
    assert 'class="row-warning"' in page


@pytest.mark.parametrize(
    ("over", "expected"),
    [
        ({"paused": True}, "paused */10 * * * *"),
        ({"schedule": None, "next_run_at": None}, "manual only"),
    ],
)
def test_next_run_paused_or_manual(over, expected):
    doc = parse(render_overview([snapshot(**over)], base=BASE, checked_at=CHECKED))
    assert doc.cells["next_run"] == [expected]


def test_invalid_pipeline_files_are_listed():
    page = render_overview([snapshot()], base=BASE, checked_at=CHECKED,
                           invalid_files={"/p/bad<1>.yaml": "topics: required"})  # fmt: skip
    assert "1 pipeline file was not loaded /p/bad<1>.yaml: topics: required" in parse(page).visible
    assert "<1>" not in page
    assert render_overview([], base=BASE, checked_at=CHECKED, invalid_files={}).count("not loaded") == 0


def test_no_pipelines():
    assert "No pipelines configured." in render_overview([], base=BASE, checked_at=CHECKED)


def test_links_into_airflow_target_top_and_plugin_links_stay():
    for page in (
        render_overview([snapshot()], base=BASE, checked_at=CHECKED),
        render_pipeline(snapshot(), base=BASE),
    ):
        anchors = parse(page).anchors
        airflow = [a for a in anchors if a["href"].startswith("/dags/")]
        assert airflow and all(a.get("target") == "_top" for a in airflow)
        own = [a for a in anchors if a["href"].startswith(BASE)]
        assert own and all("target" not in a for a in own)
    page = render_pipeline(snapshot(), base=BASE + "/")
    hrefs = {a["href"] for a in parse(page).anchors}
    assert {"/kde-monitor/", "/kde-monitor/api/pipelines/demo_orders", "/dags/demo_orders",
            "/dags/demo_orders/runs/scheduled__2024-05-01T12:00:00+00:00"} <= hrefs  # fmt: skip


# --------------------------------------------------------------------------- pipeline page


def test_partition_table_headers_attributes_and_plain_integers():
    page = render_pipeline(snapshot(), base=BASE)
    heads = re.search(r'<table class="partitions"><thead><tr>(.*?)</tr>', page).group(1)
    assert re.findall(r"<th[^>]*>(.*?)</th>", heads) == [
        "Topic", "Partition", "Kafka earliest", "Kafka latest", "Table next offset", "Lag",
        "Last ingested (Kafka time)", "Oldest pending", "Retention left", "Consumer group offset",
    ]  # fmt: skip
    rows = parse(page).rows
    assert [(r["attrs"]["data-topic"], r["attrs"]["data-partition"]) for r in rows] == [
        ("demo.orders", "0"), ("demo.orders", "1")]  # fmt: skip
    cells = rows[1]["cells"]
    assert {k: cells[k] for k in ("partition", "earliest", "latest", "next_offset", "lag", "group_offset")} == {
        "partition": "1", "earliest": "0", "latest": "1234567", "next_offset": "1233333", "lag": "1234",
        "group_offset": "1233000",
    }  # fmt: skip
    assert cells["last_ingested_at"] == "2024-05-01 12:01:00"
    assert cells["oldest_pending_at"] == "2024-05-01 12:06:48 3m 12s ago"
    assert cells["retention_left_s"] == "≥ 6d 23h"
    assert rows[0]["cells"]["group_offset"] == rows[0]["cells"]["retention_left_s"] == "—"


def test_partition_with_records_lost_now_is_marked_and_listed_as_open_gap():
    parts = [{"topic": "t", "partition": 3, "earliest": 50, "latest": 60, "next_offset": 40, "lag": 20,
              "lost_now": 10, "last_ingested_at": None, "oldest_pending_at": None, "group_offset": None}]  # fmt: skip
    gaps = [{"topic": "t", "partition": 3, "from": 40, "until": 50, "records": 10}]
    doc = parse(render_pipeline(snapshot(partitions=parts, open_gaps=gaps), base=BASE))
    (row,) = doc.rows  # the open-gaps table's rows are not mistaken for partition rows
    assert row["attrs"]["class"] == "lost"
    assert row["attrs"]["data-lost-now"] == "10"
    assert "Records deleted unread t 3 40 50 10 Lag, rows and retention" in doc.visible


def test_kafka_notes_and_partial_errors_are_shown():
    snap = snapshot(kafka={"ok": True, "error": None, "notes": ["consumer-group offsets skipped: out of time"]},
                    table={"ok": True, "error": "last ingested timestamps: OSError: gone", "exists": True,
                           "version": 3, "epoch": 1})  # fmt: skip
    text = parse(render_pipeline(snap, base=BASE)).visible
    assert "reachable consumer-group offsets skipped: out of time" in text
    assert "readable last ingested timestamps: OSError: gone" in text


def test_pipeline_page_sections():
    manual = run(run_id="manual__1", run_type="manual", action="backfill_offsets", requested_by="alice",
                 request_reason="replay after fix", outcome="failed", reason="broker timeout",
                 started_at="2024-05-01T11:00:00+00:00", finished_at="2024-05-01T11:00:05+00:00",
                 ranges=[{"topic": "demo.orders", "partition": p, "from": 0, "until": 10, "rows": 10}
                         for p in range(6)])  # fmt: skip
    snap = snapshot(
        runs=[run(), manual],
        gaps=[{"run_id": "manual__1", "finished_at": "2024-05-01T11:00:05+00:00", "topic": "demo.orders",
               "partition": 2, "from": 10, "until": 25, "lost": 15, "reason": "retention deleted them"}],
        manual_actions=[{"run_id": "manual__1", "finished_at": "2024-05-01T11:00:05+00:00", "run_type": "manual",
                         "action": "backfill_offsets", "requested_by": "alice", "reason": "replay after fix",
                         "outcome": "failed"}],
    )  # fmt: skip
    page = render_pipeline(snap, base=BASE)
    text = parse(page).visible
    assert "demo_orders ok" in text and "Orders from the shop" in text
    assert "demo.orders[0] 100–1600 (1,500)" in text
    assert "1,500 → 0" in text
    assert "manual · backfill_offsets manual__1 by alice: replay after fix" in text
    assert "failed broker timeout" in text
    assert "2 more" in text  # six ranges: four shown, two folded
    assert "demo.orders[2] 10–25 15 retention deleted them" in text
    assert "alice manual · backfill_offsets replay after fix failed" in text
    assert text.count("<figure>") == 0 and page.count("<figure>") == 3 and page.count("<figcaption>") == 3
    assert "127.0.0.1:9092" in text and "kafka_default" in text
    assert "<script" not in page and "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")


def test_empty_sections_say_so():
    page = parse(
        render_pipeline(snapshot(runs=[], last_run=None, gaps=[], manual_actions=[]), base=BASE)
    ).visible
    assert "No runs recorded yet." in page
    assert "No gaps recorded." in page
    assert "No manual actions recorded." in page
    assert page.count("No runs to plot yet.") == 3


def test_overview_and_pipeline_page_reload_themselves_without_a_script():
    assert REFRESH_S == 30
    for page in (render_overview([snapshot()], base=BASE, checked_at=CHECKED), render_overview([], base=BASE,
                 checked_at=CHECKED), render_pipeline(snapshot(), base=BASE)):  # fmt: skip
        head = page.split("</head>")[0]
        assert re.findall(r'<meta http-equiv="refresh" content="([^"]*)">', head) == ["30"]
        assert page.count('http-equiv="refresh"') == 1
        assert "<script" not in page
    # An error page would only ask again for the same unknown or forbidden pipeline.
    assert 'http-equiv="refresh"' not in render_error("Unknown pipeline", "x", base=BASE)


def test_error_page():
    page = render_error("Unknown pipeline", "No pipeline named 'x<y'.", base=BASE, status_hint="404")
    doc = parse(page)
    assert "Unknown pipeline No pipeline named 'x<y'. 404" in doc.visible
    assert "x&lt;y" in page
    assert {"href": "/kde-monitor/"} in doc.anchors


# --------------------------------------------------------------------------- templates as package data


def test_templates_are_found_when_imported_from_another_working_directory(tmp_path):
    code = ("from include.monitoring import monitor_charts as c, monitor_page as m\n"
            "print(m.render_pipeline({'pipeline': 'p'}, base='/x'), c.lag_chart_svg([]))")  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(settings.PROJECT_ROOT)}
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "<h1>p " in done.stdout and "No runs to plot yet." in done.stdout


def test_every_template_in_the_folder_compiles():
    env = monitor_format._ENV
    names = env.list_templates()
    assert set(names) == {path.name for path in TEMPLATE_DIR.iterdir()}
    assert {"base.html", "overview.html", "pipeline.html", "error.html", "lag_chart.svg"} <= set(names)
    for name in names:
        env.get_template(name)


# --------------------------------------------------------------------------- humanised ages


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(192, "3m 12s"), (45.9, "45s"), (0, "0s"), (0.4, "<1s"), (-3, "0s"), (3600, "1h"),
     (2 * 3600 + 5 * 60 + 7, "2h 5m"), (90061, "1d 1h"), (None, "—"), (float("nan"), "—")],
)  # fmt: skip
def test_humanize_seconds(seconds, text):
    assert humanize_seconds(seconds) == text


def test_pending_age_from_the_timestamp_when_the_age_is_missing():
    lag = {"records": 7, "oldest_pending_at": "2024-05-01T11:08:00Z", "oldest_pending_age_s": None,
           "partitions_behind": 2}  # fmt: skip
    doc = parse(render_overview([snapshot(lag=lag)], base=BASE, checked_at=CHECKED))
    assert doc.cells["lag"] == ["7 records oldest pending 1h 2m 2 partitions behind"]


# --------------------------------------------------------------------------- charts


def runs_at(count: int, **over) -> list[dict]:
    """``count`` runs ten minutes apart, newest first like a snapshot's ``runs``."""
    out = []
    for i in range(count):
        minute = i * 10
        when = f"2024-05-{1 + minute // 1440:02d}T{minute // 60 % 24:02d}:{minute % 60:02d}:00+00:00"
        out.append(run(run_id=f"r{i}", started_at=when, finished_at=when, rows=100 * (i + 1),
                       lag_before=1000 + i, lag_after=i, **over))  # fmt: skip
    return out[::-1]


def ytick_labels(svg: str) -> list[str]:
    return re.findall(r'<text class="ytick"[^>]*>([^<]*)</text>', svg)


def test_chart_marks_match_plottable_runs_oldest_left():
    runs = runs_at(5) + [run(run_id="no-time", started_at=None, finished_at=None)]
    lag, rows = lag_chart_svg(runs), rows_chart_svg(runs)
    assert re.findall(r'<g class="run" data-run="([^"]*)"', lag) == ["r0", "r1", "r2", "r3", "r4"]
    assert lag.count("<circle") == 10
    assert lag.count("<polyline") == 2
    bars = re.findall(r'<rect class="bar" data-run="([^"]*)" x="([\d.]+)"', rows)
    assert [b[0] for b in bars] == ["r0", "r1", "r2", "r3", "r4"]
    xs = [float(b[1]) for b in bars]
    assert xs == sorted(xs)
    heights = [float(h) for h in re.findall(r'<rect class="bar"[^>]* height="([\d.]+)"', rows)]
    assert heights == sorted(heights) and heights[0] < heights[-1]
    for svg in (lag, rows):
        assert 'class="chart"' in svg and 'role="img"' in svg and 'aria-label="' in svg
        assert 'viewBox="0 0 720 220"' in svg
        assert svg.count("<title>") == 5
        assert "<script" not in svg
    assert "r2\n2024-05-01 00:20:00 UTC\noutcome: success\nlag before: 1,002\nlag after: 2" in lag
    assert ">lag before<" in lag and ">lag after<" in lag


def test_started_at_is_the_fallback_time():
    runs = [run(run_id="a", finished_at=None, started_at="2024-05-01T10:00:00Z"), run(run_id="b")]
    assert re.findall(r'data-run="([^"]*)"', rows_chart_svg(runs)) == ["a", "b"]


def test_single_run_chart():
    (only,) = runs_at(1)
    lag, rows = lag_chart_svg([only]), rows_chart_svg([only])
    assert lag.count('data-run="r0"') == 1 and lag.count("<circle") == 2
    assert "<polyline" not in lag  # one point makes no line
    assert rows.count('<rect class="bar"') == 1
    assert re.findall(r'<text class="xtick"[^>]*>([^<]*)</text>', rows) == ["00:00:00"]
    assert ytick_labels(rows) == ["0", "50", "100"]


@pytest.mark.parametrize("runs", [[], None, [run(started_at=None, finished_at=None)], ["junk"]])
def test_empty_charts(runs):
    for svg in (lag_chart_svg(runs), rows_chart_svg(runs)):
        assert "No runs to plot yet." in svg
        assert svg.startswith("<svg") and 'role="img"' in svg and 'class="chart"' in svg
        assert "data-run" not in svg


def test_all_zero_values_still_get_a_readable_axis():
    runs = runs_at(3)
    for r in runs:
        r.update(rows=0, lag_before=0, lag_after=0)
    lag, rows = lag_chart_svg(runs), rows_chart_svg(runs)
    assert ytick_labels(lag) == ["0", "1"] and ytick_labels(rows) == ["0", "1"]
    assert rows.count('<rect class="bar"') == 3
    assert all(float(h) >= 1 for h in re.findall(r'<rect class="bar"[^>]* height="([\d.]+)"', rows))
    assert "nan" not in lag.lower() and "inf" not in lag.lower()


def test_none_values_skip_the_point_and_break_the_line():
    runs = runs_at(4)[::-1]  # oldest first here
    runs[1].update(lag_before=None, rows=None)
    runs[2].update(lag_after=None)
    lag, rows = lag_chart_svg(runs), rows_chart_svg(runs)
    assert lag.count('<g class="run"') == 4
    assert lag.count('data-series="lag_before" cx') == 3 and lag.count('data-series="lag_after" cx') == 3
    # before: r0 | r2 r3 -> one line of two points; after: r0 r1 | r3 -> one line of two points
    lines = re.findall(r'<polyline class="series" data-series="(\w+)" points="([^"]*)"', lag)
    assert [(s, len(p.split())) for s, p in lines] == [("lag_before", 2), ("lag_after", 2)]
    assert "lag before: —" in lag
    assert re.findall(r'<rect class="bar" data-run="([^"]*)"', rows) == ["r0", "r2", "r3"]


def test_nice_y_ticks_for_large_values():
    runs = runs_at(2)
    runs[0]["rows"] = 1_234_567
    assert ytick_labels(rows_chart_svg(runs)) == ["0", "500k", "1M", "1.5M"]


def test_two_hundred_runs_keep_x_labels_few():
    runs = runs_at(200)
    rows, lag = rows_chart_svg(runs), lag_chart_svg(runs)
    assert rows.count('<rect class="bar"') == 200
    assert lag.count('<g class="run"') == 200
    for svg in (rows, lag):
        labels = re.findall(r'<text class="xtick"[^>]*>([^<]*)</text>', svg)
        assert 2 <= len(labels) <= 6
        assert labels[0] == "05-01 00:00" and labels[-1] == "05-02 09:10"
    widths = {float(w) for w in re.findall(r'<rect class="bar"[^>]* width="([\d.]+)"', rows)}
    slot = (720 - 56 - 14) / 200
    assert all(0 < w < slot for w in widths)  # bars never overlap their neighbours


def test_maintenance_table_shows_files_per_table_and_the_last_maintenance():
    maintenance = {"policy": "every 10 runs", "tables": [
        {"table": "bronze", "files": 1204, "last": {"run_id": "scheduled__x", "at": "2024-05-01T12:00:00+00:00",
                                                    "files_before": 1500, "files_after": 3}},
        {"table": "ledger", "files": None, "last": None}]}  # fmt: skip
    page = render_pipeline(snapshot(maintenance=maintenance), base=BASE)
    table = re.search(r'<table class="maintenance">(.*?)</table>', page, re.S).group(1)
    assert "every 10 runs" in page
    bronze = re.search(r'<tr data-table="bronze">(.*?)</tr>', table, re.S).group(1)
    assert '<td class="num" data-field="files">1,204</td>' in bronze and "scheduled__x" in bronze
    assert "1,500 → 3" in bronze
    ledger = re.search(r'<tr data-table="ledger">(.*?)</tr>', table, re.S).group(1)
    assert ">—</td>" in ledger and "never" in ledger
    assert 'class="maintenance"' not in render_pipeline(snapshot(), base=BASE)


def test_overview_lists_the_least_time_left_before_retention_first_and_marks_a_pipeline_at_risk():
    def snap(name: str, left: float | None, at_risk: bool = False, note: str | None = None) -> dict:
        lag = {**snapshot()["lag"], "retention_left_s": left, "retention_at": f"{name}[0]", "retention_note": note}
        return snapshot(pipeline=name, lag=lag,
                        health={"state": "warning" if at_risk else "ok", "reasons": [], "at_risk": at_risk})  # fmt: skip

    given = [snap("unbounded", None), snap("denied", None, note="DescribeConfigs denied"), snap("week", 604800.0),
             snap("soon", 600.0, at_risk=True)]  # fmt: skip
    caught_up = snapshot(pipeline="caught_up", lag={**snapshot()["lag"], "records": 0, "retention_left_s": None})
    html = render_overview([*given, caught_up], base=BASE, checked_at=CHECKED)
    doc = parse(html)
    assert [c.split()[0] for c in doc.cells["pipeline"]] == ["soon", "week", "unbounded", "denied", "caught_up"]
    assert doc.cells["retention"] == ["at risk · ≥ 10m soon[0]", "≥ 7d week[0]", "no limit", "unknown",
                                      "nothing unread"]  # fmt: skip
    assert html.count('data-at-risk="true"') == 1 and 'title="DescribeConfigs denied"' in html
    # The pipeline's own page: the card, and the chart of the ledger's time left before each run.
    page = render_pipeline({**given[3], "runs": [run(retention_left_s=5400.0)]}, base=BASE)
    assert "Retention left at risk · ≥ 10m soon[0]" in parse(page).visible
    assert "Least time left before Kafka&#39;s retention may delete unread records, 1 run" in page
    assert "time left before the run: 1h 30m" in page


def test_a_routed_pipeline_lists_each_route_with_its_match_tables_and_silver_lag():
    routes = [{"route": "orders", "match": "record_name = shop.Order", "silver": "/l/silver/orders",
               "quarantine": "/l/quarantine/orders"},
              {"route": "clicks", "match": "header kind = click", "silver": "/l/silver/clicks",
               "quarantine": "/l/quarantine/clicks"}]  # fmt: skip
    snap = snapshot(routes=routes, unrouted={"policy": "quarantine", "quarantine": "/l/quarantine/unrouted"},
                    silver_lag={"records": 7, "error": None, "routes": {"orders": 7, "clicks": 0}})  # fmt: skip
    text = re.sub(r"<[^>]+>", " ", render_pipeline(snap, base=BASE))
    text = re.sub(r"\s+", " ", text)
    assert "Routes records no route takes: quarantine to /l/quarantine/unrouted" in text
    assert "orders record_name = shop.Order /l/silver/orders /l/quarantine/orders 7" in text
    assert "clicks header kind = click /l/silver/clicks /l/quarantine/clicks 0" in text
    assert "Routes" not in re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", render_pipeline(snapshot(), base=BASE)))
