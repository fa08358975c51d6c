"""Run one metadata emulator in the foreground (one per fake instance).

    python -m spotfleet.metadata --flavor aws --port 0 --instance-id i-1 \\
        --zone us-east-1a --port-file /tmp/i-1.port

The bound port is written to ``--port-file`` atomically (temp file + rename) once
the server accepts connections, so a parent can wait for the file and connect.
Stops on SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from pathlib import Path

from spotfleet.metadata import server_for


def _write_port(path: Path, port: int) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(f"{port}\n")
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m spotfleet.metadata", description=__doc__.splitlines()[0])
    parser.add_argument("--flavor", choices=("aws", "gcp"), required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--instance-id", required=True)
    parser.add_argument("--zone", required=True)
    parser.add_argument("--port-file", type=Path, help="write the bound port here")
    args = parser.parse_args(argv)

    server = server_for(args.flavor, instance_id=args.instance_id, zone=args.zone, host=args.host, port=args.port)
    server.start()
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    if args.port_file is not None:
        _write_port(args.port_file, server.port)
    print(f"{args.flavor} metadata for {args.instance_id} on {server.url}", flush=True)
    try:
        stop.wait()
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
