"""Delivery: what leaves Punctual for the user's side.

* :mod:`~punctual.delivery.targets`: the calls a slot makes — HTTP webhooks
  (:mod:`~punctual.delivery.targets.webhooks`), AWS services
  (:mod:`~punctual.delivery.targets.aws_services`, ECS RunTask in
  :mod:`~punctual.delivery.targets.ecs`) and the clients they call with
  (:mod:`~punctual.delivery.targets.aws_clients`: call timeouts, execution roles).
* :mod:`~punctual.delivery.notifications`: execution events, alerts and their copies.
"""
