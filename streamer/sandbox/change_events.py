"""The order change events of the demo, the tests and the benchmarks: new orders, status
updates, some arriving late, cancellations, and a few malformed messages, the same for a seed.

    events = change_events(30_000, seed=7)
    produce(bootstrap, "orders", as_kafka_records(events))

The demo table (`configs/orders.yaml`) reads them: keyed by `order_id`, partitioned by `region`,
ordered by `updated_at`, deleted by `deleted`.
"""

from __future__ import annotations

import json
import random
from typing import Any

REGIONS = ["emea", "apac", "amer", "latam", "anz", "mena", "nordics", "iberia"]
STATUSES = ["created", "paid", "packed", "shipped", "delivered"]
NOTES = [
    "leave at the door",
    "gift wrap please",
    "call before delivery",
    "fragile: glassware inside",
    "deliver after 6pm",
    "business address, reception desk",
]
MALFORMED = [
    b'{"order_id": "ord-bad-1", "region": "emea", "amount": 12.5, "updated_at": 17',  # truncated
    b'{"order_id": "ord-bad-2", "region": "emea", "amount": "twelve", "updated_at": 1}',  # wrong type
    b'{"region": "apac", "amount": 3.0, "updated_at": 2}',  # no record key
    b"\x00\x01garbage\xff",
]


def change_events(count: int, seed: int = 42) -> list[dict]:
    """Order changes: new orders, status updates, some arriving late, and cancellations.

    `updated_at` (epoch milliseconds) never repeats for an order, so the expected table does not
    depend on where micro-batch boundaries fall.
    """
    rng = random.Random(seed)
    orders: list[dict] = []
    seen: set[tuple[str, int]] = set()
    events = []
    clock = 1_700_000_000_000
    for _ in range(count):
        clock += rng.randint(1, 20)
        roll = rng.random()
        if not orders or roll < 0.35:
            event: dict[str, Any] = {
                "order_id": f"ord-{len(orders):06d}",
                "customer": f"cust-{rng.randint(1, 2000):05d}",
                "region": rng.choice(REGIONS),
                "amount": round(rng.uniform(5, 900), 2),
                "status": "created",
                "note": rng.choice(NOTES),
                "updated_at": clock,
                "deleted": False,
            }
            orders.append(event)
        elif roll < 0.95:
            late = roll > 0.88  # an update that arrives after newer ones
            event = dict(rng.choice(orders), status=rng.choice(STATUSES), updated_at=clock - (5000 if late else 0))
        else:
            event = dict(rng.choice(orders), updated_at=clock, deleted=True)
        while (event["order_id"], event["updated_at"]) in seen:
            event["updated_at"] -= 1
        seen.add((event["order_id"], event["updated_at"]))
        events.append(event)
    return events


def as_kafka_records(events: list[dict]) -> list[tuple[bytes, bytes, None]]:
    """`produce`'s records: the order id as the key (which picks the partition), the event as JSON."""
    return [(e["order_id"].encode(), json.dumps(e).encode(), None) for e in events]
