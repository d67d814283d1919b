"""The public surface is pinned (STYLE rule 11): ``ray_kvmoq.moqt.codec`` and
``ray_kvmoq.moqt.api`` are the only modules other layers may import, each ``__all__`` is exactly
the list below (isort-sorted as ruff's RUF022 keeps it), every name exists and is documented,
and an AST walk fails on any import of a private ``ray_kvmoq.moqt`` module from outside it.

The codec's family modules are pinned too, with the rule that makes "one message family, one
module" true: each family's ``CODECS`` registers exactly the messages it defines, and together
they cover every :class:`MessageType` once.
"""

from __future__ import annotations

import ast
import importlib
import pathlib

import pytest

import ray_kvmoq.moqt as pkg
from ray_kvmoq.moqt import api, codec
from ray_kvmoq.moqt.codec.types import MessageType, MessageTypeD16

ROOT = pathlib.Path(pkg.__file__).parent
REPO = ROOT.parents[1]

CODEC = [
    "ALPN",
    "ALPN_BY_VERSION",
    "DEFAULT_MAX_EXTENSIONS_SIZE",
    "DEFAULT_MAX_OBJECT_SIZE",
    "DRAFT_14",
    "DRAFT_16",
    "MAX_CONTROL_PAYLOAD",
    "MAX_FULL_TRACK_NAME",
    "MAX_GOAWAY_URI",
    "MAX_KVP_VALUE",
    "MAX_NAMESPACE_FIELDS",
    "MAX_REASON",
    "MAX_VARINT",
    "MESSAGE_CLASSES",
    "MESSAGE_CLASSES_BY_VERSION",
    "SUPPORTED_VERSIONS",
    "AuthToken",
    "AuthTokenCacheOverflow",
    "ClientSetup",
    "ControlMessageTimeout",
    "ControlStreamParser",
    "DataEvent",
    "DataEvent16",
    "DataStreamParser",
    "DataStreamParser16",
    "DataStreamTimeout",
    "DataStreamType",
    "DatagramType",
    "DecodeOptions",
    "DuplicateAuthTokenAlias",
    "DuplicateTrackAlias",
    "ExpiredAuthToken",
    "Fetch",
    "FetchCancel",
    "FetchError",
    "FetchErrorCode",
    "FetchHeaderParsed",
    "FetchMessage",
    "FetchObjectWriter16",
    "FetchOk",
    "FetchRangeEnded",
    "FetchType",
    "FilterType",
    "Goaway",
    "GoawayMessage",
    "GoawayTimeout",
    "GroupOrder",
    "InvalidAuthority",
    "InvalidPath",
    "InvalidRequestId",
    "KeyValueFormattingError",
    "LocalProtocolError",
    "Location",
    "MalformedAuthToken",
    "MalformedAuthority",
    "MalformedPath",
    "MaxRequestId",
    "Message",
    "MessageParameter",
    "MessageParameterD16",
    "MessageParameters",
    "MessageType",
    "MessageTypeD16",
    "MoqtError",
    "Namespace",
    "NamespaceDone",
    "NamespaceMessage",
    "NeedMoreData",
    "ObjectDatagram",
    "ObjectParsed",
    "ObjectStatus",
    "ObjectTooLarge",
    "Parameters",
    "ProtocolViolation",
    "Publish",
    "PublishDone",
    "PublishDoneCode",
    "PublishError",
    "PublishErrorCode",
    "PublishMessage",
    "PublishNamespace",
    "PublishNamespaceCancel",
    "PublishNamespaceDone",
    "PublishNamespaceError",
    "PublishNamespaceErrorCode",
    "PublishNamespaceOk",
    "PublishOk",
    "RemoteProtocolError",
    "RequestErrorMessage",
    "RequestMessage",
    "RequestOk",
    "RequestUpdate",
    "RequestsBlocked",
    "ServerSetup",
    "SessionError",
    "SessionTimeout",
    "SetupMessage",
    "SetupParameter",
    "SetupParameters",
    "StreamFinished",
    "StreamParser16",
    "StreamResetCode",
    "SubgroupHeaderParsed",
    "SubgroupIdMode",
    "Subscribe",
    "SubscribeError",
    "SubscribeErrorCode",
    "SubscribeMessage",
    "SubscribeNamespace",
    "SubscribeNamespaceError",
    "SubscribeNamespaceErrorCode",
    "SubscribeNamespaceOk",
    "SubscribeOk",
    "SubscribeUpdate",
    "TokenAliasType",
    "TooManyRequests",
    "TrackStatus",
    "TrackStatusError",
    "TrackStatusMessage",
    "TrackStatusOk",
    "Unauthorized",
    "UnknownAuthTokenAlias",
    "UnknownMessageType",
    "UnknownStreamType",
    "Unsubscribe",
    "UnsubscribeNamespace",
    "VersionNegotiationFailed",
    "decode_control",
    "decode_datagram",
    "decode_varint",
    "encode_control",
    "encode_datagram",
    "encode_fetch_header",
    "encode_fetch_object",
    "encode_fetch_object_header",
    "encode_subgroup_header",
    "encode_subgroup_header_16",
    "encode_subgroup_object",
    "encode_subgroup_object_16",
    "encode_subgroup_object_header",
    "encode_subgroup_object_header_16",
    "encode_varint",
    "read_control_frame",
]

API = [
    "Cancelled",
    "CertificateAuthority",
    "FastQuicProtocol",
    "FetchRequest",
    "FetchStream",
    "FetchWriter",
    "FullTrackName",
    "Group",
    "GroupWriter",
    "LeafCertificate",
    "MemoryTrack",
    "MoqtApiError",
    "MoqtConnection",
    "MoqtObject",
    "MoqtServer",
    "MoqtSession",
    "MoqtUrl",
    "NamespaceRequest",
    "PemPaths",
    "Publication",
    "QuicEndpoint",
    "RequestError",
    "SessionClosed",
    "SessionConfig",
    "SessionHandler",
    "SubscribeRequest",
    "Subscription",
    "TrackServer",
    "TrackSource",
    "TransportConfig",
    "connect",
    "connect_quic",
    "generate_ca",
    "issue_certificate",
    "self_signed",
    "serve",
    "serve_quic",
    "write_pem_files",
]

FAMILIES: dict[str, list[str]] = {
    "setup": [
        "ClientSetup",
        "MaxRequestId",
        "RequestsBlocked",
        "ServerSetup",
        "SetupMessage",
    ],
    "goaway": [
        "Goaway",
        "GoawayMessage",
    ],
    "subscribe": [
        "Subscribe",
        "SubscribeError",
        "SubscribeMessage",
        "SubscribeOk",
        "SubscribeUpdate",
        "Unsubscribe",
    ],
    "publish": [
        "Publish",
        "PublishDone",
        "PublishError",
        "PublishMessage",
        "PublishOk",
    ],
    "fetch": [
        "Fetch",
        "FetchCancel",
        "FetchError",
        "FetchMessage",
        "FetchOk",
    ],
    "track_status": [
        "TrackStatus",
        "TrackStatusError",
        "TrackStatusMessage",
        "TrackStatusOk",
    ],
    "namespace": [
        "Namespace",
        "NamespaceDone",
        "NamespaceMessage",
        "PublishNamespace",
        "PublishNamespaceCancel",
        "PublishNamespaceDone",
        "PublishNamespaceError",
        "PublishNamespaceOk",
        "SubscribeNamespace",
        "SubscribeNamespaceError",
        "SubscribeNamespaceOk",
        "UnsubscribeNamespace",
    ],
    "request": [
        "RequestErrorMessage",
        "RequestMessage",
        "RequestOk",
        "RequestUpdate",
    ],
    "streams": [
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
    "streams16": [
        "DataEvent16",
        "DataStreamParser16",
        "FetchObjectWriter16",
        "FetchRangeEnded",
        "StreamParser16",
        "encode_subgroup_header_16",
        "encode_subgroup_object_16",
        "encode_subgroup_object_header_16",
    ],
    "datagrams": [
        "ObjectDatagram",
        "decode_datagram",
        "encode_datagram",
    ],
}

PUBLIC = {"ray_kvmoq.moqt", "ray_kvmoq.moqt.api", "ray_kvmoq.moqt.codec"}
PENDING: dict[str, set[str]] = {}
"""Private imports outside moqt/ still waiting for their owners (names all exist in ``api``)."""


def _isort_key(name: str) -> tuple[int, str]:
    return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)


def _check_documented(mod: object, names: list[str]) -> None:
    for name in names:
        obj = getattr(mod, name)
        if callable(obj) and not isinstance(obj, type(int | str)):
            assert obj.__doc__, f"{name} has no docstring"


@pytest.mark.parametrize(("module", "expected"), [(codec, CODEC), (api, API)], ids=["codec", "api"])
def test_public_all_is_pinned_sorted_and_documented(module, expected: list[str]) -> None:
    # The codec's __all__ is assembled from its modules' (each sorted); api's is one sorted list.
    assert sorted(module.__all__, key=_isort_key) == expected
    assert len(set(module.__all__)) == len(module.__all__)
    assert module.__doc__
    _check_documented(module, module.__all__)


def test_package_reexports_codec_and_api() -> None:
    assert len(set(pkg.__all__)) == len(pkg.__all__)
    assert set(pkg.__all__) == set(CODEC) | set(API)
    assert not set(CODEC) & set(API)
    for name in pkg.__all__:
        source = codec if name in CODEC else api
        assert getattr(pkg, name) is getattr(source, name), name


@pytest.mark.parametrize("family", list(FAMILIES))
def test_family_modules_are_pinned(family: str) -> None:
    mod = importlib.import_module(f"ray_kvmoq.moqt.codec.{family}")
    assert mod.__all__ == FAMILIES[family]
    assert mod.__all__ == sorted(mod.__all__, key=_isort_key)
    assert mod.__doc__
    _check_documented(mod, [n for n in mod.__all__ if n != "CODECS"])


def test_each_family_registers_exactly_its_own_messages() -> None:
    seen: dict[MessageType, str] = {}
    for family in FAMILIES:
        mod = importlib.import_module(f"ray_kvmoq.moqt.codec.{family}")
        codecs = getattr(mod, "CODECS", {})
        for msg_type, (cls, _enc, _dec) in codecs.items():
            assert msg_type not in seen, f"{msg_type.name} in {seen.get(msg_type)} and {family}"
            assert cls.TYPE is msg_type
            assert cls.__module__ == mod.__name__, f"{cls.__name__} defined outside {family}"
            seen[msg_type] = family
    assert set(seen) == set(MessageType)
    assert set(codec.MESSAGE_CLASSES) == set(MessageType)
    # Draft-16 entries (the families ported so far) obey the same rule within their registry.
    seen16: dict[int, str] = {}
    for family in FAMILIES:
        mod = importlib.import_module(f"ray_kvmoq.moqt.codec.{family}")
        for code, (cls, _enc, _dec) in getattr(mod, "CODECS_16", {}).items():
            assert code not in seen16 and int(cls.TYPE) == code
            assert cls.__module__ == mod.__name__
            seen16[code] = family
    assert set(seen16) == set(MessageTypeD16)


def test_codec_imports_only_stdlib() -> None:
    """The codec is sans-I/O and stdlib-only (no numpy/torch/ray/asyncio/aioquic)."""
    banned = {"numpy", "torch", "ray", "asyncio", "aioquic", "qh3", "socket"}
    files = sorted((ROOT / "codec").glob("*.py"))
    assert len(files) >= 14
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            elif isinstance(node, ast.ImportFrom) and node.level > 1:
                raise AssertionError(f"{path.name} imports outside the codec: {ast.unparse(node)}")
            else:
                continue
            for name in names:
                assert name.split(".")[0] not in banned, f"{path.name} imports {name}"


def _moqt_imports(path: pathlib.Path) -> set[str]:
    parts = path.relative_to(REPO).with_suffix("").parts
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            mods = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = parts[: len(parts) - node.level]
                mod = ".".join((*base, node.module)) if node.module else ".".join(base)
            else:
                mod = node.module or ""
            mods = [mod]
            if mod in ("ray_kvmoq.moqt", "ray_kvmoq") or mod.endswith(".moqt"):
                mods += [f"{mod}.{a.name}" for a in node.names]
        else:
            continue
        out |= {m for m in mods if m.startswith("ray_kvmoq.moqt")}
    # ``from ray_kvmoq.moqt import api`` names the public module, not the package's attribute.
    return {m for m in out if m in PUBLIC or m.startswith("ray_kvmoq.moqt.")} - {
        f"ray_kvmoq.moqt.{n}" for n in pkg.__all__
    }


def test_nothing_outside_moqt_imports_its_internals() -> None:
    files = [
        *sorted((REPO / "ray_kvmoq").rglob("*.py")),
        *sorted((REPO / "tests").rglob("*.py")),
    ]
    bad = []
    for path in files:
        rel = str(path.relative_to(REPO))
        if rel.startswith(("ray_kvmoq/moqt/", "tests/moqt/")):
            continue
        private = _moqt_imports(path) - PUBLIC - PENDING.get(rel, set())
        bad += [f"{rel}: {m}" for m in sorted(private)]
    assert not bad, "private moqt imports (use ray_kvmoq.moqt.api / .codec):\n" + "\n".join(bad)


def test_every_dataclass_field_has_a_docstring() -> None:
    """Messages and events document each field with an attribute docstring (STYLE rule 5)."""
    checked = 0
    for path in sorted((ROOT / "codec").glob("*.py")):
        tree = ast.parse(path.read_text())
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
                    f"{path.name}.{cls.name}.{ast.unparse(stmt.target)} has no docstring"
                )
                checked += 1
    assert checked > 140


FAMILY_NAMES: dict[str, tuple[set[str], int]] = {
    "fetch": (
        {"Fetch", "FetchOk", "FetchError", "FetchCancel", "enc_fetch", "dec_fetch"}
        | {"enc_fetch_ok", "dec_fetch_ok", "read_fetch_type"}
        | {"FETCH", "FETCH_OK", "FETCH_ERROR", "FETCH_CANCEL"},
        3,
    ),
    "subscribe": (
        {"Subscribe", "SubscribeOk", "SubscribeError", "SubscribeUpdate", "Unsubscribe"}
        | {"enc_subscribe", "dec_subscribe", "enc_subscribe_ok"}
        | {"dec_subscribe_ok", "enc_subscribe_update", "dec_subscribe_update"}
        | {"SUBSCRIBE", "SUBSCRIBE_OK", "SUBSCRIBE_ERROR", "SUBSCRIBE_UPDATE", "UNSUBSCRIBE"},
        4,  # TRACK_STATUS reuses SUBSCRIBE's bodies (d14 §9.20-§9.21)
    ),
}
"""Identifiers of a message family (classes, codecs, type codes; not the family's union alias,
which only the aggregator names) and how many modules of
``ray_kvmoq/moqt`` may name them: the family's codec module, the registry of type codes
(``codec/types.py``) and the session role that handles it."""


def _identifiers(path: pathlib.Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Name):
            out.add(node.id)
        elif isinstance(node, ast.Attribute):
            out.add(node.attr)
        elif isinstance(node, ast.alias):
            out |= {node.name.split(".")[-1], node.asname or ""}
        elif isinstance(node, ast.FunctionDef | ast.ClassDef):
            out.add(node.name)
    return out


@pytest.mark.parametrize("family", list(FAMILY_NAMES))
def test_one_message_family_lives_in_few_modules(family: str) -> None:
    """Changing one message family touches its codec module, the code registry and its role
    (the aggregators, ``codec/__init__`` and ``codec/control``, name modules, not messages)."""
    names, most = FAMILY_NAMES[family]
    files = sorted(ROOT.rglob("*.py"))
    hits = [str(p.relative_to(ROOT)) for p in files if _identifiers(p) & names]
    assert len(hits) <= most, hits
