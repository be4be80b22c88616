"""bench/gpu.py's own arithmetic (no GPU needed): how a profile's kernels are sorted into kinds."""

import importlib.util
import os
from pathlib import Path

import pytest

spec = importlib.util.spec_from_file_location("bench_gpu", Path(__file__).resolve().parents[1] / "bench" / "gpu.py")
gpu = importlib.util.module_from_spec(spec)
_environ = dict(os.environ)
try:
    spec.loader.exec_module(gpu)
finally:  # its offline switches (TRANSFORMERS_OFFLINE=1, ...) are for its own runs, not the later tests'
    os.environ.clear()
    os.environ.update(_environ)


@pytest.mark.parametrize("kernel,kind", [
    # the H100 profile's names (bench/results/gpu_h100_profile.txt): cuDNN's SDPA kernels carry "sm90_" too
    ("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_3_64x64x64_4x1x1_kernel0_0", "attention"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_kernel0_0", "attention"),
    ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_bias_TNT", "GEMM"),
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<FusedAdamMathFunctor>", "optimizer"),
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>", "layernorm"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>", "elementwise"),
    # the compiled profile modes: inductor's Triton kernels, named after the ops they fuse
    ("triton_per_fused__to_copy_add_native_dropout_native_layer_norm_3", "fused (inductor)"),
    ("triton_poi_fused_gelu_gelu_backward_5", "fused (inductor)"),
    ("triton_red_fused_sum_7", "fused (inductor)"),
    ("triton_tem_fused_mm_0", "GEMM"),
])
def test_profile_kernels_are_sorted_into_their_kind(kernel, kind):
    assert gpu._kind(kernel) == kind
