"""A broker's share-group coordinator: the three parts KIP-932 gives a broker, together.

- group coordinator for the share groups whose `__consumer_offsets` partition it leads:
  membership and assignment (`membership`, kbroker.coordinator.share_membership);
- share-partition leader for the data partitions it leads: share sessions and the
  in-flight records (`leader`, kbroker.share.partition);
- share coordinator for the `__share_group_state` partitions it leads: the persisted
  states (`store`, kbroker.share.state_store).
On one node they are all here; in a cluster each is wherever its partition's leader is.
This object holds what spans them: the group configs each reads, the clock, and the admin
operations (AlterShareGroupOffsets, DeleteShareGroupOffsets, DeleteGroups, a topic's
deletion) that touch a group's membership, its share-partitions and their stored states at
once. It is synchronous and does no I/O: the log is read through `ShareLog`, and time
comes in as arguments, so tests drive it with a manual clock. `kbroker.share.service`
hosts it.
"""

from __future__ import annotations

import uuid

from kbroker.coordinator.records import partition_for
from kbroker.coordinator.share_membership import ShareGroupMembership
from kbroker.share.group_configs import ShareConfig, ShareGroupConfigs
from kbroker.share.partition import (
    GROUP_ID_NOT_FOUND,
    NON_EMPTY_GROUP,
    NONE,
    HeldPartition,
    ShareLog,
    SharePartitionManager,
    TopicRef,
    Topics,
)
from kbroker.share.partition_state import SharePartitionState
from kbroker.share.records import StateKey
from kbroker.share.state_store import ShareStateStore


class ShareCoordinator:
    def __init__(self, config: ShareConfig, log: ShareLog, topics: Topics) -> None:
        self.config = config
        self.log = log
        self.topics = topics
        self.configs = ShareGroupConfigs(config)
        self.membership = ShareGroupMembership(config, topics, self.configs)
        self.leader = SharePartitionManager(config, log, topics, self.configs, self.membership)
        self.membership.member_gone = self.leader.member_gone
        self.owned: set[int] = set()  # partitions of __share_group_state loaded here
        self.loading: set[int] = set()
        self.store = ShareStateStore(lambda: self.config.num_partitions)

    # -- placement (what InternalTopicService asks of a hosted coordinator) --------------

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.config.num_partitions)

    def unload_partition(self, partition: int) -> None:
        """This node no longer leads a `__share_group_state` partition: forget its states
        (share-partitions led here stay; their writes go to its new leader)."""
        self.owned.discard(partition)
        self.loading.discard(partition)
        self.store.unload(partition)

    def shutdown(self) -> None:
        self.leader.on_available.clear()

    # -- group configs and time --------------------------------------------------------

    def set_group_configs(self, group_id: str, changes: dict[str, str | None]) -> None:
        self.configs.set(group_id, changes)
        self.leader.apply_group_configs(group_id)

    def tick(self, now_ms: int) -> None:
        """Expire silent members, idle share sessions of no member, and acquisition locks
        that have run out."""
        self.membership.expire(now_ms)
        self.leader.expire(now_ms)

    # -- admin -------------------------------------------------------------------------

    def share_group_ids(self) -> set[str]:
        """The share groups this node coordinates: with members, or with stored state."""
        known = (
            set(self.membership.groups)
            | {k[0] for k in self.leader.partitions}
            | self.store.groups()
        )
        return {g for g in known if self.membership.owns_group(g)}

    def lag(self, group_id: str, topic_id: uuid.UUID, partition: int) -> int:
        """KIP-1226's lag of a share-partition: records up to the high watermark the
        group has not finished; -1 when unknown here."""
        key = (group_id, topic_id, partition)
        held = self.leader.partitions.get(key)
        if held is not None:
            topic, state = held.topic, held.state
        else:
            data = self.store.of_group(group_id).get(key)
            if data is None:
                return -1
            topic = str(data["topic"])
            state = SharePartitionState.from_snapshot(
                data, self.configs.delivery_limit(group_id), self.configs.max_record_locks(group_id)
            )
        bounds = self.log.bounds(topic, partition, False)
        return -1 if bounds is None else state.lag(bounds[1])

    def alter_start_offset(self, group_id: str, ref: TopicRef, partition: int, offset: int) -> int:
        if not self.membership.is_empty(group_id):
            return NON_EMPTY_GROUP
        leader = self.leader
        key = (group_id, ref.topic_id, partition)
        held = leader.partitions.get(key)
        if held is None:
            state = SharePartitionState(
                offset,
                self.configs.delivery_limit(group_id),
                self.configs.max_record_locks(group_id),
            )
            stored = self.store.entries.get(key)
            epoch = max(
                stored.leader_epoch if stored else 0, leader.leader_epoch(ref.name, partition)
            )
            held = leader.partitions[key] = HeldPartition(ref.name, state, epoch)
            if self.membership.note_group(group_id):
                self.membership.changed_groups.add(group_id)
        else:
            held.state.reset(offset)
        leader.dirty.add(key)
        return NONE

    def delete_topic_state(self, group_id: str, topic_id: uuid.UUID) -> int:
        if not self.membership.is_empty(group_id):
            return NON_EMPTY_GROUP
        held = [k for k in self.leader.partitions if k[0] == group_id and k[1] == topic_id]
        stored = [k for k in self.store.entries if k[0] == group_id and k[1] == topic_id]
        for key in held + stored:
            self._delete(key)
        return NONE

    def forget_topic(self, topic_id: uuid.UUID) -> None:
        """A deleted topic's share-partitions go, with their stored state: a topic created
        again under the name has a new id and starts afresh."""
        for key in [k for k in self.leader.partitions if k[1] == topic_id] + [
            k for k in self.store.entries if k[1] == topic_id
        ]:
            self._delete(key)
        for session in self.leader.sessions.values():
            session.partitions = {tp for tp in session.partitions if tp[0] != topic_id}

    def delete_group(self, group_id: str) -> int:
        if group_id not in self.share_group_ids():
            return GROUP_ID_NOT_FOUND
        if not self.membership.is_empty(group_id):
            return NON_EMPTY_GROUP
        for key in [k for k in self.leader.partitions if k[0] == group_id] + [
            k for k in self.store.entries if k[0] == group_id
        ]:
            self._delete(key)
        self.membership.remove_group(group_id)
        return NONE

    def _delete(self, key: StateKey) -> None:
        stored = self.store.entries.get(key)
        self.leader.delete(key, stored.leader_epoch if stored else 0)
