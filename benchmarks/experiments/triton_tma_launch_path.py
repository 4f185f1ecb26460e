"""How the installed Triton passes a host TensorDescriptor to a kernel: the source of its
launch path and where a PyCUtensorMap keeps its 128 bytes.

A planned TMA launch (the Triton matmul, the shared-row softmax) pays for a tensor map encode
on every call inside Triton's launcher. To keep the encoded map per pointer instead, kernelab
must know the installed version's parameter layout (tensor map, then shape and strides) and
where the map's bytes live. This prints both for the device's Triton, the type of its launch
hooks (HookChain or None: launch_plans._hooks_idle), and where in the object's bytes the
tensor's global address appears, beside the offset tensor_maps.map_address() assumes.

  PYTHONPATH=src python3 benchmarks/experiments/triton_tma_launch_path.py
"""

from __future__ import annotations

import ctypes
import inspect
import struct
import sys


def main() -> int:
    import torch
    import triton
    from triton.backends import driver as base_driver
    from triton.backends.nvidia import driver as nvidia_driver

    print("triton", triton.__version__, "torch", torch.__version__)
    for module, names in (
        (nvidia_driver, ["make_tensordesc_arg", "wrap_handle_tensordesc"]),
        (base_driver, ["wrap_handle_tensordesc_impl", "expand_signature", "_expand_descriptor"]),
    ):
        for name in names:
            obj = getattr(module, name, None)
            print(f"\n===== {module.__name__}.{name}")
            try:
                print(inspect.getsource(obj) if obj is not None else "(absent)")
            except (OSError, TypeError) as exc:
                print(f"(no source: {exc})")
    print("\n===== CudaLauncher.__init__")
    print(inspect.getsource(nvidia_driver.CudaLauncher.__init__))
    from triton import knobs

    hooks = (knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook)
    print(f"\nlaunch hooks: {[type(h).__name__ for h in hooks]}")

    if not torch.cuda.is_available():
        print("no GPU: stopping before the tensor map check")
        return 0
    from triton.tools.tensor_descriptor import TensorDescriptor

    a = torch.randn(256, 512, device="cuda", dtype=torch.bfloat16)
    desc = TensorDescriptor.from_tensor(a, [64, 64])
    meta = {"swizzle": 3, "elem_size": 2, "elem_type": 10, "block_size": [64, 64],
            "fp4_padded": False}  # fmt: skip
    params = inspect.signature(nvidia_driver.make_tensordesc_arg).parameters
    extra = [None] * (len(params) - 2)
    expanded = nvidia_driver.make_tensordesc_arg(desc, meta, *extra)
    tensor_map = expanded[0]
    kind = type(tensor_map)
    print(f"\nexpanded: {[type(v).__name__ for v in expanded]} values {expanded[1:]}")
    print(f"tensor map type {kind.__module__}.{kind.__name__} basicsize {kind.__basicsize__}")
    from kernelab.runtime.tensor_maps import map_address

    base = id(tensor_map)
    assumed = map_address(tensor_map)
    print(f"map_address() offset: {None if assumed is None else assumed - base}")
    pointer = a.data_ptr()
    for offset in (16, 32, 64):
        raw = ctypes.string_at(base + offset, 128)
        words = struct.unpack("<16Q", raw)
        found = [i for i, w in enumerate(words) if w == pointer]
        print(f"offset {offset}: global address {hex(pointer)} at words {found}; "
              f"first words {[hex(w) for w in words[:4]]}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
