"""The bench extensions, installed through `HOST_EXTENSIONS` by `bench.settings`.

Nothing is imported here at settings time: `extension_paths()` only names the modules.
"""

from __future__ import annotations

CONSUMERS = 10  # B-settled: settled runs delivered to 10 consumers
PROJECTING = 20  # B-projection: a projection of 20 extensions


def extension_paths() -> list[str]:
    """Dotted paths of every bench extension (`module:attribute`)."""
    return [
        "bench.extensions.timers:timers_ext",
        "bench.extensions.timers:pending_ext",
        *(f"bench.extensions.settled:c{i:02d}" for i in range(CONSUMERS)),
        "bench.extensions.api:api_ext",
        *(f"bench.extensions.api:p{i:02d}" for i in range(1, PROJECTING)),
    ]
