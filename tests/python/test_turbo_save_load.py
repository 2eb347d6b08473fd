"""turbo_torch.save/load against real torch.save/torch.load(weights_only=True), and hostile checkpoints.

Every hostile file must give a clear exception (type and message checked): never a crash, a hang or code
run from the file."""
import collections
import io
import os
import pickle
import struct
import zipfile

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import turbo_torch as tt  # noqa: E402

DTYPES = ["float32", "float64", "int64", "bool", "float16", "bfloat16", "int32", "uint8", "int8", "int16"]


def _values(t):
    """Exact values of a tensor of either library as float64 numpy (bfloat16 via float32)."""
    if isinstance(t, torch.Tensor):
        return t.detach().to(torch.float64).numpy()
    return np.asarray(t.detach().to(tt.float64).tolist(), dtype=np.float64).reshape(tuple(t.shape))


def _same_tensor(ours, theirs):
    assert str(ours.dtype) == str(theirs.dtype)
    assert tuple(ours.shape) == tuple(theirs.shape)
    assert tuple(ours.stride()) == tuple(theirs.stride())
    assert ours.storage_offset() == theirs.storage_offset()
    assert ours.requires_grad == theirs.requires_grad
    np.testing.assert_array_equal(_values(ours), _values(theirs))


def _compare(ours, theirs):
    if isinstance(theirs, torch.Tensor):
        _same_tensor(ours, theirs)
    elif isinstance(theirs, dict):
        assert type(ours) is type(theirs) and list(ours) == list(theirs)
        for key in theirs:
            _compare(ours[key], theirs[key])
    elif isinstance(theirs, (list, tuple)):
        assert type(ours) is type(theirs) and len(ours) == len(theirs)
        for a, b in zip(ours, theirs):
            _compare(a, b)
    else:
        assert type(ours) is type(theirs) and ours == theirs


def _torch_object():
    g = torch.Generator().manual_seed(0)
    base = torch.randn(4, 6, generator=g)
    sd = collections.OrderedDict()
    for name in DTYPES:
        dt = getattr(torch, name)
        sd[name] = (torch.randn(3, 5, generator=g) * 10).to(dt)
    sd["view_t"] = base.t()            # non-contiguous, shares base's storage
    sd["base"] = base
    sd["row"] = base[2]                # offset view
    sd["cols"] = base[:, 1::2]         # strided
    sd["scalar"] = torch.tensor(2.5)   # 0-dim
    sd["empty"] = torch.zeros(0, 3)
    sd["expanded"] = torch.ones(3, 1).expand(3, 4)  # zero stride
    sd["grad"] = torch.ones(2, requires_grad=True)
    sd._metadata = collections.OrderedDict({"": {"version": 1}})
    return {"state_dict": sd, "step": 7, "lr": 1e-3, "name": "adam", "flag": True, "none": None,
            "nested": [1, (2.5, "x", [torch.arange(5)]), {"k": -(2 ** 40)}], "big": 2 ** 80,
            "optimizer": {"state": {0: {"exp_avg": torch.zeros(3), "step": torch.tensor(3.0)}},
                          "param_groups": [{"lr": 0.1, "betas": (0.9, 0.999), "params": [0]}]}}


def test_torch_checkpoint_loads_here(tmp_path):
    path = tmp_path / "ckpt.pt"
    obj = _torch_object()
    torch.save(obj, path)
    ours = tt.load(path)
    _compare(ours, torch.load(path, weights_only=True))
    sd = ours["state_dict"]
    assert sd._metadata == {"": {"version": 1}}
    # views of one storage in the file share one storage here
    assert sd["view_t"].data_ptr() == sd["base"].data_ptr()
    sd["base"][0, 0] = 123.0
    assert sd["view_t"][0, 0].item() == 123.0
    assert sd["float32"].data_ptr() != sd["base"].data_ptr()


def _tt_object():
    tt.manual_seed(0)
    base = tt.randn(4, 6)
    sd = collections.OrderedDict()
    for name in DTYPES:
        sd[name] = (tt.randn(3, 5) * 10).to(getattr(tt, name))
    sd["view_t"] = base.t()
    sd["base"] = base
    sd["row"] = base[2]
    sd["cols"] = base[:, 1::2]
    sd["scalar"] = tt.tensor(2.5)
    sd["empty"] = tt.zeros(0, 3)
    sd["expanded"] = tt.ones(3, 1).expand(3, 4)
    sd["grad"] = tt.ones(2, requires_grad=True)
    sd._metadata = collections.OrderedDict({"": {"version": 1}})
    return {"state_dict": sd, "step": 7, "lr": 1e-3, "none": None, "nested": [1, (2.5, "x", [tt.arange(5)])],
            "big": -(2 ** 80), "dtype": tt.float16, "set": {1, 2}, "bytes": b"\x00\xff"}


def test_our_checkpoint_loads_in_torch(tmp_path):
    path = tmp_path / "ours.pt"
    obj = _tt_object()
    tt.save(obj, path)
    theirs = torch.load(path, weights_only=True)
    sd, ours_sd = theirs["state_dict"], obj["state_dict"]
    assert list(sd) == list(ours_sd)
    for key in sd:
        _same_tensor(ours_sd[key], sd[key])
    assert sd._metadata == {"": {"version": 1}}
    assert sd["view_t"].untyped_storage().data_ptr() == sd["base"].untyped_storage().data_ptr()
    assert theirs["dtype"] is torch.float16 and theirs["set"] == {1, 2} and theirs["bytes"] == b"\x00\xff"
    assert theirs["big"] == -(2 ** 80) and theirs["nested"][1][:2] == (2.5, "x")
    # records are stored and 64-byte aligned, as torch writes them
    with zipfile.ZipFile(path) as archive:
        for info in archive.infolist():
            assert info.compress_type == zipfile.ZIP_STORED
            if "/data/" in info.filename:
                with open(path, "rb") as handle:
                    handle.seek(info.header_offset + 26)
                    name_len, extra_len = struct.unpack("<HH", handle.read(4))
                assert (info.header_offset + 30 + name_len + extra_len) % 64 == 0


def test_round_trip_here_and_file_objects():
    obj = _tt_object()
    buffer = io.BytesIO()
    tt.save(obj, buffer)
    back = tt.load(io.BytesIO(buffer.getvalue()))
    for key, value in obj["state_dict"].items():
        got = back["state_dict"][key]
        assert got.dtype is value.dtype and tuple(got.stride()) == tuple(value.stride())
        assert got.tolist() == value.tolist()
    assert back["dtype"] is tt.float16 and back["bytes"] == b"\x00\xff" and back["big"] == -(2 ** 80)
    # torch reads the same bytes from a file object too
    torch.load(io.BytesIO(buffer.getvalue()), weights_only=True)


def test_save_refuses_what_weights_only_cannot_load():
    with pytest.raises(TypeError, match="cannot save a object"):
        tt.save({"x": object()}, io.BytesIO())
    y = tt.ones(2, requires_grad=True) * 2
    with pytest.raises(RuntimeError, match="non-leaf"):
        tt.save(y, io.BytesIO())


# ---- hostile files --------------------------------------------------------------------------------------

def _archive(pickled, records=None, prefix="archive"):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_STORED) as archive:
        archive.writestr(f"{prefix}/data.pkl", pickled)
        for name, data in (records or {}).items():
            archive.writestr(f"{prefix}/{name}", data)
        archive.writestr(f"{prefix}/version", b"3\n")
    return buffer.getvalue()


class _System:
    def __reduce__(self):
        return (os.system, ("echo pwned > /tmp/tt_pwned",))


def test_os_system_reduce_is_refused():
    data = _archive(pickle.dumps({"x": _System()}, protocol=2))
    with pytest.raises(pickle.UnpicklingError, match=r"unsupported global (posix|os)\.system"):
        tt.load(io.BytesIO(data))
    assert not os.path.exists("/tmp/tt_pwned")


@pytest.mark.parametrize("module,name", [("builtins", "eval"), ("torch", "load"), ("subprocess", "Popen"),
                                         ("collections", "Counter"), ("torch._utils", "_rebuild_tensor")])
def test_global_outside_allow_list(module, name):
    pickled = b"\x80\x02c" + module.encode() + b"\n" + name.encode() + b"\n)R."
    with pytest.raises(pickle.UnpicklingError, match=f"unsupported global {module}.{name}"):
        tt.load(io.BytesIO(_archive(pickled)))


@pytest.mark.parametrize("pickled,message", [
    (b"\x80\x02cbuiltins\nset\n)R(cos\nsystem\nt.", "unsupported global os.system"),
    (b"\x80\x02(S'x'\n.", r"opcode 0x53 \(STRING\)"),
    (b"\x80\x02(cos\nsystem\nX\x02\x00\x00\x00lsi.", "unsupported global os.system"),
    (b"\x80\x02X\x02\x00\x00\x00osX\x06\x00\x00\x00system\x93.", "unsupported global os.system"),
    (b"\x80\x02ccollections\nOrderedDict\n)\x81.", r"opcode 0x81 \(NEWOBJ\)"),
    (b"\x80\x02]X\x01\x00\x00\x00a\x85R.", "REDUCE of list"),
    (b"\x80\x02]}b.", "BUILD of a list"),
    (b"\x80\x02X\xff\xff\xff\x7fab", "only 2 bytes are left"),
    (b"\x80\x02K\x01", "ends without STOP"),
    (b"\x80\x02h\x05.", "memo key 5 was never stored"),
    (b"\x80\x02e.", "needs a MARK"),
    (b"\x80\x02K\x01K\x02.", "STOP with 2 values"),
    (b"\x80\x02a.", "stack underflow"),
    (b"\x80\x09N.", "protocol 9"),
])
def test_bad_pickles(pickled, message):
    with pytest.raises(pickle.UnpicklingError, match=message):
        tt.load(io.BytesIO(_archive(pickled)))


def _tensor_pickle(numel, size=(4,), stride=(1,), offset=0, key="0", storage="FloatStorage"):
    dims = b"".join(b"K" + bytes([s]) for s in size)
    strides = b"".join(b"K" + bytes([s]) for s in stride)
    tup = {0: b")", 1: b"\x85", 2: b"\x86", 3: b"\x87"}
    return (b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00storagectorch\n" + storage.encode() +
            b"\nX" + struct.pack("<I", len(key)) + key.encode() + b"X\x03\x00\x00\x00cpuK" + bytes([numel]) +
            b"tQK" + bytes([offset]) + dims + tup[len(size)] + strides + tup[len(stride)] +
            b"\x89ccollections\nOrderedDict\n)RtR.")


def test_tensor_pickle_helper_is_valid():
    data = _archive(_tensor_pickle(4), {"data/0": struct.pack("<4f", 1, 2, 3, 4)})
    assert tt.load(io.BytesIO(data)).tolist() == [1, 2, 3, 4]
    assert torch.load(io.BytesIO(data), weights_only=True).tolist() == [1, 2, 3, 4]


@pytest.mark.parametrize("pickled,records,message", [
    (_tensor_pickle(4), {"data/0": b"\0" * 12}, "declares 4 torch.float32 elements .16 bytes. but its record has 12"),
    (_tensor_pickle(4), {}, "record 'archive/data/0' is missing"),
    (_tensor_pickle(4, size=(5,)), {"data/0": b"\0" * 16}, "does not fit its storage"),
    (_tensor_pickle(4, size=(2,), stride=(4,)), {"data/0": b"\0" * 16}, "does not fit its storage"),
    (_tensor_pickle(4, offset=3, size=(2,)), {"data/0": b"\0" * 16}, "does not fit its storage"),
    (_tensor_pickle(4, key="../x"), {"data/0": b"\0" * 16}, "not a record name"),
    (_tensor_pickle(4, storage="ComplexFloatStorage"), {"data/0": b"\0" * 16}, "unsupported global torch.Complex"),
])
def test_lying_tensor_records(pickled, records, message):
    with pytest.raises((RuntimeError, pickle.UnpicklingError), match=message):
        tt.load(io.BytesIO(_archive(pickled, records)))


def _real_checkpoint():
    buffer = io.BytesIO()
    torch.save({"w": torch.arange(64.0)}, buffer)
    return buffer.getvalue()


def test_truncated_archives_never_crash():
    data = _real_checkpoint()
    for cut in list(range(0, len(data), 37)) + [len(data) - 1, len(data) - 22]:
        with pytest.raises(RuntimeError, match="turbo_torch.load"):
            tt.load(io.BytesIO(data[:cut]))


def test_every_flipped_byte_is_an_error_or_the_same_data():
    data = _real_checkpoint()
    expected = list(range(64))
    for at in range(0, len(data), 7):
        broken = bytearray(data)
        broken[at] ^= 0x5A
        try:
            result = tt.load(io.BytesIO(bytes(broken)))
        except (RuntimeError, pickle.UnpicklingError):
            continue
        assert result["w"].tolist() == expected  # only padding / unchecked fields changed


def _end_record(data):
    return data.rindex(b"PK\x05\x06")


def test_lying_central_directory():
    data = bytearray(_real_checkpoint())
    end = _end_record(data)
    entries, dir_size, dir_offset = struct.unpack("<HIIH", data[end + 10:end + 22])[:3]
    lying = bytearray(data)
    struct.pack_into("<I", lying, end + 16, dir_offset + 1000000)
    with pytest.raises(RuntimeError, match="central directory .* lies outside the file"):
        tt.load(io.BytesIO(bytes(lying)))
    lying = bytearray(data)
    struct.pack_into("<HH", lying, end + 8, entries + 50, entries + 50)
    with pytest.raises(RuntimeError, match="more than a .*-byte directory holds|missing or truncated"):
        tt.load(io.BytesIO(bytes(lying)))
    # a central header whose local offset points somewhere else
    lying = bytearray(data)
    struct.pack_into("<I", lying, dir_offset + 42, 7)
    with pytest.raises(RuntimeError, match="local header"):
        tt.load(io.BytesIO(bytes(lying)))


def test_huge_declared_size():
    data = bytearray(_real_checkpoint())
    dir_offset = struct.unpack("<I", data[_end_record(data) + 16:_end_record(data) + 20])[0]
    for field in (20, 24):
        struct.pack_into("<I", data, dir_offset + field, 0xFFFFFFF0)
    with pytest.raises(RuntimeError, match="declares 4294967280 bytes"):
        tt.load(io.BytesIO(bytes(data)))
    data2 = bytearray(_real_checkpoint())
    for field in (20, 24):
        struct.pack_into("<I", data2, dir_offset + field, 0xFFFFFFFF)  # zip64 marker without the extra field
    with pytest.raises(RuntimeError, match="zip64"):
        tt.load(io.BytesIO(bytes(data2)))


@pytest.mark.parametrize("name", ["../evil", "archive/../../etc/passwd", "/abs/data.pkl", "a\\b"])
def test_path_traversal_names(name):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("archive/data.pkl", b"\x80\x02N.")
        archive.writestr(name, b"x")
    with pytest.raises(RuntimeError, match="path traversal|not a plain relative path"):
        tt.load(io.BytesIO(buffer.getvalue()))


def test_compressed_and_legacy_files():
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("archive/data.pkl", b"\x80\x02N." * 10)
    with pytest.raises(RuntimeError, match="compressed"):
        tt.load(io.BytesIO(buffer.getvalue()))
    with pytest.raises(RuntimeError, match="not a zip checkpoint"):
        tt.load(io.BytesIO(pickle.dumps({"a": 1})))
    legacy = io.BytesIO()
    torch.save({"a": torch.ones(2)}, legacy, _use_new_zipfile_serialization=False)
    with pytest.raises(RuntimeError, match="legacy format"):
        tt.load(io.BytesIO(legacy.getvalue()))


def test_duplicate_entries():
    buffer = io.BytesIO()
    with pytest.warns(UserWarning), zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("archive/data.pkl", b"\x80\x02N.")
        archive.writestr("archive/data.pkl", b"\x80\x02K\x01.")
    with pytest.raises(RuntimeError, match="'archive/data.pkl' appears twice"):
        tt.load(io.BytesIO(buffer.getvalue()))


def test_map_location():
    data = _real_checkpoint()
    assert tt.load(io.BytesIO(data), map_location="cpu")["w"].shape == (64,)
    with pytest.raises(RuntimeError, match="CPU only"):
        tt.load(io.BytesIO(data), map_location="cuda:0")


def test_mutated_pickles_fail_cleanly():
    """Random byte changes in a real data.pkl (CRC recomputed by zipfile): a clean error or a value."""
    buffer = io.BytesIO()
    torch.save({"sd": collections.OrderedDict(w=torch.ones(2, 3), b=torch.zeros(3)), "n": [1, 2.5, "x"]}, buffer)
    with zipfile.ZipFile(io.BytesIO(buffer.getvalue())) as archive:
        prefix = archive.namelist()[0].split("/")[0]
        pickled = archive.read(f"{prefix}/data.pkl")
        records = {name.split("/", 1)[1]: archive.read(name) for name in archive.namelist()
                   if "/data/" in name}
    rng = np.random.default_rng(0)
    outcomes = collections.Counter()
    for _ in range(300):
        broken = bytearray(pickled)
        for at in rng.integers(0, len(broken), size=rng.integers(1, 4)):
            broken[at] = rng.integers(0, 256)
        try:
            tt.load(io.BytesIO(_archive(bytes(broken), records, prefix)))
            outcomes["loaded"] += 1
        except (pickle.UnpicklingError, RuntimeError, TypeError) as error:
            outcomes[type(error).__name__] += 1
    assert outcomes["UnpicklingError"] > 0


def test_module_and_optimizer_state_dicts_both_ways(tmp_path):
    nn = pytest.importorskip("turbo_torch.nn")
    theirs = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 2))
    optimizer = torch.optim.Adam(theirs.parameters())
    theirs(torch.randn(5, 3)).sum().backward()
    optimizer.step()
    torch.save({"model": theirs.state_dict(), "optimizer": optimizer.state_dict()}, tmp_path / "t.pt")
    loaded = tt.load(tmp_path / "t.pt")
    _compare(loaded["optimizer"], optimizer.state_dict())
    ours = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2))
    ours.load_state_dict(loaded["model"])
    theirs.eval()
    ours.eval()
    x = np.random.default_rng(1).standard_normal((2, 3)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(ours(tt.from_numpy(x)).tolist()),
                               theirs(torch.from_numpy(x)).detach().numpy(), rtol=1e-6)
    tt.save(ours.state_dict(), tmp_path / "o.pt")
    again = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 2))
    again.load_state_dict(torch.load(tmp_path / "o.pt", weights_only=True))
    for a, b in zip(again.state_dict().values(), theirs.state_dict().values()):
        assert torch.equal(a, b)
    with pytest.raises(TypeError, match="state_dict"):
        tt.save(ours, io.BytesIO())


def test_safetensors_both_ways(tmp_path):
    st = pytest.importorskip("safetensors.torch")
    a = tt.arange(12.0).reshape(3, 4)
    ours = {"a": a, "t": a.t(), "h": tt.ones(2, dtype=tt.bfloat16), "e": tt.zeros(0, 2), "b": tt.tensor([True]),
            "i": tt.arange(5)}
    tt.save_safetensors(ours, tmp_path / "o.safetensors", metadata={"format": "pt"})
    theirs = st.load_file(tmp_path / "o.safetensors")
    for key in ours:
        assert str(theirs[key].dtype) == str(ours[key].dtype) and theirs[key].tolist() == ours[key].tolist()
    st.save_file({"x": torch.randn(2, 3), "i": torch.arange(4), "f": torch.randn(3).half()}, tmp_path / "t.safetensors")
    back = tt.load_safetensors(tmp_path / "t.safetensors")
    for key, value in st.load_file(tmp_path / "t.safetensors").items():
        _same_tensor(back[key], value)
    back["x"][0, 0] = 5.0  # writable copies
    assert back["x"][0, 0].item() == 5.0
    with pytest.raises(TypeError, match="not a turbo_torch tensor"):
        tt.save_safetensors({"x": [1, 2]}, tmp_path / "bad.safetensors")
