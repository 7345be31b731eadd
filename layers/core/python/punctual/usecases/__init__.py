"""The use cases behind the API: what a user asks of Punctual, each a version-checked write.

* :mod:`~punctual.usecases.jobs`: register, replace, pause, resume, delete, trigger a job
  (:class:`~punctual.usecases.jobs.JobService`); what a spec must pass before it is written is
  :mod:`~punctual.usecases.job_admission`, its errors :mod:`~punctual.usecases.job_errors`, and a
  job as read (its next fire) :mod:`~punctual.usecases.next_fire`. (An operator moves a tenant's
  jobs to a new tenant id with :mod:`punctual.admin.tenant_moves`, outside the Lambda layer.)
* :mod:`~punctual.usecases.calendars` (the exclusion calendar and its rules) and
  :mod:`~punctual.usecases.calendar_service` (``/v1/calendars``).
* :mod:`~punctual.usecases.backfills` (the backfill record, what is pure about it) and
  :mod:`~punctual.usecases.backfill_runner` (running a past range, each slot exactly once).
"""
