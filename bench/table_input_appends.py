"""A batch of a keyed table input WITHOUT its Change Data Feed pays for the keys that changed, not for the table.

    .venv/bin/python bench/table_input_appends.py --rows 1000 200000 --changes 1000 --batches 4

As bench/table_input.py (one warm process, docs/sources.md's `shop_totals`, its first batch the whole table as
inserts), but the other job's `orders` table has no Change Data Feed: it only appends, by plain Spark SQL. Each round
is one INSERT of `--changes` records of orders the table holds (a random sample; on the small table, every order),
each a new status and amount, a third of them another customer: a key appended again is its update, as a Kafka topic
read as a KTable takes it. Such a table's batch is told its changes by the versions of the files holding its rows; it
had read the whole table every batch. Only streamtable runs (the plain engines of bench/table_input.py read the feed).
After every round its outputs are checked equal to the aggregate of each order's latest record. Results go to
`bench/results/table_input_appends.json`.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from decimal import Decimal

from table_input import CUSTOMERS, STATUSES, Table, main, totals_of


class AppendedTable(Table):
    """One orders table the other job appends records to (no Change Data Feed), and its streamtable lake."""

    feed = False
    engines = ("streamtable",)
    rounds = 0  # the rounds of appends so far: a round's records are newer than every record before

    def plain_outputs(self, spark) -> None:
        """None: only streamtable reads a table without its feed."""

    def plain_batches(self, spark, job_id: int, last: int) -> int:
        return job_id

    def change(self, spark, ids: list[int], rng: random.Random) -> None:
        """One round: an INSERT of a new record of each order of `ids`."""
        self.rounds += 1
        paid = datetime(2026, 4, 1) + timedelta(days=self.rounds)  # after every record before (their order, below)
        values = []
        for i in ids:
            customer = f"c{rng.randrange(CUSTOMERS)}" if rng.random() < 1 / 3 else f"c{i % CUSTOMERS}"
            amount = Decimal(rng.randint(1, 10**6)) / 100
            values.append(f"('o{i}', '{customer}', {rng.choice(STATUSES)!r}, {amount}, timestamp'{paid}')")
        spark.sql(f"INSERT INTO delta.`{self.path}` VALUES {', '.join(values)}")

    def answer(self, spark) -> dict:
        """The aggregate of each order's latest record (the newest `paid_at`: each round's are later)."""
        latest = spark.sql(
            "SELECT * FROM (SELECT *, row_number() OVER (PARTITION BY order_id ORDER BY paid_at DESC) AS n "
            f"FROM delta.`{self.path}`) WHERE n = 1"
        )
        latest.createOrReplaceTempView("latest_orders")
        revenue = spark.sql(
            "SELECT customer, count(*) AS orders, sum(amount) AS revenue FROM latest_orders GROUP BY customer"
        )
        statuses = spark.sql("SELECT status, count(*) AS orders FROM latest_orders GROUP BY status")
        return totals_of([r.asDict() for r in revenue.collect()], [r.asDict() for r in statuses.collect()])


if __name__ == "__main__":
    main(AppendedTable, __doc__, "table_input_appends.json")
