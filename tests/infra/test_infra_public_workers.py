"""``workerSubnets: public``: the ECS workers without NAT gateway or interface endpoints.

QA24 counted what the default template costs while nothing runs: $132.55 a month of standing
resources, $124.10 of it the ECS workers' private network (a NAT gateway, its address, six
interface endpoints in two zones). A deployment that runs few or no ECS-lane jobs may put its
workers in public subnets instead: a public IP each, a security group with no inbound rule, and
nothing billed while no task runs.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cdk_helpers import Synth, join_parts, synthesise

from punctual_cdk.config import ConfigError, PunctualConfig


@pytest.fixture(scope="module")
def public_synth(repo_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Synth:
    return synthesise(
        tmp_path_factory.mktemp("cdk-public"),
        {"stackName": "PunctualPublic", "workerSubnets": "public", "ecsBurstTasks": 1},
    )


def test_public_workers_have_a_public_ip_and_no_inbound_rule(public_synth: Synth) -> None:
    services = public_synth.of_type("AWS::ECS::Service").values()
    assert len(services) == 2  # the long lane's and the burst workers'
    public_subnets = {
        logical
        for logical, subnet in public_synth.of_type("AWS::EC2::Subnet").items()
        if subnet["Properties"].get("MapPublicIpOnLaunch")
    }
    for service in services:
        network = service["Properties"]["NetworkConfiguration"]["AwsvpcConfiguration"]
        assert network["AssignPublicIp"] == "ENABLED"
        assert {join_parts(s).strip("<>") for s in network["Subnets"]} <= public_subnets
    [group] = [
        g["Properties"]
        for g in public_synth.of_type("AWS::EC2::SecurityGroup").values()
        if "ECS workers" in g["Properties"]["GroupDescription"]
    ]
    assert not group.get("SecurityGroupIngress")


def test_public_workers_need_no_nat_gateway_nor_interface_endpoint(public_synth: Synth) -> None:
    assert not public_synth.of_type("AWS::EC2::NatGateway")
    assert not public_synth.of_type("AWS::EC2::EIP")
    endpoints = public_synth.of_type("AWS::EC2::VPCEndpoint").values()
    assert {e["Properties"].get("VpcEndpointType", "Gateway") for e in endpoints} == {"Gateway"}
    assert all(e["Properties"]["RouteTableIds"] for e in endpoints)  # routes of the public subnets
    subnets = public_synth.of_type("AWS::EC2::Subnet").values()
    assert subnets and all(s["Properties"].get("MapPublicIpOnLaunch") for s in subnets)


def test_worker_subnets_takes_private_or_public_and_private_still_needs_a_nat_gateway() -> None:
    with pytest.raises(ConfigError, match="workerSubnets: 'dmz' is not one of private, public"):
        PunctualConfig.from_context({"workerSubnets": "dmz"}.get)
    with pytest.raises(ConfigError, match="natGateways: at least 1"):
        PunctualConfig.from_context({"natGateways": 0}.get)
    assert (
        PunctualConfig.from_context({"natGateways": 0, "workerSubnets": "public"}.get).worker_subnets
        == "public"
    )
