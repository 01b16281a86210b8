"""The recogniser's leaning toward an assistant's words: which tokens it favours after a prefix."""

import numpy as np
import pytest

from agent.engines.cascade.phrase_bias import PhraseBias

# "seat heating" as (seat, heat, ing), "sunroof" as (sun, roof): made-up token numbers
SEAT, HEAT, ING, SUN, ROOF, THE = 10, 11, 12, 20, 21, 30


def test_a_phrase_begun_is_favoured_to_go_on_and_every_phrase_may_start():
    bias = PhraseBias([(SEAT, HEAT, ING), (SUN, ROOF), ()], bonus=2.0)
    assert bias.phrases == 2  # the empty one is no phrase
    assert bias.going_on([THE]) == set()
    assert bias.going_on([THE, SEAT]) == {HEAT}
    assert bias.going_on([SEAT, HEAT]) == {ING}
    assert bias.going_on([SEAT, HEAT, ING]) == set()  # finished: only a new phrase may start
    assert bias.going_on([SUN, THE]) == set()  # a phrase left is not resumed
    row = bias.applied(np.zeros(40, np.float32), [THE, SEAT])
    assert row[HEAT] == row[SEAT] == row[SUN] == 2.0  # going on, or starting a phrase
    assert row[ING] == row[ROOF] == row[THE] == 0.0  # neither
    assert PhraseBias([(SEAT, HEAT), (HEAT,)], 1.5).applied(np.zeros(40, np.float32), [SEAT])[HEAT] == 1.5  # once


def test_a_bias_only_adds_likelihood():
    with pytest.raises(ValueError, match="at least 0"):
        PhraseBias([(SEAT,)], -1.0)
