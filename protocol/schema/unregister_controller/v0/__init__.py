from .request import UnregisterControllerRequest
from .response import UnregisterControllerResponse

__all__ = (
    "UnregisterControllerRequest",
    "UnregisterControllerResponse",
)
