"""ray_kvmoq.moqt.codec: the stateless MoQT codec, arranged by message family.

One module per concept, each holding its dataclasses, its encode/decode functions (the
negotiated draft version is a parameter of every one) and its registry entries (``CODECS``):

==================  ==============================================================
:mod:`.setup`       CLIENT_SETUP, SERVER_SETUP, MAX_REQUEST_ID, REQUESTS_BLOCKED
:mod:`.goaway`      GOAWAY
:mod:`.subscribe`   SUBSCRIBE, SUBSCRIBE_OK/_ERROR/_UPDATE, UNSUBSCRIBE
:mod:`.publish`     PUBLISH, PUBLISH_OK/_ERROR, PUBLISH_DONE
:mod:`.fetch`       FETCH, FETCH_OK/_ERROR/_CANCEL
:mod:`.track_status` TRACK_STATUS, TRACK_STATUS_OK/_ERROR
:mod:`.namespace`   PUBLISH_NAMESPACE*, SUBSCRIBE_NAMESPACE*, UNSUBSCRIBE_NAMESPACE
:mod:`.request`     REQUEST_OK, REQUEST_ERROR (draft-16)
:mod:`.streams`     subgroup and fetch data streams (parser; encoders in ``streams_encode``;
                    draft-16's in ``streams16``)
:mod:`.datagrams`   OBJECT_DATAGRAM
==================  ==============================================================

Shared underneath: :mod:`.types` (one IntEnum per IANA-style registry, limits, versions),
:mod:`.wire` (varints, length-prefixed fields, key-value pairs), :mod:`.fields` (Location,
parameters, auth tokens and the field codecs families share), :mod:`.errors` (the exception tree
with wire codes) and :mod:`.control` (control-frame framing: assembles every family's
``CODECS`` into one dispatch table and parses a control stream incrementally).

``__all__`` (every family's ``__all__`` plus the shared values) is the codec's public surface (pinned by ``tests/moqt/test_public_surface.py``).
Everything here is pure stdlib: no I/O, no clock, no asyncio.
"""

from __future__ import annotations

from . import (
    control,
    datagrams,
    errors,
    fetch,
    goaway,
    namespace,
    publish,
    request,
    setup,
    streams,
    streams16,
    subscribe,
    track_status,
    types,
)
from .control import *  # noqa: F403
from .datagrams import *  # noqa: F403
from .errors import *  # noqa: F403
from .fetch import *  # noqa: F403
from .fields import (
    AuthToken,
    DecodeOptions,
    Location,
    MessageParameters,
    Parameters,
    SetupParameters,
)
from .goaway import *  # noqa: F403
from .namespace import *  # noqa: F403
from .publish import *  # noqa: F403
from .request import *  # noqa: F403
from .setup import *  # noqa: F403
from .streams import *  # noqa: F403
from .streams16 import *  # noqa: F403
from .subscribe import *  # noqa: F403
from .track_status import *  # noqa: F403
from .types import *  # noqa: F403
from .wire import decode_varint, encode_varint

__all__: list[str] = [
    "AuthToken",
    "DecodeOptions",
    "Location",
    "MessageParameters",
    "Parameters",
    "SetupParameters",
    "decode_varint",
    "encode_varint",
]
__all__ += control.__all__
__all__ += datagrams.__all__
__all__ += errors.__all__
__all__ += fetch.__all__
__all__ += goaway.__all__
__all__ += namespace.__all__
__all__ += publish.__all__
__all__ += request.__all__
__all__ += setup.__all__
__all__ += streams.__all__
__all__ += streams16.__all__
__all__ += subscribe.__all__
__all__ += track_status.__all__
__all__ += types.__all__
