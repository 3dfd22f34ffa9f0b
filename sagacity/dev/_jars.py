"""Resolving the Apache Kafka broker's jars from Maven Central into a shared cache.

A small generated POM depends on ``org.apache.kafka:kafka_2.13`` (whose runtime scope carries
the whole broker) plus a log4j binding for slf4j 1.7 so the broker logs; Maven's
``dependency:copy-dependencies`` copies the runtime closure into ``<cache>/kafka/<version>/lib``.
Resolution runs once per version and machine; concurrent callers wait on a file lock.
"""

from __future__ import annotations

import fcntl
import shutil
import subprocess
from pathlib import Path

from sagacity.dev._paths import cache_dir
from sagacity.dev._tools import find_maven
from sagacity.errors import DevStackError

KAFKA_VERSION = "4.4.0"
"""The pinned broker release (its classes target Java 17, the oldest Java Kafka 4.x runs on)."""

LOG4J_VERSION = "2.25.3"
"""log4j 2 release for the slf4j binding; the same one kafka-server 4.4.0 depends on."""

DEPENDENCY_PLUGIN_VERSION = "3.8.1"

_COMPLETE = ".complete"


def render_pom(kafka_version: str, log4j_version: str = LOG4J_VERSION) -> str:
    """The POM whose runtime dependencies are the broker of ``kafka_version`` and its logging."""
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dev.sagacity.local</groupId>
  <artifactId>kafka-broker</artifactId>
  <version>{kafka_version}</version>
  <packaging>pom</packaging>
  <dependencyManagement>
    <dependencies>
      <dependency>
        <groupId>org.apache.logging.log4j</groupId>
        <artifactId>log4j-bom</artifactId>
        <version>{log4j_version}</version>
        <type>pom</type>
        <scope>import</scope>
      </dependency>
    </dependencies>
  </dependencyManagement>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_2.13</artifactId>
      <version>{kafka_version}</version>
    </dependency>
    <!-- Kafka 4.x logs through slf4j 1.7: without this binding the broker prints nothing. -->
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j-impl</artifactId>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-core</artifactId>
    </dependency>
  </dependencies>
  <build>
    <pluginManagement>
      <plugins>
        <plugin>
          <groupId>org.apache.maven.plugins</groupId>
          <artifactId>maven-dependency-plugin</artifactId>
          <version>{DEPENDENCY_PLUGIN_VERSION}</version>
        </plugin>
      </plugins>
    </pluginManagement>
  </build>
</project>
"""


def kafka_lib_dir(version: str = KAFKA_VERSION, *, cache: Path | None = None) -> Path:
    """Where the jars of broker ``version`` live in the cache (may not be resolved yet)."""
    return (cache or cache_dir()) / "kafka" / version / "lib"


def is_resolved(version: str = KAFKA_VERSION, *, cache: Path | None = None) -> bool:
    """Whether the jars of ``version`` are fully in the cache."""
    return (kafka_lib_dir(version, cache=cache) / _COMPLETE).is_file()


def ensure_kafka_jars(version: str = KAFKA_VERSION, *, cache: Path | None = None) -> Path:
    """Return the cached lib directory of broker ``version``, resolving it with Maven if needed.

    Raises:
        MissingToolError: Maven is not installed (and the jars are not cached).
        DevStackError: Maven failed; the message holds the end of its output.
    """
    lib = kafka_lib_dir(version, cache=cache)
    if (lib / _COMPLETE).is_file():
        return lib
    mvn = find_maven()
    root = lib.parent
    root.mkdir(parents=True, exist_ok=True)
    with (root / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (lib / _COMPLETE).is_file():
            return lib
        work = root / "resolve"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        (work / "pom.xml").write_text(render_pom(version))
        staged = work / "lib"
        result = subprocess.run(
            [
                mvn,
                "-B",
                "-q",
                "-f",
                str(work / "pom.xml"),
                "dependency:copy-dependencies",
                "-DincludeScope=runtime",
                f"-DoutputDirectory={staged}",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        jars = sorted(p.name for p in staged.glob("*.jar")) if staged.is_dir() else []
        if result.returncode != 0 or not any(j.startswith("kafka_2.13-") for j in jars):
            tail = "\n".join((result.stdout + result.stderr).splitlines()[-30:])
            raise DevStackError(
                f"Maven could not resolve org.apache.kafka:kafka_2.13:{version} "
                f"(exit {result.returncode}):\n{tail}"
            )
        (staged / _COMPLETE).write_text("\n".join(jars) + "\n")
        shutil.rmtree(lib, ignore_errors=True)
        staged.rename(lib)
        shutil.rmtree(work, ignore_errors=True)
    return lib
