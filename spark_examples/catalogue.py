"""The product catalogue the order generator sells from and the backfill joins with.

One table in code, so the generator's prices and the backfill's names and categories
cannot drift apart; a real deployment passes its own CSV to the backfill (--products).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Product:
    product_id: str
    name: str
    category: str
    list_price: str  # decimal text, as the orders carry prices


PRODUCTS = [
    Product("p-001", "Espresso beans 250 g", "coffee", "4.50"),
    Product("p-002", "Pour-over kettle filter pack", "coffee", "12.00"),
    Product("p-003", "Ceramic mug", "kitchen", "19.90"),
    Product("p-004", "Oat milk 1 l", "groceries", "7.25"),
    Product("p-005", "Burr grinder", "appliances", "99.00"),
    Product("p-006", "Paper filters 100", "coffee", "2.10"),
]
