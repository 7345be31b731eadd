"""The environment local mode gives each function is one the settings model accepts.

Regression (found writing the docs' tour, issue 34): a merge put back ``PUNCTUAL_LEASE_S`` =
``str(config.lease_s)`` unconditionally, so with the default (0: the deployment's own lease)
every function of ``make run`` got ``PUNCTUAL_LEASE_S=0`` and refused to start.
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace

import pytest

from local.config import LocalConfig, LocalModeError
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


def test_a_state_key_asked_for_while_another_process_writes_it_is_that_key(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression (an e2e alert arrived unsigned, once): local mode's processes start side by side
    and each reads the state directory's keys; one that asked while the first was still writing
    the key file read it empty, and ran with no signing-secret key (every webhook and alert it
    sent unsigned; its dispatch key empty too)."""
    config = LocalConfig(state_dir=tmp_path)  # type: ignore[arg-type]
    second_done = threading.Event()
    made = iter(["key-of-the-first-asker-0123456789", "key-of-the-second-asker-012345678"])

    def slow_first(nbytes: int | None = None) -> str:
        key = next(made)
        if key.startswith("key-of-the-first"):
            second_done.wait(10)  # the first asker is still writing when the second asks
        return key

    monkeypatch.setattr("local.config.secrets.token_urlsafe", slow_first)
    keys: dict[str, str] = {}
    first = threading.Thread(target=lambda: keys.__setitem__("first", config.secret_key()))
    first.start()
    deadline = time.monotonic() + 10
    while not any(p.name.startswith((".secret.key", "secret.key")) for p in config.run_dir.glob("*")):
        assert time.monotonic() < deadline, "the first asker never began its file"
        time.sleep(0.01)  # the first asker has begun its file
    keys["second"] = config.secret_key()
    second_done.set()
    first.join(10)
    assert keys["second"] and keys["first"] == keys["second"]
    assert config.secret_key() == keys["second"]  # and every later asker reads the same
    assert [p.name for p in config.run_dir.iterdir() if "secret" in p.name] == ["secret.key"]


def test_an_empty_state_key_is_refused_naming_the_file(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = LocalConfig(state_dir=tmp_path)  # type: ignore[arg-type]
    config.run_dir.mkdir(parents=True, exist_ok=True)
    (config.run_dir / "dispatch.key").write_text("")
    monkeypatch.setattr("local.config.STATE_KEY_WAIT_S", 0.1)
    with pytest.raises(LocalModeError, match=r"dispatch\.key is empty"):
        config.dispatch_key()


def test_a_state_key_is_made_where_hard_links_are_not_supported(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_links(source: object, target: object) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr("local.config.os.link", no_links)
    config = LocalConfig(state_dir=tmp_path)  # type: ignore[arg-type]
    key = config.token_key()
    assert len(key) >= 32 and config.token_key() == key
    assert [p.name for p in config.run_dir.iterdir() if "token" in p.name] == ["token.key"]


def test_local_mode_sends_every_status_change_to_its_receiver(tmp_path: object) -> None:
    """A deployment publishes no RUNNING or SUCCEEDED by default (they cost $2.00 per million
    triggers on EventBridge); local mode's receiver costs nothing and shows a developer every
    change, unless ``--set`` chooses otherwise."""
    base = {"PUNCTUAL_EVENTS_STATUS_CHANGES": "problems"}  # the template's default
    config = LocalConfig(state_dir=tmp_path)  # type: ignore[arg-type]
    assert Settings.from_env(function_environment(config, deployment(), base)).events_status_changes == "all"
    chosen = replace(config, extra={"PUNCTUAL_EVENTS_STATUS_CHANGES": "problems"})
    assert (
        Settings.from_env(function_environment(chosen, deployment(), base)).events_status_changes
        == "problems"
    )
