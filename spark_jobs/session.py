"""A local SparkSession with the `kbroker` data source registered, set up for this machine."""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

from spark_jobs.source import KBrokerDataSource


def local_session(app_name: str, master: str = "local[2]", shuffle_partitions: int = 2) -> SparkSession:
    """Python workers run this interpreter (the one with pyarrow and confluent-kafka), on loopback."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # Otherwise Spark binds to the machine's external interface.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    spark.dataSource.register(KBrokerDataSource)
    return spark
