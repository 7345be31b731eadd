"""What a deployment pays a month for the resources it keeps, whether or not anything is due.

The cost bench's month with nothing due (``bench/cost_per_million.py``) counts requests and
compute: the pollers, the tick, Step Functions, the reads of an idle minute. A deployment also
pays by the hour or the month for what its template creates: the workers' VPC (a NAT gateway,
its public IPv4 address, interface endpoints in each Availability Zone), customer managed KMS
keys, Secrets Manager secrets, an advanced SSM parameter, the alarms (per metric each evaluates)
and the dashboard. This counts them in the app's CloudFormation template, synthesised with
``cdk.json``'s defaults, and prices them with ``bench/prices.json`` (section ``standing``).

Writes ``bench/results/standing_cost.json``, which the cost bench adds to its fixed month.
"""

from __future__ import annotations

import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib

HOURS_PER_MONTH = 730  # AWS's billing convention (cost_rig.HOURS_PER_MONTH)

# A billed unit: (its price's key in prices.json's "standing", billed by the hour, what it is)
UNITS: dict[str, tuple[str, bool, str]] = {
    "nat_gateways": ("nat_gateway_hour", True, "NAT gateways"),
    "public_ipv4": ("public_ipv4_hour", True, "public IPv4 addresses (Elastic IPs)"),
    "interface_endpoint_azs": ("interface_endpoint_az_hour", True, "interface VPC endpoints x their AZs"),
    "kms_keys": ("kms_key_month", False, "customer managed KMS keys"),
    "secrets": ("secret_month", False, "Secrets Manager secrets"),
    "advanced_parameters": ("ssm_advanced_parameter_month", False, "advanced SSM parameters"),
    "alarm_metrics": ("alarm_metric_month", False, "metrics the CloudWatch alarms evaluate"),
    "dashboards": ("dashboard_month", False, "CloudWatch dashboards"),
}


def counts_from_template(template: dict[str, Any]) -> dict[str, int]:
    """The billed units of ``template``'s resources (:data:`UNITS`)."""
    counts: Counter[str] = Counter({unit: 0 for unit in UNITS})
    for resource in template.get("Resources", {}).values():
        kind, props = resource["Type"], resource.get("Properties", {})
        if kind == "AWS::EC2::NatGateway":
            counts["nat_gateways"] += 1
        elif kind == "AWS::EC2::EIP":
            counts["public_ipv4"] += 1
        elif kind == "AWS::EC2::VPCEndpoint" and props.get("VpcEndpointType") == "Interface":
            counts["interface_endpoint_azs"] += len(props.get("SubnetIds", []))
        elif kind == "AWS::KMS::Key":
            counts["kms_keys"] += 1
        elif kind == "AWS::SecretsManager::Secret":
            counts["secrets"] += 1
        elif kind == "AWS::SSM::Parameter" and props.get("Tier") == "Advanced":
            counts["advanced_parameters"] += 1
        elif kind == "AWS::CloudWatch::Alarm":
            metrics = props.get("Metrics")
            counts["alarm_metrics"] += sum(1 for m in metrics if "MetricStat" in m) if metrics else 1
        elif kind == "AWS::CloudWatch::Dashboard":
            counts["dashboards"] += 1
    return dict(counts)


def standing_month(counts: dict[str, int], prices: dict[str, Any]) -> dict[str, float]:
    """Dollars a month for ``counts`` (:func:`counts_from_template`), per unit and in total."""
    month = {}
    for unit, (key, hourly, _) in UNITS.items():
        each = benchlib.price(prices, f"standing.{key}") * (HOURS_PER_MONTH if hourly else 1)
        month[unit] = counts.get(unit, 0) * each
    month["total"] = sum(month.values())
    return month


def default_template() -> dict[str, Any]:
    """The app's template with ``cdk.json``'s defaults (as ``tests/infra`` synthesises it)."""
    sys.path.insert(0, str(benchlib.ROOT / "tests" / "infra"))
    from cdk_helpers import synthesise

    with tempfile.TemporaryDirectory() as out:
        template: dict[str, Any] = synthesise(Path(out) / "cdk").json
    return template


def main() -> None:
    prices = benchlib.load_prices()
    counts = counts_from_template(default_template())
    month = standing_month(counts, prices)
    benchlib.heading("Standing resources of the default deployment, $ a month (nothing due)")
    rows = [(UNITS[u][2], counts[u], month[u]) for u in UNITS]
    print(benchlib.table(["resource", "count", "$ a month"], [*rows, ("total", "", month["total"])]))
    benchlib.write_result("standing_cost", {"counts": counts, "usd_per_month": month})


if __name__ == "__main__":
    main()
