"""The demo's tools: the Order / Product / Inventory example, with effects in PostgreSQL.

Module-level ``@compensable`` functions, so the agent process wraps them through a framework
adapter and the compensation service loads the same ones
(``--tools sagacity.demo.tools:TOOLS``).  Every effect is a row in the demo's tables, read
from the database named by ``SAGACITY_DEMO_DATABASE_URL`` (or ``SAGACITY_DATABASE_URL``), so
what the sagas did, and undid, can be checked from the outside:

* ``reserve_inventory`` takes units out of ``demo_product.stock`` into a ``held`` reservation;
  ``release_inventory`` puts them back (idempotent: keyed on the reservation);
* ``create_order`` places a ``demo_order`` (refused for a discontinued product, which is how the
  failing saga fails); ``cancel_order`` cancels it (idempotent);
* ``send_confirmation`` and ``wire_payment`` are ``IRREVERSIBLE``: an email row, a wire row.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg

from sagacity import CompensationContext, Reversibility, compensable, compensation
from sagacity.errors import ConfigurationError

SCHEMA = """
CREATE TABLE IF NOT EXISTS demo_product (
    product_id text PRIMARY KEY,
    name text NOT NULL,
    stock integer NOT NULL CHECK (stock >= 0),
    discontinued boolean NOT NULL DEFAULT false
);
CREATE TABLE IF NOT EXISTS demo_reservation (
    reservation_id text PRIMARY KEY,
    product_id text NOT NULL REFERENCES demo_product,
    quantity integer NOT NULL,
    status text NOT NULL
);
CREATE TABLE IF NOT EXISTS demo_order (
    order_id text PRIMARY KEY,
    product_id text NOT NULL REFERENCES demo_product,
    quantity integer NOT NULL,
    reservation_id text NOT NULL REFERENCES demo_reservation,
    status text NOT NULL
);
CREATE TABLE IF NOT EXISTS demo_email (
    id bigserial PRIMARY KEY,
    order_id text NOT NULL,
    email text NOT NULL
);
CREATE TABLE IF NOT EXISTS demo_wire (
    id bigserial PRIMARY KEY,
    amount text NOT NULL,
    recipient text NOT NULL
);
"""

PRODUCTS = (
    ("p-1", "Widget", 10, False),
    ("p-2", "Discontinued gadget", 5, True),
)


class OrderRejected(Exception):  # noqa: N818 - reads as the shop's answer
    """The shop refused the order (the failure the demo's second saga meets)."""


class OutOfStock(Exception):  # noqa: N818 - reads as the shop's answer
    """Not enough units to reserve."""


def database_url() -> str:
    """The demo database: ``SAGACITY_DEMO_DATABASE_URL``, else ``SAGACITY_DATABASE_URL``.

    Raises:
        ConfigurationError: neither is set.
    """
    url = os.environ.get("SAGACITY_DEMO_DATABASE_URL") or os.environ.get("SAGACITY_DATABASE_URL")
    if not url:
        raise ConfigurationError(
            "the demo tools need SAGACITY_DEMO_DATABASE_URL or SAGACITY_DATABASE_URL"
        )
    return url


def _connect() -> psycopg.Connection[Any]:
    return psycopg.connect(database_url())


def prepare(url: str | None = None) -> None:
    """Create the demo tables (if missing) and reset them to the initial stock."""
    with psycopg.connect(url or database_url()) as conn:
        conn.execute(SCHEMA)
        conn.execute(
            "TRUNCATE demo_email, demo_wire, demo_order, demo_reservation, demo_product "
            "RESTART IDENTITY"
        )
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO demo_product (product_id, name, stock, discontinued) "
                "VALUES (%s, %s, %s, %s)",
                PRODUCTS,
            )


@dataclass(frozen=True, kw_only=True)
class Snapshot:
    """The demo tables' contents, for checking what the sagas left behind."""

    stock: dict[str, int]
    reservations: dict[str, str]
    orders: dict[str, str]
    emails: list[tuple[str, str]]
    wires: list[tuple[str, str]]


def snapshot(url: str | None = None) -> Snapshot:
    """What the demo tables hold now."""
    with psycopg.connect(url or database_url()) as conn:
        stock: dict[str, int] = dict(
            conn.execute("SELECT product_id, stock FROM demo_product").fetchall()
        )
        reservations: dict[str, str] = dict(
            conn.execute("SELECT reservation_id, status FROM demo_reservation").fetchall()
        )
        orders: dict[str, str] = dict(
            conn.execute("SELECT order_id, status FROM demo_order").fetchall()
        )
        emails = conn.execute("SELECT order_id, email FROM demo_email ORDER BY id").fetchall()
        wires = conn.execute("SELECT amount, recipient FROM demo_wire ORDER BY id").fetchall()
    return Snapshot(
        stock=stock,
        reservations=reservations,
        orders=orders,
        emails=[(a, b) for a, b in emails],
        wires=[(a, b) for a, b in wires],
    )


@compensable(by="release_inventory")
def reserve_inventory(product_id: str, quantity: int) -> str:
    """Reserve units of a product; returns the reservation id."""
    with _connect() as conn:
        row = conn.execute(
            "UPDATE demo_product SET stock = stock - %s WHERE product_id = %s AND stock >= %s "
            "RETURNING stock",
            (quantity, product_id, quantity),
        ).fetchone()
        if row is None:
            raise OutOfStock(f"cannot reserve {quantity} of {product_id}")
        (count,) = conn.execute("SELECT count(*) FROM demo_reservation").fetchone() or (0,)
        reservation_id = f"res-{count + 1}"
        conn.execute(
            "INSERT INTO demo_reservation VALUES (%s, %s, %s, 'held')",
            (reservation_id, product_id, quantity),
        )
    return reservation_id


@compensation(idempotent=True)
def release_inventory(context: CompensationContext) -> None:
    """Put a reservation's units back (once, however often it is called)."""
    with _connect() as conn:
        row = conn.execute(
            "UPDATE demo_reservation SET status = 'released' "
            "WHERE reservation_id = %s AND status = 'held' RETURNING product_id, quantity",
            (str(context.result),),
        ).fetchone()
        if row is not None:
            conn.execute(
                "UPDATE demo_product SET stock = stock + %s WHERE product_id = %s",
                (row[1], row[0]),
            )


@compensable(by="cancel_order")
def create_order(product_id: str, quantity: int, reservation_id: str) -> str:
    """Create the customer order for a reservation; returns the order id."""
    with _connect() as conn:
        row = conn.execute(
            "SELECT discontinued FROM demo_product WHERE product_id = %s", (product_id,)
        ).fetchone()
        if row is None or row[0]:
            raise OrderRejected(f"product {product_id} cannot be ordered (discontinued)")
        (count,) = conn.execute("SELECT count(*) FROM demo_order").fetchone() or (0,)
        order_id = f"order-{count + 1}"
        conn.execute(
            "INSERT INTO demo_order VALUES (%s, %s, %s, %s, 'placed')",
            (order_id, product_id, quantity, reservation_id),
        )
    return order_id


@compensation(idempotent=True)
def cancel_order(context: CompensationContext) -> None:
    """Cancel an order (once, however often it is called)."""
    with _connect() as conn:
        conn.execute(
            "UPDATE demo_order SET status = 'cancelled' WHERE order_id = %s",
            (str(context.result),),
        )


@compensable(reversibility=Reversibility.IRREVERSIBLE)
def send_confirmation(order_id: str, email: str) -> str:
    """Email the customer an order confirmation (cannot be unsent)."""
    with _connect() as conn:
        conn.execute("INSERT INTO demo_email (order_id, email) VALUES (%s, %s)", (order_id, email))
    return f"confirmation for {order_id} sent to {email}"


@compensable(reversibility=Reversibility.IRREVERSIBLE)
def wire_payment(amount: str, to: str) -> str:
    """Wire money to a recipient (cannot be recalled)."""
    with _connect() as conn:
        conn.execute("INSERT INTO demo_wire (amount, recipient) VALUES (%s, %s)", (amount, to))
    return f"wired {amount} to {to}"


TOOLS: list[Callable[..., Any]] = [reserve_inventory, create_order, send_confirmation, wire_payment]
"""Every demo tool, for ``--tools sagacity.demo.tools:TOOLS`` and the agent."""
