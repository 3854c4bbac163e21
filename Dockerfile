# A kbroker node, configured by KAFKA_* environment variables as Apache Kafka's image is
# (broker/docker_config.py); docker-compose.yml runs three of them.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1

WORKDIR /opt/kbroker
# Only what the package is built from: the pyproject (and the README it names) and the packages
# it includes; tests, benchmarks and Spark jobs stay out of the image.
COPY pyproject.toml README.md ./
COPY broker ./broker
COPY protocol ./protocol
COPY storage ./storage
COPY replication ./replication
COPY raft ./raft
RUN pip install --no-cache-dir . && rm -rf /opt/kbroker

# A volume mounted on /var/lib/kbroker/data takes this owner, so the node can write its logs.
RUN useradd --system --uid 1000 --home-dir /var/lib/kbroker kbroker \
    && mkdir -p /etc/kbroker /var/lib/kbroker/data \
    && chown -R kbroker /etc/kbroker /var/lib/kbroker
USER kbroker
WORKDIR /var/lib/kbroker

EXPOSE 9092 9093
ENTRYPOINT ["python", "-m", "broker.docker_config"]
