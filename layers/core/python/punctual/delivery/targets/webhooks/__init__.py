"""Signed HTTP webhooks that cannot be turned against the network.

One module per job:

* :mod:`~punctual.delivery.targets.webhooks.guard` -- the SSRF guard (:func:`guard_url`,
  :class:`BlockedTargetError`), which the API also runs at registration;
* :mod:`~punctual.delivery.targets.webhooks.signing` -- Standard Webhooks and fencing signatures;
* :mod:`~punctual.delivery.targets.webhooks.transport` -- connections pinned to checked addresses,
  the deadline watchdog and the deadline-bounded resolver;
* :mod:`~punctual.delivery.targets.webhooks.adapter` -- :class:`HttpTargetAdapter`, which uses them.
"""

from punctual.delivery.targets.webhooks.adapter import (
    MAX_RESPONSE_BYTES,
    HttpTargetAdapter,
    parse_retry_after,
)
from punctual.delivery.targets.webhooks.guard import (
    BlockedTargetError,
    IPAddress,
    Resolver,
    UnresolvedTargetError,
    address_block_reason,
    guard_url,
    parse_allow_cidrs,
)
from punctual.delivery.targets.webhooks.signing import sign_fencing_token, sign_webhook
from punctual.delivery.targets.webhooks.transport import ConnectionFactory, PinnedConnectionFactory

__all__ = [
    "MAX_RESPONSE_BYTES",
    "BlockedTargetError",
    "ConnectionFactory",
    "HttpTargetAdapter",
    "IPAddress",
    "PinnedConnectionFactory",
    "Resolver",
    "UnresolvedTargetError",
    "address_block_reason",
    "guard_url",
    "parse_allow_cidrs",
    "parse_retry_after",
    "sign_fencing_token",
    "sign_webhook",
]
