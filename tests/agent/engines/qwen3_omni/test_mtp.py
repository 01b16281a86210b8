"""The fixed-shape MTP step: equal to the predictor run through `generate`, and one graph with no breaks."""

from __future__ import annotations

import torch

from agent.engines.qwen3_omni.mtp import ResidualPredictor


def reference_residuals(talker, hidden: torch.Tensor, code0: torch.Tensor) -> torch.Tensor:
    """What `Talker.generate` does for one frame: the code predictor's own `generate`, greedy."""
    first = talker.get_input_embeddings()(code0[:, None])
    out = talker.code_predictor.generate(
        inputs_embeds=torch.cat([hidden, first], dim=1),
        max_new_tokens=talker.config.num_code_groups - 1,
        do_sample=False,
    )
    return torch.cat([code0[:, None], out], dim=1)


def test_codes_equal_the_predictors_generate(tiny):
    talker = tiny.model.talker
    mtp = ResidualPredictor(talker)
    gen = torch.Generator().manual_seed(3)
    for batch in (1, 3, 1):  # a batch size seen before reuses its slots, stale values masked
        hidden = torch.randn(batch, 1, talker.config.text_config.hidden_size, generator=gen)
        code0 = torch.randint(0, 64, (batch,), generator=gen)
        codes, total = mtp(hidden, code0)
        assert codes.shape == (batch, talker.config.num_code_groups)
        ref = reference_residuals(talker, hidden, code0)
        assert torch.equal(codes, ref)
        embeds = [talker.get_input_embeddings()(codes[:, 0])]
        embeds += [talker.code_predictor.model.codec_embedding[i](codes[:, i + 1]) for i in range(codes.shape[1] - 1)]
        assert torch.allclose(total, torch.stack(embeds).sum(0), atol=1e-6)


def test_the_step_compiles_to_one_graph(tiny):
    """No data-dependent Python control flow: dynamo traces the whole frame without a graph break."""
    talker = tiny.model.talker
    mtp = ResidualPredictor(talker)
    hidden = torch.randn(2, 1, talker.config.text_config.hidden_size, generator=torch.Generator().manual_seed(5))
    code0 = torch.tensor([5, 9])
    eager = mtp(hidden, code0)
    torch._dynamo.reset()
    compiled = torch.compile(mtp.__call__, fullgraph=True, backend="eager")(hidden, code0)
    assert torch.equal(compiled[0], eager[0]) and torch.allclose(compiled[1], eager[1])
