"""What ``punctual jobs create`` checks of a job before it asks the API: a schedule and a target."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from punctual.models import JobSpec
from punctual_cli.verb_kit import CliInputError

NEEDED_FIELDS = {"schedule": "--schedule", "target": "--http-url, --lambda-arn, --sqs-arn"}


def require_schedule_and_target(spec: Mapping[str, Any], file: str | None) -> None:
    """Refuse a job without a schedule or a target, naming what is missing and the flags or file
    key that give it, and a key of the file that looks meant for it (QA31: ``schedul:`` in a job
    file was "a job needs a schedule and a target: --file, or --schedule with --http-url/...", as if
    no file had been given, naming neither the missing field nor the mistyped key)."""
    missing = [field for field in NEEDED_FIELDS if field not in spec]
    if not missing:
        return
    where = "the file" if file else "a --file"
    wanted = " and a ".join(f"{field} ({NEEDED_FIELDS[field]}, or {field}: in {where})" for field in missing)
    unknown = [str(key) for key in spec if key not in JobSpec.model_fields]
    meant = [
        f"{file} has no {field}: {close[0]!r} in it is no field of a job; did you mean {field}?"
        for field in missing
        if file and (close := difflib.get_close_matches(field, unknown, n=1, cutoff=0.6))
    ]
    raise CliInputError("; ".join([f"a job needs a {wanted}", *meant]))
