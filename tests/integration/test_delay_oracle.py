"""The delay oracle (:mod:`delay_oracle`) over fixed seeds: one ``delay(...)`` job's runs of 0 s to
3 minutes through replaces, pauses, resumes and rotations, poller outages and workers behind
keep one chain: no slot twice, no overlap (but a slot a change cut, as the docs allow), each run
N after the previous one's end, never a stop. :func:`delay_oracle.gen` makes a case of any seed
and :func:`delay_oracle.check` runs it.

Below, the smallest cases of what it found: chains that stopped for good (fixed by c36d3d0) and a
rotation that started a run less than N after the previous one (a change now restarts the chain
N after itself, the job's anchor moved there).
"""

from __future__ import annotations

import pytest
from delay_oracle import Case, Op, check, gen

# Seed 3205: an identical replace after a run that a replace with another N had deferred to
# started the next run at that replace's anchor + N, less than N after the run's end
SEEDS = [*range(30), 3205]


@pytest.mark.parametrize("seed", SEEDS)
def test_one_delay_chain_through_changes_outages_and_workers_behind(seed: int) -> None:
    case = gen(seed)
    failures, _ = check(case)
    assert failures == [], case.describe()


FOUND = {
    # each stopped the chain for good before c36d3d0
    "N changed in an outage, after the head came due": Case(
        0, "delay(1 minute)", [Op(90.3, "replace-delay", "delay(2 minutes)")], [(40.1, 180.1)], [], 1.0
    ),
    "N changed 0.3 s after the head came due, no poller had met it": Case(
        0, "delay(1 minute)", [Op(5.3, "replace-delay", "delay(2 minutes)", "due", 0.3, 2.0)], [], [], 1.0
    ),
    "replaced after a resume, past the pause's instant plus N": Case(
        0,
        "delay(2 minutes)",
        [Op(150.3, "pause"), Op(180.3, "resume"), Op(285.3, "replace-payload")],
        [],
        [],
        1.0,
        "short",
    ),
    "replaced after the head came due in an outage, then paused": Case(
        0,
        "delay(1 minute)",
        [Op(90.3, "replace-identical"), Op(120.3, "pause"), Op(240.3, "resume")],
        [(40.1, 180.1)],
        [],
        1.0,
        "short",
    ),
    # documented since c36d3d0: the released slot runs once, beside the chain the resume starts
    "paused and resumed between a release and its claim": Case(
        0,
        "delay(1 minute)",
        [Op(5.3, "pause", None, "release", 1.0, 10.0), Op(5.5, "resume", None, "release", 2.0, 10.0)],
        [],
        [],
        1.0,
        "long",
    ),
}


@pytest.mark.parametrize("name", list(FOUND))
def test_what_the_oracle_found(name: str) -> None:
    case = FOUND[name]
    failures, _ = check(case)
    assert failures == [], case.describe()


def test_a_rotation_after_a_run_a_replace_with_another_n_deferred_to() -> None:
    # 10:01:30 runs 120.0..148.7 s; 130.3 s delay(1 minute), deferred to it (anchor 131 s);
    # 152.3 s a rotation: the next run started at 191 s (anchor + N), 42.3 s after the end; now at
    # 213 s, N after the rotation
    ops = [Op(130.3, "replace-delay", "delay(1 minute)"), Op(152.3, "rotate")]
    case = Case(0, "delay(2 minutes)", ops, [], [], 1.0, "mixed")
    failures, _ = check(case)
    assert failures == [], case.describe()
