"""The published month with nothing due counts what the default template keeps running.

A deployment pays by the hour or month for its NAT gateway, public IPv4 address, interface
endpoints, KMS keys, secrets, alarms and dashboard, whatever is due; ``bench/standing_cost.py``
counts them in the template and the cost bench adds them to its fixed month.
"""

from __future__ import annotations

import importlib
import json
import sys

from cdk_helpers import REPO_ROOT, Synth

BENCH = REPO_ROOT / "bench"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))
standing_cost = importlib.import_module("standing_cost")
cost_money = importlib.import_module("cost_money")
cost_rig = importlib.import_module("cost_rig")

PUBLISHED = BENCH / "results" / "standing_cost.json"


def test_every_standing_resource_of_the_default_template_is_priced(default_synth: Synth) -> None:
    counts = standing_cost.counts_from_template(default_synth.json)
    billed = {
        "AWS::EC2::NatGateway": "nat_gateways",
        "AWS::EC2::EIP": "public_ipv4",
        "AWS::KMS::Key": "kms_keys",
        "AWS::SecretsManager::Secret": "secrets",
        "AWS::CloudWatch::Alarm": "alarm_metrics",
        "AWS::CloudWatch::Dashboard": "dashboards",
    }
    for cfn_type, unit in billed.items():
        assert bool(default_synth.of_type(cfn_type)) == (counts[unit] > 0), cfn_type
    interface = [
        r
        for r in default_synth.of_type("AWS::EC2::VPCEndpoint").values()
        if r["Properties"].get("VpcEndpointType") == "Interface"
    ]
    assert counts["interface_endpoint_azs"] == sum(len(r["Properties"]["SubnetIds"]) for r in interface)
    month = standing_cost.standing_month(counts, json.loads((BENCH / "prices.json").read_text()))
    assert month["total"] == sum(v for k, v in month.items() if k != "total") > 0


def test_the_published_standing_cost_is_of_the_template_as_it_is(default_synth: Synth) -> None:
    # The figure the docs cite was counted on this template (rerun bench/standing_cost.py when
    # the stack gains or loses a billed resource).
    published = json.loads(PUBLISHED.read_text())
    assert published["counts"] == standing_cost.counts_from_template(default_synth.json)


def test_the_cost_bench_month_with_nothing_due_includes_the_standing_resources() -> None:
    idle = cost_rig.RunResult(name="idle", minutes=3, tallies={})
    month = cost_money.idle_month(idle, cost_money.Prices.load(), poller_mb=128)["usd_per_month"]
    standing = json.loads(PUBLISHED.read_text())["usd_per_month"]["total"]
    assert month["standing_resources"] == standing
    assert month["total"] >= standing
