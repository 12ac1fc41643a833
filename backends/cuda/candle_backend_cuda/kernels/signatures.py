"""Every kernel's C parameter list, in launch.py's codes, by module (the file
csrc/<module>.cu) and family (the kernel's name less its dtype or width
suffix: ``unary`` for unary_f32, ``copy`` for copy_16). The one place a
signature is written on the host side; tests/test_build.py checks each
against the parameters nvcc recorded in the fatbins, and the CPU emulation
checks the size of every launch's parameters against the kernel's C++
signature."""

from __future__ import annotations

from candle_api.dtype import ALL_DTYPES

SIGNATURES = {
    "elementwise": {"unary": "ppqi1", "param": "ppqiddqqi1", "binary": "pppqip2", "compare": "pppqi2",
                    "where": "ppppq3", "cast": "ppqi1"},
    "memory": {"copy": "ppq2", "fill": "pqq1"},
    "random": {"random": "pqiddqq"},
    "reduce": {"reduce": "ppqqii11", "cumsum": "ppqqqq2"},
    "matmul": {"matmul": "pppqqqqqqqq2"},
    "index": {"ids_check": "ppiqqp1", "select": "pppqqi1", "scatter": "pppqqqqqi3"},
    "image": {"conv2d": "pppq[26]", "conv_transpose2d": "pppq[26]", "pool2d": "ppiq[19]", "upsample2d": "ppiq[10]"},
    "fused": {"softmax": "ppqqqi1", "softmax_warp": "ppqqqi1", "softmax_block": "ppqqqi1", "norm": "ppppqqqdi1",
              "norm_warp": "ppppqqqdi1", "norm_block": "ppppqqqdi1", "rope": "ppppqqqqqqqqii"},
    "attention": {"attention": "pppppqqqqqiidq[8]4", "flash_attention_e32": "pppppqqqiidq[8]4",
                  "flash_attention_e64": "pppppqqqiidq[8]4", "flash_attention_e128": "pppppqqqiidq[8]4",
                  "attention_tiled32": "pppppqqqqqiidq[8]4", "attention_tiled64": "pppppqqqqqiidq[8]4"},
    "quantized": {"dequantize": "ppqiii", "qmatmul": "pppqqqiii", "qembedding": "pppqqiii"},
}

_SUFFIXES = {str(d) for d in ALL_DTYPES} | {"8", "16", "32", "64"}


def family(name: str) -> str:
    """unary_f32 -> unary; copy_16 -> copy; ids_check -> ids_check."""
    head, _, tail = name.rpartition("_")
    return head if head and tail in _SUFFIXES else name


def signature(module: str, name: str) -> str:
    return SIGNATURES[module][family(name)]
