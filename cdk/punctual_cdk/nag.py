"""cdk-nag acknowledgments: one finding at a time, on the construct it concerns, with a reason.

cdk-nag 3.x runs as a CDK validation plugin; any finding fails the synth. An acknowledgment is
recorded in the construct's metadata and listed, with its reason, in
``cdk.out/validation-report.json`` under ``suppressedViolations``.
"""

from __future__ import annotations

import aws_cdk as cdk
from constructs import IConstruct

PACK = "AwsSolutions"

# Reasons shared by several constructs, written once.
XRAY_REASON = (
    "X-Ray PutTraceSegments/PutTelemetryRecords (and GetSampling* for Step Functions) do not "
    "support resource-level permissions; AWS documents Resource '*' for them."
)


def acknowledge(scope: IConstruct, rule: str, reason: str) -> None:
    """Acknowledge one AwsSolutions finding (``"IAM5[Resource::*]"``) on ``scope`` and below."""
    if len(reason) < 20:
        raise ValueError(f"an acknowledgment of {rule} needs a real reason, not {reason!r}")
    rule_id = rule if rule.startswith(f"{PACK}-") else f"{PACK}-{rule}"
    cdk.Validations.of(scope).acknowledge(cdk.Acknowledgment(id=f"{PACK}::{rule_id}", reason=reason))


def nag_text(scope: IConstruct, value: str) -> str:
    """``value`` as cdk-nag writes it in a finding: ``Ref`` as ``<Id>``, ``Fn::GetAtt`` as
    ``<Id.Attr>``, joins joined (to acknowledge a finding whose resource is made of tokens)."""
    return _render(cdk.Stack.of(scope).resolve(value))


def _render(node: object) -> str:
    if isinstance(node, dict):
        if "Ref" in node:
            return f"<{node['Ref']}>"
        if "Fn::GetAtt" in node:
            return "<{}.{}>".format(*node["Fn::GetAtt"])
        if "Fn::Join" in node:
            separator, parts = node["Fn::Join"]
            return str(separator).join(_render(part) for part in parts)
    return str(node)
