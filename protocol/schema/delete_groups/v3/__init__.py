from .request import DeleteGroupsRequest
from .response import DeleteGroupsResponse

__all__ = (
    "DeleteGroupsRequest",
    "DeleteGroupsResponse",
)
