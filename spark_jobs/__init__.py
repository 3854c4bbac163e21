"""PySpark on kbroker: the `kbroker` data source (Spark's Kafka connector, in Python) and example jobs.

`spark_jobs.source.KBrokerDataSource` is what `spark.dataSource.register` takes;
`spark_jobs.session.local_session` builds a local session with it registered.
"""
