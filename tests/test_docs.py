"""The README and the pages in docs/: links that resolve, a short README, no dated prose, generated parts current.

Unit tests: no network (links to http(s) are not fetched), no broker, no
Spark. A link that leaves the repository fails, since a reader of the
project does not have what lies beside it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from include import settings
from include.config import reference

ROOT = settings.PROJECT_ROOT
README = ROOT / "README.md"
DOCS = ROOT / "docs"
README_MAX_LINES = 300
#: A date such as 2026-11-28: figures and prose carry no dates (benchmark reports in docs/benchmarks/ do).
DATE = re.compile(r"20\d\d-\d\d-\d\d")
BENCH_MARKERS = ("<!-- bench:begin -->", "<!-- bench:end -->")

_FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)
_CODE_SPAN = re.compile(r"(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.S)
_COMMENT = re.compile(r"<!--.*?-->", re.S)
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$", re.M)


def pages() -> list[Path]:
    """README.md and every page directly in docs/ (docs/benchmarks/ holds generated reports)."""
    return [README, *sorted(DOCS.glob("*.md"))]


def _prose(text: str) -> str:
    """``text`` without fenced blocks, code spans and comments, which hold no links."""
    text = _FENCE.sub("", text)
    text = _COMMENT.sub("", text)
    return _CODE_SPAN.sub("code", text)


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its text lower-cased, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every anchor ``page``'s headings give, with GitHub's ``-1``, ``-2`` for repeated headings."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    for _, title in _HEADING.findall(_FENCE.sub("", page.read_text(encoding="utf-8"))):
        slug = github_slug(title)
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def link_problems(page: Path, root: Path = ROOT) -> list[str]:
    """What is wrong with ``page``'s relative links: a missing file, an unknown anchor, a way out of ``root``."""
    problems: list[str] = []
    shown = page.relative_to(root)
    for target in _LINK.findall(_prose(page.read_text(encoding="utf-8"))):
        if re.match(r"https?://", target):
            continue
        if re.match(r"[A-Za-z][A-Za-z0-9+.-]*:", target):
            problems.append(f"{shown}: {target}: not a relative link nor http(s)")
            continue
        path_part, _, anchor = target.partition("#")
        file = (page.parent / path_part).resolve() if path_part else page
        try:
            file.relative_to(root.resolve())
        except ValueError:
            problems.append(f"{shown}: {target}: leads out of the repository")
            continue
        if not file.exists():
            problems.append(f"{shown}: {target}: no such file")
            continue
        if anchor:
            if file.suffix != ".md":
                problems.append(f"{shown}: {target}: an anchor into a file that is not a page")
            elif anchor not in anchors(file):
                problems.append(f"{shown}: {target}: {file.name} has no heading with that anchor")
    return problems


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(page):
    assert link_problems(page) == []


def test_the_link_check_finds_each_kind_of_broken_link(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "other.md").write_text("# Other\n\n## A section, with punctuation!\n")
    page = tmp_path / "README.md"
    page.write_text(
        "# Title\n\n## Local part\n\n"
        "[fine](docs/other.md#a-section-with-punctuation) [fine too](#local-part) [web](https://example.org/x)\n"
        "[gone](docs/missing.md) [bad anchor](docs/other.md#nope) [out](../shared/DESIGN.md)\n"
        "![picture](docs/missing.png) [here, bad](#nowhere)\n"
        "`[in code](docs/missing.md)`\n\n```\n[in a block](docs/missing.md)\n```\n"
    )
    problems = link_problems(page, tmp_path)
    assert [p.split(": ")[1] for p in problems] == [
        "docs/missing.md", "docs/other.md#nope", "../shared/DESIGN.md", "docs/missing.png", "#nowhere",
    ]  # fmt: skip


def test_github_slugs():
    assert github_slug("Running it against your own Kafka, Spark and Airflow") == (
        "running-it-against-your-own-kafka-spark-and-airflow"
    )
    assert github_slug("`transform.value_schema`") == "transformvalue_schema"
    assert github_slug("`transform.schema.<field>`") == "transformschemafield"
    assert github_slug("Positions, RESTORE and copied tables") == "positions-restore-and-copied-tables"


def test_readme_is_short():
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, (
        f"README.md has {lines} lines, at most {README_MAX_LINES}: it is for a user; move reference to docs/"
    )


def test_no_dated_prose():
    found = [
        f"{page.relative_to(ROOT)}:{number}: {line.strip()}"
        for page in pages()
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
        if DATE.search(line)
    ]
    assert found == [], "dates belong in benchmark reports (docs/benchmarks/), not in the pages:\n" + "\n".join(found)


def test_pipeline_file_reference_is_generated_from_the_models():
    expected = reference.pipeline_reference_markdown()
    actual = reference.REFERENCE_PATH.read_text(encoding="utf-8")
    assert actual == expected, (
        f"docs/pipeline-file.md is stale; regenerate it with: {reference.REFERENCE_COMMAND}"
    )


def _model_keys(node: dict[str, Any], defs: dict[str, Any], prefix: str = "") -> set[str]:
    """Every key of the pipeline file's JSON Schema, dotted; the fields of transform.schema under <field>."""
    keys: set[str] = set()
    for choice in [node, *node.get("anyOf", [])]:
        if "$ref" in choice:
            keys |= _model_keys(defs[choice["$ref"].split("/")[-1]], defs, prefix)
        for name, value in choice.get("properties", {}).items():
            keys |= {prefix + name} | _model_keys(value, defs, f"{prefix}{name}.")
        if isinstance(choice.get("additionalProperties"), dict):
            entry = "<route>" if prefix.endswith(".routes.") else "<field>"  # as the reference names them
            keys |= _model_keys(choice["additionalProperties"], defs, f"{prefix}{entry}.")
    return keys


def test_pipeline_file_reference_names_every_key_of_the_models():
    schema = json.loads(reference.pipeline_schema_json())
    keys = _model_keys(schema, schema["$defs"])
    assert {"kafka.connection_id", "cluster.kubernetes.image", "transform.schema.<field>.type",
            "transform.routes.<route>.match.record_name"} <= keys  # fmt: skip
    text = reference.REFERENCE_PATH.read_text(encoding="utf-8")
    missing = sorted(key for key in keys if f"| `{key}` |" not in text)
    assert missing == [], f"docs/pipeline-file.md has no row for {missing}; {reference.REFERENCE_COMMAND}"


def test_reference_command_prints_the_reference(capsys):
    assert reference.main(["--reference"]) == 0
    assert capsys.readouterr().out == reference.pipeline_reference_markdown()


def test_performance_page_holds_the_benchmark_markers_in_order():
    text = (DOCS / "performance.md").read_text(encoding="utf-8")
    begin, end = (text.find(marker) for marker in BENCH_MARKERS)
    assert begin != -1 and end != -1, f"docs/performance.md lacks {BENCH_MARKERS}; make bench fills between them"
    assert begin < end and text.count(BENCH_MARKERS[0]) == text.count(BENCH_MARKERS[1]) == 1


def test_the_monitoring_screenshots_are_the_ones_make_screenshots_rendered_from_the_demo():
    from include.tooling import screenshots

    assert screenshots.MARKER.exists(), "docs/images/screenshots.json is missing: run make demo, then make screenshots"
    marker = json.loads(screenshots.MARKER.read_text())
    for name, digest in marker["images"].items():
        path = screenshots.IMAGES / name
        assert screenshots.sha256(path) == digest, f"{path.name} is not the image make screenshots wrote: rerun it"
    assert set(marker["images"]) == {screenshots.OVERVIEW, screenshots.PIPELINE_PAGE}
    assert marker["pipelines"] == screenshots.demo_pipeline_names(), "a screenshot shows pipelines not the demo's"
    shown = {m for page in pages() for m in re.findall(r"\]\((?:docs/)?images/(monitor-[\w-]+\.png)\)", page.read_text())}
    assert shown <= set(marker["images"]), f"pages show monitoring images make screenshots does not render: {shown}"
    assert re.fullmatch(r"[0-9a-f]{7,40}(-dirty)?", marker["commit"]), marker["commit"]
