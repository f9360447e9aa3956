"""End-to-end smoke test of the running local stack (stack/up.sh).

Run with a Python that has the project's dependencies (confluent-kafka, psycopg, redis, httpx):

    . .stack/env.sh && .venv/bin/python stack/smoke.py

Checks: Kafka idempotent + transactional producers (commit and abort) and a
read_committed consumer; the Confluent-compatible schema registry (raw REST and
confluent_kafka's SchemaRegistryClient); PostgreSQL; Redis; stripe-mock; the LLM
stand-in if it is running. Prints one line per check, exits non-zero on failure.
Everything it creates is named smoke-<random> and removed again.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

BOOTSTRAP = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:19092")
RUN = uuid.uuid4().hex[:8]


def kafka_transactions() -> str:
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    topic = f"smoke-{RUN}"
    admin = AdminClient({"bootstrap.servers": BOOTSTRAP})
    admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)])[topic].result(30)
    try:
        # idempotent producer
        p = Producer({"bootstrap.servers": BOOTSTRAP, "enable.idempotence": True, "acks": "all"})
        for i in range(10):
            p.produce(topic, key=f"k{i}", value=f"idem-{i}", partition=i % 3)
        if p.flush(30) != 0:
            raise RuntimeError("idempotent producer: messages left unflushed")

        # transactional producer: one committed, one aborted transaction
        quiet = logging.getLogger("smoke.fenced-producer")  # its fencing errors are expected
        quiet.addHandler(logging.NullHandler())
        quiet.propagate = False
        tp = Producer(
            {
                "bootstrap.servers": BOOTSTRAP,
                "transactional.id": f"smoke-tx-{RUN}",
                "transaction.timeout.ms": 60000,
                "logger": quiet,
            }
        )
        tp.init_transactions(30)
        tp.begin_transaction()
        for i in range(5):
            tp.produce(topic, key=f"c{i}", value=f"committed-{i}", partition=i % 3)
        tp.commit_transaction(30)
        tp.begin_transaction()
        for i in range(5):
            tp.produce(topic, key=f"a{i}", value=f"aborted-{i}", partition=i % 3)
        tp.flush(30)
        tp.abort_transaction(30)
        # a second init with the same transactional.id fences the first producer
        tp2 = Producer({"bootstrap.servers": BOOTSTRAP, "transactional.id": f"smoke-tx-{RUN}"})
        tp2.init_transactions(30)
        tp2.begin_transaction()
        tp2.produce(topic, key="c-last", value="committed-last", partition=0)
        tp2.commit_transaction(30)
        try:
            tp.begin_transaction()
            tp.produce(topic, value="zombie", partition=0)
            tp.commit_transaction(10)
            raise RuntimeError("fenced producer could still commit")
        except KafkaException:
            pass

        # read_committed consumer sees exactly the committed records
        c = Consumer(
            {
                "bootstrap.servers": BOOTSTRAP,
                "group.id": f"smoke-g-{RUN}",
                "isolation.level": "read_committed",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        c.assign([TopicPartition(topic, p_, 0) for p_ in range(3)])
        seen: list[str] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(seen) < 16:
            m = c.poll(0.5)
            if m is None or m.error():
                continue
            seen.append((m.value() or b"").decode())
        # consumer-group offset commit (also exercises the group coordinator)
        c.commit(asynchronous=False)
        c.close()
        want = {f"idem-{i}" for i in range(10)} | {f"committed-{i}" for i in range(5)}
        want.add("committed-last")
        if set(seen) != want or any(v.startswith("aborted") for v in seen):
            raise RuntimeError(f"read_committed saw {sorted(seen)}")
        return f"topic {topic}: idempotent 10, committed 6, aborted 5 hidden, zombie fenced"
    finally:
        admin.delete_topics([topic])[topic].result(30)


def kafka_exactly_once() -> str:
    """consume-transform-produce with send_offsets_to_transaction, many transactions in a row."""
    from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    src, dst, group = f"smoke-{RUN}-in", f"smoke-{RUN}-out", f"smoke-eos-{RUN}"
    admin = AdminClient({"bootstrap.servers": BOOTSTRAP})
    for f in admin.create_topics([NewTopic(t, 2, 1) for t in (src, dst)]).values():
        f.result(30)
    try:
        p = Producer({"bootstrap.servers": BOOTSTRAP, "enable.idempotence": True})
        n = 40
        for i in range(n):
            p.produce(src, value=str(i), partition=i % 2)
        p.flush(30)
        c = Consumer(
            {
                "bootstrap.servers": BOOTSTRAP,
                "group.id": group,
                "isolation.level": "read_committed",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        c.subscribe([src])
        tp = Producer({"bootstrap.servers": BOOTSTRAP, "transactional.id": f"smoke-eos-tx-{RUN}"})
        tp.init_transactions(30)
        done, txns, deadline = 0, 0, time.monotonic() + 60
        while done < n and time.monotonic() < deadline:
            msgs = [m for m in c.consume(num_messages=4, timeout=1.0) if not m.error()]
            if not msgs:
                continue
            tp.begin_transaction()
            for m in msgs:
                doubled = str(int(m.value() or b"0") * 2).encode()
                tp.produce(dst, value=doubled, partition=m.partition() or 0)
            tp.send_offsets_to_transaction(
                c.position(c.assignment()), c.consumer_group_metadata(), 30
            )
            tp.commit_transaction(30)
            done += len(msgs)
            txns += 1
        c.close()
        committed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[
            group
        ].result(30)
        total = sum(tp_.offset for tp_ in committed.topic_partitions if tp_.offset >= 0)
        if done != n or total != n:
            raise RuntimeError(f"processed {done}/{n}, group offsets sum {total}")
        rc = Consumer(
            {
                "bootstrap.servers": BOOTSTRAP,
                "group.id": f"{group}-check",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
            }
        )
        rc.assign([TopicPartition(dst, i, 0) for i in range(2)])
        out: list[int] = []
        deadline = time.monotonic() + 20
        while len(out) < n and time.monotonic() < deadline:
            got = rc.poll(0.5)
            if got is not None and not got.error():
                out.append(int(got.value() or b"-1"))
        rc.close()
        if sorted(out) != [2 * i for i in range(n)]:
            raise RuntimeError(f"output topic has {len(out)} records: {sorted(out)[:10]}...")
        return f"{n} records in {txns} transactions via send_offsets_to_transaction"
    finally:
        for f in admin.delete_topics([src, dst]).values():
            f.result(30)


SR_JSON = {"Content-Type": "application/vnd.schemaregistry.v1+json"}


def _http(method: str, url: str, body: object | None = None) -> Any:
    import httpx

    r = httpx.request(method, url, json=body, headers=SR_JSON, timeout=10)
    r.raise_for_status()
    return r.json() if r.content else None


def schema_registry() -> str:
    base = os.environ.get("SCHEMA_REGISTRY_URL", "")
    if not base:
        return "SKIP (SCHEMA_REGISTRY_URL is empty)"
    subject = f"smoke-{RUN}-value"
    v1 = {"type": "record", "name": "Smoke", "fields": [{"name": "a", "type": "string"}]}
    v2 = {**v1, "fields": [*v1["fields"], {"name": "b", "type": "int", "default": 0}]}
    bad = {**v1, "fields": [{"name": "a", "type": "int"}]}
    reg = _http("POST", f"{base}/subjects/{subject}/versions", {"schema": json.dumps(v1)})
    sid = reg["id"]
    got = _http("GET", f"{base}/schemas/ids/{sid}")
    if json.loads(got["schema"]) != v1:
        raise RuntimeError(f"GET /schemas/ids/{sid} returned {got}")
    compat = f"{base}/compatibility/subjects/{subject}/versions/latest"
    ok = _http("POST", compat, {"schema": json.dumps(v2)})
    ko = _http("POST", compat, {"schema": json.dumps(bad)})
    if not ok["is_compatible"] or ko["is_compatible"]:
        raise RuntimeError(f"compatibility: v2 -> {ok}, incompatible -> {ko}")
    # the real client library used by the pipeline
    try:
        from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
    except ImportError as e:  # needs the confluent-kafka[schemaregistry] extras
        _http("DELETE", f"{base}/subjects/{subject}")
        _http("DELETE", f"{base}/subjects/{subject}?permanent=true")
        return f"registered id {sid}, compatibility ok; SchemaRegistryClient not tested ({e})"
    client = SchemaRegistryClient({"url": base})
    sid2 = client.register_schema(subject, Schema(json.dumps(v2), "AVRO"))
    latest = client.get_latest_version(subject)
    if latest.schema_id != sid2 or latest.version != 2:
        raise RuntimeError(
            f"SchemaRegistryClient: latest {latest.schema_id}/v{latest.version}, registered {sid2}"
        )
    _http("DELETE", f"{base}/subjects/{subject}")
    _http("DELETE", f"{base}/subjects/{subject}?permanent=true")
    return f"registered id {sid} and {sid2}, compatibility checks ok, SchemaRegistryClient ok"


def postgres() -> str:
    import psycopg

    with psycopg.connect(os.environ["DATABASE_URL"], connect_timeout=5) as conn:
        (v,) = conn.execute("SELECT current_user || ' @ ' || current_database()").fetchone()  # type: ignore[misc]
        conn.execute("CREATE TEMP TABLE smoke (x int)")
        conn.execute("INSERT INTO smoke VALUES (1)")
    return str(v)


def redis_check() -> str:
    import redis

    r = redis.Redis.from_url(os.environ["REDIS_URL"])
    key = f"smoke:{RUN}"
    r.set(key, "1", ex=10)
    if r.get(key) != b"1":
        raise RuntimeError("redis GET after SET failed")
    r.delete(key)
    return "SET/GET ok"


def stripe_mock() -> str:
    import httpx

    r = httpx.post(
        f"{os.environ['STRIPE_API_BASE']}/v1/refunds",
        data={"charge": "ch_123", "amount": "100"},
        headers={"Authorization": "Bearer sk_test_123"},
        timeout=10,
    )
    r.raise_for_status()
    body = r.json()
    if body.get("object") != "refund":
        raise RuntimeError(f"unexpected stripe-mock answer {body}")
    return f"POST /v1/refunds -> {body['id']}"


def llm_standin() -> str:
    import httpx

    base = os.environ["LLM_BASE_URL"].removesuffix("/v1")
    try:
        r = httpx.get(f"{base}/healthz", timeout=5)
    except httpx.TransportError:
        return "SKIP (not running)"
    r.raise_for_status()
    return f"/healthz {r.status_code}"


CHECKS: list[tuple[str, Callable[[], str]]] = [
    ("kafka", kafka_transactions),
    ("kafka-eos", kafka_exactly_once),
    ("schema-registry", schema_registry),
    ("postgres", postgres),
    ("redis", redis_check),
    ("stripe-mock", stripe_mock),
    ("llm-standin", llm_standin),
]


def main() -> int:
    failed = 0
    for name, check in CHECKS:
        t0 = time.monotonic()
        try:
            msg = check()
            status = "ok"
        except Exception as e:  # noqa: BLE001 - report every failure, keep going
            msg, status = f"{type(e).__name__}: {e}", "FAILED"
            failed += 1
        print(f"{name:16} {status:6} {time.monotonic() - t0:5.1f}s  {msg}", flush=True)
    print(f"{len(CHECKS) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
