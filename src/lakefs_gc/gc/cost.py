"""What a mark would save: bytes to be freed per storage class, priced by the month.

Shown before anything is deleted (the mark's summary, ``run``'s confirmation, a gauge), so that an
operator sees the size of a sweep in money as well as in objects. The estimate is storage only:
requests, retrieval and early-deletion charges (30/90/180-day minimums of the colder classes) are
not in it; a class the table does not price is reported with its bytes and no price, never guessed.

Arithmetic is exact: prices are :class:`~decimal.Decimal` per GiB-month (AWS and Azure bill a "GB"
of 2^30 bytes), every product and sum runs with the ``Inexact`` trap set, and the result is rounded
to cents only for display.
"""

from __future__ import annotations

import decimal
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal

from lakefs_gc.errors import ConfigError

GIB = 1 << 30
CENT = Decimal("0.01")

#: Storage prices in USD per GiB-month, first-50-TB tier, pay-as-you-go, recorded in November 2026.
#: **Approximate**: a default to show an order of magnitude, not a bill; set your own (``gc.prices``).
#:
#: * S3: https://aws.amazon.com/s3/pricing/ , US East (N. Virginia). EXPRESS_ONEZONE checked against
#:   the worked example of the S3 FAQ (https://aws.amazon.com/s3/faqs/ , "10 GB-Month x $0.11");
#:   the other S3 classes are the long-standing list prices, not re-checked on the page.
#:   INTELLIGENT_TIERING is priced at its Frequent Access tier (an upper bound: a listing does not
#:   say which access tier an object is in). REDUCED_REDUNDANCY is no longer listed: unpriced.
#: * Azure: https://azure.microsoft.com/en-us/pricing/details/storage/blobs/ , block blobs, LRS,
#:   East US: approximate, not verified (that page renders its prices in the browser); they differ
#:   by region and redundancy by up to ~2x.
#:
#: Override any of them in the configuration; keys are ``<blockstore>/<class>``.
DEFAULT_PRICES: Mapping[str, Decimal] = {
    "s3/STANDARD": Decimal("0.023"),
    "s3/INTELLIGENT_TIERING": Decimal("0.023"),
    "s3/STANDARD_IA": Decimal("0.0125"),
    "s3/ONEZONE_IA": Decimal("0.01"),
    "s3/GLACIER_IR": Decimal("0.004"),
    "s3/GLACIER": Decimal("0.0036"),
    "s3/DEEP_ARCHIVE": Decimal("0.00099"),
    "s3/EXPRESS_ONEZONE": Decimal("0.11"),
    "azure/premium": Decimal("0.15"),
    "azure/hot": Decimal("0.018"),
    "azure/cool": Decimal("0.01"),
    "azure/cold": Decimal("0.0036"),
    "azure/archive": Decimal("0.00099"),
}
DEFAULT_SOURCE = (
    "approximate list prices recorded 2026-11 (S3 US East, Azure LRS East US): "
    "https://aws.amazon.com/s3/pricing/ ; https://azure.microsoft.com/en-us/pricing/details/storage/blobs/"
)


def _exact() -> decimal.Context:
    """A context where any rounding raises: the estimate is bytes x price, not an approximation."""
    ctx = decimal.Context(prec=200)
    ctx.traps[decimal.Inexact] = True
    return ctx


def class_key(blockstore: str, storage_class: str | None) -> str:
    """The price-table key of an object's storage class as its store lists it.

    S3 omits the class of STANDARD objects in some answers (HEAD), so no class means STANDARD;
    S3 classes are upper case. Azure tiers are case-insensitive (``Hot``/``hot``); a blob whose
    tier is not given (inferred from the account default) is ``azure/unknown``, unpriced.
    """
    store = blockstore.lower()
    if store == "s3":
        return f"s3/{(storage_class or 'STANDARD').upper()}"
    if store == "azure":
        return f"azure/{(storage_class or 'unknown').lower()}"
    return f"{store}/{storage_class or 'unknown'}"


def _price(value: object, key: str) -> Decimal:
    if isinstance(value, (float, bool)) or not isinstance(value, (Decimal, int, str)):
        raise ConfigError(f"price of {key}: give a decimal string or an integer, not {value!r}")
    try:
        price = Decimal(value)
    except decimal.InvalidOperation:
        raise ConfigError(f"price of {key}: {value!r} is not a number") from None
    if not price.is_finite() or price < 0:
        raise ConfigError(f"price of {key}: {value!r} must be a finite number >= 0")
    return price


@dataclass(frozen=True)
class PriceTable:
    """Prices per GiB-month by ``<blockstore>/<class>`` key, in one currency."""

    prices: Mapping[str, Decimal] = field(default_factory=lambda: dict(DEFAULT_PRICES))
    currency: str = "USD"
    source: str = DEFAULT_SOURCE

    def price(self, key: str) -> Decimal | None:
        return self.prices.get(key)

    def with_overrides(self, overrides: Mapping[str, object], *, source: str = "configuration") -> PriceTable:
        """This table with some prices replaced or added. Floats are refused: 0.1 is not exact."""
        merged = dict(self.prices)
        merged.update({key: _price(value, key) for key, value in overrides.items()})
        return replace(self, prices=merged, source=f"{self.source} (overridden by {source})")


@dataclass(frozen=True)
class ClassSaving:
    key: str
    objects: int
    bytes: int
    price: Decimal | None
    #: exact ``bytes / 2^30 x price``; None when the class is unpriced
    monthly: Decimal | None


@dataclass(frozen=True)
class SavingEstimate:
    classes: tuple[ClassSaving, ...]
    currency: str
    source: str

    @property
    def bytes(self) -> int:
        return sum(c.bytes for c in self.classes)

    @property
    def unpriced_bytes(self) -> int:
        return sum(c.bytes for c in self.classes if c.price is None)

    @property
    def monthly(self) -> Decimal:
        """The exact sum over the priced classes."""
        total = Decimal(0)
        for c in self.classes:
            if c.monthly is not None:
                total = _exact().add(total, c.monthly)
        return total

    def summary(self) -> dict[str, object]:
        """``summary.json``'s ``cost``: amounts as strings, rounded to cents (exact one alongside)."""
        return {
            "currency": self.currency,
            "monthly_saving": str(self.monthly.quantize(CENT, rounding=decimal.ROUND_HALF_EVEN)),
            "monthly_saving_exact": _plain(self.monthly),
            "bytes": self.bytes,
            "unpriced_bytes": self.unpriced_bytes,
            "by_class": {
                c.key: {
                    "objects": c.objects,
                    "bytes": c.bytes,
                    "price_per_gib_month": None if c.price is None else _plain(c.price),
                    "monthly_saving": None if c.monthly is None else _plain(c.monthly),
                }
                for c in self.classes
            },
            "prices_source": self.source,
        }


def _plain(value: Decimal) -> str:
    """Positional notation, never ``1E-11``: the summary is read by people and by ``jq``."""
    return format(value, "f")


def tally(objects: Iterable[tuple[str, int]]) -> dict[str, tuple[int, int]]:
    """``(class key, size)`` per object -> ``{key: (objects, bytes)}`` (the reference of the Spark
    group-by the mark runs over its marked objects)."""
    totals: dict[str, tuple[int, int]] = {}
    for key, size in objects:
        if size < 0:
            raise ValueError(f"negative size {size} in class {key}")
        n, b = totals.get(key, (0, 0))
        totals[key] = (n + 1, b + size)
    return totals


def estimate(by_class: Mapping[str, tuple[int, int]], table: PriceTable) -> SavingEstimate:
    """Price ``{key: (objects, bytes)}`` with ``table``."""
    ctx = _exact()
    classes = []
    for key in sorted(by_class):
        objects, size = by_class[key]
        price = table.price(key)
        monthly = None if price is None else ctx.divide(ctx.multiply(Decimal(size), price), Decimal(GIB))
        classes.append(ClassSaving(key, objects, size, price, monthly))
    return SavingEstimate(tuple(classes), table.currency, table.source)


def mark_cost(
    blockstore: str, marked: int, marked_bytes: int, overrides: Mapping[str, object]
) -> dict[str, object]:
    """``summary.json``'s ``cost`` for a mark of ``marked`` objects.

    A listing does not say an object's storage class, so every marked object is priced in its
    store's default class (S3 STANDARD, an upper bound for the colder classes; an Azure blob's
    tier is unknown and unpriced unless ``azure/unknown`` is given a price).
    """
    table = PriceTable().with_overrides(overrides) if overrides else PriceTable()
    by_class = {class_key(blockstore, None): (marked, marked_bytes)} if marked else {}
    return {**estimate(by_class, table).summary(), "storage_class": "not listed: the store's default class"}
