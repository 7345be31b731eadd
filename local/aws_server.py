"""The ``aws`` component: moto server on loopback, with the template's table and queues.

moto keeps everything in this process's memory. A clean stop saves it and the next start loads
it (:mod:`local.aws_state`); a process that dies (``kill -9``) loses it: the supervisor starts
it again with the table and queues created anew, empty.
"""

from __future__ import annotations

import logging
import sys
import threading
from typing import Any

from local import aws_state
from local.component import supervised
from local.config import LOOPBACK, LocalConfig, LocalModeError, apply_env, port_in_use
from local.priority import run_ahead
from local.resources import Deployment, deploy
from local.template import load_template, read_blueprint, template_path

log = logging.getLogger("local.aws")

SWITCH_INTERVAL_S = 0.001


def run(config: LocalConfig, stop: threading.Event) -> None:
    if config.attach_aws:
        attach(config, stop)
        return
    from moto.server import ThreadedMotoServer

    if config.moto_patch:
        from local import motopatch

        motopatch.apply()
    fidelity = None
    if config.stale_reads_s > 0 or config.transaction_conflicts > 0:
        from local import moto_fidelity

        fidelity = moto_fidelity.install(
            moto_fidelity.MotoFidelity(config.stale_reads_s, config.transaction_conflicts)
        )
        moto_fidelity.report_to(config.run_dir / "fidelity.json", fidelity, stop)
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per request otherwise
    if port_in_use(config.aws_port):
        raise LocalModeError(f"port {config.aws_port} is taken: choose another with --aws-port")
    server: Any
    if config.moto_patch:  # and a transport that keeps connections open (local/keepalive.py)
        from local.bulk_gate import BulkGate
        from local.keepalive import KeepAliveMotoServer

        # A small request (a worker's claim) needs a few slices of the interpreter lock; among
        # bulk requests it waits a switch interval for each (5 ms by default): 1 ms hands the
        # lock round five times as often (local/bulk_gate.py).
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        run_ahead("moto")
        server = KeepAliveMotoServer(LOOPBACK, config.aws_port, BulkGate())
    else:
        server = ThreadedMotoServer(ip_address=LOOPBACK, port=config.aws_port, verbose=False)
    state_file = config.state_dir / aws_state.STATE_FILE
    in_order = config.run_dir / aws_state.STOPPED_IN_ORDER
    if not supervised():  # the supervisor clears it as it starts: there, it is this run's stop
        in_order.unlink(missing_ok=True)
    restored = aws_state.load(state_file)
    server.start()
    deployment: Deployment | None = None
    try:
        if restored:
            log.info("AWS state of the last clean stop loaded (%s): jobs and runs go on", ", ".join(restored))
        deployment = deploy_and_describe(config)
        log.info(
            "moto server on %s: table %s, queues %s%s",
            config.aws_endpoint,
            deployment.table_name,
            ", ".join(url.rsplit("/", 1)[-1] for url in deployment.queue_arns),
            " (patched: local/motopatch.py, local/keepalive.py, local/bulk_gate.py)"
            if config.moto_patch
            else "",
        )
        if fidelity is not None:
            log.info(
                "DynamoDB as DynamoDB behaves: eventually consistent reads up to %.1fs behind,"
                " %.0f%% of writes on items a transaction holds cancelled for a conflict"
                " (local/moto_fidelity.py)",
                config.stale_reads_s,
                config.transaction_conflicts * 100,
            )
        stop.wait()
    finally:
        try:
            if config.deployment_file.exists():
                config.deployment_file.unlink()
        except OSError:
            pass
        layout = _table_layout(deployment) if in_order.exists() and deployment is not None else None
        server.stop()
        if in_order.exists():  # the supervisor stopped everything else first
            in_order.unlink()
            kept = aws_state.save(state_file, layout)
            log.info("AWS state saved (%d services) for the next start: %s", kept, state_file)


def _table_layout(deployment: Deployment) -> tuple[int, int] | None:
    """The far and near shard counts the table's timers are laid out in (its layout item, written
    by the first process that touched a timer); None before any."""
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    from punctual.store.dynamo.schema import LAYOUT_KEY

    try:
        reply = boto3.client("dynamodb").get_item(
            TableName=deployment.table_name, Key=LAYOUT_KEY, ConsistentRead=True
        )
    except (BotoCoreError, ClientError) as exc:
        log.warning("the table's shard counts could not be read (%s): not kept with the state", exc)
        return None
    item = reply.get("Item")
    return None if item is None else (int(item["far"]["N"]), int(item["near"]["N"]))


def deploy_and_describe(config: LocalConfig) -> Deployment:
    """Create the template's table (unless it exists) and queues (``name_prefix``) in the moto
    server on ``aws_port``, and write the deployment file the other components wait for."""
    import boto3

    template = str(template_path(config.cache_dir, config.template))
    blueprint = read_blueprint(load_template(config.cache_dir, template), config.name_prefix)
    apply_env(config.aws_env())
    deployment = deploy(config, blueprint, boto3.client("dynamodb"), boto3.client("sqs"), template)
    deployment.write(config.deployment_file)
    return deployment


def attach(config: LocalConfig, stop: threading.Event) -> None:
    """Another Region (``--attach-aws``): the moto server and its table are the first Region's;
    create this Region's queues there (``name_prefix``), describe them, and wait."""
    from local.config import wait_for

    wait_for(lambda: port_in_use(config.aws_port), 60, what=f"moto server on port {config.aws_port}")
    deployment = deploy_and_describe(config)
    log.info(
        "attached to moto server on %s: table %s (shared), this Region's queues %s",
        config.aws_endpoint,
        deployment.table_name,
        ", ".join(url.rsplit("/", 1)[-1] for url in deployment.queue_arns),
    )
    try:
        stop.wait()
    finally:
        config.deployment_file.unlink(missing_ok=True)
