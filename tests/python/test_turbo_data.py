"""turbo_torch.utils.data against torch.utils.data: same datasets, same batches where the order is
deterministic (types, dtypes, shapes, values), same errors and len() rules; shuffled epochs checked for
coverage and reproducibility (the random streams differ from torch's by design)."""
import collections
import os
import pickle

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.utils.data as tud  # noqa: E402

import turbo_torch as tt  # noqa: E402
import turbo_torch.utils.data as ttd  # noqa: E402

Point = collections.namedtuple("Point", ["x", "label"])


def _same(ours, theirs):
    """Structural equality of a turbo_torch batch and a torch batch."""
    if isinstance(theirs, torch.Tensor):
        assert isinstance(ours, tt.Tensor), type(ours)
        assert str(ours.dtype) == str(theirs.dtype) and tuple(ours.shape) == tuple(theirs.shape)
        np.testing.assert_array_equal(np.asarray(ours.tolist()), theirs.numpy())
    elif isinstance(theirs, dict):
        assert type(ours) is type(theirs) and list(ours) == list(theirs)
        for key in theirs:
            _same(ours[key], theirs[key])
    elif isinstance(theirs, (list, tuple)):
        assert type(ours) is type(theirs) and len(ours) == len(theirs), (type(ours), type(theirs))
        for a, b in zip(ours, theirs):
            _same(a, b)
    else:
        assert type(ours) is type(theirs) and ours == theirs


class _Samples:
    """A map-style dataset of mixed samples, built for either library."""

    def __init__(self, lib, kind, n=11):
        self.lib, self.kind, self.n = lib, kind, n
        self.data = np.random.default_rng(0).standard_normal((n, 3)).astype(np.float32)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        x = self.lib.from_numpy(self.data[i].copy())
        if self.kind == "tuple":
            return x, i, float(i) / 2, i % 2 == 0
        if self.kind == "dict":
            return {"x": x, "meta": {"id": i, "name": f"s{i}"}, "pair": [i, i * 2]}
        if self.kind == "namedtuple":
            return Point(x, i)
        if self.kind == "numpy":
            return self.data[i], np.int32(i), np.float64(i)
        if self.kind == "scalar_tensor":
            return self.lib.tensor(i), self.lib.tensor([i, i], dtype=self.lib.int16)
        raise AssertionError(self.kind)


def _pair(kind, **kwargs):
    ours = list(ttd.DataLoader(_Samples(tt, kind), **kwargs))
    theirs = list(tud.DataLoader(_Samples(torch, kind), **kwargs))
    return ours, theirs


@pytest.mark.parametrize("kind", ["tuple", "dict", "namedtuple", "numpy", "scalar_tensor"])
@pytest.mark.parametrize("kwargs", [dict(batch_size=4), dict(batch_size=4, drop_last=True), dict(batch_size=1),
                                    dict(batch_size=None), dict(batch_size=20)])
def test_batches_equal_torch(kind, kwargs):
    ours, theirs = _pair(kind, **kwargs)
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        _same(a, b)


def test_tensor_dataset_and_len_rules():
    x = np.arange(30, dtype=np.float32).reshape(10, 3)
    for bs in (1, 3, 4, 10, 11):
        for drop_last in (False, True):
            ours = ttd.DataLoader(ttd.TensorDataset(tt.from_numpy(x), tt.arange(10)), batch_size=bs,
                                  drop_last=drop_last)
            theirs = tud.DataLoader(tud.TensorDataset(torch.from_numpy(x), torch.arange(10)), batch_size=bs,
                                    drop_last=drop_last)
            assert len(ours) == len(theirs)
            batches = list(ours)
            assert len(batches) == len(theirs)
            for a, b in zip(batches, theirs):
                _same(a, b)
    with pytest.raises(AssertionError, match="Size mismatch between tensors"):
        ttd.TensorDataset(tt.zeros(3), tt.zeros(4))


def test_collate_fn_sampler_and_batch_sampler():
    ds_ours, ds_theirs = _Samples(tt, "tuple"), _Samples(torch, "tuple")
    sampler = [5, 1, 3, 9, 0]
    _same(list(ttd.DataLoader(ds_ours, batch_size=2, sampler=sampler)),
          list(tud.DataLoader(ds_theirs, batch_size=2, sampler=sampler)))
    batches = [[0, 1, 2], [7], [3, 10]]
    _same(list(ttd.DataLoader(ds_ours, batch_sampler=batches)), list(tud.DataLoader(ds_theirs, batch_sampler=batches)))
    ours = list(ttd.DataLoader(ds_ours, batch_size=3, collate_fn=lambda b: [s[1] for s in b]))
    assert ours == [s for s in ([0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10])]


def test_samplers_match_torch_where_deterministic():
    assert list(ttd.SequentialSampler(range(5))) == list(tud.SequentialSampler(range(5)))
    for bs, drop in [(2, False), (2, True), (5, False), (7, True)]:
        ours = ttd.BatchSampler(ttd.SequentialSampler(range(5)), bs, drop)
        theirs = tud.BatchSampler(tud.SequentialSampler(range(5)), bs, drop)
        assert list(ours) == list(theirs) and len(ours) == len(theirs)


@pytest.mark.parametrize("make", [
    lambda lib: lib.BatchSampler(range(3), 0, False),
    lambda lib: lib.BatchSampler(range(3), True, False),
    lambda lib: lib.BatchSampler(range(3), 2, 1),
    lambda lib: lib.RandomSampler(range(3), replacement=1),
    lambda lib: lib.RandomSampler(range(3), num_samples=0),
    lambda lib: lib.RandomSampler(range(0)),
    lambda lib: lib.WeightedRandomSampler([1.0, 2.0], 0),
    lambda lib: lib.WeightedRandomSampler([[1.0, 2.0]], 2),
    lambda lib: lib.DataLoader(range(3), batch_size=2, batch_sampler=[[0]]),
    lambda lib: lib.DataLoader(range(3), shuffle=True, sampler=[0, 1]),
    lambda lib: lib.DataLoader(range(3), batch_size=None, drop_last=True),
    lambda lib: lib.DataLoader(range(3), num_workers=-1),
    lambda lib: lib.DataLoader(range(3), persistent_workers=True),
    lambda lib: lib.DataLoader(range(3), prefetch_factor=2),
    lambda lib: lib.random_split(range(10), [3, 3]),
    lambda lib: lib.ConcatDataset([]),
])
def test_errors_match_torch(make):
    with pytest.raises(Exception) as theirs:
        make(tud)
    with pytest.raises(type(theirs.value)) as ours:
        make(ttd)
    assert str(ours.value) == str(theirs.value)


def test_iterable_dataset_errors_match_torch():
    class Stream(tud.IterableDataset, ttd.IterableDataset):
        def __iter__(self):
            return iter(range(5))
    for kwargs in (dict(shuffle=True), dict(sampler=[0]), dict(batch_sampler=[[0]])):
        with pytest.raises(ValueError) as theirs:
            tud.DataLoader(Stream(), **kwargs)
        with pytest.raises(ValueError) as ours:
            ttd.DataLoader(Stream(), **kwargs)
        assert str(ours.value).split(",")[0] == str(theirs.value).split(",")[0]


def test_subset_concat_random_split():
    base_ours, base_theirs = _Samples(tt, "tuple", 7), _Samples(torch, "tuple", 7)
    idx = [6, 0, 3]
    _same([ttd.Subset(base_ours, idx)[i] for i in range(3)], [tud.Subset(base_theirs, idx)[i] for i in range(3)])
    ours_cat = ttd.ConcatDataset([base_ours, ttd.Subset(base_ours, idx)])
    theirs_cat = tud.ConcatDataset([base_theirs, tud.Subset(base_theirs, idx)])
    assert len(ours_cat) == len(theirs_cat) == 10 and ours_cat.cumulative_sizes == theirs_cat.cumulative_sizes
    for i in list(range(10)) + [-1, -10]:
        _same(ours_cat[i], theirs_cat[i])
    with pytest.raises(ValueError, match="absolute value of index"):
        ours_cat[-11]
    _same(list(ttd.DataLoader(ttd.Subset(base_ours, idx) + base_ours, batch_size=5)),
          list(tud.DataLoader(tud.Subset(base_theirs, idx) + base_theirs, batch_size=5)))
    for lengths in ([3, 4], [0.5, 0.5], [0.3, 0.3, 0.4], [0.1, 0.9], [7, 0]):
        ours = ttd.random_split(range(7), lengths, generator=tt.Generator().manual_seed(3))
        theirs = tud.random_split(range(7), lengths, generator=torch.Generator().manual_seed(3))
        assert [len(s) for s in ours] == [len(s) for s in theirs]
        assert sorted(i for s in ours for i in s) == list(range(7))
        again = ttd.random_split(range(7), lengths, generator=tt.Generator().manual_seed(3))
        assert [list(s) for s in ours] == [list(s) for s in again]


def test_shuffle_is_a_permutation_and_reproducible():
    ds = ttd.TensorDataset(tt.arange(50))

    def epochs(seed, count=3):
        loader = ttd.DataLoader(ds, batch_size=8, shuffle=True, generator=tt.Generator().manual_seed(seed))
        return [[v for batch in loader for v in batch[0].tolist()] for _ in range(count)]
    first = epochs(1)
    for epoch in first:
        assert sorted(epoch) == list(range(50))
    assert first[0] != first[1]  # a new order each epoch
    assert epochs(1) == first and epochs(2) != first
    tt.manual_seed(5)
    a = [v for b in ttd.DataLoader(ds, batch_size=8, shuffle=True) for v in b[0].tolist()]
    tt.manual_seed(5)
    b = [v for b in ttd.DataLoader(ds, batch_size=8, shuffle=True) for v in b[0].tolist()]
    assert a == b and sorted(a) == list(range(50))


def test_random_samplers():
    g = tt.Generator().manual_seed(0)
    assert sorted(ttd.SubsetRandomSampler([3, 5, 7], generator=g)) == [3, 5, 7]
    draws = list(ttd.RandomSampler(range(4), replacement=True, num_samples=70, generator=g))
    assert len(draws) == 70 and set(draws) <= {0, 1, 2, 3}
    more = list(ttd.RandomSampler(range(4), num_samples=10, generator=g))
    assert len(more) == 10 and sorted(more[:8]) == [0, 0, 1, 1, 2, 2, 3, 3]
    weighted = list(ttd.WeightedRandomSampler([0.0, 1.0, 0.0, 3.0], 200, generator=g))
    assert len(weighted) == 200 and set(weighted) == {1, 3} and weighted.count(3) > weighted.count(1)
    no_repeat = list(ttd.WeightedRandomSampler([1.0, 1.0, 1.0], 3, replacement=False, generator=g))
    assert sorted(no_repeat) == [0, 1, 2]


class _Stream(ttd.IterableDataset):
    """Yields 0..n-1, split between workers by get_worker_info()."""

    def __init__(self, n):
        self.n = n

    def __iter__(self):
        info = ttd.get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        for i in range(start, self.n, step):
            yield tt.tensor([i, i * 10])

    def __len__(self):
        return self.n


def test_iterable_dataset_single_and_workers():
    batches = list(ttd.DataLoader(_Stream(10), batch_size=4))
    assert [b.tolist() for b in batches] == [[[i, i * 10] for i in range(j, min(j + 4, 10))] for j in (0, 4, 8)]
    assert len(ttd.DataLoader(_Stream(10), batch_size=4)) == 3
    assert len(ttd.DataLoader(_Stream(10), batch_size=4, drop_last=True)) == 2
    assert [b.tolist() for b in ttd.DataLoader(_Stream(3), batch_size=None)] == [[0, 0], [1, 10], [2, 20]]
    rows = [row[0] for b in ttd.DataLoader(_Stream(20), batch_size=3, num_workers=2) for row in b.tolist()]
    assert sorted(rows) == list(range(20))


def _init_fn(worker_id):
    os.environ["TT_WORKER_TEST"] = str(worker_id)


class _WhoAmI(ttd.Dataset):
    def __len__(self):
        return 12

    def __getitem__(self, i):
        info = ttd.get_worker_info()
        return {"i": i, "worker": info.id, "pid": os.getpid(), "seed": info.seed,
                "env": int(os.environ.get("TT_WORKER_TEST", -1)), "rand": tt.rand(1)}


def test_workers_match_single_process_and_torch():
    ds_ours, ds_theirs = _Samples(tt, "dict", 23), _Samples(torch, "dict", 23)
    for kwargs in (dict(batch_size=4), dict(batch_size=5, drop_last=True), dict(batch_size=None)):
        single = list(ttd.DataLoader(ds_ours, **kwargs))
        for workers in (1, 2):
            multi = list(ttd.DataLoader(ds_ours, num_workers=workers, **kwargs))
            theirs = list(tud.DataLoader(ds_theirs, num_workers=workers, **kwargs))
            _same(multi, theirs)
            _same(single, theirs)


def test_worker_info_init_fn_seeds_and_persistent_workers():
    loader = ttd.DataLoader(_WhoAmI(), batch_size=2, num_workers=3, worker_init_fn=_init_fn,
                            persistent_workers=True)
    first = list(loader)
    second = list(loader)
    for epoch in (first, second):
        assert [i for b in epoch for i in b["i"].tolist()] == list(range(12))
        for b in epoch:
            assert (b["worker"] == b["env"]).all().item()
            assert b["pid"].tolist()[0] != os.getpid()
    # round-robin: batch k comes from worker k % 3; seeds are base + worker id
    assert [b["worker"][0].item() for b in first] == [k % 3 for k in range(6)]
    seeds = {b["worker"][0].item(): b["seed"][0].item() for b in first}
    assert seeds[1] - seeds[0] == 1 and seeds[2] - seeds[0] == 1 * 2
    # persistent workers are the same processes in both epochs
    assert {b["pid"][0].item() for b in first} == {b["pid"][0].item() for b in second}
    assert ttd.get_worker_info() is None
    # an epoch abandoned half-way: its batches in flight never leak into the next epoch
    shuffled = ttd.DataLoader(_WhoAmI(), batch_size=2, num_workers=2, shuffle=True, persistent_workers=True,
                              generator=tt.Generator().manual_seed(0))
    for _ in range(3):
        next(iter(shuffled))
        assert sorted(i for b in shuffled for i in b["i"].tolist()) == list(range(12))


class _Failing(ttd.Dataset):
    def __len__(self):
        return 6

    def __getitem__(self, i):
        if i == 4:
            raise KeyError(f"bad sample {i}")
        return i


class _Crashing(ttd.Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        os._exit(3)


def test_worker_errors_are_reraised_and_crashes_detected():
    with pytest.raises(KeyError, match=r"Caught KeyError in DataLoader worker process 0[\s\S]*bad sample 4"):
        list(ttd.DataLoader(_Failing(), batch_size=2, num_workers=2))
    with pytest.raises(RuntimeError, match="exited unexpectedly"):
        list(ttd.DataLoader(_Crashing(), batch_size=2, num_workers=1))


def test_tensors_pickle_for_workers():
    for t in (tt.arange(12.0).reshape(3, 4).t(), tt.tensor(3), tt.zeros(0, 2), tt.ones(2, dtype=tt.bfloat16),
              tt.tensor([True, False]), tt.arange(6)[2:5]):
        back = pickle.loads(pickle.dumps(t))
        assert back.dtype is t.dtype and back.shape == t.shape and back.tolist() == t.tolist()
    leaf = pickle.loads(pickle.dumps(tt.ones(2, requires_grad=True)))
    assert leaf.requires_grad and leaf.is_leaf
    with pytest.raises(RuntimeError, match="non-leaf"):
        pickle.dumps(tt.ones(2, requires_grad=True) * 2)


def test_default_collate_and_convert_match_torch():
    cases = [
        [1.5, 2.5], [1, 2], [True, False], ["a", "b"], [(1, 2.0), (3, 4.0)], [[1, 2], [3, 4]],
        [{"a": 1, "b": [1.0, 2.0]}, {"a": 2, "b": [3.0, 4.0]}], [Point(1, 2.0), Point(3, 4.0)],
        [np.float32(1), np.float32(2)], [np.int64(1), np.int64(2)], [np.array([1, 2]), np.array([3, 4])],
    ]
    for batch in cases:
        _same(ttd.default_collate(batch), tud.default_collate(batch))
    with pytest.raises(RuntimeError, match="each element in list of batch should be of equal size"):
        ttd.default_collate([[1, 2], [3]])
    with pytest.raises(TypeError) as theirs:
        tud.default_collate([object(), object()])
    with pytest.raises(TypeError) as ours:
        ttd.default_collate([object(), object()])
    assert str(ours.value).split(";")[0] == str(theirs.value).split(";")[0]
    for data in (np.arange(3), (np.arange(2), 1), {"k": np.ones(2)}, "text", 3):
        _same(ttd.default_convert(data), tud.default_convert(data))
