"""Several "Regions" of local mode over one table: the multi-Region profile on one machine.

Region ``a`` is an ordinary ``punctual-local up`` (:func:`local.harness.start`): it runs the moto
server (the embedded AWS) and the webhook receiver besides its own API, poller and workers. Every
further Region is a ``punctual-local up --attach-aws`` with its own state directory: it uses
Region ``a``'s moto server and table (moto is strongly consistent, which is what a DynamoDB
global table with multi-Region strong consistency gives every Region) and creates its own queues,
named ``punctual-<region>-...``; it runs its own API, poller, ECS worker and Lambda workers. So
each Region releases every slot to its own queues and the claim on the shared table keeps each
slot to one run (docs/multi-region.md, sections 2 and 7).

:meth:`Regions.kill` ends a Region as a Region outage would: every process of it at once
(``SIGKILL`` to its process group); its queues stay in moto with whatever was in them, as an
impaired Region's queues keep their messages. :meth:`Regions.revive` starts it again with the
same state directory and queue names.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from local import harness
from local.config import LOOPBACK, free_port
from local.harness import LocalMode

REGION_NAMES = ("a", "b", "c")
MAX_REGIONS = len(REGION_NAMES)


def region_prefix(name: str) -> str:
    """The queue name prefix of a Region (``a`` keeps local mode's own, ``punctual``)."""
    return "punctual" if name == REGION_NAMES[0] else f"punctual-{name}"


def attached_args(state: Path, home: LocalMode, name: str, api_port: int, extra: Sequence[str]) -> list[str]:
    """``punctual-local up`` arguments of a further Region attached to ``home``'s AWS and receiver."""
    return [
        "up",
        "--state-dir",
        str(state),
        "--no-table",
        "--no-demo",
        "--attach-aws",
        "--name-prefix",
        region_prefix(name),
        "--aws-port",
        home.aws_url.rsplit(":", 1)[1],
        "--receiver-port",
        home.receiver_url.rsplit(":", 1)[1],
        "--api-port",
        str(api_port),
        *marks_scope(name),
        *extra,
    ]


def marks_scope(name: str) -> list[str]:
    """A Region's own watermarks and progress marks, as each Region's stack sets them in the cloud
    (``PUNCTUAL_MARKS_SCOPE``: docs/multi-region.md, section 2)."""
    return ["--set", f"PUNCTUAL_MARKS_SCOPE={name}"]


# Keys every Region holds alike: webhook secrets are encrypted under one key (in the cloud a
# multi-Region KMS key with a replica in each Region) and a paging token from one Region's API
# pages in another's. The dispatch key stays per Region: a Region verifies only its own messages.
SHARED_KEYS = ("secret.key", "token.key")


def share_keys(home_state: Path, state: Path) -> None:
    """Give a Region's state directory the home Region's shared keys (once)."""
    run = state / "run"
    run.mkdir(parents=True, exist_ok=True)
    for name in SHARED_KEYS:
        source, target = home_state / "run" / name, run / name
        if source.exists() and not target.exists():
            target.write_text(source.read_text())
            target.chmod(0o600)


@dataclass
class Regions:
    """Region ``a`` (the AWS host) and the Regions attached to it, by name."""

    root: Path
    tenant: str
    extra: tuple[str, ...] = ()
    regions: dict[str, LocalMode] = field(default_factory=dict)
    _api_ports: dict[str, int] = field(default_factory=dict)

    @property
    def home(self) -> LocalMode:
        return self.regions[REGION_NAMES[0]]

    def names(self) -> list[str]:
        return list(self.regions)

    def start(self, count: int) -> None:
        """Start ``count`` Regions (2 or 3) and wait until each answers."""
        if not 2 <= count <= MAX_REGIONS:
            raise ValueError(f"2 to {MAX_REGIONS} Regions, not {count}")
        first = REGION_NAMES[0]
        self.regions[first] = harness.start(
            self.root / first, "--no-demo", *marks_scope(first), *self.extra, tenant=self.tenant
        )
        self.home.wait_ready()
        for name in REGION_NAMES[1:count]:
            self._api_ports[name] = free_port()
            self.revive(name)

    def revive(self, name: str) -> LocalMode:
        """(Re)start an attached Region with its state directory, queues and API port."""
        if name == REGION_NAMES[0]:
            raise ValueError("Region a hosts the embedded AWS: it is not stopped or restarted here")
        state = self.root / name
        share_keys(self.home.state, state)
        port = self._api_ports[name]
        output = state / "up.out"
        if output.exists():  # keep the log of the Region's life before the outage
            output.replace(state / f"up.{len(list(state.glob('up.*.out')))}.out")
        region = LocalMode(
            process=harness.spawn(attached_args(state, self.home, name, port, self.extra), output),
            state=state,
            output=output,
            api_url=f"http://{LOOPBACK}:{port}",
            receiver_url=self.home.receiver_url,
            aws_url=self.home.aws_url,
            tenant=self.tenant,
            demo=False,
        )
        self.regions[name] = region
        region.wait_ready()
        return region

    def kill(self, name: str) -> list[int]:
        """A Region outage: SIGKILL every process of the Region at once; returns their pids."""
        if name == REGION_NAMES[0]:
            raise ValueError("Region a hosts the embedded AWS: kill an attached Region")
        region = self.regions[name]
        pids = sorted(region.pids().values())
        with contextlib.suppress(ProcessLookupError):
            os.killpg(region.process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            region.process.wait(timeout=30)
        return pids

    def api_round_robin(self) -> Iterator[tuple[str, LocalMode]]:
        """The Regions in turn, forever (each request of a workload to the next Region's API)."""
        while True:
            yield from list(self.regions.items())

    def stop(self) -> None:
        """Stop every Region, the attached ones first (Region ``a`` holds their AWS)."""
        for name in reversed(list(self.regions)):
            self.regions[name].stop()

    def describe(self) -> dict[str, Any]:
        return {
            name: {"api": region.api_url, "queues": region_prefix(name), "state": str(region.state)}
            for name, region in self.regions.items()
        }
