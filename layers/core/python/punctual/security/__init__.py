"""Security and tenant limits: what a tenant may name, sign, read and spend.

* :mod:`~punctual.security.ownership`: the scheduler's own resources, never a job's target.
* :mod:`~punctual.security.boundary`: which resources a job may make the workers call, as which role.
* :mod:`~punctual.security.message_auth`: dispatch messages signed by senders, verified by workers.
* :mod:`~punctual.security.signing_secrets` and :mod:`~punctual.security.tenant_keys`: webhook
  signing secrets, sealed under per-tenant data keys.
* :mod:`~punctual.security.quotas`, :mod:`~punctual.security.peaks` and
  :mod:`~punctual.security.tenant_quotas`: per-tenant trigger rates, peaks and burst quotas.
"""
