"""The one error every schedule, zone and instant check raises (a leaf: it imports nothing)."""


class ScheduleError(ValueError):
    """A schedule, time zone or instant that cannot be accepted.

    The message is one line and names the problem, for example
    ``cron: day-of-month '32' out of range 1-31``.
    """
