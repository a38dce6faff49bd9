"""The extension authors' test harness: a pytest plugin with a `hyphae_host` fixture.

Register it once in your tests' `conftest.py`:

```python
pytest_plugins = ["extensions_host.testing"]
```

then load your extension into a host, call its commands, move the clock, settle runs, emit
lifecycle events and assert on what it did — all through the host's real services:

```python
def test_a_reminder_fires_once(hyphae_host):
    hyphae_host.install(reminders)
    cid = hyphae_host.conversation("c1")
    hyphae_host.command("reminders", "remind", {"text": "stretch", "in_seconds": 60},
                        conversation_id=cid)
    hyphae_host.advance(seconds=60)
    assert hyphae_host.fire_timers() == 1
    assert [p.text for p in hyphae_host.sent(cid)] == ["Reminder: stretch"]
```

`docs/extending.md` documents every method of `TestHost`.
"""

from __future__ import annotations

from extensions_host.testing.host import ExtensionState, SentPrompt, TestHost, Turn, running_host
from extensions_host.testing.plugin import hyphae_host

__all__ = ["ExtensionState", "SentPrompt", "TestHost", "Turn", "hyphae_host", "running_host"]
