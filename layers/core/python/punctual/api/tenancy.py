"""Who is calling: the tenant every route acts for.

In the cloud every method is IAM-authorised (SigV4), and API Gateway puts the verified
caller in ``requestContext.identity``. The tenant is that principal:

* an IAM user or the account root: its ARN (``arn:aws:iam::123456789012:user/alice``);
* an assumed role: the *role*, not the session (``arn:aws:sts::1234:assumed-role/Ops/s-1``
  becomes ``arn:aws:iam::1234:role/Ops``), so every session of a role, e.g. each Lambda
  invocation or each SSO login, sees the same jobs;
* otherwise ``caller``, then ``accountId``.

In local mode only (``PUNCTUAL_LOCAL_MODE=1``; there is no SigV4 on loopback) the header
``X-Punctual-Tenant`` names the tenant, ``default`` when absent. Outside local mode the
header is ignored, so a cloud caller cannot claim another tenant.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from punctual.api.problems import ApiProblem

TENANT_HEADER = "X-Punctual-Tenant"
DEFAULT_LOCAL_TENANT = "default"
# '#' separates key parts in the table; control characters have no place in a name.
_TENANT_RE = re.compile(r"^[A-Za-z0-9._:/@+=,\-]{1,256}$")
_ASSUMED_ROLE_RE = re.compile(
    r"^arn:(?P<partition>[\w-]+):sts::(?P<account>\d{12}):assumed-role/(?P<role>[^/]+)/.+$"
)


def normalise_principal(arn: str) -> str:
    """The tenant for an IAM principal ARN (an assumed-role session maps to its role)."""
    match = _ASSUMED_ROLE_RE.match(arn)
    if match:
        return f"arn:{match['partition']}:iam::{match['account']}:role/{match['role']}"
    return arn


def _header(headers: Mapping[str, Any] | None, name: str) -> str | None:
    for key, value in (headers or {}).items():
        if key.lower() == name.lower():
            return str(value) if value is not None else None
    return None


def tenant_of(event: Mapping[str, Any], local_mode: bool) -> str:
    """The tenant of an API Gateway REST (v1) proxy event.

    Parameters
    ----------
    event
        The proxy event as API Gateway sends it.
    local_mode
        Whether ``X-Punctual-Tenant`` may name the tenant (never in the cloud).

    Returns
    -------
    str

    Raises
    ------
    ApiProblem
        401 when no caller identity is present; 400 when the local tenant header is invalid.
    """
    if local_mode:
        claimed = _header(event.get("headers"), TENANT_HEADER)
        tenant = (claimed or "").strip() or DEFAULT_LOCAL_TENANT
        if not _TENANT_RE.match(tenant):
            raise ApiProblem(
                400,
                "invalid-tenant",
                "Invalid tenant",
                f"{TENANT_HEADER} must be 1-256 characters of letters, digits and ._:/@+=,-",
                [(f"header.{TENANT_HEADER}", "invalid tenant name")],
            )
        return tenant
    identity = (event.get("requestContext") or {}).get("identity") or {}
    for candidate in (identity.get("userArn"), identity.get("caller"), identity.get("accountId")):
        if isinstance(candidate, str) and candidate.strip():
            tenant = normalise_principal(candidate.strip())
            if _TENANT_RE.match(tenant):
                return tenant
    raise ApiProblem(
        401,
        "unauthenticated",
        "Unauthenticated",
        "no caller identity in the request; sign requests with SigV4 (service execute-api)",
    )
