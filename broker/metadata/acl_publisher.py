"""AclPublisher: keeps this node's StandardAuthorizer in step with the ACLs of the metadata image,
as Kafka's publisher of that name. A node without ``authorizer.class.name`` has none."""

from __future__ import annotations

from broker.metadata.metadata_delta import MetadataDelta
from broker.metadata.metadata_image import MetadataImage
from broker.security.standard_authorizer import StandardAuthorizer


class AclPublisher:
    def __init__(self, enabled: bool, super_users: frozenset[str], allow_everyone_if_no_acl_found: bool) -> None:
        self._super_users = super_users
        self._allow_everyone = allow_everyone_if_no_acl_found
        self.authorizer: StandardAuthorizer | None = StandardAuthorizer((), super_users, allow_everyone_if_no_acl_found) if enabled else None

    def on_metadata_update(self, delta: MetadataDelta, image: MetadataImage) -> None:
        if self.authorizer is not None and (delta.acls_delta is not None or delta.image.acls is not image.acls):
            self.authorizer = StandardAuthorizer(image.acls.values(), self._super_users, self._allow_everyone)
