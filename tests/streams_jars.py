"""Kafka Streams 4.4.0 and its runtime dependencies from Maven Central, once, for the Kafka Streams
application the streams group tests run (tests/streams_app/).

Resolved by ``mvn`` (dependency:copy-dependencies over a small pom) the way
benchmarks/apache_kafka.py fetches Kafka's own jars, into ``~/.cache/kbroker-bench/kafka-streams-4.4.0/lib``.
RocksDB's JNI jar is taken as its linux64 file (10.10.1.1): the full rocksdbjni jar carries every
platform's library and is several times larger.
"""

from __future__ import annotations

from pathlib import Path

from benchmarks.apache_kafka import CACHE_DIR as KAFKA_CACHE_DIR
from benchmarks.apache_kafka import KAFKA_VERSION, LOG4J_VERSION, cached_maven_lib, fetch_maven_jars

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
    return cached_maven_lib(cache, MARKER_JAR)


def fetch_jars(cache: Path = CACHE_DIR) -> Path:
    """The jars, downloaded once (test processes side by side wait for one another); their directory."""
    return fetch_maven_jars(cache, POM, MARKER_JAR, f"Kafka Streams {KAFKA_VERSION}")


if __name__ == "__main__":
    print(fetch_jars())
