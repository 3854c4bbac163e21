"""Kafka Streams 4.4.0 and its runtime dependencies from Maven Central, once, for the Kafka Streams
application the streams group tests run (tests/streams_app/).

Resolved by ``mvn`` (dependency:copy-dependencies over a small pom) the way
benchmarks/apache_kafka.py fetches Kafka's own jars, into ``~/.cache/kbroker-bench/kafka-streams-4.4.0/lib``.
RocksDB's JNI jar is taken as its linux64 file (10.10.1.1): the full rocksdbjni jar carries every
platform's library and is several times larger.
"""

from __future__ import annotations

import fcntl
import shutil
import subprocess
from pathlib import Path

from benchmarks.apache_kafka import CACHE_DIR as KAFKA_CACHE_DIR
from benchmarks.apache_kafka import DEPENDENCY_PLUGIN, FETCH_TIMEOUT_S, KAFKA_VERSION, LOG4J_VERSION, maven

ROCKSDB_VERSION = "10.10.1.1"
CACHE_DIR = KAFKA_CACHE_DIR.parent / f"kafka-streams-{KAFKA_VERSION}"
# The jar whose presence means a finished download: lib/ is renamed into place only when complete.
MARKER_JAR = f"kafka-streams-{KAFKA_VERSION}.jar"

POM = f"""<project xmlns="http://maven.apache.org/POM/4.0.0">
 <modelVersion>4.0.0</modelVersion>
 <groupId>local</groupId><artifactId>kafka-streams-app</artifactId><version>1</version><packaging>pom</packaging>
 <dependencies>
  <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-streams</artifactId><version>{KAFKA_VERSION}</version>
   <exclusions><exclusion><groupId>org.rocksdb</groupId><artifactId>rocksdbjni</artifactId></exclusion></exclusions></dependency>
  <dependency><groupId>org.rocksdb</groupId><artifactId>rocksdbjni</artifactId><version>{ROCKSDB_VERSION}</version><classifier>linux64</classifier></dependency>
  <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId><version>{LOG4J_VERSION}</version></dependency>
  <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-core</artifactId><version>{LOG4J_VERSION}</version></dependency>
 </dependencies>
</project>
"""


def cached_lib(cache: Path = CACHE_DIR) -> Path | None:
    """The lib/ directory of a finished download, or None; never touches the network."""
    lib = cache / "lib"
    return lib if (lib / MARKER_JAR).is_file() else None


def fetch_jars(cache: Path = CACHE_DIR) -> Path:
    """The jars, downloaded once (test processes side by side wait for one another); their directory."""
    lib = cached_lib(cache)
    if lib is not None:
        return lib
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".fetch.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return cached_lib(cache) or _download(cache)


def _download(cache: Path) -> Path:
    mvn = shutil.which("mvn") or str(maven(cache.parent))
    (cache / "pom.xml").write_text(POM)
    partial = cache / "lib.partial"
    repo = cache / "m2"
    shutil.rmtree(partial, ignore_errors=True)
    out = subprocess.run(
        [mvn, "-B", "-q", f"-Dmaven.repo.local={repo}", f"{DEPENDENCY_PLUGIN}:copy-dependencies", f"-DoutputDirectory={partial}", "-DincludeScope=runtime"],
        cwd=cache,
        capture_output=True,
        text=True,
        timeout=FETCH_TIMEOUT_S,
    )
    if out.returncode != 0:
        raise RuntimeError(f"mvn could not resolve Kafka Streams {KAFKA_VERSION}:\n{out.stdout[-4000:]}{out.stderr[-4000:]}")
    partial.rename(cache / "lib")
    shutil.rmtree(repo, ignore_errors=True)
    return cache / "lib"


if __name__ == "__main__":
    print(fetch_jars())
