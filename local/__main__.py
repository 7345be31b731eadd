"""``python -m local ...`` is ``punctual-local ...`` (the supervisor starts components this way)."""

import sys

from local.cli import main

sys.exit(main())
