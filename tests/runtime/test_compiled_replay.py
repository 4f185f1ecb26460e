"""The compiled replay (runtime/compiled_replay.c) on the CPU: it builds with the
machine's C compiler, its plan keys equal launch_plans' own item for item, and it refuses bad
arguments with Python errors. Its launches are tested in test_direct_launch.py (every direct
launch test runs through it too) and on the GPU in test_launch_plans_gpu.py."""

from __future__ import annotations

import ctypes
from types import SimpleNamespace

import pytest
import torch

from kernelab.runtime import compiled_replay, launch_plans
from kernelab.runtime.launch_plans import LaunchPlans


@pytest.fixture
def built():
    if compiled_replay._compiler() is None:
        pytest.skip("no C compiler here")
    module = compiled_replay.module()
    assert module is not None, compiled_replay.last_failure
    return module


def python_key(device_index, stream, tensors, count, scalars) -> tuple:
    device = SimpleNamespace(index=device_index)
    key = launch_plans._described(device, tensors, count)
    key[1] = stream  # _described asks torch for the stream of CUDA tensors only
    key.append(scalars)
    return tuple(key)


def gpu_face(device: int, address: int, shape=(64,), stride=(1,), dtype=torch.float32):
    """A tensor's face as the key reads it, on a GPU (device >= 0) or the CPU (-1)."""
    return SimpleNamespace(
        is_cuda=device >= 0, get_device=lambda: device, data_ptr=lambda: address,
        shape=torch.Size(shape), stride=lambda: stride, dtype=dtype,
    )  # fmt: skip


def cases():
    base = torch.empty(64)
    yield (base, torch.empty(64)), 2
    yield (base[:16], base[1:17]), 2  # 16-byte alignment differs
    yield (base, base, torch.empty(64)), 3  # aliasing
    yield (base.view(8, 8), base.view(8, 8).t()), 2  # strides differ
    yield (base, base[4:], base, torch.empty(3, dtype=torch.bfloat16)), 4
    yield (base, torch.empty(64)), 1  # a fresh output left out
    yield (base,), 0
    yield (gpu_face(0, 0x1000), gpu_face(1, 0x2008), gpu_face(-1, 0x1000)), 3


@pytest.mark.parametrize("case", list(cases()))
def test_plan_key_equals_the_python_key_item_for_item(built, case, monkeypatch):
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda index: 5, raising=False)
    tensors, count = case
    for scalars in [(), (1e-6, True, None), ("path", 3)]:
        got = built.plan_key(0, 77, tensors, count, scalars)
        assert got == python_key(0, 77, tensors, count, scalars)
        assert hash(got) == hash(python_key(0, 77, tensors, count, scalars))


def test_a_changed_tensor_changes_the_key(built):
    x = torch.empty(64)
    key = built.plan_key(0, 7, (x,), 1, ())
    assert built.plan_key(0, 7, (torch.empty(65),), 1, ()) != key
    assert built.plan_key(0, 7, (torch.empty(64, dtype=torch.float64),), 1, ()) != key
    assert built.plan_key(0, 8, (x,), 1, ()) != key  # another stream
    assert built.plan_key(0, 7, (x,), 1, (1,)) != key


def test_plan_key_refuses_bad_arguments_and_passes_errors_on(built):
    x = torch.empty(4)
    with pytest.raises(ValueError):
        built.plan_key(0, 0, (x,), 2, ())  # more than the tuple holds
    with pytest.raises(ValueError):
        built.plan_key(0, 0, [x], 1, ())  # a list
    with pytest.raises(ValueError):
        built.plan_key(0, 0, (x,) * 17, 17, ())  # past MOST_TENSORS
    with pytest.raises(TypeError):
        built.plan_key(0, 0, (x,), 1)

    def broken():
        raise RuntimeError("no address")

    with pytest.raises(RuntimeError, match="no address"):
        built.plan_key(0, 0, (SimpleNamespace(data_ptr=broken),), 1, ())


def test_launch_plans_key_takes_the_compiled_key_when_on(built, monkeypatch):
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda index: 7, raising=False)
    monkeypatch.setattr(torch._C, "_cuda_isCurrentStreamCapturing", lambda: False, raising=False)
    plans = LaunchPlans("test.compiled_key")
    gpu0 = torch.device("cuda", 0)
    x, y, out = gpu_face(0, 0x1000), gpu_face(0, 0x2000), gpu_face(0, 0x3000)
    monkeypatch.setattr(launch_plans, "_compiled_key", None)
    in_python = plans.key(gpu0, (x, y, out), 1.5, fresh=1)
    monkeypatch.setattr(launch_plans, "_compiled_key", built.plan_key)
    assert plans.key(gpu0, (x, y, out), 1.5, fresh=1) == in_python
    assert plans.key(gpu0, (x, y, gpu_face(0, 0x3008)), 1.5, fresh=1) is None  # misaligned


def test_the_compiled_key_is_looked_up_on_the_first_cuda_key_not_at_import(built, monkeypatch):
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda index: 7, raising=False)
    monkeypatch.setattr(torch._C, "_cuda_isCurrentStreamCapturing", lambda: False, raising=False)
    plans = LaunchPlans("test.compiled_key_lookup")
    gpu0 = torch.device("cuda", 0)
    x, out = gpu_face(0, 0x1000), gpu_face(0, 0x2000)
    monkeypatch.setattr(launch_plans, "_compiled_key", launch_plans._NOT_LOOKED_UP)
    monkeypatch.setattr(compiled_replay, "ENABLED", False)
    off = plans.key(gpu0, (x, out), fresh=1)
    assert launch_plans._compiled_key is None  # off: the Python key from now on
    monkeypatch.setattr(launch_plans, "_compiled_key", launch_plans._NOT_LOOKED_UP)
    monkeypatch.setattr(compiled_replay, "ENABLED", True)
    assert plans.key(gpu0, (x, out), fresh=1) == off
    assert launch_plans._compiled_key is built.plan_key


def _launch_address() -> tuple[int, object]:
    """A stand-in cuLaunchKernel that launches nothing and succeeds: its address, and the
    ctypes object to hold while it is in use."""
    from test_direct_launch import C_LAUNCH

    launch = C_LAUNCH(lambda *args: 0)
    return ctypes.cast(launch, ctypes.c_void_p).value, launch


def test_prepare_refuses_what_it_cannot_launch(built):
    address, _held = _launch_address()
    params = (ctypes.c_void_p * 2)()
    array = ctypes.addressof(params)
    slot = ctypes.addressof(ctypes.c_uint64())
    good = (address, 0x1234, 1, 1, 1, 128, 0, array, 2, ((slot, 0),), ((1, 0, object()),))
    assert built.prepare(*good) is not None
    with pytest.raises(ValueError):
        built.prepare(0, *good[1:])  # no launch function
    with pytest.raises(ValueError):
        built.prepare(*good[:7], 0, *good[8:])  # no parameter array
    with pytest.raises(ValueError):
        built.prepare(*good[:9], ((slot,),), ())  # a slot without its tensor
    with pytest.raises(ValueError):
        built.prepare(*good[:9], ((slot, -1),), ())
    with pytest.raises(ValueError):
        built.prepare(*good[:10], ((2, 0, object()),))  # an entry past the array's two
    with pytest.raises(OverflowError):
        built.prepare(address, 0x1234, 1 << 32, *good[3:])
    with pytest.raises(TypeError):
        built.prepare(*good[:10])


def test_launch_needs_every_tensor_its_slots_name(built):
    address, _held = _launch_address()
    storage = ctypes.c_uint64()
    params = (ctypes.c_void_p * 1)(ctypes.addressof(storage))
    prepared = built.prepare(
        address, 0x1234, 1, 1, 1, 32, 0, ctypes.addressof(params), 1,
        ((ctypes.addressof(storage), 1),), (),
    )  # fmt: skip
    with pytest.raises(ValueError, match="fewer tensors"):
        built.launch(prepared, (torch.empty(1),), 0)
    second = torch.empty(1)
    assert built.launch(prepared, (torch.empty(1), second), 0) == 0
    assert storage.value == second.data_ptr()  # the slot holds the tensor it names
    with pytest.raises(TypeError):
        built.launch(prepared, [torch.empty(1)] * 2, 0)


def test_a_failed_build_says_why(tmp_path, monkeypatch):
    monkeypatch.setattr(compiled_replay, "_compiler", lambda: None)
    with pytest.raises(RuntimeError, match="no C compiler"):
        compiled_replay.build(tmp_path / "x.so")
    monkeypatch.setattr(compiled_replay, "_compiler", lambda: "false")  # exits 1, says nothing
    with pytest.raises(RuntimeError, match="false failed"):
        compiled_replay.build(tmp_path / "x.so")
    assert list(tmp_path.iterdir()) == []  # no half-built file left behind


def test_the_build_is_named_for_its_source_python_and_machine(monkeypatch):
    path = compiled_replay.built_path()
    assert path.name.startswith(compiled_replay.MODULE_NAME)
    assert path.parent.name == "replay"
    # a cache carried to another machine holds nothing that machine would load
    monkeypatch.setattr(compiled_replay.platform, "node", lambda: "another-host")
    assert compiled_replay.built_path() != path


def test_it_is_on_unless_turned_off():
    assert compiled_replay.enabled_from({}) is True
    assert compiled_replay.enabled_from({"KERNELAB_COMPILED_REPLAY": "0"}) is False
    assert compiled_replay.enabled_from({"KERNELAB_COMPILED_REPLAY": "1"}) is True
