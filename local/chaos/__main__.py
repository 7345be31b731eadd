"""``python -m local.chaos ...`` is ``punctual-local chaos ...``."""

import sys

from local.chaos.cli import main

sys.exit(main())
