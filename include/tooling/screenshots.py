"""The README's monitoring screenshots, rendered from the demo's own pipelines: ``make screenshots``.

Run after ``make demo``, on its folder (``var/demo``). It:

1. restarts the demo's broker (its data is kept in ``var/demo/kafka``);
2. produces a few more orders and runs ``demo_orders`` once more with maintenance due (a copy of the
   demo's pipeline files in which ``maintenance.every_runs`` is 1: the demo's two runs do not reach the
   default of 50), so the page has a maintenance table to show;
3. starts the Airflow API server on the demo's metadata database and, in the headless Chromium the UI
   test uses, logs in and saves the overview and ``demo_orders``' page as
   ``docs/images/monitor-overview.png`` and ``docs/images/monitor-pipeline.png``;
4. writes ``docs/images/screenshots.json`` beside them: each image's sha256, the pipelines the pages
   show and the commit, which ``tests/test_docs.py`` checks against the images and the demo's files.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import tempfile
from pathlib import Path

import yaml

from include import settings
from include.ports import free_port
from include.readers.kafka_admin import watermarks
from include.tooling import airflow_local, demo, local_kafka
from include.tooling.benchmark import checkout_commit

IMAGES = settings.PROJECT_ROOT / "docs" / "images"
MARKER = IMAGES / "screenshots.json"
#: The demo's pipeline files: the only pipelines a screenshot may show.
DEMO_PIPELINES = settings.PROJECT_ROOT / "include" / "pipelines"
OVERVIEW, PIPELINE_PAGE = "monitor-overview.png", "monitor-pipeline.png"
SHOWN = "demo_orders"
PREFIX = "/kde-monitor"
USER = PASSWORD = "admin"
MORE_ORDERS = 500


def demo_pipeline_names(folder: Path = DEMO_PIPELINES) -> list[str]:
    """The names of the demo's pipelines (each file's stem is its pipeline's name)."""
    return sorted(p.stem for p in folder.glob("*.yaml"))


def sha256(path: Path) -> str:
    """The hex sha256 of a file's bytes."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _maintained_copy(folder: Path) -> Path:
    """The demo's pipeline files (and the schemas they name) with ``demo_orders`` maintained on every run."""
    shutil.copytree(DEMO_PIPELINES, folder, dirs_exist_ok=True)
    path = folder / f"{SHOWN}.yaml"
    data = yaml.safe_load(path.read_text())
    data.setdefault("maintenance", {})["every_runs"] = 1
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return folder


def _full_page(driver, path: Path) -> None:
    width = driver.get_window_size()["width"]
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(width, max(height + 40, 700))
    driver.save_screenshot(str(path))
    driver.set_window_size(width, 1000)


def capture(root: str, out: Path, work: Path) -> list[str]:
    """Log in at ``root`` and save the overview and ``demo_orders``' page in ``out``; the pipelines shown."""
    from selenium.webdriver.common.by import By

    from include.tooling.browser import browser, wait_for

    driver = browser(work / "chromium")
    try:
        driver.get(f"{root}{PREFIX}/")
        wait_for(driver, "input[name=username], input#username")
        driver.find_element(By.CSS_SELECTOR, "input[name=username], input#username").send_keys(USER)
        driver.find_element(By.CSS_SELECTOR, "input[type=password]").send_keys(PASSWORD)
        driver.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        wait_for(driver, f"tr[data-pipeline='{SHOWN}']", timeout=60)
        shown = [tr.get_attribute("data-pipeline") for tr in driver.find_elements(By.CSS_SELECTOR, "tr[data-pipeline]")]
        _full_page(driver, out / OVERVIEW)
        driver.get(f"{root}{PREFIX}/pipelines/{SHOWN}")
        wait_for(driver, "svg.chart", timeout=60)
        _full_page(driver, out / PIPELINE_PAGE)
        return sorted(shown)
    finally:
        driver.quit()


def main(argv: list[str] | None = None) -> int:
    """Render the screenshots; exit code 2 when there is no demo to render."""
    parser = argparse.ArgumentParser(prog="python -m include.tooling.screenshots", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--dir", type=Path, default=settings.VAR_DIR / "demo", help="the demo's folder")
    parser.add_argument("--out", type=Path, default=IMAGES)
    args = parser.parse_args(argv)
    workdir = args.dir.resolve()
    if not (workdir / "airflow").exists():
        print(f"{workdir / 'airflow'} does not exist: run `make demo` first", file=sys.stderr)
        return 2
    running = local_kafka.status(workdir / "kafka")
    broker = running or local_kafka.start(workdir / "kafka")
    server = None
    with tempfile.TemporaryDirectory(prefix="kde-screenshots-") as tmp:
        work = Path(tmp)
        try:
            env = airflow_local.environment(
                workdir / "airflow", kafka_bootstrap=broker.bootstrap_servers,
                pipelines_dir=_maintained_copy(work / "pipelines"),
                extra={"KDE_LAKEHOUSE_ROOT": str(workdir / "lakehouse"), "KDE_VAR_DIR": str(workdir),
                       **airflow_local.login_environment(work / "login", USER, PASSWORD)},
            )  # fmt: skip
            produced = sum(high for _, high in watermarks(broker.bootstrap_servers, demo.TOPIC).values())
            print(f"producing {MORE_ORDERS} more orders, then a run of {SHOWN} with maintenance due", flush=True)
            demo.produce_orders(broker.bootstrap_servers, MORE_ORDERS, produced)
            proc = airflow_local.dags_test(env, SHOWN, log_file=work / "maintenance-run.log")
            if proc.returncode != 0:
                print((work / "maintenance-run.log").read_text(errors="replace")[-4000:], file=sys.stderr)
                return 1
            port = free_port()
            server = airflow_local.start_api_server(env, port=port, log_file=work / "api-server.log")
            airflow_local.wait_until_serving(server, port, log_file=work / "api-server.log")
            args.out.mkdir(parents=True, exist_ok=True)
            shown = capture(f"http://127.0.0.1:{port}", args.out, work)
        finally:
            if server is not None:
                airflow_local.stop_standalone(server)
            if running is None:
                broker.stop()
    marker = {"commit": checkout_commit(), "pipelines": shown,
              "images": {name: sha256(args.out / name) for name in (OVERVIEW, PIPELINE_PAGE)}}  # fmt: skip
    (args.out / MARKER.name).write_text(json.dumps(marker, indent=2) + "\n")
    print(f"wrote {', '.join(marker['images'])} and {MARKER.name} in {args.out} (pipelines {', '.join(shown)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
