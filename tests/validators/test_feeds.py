from __future__ import annotations

import numpy as np

from rlparity.converters.mlagents import MLAgentsPolicy
from rlparity.validators.feeds import EDGE_ROWS, make_feeds
from tests.conftest import TINYBRANCHES, TINYWALKER


def test_same_seed_same_inputs_and_digest():
    spec = MLAgentsPolicy.load(TINYWALKER).io_spec()
    a, b, c = make_feeds(spec, 32, seed=3), make_feeds(spec, 32, seed=3), make_feeds(spec, 32, seed=4)
    assert a.digest == b.digest != c.digest
    assert all(np.array_equal(a.arrays[k], b.arrays[k]) for k in a.arrays)


def test_edge_cases_come_first_and_hit_the_normalizer_clip():
    family = MLAgentsPolicy.load(TINYWALKER)
    feeds = make_feeds(family.io_spec(), 16)
    obs = feeds.arrays["obs_0"]
    assert feeds.rows[:len(EDGE_ROWS)] == [name for name, _ in EDGE_ROWS]
    assert (obs[0] == 0).all() and (obs[1] == 1).all() and (obs[2] == -1).all() and (obs[3] == 0.5).all()
    # the +-1e3 rows are beyond 5 standard deviations of every feature: clipped at +-5
    stats = family.arch["normalizers"][0]
    z = (obs[5] - stats["mean"]) / np.sqrt(stats["variance"] / stats["steps"])
    assert (z > 5).all()
    assert feeds.rows[len(EDGE_ROWS):] == ["random"] * (16 - len(EDGE_ROWS))


def test_small_batch_keeps_the_first_edge_cases():
    feeds = make_feeds(MLAgentsPolicy.load(TINYWALKER).io_spec(), 2)
    assert feeds.rows == ["zeros", "ones"] and feeds.arrays["obs_1"].shape == (2, 5)


def test_masks_block_actions_but_always_allow_one_per_branch():
    feeds = make_feeds(MLAgentsPolicy.load(TINYBRANCHES).io_spec(), 200, seed=0)
    masks = feeds.arrays["action_masks"]
    assert masks.dtype == np.float32 and set(np.unique(masks)) == {0.0, 1.0}
    start = 0
    for size in (3, 3, 2):
        branch = masks[:, start:start + size]
        assert (branch.sum(1) >= 1).all()
        assert (branch.sum(1) < size).any()  # some actions are blocked
        assert branch[1].tolist() == [0.0] * (size - 1) + [1.0]  # odd edge rows: only the last allowed
        start += size


def test_tile_repeats_rows_in_blocks():
    feeds = make_feeds(MLAgentsPolicy.load(TINYWALKER).io_spec(), 3)
    tiled = feeds.tile(4)["obs_0"]
    assert tiled.shape == (12, 12)
    assert np.array_equal(tiled.reshape(4, 3, 12)[2], feeds.arrays["obs_0"])
