"""The codec's public surface is pinned (STYLE rule 11): each module's ``__all__`` is exactly
this list, isort-sorted as ruff's RUF022 keeps it, and every name exists and is documented.
The helper modules (messages_base, messages_track, framer_common, framer_track,
framer_session) are re-exported through messages/framer and are not part of the surface."""

from __future__ import annotations

import importlib

import pytest

EXPECTED: dict[str, list[str]] = {
    "types": [
        "ALPN",
        "DEFAULT_MAX_OBJECT_SIZE",
        "DRAFT_14",
        "MAX_CONTROL_PAYLOAD",
        "MAX_FULL_TRACK_NAME",
        "MAX_GOAWAY_URI",
        "MAX_KVP_VALUE",
        "MAX_NAMESPACE_FIELDS",
        "MAX_REASON",
        "MAX_VARINT",
        "DataStreamType",
        "DatagramType",
        "FetchErrorCode",
        "FetchType",
        "FilterType",
        "GroupOrder",
        "MessageParameter",
        "MessageType",
        "ObjectStatus",
        "PublishDoneCode",
        "PublishErrorCode",
        "PublishNamespaceErrorCode",
        "SessionError",
        "SetupParameter",
        "StreamResetCode",
        "SubgroupIdMode",
        "SubscribeErrorCode",
        "SubscribeNamespaceErrorCode",
        "TokenAliasType",
    ],
    "errors": [
        "AuthTokenCacheOverflow",
        "ControlMessageTimeout",
        "DataStreamTimeout",
        "DuplicateAuthTokenAlias",
        "DuplicateTrackAlias",
        "ExpiredAuthToken",
        "GoawayTimeout",
        "InvalidAuthority",
        "InvalidPath",
        "InvalidRequestId",
        "KeyValueFormattingError",
        "LocalProtocolError",
        "MalformedAuthToken",
        "MalformedAuthority",
        "MalformedPath",
        "MoqtError",
        "NeedMoreData",
        "ObjectTooLarge",
        "ProtocolViolation",
        "RemoteProtocolError",
        "SessionTimeout",
        "TooManyRequests",
        "Unauthorized",
        "UnknownAuthTokenAlias",
        "UnknownMessageType",
        "UnknownStreamType",
        "VersionNegotiationFailed",
    ],
    "wire": [
        "KeyValuePairs",
        "Reader",
        "Writer",
        "decode_varint",
        "encode_kvps",
        "encode_varint",
        "varint_size",
    ],
    "messages": [
        "MESSAGE_CLASSES",
        "AuthToken",
        "ClientSetup",
        "Fetch",
        "FetchCancel",
        "FetchError",
        "FetchOk",
        "Goaway",
        "Location",
        "MaxRequestId",
        "Message",
        "MessageParameters",
        "Parameters",
        "Publish",
        "PublishDone",
        "PublishError",
        "PublishNamespace",
        "PublishNamespaceCancel",
        "PublishNamespaceDone",
        "PublishNamespaceError",
        "PublishNamespaceOk",
        "PublishOk",
        "RequestsBlocked",
        "ServerSetup",
        "SetupParameters",
        "Subscribe",
        "SubscribeError",
        "SubscribeNamespace",
        "SubscribeNamespaceError",
        "SubscribeNamespaceOk",
        "SubscribeOk",
        "SubscribeUpdate",
        "TrackStatus",
        "TrackStatusError",
        "TrackStatusOk",
        "Unsubscribe",
        "UnsubscribeNamespace",
    ],
    "framer": [
        "SUPPORTED_VERSIONS",
        "ControlStreamParser",
        "DecodeOptions",
        "decode_control",
        "encode_control",
        "read_control_frame",
    ],
    "data": [
        "DEFAULT_MAX_EXTENSIONS_SIZE",
        "DataEvent",
        "DataStreamParser",
        "FetchHeaderParsed",
        "ObjectParsed",
        "StreamFinished",
        "SubgroupHeaderParsed",
        "encode_fetch_header",
        "encode_fetch_object",
        "encode_fetch_object_header",
        "encode_subgroup_header",
        "encode_subgroup_object",
        "encode_subgroup_object_header",
    ],
    "data_encode": [
        "encode_fetch_header",
        "encode_fetch_object",
        "encode_fetch_object_header",
        "encode_subgroup_header",
        "encode_subgroup_object",
        "encode_subgroup_object_header",
    ],
    "data_datagram": ["ObjectDatagram", "decode_datagram", "encode_datagram"],
}


def _isort_key(name: str) -> tuple[int, str]:
    return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)


@pytest.mark.parametrize("module", list(EXPECTED))
def test_all_is_pinned_sorted_and_documented(module: str) -> None:
    mod = importlib.import_module(f"ray_kvmoq.moqt.{module}")
    assert mod.__all__ == EXPECTED[module]
    assert mod.__all__ == sorted(mod.__all__, key=_isort_key)
    assert mod.__doc__
    for name in mod.__all__:
        obj = getattr(mod, name)
        if callable(obj) and not isinstance(obj, type(int | str)):
            assert obj.__doc__, f"{module}.{name} has no docstring"


def test_codec_imports_only_stdlib() -> None:
    """The codec is sans-I/O and stdlib-only (no numpy/torch/ray/asyncio/aioquic)."""
    import ast
    import pathlib

    import ray_kvmoq.moqt as pkg

    root = pathlib.Path(pkg.__file__).parent
    codec = [
        *EXPECTED,
        "messages_base",
        "messages_track",
        "framer_common",
        "framer_track",
        "framer_session",
    ]
    banned = {"numpy", "torch", "ray", "asyncio", "aioquic", "socket"}
    for module in codec:
        tree = ast.parse((root / f"{module}.py").read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                assert name.split(".")[0] not in banned, f"{module} imports {name}"


PACKAGE_CODEC_MODULES = ["types", "errors", "messages", "data", "data_datagram"]


def test_package_exports_the_codec() -> None:
    """``ray_kvmoq.moqt`` re-exports the codec (the aio shell adds its own names)."""
    import ray_kvmoq.moqt as pkg

    assert pkg.__all__ == sorted(pkg.__all__, key=_isort_key)
    assert len(set(pkg.__all__)) == len(pkg.__all__)
    wanted = {n for m in PACKAGE_CODEC_MODULES for n in EXPECTED[m]} - {"MAX_VARINT"}
    wanted |= {"ControlStreamParser", "decode_control", "encode_control", "read_control_frame"}
    assert wanted <= set(pkg.__all__)
    for name in pkg.__all__:
        assert getattr(pkg, name) is not None
    for name in wanted:
        module = next(
            (m for m in [*PACKAGE_CODEC_MODULES, "framer"] if name in EXPECTED[m]), "framer"
        )
        assert getattr(pkg, name) is getattr(
            importlib.import_module(f"ray_kvmoq.moqt.{module}"), name
        )


def test_every_dataclass_field_has_a_docstring() -> None:
    """Messages and events document each field with an attribute docstring (STYLE rule 5)."""
    import ast
    import pathlib

    import ray_kvmoq.moqt as pkg

    root = pathlib.Path(pkg.__file__).parent
    checked = 0
    for module in ["messages", "messages_base", "messages_track", "data", "data_datagram"]:
        tree = ast.parse((root / f"{module}.py").read_text())
        for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
            if not any("dataclass" in ast.unparse(d) for d in cls.decorator_list):
                continue
            body = cls.body
            for i, stmt in enumerate(body):
                if not isinstance(stmt, ast.AnnAssign) or "ClassVar" in ast.unparse(
                    stmt.annotation
                ):
                    continue
                doc = body[i + 1] if i + 1 < len(body) else None
                assert isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant), (
                    f"{module}.{cls.name}.{ast.unparse(stmt.target)} has no docstring"
                )
                checked += 1
    assert checked > 140
