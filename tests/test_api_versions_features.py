"""ApiVersions v3+ carries the feature levels supported and finalized, as a KRaft broker's
does (KIP-584, KIP-778, KIP-1022): encoded by the broker, read back with kio."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from handler_context import handler_context
from kio.serial import entity_reader

from kbroker.config import BrokerConfig
from kbroker.controller.state import MetadataState
from kbroker.handlers.api_versions import api_versions, describe_api_versions
from kbroker.protocol.messages import build, build_response, encode, request_class, response_type

API_VERSIONS = 18
SHARE_FETCH = 78


def Settings(share: bool = True, protocols: str = "classic,consumer,streams") -> BrokerConfig:
    return BrokerConfig.from_settings(
        {
            "group.share.enable": str(share).lower(),
            "group.coordinator.rebalance.protocols": protocols,
        }
    )


def _request(version: int, name: str = "test", software_version: str = "1") -> Any:
    fields = {"client_software_name": name, "client_software_version": software_version}
    return build(request_class(API_VERSIONS, version), fields if version >= 3 else {})


@dataclass
class Metadata:
    state: MetadataState


@dataclass
class Quotas:
    active: bool = False  # no client quota set: answers are not throttled


def answer(version: int, settings: BrokerConfig | None = None, metadata_version: int = 41) -> Any:
    """The broker's answer at `version`, encoded to bytes and decoded as a client would."""
    ctx = handler_context(
        API_VERSIONS,
        version,
        config=settings or Settings(),
        quotas=Quotas(),
        controller=Metadata(MetadataState(version=metadata_version)),
    )
    return read(version, api_versions(ctx, _request(version)))


def read(version: int, result: Any) -> Any:
    """An answer as a client reads it: the handler's bytes, or its description encoded."""
    body = (
        result
        if isinstance(result, bytes)
        else encode(build_response(API_VERSIONS, version, result))
    )
    decoded: tuple[Any, int] = entity_reader(response_type(API_VERSIONS, version))(body, 0)
    return decoded[0]


def test_the_written_answer_is_the_described_one_until_what_it_holds_changes() -> None:
    metadata = Metadata(MetadataState(version=5))
    ctx = handler_context(API_VERSIONS, 3, config=Settings(), quotas=Quotas(), controller=metadata)
    first = api_versions(ctx, _request(3))
    assert isinstance(first, bytes)
    assert read(3, first) == read(3, describe_api_versions(ctx))
    assert api_versions(ctx, _request(3)) is first  # written once
    metadata.state = MetadataState(version=6)  # the metadata moved, and the levels' epoch
    moved = read(3, api_versions(ctx, _request(3)))
    assert moved.finalized_features_epoch == 6
    no_share = handler_context(
        API_VERSIONS, 3, config=Settings(share=False), quotas=Quotas(), controller=metadata
    )
    keys = {k.api_key for k in read(3, api_versions(no_share, _request(3))).api_keys}
    assert keys and SHARE_FETCH not in keys
    assert SHARE_FETCH in {k.api_key for k in moved.api_keys}


def test_with_client_quotas_the_answer_is_described_for_the_request_quota_to_throttle() -> None:
    ctx = handler_context(
        API_VERSIONS,
        3,
        config=Settings(),
        quotas=Quotas(active=True),
        controller=Metadata(MetadataState(version=1)),
    )
    answer = api_versions(ctx, _request(3))
    assert isinstance(answer, dict) and answer["throttle_time"] == 0


def supported(response: Any) -> dict[str, tuple[int, int]]:
    return {f.name: (f.min_version, f.max_version) for f in response.supported_features}


def finalized(response: Any) -> dict[str, tuple[int, int]]:
    return {f.name: (f.min_version_level, f.max_version_level) for f in response.finalized_features}


def test_v4_finalizes_metadata_version_of_kafka_4_2_with_the_metadata_version_as_epoch() -> None:
    response = answer(4, metadata_version=41)
    assert finalized(response)["metadata.version"] == (29, 29)
    assert response.finalized_features_epoch == 41


def test_v4_supports_each_feature_only_at_the_levels_kbroker_implements() -> None:
    assert supported(answer(4)) == {
        "metadata.version": (29, 29),
        "kraft.version": (0, 1),
        "transaction.version": (0, 2),
        "group.version": (0, 1),
        "eligible.leader.replicas.version": (0, 1),
        "share.version": (0, 1),
        "streams.version": (0, 1),
    }


def test_consumer_and_share_groups_are_finalized_at_level_1_and_level_0_features_left_out() -> None:
    assert finalized(answer(4)) == {
        "metadata.version": (29, 29),
        "group.version": (1, 1),
        "share.version": (1, 1),
        "streams.version": (1, 1),
    }


def test_streams_groups_are_finalized_only_while_the_streams_protocol_is_served() -> None:
    settings = Settings(protocols="classic,consumer")
    assert "streams.version" not in finalized(answer(4, settings))


def test_disabled_share_and_consumer_groups_are_not_finalized() -> None:
    settings = Settings(share=False, protocols="classic")
    assert finalized(answer(4, settings)) == {"metadata.version": (29, 29)}


def test_v3_leaves_out_features_whose_minimum_is_0() -> None:
    response = answer(3)
    assert supported(response) == {"metadata.version": (29, 29)}
    assert finalized(response)["share.version"] == (1, 1)


def test_v2_has_no_features() -> None:
    response = answer(2)
    assert not hasattr(response, "supported_features")
    assert response.api_keys


def test_levels_recorded_in_the_metadata_are_finalized() -> None:
    ctx = handler_context(
        API_VERSIONS,
        4,
        config=Settings(),
        quotas=Quotas(),
        controller=Metadata(
            MetadataState(version=7, features={"eligible.leader.replicas.version": 1})
        ),
    )
    decoded = read(4, api_versions(ctx, _request(4)))
    assert finalized(decoded)["eligible.leader.replicas.version"] == (1, 1)


def test_update_features_refusals_carry_kafkas_messages() -> None:
    from kbroker.features import SAFE_DOWNGRADE, UPGRADE, update_refusal

    settings = Settings()
    elr = "eligible.leader.replicas.version"
    assert update_refusal(settings, {}, elr, 1, UPGRADE, 1) is None
    assert update_refusal(settings, {elr: 1}, elr, 0, UPGRADE, 1) == (
        f"Invalid update version 0 for feature {elr}. Can't downgrade the version of this "
        "feature without setting the upgrade type to either safe or unsafe downgrade."
    )
    assert update_refusal(settings, {elr: 1}, elr, 0, SAFE_DOWNGRADE, 1) is None
    assert update_refusal(settings, {}, elr, 2, UPGRADE, 1) == (
        f"Invalid update version 2 for feature {elr}. Local controller 1 only supports "
        "versions [0-1]"
    )
    assert update_refusal(settings, {}, "kraft.version", 1, UPGRADE, 3) == (
        "Invalid update version 1 for feature kraft.version. Local controller 3 does not "
        "support this feature's change: kbroker sets kraft.version when the cluster is "
        "created (1 for a dynamic quorum formatted with kbroker format, else 0) and never "
        "changes it."
    )
    assert update_refusal(settings, {"kraft.version": 1}, "kraft.version", 1, UPGRADE, 3) is None
    assert update_refusal(settings, {}, "no.such.feature", 1, UPGRADE, 1) == (
        "Invalid update version 1 for feature no.such.feature. Local controller 1 does not "
        "support this feature."
    )


def test_a_client_software_name_or_version_kafka_refuses_is_invalid_request() -> None:
    """KIP-511's pattern, as Kafka's ApiVersionsRequest.isValid: INVALID_REQUEST and no
    API list for an empty or malformed name or version; a well-formed pair is answered."""

    def ask(name: str, version: str) -> Any:
        ctx = handler_context(
            API_VERSIONS,
            3,
            config=Settings(),
            quotas=Quotas(),
            controller=Metadata(MetadataState(version=1)),
        )
        return read(3, api_versions(ctx, _request(3, name, version)))

    for name, version in (("", "1"), ("librdkafka", ""), ("a b", "1"), ("-x", "1"), ("x", "1.")):
        refused = ask(name, version)
        assert (refused.error_code, refused.api_keys) == (42, ())
    for name, version in (("librdkafka", "2.6.1"), ("x", "1"), ("apache-kafka-java", "4.3.1-rc0")):
        assert ask(name, version).error_code == 0
