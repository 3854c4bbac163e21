"""Kafka's authorizer (StandardAuthorizer) on one node: ACLs kept in the metadata log, managed with
Kafka's own kafka-acls.sh and the admin API, enforced for produce, consume, consumer groups and
metadata, and still there after a kill -9.

One broker for the module, with a PLAINTEXT listener (User:ANONYMOUS, a super user: the tests'
administrator) and a SASL_PLAINTEXT listener whose PLAIN users are the principals under test.
Every test names its own topics and groups, so ACLs of one never touch another. Every change of
ACLs is awaited by polling for its effect up to a deadline, never by sleeping.

What Kafka answers was taken from Apache Kafka 4.4 configured the same way (StandardAuthorizer,
super.users=User:ANONYMOUS;User:admin, allow.everyone.if.no.acl.found=false, the same JAAS
config): kafka-acls.sh's output, error codes, which topics a principal sees.
"""

from __future__ import annotations

import datetime
import socket
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, TypeVar

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v4 import request as find_coordinator_v4
from kio.schema.join_group.v5 import request as join_group_v5
from kio.schema.metadata.v12 import request as metadata_v12
from kio.schema.sasl_authenticate.v2 import request as authenticate_v2
from kio.schema.sasl_handshake.v1 import request as handshake_v1
from kio.static.primitive import i8

from tests.integration.conftest import BrokerProcess, StartBroker, retire
from tests.kafka_tools import kafka_tool
from tests.integration.wire import exchange
from tests.ports import free_ports

TIMEOUT_S = 30.0
# How long an ACL change may take to reach the authorizer that answers the next request.
PROPAGATION_S = 20.0
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
USERS = ("admin", "alice", "bob", "carol", "dave")
JAAS = (
    'org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-secret" '
    + " ".join(f'user_{u}="{u}-secret"' for u in USERS)
    + ";"
)
AUTHORIZER = {
    "authorizer.class.name": STANDARD_AUTHORIZER,
    "super.users": "User:ANONYMOUS;User:admin",
    "allow.everyone.if.no.acl.found": "false",
    "auto.create.topics.enable": "true",
    "group.initial.rebalance.delay.ms": "0",
}
T = TypeVar("T")


@dataclass
class Secured:
    plain: str  # PLAINTEXT: User:ANONYMOUS, a super user
    sasl: str  # SASL_PLAINTEXT with PLAIN: the USERS
    broker: BrokerProcess | None = None


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    broker = BrokerProcess(tmp_path_factory.mktemp("acls") / "data")
    (sasl_port,) = free_ports(1)
    broker.overrides.update(
        {
            "listeners": f"PLAINTEXT://127.0.0.1:{broker.port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
            **AUTHORIZER,
        }
    )
    broker.start()
    try:
        yield Secured(broker.bootstrap, f"127.0.0.1:{sasl_port}", broker)
    finally:
        retire(broker)


# ---------------------------------------------------------------------------------------------
# Helpers


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def wait_for(what: str, probe: Callable[[], T], accept: Callable[[T], bool], timeout_s: float = PROPAGATION_S) -> T:
    """Poll ``probe`` until ``accept`` takes its answer; fail with the last answer after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if accept(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}; last: {value!r}")
        time.sleep(0.1)


def admin(s: Secured) -> AdminClient:
    return AdminClient({"bootstrap.servers": s.plain})


def user(s: Secured, name: str, **extra: object) -> dict[str, object]:
    return {
        "bootstrap.servers": s.sasl,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": name,
        "sasl.password": f"{name}-secret",
        **extra,
    }


def acl(
    resource_type: ResourceType,
    name: str,
    principal: str,
    operation: AclOperation,
    permission: AclPermissionType = AclPermissionType.ALLOW,
    pattern: ResourcePatternType = ResourcePatternType.LITERAL,
    host: str = "*",
) -> AclBinding:
    return AclBinding(resource_type, name, pattern, principal, host, operation, permission)


def add_acls(s: Secured, *bindings: AclBinding) -> None:
    client = admin(s)  # held until the answers are in: a collected client fails its futures
    for future in client.create_acls(list(bindings), request_timeout=TIMEOUT_S).values():
        future.result(timeout=TIMEOUT_S)


def acls_on(s: Secured, resource_type: ResourceType, name: str) -> set[tuple[object, ...]]:
    """DescribeAcls for every pattern type of one resource name, as comparable tuples."""
    client = admin(s)
    found = client.describe_acls(
        AclBindingFilter(resource_type, name, ResourcePatternType.ANY, None, None, AclOperation.ANY, AclPermissionType.ANY), request_timeout=TIMEOUT_S
    ).result(timeout=TIMEOUT_S)
    return {binding_key(b) for b in found}


def binding_key(b: AclBinding) -> tuple[object, ...]:
    return (b.restype, b.name, b.resource_pattern_type, b.principal, b.host, b.operation, b.permission_type)


def create_topics(s: Secured, *names: str, partitions: int = 1) -> None:
    client = admin(s)
    futures = client.create_topics([NewTopic(n, partitions, 1) for n in names], operation_timeout=TIMEOUT_S, request_timeout=TIMEOUT_S)
    for future in futures.values():
        future.result(timeout=TIMEOUT_S)


def produce_as(s: Secured, name: str, topic: str, value: bytes = b"v") -> int | None:
    """One record produced as ``name`` by a fresh producer: None when delivered, else the error code."""
    outcome: list[KafkaError | None] = []
    errors: list[KafkaError] = []
    producer = Producer(user(s, name, **{"message.timeout.ms": 10_000, "allow.auto.create.topics": False, "error_cb": errors.append}))
    producer.produce(topic, value, on_delivery=lambda err, msg: outcome.append(err))
    deadline = time.monotonic() + TIMEOUT_S
    while not outcome and not any(e.code() == KafkaError._AUTHENTICATION for e in errors) and time.monotonic() < deadline:
        producer.poll(0.1)
    producer.purge()
    producer.flush(0)
    assert outcome, f"no delivery report for {topic} as {name} within {TIMEOUT_S}s: {errors}"
    err = outcome[0]
    return None if err is None else err.code()


def until_produce(s: Secured, name: str, topic: str, expected: int | None, value: bytes = b"v") -> None:
    """Produce as ``name`` until the outcome is ``expected`` (None: delivered), up to PROPAGATION_S."""
    wait_for(f"produce to {topic} as {name} -> {expected}", lambda: produce_as(s, name, topic, value), lambda got: got == expected)


def sasl_socket(s: Secured, name: str, source: str = "127.0.0.1") -> socket.socket:
    """A connection to the SASL listener from ``source``, authenticated as ``name``."""
    host, port = s.sasl.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=TIMEOUT_S, source_address=(source, 0))
    assert exchange(sock, handshake_v1.SaslHandshakeRequest(mechanism="PLAIN")).error_code == ErrorCode.none
    token = f"\0{name}\0{name}-secret".encode()
    assert exchange(sock, authenticate_v2.SaslAuthenticateRequest(auth_bytes=token), 2).error_code == ErrorCode.none
    return sock


def metadata_error(sock: socket.socket, topic: str, auto_create: bool = False) -> int:
    """The error a Metadata v12 request naming ``topic`` gets on an authenticated connection."""
    request = metadata_v12.MetadataRequest(
        topics=(metadata_v12.MetadataRequestTopic(topic_id=None, name=topic),), allow_auto_topic_creation=auto_create, include_topic_authorized_operations=False
    )
    response = exchange(sock, request, 10)
    [answer] = response.topics
    assert answer.name == topic
    return int(answer.error_code)


def existing_topics(s: Secured) -> set[str]:
    return set(admin(s).list_topics(timeout=TIMEOUT_S).topics)


# ---------------------------------------------------------------------------------------------
# 1. kafka-acls.sh


def blocks(stdout: str) -> set[str]:
    """kafka-acls.sh --list output as its set of resource blocks: Kafka prints them in the order of
    a java.util.HashMap keyed by ResourcePattern, whose hash (of enums) differs from run to run."""
    return {b + "\n" for b in stdout.split("\n\n") if b}


def ours(found: set[str], *names: str) -> set[str]:
    """The blocks about these resources: other tests of the module have ACLs on the same broker."""
    return {b for b in found if any(f", name={n}, " in b.split("\n", 1)[0] for n in names)}


# What Kafka 4.4's kafka-acls.sh (org.apache.kafka.tools.AclCommand) printed, byte for byte,
# against Apache Kafka 4.4 (one node, StandardAuthorizer, super.users=User:ANONYMOUS) for the
# same commands run with t1 and g1 for the names; {topic} and {group} stand for them here.
KAFKA_ADD_TOPIC_READ = (
    "Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name={topic}, patternType=LITERAL)`: \n"
    " \t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)\n\n"
)
KAFKA_ADD_PREFIXED_DENY = (
    "Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name={topic}, patternType=PREFIXED)`: \n"
    " \t(principal=User:bob, host=*, operation=WRITE, permissionType=DENY)\n\n"
)
KAFKA_ADD_GROUP_READ = (
    "Adding ACLs for resource `ResourcePattern(resourceType=GROUP, name={group}, patternType=LITERAL)`: \n"
    " \t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)\n\n"
)
# --list: one block per resource pattern, each followed by an empty line.
KAFKA_LIST_PREFIXED = (
    "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name={topic}, patternType=PREFIXED)`:\n"
    "\t(principal=User:bob, host=*, operation=WRITE, permissionType=DENY)\n"
)
KAFKA_LIST_TOPIC = (
    "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name={topic}, patternType=LITERAL)`:\n"
    "\t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)\n"
)
KAFKA_LIST_GROUP = (
    "Current ACLs for resource `ResourcePattern(resourceType=GROUP, name={group}, patternType=LITERAL)`:\n"
    "\t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)\n"
)
# --list --principal User:alice: this line, then the blocks of alice's ACLs.
KAFKA_LIST_PRINCIPAL_HEADER = "ACLs for principal `User:alice`"


def test_kafkas_own_kafka_acls_adds_lists_and_removes_acls(secured: Secured, kafka_lib: Path) -> None:
    names = {"topic": unique("acl-cli-t"), "group": unique("acl-cli-g")}
    topic, group = names["topic"], names["group"]

    def kafka_acls(*args: str) -> str:
        done = kafka_tool(kafka_lib, "org.apache.kafka.tools.AclCommand", "--bootstrap-server", secured.plain, *args)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    assert kafka_acls("--add", "--allow-principal", "User:alice", "--operation", "Read", "--topic", topic) == KAFKA_ADD_TOPIC_READ.format(**names)
    assert kafka_acls(
        "--add", "--deny-principal", "User:bob", "--operation", "Write", "--topic", topic, "--resource-pattern-type", "prefixed"
    ) == KAFKA_ADD_PREFIXED_DENY.format(**names)
    assert kafka_acls("--add", "--allow-principal", "User:alice", "--operation", "Read", "--group", group) == KAFKA_ADD_GROUP_READ.format(**names)

    listed = {KAFKA_LIST_PREFIXED.format(**names), KAFKA_LIST_TOPIC.format(**names), KAFKA_LIST_GROUP.format(**names)}
    assert ours(blocks(kafka_acls("--list")), topic, group) == listed

    header, _, rest = kafka_acls("--list", "--principal", "User:alice").partition("\n")
    assert header == KAFKA_LIST_PRINCIPAL_HEADER
    assert ours(blocks(rest), topic, group) == {KAFKA_LIST_TOPIC.format(**names), KAFKA_LIST_GROUP.format(**names)}

    # --force: no question, and Kafka prints nothing. The prefixed ACL is only matched by a
    # filter of pattern type prefixed, any or match (the default is literal).
    assert kafka_acls("--remove", "--force", "--topic", topic, "--group", group, "--resource-pattern-type", "any") == ""
    assert acls_on(secured, ResourceType.TOPIC, topic) == acls_on(secured, ResourceType.GROUP, group) == set()


# ---------------------------------------------------------------------------------------------
# 2. Produce and consume with a consumer group


def test_a_principal_without_an_acl_is_refused_and_one_with_it_produces(secured: Secured) -> None:
    topic = unique("acl-produce")
    create_topics(secured, topic)
    assert produce_as(secured, "alice", topic) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    add_acls(secured, acl(ResourceType.TOPIC, topic, "User:alice", AclOperation.WRITE))
    until_produce(secured, "alice", topic, None)
    # Only alice: bob, with no ACL of his own, is still refused.
    assert produce_as(secured, "bob", topic) == KafkaError.TOPIC_AUTHORIZATION_FAILED


def consume_as(s: Secured, name: str, topic: str, group: str, count: int, timeout_s: float = TIMEOUT_S) -> tuple[list[bytes], list[int]]:
    """Subscribe as ``name`` in ``group``; the values read (up to ``count``) and the error codes seen."""
    errors: list[int] = []
    consumer = Consumer(
        user(s, name, **{"group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False, "error_cb": lambda e: errors.append(e.code())})
    )
    values: list[bytes] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + timeout_s
        while len(values) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error() is not None:
                errors.append(msg.error().code())
                if msg.error().code() in (KafkaError.GROUP_AUTHORIZATION_FAILED, KafkaError.TOPIC_AUTHORIZATION_FAILED):
                    break
                continue
            values.append(msg.value())
    finally:
        consumer.close()
    return values, errors


def produce_records(s: Secured, topic: str, count: int) -> list[bytes]:
    """``count`` records written to ``topic`` by alice, given WRITE on it for the purpose."""
    add_acls(s, acl(ResourceType.TOPIC, topic, "User:alice", AclOperation.WRITE))
    records = [f"r{i}".encode() for i in range(count)]
    until_produce(s, "alice", topic, None, records[0])
    producer = Producer(user(s, "alice"))
    for value in records[1:]:
        producer.produce(topic, value)
    assert producer.flush(TIMEOUT_S) == 0
    return records


def test_a_consumer_without_read_on_its_group_is_refused(secured: Secured) -> None:
    topic, group = unique("acl-nogroup"), unique("acl-nogroup-g")
    create_topics(secured, topic)
    records = produce_records(secured, topic, 3)
    add_acls(secured, acl(ResourceType.TOPIC, topic, "User:carol", AclOperation.READ))
    wait_for("carol's READ listed", lambda: acls_on(secured, ResourceType.TOPIC, topic), lambda found: len(found) == 2)
    values, errors = consume_as(secured, "carol", topic, group, len(records))
    assert values == [] and KafkaError.GROUP_AUTHORIZATION_FAILED in errors, (values, errors)
    # On the wire, as Kafka 4.4 answers: FindCoordinator (DESCRIBE on the group) and JoinGroup
    # (READ on it) both refuse with GROUP_AUTHORIZATION_FAILED, and no coordinator is named.
    with sasl_socket(secured, "carol") as sock:
        [found] = exchange(sock, find_coordinator_v4.FindCoordinatorRequest(key_type=i8(0), coordinator_keys=(group,)), 20).coordinators
        assert (found.key, found.error_code, found.node_id) == (group, ErrorCode.group_authorization_failed, -1)
        join = join_group_v5.JoinGroupRequest(
            group_id=group,
            session_timeout=datetime.timedelta(seconds=10),
            rebalance_timeout=datetime.timedelta(seconds=10),
            member_id="",
            protocol_type="consumer",
            protocols=(join_group_v5.JoinGroupRequestProtocol(name="range", metadata=b""),),
        )
        assert exchange(sock, join, 21).error_code == ErrorCode.group_authorization_failed


def test_a_consumer_needs_read_on_the_topic_and_with_it_and_its_group_reads(secured: Secured) -> None:
    topic, group = unique("acl-consume"), unique("acl-consume-g")
    create_topics(secured, topic)
    records = produce_records(secured, topic, 5)

    # READ on the group but not on the topic: the topic is refused.
    add_acls(secured, acl(ResourceType.GROUP, group, "User:carol", AclOperation.READ))
    wait_for("carol's READ listed", lambda: acls_on(secured, ResourceType.GROUP, group), bool)
    values, errors = consume_as(secured, "carol", topic, group, len(records))
    assert values == [] and KafkaError.TOPIC_AUTHORIZATION_FAILED in errors, (values, errors)

    # READ on both: carol reads what alice wrote.
    add_acls(secured, acl(ResourceType.TOPIC, topic, "User:carol", AclOperation.READ))

    def attempt() -> tuple[list[bytes], list[int]]:
        return consume_as(secured, "carol", topic, group, len(records), timeout_s=10)

    values, errors = wait_for("carol consuming with READ on group and topic", attempt, lambda got: len(got[0]) == len(records))
    assert values == records


# ---------------------------------------------------------------------------------------------
# 3. How the authorizer decides


def test_deny_wins_over_allow(secured: Secured) -> None:
    topic = unique("acl-deny")
    create_topics(secured, topic)
    add_acls(secured, acl(ResourceType.TOPIC, topic, "User:bob", AclOperation.WRITE))
    until_produce(secured, "bob", topic, None)
    # A DENY of a prefix of the name, for all operations, beside the literal ALLOW of WRITE.
    add_acls(secured, acl(ResourceType.TOPIC, topic[:-3], "User:bob", AclOperation.ALL, AclPermissionType.DENY, ResourcePatternType.PREFIXED))
    until_produce(secured, "bob", topic, KafkaError.TOPIC_AUTHORIZATION_FAILED)


def test_a_prefixed_acl_allows_the_topics_starting_with_it_and_no_other(secured: Secured) -> None:
    prefix = unique("acl-pfx") + "-in"
    inside, outside = f"{prefix}.orders", prefix[:-3] + "-out.orders"
    create_topics(secured, inside, outside)
    add_acls(secured, acl(ResourceType.TOPIC, prefix, "User:alice", AclOperation.WRITE, pattern=ResourcePatternType.PREFIXED))
    until_produce(secured, "alice", inside, None)
    assert produce_as(secured, "alice", outside) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # A literal ACL named like the prefix is not a prefix.
    literal_prefix = unique("acl-lit")
    longer = f"{literal_prefix}.orders"
    create_topics(secured, longer)
    add_acls(secured, acl(ResourceType.TOPIC, literal_prefix, "User:alice", AclOperation.WRITE))
    add_acls(secured, acl(ResourceType.TOPIC, longer, "User:bob", AclOperation.WRITE))
    until_produce(secured, "bob", longer, None)
    assert produce_as(secured, "alice", longer) == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_the_wildcard_principal_allows_every_user(secured: Secured) -> None:
    topic = unique("acl-star")
    create_topics(secured, topic)
    assert produce_as(secured, "dave", topic) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    add_acls(secured, acl(ResourceType.TOPIC, topic, "User:*", AclOperation.WRITE))
    until_produce(secured, "dave", topic, None)
    assert produce_as(secured, "alice", topic) is None
    assert produce_as(secured, "bob", topic) is None


def test_a_host_specific_acl_allows_that_host_only(secured: Secured) -> None:
    here, elsewhere = unique("acl-host-here"), unique("acl-host-else")
    create_topics(secured, here, elsewhere)
    add_acls(
        secured,
        acl(ResourceType.TOPIC, here, "User:carol", AclOperation.WRITE, host="127.0.0.1"),
        acl(ResourceType.TOPIC, elsewhere, "User:carol", AclOperation.WRITE, host="10.9.8.7"),
    )
    # The clients connect from 127.0.0.1.
    until_produce(secured, "carol", here, None)
    assert produce_as(secured, "carol", elsewhere) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # The same principal from another address (a connection bound to 127.0.0.2): the ACL for
    # 127.0.0.1 does not apply. WRITE implies DESCRIBE, so a Metadata request shows the decision.
    with sasl_socket(secured, "carol", "127.0.0.1") as local, sasl_socket(secured, "carol", "127.0.0.2") as other:
        assert metadata_error(local, here) == ErrorCode.none
        assert metadata_error(other, here) == ErrorCode.topic_authorization_failed


def test_super_users_bypass_acls_even_a_deny(secured: Secured) -> None:
    unguarded, denied = unique("acl-super-none"), unique("acl-super-deny")
    create_topics(secured, unguarded, denied)
    add_acls(secured, acl(ResourceType.TOPIC, denied, "User:admin", AclOperation.ALL, AclPermissionType.DENY))
    wait_for("the DENY listed", lambda: acls_on(secured, ResourceType.TOPIC, denied), bool)
    assert produce_as(secured, "admin", unguarded) is None
    assert produce_as(secured, "admin", denied) is None
    assert produce_as(secured, "alice", unguarded) == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_allow_everyone_if_no_acl_found_allows_only_resources_without_acls(broker_factory: StartBroker) -> None:
    """A second broker with allow.everyone.if.no.acl.found=true and no super user its clients are:
    User:ANONYMOUS on PLAINTEXT may do what no ACL speaks of (create topics and ACLs, produce),
    and nothing on a topic whose ACLs name only someone else."""
    broker = broker_factory({**AUTHORIZER, "super.users": "User:admin", "allow.everyone.if.no.acl.found": "true"})
    s = Secured(broker.bootstrap, broker.bootstrap, broker)
    free, guarded = unique("acl-open"), unique("acl-guarded")
    create_topics(s, free, guarded)
    add_acls(s, acl(ResourceType.TOPIC, guarded, "User:bob", AclOperation.WRITE))

    def produce_anonymously(topic: str) -> int | None:
        outcome: list[KafkaError | None] = []
        producer = Producer({"bootstrap.servers": s.plain, "message.timeout.ms": 10_000})
        producer.produce(topic, b"v", on_delivery=lambda err, msg: outcome.append(err))
        producer.flush(TIMEOUT_S)
        assert outcome, f"no delivery report for {topic}"
        return None if outcome[0] is None else outcome[0].code()

    wait_for("ANONYMOUS refused on the guarded topic", lambda: produce_anonymously(guarded), lambda got: got == KafkaError.TOPIC_AUTHORIZATION_FAILED)
    assert produce_anonymously(free) is None


# ---------------------------------------------------------------------------------------------
# 6. Metadata


def test_metadata_shows_only_the_topics_a_principal_may_describe(secured: Secured) -> None:
    mine, theirs, nobodys = unique("acl-md-mine"), unique("acl-md-theirs"), unique("acl-md-none")
    create_topics(secured, mine, theirs, nobodys)
    add_acls(
        secured,
        acl(ResourceType.TOPIC, mine, "User:alice", AclOperation.DESCRIBE),
        acl(ResourceType.TOPIC, theirs, "User:bob", AclOperation.DESCRIBE),
    )

    def seen_by_alice() -> set[str]:
        return set(AdminClient(user(secured, "alice")).list_topics(timeout=TIMEOUT_S).topics)

    seen = wait_for("alice seeing her topic", seen_by_alice, lambda topics: mine in topics)
    assert theirs not in seen and nobodys not in seen
    assert {mine, theirs, nobodys} <= existing_topics(secured)
    # Named, a topic she may not describe is refused, whether it exists or not.
    with sasl_socket(secured, "alice") as sock:
        assert metadata_error(sock, mine) == ErrorCode.none
        assert metadata_error(sock, theirs) == ErrorCode.topic_authorization_failed
        assert metadata_error(sock, unique("acl-md-absent")) == ErrorCode.topic_authorization_failed


def test_auto_creation_needs_create(secured: Secured) -> None:
    no_acl, describe_only, may_create = unique("acl-auto-none"), unique("acl-auto-describe"), unique("acl-auto-create")
    add_acls(
        secured,
        acl(ResourceType.TOPIC, describe_only, "User:alice", AclOperation.DESCRIBE),
        acl(ResourceType.TOPIC, may_create, "User:alice", AclOperation.DESCRIBE),
        acl(ResourceType.TOPIC, may_create, "User:alice", AclOperation.CREATE),
    )
    with sasl_socket(secured, "alice") as sock:
        # Control: with CREATE (and DESCRIBE) the Metadata request creates the topic.
        wait_for("alice auto-creating with CREATE", lambda: metadata_error(sock, may_create, auto_create=True), lambda code: code in (ErrorCode.none, ErrorCode.leader_not_available))
        assert metadata_error(sock, describe_only, auto_create=True) == ErrorCode.topic_authorization_failed
        assert metadata_error(sock, no_acl, auto_create=True) == ErrorCode.topic_authorization_failed
    topics = existing_topics(secured)
    assert may_create in topics
    assert describe_only not in topics and no_acl not in topics
    # A producer without CREATE is refused the same way and creates nothing either.
    outcome: list[KafkaError | None] = []
    producer = Producer(user(secured, "alice", **{"message.timeout.ms": 10_000}))
    producer.produce(describe_only, b"v", on_delivery=lambda err, msg: outcome.append(err))
    producer.flush(TIMEOUT_S)
    assert [e.code() if e else None for e in outcome] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    assert describe_only not in existing_topics(secured)


# ---------------------------------------------------------------------------------------------
# 4. Restart: last, as it restarts the module's broker.


def test_acls_survive_a_kill_and_restart_and_are_still_enforced(secured: Secured) -> None:
    assert secured.broker is not None
    topic, group = unique("acl-restart"), unique("acl-restart-g")
    create_topics(secured, topic)
    bindings = [
        acl(ResourceType.TOPIC, topic, "User:*", AclOperation.WRITE),
        acl(ResourceType.TOPIC, topic[:-2], "User:bob", AclOperation.WRITE, AclPermissionType.DENY, ResourcePatternType.PREFIXED),
        acl(ResourceType.GROUP, group, "User:alice", AclOperation.READ, host="127.0.0.1"),
    ]
    add_acls(secured, *bindings)
    until_produce(secured, "bob", topic, KafkaError.TOPIC_AUTHORIZATION_FAILED)
    until_produce(secured, "alice", topic, None)
    expected_topic = {binding_key(b) for b in bindings[:2]}
    expected_group = {binding_key(bindings[2])}
    assert acls_on(secured, ResourceType.TOPIC, topic) >= {binding_key(bindings[0])}

    secured.broker.kill()
    secured.broker.start()

    # Asked at once: a broker opens its listeners only once it has caught up with the metadata
    # log, so its authorizer has every ACL before it answers anyone.
    # The prefixed ACL is named by its prefix: ask for both names.
    assert acls_on(secured, ResourceType.TOPIC, topic) | acls_on(secured, ResourceType.TOPIC, topic[:-2]) == expected_topic
    assert acls_on(secured, ResourceType.GROUP, group) == expected_group
    assert produce_as(secured, "alice", topic) is None
    assert produce_as(secured, "bob", topic) == KafkaError.TOPIC_AUTHORIZATION_FAILED
