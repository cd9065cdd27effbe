"""Kafka reads and admin calls from the Airflow side, with confluent-kafka (no JVM).

Topic creation for the demo, benchmark and tests, and the per-partition
watermarks that lag and progress reports compare the table against.
"""

from __future__ import annotations

import uuid


def create_topic(bootstrap: str, topic: str, partitions: int, timeout_s: float = 60, **config: str) -> None:
    """Create ``topic`` (replication 1) and wait until the broker confirms it."""
    from confluent_kafka.admin import AdminClient, NewTopic

    # The client must outlive the future: a collected client cancels it.
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1, config=config)])[topic].result(timeout=timeout_s)


def delete_topic(bootstrap: str, topic: str, timeout_s: float = 60) -> None:
    """Delete ``topic`` and wait until the broker confirms it."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic])[topic].result(timeout=timeout_s)


def watermarks(bootstrap: str, topic: str, timeout_s: float = 30) -> dict[int, tuple[int, int]]:
    """``{partition: (earliest offset, end offset)}`` of ``topic``, as Kafka reports them now."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"kde-inspect-{uuid.uuid4().hex[:8]}"})
    try:
        meta = consumer.list_topics(topic, timeout=timeout_s).topics[topic]
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)
            for p in sorted(meta.partitions)
        }
    finally:
        consumer.close()
