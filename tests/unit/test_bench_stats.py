"""The benchmark's pure statistics, checked against numpy and against SGLang's bench_serving definitions."""
import math

import numpy as np
import pytest

from vramkit.core.bench_stats import (
    aggregate_decode_tok_s,
    change_pct,
    decode_tok_s,
    ecdf,
    itls_s,
    max_overlap,
    percentile,
    prefix_hit_ratio,
    roofline_ratio,
    summarize,
    tpot_s,
)


@pytest.mark.parametrize("values", [
    [0.25],
    [3.0, 1.0],
    [0.5, 0.1, 0.9, 0.3, 0.7],
    [float(x) for x in np.random.default_rng(7).lognormal(size=101)],
    [1.0, 1.0, 1.0, 2.0],
])
@pytest.mark.parametrize("q", [0, 1, 25, 50, 90, 95, 99, 100])
def test_percentile_matches_numpy_default_method(values, q):
    assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)), rel=1e-12)


def test_percentile_of_nothing_is_nan_and_bad_q_is_refused():
    assert math.isnan(percentile([], 50))
    with pytest.raises(ValueError):
        percentile([1.0], 101)


def test_summarize_gives_numpy_percentiles_and_none_when_empty():
    xs = [0.31, 0.12, 0.55, 0.2, 0.9, 0.47]
    s = summarize(xs)
    assert s["n"] == 6 and s["min"] == 0.12 and s["max"] == 0.9
    assert s["mean"] == pytest.approx(np.mean(xs))
    assert s["p95"] == pytest.approx(np.percentile(xs, 95))
    assert summarize([])["p50"] is None


def test_tpot_is_sglang_bench_serving_definition():
    # bench_serving: (latency - ttft) / (output_len - 1)
    assert tpot_s(latency_s=2.0, ttft_s=0.5, output_tokens=101) == pytest.approx(0.015)
    assert decode_tok_s(2.0, 0.5, 101) == pytest.approx(1 / 0.015)


def test_tpot_undefined_for_one_token_or_no_first_token():
    assert tpot_s(1.0, 0.2, 1) is None
    assert tpot_s(1.0, None, 50) is None
    assert decode_tok_s(1.0, None, 50) is None


def test_itl_spreads_a_multi_token_chunk_evenly_like_bench_serving():
    # chunks at 0.1 (1 token), 0.13 (2 tokens), 0.16 (3 tokens), 0.2 (repeat count: no new token)
    itl = itls_s([0.1, 0.13, 0.16, 0.2], [1, 2, 5, 5])
    assert itl == pytest.approx([0.03, 0.01, 0.01, 0.01])


def test_itl_needs_matching_lengths():
    with pytest.raises(ValueError):
        itls_s([0.1, 0.2], [1])


def test_aggregate_decode_counts_tokens_after_first_over_the_common_span():
    # two requests decoding side by side: 99 tokens each after the first, over 1.0 s
    both = [(0.2, 1.2, 100), (0.25, 1.1, 100)]
    assert aggregate_decode_tok_s(both) == pytest.approx(198 / 1.0)
    # served one after the other: the span doubles, the aggregate does not
    serial = [(0.2, 1.2, 100), (1.3, 2.2, 100)]
    assert aggregate_decode_tok_s(serial) == pytest.approx(198 / 2.0)
    assert aggregate_decode_tok_s([]) is None
    assert aggregate_decode_tok_s([(0.1, 0.1, 1)]) is None


def test_max_overlap_counts_requests_decoding_at_once():
    assert max_overlap([(0, 10), (1, 9), (2, 8)]) == 3
    # the third started only once the first finished: a server that holds two at a time
    assert max_overlap([(0, 5), (0.5, 6), (5, 9)]) == 2
    assert max_overlap([]) == 0


def test_prefix_hit_ratio_roofline_change_and_ecdf():
    assert prefix_hit_ratio([900, 0], [1000, 1000]) == pytest.approx(0.45)
    assert prefix_hit_ratio([], []) is None
    assert roofline_ratio(80.0, 100.0) == pytest.approx(0.8)
    assert roofline_ratio(80.0, None) is None and roofline_ratio(None, 100.0) is None
    assert change_pct(2.0, 0.5) == pytest.approx(-75.0)
    assert change_pct(0, 1.0) is None
    assert ecdf([0.3, 0.1, 0.2]) == ([0.1, 0.2, 0.3], [pytest.approx(1 / 3), pytest.approx(2 / 3), 1.0])
