#!/usr/bin/env bash
# What docker-compose.yaml relies on in the official Spark image's /opt/entrypoint.sh: an uid with no
# passwd entry gets one when /etc/passwd is writable (else a warning), then the command runs as given.
set -eo pipefail
uid="$(id -u)"
if ! getent passwd "${uid}" >/dev/null; then
    if [ -w /etc/passwd ]; then
        echo "${uid}:x:${uid}:$(id -g):${SPARK_USER_NAME:-anonymous uid}:${SPARK_HOME}:/bin/false" >> /etc/passwd
    else
        echo "Container ENTRYPOINT failed to add passwd entry for anonymous UID" >&2
    fi
fi
exec "$@"
