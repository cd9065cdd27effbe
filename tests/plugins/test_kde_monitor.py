"""The plugin's HTML routes serve the pages rendered from the templates, from any working directory.

Airflow's login and the snapshot gathering are replaced here (they need a
running API server, Kafka and tables; ``tests/integration/test_monitor_ui.py``
runs them for real): what is left is the plugin's own path from a request to
the page.
"""

from __future__ import annotations

import importlib.util
from types import ModuleType

import pytest
from fastapi import HTTPException, status

from include import settings
from tests.include.monitoring.snapshots import snapshot


@pytest.fixture(scope="module")
def plugin() -> ModuleType:
    """``plugins/kde_monitor.py`` loaded from its file, as Airflow's plugin manager loads it."""
    spec = importlib.util.spec_from_file_location("kde_monitor", settings.PROJECT_ROOT / "plugins" / "kde_monitor.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def client(plugin, monkeypatch, tmp_path):
    """A client of the plugin's app, as a signed-in user, with one pipeline, run from an unrelated folder."""
    from fastapi.testclient import TestClient

    def snapshots(user, only=None):
        if only not in (None, "demo_orders"):
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no pipeline named {only!r}")
        return [snapshot()], {}

    # The API server's working directory is not the project: templates must not be looked up from it.
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(plugin, "_snapshots", snapshots)
    plugin.app.dependency_overrides[plugin._browser_user] = lambda: "operator"
    try:
        yield TestClient(plugin.app, root_path=plugin.PREFIX)
    finally:
        plugin.app.dependency_overrides.clear()


def test_overview_route_serves_the_overview(client):
    response = client.get("/")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/html")
    page = response.text
    assert "<h1>Kafka → Delta pipelines</h1>" in page
    assert 'data-pipeline="demo_orders"' in page
    assert 'href="/kde-monitor/pipelines/demo_orders"' in page
    assert '<meta http-equiv="refresh" content="30">' in page


def test_pipeline_route_serves_the_pipeline_page(client):
    response = client.get("/pipelines/demo_orders")
    assert response.status_code == 200
    page = response.text
    assert page.count('<tr data-topic="demo.orders"') == 2
    assert page.count('<svg xmlns="http://www.w3.org/2000/svg" class="chart"') == 3
    assert 'href="/kde-monitor/api/pipelines/demo_orders"' in page


def test_unknown_pipeline_gets_the_error_page_with_its_status(client):
    response = client.get("/pipelines/nope")
    assert response.status_code == 404
    assert "<h1>Pipeline not shown</h1>" in response.text
    assert "no pipeline named &#39;nope&#39;" in response.text
    assert 'http-equiv="refresh"' not in response.text


@pytest.fixture
def pipelines(plugin, monkeypatch, tmp_path):
    """Two valid pipeline files and an invalid one whose error echoes a value; snapshots stand in for the
    Kafka and table reads, which ``tests/integration/test_monitor_ui.py`` does for real."""
    from include.monitoring import monitor

    folder = tmp_path / "pipelines"
    folder.mkdir()
    for name in ("alpha", "beta"):
        (folder / f"{name}.yaml").write_text("kafka: {connection_id: k, topics: [t]}\nschedule: null\n")
    (folder / "gamma.yaml").write_text("kafka: {connection_id: 'user:hunter2@host', topics: [t]}\nschedule: 7\n")
    monkeypatch.setenv(settings.PIPELINES_DIR_ENV, str(folder))
    monkeypatch.setattr(plugin, "_scheduler_views", lambda names: {})
    monkeypatch.setattr(plugin, "_is_admin", lambda user: False)
    monkeypatch.setattr(monitor, "pipeline_snapshot", lambda cfg, *a, **k: {"name": cfg.name})
    return plugin


@pytest.mark.parametrize("name", ["beta", "nope"])
def test_a_pipeline_the_user_may_not_read_gets_the_answer_of_one_that_does_not_exist(pipelines, monkeypatch, name):
    monkeypatch.setattr(pipelines, "_may_read", lambda user, dag_id: dag_id == "alpha")
    with pytest.raises(HTTPException) as refused:
        pipelines._snapshots("viewer", only=name)
    assert (refused.value.status_code, refused.value.detail) == (404, f"no pipeline named {name!r} that you may read")
    assert pipelines._snapshots("viewer", only="alpha") == ([{"name": "alpha"}], {})
    assert pipelines._snapshots("viewer")[0] == [{"name": "alpha"}]


@pytest.mark.parametrize(("admin", "shown"), [(False, False), (True, True)])
def test_only_an_admin_sees_why_a_pipeline_file_is_invalid(pipelines, monkeypatch, admin, shown):
    monkeypatch.setattr(pipelines, "_may_read", lambda user, dag_id: True)
    monkeypatch.setattr(pipelines, "_is_admin", lambda user: admin)
    snaps, errors = pipelines._snapshots("someone")
    assert [s["name"] for s in snaps] == ["alpha", "beta"]
    assert bool(errors) is shown
    if shown:
        assert [path.rsplit("/", 1)[-1] for path in errors] == ["gamma.yaml"]


def test_loading_the_plugin_imports_none_of_the_product_modules_a_task_uses():
    # Airflow loads plugins in the scheduler too, whose LocalExecutor workers fork the task processes: a module
    # imported at plugin load is the copy every task then sees (a task once met a reader that code on disk had
    # changed under it: "module 'include.readers.delta_progress' has no attribute ...").
    import subprocess
    import sys

    from include import settings

    code = ("import sys; sys.path.insert(0, 'plugins'); import kde_monitor; "
            "print(sorted(m for m in sys.modules if m.startswith('include.')))")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], cwd=settings.PROJECT_ROOT, capture_output=True, text=True,
                         check=True).stdout  # fmt: skip
    assert out.strip() == "['include.orchestration', 'include.orchestration.trigger_guard', 'include.settings']"
