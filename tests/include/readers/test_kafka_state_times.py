"""kafka_state's millisecond for a time: what offsets_for_times asks Kafka's ListOffsets for.

The lookup itself runs against the real broker in the backfill-by-time tests
(tests/integration/test_manual_ops.py, test_airflow_backfill.py).
"""

from __future__ import annotations

from datetime import UTC, datetime

import pendulum

from include.readers.kafka_state import epoch_ms


def test_the_exact_millisecond_past_2038():
    # 2038-04-04T00:40:22.186 is 2153954422186 ms; float seconds times 1000 gave ...185.
    assert epoch_ms(datetime(2038, 4, 4, 0, 40, 22, 186000, tzinfo=UTC)) == 2_153_954_422_186


def test_a_pendulum_datetime_as_airflow_hands_it_gives_the_same_millisecond():
    # A backfill's data interval arrives as pendulum DateTimes; their difference is a pendulum Interval,
    # which `// timedelta(...)` broke with an AttributeError in every backfill run's check_request.
    when = pendulum.datetime(2038, 4, 4, 2, 40, 22, 186000, tz="Europe/Berlin")
    assert epoch_ms(when) == 2_153_954_422_186
