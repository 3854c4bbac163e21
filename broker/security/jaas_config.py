"""JaasConfig: the value of a `sasl.jaas.config`, as Kafka parses it.

`<LoginModule class> <flag> key="value" ...;` one or more times; values may be quoted (with
backslash escapes) or bare words. Kafka's own broker files write PLAIN users as
`user_<name>="<password>"` options of PlainLoginModule.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

FLAGS = ("required", "requisite", "sufficient", "optional")
_TOKEN = re.compile(r'\s*(?:(?P<semi>;)|"(?P<quoted>(?:[^"\\]|\\.)*)"|(?P<word>[^\s=;"]+)|(?P<eq>=))')


class JaasConfigError(ValueError):
    pass


@dataclass(frozen=True)
class LoginModule:
    name: str
    flag: str
    options: dict[str, str] = field(default_factory=dict)


def parse_jaas_config(text: str) -> list[LoginModule]:
    tokens = _tokens(text)
    modules: list[LoginModule] = []
    i = 0
    while i < len(tokens):
        if len(tokens) - i < 2 or tokens[i][0] != "word" or tokens[i + 1][0] != "word" or tokens[i + 1][1].lower() not in FLAGS:
            raise JaasConfigError("expected '<LoginModule> <required|requisite|sufficient|optional> key=\"value\" ... ;'")
        name, flag = tokens[i][1], tokens[i + 1][1].lower()
        i += 2
        options: dict[str, str] = {}
        while i < len(tokens) and tokens[i][0] != "semi":
            if i + 2 >= len(tokens) or tokens[i][0] != "word" or tokens[i + 1][0] != "eq" or tokens[i + 2][0] not in ("word", "quoted"):
                raise JaasConfigError(f"bad option in {name}: expected key=\"value\"")
            options[tokens[i][1]] = tokens[i + 2][1]
            i += 3
        if i >= len(tokens):
            raise JaasConfigError(f"{name}: the entry does not end with ';'")
        i += 1
        modules.append(LoginModule(name, flag, options))
    if not modules:
        raise JaasConfigError("no login module")
    return modules


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise JaasConfigError(f"cannot parse at character {pos}")
        pos = m.end()
        kind = m.lastgroup
        assert kind is not None
        value = m.group(kind)
        if kind == "quoted":
            value = re.sub(r"\\(.)", r"\1", value)
        out.append((kind, value))
    return out
