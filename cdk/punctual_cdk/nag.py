"""cdk-nag acknowledgments: one finding at a time, on the construct it concerns, with a reason.

cdk-nag 3.x runs as a CDK validation plugin; any finding fails the synth. An acknowledgment is
recorded in the construct's metadata and listed, with its reason, in
``cdk.out/validation-report.json`` under ``suppressedViolations``.
"""

from __future__ import annotations

from collections.abc import Callable

import aws_cdk as cdk
import jsii
from constructs import IConstruct, IValidation

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


def acknowledge_at_synth(scope: IConstruct, rule: Callable[[], str], reason: str) -> None:
    """:func:`acknowledge` the finding ``rule()`` names once references are resolved (at synth,
    before cdk-nag runs): a resource made of another stack's values (``Fn::ImportValue``) is only
    known then."""
    scope.node.add_validation(_Acknowledgment(scope, rule, reason))


@jsii.implements(IValidation)
class _Acknowledgment:
    def __init__(self, scope: IConstruct, rule: Callable[[], str], reason: str) -> None:
        self.scope, self.rule, self.reason = scope, rule, reason

    def validate(self) -> list[str]:
        acknowledge(self.scope, self.rule(), self.reason)
        return []


def nag_text(scope: IConstruct, value: str) -> str:
    """``value`` as cdk-nag writes it in a finding: ``Ref`` as ``<Id>``, ``Fn::GetAtt`` as
    ``<Id.Attr>``, ``Fn::ImportValue`` as the export's name, joins joined (to acknowledge a
    finding whose resource is made of tokens)."""
    return _render(cdk.Stack.of(scope).resolve(value))


def _render(node: object) -> str:
    if isinstance(node, dict):
        if "Ref" in node:
            return f"<{node['Ref']}>"
        if "Fn::GetAtt" in node:
            return "<{}.{}>".format(*node["Fn::GetAtt"])
        if "Fn::ImportValue" in node:  # another stack's output: cdk-nag writes the export's name
            return _render(node["Fn::ImportValue"])
        if "Fn::Join" in node:
            separator, parts = node["Fn::Join"]
            return str(separator).join(_render(part) for part in parts)
    return str(node)
