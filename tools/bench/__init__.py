"""Benchmarks; see README.md."""

import signal
import sys


def exit_on_sigterm() -> None:
    """Turn SIGTERM into SystemExit, so that a benchmark killed with
    ``kill`` stops the servers it started, as Ctrl-C does."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(143))
