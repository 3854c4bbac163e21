"""Issue 36, M3 in CI: a live Apache Kafka 4.4 cluster moved to kbroker one node at a time and back
while it serves, two of the six steps stopping their node with SIGKILL instead of SIGTERM: three
combined nodes (static quorum), all roles moving; and three broker-only nodes under three Kafka
controllers that stay (M2's kbroker brokers under Kafka's controllers).

benchmarks/rolling_migration.py's run, made short and light: one second of load before the first
step and after each, Kafka's VerifiableProducer (acks=all, idempotent) at 50 records a second, a
VerifiableConsumer group, and a transactional producer pausing half a second after each commit.
Step 2 SIGKILLs the second Kafka node and kbroker recovers its unclean log directory; step 5
SIGKILLs that node's kbroker, leading partitions, and Kafka recovers the directory kbroker's crash
left. Each time the active controller (Kafka's or kbroker's) refuses the new registration until
the old broker session ends. The campaign's checks, each asserted on its own: no acknowledged
record lost or written twice, the group read every one and committed to the log end, no committed
transaction lost, partly visible or read twice, no aborted one read, every ISR full at the end;
and every step had records acknowledged while it ran.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.rolling_migration import ok, print_table, run_once

SETTLE_S = 1.0
THROUGHPUT = 50
TXN_INTERVAL_S = 0.5
# The second node both ways: Kafka's while the first is kbroker's and the third Kafka's, then
# kbroker's while the first is Kafka's again and the third kbroker's.
KILL_STEPS = (2, 5)


@pytest.mark.parametrize("scenario", ["combined", "brokers-only"])
def test_a_live_kafka_cluster_moved_to_kbroker_and_back_one_node_at_a_time(tmp_path: Path, kafka_lib: Path, scenario: str) -> None:
    row = run_once(tmp_path, kafka_lib, scenario, True, SETTLE_S, THROUGHPUT, kill_steps=KILL_STEPS, txn_interval_s=TXN_INTERVAL_S)
    print_table(1, row)  # shown when the test fails
    print("quorum leadership (time, node, epoch, leader it saw):", *row["leadership"], sep="\n  ")
    assert "failure" not in row, f"{row['failure']}; exited: {row['exited']}"

    steps = row["steps"]
    names = [s["name"] for s in steps]
    ids = [name.split(":")[0] for name in names[:3]]
    assert sorted(ids) == ids and len(set(ids)) == 3, names
    assert names == [
        f"{ids[0]}: kafka>kbroker", f"{ids[1]}: kafka>kbroker (SIGKILL)", f"{ids[2]}: kafka>kbroker",
        f"{ids[0]}: kbroker>kafka", f"{ids[1]}: kbroker>kafka (SIGKILL)", f"{ids[2]}: kbroker>kafka",
    ]  # fmt: skip
    assert all(s["acked"] > 0 for s in steps), f"a step without acknowledged records: {[(s['name'], s['acked']) for s in steps]}"
    assert row["acked"] > 0
    assert row["lost"] == 0, "acknowledged records missing from the log"
    assert row["log_duplicates"] == 0, "records in the log twice"
    assert row["group"]["missed"] == 0, "acknowledged records the group never read"
    assert row["group"]["committed_at_end"], "the group's committed offsets short of the log end"
    txn = row["txn"]
    assert txn["committed"] > 0
    assert txn["lost"] == 0, "committed transactions not read whole by read_committed"
    assert txn["partial"] == 0, "transactions read in part"
    assert txn["aborted_read"] == 0, "aborted transactions read"
    assert txn["duplicated"] == 0, "transactional records read twice"
    assert row["isrs_full_at_end"]
    assert ok(row)
