"""The rules of the conversation capabilities, one module per concern: `send`, `attention`,
`participation`, `toolcalls`, `interactions`, `ambient` (and `common` for what they share)."""
