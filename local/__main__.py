"""``python -m local ...`` is ``punctual-local ...`` (the supervisor starts components this way).

With ``PUNCTUAL_LOCAL_ZYGOTE=1`` the process is a component's zygote instead (:mod:`local.zygote`):
prepared once, it forks a fresh child running the component for each start the supervisor asks for.
"""

import os
import sys

if os.environ.get("PUNCTUAL_LOCAL_ZYGOTE") == "1":
    from local.cli import main, prepare_zygote
    from local.zygote import serve

    sys.exit(serve(sys.argv[1:], main, prepare_zygote))

from local.cli import main

sys.exit(main())
