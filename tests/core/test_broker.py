"""The embedded broker never hands a consumer a message its producer is still writing."""

from __future__ import annotations

import pytest
from kombu import Connection

from core import broker

QUEUE = "race"


@pytest.fixture
def folders(tmp_path):
    for name in ("queue", "processed", "control"):
        (tmp_path / name).mkdir()
    return {
        "data_folder_in": str(tmp_path / "queue"),
        "data_folder_out": str(tmp_path / "queue"),
        "processed_folder": str(tmp_path / "processed"),
        "control_folder": str(tmp_path / "control"),
        "store_processed": False,
    }


class ConsumerProbe:
    """Serialized by kombu's JSON encoder while the message is being put: it asks a consumer
    for the queue's next message at that very moment."""

    def __init__(self, consumer) -> None:
        self.consumer = consumer
        self.seen: list[object] = []

    def __json__(self) -> str:
        try:
            self.seen.append(self.consumer._get(QUEUE))
        except Exception as exc:  # the probe records what the consumer met
            self.seen.append(exc)
        return "probe"


def test_a_message_being_written_is_invisible_then_whole(folders):
    transport = "core.broker:Transport"
    with (
        Connection("filesystem://", transport=transport, transport_options=folders) as producer,
        Connection("filesystem://", transport=transport, transport_options=folders) as consumer,
    ):
        assert isinstance(producer.default_channel, broker.Channel)
        probe = ConsumerProbe(consumer.default_channel)
        producer.default_channel._put(QUEUE, {"body": probe})

        # kombu's own transport had created the file by now: the consumer read it empty
        (during,) = probe.seen
        assert type(during).__name__ == "Empty", during
        assert consumer.default_channel._get(QUEUE) == {"body": "probe"}


def test_filesystem_urls_name_it_in_every_process_of_the_app(folders):
    import config.celery  # noqa: F401  (what every web, worker and beat process loads)

    with Connection("filesystem://", transport_options=folders) as connection:
        assert isinstance(connection.default_channel, broker.Channel)
