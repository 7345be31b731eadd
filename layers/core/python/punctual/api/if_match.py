"""The versions an ``If-Match`` header lists, read one way for every use: the routes' precondition
(:mod:`punctual.api.conditional`) and the answer to a change that lost a race
(:mod:`punctual.api.problems`). No API imports: both of those import it."""

from __future__ import annotations

MAX_VERSION_DIGITS = 12


class BadIfMatchError(ValueError):
    """An ``If-Match`` entry that is not a version."""


def if_match_versions(if_match: str | None) -> list[int] | None:
    """The versions ``If-Match`` lists: ``"3"`` (or ``3``, ``W/"3"``), or a comma-separated list of
    them (``"3", "4"``); None when it is absent or ``*`` (no precondition).

    Raises
    ------
    BadIfMatchError
        When an entry is not a version (empty list elements are ignored; a header of none is one).
    """
    if if_match is None or if_match.strip() == "*":
        return None
    versions = []
    entries = [entry.strip() for entry in if_match.split(",")]
    for entry in [entry for entry in entries if entry] or [""]:
        text = entry.removeprefix("W/")
        text = text.removeprefix('"').removesuffix('"')  # one quote a side, as the document's pattern
        # ASCII digits only: str.isdigit() takes '²' (which int() refuses) and '٣'.
        if not (text.isascii() and text.isdigit()) or len(text) > MAX_VERSION_DIGITS:
            raise BadIfMatchError(entry)
        versions.append(int(text))
    return versions
