"""Set-up descriptions column-wise, recipes as a range, and where shards live."""
from __future__ import annotations

import pickle
import sys
from typing import Any

import numpy as np
import pytest

from fedray.api.config import make_config
from fedray.core.errors import ConfigError, DataError
from fedray.data.checks import Descriptions, check_descriptions, describe_block, describe_shard
from fedray.data.federation import build_federation, shard_residency
from fedray.data.recipes import ClientSpec, RecipeRange, recipe_ids, recipe_kinds, recipe_name


def _shards(sizes: list[int], trail: tuple[int, ...], seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((n, *trail)) * 10 ** rng.uniform(-6, 6, trail) for n in sizes]


def _block(shards: list[np.ndarray], ids: np.ndarray, labels: bool = True) -> Descriptions:
    offsets = np.concatenate([[0], np.cumsum([len(X) for X in shards])])
    y = np.concatenate([np.arange(len(X)) % 3 for X in shards]) if labels else None
    return describe_block(ids, None, np.concatenate(shards), y, offsets, ("a", "b", "c", "d", "e", "f", "g", "h"))


def _per_client(shards: list[np.ndarray], ids: np.ndarray, labels: bool = True) -> list[dict[str, Any]]:
    return [describe_shard(int(c), f"client-{int(c)}", X, (np.arange(len(X)) % 3) if labels else None,
                           ("a", "b", "c", "d", "e", "f", "g", "h")) for c, X in zip(ids, shards)]


CASES = {"equal, d=8": ([7] * 5, (8,)), "unequal, d=8": ([1, 9, 3, 9, 2, 40], (8,)),
         "unequal, d=1": ([5, 2, 11, 2], (1,)), "images": ([3, 6, 3, 1], (1, 4, 4))}


@pytest.mark.parametrize("case", list(CASES))
def test_describe_block_equals_per_client_describe_shard(case):
    """Per-client sizes, dimension, column sums and sums of squares are the bits of describe_shard's;
    extremes are their minimum / maximum; labels seen are the union."""
    sizes, trail = CASES[case]
    shards = _shards(sizes, trail)
    ids = np.array([3, 4, 8, 10, 11, 20][:len(sizes)])
    got, ref = _block(shards, ids), _per_client(shards, ids)
    assert got.ids.tolist() == ids.tolist() and got.n.tolist() == [d["n"] for d in ref]
    assert got.n_features.tolist() == [d["n_features"] for d in ref]
    for key in ("sum", "sumsq"):
        assert np.concatenate(getattr(got, key)).tobytes() == np.stack([d[key] for d in ref]).tobytes(), key
    assert np.concatenate(got.min).min(axis=0).tobytes() == np.min([d["min"] for d in ref], axis=0).tobytes()
    assert np.concatenate(got.max).max(axis=0).tobytes() == np.max([d["max"] for d in ref], axis=0).tobytes()
    assert got.classes.tolist() == np.unique(np.concatenate([d["classes"] for d in ref])).tolist()
    assert not got.bad_values and not got.errors


def test_totals_equal_the_sums_of_the_per_client_rows():
    """totals() gives the bits of np.sum / np.min / np.max over the per-client rows (old form)."""
    shards = _shards([4, 9, 1, 30, 2, 2, 7], (8,), seed=5)
    ids = np.arange(7)
    got, ref = _block(shards, ids).totals(), _per_client(shards, ids)
    old = (np.sum([d["sum"] for d in ref], axis=0), np.sum([d["sumsq"] for d in ref], axis=0),
           np.min([d["min"] for d in ref], axis=0), np.max([d["max"] for d in ref], axis=0))
    assert [a.tobytes() for a in got] == [a.tobytes() for a in old]


def test_describe_block_names_the_same_bad_value_as_describe_shard():
    """A non-finite value is reported for the same client, column and row as describe_shard reports;
    other clients are unaffected."""
    shards = _shards([4, 6, 5], (8,))
    shards[1][3, 5] = np.inf
    shards[1][4, 2] = np.nan
    ids = np.array([0, 1, 2])
    got, ref = _block(shards, ids), _per_client(shards, ids)
    assert got.bad_values == {1: ref[1]["bad_value"]}
    assert "column 'c'" in ref[1]["bad_value"] and "row 4" in ref[1]["bad_value"]
    with pytest.raises(DataError) as exc:
        check_descriptions(got)
    assert str(exc.value) == _old_check_message(ref)


def test_describe_block_with_an_empty_client():
    """An empty client has n 0; no moments are reported; the check names it as before."""
    shards = _shards([4, 0, 5], (8,))
    ids = np.array([0, 1, 2])
    got, ref = _block(shards, ids), _per_client(shards, ids)
    assert got.n.tolist() == [4, 0, 5] and "sum" not in ref[1]
    with pytest.raises(DataError) as exc:
        check_descriptions(got)
    assert str(exc.value) == _old_check_message(ref) == "client 1 has no samples; remove it or change the partition"


def test_concat_of_parts_in_any_order_is_one_describe():
    """Descriptions of chunks of clients, joined in any order, equal the description of all of them."""
    shards = _shards([3, 8, 2, 2, 9, 5, 1], (8,), seed=3)
    ids = np.arange(10, 17)
    whole = _block(shards, ids)
    cuts = [(0, 2), (2, 3), (3, 7)]
    parts = [_block(shards[a:b], ids[a:b]) for a, b in cuts]
    for order in ([0, 1, 2], [2, 0, 1], [1, 2, 0]):
        joined = Descriptions.concat([parts[i] for i in order])
        for key in ("ids", "n", "n_features", "classes"):
            assert getattr(joined, key).tobytes() == getattr(whole, key).tobytes()
        for key in ("sum", "sumsq"):
            assert np.concatenate(getattr(joined, key)).tobytes() == np.concatenate(getattr(whole, key)).tobytes()
        assert [a.tobytes() for a in joined.totals()] == [a.tobytes() for a in whole.totals()]
    with pytest.raises(ValueError, match="overlapping"):
        Descriptions.concat([parts[0], parts[0]])


def _old_check_message(rows: list[dict[str, Any]]) -> str:
    """The message of check_descriptions before descriptions were column-wise (the reference)."""
    for d in rows:
        who = f"client {d['client_id']}" + (
            f" ({d['name']})" if d.get("name") and d["name"] != f"client-{d['client_id']}" else ""
        )
        if "error" in d:
            return f"{who}: {d['error']}"
        if "bad_value" in d:
            return (f"{who}: non-finite value {d['bad_value']}; clean or impute the data first "
                    "(NaN and inf are not allowed)")
        if d["n"] == 0:
            return f"{who} has no samples; remove it or change the partition"
    dims = sorted({d["n_features"] for d in rows})
    by = {dim: [d["client_id"] for d in rows if d["n_features"] == dim][:5] for dim in dims}
    return f"clients have different numbers of features: {by} (feature count: client ids)"


def _row(cid: int, n: int = 3, d: int = 4, **extra: Any) -> dict[str, Any]:
    return {"client_id": cid, "name": extra.pop("name", f"client-{cid}"), "n": n, "n_features": d, **extra}


CHECKS = {
    "error first": [_row(0), _row(1, error="cannot read"), _row(2, bad_value="nan in 'x'"), _row(3, n=0)],
    "bad before empty": [_row(0), _row(1, n=0, name="paris"), _row(2, bad_value="inf")],
    "bad first": [_row(0), _row(1, bad_value="inf in 'x'", name="lyon"), _row(2, error="e")],
    "error beats bad on one client": [_row(0), _row(5, error="gone", bad_value="nan")],
    "two errors": [_row(0), _row(2, error="first"), _row(4, error="second"), _row(6, bad_value="nan")],
    "two bad values": [_row(1), _row(3, bad_value="nan one"), _row(8, bad_value="nan two"), _row(9, n=0)],
    "empty first": [_row(0, n=0), _row(1, error="late")],
    "features": [_row(i, d=4 if i % 3 else 6) for i in range(12)],
}


@pytest.mark.parametrize("case", list(CHECKS))
def test_check_descriptions_messages_are_unchanged(case):
    """check_descriptions raises the message the per-client check raised (first client in id order;
    within a client: build error, then bad value, then empty; then differing feature counts)."""
    rows = CHECKS[case]
    with pytest.raises(DataError) as exc:
        check_descriptions(Descriptions.from_rows(rows))
    assert str(exc.value) == _old_check_message(rows)
    with pytest.raises(DataError) as again:
        check_descriptions(rows)
    assert str(again.value) == str(exc.value)


def test_check_descriptions_returns_the_feature_count():
    assert check_descriptions(Descriptions.from_rows([_row(i, d=7) for i in range(3)])) == 7


# --- RecipeRange --------------------------------------------------------------
SOURCE = {"kind": "blobs", "seed": 1, "n_features": 2, "points_per_client": 3}


def test_recipe_range_is_the_sequence_of_its_recipes():
    """len, indexing (negative; out of range -> IndexError), slicing (step 1 -> a range, other steps
    -> a list), pickling, and the helpers recipe_ids / recipe_kinds / recipe_name."""
    r = RecipeRange(SOURCE, 10, 20)
    assert len(r) == 10 and len(RecipeRange(SOURCE, 5, 2)) == 0
    assert r[0] == ClientSpec(10, SOURCE, None, "client-10")
    assert r[-1].client_id == 19 and r[-10].client_id == 10
    for bad in (10, -11, 100):
        with pytest.raises(IndexError):
            r[bad]
    s = r[2:5]
    assert isinstance(s, RecipeRange) and [c.client_id for c in s] == [12, 13, 14]
    assert isinstance(r[-3:], RecipeRange) and r[-3:].ids.tolist() == [17, 18, 19]
    assert len(r[8:3]) == 0
    stepped = r[::3]
    assert isinstance(stepped, list) and [c.client_id for c in stepped] == [10, 13, 16, 19]
    assert [c.client_id for c in r[::-1]] == list(range(19, 9, -1))
    back = pickle.loads(pickle.dumps(r))
    assert isinstance(back, RecipeRange) and list(back) == list(r)
    assert recipe_ids(r).tolist() == list(range(10, 20)) and recipe_ids(r).dtype == np.int64
    assert recipe_ids(list(r)).tolist() == list(range(10, 20))
    assert recipe_kinds(r) == {"blobs"} and recipe_kinds(RecipeRange(SOURCE, 3, 3)) == set()
    assert recipe_kinds([ClientSpec(0, {"kind": "pooled"}), ClientSpec(1, {"kind": "table"})]) == {"pooled", "table"}
    assert recipe_name(r, 4) == "client-14" == r[4].name
    assert recipe_name([ClientSpec(0, {}, None, "oslo")], 0) == "oslo"


def test_a_blobs_federation_of_a_million_clients_has_recipes_of_constant_size():
    """A blobs federation's specs is one RecipeRange; it pickles to a few hundred bytes for 10^6
    clients (nothing per client)."""
    cfg = make_config(data={"dataset": "blobs"}, federation={"n_clients": 10})
    fed = build_federation(cfg.data, 1_000_000, 0)
    assert isinstance(fed.specs, RecipeRange) and len(fed.specs) == 1_000_000
    assert sys.getsizeof(pickle.dumps(fed.specs)) < 1024
    assert fed.specs[999_999].client_id == 999_999


# --- where shards live --------------------------------------------------------
def _cfg(resident: str, dataset: str = "blobs", **options: Any):
    data = {"dataset": dataset, **({"options": options} if options else {})}
    return make_config(data=data, federation={"n_clients": 10}, runtime={"backend": "local", "resident": resident})


def test_shard_residency_modes(monkeypatch):
    """always -> kept; never -> not kept (generated data); auto -> kept unless the rows would take
    more than half of the memory psutil reports available."""
    cfg = _cfg("always")
    fed = build_federation(cfg.data, 10, 0)
    assert shard_residency(cfg, fed.specs) is True
    assert shard_residency(_cfg("never"), fed.specs) is False
    assert shard_residency(_cfg("auto"), fed.specs) is True
    psutil = pytest.importorskip("psutil")

    class Little:
        available = 1000  # bytes: less than twice the federation's rows

    monkeypatch.setattr(psutil, "virtual_memory", lambda: Little())
    assert shard_residency(_cfg("auto"), fed.specs) is False
    assert shard_residency(_cfg("always"), fed.specs) is True


def test_never_with_a_data_set_read_once_is_a_config_error():
    """runtime.resident: never with data that cannot be generated again is one ConfigError naming the key."""
    cfg = _cfg("never", dataset="sklearn:iris")
    fed = build_federation(cfg.data, 10, 0)
    with pytest.raises(ConfigError) as exc:
        shard_residency(cfg, fed.specs)
    assert "runtime.resident" in str(exc.value) and "\n" not in str(exc.value)
    assert shard_residency(_cfg("auto", dataset="sklearn:iris"), fed.specs) is True
