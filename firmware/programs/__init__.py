"""deltachip firmware: programs (data files; see docs/firmware.md)."""
