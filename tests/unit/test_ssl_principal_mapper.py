"""SslPrincipalMapper against the cases of Kafka's own SslPrincipalMapperTest, and the principal of
a client certificate made by the test CA."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives.serialization import Encoding

from broker.security.ssl_principal_mapper import SslPrincipalMapper
from tests.integration.certificates import TestCA


@pytest.mark.parametrize(
    "rules",
    [
        "DEFAULT",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, DEFAULT",
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/",
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L",
        "RULE:^cn=(.?),ou=(.?),dc=(.?),dc=(.?)$/$1@$2/U",
        "RULE:^CN=([^,ADEFLTU,]+)(,.*|$)/$1/",
        "RULE:^CN=([^,DEFAULT,]+)(,.*|$)/$1/",
    ],
)
def test_valid_rules(rules: str) -> None:
    SslPrincipalMapper(rules)


@pytest.mark.parametrize(
    "rules",
    [
        "default",
        "DEFAUL",
        "DEFAULT/L",
        "DEFAULT/U",
        "RULE:CN=(.*?),OU=ServiceUsers.*/$1",
        "rule:^CN=(.*?),OU=ServiceUsers.*$/$1/",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/L",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/U",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/LU",
    ],
)
def test_invalid_rules(rules: str) -> None:
    with pytest.raises(ValueError):
        SslPrincipalMapper(rules)


def test_names_as_kafkas_mapper_gives_them() -> None:
    mapper = SslPrincipalMapper(
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L,"
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
        "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U,"
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U,"
        "DEFAULT"
    )
    assert mapper.name("CN=Duke,OU=ServiceUsers,O=Org,C=US") == "duke"
    assert mapper.name("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US") == "duke@sme"
    assert mapper.name("cn=duke,ou=sme,dc=mycp,dc=com") == "DUKE@SME"
    assert mapper.name("cN=duke,OU=JavaSoft,O=Sun Microsystems") == "DUKE"
    assert mapper.name("OU=JavaSoft,O=Sun Microsystems,C=US") == "OU=JavaSoft,O=Sun Microsystems,C=US"
    assert SslPrincipalMapper("RULE:^CN=((\\\\, *|\\w)+)(,.*|$)/$1/,DEFAULT").name("CN=Tkac\\, Adam,OU=ITZ,DC=geodis,DC=cz") == "Tkac\\, Adam"


def test_the_principal_of_a_client_certificate() -> None:
    ca = TestCA()
    der = ca.issue("client-1", server=False).cert.public_bytes(Encoding.DER)
    assert SslPrincipalMapper().principal(der) == "User:CN=client-1"
    assert SslPrincipalMapper("RULE:^CN=(.*)$/$1/U").principal(der) == "User:CLIENT-1"
    assert SslPrincipalMapper().principal(None) == "User:ANONYMOUS"
