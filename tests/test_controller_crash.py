"""Acknowledged metadata survives `kill -9` of the process that acknowledged it."""

import asyncio
import os
import signal
import subprocess
import sys
import textwrap

from kbroker.controller import Controller, ControllerConfig

CHILD = textwrap.dedent(
    """
    import asyncio, sys, time
    from pathlib import Path
    from kbroker.controller import Controller, ControllerConfig

    async def main():
        c = Controller(ControllerConfig(1, Path(sys.argv[1]), snapshot_every_entries=int(sys.argv[3])))
        await c.start()
        await c.register_broker(1, "127.0.0.1", 9092)
        for i in range(int(sys.argv[2])):
            await c.create_topic(f"t{i}", 2, 1, {"n": str(i)})
            print(f"ACK t{i}", flush=True)
        print("DONE", flush=True)
        await asyncio.sleep(60)  # stays up until the test kills it

    asyncio.run(main())
    """
)


def crash_after(data_dir, topics, kill_after_acks, snapshot_every=1000):
    """Run a controller in a child process, SIGKILL it after `kill_after_acks`
    acknowledged creates (it keeps creating), return the acknowledged names."""
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(data_dir), str(topics), str(snapshot_every)],
        stdout=subprocess.PIPE,
        text=True,
    )
    acked = []
    try:
        for line in child.stdout:
            if line.startswith("ACK "):
                acked.append(line.split()[1])
            if len(acked) >= kill_after_acks or line.startswith("DONE"):
                break
        os.kill(child.pid, signal.SIGKILL)
        for line in child.stdout:  # acks already written before the kill landed
            if line.startswith("ACK "):
                acked.append(line.split()[1])
    finally:
        child.kill()
        child.wait()
    assert child.returncode == -signal.SIGKILL
    return acked


def recovered_topics(data_dir):
    async def main():
        controller = Controller(ControllerConfig(1, data_dir))
        await controller.start()
        try:
            return dict(controller.state.topics)
        finally:
            await controller.stop()

    return asyncio.run(main())


def test_acknowledged_create_survives_kill_9(tmp_path):
    acked = crash_after(tmp_path, topics=1, kill_after_acks=1)
    topics = recovered_topics(tmp_path)
    assert acked == ["t0"]
    assert topics["t0"].configs == {"n": "0"}
    assert len(topics["t0"].partitions) == 2


def test_kill_9_in_a_stream_of_creates_loses_no_acknowledged_topic(tmp_path):
    acked = crash_after(tmp_path, topics=500, kill_after_acks=120, snapshot_every=50)
    topics = recovered_topics(tmp_path)
    assert len(acked) >= 120
    assert set(acked) <= set(topics)
    # and nothing appears that was never proposed
    assert set(topics) <= {f"t{i}" for i in range(500)}
