"""deltachip firmware: calc (data files; see docs/firmware.md)."""
