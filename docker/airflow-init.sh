#!/usr/bin/env bash
# One-shot set-up of the compose stack (service airflow-init, run as root):
#   1. the shared volumes belong to the Airflow uid, which the Spark containers use too;
#   2. Airflow's secrets exist, generated once, readable only by that uid;
#   3. the admin login of Airflow's simple auth manager;
#   4. the metadata database is migrated.
# Safe to run again: secrets are kept, the password and the migration are re-applied.
set -euo pipefail

uid="${AIRFLOW_UID:-50000}"
secrets="${KDE_VAR_DIR}/secrets"
passwords="${AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE}"

mkdir -p "${KDE_LAKEHOUSE_ROOT}" "${KDE_VAR_DIR}" "${secrets}" "$(dirname "${passwords}")" /opt/airflow/logs
# Only the top folders: what lies below was written by that uid already, and a
# recursive chown of a grown lakehouse would take minutes at every start.
chown "${uid}:0" "${KDE_LAKEHOUSE_ROOT}" "${KDE_VAR_DIR}" "${secrets}" "$(dirname "${passwords}")"
chmod 0775 "${KDE_LAKEHOUSE_ROOT}" "${KDE_VAR_DIR}"
chmod 0700 "${secrets}"
chown -R "${uid}:0" /opt/airflow/logs

new_secret() {
    local file="${secrets}/$1"
    if [ ! -s "${file}" ]; then
        python -c "$2" > "${file}"
        echo "airflow-init: generated ${file}"
    fi
    chown "${uid}:0" "${file}"
    chmod 0400 "${file}"
}
new_secret jwt_secret 'import secrets; print(secrets.token_urlsafe(48))'
new_secret api_secret_key 'import secrets; print(secrets.token_urlsafe(48))'
new_secret fernet_key 'from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())'

# The password comes from the environment, so changing AIRFLOW_ADMIN_PASSWORD
# and running airflow-init again changes the login.
AIRFLOW_ADMIN_PASSWORD="${AIRFLOW_ADMIN_PASSWORD:-admin}" python -c '
import json, os, sys
with open(sys.argv[1], "w") as f:
    json.dump({"admin": os.environ["AIRFLOW_ADMIN_PASSWORD"]}, f)
' "${passwords}"
chown "${uid}:0" "${passwords}"
chmod 0600 "${passwords}"

airflow db migrate
# Anything the migration logged under /opt/airflow/logs must stay writable for the components.
chown -R "${uid}:0" /opt/airflow/logs
echo "airflow-init: done; the UI is http://localhost:8080 (user admin)"
