"""The chain oracle (:mod:`chain_oracle`) over fixed seeds: every slot of one job's edits, pauses,
resumes and rotations with poller outages runs once, is owed, or is recorded. It found a rotation
in the instant of a resume losing the slots the pause owed (fixed); larger runs:
:func:`chain_oracle.gen` makes a case of any seed and :func:`chain_oracle.check` runs it."""

from __future__ import annotations

import pytest
from chain_oracle import check, gen


@pytest.mark.parametrize("seed", range(60))
def test_every_owed_slot_runs_once_or_is_recorded(seed: int) -> None:
    case = gen(seed)
    failures, _, _ = check(case)
    assert failures == [], case.describe()


def test_a_rotation_in_the_instant_of_a_resume_after_a_paused_outage() -> None:
    """The case the oracle found (lost 15 owed slots before 95d4ff9)."""
    from chain_oracle import Case

    ops = [(750.3, "pause", None), (1110.3, "resume", None), (1110.3, "rotate", None)]
    case = Case(824, "cron(* * * * ? *)", "latest", ops, [(252.6, 1052.6)], 1.0)
    failures, _, _ = check(case)
    assert failures == [], case.describe()
