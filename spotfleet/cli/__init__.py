"""The ``spotfleet`` command line (typer + rich)."""
