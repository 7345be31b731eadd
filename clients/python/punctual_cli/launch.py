"""The ``punctual`` console script's entry point: the command, and a Ctrl-C while it starts.

Importing the command (the core's schedules and models, pydantic) takes half a second on an idle
machine and seconds on a busy one; a Ctrl-C then (right after Enter) raised KeyboardInterrupt in
the console script's own import line, outside every handler of :func:`punctual_cli.cli.main`, and
printed the import stack (QA30). Here the import is inside the handler: nothing was sent yet, so
the interrupt is told as any other (``punctual: interrupted``, status 130). Only the standard
library is imported before it.
"""

from __future__ import annotations

import sys

INTERRUPTED = 130


def main() -> int:
    """Run the ``punctual`` command (:func:`punctual_cli.cli.main`); 130 when interrupted while
    it is imported."""
    try:
        from punctual_cli.cli import main as command
    except KeyboardInterrupt:
        sys.stderr.write("punctual: interrupted\n")
        return INTERRUPTED
    return command()
