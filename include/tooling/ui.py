"""The Airflow UI on the demo's setup: ``make ui``, then http://127.0.0.1:8080 (admin / admin).

Restarts the demo's broker (its data is kept in ``var/demo/kafka``) and runs
``airflow standalone`` (scheduler, DAG processor, triggerer and API server with
the UI) on the demo's metadata database, so the runs ``make demo`` made are
there to look at and the ``demo_orders`` DAG can be triggered from the UI.
Ctrl-C stops Airflow and the broker.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from include import settings
from include.tooling import airflow_local, local_kafka


def main(argv: list[str] | None = None) -> int:
    """Run the UI until interrupted."""
    parser = argparse.ArgumentParser(prog="python -m include.tooling.ui", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--dir", type=Path, default=settings.VAR_DIR / "demo", help="the demo's folder")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--user", default="admin")
    parser.add_argument("--password", default="admin")
    args = parser.parse_args(argv)
    workdir = args.dir.resolve()
    if not (workdir / "airflow").exists():
        print(f"{workdir / 'airflow'} does not exist: run `make demo` first", file=sys.stderr)
        return 2
    passwords = workdir / "airflow" / "simple_auth_passwords.json"
    passwords.write_text(json.dumps({args.user: args.password}))
    passwords.chmod(0o600)
    running = local_kafka.status(workdir / "kafka")
    broker = running or local_kafka.start(workdir / "kafka")
    try:
        env = airflow_local.environment(
            workdir / "airflow", kafka_bootstrap=broker.bootstrap_servers,
            extra={
                "KDE_LAKEHOUSE_ROOT": str(workdir / "lakehouse"),
                "KDE_VAR_DIR": str(workdir),
                "AIRFLOW__API__PORT": str(args.port),
                "AIRFLOW__API__HOST": "127.0.0.1",
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{args.user}:admin",
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
                "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            },
        )  # fmt: skip
        print(f"Kafka broker at {broker.bootstrap_servers}; Airflow UI at http://127.0.0.1:{args.port} "
              f"(user {args.user}, password {args.password}); Ctrl-C stops both", flush=True)  # fmt: skip
        try:
            return subprocess.run(airflow_local.airflow_command("standalone"), env=env).returncode
        except KeyboardInterrupt:
            return 0
    finally:
        if running is None:
            broker.stop()


if __name__ == "__main__":
    sys.exit(main())
