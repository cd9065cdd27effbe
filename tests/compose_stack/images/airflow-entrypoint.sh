#!/usr/bin/env bash
# The part of the official Airflow image's /entrypoint that docker-compose.yaml relies on: the
# arguments are an Airflow command (`scheduler` runs `airflow scheduler`), unless they start with
# bash, python or airflow. Group-writable files, as the official image makes them (umask 0002).
set -euo pipefail
umask 0002
case "${1:-}" in
    bash) shift; exec /bin/bash "$@" ;;
    python) shift; exec python "$@" ;;
    airflow) shift ;;
esac
exec airflow "$@"
