"""MicroPython for the deltachip core: the port (this folder) and its build (build.py)."""
