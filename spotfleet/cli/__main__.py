"""``python -m spotfleet.cli``: the same as the ``spotfleet`` command."""

from spotfleet.cli.main import app

app(prog_name="spotfleet")
