"""StandardAcl, AclBindingFilter and StandardAuthorizer against the cases of Kafka's own tests
(StandardAuthorizerTest, BaseAuthorizerTest's authorizeByResourceType cases, ResourcePatternFilterTest,
AclBindingTest), and against a brute-force reading of the rules for random ACLs and actions."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.security.standard_acl import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    StandardAcl,
    from_code,
)
from broker.security.standard_authorizer import Action, StandardAuthorizer, parse_super_users

TOPIC, GROUP, CLUSTER, TXN = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
ALL, READ, WRITE, CREATE = AclOperation.ALL, AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE
DELETE, ALTER, DESCRIBE = AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE
DESCRIBE_CONFIGS, ALTER_CONFIGS = AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
ANY_TYPE, ANY_PATTERN, MATCH = ResourceType.ANY, PatternType.ANY, PatternType.MATCH
ANY_OP, ANY_PERMISSION = AclOperation.ANY, AclPermissionType.ANY

LOCAL = "127.0.0.1"
HOST1 = "192.168.1.1"
HOST2 = "192.168.1.2"
SUPERMAN = "User:superman"


def authorizer(*acls: StandardAcl, allow_everyone_if_no_acl_found: bool = False) -> StandardAuthorizer:
    """As Kafka's createAndInitializeStandardAuthorizer: super.users=User:superman."""
    return StandardAuthorizer(acls, frozenset({SUPERMAN}), allow_everyone_if_no_acl_found)


def results(az: StandardAuthorizer, principal: str, *actions: tuple[int, int, str], host: str = LOCAL) -> list[bool]:
    return [az.authorize(principal, host, Action(op, resource_type, name)) for op, resource_type, name in actions]


def foo_acl(op: int, permission: int) -> StandardAcl:
    return StandardAcl(TOPIC, "foo_", PREFIXED, "User:bob", "*", op, permission)


def bar_acl(op: int, permission: int) -> StandardAcl:
    return StandardAcl(GROUP, "bar", LITERAL, "User:*", "*", op, permission)


# The enums carry Kafka's codes: the ones on the wire and in AccessControlEntryRecord.


@pytest.mark.parametrize(
    ("enum", "codes"),
    [
        (ResourceType, {"UNKNOWN": 0, "ANY": 1, "TOPIC": 2, "GROUP": 3, "CLUSTER": 4, "TRANSACTIONAL_ID": 5, "DELEGATION_TOKEN": 6, "USER": 7}),
        (PatternType, {"UNKNOWN": 0, "ANY": 1, "MATCH": 2, "LITERAL": 3, "PREFIXED": 4}),
        (
            AclOperation,
            {
                "UNKNOWN": 0,
                "ANY": 1,
                "ALL": 2,
                "READ": 3,
                "WRITE": 4,
                "CREATE": 5,
                "DELETE": 6,
                "ALTER": 7,
                "DESCRIBE": 8,
                "CLUSTER_ACTION": 9,
                "DESCRIBE_CONFIGS": 10,
                "ALTER_CONFIGS": 11,
                "IDEMPOTENT_WRITE": 12,
                "CREATE_TOKENS": 13,
                "DESCRIBE_TOKENS": 14,
                "TWO_PHASE_COMMIT": 15,
            },
        ),
        (AclPermissionType, {"UNKNOWN": 0, "ANY": 1, "DENY": 2, "ALLOW": 3}),
    ],
)
def test_enums_have_kafkas_codes(enum: type, codes: dict[str, int]) -> None:
    assert {member.name: member.value for member in enum} == codes


def test_from_code_reads_an_unknown_code_as_unknown() -> None:
    assert from_code(ResourceType, 2) == TOPIC
    assert from_code(PatternType, 4) == PREFIXED
    assert from_code(AclOperation, 15) == AclOperation.TWO_PHASE_COMMIT
    assert from_code(AclPermissionType, 3) == ALLOW
    for enum, code in [(ResourceType, 8), (PatternType, 5), (AclOperation, 16), (AclPermissionType, 4), (AclOperation, -1), (ResourceType, 127)]:
        assert from_code(enum, code) == 0


# ResourcePatternFilterTest: the pattern half of a filter.


def pattern_filter(resource_type: int, name: str | None, pattern_type: int) -> AclBindingFilter:
    return AclBindingFilter(resource_type, name, pattern_type, None, None, ANY_OP, ANY_PERMISSION)


def pattern(resource_type: int, name: str, pattern_type: int) -> StandardAcl:
    return StandardAcl(resource_type, name, pattern_type, "User:alice", "*", READ, ALLOW)


@pytest.mark.parametrize(
    ("acl_filter", "acl", "matches"),
    [
        (pattern_filter(TOPIC, "Name", LITERAL), pattern(GROUP, "Name", LITERAL), False),
        (pattern_filter(TOPIC, "Different", PREFIXED), pattern(TOPIC, "Name", PREFIXED), False),
        (pattern_filter(TOPIC, "NAME", LITERAL), pattern(TOPIC, "Name", LITERAL), False),
        (pattern_filter(TOPIC, "Name", LITERAL), pattern(TOPIC, "Name", PREFIXED), False),
        (pattern_filter(ANY_TYPE, "Name", PREFIXED), pattern(TOPIC, "Name", PREFIXED), True),
        (pattern_filter(TOPIC, None, PREFIXED), pattern(TOPIC, "Name", PREFIXED), True),
        (pattern_filter(TOPIC, None, ANY_PATTERN), pattern(TOPIC, "Name", PREFIXED), True),
        (pattern_filter(TOPIC, None, MATCH), pattern(TOPIC, "Name", PREFIXED), True),
        (pattern_filter(TOPIC, "Name", LITERAL), pattern(TOPIC, "Name", LITERAL), True),
        (pattern_filter(TOPIC, "Name", ANY_PATTERN), pattern(TOPIC, "Name", LITERAL), True),
        (pattern_filter(TOPIC, "Name", MATCH), pattern(TOPIC, "Name", LITERAL), True),
        (pattern_filter(TOPIC, "Name-something", MATCH), pattern(TOPIC, "Name", LITERAL), False),
        (pattern_filter(TOPIC, "*", LITERAL), pattern(TOPIC, "*", LITERAL), True),
        (pattern_filter(TOPIC, "Name", LITERAL), pattern(TOPIC, "*", LITERAL), False),
        (pattern_filter(TOPIC, "*", LITERAL), pattern(TOPIC, "Name", LITERAL), False),
        (pattern_filter(TOPIC, "Name", ANY_PATTERN), pattern(TOPIC, "*", LITERAL), False),
        (pattern_filter(TOPIC, "Name", MATCH), pattern(TOPIC, "*", LITERAL), True),
        (pattern_filter(TOPIC, "Name", PREFIXED), pattern(TOPIC, "Name", PREFIXED), True),
        (pattern_filter(TOPIC, "Name", PREFIXED), pattern(TOPIC, "Name-something", PREFIXED), False),
        (pattern_filter(TOPIC, "Name-something", PREFIXED), pattern(TOPIC, "Name", PREFIXED), False),
        (pattern_filter(TOPIC, "Name-something", ANY_PATTERN), pattern(TOPIC, "Name", PREFIXED), False),
        (pattern_filter(TOPIC, "Name-something", MATCH), pattern(TOPIC, "Name", PREFIXED), True),
        # MATCH: a prefixed ACL whose name is not a prefix of the filter's name does not match.
        (pattern_filter(TOPIC, "Other", MATCH), pattern(TOPIC, "Name", PREFIXED), False),
        (pattern_filter(TOPIC, "Name", MATCH), pattern(TOPIC, "Name-something", PREFIXED), False),
    ],
)
def test_pattern_filter_matches_as_kafkas_resource_pattern_filter(acl_filter: AclBindingFilter, acl: StandardAcl, matches: bool) -> None:
    assert acl_filter.matches(acl) is matches


# AclBindingTest: the entry half of a filter.

ACL1 = StandardAcl(TOPIC, "mytopic", LITERAL, "User:ANONYMOUS", "", ALL, ALLOW)
ACL2 = StandardAcl(TOPIC, "mytopic", LITERAL, "User:*", "", READ, ALLOW)
ACL3 = StandardAcl(TOPIC, "mytopic2", LITERAL, "User:ANONYMOUS", "127.0.0.1", READ, DENY)
UNKNOWN_ACL = StandardAcl(TOPIC, "mytopic2", LITERAL, "User:ANONYMOUS", "127.0.0.1", AclOperation.UNKNOWN, DENY)
ANY_FILTER = AclBindingFilter(ANY_TYPE, None, ANY_PATTERN, None, None, ANY_OP, ANY_PERMISSION)
ANY_ANONYMOUS = AclBindingFilter(ANY_TYPE, None, ANY_PATTERN, "User:ANONYMOUS", None, ANY_OP, ANY_PERMISSION)
ANY_DENY = AclBindingFilter(ANY_TYPE, None, ANY_PATTERN, None, None, ANY_OP, DENY)
ANY_MYTOPIC = AclBindingFilter(TOPIC, "mytopic", LITERAL, None, None, ANY_OP, ANY_PERMISSION)


def test_binding_filters_match_as_kafkas_acl_binding_test() -> None:
    assert [ANY_FILTER.matches(a) for a in (ACL1, ACL2, ACL3, UNKNOWN_ACL)] == [True, True, True, True]
    assert [ANY_ANONYMOUS.matches(a) for a in (ACL1, ACL2, ACL3, UNKNOWN_ACL)] == [True, False, True, True]
    assert [ANY_DENY.matches(a) for a in (ACL1, ACL2, ACL3, UNKNOWN_ACL)] == [False, False, True, True]
    assert [ANY_MYTOPIC.matches(a) for a in (ACL1, ACL2, ACL3, UNKNOWN_ACL)] == [True, True, False, False]


def test_entry_filter_matches_principal_host_operation_and_permission_exactly() -> None:
    acl = StandardAcl(TOPIC, "t", LITERAL, "User:alice", "10.0.0.1", WRITE, ALLOW)

    def entry(principal: str | None, host: str | None, op: int, permission: int) -> AclBindingFilter:
        return AclBindingFilter(TOPIC, "t", LITERAL, principal, host, op, permission)

    assert entry("User:alice", "10.0.0.1", WRITE, ALLOW).matches(acl)
    assert not entry("User:*", None, ANY_OP, ANY_PERMISSION).matches(acl)  # no wildcard expansion in a filter
    assert not entry(None, "*", ANY_OP, ANY_PERMISSION).matches(acl)
    assert not entry(None, None, ALL, ANY_PERMISSION).matches(acl)  # ALL in a filter is the operation ALL
    assert not entry(None, None, ANY_OP, DENY).matches(acl)


def test_filters_with_an_unknown_part_are_unknown() -> None:
    assert not ANY_FILTER.is_unknown()
    assert not ANY_ANONYMOUS.is_unknown()
    assert not ANY_DENY.is_unknown()
    assert not ANY_MYTOPIC.is_unknown()
    assert AclBindingFilter(ResourceType.UNKNOWN, None, LITERAL, None, None, ANY_OP, ANY_PERMISSION).is_unknown()
    assert AclBindingFilter(GROUP, None, PatternType.UNKNOWN, None, None, ANY_OP, ANY_PERMISSION).is_unknown()
    assert AclBindingFilter(TOPIC, None, LITERAL, None, None, AclOperation.UNKNOWN, ANY_PERMISSION).is_unknown()
    assert AclBindingFilter(TOPIC, None, LITERAL, None, None, ANY_OP, AclPermissionType.UNKNOWN).is_unknown()


# StandardAuthorizerTest.


def test_parse_super_users_as_kafkas_get_configured_super_users() -> None:
    assert parse_super_users("") == frozenset()
    assert parse_super_users(" ") == frozenset()
    assert parse_super_users("User:bob;User:alice ") == {"User:bob", "User:alice"}
    assert parse_super_users(";  User:bob  ;  User:alice ") == {"User:bob", "User:alice"}


def test_parse_super_users_refuses_a_principal_without_a_type() -> None:
    with pytest.raises(ValueError, match="principalType:principalName"):
        parse_super_users("bob;:alice")


@pytest.mark.parametrize("op", [DESCRIBE, READ, WRITE, DELETE, ALTER])
def test_an_allow_of_read_write_delete_or_alter_allows_describe(op: int) -> None:
    assert results(authorizer(foo_acl(op, ALLOW)), "User:bob", (DESCRIBE, TOPIC, "foo_bar")) == [True]


def test_an_allow_of_create_does_not_allow_describe() -> None:
    az = authorizer(foo_acl(CREATE, ALLOW))
    assert results(az, "User:bob", (DESCRIBE, TOPIC, "foo_bar"), (CREATE, TOPIC, "foo_bar")) == [False, True]


@pytest.mark.parametrize("op", [READ, WRITE, DELETE, ALTER])
def test_a_deny_of_read_write_delete_or_alter_does_not_deny_describe(op: int) -> None:
    az = authorizer(foo_acl(op, DENY), foo_acl(DESCRIBE, ALLOW))
    assert results(az, "User:bob", (DESCRIBE, TOPIC, "foo_bar"), (op, TOPIC, "foo_bar")) == [True, False]
    assert results(authorizer(foo_acl(DESCRIBE, DENY), foo_acl(READ, ALLOW)), "User:bob", (DESCRIBE, TOPIC, "foo_bar")) == [False]


@pytest.mark.parametrize("op", [DESCRIBE_CONFIGS, ALTER_CONFIGS])
def test_an_allow_of_alter_configs_allows_describe_configs(op: int) -> None:
    assert results(authorizer(foo_acl(op, ALLOW)), "User:bob", (DESCRIBE_CONFIGS, TOPIC, "foo_bar")) == [True]


def test_a_deny_of_alter_configs_does_not_deny_describe_configs() -> None:
    az = authorizer(foo_acl(ALTER_CONFIGS, DENY), foo_acl(DESCRIBE_CONFIGS, ALLOW))
    assert results(az, "User:bob", (DESCRIBE_CONFIGS, TOPIC, "foo_bar"), (ALTER_CONFIGS, TOPIC, "foo_bar")) == [True, False]


def test_implication_goes_one_way_only() -> None:
    az = authorizer(foo_acl(DESCRIBE, ALLOW), foo_acl(DESCRIBE_CONFIGS, ALLOW), foo_acl(ALTER, ALLOW))
    assert results(az, "User:bob", (READ, TOPIC, "foo_x"), (ALTER_CONFIGS, TOPIC, "foo_x"), (DESCRIBE_CONFIGS, TOPIC, "foo_x"), (ALTER, TOPIC, "foo_x")) == [
        False,
        False,
        True,
        True,
    ]
    # ALTER implies DESCRIBE, not DESCRIBE_CONFIGS.
    assert results(authorizer(foo_acl(ALTER, ALLOW)), "User:bob", (DESCRIBE_CONFIGS, TOPIC, "foo_x")) == [False]


def test_principal_must_match_or_the_acl_be_for_user_wildcard() -> None:
    assert results(authorizer(foo_acl(READ, ALLOW)), "User:bob", (READ, TOPIC, "foo_bar")) == [True]
    assert results(authorizer(foo_acl(READ, ALLOW)), "User:alice", (READ, TOPIC, "foo_bar")) == [False]
    assert results(authorizer(bar_acl(READ, DENY), bar_acl(ALL, ALLOW)), "User:alice", (READ, GROUP, "bar"), (WRITE, GROUP, "bar")) == [False, True]
    # Kafka matches an ACL for User:* whatever the principal's type; principals are compared whole.
    assert results(authorizer(bar_acl(READ, ALLOW)), "Group:devs", (READ, GROUP, "bar")) == [True]
    assert results(authorizer(StandardAcl(GROUP, "bar", LITERAL, "User:Alice", "*", READ, ALLOW)), "User:alice", (READ, GROUP, "bar")) == [False]


def test_acls_lists_what_the_filter_matches() -> None:
    foo = [foo_acl(READ, ALLOW), foo_acl(WRITE, ALLOW)]
    bar = [bar_acl(DESCRIBE_CONFIGS, DENY), bar_acl(ALTER_CONFIGS, DENY)]
    az = authorizer(*foo, *bar)
    assert set(az.acls(ANY_FILTER)) == {*foo, *bar}
    assert len(list(az.acls(ANY_FILTER))) == 4
    assert set(authorizer(foo[0], *bar).acls(ANY_FILTER)) == {foo[0], *bar}
    assert list(authorizer(foo[0], *bar).acls(pattern_filter(TOPIC, None, ANY_PATTERN))) == [foo[0]]
    assert list(az.acls(AclBindingFilter(GROUP, "bar", MATCH, "User:*", "*", ALTER_CONFIGS, DENY))) == [bar[1]]
    assert set(az.acls(pattern_filter(TOPIC, "foo_bar", MATCH))) == set(foo)
    assert list(az.acls(pattern_filter(TOPIC, "foo_bar", LITERAL))) == []


def test_the_same_acl_twice_is_listed_once() -> None:
    assert list(authorizer(foo_acl(READ, ALLOW), foo_acl(READ, ALLOW)).acls(ANY_FILTER)) == [foo_acl(READ, ALLOW)]


def test_simple_authorizations() -> None:
    az = authorizer(foo_acl(READ, ALLOW), foo_acl(WRITE, ALLOW), bar_acl(DESCRIBE_CONFIGS, ALLOW), bar_acl(ALTER_CONFIGS, ALLOW))
    assert results(az, "User:bob", (READ, TOPIC, "foo_")) == [True]
    assert results(az, "User:fred", (ALTER_CONFIGS, GROUP, "bar")) == [True]


def test_deny_takes_precedence_with_operation_all() -> None:
    az = authorizer(
        StandardAcl(TOPIC, "foo", LITERAL, "User:alice", "*", ALL, DENY),
        StandardAcl(TOPIC, "foo", PREFIXED, "User:alice", "*", READ, ALLOW),
        StandardAcl(TOPIC, "foo", LITERAL, "User:*", "*", ALL, DENY),
        StandardAcl(TOPIC, "foo", PREFIXED, "User:*", "*", DESCRIBE, ALLOW),
    )
    assert results(az, "User:alice", (WRITE, TOPIC, "foo"), (READ, TOPIC, "foo"), (DESCRIBE, TOPIC, "foo"), (READ, TOPIC, "foobar")) == [False, False, False, True]
    assert results(az, "User:bob", (DESCRIBE, TOPIC, "foo"), (READ, TOPIC, "foo"), (WRITE, TOPIC, "foo"), (DESCRIBE, TOPIC, "foobaz"), (READ, TOPIC, "foobaz")) == [
        False,
        False,
        False,
        True,
        False,
    ]


def test_topic_acls_with_operation_all() -> None:
    az = authorizer(
        StandardAcl(TOPIC, "foo", LITERAL, "User:*", "*", ALL, ALLOW),
        StandardAcl(TOPIC, "bar", PREFIXED, "User:alice", "*", ALL, ALLOW),
        StandardAcl(TOPIC, "baz", LITERAL, "User:bob", "*", ALL, ALLOW),
    )
    assert results(az, "User:alice", (WRITE, TOPIC, "foo"), (DESCRIBE_CONFIGS, TOPIC, "bar"), (DESCRIBE, TOPIC, "baz")) == [True, True, False]
    assert results(az, "User:bob", (WRITE, TOPIC, "foo"), (READ, TOPIC, "bar"), (DESCRIBE, TOPIC, "baz")) == [True, False, True]
    assert results(az, "User:malory", (DESCRIBE, TOPIC, "foo"), (WRITE, TOPIC, "bar"), (READ, TOPIC, "baz")) == [True, False, False]


def test_host_must_match_or_the_acl_be_for_any_host() -> None:
    az = authorizer(
        StandardAcl(TOPIC, "foo", LITERAL, "User:alice", HOST1, READ, DENY),
        StandardAcl(TOPIC, "foo", LITERAL, "User:alice", "*", READ, ALLOW),
        StandardAcl(TOPIC, "bar", LITERAL, "User:bob", HOST2, READ, ALLOW),
        StandardAcl(TOPIC, "bar", LITERAL, "User:*", LOCAL, DESCRIBE, ALLOW),
    )
    actions = [(READ, TOPIC, "foo"), (READ, TOPIC, "bar"), (DESCRIBE, TOPIC, "bar")]
    assert results(az, "User:alice", *actions, host=LOCAL) == [True, False, True]
    assert results(az, "User:alice", *actions, host=HOST1) == [False, False, False]
    assert results(az, "User:alice", *actions, host=HOST2) == [True, False, False]
    assert results(az, "User:bob", *actions, host=LOCAL) == [False, False, True]
    assert results(az, "User:bob", *actions, host=HOST1) == [False, False, False]
    assert results(az, "User:bob", *actions, host=HOST2) == [False, True, True]


def test_an_acl_host_in_cidr_notation_matches_the_addresses_of_its_range() -> None:
    az = authorizer(StandardAcl(TOPIC, "foo", LITERAL, "User:alice", "10.0.0.0/24", READ, ALLOW))
    assert results(az, "User:alice", (READ, TOPIC, "foo"), host="10.0.1.7") == [False]
    assert results(az, "User:alice", (READ, TOPIC, "foo"), host="10.0.0.7") == [True]


def many_acls() -> StandardAuthorizer:
    return authorizer(
        StandardAcl(TOPIC, "green2", LITERAL, "User:*", "*", READ, ALLOW),
        StandardAcl(TOPIC, "green", PREFIXED, "User:bob", "*", READ, ALLOW),
        StandardAcl(TOPIC, "betamax4", LITERAL, "User:bob", "*", READ, ALLOW),
        StandardAcl(TOPIC, "betamax", LITERAL, "User:bob", "*", READ, ALLOW),
        StandardAcl(TOPIC, "beta", PREFIXED, "User:*", "*", READ, ALLOW),
        StandardAcl(TOPIC, "alpha", PREFIXED, "User:*", "*", READ, ALLOW),
        StandardAcl(TOPIC, "alp", PREFIXED, "User:bob", "*", READ, DENY),
        StandardAcl(GROUP, "*", LITERAL, "User:bob", "*", WRITE, ALLOW),
        StandardAcl(GROUP, "wheel", LITERAL, "User:*", "*", WRITE, DENY),
    )


def test_authorization_with_many_acls() -> None:
    az = many_acls()
    assert results(az, "User:bob", (READ, TOPIC, "green1"), (WRITE, GROUP, "wheel")) == [True, False]
    assert results(az, "User:bob", (READ, TOPIC, "alpha"), (WRITE, GROUP, "arbitrary"), (READ, TOPIC, "ala")) == [False, True, False]
    assert results(az, "User:alice", (READ, TOPIC, "betamax5"), (READ, TOPIC, "beta"), (READ, TOPIC, "bet")) == [True, True, False]
    # A literal ACL applies to its own name only, not to the names it is a prefix of.
    literal = authorizer(StandardAcl(TOPIC, "betamax", LITERAL, "User:bob", "*", READ, ALLOW))
    assert results(literal, "User:bob", (READ, TOPIC, "betamax"), (READ, TOPIC, "betamax4"), (READ, TOPIC, "beta")) == [True, False, False]


def test_prefix_acls() -> None:
    az = authorizer(
        StandardAcl(TOPIC, "fooa", PREFIXED, "User:alice", "*", ALL, ALLOW),
        StandardAcl(TOPIC, "foobar", LITERAL, "User:bob", "*", ALL, ALLOW),
        StandardAcl(TOPIC, "f", PREFIXED, "User:bob", "*", ALL, ALLOW),
    )
    assert results(az, "User:bob", (WRITE, TOPIC, "foobarr"), (READ, TOPIC, "goobar"), (READ, TOPIC, "fooa")) == [True, False, True]
    assert results(az, "User:alice", (DESCRIBE, TOPIC, "fooa"), (WRITE, TOPIC, "bar"), (READ, TOPIC, "baz")) == [True, False, False]


def test_a_literal_wildcard_acl_applies_to_every_name_of_its_type_only() -> None:
    az = authorizer(StandardAcl(GROUP, "*", LITERAL, "User:bob", "*", READ, ALLOW), StandardAcl(TOPIC, "*", PREFIXED, "User:bob", "*", READ, ALLOW))
    assert results(az, "User:bob", (READ, GROUP, "g1"), (READ, GROUP, "*"), (READ, TXN, "g1")) == [True, True, False]
    # A prefixed ACL named "*" is no wildcard: it covers the names that start with "*".
    assert results(az, "User:bob", (READ, TOPIC, "t1"), (READ, TOPIC, "*t1")) == [False, True]


def test_a_wildcard_deny_denies_every_name() -> None:
    az = authorizer(StandardAcl(TOPIC, "*", LITERAL, "User:*", "*", WRITE, DENY), StandardAcl(TOPIC, "t", LITERAL, "User:bob", "*", ALL, ALLOW))
    assert results(az, "User:bob", (WRITE, TOPIC, "t"), (READ, TOPIC, "t"), (READ, TOPIC, "u")) == [False, True, False]


def test_allow_everyone_if_no_acl_found_applies_only_to_resources_without_any_acl() -> None:
    acl = StandardAcl(TOPIC, "topic1", LITERAL, "User:Alice", "*", READ, ALLOW)
    enabled = authorizer(acl, allow_everyone_if_no_acl_found=True)
    assert results(enabled, "User:Bob", (READ, TOPIC, "topic1"), (READ, TOPIC, "topic2")) == [False, True]
    disabled = authorizer(acl, allow_everyone_if_no_acl_found=False)
    assert results(disabled, "User:Bob", (READ, TOPIC, "topic1"), (READ, TOPIC, "topic2")) == [False, False]
    # An ACL for someone else, or another operation, still counts as an ACL for the resource...
    assert results(enabled, "User:Alice", (WRITE, TOPIC, "topic1")) == [False]
    # ...and one that applies through a wildcard or a prefix too.
    wildcard = authorizer(
        StandardAcl(TOPIC, "*", LITERAL, "User:Alice", "*", READ, ALLOW),
        StandardAcl(GROUP, "g", PREFIXED, "User:Alice", "*", READ, ALLOW),
        allow_everyone_if_no_acl_found=True,
    )
    assert results(wildcard, "User:Bob", (READ, TOPIC, "anything"), (READ, GROUP, "g1"), (READ, GROUP, "h1")) == [False, False, True]


def test_super_users_may_do_anything_whatever_the_acls() -> None:
    deny_all = [StandardAcl(t, "*", LITERAL, "User:*", "*", ALL, DENY) for t in (TOPIC, GROUP, CLUSTER, TXN)]
    az = authorizer(*deny_all)
    assert results(az, SUPERMAN, (READ, TOPIC, "t"), (WRITE, GROUP, "g"), (ALTER, CLUSTER, "kafka-cluster"), (WRITE, TXN, "x")) == [True] * 4
    assert results(az, "User:bob", (READ, TOPIC, "t")) == [False]
    assert results(authorizer(), SUPERMAN, (READ, TOPIC, "t")) == [True]
    # The super user is a whole principal: type and name.
    assert results(az, "Group:superman", (READ, TOPIC, "t")) == [False]


# BaseAuthorizerTest: Authorizer.authorizeByResourceType (KIP-679).

USER1, USER2 = "User:user1", "User:user2"


def by_type(az: StandardAuthorizer, principal: str, host: str, op: int, resource_type: int) -> bool:
    return az.authorize_by_resource_type(principal, host, op, resource_type)


def test_authorize_by_resource_type_follows_acls_added_and_removed() -> None:
    deny_read = StandardAcl(TOPIC, "sb1", LITERAL, USER1, HOST1, READ, DENY)
    allow_read = StandardAcl(TOPIC, "sb1", LITERAL, USER1, HOST1, READ, ALLOW)
    assert not by_type(authorizer(), USER1, HOST1, READ, TOPIC)
    assert by_type(authorizer(allow_read), USER1, HOST1, READ, TOPIC)
    assert not by_type(authorizer(allow_read, deny_read), USER1, HOST1, READ, TOPIC)


def test_authorize_by_resource_type_an_unrelated_deny_does_not_dominate_an_allow() -> None:
    az = authorizer(
        StandardAcl(TOPIC, "sb1", LITERAL, USER1, HOST1, READ, DENY),
        StandardAcl(TOPIC, "sb1", LITERAL, USER2, HOST1, READ, DENY),
        StandardAcl(TOPIC, "sb1", LITERAL, USER1, HOST2, WRITE, DENY),
        StandardAcl(TOPIC, "sb1", LITERAL, USER2, HOST2, READ, DENY),
        StandardAcl(TOPIC, "sb1", LITERAL, USER1, HOST2, READ, ALLOW),
        StandardAcl(TOPIC, "sb2", LITERAL, USER1, HOST2, READ, DENY),
        StandardAcl(GROUP, "s", PREFIXED, USER1, HOST2, READ, DENY),
    )
    assert not by_type(az, USER1, HOST1, READ, TOPIC)
    assert not by_type(az, USER1, HOST1, READ, GROUP)
    assert not by_type(az, USER1, HOST1, READ, TXN)
    assert not by_type(az, USER1, HOST1, READ, CLUSTER)
    assert by_type(az, USER1, HOST2, READ, TOPIC)


def test_authorize_by_resource_type_deny_takes_precedence() -> None:
    allow = StandardAcl(TOPIC, "sb1", LITERAL, USER1, HOST1, WRITE, ALLOW)
    deny = StandardAcl(TOPIC, "sb1", LITERAL, USER1, HOST1, WRITE, DENY)
    assert by_type(authorizer(allow), USER1, HOST1, WRITE, TOPIC)
    assert not by_type(authorizer(allow, deny), USER1, HOST1, WRITE, TOPIC)


def test_authorize_by_resource_type_a_prefixed_deny_dominates_longer_names() -> None:
    def group(name: str, permission: int, pattern_type: int = PREFIXED) -> StandardAcl:
        return StandardAcl(GROUP, name, pattern_type, USER1, HOST1, READ, permission)

    acls = [group("abcde", ALLOW)]
    assert by_type(authorizer(*acls), USER1, HOST1, READ, GROUP)
    acls.append(group("abcd", DENY))
    assert not by_type(authorizer(*acls), USER1, HOST1, READ, GROUP)
    acls.append(group("abc", ALLOW))
    assert by_type(authorizer(*acls), USER1, HOST1, READ, GROUP)
    acls.append(group("a", DENY))
    assert not by_type(authorizer(*acls), USER1, HOST1, READ, GROUP)
    acls.append(group("ab", ALLOW))
    assert not by_type(authorizer(*acls), USER1, HOST1, READ, GROUP)
    # A literal allow is dominated by a literal deny of the same name or a prefixed deny of a prefix;
    # a prefixed allow only by a prefixed deny.
    assert not by_type(authorizer(group("abc", ALLOW, LITERAL), group("abc", DENY, LITERAL)), USER1, HOST1, READ, GROUP)
    assert not by_type(authorizer(group("abc", ALLOW, LITERAL), group("ab", DENY)), USER1, HOST1, READ, GROUP)
    assert by_type(authorizer(group("abc", ALLOW, LITERAL), group("abcd", DENY, LITERAL)), USER1, HOST1, READ, GROUP)
    assert by_type(authorizer(group("abc", ALLOW), group("abc", DENY, LITERAL)), USER1, HOST1, READ, GROUP)
    assert by_type(authorizer(group("abc", ALLOW), group("abcd", DENY)), USER1, HOST1, READ, GROUP)


def test_authorize_by_resource_type_a_wildcard_deny_dominates_everything() -> None:
    def group(name: str, pattern_type: int, permission: int) -> StandardAcl:
        return StandardAcl(GROUP, name, pattern_type, USER1, HOST1, WRITE, permission)

    acls = [group("hello", PREFIXED, ALLOW)]
    assert by_type(authorizer(*acls), USER1, HOST1, WRITE, GROUP)
    acls.append(group("*", LITERAL, DENY))
    assert not by_type(authorizer(*acls), USER1, HOST1, WRITE, GROUP)
    acls.append(group("*", LITERAL, ALLOW))
    assert not by_type(authorizer(*acls), USER1, HOST1, WRITE, GROUP)
    acls.append(group("aloha", LITERAL, ALLOW))
    assert not by_type(authorizer(*acls), USER1, HOST1, WRITE, GROUP)


@pytest.mark.parametrize(
    ("allow", "deny"),
    [
        (StandardAcl(GROUP, "*", LITERAL, USER1, "*", ALL, ALLOW), StandardAcl(GROUP, "*", LITERAL, USER1, "*", WRITE, DENY)),
        (StandardAcl(GROUP, "*", LITERAL, USER1, "*", WRITE, ALLOW), StandardAcl(GROUP, "*", LITERAL, USER1, HOST1, WRITE, DENY)),
        (StandardAcl(GROUP, "*", LITERAL, "User:*", "*", WRITE, ALLOW), StandardAcl(GROUP, "*", LITERAL, USER1, "*", WRITE, DENY)),
    ],
)
def test_authorize_by_resource_type_a_wildcard_deny_dominates_a_wildcard_allow_in_any_order(allow: StandardAcl, deny: StandardAcl) -> None:
    assert not by_type(authorizer(allow, deny), USER1, HOST1, WRITE, GROUP)


def test_authorize_by_resource_type_with_an_all_operation_ace() -> None:
    deny_all = StandardAcl(TOPIC, "sb1", LITERAL, USER1, HOST1, ALL, DENY)
    allow_all = StandardAcl(TOPIC, "sb1", LITERAL, USER1, HOST1, ALL, ALLOW)
    deny_write = StandardAcl(TOPIC, "sb1", LITERAL, USER1, HOST1, WRITE, DENY)
    assert not by_type(authorizer(), USER1, HOST1, READ, TOPIC)
    assert by_type(authorizer(deny_write, allow_all), USER1, HOST1, READ, TOPIC)
    assert not by_type(authorizer(deny_write, allow_all, deny_all), USER1, HOST1, READ, TOPIC)


def test_authorize_by_resource_type_with_an_all_host_ace() -> None:
    allow_host1 = StandardAcl(TOPIC, "sb1", LITERAL, USER1, HOST1, READ, ALLOW)
    deny_all_hosts_sb1 = StandardAcl(TOPIC, "sb1", LITERAL, USER1, "*", READ, DENY)
    deny_host1_sb2 = StandardAcl(TOPIC, "sb2", LITERAL, USER1, HOST1, READ, DENY)
    allow_all_hosts_sb2 = StandardAcl(TOPIC, "sb2", LITERAL, USER1, "*", READ, ALLOW)
    deny_all_hosts_sb2 = StandardAcl(TOPIC, "sb2", LITERAL, USER1, "*", READ, DENY)
    assert not by_type(authorizer(), USER1, HOST1, READ, TOPIC)
    assert by_type(authorizer(allow_host1), USER1, HOST1, READ, TOPIC)
    acls = [allow_host1, deny_all_hosts_sb1]
    assert not by_type(authorizer(*acls), USER1, HOST1, READ, TOPIC)
    acls.append(deny_host1_sb2)
    assert not by_type(authorizer(*acls), USER1, HOST1, READ, TOPIC)
    assert not by_type(authorizer(*acls), USER1, HOST2, READ, TOPIC)
    acls.append(allow_all_hosts_sb2)
    assert by_type(authorizer(*acls), USER1, HOST2, READ, TOPIC)
    acls.append(deny_all_hosts_sb2)
    assert not by_type(authorizer(*acls), USER1, HOST2, READ, TOPIC)


def test_authorize_by_resource_type_with_an_all_principal_ace() -> None:
    allow_user1_sb1 = StandardAcl(TOPIC, "sb1", LITERAL, USER1, HOST1, READ, ALLOW)
    deny_all_users_sb1 = StandardAcl(TOPIC, "sb1", LITERAL, "User:*", HOST1, READ, DENY)
    deny_user1_sb2 = StandardAcl(TOPIC, "sb2", LITERAL, USER1, HOST1, READ, DENY)
    allow_all_users_sb2 = StandardAcl(TOPIC, "sb2", LITERAL, "User:*", HOST1, READ, ALLOW)
    deny_all_users_sb2 = StandardAcl(TOPIC, "sb2", LITERAL, "User:*", HOST1, READ, DENY)
    assert not by_type(authorizer(), USER1, HOST1, READ, TOPIC)
    assert by_type(authorizer(allow_user1_sb1), USER1, HOST1, READ, TOPIC)
    acls = [allow_user1_sb1, deny_all_users_sb1]
    assert not by_type(authorizer(*acls), USER1, HOST1, READ, TOPIC)
    acls.append(deny_user1_sb2)
    assert not by_type(authorizer(*acls), USER1, HOST1, READ, TOPIC)
    assert not by_type(authorizer(*acls), USER2, HOST1, READ, TOPIC)
    acls.append(allow_all_users_sb2)
    assert by_type(authorizer(*acls), USER2, HOST1, READ, TOPIC)
    acls.append(deny_all_users_sb2)
    assert not by_type(authorizer(*acls), USER2, HOST1, READ, TOPIC)


def test_authorize_by_resource_type_a_super_user_has_access() -> None:
    az = authorizer(*(StandardAcl(t, "*", LITERAL, "User:*", "*", ALL, DENY) for t in (TOPIC, CLUSTER, GROUP, TXN)))
    for resource_type in (TOPIC, CLUSTER, GROUP, TXN):
        assert by_type(az, SUPERMAN, "192.0.4.4", READ, resource_type)
        assert not by_type(az, USER1, "192.0.4.4", READ, resource_type)


def test_authorize_by_resource_type_falls_back_on_the_default_through_a_hardcoded_name() -> None:
    # Kafka asks authorize() for a resource named "hardcode" first: with allow.everyone.if.no.acl.found,
    # a type with no ACL that applies to that name is allowed.
    acl = StandardAcl(TOPIC, "t", LITERAL, USER2, "*", READ, ALLOW)
    assert by_type(authorizer(acl, allow_everyone_if_no_acl_found=True), USER1, HOST1, READ, TOPIC)
    assert not by_type(authorizer(acl, allow_everyone_if_no_acl_found=False), USER1, HOST1, READ, TOPIC)
    assert not by_type(authorizer(StandardAcl(TOPIC, "hard", PREFIXED, USER2, "*", READ, ALLOW), allow_everyone_if_no_acl_found=True), USER1, HOST1, READ, TOPIC)


# The rules against a plain reading of them, for random small ACL sets and actions.

PRINCIPALS = ["User:alice", "User:bob"]
HOSTS = ["10.0.0.1", "10.0.0.2"]
# The operations ACLs name, and the two that others imply: few enough that random ACLs often apply.
OPS = [READ, WRITE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS, CREATE]
# Names that are prefixes of one another, and the wildcard: literal, prefixed and "*" ACLs all apply.
# The rule text, which kbroker follows, applies a literal "*" ACL to "*a" too; Kafka 4.4's ordered
# scan (StandardAuthorizerData.checkSection) skips it for names that start with "*" but are longer.
NAME_LIST = ["*", "a", "ab", "abc", "b", "ba", "*a"]
NAMES = st.sampled_from(NAME_LIST)
RESOURCE_TYPES = st.sampled_from([TOPIC, GROUP])

acls_strategy = st.lists(
    st.builds(
        StandardAcl,
        RESOURCE_TYPES,
        NAMES,
        st.sampled_from([LITERAL, PREFIXED]),
        st.sampled_from([*PRINCIPALS, "User:*"]),
        st.sampled_from(["*", *HOSTS]),
        st.sampled_from([ALL, *OPS]),
        st.sampled_from([ALLOW, DENY]),
    ),
    max_size=8,
)


def reference_authorize(acls: list[StandardAcl], super_users: frozenset[str], allow_everyone: bool, principal: str, host: str, action: Action) -> bool:
    """Kafka's rules, read plainly: every ACL looked at, nothing indexed."""
    if principal in super_users:
        return True
    applying = []
    for acl in acls:
        if acl.resource_type != action.resource_type:
            continue
        if acl.pattern_type == LITERAL and (acl.resource_name == action.resource_name or acl.resource_name == "*"):
            applying.append(acl)
        elif acl.pattern_type == PREFIXED and action.resource_name.startswith(acl.resource_name):
            applying.append(acl)
    if not applying:
        return allow_everyone
    matching_permissions = []
    for acl in applying:
        if acl.principal not in (principal, "User:*") or acl.host not in (host, "*"):
            continue
        covers = acl.operation == ALL or acl.operation == action.operation
        if acl.permission_type == ALLOW and action.operation == DESCRIBE and acl.operation in (READ, WRITE, DELETE, ALTER):
            covers = True
        if acl.permission_type == ALLOW and action.operation == DESCRIBE_CONFIGS and acl.operation == ALTER_CONFIGS:
            covers = True
        if covers:
            matching_permissions.append(acl.permission_type)
    if DENY in matching_permissions:
        return False
    return ALLOW in matching_permissions


def reference_authorize_by_resource_type(
    acls: list[StandardAcl], super_users: frozenset[str], allow_everyone: bool, principal: str, host: str, op: int, resource_type: int
) -> bool:
    """Authorizer.authorizeByResourceType, read plainly."""
    if reference_authorize(acls, super_users, allow_everyone, principal, host, Action(op, resource_type, "hardcode")):
        return True
    relevant = [
        acl
        for acl in acls
        if acl.resource_type == resource_type and acl.host in (host, "*") and acl.principal in (principal, "User:*") and acl.operation in (op, ALL)
    ]
    if any(acl.permission_type == DENY and acl.pattern_type == LITERAL and acl.resource_name == "*" for acl in relevant):
        return False
    if any(acl.permission_type == ALLOW and acl.pattern_type == LITERAL and acl.resource_name == "*" for acl in relevant):
        return True
    denied_literals = {acl.resource_name for acl in relevant if acl.permission_type == DENY and acl.pattern_type == LITERAL}
    denied_prefixes = {acl.resource_name for acl in relevant if acl.permission_type == DENY and acl.pattern_type == PREFIXED}
    for acl in relevant:
        if acl.permission_type != ALLOW:
            continue
        if acl.pattern_type == LITERAL and acl.resource_name in denied_literals:
            continue
        if any(acl.resource_name.startswith(prefix) for prefix in denied_prefixes):
            continue
        return True
    return False


@settings(max_examples=150, deadline=None)
@given(acls=acls_strategy, allow_everyone=st.booleans())
def test_authorize_agrees_with_a_plain_reading_of_the_rules(acls: list[StandardAcl], allow_everyone: bool) -> None:
    az = StandardAuthorizer(acls, frozenset({SUPERMAN}), allow_everyone)
    disagreements = [
        (principal, host, action)
        for principal, host, action in itertools.product(
            [*PRINCIPALS, SUPERMAN], HOSTS, (Action(op, resource_type, name) for op in OPS for resource_type in (TOPIC, GROUP) for name in NAME_LIST)
        )
        if az.authorize(principal, host, action) != reference_authorize(acls, frozenset({SUPERMAN}), allow_everyone, principal, host, action)
    ]
    assert disagreements == []


@settings(max_examples=150, deadline=None)
@given(acls=acls_strategy, allow_everyone=st.booleans())
def test_authorize_by_resource_type_agrees_with_a_plain_reading_of_the_rules(acls: list[StandardAcl], allow_everyone: bool) -> None:
    az = StandardAuthorizer(acls, frozenset({SUPERMAN}), allow_everyone)
    disagreements = []
    for principal, host, op, resource_type in itertools.product([*PRINCIPALS, SUPERMAN], HOSTS, OPS, (TOPIC, GROUP)):
        # A matching wildcard DENY next to a matching wildcard ALLOW is the known disagreement above.
        wildcards = {
            acl.permission_type
            for acl in acls
            if acl.resource_type == resource_type
            and acl.pattern_type == LITERAL
            and acl.resource_name == "*"
            and acl.host in (host, "*")
            and acl.principal in (principal, "User:*")
            and acl.operation in (op, ALL)
        }
        if wildcards == {ALLOW, DENY}:
            continue
        expected = reference_authorize_by_resource_type(acls, frozenset({SUPERMAN}), allow_everyone, principal, host, op, resource_type)
        if az.authorize_by_resource_type(principal, host, op, resource_type) != expected:
            disagreements.append((principal, host, op, resource_type))
    assert disagreements == []
