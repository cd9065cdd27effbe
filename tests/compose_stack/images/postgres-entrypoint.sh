#!/usr/bin/env bash
# What docker-compose.yaml relies on in the official postgres image's entrypoint: an empty PGDATA is
# initialised from POSTGRES_USER / POSTGRES_PASSWORD / POSTGRES_DB, then the server runs as postgres.
set -euo pipefail
if [ "$(id -u)" = 0 ]; then
    mkdir -p "${PGDATA}" /var/run/postgresql
    chown -R postgres:postgres "${PGDATA}" /var/run/postgresql
    chmod 0700 "${PGDATA}"
    exec runuser -u postgres -- "$0" "$@"
fi
: "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD is required (the official image refuses to start without it too)}"
user="${POSTGRES_USER:-postgres}"
db="${POSTGRES_DB:-${user}}"
if [ ! -s "${PGDATA}/PG_VERSION" ]; then
    initdb -D "${PGDATA}" --encoding=UTF8 --username="${user}" --pwfile=<(printf '%s\n' "${POSTGRES_PASSWORD}") \
        --auth-local=trust --auth-host=scram-sha-256 >/dev/null
    echo "listen_addresses = '*'" >> "${PGDATA}/postgresql.conf"
    echo "host all all all scram-sha-256" >> "${PGDATA}/pg_hba.conf"
    if [ "${db}" != postgres ]; then
        pg_ctl -D "${PGDATA}" -o "-c listen_addresses=''" -w start >/dev/null
        createdb --username="${user}" "${db}"
        pg_ctl -D "${PGDATA}" -m fast -w stop >/dev/null
    fi
    echo "postgres-entrypoint: initialised ${PGDATA} (user ${user}, database ${db})"
fi
[ "${1:-}" = postgres ] && shift
exec postgres -D "${PGDATA}" "$@"
