#!/usr/bin/env bash
# /opt/kafka/bin/<tool>.sh of the official image, for the tools docker-compose.yaml and its guide call:
# the script's name picks the main class, as Kafka's own kafka-run-class.sh wrappers do.
set -euo pipefail
case "$(basename "$0" .sh)" in
    kafka-server-start) main=kafka.Kafka; heap="${KAFKA_HEAP_OPTS:--Xmx1g}" ;;
    kafka-storage) main=kafka.tools.StorageTool; heap=-Xmx256m ;;
    kafka-topics) main=org.apache.kafka.tools.TopicCommand; heap=-Xmx256m ;;
    kafka-broker-api-versions) main=org.apache.kafka.tools.BrokerApiVersionsCommand; heap=-Xmx256m ;;
    kafka-consumer-groups) main=org.apache.kafka.tools.consumer.group.ConsumerGroupCommand; heap=-Xmx256m ;;
    *) echo "kafka-tool.sh: no tool called $(basename "$0")" >&2; exit 2 ;;
esac
[ "${main}" = kafka.Kafka ] || export KAFKA_LOG_LEVEL="${KAFKA_TOOLS_LOG_LEVEL:-WARN}"
# shellcheck disable=SC2086  # the options are a list of words, as in Kafka's scripts
exec java ${heap} -XX:+UseSerialGC -Dlog4j2.configurationFile=/opt/kafka/config/log4j2.properties \
    -cp '/opt/kafka/libs/*' "${main}" "$@"
