"""The CPU ops whose arguments the analysis reads beyond ``Input Dims``: one list, used by
the reader (which keeps ``Input type`` and ``Concrete Inputs`` only for these ops, so a
trace pays for the texts that are read) and by ``analysis.efficiency`` (the ops with a
FLOPs or bytes formula).

- :func:`has_formula`: ops with a FLOPs and/or bytes formula (GEMMs, convolutions,
  attention, element-wise, reduction, norm, copy, ``_foreach_*``): their ``Input type``
  (dtypes) is kept.
- :func:`needs_scalars`: ops whose FLOPs depend on scalar arguments (convolution stride,
  padding, dilation, groups; attention ``is_causal``): their ``Concrete Inputs`` are kept.
"""

from __future__ import annotations

GEMM_OPS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_scaled_mm"}
CONV_OPS = {
    "aten::convolution",
    "aten::_convolution",
    "aten::cudnn_convolution",
    "aten::convolution_overrideable",
    "aten::miopen_convolution",
    "aten::mkldnn_convolution",
}
REDUCTION_OPS = {
    "aten::sum",
    "aten::mean",
    "aten::amax",
    "aten::amin",
    "aten::max",
    "aten::min",
    "aten::norm",
    "aten::linalg_vector_norm",
    "aten::var_mean",
    "aten::std_mean",
    "aten::argmax",
    "aten::prod",
}
WRITE_ONLY_OPS = {"aten::fill_", "aten::zero_", "aten::normal_", "aten::uniform_"}
ELEMENTWISE_OPS = {
    "aten::add", "aten::add_", "aten::sub", "aten::sub_", "aten::mul", "aten::mul_",
    "aten::div", "aten::div_", "aten::relu", "aten::relu_", "aten::gelu",
    "aten::gelu_backward", "aten::silu", "aten::silu_", "aten::silu_backward",
    "aten::sigmoid", "aten::sigmoid_backward", "aten::tanh", "aten::tanh_backward",
    "aten::clamp_min", "aten::clamp_min_", "aten::clamp", "aten::threshold_backward",
    "aten::pow", "aten::neg", "aten::exp", "aten::log", "aten::sqrt", "aten::rsqrt",
    "aten::where", "aten::masked_fill", "aten::masked_fill_", "aten::native_dropout",
    "aten::native_dropout_backward", "aten::addcmul_", "aten::addcdiv_", "aten::lerp_",
    "aten::copy_", "aten::square", "aten::reciprocal", "aten::abs", "aten::sign",
    "aten::_softmax", "aten::_log_softmax", "aten::_softmax_backward_data",
    "aten::_log_softmax_backward_data", "aten::native_layer_norm",
    "aten::native_layer_norm_backward", "aten::native_batch_norm",
    "aten::native_batch_norm_backward", "aten::cudnn_batch_norm",
    "aten::cudnn_batch_norm_backward", "aten::_fused_rms_norm",
    "aten::_fused_rms_norm_backward", "aten::embedding_dense_backward",
    "aten::index_select", "aten::gather", "aten::cat", "aten::stack",
}  # fmt: skip
CONV_BACKWARD = "aten::convolution_backward"
ATTENTION_OPS = frozenset(
    {
        "aten::_scaled_dot_product_flash_attention",
        "aten::_scaled_dot_product_efficient_attention",
        "aten::_scaled_dot_product_cudnn_attention",
        "aten::_flash_attention_forward",
        "aten::_efficient_attention_forward",
        "aten::_scaled_dot_product_flash_attention_backward",
        "aten::_scaled_dot_product_efficient_attention_backward",
        "aten::_scaled_dot_product_cudnn_attention_backward",
        "aten::_flash_attention_backward",
        "aten::_efficient_attention_backward",
    }
)
FOREACH_PREFIX = "aten::_foreach_"
_FORMULA = frozenset(
    {*GEMM_OPS, "aten::linear", *CONV_OPS, CONV_BACKWARD, *ATTENTION_OPS}
    | ELEMENTWISE_OPS
    | REDUCTION_OPS
    | WRITE_ONLY_OPS
)
_SCALARS = frozenset({*CONV_OPS, CONV_BACKWARD, *ATTENTION_OPS})


#: Inductor's generated element-wise (``poi``), reduction (``red``) and persistent
#: reduction (``per``) Triton kernels, named ``triton_<kind>_fused_<ops>_<n>``: a bytes
#: formula (their tensor arguments); not its templates (``triton_tem_``: GEMMs).
FUSED_PREFIXES = ("triton_poi_", "triton_red_", "triton_per_")


def has_formula(name: str) -> bool:
    """``name`` has a FLOPs or bytes formula (its ``Input type`` is read)."""
    return name in _FORMULA or name.startswith(FOREACH_PREFIX) or name.startswith(FUSED_PREFIXES)


def needs_scalars(name: str) -> bool:
    """``name``'s FLOPs depend on its scalar arguments (``Concrete Inputs`` is read)."""
    return name in _SCALARS
