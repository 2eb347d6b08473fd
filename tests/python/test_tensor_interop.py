"""The torchburn Tensor type and zero-copy exchange with torch and numpy (DLPack and the buffer
protocol): pointer identity both ways, lifetimes, read-only handling, strides, dtypes, bad input."""
import gc
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import torchburn
from torchburn import _C

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.int16,
          torch.int32, torch.int64, torch.bool]


@pytest.mark.parametrize("dtype", DTYPES)
def test_torch_roundtrip_zero_copy(dtype):
    x = (torch.randn(6, 10) * 10).to(dtype)
    ours = torchburn.from_dlpack(x)
    assert ours.data_ptr() == x.data_ptr()
    assert ours.shape == (6, 10) and ours.dtype == str(dtype).replace("torch.", "")
    back = torch.from_dlpack(ours)
    assert back.data_ptr() == x.data_ptr()
    assert torch.equal(back, x)


def test_strided_roundtrip_zero_copy():
    x = torch.randn(8, 12)
    views = [x.t(), x[::2, 1::3], x[:, 5], x[3], x.unsqueeze(0).expand(4, 8, 12), x[2:2]]
    for v in views:
        ours = torchburn.from_dlpack(v)
        assert ours.shape == tuple(v.shape)
        assert ours.strides == tuple(v.stride()) or v.numel() <= 1 or 0 in v.shape or any(s == 0 for s in v.stride())
        back = torch.from_dlpack(ours)
        if v.numel():
            assert back.data_ptr() == v.data_ptr()
        assert torch.equal(back, v)


def test_zero_dim_and_empty():
    s = torch.tensor(3.5)
    ours = torchburn.from_dlpack(s)
    assert ours.shape == () and ours.numel() == 1
    assert torch.from_dlpack(ours).item() == 3.5
    e = torch.empty(0, 4)
    assert torchburn.from_dlpack(e).shape == (0, 4)
    assert torch.from_dlpack(torchburn.from_dlpack(e)).shape == (0, 4)


def test_lifetime_producer_deleted_first():
    x = torch.arange(1000, dtype=torch.float32)
    ptr = x.data_ptr()
    ours = torchburn.from_dlpack(x)
    del x
    gc.collect()
    assert ours.data_ptr() == ptr
    assert torch.equal(torch.from_dlpack(ours), torch.arange(1000, dtype=torch.float32))
    # and ours deleted before the torch tensor made from it
    t = torch.from_dlpack(torchburn.ops.add(ours, ours))
    gc.collect()
    assert float(t[10]) == 20.0


def test_numpy_exchange_and_buffer_protocol():
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    ours = torchburn.from_dlpack(a)
    assert ours.data_ptr() == a.ctypes.data
    view = memoryview(ours)
    assert view.shape == (4, 6) and view.format == "f"
    back = np.asarray(ours)
    assert back.ctypes.data == a.ctypes.data
    np.testing.assert_array_equal(back, a)
    np.testing.assert_array_equal(ours.numpy(), a)
    # buffer-protocol-only producers
    import array
    buf = array.array("d", [1.0, 2.0, 3.0])
    t = torchburn.Tensor(buf)
    assert t.dtype == "float64" and t.shape == (3,)


def test_read_only_is_honoured():
    a = np.arange(6, dtype=np.float32)
    a.setflags(write=False)
    ours = torchburn.from_dlpack(a)
    assert ours.is_read_only
    assert memoryview(ours).readonly
    import ctypes
    with pytest.raises((BufferError, TypeError)):
        (ctypes.c_float * 6).from_buffer(ours)  # asks for a writable buffer
    with pytest.raises(BufferError, match="read-only"):
        ours.__dlpack__()  # a legacy capsule cannot carry the read-only flag
    # bytes objects are read-only buffers
    ro = torchburn.Tensor(b"\x00\x01\x02")
    assert ro.is_read_only and ro.dtype == "uint8"
    assert not np.frombuffer(ro, dtype=np.uint8).flags.writeable


def test_versioned_and_legacy_capsules():
    ours = torchburn.from_dlpack(torch.randn(3))
    versioned = ours.__dlpack__(max_version=(1, 0))
    legacy = ours.__dlpack__()
    assert "dltensor_versioned" in repr(versioned)
    assert '"dltensor"' in repr(legacy)
    assert ours.__dlpack_device__() == (1, 0)
    with pytest.raises(BufferError):
        ours.__dlpack__(dl_device=(2, 0))
    copied = torch.from_dlpack(ours.__dlpack__(max_version=(1, 0), copy=True))
    assert copied.data_ptr() != ours.data_ptr()


def test_tensor_methods():
    x = torchburn.from_dlpack(torch.arange(24, dtype=torch.float32).reshape(2, 3, 4))
    assert x.transpose(0, 2).shape == (4, 3, 2)
    assert x.permute(2, 0, 1).strides == (1, 12, 4)
    assert x.reshape(6, 4).shape == (6, 4)
    assert x.transpose(0, 1).reshape(-1).is_contiguous()
    assert x[1, :, ::2].shape == (3, 2)
    assert torch.equal(torch.from_dlpack(x[1, :, ::2]), torch.arange(24.).reshape(2, 3, 4)[1, :, ::2])
    assert x[..., 0].shape == (2, 3)
    assert x[None].shape == (1, 2, 3, 4)
    assert torch.equal(torch.from_dlpack(x.to("float16")), torch.arange(24.).reshape(2, 3, 4).half())
    with pytest.raises(ValueError):
        x.view(5, 5)
    with pytest.raises(IndexError):
        x[5]
    assert "shape=[2, 3, 4]" in repr(x)

    class Sub(torchburn.Tensor):
        pass

    s = Sub(torch.ones(2))
    s.note = "subclasses can hold attributes"
    assert isinstance(s, torchburn.Tensor) and s.note


def test_cuda_and_non_arrays_rejected():
    class FakeCuda:
        def __dlpack_device__(self):
            return (2, 0)

        def __dlpack__(self, **kw):
            raise AssertionError("must not be called")

    with pytest.raises(TypeError, match="CPU"):
        torchburn.from_dlpack(FakeCuda())
    with pytest.raises(TypeError, match="must be a tensor"):
        torchburn.from_dlpack(object())
    with pytest.raises(TypeError):
        torchburn.from_dlpack(torch.randn(2, dtype=torch.complex64))


def test_cpu_info_engine_and_stats():
    info = torchburn.cpu_info()
    assert info["isa"] in info["supported_isas"] and "scalar" in info["supported_isas"]
    assert info["physical_cores"] >= 1 and info["num_threads"] >= 1
    assert isinstance(info["features"]["avx2"], bool)
    assert torchburn.active_engine() == "native_cpu"
    assert torchburn.gpu_available() is False and torchburn.gpu_info()["available"] is False
    stats = torchburn.memory_stats()
    for key in ("bytes_live", "bytes_peak", "reuse_hits", "copies"):
        assert key in stats


def run_python(code, **env):
    environment = dict(os.environ, **env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=environment, timeout=120)


def test_isa_environment_variable():
    for isa in torchburn.cpu_info()["supported_isas"]:
        result = run_python("import torchburn; print(torchburn.cpu_info()['isa'])", TORCHBURN_ISA=isa)
        assert result.returncode == 0 and result.stdout.strip() == isa, result.stderr
    result = run_python("import torchburn", TORCHBURN_ISA="avx9000")
    assert result.returncode != 0 and "TORCHBURN_ISA" in result.stderr and "avx9000" in result.stderr
    if "avx512" not in torchburn.cpu_info()["supported_isas"]:
        result = run_python("import torchburn", TORCHBURN_ISA="avx512")
        assert result.returncode != 0 and "not supported" in result.stderr


def test_thread_count_environment():
    result = run_python("import torchburn; print(torchburn.get_num_threads())", TORCHBURN_NUM_THREADS="3")
    assert result.stdout.strip() == "3", result.stderr
    result = run_python("import torchburn; print(torchburn.get_num_threads())", RAYON_NUM_THREADS="5",
                        TORCHBURN_NUM_THREADS="")
    assert result.stdout.strip() == "5", result.stderr


def test_fork_safety():
    code = (
        "import os, torch, torchburn.ops as ops\n"
        "x = torch.randn(512, 512)\n"
        "ref = ops.matmul(x, x)\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    ok = torch.allclose(ops.matmul(x, x), ref)\n"
        "    os._exit(0 if ok else 3)\n"
        "_, status = os.waitpid(pid, 0)\n"
        "print(os.waitstatus_to_exitcode(status))\n"
    )
    result = run_python(code, TORCHBURN_NUM_THREADS="2")
    assert result.stdout.strip() == "0", result.stderr


def test_misaligned_and_odd_buffers():
    raw = bytearray(4 * 8 + 1)
    misaligned = np.ndarray(shape=(8,), dtype=np.float32, buffer=raw, offset=1)
    with pytest.raises((ValueError, TypeError), match="misaligned"):
        torchburn.from_dlpack(misaligned)
    with pytest.raises(TypeError, match="unsupported dtype"):
        torchburn.Tensor(np.zeros(2, dtype=np.complex64))
    import torchburn.ops as ops
    with pytest.raises((ValueError, TypeError), match="misaligned"):
        ops.exp(misaligned)
