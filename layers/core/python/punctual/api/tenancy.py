"""Who is calling: the tenant every route acts for.

In the cloud every method is IAM-authorised (SigV4), and API Gateway puts the verified
caller in ``requestContext.identity``. The tenant is that principal's *unique id*, the one
IAM gives it at creation and never reuses (``identity.user``, else ``identity.caller``):

* an IAM user: its user id (``AIDAJQABLZS4A3QDU576Q``);
* an assumed role: the *role's* id, not the session's (``AROA3XFRBF535PLBIFPI4:s-1`` becomes
  ``AROA3XFRBF535PLBIFPI4``), so every session of a role, e.g. each Lambda invocation or each
  SSO login, sees the same jobs;
* the account root: the account id (``123456789012``).

A **federated user** (credentials from ``GetFederationToken``) is refused (403
``federated-caller``): all IAM gives for it is ``<account id>:<name>``, and the caller chooses
the name in the request, so any principal allowed to call ``GetFederationToken`` could name
itself into another federated tenant. Nothing the caller cannot choose is in the request (the
IAM user that asked for the token is not), so there is no identity to map it to. SSO, SAML and
web-identity logins are role sessions (``AROA...:session``) and are not affected.

Not the ARN or the name: a role deleted and recreated under the same name gets a new id, and
so does not inherit the old role's jobs (issue 16). Jobs registered while the tenant was the
ARN move with :func:`punctual.admin.tenant_moves.move_jobs` (see docs/tenants.md).

In local mode only (``PUNCTUAL_LOCAL_MODE=1``; there is no SigV4 on loopback) the header
``X-Punctual-Tenant`` names the tenant (sent blank: 400); without it, a request signed with
SigV4 (an unmodified AWS SDK, e.g. boto3's ``scheduler`` client) acts for the access key id of its signature
(``Credential=<key id>/...``; the signature is not checked), else for ``default``. Outside
local mode the header and the key are ignored, so a cloud caller cannot claim another tenant.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from punctual.api.problems import ApiProblem

TENANT_HEADER = "X-Punctual-Tenant"
DEFAULT_LOCAL_TENANT = "default"
# '#' separates key parts in the table; control characters have no place in a name.
_TENANT_RE = re.compile(r"^[A-Za-z0-9._:/@+=,\-]{1,256}\Z")
# IAM unique ids: a four-letter prefix (AIDA user, AROA role, ...) and base32-ish characters.
_UNIQUE_ID_RE = re.compile(r"^A[A-Z0-9]{3}[A-Z0-9]{12,124}\Z")
_ACCOUNT_RE = re.compile(r"^\d{12}\Z")


def is_tenant_name(name: str) -> bool:
    """Whether ``name`` is a tenant some caller can be (what :func:`tenant_of` may return)."""
    return bool(_TENANT_RE.match(name))


def principal_id(user: str) -> str | None:
    """The tenant of an ``identity.user`` / ``identity.caller`` value, or None if it is not one.

    ``AIDA...`` (a user) and ``123456789012`` (the root) are kept; ``AROA...:session`` (an
    assumed role) becomes the role's id; ``123456789012:name`` (a federated user) is None:
    see :func:`is_federated`.
    """
    head, sep, _ = user.strip().partition(":")
    if _UNIQUE_ID_RE.match(head):
        return head
    if _ACCOUNT_RE.match(head) and not sep:
        return head
    return None


def is_federated(user: str) -> bool:
    """Whether ``user`` is a federated user's ``<account id>:<name>`` (a name the caller chose)."""
    head, sep, rest = user.strip().partition(":")
    return bool(_ACCOUNT_RE.match(head) and sep and rest)


FEDERATED_REFUSED = (
    "calls signed with GetFederationToken credentials are refused: IAM names such a caller only "
    "<account>:<name>, a name the caller chooses, so it cannot be a tenant. Sign with an IAM "
    "user's or a role's credentials (SSO, SAML and web-identity logins are role sessions and work)"
)


def _header(headers: Mapping[str, Any] | None, name: str) -> str | None:
    for key, value in (headers or {}).items():
        if key.lower() == name.lower():
            return str(value) if value is not None else None
    return None


# Any key id (checked as a tenant name after): one a tenant cannot be is refused, not read as absent
_CREDENTIAL_RE = re.compile(r"Credential=(\S{1,512}?)/\d{8}/")


def signed_access_key(event: Mapping[str, Any]) -> str | None:
    """The access key id a SigV4 ``Authorization`` header names (local mode's tenant), if any."""
    auth = _header(event.get("headers"), "Authorization") or ""
    if not auth.startswith("AWS4-HMAC-SHA256 "):
        return None
    match = _CREDENTIAL_RE.search(auth)
    return match.group(1) if match else None


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
        401 when no caller identity is present; 403 for a federated user (see the module notes);
        400 when the local tenant header is invalid.
    """
    if local_mode:
        claimed = _header(event.get("headers"), TENANT_HEADER)
        given = {
            str(value).strip()
            for key, values in (event.get("multiValueHeaders") or {}).items()
            if key.lower() == TENANT_HEADER.lower()
            for value in values or ()
        }
        if len(given) > 1:  # QA: the last one won, silently
            raise ApiProblem(
                400,
                "invalid-tenant",
                "Invalid tenant",
                f"{TENANT_HEADER} was given more than once, with different tenants",
                [(f"header.{TENANT_HEADER}", "given more than once")],
            )
        # A header sent blank, or a signature's key id that is no tenant name, is refused below, not
        # read as absent (QA22: either acted for ``default``: a script whose tenant variable was
        # unset, a boto3 client with the key id 'team#1', wrote there)
        key = signed_access_key(event) if claimed is None else None
        tenant = claimed.strip() if claimed is not None else key or DEFAULT_LOCAL_TENANT
        if not _TENANT_RE.match(tenant):
            named, field = (
                (TENANT_HEADER, TENANT_HEADER)
                if key is None
                else ("The signature's access key id", "Authorization")
            )
            raise ApiProblem(
                400,
                "invalid-tenant",
                "Invalid tenant",
                f"{named} must be 1-256 characters of letters, digits and ._:/@+=,- (the tenant)",
                [(f"header.{field}", "invalid tenant name")],
            )
        return tenant
    identity = (event.get("requestContext") or {}).get("identity") or {}
    for candidate in (identity.get("user"), identity.get("caller")):
        if isinstance(candidate, str) and is_federated(candidate):
            raise ApiProblem(403, "federated-caller", "Federated callers are not tenants", FEDERATED_REFUSED)
    for candidate in (identity.get("user"), identity.get("caller")):
        if isinstance(candidate, str) and candidate.strip():
            found = principal_id(candidate)
            if found is not None and _TENANT_RE.match(found):
                return found
    raise ApiProblem(
        401,
        "unauthenticated",
        "Unauthenticated",
        "no caller identity in the request; sign requests with SigV4 (service execute-api)",
    )
