"""``python -m punctual_cli``: the ``punctual`` command."""

import sys

from punctual_cli.launch import main

sys.exit(main())
