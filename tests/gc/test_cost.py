"""The saving estimate (``lakefs_gc.gc.cost``): bytes by class are the marked sizes, the saving is
bytes x price exactly, unknown classes are reported and never priced."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakefs_gc.errors import ConfigError
from lakefs_gc.gc import cost

KEYS = ["s3/STANDARD", "s3/GLACIER", "s3/DEEP_ARCHIVE", "azure/hot", "azure/unknown", "local/unknown"]
PRICES = st.decimals(min_value=0, max_value=1, places=6, allow_nan=False, allow_infinity=False)


@settings(max_examples=200, deadline=None)
@given(
    objects=st.lists(st.tuples(st.sampled_from(KEYS), st.integers(0, 10**15)), max_size=30),
    prices=st.dictionaries(st.sampled_from(KEYS), PRICES),
)
def test_bytes_are_the_marked_sizes_and_the_saving_is_bytes_times_price(
    objects: list[tuple[str, int]], prices: dict[str, Decimal]
) -> None:
    table = cost.PriceTable(prices=prices)
    estimate = cost.estimate(cost.tally(objects), table)
    assert estimate.bytes == sum(size for _, size in objects)
    for c in estimate.classes:
        assert c.objects == sum(1 for k, _ in objects if k == c.key)
        assert c.bytes == sum(s for k, s in objects if k == c.key)
        assert c.price == prices.get(c.key)
    # exact: compare with rational arithmetic, no rounding anywhere
    expected = sum(
        (Fraction(size) * Fraction(prices[key]) / cost.GIB for key, size in objects if key in prices),
        Fraction(0),
    )
    assert Fraction(estimate.monthly) == expected
    assert estimate.unpriced_bytes == sum(size for key, size in objects if key not in prices)
    summary = estimate.summary()
    assert Fraction(Decimal(summary["monthly_saving_exact"])) == expected
    assert abs(Fraction(Decimal(summary["monthly_saving"])) - expected) <= Fraction(1, 200)


def test_a_known_example() -> None:
    gib = cost.GIB
    marked = [
        ("s3/STANDARD", 600 * gib),
        ("s3/STANDARD", 400 * gib),
        ("s3/GLACIER", 10 * gib),
        ("azure/unknown", 5),
    ]
    estimate = cost.estimate(cost.tally(marked), cost.PriceTable())
    assert estimate.monthly == Decimal("23.036")  # 1000 GiB x 0.023 + 10 GiB x 0.0036
    summary = estimate.summary()
    assert summary["monthly_saving"] == "23.04"
    assert summary["unpriced_bytes"] == 5
    by_class = summary["by_class"]
    assert isinstance(by_class, dict)
    assert by_class["s3/STANDARD"] == {
        "objects": 2,
        "bytes": 1000 * gib,
        "price_per_gib_month": "0.023",
        "monthly_saving": "23.000",
    }
    assert by_class["azure/unknown"]["price_per_gib_month"] is None
    assert (
        "E" not in cost.estimate({"s3/GLACIER": (1, 3)}, cost.PriceTable()).summary()["monthly_saving_exact"]
    )


def test_class_keys() -> None:
    assert cost.class_key("s3", None) == "s3/STANDARD"
    assert cost.class_key("s3", "glacier_ir") == "s3/GLACIER_IR"
    assert cost.class_key("azure", "Hot") == "azure/hot"
    assert cost.class_key("azure", None) == "azure/unknown"
    assert cost.class_key("local", None) == "local/unknown"
    assert set(cost.DEFAULT_PRICES) >= {"s3/STANDARD", "s3/DEEP_ARCHIVE", "azure/hot", "azure/archive"}


def test_overrides_are_exact_and_validated() -> None:
    table = cost.PriceTable().with_overrides({"s3/STANDARD": "0.021", "azure/unknown": 0}, source="gc.yaml")
    assert table.price("s3/STANDARD") == Decimal("0.021")
    assert table.price("azure/unknown") == 0
    assert table.price("s3/GLACIER") == cost.DEFAULT_PRICES["s3/GLACIER"]
    assert "gc.yaml" in table.source
    for bad in (0.1, "-1", "NaN", "abc", True, None):
        with pytest.raises(ConfigError, match="s3/STANDARD"):
            cost.PriceTable().with_overrides({"s3/STANDARD": bad})
    with pytest.raises(ValueError, match="negative"):
        cost.tally([("s3/STANDARD", -1)])


def test_mark_cost_prices_the_marked_bytes_in_the_stores_default_class() -> None:
    summary = cost.mark_cost("s3", 3, 3 * cost.GIB, {})
    assert summary["bytes"] == 3 * cost.GIB and summary["unpriced_bytes"] == 0
    standard = {"objects": 3, "bytes": 3 * cost.GIB, "price_per_gib_month": "0.023"}
    standard["monthly_saving"] = "0.069"
    assert summary["by_class"] == {"s3/STANDARD": standard}
    assert summary["monthly_saving"] == "0.07"
    overridden = cost.mark_cost("azure", 1, cost.GIB, {"azure/unknown": "0.02"})
    assert overridden["monthly_saving_exact"] == "0.02"
    assert cost.mark_cost("azure", 1, cost.GIB, {})["unpriced_bytes"] == cost.GIB  # tier unknown: no guess
    assert cost.mark_cost("s3", 0, 0, {})["by_class"] == {}


def test_prices_come_from_the_settings() -> None:
    from lakefs_gc.settings import GcOptions

    params = GcOptions(prices={"s3/STANDARD": "0.02"}).mark_params("r")
    assert params.prices == {"s3/STANDARD": "0.02"}
    assert cost.mark_cost("s3", 1, cost.GIB, params.prices)["monthly_saving_exact"] == "0.02"
