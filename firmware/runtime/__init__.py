"""deltachip firmware: runtime (data files; see docs/firmware.md)."""
