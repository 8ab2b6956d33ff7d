"""franz-go's own integration suite (its `pkg/kgo` tests) against kbroker.

franz-go, the Go client, tests itself against a live cluster named by `KGO_SEEDS`:
group consumers of every balancer under the classic and the KIP-848 protocol, chained
transactional ETLs with read_committed consumers (transactions version 2: implicit
partition adds, an epoch bump at every EndTxn, aborts of transactions that added
nothing), share groups, regex subscriptions, purges, large messages and more. Its test
binary is built once from the module at a pinned version (the Go module proxy, into a
cache; scripts/install-test-tools.sh fills it) and run here as franz-go's CI runs it,
against one node and against a 3-node cluster at replication factor 3.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pytest

from compat_tests.broker_process import FAST_GROUP_SETTINGS, BrokerProcess, running_broker
from compat_tests.cluster import KafkaCluster, running_cluster

FRANZ_GO = "github.com/twmb/franz-go"
VERSION = "v1.22.3"
BUILD_TIMEOUT_S = 600
# The suite's own tests that need what this setup does not give them: SASL listeners
# (KGO_TEST_SCRAM_SEEDS, KGO_TEST_OAUTH_SEEDS) and a broker older than Kafka 0.11.
SKIPPED_BY_DESIGN = {
    "TestOAuthAuth",
    "TestSCRAMAuth",
    "TestSCRAMAuthBadCredentials",
    "TestIssueProduceBrokerTooOldFailsRecords",
}
# Left out: its loop stops once it has seen records of as many topics as it wants, and
# the internal topic its regex also matches (as Kafka's coordinator assigns it) counts
# toward them, so it fails whenever __consumer_offsets answers before one of its own
# topics. tests/test_consumer_group_membership.py checks what it checks of the broker.
LEFT_OUT = "Test848RegexBrokerResolves"
# What a cluster run must include, so that it cannot pass by running nothing. (Their
# subtests, one per balancer, cannot be picked: the parent test waits for all of them.)
CLUSTER_TESTS = ("TestGroupETL", "TestTxnEtl", "TestShareGroupETL")

pytestmark = pytest.mark.timeout(900)


def _cache() -> Path:
    root = os.environ.get("KBROKER_FRANZ_GO_CACHE")
    base = Path(root) if root else Path.home() / ".cache" / "kbroker-test-tools" / "franz-go"
    return base / VERSION


def _go_env(cache: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(GOPATH=str(cache / "gopath"), GOFLAGS="-modcacherw", GOTOOLCHAIN="auto")
    return env


@dataclass
class KgoSuite:
    binary: Path
    package_dir: Path  # some tests read the package's own sources

    def run(self, seeds: str, rf: int, records: int, only: str | None, timeout: float) -> Result:
        return self.start(seeds, rf, records, only, timeout).result()

    def start(self, seeds: str, rf: int, records: int, only: str | None, timeout: float) -> Running:
        env = dict(os.environ)
        env.update(
            KGO_SEEDS=seeds,
            KGO_TEST_RF=str(rf),
            KGO_TEST_RECORDS=str(records),
            KGO_LOG_LEVEL="warn",
        )
        args = [str(self.binary), "-test.v", f"-test.timeout={int(timeout)}s"]
        args.append(f"-test.skip=^{LEFT_OUT}$")
        if only:
            args.append(f"-test.run={only}")
        output = tempfile.TemporaryFile()  # noqa: SIM115 (Running.result closes it)
        proc = subprocess.Popen(
            args, cwd=self.package_dir, env=env, stdout=output, stderr=subprocess.STDOUT
        )
        return Running(proc, output, timeout + 60)


@dataclass
class Running:
    """The suite's test binary while it runs (its output into a file, not a pipe that
    nobody reads while another test runs)."""

    proc: subprocess.Popen[bytes]
    output: IO[bytes]
    timeout: float

    def result(self) -> Result:
        try:
            code = self.proc.wait(timeout=self.timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        self.output.seek(0)
        text = self.output.read().decode(errors="replace")
        self.output.close()
        return Result(code, text)


@dataclass
class Result:
    returncode: int
    output: str

    def outcomes(self, word: str) -> set[str]:
        """Top-level tests that ended with `word` (PASS, FAIL, SKIP)."""
        return set(re.findall(rf"^--- {word}: (\S+) ", self.output, re.MULTILINE))

    def failures(self) -> str:
        """The lines franz-go's failing tests logged, for the assertion message."""
        keep = [
            line
            for line in self.output.splitlines()
            if line.startswith(("--- FAIL", "    --- FAIL", "panic:"))
            or re.match(r"\s+\w+_test\.go:\d+: ", line)
            # The cleanups' "FAILED TESTING -- NOT DELETING TOPIC" lines would crowd out
            # the failure itself.
            and "deleting" not in line.lower()
        ]
        return "\n".join(keep[-80:]) or self.output[-4000:]


@pytest.fixture(scope="session")
def kgo_suite() -> KgoSuite:
    go = shutil.which("go")
    if go is None:
        pytest.skip("go is not installed (scripts/install-test-tools.sh installs it)")
    cache = _cache()
    binary = cache / "kgo.test"
    env = _go_env(cache)
    download = subprocess.run(
        [go, "mod", "download", "-json", f"{FRANZ_GO}@{VERSION}"],
        cwd=cache.parent if cache.parent.is_dir() else None,
        env=env,
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
    )
    match = re.search(r'"Dir":\s*"([^"]+)"', download.stdout)
    if download.returncode != 0 or match is None:
        pytest.skip(f"the Go module proxy did not give {FRANZ_GO}@{VERSION}: {download.stderr}")
    package_dir = Path(match.group(1)) / "pkg" / "kgo"
    if not binary.is_file():
        staging = binary.with_name(f"kgo.test.{os.getpid()}.tmp")
        build = subprocess.run(
            [go, "test", "-c", "-o", str(staging), "."],
            cwd=package_dir,
            env=env,
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
        )
        assert build.returncode == 0, f"building franz-go's kgo tests failed:\n{build.stderr}"
        staging.rename(binary)
    return KgoSuite(binary, package_dir)


@pytest.fixture(scope="module")
def single_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("franz-go"), FAST_GROUP_SETTINGS) as node:
        yield node


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    with running_cluster(tmp_path_factory.mktemp("franz-go-cluster"), 3) as c:
        yield c


@pytest.fixture(scope="module")
def cluster_etls(kgo_suite: KgoSuite, cluster: KafkaCluster) -> Iterator[Running]:
    """The ETLs on the cluster, started before the whole suite runs on one node: most of
    their time is the static members' session timeouts, so the two runs share the wait."""
    running = kgo_suite.start(
        cluster.bootstrap,
        rf=3,
        records=2_000,
        only="^(" + "|".join(CLUSTER_TESTS) + ")$",
        timeout=600,
    )
    yield running
    if running.proc.poll() is None:
        running.result()  # a failed test before it: its nodes go once it has stopped


def test_the_whole_kgo_suite_passes_against_one_node(
    kgo_suite: KgoSuite, single_node: BrokerProcess, cluster_etls: Running
) -> None:
    result = kgo_suite.run(single_node.bootstrap, rf=1, records=20_000, only=None, timeout=600)
    assert result.returncode == 0, result.failures()
    passed = result.outcomes("PASS")
    assert {"TestGroupETL", "TestTxnEtl", "TestShareGroupETL"} <= passed
    assert result.outcomes("SKIP") <= SKIPPED_BY_DESIGN, result.outcomes("SKIP")
    assert len(passed) > 100


def test_group_transaction_and_share_etls_pass_on_a_cluster_at_rf_3(
    cluster_etls: Running, cluster: KafkaCluster
) -> None:
    result = cluster_etls.result()
    assert result.returncode == 0, f"{result.failures()}\n{cluster.log_tails(40)}"
    assert set(CLUSTER_TESTS) <= result.outcomes("PASS")
    subtests = set(re.findall(r"^    --- PASS: (\S+) ", result.output, re.MULTILINE))
    assert {"TestTxnEtl/range/848", "TestGroupETL/cooperative-sticky"} <= subtests, subtests
