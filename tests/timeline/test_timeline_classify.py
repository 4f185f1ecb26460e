"""Kernel and CPU op names -> classes, and the names Nsight Compute matches."""

from __future__ import annotations

import pytest

from kernelab.timeline.classify import CLASSES, classify, function_name, short_label

# Real names from cuBLAS, CUTLASS, FlashAttention, torch, Inductor and the CUDA runtime.
NAMES = [
    (
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_"
        "execute_segment_k_off_kernel__5x_cublas",
        "gemm",
    ),
    ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_TNT", "gemm"),
    ("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn", "gemm"),
    (
        "cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x1_tn_align8>",
        "gemm",
    ),
    ("void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4>(...)", "gemm"),
    ("void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16>(...)", "gemm"),
    ("triton_tem_fused_addmm_0", "gemm"),
    ("matmul_kernel", "gemm"),
    (
        "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4>>(...)",
        "attention",
    ),
    (
        "fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<...>)",
        "attention",
    ),
    ("cudnn_generated_fort_native_sdpa_sm90_knob_7_64x128x128_4x1x1_kernel0_0", "attention"),
    (
        "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, "
        "float>(int, float, c10::BFloat16 const*)",
        "normalization",
    ),
    ("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0", "normalization"),
    ("triton_per_fused_native_layer_norm_0", "normalization"),
    (
        "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
        "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)",
        "elementwise",
    ),
    ("triton_poi_fused_mul_silu_1", "elementwise"),
    (
        "void at::native::unrolled_elementwise_kernel<at::native::silu_kernel(...)::{lambda}>",
        "elementwise",
    ),
    (
        "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, "
        "at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>>>>(...)",
        "reduction",
    ),
    ("void (anonymous namespace)::cunn_SoftMaxForward<4, float, float, float>(...)", "reduction"),
    ("void softmax_warp_forward<c10::BFloat16, c10::BFloat16, float, 10, false>(...)", "reduction"),
    ("triton_red_fused__softmax_0", "reduction"),
    ("Memcpy HtoD (Pageable -> Device)", "copy"),
    ("Memset (Device)", "copy"),
    (
        "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<"
        "at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda}>>(...)",
        "copy",
    ),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>", "copy"),
    ("void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, unsigned int, 2>", "copy"),
    ("aten::addmm", "gemm"),
    ("aten::mm", "gemm"),
    ("aten::_scaled_dot_product_flash_attention_for_cpu", "attention"),
    ("aten::_fused_rms_norm", "normalization"),
    ("aten::native_layer_norm", "normalization"),
    ("aten::_softmax", "reduction"),
    ("aten::sum", "reduction"),
    ("aten::mul", "elementwise"),
    ("aten::add_", "elementwise"),
    ("aten::copy_", "copy"),
    ("aten::view", "other"),
    ("aten::transpose", "other"),
    ("aten::empty_strided", "other"),
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "other"),
]


@pytest.mark.parametrize("name, expected", NAMES)
def test_classify_known_names(name, expected):
    assert classify(name) == expected


def test_every_class_is_reachable_and_nothing_else_is_returned():
    assert {classify(name) for name, _ in NAMES} == set(CLASSES)


@pytest.mark.parametrize(
    "name, function",
    [
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
            "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)",
            "vectorized_elementwise_kernel",
        ),
        (
            "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>"
            "(int, float, float const*)",
            "vectorized_layer_norm_kernel",
        ),
        ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_TNT", "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_TNT"),
        ("cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm>", "Kernel2"),
        (
            "void (anonymous namespace)::cunn_SoftMaxForward<4, float>(float*, float const*, int)",
            "cunn_SoftMaxForward",
        ),
        ("triton_poi_fused_mul_silu_1", "triton_poi_fused_mul_silu_1"),
    ],
)
def test_function_name_is_what_ncu_matches(name, function):
    assert function_name(name) == function


def test_short_label_drops_parameters_and_truncates():
    label = short_label("void foo::bar<int, 4>(int, float*)")
    assert label == "foo::bar<int, 4>"
    long = short_label("x" * 200, width=40)
    assert len(long) == 40 and long.endswith("...")
