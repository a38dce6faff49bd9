"""An extension module that shadows a core slash command: importing it must fail."""

from __future__ import annotations

from extensions_host.sdk import Extension, SlashCommand

bad = Extension(
    id="shadow",
    version="1.0.0",
    grants={"commands"},
    slash_commands=[SlashCommand("fork", run=lambda ctx, inv: None)],
)
