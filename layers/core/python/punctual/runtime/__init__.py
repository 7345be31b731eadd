"""The wiring every process shares: what a Lambda, the ECS worker or local mode runs on.

* :mod:`~punctual.runtime.settings`: the one settings model, the only reader of the environment.
* :mod:`~punctual.runtime.aws`: the one factory of boto3 clients.
* :mod:`~punctual.runtime.clock`: the one place time is read (everything else is given a clock).
* :mod:`~punctual.runtime.observability`: the metrics port the core records into.
* :mod:`~punctual.runtime.lambda_support`: Powertools' Logger, Metrics and Tracer for handlers.
* :mod:`~punctual.runtime.composition`: the composition root, where every runtime object is built.
"""
