"""Why an image failed, split by who may read the reason.

- ImageLoadError: the client's own input is wrong (malformed string, not an image, too many
  pixels); the message is written for the client and never holds a server path.
- FetchFailed: an image URL could not be fetched. The reason (refused address, DNS, connection,
  HTTP status, timeout) goes to the server log only; the client always gets URL_FAILED_MESSAGE,
  and so does a URL whose answer is not a usable image, so the server cannot be used to tell a
  closed port from a 404 from a web server that answers.
- ImageMemoryFull: no room under --mm-max-bytes-in-flight (`own_request` when this request's
  images alone are over it, which no retry can fix).
"""

from __future__ import annotations

URL_FAILED_MESSAGE = "could not load the image URL (the server log has the reason)"


class ImageLoadError(Exception):
    """A bad image input; the message is for the client."""


class FetchFailed(Exception):
    """An image URL that could not be fetched; the message is for the server log only."""


class ImageMemoryFull(Exception):
    def __init__(self, limit: int, own_request: bool) -> None:
        super().__init__(limit, own_request)
        self.limit = limit
        self.own_request = own_request
