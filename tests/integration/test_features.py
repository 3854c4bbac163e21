"""UpdateFeatures and `kbroker features` against one node: levels move, ApiVersions shows them.

The tool's lines and the controller's answers are Kafka 4.4's (its kafka-features against a Kafka
4.4 node: "Could not upgrade <feature> to <level>. The update failed for all features since ...",
"Local controller <node id> only supports ...", describe's padded columns); Kafka's own tool
against kbroker is tests/integration/test_metadata_version_44.py's."""

from __future__ import annotations

import time

from kio.schema.api_versions.v3 import request as api_versions_v3
from kio.schema.errors import ErrorCode
from kio.schema.update_features.v0 import request as update_v0
from kio.schema.update_features.v1 import request as update_v1
from kio.schema.update_features.v2 import request as update_v2
from kio.static.primitive import i8, i16

from tests.integration.conftest import BrokerProcess
from tests.integration.test_cli import kbroker
from tests.integration.wire import request

WAIT_S = 30.0


def finalized(bs: str) -> tuple[dict[str, int], int]:
    r = request(bs, api_versions_v3.ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    return {f.name: int(f.max_version_level) for f in r.finalized_features}, int(r.finalized_features_epoch)


def await_finalized(bs: str, feature: str, level: int) -> int:
    """The finalized epoch once this broker's ApiVersions shows ``feature`` at ``level`` (0: absent)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        features, epoch = finalized(bs)
        if features.get(feature, 0) == level:
            return epoch
        assert time.monotonic() < deadline, f"{feature} still at {features.get(feature, 0)}, not {level}"
        time.sleep(0.1)


def test_cli_downgrades_then_upgrades_transaction_version(broker: BrokerProcess) -> None:
    bs = ["--bootstrap-server", broker.bootstrap]
    before = await_finalized(broker.bootstrap, "transaction.version", 2)

    # Kafka's tool names the command it ran: a downgrade to 0 is "downgraded to 0", only `disable` says "disabled".
    refused = kbroker("features", *bs, "downgrade", "--feature", "transaction.version=0", "--unsafe", "--dry-run")
    assert refused.returncode == 0, refused.stderr
    assert refused.stdout == "transaction.version can be downgraded to 0.\n"
    assert finalized(broker.bootstrap)[0]["transaction.version"] == 2  # a dry run writes nothing

    down = kbroker("features", *bs, "disable", "--feature", "transaction.version")
    assert down.returncode == 0, down.stderr
    assert down.stdout == "transaction.version was disabled.\n"
    lowered = await_finalized(broker.bootstrap, "transaction.version", 0)
    assert lowered > before

    up = kbroker("features", *bs, "upgrade", "--feature", "transaction.version=2")
    assert up.returncode == 0, up.stderr
    assert up.stdout == "transaction.version was upgraded to 2.\n"
    assert await_finalized(broker.bootstrap, "transaction.version", 2) > lowered

    earliest = await_finalized(broker.bootstrap, "transaction.version", 2)
    described = kbroker("features", *bs, "describe")
    assert described.returncode == 0, described.stderr
    latest = await_finalized(broker.bootstrap, "transaction.version", 2)
    # Kafka 4.4's columns: the name padded to 40, each level to 15, two spaces between.
    lines = {line.split()[1]: line for line in described.stdout.splitlines()}
    assert sorted(lines) == ["eligible.leader.replicas.version", "group.version", "kraft.version", "metadata.version", "share.version", "streams.version", "transaction.version"]
    # A broker's epoch is its latest metadata offset, which the controller's NoOpRecords move on
    # (KIP-835): one epoch on every line, from between the two reads around the tool.
    epochs = {line.rsplit("Epoch: ", 1)[1] for line in lines.values()}
    assert len(epochs) == 1, described.stdout
    epoch = int(epochs.pop())
    assert earliest <= epoch <= latest
    assert lines["metadata.version"] == (
        "Feature: metadata.version                          SupportedMinVersion: 3.3-IV3          "
        f"SupportedMaxVersion: 4.4-IV2          FinalizedVersionLevel: 4.4-IV2          Epoch: {epoch}"
    )
    assert lines["transaction.version"] == (
        "Feature: transaction.version                       SupportedMinVersion: 0                "
        f"SupportedMaxVersion: 2                FinalizedVersionLevel: 2                Epoch: {epoch}"
    )
    assert lines["eligible.leader.replicas.version"] == (
        "Feature: eligible.leader.replicas.version          SupportedMinVersion: 0                "
        f"SupportedMaxVersion: 1                FinalizedVersionLevel: 1                Epoch: {epoch}"
    )
    assert lines["group.version"] == (
        "Feature: group.version                             SupportedMinVersion: 0                "
        f"SupportedMaxVersion: 1                FinalizedVersionLevel: 1                Epoch: {epoch}"
    )
    # As a new Kafka 4.4 cluster's kafka-features describe prints it.
    assert lines["share.version"] == (
        "Feature: share.version                             SupportedMinVersion: 0                "
        f"SupportedMaxVersion: 2                FinalizedVersionLevel: 2                Epoch: {epoch}"
    )
    assert lines["streams.version"] == (
        "Feature: streams.version                           SupportedMinVersion: 0                "
        f"SupportedMaxVersion: 1                FinalizedVersionLevel: 1                Epoch: {epoch}"
    )
    # A static quorum is kraft.version 0: finalized nowhere, shown as 0 (Kafka 4.4 prints the same).
    assert lines["kraft.version"] == (
        "Feature: kraft.version                             SupportedMinVersion: 0                "
        f"SupportedMaxVersion: 1                FinalizedVersionLevel: 0                Epoch: {epoch}"
    )


def test_cli_reports_refusals(broker: BrokerProcess) -> None:
    bs = ["--bootstrap-server", broker.bootstrap]
    too_high = kbroker("features", *bs, "upgrade", "--feature", "transaction.version=3")
    assert too_high.returncode == 1
    assert too_high.stdout == (
        "Could not upgrade transaction.version to 3. The update failed for all features since the following feature had an error: "
        "Invalid update version 3 for feature transaction.version. Local controller 1 only supports versions 0-2\n"
    )
    assert too_high.stderr.strip() == "1 out of 1 operation(s) failed."
    no_downgrade_type = kbroker("features", *bs, "upgrade", "--feature", "eligible.leader.replicas.version=0")
    assert no_downgrade_type.returncode == 1
    assert no_downgrade_type.stdout == (
        "Could not upgrade eligible.leader.replicas.version to 0. The update failed for all features since the following feature had an error: "
        "Invalid update version 0 for feature eligible.leader.replicas.version. "
        "Can't downgrade the version of this feature without setting the upgrade type to either safe or unsafe downgrade.\n"
    )
    # All or nothing: the refused share.version keeps transaction.version where it was too, and a
    # dry run says "Can not" (Kafka 4.4: the lines in feature-name order).
    both = kbroker("features", *bs, "upgrade", "--feature", "transaction.version=2", "--feature", "share.version=3", "--dry-run")
    assert both.returncode == 1
    why = "The update failed for all features since the following feature had an error: Invalid update version 3 for feature share.version. Local controller 1 only supports versions 0-2"
    assert both.stdout.splitlines() == [f"Can not upgrade share.version to 3. {why}", f"Can not upgrade transaction.version to 2. {why}"]
    assert both.stderr.strip() == "2 out of 2 operation(s) failed."
    assert finalized(broker.bootstrap)[0]["eligible.leader.replicas.version"] == 1


def test_update_features_on_the_wire(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    await_finalized(bs, "transaction.version", 2)
    # v0's allow_downgrade is a safe downgrade.
    v0 = request(bs, update_v0.UpdateFeaturesRequest(feature_updates=(update_v0.FeatureUpdateKey(feature="transaction.version", max_version_level=i16(1), allow_downgrade=True),)))
    assert v0.error_code == ErrorCode.none
    assert [(r.feature, r.error_code) for r in v0.results] == [("transaction.version", ErrorCode.none)]
    await_finalized(bs, "transaction.version", 1)

    v1 = request(
        bs,
        update_v1.UpdateFeaturesRequest(
            feature_updates=(
                update_v1.FeatureUpdateKey(feature="transaction.version", max_version_level=i16(2), upgrade_type=i8(1)),
                update_v1.FeatureUpdateKey(feature="metadata.version", max_version_level=i16(20), upgrade_type=i8(2)),
            ),
            validate_only=True,
        ),
    )
    # Kafka 4.4: all or nothing. A safe downgrade of metadata.version to 20 crosses levels that changed
    # the metadata, so nothing moves; the top level names the feature, and no feature answers on its own.
    assert v1.error_code == ErrorCode.invalid_update_version
    assert v1.error_message == (
        "The update failed for all features since the following feature had an error: "
        "Unsupported metadata.version downgrade from 33 to 20. Refusing to perform the requested downgrade because it might delete metadata information."
    )
    assert v1.results == ()
    assert finalized(bs)[0]["transaction.version"] == 1

    duplicate = update_v1.FeatureUpdateKey(feature="transaction.version", max_version_level=i16(2), upgrade_type=i8(1))
    twice = request(bs, update_v1.UpdateFeaturesRequest(feature_updates=(duplicate, duplicate)))
    assert twice.error_code == ErrorCode.invalid_request and twice.results == ()

    # v2 has only the top-level code.
    v2 = request(bs, update_v2.UpdateFeaturesRequest(feature_updates=(update_v2.FeatureUpdateKey(feature="transaction.version", max_version_level=i16(5), upgrade_type=i8(1)),)))
    assert v2.error_code == ErrorCode.invalid_update_version
    assert v2.error_message == (
        "The update failed for all features since the following feature had an error: "
        "Invalid update version 5 for feature transaction.version. Local controller 1 only supports versions 0-2"
    )
    ok = request(bs, update_v2.UpdateFeaturesRequest(feature_updates=(update_v2.FeatureUpdateKey(feature="transaction.version", max_version_level=i16(2), upgrade_type=i8(1)),)))
    assert ok.error_code == ErrorCode.none
    await_finalized(bs, "transaction.version", 2)
