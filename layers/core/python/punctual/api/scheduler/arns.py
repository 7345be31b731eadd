"""Schedule and schedule-group ARNs, shaped like EventBridge Scheduler's, in the deployment's
account and region: ``arn:<partition>:scheduler:<region>:<account>:schedule/<group>/<name>`` and
``...:schedule-group/<group>``.

The account is the API's own (``requestContext.accountId`` of the API Gateway event: local mode
puts its moto's there; an event without one, ``000000000000``), the region the function's
(``AWS_REGION``), or ``PUNCTUAL_ARN_REGION`` when set: a multi-Region deployment's home Region, so
that every Region's API names a schedule alike (a client that fails over keeps its ARNs). Such an
API also takes an ARN naming its own Region.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from punctual.runtime.settings import Platform

_ACCOUNT_RE = re.compile(r"^\d{12}\Z")
_GROUP_ARN_RE = re.compile(
    r"^arn:(?P<partition>aws[a-z-]*):scheduler:(?P<region>[a-z0-9-]+):(?P<account>\d{12})"
    r":schedule-group/(?P<group>[0-9a-zA-Z_.-]{1,64})\Z"
)
LOCAL_ACCOUNT = "000000000000"


def partition_of(region: str) -> str:
    if region.startswith("cn-"):
        return "aws-cn"
    if region.startswith("us-gov-"):
        return "aws-us-gov"
    return "aws"


@dataclass(frozen=True)
class Place:
    """Where the API runs: the account and region its ARNs name."""

    account: str
    region: str
    serving: str = ""  # the Region of the API itself, when its ARNs name another (arn_region)

    @classmethod
    def of(cls, event: Mapping[str, Any], arn_region: str = "") -> Place:
        account = str((event.get("requestContext") or {}).get("accountId") or "")
        region = Platform.from_env().region
        return cls(account if _ACCOUNT_RE.match(account) else LOCAL_ACCOUNT, arn_region or region, region)

    @property
    def prefix(self) -> str:
        return f"arn:{partition_of(self.region)}:scheduler:{self.region}:{self.account}"

    def schedule_arn(self, group: str, name: str) -> str:
        return f"{self.prefix}:schedule/{group}/{name}"

    def group_arn(self, group: str) -> str:
        return f"{self.prefix}:schedule-group/{group}"

    def group_of(self, arn: str) -> str | None:
        """The group a schedule-group ARN names, or None when it is not one of this place's."""
        match = _GROUP_ARN_RE.match(arn)
        if not match or match.group("account") != self.account:
            return None
        if match.group("region") not in (self.region, self.serving or self.region):
            return None
        return match.group("group")
