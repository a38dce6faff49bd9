"""The embedded broker: kombu's filesystem transport, with every message whole when it appears.

kombu's own `_put` creates the message file under its final name and writes it afterwards, and
a consumer moves and reads any file with that name without waiting for the writer's lock: it can
read an empty file, and the worker stops on the `JSONDecodeError` ("Unrecoverable error"). Here a
message is written under a name no consumer looks at and renamed into place (`os.replace` is
atomic within one folder), so a consumer sees either nothing or the whole message.

`config/celery.py` makes it what `filesystem://` names (kombu's transport aliases).
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps


class Channel(filesystem.Channel):
    # the stubs' two bases disagree (`message` in AbstractChannel, `payload` here): kombu's
    # filesystem Channel is the one this overrides
    def _put(self, queue: str, payload: dict[str, Any], **kwargs: Any) -> None:  # type: ignore[override]
        data = str_to_bytes(dumps(payload))
        name = f"{round(time.monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        # a leading dot and no `.<queue>.msg`: no consumer picks a message up before the rename
        partial = os.path.join(self.data_folder_out, f".{uuid.uuid4()}.partial")
        try:
            with open(partial, "wb") as file:
                file.write(data)
            os.replace(partial, final)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(partial)
            raise ChannelError(f"Cannot add file {final!r} to directory") from exc


class Transport(filesystem.Transport):
    Channel = Channel
