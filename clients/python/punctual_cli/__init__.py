"""The ``punctual`` command and an HTTP client for the Punctual API.

Not part of the Lambda layer: the runtime never imports it. :mod:`.cli` is the command,
:mod:`.api_verbs` its ``jobs`` and ``runs`` verbs, :mod:`.calendar_verbs` its ``calendars`` and
``backfills`` verbs, :mod:`.verb_kit` what those verbs share, :mod:`.client` the HTTP client they use,
:mod:`.scheduler` the boto3 ``scheduler`` client for Punctual's EventBridge Scheduler API.
``punctual next`` evaluates schedules with the core package (:mod:`punctual.timing.schedules`), so the
core is a dependency.
"""
