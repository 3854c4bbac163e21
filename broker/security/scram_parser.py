"""ScramParser: kafka-storage.sh format's `--add-scram` argument, with Kafka's syntax and messages.

`SCRAM-SHA-256=[name=alice,password=alice-secret]`, or with `iterations=`, `salt=` (base64) and
`saltedpassword=` (base64, instead of the password); values may be quoted.
"""

from __future__ import annotations

import base64
import binascii

from broker.metadata.metadata_records import UserScramCredentialRecord
from broker.security.scram import SCRAM_MECHANISMS, credential_from_salted_password, new_credential

DEFAULT_ITERATIONS = 4096


class ScramParseError(ValueError):
    pass


def parse_add_scram(text: str) -> UserScramCredentialRecord:
    mechanism_name, sep, config = text.partition("=")
    if not sep:
        raise ScramParseError(f"Failed to find equals sign in SCRAM argument '{text}'")
    mechanism = SCRAM_MECHANISMS.get(mechanism_name.strip())
    if mechanism is None:
        raise ScramParseError(f"The add-scram mechanism {mechanism_name.strip()} is not supported.")
    config = config.strip()
    if not config.startswith("["):
        raise ScramParseError("Expected configuration string to start with [")
    if not config.endswith("]"):
        raise ScramParseError("Expected configuration string to end with ]")
    components: dict[str, str] = {}
    for component in config[1:-1].split(","):
        key, eq, value = component.partition("=")
        if not eq:
            raise ScramParseError(f"No equals sign found in SCRAM component: {component}")
        if len(value) >= 2 and value.startswith('"') and value.endswith('"'):
            value = value[1:-1]
        components[key] = value
    name = components.pop("name", None)
    if name is None:
        raise ScramParseError("You must supply 'name' to add-scram")
    salt = _base64(components.pop("salt", None), "Failed to decode given salt: ")
    iterations_text = components.pop("iterations", None)
    try:
        iterations = DEFAULT_ITERATIONS if iterations_text is None else int(iterations_text)
    except ValueError:
        raise ScramParseError(f"Failed to parse iterations count: {iterations_text}") from None
    password = components.pop("password", None)
    salted_text = components.pop("saltedpassword", None)
    if password is None and salted_text is None:
        raise ScramParseError("You must supply one of 'password' or 'saltedpassword' to add-scram")
    if password is None and salt is None:
        raise ScramParseError("You must supply 'salt' with 'saltedpassword' to add-scram")
    salted = _base64(salted_text, "Failed to decode given saltedPassword: ") if password is None else None
    if components:
        raise ScramParseError(f"Unknown SCRAM configurations: {', '.join(sorted(components))}")
    if iterations < mechanism.min_iterations:
        raise ScramParseError(f"The 'iterations' value must be >= {mechanism.min_iterations} for add-scram using {mechanism.name}")
    if iterations > mechanism.max_iterations:
        raise ScramParseError(f"The 'iterations' value must be <= {mechanism.max_iterations} for add-scram using {mechanism.name}")
    if salted is not None:
        assert salt is not None
        credential = credential_from_salted_password(mechanism, salt, salted, iterations)
    else:
        assert password is not None
        credential = new_credential(mechanism, password, iterations, salt)
    return UserScramCredentialRecord(
        name=name, mechanism=mechanism.type_id, salt=credential.salt, stored_key=credential.stored_key, server_key=credential.server_key, iterations=iterations
    )


def _base64(text: str | None, error: str) -> bytes | None:
    if text is None:
        return None
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ScramParseError(error + text) from None
