"""Dispatch: from timer rows to messages on the work queues, at each slot's instant.

* :mod:`~punctual.dispatch.tick` plans a coming minute (how many pollers, which shards each);
  its planner is :mod:`~punctual.dispatch.scaling` (capacity for a burst, decided ahead),
  :mod:`~punctual.dispatch.scaling_aws` (the AWS actuator), :mod:`~punctual.dispatch.load_forecast`
  (the minute-load ledger) and :mod:`~punctual.dispatch.burst_sight` (a burst seen late).
* :mod:`~punctual.dispatch.polling`: the poller, reading timers and releasing slots.
* :mod:`~punctual.dispatch.smoothing`: rate budgets spreading a burst's calls to one target.
* :mod:`~punctual.dispatch.queues`: the FIFO queue port and the one dispatch message shape;
  :mod:`~punctual.dispatch.queue_acks` deletes received messages in batches.
"""
