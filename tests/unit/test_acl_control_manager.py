"""create_acls and delete_acls over a MetadataImage, against the cases of Kafka's AclControlManagerTest
and the checks of Kafka's AclApis; AccessControlEntryRecord and RemoveAccessControlEntryRecord
through the codec, the delta and image_records."""

from __future__ import annotations

import dataclasses
import itertools
import uuid
from collections.abc import Callable, Iterable

import pytest
from kio.schema.errors import ErrorCode

from broker.controller.acl_control_manager import MAX_RECORDS_PER_USER_OP, create_acls, delete_acls
from broker.metadata.image_writer import image_records
from broker.metadata.metadata_delta import apply_records
from broker.metadata.metadata_image import MetadataImage, MetadataImageError
from broker.metadata.metadata_records import (
    AccessControlEntryRecord,
    ConfigRecord,
    FeatureLevelRecord,
    MetadataRecord,
    RemoveAccessControlEntryRecord,
    TopicRecord,
    decode_metadata_record,
)
from broker.security.standard_acl import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    StandardAcl,
    validate_new_acl,
)
from broker.security.standard_authorizer import Action, StandardAuthorizer

TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
ALL, READ, ALTER = AclOperation.ALL, AclOperation.READ, AclOperation.ALTER
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
ANY_OP, ANY_PERMISSION = AclOperation.ANY, AclPermissionType.ANY
OK = (ErrorCode.none, None)

# Kafka's StandardAclTest.TEST_ACLS.
TEST_ACLS = [
    StandardAcl(CLUSTER, "kafka-cluster", LITERAL, "User:*", "*", ALTER, ALLOW),
    StandardAcl(TOPIC, "foo_", PREFIXED, "User:*", "*", READ, ALLOW),
    StandardAcl(GROUP, "mygroup", LITERAL, "User:foo", "*", READ, DENY),
    StandardAcl(GROUP, "mygroup", PREFIXED, "User:foo", "*", READ, DENY),
    StandardAcl(GROUP, "foo", PREFIXED, "User:foo", "*", READ, DENY),
]
ANY_FILTER = AclBindingFilter(ResourceType.ANY, None, PatternType.ANY, None, None, ANY_OP, ANY_PERMISSION)


def sequential_ids(*ints: int) -> Callable[[], uuid.UUID]:
    """new_id for create_acls: the given ids, then 1000, 1001, ..."""
    it = itertools.chain(ints, itertools.count(1000))
    return lambda: uuid.UUID(int=next(it))


def replayed(image: MetadataImage, records: Iterable[MetadataRecord]) -> MetadataImage:
    return apply_records(image, [decode_metadata_record(record.encode()) for record in records])


def image_with(*acls: StandardAcl) -> MetadataImage:
    records, results = create_acls(MetadataImage(), list(acls), sequential_ids())
    assert results == [OK] * len(acls)
    return replayed(MetadataImage(), records)


def binding_filter(acl: StandardAcl) -> AclBindingFilter:
    """AclBinding.toFilter: a filter that matches exactly that ACL."""
    return AclBindingFilter(acl.resource_type, acl.resource_name, acl.pattern_type, acl.principal, acl.host, acl.operation, acl.permission_type)


# AclControlManagerTest.testValidateNewAcl, and the other concrete-value checks.


def test_validate_new_acl_refuses_what_kafka_refuses() -> None:
    valid = StandardAcl(TOPIC, "*", LITERAL, "User:*", "*", ALTER, ALLOW)
    assert validate_new_acl(valid) is None
    cases = {
        "Invalid patternType UNKNOWN": dataclasses.replace(valid, pattern_type=PatternType.UNKNOWN),
        "Invalid patternType ANY": dataclasses.replace(valid, pattern_type=PatternType.ANY),
        "Invalid patternType MATCH": dataclasses.replace(valid, pattern_type=PatternType.MATCH),
        "Invalid resourceType UNKNOWN": dataclasses.replace(valid, resource_type=ResourceType.UNKNOWN),
        "Invalid resourceType ANY": dataclasses.replace(valid, resource_type=ResourceType.ANY),
        "Invalid operation UNKNOWN": dataclasses.replace(valid, operation=AclOperation.UNKNOWN),
        "Invalid operation ANY": dataclasses.replace(valid, operation=ANY_OP),
        "Invalid permissionType UNKNOWN": dataclasses.replace(valid, permission_type=AclPermissionType.UNKNOWN),
        "Invalid permissionType ANY": dataclasses.replace(valid, permission_type=ANY_PERMISSION),
        "Resource name should not be empty": dataclasses.replace(valid, resource_name=""),
    }
    for message, acl in cases.items():
        assert validate_new_acl(acl) == message
    # Kafka checks in this order: resource type, pattern type, operation, permission, name.
    assert validate_new_acl(StandardAcl(ResourceType.ANY, "", PatternType.MATCH, "User:*", "*", ANY_OP, ANY_PERMISSION)) == "Invalid resourceType ANY"
    assert validate_new_acl(StandardAcl(TOPIC, "", PatternType.MATCH, "User:*", "*", ANY_OP, ANY_PERMISSION)) == "Invalid patternType MATCH"
    assert validate_new_acl(StandardAcl(TOPIC, "", LITERAL, "User:*", "*", ANY_OP, ANY_PERMISSION)) == "Invalid operation ANY"
    assert validate_new_acl(StandardAcl(TOPIC, "", LITERAL, "User:*", "*", READ, ANY_PERMISSION)) == "Invalid permissionType ANY"


VALID = StandardAcl(TOPIC, "t", LITERAL, "User:alice", "*", READ, ALLOW)


@pytest.mark.parametrize(
    ("acl", "message"),
    [
        (StandardAcl(CLUSTER, "my-cluster", LITERAL, "User:*", "*", ALTER, ALLOW), "The only valid name for the CLUSTER resource is kafka-cluster"),
        (StandardAcl(CLUSTER, "", LITERAL, "User:*", "*", ALTER, ALLOW), "The only valid name for the CLUSTER resource is kafka-cluster"),
        (dataclasses.replace(VALID, resource_name=""), "Invalid empty resource name"),
        (dataclasses.replace(VALID, resource_type=ResourceType.ANY), "Invalid resourceType ANY"),
        (dataclasses.replace(VALID, resource_type=ResourceType.UNKNOWN), "Invalid resourceType UNKNOWN"),
        (dataclasses.replace(VALID, pattern_type=PatternType.MATCH), "Invalid patternType MATCH"),
        (dataclasses.replace(VALID, pattern_type=PatternType.ANY), "Invalid patternType ANY"),
        (dataclasses.replace(VALID, pattern_type=PatternType.UNKNOWN), "Invalid patternType UNKNOWN"),
        (dataclasses.replace(VALID, operation=ANY_OP), "Invalid operation ANY"),
        (dataclasses.replace(VALID, operation=AclOperation.UNKNOWN), "Invalid operation UNKNOWN"),
        (dataclasses.replace(VALID, permission_type=ANY_PERMISSION), "Invalid permissionType ANY"),
        (dataclasses.replace(VALID, permission_type=AclPermissionType.UNKNOWN), "Invalid permissionType UNKNOWN"),
        (dataclasses.replace(VALID, principal="alice"), None),
    ],
)
def test_invalid_creations_answer_invalid_request_and_write_nothing(acl: StandardAcl, message: str | None) -> None:
    other = StandardAcl(GROUP, "g", LITERAL, "User:bob", "*", READ, ALLOW)
    records, results = create_acls(MetadataImage(), [acl, other], sequential_ids())
    assert results[1] == OK
    assert results[0][0] == ErrorCode.invalid_request
    if message is not None:
        assert results[0][1] == message
    assert [r for r in records if isinstance(r, AccessControlEntryRecord)] == [AccessControlEntryRecord(id=uuid.UUID(int=1000), **dataclasses.asdict(other))]


def test_the_cluster_resource_is_named_kafka_cluster() -> None:
    literal = StandardAcl(CLUSTER, "kafka-cluster", LITERAL, "User:*", "*", ALTER, ALLOW)
    prefixed = dataclasses.replace(literal, pattern_type=PREFIXED)
    records, results = create_acls(MetadataImage(), [literal, prefixed])
    assert results == [OK, OK]
    assert len(records) == 2


def test_a_creation_with_an_empty_host_answers_invalid_request() -> None:
    records, results = create_acls(MetadataImage(), [dataclasses.replace(VALID, host="")], sequential_ids())
    assert results == [(ErrorCode.invalid_request, "Host pattern cannot be null or empty")]
    assert records == []


# AclControlManagerTest.testCreateAclDeleteAcl.


def test_create_then_delete_as_kafkas_acl_control_manager() -> None:
    unknown_pattern = StandardAcl(TOPIC, "*", PatternType.UNKNOWN, "User:*", "*", ALTER, ALLOW)
    records, results = create_acls(MetadataImage(), [*TEST_ACLS[:3], unknown_pattern], sequential_ids(1, 2, 3))
    assert results == [OK, OK, OK, (ErrorCode.invalid_request, "Invalid patternType UNKNOWN")]
    assert records == [AccessControlEntryRecord(id=uuid.UUID(int=i + 1), **dataclasses.asdict(acl)) for i, acl in enumerate(TEST_ACLS[:3])]
    image = replayed(MetadataImage(), records)
    assert dict(image.acls) == {uuid.UUID(int=i + 1): acl for i, acl in enumerate(TEST_ACLS[:3])}

    literal_filter = AclBindingFilter(ResourceType.ANY, None, LITERAL, None, None, ANY_OP, ANY_PERMISSION)
    unknown_filter = AclBindingFilter(ResourceType.UNKNOWN, None, LITERAL, None, None, ANY_OP, ANY_PERMISSION)
    records, deleted = delete_acls(image, [literal_filter, unknown_filter])
    assert len(deleted) == 2
    assert deleted[0][:2] == OK
    assert set(deleted[0][2]) == {TEST_ACLS[0], TEST_ACLS[2]}
    assert deleted[1] == (ErrorCode.invalid_request, "Unknown patternFilter.", [])
    assert sorted(records, key=lambda r: r.id) == [RemoveAccessControlEntryRecord(id=uuid.UUID(int=1)), RemoveAccessControlEntryRecord(id=uuid.UUID(int=3))]
    assert dict(replayed(image, records).acls) == {uuid.UUID(int=2): TEST_ACLS[1]}


# AclControlManagerTest.testValidateFilter.


def test_delete_filters_with_an_unknown_part_answer_invalid_request() -> None:
    image = image_with(*TEST_ACLS)
    valid = AclBindingFilter(ResourceType.ANY, "*", LITERAL, "User:*", "*", ANY_OP, ANY_PERMISSION)
    unknown_pattern = AclBindingFilter(ResourceType.ANY, "*", PatternType.UNKNOWN, "User:*", "*", ANY_OP, ANY_PERMISSION)
    unknown_permission = AclBindingFilter(ResourceType.ANY, "*", PatternType.MATCH, "User:*", "*", ANY_OP, AclPermissionType.UNKNOWN)
    unknown_operation = AclBindingFilter(TOPIC, None, PatternType.ANY, None, None, AclOperation.UNKNOWN, ANY_PERMISSION)
    records, results = delete_acls(image, [valid, unknown_pattern, unknown_permission, unknown_operation])
    assert results == [
        (ErrorCode.none, None, []),
        (ErrorCode.invalid_request, "Unknown patternFilter.", []),
        (ErrorCode.invalid_request, "Unknown entryFilter.", []),
        (ErrorCode.invalid_request, "Unknown entryFilter.", []),
    ]
    assert records == []


# AclControlManagerTest.testDeleteDedupe.


def test_delete_filters_matching_the_same_acl_remove_it_once() -> None:
    acl = StandardAcl(TOPIC, "topic-1", LITERAL, "User:user", "10.0.0.1", ALL, ALLOW)
    records, results = create_acls(MetadataImage(), [acl])
    assert results == [OK]
    assert len(records) == 1
    acl_id = records[0].id
    image = replayed(MetadataImage(), records)
    remove = [RemoveAccessControlEntryRecord(id=acl_id)]

    assert delete_acls(image, [ANY_FILTER]) == (remove, [(ErrorCode.none, None, [acl])])
    assert delete_acls(image, [binding_filter(acl)]) == (remove, [(ErrorCode.none, None, [acl])])
    # Each filter answers the ACLs it matched, though only one record removes it.
    assert delete_acls(image, [ANY_FILTER, binding_filter(acl)]) == (remove, [(ErrorCode.none, None, [acl])] * 2)
    assert replayed(image, remove).acls == {}


def test_a_delete_filter_matches_as_its_pattern_type_says() -> None:
    image = image_with(*TEST_ACLS)

    def deleted(acl_filter: AclBindingFilter) -> set[StandardAcl]:
        records, [(code, _, acls)] = delete_acls(image, [acl_filter])
        assert code == ErrorCode.none
        assert {r.id for r in records} == {acl_id for acl_id, acl in image.acls.items() if acl in acls}
        return set(acls)

    def group(name: str | None, pattern_type: int) -> AclBindingFilter:
        return AclBindingFilter(GROUP, name, pattern_type, None, None, ANY_OP, ANY_PERMISSION)

    assert deleted(group("mygroup", LITERAL)) == {TEST_ACLS[2]}
    assert deleted(group("mygroup", PREFIXED)) == {TEST_ACLS[3]}
    assert deleted(group("mygroup", PatternType.ANY)) == {TEST_ACLS[2], TEST_ACLS[3]}
    # MATCH: every ACL that applies to the resource named, as the authorizer would apply it.
    assert deleted(group("mygroup", PatternType.MATCH)) == {TEST_ACLS[2], TEST_ACLS[3]}
    assert deleted(group("mygroupie", PatternType.MATCH)) == {TEST_ACLS[3]}
    assert deleted(group("food", PatternType.MATCH)) == {TEST_ACLS[4]}
    assert deleted(group(None, PatternType.MATCH)) == set(TEST_ACLS[2:])
    assert deleted(AclBindingFilter(ResourceType.ANY, None, PatternType.ANY, "User:foo", None, READ, DENY)) == set(TEST_ACLS[2:])
    assert deleted(AclBindingFilter(ResourceType.ANY, None, PatternType.ANY, "User:nobody", None, ANY_OP, ANY_PERMISSION)) == set()


def test_deleting_from_an_image_without_acls_deletes_nothing() -> None:
    assert delete_acls(MetadataImage(), [ANY_FILTER]) == ([], [(ErrorCode.none, None, [])])
    assert delete_acls(MetadataImage(), []) == ([], [])


# Creating what exists.


def test_creating_an_acl_twice_writes_one_record_and_answers_success_for_both() -> None:
    acl = TEST_ACLS[1]
    records, results = create_acls(MetadataImage(), [acl, acl], sequential_ids())
    assert results == [OK, OK]
    assert records == [AccessControlEntryRecord(id=uuid.UUID(int=1000), **dataclasses.asdict(acl))]


def test_creating_an_acl_the_image_holds_writes_nothing_and_answers_success() -> None:
    image = image_with(*TEST_ACLS[:2])
    records, results = create_acls(image, [TEST_ACLS[0], TEST_ACLS[2], TEST_ACLS[1]], sequential_ids(5000))
    assert results == [OK, OK, OK]
    assert records == [AccessControlEntryRecord(id=uuid.UUID(int=5000), **dataclasses.asdict(TEST_ACLS[2]))]
    # An ACL differing in one field only is another ACL.
    records, results = create_acls(image, [dataclasses.replace(TEST_ACLS[0], permission_type=DENY)])
    assert results == [OK]
    assert len(records) == 1


def test_new_ids_skip_the_ids_of_the_image() -> None:
    image = image_with(TEST_ACLS[0])
    taken = next(iter(image.acls))
    records, results = create_acls(image, [TEST_ACLS[1]], sequential_ids(taken.int, taken.int, 7))
    assert results == [OK]
    assert [r.id for r in records] == [uuid.UUID(int=7)]


def test_new_ids_skip_the_ids_drawn_earlier_in_the_same_request() -> None:
    records, results = create_acls(MetadataImage(), TEST_ACLS[:2], sequential_ids(9, 9, 10))
    assert results == [OK, OK]
    assert len({r.id for r in records}) == 2


def test_at_most_max_records_per_user_op_acls_are_created_at_once() -> None:
    acls = [StandardAcl(TOPIC, f"t{i}", LITERAL, "User:a", "*", READ, ALLOW) for i in range(MAX_RECORDS_PER_USER_OP + 1)]
    # MAX_RECORDS_PER_USER_OP new ACLs are written; duplicates and refused ACLs write no record, so do not count.
    records, results = create_acls(MetadataImage(), acls[:-1] + [acls[0], dataclasses.replace(acls[0], resource_name="")])
    assert len(records) == MAX_RECORDS_PER_USER_OP
    assert results[:-1] == [OK] * (MAX_RECORDS_PER_USER_OP + 1)
    assert results[-1][0] == ErrorCode.invalid_request
    # One new ACL more and nothing is written; every creation fails.
    records, results = create_acls(MetadataImage(), acls)
    assert records == []
    assert len(results) == len(acls)
    assert all(code != ErrorCode.none for code, _ in results)


def test_too_many_acls_at_once_answer_policy_violation() -> None:
    acls = [StandardAcl(TOPIC, f"t{i}", LITERAL, "User:a", "*", READ, ALLOW) for i in range(MAX_RECORDS_PER_USER_OP + 1)]
    _, results = create_acls(MetadataImage(), acls)
    assert {code for code, _ in results} == {ErrorCode.policy_violation}


# The records.


def test_acl_records_round_trip_through_the_codec() -> None:
    for i, acl in enumerate([*TEST_ACLS, StandardAcl(ResourceType.USER, "ünïcode", LITERAL, "User:ü", "::1", AclOperation.TWO_PHASE_COMMIT, DENY)]):
        record = AccessControlEntryRecord(id=uuid.UUID(int=(i + 1) << 64 | 7), **dataclasses.asdict(acl))
        assert decode_metadata_record(record.encode()) == record
        assert decode_metadata_record(memoryview(record.encode())) == record
    remove = RemoveAccessControlEntryRecord(id=uuid.uuid4())
    assert decode_metadata_record(remove.encode()) == remove


def test_acl_records_are_encoded_as_kafkas_schema() -> None:
    # AccessControlEntryRecord.json: apiKey 18, version 0, flexible; Id uuid, ResourceType int8, ResourceName
    # string, PatternType int8, Principal string, Host string, Operation int8, PermissionType int8.
    acl_id = uuid.UUID("0123456789abcdef0123456789abcdef")
    record = AccessControlEntryRecord(id=acl_id, **dataclasses.asdict(TEST_ACLS[1]))
    assert record.encode() == b"\x01\x12\x00" + acl_id.bytes + b"\x02" + b"\x05foo_" + b"\x04" + b"\x07User:*" + b"\x02*" + b"\x03" + b"\x03" + b"\x00"
    # RemoveAccessControlEntryRecord.json: apiKey 19, version 0, flexible; Id uuid.
    assert RemoveAccessControlEntryRecord(id=acl_id).encode() == b"\x01\x13\x00" + acl_id.bytes + b"\x00"
    assert decode_metadata_record(b"\x01\x13\x00" + acl_id.bytes + b"\x00") == RemoveAccessControlEntryRecord(id=acl_id)


def test_replaying_acl_records_adds_and_removes_acls() -> None:
    a, b = uuid.UUID(int=1), uuid.UUID(int=2)
    added = [AccessControlEntryRecord(id=a, **dataclasses.asdict(TEST_ACLS[0])), AccessControlEntryRecord(id=b, **dataclasses.asdict(TEST_ACLS[1]))]
    image = replayed(MetadataImage(), added)
    assert dict(image.acls) == {a: TEST_ACLS[0], b: TEST_ACLS[1]}
    assert not image.is_empty
    image = replayed(image, [RemoveAccessControlEntryRecord(id=a)])
    assert dict(image.acls) == {b: TEST_ACLS[1]}
    with pytest.raises(MetadataImageError):
        replayed(image, [RemoveAccessControlEntryRecord(id=a)])


def test_image_records_rebuild_an_image_with_acls() -> None:
    image = replayed(
        MetadataImage(),
        [
            FeatureLevelRecord(name="metadata.version", feature_level=25),
            TopicRecord(name="orders", topic_id=uuid.UUID(int=99)),
            ConfigRecord(resource_type=2, resource_name="orders", name="retention.ms", value="1000"),
        ],
    )
    records, _ = create_acls(image, TEST_ACLS)
    image = replayed(image, records)
    snapshot = image_records(image)
    # ACLs come last, one record per ACL, in id order.
    acl_records = [r for r in snapshot if isinstance(r, AccessControlEntryRecord)]
    assert snapshot[-len(TEST_ACLS) :] == acl_records
    assert [r.id for r in acl_records] == sorted(image.acls)
    rebuilt = replayed(MetadataImage(), snapshot)
    assert dataclasses.replace(rebuilt, provenance=image.provenance, provenance_epoch=image.provenance_epoch) == image
    assert dict(rebuilt.acls) == dict(image.acls)


def test_an_image_of_acls_only_rebuilds_and_empties() -> None:
    image = image_with(*TEST_ACLS)
    rebuilt = replayed(MetadataImage(), image_records(image))
    assert dict(rebuilt.acls) == dict(image.acls)
    emptied = replayed(image, delete_acls(image, [ANY_FILTER])[0])
    assert emptied.acls == {}
    assert emptied.is_empty
    assert image_records(emptied) == []


def test_an_authorizer_over_the_image_applies_the_created_acls() -> None:
    image = image_with(*TEST_ACLS)
    az = StandardAuthorizer(image.acls.values(), frozenset(), False)
    assert az.authorize("User:x", "10.0.0.1", Action(READ, TOPIC, "foo_bar"))
    assert az.authorize("User:x", "10.0.0.1", Action(ALTER, CLUSTER, "kafka-cluster"))
    assert not az.authorize("User:foo", "10.0.0.1", Action(READ, GROUP, "mygroup"))
    assert not az.authorize("User:foo", "10.0.0.1", Action(READ, GROUP, "food"))
    assert not az.authorize("User:foo", "10.0.0.1", Action(READ, GROUP, "other"))


def test_acls_on_delegation_tokens_and_users_are_kept_and_decided_as_any_other() -> None:
    """Kafka's resource types 6 and 7 (kafka-acls --delegation-token, --user-principal): stored,
    replayed and authorized like topics' ACLs; kbroker serves no delegation token to use them on."""
    token = StandardAcl(ResourceType.DELEGATION_TOKEN, "token-1", LITERAL, "User:alice", "*", AclOperation.DESCRIBE, ALLOW)
    user = StandardAcl(ResourceType.USER, "bob", LITERAL, "User:alice", "*", AclOperation.CREATE_TOKENS, ALLOW)
    image = image_with(token, user)
    assert set(image.acls.values()) == {token, user}
    authorizer = StandardAuthorizer(image.acls.values(), frozenset(), allow_everyone_if_no_acl_found=False)
    assert authorizer.authorize("User:alice", "10.0.0.1", Action(AclOperation.DESCRIBE, ResourceType.DELEGATION_TOKEN, "token-1"))
    assert not authorizer.authorize("User:alice", "10.0.0.1", Action(AclOperation.DESCRIBE, ResourceType.DELEGATION_TOKEN, "token-2"))
    assert authorizer.authorize("User:alice", "10.0.0.1", Action(AclOperation.CREATE_TOKENS, ResourceType.USER, "bob"))
