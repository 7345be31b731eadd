"""Option types shared by ``punctual-local up`` and ``python -m local.chaos``: the fault sizes a
chaos run hands to the local mode it starts are refused by the run's own parser, with the same
words, not by that local mode once it starts."""

from __future__ import annotations

import argparse


def parsed(text: str, what: str) -> float:
    """``text`` as a number; else the option's error ``not <what>: '<text>'``."""
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not {what}: {text!r}") from None


def seconds_behind(text: str) -> float:
    """How far DynamoDB's eventually consistent reads may answer behind: 0 to 60 seconds."""
    value = parsed(text, "a number of seconds")
    if not 0 <= value <= 60:
        raise argparse.ArgumentTypeError("stale reads are 0 to 60 seconds behind")
    return value


def share(text: str) -> float:
    """A share of calls or writes that fail on purpose: 0 to below 1."""
    value = parsed(text, "a share between 0 and 1")
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(
            f"a share from 0 to below 1 (at 1 none would ever succeed), not {text}"
        )
    return value
