"""Airflow UI plugin: the Kafka → Delta pipelines page (offsets, lag, continuity, run history).

Adds "Kafka → Delta" to the Airflow UI's navigation. The page is served by
this plugin's FastAPI app, mounted on the Airflow API server at
``/kde-monitor``, and shown inside the UI at ``/plugin/kafka-delta``:

- ``/kde-monitor/``                       overview of every pipeline (HTML)
- ``/kde-monitor/pipelines/<name>``       one pipeline: partitions, charts, runs, gaps, manual actions
- ``/kde-monitor/api/pipelines``          the overview's data (JSON)
- ``/kde-monitor/api/pipelines/<name>``   one pipeline's data (JSON)

Access: Airflow 3 gives a plugin's app no authentication of its own, so every
route but the icon checks the caller the way Airflow's own API does (a bearer
token, or the UI's session cookie) and lists only the pipelines whose DAG the
user may read. Anonymous HTML requests are sent to the login page; anonymous
JSON requests get 401.

Data: pipeline files as the DAGs read them, Kafka through each pipeline's
Airflow connection, the tables through delta-rs (:mod:`include.monitoring.monitor`); no
JVM. Every Kafka call is bounded by ``KDE_MONITOR_TIMEOUT_S`` (default 5 s),
so a dead broker shows as such on the page within seconds.
"""

from __future__ import annotations

import concurrent.futures
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

# The API server puts the plugins folder on sys.path, not the project root that holds include/.
_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from airflow.plugins_manager import AirflowPlugin  # noqa: E402
from fastapi import Depends, FastAPI, HTTPException, Request, status  # noqa: E402
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response  # noqa: E402

from include import settings  # noqa: E402
from include.orchestration.trigger_guard import TriggerGuard  # noqa: E402

if TYPE_CHECKING:
    from include.config import PipelineConfig
    from include.monitoring.monitor import SchedulerView

# The monitoring modules (and the Kafka and Delta readers under them) are imported when a page is asked for,
# never at plugin load: Airflow loads plugins in every component, the scheduler among them, whose
# LocalExecutor workers fork the task processes; a module the plugin imported there would be the one every
# task then sees, whatever is on disk when the task starts.

PREFIX = "/kde-monitor"
URL_ROUTE = "kafka-delta"
#: Pipelines are looked at in parallel; each one's Kafka calls share its own deadline.
_WORKERS = 4
_ICON = (
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24" fill="none" stroke="#0f766e" '
    'stroke-width="2" stroke-linecap="round"><path d="M3 17l5-5 4 3 8-9"/><path d="M3 21h18"/></svg>'
)


async def _user(request: Request) -> Any:
    """The caller, authenticated exactly as Airflow's REST API does it; 401/403 otherwise."""
    from airflow.api_fastapi.core_api.security import get_user
    from fastapi.security import HTTPBearer

    bearer = await HTTPBearer(auto_error=False)(request)
    return await get_user(request, None, bearer)


def _may_read(user: Any, dag_id: str) -> bool:
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagDetails

    return get_auth_manager().is_authorized_dag(method="GET", user=user, details=DagDetails(id=dag_id))


def _is_admin(user: Any) -> bool:
    """Whether ``user`` may see why a pipeline file is invalid: one who may change Airflow's configuration
    (Admin with the FAB auth manager; Op and Admin with the simple one)."""
    from airflow.api_fastapi.app import get_auth_manager

    return get_auth_manager().is_authorized_configuration(method="PUT", user=user)


def _scheduler_views(dag_ids: list[str]) -> dict[str, SchedulerView]:
    """Paused flag and next run time of each DAG from Airflow's metadata database."""
    if not dag_ids:
        return {}
    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    from include.monitoring import monitor

    with create_session() as session:
        models = session.scalars(select(DagModel).where(DagModel.dag_id.in_(dag_ids))).all()
        return {
            m.dag_id: monitor.SchedulerView(
                paused=m.is_paused,
                # A run of a data interval is created once the interval has ended.
                next_run_at=m.next_dagrun_create_after if not m.is_paused else None,
            )
            for m in models
        }


def _snapshots(user: Any, only: str | None = None) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Snapshots of the pipelines ``user`` may read (or just ``only``), and invalid pipeline files."""
    from include.config import load_pipelines
    from include.monitoring import monitor
    from include.readers.connections import kafka_client_config, server_connection

    configs, errors = load_pipelines(settings.pipelines_dir())
    if only is not None:
        # One answer for a pipeline that does not exist and one the user may not read, so that
        # the answer does not tell which pipelines exist.
        if only not in configs or not _may_read(user, only):
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no pipeline named {only!r} that you may read")
        configs = {only: configs[only]}
    else:
        configs = {name: cfg for name, cfg in configs.items() if _may_read(user, name)}
    try:
        scheduler = _scheduler_views(sorted(configs))
    except Exception:  # noqa: BLE001 - the page still shows Kafka and the tables without it
        scheduler = {}
    timeout_s = settings.monitor_timeout_s(monitor.DEFAULT_TIMEOUT_S)

    def one(cfg: PipelineConfig) -> dict[str, Any]:
        try:
            client, problem = kafka_client_config(cfg.kafka.connection_id, get_connection=server_connection), None
        except Exception as exc:  # noqa: BLE001 - a missing connection is shown on the page
            client, problem = None, str(exc)
        return monitor.pipeline_snapshot(cfg, client, kafka_error=problem, scheduler=scheduler.get(cfg.name),
                                         timeout_s=timeout_s)  # fmt: skip

    with concurrent.futures.ThreadPoolExecutor(max_workers=_WORKERS) as pool:
        snaps = list(pool.map(one, configs.values()))
    # An error can echo a value of the file (a connection id holding a password, say): admins only.
    if only is not None or not errors or not _is_admin(user):
        return snaps, {}
    return snaps, {str(path): str(err) for path, err in sorted(errors.items())}


def _roots(request: Request) -> tuple[str, str]:
    """This app's URL prefix and the Airflow UI's, as the browser sees them (a base_url path included)."""
    base = request.scope.get("root_path", "").rstrip("/") or PREFIX
    return base, base[: -len(PREFIX)] if base.endswith(PREFIX) else ""


def _rooted(snap: dict[str, Any], ui_root: str) -> dict[str, Any]:
    if ui_root:
        snap["links"] = {k: (ui_root + v if v else v) for k, v in snap["links"].items()}
        for run in snap["runs"]:  # last_run is runs[0], the same dict
            run["link"] = ui_root + run["link"]
    return snap


app = FastAPI(title="Kafka → Delta pipelines", docs_url=None, redoc_url=None, openapi_url=None)


class _LoginRequired(Exception):
    def __init__(self, next_url: str) -> None:
        self.next_url = next_url


@app.exception_handler(_LoginRequired)
async def _to_login(request: Request, exc: _LoginRequired) -> Response:
    from airflow.api_fastapi.app import get_auth_manager

    return RedirectResponse(get_auth_manager().get_url_login(next_url=exc.next_url),
                            status_code=status.HTTP_307_TEMPORARY_REDIRECT)  # fmt: skip


async def _browser_user(request: Request) -> Any:
    """Like :func:`_user`, but an anonymous browser is sent to the login page and brought back."""
    try:
        return await _user(request)
    except HTTPException as exc:
        if exc.status_code in (status.HTTP_401_UNAUTHORIZED, status.HTTP_403_FORBIDDEN):
            raise _LoginRequired(str(request.url)) from None
        raise


ApiUser = Annotated[Any, Depends(_user)]
BrowserUser = Annotated[Any, Depends(_browser_user)]


@app.get("/", response_class=HTMLResponse)
def overview_page(request: Request, user: BrowserUser) -> HTMLResponse:
    """Every pipeline the user may read, with its health at a glance."""
    from include.monitoring import monitor_page

    base, ui_root = _roots(request)
    snaps, errors = _snapshots(user)
    html = monitor_page.render_overview([_rooted(s, ui_root) for s in snaps], base=base,
                                        checked_at=datetime.now(UTC).isoformat(), invalid_files=errors)  # fmt: skip
    return HTMLResponse(html)


@app.get("/pipelines/{name}", response_class=HTMLResponse)
def pipeline_page(name: str, request: Request, user: BrowserUser) -> HTMLResponse:
    """One pipeline: partitions against Kafka, charts, runs, gaps and manual actions."""
    from include.monitoring import monitor_page

    base, ui_root = _roots(request)
    try:
        snaps, _ = _snapshots(user, only=name)
    except HTTPException as exc:
        return HTMLResponse(monitor_page.render_error("Pipeline not shown", str(exc.detail), base=base),
                            status_code=exc.status_code)  # fmt: skip
    return HTMLResponse(monitor_page.render_pipeline(_rooted(snaps[0], ui_root), base=base))


@app.get("/api/pipelines")
def pipelines_json(request: Request, user: ApiUser) -> JSONResponse:
    """The overview's data: ``{"checked_at", "pipelines": [snapshot...], "invalid_files": {path: error}}``."""
    _, ui_root = _roots(request)
    snaps, errors = _snapshots(user)
    return JSONResponse({"checked_at": datetime.now(UTC).isoformat(),
                         "pipelines": [_rooted(s, ui_root) for s in snaps], "invalid_files": errors})  # fmt: skip


@app.get("/api/pipelines/{name}")
def pipeline_json(name: str, request: Request, user: ApiUser) -> JSONResponse:
    """One pipeline's snapshot (see :func:`include.monitoring.monitor.pipeline_snapshot`)."""
    _, ui_root = _roots(request)
    snaps, _ = _snapshots(user, only=name)
    return JSONResponse(_rooted(snaps[0], ui_root))


@app.get("/icon.svg", include_in_schema=False)
def icon() -> Response:
    """The navigation icon (static, public: it is fetched by the UI's menu)."""
    return Response(_ICON, media_type="image/svg+xml", headers={"Cache-Control": "max-age=86400"})


class KafkaDeltaMonitorPlugin(AirflowPlugin):
    """Registers the app on the API server, its page in the UI's navigation, and the check that refuses a bad
    trigger config before a run exists (:mod:`include.orchestration.trigger_guard`)."""

    name = "kafka_delta_monitor"
    fastapi_apps = [{"app": app, "url_prefix": PREFIX, "name": "Kafka → Delta pipelines"}]
    fastapi_root_middlewares = [{"middleware": TriggerGuard, "args": [], "kwargs": {},
                                 "name": "Kafka → Delta trigger-config check"}]  # fmt: skip
    external_views = [{
        "name": "Kafka → Delta",
        "href": f"{PREFIX}/",
        "destination": "nav",
        "url_route": URL_ROUTE,
        "nav_top_level": True,
        "icon": f"{PREFIX}/icon.svg",
    }]  # fmt: skip
