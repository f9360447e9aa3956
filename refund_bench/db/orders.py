"""The order store: raw evidence per order, read by the extractor, seeded for the demo."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool
from pydantic import ValidationError

from refund_bench.coalesce import TickBatcher
from refund_bench.domain import OrderRecord, name_key

_READABLE_TIME = "BETWEEN '0002-01-01 00:00Z' AND '9998-12-31 00:00Z'"
"""Instants Python's ``datetime`` holds in any session time zone. PostgreSQL also stores
``infinity`` and years up to 294276, which the driver could not load: such a time is read as
NULL and named in ``times_out_of_range``, so that only its order is unreadable."""

_ORDER_SQL = f"""
SELECT order_id, customer_id, currency,
       CASE WHEN placed_at {_READABLE_TIME} THEN placed_at END AS placed_at,
       CASE WHEN delivered_at {_READABLE_TIME} THEN delivered_at END AS delivered_at,
       array_remove(ARRAY[
           CASE WHEN NOT placed_at {_READABLE_TIME} THEN 'placed_at' END,
           CASE WHEN NOT delivered_at {_READABLE_TIME} THEN 'delivered_at' END
       ], NULL) AS times_out_of_range,
       delivery_sla_minutes, delivery_fee_minor, charged_total_minor,
       pickup_weight_expected_g, pickup_weight_actual_g, partner_rating_at_handover,
       packaging_condition_recorded, packaging_notes,
       partner_conduct_reports::text AS partner_conduct_reports_json, payment_reference,
       COALESCE((
           SELECT json_agg(json_build_object(
               'name', i.name, 'quantity', i.quantity,
               'unit_price_minor', i.unit_price_minor, 'unit_weight_g', i.unit_weight_g
           ) ORDER BY i.line_no)
           FROM order_line_items i WHERE i.order_id = o.order_id
       ), '[]') AS line_items
FROM orders o WHERE o.order_id = ANY(%s)
"""  # noqa: S608 - _READABLE_TIME is a constant


def _iso(value: datetime | None) -> str | None:
    """In UTC whatever the session's TimeZone: the text goes into the snapshot's hash."""
    return None if value is None else value.astimezone(UTC).isoformat()


@dataclass(frozen=True)
class UnreadableOrder:
    """An order the store holds with values the evidence model refuses (a quantity of 0, an
    amount beyond any real order, a time of ``infinity``, JSON nested too deep to read, ...):
    ``reason`` names the fields, not their values."""

    order_id: str
    reason: str


def _parse(row: dict[str, Any]) -> OrderRecord | UnreadableOrder:
    order_id = row["order_id"]
    if row["times_out_of_range"]:
        names = ", ".join(row["times_out_of_range"])
        return UnreadableOrder(order_id, f"{names}: not a time between the years 2 and 9998")
    try:
        reports = json.loads(row["partner_conduct_reports_json"])
    except (ValueError, RecursionError):
        return UnreadableOrder(order_id, "partner_conduct_reports: JSON too deeply nested to read")
    try:
        return _record(row, reports)
    except ValidationError as exc:
        fields = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'order'}: {e['msg']}"
            for e in exc.errors(include_input=False)[:3]
        )
        return UnreadableOrder(order_id, fields)


def _one_line_per_item(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The order's lines, each repeat of an item added to its first line's quantity.

    Lines with the same name (as :func:`~refund_bench.domain.name_key` compares them), unit
    price and unit weight are one item ordered in two steps: one line says the same, and
    grievances name items. Lines that share a name but not a price stay apart, and the
    evidence refuses the order (which of them a grievance means cannot be told)."""
    merged: dict[tuple[str, Any, Any], dict[str, Any]] = {}
    kept: list[dict[str, Any]] = []
    for line in lines:
        same = (name_key(line["name"]), line["unit_price_minor"], line["unit_weight_g"])
        first = merged.get(same)
        if first is None:
            merged[same] = line = dict(line)
            kept.append(line)
        else:
            first["quantity"] += line["quantity"]
    return kept


def _record(row: dict[str, Any], partner_conduct_reports: Any) -> OrderRecord:
    # Validated as a whole, so that an error names its line (``line_items.1.quantity``).
    return OrderRecord.model_validate(
        {
            "order_id": row["order_id"],
            "customer_id": row["customer_id"],
            "currency": row["currency"],
            "placed_at": row["placed_at"].astimezone(UTC).isoformat(),
            "delivered_at": _iso(row["delivered_at"]),
            "delivery_sla_minutes": row["delivery_sla_minutes"],
            "line_items": _one_line_per_item(row["line_items"]),
            "delivery_fee_minor": row["delivery_fee_minor"],
            "charged_total_minor": row["charged_total_minor"],
            "pickup_weight_expected_g": row["pickup_weight_expected_g"],
            "pickup_weight_actual_g": row["pickup_weight_actual_g"],
            "partner_rating_at_handover": row["partner_rating_at_handover"],
            "packaging_condition_recorded": row["packaging_condition_recorded"],
            "packaging_notes": row["packaging_notes"],
            # As stored (any JSON value fits a jsonb column): the model accepts a list of texts
            # only, never a string's characters or an object's keys.
            "partner_conduct_reports": partner_conduct_reports,
            "payment_reference": row["payment_reference"],
        }
    )


async def load_orders(
    conn: psycopg.AsyncConnection[Any], order_ids: Sequence[str]
) -> list[OrderRecord | UnreadableOrder | None]:
    """Each order's raw evidence, in the order asked for (the repeated lines of one item as one
    line, :func:`_one_line_per_item`); ``None`` for an order the store does not have,
    :class:`UnreadableOrder` for one whose values the evidence model refuses (that order only:
    the others of the batch load as usual).

    One statement reads the orders and their line items (in line order), so each order is
    consistent with its items even outside a transaction.
    """
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(_ORDER_SQL, (list(set(order_ids)),))
        found = {row["order_id"]: _parse(row) for row in await cur.fetchall()}
    return [found.get(order_id) for order_id in order_ids]


class OrderReader:
    """Reads orders for many concurrent handlers: the lookups made in one event-loop iteration
    (a batch's handlers start together) are one statement."""

    def __init__(self, pool: AsyncConnectionPool[Any]) -> None:
        self._pool = pool
        self._lookups: TickBatcher[str, OrderRecord | UnreadableOrder | None] = TickBatcher(
            self._load_many
        )

    async def get(self, order_id: str) -> OrderRecord | UnreadableOrder | None:
        """The order's raw evidence; ``None`` when the store has no such order."""
        return await self._lookups.submit(order_id)

    async def _load_many(self, order_ids: list[str]) -> list[OrderRecord | UnreadableOrder | None]:
        async with self._pool.connection() as conn:
            return await load_orders(conn, order_ids)


def order_exists(conn: psycopg.Connection[Any], order_id: str) -> bool:
    row = conn.execute("SELECT 1 FROM orders WHERE order_id = %s", (order_id,)).fetchone()
    return row is not None


def upsert_orders(conn: psycopg.Connection[Any], orders: Iterable[OrderRecord]) -> int:
    """Insert or replace orders and their line items (seeding); returns how many."""
    count = 0
    with conn.transaction():
        for order in orders:
            conn.execute(
                """
                INSERT INTO orders (order_id, customer_id, currency, placed_at, delivered_at,
                    delivery_sla_minutes, delivery_fee_minor, charged_total_minor,
                    pickup_weight_expected_g, pickup_weight_actual_g, partner_rating_at_handover,
                    packaging_condition_recorded, packaging_notes, partner_conduct_reports,
                    payment_reference)
                VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
                ON CONFLICT (order_id) DO UPDATE SET
                    customer_id = EXCLUDED.customer_id, currency = EXCLUDED.currency,
                    placed_at = EXCLUDED.placed_at, delivered_at = EXCLUDED.delivered_at,
                    delivery_sla_minutes = EXCLUDED.delivery_sla_minutes,
                    delivery_fee_minor = EXCLUDED.delivery_fee_minor,
                    charged_total_minor = EXCLUDED.charged_total_minor,
                    pickup_weight_expected_g = EXCLUDED.pickup_weight_expected_g,
                    pickup_weight_actual_g = EXCLUDED.pickup_weight_actual_g,
                    partner_rating_at_handover = EXCLUDED.partner_rating_at_handover,
                    packaging_condition_recorded = EXCLUDED.packaging_condition_recorded,
                    packaging_notes = EXCLUDED.packaging_notes,
                    partner_conduct_reports = EXCLUDED.partner_conduct_reports,
                    payment_reference = EXCLUDED.payment_reference
                """,
                (
                    order.order_id,
                    order.customer_id,
                    order.currency,
                    order.placed_at,
                    order.delivered_at,
                    order.delivery_sla_minutes,
                    order.delivery_fee_minor,
                    order.charged_total_minor,
                    order.pickup_weight_expected_g,
                    order.pickup_weight_actual_g,
                    order.partner_rating_at_handover,
                    order.packaging_condition_recorded,
                    order.packaging_notes,
                    json.dumps(list(order.partner_conduct_reports)),
                    order.payment_reference,
                ),
            )
            conn.execute("DELETE FROM order_line_items WHERE order_id = %s", (order.order_id,))
            for line_no, item in enumerate(order.line_items, start=1):
                conn.execute(
                    "INSERT INTO order_line_items (order_id, line_no, name, quantity,"
                    " unit_price_minor, unit_weight_g) VALUES (%s, %s, %s, %s, %s, %s)",
                    (
                        order.order_id,
                        line_no,
                        item.name,
                        item.quantity,
                        item.unit_price_minor,
                        item.unit_weight_g,
                    ),
                )
            count += 1
    return count
