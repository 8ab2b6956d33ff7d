"""The Java client driver (compat_tests/java/KafkaDriver.java) from Python: compiled
once per session (the `java_classpath` fixture in conftest.py), one JVM per
`JavaDriver` serving commands over stdin and answering JSON lines.

The jars come from scripts/install-test-tools.sh: kafka-clients 3.9 (KBROKER_KAFKA_JARS
overrides where they live) and 4.x (KAFKA4_JAR_DIR, KBROKER_KAFKA4_JARS; the
`java4_classpath` fixture), the same driver compiled against each. Set KBROKER_JAVA_LOG=debug (and
KBROKER_JAVA_LOG_ONLY=org.apache.kafka.clients.consumer, say) to see the client's own
log in a failing test's captured output.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

JAVA_SOURCES = Path(__file__).with_name("java")
JAR_NAMES = ("kafka-clients", "slf4j-api", "lz4-java", "snappy-java", "zstd-jni")
JAR_DIR = Path(
    os.environ.get(
        "KBROKER_KAFKA_JARS", Path.home() / ".cache" / "kbroker-test-tools" / "kafka-java"
    )
)
KAFKA4_JAR_DIR = Path(
    os.environ.get(
        "KBROKER_KAFKA4_JARS", Path.home() / ".cache" / "kbroker-test-tools" / "kafka-java-4"
    )
)
CALL_TIMEOUT_S = 60.0
START_TIMEOUT_S = 30.0


def _missing_tools(jar_dir: Path) -> str | None:
    for tool in ("java", "javac"):
        if shutil.which(tool) is None:
            return f"{tool} not found on PATH (the Java client tests need a JDK, 17 or newer)"
    absent = [name for name in JAR_NAMES if not (jar_dir / f"{name}.jar").is_file()]
    if absent:
        return (
            f"Java Kafka client jars missing from {jar_dir}: {', '.join(absent)} "
            "(scripts/install-test-tools.sh fetches them)"
        )
    return None


class JavaClientError(AssertionError):
    """The driver's command failed inside the Java client; carries its exception chain."""

    def __init__(self, command: str, line: dict[str, Any]) -> None:
        self.error = line.get("error", "")
        self.message = line.get("message", "")
        super().__init__(f"{command}: {line.get('class')}: {self.message}\n{line.get('trace')}")


@dataclass
class Reply:
    """What one command printed: records consumed, and the other lines merged by key."""

    records: list[dict[str, Any]] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)

    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    def values(self) -> list[str | None]:
        return [r["value"] for r in self.records]


def _words(command: str, args: dict[str, Any]) -> list[str]:
    """``key=value`` words; a dict value becomes ``key.setting=value`` for each setting."""

    def text(value: Any) -> str:
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, list | tuple):
            return ",".join(str(v) for v in value)
        return str(value)

    words = [command]
    for name, value in args.items():
        name = name.rstrip("_").replace("_", "-")
        if isinstance(value, dict):
            words += [f"{name}.{k}={text(v)}" for k, v in value.items()]
        elif value is not None:
            words.append(f"{name}={text(value)}")
    for word in words:
        if "\t" in word or "\n" in word:
            raise ValueError(f"driver arguments cannot hold tabs or newlines: {word!r}")
    return words


class JavaDriver:
    """One JVM running KafkaDriver serve; commands in, JSON lines out, stderr to a file."""

    def __init__(self, classpath: str, bootstrap: str, log_path: Path) -> None:
        self.classpath = classpath
        self.bootstrap = bootstrap
        self.log_path = log_path
        self.proc: subprocess.Popen[str] | None = None
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.log_mark = 0

    def __enter__(self) -> JavaDriver:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        level = os.environ.get("KBROKER_JAVA_LOG", "warn")
        only = os.environ.get("KBROKER_JAVA_LOG_ONLY", "")
        cmd = [
            "java",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-Xmx384m",
            f"-Dkbroker.log.level={level}",
            f"-Dkbroker.log.only={only}",
            "-cp",
            self.classpath,
            "KafkaDriver",
            "serve",
            f"bootstrap={self.bootstrap}",
        ]
        with open(self.log_path, "a") as log:
            self.proc = subprocess.Popen(
                cmd,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                encoding="utf-8",
                bufsize=1,
            )
        self.lines = queue.Queue()
        threading.Thread(target=self._read, args=(self.proc, self.lines), daemon=True).start()
        first = self._next_line(time.monotonic() + START_TIMEOUT_S, "start")
        assert json.loads(first) == {"ready": True}, first

    @staticmethod
    def _read(proc: subprocess.Popen[str], lines: queue.Queue[str | None]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _next_line(self, deadline: float, command: str) -> str:
        try:
            line = self.lines.get(timeout=max(deadline - time.monotonic(), 0.01))
        except queue.Empty:
            self.kill()
            raise AssertionError(
                f"Java driver gave no answer to {command} in time\n{self.log_since_mark()}"
            ) from None
        if line is None:
            raise AssertionError(f"Java driver exited during {command}\n{self.log_since_mark()}")
        return line

    def call(self, command: str, timeout: float = CALL_TIMEOUT_S, **args: Any) -> Reply:
        """Run one command; a failure inside the client raises JavaClientError."""
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write("\t".join(_words(command, args)) + "\n")
        self.proc.stdin.flush()
        deadline = time.monotonic() + timeout
        reply = Reply()
        while True:
            line = json.loads(self._next_line(deadline, command))
            if "record" in line:
                reply.records.append(line["record"])
            elif "end" in line:
                if line["end"] != "ok":
                    raise JavaClientError(command, line)
                return reply
            else:
                reply.data.update(line)

    def fails(self, command: str, **args: Any) -> JavaClientError:
        """Run a command that must fail in the client; return the failure."""
        with pytest.raises(JavaClientError) as failure:
            self.call(command, **args)
        return failure.value

    def log_since_mark(self) -> str:
        try:
            with open(self.log_path, errors="replace") as log:
                log.seek(self.log_mark)
                text = log.read()
        except FileNotFoundError:
            return ""
        tail = text.splitlines()[-200:]
        return "\n".join([f"--- Java client stderr ({self.log_path}) ---", *tail])

    def mark_log(self) -> None:
        self.log_mark = self.log_path.stat().st_size if self.log_path.exists() else 0

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None and self.proc.stdin is not None:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=15)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.kill()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


def compile_driver(classes: Path, jar_dir: Path = JAR_DIR) -> str:
    """Compile the driver into `classes` against the jars in `jar_dir`; the classpath to
    run it with. Skips the test when the JDK or the jars are absent."""
    reason = _missing_tools(jar_dir)
    if reason:
        pytest.skip(reason)
    jars = [str(jar_dir / f"{name}.jar") for name in JAR_NAMES]
    sources = sorted(str(p) for p in JAVA_SOURCES.rglob("*.java"))
    result = subprocess.run(
        ["javac", "-nowarn", "-d", str(classes), "-cp", os.pathsep.join(jars), *sources],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, f"javac failed:\n{result.stdout}\n{result.stderr}"
    return os.pathsep.join([str(classes), *jars])
