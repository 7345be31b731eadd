"""The one reading of an If-Match header (punctual.api.if_match), shared by the routes'
precondition and the 412 answer to a change that lost a race."""

from __future__ import annotations

import pytest

from punctual.api.if_match import BadIfMatchError, if_match_versions


@pytest.mark.parametrize(
    ("header", "versions"),
    [
        (None, None),
        ("*", None),
        (" * ", None),
        ('"3"', [3]),
        ("3", [3]),
        ('W/"3"', [3]),
        ('"3", "4"', [3, 4]),
        ('"3",, "4",', [3, 4]),
    ],
)
def test_versions_listed(header: str | None, versions: list[int] | None) -> None:
    assert if_match_versions(header) == versions


@pytest.mark.parametrize("header", ["", " , ", '"x"', '"3x"', "\u0663", "\u00b2", "1" * 13, '""'])
def test_not_a_version_is_refused(header: str) -> None:
    with pytest.raises(BadIfMatchError):
        if_match_versions(header)
