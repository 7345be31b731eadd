"""``python -m local ...`` is ``punctual-local ...`` (the supervisor starts components this way)."""

import os
import signal
import sys
import threading

# A warm spare may be activated (SIGUSR1) while it is still importing: remember it from the start,
# rather than die of the signal's default action (local.component.activated waits on this).
ACTIVATED = threading.Event()
if os.environ.get("PUNCTUAL_LOCAL_SPARE") == "1":
    signal.signal(signal.SIGUSR1, lambda signum, frame: ACTIVATED.set())

from local.cli import main  # noqa: E402  (after the handler: the imports take seconds)

sys.exit(main())
