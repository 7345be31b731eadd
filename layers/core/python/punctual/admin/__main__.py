"""``python -m punctual.admin``: the ``punctual-admin`` command."""

from punctual.admin import main

raise SystemExit(main())
