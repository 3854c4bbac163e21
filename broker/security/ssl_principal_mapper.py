"""SslPrincipalMapper: the principal of a client certificate, by `ssl.principal.mapping.rules`.

Kafka's syntax and semantics: a comma-separated list of `RULE:pattern/replacement/[LU]` and
`DEFAULT`, tried in order; a rule applies when its pattern matches the whole distinguished name
(RFC 2253, as Java's X500Principal prints it), and its replacement may use `$1`, `$2`... ; `L` or
`U` lower- or upper-cases the result; `DEFAULT` is the distinguished name itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cryptography import x509

RULE_PATTERN = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)"
RULE_SPLITTER = re.compile(r"\s*(" + RULE_PATTERN + r")\s*(,\s*|$)")
RULE_PARSER = re.compile(RULE_PATTERN)
BACK_REFERENCE = re.compile(r"\$(\d+)")


class NoMatchingRule(ValueError):
    pass


@dataclass(frozen=True)
class Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""  # "L", "U" or ""

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        if self.pattern.fullmatch(dn) is None:
            return None
        result = self.pattern.sub(_python_replacement(self.replacement, self.pattern.groups), dn)
        return result.lower() if self.case == "L" else result.upper() if self.case == "U" else result


def _python_replacement(java: str, groups: int) -> str:
    """Java's `$n` back references as Python's; one naming a group that does not exist stays
    literal, and a number too large is shortened first, as Kafka's escapeLiteralBackReferences."""

    def backref(m: re.Match[str]) -> str:
        digits = m.group(1)
        if groups == 0 or digits.startswith("0"):
            return m.group(0).replace("\\", "\\\\")
        index = int(digits)
        while index > groups and index >= 10:
            index //= 10
        if index > groups:
            return m.group(0).replace("\\", "\\\\")
        rest = digits[len(str(index)) :]
        return f"\\g<{index}>{rest}"

    escaped = java.replace("\\", "\\\\")
    return BACK_REFERENCE.sub(backref, escaped)


def parse_rules(text: str) -> list[Rule]:
    rules = []
    for m in RULE_SPLITTER.finditer(text.strip()):
        rule = m.group(1)
        parsed = RULE_PARSER.match(rule)
        if parsed is None:
            raise ValueError(f"Invalid rule: {rule}")
        if parsed.end() != len(rule):
            raise ValueError(f"Invalid rule: `{rule}`, unmatched substring: `{rule[parsed.end():]}`")
        if parsed.group(1) is not None:
            rules.append(Rule(None))
        elif parsed.group(2) is not None:
            rules.append(Rule(re.compile(parsed.group(2)), parsed.group(4), parsed.group(6)))
        if m.end() >= len(text.strip()):
            break
    return rules


class SslPrincipalMapper:
    def __init__(self, rules: str = "DEFAULT") -> None:
        self._rules = parse_rules(rules)

    def name(self, dn: str) -> str:
        for rule in self._rules:
            principal = rule.apply(dn)
            if principal is not None:
                return principal
        raise NoMatchingRule(f"No rules apply to {dn}")

    def principal(self, peer_certificate: bytes | None) -> str:
        """Kafka's DefaultKafkaPrincipalBuilder for SSL: ANONYMOUS without a client certificate."""
        if peer_certificate is None:
            return "User:ANONYMOUS"
        dn = x509.load_der_x509_certificate(peer_certificate).subject.rfc4514_string()
        return f"User:{self.name(dn)}"
