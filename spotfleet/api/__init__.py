"""The HTTP API (FastAPI): users submit and watch jobs; agents register and report."""
