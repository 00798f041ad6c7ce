"""Subcommands of the ``deltachip`` CLI, one module each (see ``deltachip.cli``)."""
