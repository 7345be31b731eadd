"""Regenerate ``docs/console.png``: the local console of the demo, as README shows it.

Starts ``punctual-local up`` (demo on, free ports), adds one job whose target always fails (so
the page has a failure to show), lets a few minutes' slots fire, and has headless Chromium save
the page. Run from the repository root::

    PYTHONPATH=tests/e2e:tests:. .venv/bin/python tests/e2e/console_screenshot.py [--wait-s 150]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from browser import Chromium

from local import harness


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wait-s", type=float, default=150.0, help="how long the demo fires first")
    parser.add_argument("--out", type=Path, default=harness.REPO / "docs" / "console.png")
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="punctual-console-shot-") as state,
        harness.running(Path(state), tenant="demo") as local,
    ):
        status, body = local.api(
            "POST",
            "/v1/jobs",
            {
                "name": "demo: broken",
                "schedule": "rate(20 seconds)",
                "target": {"type": "http", "url": local.hook("broken?fail=1000000")},
                "retry": {"max_attempts": 1},
                "timeout_seconds": 10,
                "tags": {"demo": "broken"},
            },
        )
        if status != 201:
            sys.stderr.write(f"registering the failing job: {status} {body}\n")
            return 1
        time.sleep(args.wait_s)
        with Chromium(Path(state) / "chromium", width=1280, height=900) as browser:
            browser.load(f"{local.api_url}/console?tenant=demo")
            browser.screenshot(args.out)
            if browser.errors:
                sys.stderr.write(f"console errors: {browser.errors}\n")
                return 1
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
