#!/usr/bin/env bash
# The official image's /etc/kafka/docker/run, as far as docker-compose.yaml uses it: every KAFKA_*
# variable but the JVM's becomes a broker property (KAFKA_NODE_ID -> node.id: "_" is ".", "__" is "_",
# "___" is "-"), the storage is formatted with CLUSTER_ID unless it already is, and the broker starts.
set -euo pipefail
: "${CLUSTER_ID:?CLUSTER_ID is required in KRaft mode}"
props=/opt/kafka/config/server.properties
: > "${props}"
while IFS='=' read -r name value; do
    case "${name}" in
        KAFKA_HEAP_OPTS | KAFKA_OPTS | KAFKA_JVM_PERFORMANCE_OPTS | KAFKA_GC_LOG_OPTS | KAFKA_JMX_OPTS \
            | KAFKA_JMX_PORT | KAFKA_JMX_HOSTNAME | KAFKA_VERSION | KAFKA_LOG4J_* | KAFKA_TOOLS_*) continue ;;
        KAFKA_*) ;;
        *) continue ;;
    esac
    key="${name#KAFKA_}"
    key="${key,,}"
    key="${key//___/-}"
    key="${key//__/$'\x01'}"
    key="${key//_/.}"
    key="${key//$'\x01'/_}"
    printf '%s=%s\n' "${key}" "${value}" >> "${props}"
done < <(env)
/opt/kafka/bin/kafka-storage.sh format --cluster-id "${CLUSTER_ID}" -c "${props}" --ignore-formatted
exec /opt/kafka/bin/kafka-server-start.sh "${props}"
