"""Where the scheduler's own code is found at synth: the functions, the layer, the ECS image.

The settings name them relative to the working directory (``functions``, ``build/layer``, the
image's build context ``.``), which is this repository's root when its app synthesises. A user's
app runs elsewhere: a relative path that is not under its working directory is taken from the
checkout the library is installed from (``pip install -e <checkout>/cdk``).
"""

from __future__ import annotations

from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[2]  # cdk/punctual_cdk/assets.py → the repository


def source_path(path: str, marker: str = "") -> str:
    """``path`` as given when it is absolute or ``path/marker`` exists under the working
    directory; else the same path in the checkout (where ``make layer`` builds the layer)."""
    given = Path(path)
    if given.is_absolute() or (given / marker).exists():
        return path
    return str(CHECKOUT / given)
