"""Local mode: the whole of Punctual on one machine, with moto server as the embedded AWS.

``punctual-local up`` (what ``make run`` runs) starts a supervisor that runs each component
as its own OS process: ``aws`` (moto server with the table and queues of the synthesised
CDK template), ``api`` (the API Lambda behind a loopback HTTP server), ``poller`` (the tick's
state machine: one poller per shard group and minute), ``worker-N`` (the worker Lambda fed
by an emulated SQS event source mapping), ``ecs-worker`` (the ECS worker service as it is)
and ``receiver`` (a webhook receiver for the demo). Each can also run alone:
``punctual-local aws|api|poller|worker|ecs-worker|receiver``.
"""
