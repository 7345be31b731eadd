"""The use cases behind the API: what a user asks of Punctual, each a version-checked write.

* :mod:`~punctual.usecases.jobs`: register, replace, pause, resume, delete, trigger a job.
* :mod:`~punctual.usecases.calendars` (the exclusion calendar and its rules) and
  :mod:`~punctual.usecases.calendar_service` (``/v1/calendars``).
* :mod:`~punctual.usecases.backfills` (the backfill record, what is pure about it) and
  :mod:`~punctual.usecases.backfill_runner` (running a past range, each slot exactly once).
"""
