"""The comparison rules of DESIGN.md, each shown to pass what it should and fail what it should."""
from __future__ import annotations

import numpy as np
import pytest

from rlparity.spec import IOSpec, TensorSpec
from rlparity.validators.compare import (
    bit_match_rate,
    compare_agreement,
    compare_distribution,
    compare_elementwise,
    compare_exact,
    compare_outputs,
    float_metrics,
    ulp_histogram,
)


def test_float_metrics_by_hand():
    b = np.array([1.0, 2.0, -4.0, 0.0], np.float32)
    a = b.copy()
    a[1] = np.nextafter(np.float32(2.0), np.float32(3.0))  # one ULP
    a[2] = -4.004
    m = float_metrics(a, b, rtol=1e-4)
    assert m["bit_match_rate"] == 0.5
    assert m["max_abs"] == pytest.approx(0.004, rel=1e-4)
    assert m["max_rel"] == pytest.approx(0.001, rel=1e-3)
    assert m["needed_atol"] == pytest.approx(0.004 - 1e-4 * 4, rel=1e-3)
    assert m["ulp_histogram"]["0"] == 2 and m["ulp_histogram"]["1"] == 1 and m["ulp_histogram"][">256"] == 1
    assert m["cosine"] == pytest.approx(1.0, abs=1e-6)


def test_ulp_distance_across_zero_and_bit_match_of_nan():
    tiny = np.float32(1e-45)  # the smallest subnormal
    a = np.array([-0.0, -tiny], np.float32)
    b = np.array([0.0, tiny], np.float32)
    # -0 and +0 are the same number (0 ULP) but not the same bits; -tiny..+tiny is 2 ULP
    assert ulp_histogram(a, b) == {"0": 1, "1": 0, "2-4": 1, "5-16": 0, "17-256": 0, ">256": 0}
    assert bit_match_rate(a, b) == 0.0
    nan = np.array([np.nan], np.float32)
    assert bit_match_rate(nan, nan.copy()) == 1.0


def test_elementwise_tolerance_and_padding_scope():
    b = np.zeros((2, 3), np.float32)
    a = b.copy()
    a[1, 2] = 1.0
    assert compare_elementwise("x", a, b, 1e-5, 1e-4).passed is False
    keep = np.array([[True] * 3, [True, True, False]])
    scoped = compare_elementwise("x", a, b, 1e-5, 1e-4, mask=keep)
    assert scoped.passed and scoped.scope == "5 of 6 elements (padding excluded)"
    assert compare_elementwise("x", a[:1], b, 1, 1).passed is False  # shape differs


def test_nan_only_matches_nan():
    b = np.array([np.nan, 1.0], np.float32)
    assert compare_elementwise("x", b.copy(), b, 1e-5, 1e-4).passed
    assert not compare_elementwise("x", np.array([0.0, 1.0], np.float32), b, 1e-5, 1e-4).passed


def test_constants_must_match_exactly():
    b = np.array([3.0], np.float32)
    assert compare_exact("v", b.copy(), b).passed
    assert not compare_exact("v", np.array([3.0], np.float64), b).passed
    assert not compare_exact("v", np.array([3.0000002], np.float32), b).passed


def test_discrete_disagreement_is_a_tie_only_when_scores_are_within_tolerance():
    spec = TensorSpec("act", "int64", ("batch", 2), "deterministic", segments=(3, 2))
    ref = np.array([[0, 1], [2, 0]])
    cand = np.array([[1, 1], [2, 0]])
    tie_scores = np.array([[0.4, 0.4 - 1e-7, 0.2, 0.1, 0.9], [0.1, 0.1, 0.8, 0.6, 0.4]], np.float32)
    tie = compare_agreement(spec, cand, ref, tie_scores, (1e-5, 1e-4))
    assert tie.passed and tie.metrics["ties"] == 1 and tie.metrics["agreement"] == 0.75
    real_scores = tie_scores.copy()
    real_scores[0, :3] = [0.6, 0.3, 0.1]
    real = compare_agreement(spec, cand, ref, real_scores, (1e-5, 1e-4))
    assert not real.passed and real.metrics["ties"] == 0


@pytest.mark.parametrize("action", [3, -3])
def test_an_action_outside_its_branch_is_a_disagreement_not_a_tie(action):
    """-3 would index the branch's first score from the end: equal to the reference's, a false tie."""
    spec = TensorSpec("act", "int64", ("batch", 2), "deterministic", segments=(3, 2))
    ref = np.array([[0, 1]])
    scores = np.array([[0.4, 0.2, 0.4, 0.1, 0.9]], np.float32)
    result = compare_agreement(spec, np.array([[action, 1]]), ref, scores, (1e-5, 1e-4))
    assert not result.passed and result.metrics["disagreements"] == 1 and result.metrics["ties"] == 0


def _gaussian_draws(rng, mean, std, n=512, shape=(8, 4)):
    return np.clip(rng.normal(mean, std, size=(n, *shape)), -3, 3).astype(np.float32) / 3


def test_distribution_passes_same_and_fails_shifted_samples():
    spec = TensorSpec("a", "float32", ("batch", 4), "stochastic")
    rng = np.random.default_rng(0)
    same = compare_distribution(spec, _gaussian_draws(rng, 0.5, 1.0), _gaussian_draws(rng, 0.5, 1.0))
    assert same.passed, same.metrics
    shifted = compare_distribution(spec, _gaussian_draws(rng, 1.5, 1.0), _gaussian_draws(rng, 0.5, 1.0))
    assert not shifted.passed
    wider = compare_distribution(spec, _gaussian_draws(rng, 0.0, 2.0), _gaussian_draws(rng, 0.0, 1.0))
    assert not wider.passed and wider.metrics["z_second_moment"] > wider.metrics["z_limit"]


def test_distribution_of_mostly_clipped_draws_is_not_a_false_alarm():
    """Draws stuck at the clip with one rare unclipped value on one side only."""
    spec = TensorSpec("a", "float32", ("batch", 1), "stochastic")
    a = -np.ones((512, 1, 1), np.float32)
    b = a.copy()
    b[17, 0, 0] = -0.8977
    assert compare_distribution(spec, a, b).passed


def test_categorical_frequencies_and_blocked_actions():
    spec = TensorSpec("d", "int64", ("batch", 1), "stochastic", segments=(3,))
    rng = np.random.default_rng(1)
    probs = np.array([[0.2, 0.0, 0.8]])
    ref = rng.choice(3, p=probs[0], size=(512, 1, 1))
    good = rng.choice(3, p=probs[0], size=(512, 1, 1))
    assert compare_distribution(spec, good, ref, scores={"p": probs}).passed
    skewed = rng.choice(3, p=[0.5, 0.0, 0.5], size=(512, 1, 1))
    assert not compare_distribution(spec, skewed, ref, scores={"p": probs}).passed
    leaks = good.copy()
    leaks[0, 0, 0] = 1  # a blocked action sampled once
    result = compare_distribution(spec, leaks, ref, scores={"p": probs})
    assert not result.passed and result.metrics["blocked_sampled"] == 1


def test_categories_of_an_unsized_output_come_from_both_sides():
    """Without segments the categories are read from the draws: the candidate's extra one too."""
    spec = TensorSpec("d", "int64", ("batch", 1), "stochastic")
    ref = np.zeros((64, 2, 1), np.int64)
    cand = ref.copy()
    cand[:32, 1, 0] = 1  # row 1 samples category 1 half the time; the reference never does
    result = compare_distribution(spec, cand, ref)
    assert not result.passed and result.metrics["max_frequency_diff"] == 0.5


def test_sampled_actions_outside_their_branch_fail():
    """One draw past the branch is no category at all: rare, yet never a valid sample."""
    spec = TensorSpec("d", "int64", ("batch", 1), "stochastic", segments=(3,))
    rng = np.random.default_rng(2)
    ref = rng.choice(3, size=(512, 2, 1))
    cand = rng.choice(3, size=(512, 2, 1))
    assert compare_distribution(spec, cand, ref).passed
    cand[5, 0, 0] = 3
    result = compare_distribution(spec, cand, ref)
    assert not result.passed and result.metrics["out_of_range"] == 1
    assert result.note == "1 sampled action(s) lie outside their branch"


def test_compare_outputs_dispatches_by_role_and_lists_absent_outputs():
    spec = IOSpec(inputs=(), outputs=(
        TensorSpec("c", "float32", (1,), "constant"),
        TensorSpec("y", "float32", ("batch", 2), "deterministic"),
        TensorSpec("gone", "float32", ("batch", 2), "deterministic"),
    ))
    ref = {"c": np.array([3.0], np.float32), "y": np.ones((2, 2), np.float32), "gone": np.ones((2, 2), np.float32)}
    cand = {"c": np.array([3.0], np.float32), "y": np.ones((2, 2), np.float32) + 1e-6}
    result = compare_outputs(spec, ref, cand)
    rules = {o.output: (o.rule, o.passed) for o in result.outputs}
    assert rules == {"c": ("exact", True), "y": ("elementwise", True), "gone": ("absent", None)}
    assert result.passed
