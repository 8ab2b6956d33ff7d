"""kbroker's streams group records in `__consumer_offsets` are Kafka 4.3's: every record
kbroker writes is read by Kafka's own generated classes to the end of its value, with the
fields kbroker wrote, and a record Kafka writes (with tagged fields kbroker does not
write) is read by kbroker."""

from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from compat_tests.kafka_reference import (
    TOOL_JVM,
    kafka_classpath,
    kafka_unavailable,
    tool_runner_classes,
)
from kbroker.coordinator.streams_group import (
    CopartitionGroup,
    CurrentAssignmentRecord,
    GroupEpochRecord,
    MemberMetadataRecord,
    MemberState,
    StreamsMember,
    Subtopology,
    TargetEpochRecord,
    TargetMemberRecord,
    TaskAssignment,
    TopicInfo,
    Topology,
    TopologyRecord,
    decode_record,
    encode_record,
)

pytestmark = pytest.mark.skipif(kafka_unavailable() is not None, reason=str(kafka_unavailable()))


def _java(*args: str) -> str:
    done = subprocess.run(
        [
            "java",
            *TOOL_JVM,
            "-cp",
            kafka_classpath(str(tool_runner_classes())),
            "StreamsRecords",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_kafka_reads_every_streams_record_kbroker_writes(tmp_path: Path) -> None:
    member = StreamsMember(
        "m",
        member_epoch=3,
        previous_member_epoch=2,
        state=MemberState.UNREVOKED_TASKS,
        instance_id="i",
        client_id="c",
        client_host="/h",
        rebalance_timeout_ms=300,
        topology_epoch=1,
        process_id="p",
        user_endpoint=("host", 8080),
        client_tags=(("zone", "a"),),
        assigned=TaskAssignment({"0": frozenset({1, 2})}, {"1": frozenset({0})}, {}),
        pending_revocation=TaskAssignment({"0": frozenset({3})}, {}, {}),
    )
    topology = Topology(
        4,
        (
            Subtopology(
                "0",
                source_topics=("in", "other"),
                repartition_sink_topics=("app-r",),
                copartition_groups=(CopartitionGroup((0, 1)),),
            ),
            Subtopology(
                "1",
                repartition_source_topics=(TopicInfo("app-r", 0, 3, (("retention.ms", "-1"),)),),
                state_changelog_topics=(TopicInfo("app-c", 0, 0),),
            ),
        ),
    )
    records = [
        GroupEpochRecord("g", 7, -12345),
        TopologyRecord("g", topology),
        MemberMetadataRecord("g", "m", member),
        MemberMetadataRecord("g", "m2", replace(member, user_endpoint=None, instance_id=None)),
        TargetEpochRecord("g", 7),
        TargetMemberRecord("g", "m", member.assigned),
        CurrentAssignmentRecord("g", "m", member),
    ]
    path = tmp_path / "records.txt"
    lines = []
    for record in records:
        key, value = encode_record(record)
        assert value is not None
        lines.append(f"{key.hex()} {value.hex()}")
    path.write_text("\n".join(lines) + "\n")
    out = _java("decode", str(path)).splitlines()
    assert [line.split(" ", 1)[0] for line in out] == ["17", "23", "19", "19", "20", "21", "22"]
    assert all(line.endswith(" left=0") for line in out), out
    epoch, topo, meta, meta2, target_epoch, target, current = out
    assert "StreamsGroupMetadataValue(epoch=7, metadataHash=-12345" in epoch
    assert "epoch=4" in topo and "sourceTopics=[in, other]" in topo
    assert "copartitionGroups=[CopartitionGroup(sourceTopics=[0, 1]" in topo
    assert "TopicInfo(name='app-r', partitions=0, replicationFactor=3, topicConfigs=[" in topo
    assert "memberId='m'" in meta and "instanceId='i'" in meta and "processId='p'" in meta
    assert "userEndpoint=Endpoint(host='host', port=8080)" in meta
    assert "clientTags=[KeyValue(key='zone', value='a')]" in meta
    assert "userEndpoint=null" in meta2 and "instanceId=null" in meta2
    assert "assignmentEpoch=7" in target_epoch
    assert "activeTasks=[TaskIds(subtopologyId='0', partitions=[1, 2])]" in target
    assert "standbyTasks=[TaskIds(subtopologyId='1', partitions=[0])]" in target
    assert "memberEpoch=3, previousMemberEpoch=2, state=1" in current
    assert "activeTasksPendingRevocation=[TaskIds(subtopologyId='0', partitions=[3]" in current


def test_kbroker_reads_a_current_assignment_kafka_writes() -> None:
    key, value = _java("encode").split()
    record = decode_record(bytes.fromhex(key), bytes.fromhex(value))
    assert isinstance(record, CurrentAssignmentRecord) and record.member is not None
    m = record.member
    assert (record.group_id, record.member_id) == ("g", "m")
    assert (m.member_epoch, m.previous_member_epoch, m.state) == (
        5,
        4,
        MemberState.UNRELEASED_TASKS,
    )
    assert m.assigned == TaskAssignment({"0": frozenset({0, 2})}, {}, {})
