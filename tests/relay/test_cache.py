"""RelayCache: the sans-I/O core (STYLE rule 7, draft-14 §8 / digest §5)."""

from __future__ import annotations

import pytest

from ray_kvmoq.moqt.api import Group
from ray_kvmoq.relay.cache import (
    OBJECT_DOES_NOT_EXIST,
    OBJECT_END_OF_GROUP,
    OBJECT_END_OF_TRACK,
    CachedObject,
    CacheFull,
    GroupKey,
    InFlight,
    MalformedTrackError,
    MemoryGroupStore,
    RelayCache,
)

NS = (b"moq://kvcache.moq.arpa/v1/", b"m", b"p1")
TR = b"FP16"


def objs(n: int, size: int, tag: int = 0, group: int = 0) -> list[CachedObject]:
    return [
        CachedObject(group=group, object_id=i, payload=bytes([tag + i]) * size) for i in range(n)
    ]


def test_put_group_then_read_back_exactly() -> None:
    c = RelayCache(1 << 20)
    group = [
        CachedObject(
            group=5, object_id=0, payload=b"a", extensions=((0x3C, 1), (0x0B, b"x")), priority=7
        ),
        CachedObject(group=5, object_id=1, payload=b"bc", subgroup=2),
        CachedObject(group=5, object_id=2, status=OBJECT_DOES_NOT_EXIST),
    ]
    assert c.put_group(NS, TR, 5, group, now=0.0) == []
    assert c.get_group(NS, TR, 5, now=1.0) == group
    assert c.is_sealed(NS, TR, 5)
    assert c.bytes_cached == 3
    assert (c.counters.hits, c.counters.misses, c.counters.bytes_in) == (1, 0, 3)
    assert c.get_group(NS, TR, 6, now=1.0) is None
    assert c.counters.misses == 1


def test_open_group_seals_on_end_of_group_status() -> None:
    c = RelayCache(1 << 20)
    for o in objs(3, 4):
        c.put_object(NS, TR, 0, o, now=0.0)
    assert not c.is_sealed(NS, TR, 0)
    assert len(c.get_group(NS, TR, 0, now=0.0) or []) == 3
    c.put_object(NS, TR, 0, CachedObject(object_id=3, status=OBJECT_END_OF_GROUP), now=0.0)
    assert c.is_sealed(NS, TR, 0)
    assert c.track_info(NS, TR) == ((0, 2), None)


def test_lru_evicts_whole_groups_but_keeps_latest() -> None:
    c = RelayCache(budget_bytes=250)
    evicted: list[GroupKey] = []
    for g in range(4):
        evicted += c.put_group(NS, TR, g, objs(1, 100, g), now=float(g))
    # 4 × 100 bytes, budget 250: groups 0 and 1 go (oldest first), 2 and 3 stay.
    assert evicted == [(NS, TR, 0), (NS, TR, 1)]
    assert c.cached_groups(NS, TR) == [2, 3]
    assert c.bytes_cached == 200
    assert (c.counters.evictions, c.counters.evicted_bytes) == (2, 200)


def test_a_read_refreshes_lru_order() -> None:
    c = RelayCache(budget_bytes=350)
    for g in range(3):
        c.put_group(NS, TR, g, objs(1, 100), now=0)
    c.get_group(NS, TR, 0, now=0)  # 0 is now more recent than 1 (2 is the latest: kept)
    assert c.put_group(NS, TR, 3, objs(1, 100), now=0) == [(NS, TR, 1)]


def test_a_tiny_budget_evicts_latest_groups_too_and_never_holds_more_than_it() -> None:
    c = RelayCache(budget_bytes=150)
    other = (b"other",)
    c.put_group(NS, TR, 0, objs(1, 100), now=0)
    assert c.put_group(other, TR, 7, objs(1, 100), now=0) == [(NS, TR, 0)]  # latest, but live
    assert c.bytes_cached == 100 and c.cached_groups(other, TR) == [7]
    with pytest.raises(CacheFull):  # one group larger than the whole budget
        c.put_group(NS, TR, 1, objs(1, 200), now=0)
    assert c.bytes_cached == 100 and c.counters.refused_bytes == 200


def test_ended_tracks_last_groups_go_before_live_tracks_latest_groups() -> None:
    c = RelayCache(budget_bytes=300)
    c.put_group(NS, TR, 0, objs(1, 100), now=0)  # live track: its latest group
    c.put_group(NS, b"done", 0, objs(1, 100), now=0, end_of_track=True)  # ended track
    c.put_group(NS, b"x", 0, objs(1, 100), now=0)
    evicted = c.put_group(NS, b"y", 0, objs(1, 100), now=0)
    assert evicted == [(NS, b"done", 0)]  # older live latest group (NS, TR, 0) survives
    assert not c.has_track(NS, b"done")


def test_open_groups_count_against_the_budget_and_refuse_what_cannot_fit() -> None:
    c = RelayCache(budget_bytes=250)
    c.put_group(NS, TR, 0, objs(1, 100), now=0)
    c.put_object(NS, TR, 1, CachedObject(object_id=0, payload=b"a" * 100), now=0)  # open
    evicted = c.put_object(NS, TR, 2, CachedObject(object_id=0, payload=b"b" * 100), now=0)
    assert evicted == [(NS, TR, 0)] and c.bytes_cached == 200
    with pytest.raises(CacheFull):  # both open groups stay; 100 more bytes cannot fit
        c.put_object(NS, TR, 3, CachedObject(object_id=0, payload=b"c" * 100), now=0)
    assert c.bytes_cached == 200 and c.cached_groups(NS, TR) == [1, 2]


def test_a_smaller_budget_evicts_lru_groups_to_fit_and_refuses_below_the_open_bytes() -> None:
    c = RelayCache(budget_bytes=1000)
    for g in range(4):
        c.put_group(NS, TR, g, objs(1, 100), now=0)
    c.get_group(NS, TR, 0, now=0)  # 0 is now more recent than 1 and 2
    assert c.set_budget(250) == [(NS, TR, 1), (NS, TR, 2)]  # 3, the live latest, goes last
    assert (c.budget_bytes, c.bytes_cached, c.cached_groups(NS, TR)) == (250, 200, [0, 3])
    assert c.set_budget(100) == [(NS, TR, 0)]
    assert c.set_budget(400) == [] and c.bytes_cached == 100  # growing evicts nothing
    c.put_object(NS, b"open", 0, CachedObject(object_id=0, payload=b"o" * 80), now=0)
    with pytest.raises(CacheFull):  # the open group alone is larger: nothing changes
        c.set_budget(50)
    assert (c.budget_bytes, c.bytes_cached) == (400, 180)
    with pytest.raises(ValueError):
        c.set_budget(0)


def test_thousands_of_short_tracks_never_exceed_the_budget_and_leave_no_state() -> None:
    budget = 10_000
    c = RelayCache(budget_bytes=budget)
    for p in range(3000):
        ns = (b"kv", b"m", b"prompt%d" % p)
        for g in range(3):
            c.put_group(ns, TR, g, objs(2, 300 + p % 7), now=float(p))
            assert c.bytes_cached <= budget
        if p % 2:
            c.end_track(ns, TR, 2, now=float(p))
    held = sum(1 for _ in c.sealed_groups())
    assert held * 600 <= budget and sum(1 for _ in c.tracks()) <= held
    assert c.bytes_cached == sum(
        len(o.payload)
        for ns, tr in c.tracks()
        for g in c.cached_groups(ns, tr)
        for o in c.get_group(ns, tr, g, now=0.0) or []
    )


def test_identical_duplicate_is_ignored_and_conflicting_one_is_malformed() -> None:
    c = RelayCache(1 << 20)
    c.put_object(NS, TR, 0, CachedObject(object_id=0, payload=b"x"), now=0)
    c.put_object(NS, TR, 0, CachedObject(object_id=0, payload=b"x"), now=0)
    assert c.counters.bytes_in == 1
    with pytest.raises(MalformedTrackError) as ei:
        c.put_object(NS, TR, 0, CachedObject(object_id=0, payload=b"y"), now=0)
    assert ei.value.error_code == 0x7
    with pytest.raises(MalformedTrackError):
        c.put_object(NS, TR, 0, CachedObject(object_id=0, payload=b"x", priority=1), now=0)
    c.seal_group(NS, TR, 0, now=0)
    c.put_object(NS, TR, 0, CachedObject(object_id=0, payload=b"x"), now=0)  # same: fine
    with pytest.raises(MalformedTrackError):
        c.put_object(NS, TR, 0, CachedObject(object_id=0, payload=b"z"), now=0)
    with pytest.raises(MalformedTrackError):
        c.put_object(NS, TR, 0, CachedObject(object_id=5, payload=b"late"), now=0)


def test_does_not_exist_may_replace_a_normal_object() -> None:
    c = RelayCache(1 << 20)
    c.put_object(NS, TR, 0, CachedObject(object_id=0, payload=b"xyz"), now=0)
    c.put_object(NS, TR, 0, CachedObject(object_id=0, status=OBJECT_DOES_NOT_EXIST), now=0)
    assert c.bytes_cached == 0


def test_end_of_track_bounds_the_track() -> None:
    c = RelayCache(1 << 20)
    c.put_object(NS, TR, 0, CachedObject(object_id=0, payload=b"a"), now=0)
    c.put_object(NS, TR, 0, CachedObject(object_id=1, status=OBJECT_END_OF_TRACK), now=0)
    assert c.track_info(NS, TR) == ((0, 0), (0, 1))
    assert c.is_sealed(NS, TR, 0)
    with pytest.raises(MalformedTrackError):
        c.put_object(NS, TR, 1, CachedObject(object_id=0, payload=b"b"), now=0)
    c.put_group(NS, b"T2", 3, objs(2, 1), now=0, end_of_track=True)
    assert c.track_info(NS, b"T2")[1] == (3, 2)


def test_read_range_follows_fetch_end_rules() -> None:
    c = RelayCache(1 << 20)
    for g in range(3):
        c.put_group(NS, TR, g, objs(3, 1, 10 * g), now=0)
    got, complete = c.read_range(NS, TR, (0, 1), (2, 0), now=0)  # end.object 0 = all of group 2
    assert complete
    assert [(g, o.object_id) for g, o in got] == [
        (0, 1),
        (0, 2),
        (1, 0),
        (1, 1),
        (1, 2),
        (2, 0),
        (2, 1),
        (2, 2),
    ]
    got, complete = c.read_range(NS, TR, (1, 0), (1, 2), now=0)  # end {1, 2} = up to object 1
    assert complete and [o.object_id for _, o in got] == [0, 1]
    got, complete = c.read_range(NS, TR, (2, 0), (4, 0), now=0)  # group 3, 4 unknown
    assert not complete and len(got) == 3


def test_max_cache_duration_expires_groups() -> None:
    c = RelayCache(1 << 20)
    c.set_max_age(NS, TR, 1000)
    c.put_group(NS, TR, 0, objs(1, 10), now=100.0)
    assert c.get_group(NS, TR, 0, now=100.9) is not None
    assert c.get_group(NS, TR, 0, now=101.5) is None
    assert c.bytes_cached == 0 and c.counters.evictions == 1


class _CountingStore(MemoryGroupStore):
    def __init__(self) -> None:
        self.puts: list[GroupKey] = []
        self.deletes = 0

    def put(self, key: GroupKey, group: Group) -> Group:
        self.puts.append(key)
        return super().put(key, group)

    def delete(self, handle: Group) -> None:
        self.deletes += 1


def test_store_backend_sees_one_put_per_sealed_group_and_one_delete_per_eviction() -> None:
    store = _CountingStore()
    c = RelayCache(budget_bytes=150, store=store)
    for g in range(3):
        c.put_group(NS, TR, g, objs(2, 50), now=0)
    assert store.puts == [(NS, TR, 0), (NS, TR, 1), (NS, TR, 2)]
    assert store.deletes == 2
    assert c.group_handle(NS, TR, 2, now=0) is not None
    assert c.group_handle(NS, TR, 0, now=0) is None


def test_inflight_merges_concurrent_requests() -> None:
    f: InFlight[str, int] = InFlight()
    assert f.join("k", 1) is True
    assert f.join("k", 2) is False and f.join("k", 3) is False
    assert "k" in f and len(f) == 1
    assert f.finish("k") == [2, 3]
    assert f.join("k", 4) is True  # a new round after the first finished
