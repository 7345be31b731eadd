"""Delivery: what leaves Punctual for the user's side.

* :mod:`~punctual.delivery.targets`: the calls a slot makes (HTTP webhooks and AWS services).
* :mod:`~punctual.delivery.notifications`: execution events, alerts and their copies.
"""
