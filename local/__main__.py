"""``python -m local ...`` is ``punctual-local ...`` (the supervisor starts components this way).

With ``PUNCTUAL_LOCAL_ZYGOTE=1`` the process is a component's zygote instead (:mod:`local.zygote`):
prepared once, it forks a fresh child running the component for each start the supervisor asks for.
"""

import os
import signal
import sys

if os.environ.get("PUNCTUAL_LOCAL_ZYGOTE") == "1" or os.environ.get("PUNCTUAL_LOCAL_SUPERVISED") == "1":
    # The terminal's Ctrl-C reaches the whole process group; the supervisor stops its components in
    # order. Ignored before the imports: a Ctrl-C during a start-up's seconds of imports killed a
    # component (or a zygote, which alone reports its children's exits) with a KeyboardInterrupt.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # So is a closed terminal's (or dropped ssh session's) SIGHUP: it killed every component at
    # once, AWS unsaved, and the next start had no job left.
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    if os.environ.get("PUNCTUAL_LOCAL_ORDERED_STOP") == "1":  # (local.component.stopped_in_order)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the group's: the supervisor stops it last

if os.environ.get("PUNCTUAL_LOCAL_ZYGOTE") == "1":
    from local.cli import main, prepare_zygote
    from local.zygote import serve

    sys.exit(serve(sys.argv[1:], main, prepare_zygote))

from local.cli import main

sys.exit(main())
