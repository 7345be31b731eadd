"""The environment local mode gives each function is one the settings model accepts.

Regression (found writing the docs' tour, issue 34): a merge put back ``PUNCTUAL_LEASE_S`` =
``str(config.lease_s)`` unconditionally, so with the default (0: the deployment's own lease)
every function of ``make run`` got ``PUNCTUAL_LEASE_S=0`` and refused to start.
"""

from __future__ import annotations

from dataclasses import replace

from local.config import LocalConfig
from local.resources import Deployment, function_environment
from punctual.runtime.settings import Settings


def deployment() -> Deployment:
    return Deployment(
        endpoint="http://127.0.0.1:4566",
        table_name="punctual",
        short_queue_urls=["http://127.0.0.1:4566/000000000000/punctual-short-0.fifo"],
        long_queue_urls=["http://127.0.0.1:4566/000000000000/punctual-long-0.fifo"],
        failed_queue_url="http://127.0.0.1:4566/000000000000/punctual-failed",
        queue_arns={"punctual-short-0.fifo": "arn:aws:sqs:us-east-1:000000000000:punctual-short-0.fifo"},
        dead_letter_urls=[],
        poller_timeout_s=900,
        worker_timeout_s=900,
        api_timeout_s=29,
        worker_batch_size=10,
        ecs_stop_timeout_s=120,
    )


def test_the_default_local_mode_leaves_the_lease_to_the_deployment(tmp_path: object) -> None:
    config = LocalConfig(state_dir=tmp_path)  # type: ignore[arg-type]
    env = function_environment(config, deployment(), {})
    assert "PUNCTUAL_LEASE_S" not in env
    assert Settings.from_env(env).lease_s == Settings().lease_s  # every process starts


def test_a_chosen_lease_reaches_every_function(tmp_path: object) -> None:
    config = replace(LocalConfig(state_dir=tmp_path), lease_s=12)  # type: ignore[arg-type]
    env = function_environment(config, deployment(), {})
    assert Settings.from_env(env).lease_s == 12
